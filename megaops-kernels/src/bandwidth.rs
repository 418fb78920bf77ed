//! A bench-only kernel that measures the pure-read bandwidth of device memory, so that
//! memory-bound kernels can be compared with the roofline measured in the same run.
//!
//! [`read_bandwidth`] reads a buffer once with 16-byte loads and folds what it read into
//! one word per CTA (so neither the compiler nor the hardware can skip the loads). It
//! writes `4 · ctas` bytes: the bytes moved are the buffer's size.
//!
//! PTX features: `ld.global.nc.v4.u32` (8 loads in flight per thread),
//! `shfl.sync.bfly.b32`, `red.relaxed.gpu.global.xor.b32`.

use crate::attention::math::unroll;
use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::{memory, thread, warp};

/// Reads `vectors` 16-byte vectors of `data` (grid-stride: CTA `pid` takes vectors
/// `pid·THREADS + tid + i·ctas·THREADS`, so each load instruction of a warp reads 512
/// contiguous bytes and `U = 8` of them are in flight per thread) and XORs every word it
/// read into `out[pid]` (one `red.xor` per warp; `out` may hold anything before).
///
/// Kernel tile `pid` (of `ctas`); no synchronised tensors. Launch about 4 CTAs per SM:
/// `ctas = 4 · sm_count` keeps 128 KiB of loads in flight per SM.
///
/// # Safety
/// `data` is 16-byte aligned with `16 · vectors` readable bytes; `out` has `ctas` words.
#[megaops::kernel(block = THREADS, tiles(pid = ctas), scratch(data[vectors * 4]), scratch(out[ctas]))]
#[config(THREADS = 256, U: usize = 8)]
pub unsafe fn read_bandwidth(data: *const u32, out: *mut u32, vectors: u64, ctas: u32) {
    let tid = thread::linear_thread_idx() as u64;
    let stride = ctas as u64 * THREADS as u64;
    let mut i = pid as u64 * THREADS as u64 + tid;
    let mut acc = 0u32;
    while i < vectors {
        let mut v = [[0u32; 4]; U];
        unroll!(U, max 8, |u| {
            let j = i + u as u64 * stride;
            if j < vectors {
                // SAFETY: j < vectors: 16 readable, aligned bytes (kernel contract).
                v[u] = unsafe { memory::ld_global_nc_v4_u32(data.add(4 * j as usize)) };
            }
        });
        unroll!(U, max 8, |u| {
            acc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];
        });
        i += U as u64 * stride;
    }
    let acc = warp::warp_reduce(acc, |a, b| a ^ b);
    if thread::lane_id() == 0 {
        // SAFETY: `out` has `ctas > pid` words (kernel contract).
        unsafe { atomic::global::red_xor(out.add(pid as usize), acc, Relaxed, Gpu) };
    }
}
