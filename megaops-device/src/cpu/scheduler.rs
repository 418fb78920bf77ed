//! The scheduler: runs streams, dispatch and GPU threads on the calling host thread.
//!
//! A run alternates *scheduling points* and *rounds*. At a scheduling point the streams
//! advance (host operations run, events complete, kernels become ready and are dispatched
//! — kernels that become ready together are shuffled by the seed), CTAs are placed, and
//! threads blocked on semaphores whose target was reached become runnable. Then, unless
//! the goal of the `synchronize` call is reached, a round gives every CTA with runnable
//! threads a *turn*, the CTAs in a seeded order. A turn is 1 to
//! [`VgpuConfig::cta_slice`] sub-rounds (drawn by the seed); a sub-round resumes each
//! runnable thread of the CTA once, in a seeded order, until its next hook suspends it or
//! it exits. Threads made runnable during a sub-round (barrier and collective releases,
//! yields) run in the next one. Turns keep one CTA's stacks hot in the host's caches:
//! sweeping thousands of stacks per round is memory-bound.
//!
//! When nothing is runnable at a scheduling point and the goal is not reached, no thread
//! can ever run again: the run stops with a [`DeadlockReport`]. A round in which every
//! thread that ran only waited on time (`nanosleep`, `%globaltimer`) and nothing
//! progressed makes the virtual clock jump ahead (by 1 µs, doubling with each such round
//! in a row, never past the earliest semaphore-wait deadline), so time-based spins end
//! and wait timeouts fire in few rounds. A run without progress for too long (switches,
//! virtual time with no wait deadline ahead, wall-clock time) stops with a [`HangReport`].
//! Either way, and on kernel panics, all pending work is discarded.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use corosensei::CoroutineResult;

use super::CpuError;
use super::barrier::{Arrival, Release};
use super::config::VgpuConfig;
use super::cta::{Cta, ThreadState};
use super::dispatch::{Dispatcher, KernelRun};
use super::report::{
    CtaReport, DeadlockReport, HangReport, QueuedKernel, SemaphoreWait, StreamReport, ThreadGroup, ThreadWait,
};
use super::rng::Rng;
use super::stack::{self, StackPool};
use super::stream::{Goal, Queues, Started};
use super::thread::{self, CurrentGuard, Request, ThreadExit};
use super::vgpu::VgpuStats;
use super::wait::{Waiters, semaphore_value};
use super::warp::{Exchange, WARP_SIZE};

/// A GPU thread: CTA slot and linear thread index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ThreadRef {
    cta: u32,
    thread: u32,
}

/// Locks `m`, ignoring poisoning (state is consistent at every unlock point: the
/// scheduler catches kernel and host-operation panics).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Everything a virtual GPU is executing.
pub(crate) struct Engine {
    cfg: VgpuConfig,
    rng: Rng,
    dispatch: Dispatcher,
    /// Resident CTAs by slot (`None`: free slot, listed in `free`).
    ctas: Vec<Option<Cta>>,
    free: Vec<u32>,
    /// CTA slots of the round being run (kept to reuse its allocation).
    order: Vec<u32>,
    waiters: Waiters<ThreadRef>,
    stacks: StackPool,
    clock: Rc<Cell<u64>>,
    /// Streams whose kernel completed since the last scheduling point.
    finished_kernels: Vec<u32>,
    stats: VgpuStats,
    /// Count of progress events (see `VgpuConfig::max_idle_switches`).
    progress: u64,
    idle_switches: u64,
    /// Suspensions of the round being run that were not waits on time
    /// (`Request::Yield`), and those that were (`Request::Sleep`).
    round_yields: u64,
    round_sleeps: u64,
    /// The clock's jump after the last round that only waited on time (0: none).
    skip_ns: u64,
}

/// The virtual clock's first jump after a round that only waited on time (the jump
/// doubles with each such round in a row).
const FIRST_SKIP_NS: u64 = 1_000;

// SAFETY: an `Engine` holds coroutines (their stacks), `Rc`s and raw pointers that are
// only ever touched by the host thread that holds the `Mutex<Engine>` of its
// `VirtualGpu`; none of them is shared with anything outside the engine (the `Rc`s are
// shared only among the engine's own CTAs, coroutines, stacks and stack pool). Moving the
// engine to another host thread between runs is therefore sound, provided kernels keep no
// host thread-local state across hooks (documented on `thread`); the kernel entries
// themselves are `Send + Sync`.
unsafe impl Send for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        // Unwind every thread still resident (work left by a `synchronize_stream` or
        // `synchronize_event`) through the stack pool, which leaks those on a quarantined
        // stack chunk instead, before the pool goes.
        for slot in &mut self.ctas {
            if let Some(mut cta) = slot.take() {
                cta.discard(&mut self.stacks);
            }
        }
    }
}

impl Engine {
    pub(crate) fn new(cfg: VgpuConfig) -> Self {
        Engine {
            rng: Rng::new(cfg.seed),
            dispatch: Dispatcher::new(&cfg),
            ctas: Vec::new(),
            free: Vec::new(),
            order: Vec::new(),
            waiters: Waiters::new(),
            stacks: StackPool::new(cfg.stack_size, cfg.max_resident_threads()),
            clock: Rc::new(Cell::new(0)),
            finished_kernels: Vec::new(),
            stats: VgpuStats::default(),
            progress: 0,
            idle_switches: 0,
            round_yields: 0,
            round_sleeps: 0,
            skip_ns: 0,
            cfg,
        }
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> VgpuStats {
        VgpuStats {
            stacks: self.stacks.allocated(),
            virtual_ns: self.clock.get(),
            ..self.stats
        }
    }

    /// Runs until `goal` is reached. On error, discards all pending work.
    pub(crate) fn run(&mut self, queues: &Mutex<Queues>, goal: &Goal) -> Result<(), CpuError> {
        let started = Instant::now();
        let result = self.run_loop(queues, goal);
        if result.is_err() {
            self.discard(queues);
        }
        self.stats.busy += started.elapsed();
        result
    }

    fn run_loop(&mut self, queues: &Mutex<Queues>, goal: &Goal) -> Result<(), CpuError> {
        let mut seen_progress = self.progress;
        let mut last_progress_at = Instant::now();
        let mut last_progress_clock = self.clock.get();
        loop {
            self.advance_streams(queues)?;
            self.place_ctas(queues)?;
            self.wake_waiters();
            if lock(queues).reached(goal) {
                return Ok(());
            }
            if !self.ctas.iter().flatten().any(|c| !c.runnable.is_empty()) {
                let q = lock(queues);
                let (ctas, queued, streams) = self.snapshot(&q);
                let waits = semaphore_waits(&ctas);
                return Err(CpuError::Deadlock(DeadlockReport {
                    ctas,
                    waits,
                    queued,
                    streams,
                }));
            }
            if self.progress != seen_progress {
                seen_progress = self.progress;
                self.idle_switches = 0;
                self.skip_ns = 0;
                last_progress_clock = self.clock.get();
                if self.cfg.hang_timeout.is_some() {
                    last_progress_at = Instant::now();
                }
            } else if self.round_yields == 0 && self.round_sleeps > 0 {
                // Every thread that ran waited on time and nothing progressed: let time
                // pass faster, up to the next semaphore-wait deadline. Such rounds are
                // limited by virtual time, not by switches.
                self.fast_forward();
                self.idle_switches = 0;
                let idle = self.clock.get().wrapping_sub(last_progress_clock);
                if idle > self.cfg.max_idle_virtual_ns && self.waiters.earliest_deadline().is_none() {
                    let reason = format!(
                        "no progress for {:.1} s of virtual time (max_idle_virtual_ns = {}): threads keep waiting on \
                         time (nanosleep, %globaltimer) but nothing they could wait for changes",
                        idle as f64 * 1e-9,
                        self.cfg.max_idle_virtual_ns
                    );
                    return Err(self.hang(queues, reason));
                }
            }
            if self.progress == seen_progress && self.idle_switches >= self.cfg.max_idle_switches {
                let reason = format!(
                    "no progress in {} coroutine switches (max_idle_switches = {}): threads keep yielding \
                     (spinning on atomics or nanosleep) but nothing they could wait for changes",
                    self.idle_switches, self.cfg.max_idle_switches
                );
                return Err(self.hang(queues, reason));
            } else if self.progress == seen_progress
                && let Some(limit) = self.cfg.hang_timeout
                && last_progress_at.elapsed() > limit
            {
                let reason = format!("no progress for {limit:?} of wall-clock time (hang_timeout)");
                return Err(self.hang(queues, reason));
            }
            self.run_round()?;
        }
    }

    fn hang(&self, queues: &Mutex<Queues>, reason: String) -> CpuError {
        let q = lock(queues);
        let (ctas, queued, streams) = self.snapshot(&q);
        let waits = semaphore_waits(&ctas);
        CpuError::Hang(HangReport {
            reason,
            ctas,
            waits,
            queued,
            streams,
        })
    }

    /// Advances the virtual clock after a round in which every thread only waited on time:
    /// by [`FIRST_SKIP_NS`], doubling with each such round in a row (so a spin of `t` ends
    /// after about `log2(t / 1 µs)` rounds, at most about `2t`), and never past the
    /// earliest semaphore-wait deadline (which then times out exactly).
    fn fast_forward(&mut self) {
        self.skip_ns = if self.skip_ns == 0 {
            FIRST_SKIP_NS
        } else {
            self.skip_ns.saturating_mul(2)
        };
        let now = self.clock.get();
        let mut to = now.saturating_add(self.skip_ns);
        if let Some(deadline) = self.waiters.earliest_deadline() {
            to = to.min(deadline.max(now));
        }
        self.clock.set(to);
    }

    /// Starts every stream operation that can start, in a seeded stream order, until
    /// none can; dispatches the kernels that became ready, in a seeded order.
    fn advance_streams(&mut self, queues: &Mutex<Queues>) -> Result<(), CpuError> {
        let mut q = lock(queues);
        for s in self.finished_kernels.drain(..) {
            q.finish_busy(s);
        }
        let mut ready: Vec<KernelRun> = Vec::new();
        let mut order: Vec<u32> = Vec::new();
        loop {
            let mut progressed = false;
            order.clear();
            order.extend(0..q.num_streams() as u32);
            self.rng.shuffle(&mut order);
            for &s in &order {
                match q.start_head(s) {
                    Started::Nothing => {}
                    Started::Completed => progressed = true,
                    Started::Kernel(k) => {
                        ready.push(k);
                        progressed = true;
                    }
                    Started::Host(op) => {
                        // Host operations may call back into the virtual GPU (launch,
                        // enqueue): run them without the queue lock.
                        drop(q);
                        let outcome = panic::catch_unwind(AssertUnwindSafe(op));
                        q = lock(queues);
                        q.finish_busy(s);
                        self.progress += 1;
                        progressed = true;
                        if let Err(p) = outcome {
                            let stream = q.stream_id(s);
                            return Err(CpuError::HostOpPanic {
                                stream,
                                message: thread::panic_message(p.as_ref()),
                            });
                        }
                    }
                }
            }
            if !progressed {
                break;
            }
        }
        drop(q);
        self.rng.shuffle(&mut ready);
        for k in ready {
            self.dispatch.dispatch(k);
        }
        Ok(())
    }

    /// Places every CTA that fits, in dispatch order; their threads become runnable.
    fn place_ctas(&mut self, queues: &Mutex<Queues>) -> Result<(), CpuError> {
        while let Some(p) = self.dispatch.place_next(&self.cfg, &mut self.rng) {
            if let Some(e) = p.started {
                lock(queues).complete_event(e);
            }
            let Some(k) = self.dispatch.kernel(p.seq) else {
                continue;
            };
            let cta = Cta::new(
                p.seq,
                p.cta,
                p.sm,
                k.grid,
                k.block,
                k.smem,
                Arc::clone(&k.entry),
                Rc::clone(&self.clock),
                self.cfg.check_reads,
            )
            .ok_or_else(|| CpuError::Resource(format!("cannot allocate {} B of shared memory", k.smem)))?;
            let n = cta.size();
            let slot = match self.free.pop() {
                Some(s) => {
                    self.ctas[s as usize] = Some(cta);
                    s
                }
                None => {
                    self.ctas.push(Some(cta));
                    (self.ctas.len() - 1) as u32
                }
            };
            if let Some(Some(cta)) = self.ctas.get_mut(slot as usize) {
                cta.runnable.extend(0..n);
            }
            self.progress += 1;
        }
        Ok(())
    }

    /// Makes the threads whose semaphore wait ended (target reached, deadline passed,
    /// abort raised) runnable.
    fn wake_waiters(&mut self) {
        let ctas = &mut self.ctas;
        let progress = &mut self.progress;
        self.waiters.wake_ready(self.clock.get(), |r, end| {
            if let Some(Some(cta)) = ctas.get_mut(r.cta as usize) {
                cta.info.threads[r.thread as usize].set_wait_end(end);
                cta.slots[r.thread as usize].state = ThreadState::Ready;
                cta.runnable.push(r.thread);
                *progress += 1;
            }
        });
    }

    /// Gives every CTA with runnable threads a turn, in a seeded order.
    fn run_round(&mut self) -> Result<(), CpuError> {
        self.round_yields = 0;
        self.round_sleeps = 0;
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(
            self.ctas
                .iter()
                .enumerate()
                .filter(|(_, c)| c.as_ref().is_some_and(|c| !c.runnable.is_empty()))
                .map(|(slot, _)| slot as u32),
        );
        self.rng.shuffle(&mut order);
        for &slot in &order {
            self.turn(slot)?;
        }
        self.order = order;
        Ok(())
    }

    /// Runs 1 to `cta_slice` sub-rounds of CTA `slot` (fewer if it runs out of runnable
    /// threads or finishes).
    fn turn(&mut self, slot: u32) -> Result<(), CpuError> {
        let sub_rounds = 1 + self.rng.below(self.cfg.cta_slice as usize);
        for _ in 0..sub_rounds {
            let Some(Some(cta)) = self.ctas.get_mut(slot as usize) else {
                return Ok(());
            };
            if cta.runnable.is_empty() {
                return Ok(());
            }
            let mut batch = std::mem::take(&mut cta.batch);
            batch.clear();
            std::mem::swap(&mut batch, &mut cta.runnable);
            self.rng.shuffle(&mut batch);
            for &thread in &batch {
                self.step(ThreadRef { cta: slot, thread })?;
            }
            // The CTA may have finished (its slot is not reused before the next
            // scheduling point); otherwise keep the buffer.
            if let Some(Some(cta)) = self.ctas.get_mut(slot as usize) {
                cta.batch = batch;
            }
        }
        Ok(())
    }

    /// Resumes thread `r` until it suspends or exits, then carries out its request.
    fn step(&mut self, r: ThreadRef) -> Result<(), CpuError> {
        let Some(Some(cta)) = self.ctas.get_mut(r.cta as usize) else {
            return Ok(());
        };
        let slot = &mut cta.slots[r.thread as usize];
        let co = match &mut slot.co {
            Some(co) => co,
            none => {
                let stack = self.stacks.take()?;
                none.insert(thread::spawn(
                    stack,
                    Rc::clone(&cta.info),
                    r.thread,
                    Arc::clone(&cta.entry),
                ))
            }
        };
        // The check after the resume reads a line the thread never touches: fetch it while
        // the thread runs.
        stack::prefetch_canary_top(cta.info.threads[r.thread as usize].stack_floor());
        let result = {
            let _current = CurrentGuard::enter(&cta.info, r.thread);
            co.resume(())
        };
        self.stats.switches += 1;
        self.idle_switches += 1;
        self.clock.set(self.clock.get().wrapping_add(self.cfg.switch_ns));
        // Check the stack before anything else runs (see `stack`): after a suspension, and
        // as an exited thread's stack goes back to the pool. An overflow stops the run.
        match result {
            CoroutineResult::Yield(request) => {
                let ctx = &cta.info.threads[r.thread as usize];
                // SAFETY: the thread's coroutine is in `slot.co`, alive and suspended.
                if !unsafe { ctx.stack_intact_at_suspend() } {
                    if let Some(co) = slot.co.take() {
                        thread::leak(co, ctx.stack_floor(), &mut self.stacks);
                    }
                    return Err(self.stack_overflow(r));
                }
                self.on_request(r, request)
            }
            CoroutineResult::Return(exit) => {
                if let Some(co) = slot.co.take()
                    && !self.stacks.put(co.into_stack())
                {
                    return Err(self.stack_overflow(r));
                }
                self.on_exit(r, exit)
            }
        }
    }

    /// The error for thread `r`, whose stack overflowed (its chunk is quarantined by now).
    fn stack_overflow(&self, r: ThreadRef) -> CpuError {
        let Some(Some(cta)) = self.ctas.get(r.cta as usize) else {
            return CpuError::Resource("stack overflow in a kernel thread of a finished CTA".into());
        };
        CpuError::StackOverflow {
            kernel: kernel_name(&self.dispatch, cta.seq),
            block: cta.info.block_idx,
            thread: cta.info.threads[r.thread as usize].tid,
            stack_size: self.cfg.stack_size,
        }
    }

    fn on_request(&mut self, r: ThreadRef, request: Request) -> Result<(), CpuError> {
        let Some(Some(cta)) = self.ctas.get_mut(r.cta as usize) else {
            return Ok(());
        };
        let t = r.thread as usize;
        match request {
            Request::Yield => {
                self.round_yields += 1;
                cta.runnable.push(r.thread);
            }
            Request::Sleep => {
                self.round_sleeps += 1;
                cta.runnable.push(r.thread);
            }
            Request::Wait { site, deadline, errors } => {
                cta.slots[t].state = ThreadState::Waiting(site);
                self.waiters.push(r, site, deadline, errors);
            }
            Request::Barrier { id, count, pred } => match cta.barriers.arrive(id, r.thread, count, pred, cta.live) {
                Ok(Arrival::Wait) => cta.slots[t].state = ThreadState::Barrier(id),
                Ok(Arrival::Release(rel)) => {
                    release(cta, rel);
                    self.progress += 1;
                }
                Err(message) => return Err(illegal(&self.dispatch, cta, r.thread, message)),
            },
            Request::Exchange {
                mask,
                type_id,
                value,
                size,
            } => {
                // SAFETY: `value` points to the `size` bytes of the suspended thread's
                // argument to `warp_exchange`, which stays on its stack while it is
                // suspended — it is suspended now, and the bytes are copied here. They are
                // viewed as `MaybeUninit<u8>` because the value may contain padding.
                let bytes = unsafe { std::slice::from_raw_parts(value.cast::<MaybeUninit<u8>>(), size) };
                let (warp, lane) = (r.thread / WARP_SIZE, r.thread % WARP_SIZE);
                match cta.warps.arrive(warp, lane, mask, type_id, bytes) {
                    Ok(Exchange::Wait) => cta.slots[t].state = ThreadState::Exchange(mask),
                    Ok(Exchange::Complete { data }) => {
                        for l in (0..WARP_SIZE).filter(|l| mask & (1 << l) != 0) {
                            let thread = warp * WARP_SIZE + l;
                            cta.info.threads[thread as usize].set_exchange(Rc::clone(&data));
                            cta.slots[thread as usize].state = ThreadState::Ready;
                            cta.runnable.push(thread);
                        }
                        self.progress += 1;
                    }
                    Err(message) => return Err(illegal(&self.dispatch, cta, r.thread, message)),
                }
            }
        }
        Ok(())
    }

    fn on_exit(&mut self, r: ThreadRef, exit: ThreadExit) -> Result<(), CpuError> {
        let Some(Some(cta)) = self.ctas.get_mut(r.cta as usize) else {
            return Ok(());
        };
        if let Err(message) = exit {
            let ctx = &cta.info.threads[r.thread as usize];
            if let Some(mut read) = ctx.take_bad_read() {
                read.kernel = kernel_name(&self.dispatch, cta.seq);
                read.block = cta.info.block_idx;
                read.thread = ctx.tid;
                return Err(CpuError::OutOfTileRead(read));
            }
            return Err(CpuError::KernelPanic {
                kernel: kernel_name(&self.dispatch, cta.seq),
                block: cta.info.block_idx,
                thread: cta.info.threads[r.thread as usize].tid,
                message,
            });
        }
        cta.slots[r.thread as usize].state = ThreadState::Exited;
        cta.live -= 1;
        self.progress += 1;
        self.stats.threads += 1;
        if let Err(message) = cta.warps.thread_exited(r.thread / WARP_SIZE, r.thread % WARP_SIZE) {
            return Err(illegal(&self.dispatch, cta, r.thread, message));
        }
        for rel in cta.barriers.thread_exited(cta.live) {
            release(cta, rel);
        }
        if cta.live == 0 {
            self.finish_cta(r.cta);
        }
        Ok(())
    }

    /// Frees a CTA whose threads all exited; completes its kernel after its last CTA.
    fn finish_cta(&mut self, slot: u32) {
        let Some(cta) = self.ctas.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        self.free.push(slot);
        self.stats.ctas += 1;
        if let Some(k) = self.dispatch.cta_finished(cta.seq, cta.sm) {
            self.stats.kernels += 1;
            self.finished_kernels.push(k.stream.index);
        }
    }

    /// Unwinds every resident thread and forgets all pending work.
    fn discard(&mut self, queues: &Mutex<Queues>) {
        for slot in &mut self.ctas {
            if let Some(mut cta) = slot.take() {
                cta.discard(&mut self.stacks);
            }
        }
        self.ctas.clear();
        self.free.clear();
        self.order.clear();
        self.waiters.clear();
        self.dispatch.clear();
        self.finished_kernels.clear();
        self.idle_switches = 0;
        self.skip_ns = 0;
        lock(queues).discard_all();
    }

    /// Where every resident CTA's threads are, the kernels waiting for SM room and the
    /// streams whose work cannot start.
    fn snapshot(&self, q: &Queues) -> (Vec<CtaReport>, Vec<QueuedKernel>, Vec<StreamReport>) {
        let mut ctas: Vec<CtaReport> = self.ctas.iter().flatten().map(|c| self.cta_report(c)).collect();
        ctas.sort_by_key(|c| (c.launch, c.cta));
        let queued = self
            .dispatch
            .queued()
            .map(|k| QueuedKernel {
                kernel: k.name.clone(),
                launch: k.seq,
                stream: k.stream,
                ctas: k.ctas,
                placed: k.placed,
                threads_per_cta: k.threads_per_cta,
                smem: k.smem,
            })
            .collect();
        let streams = q
            .blocked_streams()
            .into_iter()
            .map(|(stream, state)| StreamReport { stream, state })
            .collect();
        (ctas, queued, streams)
    }

    fn cta_report(&self, cta: &Cta) -> CtaReport {
        let mut groups: Vec<ThreadGroup> = Vec::new();
        for (t, slot) in cta.slots.iter().enumerate() {
            let t = t as u32;
            let wait = match slot.state {
                ThreadState::Exited => continue,
                ThreadState::Ready => ThreadWait::Runnable,
                ThreadState::Waiting(site) => ThreadWait::Semaphore {
                    site,
                    value: semaphore_value(&site),
                },
                ThreadState::Barrier(id) => {
                    let (arrived, expected) = cta.barriers.progress(id, cta.live);
                    ThreadWait::Barrier { id, arrived, expected }
                }
                ThreadState::Exchange(mask) => {
                    let warp = t / WARP_SIZE;
                    ThreadWait::Collective {
                        warp,
                        mask,
                        arrived: cta.warps.arrived(warp, mask),
                    }
                }
            };
            match groups.iter_mut().find(|g| g.wait == wait) {
                Some(g) => g.threads.push(t),
                None => groups.push(ThreadGroup { threads: vec![t], wait }),
            }
        }
        groups.sort_by_key(|g| match g.wait {
            ThreadWait::Semaphore { .. } => 0,
            ThreadWait::Collective { .. } => 1,
            ThreadWait::Barrier { .. } => 2,
            _ => 3,
        });
        CtaReport {
            kernel: kernel_name(&self.dispatch, cta.seq),
            launch: cta.seq,
            block: cta.info.block_idx,
            cta: cta.linear,
            sm: cta.sm,
            groups,
        }
    }
}

/// The semaphore waits among `ctas`, one per CTA and site.
fn semaphore_waits(ctas: &[CtaReport]) -> Vec<SemaphoreWait> {
    let mut waits = Vec::new();
    for c in ctas {
        for g in &c.groups {
            if let ThreadWait::Semaphore { site, value } = g.wait {
                waits.push(SemaphoreWait {
                    kernel: c.kernel.clone(),
                    block: c.block,
                    threads: g.threads.len() as u32,
                    site,
                    value,
                });
            }
        }
    }
    waits
}

/// Makes the threads a barrier released runnable, with its `bar.red` result.
fn release(cta: &mut Cta, rel: Release) {
    for t in rel.threads {
        cta.info.threads[t as usize].set_reduce(rel.result);
        cta.slots[t as usize].state = ThreadState::Ready;
        cta.runnable.push(t);
    }
}

fn kernel_name(dispatch: &Dispatcher, seq: u64) -> String {
    dispatch
        .kernel(seq)
        .map_or_else(|| format!("launch #{seq}"), |k| k.name.clone())
}

fn illegal(dispatch: &Dispatcher, cta: &Cta, thread: u32, message: String) -> CpuError {
    CpuError::IllegalSync {
        kernel: kernel_name(dispatch, cta.seq),
        block: cta.info.block_idx,
        thread: cta.info.threads[thread as usize].tid,
        message,
    }
}
