//! A subkernel's chunk work: per chunk on a side stream, the wait for its go flag, the
//! chunk, the write of its done flag or its data tiles' signals; or one chunk on the
//! launch's own stream, after its proxy.

use super::{Chunk, ChunkOp, SignalRun, Wrappers};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::Result;
use crate::notes::{LaunchNote, TensorNote};
use crate::runtime;
use crate::stream::Stream;
use std::sync::Arc;

/// Work a launch brings to its AsyncStream's side streams, or to its own stream. The
/// AsyncStream calls [`SideWork::prepare`] before the launch; then either the side streams
/// wait for the lane's work so far and [`SideWork::enqueue`] runs on them right after the
/// launch, or (when [`SideWork::on_lane`]) it runs on the lane itself, after the launch in
/// stream order.
pub(crate) trait SideWork: Send + Sync {
    /// Whether the work runs on the launch's own stream (one chunk whose stream signals its
    /// data tiles, on a target that asked for it: nothing but the proxy before it needs to
    /// let it go).
    fn on_lane(&self) -> bool;
    /// Readies the work for the two `side` streams, or for the `lane` alone (`side` is
    /// `None`; see [`ChunkOp::prepare`]), and enqueues what must precede it on the lane
    /// (clearing the go flags the side streams wait for).
    fn prepare(&self, lane: &Stream, side: Option<&[Stream; 2]>) -> Result<()>;
    /// Enqueues the work: chunk `c` on side stream `c % 2`, after waiting for its go flag;
    /// or, with `side` `None`, on the `lane` itself, where stream order holds it behind the
    /// proxy. `begin` is the AsyncStream's begin flag and this launch's token when the next
    /// launch is held until this one began. Returns whether the flag is raised once every
    /// chunk is done without the AsyncStream (by the chunks' streams, or by a proxy that
    /// waits for every chunk); otherwise the AsyncStream raises it after joining the side
    /// streams back.
    fn enqueue(&self, lane: &Stream, side: Option<&[Stream; 2]>, begin: Option<(u64, i32)>) -> Result<bool>;
}

/// The chunks of one subkernel launch.
pub(super) struct ChunkedWork {
    pub device: Device,
    /// The operation's name, for reports.
    pub name: &'static str,
    pub op: Arc<dyn ChunkOp>,
    pub chunks: Vec<Chunk>,
    /// Go, started and done flags, the started/done count (`3·chunks + 1` words).
    pub flags: Arc<Buffer>,
    /// The flags' tensor id in reports, and their note.
    pub flags_id: u32,
    pub note: TensorNote,
    pub wrappers: Wrappers,
    /// Per chunk, the semaphore writes its stream makes after it to signal its data tiles
    /// (runs of more than one word only for one chunk on the launch's own stream); `None`:
    /// the proxy signals (and the flags have started and done words).
    pub side_signals: Option<Vec<Vec<SignalRun>>>,
    /// The one chunk runs on the launch's own stream (then `side_signals` is set).
    pub on_lane: bool,
}

impl ChunkedWork {
    /// The wait kernel holding chunk `c` on `stream` (side stream `lane`) until its go flag
    /// is set, with a launch note that names the chunk and its flag.
    fn wait_kernel(&self, stream: &Stream, lane: usize, c: &Chunk) -> Result<()> {
        let timeout_ns = self.device.wait_timeout().as_nanos().min(u64::MAX as u128) as u64;
        let ctx = runtime::wait_ctx(
            self.device.next_launch_id(),
            timeout_ns,
            self.device.poll_spin().as_nanos() as u32,
            self.device.error_log_addr() as *mut _,
        );
        self.device.notes().insert(
            ctx.launch_id,
            LaunchNote {
                kernel: format!("`{}` chunk {} (held until its proxy lets it go)", self.name, c.index),
                tile_grid: vec![1],
                tensors: vec![(self.flags_id, self.note.clone())],
                waits_for: None,
                timeout_ns,
                config: "",
                stream: format!("stream #{} (side stream {lane})", stream.id()),
                site: None,
            },
        );
        runtime::wait_word(stream, &self.flags, c.index as u32, 1, self.flags_id, ctx)?;
        Ok(())
    }
}

impl SideWork for ChunkedWork {
    fn on_lane(&self) -> bool {
        self.on_lane
    }

    fn prepare(&self, lane: &Stream, side: Option<&[Stream; 2]>) -> Result<()> {
        let streams: Vec<&Stream> = side.map_or(vec![lane], |s| s.iter().collect());
        if self.device.is_cuda() {
            self.op.prepare(&self.chunks, &streams)?;
        }
        match side {
            Some(_) => lane.fill_words(&self.flags, 0, self.flags.len() / 4, 0),
            // On the lane nothing waits for a go flag.
            None => Ok(()),
        }
    }

    fn enqueue(&self, lane: &Stream, side: Option<&[Stream; 2]>, begin: Option<(u64, i32)>) -> Result<bool> {
        let n = self.chunks.len();
        let cuda = self.device.is_cuda();
        let on_lane = side.is_none();
        let streams: Vec<&Stream> = side.map_or(vec![lane], |s| s.iter().collect());
        if on_lane != self.on_lane {
            return Err(crate::error::Error::Internal(format!(
                "`{}`: planned {} the launch's own stream, enqueued {}",
                self.name,
                if self.on_lane { "on" } else { "off" },
                if on_lane { "on it" } else { "off it" }
            )));
        }
        // One chunk: its stream raises the begin flag right after it, before its semaphore
        // writes (the next launch's consumers then wait for those, which need no SM). More
        // chunks: the AsyncStream raises it after joining both side streams.
        let raise = begin.filter(|_| n == 1 && self.side_signals.is_some());
        for c in &self.chunks {
            let lane = c.index % streams.len();
            let s = streams[lane];
            let (started, done) = (n + c.index, 2 * n + c.index);
            // On the lane, stream order holds the chunk until the proxy before it there has
            // seen its inputs ready and ended; on a side stream its go flag does.
            if !on_lane {
                if cuda && self.wrappers == Wrappers::StreamMemOps {
                    // SAFETY: the flags are plain device memory (the device allocator's
                    // `cuMemAlloc`), kept by the proxy launch, whose CTA `c` sets `go` in
                    // every case (also when its own wait fails).
                    unsafe { s.wait_value(self.flags.addr() + 4 * c.index as u64, 1)? };
                } else {
                    // The CPU backend has no stream memory operations: a kernel waits there.
                    self.wait_kernel(s, lane, c)?;
                }
            }
            // `started` and `done` need no SM (a stream memory operation; a host write on
            // the CPU backend): once the proxy has seen every `started`, nothing of this
            // subkernel still waits for an SM but the chunks already queued.
            if self.side_signals.is_none() {
                self.write(s, started, 1)?;
            }
            if cuda {
                // SAFETY: the launch keeps every operand the op captured until an event
                // after the chunks (on the lane, after the side streams joined back).
                unsafe { self.op.enqueue(*c, lane, s)? };
            } else {
                let (op, chunk) = (self.op.clone(), *c);
                // SAFETY: as above; CPU-backend operands are host memory.
                s.host_op(Arc::new(move || unsafe { op.run_on_host(chunk) }))?;
            }
            match &self.side_signals {
                Some(signals) => {
                    // Nothing raised the flag past this token yet: the next token's launch
                    // is held until this write, or comes after the join on the lane.
                    // Single semaphores go in the same batch of writes; longer runs are
                    // one 32-bit memset each after it on a GPU (stream order: after the
                    // chunk), release stores on the CPU backend.
                    let runs = &signals[c.index];
                    let words = |r: &SignalRun| {
                        let r = *r;
                        (0..r.words as u64).map(move |i| (r.addr + 4 * i, r.value))
                    };
                    let writes: Vec<(u64, i32)> = raise
                        .into_iter()
                        .chain(runs.iter().filter(|r| r.words == 1 || !cuda).flat_map(words))
                        .collect();
                    // SAFETY: the output's semaphores (plain `cuMemAlloc` memory: the
                    // device allocator's) are among the launch's buffers, kept as above,
                    // and the begin flag is the AsyncStream's; each chunk is the only
                    // writer of its data tiles, so its ready value is what all the signals
                    // of a tile would add up to.
                    unsafe { s.write_values(&writes)? }
                    for r in runs.iter().filter(|r| cuda && r.words > 1) {
                        // SAFETY: as above: `r.words` semaphores of the output from `r.addr`.
                        unsafe { s.fill_words_at(r.addr, r.value, r.words)? }
                    }
                }
                None => self.write(s, done, 1)?,
            }
        }
        Ok(raise.is_some() || self.side_signals.is_none())
    }
}

impl ChunkedWork {
    /// Enqueues setting flag word `index` to `value` on `s` after the work before it.
    fn write(&self, s: &Stream, index: usize, value: i32) -> Result<()> {
        if self.device.is_cuda() {
            // SAFETY: the flags are plain device memory kept by the proxy launch (see
            // `enqueue`); `index` < 3·chunks + 1.
            unsafe { s.write_value(self.flags.addr() + 4 * index as u64, value) }
        } else {
            s.fill_words(&self.flags, index, 1, value)
        }
    }
}
