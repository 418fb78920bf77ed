//! Examples of MegaOps, and small kernels that exercise the data-tile protocol itself
//! (used by the protocol tests on the CPU backend and on the GPU).
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]

megaops::kernel_crate!();

pub mod fig1;
pub mod protocol;
