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
