//! The MegaOps device library: what `cuda_std` is to rust-cuda, on rustc's own NVPTX
//! backend.
//!
//! Every primitive is a thin `#[inline(always)]` wrapper. Compiled for
//! `nvptx64-nvidia-cuda` it emits the PTX named in its documentation; compiled for the
//! host it runs on the CPU backend ([`cpu`]), a virtual GPU that executes the same kernels
//! with CTA threads as cooperatively scheduled coroutines.
//!
//! Modules:
//! - [`thread`]: thread/block/grid indices, lane and warp ids, CTA barriers;
//! - [`shared`]: static and dynamic shared memory ([`shared::SharedPtr`]);
//! - [`atomic`]: loads, stores, add, cas, exch with explicit ordering and scope; [`fence`];
//! - [`time`]: `nanosleep`, `%globaltimer`, `clock64`;
//! - [`warp`]: shuffles, votes, match;
//! - [`memory`]: 16-byte vector loads/stores, `cp.async` with commit/wait groups;
//! - [`mbarrier`]: shared-memory barriers that `cp.async` copies arrive on (pipelines);
//! - [`mma`]: `ldmatrix` and `mma.sync` m16n8k16 (bf16/f16 → f32);
//! - [`wgmma`]: Hopper warpgroup MMA from shared-memory descriptors (sm_90a);
//! - [`math`]: `fma.rn.f32` and the special-function unit (`ex2`, `rcp`, `rsqrt` approx);
//! - [`convert`]: bf16/f16 ↔ f32 conversions on `half`'s types;
//! - [`griddep`]: programmatic dependent launch (`griddepcontrol`, sm_90);
//! - [`sync`]: the MegaOps tile-synchronisation runtime the `#[megaops::kernel]` macro calls.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(asm_experimental_arch, stdarch_nvptx, core_float_math)
)]
// `static_shared!` expands to inline PTX in the caller's crate; this lets that crate
// use it without enabling `asm_experimental_arch` itself (std's macros do the same).
#![cfg_attr(target_arch = "nvptx64", feature(allow_internal_unstable), allow(internal_features))]

pub mod atomic;
pub mod convert;
pub mod fence;
pub mod griddep;
pub mod math;
pub mod mbarrier;
pub mod memory;
pub mod mma;
pub mod shared;
pub mod sync;
pub mod thread;
pub mod time;
pub mod warp;
pub mod wgmma;

#[cfg(not(target_arch = "nvptx64"))]
pub mod cpu;

pub use half::{bf16, f16};

/// Three-component index or size, as `%tid`, `%ctaid`, `%ntid` and `%nctaid` are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Dim3 {
    /// x component.
    pub x: u32,
    /// y component.
    pub y: u32,
    /// z component.
    pub z: u32,
}

impl Dim3 {
    /// A new index.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Dim3 { x, y, z }
    }

    /// Number of elements `x * y * z`.
    pub const fn volume(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; there is no unwinding on the device.
    unsafe { core::arch::nvptx::trap() }
}
