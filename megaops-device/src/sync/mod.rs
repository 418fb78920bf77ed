//! The MegaOps tile-synchronisation runtime (paper §2.2, Listing 3).
//!
//! `#[megaops::kernel]` injects calls to these functions; kernel authors never call them.

mod args;

pub use args::*;
