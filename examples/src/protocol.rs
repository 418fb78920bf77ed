//! Kernels that exercise the data-tile protocol: a producer that writes a known pattern
//! tile by tile (optionally slowly), a consumer that sums rows, and a kernel that keeps
//! SMs busy for a while, and a link of a kernel chain ([`relay`]).

use megaops::device::thread::{block_dim_x, thread_idx_x};
use megaops::device::time::{global_timer, nanosleep};

/// The value the producer writes at `(i, j)`; consumers and tests recompute it.
#[inline(always)]
pub fn pattern(i: u32, j: u32, seed: u32) -> f32 {
    let h = i.wrapping_mul(2654435761) ^ j.wrapping_mul(40503) ^ seed.wrapping_mul(2246822519);
    ((h >> 8) % 2001) as f32 / 1000.0 - 1.0
}

/// Spins until `ns` nanoseconds of `%globaltimer` have passed (yields on the CPU backend).
#[inline(always)]
pub fn spin_for(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = global_timer();
    while global_timer().wrapping_sub(start) < ns {
        nanosleep(1000);
    }
}

/// Writes `pattern(i, j, seed)` into `y[m, n]`, one `BM × BN` kernel tile per CTA, after
/// spinning `delay_ns` (to make a slow producer). Kernel tiling of `y`: `[pid_m: BM,
/// pid_n: BN]`.
#[megaops::kernel(
    block = 128,
    output(y[m, n] = [pid_m: BM, pid_n: BN]),
)]
#[config(BM = 16, BN = 32)]
#[config(BM = 7, BN = 5)]
#[config(BM = 64, BN = 64)]
pub unsafe fn produce(y: *mut f32, m: u32, n: u32, seed: u32, delay_ns: u64) {
    spin_for(delay_ns);
    let mut idx = thread_idx_x();
    while idx < BM * BN {
        let (i, j) = (pid_m * BM + idx / BN, pid_n * BN + idx % BN);
        if i < m && j < n {
            // SAFETY: (i, j) lies inside the m × n output.
            unsafe { *y.add((i * n + j) as usize) = pattern(i, j, seed) };
        }
        idx += block_dim_x();
    }
}

/// `sums[i] = Σ_j x[i, j]` for the `BM` rows of each kernel tile; waits for the data
/// tiles of `x` those rows touch. Kernel tiling: `x: [pid_m: BM, _]`, `sums: [pid_m: BM]`.
#[megaops::kernel(
    block = 64,
    min_ctas = 8,
    input(x[m, n] = [pid_m: BM, _]),
    output(sums[m] = [pid_m: BM]),
)]
#[config(BM = 8)]
#[config(BM = 1)]
#[config(BM = 33)]
pub unsafe fn row_sums(x: *const f32, sums: *mut f32, m: u32, n: u32) {
    let mut r = thread_idx_x();
    while r < BM {
        let i = pid_m * BM + r;
        if i < m {
            let mut s = 0.0f32;
            for j in 0..n {
                // SAFETY: (i, j) lies inside the m × n input.
                s += unsafe { *x.add((i * n + j) as usize) };
            }
            // SAFETY: i < m.
            unsafe { *sums.add(i as usize) = s };
        }
        r += block_dim_x();
    }
}

/// Keeps `ctas` CTAs busy for `ns` nanoseconds (a long kernel that holds SMs).
#[megaops::kernel(block = 32, tiles(t = ctas))]
pub unsafe fn busy(ns: u64, ctas: u32) {
    let _ = t;
    spin_for(ns);
}

/// Each CTA `t` stores the low 32 bits of `%globaltimer` (ns) at its start into
/// `starts[t]`, then spins `ns`: a kernel whose CTA dispatch times tests can compare.
#[megaops::kernel(block = 32, tiles(t = ctas), tensor(starts[ctas]))]
pub unsafe fn stamp(starts: *mut u32, ns: u64, ctas: u32) {
    if thread_idx_x() == 0 {
        // SAFETY: t < ctas, the length of `starts`.
        unsafe { *starts.add(t as usize) = global_timer() as u32 };
    }
    spin_for(ns);
}

/// Writes `value ^ e` into `y[e]`, one 128-element kernel tile per CTA, after spinning
/// `delay_ns`: the producer of the stale-read probe.
#[megaops::kernel(block = 128, output(y[n] = [i: 128]))]
pub unsafe fn stamp_values(y: *mut u32, n: u32, value: u32, delay_ns: u64) {
    spin_for(delay_ns);
    let e = i * 128 + thread_idx_x();
    if e < n {
        // SAFETY: e < n.
        unsafe { *y.add(e as usize) = value ^ e };
    }
}

/// The memory-model probe for "plain loads after the acquire see the producer's data":
/// each thread first reads its element of `x` *before* the wait, through a plain load of
/// the same memory (`x_addr`, the address of `x` passed as a value, so the macro does not
/// see the read): that can pull a line holding the previous cycle's data into L1. Then the
/// injected wait (acquire) and a plain load of `x[e]`. Writes both values; a stale read
/// after the acquire would show up as `seen_after[e]` from the previous cycle.
#[megaops::kernel(
    block = 128,
    input(x[n] = [i: 128]),
    tensor(seen_before[n]),
    tensor(seen_after[n]),
)]
pub unsafe fn stale_probe(x: *const u32, x_addr: u64, seen_before: *mut u32, seen_after: *mut u32, n: u32) {
    let e = i * 128 + thread_idx_x();
    let early = x_addr as *const u32;
    // SAFETY: `x_addr` is the address of the n-element `x`; e < n.
    let before = if e < n { unsafe { *early.add(e as usize) } } else { 0 };
    // The wait for `x` is injected here, before the first statement that mentions it.
    // SAFETY: e < n.
    let after = if e < n { unsafe { *x.add(e as usize) } } else { 0 };
    if e < n {
        // SAFETY: e < n, the length of both outputs.
        unsafe {
            *seen_before.add(e as usize) = before;
            *seen_after.add(e as usize) = after;
        }
    }
}

/// `y[i, j] = x[i, j] + x[next, j]` for the `BM` rows of each kernel tile, where `next`
/// is row `i + 1`: with `within_tile = 0` across the kernel tile's last row (into the
/// next data tile of `x`, which this CTA's annotation does not declare and so does not
/// wait for: a race with the producer), with `within_tile = 1` clamped to the tile's own
/// rows (correct). The last row of `x` has no next row and uses itself.
#[megaops::kernel(
    block = 64,
    input(x[m, n] = [pid_m: BM, _]),
    output(y[m, n] = [pid_m: BM, _]),
)]
#[config(BM = 4)]
pub unsafe fn next_row_stencil(x: *const f32, y: *mut f32, m: u32, n: u32, within_tile: u32) {
    let last = if within_tile != 0 {
        (pid_m * BM + BM).min(m) - 1
    } else {
        m - 1
    };
    let mut idx = thread_idx_x();
    while idx < BM * n {
        let (i, j) = (pid_m * BM + idx / n, idx % n);
        if i < m {
            let next = (i + 1).min(last);
            // SAFETY: rows i and next are rows of the m × n tensors, j < n.
            unsafe { *y.add((i * n + j) as usize) = *x.add((i * n + j) as usize) + *x.add((next * n + j) as usize) };
        }
        idx += block_dim_x();
    }
}

/// Copies `x` into `y`, both `m · n` elements (flattened), 256 per kernel tile: a kernel
/// whose annotation computes a size from its parameters (`m * n`, in `u32`).
#[megaops::kernel(block = 256, input(x[m * n] = [i: 256]), output(y[m * n] = [i: 256]))]
pub unsafe fn flat_copy(x: *const f32, y: *mut f32, m: u32, n: u32) {
    let e = i * 256 + thread_idx_x();
    if e < m * n {
        // SAFETY: e < m * n, the length of both tensors.
        unsafe { *y.add(e as usize) = *x.add(e as usize) };
    }
}

/// `y[e] = x[e] + 1` for the 128 elements `e` of each kernel tile, with a spin of
/// `spin_ns` on `%globaltimer` between the input wait and the store (a tight loop on the
/// GPU, [`spin_for`] elsewhere): one link of a kernel chain in which every CTA reads all
/// of `x` and so waits for every data tile of it, as a decode step's GEMV reads its whole
/// input row. Kernel tiling: `x: [_]`, `y: [pid: 128]`.
#[megaops::kernel(block = 128, input(x[n] = [_]), output(y[n] = [pid: 128]))]
pub unsafe fn relay(x: *const f32, y: *mut f32, n: u32, spin_ns: u64) {
    let e = pid * 128 + thread_idx_x();
    // The wait for all of `x` is injected here.
    // SAFETY: e < n, the length of `x`.
    let v = if e < n { unsafe { *x.add(e as usize) } } else { 0.0 };
    if cfg!(target_arch = "nvptx64") {
        // A tight loop: `spin_for`'s microsecond sleeps would overshoot short spins.
        let start = global_timer();
        while global_timer().wrapping_sub(start) < spin_ns {}
    } else {
        spin_for(spin_ns);
    }
    if e < n {
        // SAFETY: e < n, the length of `y`.
        unsafe { *y.add(e as usize) = v + 1.0 };
    }
}
