//! Test kernels for every primitive family of `megaops-device`.
//!
//! Each kernel is written once, as an ordinary `pub unsafe fn` (its *body*), so that the
//! host build can run the same code on the CPU backend; the `entry!` macro adds the PTX entry
//! point of the same name for the `nvptx64` build. Each kernel writes what it observed to
//! an output buffer, and its module has (on the host) a CPU reference or checker that says
//! what a correct GPU must have written. Every kernel's documentation gives its launch
//! configuration and buffer sizes.
//!
//! | module | primitives |
//! | --- | --- |
//! | [`indices`] | thread/block/grid indices, lane/warp ids, `bar.sync`, named barriers, `bar.red` |
//! | [`shared_mem`] | `static_shared!` (same name in two kernels), dynamic shared memory, `SharedPtr` |
//! | [`atomics`] | every atomic operation under contention, shared-memory atomics |
//! | [`message`] | acquire/release message passing between two kernels on two streams, with timeout |
//! | [`vector`] | `ld.global{,.nc,.cg}.v4/v2`, `st.global.v4/v2`, `prefetch.global.L2` |
//! | [`copy_async`] | `cp.async` ca/cg 4/8/16 bytes, zero-fill, commit/wait groups |
//! | [`tensor_core`] | `ldmatrix` x1/x2/x4 (± trans), `mma.sync` m16n8k16 bf16 and f16 |
//! | [`warp_ops`] | shuffles (all modes, widths, 64-bit), votes, ballot, match, reductions |
//! | [`conversions`] | bf16/f16 ↔ f32, packing |
//! | [`math`] | `fma.rn.f32`, `ex2` / `rcp` / `rsqrt` approx |
//! | [`timers`] | `%globaltimer`, `%clock64`, `nanosleep`, every fence |
//!
//! [`ptx::MODULES`] holds the PTX, one module per GPU architecture.
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]

/// Adds the PTX entry point `name` (an `extern "ptx-kernel"` function with an unmangled
/// symbol) that calls the body `self::name` with the same parameters.
macro_rules! entry {
    ($name:ident ( $($p:ident : $t:ty),* $(,)? )) => {
        #[cfg(target_arch = "nvptx64")]
        const _: () = {
            #[unsafe(no_mangle)]
            pub unsafe extern "ptx-kernel" fn $name($($p: $t),*) {
                // SAFETY: the launch passes what the body's documentation requires.
                unsafe { self::$name($($p),*) }
            }
        };
    };
}

pub mod atomics;
pub mod conversions;
pub mod copy_async;
pub mod indices;
pub mod math;
pub mod message;
pub mod shared_mem;
pub mod tensor_core;
pub mod timers;
pub mod vector;
pub mod warp_ops;

#[cfg(not(target_arch = "nvptx64"))]
pub mod ptx {
    //! The PTX of this crate: `(architecture, PTX text)` per architecture built
    //! (`sm_90` by default; `MEGAOPS_ARCHS=sm_80,sm_89,sm_90` for more).
    include!(concat!(env!("OUT_DIR"), "/megaops_ptx.rs"));

    /// The entry points every module defines (the kernels of this crate).
    pub const ENTRIES: &[&str] = &[
        "thread_indices",
        "barriers",
        "shared_static_a",
        "shared_static_b",
        "shared_dynamic",
        "atomics",
        "mp_producer",
        "mp_consumer",
        "vector_copy",
        "cp_async_copy",
        "ldmatrix_probe",
        "mma_bf16",
        "mma_f16",
        "warp_collectives",
        "convert",
        "math",
        "fences_and_timers",
    ];
}

/// The global linear thread id: `linear_block_idx * threads_per_block + linear_thread_idx`.
#[inline(always)]
pub fn global_id() -> u32 {
    use megaops_device::thread;
    thread::linear_block_idx() * thread::block_dim().volume() as u32 + thread::linear_thread_idx()
}
