//! Examples of MegaOps, and small kernels that exercise the data-tile protocol itself
//! (used by the protocol tests on the CPU backend and on the GPU).
//!
//! - [`fig1`]: the paper's Figure 1, two back-to-back GEMMs overlapped on row data tiles
//!   (`cargo run --release -p megaops-examples --bin fig1`);
//! - [`mlp`] (re-exported from `megaops-models`): a SwiGLU MLP block (RMSNorm → gate/up → SiLU·mul → down),
//!   decode-like (GEMV kernels) and prefill-like (tensor-core GEMM);
//! - [`protocol`]: test kernels of the protocol itself;
//! - [`chain`]: a chain of kernels that do almost nothing, to measure one kernel boundary;
//! - [`guide`]: the code of `GUIDE.md`.
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]

megaops::kernel_crate!();

#[cfg(not(target_arch = "nvptx64"))]
pub mod chain;
#[cfg(not(target_arch = "nvptx64"))]
pub mod fig1;
#[cfg(not(target_arch = "nvptx64"))]
pub use megaops_models::layers::mlp;
pub mod guide;
pub mod protocol;
