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

/// Spins `ns` on `%globaltimer`: a tight loop on the GPU (`spin_for`'s microsecond sleeps
/// would overshoot short spins), [`spin_for`] elsewhere.
#[inline(always)]
pub fn spin_tight(ns: u64) {
    if cfg!(target_arch = "nvptx64") {
        let start = global_timer();
        while global_timer().wrapping_sub(start) < ns {}
    } else {
        spin_for(ns);
    }
}

/// `y[e] = x[e] + 1` for the 128 elements `e` of each kernel tile, with a spin of
/// `pre_spin_ns` before the input wait (work that does not depend on `x`) and one of
/// `spin_ns` between the wait and the store ([`spin_tight`]): one link of a kernel chain
/// in which every CTA reads all of `x` and so waits for every data tile of it, as a
/// decode step's GEMV reads its whole input row. Kernel tiling: `x: [_]`, `y: [pid: 128]`.
#[megaops::kernel(block = 128, input(x[n] = [_]), output(y[n] = [pid: 128]))]
pub unsafe fn relay(x: *const f32, y: *mut f32, n: u32, pre_spin_ns: u64, spin_ns: u64) {
    let e = pid * 128 + thread_idx_x();
    spin_tight(pre_spin_ns);
    // The wait for all of `x` is injected here.
    // SAFETY: e < n, the length of `x`.
    let v = if e < n { unsafe { *x.add(e as usize) } } else { 0.0 };
    spin_tight(spin_ns);
    if e < n {
        // SAFETY: e < n, the length of `y`.
        unsafe { *y.add(e as usize) = v + 1.0 };
    }
}

/// How [`pingpong`]'s hops wait and signal: a poll mode plus a signal mode.
pub mod hop {
    /// Poll with `ld.relaxed.gpu`, `nanosleep` back-off 32 → 128 ns between misses, then
    /// `fence.acq_rel.gpu` (the runtime's wait with no poll spin).
    pub const POLL_SLEEP: u32 = 0;
    /// Poll with `ld.relaxed.gpu` and no sleep, then `fence.acq_rel.gpu`.
    pub const POLL_SPIN: u32 = 1;
    /// Poll with `ld.acquire.gpu` and no sleep (no fence after).
    pub const POLL_ACQUIRE: u32 = 2;
    /// Poll modes.
    pub const POLLS: [u32; 3] = [POLL_SLEEP, POLL_SPIN, POLL_ACQUIRE];
    /// Signal with `fence.acq_rel.gpu` then `red.relaxed.gpu.add` (the runtime's signal).
    pub const SIGNAL_FENCE_RED: u32 = 0;
    /// Signal with `red.release.gpu.add`.
    pub const SIGNAL_RED_RELEASE: u32 = 1 << 2;
    /// Signal with `st.release.gpu` of the new count.
    pub const SIGNAL_ST_RELEASE: u32 = 2 << 2;
    /// Signal modes.
    pub const SIGNALS: [u32; 3] = [SIGNAL_FENCE_RED, SIGNAL_RED_RELEASE, SIGNAL_ST_RELEASE];

    /// A readable name of `variant`.
    pub fn name(variant: u32) -> &'static str {
        match (variant & 3, variant & !3) {
            (POLL_SLEEP, SIGNAL_FENCE_RED) => "sleep poll, fence + red",
            (POLL_SLEEP, SIGNAL_RED_RELEASE) => "sleep poll, red.release",
            (POLL_SLEEP, SIGNAL_ST_RELEASE) => "sleep poll, st.release",
            (POLL_SPIN, SIGNAL_FENCE_RED) => "spin poll, fence + red",
            (POLL_SPIN, SIGNAL_RED_RELEASE) => "spin poll, red.release",
            (POLL_SPIN, SIGNAL_ST_RELEASE) => "spin poll, st.release",
            (POLL_ACQUIRE, SIGNAL_FENCE_RED) => "acquire poll, fence + red",
            (POLL_ACQUIRE, SIGNAL_RED_RELEASE) => "acquire poll, red.release",
            (POLL_ACQUIRE, SIGNAL_ST_RELEASE) => "acquire poll, st.release",
            _ => "unknown",
        }
    }
}

/// Waits until `*flag >= target` as [`hop`] mode `poll` says (every thread polls).
///
/// # Safety
/// `flag` is a valid device `i32`.
#[inline(always)]
unsafe fn hop_wait(flag: *const i32, target: i32, poll: u32) {
    use megaops::device::atomic::{self, Acquire, Gpu, Relaxed};
    use megaops::device::fence::fence;
    let mut backoff = 32;
    // SAFETY (every load): the caller's contract.
    if poll == hop::POLL_ACQUIRE {
        while unsafe { atomic::load(flag, Acquire, Gpu) } < target {}
        return;
    }
    while unsafe { atomic::load(flag, Relaxed, Gpu) } < target {
        if poll == hop::POLL_SLEEP {
            nanosleep(backoff);
            backoff = (backoff * 2).min(128);
        }
    }
    fence(megaops::device::atomic::AcqRel, Gpu);
}

/// Two CTAs that hand 128 floats back and forth `rounds` times with hand-written waits
/// and signals of [`hop`] mode `variant` (poll mode | signal mode), as one kernel
/// boundary does: wait for the other CTA's flag, read its 128 values, write 128 of its
/// own, `bar.sync`, signal. `flags` (two counters, zero at the start) and `data` (256
/// floats) are the CTAs' mailboxes; `elapsed[0]` receives CTA 0's `%globaltimer` time of
/// all rounds (ns, low 32 bits), so one hop costs `elapsed / (2 · rounds)`. From zeroed `data`, CTA 0's half
/// ends as `2 · rounds - 1` and CTA 1's as `2 · rounds`.
#[megaops::kernel(block = 128, tiles(pid = 2), tensor(flags[2]), tensor(data[256]), tensor(elapsed[1]))]
pub unsafe fn pingpong(flags: *mut i32, data: *mut f32, elapsed: *mut u32, rounds: u32, variant: u32) {
    use megaops::device::atomic::{self, AcqRel, Gpu, Relaxed, Release};
    use megaops::device::fence::fence;
    use megaops::device::thread::sync_threads;
    let me = pid.min(1);
    let other = 1 - me;
    let t = thread_idx_x();
    let start = global_timer();
    for r in 0..rounds {
        // CTA 0 goes first; CTA 1 answers each of its hops.
        let target = r as i32 + me as i32;
        // SAFETY: flags has two counters; data has 256 floats, t < 128.
        unsafe {
            hop_wait(flags.add(other as usize), target, variant & 3);
            let v = *data.add((other * 128 + t) as usize);
            *data.add((me * 128 + t) as usize) = v + 1.0;
        }
        sync_threads();
        if t == 0 {
            let mine = unsafe { flags.add(me as usize) };
            // SAFETY: mine is one of the two counters.
            unsafe {
                match variant & !3 {
                    hop::SIGNAL_RED_RELEASE => atomic::red_add(mine, 1, Release, Gpu),
                    hop::SIGNAL_ST_RELEASE => atomic::store(mine, r as i32 + 1, Release, Gpu),
                    _ => {
                        fence(AcqRel, Gpu);
                        atomic::red_add(mine, 1, Relaxed, Gpu)
                    }
                }
            }
        }
    }
    if me == 0 && t == 0 {
        // SAFETY: elapsed holds one u32.
        unsafe { *elapsed = global_timer().wrapping_sub(start) as u32 };
    }
}
