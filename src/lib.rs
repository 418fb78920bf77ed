//! MegaOps: write GPU kernels in Rust and compose them so that dependent kernels overlap
//! at the granularity of data tiles.
//!
//! A kernel crate writes kernels with [`kernel`] (`#[megaops::kernel]`), builds them to PTX
//! from its `build.rs` with `megaops-build`, and embeds the PTX with [`kernel_crate!`].
//! Host code creates a [`Device`], tensors and [`Tiled`] tensors, and launches kernels
//! through the typed launcher module the macro generates for each kernel.
#![cfg_attr(target_arch = "nvptx64", no_std)]

pub use half::{bf16, f16};
pub use megaops_device as device;
/// Marks a device function as a MegaOps kernel; see the crate README for the annotation.
pub use megaops_macros::kernel;

#[cfg(not(target_arch = "nvptx64"))]
pub use megaops_host::*;

/// Embeds the PTX of the current kernel crate (built by `megaops-build` from `build.rs`)
/// as `crate::__MEGAOPS_PTX`, which the launchers of `#[megaops::kernel]` load. Invoke
/// once at the crate root.
#[macro_export]
macro_rules! kernel_crate {
    () => {
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc(hidden)]
        pub static __MEGAOPS_PTX: $crate::PtxModule = $crate::PtxModule {
            name: ::core::env!("CARGO_PKG_NAME"),
            ptx: __megaops_embedded::MODULES,
            cubin: __megaops_embedded::CUBINS,
        };
        #[cfg(not(target_arch = "nvptx64"))]
        #[doc(hidden)]
        mod __megaops_embedded {
            include!(concat!(env!("OUT_DIR"), "/megaops_ptx.rs"));
        }
    };
}

/// Paths used by the code `#[megaops::kernel]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use megaops_device::griddep::wait_prerequisite_grids;
    pub use megaops_device::sync::{
        KernelCtx, ProducerTile, TileSync, begin_signals, kernel_begin_cta, remap_tile, signal_tiles, tile_coords,
        tile_region, trace_end, trace_now, trace_record, trace_waited, wait_input,
    };
    pub use megaops_device::thread::{block_idx_x, grid_dim_x};

    #[cfg(not(target_arch = "nvptx64"))]
    pub use megaops_device::cpu::hooks::watch_input as cpu_watch_input;
    #[cfg(not(target_arch = "nvptx64"))]
    pub use megaops_device::cpu::{ProbeOther, ProbePointer, ReadProbe};
    #[cfg(not(target_arch = "nvptx64"))]
    pub use megaops_host::launch::{
        AsInput, AsOutput, CheckedArith, ConfigInfo, ConfigValue, Declared, KernelLaunch, LaunchOptions, LaunchTarget,
        OverflowSite, TileDim, checked_op,
    };
    #[cfg(not(target_arch = "nvptx64"))]
    pub use megaops_host::{Error, PtxModule, R1, R2, R3, R4, Result, Tensor};
}
