//! Model weights by their checkpoint names: [`WeightSource`], implemented by a Hugging
//! Face checkpoint folder ([`Checkpoint`]: `config.json` plus `model.safetensors` or a
//! sharded `model.safetensors.index.json`, memory-mapped) and by the seeded random
//! weights of the presets ([`crate::presets::RandomWeights`]).
//!
//! [`tensor_specs`] lists every tensor a config implies, by checkpoint key and shape; the
//! loader, the writer ([`crate::presets::write_hf_folder`]) and the random weights use it.

use crate::config::{Architecture, Config};
use crate::error::{ModelError, Result};
use megaops::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Where a model's weights come from. Layers ask for each tensor by its checkpoint key
/// (`model.layers.0.mlp.gate_proj.weight`) and the shape the config implies.
pub trait WeightSource {
    /// The tensor `name` as row-major bf16, checked against `shape` (an error names the
    /// tensor, the expected and the found shape).
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>>;
}

/// The file of a single-file checkpoint.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (`weight_map`: tensor name → shard file).
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";
/// The model's configuration file.
pub const CONFIG_FILE: &str = "config.json";

/// Every tensor of a model with `config`, by checkpoint key and shape, in checkpoint order:
/// the embedding, then per layer the input norm, q/k/v/o projections, the Qwen3 q/k
/// norms, the post-attention norm and the gate/up/down projections, then the final norm
/// and, when the embeddings are not tied, `lm_head.weight`.
///
/// Meant for a config that passed [`Config::validate`] (an unknown architecture is
/// listed as Llama, without q/k norms).
pub fn tensor_specs(config: &Config) -> Vec<(String, Vec<usize>)> {
    let (h, i, v, d) = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.head_dim(),
    );
    let (q, kv) = (config.q_dim(), config.kv_dim());
    let qk_norm = matches!(config.architecture(), Ok(Architecture::Qwen3));
    let mut specs = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        specs.push((format!("{p}.input_layernorm.weight"), vec![h]));
        specs.push((format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
        specs.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
        specs.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
        specs.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
        if qk_norm {
            specs.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
            specs.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
        }
        specs.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        specs.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        specs.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        specs.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    specs.push(("model.norm.weight".to_string(), vec![h]));
    if !config.tie_word_embeddings {
        specs.push(("lm_head.weight".to_string(), vec![v, h]));
    }
    specs
}

/// One memory-mapped safetensors file.
#[derive(Debug)]
struct Shard {
    path: PathBuf,
    mmap: Mmap,
}

/// Where a tensor lies: its shard and its byte range in the shard's map.
#[derive(Debug)]
struct Entry {
    shard: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A Hugging Face checkpoint folder: `config.json` and the safetensors weights
/// (`model.safetensors`, or the shards named by `model.safetensors.index.json`), memory
/// mapped. Headers are parsed and checked once by [`Checkpoint::open`]; [`WeightSource::get`]
/// copies one tensor out of the map, converting F16 and F32 to bf16.
///
/// The files must not be changed while the checkpoint is open (they are mapped).
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    config: Config,
    shards: Vec<Shard>,
    tensors: HashMap<String, Entry>,
}

/// `model.safetensors.index.json`, the field the loader reads.
#[derive(serde::Deserialize)]
struct Index {
    weight_map: BTreeMap<String, String>,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn malformed(path: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::Safetensors {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Maps `path` read-only.
fn map_file(path: &Path) -> Result<Mmap> {
    let file = File::open(path).map_err(io_error(path))?;
    // SAFETY: the file is opened read-only and the map is only ever read through `&[u8]`.
    // Mapping is undefined behaviour only if another process truncates or rewrites the
    // file while it is mapped; `Checkpoint` documents that its files must stay unchanged
    // while it is open (as every mmap-based loader, candle's and safetensors' own, does).
    unsafe { Mmap::map(&file) }.map_err(io_error(path))
}

impl Checkpoint {
    /// Opens the checkpoint in `dir`: reads and checks `config.json`, then maps
    /// `model.safetensors` or, when there is none, every shard that
    /// `model.safetensors.index.json` names, and parses their headers.
    ///
    /// Errors: [`ModelError::Io`] naming the missing or unreadable file (`config.json`,
    /// the weights, a shard), [`ModelError::Json`] for a config or index that does not
    /// parse, the config's own checks ([`Config::validate`]), and
    /// [`ModelError::Safetensors`] for a malformed file, a shard lacking a tensor its index
    /// names, or a tensor stored twice.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let config = Config::from_file(&dir.join(CONFIG_FILE))?;
        let single = dir.join(WEIGHTS_FILE);
        let index_path = dir.join(WEIGHTS_INDEX_FILE);
        let (files, index) = if single.is_file() {
            (vec![WEIGHTS_FILE.to_string()], None)
        } else if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path).map_err(io_error(&index_path))?;
            let index: Index = serde_json::from_str(&text).map_err(|source| ModelError::Json {
                path: index_path.clone(),
                source,
            })?;
            let mut files: Vec<String> = index.weight_map.values().cloned().collect();
            files.sort();
            files.dedup();
            if let Some(bad) = files
                .iter()
                .find(|f| Path::new(f).file_name() != Some(std::ffi::OsStr::new(f)))
            {
                return Err(malformed(
                    &index_path,
                    format!("shard {bad:?} is not a file name in the checkpoint folder"),
                ));
            }
            (files, Some(index))
        } else {
            return Err(ModelError::Io {
                path: single,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("the folder has neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE}"),
                ),
            });
        };

        let mut shards = Vec::with_capacity(files.len());
        let mut tensors = HashMap::new();
        for (s, file) in files.iter().enumerate() {
            let path = dir.join(file);
            let mmap = map_file(&path)?;
            let (n, metadata) = SafeTensors::read_metadata(&mmap).map_err(|e| malformed(&path, e.to_string()))?;
            let base = 8 + n;
            for (name, info) in metadata.tensors() {
                let entry = Entry {
                    shard: s,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start: base + info.data_offsets.0,
                    end: base + info.data_offsets.1,
                };
                if let Some(first) = tensors.insert(name.clone(), entry) {
                    return Err(malformed(
                        &path,
                        format!("tensor `{name}` is also stored in `{}`", files[first.shard]),
                    ));
                }
            }
            shards.push(Shard { path, mmap });
        }
        if let Some(index) = index {
            for (name, file) in &index.weight_map {
                let found = tensors.get(name).map(|e| files[e.shard].as_str());
                if found != Some(file.as_str()) {
                    return Err(malformed(
                        &dir.join(file),
                        format!("{WEIGHTS_INDEX_FILE} places tensor `{name}` in this shard, which lacks it"),
                    ));
                }
            }
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            shards,
            tensors,
        })
    }

    /// The model's configuration (`config.json`).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The checkpoint folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The names of every tensor in the weight files, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.keys().cloned().collect();
        names.sort();
        names
    }

    /// The stored shape of tensor `name`, if the checkpoint has it.
    pub fn tensor_shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|e| e.shape.as_slice())
    }

    /// The stored dtype of tensor `name` as safetensors names it (`"BF16"`, `"F32"`, …).
    pub fn tensor_dtype(&self, name: &str) -> Option<String> {
        self.tensors.get(name).map(|e| format!("{:?}", e.dtype))
    }

    /// Bytes of tensor data in all weight files (as stored, before any conversion), for
    /// a progress bar.
    pub fn total_bytes(&self) -> u64 {
        self.tensors.values().map(|e| (e.end - e.start) as u64).sum()
    }

    /// Checks, without reading any tensor data, that every tensor the config implies
    /// ([`tensor_specs`]) is present with its shape and a convertible dtype, so a load
    /// fails before anything is uploaded. Reports the first problem, in checkpoint order.
    pub fn check_tensors(&self) -> Result<()> {
        for (name, shape) in tensor_specs(&self.config) {
            let entry = self.entry(&name, &shape)?;
            convertible(&name, entry.dtype)?;
        }
        Ok(())
    }

    /// The tensor `name`, checked against `shape`.
    fn entry(&self, name: &str, shape: &[usize]) -> Result<&Entry> {
        let entry = self.tensors.get(name).ok_or_else(|| ModelError::MissingTensor {
            path: self.dir.clone(),
            name: name.to_string(),
        })?;
        if entry.shape != shape {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: entry.shape.clone(),
            });
        }
        Ok(entry)
    }
}

/// Bytes per element of a dtype the loader converts, or [`ModelError::TensorDtype`].
fn convertible(name: &str, dtype: Dtype) -> Result<usize> {
    match dtype {
        Dtype::BF16 | Dtype::F16 => Ok(2),
        Dtype::F32 => Ok(4),
        other => Err(ModelError::TensorDtype {
            name: name.to_string(),
            dtype: format!("{other:?}"),
        }),
    }
}

/// Little-endian `bytes` of `dtype` (BF16, F16 or F32) as bf16; F16 and F32 are rounded
/// to the nearest bf16, ties to even.
fn to_bf16(bytes: &[u8], dtype: Dtype) -> Vec<bf16> {
    match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_f32(f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()))
            .collect(),
        _ => bytes
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    }
}

impl WeightSource for Checkpoint {
    /// Copies tensor `name` out of its file: [`ModelError::MissingTensor`] when the
    /// checkpoint lacks it, [`ModelError::TensorShape`] when its shape is not `shape`,
    /// [`ModelError::TensorDtype`] unless it is BF16 (returned as is), F16 or F32
    /// (rounded to bf16, ties to even).
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>> {
        let entry = self.entry(name, shape)?;
        convertible(name, entry.dtype)?;
        let shard = &self.shards[entry.shard];
        let bytes = shard
            .mmap
            .get(entry.start..entry.end)
            .ok_or_else(|| malformed(&shard.path, format!("tensor `{name}` lies past the end of the file")))?;
        Ok(to_bf16(bytes, entry.dtype))
    }
}
