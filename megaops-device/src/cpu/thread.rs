//! GPU threads as coroutines, and the thread-local "current thread" the hooks answer for.
//!
//! Every GPU thread runs the kernel entry on its own stackful coroutine. The scheduler
//! resumes one at a time on the host thread that called `synchronize`; before each resume
//! it points the host thread's [`CURRENT`] at the thread's CTA and index, so that
//! [`super::hooks`] know whom they serve. A hook that must wait *suspends* the coroutine
//! with a [`Request`] that the scheduler carries out; results (a `bar.red` reduction, the
//! values of a warp exchange) come back through the thread's [`ThreadCtx`].
//!
//! A kernel must not keep host thread-local state across a hook: between `synchronize`
//! calls the suspended threads may continue on another host thread.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::rc::Rc;

use corosensei::{Coroutine, Yielder};

use super::cta::CtaInfo;
use super::hooks::{BarrierReduce, WaitEnd};
use super::reads::{TileRead, Watch};
use super::stack::{self, ArenaStack, StackPool};
use super::vgpu::KernelEntry;
use crate::Dim3;
use crate::sync::{ErrorLog, WaitSite};

/// Why a thread suspended: what the scheduler must do before resuming it.
pub(crate) enum Request {
    /// Resume whenever (spins on atomics).
    Yield,
    /// Resume whenever, after a wait on time (`nanosleep`, a read of the clock): rounds in
    /// which every thread only waits on time and nothing progresses advance the virtual
    /// clock faster (see the scheduler).
    Sleep,
    /// Arrive at a CTA barrier; `pred` is the `bar.red` contribution.
    Barrier {
        id: u32,
        count: Option<u32>,
        pred: Option<bool>,
    },
    /// Join a warp collective with the `size` bytes of a `type_id` value at `value`, which
    /// stays valid while the thread is suspended.
    Exchange {
        mask: u32,
        type_id: TypeId,
        value: *const u8,
        size: usize,
    },
    /// Block until the semaphore reaches its target, the virtual clock reaches
    /// `deadline` (a timeout), or the abort flag of `errors` (null: none) is raised.
    Wait {
        site: WaitSite,
        deadline: u64,
        errors: *const ErrorLog,
    },
}

/// How a thread's entry ended: normally, or with a panic message.
pub(crate) type ThreadExit = Result<(), String>;

/// The coroutine of one GPU thread.
pub(crate) type ThreadCoroutine = Coroutine<(), Request, ThreadExit, ArenaStack>;

/// Per-thread state the hooks read, shared between the coroutine and the scheduler
/// (interior mutability only; never borrowed mutably).
pub(crate) struct ThreadCtx {
    pub(crate) tid: Dim3,
    yielder: Cell<*const Yielder<(), Request>>,
    /// Stack pointer of the thread's last suspension (0: none yet).
    sp: Cell<usize>,
    /// The lowest address its stack may use (the top of the stack's canary; 0: no stack).
    floor: Cell<usize>,
    reduce: Cell<BarrierReduce>,
    exchange: Cell<Option<Rc<[MaybeUninit<u8>]>>>,
    /// How the thread's last semaphore wait ended.
    wait_end: Cell<WaitEnd>,
    /// The synchronised inputs of the thread's current kernel tile, for the out-of-tile
    /// read check (empty when it is off).
    watches: RefCell<Vec<Watch>>,
    /// The out-of-tile read the thread panicked for, if any.
    bad_read: Cell<Option<Box<TileRead>>>,
}

impl ThreadCtx {
    pub(crate) fn new(tid: Dim3) -> Self {
        ThreadCtx {
            tid,
            yielder: Cell::new(ptr::null()),
            sp: Cell::new(0),
            floor: Cell::new(0),
            reduce: Cell::new(BarrierReduce {
                count: 0,
                all: true,
                any: false,
            }),
            exchange: Cell::new(None),
            wait_end: Cell::new(WaitEnd::Reached),
            watches: RefCell::new(Vec::new()),
            bad_read: Cell::new(None),
        }
    }

    /// Suspends the calling thread (which must be this one) with `request`; returns once
    /// the scheduler resumes it. If the virtual GPU discards the thread instead, this
    /// unwinds (corosensei's forced unwind) and never returns.
    pub(crate) fn suspend(&self, request: Request) {
        let yielder = self.yielder.get();
        assert!(
            !yielder.is_null(),
            "megaops cpu backend: a thread suspended before its coroutine started"
        );
        // Where the stack stands, for the scheduler's overflow check (a local's address: the
        // suspension itself goes only a few words deeper).
        let here = 0u8;
        self.sp.set(std::hint::black_box(&here) as *const u8 as usize);
        // SAFETY: the coroutine body stores its `Yielder` here before running the entry;
        // the `Yielder` lives at the base of the coroutine's stack for the coroutine's
        // whole life, and this runs on that coroutine (the scheduler only makes a thread
        // `CURRENT` while resuming its own coroutine).
        unsafe { (*yielder).suspend(request) }
    }

    /// Whether the thread's stack looks intact after a suspension: the suspending frame
    /// lies above the stack's floor and the top line of its canary is intact (see
    /// [`super::stack`]).
    ///
    /// # Safety
    /// The thread's coroutine (which owns its stack) is alive and suspended.
    pub(crate) unsafe fn stack_intact_at_suspend(&self) -> bool {
        let floor = self.floor.get();
        // SAFETY: `floor` is the floor of the stack the thread's coroutine owns (set by
        // `spawn`), alive and suspended by the caller's contract; the scheduler, the only
        // caller, runs no coroutine while checking.
        self.sp.get() >= floor && unsafe { stack::canary_top_intact(floor) }
    }

    /// The floor of the thread's stack (0: it never ran).
    pub(crate) fn stack_floor(&self) -> usize {
        self.floor.get()
    }

    /// Stores the `bar.red` result for this thread.
    pub(crate) fn set_reduce(&self, r: BarrierReduce) {
        self.reduce.set(r);
    }

    /// The `bar.red` result of the last barrier this thread passed.
    pub(crate) fn reduce(&self) -> BarrierReduce {
        self.reduce.get()
    }

    /// Stores the published values of a completed warp exchange for this thread.
    pub(crate) fn set_exchange(&self, data: Rc<[MaybeUninit<u8>]>) {
        self.exchange.set(Some(data));
    }

    /// Stores how the thread's semaphore wait ended.
    pub(crate) fn set_wait_end(&self, end: WaitEnd) {
        self.wait_end.set(end);
    }

    /// How the thread's last semaphore wait ended.
    pub(crate) fn wait_end(&self) -> WaitEnd {
        self.wait_end.get()
    }

    /// Starts watching reads of an input for this kernel tile (replacing the watch of an
    /// earlier tile of the same input).
    pub(crate) fn watch(&self, w: Watch, sync: &crate::sync::TileSync) {
        let mut watches = self.watches.borrow_mut();
        watches.retain(|old| !old.is_for(sync));
        watches.push(w);
    }

    /// Records that a wait on `sync` covered `tiles`.
    pub(crate) fn record_waited(&self, sync: &crate::sync::TileSync, tiles: &crate::sync::tiling::TileBox) {
        for w in self.watches.borrow_mut().iter_mut().filter(|w| w.is_for(sync)) {
            w.add_waited(tiles);
        }
    }

    /// The out-of-tile read a read of `bytes` at `addr` would be, if it is one.
    pub(crate) fn bad_read_at(&self, addr: usize, bytes: usize) -> Option<TileRead> {
        let watches = self.watches.borrow();
        watches
            .iter()
            .find_map(|w| w.unwaited(addr, bytes).map(|(e, t)| w.report(e, t)))
    }

    /// Records the out-of-tile read the thread is about to panic for.
    pub(crate) fn set_bad_read(&self, r: TileRead) {
        self.bad_read.set(Some(Box::new(r)));
    }

    /// The out-of-tile read the thread panicked for, if that is why it did.
    pub(crate) fn take_bad_read(&self) -> Option<Box<TileRead>> {
        self.bad_read.take()
    }

    /// Takes the published values of the warp exchange this thread just completed.
    pub(crate) fn take_exchange(&self) -> Option<Rc<[MaybeUninit<u8>]>> {
        self.exchange.take()
    }
}

/// Which GPU thread the host thread is running now.
#[derive(Clone, Copy)]
struct Current {
    cta: *const CtaInfo,
    thread: u32,
}

thread_local! {
    /// The GPU thread running on this host thread (null `cta` outside a kernel).
    static CURRENT: Cell<Current> = const { Cell::new(Current { cta: ptr::null(), thread: 0 }) };
    /// Set while this host thread runs a scheduler (kernels or host operations).
    static SCHEDULING: Cell<bool> = const { Cell::new(false) };
}

/// Marks GPU thread `thread` of `cta` as current until dropped.
pub(crate) struct CurrentGuard(());

impl CurrentGuard {
    pub(crate) fn enter(cta: &CtaInfo, thread: u32) -> Self {
        CURRENT.with(|c| c.set(Current { cta, thread }));
        CurrentGuard(())
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            c.set(Current {
                cta: ptr::null(),
                thread: 0,
            })
        });
    }
}

/// Runs `f` with the current GPU thread's CTA and context; panics when the host thread
/// is not running a kernel on a virtual GPU (`hook` names the hook in the message).
///
/// Reads the thread-local once, before `f`: after a suspension inside `f` the coroutine
/// may continue on another host thread, so `f` must use the references it was given.
#[inline(never)]
pub(crate) fn with_current<R>(hook: &str, f: impl FnOnce(&CtaInfo, &ThreadCtx, u32) -> R) -> R {
    let cur = CURRENT.with(Cell::get);
    assert!(
        !cur.cta.is_null(),
        "megaops cpu backend: hooks::{hook} called outside a kernel running on a VirtualGpu"
    );
    // SAFETY: `CURRENT` points at the `CtaInfo` of the GPU thread being resumed; its
    // coroutine holds an `Rc` to it, so it outlives this call (including suspensions).
    let cta = unsafe { &*cur.cta };
    f(cta, &cta.threads[cur.thread as usize], cur.thread)
}

/// Whether the calling host thread is running a GPU thread now.
pub(crate) fn in_kernel() -> bool {
    !CURRENT.with(Cell::get).cta.is_null()
}

/// Marks the host thread as running a scheduler until dropped; `None` if it already is
/// (a `synchronize` from inside a kernel or a host operation).
pub(crate) struct SchedulingGuard(());

impl SchedulingGuard {
    pub(crate) fn enter() -> Option<Self> {
        if in_kernel() || SCHEDULING.with(Cell::get) {
            return None;
        }
        SCHEDULING.with(|s| s.set(true));
        Some(SchedulingGuard(()))
    }
}

impl Drop for SchedulingGuard {
    fn drop(&mut self) {
        SCHEDULING.with(|s| s.set(false));
    }
}

/// The coroutine of thread `thread` of `cta`, running `entry` on `stack`. A panic in the
/// entry is caught and becomes the coroutine's `Err` result.
pub(crate) fn spawn(stack: ArenaStack, cta: Rc<CtaInfo>, thread: u32, entry: KernelEntry) -> ThreadCoroutine {
    let ctx = &cta.threads[thread as usize];
    ctx.floor.set(stack.floor());
    ctx.sp.set(0);
    Coroutine::with_stack(stack, move |yielder: &Yielder<(), Request>, ()| {
        cta.threads[thread as usize].yielder.set(yielder);
        // A forced unwind (the thread being discarded) is caught here too; its result is
        // then ignored by corosensei.
        panic::catch_unwind(AssertUnwindSafe(|| entry())).map_err(|p| panic_message(p.as_ref()))
    })
}

/// Unwinds thread `thread` of `cta` if it is suspended (running its destructors, with it
/// current) and returns its stack to `pool` — or, when its stack's chunk is quarantined
/// after an overflow, leaks it without running it again (see [`super::stack`]).
pub(crate) fn discard(mut co: ThreadCoroutine, cta: &CtaInfo, thread: u32, pool: &mut StackPool) {
    let floor = cta.threads[thread as usize].stack_floor();
    if pool.poisoned_at(floor) {
        leak(co, floor, pool);
        return;
    }
    {
        let _current = CurrentGuard::enter(cta, thread);
        co.force_unwind();
    }
    // A clobbered canary quarantines the chunk; the run is being discarded anyway.
    pool.put(co.into_stack());
}

/// Leaks a thread's coroutine, whose stack (with floor `floor`) may be clobbered, without
/// running it again, and quarantines the stack's chunk.
pub(crate) fn leak(co: ThreadCoroutine, floor: usize, pool: &mut StackPool) {
    pool.abandon(floor);
    std::mem::forget(co);
}

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
