//! Model weights by their checkpoint names: [`WeightSource`], implemented by a Hugging
//! Face checkpoint folder and by the seeded random weights of the presets.

use crate::error::Result;
use megaops::bf16;

/// Where a model's weights come from. Layers ask for each tensor by its checkpoint key
/// (`model.layers.0.mlp.gate_proj.weight`) and the shape the config implies.
pub trait WeightSource {
    /// The tensor `name` as row-major bf16, checked against `shape` (an error names the
    /// tensor, the expected and the found shape).
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>>;
}

/// A checkpoint folder. (Temporary.)
pub struct Checkpoint {
    config: crate::config::Config,
}

impl Checkpoint {
    /// Opens a folder.
    pub fn open(dir: &std::path::Path) -> Result<Checkpoint> {
        Ok(Checkpoint {
            config: crate::config::Config::from_file(&dir.join("config.json"))?,
        })
    }
    /// The config.
    pub fn config(&self) -> &crate::config::Config {
        &self.config
    }
}

impl WeightSource for Checkpoint {
    fn get(&self, name: &str, _shape: &[usize]) -> Result<Vec<bf16>> {
        Err(crate::error::ModelError::MissingTensor { path: ".".into(), name: name.into() })
    }
}
