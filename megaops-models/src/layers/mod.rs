//! The layers of a decoder, each a reusable type that takes and returns `Tiled` tensors.

pub mod mlp;

pub use mlp::{Mlp, MlpActivations, MlpConfig, MlpPath};
