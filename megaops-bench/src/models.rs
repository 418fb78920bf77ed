//! The model shapes the suites time, read from the engine's presets (the dimensions of the
//! released `config.json` files), so no suite spells a model dimension by hand.

use megaops_models::presets;

/// The dimensions of one model that the kernel suites need.
#[derive(Clone, Copy, Debug)]
pub struct ModelShape {
    /// Display name, e.g. `Qwen3-0.6B`.
    pub name: &'static str,
    /// Hidden size.
    pub hidden: usize,
    /// MLP intermediate size.
    pub inter: usize,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads.
    pub hkv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl ModelShape {
    /// Columns of q (`hq · D`).
    pub fn q(&self) -> usize {
        self.hq * self.head_dim
    }

    /// Columns of k and of v (`hkv · D`).
    pub fn kv(&self) -> usize {
        self.hkv * self.head_dim
    }
}

/// The shapes of the presets named by `(display name, preset)`.
pub fn shapes(which: &[(&'static str, &str)]) -> Vec<ModelShape> {
    which
        .iter()
        .filter_map(|&(name, preset)| match presets::preset(preset) {
            Ok(c) => Some(ModelShape {
                name,
                hidden: c.hidden_size,
                inter: c.intermediate_size,
                hq: c.num_attention_heads,
                hkv: c.num_kv_heads(),
                head_dim: c.head_dim(),
                vocab: c.vocab_size,
                eps: c.eps(),
            }),
            Err(e) => {
                eprintln!("preset {preset}: {e}");
                None
            }
        })
        .collect()
}

/// Qwen3-0.6B, Qwen3-1.7B, Qwen3-8B and Llama-3.2-1B: the decode and prefill shapes of the
/// GEMV and GEMM suites.
pub const LINEAR_MODELS: [(&str, &str); 4] = [
    ("Qwen3-0.6B", "qwen3-0.6b"),
    ("Qwen3-1.7B", "qwen3-1.7b"),
    ("Qwen3-8B", "qwen3-8b"),
    ("Llama-3.2-1B", "llama-3.2-1b"),
];
