//! The virtual GPU's host API: streams, launches, host operations, events, synchronize.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::CpuError;
use super::config::VgpuConfig;
use super::dispatch::KernelRun;
use super::report::Xyz;
use super::scheduler::{Engine, lock};
use super::stream::{EventId, Goal, Op, Queues, StreamId};
use super::thread::SchedulingGuard;
use crate::Dim3;

/// The body every GPU thread of a launch runs, once, on its own coroutine.
pub type KernelEntry = Arc<dyn Fn() + Send + Sync>;

/// A kernel launch on the CPU backend.
#[derive(Clone)]
pub struct CpuLaunch {
    /// Kernel name, used in errors and reports.
    pub name: String,
    /// Grid size in CTAs (`%nctaid`).
    pub grid: Dim3,
    /// Block size in threads (`%ntid`).
    pub block: Dim3,
    /// Dynamic shared memory per CTA in bytes.
    pub dynamic_smem: usize,
    /// What every thread runs; inside it the [`super::hooks`] answer for that thread.
    pub entry: KernelEntry,
}

impl CpuLaunch {
    /// A launch of `entry` on `grid × block` threads, without dynamic shared memory.
    pub fn new(name: impl Into<String>, grid: Dim3, block: Dim3, entry: impl Fn() + Send + Sync + 'static) -> Self {
        CpuLaunch {
            name: name.into(),
            grid,
            block,
            dynamic_smem: 0,
            entry: Arc::new(entry),
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per CTA.
    pub fn with_dynamic_smem(mut self, bytes: usize) -> Self {
        self.dynamic_smem = bytes;
        self
    }
}

impl fmt::Debug for CpuLaunch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuLaunch")
            .field("name", &self.name)
            .field("grid", &self.grid)
            .field("block", &self.block)
            .field("dynamic_smem", &self.dynamic_smem)
            .finish_non_exhaustive()
    }
}

/// Counters of a virtual GPU since it was created (updated when a `synchronize*` call
/// returns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VgpuStats {
    /// Kernels completed.
    pub kernels: u64,
    /// CTAs completed.
    pub ctas: u64,
    /// GPU threads that ran to completion.
    pub threads: u64,
    /// Coroutine switches (resumes of a GPU thread).
    pub switches: u64,
    /// Wall-clock time spent in the scheduler.
    pub busy: Duration,
    /// Coroutine stacks allocated: bounded by [`VgpuConfig::max_resident_threads`], plus
    /// the stacks abandoned after a [`CpuError::StackOverflow`].
    pub stacks: u64,
    /// The virtual clock ([`super::hooks::global_timer_ns`]) in nanoseconds.
    pub virtual_ns: u64,
}

impl VgpuStats {
    fn per_second(&self, n: u64) -> f64 {
        let s = self.busy.as_secs_f64();
        if s > 0.0 { n as f64 / s } else { 0.0 }
    }

    /// Coroutine switches per second of scheduler time.
    pub fn switches_per_second(&self) -> f64 {
        self.per_second(self.switches)
    }

    /// GPU threads completed per second of scheduler time.
    pub fn threads_per_second(&self) -> f64 {
        self.per_second(self.threads)
    }

    /// CTAs completed per second of scheduler time.
    pub fn ctas_per_second(&self) -> f64 {
        self.per_second(self.ctas)
    }
}

/// A virtual GPU: runs kernels on the host, several kernels resident at once on `sms`
/// virtual SMs, their threads as cooperatively scheduled coroutines (see the [`super`]
/// module docs for the model).
///
/// Submitting work (`launch`, `enqueue`, events) only queues it and may be done from any
/// host thread, also from inside a host operation or a kernel. Work runs inside the
/// `synchronize*` calls, on the calling host thread, deterministically for a given
/// [`VgpuConfig::seed`] and sequence of calls. A run that fails (kernel panic, deadlock,
/// hang) discards all pending work; the virtual GPU then accepts new work.
pub struct VirtualGpu {
    id: u64,
    cfg: VgpuConfig,
    queues: Mutex<Queues>,
    engine: Mutex<Engine>,
    stats: Mutex<VgpuStats>,
}

static NEXT_GPU: AtomicU64 = AtomicU64::new(1);

impl VirtualGpu {
    /// A virtual GPU of shape `cfg`.
    ///
    /// # Panics
    /// If `cfg` is invalid (see [`VgpuConfig::validate`]); [`VirtualGpu::try_new`] returns
    /// the error instead.
    pub fn new(cfg: VgpuConfig) -> Arc<Self> {
        match Self::try_new(cfg) {
            Ok(gpu) => gpu,
            Err(e) => panic!("{e}"),
        }
    }

    /// A virtual GPU of shape `cfg`, or why `cfg` is invalid.
    pub fn try_new(cfg: VgpuConfig) -> Result<Arc<Self>, CpuError> {
        cfg.validate()?;
        let id = NEXT_GPU.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(VirtualGpu {
            id,
            queues: Mutex::new(Queues::new(id)),
            engine: Mutex::new(Engine::new(cfg.clone())),
            stats: Mutex::new(VgpuStats::default()),
            cfg,
        }))
    }

    /// Its shape and limits.
    pub fn config(&self) -> &VgpuConfig {
        &self.cfg
    }

    /// A new, empty stream.
    pub fn create_stream(&self) -> StreamId {
        lock(&self.queues).create_stream()
    }

    /// Checks `launch` against the device limits and enqueues it on `stream`.
    ///
    /// Errors (naming the kernel and the limit) for an empty grid or block, a block of
    /// more than `max_threads_per_cta` threads or beyond CUDA's per-dimension limits, more
    /// than `max_smem_per_cta` bytes of dynamic shared memory, or a stream of another
    /// virtual GPU.
    pub fn launch(&self, stream: StreamId, launch: CpuLaunch) -> Result<(), CpuError> {
        self.enqueue_kernel(stream, launch, |_| (None, ()))
    }

    /// [`VirtualGpu::launch`], returning an event that completes once every CTA of the
    /// kernel has been placed on an SM (begun), the CPU backend's launch-completion event:
    /// a stream that waits for it lets later kernels take SMs only after this one has all
    /// of its own.
    ///
    /// # Panics
    /// If `stream` belongs to another virtual GPU.
    pub fn launch_with_start_event(&self, stream: StreamId, launch: CpuLaunch) -> Result<EventId, CpuError> {
        self.enqueue_kernel(stream, launch, |q| {
            let event = q.new_event(stream);
            (Some(event.index), event)
        })
    }

    /// Validates and enqueues `launch`; `start` makes its start event, if any, and what
    /// the caller gets back.
    fn enqueue_kernel<T>(
        &self,
        stream: StreamId,
        launch: CpuLaunch,
        start: impl FnOnce(&mut Queues) -> (Option<u64>, T),
    ) -> Result<T, CpuError> {
        validate_launch(&self.cfg, &launch)?;
        let mut q = lock(&self.queues);
        if !q.owns(stream) {
            return Err(self.foreign(stream));
        }
        let seq = q.next_launch();
        let CpuLaunch {
            name,
            grid,
            block,
            dynamic_smem,
            entry,
        } = launch;
        let kernel = KernelRun {
            seq,
            name,
            stream,
            grid,
            block,
            threads_per_cta: block.volume() as u32,
            smem: dynamic_smem,
            entry,
            ctas: grid.volume(),
            placed: 0,
            finished: 0,
            started: None,
        };
        let (started, out) = start(&mut q);
        q.push(stream, Op::Kernel(KernelRun { started, ..kernel }));
        Ok(out)
    }

    /// Enqueues a host operation (a memcpy or memset of the host runtime) on `stream`: it
    /// runs on the scheduling host thread when everything before it on the stream has
    /// completed. A panic in it stops the run with [`CpuError::HostOpPanic`].
    ///
    /// # Panics
    /// If `stream` belongs to another virtual GPU.
    pub fn enqueue(&self, stream: StreamId, op: Box<dyn FnOnce() + Send>) {
        let mut q = lock(&self.queues);
        self.assert_owns(&q, stream);
        q.push(stream, Op::Host(op));
    }

    /// Records an event on `stream`: it completes when everything enqueued on the stream
    /// before it has.
    ///
    /// # Panics
    /// If `stream` belongs to another virtual GPU.
    pub fn record_event(&self, stream: StreamId) -> EventId {
        let mut q = lock(&self.queues);
        self.assert_owns(&q, stream);
        let event = q.new_event(stream);
        q.push(stream, Op::Record(event.index));
        event
    }

    /// Makes the work enqueued on `stream` from now on wait until `event` completed.
    ///
    /// # Panics
    /// If `stream` or `event` belongs to another virtual GPU.
    pub fn stream_wait_event(&self, stream: StreamId, event: EventId) {
        let mut q = lock(&self.queues);
        self.assert_owns(&q, stream);
        assert!(
            q.owns_event(event),
            "megaops cpu backend: {event} does not belong to this virtual GPU"
        );
        q.push(stream, Op::Wait(event.index));
    }

    /// Whether `event` has completed (`false` for an event of another virtual GPU). The
    /// events of discarded work count as completed.
    pub fn event_complete(&self, event: EventId) -> bool {
        let q = lock(&self.queues);
        q.owns_event(event) && q.event_complete(event.index)
    }

    /// Runs until everything enqueued so far, on every stream, has completed.
    pub fn synchronize(&self) -> Result<(), CpuError> {
        self.run(|q| Ok(q.goal_all()))
    }

    /// Runs until everything enqueued so far on `stream` has completed (other streams
    /// progress meanwhile, and may be left mid-way).
    pub fn synchronize_stream(&self, stream: StreamId) -> Result<(), CpuError> {
        self.run(|q| {
            if q.owns(stream) {
                Ok(q.goal_stream(stream))
            } else {
                Err(self.foreign(stream))
            }
        })
    }

    /// Runs until `event` has completed.
    pub fn synchronize_event(&self, event: EventId) -> Result<(), CpuError> {
        self.run(|q| {
            if q.owns_event(event) {
                Ok(Goal::Event(event.index))
            } else {
                Err(CpuError::UnknownId(format!(
                    "{event} does not belong to this virtual GPU"
                )))
            }
        })
    }

    /// Counters as of the end of the last `synchronize*` call.
    pub fn stats(&self) -> VgpuStats {
        *lock(&self.stats)
    }

    fn run(&self, goal: impl FnOnce(&Queues) -> Result<Goal, CpuError>) -> Result<(), CpuError> {
        let Some(_scheduling) = SchedulingGuard::enter() else {
            return Err(CpuError::Reentrant);
        };
        let mut engine = lock(&self.engine);
        let goal = goal(&lock(&self.queues))?;
        let result = engine.run(&self.queues, &goal);
        *lock(&self.stats) = engine.stats();
        result
    }

    fn foreign(&self, stream: StreamId) -> CpuError {
        CpuError::UnknownId(format!("{stream} does not belong to this virtual GPU"))
    }

    fn assert_owns(&self, q: &Queues, stream: StreamId) {
        assert!(
            q.owns(stream),
            "megaops cpu backend: {stream} does not belong to this virtual GPU"
        );
    }
}

impl fmt::Debug for VirtualGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualGpu")
            .field("id", &self.id)
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// CUDA's per-dimension limits.
const MAX_BLOCK_Z: u32 = 64;
const MAX_GRID_X: u32 = i32::MAX as u32;
const MAX_GRID_YZ: u32 = 65535;

fn validate_launch(cfg: &VgpuConfig, l: &CpuLaunch) -> Result<(), CpuError> {
    let fail = |message: String| {
        Err(CpuError::InvalidLaunch {
            kernel: l.name.clone(),
            message,
        })
    };
    let threads = l.block.volume();
    if threads == 0 {
        return fail(format!(
            "block {} is empty (every dimension must be at least 1)",
            Xyz(l.block)
        ));
    }
    if l.grid.volume() == 0 {
        return fail(format!(
            "grid {} is empty (every dimension must be at least 1)",
            Xyz(l.grid)
        ));
    }
    if threads > cfg.max_threads_per_cta as u64 {
        return fail(format!(
            "block {} has {threads} threads, more than max_threads_per_cta = {}",
            Xyz(l.block),
            cfg.max_threads_per_cta
        ));
    }
    if l.block.z > MAX_BLOCK_Z {
        return fail(format!(
            "block {}: z = {} exceeds CUDA's limit of {MAX_BLOCK_Z}",
            Xyz(l.block),
            l.block.z
        ));
    }
    if l.grid.x > MAX_GRID_X || l.grid.y > MAX_GRID_YZ || l.grid.z > MAX_GRID_YZ {
        return fail(format!(
            "grid {} exceeds CUDA's limits (x ≤ {MAX_GRID_X}, y and z ≤ {MAX_GRID_YZ})",
            Xyz(l.grid)
        ));
    }
    if l.dynamic_smem > cfg.max_smem_per_cta {
        return fail(format!(
            "{} B of dynamic shared memory, more than max_smem_per_cta = {} B",
            l.dynamic_smem, cfg.max_smem_per_cta
        ));
    }
    Ok(())
}
