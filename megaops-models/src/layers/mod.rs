//! The layers of a decoder, each a reusable type that takes and returns `Tiled` tensors.

pub mod attention;
pub mod decoder;
pub mod mlp;

pub use attention::{Attention, AttentionActivations, AttentionDims, AttentionKind, KvCache, Positions};
pub use decoder::{DecoderLayer, LayerActivations};
pub use mlp::{Mlp, MlpActivations, MlpConfig, MlpPath};
