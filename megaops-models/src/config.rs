//! [`Config`]: a model's `config.json` (Hugging Face), the one source of every model
//! dimension the engine uses.

use crate::error::{ModelError, Result};
use megaops_kernels::rope::RopeScaling;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The architectures the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Architecture {
    /// `Qwen3ForCausalLM` (`model_type = "qwen3"`): RMSNorm on each q and k head.
    Qwen3,
    /// `LlamaForCausalLM` (`model_type = "llama"`), Llama-3.x.
    Llama,
}

impl Architecture {
    /// The Hugging Face class name (`architectures[0]` of `config.json`).
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Qwen3 => "Qwen3ForCausalLM",
            Architecture::Llama => "LlamaForCausalLM",
        }
    }

    /// The Hugging Face `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Qwen3 => "qwen3",
            Architecture::Llama => "llama",
        }
    }
}

/// `eos_token_id`: one id or a list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids, any of which ends a sequence.
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` (transformers 4.x) or `rope_parameters` (transformers 5.x) of
/// `config.json`; only the fields the engine reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    /// `"default"`, `"llama3"`, … (`type` in older files).
    #[serde(default, alias = "type", skip_serializing_if = "Option::is_none")]
    pub rope_type: Option<String>,
    /// transformers 5.x keeps `rope_theta` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// `llama3`: the scaling factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// `llama3`: `low_freq_factor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_freq_factor: Option<f64>,
    /// `llama3`: `high_freq_factor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_freq_factor: Option<f64>,
    /// `llama3`: `original_max_position_embeddings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<f64>,
}

/// A model's `config.json`, the fields the engine reads (others are ignored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// `["Qwen3ForCausalLM"]` or `["LlamaForCausalLM"]`.
    #[serde(default)]
    pub architectures: Vec<String>,
    /// `"qwen3"` or `"llama"`.
    pub model_type: String,
    /// Hidden size `h`.
    pub hidden_size: usize,
    /// MLP intermediate size.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Head dimension; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base (transformers 4.x; 5.x keeps it in `rope_parameters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// RoPE frequency scaling (transformers 4.x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeParameters>,
    /// RoPE parameters (transformers 5.x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<RopeParameters>,
    /// Longest context the model was trained for.
    pub max_position_embeddings: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// The LM head shares the input embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Beginning-of-sequence id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence id(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<TokenIds>,
    /// Activation (`"silu"` is the only one supported).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Bias on the attention projections (unsupported when true).
    #[serde(default)]
    pub attention_bias: bool,
    /// Bias on the MLP projections (unsupported when true).
    #[serde(default)]
    pub mlp_bias: bool,
    /// The checkpoint's dtype (`torch_dtype` in transformers 4.x, `dtype` in 5.x).
    #[serde(default, alias = "dtype", skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<String>,
}

fn default_act() -> String {
    "silu".into()
}

/// Head dimensions the attention and RoPE kernels have tile configs for.
pub const SUPPORTED_HEAD_DIMS: [usize; 2] = [64, 128];
/// Largest number of query heads per kv head the decode attention kernel serves.
pub const MAX_GROUP: usize = 8;

impl Config {
    /// Reads and checks `config.json` at `path`.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        Config::from_json(&text).map_err(|e| match e {
            ModelError::Json { source, .. } => ModelError::Json {
                path: path.to_path_buf(),
                source,
            },
            other => other,
        })
    }

    /// Parses and checks a `config.json` text.
    ///
    /// A file may spell one setting twice: `torch_dtype` and `dtype` (files saved by
    /// transformers 4.56+ may keep both), `type` and `rope_type` in `rope_scaling` (4.x
    /// adds `rope_type` beside a legacy `type` and saves both). Serde rejects a field and
    /// its alias together as a duplicate, so the newer spelling is kept, the legacy one
    /// dropped, before deserializing.
    pub fn from_json(text: &str) -> Result<Config> {
        let json_error = |e| ModelError::Json {
            path: "config.json".into(),
            source: e,
        };
        let mut value: serde_json::Value = serde_json::from_str(text).map_err(json_error)?;
        if let Some(obj) = value.as_object_mut() {
            if obj.contains_key("dtype") {
                obj.remove("torch_dtype");
            }
            for key in ["rope_scaling", "rope_parameters"] {
                if let Some(rope) = obj.get_mut(key).and_then(|v| v.as_object_mut())
                    && rope.contains_key("rope_type")
                {
                    rope.remove("type");
                }
            }
        }
        let config: Config = serde_json::from_value(value).map_err(json_error)?;
        config.validate()?;
        Ok(config)
    }

    /// The architecture, from `architectures` and `model_type`.
    pub fn architecture(&self) -> Result<Architecture> {
        let from_type = match self.model_type.as_str() {
            "qwen3" => Some(Architecture::Qwen3),
            "llama" => Some(Architecture::Llama),
            _ => None,
        };
        let from_class = self.architectures.first().map(|a| match a.as_str() {
            "Qwen3ForCausalLM" => Some(Architecture::Qwen3),
            "LlamaForCausalLM" => Some(Architecture::Llama),
            _ => None,
        });
        match (from_type, from_class) {
            (Some(t), None) => Ok(t),
            (Some(t), Some(Some(c))) if c == t => Ok(t),
            _ => Err(ModelError::Unsupported(format!(
                "architecture {:?} / model_type {:?}: MegaOps runs Qwen3ForCausalLM (qwen3) and LlamaForCausalLM (llama)",
                self.architectures, self.model_type
            ))),
        }
    }

    /// Checks everything the kernels need, so a model that loads also runs.
    pub fn validate(&self) -> Result<()> {
        self.architecture()?;
        let bad = |what: String| Err(ModelError::Unsupported(what));
        if self.hidden_act != "silu" {
            return bad(format!("hidden_act {:?} (only \"silu\")", self.hidden_act));
        }
        if self.attention_bias || self.mlp_bias {
            return bad("projection biases (attention_bias / mlp_bias)".into());
        }
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_kv_heads()),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ModelError::Config(format!("{name} must be positive")));
        }
        let d = self.head_dim();
        if !SUPPORTED_HEAD_DIMS.contains(&d) {
            return bad(format!(
                "head_dim {d}: the attention kernels have configs for {SUPPORTED_HEAD_DIMS:?}"
            ));
        }
        let (hq, hkv) = (self.num_attention_heads, self.num_kv_heads());
        if !hq.is_multiple_of(hkv) || hq / hkv > MAX_GROUP {
            return bad(format!(
                "{hq} query heads over {hkv} kv heads: the group size must be a whole number from 1 to {MAX_GROUP}"
            ));
        }
        if !self.hidden_size.is_multiple_of(8) || !self.intermediate_size.is_multiple_of(8) {
            return bad(format!(
                "hidden_size {} and intermediate_size {} must be multiples of 8 (16-byte rows)",
                self.hidden_size, self.intermediate_size
            ));
        }
        let widest = (2 * self.intermediate_size)
            .max(self.q_dim() + 2 * self.kv_dim())
            .max(self.vocab_size);
        if widest * self.hidden_size.max(self.intermediate_size) > u32::MAX as usize {
            return bad("a weight matrix with more than 2³² elements".into());
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err(ModelError::Config(format!(
                "rms_norm_eps {} must be finite and ≥ 0",
                self.rms_norm_eps
            )));
        }
        self.rope_scaling_kind()?;
        let base = self.rope_base();
        if !base.is_finite() || base <= 0.0 {
            return Err(ModelError::Config(format!(
                "rope_theta {base} must be finite and positive"
            )));
        }
        Ok(())
    }

    /// Key/value heads.
    pub fn num_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Head dimension `D`.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Query heads per kv head.
    pub fn group_size(&self) -> usize {
        self.num_attention_heads / self.num_kv_heads().max(1)
    }

    /// Columns of the query projection (`hq · D`; not always the hidden size in Qwen3).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim()
    }

    /// Columns of the key (and of the value) projection (`hkv · D`).
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads() * self.head_dim()
    }

    /// Columns of the merged QKV projection.
    pub fn qkv_dim(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }

    /// RMSNorm epsilon as the kernels take it.
    pub fn eps(&self) -> f32 {
        self.rms_norm_eps as f32
    }

    /// The RoPE parameters, wherever the file keeps them.
    fn rope_params(&self) -> Option<&RopeParameters> {
        self.rope_parameters.as_ref().or(self.rope_scaling.as_ref())
    }

    /// RoPE base (`rope_theta`; 10000 when the file has none).
    pub fn rope_base(&self) -> f64 {
        self.rope_theta
            .or_else(|| self.rope_params().and_then(|p| p.rope_theta))
            .unwrap_or(10_000.0)
    }

    /// The RoPE frequency scaling.
    pub fn rope_scaling_kind(&self) -> Result<RopeScaling> {
        let Some(p) = self.rope_params() else {
            return Ok(RopeScaling::None);
        };
        match p.rope_type.as_deref() {
            None | Some("default") => Ok(RopeScaling::None),
            Some("llama3") => {
                let need = |v: Option<f64>, name: &str| {
                    v.ok_or_else(|| ModelError::Config(format!("rope_scaling of type llama3 lacks `{name}`")))
                };
                Ok(RopeScaling::Llama3 {
                    factor: need(p.factor, "factor")?,
                    low_freq_factor: need(p.low_freq_factor, "low_freq_factor")?,
                    high_freq_factor: need(p.high_freq_factor, "high_freq_factor")?,
                    original_max_position_embeddings: need(
                        p.original_max_position_embeddings,
                        "original_max_position_embeddings",
                    )?,
                })
            }
            Some(other) => Err(ModelError::Unsupported(format!(
                "rope_scaling of type {other:?} (supported: default, llama3)"
            ))),
        }
    }

    /// End-of-sequence ids (none when the file names none).
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_token_id.as_ref().map(TokenIds::to_vec).unwrap_or_default()
    }

    /// Parameters per decoder layer (norms, projections).
    pub fn layer_params(&self) -> usize {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let qk_norm = if self.architecture().ok() == Some(Architecture::Qwen3) {
            2 * self.head_dim()
        } else {
            0
        };
        2 * h + h * self.qkv_dim() + self.q_dim() * h + 3 * h * i + qk_norm
    }

    /// Bytes of all bf16 weights (the LM head counted once when tied).
    pub fn weight_bytes(&self) -> usize {
        let embed = self.vocab_size * self.hidden_size;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        2 * (embed + head + self.hidden_size + self.num_hidden_layers * self.layer_params())
    }

    /// Bytes a decode step reads of weights: every layer, the final norm and the LM head
    /// (the embedding table contributes one row per token, not counted).
    pub fn step_weight_bytes(&self) -> usize {
        2 * (self.vocab_size * self.hidden_size + self.hidden_size + self.num_hidden_layers * self.layer_params())
    }

    /// Bytes of KV cache per token of context (keys and values, every layer, bf16).
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * 2 * self.kv_dim() * self.num_hidden_layers
    }
}
