//! Presets: the dimensions of released models with seeded random weights.
//! (Temporary minimal version; the full one lands with the checkpoint work.)

use crate::checkpoint::WeightSource;
use crate::config::Config;
use crate::error::{ModelError, Result};
use megaops::bf16;
use std::path::Path;

/// A preset's config.
pub fn preset(name: &str) -> Result<Config> {
    let json = match name {
        "tiny" => r#"{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":128,"intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":512,"vocab_size":517,"tie_word_embeddings":true,"eos_token_id":0}"#,
        "tiny-llama" => r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":128,"intermediate_size":384,"num_hidden_layers":2,"num_attention_heads":6,"num_key_value_heads":2,"head_dim":64,"rms_norm_eps":1e-5,"rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64},"max_position_embeddings":512,"vocab_size":331,"tie_word_embeddings":false,"eos_token_id":0}"#,
        _ => return Err(ModelError::Unsupported(format!("preset {name}"))),
    };
    Config::from_json(json)
}

/// Keeps the first `n` layers.
pub fn with_layers(mut config: Config, n: usize) -> Result<Config> {
    config.num_hidden_layers = n;
    Ok(config)
}

/// Seeded random weights.
pub struct RandomWeights {
    seed: u64,
}

impl RandomWeights {
    /// Weights of `config` from `seed`.
    pub fn new(_config: Config, seed: u64) -> RandomWeights {
        RandomWeights { seed }
    }
}

impl WeightSource for RandomWeights {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>> {
        let h = name.bytes().fold(self.seed ^ 0xcbf29ce484222325, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
        let n: usize = shape.iter().product();
        if shape.len() == 1 {
            Ok(megaops::testing::random::<f32>(n, 0.5, h).into_iter().map(|v| bf16::from_f32(1.0 + v)).collect())
        } else {
            let fan_in = shape[1] as f64;
            Ok(megaops::testing::random::<bf16>(n, (3.0 / fan_in).sqrt() * 2.0, h))
        }
    }
}

/// Writes a folder.
pub fn write_hf_folder(_config: &Config, _weights: &dyn WeightSource, _dir: &Path) -> Result<()> {
    Err(ModelError::Unsupported("export".into()))
}
