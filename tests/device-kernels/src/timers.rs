//! `%globaltimer`, `%clock64`, `nanosleep`, and every fence.

use megaops_device::fence::*;
use megaops_device::thread::*;
use megaops_device::time::*;

/// Words (`u64`) [`fences_and_timers`] writes per CTA.
pub const TIMER_WORDS: usize = 4;

/// Thread 0 of each CTA reads `%globaltimer` and `%clock64`, sleeps about `sleep_ns`
/// (`nanosleep` until the global timer has advanced that much, at most 1000 rounds),
/// executes every fence (`fence.acq_rel`/`fence.sc` at `cta`/`gpu`/`sys`,
/// `__threadfence*`, `fence.proxy.async.shared::cta`), reads both clocks again and writes
/// `[t0, t1, c0, c1]` to `out[4·cta..]`. Check with [`reference::check_timers`].
///
/// Launch: any 1-D grid and block. `out`: four `u64` per CTA.
///
/// # Safety
/// `out` is valid for the writes above.
pub unsafe fn fences_and_timers(out: *mut u64, sleep_ns: u32) {
    if thread_idx_x() != 0 {
        return;
    }
    let (t0, c0) = (global_timer(), clock64());
    let mut rounds = 0;
    while global_timer().wrapping_sub(t0) < sleep_ns as u64 && rounds < 1000 {
        nanosleep(sleep_ns / 4 + 1);
        rounds += 1;
    }
    fence(AcqRel, Cta);
    fence(AcqRel, Gpu);
    fence(AcqRel, Sys);
    fence(Sc, Cta);
    fence(Sc, Gpu);
    fence(Sc, Sys);
    threadfence_block();
    threadfence();
    threadfence_system();
    fence_proxy_async_shared_cta();
    let (t1, c1) = (global_timer(), clock64());
    for (i, w) in [t0, t1, c0, c1].into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(block_idx_x() as usize * TIMER_WORDS + i).write(w) };
    }
}
entry!(fences_and_timers(out: *mut u64, sleep_ns: u32));

/// CPU checks.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// Checks what [`fences_and_timers`] wrote: the global timer advanced by at least
    /// `sleep_ns / 2` (it has microsecond-ish resolution) and by less than a second, the
    /// cycle counter advanced, and all CTAs read timers within a second of each other.
    pub fn check_timers(out: &[u64], sleep_ns: u32) -> Result<(), String> {
        let first = out.chunks(TIMER_WORDS).map(|c| c[0]).min().unwrap_or(0);
        for (cta, c) in out.chunks(TIMER_WORDS).enumerate() {
            let (t0, t1, c0, c1) = (c[0], c[1], c[2], c[3]);
            let dt = t1.wrapping_sub(t0);
            if dt < sleep_ns as u64 / 2 || dt > 1_000_000_000 {
                return Err(format!(
                    "CTA {cta}: global timer advanced {dt} ns over a {sleep_ns} ns sleep"
                ));
            }
            if c1 <= c0 {
                return Err(format!("CTA {cta}: clock64 did not advance ({c0} -> {c1})"));
            }
            if t0 - first > 1_000_000_000 {
                return Err(format!("CTA {cta}: started {} ns after the first", t0 - first));
            }
        }
        Ok(())
    }
}
