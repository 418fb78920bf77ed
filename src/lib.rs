//! MegaOps: write GPU kernels in Rust and compose them so that dependent kernels overlap
//! at the granularity of data tiles.
#![cfg_attr(target_arch = "nvptx64", no_std)]

pub use half::{bf16, f16};
pub use megaops_device as device;
