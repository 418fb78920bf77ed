//! The MegaOps tile-synchronisation runtime (paper §2.2, Listing 3).
//!
//! `#[megaops::kernel]` injects calls to [`kernel_begin_cta`], [`remap_tile`],
//! [`wait_input`] and [`begin_signals`] / [`signal_tiles`] ([`signal_output`] for one
//! output); kernel authors never call them. The parameter
//! blocks ([`KernelCtx`], [`TileSync`]) and the kernel-tile ↔ data-tile arithmetic
//! ([`tiling`]) are shared with the host runtime.

mod args;
mod runtime;
pub mod tiling;
mod trace;

pub use args::*;
pub use runtime::*;
pub use trace::*;
