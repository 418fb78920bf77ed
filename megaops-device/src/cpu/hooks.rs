//! Entry points from device primitives (host build) into the running virtual GPU.
//!
//! Each function acts on the *calling* GPU thread, i.e. the coroutine the virtual GPU is
//! currently running. Calling one outside a kernel running on the CPU backend panics with
//! a message that says so (except [`yield_now`], which then yields the host thread).
//!
//! Hooks that wait ([`barrier`], [`barrier_reduce`], [`warp_exchange`], [`yield_now`],
//! [`sleep`], [`global_timer_ns`], [`wait_until`], [`wait_until_deadline`]) suspend the
//! calling thread's coroutine and let the scheduler run other threads. Misuse that can never work (a barrier id out of range, a lane missing from its
//! own mask, an oversized exchange value) panics in the calling thread, which the virtual
//! GPU reports as [`super::CpuError::KernelPanic`].

use std::any::TypeId;
use std::mem::size_of;
use std::ptr;

use super::barrier::NUM_BARRIERS;
use super::reads::Watch;
use super::thread::{Request, in_kernel, with_current};
use super::wait::site_reached;
use super::warp::{MAX_VALUE_SIZE, WARP_SIZE};
use crate::Dim3;
use crate::sync::{ErrorLog, KernelCtx, TileSync, WaitSite};

/// `%tid` of the calling thread.
pub fn thread_idx() -> Dim3 {
    with_current("thread_idx", |_, t, _| t.tid)
}

/// `%ctaid` of the calling thread's CTA.
pub fn block_idx() -> Dim3 {
    with_current("block_idx", |cta, _, _| cta.block_idx)
}

/// `%ntid`: the block size of the running kernel.
pub fn block_dim() -> Dim3 {
    with_current("block_dim", |cta, _, _| cta.block_dim)
}

/// `%nctaid`: the grid size of the running kernel.
pub fn grid_dim() -> Dim3 {
    with_current("grid_dim", |cta, _, _| cta.grid_dim)
}

/// `bar.sync id[, threads]`: waits until `threads` threads of the CTA (all non-exited
/// threads when `None`) have arrived at barrier `id` (0..16).
///
/// Threads that exit no longer count: a count-less barrier completes once every thread
/// that has not exited is there. All threads of one barrier phase must pass the same
/// `threads` (otherwise the run stops with [`super::CpuError::IllegalSync`]). Memory
/// written before the barrier is visible after it (threads of a CTA run on one host
/// thread).
///
/// # Panics
/// If `id >= 16` or `threads == Some(0)`.
pub fn barrier(id: u32, threads: Option<u32>) {
    assert!(id < NUM_BARRIERS, "bar.sync {id}: barrier ids are 0..{NUM_BARRIERS}");
    assert!(
        threads != Some(0),
        "bar.sync {id}, 0: the thread count must be at least 1"
    );
    with_current("barrier", |_, t, _| {
        t.suspend(Request::Barrier {
            id,
            count: threads,
            pred: None,
        })
    });
}

/// What `bar.red` computes over the predicates of all non-exited threads of the CTA,
/// which all wait as at `bar.sync 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierReduce {
    /// Number of threads whose predicate was true (`bar.red.popc`).
    pub count: u32,
    /// All predicates true (`bar.red.and`).
    pub all: bool,
    /// Some predicate true (`bar.red.or`).
    pub any: bool,
}

/// `bar.red.{popc,and,or}` on barrier 0: waits like `bar.sync 0` and returns the
/// reduction over the predicates of the threads that arrived with one.
pub fn barrier_reduce(pred: bool) -> BarrierReduce {
    with_current("barrier_reduce", |_, t, _| {
        t.suspend(Request::Barrier {
            id: 0,
            count: None,
            pred: Some(pred),
        });
        t.reduce()
    })
}

/// The warp-collective building block: every lane named in `mask` (which must include
/// the caller) contributes `value`; once all of them have arrived, each gets the values
/// of all 32 lanes, indexed by lane. Entries of lanes outside `mask` hold the caller's
/// own `value`. `T` is at most 64 bytes. Shuffles, votes, `match`, `ldmatrix` and
/// `mma.sync` are built on this.
///
/// The lane that completes the mask publishes the values to all lanes of the mask at
/// once. If a lane of `mask` has exited (or lies beyond the block in a partial last
/// warp), the collective can never complete and the run stops with
/// [`super::CpuError::IllegalSync`]; so do lanes that exchange different types under one
/// mask. A mask of the caller alone returns at once.
///
/// # Panics
/// If `mask` does not include the calling lane, or `T` is larger than 64 bytes.
pub fn warp_exchange<T: Copy + 'static>(mask: u32, value: T) -> [T; 32] {
    let size = size_of::<T>();
    assert!(
        size <= MAX_VALUE_SIZE,
        "warp_exchange: a {size}-byte value exceeds the {MAX_VALUE_SIZE}-byte limit"
    );
    with_current("warp_exchange", |_, t, index| {
        let lane = index % WARP_SIZE;
        assert!(
            mask & (1 << lane) != 0,
            "warp_exchange: mask {mask:#010x} does not include the calling lane {lane}"
        );
        let mut out = [value; 32];
        if mask == 1 << lane {
            return out;
        }
        let type_id = TypeId::of::<T>();
        t.suspend(Request::Exchange {
            mask,
            type_id,
            value: (&raw const value).cast(),
            size,
        });
        let data = t
            .take_exchange()
            .expect("a completed warp exchange publishes its values to every lane");
        for (l, slot) in out.iter_mut().enumerate() {
            if mask & (1 << l) != 0 {
                // SAFETY: lane `l` of `mask` deposited a byte copy of a valid `T` (the
                // scheduler checked that every lane of the mask exchanges the same
                // `TypeId`) at `l * size` of `data`, which holds 32 such slots; `T: Copy`,
                // so a byte copy is a valid value.
                *slot = unsafe { ptr::read_unaligned(data.as_ptr().add(l * size).cast::<T>()) };
            }
        }
        out
    })
}

/// Base address and size in bytes of the calling CTA's dynamic shared memory (16-byte
/// aligned, zeroed when the CTA starts; size as given at launch). Valid until the CTA's
/// last thread exits.
pub fn dynamic_shared() -> (*mut u8, usize) {
    with_current("dynamic_shared", |cta, _, _| cta.memory.dynamic())
}

/// The calling CTA's instance of the static shared variable identified by `key` (the
/// address of a per-variable static), allocated zeroed on first use with `size` bytes and
/// `align` alignment. Every CTA has its own instance; all threads of a CTA get the same
/// address.
///
/// # Panics
/// If `align` is not a power of two, or `key` was used before with another size or
/// alignment.
pub fn static_shared(key: *const u8, size: usize, align: usize) -> *mut u8 {
    with_current("static_shared", |cta, _, _| {
        cta.memory
            .static_var(key, size, align)
            .unwrap_or_else(|message| panic!("{message}"))
    })
}

/// A scheduling point: lets other threads run (used by spins on atomics: loads, `cas`,
/// `exch`). Outside a kernel it yields the host thread.
pub fn yield_now() {
    if in_kernel() {
        with_current("yield_now", |_, t, _| t.suspend(Request::Yield));
    } else {
        std::thread::yield_now();
    }
}

/// A scheduling point of a thread that waits on time (`nanosleep`): lets other threads
/// run. While every runnable thread only waits on time and nothing progresses, the
/// virtual clock advances faster (see [`global_timer_ns`]). Outside a kernel it yields the
/// host thread.
pub fn sleep() {
    if in_kernel() {
        with_current("sleep", |_, t, _| t.suspend(Request::Sleep));
    } else {
        std::thread::yield_now();
    }
}

/// `%globaltimer`: nanoseconds of the virtual GPU's clock. Reading it is a scheduling
/// point (as [`sleep`]), so that a loop polling the clock lets the other threads run.
///
/// The clock is virtual and deterministic: it advances by
/// [`super::VgpuConfig::switch_ns`] per coroutine switch and by 1 ns per read; and when a
/// whole round of threads did nothing but wait on time (`nanosleep`, reads of this clock)
/// while nothing progressed, it jumps ahead, by 1 µs after the first such round and by
/// twice as much after each next one (never past the earliest semaphore-wait deadline),
/// so that a kernel that spins 10 s on `%globaltimer` takes a few dozen rounds, not 10⁹
/// switches.
pub fn global_timer_ns() -> u64 {
    with_current("global_timer_ns", |cta, t, _| {
        t.suspend(Request::Sleep);
        let now = cta.clock.get().wrapping_add(1);
        cta.clock.set(now);
        now
    })
}

/// `%smid`: the virtual SM the calling thread's CTA runs on.
pub fn sm_id() -> u32 {
    with_current("sm_id", |cta, _, _| cta.sm)
}

/// The virtual clock without a scheduling point (for the sync runtime's timeouts and
/// tile traces, which must not change the interleaving they record).
pub fn clock_ns() -> u64 {
    clock_now()
}

/// The virtual clock without a scheduling point (for the sync runtime's timeouts).
pub(crate) fn clock_now() -> u64 {
    with_current("clock_now", |cta, _, _| cta.clock.get())
}

/// `%clock64`: a per-SM cycle counter of the virtual GPU. Derived from the virtual clock
/// at 2 cycles per nanosecond (a 2 GHz SM clock), the same on every SM.
pub fn clock64() -> u64 {
    global_timer_ns().wrapping_mul(2)
}

/// Blocks the calling thread until the semaphore reaches its target, i.e.
/// `(*site.sem).wrapping_sub(site.target) as i32 >= 0`, without a timeout: returns `true`
/// then. While blocked, the thread is reported in a [`super::DeadlockReport`] with its
/// site. As [`wait_until_deadline`] with no deadline and no error log.
///
/// # Panics
/// If `site.sem` is null or not aligned for an `i32`.
pub fn wait_until(site: &WaitSite) -> bool {
    wait_until_deadline(site, u64::MAX, std::ptr::null()) == WaitEnd::Reached
}

/// How a [`wait_until_deadline`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// The semaphore reached its target.
    Reached,
    /// The virtual clock reached the deadline first; `value` is the semaphore's value then,
    /// `now` the virtual time.
    TimedOut {
        /// The semaphore's last value.
        value: i32,
        /// Virtual time of the timeout, in ns.
        now: u64,
    },
    /// The abort flag of the error log was raised (another wait failed).
    Aborted,
}

/// Blocks the calling thread until the semaphore reaches its target (as [`wait_until`]),
/// the virtual clock ([`global_timer_ns`]) reaches `deadline_ns`, or the abort flag of
/// `errors` (null: none) is raised, whichever comes first. Of several waits on one error
/// log that time out at the same scheduling point, the first reports
/// [`WaitEnd::TimedOut`] and the others [`WaitEnd::Aborted`] (the first one's report
/// raises the flag). The sync runtime's `wait_input` uses it with the launch's timeout
/// (`LaunchOptions::timeout`), so a missing producer ends in the GPU's timeout record.
///
/// A satisfied wait returns at once, without a switch. A blocked thread costs one load
/// of the semaphore per scheduling round. When no thread can run at all, the run stops
/// with a [`super::DeadlockReport`] at once (no deadline is waited for): the virtual GPU
/// then discards the thread and unwinds its stack (running destructors), so code after
/// that wait never runs.
///
/// `site.sem` must stay a valid, aligned `i32` while the thread waits and until a
/// deadlock report that names it is built; it is read atomically. `errors` is null or a
/// valid error log for as long as the thread waits.
///
/// # Panics
/// If `site.sem` is null or not aligned for an `i32`.
pub fn wait_until_deadline(site: &WaitSite, deadline_ns: u64, errors: *const ErrorLog) -> WaitEnd {
    assert!(
        !site.sem.is_null() && site.sem.is_aligned(),
        "wait_until: semaphore pointer {:p} (tensor#{}[{}]) is null or misaligned",
        site.sem,
        site.tensor_id,
        site.sem_index
    );
    with_current("wait_until", |_, t, _| {
        if site_reached(site) {
            return WaitEnd::Reached;
        }
        t.suspend(Request::Wait {
            site: *site,
            deadline: deadline_ns,
            errors,
        });
        t.wait_end()
    })
}

/// Starts the out-of-tile read check ([`super::VgpuConfig::check_reads`]) of a synchronised
/// input for the calling thread's kernel tile `tile`: from now until its next kernel tile,
/// a [`check_read`] of the input's elements (`elem_size` bytes each, from `data`, shaped
/// by `sync`'s data tiling) outside the data tiles its `wait_input` calls on `sync`
/// covered stops the run with [`super::CpuError::OutOfTileRead`]. `#[megaops::kernel]`'s
/// CPU-backend body calls it for every input at the start of every kernel tile. A no-op
/// when the check is off, for an input without semaphores (complete data), and outside a
/// kernel.
pub fn watch_input(ctx: &KernelCtx, tile: u32, data: *const u8, elem_size: usize, sync: &TileSync) {
    if !sync.is_active() || !in_kernel() {
        return;
    }
    with_current("watch_input", |cta, t, _| {
        if cta.check_reads
            && let Some(w) = Watch::new(ctx.launch_id, tile, data, elem_size, sync)
        {
            t.watch(w, sync);
        }
    });
}

/// Checks a read of `bytes` bytes at `addr` by the calling thread against the inputs it
/// watches ([`watch_input`]): a read of an element outside the data tiles the thread
/// waited for panics the thread, and the run stops with
/// [`super::CpuError::OutOfTileRead`]. A no-op outside a kernel and for addresses outside
/// the watched inputs, and for a read of 0 bytes.
pub fn check_read(addr: *const u8, bytes: usize) {
    if bytes == 0 || !in_kernel() {
        return;
    }
    let bad = with_current("check_read", |_, t, _| {
        let bad = t.bad_read_at(addr as usize, bytes)?;
        t.set_bad_read(bad.clone());
        Some(bad)
    });
    if let Some(bad) = bad {
        panic!("{bad}");
    }
}

/// `trap`: aborts the running kernel with `message`, reported as a kernel failure
/// ([`super::CpuError::KernelPanic`] whose message starts with `kernel trap:`).
pub fn trap(message: &str) -> ! {
    panic!("kernel trap: {message}")
}
