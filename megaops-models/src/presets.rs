//! Models without a download: [`preset`] gives the exact `config.json` of the released
//! Qwen3 and Llama-3.x models (and two tiny ones for the CPU emulator), [`RandomWeights`]
//! seeded random weights for any config, and [`write_hf_folder`] writes a config and its
//! weights as a Hugging Face folder that transformers loads unchanged.

use crate::checkpoint::{CONFIG_FILE, WEIGHTS_FILE, WeightSource, tensor_specs};
use crate::config::{Architecture, Config, RopeParameters, TokenIds};
use crate::error::{ModelError, Result};
use megaops::bf16;
use megaops_kernels::rope::RopeScaling;
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The names [`preset`] knows.
pub const PRESETS: &[&str] = &[
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-4b",
    "qwen3-8b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-3.1-8b",
    "tiny",
    "tiny-llama",
];

/// The dimensions that differ between the presets of one family.
struct Dims {
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    tied: bool,
    max_positions: usize,
}

/// A Qwen3 config as the released `config.json` files have it (`rope_theta` 10⁶, eps
/// 10⁻⁶, no rope scaling), with `bos`/`eos` ids.
fn qwen3(d: Dims, bos: Option<u32>, eos: Option<u32>) -> Config {
    Config {
        architectures: vec![Architecture::Qwen3.class_name().into()],
        model_type: Architecture::Qwen3.model_type().into(),
        hidden_size: d.hidden,
        intermediate_size: d.intermediate,
        num_hidden_layers: d.layers,
        num_attention_heads: d.heads,
        num_key_value_heads: Some(d.kv_heads),
        head_dim: Some(d.head_dim),
        rms_norm_eps: 1e-6,
        rope_theta: Some(1_000_000.0),
        rope_scaling: None,
        rope_parameters: None,
        max_position_embeddings: d.max_positions,
        vocab_size: d.vocab,
        tie_word_embeddings: d.tied,
        bos_token_id: bos,
        eos_token_id: eos.map(TokenIds::One),
        hidden_act: "silu".into(),
        attention_bias: false,
        mlp_bias: false,
        torch_dtype: Some("bfloat16".into()),
    }
}

/// A Llama-3.x config as the released `config.json` files have it (`rope_theta`
/// 500000, eps 10⁻⁵, llama3 rope scaling with `factor`, low/high frequency factors 1 and
/// 4 over `original` positions: 8192 in the released models).
fn llama3(d: Dims, factor: f64, original: f64, bos: Option<u32>, eos: Option<u32>) -> Config {
    Config {
        architectures: vec![Architecture::Llama.class_name().into()],
        model_type: Architecture::Llama.model_type().into(),
        hidden_size: d.hidden,
        intermediate_size: d.intermediate,
        num_hidden_layers: d.layers,
        num_attention_heads: d.heads,
        num_key_value_heads: Some(d.kv_heads),
        head_dim: Some(d.head_dim),
        rms_norm_eps: 1e-5,
        rope_theta: Some(500_000.0),
        rope_scaling: Some(RopeParameters {
            rope_type: Some("llama3".into()),
            rope_theta: None,
            factor: Some(factor),
            low_freq_factor: Some(1.0),
            high_freq_factor: Some(4.0),
            original_max_position_embeddings: Some(original),
        }),
        rope_parameters: None,
        max_position_embeddings: d.max_positions,
        vocab_size: d.vocab,
        tie_word_embeddings: d.tied,
        bos_token_id: bos,
        eos_token_id: eos.map(TokenIds::One),
        hidden_act: "silu".into(),
        attention_bias: false,
        mlp_bias: false,
        torch_dtype: Some("bfloat16".into()),
    }
}

/// Qwen3's vocabulary and special ids (`<|endoftext|>`, `<|im_end|>`).
const QWEN3_VOCAB: usize = 151_936;
const QWEN3_BOS: Option<u32> = Some(151_643);
const QWEN3_EOS: Option<u32> = Some(151_645);
/// Llama-3's vocabulary and special ids (`<|begin_of_text|>`, `<|end_of_text|>`, the
/// base models' `eos_token_id`).
const LLAMA3_VOCAB: usize = 128_256;
const LLAMA3_BOS: Option<u32> = Some(128_000);
const LLAMA3_EOS: Option<u32> = Some(128_001);

/// The config of preset `name` (one of [`PRESETS`], case-insensitive), checked.
///
/// The released models have the dimensions of their Hugging Face `config.json` (base
/// models' `bos`/`eos` ids). Two small enough for the CPU emulator, with vocabularies that
/// are multiples of nothing useful and no `bos`/`eos` ids (generation from random weights
/// never stops early):
/// - `tiny`, Qwen3-like: hidden 128, intermediate 256, 2 layers, 4 query and 2 kv heads of
///   64 (so `q_dim` 256 is not the hidden size), vocabulary 517, tied, 512 positions;
/// - `tiny-llama`, Llama-like with llama3 rope scaling (factor 8 over 128 original
///   positions, so the unscaled, smoothed and scaled frequency bands all occur): hidden 192,
///   intermediate 384, 2 layers, 6 query and 2 kv heads of 64 (groups of 3), vocabulary
///   331, untied, 512 positions. (transformers' `LlamaConfig` requires the hidden size to
///   be a multiple of the query heads, hence 192 rather than 128.)
pub fn preset(name: &str) -> Result<Config> {
    let d = |hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, tied, max_positions| Dims {
        hidden,
        intermediate,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tied,
        max_positions,
    };
    let config = match name.to_ascii_lowercase().as_str() {
        "qwen3-0.6b" => qwen3(
            d(1024, 3072, 28, 16, 8, 128, QWEN3_VOCAB, true, 40_960),
            QWEN3_BOS,
            QWEN3_EOS,
        ),
        "qwen3-1.7b" => qwen3(
            d(2048, 6144, 28, 16, 8, 128, QWEN3_VOCAB, true, 40_960),
            QWEN3_BOS,
            QWEN3_EOS,
        ),
        "qwen3-4b" => qwen3(
            d(2560, 9728, 36, 32, 8, 128, QWEN3_VOCAB, true, 40_960),
            QWEN3_BOS,
            QWEN3_EOS,
        ),
        "qwen3-8b" => qwen3(
            d(4096, 12288, 36, 32, 8, 128, QWEN3_VOCAB, false, 40_960),
            QWEN3_BOS,
            QWEN3_EOS,
        ),
        "llama-3.2-1b" => llama3(
            d(2048, 8192, 16, 32, 8, 64, LLAMA3_VOCAB, true, 131_072),
            32.0,
            8192.0,
            LLAMA3_BOS,
            LLAMA3_EOS,
        ),
        "llama-3.2-3b" => llama3(
            d(3072, 8192, 28, 24, 8, 128, LLAMA3_VOCAB, true, 131_072),
            32.0,
            8192.0,
            LLAMA3_BOS,
            LLAMA3_EOS,
        ),
        "llama-3.1-8b" => llama3(
            d(4096, 14336, 32, 32, 8, 128, LLAMA3_VOCAB, false, 131_072),
            8.0,
            8192.0,
            LLAMA3_BOS,
            LLAMA3_EOS,
        ),
        "tiny" => qwen3(d(128, 256, 2, 4, 2, 64, 517, true, 512), None, None),
        "tiny-llama" => llama3(d(192, 384, 2, 6, 2, 64, 331, false, 512), 8.0, 128.0, None, None),
        _ => {
            return Err(ModelError::Config(format!(
                "unknown preset {name:?}; the presets are {}",
                PRESETS.join(", ")
            )));
        }
    };
    config.validate()?;
    Ok(config)
}

/// `config` with `layers` decoder layers instead of its own (a truncated model for tests
/// and quick runs); [`ModelError::Config`] when `layers` is 0.
pub fn with_layers(mut config: Config, layers: usize) -> Result<Config> {
    if layers == 0 {
        return Err(ModelError::Config(
            "a model needs at least one decoder layer (got 0)".into(),
        ));
    }
    config.num_hidden_layers = layers;
    Ok(config)
}

/// Seeded random weights for a config, deterministic per (seed, tensor name), so a tensor
/// is the same whichever order the layers ask for it in.
///
/// Matrices are uniform with variance `1 / fan_in` (fan-in = the row length; `hidden`
/// for the embedding and LM head, so logits have a standard deviation of about 1 and a
/// maximum over the vocabulary of a few units), except the two that write the residual
/// stream, `o_proj` and `down_proj`, with `4 / fan_in`; norm weights are uniform in
/// [0.5, 1.5). With the residual so dominated by the layers rather than by the token's own
/// embedding, random models, tied ones too, decode varied greedy tokens instead of
/// repeating one (the tests check it on `tiny` and `tiny-llama` with an f64 reference
/// forward pass).
///
/// It answers for exactly the tensors of [`tensor_specs`] and gives
/// [`ModelError::MissingTensor`] for any other name.
#[derive(Clone, Debug)]
pub struct RandomWeights {
    config: Config,
    seed: u64,
    specs: HashMap<String, Vec<usize>>,
}

impl RandomWeights {
    /// Random weights for `config` from `seed`.
    pub fn new(config: Config, seed: u64) -> RandomWeights {
        let specs = tensor_specs(&config).into_iter().collect();
        RandomWeights { config, seed, specs }
    }

    /// The config the weights are for.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The seed of tensor `name`: FNV-1a of the seed's bytes and the name.
    fn tensor_seed(&self, name: &str) -> u64 {
        self.seed
            .to_le_bytes()
            .iter()
            .chain(name.as_bytes())
            .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    }
}

impl WeightSource for RandomWeights {
    /// The random tensor `name`; [`ModelError::MissingTensor`] for a name the config does
    /// not imply, [`ModelError::TensorShape`] when `shape` is not its shape.
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>> {
        let spec = self.specs.get(name).ok_or_else(|| ModelError::MissingTensor {
            path: PathBuf::from(format!("<random weights, seed {}>", self.seed)),
            name: name.to_string(),
        })?;
        if spec.as_slice() != shape {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: spec.clone(),
            });
        }
        let n: usize = spec.iter().product();
        let seed = self.tensor_seed(name);
        Ok(match spec.as_slice() {
            // Norm weights: uniform in [0.5, 1.5); values that round up to 1.5 take the
            // bf16 below it.
            [_] => megaops::testing::random::<f32>(n, 0.5, seed)
                .into_iter()
                .map(|x| {
                    let w = bf16::from_f32(1.0 + x);
                    if w >= bf16::from_f32(1.5) {
                        bf16::from_f32(1.5 - 1.0 / 128.0)
                    } else {
                        w
                    }
                })
                .collect(),
            [_, fan_in] => {
                // The layers' residual writers get gain 2, so the residual stream is the
                // layers' and not the token's own embedding (a tied model whose
                // embedding dominates its residual repeats one token).
                let gain = if name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight") {
                    2.0
                } else {
                    1.0
                };
                random_matrix(n, gain * (3.0 / *fan_in as f64).sqrt(), seed)
            }
            _ => random_matrix(n, 1.0, seed),
        })
    }
}

/// Values per chunk of [`random_matrix`].
const RANDOM_CHUNK: usize = 1 << 20;

/// `n` bf16 values uniform in `[-scale, scale)` from `seed`, made in chunks of
/// [`RANDOM_CHUNK`] values on the host's cores: chunk 0 from `seed` itself (a tensor of
/// one chunk is `megaops::testing::random`'s), chunk `i` from `seed` mixed with `i`. The
/// values depend only on `n`, `scale` and `seed`, not on the number of cores.
fn random_matrix(n: usize, scale: f64, seed: u64) -> Vec<bf16> {
    let mut out = vec![bf16::ZERO; n];
    let mut chunks: Vec<(usize, &mut [bf16])> = out.chunks_mut(RANDOM_CHUNK).enumerate().collect();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per_thread = chunks.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        while !chunks.is_empty() {
            let mine: Vec<(usize, &mut [bf16])> = chunks.drain(..per_thread.min(chunks.len())).collect();
            s.spawn(move || {
                for (i, chunk) in mine {
                    let chunk_seed = seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    chunk.copy_from_slice(&megaops::testing::random::<bf16>(chunk.len(), scale, chunk_seed));
                }
            });
        }
    });
    out
}

/// A `config.json` that transformers reads as `config` means it: every field explicit
/// (`num_key_value_heads`, `head_dim`, `rope_theta`), rope scaling in the 4.x form (5.x
/// converts it), `torch_dtype: "bfloat16"`, and the fields of the released files.
pub fn hf_config_json(config: &Config) -> Result<serde_json::Value> {
    use serde_json::{Value, json};
    let arch = config.architecture()?;
    let rope_scaling = match config.rope_scaling_kind()? {
        RopeScaling::None => Value::Null,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => json!({
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position_embeddings as u64,
        }),
    };
    let eos = match &config.eos_token_id {
        Some(TokenIds::One(id)) => json!(id),
        Some(TokenIds::Many(ids)) => json!(ids),
        None => Value::Null,
    };
    let mut j = json!({
        "architectures": [arch.class_name()],
        "model_type": arch.model_type(),
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_kv_heads(),
        "head_dim": config.head_dim(),
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_base(),
        "rope_scaling": rope_scaling,
        "max_position_embeddings": config.max_position_embeddings,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_word_embeddings,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": eos,
        "attention_bias": false,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": true,
        "torch_dtype": "bfloat16",
    });
    let extra = match arch {
        Architecture::Qwen3 => json!({
            "use_sliding_window": false,
            "sliding_window": null,
            "max_window_layers": config.num_hidden_layers,
        }),
        Architecture::Llama => json!({ "mlp_bias": false, "pretraining_tp": 1 }),
    };
    if let (Some(obj), Value::Object(extra)) = (j.as_object_mut(), extra) {
        obj.extend(extra);
    }
    Ok(j)
}

/// A tensor that [`write_hf_folder`] fetches from its source only when the serializer
/// writes it, so writing needs memory for one tensor, not the model. A failure is kept in
/// `error` (the serializer's `View::data` cannot fail) and zeros stand in for the data.
struct LazyTensor<'a> {
    name: String,
    shape: Vec<usize>,
    weights: &'a dyn WeightSource,
    error: &'a RefCell<Option<ModelError>>,
}

impl View for LazyTensor<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::BF16
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let len = self.data_len();
        if self.error.borrow().is_some() {
            return Cow::Owned(vec![0; len]);
        }
        match self.weights.get(&self.name, &self.shape) {
            Ok(values) if 2 * values.len() == len => {
                Cow::Owned(values.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect())
            }
            Ok(values) => {
                // A source that ignored the shape: report what it returned as a flat shape.
                *self.error.borrow_mut() = Some(ModelError::TensorShape {
                    name: self.name.clone(),
                    expected: self.shape.clone(),
                    found: vec![values.len()],
                });
                Cow::Owned(vec![0; len])
            }
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                Cow::Owned(vec![0; len])
            }
        }
    }

    fn data_len(&self) -> usize {
        2 * self.shape.iter().product::<usize>()
    }
}

/// Writes `config` and `weights` as a Hugging Face model folder `dir` (created if
/// needed): `config.json` ([`hf_config_json`]) and `model.safetensors` with every tensor
/// of [`tensor_specs`] in bf16 by its checkpoint key (`lm_head.weight` only when the
/// embeddings are not tied), with the `format: pt` metadata transformers expects, so
/// `AutoModelForCausalLM.from_pretrained(dir)` loads it with no missing or unexpected
/// keys. Tensors are fetched one at a time as they are written.
///
/// On a failure of `weights` the partial `model.safetensors` is removed and the failure
/// returned.
pub fn write_hf_folder(config: &Config, weights: &dyn WeightSource, dir: &Path) -> Result<()> {
    config.validate()?;
    std::fs::create_dir_all(dir).map_err(|source| ModelError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let config_path = dir.join(CONFIG_FILE);
    let text = serde_json::to_string_pretty(&hf_config_json(config)?).map_err(|source| ModelError::Json {
        path: config_path.clone(),
        source,
    })?;
    std::fs::write(&config_path, text + "\n").map_err(|source| ModelError::Io {
        path: config_path.clone(),
        source,
    })?;

    let weights_path = dir.join(WEIGHTS_FILE);
    let error = RefCell::new(None);
    let tensors = tensor_specs(config).into_iter().map(|(name, shape)| {
        let view = LazyTensor {
            name: name.clone(),
            shape,
            weights,
            error: &error,
        };
        (name, view)
    });
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let written = safetensors::serialize_to_file(tensors, Some(metadata), &weights_path);
    if let Some(e) = error.into_inner() {
        // The file holds zeros in place of the tensor that failed: do not leave it behind.
        let _ = std::fs::remove_file(&weights_path);
        return Err(e);
    }
    written.map_err(|e| ModelError::Safetensors {
        path: weights_path,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_matrices_are_seeded_per_chunk_and_in_range() {
        let small = random_matrix(1000, 0.5, 7);
        assert_eq!(small, megaops::testing::random::<bf16>(1000, 0.5, 7));
        let n = 2 * RANDOM_CHUNK + 123;
        let a = random_matrix(n, 0.25, 11);
        assert_eq!(a, random_matrix(n, 0.25, 11), "deterministic");
        assert_ne!(a[..64], a[RANDOM_CHUNK..RANDOM_CHUNK + 64], "chunks differ");
        assert_ne!(a, random_matrix(n, 0.25, 12));
        assert!(a.iter().all(|x| x.to_f32().abs() <= 0.25));
        assert_eq!(
            a[..RANDOM_CHUNK],
            megaops::testing::random::<bf16>(RANDOM_CHUNK, 0.25, 11)[..]
        );
    }
}
