//! The MegaOps kernel library: the kernels of a dense Llama-3 / Qwen3 forward pass, each a
//! `#[megaops::kernel]` with an exposed kernel tiling and tile configs, usable alone and
//! composable through data tiles.
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]
// `#[inline(always)]` on the closures the GEMM epilogue passes down.
#![feature(stmt_expr_attributes)]

megaops::kernel_crate!();

pub mod attention;
pub mod bandwidth;
pub mod decode_step;
pub mod elementwise;
pub mod gemm;
pub mod gemv;
pub mod norm;
pub mod rope;
pub mod sampling;
