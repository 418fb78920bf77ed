//! [`AsyncStream`]: MegaOps kernels on several CUDA streams, round-robin, with no
//! barrier between dependent kernels (paper §2.3).
//!
//! Looks like one stream from outside. Inside:
//! - **Ordering** between dependent MegaOps kernels comes only from data-tile semaphores.
//!   Plain (unsynchronised) tensors get stream-level ordering automatically: a kernel that
//!   reads a plain tensor written on another stream waits for that writer's event, and a
//!   kernel that overwrites a buffer waits for earlier readers and writers on other
//!   streams (for `Tiled` outputs: the readers of the previous cycle). So mixing MegaOps
//!   kernels with unadapted ones is safe by default.
//! - **Deadlock freedom**: each launch is held until the previous one (on another stream)
//!   has begun, so earlier kernels always get SMs first. [`BeginRule`] says how: a wait
//!   kernel on the same stream that spins until the previous launch's `kernel_begin_cta`
//!   raised the begin flag (launched programmatically under
//!   [`BeginRule::Programmatic`]), or a stream wait for the previous launch's start event
//!   (every CTA begun). A launch after a subkernel (`crate::subkernel`) is held until its
//!   chunks are done ([`SubkernelHold`]).
//! - **Memory**: buffers a kernel uses stay alive until the event recorded after that
//!   kernel completes (or as long as a captured graph), so nothing is reused while a kernel
//!   that uses it may still run. With N streams round-robin, at most N kernels are in
//!   flight (each stream is in order).
//! - **Graphs**: [`AsyncStream::capture`] records a whole multi-stream program (fork/join)
//!   into a replayable [`Graph`]; semaphores are re-armed by epochs and restored at the
//!   end of each replay.
//! - **No-overlap mode** ([`AsyncStream::serial`]) runs the very same kernels on one
//!   stream, for ablations.

mod capture;
mod graph;
mod hazards;

pub use graph::Graph;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::launch::{LaunchTarget, PreparedLaunch, TiledHandle};
use crate::mutex::lock;
use crate::notes::LaunchNote;
use crate::order::{self, TargetKey};
use crate::partition::SmPartition;
use crate::runtime;
use crate::stream::{Event, Stream};
use crate::tensor::Tensor;
use crate::tiled::TiledState;
use graph::SemaphoreRestore;
use hazards::Hazards;
use std::sync::{Arc, Mutex};

/// Several streams that run MegaOps kernels with tile-level overlap.
pub struct AsyncStream {
    device: Device,
    streams: Vec<Stream>,
    partition: Option<SmPartition>,
    /// The two streams of the greatest priority that run subkernels' chunks round-robin.
    side: [Stream; 2],
    /// A subkernel has used the side streams: from then on they take part in barriers,
    /// synchronisation, interop waits and graph fork/join like the other streams.
    side_used: std::sync::atomic::AtomicBool,
    overlap: bool,
    begin_wait: bool,
    begin_rule: BeginRule,
    subkernel_hold: SubkernelHold,
    one_chunk_on_lane: bool,
    flag: Tensor<i32>,
    inner: Mutex<Inner>,
    key: TargetKey,
}

/// How an [`AsyncStream`] is built.
#[derive(Clone, Debug)]
pub struct AsyncOptions {
    /// Streams launches are spread over, round-robin (≥ 1).
    pub streams: usize,
    /// False: the no-overlap mode (one stream, kernel barriers).
    pub overlap: bool,
    /// The deadlock-freedom rule: hold each launch until the previous one started a CTA.
    /// Only an experiment that demonstrates the deadlock turns it off.
    pub begin_wait: bool,
    /// Give launches with `LaunchOptions::on_partition` a green context of this many SMs.
    pub partition_sms: Option<u32>,
    /// How the deadlock-freedom rule holds a launch back (`None`: the device's,
    /// [`Device::begin_rule`]).
    pub begin_rule: Option<BeginRule>,
    /// How a launch on another stream after a subkernel is held until the subkernel's
    /// chunks are done.
    pub subkernel_hold: SubkernelHold,
    /// Whether a subkernel of one chunk whose stream signals its data tiles
    /// (`crate::subkernel::ChunkSignals::SideStream`; runs of consecutive semaphores by
    /// one memset each) runs on the launch's own stream, right after its proxy there
    /// (stream order lets it go: no go flag, no fork to and join from the side streams),
    /// instead of on a side stream (`None`: the device's, [`Device::one_chunk_on_lane`]).
    /// Other subkernels always use the side streams.
    pub one_chunk_on_lane: Option<bool>,
}

/// How a launch after a subkernel (`crate::subkernel`; held until every chunk is done) is
/// held on a GPU. The CPU backend always uses the wait kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SubkernelHold {
    /// The wait kernel of [`AsyncOptions::begin_rule`] (resident on an SM while the chunks
    /// run; it sees the begin flag at once).
    #[default]
    WaitKernel,
    /// A stream memory operation waiting for the begin flag (`cuStreamWaitValue32`): no
    /// SM while the chunks run. The token always comes (the chunks end and the proxy's
    /// waits time out), so the operation needs no timeout of its own.
    StreamWait,
}

/// How an overlapping [`AsyncStream`] holds each launch until the previous one (on another
/// stream) has begun, so that earlier kernels always get SMs first (paper §2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BeginRule {
    /// A one-CTA wait kernel (`megaops_wait_begin`) before the launch, on its stream,
    /// spins until the previous launch's `kernel_begin_cta` raised the begin flag: its
    /// first CTA or its last, as that launch's `LaunchOptions::release_next` says.
    WaitKernel,
    /// Every eager launch is made with a start event (`cuLaunchKernelEx` with
    /// `CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT`: complete once all its CTAs have
    /// begun), and the next launch's stream waits for it: no wait kernel, and the
    /// release point is always the previous launch's last CTA. Launches inside a graph
    /// capture use the wait kernel.
    StartEvent,
    /// The wait kernel, with programmatic dependent launch (sm_90 and later) on each
    /// stream: the wait kernel is launched programmatically after the kernel before it
    /// there (which lets it start once all its CTAs have begun, in `kernel_begin_cta`),
    /// so it is resident while that kernel runs; it waits for the begin flag, then for
    /// the work before it on its stream to end (`griddepcontrol.wait`), then lets the
    /// held launch start, which is launched programmatically after it and waits for it in
    /// turn. Stream order still holds (a kernel starts its body only after everything
    /// before it on its stream ended); what goes is the launch latency after each end.
    /// Where programmatic launch is not available (the CPU backend, an older GPU or PTX
    /// below sm_90), and for a subkernel's proxy, under profiling and after a subkernel,
    /// the launches are ordinary: the same as [`BeginRule::WaitKernel`]. The default.
    #[default]
    Programmatic,
}

impl BeginRule {
    /// Every rule, in [`BeginRule::index`] order.
    pub const ALL: [BeginRule; 3] = [BeginRule::WaitKernel, BeginRule::StartEvent, BeginRule::Programmatic];

    /// `wait-kernel`, `start-event` or `programmatic`.
    pub fn name(self) -> &'static str {
        match self {
            BeginRule::WaitKernel => "wait-kernel",
            BeginRule::StartEvent => "start-event",
            BeginRule::Programmatic => "programmatic",
        }
    }

    /// The rule named `s` (see [`BeginRule::name`]).
    pub fn parse(s: &str) -> Result<BeginRule> {
        BeginRule::ALL.into_iter().find(|r| r.name() == s).ok_or_else(|| {
            Error::Invalid(format!(
                "unknown begin rule `{s}`: expected `wait-kernel`, `start-event` or `programmatic`"
            ))
        })
    }

    /// Its position in [`BeginRule::ALL`].
    pub fn index(self) -> u8 {
        self as u8
    }

    /// The rule at `i` of [`BeginRule::ALL`] (the default past the end).
    pub fn from_index(i: u8) -> BeginRule {
        BeginRule::ALL.get(i as usize).copied().unwrap_or_default()
    }
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            streams: 2,
            overlap: true,
            begin_wait: true,
            partition_sms: None,
            begin_rule: None,
            subkernel_hold: SubkernelHold::default(),
            one_chunk_on_lane: None,
        }
    }
}

#[derive(Default)]
struct Inner {
    launches: u64,
    token: i32,
    /// The previous launch.
    prev: Option<PrevLaunch>,
    /// Start events whose launches may not be done yet.
    started: Vec<StartedLaunch>,
    hazards: Hazards,
    capture: Option<Capture>,
    /// While profiling: the spans of the launches made so far.
    profile: Option<Vec<LaunchSpan>>,
    /// Every launch records its tiles in the device's trace log.
    tracing: bool,
    /// Lanes whose last launch was a subkernel's proxy (its side streams joined back in):
    /// the next wait kernel there is launched ordinarily under [`BeginRule::Programmatic`].
    after_side: Vec<usize>,
}

/// What the next launch may have to wait for.
struct PrevLaunch {
    /// Its stream index.
    stream: usize,
    /// The begin token it raises ([`BeginRule::WaitKernel`]).
    token: i32,
    kernel: &'static str,
    /// Its start event ([`BeginRule::StartEvent`]).
    started: Option<Arc<Event>>,
    /// A subkernel's proxy: it raises its token once every chunk is done.
    subkernel: bool,
}

/// A start event kept alive until its launch is done: the driver triggers it when the
/// launch's CTAs begin, so it must not be destroyed before then.
struct StartedLaunch {
    /// The launch's completion event.
    done: Arc<Event>,
    _started: Arc<Event>,
    /// Made inside a graph capture (a capture-time object only: dropped when the capture
    /// ends).
    captured: bool,
}

/// One launch as the profiler saw it ([`AsyncStream::set_profiling`]): timing events on
/// its stream right before the kernel (after the waits that hold it back) and right
/// after it.
pub struct LaunchSpan {
    /// The kernel.
    pub kernel: &'static str,
    /// Its PTX entry (names the config).
    pub entry: &'static str,
    /// CTAs of the launch.
    pub ctas: u32,
    /// The call site's name for it ([`LaunchOptions::site`](crate::LaunchOptions)).
    pub site: Option<&'static str>,
    /// Index of the stream it ran on (the partition's stream is the last).
    pub stream: usize,
    /// Recorded before the kernel.
    pub start: Event,
    /// Recorded after the kernel.
    pub end: Event,
}

/// A capture in progress.
struct Capture {
    /// Semaphore restores: the tensor's state before the capture touched it.
    touched: Vec<(TiledHandle, TiledState)>,
}

impl AsyncStream {
    /// An AsyncStream over `streams` CUDA streams (≥ 1) on `device`.
    pub fn new(device: &Device, streams: usize) -> Result<AsyncStream> {
        Self::with_options(
            device,
            AsyncOptions {
                streams,
                ..AsyncOptions::default()
            },
        )
    }

    /// No-overlap mode: the same kernels on one stream, one after the other (kernel
    /// barriers), without wait kernels. For ablations.
    pub fn serial(device: &Device) -> Result<AsyncStream> {
        Self::with_options(
            device,
            AsyncOptions {
                streams: 1,
                overlap: false,
                ..AsyncOptions::default()
            },
        )
    }

    /// An AsyncStream built from `opts`.
    pub fn with_options(device: &Device, opts: AsyncOptions) -> Result<AsyncStream> {
        if opts.streams == 0 {
            return Err(Error::Invalid("an AsyncStream needs at least one stream".into()));
        }
        let n = if opts.overlap { opts.streams } else { 1 };
        let streams = (0..n).map(|_| Stream::new(device)).collect::<Result<Vec<_>>>()?;
        let partition = opts
            .partition_sms
            .map(|sms| SmPartition::new(device, sms))
            .transpose()?;
        let side = [Stream::with_priority(device)?, Stream::with_priority(device)?];
        Ok(AsyncStream {
            device: device.clone(),
            streams,
            partition,
            side,
            side_used: Default::default(),
            overlap: opts.overlap,
            begin_wait: opts.begin_wait,
            begin_rule: opts.begin_rule.unwrap_or_else(|| device.begin_rule()),
            subkernel_hold: opts.subkernel_hold,
            one_chunk_on_lane: opts.one_chunk_on_lane.unwrap_or_else(|| device.one_chunk_on_lane()),
            flag: Tensor::zeros(device, &[1])?,
            inner: Mutex::new(Inner::default()),
            key: TargetKey::fresh(),
        })
    }

    /// Whether a subkernel has run chunks on the side streams so far (one-chunk
    /// subkernels on the launch's own stream, [`AsyncOptions::one_chunk_on_lane`], do
    /// not).
    pub fn side_streams_used(&self) -> bool {
        self.side_used.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The SM partition, if the AsyncStream has one.
    pub fn partition(&self) -> Option<&SmPartition> {
        self.partition.as_ref()
    }

    /// Stream number `i`: the round-robin ones, then the partition's.
    fn stream(&self, i: usize) -> &Stream {
        match (i < self.streams.len(), &self.partition) {
            (false, Some(p)) => p.stream(),
            _ => &self.streams[i.min(self.streams.len() - 1)],
        }
    }

    /// How reports name lane `i`: `stream #4 (lane 1 of AsyncStream #2)`.
    fn lane_name(&self, i: usize) -> String {
        let lane = if i < self.streams.len() {
            format!("lane {i}")
        } else {
            "the SM partition".to_string()
        };
        format!("stream #{} ({lane} of AsyncStream #{})", self.stream(i).id(), self.id())
    }

    /// The number error reports call this AsyncStream by (`AsyncStream #2`).
    pub fn id(&self) -> u64 {
        self.key.number()
    }

    /// Every stream in use: the round-robin ones, the partition's, and the subkernels' side
    /// streams once a subkernel used them.
    fn all_streams(&self) -> impl Iterator<Item = &Stream> {
        let side = if self.side_used.load(std::sync::atomic::Ordering::Acquire) {
            &self.side[..]
        } else {
            &[]
        };
        self.streams
            .iter()
            .chain(self.partition.iter().map(SmPartition::stream))
            .chain(side.iter())
    }

    /// Every stream, side streams included whether or not they were used yet (a capture
    /// keeps the buffers of each).
    fn streams_and_side(&self) -> impl Iterator<Item = &Stream> {
        self.streams
            .iter()
            .chain(self.partition.iter().map(SmPartition::stream))
            .chain(self.side.iter())
    }

    /// Number of streams.
    pub fn num_streams(&self) -> usize {
        self.streams.len()
    }

    /// True unless this is the no-overlap mode.
    pub fn overlaps(&self) -> bool {
        self.overlap
    }

    /// How launches are held until the previous one has begun.
    pub fn begin_rule(&self) -> BeginRule {
        self.begin_rule
    }

    /// The underlying streams.
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// Makes all later MegaOps work wait for everything queued so far on `other`
    /// (interop: unadapted kernels produced something MegaOps kernels read).
    pub fn wait_on(&self, other: &Stream) -> Result<()> {
        let e = other.record_marker()?;
        self.all_streams().try_for_each(|s| s.wait_event(&e))
    }

    /// Makes `other` wait for everything queued so far on this AsyncStream (interop:
    /// unadapted kernels read what MegaOps kernels produced).
    pub fn block(&self, other: &Stream) -> Result<()> {
        for s in self.all_streams() {
            other.wait_event(&s.record_marker()?)?;
        }
        Ok(())
    }

    /// Starts (`true`) or stops collecting a [`LaunchSpan`] for every launch; starting
    /// drops what was collected. Works for eager launches and inside a capture (the
    /// events are then graph nodes, recorded at every replay). Only a GPU's events time
    /// ([`Event::elapsed_ms`]).
    pub fn set_profiling(&self, on: bool) {
        lock(&self.inner).profile = on.then(Vec::new);
    }

    /// Turns tile tracing on or off for every later launch on this AsyncStream (see
    /// [`Device::start_trace`](crate::Device::start_trace), which must have given the
    /// device a trace log, and [`Device::take_trace`](crate::Device::take_trace)). A
    /// graph captured while tracing is on records at every replay.
    pub fn set_tracing(&self, on: bool) {
        lock(&self.inner).tracing = on;
    }

    /// The spans collected since profiling started (it goes on collecting).
    pub fn take_profile(&self) -> Vec<LaunchSpan> {
        lock(&self.inner)
            .profile
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Records a timing event after everything queued so far on every stream, and makes
    /// all later work wait for it: a full barrier, so two such events bracket exactly
    /// the work queued between them (for timing eager launches; a [`Graph`] replay is
    /// bracketed the same way).
    pub fn record_event(&self) -> Result<Event> {
        let s0 = &self.streams[0];
        for s in self.all_streams().skip(1) {
            s0.wait_event(&s.record_marker()?)?;
        }
        let e = s0.record_event()?;
        for s in self.all_streams().skip(1) {
            s.wait_event(&e)?;
        }
        Ok(e)
    }

    /// Waits for all queued work and reports tile-wait failures.
    pub fn synchronize(&self) -> Result<()> {
        for s in self.all_streams() {
            s.synchronize()?;
        }
        let mut inner = lock(&self.inner);
        inner.hazards.clear();
        inner.started.retain(|l| l.captured);
        Ok(())
    }

    /// Its identity as a launch target (see `order`).
    pub(crate) fn key(&self) -> TargetKey {
        self.key
    }

    /// All of its streams (round-robin ones and the partition's).
    pub(crate) fn every_stream(&self) -> impl Iterator<Item = &Stream> {
        self.all_streams()
    }

    /// After a graph replay: the next launch has no previous launch to wait for.
    pub(crate) fn forget_previous_launch(&self) {
        lock(&self.inner).prev = None;
    }
}

/// How a launch is held until the previous one has begun.
enum Hold {
    /// A wait kernel for this begin token.
    Kernel(i32, megaops_device::sync::KernelCtx),
    /// A stream wait for the previous launch's start event.
    Event(Arc<Event>),
    /// A stream memory operation waiting for this begin token (after a subkernel, whose
    /// chunks always end: the token is written without a wait of its own).
    Stream(i32),
}

impl crate::launch::sealed::Sealed for AsyncStream {}

impl LaunchTarget for AsyncStream {
    fn device(&self) -> &Device {
        &self.device
    }

    fn one_chunk_on_lane(&self) -> bool {
        self.one_chunk_on_lane
    }

    fn submit(&self, mut launch: PreparedLaunch) -> Result<u32> {
        let mut inner = lock(&self.inner);
        let n = self.streams.len();
        let s = if launch.partition {
            if self.partition.is_none() {
                return Err(Error::launch(
                    launch.kernel,
                    "asked for the SM partition, but this AsyncStream has none (AsyncOptions::partition_sms)",
                ));
            }
            n
        } else if self.overlap {
            (inner.launches % n as u64) as usize
        } else {
            0
        };
        let stream = self.stream(s);
        let id = launch.ctx.launch_id;
        let capturing = inner.capture.is_some();
        if inner.tracing && launch.ctx.trace.is_null() {
            let (addr, log) = self.device.trace_log().ok_or_else(|| {
                Error::launch(
                    launch.kernel,
                    "the AsyncStream traces its launches, but the device has no trace log: call \
                     `Device::start_trace` first",
                )
            })?;
            launch.ctx.trace = addr as *mut _;
            launch.buffers.push(log);
        }
        if let Some(why) = launch.unreplayed.first().filter(|_| !capturing) {
            return Err(Error::Tiling {
                kind: crate::error::TilingErrorKind::NotYetReplayed,
                kernel: Some(launch.kernel.to_string()),
                tensor: None,
                message: why.clone(),
            });
        }
        if capturing {
            // A graph cannot wait for work outside it: what other targets still run on
            // these tensors must be done before the capture records the launch.
            for e in order::foreign_waits(&launch.uses, self.key) {
                e.synchronize()?;
            }
        }

        // Hold the launch until the previous one started (different stream only).
        let holds = self.overlap && self.begin_wait && (n > 1 || self.partition.is_some());
        // Inside a capture the wait kernel holds launches under either rule: capturing
        // launch-completion events crashed the driver on the H200 (CUDA 13.0).
        let event_rule = holds && self.begin_rule == BeginRule::StartEvent && !capturing;
        let hold = match inner.prev.as_mut() {
            Some(prev) if holds && prev.stream != s => match prev.started.clone() {
                Some(started) => Some(Hold::Event(started)),
                None if prev.subkernel && self.subkernel_hold == SubkernelHold::StreamWait && self.device.is_cuda() => {
                    Some(Hold::Stream(prev.token))
                }
                // (Every launch under this rule has a start event.)
                None if event_rule => None,
                None => {
                    let wait_id = self.device.next_launch_id();
                    let ctx = runtime::wait_ctx(
                        wait_id,
                        launch.ctx.timeout_ns,
                        launch.ctx.poll_spin_ns,
                        launch.ctx.errors,
                    );
                    self.device.notes().insert(
                        wait_id,
                        LaunchNote {
                            kernel: launch.kernel.to_string(),
                            tile_grid: vec![1],
                            tensors: vec![],
                            waits_for: Some(prev.kernel.to_string()),
                            timeout_ns: launch.ctx.timeout_ns,
                            config: "",
                            stream: self.lane_name(s),
                            site: None,
                        },
                    );
                    Some(Hold::Kernel(prev.token, ctx))
                }
            },
            _ => None,
        };
        // Under the programmatic rule a held launch and its wait kernel are launched
        // programmatically (both wait for the work before them on the stream themselves).
        let programmatic = self.begin_rule == BeginRule::Programmatic && matches!(hold, Some(Hold::Kernel(..)));
        let profiling = inner.profile.is_some();
        let wait_programmatic = programmatic && !inner.after_side.contains(&s);
        // (Profiling puts an event node between the wait kernel and the launch; a proxy's
        // chunks fork off before its wait kernel.)
        launch.programmatic = programmatic && !profiling && launch.side.is_none();
        if holds && !event_rule {
            inner.token = inner.token.wrapping_add(1);
            launch.ctx.begin_flag = self.flag.addr() as *mut i32;
            launch.ctx.begin_token = inner.token;
        }
        launch.note.stream = self.lane_name(s);
        self.device.notes().insert(id, launch.note.clone());

        // Remember the pre-capture state of Tiled tensors first produced in a capture.
        if let Some(c) = inner.capture.as_mut() {
            for h in &launch.produced {
                if !c.touched.iter().any(|(t, _)| Arc::ptr_eq(&t.state, &h.state)) {
                    c.touched.push((h.clone(), lock(&h.state).clone()));
                }
            }
        }

        for e in inner.hazards.waits(s, &launch.accesses) {
            stream.wait_event(&e)?;
        }
        order::order_on(stream, &launch.uses, self.key)?;
        // A subkernel's side work starts after what its proxy had to wait for (and joins
        // a capture through this event), not after the previous launch's start. A chunk
        // that runs on the lane itself needs neither.
        let on_lane = launch.side.as_ref().is_some_and(|w| w.on_lane());
        if let Some(side) = &launch.side {
            side.prepare(stream, (!on_lane).then_some(&self.side))?;
        }
        let fork = (launch.side.is_some() && !on_lane)
            .then(|| stream.record_marker())
            .transpose()?;
        if let Some(Hold::Stream(token)) = &hold {
            // SAFETY: the begin flag is plain device memory the AsyncStream keeps; the
            // subkernel's side streams (or its proxy) write the token in every case.
            unsafe { stream.wait_value(self.flag.addr(), *token)? };
        }
        if let Some(Hold::Kernel(token, ctx)) = &hold {
            runtime::wait_begin(stream, self.flag.buffer(), *token, *ctx, wait_programmatic)?;
        }
        let start = profiling.then(|| stream.record_timing_node()).transpose()?;
        // (After the profiler's start node: the start event's wait must lead straight to
        // the kernel it holds, also in a captured graph.)
        if let Some(Hold::Event(started)) = &hold {
            stream.wait_event(started)?;
        }
        let (mut event, mut started) = if event_rule {
            let (event, started) = launch.launch_on_with_start(stream)?;
            let started = Arc::new(started);
            if !capturing {
                inner.started.retain(|l| l.captured || !l.done.is_complete());
            }
            inner.started.push(StartedLaunch {
                done: event.clone(),
                _started: started.clone(),
                captured: capturing,
            });
            (event, Some(started))
        } else {
            (launch.launch_on(stream)?, None)
        };
        inner.after_side.retain(|&l| l != s);
        if let (Some(side), true) = (&launch.side, on_lane) {
            inner.after_side.push(s);
            let begin = (!launch.ctx.begin_flag.is_null()).then(|| (self.flag.addr(), launch.ctx.begin_token));
            // (One chunk signalling its own data tiles raises the begin flag itself.)
            side.enqueue(stream, None, begin)?;
            // The operands stay allocated, and plain tensors' later users wait, until the
            // chunk is done.
            event = Arc::new(stream.record_marker()?);
            stream.hold(launch.buffers.clone(), &event);
            if started.is_some() {
                started = Some(event.clone());
            }
        }
        if let (Some(side), Some(fork)) = (&launch.side, &fork) {
            inner.after_side.push(s);
            self.side_used.store(true, std::sync::atomic::Ordering::Release);
            for x in &self.side {
                x.wait_event(fork)?;
            }
            let begin = (!launch.ctx.begin_flag.is_null()).then(|| (self.flag.addr(), launch.ctx.begin_token));
            let raised = side.enqueue(stream, Some(&self.side), begin)?;
            // Joined back: the lane's later work (and a capture's end) comes after the
            // chunks.
            for x in &self.side {
                stream.wait_event(&x.record_marker()?)?;
            }
            if let (false, Some(write)) = (raised, begin) {
                // The next launch (held on another lane) may start once every chunk is
                // done. Nothing raised the flag past this token yet: the next token's
                // launch is held until this write, or comes after it on this lane.
                // SAFETY: the begin flag is plain device memory the AsyncStream keeps.
                unsafe { stream.write_values(&[write])? };
            }
            // The operands stay allocated, and plain tensors' later users wait, until the
            // chunks are done (the proxy may end before they start).
            event = Arc::new(stream.record_marker()?);
            stream.hold(launch.buffers.clone(), &event);
            // Under the start-event rule the next launch waits for the chunks too.
            if started.is_some() {
                started = Some(event.clone());
            }
        }
        if let Some(start) = start {
            let end = stream.record_timing_node()?;
            let span = LaunchSpan {
                kernel: launch.kernel,
                entry: launch.entry,
                ctas: launch.grid.iter().product(),
                site: launch.note.site,
                stream: s,
                start,
                end,
            };
            if let Some(p) = inner.profile.as_mut() {
                p.push(span);
            }
        }
        inner.hazards.record(s, &launch.accesses, &event, capturing);
        if !capturing {
            // (An event recorded inside a capture is a graph node, not something another
            // target could wait for; `Graph::launch` records the replay instead.)
            order::record(&launch.uses, self.key, &event);
        }
        inner.prev = Some(PrevLaunch {
            stream: s,
            token: inner.token,
            kernel: launch.kernel,
            started,
            subkernel: launch.side.is_some(),
        });
        inner.launches += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_rules_round_trip_through_their_names_and_indices() {
        for rule in BeginRule::ALL {
            assert_eq!(BeginRule::parse(rule.name()).ok(), Some(rule));
            assert_eq!(BeginRule::from_index(rule.index()), rule);
        }
        assert_eq!(BeginRule::default(), BeginRule::Programmatic);
        assert_eq!(BeginRule::from_index(200), BeginRule::default());
        let err = BeginRule::parse("soon").map(|_| ()).unwrap_err().to_string();
        assert!(
            err.contains("unknown begin rule `soon`") && err.contains("`programmatic`"),
            "{err}"
        );
    }

    #[test]
    fn a_device_hands_its_begin_rule_to_new_async_streams() -> Result<()> {
        let dev = crate::testing::cpu_device(0)?;
        assert_eq!(dev.begin_rule(), BeginRule::Programmatic);
        for rule in BeginRule::ALL {
            dev.set_begin_rule(rule);
            assert_eq!(dev.begin_rule(), rule);
            assert_eq!(AsyncStream::new(&dev, 2)?.begin_rule(), rule);
        }
        Ok(())
    }
}
