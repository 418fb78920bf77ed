//! Acquire/release message passing between two kernels running at the same time on two
//! streams: the MegaOps signal and wait in miniature.
//!
//! [`mp_producer`] fills `data`, then each CTA signals (`bar.sync`, then one thread
//! `fence.acq_rel.gpu` + `red.release.gpu.add`). [`mp_consumer`] waits (one thread spins on
//! `ld.acquire.gpu` with `nanosleep` back-off and a `%globaltimer` timeout, then
//! `bar.sync`) and checks every word of `data` with L2 loads (`ld.global.cg.v4`). Launch
//! the consumer first (or concurrently) on another stream: it must see all of the data
//! once it sees the flag.

use crate::global_id;
use megaops_device::atomic::{self, Acquire, Gpu, Relaxed, Release};
use megaops_device::fence::{AcqRel, fence};
use megaops_device::memory::ld_global_cg_v4_u32;
use megaops_device::static_shared;
use megaops_device::thread::*;
use megaops_device::time::{global_timer, nanosleep};

/// What [`mp_consumer`] reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpResult {
    /// Largest flag value a consumer CTA saw when it stopped waiting.
    pub seen: i32,
    /// Number of consumer CTAs that gave up waiting.
    pub timeouts: u32,
    /// Longest wait of a consumer CTA, in ns of `%globaltimer`.
    pub waited_ns: u64,
    /// Words of `data` that differed from [`mp_value`].
    pub mismatches: u32,
    /// Words of `data` checked (`consumer CTAs × n` when nothing timed out).
    pub checked: u32,
}

/// The value the producer stores at index `i`.
#[inline(always)]
pub const fn mp_value(i: u32) -> u32 {
    i.wrapping_mul(2_654_435_761) ^ 0x5eed
}

/// Fills `data[0..n]` with [`mp_value`] (grid-stride), after sleeping about `delay_ns`
/// (so that the consumer really waits), then signals: per CTA, after `sync_threads`, thread
/// 0 does `fence(AcqRel, Gpu)` and `red_add(flag, 1, Release, Gpu)`. The flag ends at the
/// number of producer CTAs.
///
/// Launch: any 1-D grid and block; on a different stream than the consumer.
///
/// # Safety
/// `data` holds `n` words, `flag` is a valid word, both in global memory.
pub unsafe fn mp_producer(data: *mut u32, flag: *mut i32, n: u32, delay_ns: u32) {
    let start = global_timer();
    while global_timer().wrapping_sub(start) < delay_ns as u64 {
        nanosleep(1000);
    }
    let stride = block_dim_x() * grid_dim_x();
    let mut i = global_id();
    while i < n {
        // SAFETY: i < n.
        unsafe { data.add(i as usize).write(mp_value(i)) };
        i += stride;
    }
    sync_threads();
    if thread_idx_x() == 0 {
        fence(AcqRel, Gpu);
        // SAFETY: a valid flag word.
        unsafe { atomic::red_add(flag, 1, Release, Gpu) };
    }
}
entry!(mp_producer(data: *mut u32, flag: *mut i32, n: u32, delay_ns: u32));

/// Waits until `*flag >= target` (thread 0 of each CTA: `ld.acquire.gpu` spin with
/// `nanosleep` back-off from 32 ns to 1 µs, giving up after `timeout_ns`), then checks
/// `data[0..n]` (every CTA checks all of it with 16-byte L2 loads) and accumulates into
/// `out`.
///
/// Launch: any 1-D grid and block; `n` a multiple of 4; `out` initialised to
/// `MpResult::default()`.
///
/// # Safety
/// `data` holds `n` words (16-byte aligned), `flag` is a valid word, `out` a valid
/// [`MpResult`], all in global memory.
pub unsafe fn mp_consumer(
    data: *const u32,
    flag: *const i32,
    target: i32,
    n: u32,
    timeout_ns: u64,
    out: *mut MpResult,
) {
    let seen_smem = static_shared!(SEEN: i32);
    if thread_idx_x() == 0 {
        let start = global_timer();
        let mut backoff = 32;
        let (seen, timed_out) = loop {
            // SAFETY: a valid flag word.
            let v = unsafe { atomic::load(flag, Acquire, Gpu) };
            if v >= target {
                break (v, false);
            }
            if global_timer().wrapping_sub(start) > timeout_ns {
                break (v, true);
            }
            nanosleep(backoff);
            backoff = (backoff * 2).min(1024);
        };
        let waited = global_timer().wrapping_sub(start);
        // SAFETY: valid fields of `out`, updated atomically; the shared word is written by
        // this thread only and read after the barrier.
        unsafe {
            atomic::red_max(&raw mut (*out).seen, seen, Relaxed, Gpu);
            atomic::red_max(&raw mut (*out).waited_ns, waited, Relaxed, Gpu);
            if timed_out {
                atomic::red_add(&raw mut (*out).timeouts, 1, Relaxed, Gpu);
            }
            seen_smem.write(if timed_out { -1 } else { seen });
        }
    }
    sync_threads();
    // SAFETY: written before the barrier.
    if unsafe { seen_smem.read() } < 0 {
        return;
    }
    let (mut bad, mut checked) = (0u32, 0u32);
    let mut i = thread_idx_x() * 4;
    while i < n {
        // SAFETY: i + 4 <= n and 16-byte aligned (n and the base are multiples of 4 words).
        let v = unsafe { ld_global_cg_v4_u32(data.add(i as usize)) };
        for (k, &w) in v.iter().enumerate() {
            bad += (w != mp_value(i + k as u32)) as u32;
        }
        checked += 4;
        i += block_dim_x() * 4;
    }
    // SAFETY: valid fields of `out`, updated atomically.
    unsafe {
        atomic::red_add(&raw mut (*out).mismatches, bad, Relaxed, Gpu);
        atomic::red_add(&raw mut (*out).checked, checked, Relaxed, Gpu);
    }
}
entry!(mp_consumer(data: *const u32, flag: *const i32, target: i32, n: u32, timeout_ns: u64, out: *mut MpResult));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// What a correct run reports for `consumer_ctas` consumer CTAs and `producer_ctas`
    /// producer CTAs (except `waited_ns`, which is only bounded by the timeout).
    pub fn mp_result(consumer_ctas: u32, producer_ctas: u32, n: u32, waited_ns: u64) -> MpResult {
        MpResult {
            seen: producer_ctas as i32,
            timeouts: 0,
            waited_ns,
            mismatches: 0,
            checked: consumer_ctas * n,
        }
    }
}
