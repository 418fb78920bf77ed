//! The layers of a decoder, each a reusable type that takes and returns `Tiled` tensors.

pub mod add_norm;
pub mod attention;
pub mod decoder;
pub mod layout;
pub mod mlp;
pub mod prefill_gemm;
pub mod projection;

pub use add_norm::AddNormInput;
pub use attention::{Attention, AttentionActivations, AttentionDims, AttentionKind, KvCache, Positions};
pub use decoder::{DecoderLayer, LayerActivations};
pub use layout::{DecodeTiles, PassLayout};
pub use mlp::{Mlp, MlpActivations, MlpConfig, MlpPath};
pub use prefill_gemm::{AUTO_MIN_FLOPS, GemmBackend, Picked, PrefillGemm};
pub use projection::{Projection, decode_placement};

/// The index of the first tile config of `kernel` whose constants (an entry of its
/// launcher's `CONSTS`) `pick` accepts, so that the engine chooses configs by their
/// properties; an error naming the kernel and `what` was asked for when none does.
pub(crate) fn config_where<C>(
    kernel: &str,
    consts: &[C],
    what: &str,
    pick: impl Fn(&C) -> bool,
) -> megaops::Result<usize> {
    consts
        .iter()
        .position(pick)
        .ok_or_else(|| megaops::Error::Invalid(format!("`{kernel}` has no tile config with {what}")))
}
