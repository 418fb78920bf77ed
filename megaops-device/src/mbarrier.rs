//! Shared-memory barriers (`mbarrier`): phase-based barriers of any subset of a CTA's
//! threads, which asynchronous copies can arrive on when they complete. They are what a
//! warp-specialised pipeline runs on: producer threads issue `cp.async` copies into a stage
//! and let the copies arrive on the stage's *full* barrier; consumers wait for its phase,
//! compute, and arrive on the stage's *empty* barrier, which the producer waits for before
//! it refills the stage. Nobody meets at a CTA-wide `bar.sync`.
//!
//! An [`MBarrier`] is 8 bytes of shared memory, 8-byte aligned. [`MBarrier::init`] sets
//! its expected arrival count; a phase completes when that many arrivals happened, and the
//! next phase starts with the same count. A waiter names the phase by its parity
//! ([`MBarrier::wait_parity`]): phase `k` has parity `k % 2`, so a loop over `STAGES`
//! stages waits with parity `(iteration / STAGES) % 2`.
//!
//! Waits on the device are bounded: [`MBarrier::wait_parity`] gives up after
//! [`WAIT_TIMEOUT_NS`] of `%globaltimer` and executes `trap` (the launch then fails with
//! an illegal-instruction error instead of hanging). These barriers only order threads of
//! one CTA that are all running (unlike the tile semaphores of [`crate::sync`], which wait
//! for other kernels and report timeouts in the launch's error log), so a timeout is a bug
//! in the kernel's pipeline, as a mismatched `bar.sync` would be.
//!
//! On the CPU backend the barrier is emulated in its 8 bytes (phase bit, pending and
//! expected counts): copies are synchronous there, so [`MBarrier::arrive_on_copies`]
//! arrives at once, and a wait yields to the other threads until the phase completes (a
//! wait that never completes stops the run with the virtual GPU's hang report).

use crate::shared::SharedPtr;

/// How long [`MBarrier::wait_parity`] waits on the device before it traps: 10 s, far
/// beyond any pipeline stage (microseconds), short enough that a broken pipeline fails.
pub const WAIT_TIMEOUT_NS: u64 = 10_000_000_000;

/// A barrier object in shared memory (`.b64`, 8-byte aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MBarrier(SharedPtr<u64>);

impl MBarrier {
    /// The barrier at `p`.
    ///
    /// # Safety
    /// `p` is 8 bytes of the CTA's shared memory, 8-byte aligned, used only through
    /// [`MBarrier`] while the barrier lives.
    #[inline(always)]
    pub unsafe fn at(p: SharedPtr<u64>) -> Self {
        MBarrier(p)
    }

    /// Initialises the barrier to expect `count` arrivals per phase, in phase 0. One
    /// thread calls it; the others may use the barrier after a CTA barrier
    /// ([`crate::thread::sync_threads`]) that follows the initialisation.
    ///
    /// Emits `mbarrier.init.shared::cta.b64 [addr], count;` (sm_80+).
    ///
    /// # Safety
    /// No thread uses the barrier concurrently; `1 <= count < 2^20`.
    #[inline(always)]
    pub unsafe fn init(self, count: u32) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: the caller's contract; the address is the barrier's shared memory.
            unsafe {
                core::arch::asm!(
                    "mbarrier.init.shared::cta.b64 [{a}], {c};",
                    a = in(reg32) self.0.addr(), c = in(reg32) count, options(nostack),
                )
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            if count == 0 || count >= 1 << 20 {
                crate::cpu::hooks::trap("mbarrier init: count must be in 1..2^20");
            }
            // SAFETY: the barrier's 8 bytes (caller's contract).
            unsafe {
                self.0.write(
                    emulated::State {
                        phase: 0,
                        pending: count,
                        expected: count,
                    }
                    .pack(),
                )
            }
        }
    }

    /// Arrives on the barrier (one of the phase's expected arrivals), with release
    /// semantics at CTA scope: this thread's earlier memory accesses happen before the
    /// accesses of a thread whose wait sees the phase complete.
    ///
    /// Emits `mbarrier.arrive.shared::cta.b64 state, [addr];` (sm_80+).
    ///
    /// # Safety
    /// The barrier was initialised and its current phase still expects an arrival.
    #[inline(always)]
    pub unsafe fn arrive(self) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: the caller's contract.
            unsafe {
                core::arch::asm!(
                    "{{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [{a}]; }}",
                    a = in(reg32) self.0.addr(), options(nostack),
                )
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        // SAFETY: forwarded.
        unsafe {
            self.arrive_emulated()
        }
    }

    /// Makes the completion of all of this thread's earlier `cp.async` copies arrive on the
    /// barrier, without waiting for them (`.noinc`: the arrival counts as one of the
    /// phase's expected arrivals). A thread that waits for the phase then sees the copied
    /// data.
    ///
    /// Emits `cp.async.mbarrier.arrive.noinc.shared::cta.b64 [addr];` (sm_80+). Host: copies
    /// are synchronous, so it arrives at once.
    ///
    /// # Safety
    /// As for [`MBarrier::arrive`].
    #[inline(always)]
    pub unsafe fn arrive_on_copies(self) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: the caller's contract.
            unsafe {
                core::arch::asm!(
                    "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{a}];",
                    a = in(reg32) self.0.addr(), options(nostack),
                )
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        // SAFETY: forwarded.
        unsafe {
            self.arrive_emulated()
        }
    }

    /// Whether the phase of parity `parity` (0 or 1) has completed, i.e. the barrier's
    /// current phase has the other parity; with acquire semantics when it returns `true`.
    /// On sm_90 the hardware may suspend the thread for a while before answering `false`.
    ///
    /// Emits `mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity;` on sm_90a, else
    /// `mbarrier.test_wait.parity.shared::cta.b64` (sm_80+).
    ///
    /// # Safety
    /// The barrier was initialised.
    #[inline(always)]
    pub unsafe fn test_parity(self, parity: u32) -> bool {
        #[cfg(target_arch = "nvptx64")]
        {
            let done: u32;
            // SAFETY: the caller's contract.
            unsafe {
                core::arch::asm!(
                    concat!(
                        "{{ .reg .pred p; ",
                        wait_op!(),
                        ".parity.shared::cta.b64 p, [{a}], {q}; selp.u32 {d}, 1, 0, p; }}"
                    ),
                    a = in(reg32) self.0.addr(), q = in(reg32) parity, d = out(reg32) done, options(nostack),
                )
            }
            done != 0
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: the barrier's 8 bytes (caller's contract).
            let state = emulated::State::unpack(unsafe { self.0.read() });
            state.phase != parity & 1
        }
    }

    /// Waits until the phase of parity `parity` has completed ([`MBarrier::test_parity`]),
    /// then acquires what the arrivals released. Traps after [`WAIT_TIMEOUT_NS`] on the
    /// device; yields to the other threads on the CPU backend.
    ///
    /// # Safety
    /// As for [`MBarrier::test_parity`]; the awaited phase is the current one or the one
    /// before it.
    #[inline(always)]
    pub unsafe fn wait_parity(self, parity: u32) {
        // SAFETY: forwarded.
        if unsafe { self.test_parity(parity) } {
            return;
        }
        // SAFETY: forwarded.
        unsafe { self.wait_slow(parity) }
    }

    #[inline(never)]
    unsafe fn wait_slow(self, parity: u32) {
        #[cfg(target_arch = "nvptx64")]
        {
            let start = crate::time::global_timer();
            // SAFETY: forwarded.
            while !unsafe { self.test_parity(parity) } {
                if crate::time::global_timer().wrapping_sub(start) > WAIT_TIMEOUT_NS {
                    // SAFETY: aborting the kernel is the report (module docs).
                    unsafe { core::arch::nvptx::trap() }
                }
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        // SAFETY: forwarded.
        while !unsafe { self.test_parity(parity) } {
            crate::cpu::hooks::yield_now();
        }
    }

    /// The CPU backend's arrival: threads of a CTA run one at a time between scheduling
    /// points, so the read-modify-write is atomic.
    #[cfg(not(target_arch = "nvptx64"))]
    unsafe fn arrive_emulated(self) {
        // SAFETY: the barrier's 8 bytes (caller's contract).
        let mut state = emulated::State::unpack(unsafe { self.0.read() });
        if state.expected == 0 {
            crate::cpu::hooks::trap("mbarrier arrive: the barrier was not initialised");
        }
        state.arrive();
        // SAFETY: as above.
        unsafe { self.0.write(state.pack()) }
    }
}

/// The wait instruction of the target: `try_wait` (which may suspend the thread) on sm_90a.
#[cfg(all(target_arch = "nvptx64", target_feature = "sm_90a"))]
macro_rules! wait_op {
    () => {
        "mbarrier.try_wait"
    };
}
/// The wait instruction of the target: `test_wait` below sm_90a.
#[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_90a")))]
macro_rules! wait_op {
    () => {
        "mbarrier.test_wait"
    };
}
#[cfg(target_arch = "nvptx64")]
use wait_op;

/// The CPU backend's layout of a barrier's 8 bytes.
#[cfg_attr(target_arch = "nvptx64", allow(dead_code))]
mod emulated {
    /// Phase parity, arrivals still pending in the phase, arrivals per phase.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct State {
        pub(super) phase: u32,
        pub(super) pending: u32,
        pub(super) expected: u32,
    }

    impl State {
        /// `phase` in bit 63, `expected` in bits 32..52, `pending` in bits 0..20.
        pub(super) fn pack(self) -> u64 {
            (self.phase as u64) << 63 | (self.expected as u64) << 32 | self.pending as u64
        }

        pub(super) fn unpack(v: u64) -> Self {
            State {
                phase: (v >> 63) as u32,
                pending: (v & 0xf_ffff) as u32,
                expected: ((v >> 32) & 0xf_ffff) as u32,
            }
        }

        /// One arrival; the last of a phase starts the next one.
        pub(super) fn arrive(&mut self) {
            self.pending -= 1;
            if self.pending == 0 {
                self.phase ^= 1;
                self.pending = self.expected;
            }
        }
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::emulated::State;
    use super::*;

    #[test]
    fn emulated_state_round_trips_and_flips_phase_on_the_last_arrival() {
        let s = State {
            phase: 1,
            pending: 3,
            expected: 0xf_ffff,
        };
        assert_eq!(State::unpack(s.pack()), s);
        let mut s = State {
            phase: 0,
            pending: 2,
            expected: 2,
        };
        s.arrive();
        assert_eq!(
            s,
            State {
                phase: 0,
                pending: 1,
                expected: 2
            }
        );
        s.arrive();
        assert_eq!(
            s,
            State {
                phase: 1,
                pending: 2,
                expected: 2
            }
        );
    }

    #[test]
    fn parity_waits_see_completed_phases_only() {
        let mut word = 0u64;
        // SAFETY: a host word stands in for shared memory outside a kernel; no hook runs
        // on these paths (init with a valid count, arrivals on an initialised barrier).
        unsafe {
            let bar = MBarrier::at(SharedPtr::from_ptr(&mut word));
            bar.init(2);
            assert!(!bar.test_parity(0), "phase 0 not complete after init");
            assert!(bar.test_parity(1), "the phase before phase 0 counts as complete");
            bar.arrive();
            assert!(!bar.test_parity(0));
            bar.arrive_on_copies();
            assert!(bar.test_parity(0), "two arrivals complete phase 0");
            assert!(!bar.test_parity(1), "phase 1 is now pending");
            bar.wait_parity(0);
        }
    }
}
