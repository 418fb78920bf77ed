//! Build-time support for MegaOps kernel crates.
//!
//! A kernel crate is compiled twice: once for the host (where `#[megaops::kernel]` expands
//! to typed launchers and CPU-backend bodies) and once for `nvptx64-nvidia-cuda`, where the
//! same functions become PTX entries. This crate performs the second compilation from the
//! kernel crate's `build.rs`:
//!
//! ```no_run
//! // the body of `fn main` in a kernel crate's build.rs:
//! megaops_build::PtxBuilder::from_env().build_or_exit();
//! ```
//!
//! and the crate root embeds the result with `megaops::kernel_crate!()`.
//!
//! How it works: the build script runs a nested `cargo rustc` of the same package for
//! `nvptx64-nvidia-cuda` with `-Zbuild-std=core`, fat LTO and `panic = "abort"`, in a
//! target directory of its own (so it never waits on the outer build's lock). rustc then
//! calls a linker; the linker is this very build-script executable, started in *linker
//! mode* ([`linker`]), which turns the LTO'd LLVM bitcode into PTX with `llvm-link`,
//! `opt` (internalize + global DCE) and `llc` from the `llvm-tools` component. One PTX
//! module is produced per requested GPU architecture (default `sm_90`; `sm_80` and `sm_89`
//! are supported). The nested build is incremental: a change to a kernel source rebuilds
//! only the PTX of that crate.

mod builder;
pub mod cubin;
mod error;
pub mod linker;
pub mod ptxas;
mod toolchain;

pub use builder::{Arch, PtxBuilder};
pub use error::BuildError;
pub use toolchain::Toolchain;

/// Environment variable that tells the nested nvptx build (and its build script) that it is
/// the device half of a kernel crate, so that build scripts do not recurse.
pub const INNER_BUILD_ENV: &str = "MEGAOPS_PTX_INNER_BUILD";

/// Environment variable naming the executable rustc calls as linker; that executable (the
/// kernel crate's build script) runs in linker mode when it finds its own path there.
pub const LINKER_MODE_ENV: &str = "MEGAOPS_PTX_LINKER";

/// Environment variable listing the GPU architectures to build, comma separated
/// (e.g. `sm_80,sm_89,sm_90`). Overrides [`PtxBuilder::archs`].
pub const ARCHS_ENV: &str = "MEGAOPS_ARCHS";

/// Name of the generated Rust file in `OUT_DIR` that `megaops::kernel_crate!()` includes.
pub const EMBED_FILE: &str = "megaops_ptx.rs";
