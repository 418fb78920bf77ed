//! Closed-source operations in the data-tile protocol (paper §2.2 end, Appendix B).
//!
//! A vendor kernel (a cuBLASLt GEMM, a copy-engine transfer) has no source to put
//! `wait_input` / `signal_output` in. A [`SubkernelLaunch`] splits its output into chunks
//! along one dimension and runs it as one *subkernel* per chunk:
//! - the chunks run on the AsyncStream's two side streams (greatest priority), round-robin,
//!   so that no kernel barrier separates them;
//! - each chunk is held back until its *go* flag is set, in the backend that complements
//!   the chunk's ([`Wrappers`]): a stream memory operation before an ordinary kernel, a
//!   tiny kernel before copy-engine work; its *started* and *done* flags are written by
//!   stream memory operations around it (they need no SM);
//! - a *proxy* kernel (one CTA per chunk) is the launch the AsyncStream sees: CTA `c` waits
//!   for the data tiles chunk `c` reads and sets its go flag;
//! - the chunk's data tiles are signalled in one of two ways ([`ChunkSignals`]):
//!   - *by its side stream* (the default, when every data tile of the output lies inside
//!     one chunk): a batch of stream memory operations after the chunk writes each of its
//!     data tiles' ready value, and the begin flag is raised once every chunk is done (by
//!     the one chunk's side stream before those writes, or by the AsyncStream's lane after
//!     joining both side streams back). The proxy (`megaops_subkernel_release_N`) ends as soon as it set
//!     the go flags: no CTA of it stays on an SM while the chunks run;
//!   - *by the proxy* (`megaops_subkernel_proxy_N`; any chunking): CTA `c` also waits for the
//!     chunk's started and done flags, signals the data tiles chunk `c` wrote and raises the
//!     begin flag after the last chunk.
//!
//! - one chunk whose stream signals its data tiles may instead run on the launch's own
//!   stream, right after its release proxy there (`AsyncOptions::one_chunk_on_lane`, on
//!   by default): stream order lets it go, so it needs no go flag, no fork to the side
//!   streams and no join back; the lane writes the begin flag and the signals after it,
//!   each run of consecutive semaphores by one 32-bit memset, so the chunk may hold more
//!   than [`MAX_SIDE_SIGNALS`] data tiles (up to that many runs).
//!
//! So a subkernel takes `Tiled` inputs and produces `Tiled` outputs like any MegaOps kernel:
//! its kernel tiling is the chunking (one kernel tile per chunk), from which consumers'
//! targets are derived; ordering, hazards, delayed release (the proxy's buffers include
//! every operand), profiling and graph capture are the AsyncStream's.
//!
//! **Deadlock freedom.** The next launch waits (AsyncStream's rule) until every chunk is
//! done. A closed-source kernel's CTAs cannot be seen starting: a launch let go earlier (at
//! a chunk's start) could put CTAs that spin on the chunk's output onto SMs the chunk still
//! needs, and on the H200 a one-chunk cuBLASLt GEMM then never finished. So a consumer of a
//! subkernel's output does not overlap it; the producers before it do (each chunk starts
//! as soon as its rows are ready), and a subkernel consuming a MegaOps kernel overlaps it
//! chunk by chunk. The begin flag is raised once every chunk is done: by the one chunk's
//! side stream or by the AsyncStream's lane after it joined the side streams back
//! (side-stream signals), or by the proxy; the next launch waits for it by a wait kernel or by a stream memory operation
//! (`AsyncOptions::subkernel_hold`). The chunks reach the SMs first in any case: their side
//! streams have the greatest priority.

//! On the CPU backend the same proxy, flags and side streams run; the wait is the runtime's
//! wait kernel, the flag writes are host writes in stream order (the virtual GPU has no
//! stream memory operations) and each chunk is the operation's CPU implementation
//! ([`ChunkOp::run_on_host`]), a host operation in stream order. CI tests the protocol
//! this way.
//!
//! Clients: [`cublaslt`] (GEMMs) and [`copy`] (copy-engine transfers).

pub mod copy;
pub mod cublaslt;
mod side;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::launch::{AsInput, AsOutput, KernelLaunch, LaunchOptions, LaunchTarget, TileDim};
use crate::notes::{HostDim, TensorNote};
use crate::param::param_bytes;
use crate::runtime::RUNTIME_PTX;
use crate::stream::Stream;
use crate::tensor::Tensor;
use crate::tiling::Rank;
use megaops_device::sync::{KernelCtx, TileSync};
use megaops_runtime_kernels::proxy::{ChunkSpan, PROXY_MAX_TENSORS, ProxyArgs};
use std::sync::Arc;

pub(crate) use side::SideWork;

/// The most chunks one subkernel launch splits into.
pub const MAX_CHUNKS: usize = 64;

/// The most data tiles one chunk signals by stream memory operations
/// ([`ChunkSignals::SideStream`]): each write costs about half a microsecond on the H200, so
/// a chunk of more data tiles is signalled by the proxy (on an SM, all at once).
pub const MAX_SIDE_SIGNALS: usize = 16;

/// How a subkernel's chunks are held back on their side streams until their go flag is
/// set. The wait must not use the chunk's own hardware path, or it queues behind the
/// other side stream's chunk (paper Appendix B). (The started and done flags are always
/// written by stream memory operations.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrappers {
    /// `cuStreamWaitValue32`: for chunks that are ordinary kernels (cuBLASLt).
    StreamMemOps,
    /// The runtime's wait kernel (`megaops_wait_word`, with the protocol's timeout): for
    /// copy-engine chunks.
    Kernels,
}

/// Who signals a chunk's data tiles of the output once the chunk is done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChunkSignals {
    /// The chunk's side stream, by stream memory operations right after it (no SM, no
    /// spinning proxy), when every data tile of the output lies inside one chunk (chunk
    /// sizes a multiple of the output's data tile along the chunked dimension) and no chunk
    /// holds more than [`MAX_SIDE_SIGNALS`] data tiles; the proxy otherwise.
    #[default]
    SideStream,
    /// The proxy, which waits for each chunk's done flag on an SM (any chunking).
    Proxy,
}

/// Consecutive semaphores that a chunk's stream sets to one ready value once the chunk is
/// done: `words` 32-bit words from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignalRun {
    /// Address of the first semaphore.
    pub addr: u64,
    /// Semaphores in the run.
    pub words: usize,
    /// The ready value each is set to.
    pub value: i32,
}

/// One chunk: its index and its elements `start..end` along the chunked dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Index (0-based), also the proxy's CTA for it.
    pub index: usize,
    /// First element along the chunked dimension.
    pub start: usize,
    /// One past the last element.
    pub end: usize,
}

impl Chunk {
    /// Elements along the chunked dimension.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for a chunk of no elements (never produced by [`Chunking`]).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// How an output dimension of `extent` elements is cut into chunks: at most `chunks`
/// chunks of equal size (a multiple of `align`), the last one shorter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunking {
    /// Elements per chunk (the last may be shorter).
    pub chunk: usize,
    /// The chunks, in order.
    pub chunks: Vec<Chunk>,
}

impl Chunking {
    /// Cuts `extent` elements into at most `chunks` (1 to [`MAX_CHUNKS`]) chunks whose size
    /// is a multiple of `align` (≥ 1).
    pub fn new(extent: usize, chunks: usize, align: usize) -> Result<Chunking> {
        if chunks == 0 || chunks > MAX_CHUNKS {
            return Err(Error::Invalid(format!(
                "a subkernel splits into 1 to {MAX_CHUNKS} chunks, not {chunks}"
            )));
        }
        if align == 0 {
            return Err(Error::Invalid("a chunk alignment is at least 1 element".into()));
        }
        let chunk = extent.div_ceil(chunks).div_ceil(align).max(1) * align;
        let chunks = (0..extent.div_ceil(chunk))
            .map(|index| Chunk {
                index,
                start: index * chunk,
                end: ((index + 1) * chunk).min(extent),
            })
            .collect();
        Ok(Chunking { chunk, chunks })
    }
}

/// A closed-source operation that runs chunk by chunk. Implementations capture their
/// operands' addresses; the [`SubkernelLaunch`] that runs them keeps the operands alive and
/// ordered.
pub trait ChunkOp: Send + Sync + 'static {
    /// Enqueues chunk `chunk` on `stream` (a CUDA stream: a side stream, `lane` 0 or 1, or
    /// the launch's own stream, `lane` 0; per-stream resources such as a workspace go by
    /// the stream). It must read and write only what the chunk's part of the launch
    /// declared.
    ///
    /// # Safety
    /// The operands captured at bind time are still allocated (the launch keeps them until
    /// the chunk is done) and `stream` belongs to their device.
    unsafe fn enqueue(&self, chunk: Chunk, lane: usize, stream: &Stream) -> Result<()>;

    /// Readies everything the chunks will need before any of them is enqueued (GPU only):
    /// plans, workspaces on the streams the chunks will run on (`streams`: the two side
    /// streams, or the launch's own stream), and the operation's kernels loaded. It runs
    /// before the proxy is launched, because loading a kernel (CUDA's lazy loading) may
    /// synchronise the context, which would wait for ever on a proxy whose chunks are not
    /// enqueued yet. The default does nothing.
    fn prepare(&self, chunks: &[Chunk], streams: &[&Stream]) -> Result<()> {
        let _ = (chunks, streams);
        Ok(())
    }

    /// Runs chunk `chunk` on the host: the CPU backend's implementation of the operation.
    ///
    /// # Safety
    /// As for [`ChunkOp::enqueue`]; the operands are CPU-backend (host) memory.
    unsafe fn run_on_host(&self, chunk: Chunk);
}

/// A closed-source operation being bound as a subkernel: its inputs and output are bound
/// as a MegaOps kernel's are (shapes checked, targets derived, the output recorded as
/// produced by a kernel tiling of one tile per chunk), then [`SubkernelLaunch::submit`]
/// runs it on an AsyncStream.
pub struct SubkernelLaunch<'a> {
    launch: KernelLaunch<'a>,
    device: Device,
    name: &'static str,
    chunking: Chunking,
    spans: Vec<ChunkSpan>,
    syncs: Vec<TileSync>,
    inputs: usize,
    output: bool,
    wrappers: Wrappers,
    signals: ChunkSignals,
    /// Per chunk, the writes that signal its data tiles of the output (one semaphore
    /// each), when its side stream signals them.
    side_signals: Option<Vec<Vec<SignalRun>>>,
    /// For one chunk on the launch's own stream: its data tiles' semaphores as runs of
    /// consecutive words (one memset each on a GPU), when there are few enough runs.
    lane_runs: Option<Vec<SignalRun>>,
}

impl<'a> SubkernelLaunch<'a> {
    /// Starts a subkernel launch of the operation `name`, whose output is cut along one
    /// dimension by `chunking`, wrapped by `wrappers`.
    pub fn new(
        device: &Device,
        name: &'static str,
        opts: &'a LaunchOptions,
        chunking: Chunking,
        wrappers: Wrappers,
    ) -> Result<Self> {
        let mut launch = KernelLaunch::new(device, name, &RUNTIME_PTX, "megaops_subkernel_proxy_0", opts);
        launch.tiles(&[chunking.chunks.len() as u64])?;
        launch.block([32, 1, 1])?;
        Ok(SubkernelLaunch {
            launch,
            device: device.clone(),
            name,
            chunking,
            spans: Vec::new(),
            syncs: Vec::new(),
            inputs: 0,
            output: false,
            wrappers,
            signals: ChunkSignals::default(),
            side_signals: None,
            lane_runs: None,
        })
    }

    /// Chooses who signals the chunks' data tiles (bind the output after this).
    pub fn signals(&mut self, signals: ChunkSignals) {
        self.signals = signals;
    }

    /// The chunks.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunking.chunks
    }

    fn tile(&self, shape: &[u64], along: Option<usize>) -> Result<(Vec<TileDim>, ChunkSpan)> {
        let mut tile = vec![TileDim::WHOLE; shape.len()];
        let span = match along {
            None => ChunkSpan::WHOLE,
            Some(d) if d < shape.len() => {
                tile[d] = TileDim::axis(0, self.chunking.chunk as u64);
                ChunkSpan {
                    dim: d as u32,
                    chunk: self.chunking.chunk as u32,
                }
            }
            Some(d) => {
                return Err(Error::launch(
                    self.name,
                    format!("chunks along dimension {d} of a tensor of rank {}", shape.len()),
                ));
            }
        };
        Ok((tile, span))
    }

    /// Binds a synchronised input of shape `shape`: chunk `c` reads elements of chunk `c`
    /// along dimension `along` (the output's chunking), or the whole tensor (`None`). The
    /// proxy waits for those data tiles before the chunk starts. Returns its address.
    pub fn input<T: DType, R: Rank, X: AsInput<T, R> + ?Sized>(
        &mut self,
        param: &str,
        x: &X,
        shape: &[u64],
        along: Option<usize>,
    ) -> Result<u64> {
        if self.output {
            return Err(Error::launch(self.name, "bind a subkernel's inputs before its output"));
        }
        if self.inputs + 1 >= PROXY_MAX_TENSORS {
            return Err(Error::launch(
                self.name,
                format!("a subkernel synchronises at most {} inputs", PROXY_MAX_TENSORS - 1),
            ));
        }
        let (tile, span) = self.tile(shape, along)?;
        let (addr, sync) = self.launch.input(param, x, shape, &tile)?;
        self.spans.push(span);
        self.syncs.push(sync);
        self.inputs += 1;
        Ok(addr)
    }

    /// Binds a plain operand the chunks read (a weight): no data-tile wait, but ordered
    /// after its writers and kept alive like a kernel argument. Returns its address.
    pub fn read<T: DType>(&mut self, param: &str, x: &Tensor<T>, shape: &[usize]) -> Result<u64> {
        let declared: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        self.launch.touch(param, x, &declared, false)?;
        Ok(x.addr())
    }

    /// Keeps `buffer` alive as long as the chunks may run (an operand that is not a tensor,
    /// such as page-locked host memory).
    pub(crate) fn keep(&mut self, buffer: Arc<crate::buffer::Buffer>) {
        self.launch.keep(buffer);
    }

    /// Binds the output of shape `shape`, chunked along dimension `along` (the chunking's
    /// dimension): the proxy signals each chunk's data tiles once the chunk is done, and
    /// the tensor records the subkernel as its producer. Returns its address.
    pub fn output<T: DType, R: Rank, X: AsOutput<T, R> + ?Sized>(
        &mut self,
        param: &str,
        x: &mut X,
        shape: &[u64],
        along: usize,
    ) -> Result<u64> {
        if self.output {
            return Err(Error::launch(self.name, "a subkernel has one output"));
        }
        let extent = shape.get(along).copied().unwrap_or(0) as usize;
        let covered = self.chunking.chunks.last().map_or(0, |c| c.end);
        if extent != covered {
            return Err(Error::launch(
                self.name,
                format!("its chunks cover {covered} elements along dimension {along} of `{param}`, which has {extent}"),
            ));
        }
        let (tile, span) = self.tile(shape, Some(along))?;
        let (addr, sync) = self.launch.output(param, x, shape, &tile, None)?;
        let chunks = self.chunking.chunks.len();
        (self.side_signals, self.lane_runs) = match self.signals {
            ChunkSignals::Proxy => (None, None),
            ChunkSignals::SideStream if !sync.is_active() => (Some(vec![Vec::new(); chunks]), Some(Vec::new())),
            ChunkSignals::SideStream => {
                let note = self.launch.last_tensor_note().ok_or_else(|| {
                    Error::Internal(format!("`{}`: a synchronised output without its note", self.name))
                })?;
                let lane = if chunks == 1 {
                    lane_runs(&sync, note, &span)
                } else {
                    None
                };
                (side_signals(&sync, note, &span, chunks), lane)
            }
        };
        self.spans.push(span);
        self.syncs.push(sync);
        self.output = true;
        Ok(addr)
    }

    /// Runs the operation on `target`, an AsyncStream (a plain `Stream` has no side
    /// streams and refuses): the proxy as the AsyncStream's launch, `op`'s chunks on its
    /// side streams. The output is produced (consumers launched afterwards wait for
    /// its chunks) once this returns.
    pub fn submit(mut self, target: &impl LaunchTarget, op: Arc<dyn ChunkOp>) -> Result<()> {
        if !self.output {
            return Err(Error::launch(self.name, "a subkernel needs an output bound"));
        }
        let n = self.chunking.chunks.len();
        // One chunk on the launch's own stream signals its data tiles by runs of
        // semaphores, so also outputs of more than `MAX_SIDE_SIGNALS` data tiles.
        let (side_signals, on_lane) = match self.lane_runs.take() {
            Some(runs) if n == 1 && target.one_chunk_on_lane() => (Some(vec![runs]), true),
            _ => (self.side_signals.take(), false),
        };
        // Go flags; with the proxy signalling, also started and done flags and the count.
        let words = if side_signals.is_some() { n } else { 3 * n + 1 };
        let flags = Tensor::<i32>::empty(&self.device, &[words])?;
        let flags_id = self.device.next_tensor_id();
        let mut spans = [ChunkSpan::WHOLE; PROXY_MAX_TENSORS];
        spans[..self.spans.len()].copy_from_slice(&self.spans);
        let args = ProxyArgs {
            flags: flags.addr() as *mut i32,
            chunks: n as u32,
            flags_id,
            spans,
        };
        let (entry, name) = if side_signals.is_some() {
            (RELEASE_ENTRIES[self.inputs], format!("`{}` go flags", self.name))
        } else {
            (
                PROXY_ENTRIES[self.inputs],
                format!(
                    "`{}` chunk flags (go 0..{n}, started {n}..{}, done {}..{})",
                    self.name,
                    2 * n,
                    2 * n,
                    3 * n
                ),
            )
        };
        self.launch.replace_args(entry, vec![param_bytes(&args)]);
        let note = TensorNote {
            name,
            dims: vec![HostDim {
                size: words as u32,
                tile: 1,
                bounds: Vec::new(),
            }],
            ready: 1,
            producer: None,
            producer_launch: None,
        };
        self.launch.note_tensor(flags_id, note.clone());
        self.launch.keep(flags.buffer().clone());
        let work = side::ChunkedWork {
            device: self.device.clone(),
            name: self.name,
            op,
            chunks: self.chunking.chunks.clone(),
            flags: flags.buffer().clone(),
            flags_id,
            note,
            wrappers: self.wrappers,
            side_signals,
            on_lane,
        };
        let release = work.side_signals.is_some();
        self.launch.side(Arc::new(work));
        let syncs = self.syncs;
        self.launch.submit(target, move |ctx| {
            // SAFETY: the CPU body of the proxy, the function its PTX entry runs: the flags
            // (kept by the launch) hold the words it uses, the syncs are the bound tensors'.
            unsafe { run_proxy(&args, ctx, &syncs, release) }
        })
    }
}

/// The semaphore addresses of the data tiles chunk `c` of `span` writes of the output
/// synchronised by `sync` (host copy of its tiling in `note`), or `None` when one of them
/// has parts in another chunk (only a count of signals, the proxy's, can tell when such a
/// tile is ready).
fn chunk_semaphores(sync: &TileSync, note: &TensorNote, span: &ChunkSpan, c: u32) -> Option<Vec<u64>> {
    use megaops_device::sync::tiling::{covered_box, sem_index, target_of};
    let mut dims = [megaops_device::sync::DimTiling::plain(0, 0); megaops_device::sync::MAX_RANK];
    for (d, h) in dims.iter_mut().zip(&note.dims) {
        *d = h.as_dim();
    }
    let rank = note.dims.len() as u32;
    let ktile = span.ktile();
    let region = span.region(sync, c);
    // SAFETY: `dims` points into `note`'s host copy of the bounds, alive here.
    let tiles = unsafe { covered_box(&dims, rank, &region) };
    (0..tiles.len())
        .map(|k| {
            let coords = tiles.coords(k);
            // SAFETY: as above.
            let producers = unsafe { target_of(&dims, rank, &coords, &ktile, 1) };
            let idx = sem_index(&dims, rank, &coords) as u64;
            (producers == 1).then_some(sync.sema as u64 + 4 * idx)
        })
        .collect()
}

/// Per chunk, the writes that signal its data tiles of the output ([`chunk_semaphores`]),
/// one semaphore each, set to `note.ready`. `None` when a data tile has parts in two
/// chunks or a chunk has more than [`MAX_SIDE_SIGNALS`] data tiles.
fn side_signals(sync: &TileSync, note: &TensorNote, span: &ChunkSpan, chunks: usize) -> Option<Vec<Vec<SignalRun>>> {
    (0..chunks as u32)
        .map(|c| {
            let sems = chunk_semaphores(sync, note, span, c)?;
            let runs = sems.into_iter().map(|addr| SignalRun {
                addr,
                words: 1,
                value: note.ready,
            });
            Some(runs.collect::<Vec<_>>()).filter(|w| w.len() <= MAX_SIDE_SIGNALS)
        })
        .collect()
}

/// The semaphores of every data tile of the one chunk of a subkernel as runs of
/// consecutive words, in address order; `None` where a data tile has another producer or
/// the runs are more than [`MAX_SIDE_SIGNALS`].
fn lane_runs(sync: &TileSync, note: &TensorNote, span: &ChunkSpan) -> Option<Vec<SignalRun>> {
    let mut sems = chunk_semaphores(sync, note, span, 0)?;
    sems.sort_unstable();
    let mut runs: Vec<SignalRun> = Vec::new();
    for addr in sems {
        match runs.last_mut() {
            Some(r) if r.addr + 4 * r.words as u64 == addr => r.words += 1,
            _ => runs.push(SignalRun {
                addr,
                words: 1,
                value: note.ready,
            }),
        }
    }
    (runs.len() <= MAX_SIDE_SIGNALS).then_some(runs)
}

/// The proxy's body for `syncs` (its inputs, then its output), as the PTX entry of that
/// many inputs runs it.
///
/// # Safety
/// As [`megaops_runtime_kernels::proxy::finish_chunk`].
unsafe fn run_proxy(args: &ProxyArgs, ctx: &KernelCtx, syncs: &[TileSync], release: bool) {
    use megaops_runtime_kernels::proxy::{finish_chunk, release_chunk, wait_chunk_input};
    let Some((out, inputs)) = syncs.split_last() else {
        return;
    };
    // SAFETY: forwarded; `input` bounds the inputs below `PROXY_MAX_TENSORS`.
    unsafe {
        let mut ok = true;
        for (i, sync) in inputs.iter().enumerate() {
            ok = ok && wait_chunk_input(args, ctx, i, sync);
        }
        if release {
            release_chunk(args);
        } else {
            finish_chunk(args, ctx, ok, out, inputs.len());
        }
    }
}

/// The release proxy's PTX entries (the side streams signal) by number of synchronised
/// inputs.
const RELEASE_ENTRIES: [&str; PROXY_MAX_TENSORS] = [
    "megaops_subkernel_release_0",
    "megaops_subkernel_release_1",
    "megaops_subkernel_release_2",
    "megaops_subkernel_release_3",
];

/// The proxy's PTX entries by number of synchronised inputs.
const PROXY_ENTRIES: [&str; PROXY_MAX_TENSORS] = [
    "megaops_subkernel_proxy_0",
    "megaops_subkernel_proxy_1",
    "megaops_subkernel_proxy_2",
    "megaops_subkernel_proxy_3",
];

#[cfg(test)]
mod tests {
    use super::*;
    use megaops_device::sync::{DimTiling, EPOCH_STRIDE, MAX_RANK};

    /// A 100 × 8 output (semaphores at 0x1000) with `rows` data tiling along dimension 0
    /// and one data tile across the columns.
    fn output(rows: HostDim) -> (TileSync, TensorNote) {
        let note = TensorNote {
            name: "c".into(),
            dims: vec![
                rows,
                HostDim {
                    size: 8,
                    tile: 8,
                    bounds: Vec::new(),
                },
            ],
            ready: 3 * EPOCH_STRIDE,
            producer: None,
            producer_launch: None,
        };
        let mut dims = [DimTiling::plain(0, 0); MAX_RANK];
        for (d, h) in dims.iter_mut().zip(&note.dims) {
            *d = h.as_dim();
        }
        let sync = TileSync {
            sema: 0x1000 as *mut i32,
            tensor_id: 1,
            target: 0,
            rank: 2,
            dims,
        };
        (sync, note)
    }

    fn span(dim: u32, chunk: u32) -> ChunkSpan {
        ChunkSpan { dim, chunk }
    }

    /// [`side_signals`] as `(address, value)` pairs (every run is one word there).
    fn side_writes(
        sync: &TileSync,
        note: &TensorNote,
        span: &ChunkSpan,
        chunks: usize,
    ) -> Option<Vec<Vec<(u64, i32)>>> {
        side_signals(sync, note, span, chunks).map(|chunks| {
            chunks
                .into_iter()
                .map(|runs| {
                    assert!(runs.iter().all(|r| r.words == 1), "{runs:?}");
                    runs.into_iter().map(|r| (r.addr, r.value)).collect()
                })
                .collect()
        })
    }

    #[test]
    fn side_streams_signal_only_data_tiles_that_lie_in_one_chunk() {
        let ready = 3 * EPOCH_STRIDE;
        let plain = |tile| HostDim {
            size: 100,
            tile,
            bounds: Vec::new(),
        };
        // Rows in tiles of 32 (the last of 4 rows), chunks of 64 rows: tiles 0, 1 | 2, 3.
        let (sync, note) = output(plain(32));
        assert_eq!(
            side_writes(&sync, &note, &span(0, 64), 2),
            Some(vec![
                vec![(0x1000, ready), (0x1004, ready)],
                vec![(0x1008, ready), (0x100c, ready)],
            ])
        );
        // One chunk of everything.
        assert_eq!(side_writes(&sync, &note, &span(0, 100), 1).map(|w| w[0].len()), Some(4));
        // Chunks of 48 rows cut tile 1 in two; column chunks cut every tile.
        assert_eq!(side_writes(&sync, &note, &span(0, 48), 3), None);
        assert_eq!(side_writes(&sync, &note, &span(1, 4), 2), None);
        // Irregular rows 0..10, 10..64, 64..100 with chunks of 64 rows.
        let (sync, note) = output(HostDim {
            size: 100,
            tile: 0,
            bounds: vec![0, 10, 64, 100],
        });
        assert_eq!(
            side_writes(&sync, &note, &span(0, 64), 2),
            Some(vec![vec![(0x1000, ready), (0x1004, ready)], vec![(0x1008, ready)]])
        );
        assert_eq!(side_writes(&sync, &note, &span(0, 32), 4), None);
        // Tiles of 4 rows: one chunk would signal 25 of them, chunks of 64 rows 16 and 9.
        let (sync, note) = output(plain(4));
        assert_eq!(side_writes(&sync, &note, &span(0, 100), 1), None);
        assert_eq!(
            side_writes(&sync, &note, &span(0, 64), 2).map(|w| w.iter().map(Vec::len).collect::<Vec<_>>()),
            Some(vec![MAX_SIDE_SIGNALS, 9])
        );
    }

    #[test]
    fn one_chunk_on_its_lane_signals_runs_of_consecutive_semaphores() {
        let ready = 3 * EPOCH_STRIDE;
        let run = |addr, words| SignalRun {
            addr,
            words,
            value: ready,
        };
        // 25 data tiles of 4 rows: one memset-sized run, where the side streams refuse.
        let (sync, note) = output(HostDim {
            size: 100,
            tile: 4,
            bounds: Vec::new(),
        });
        assert_eq!(side_signals(&sync, &note, &span(0, 100), 1), None);
        assert_eq!(lane_runs(&sync, &note, &span(0, 100)), Some(vec![run(0x1000, 25)]));
        // Irregular rows: three tiles, one run.
        let (sync, note) = output(HostDim {
            size: 100,
            tile: 0,
            bounds: vec![0, 10, 64, 100],
        });
        assert_eq!(lane_runs(&sync, &note, &span(0, 100)), Some(vec![run(0x1000, 3)]));
        // Columns: each data tile spans the whole width, so one chunk of 4 of the 8
        // columns shares every tile with another chunk.
        let (sync, note) = output(HostDim {
            size: 100,
            tile: 4,
            bounds: Vec::new(),
        });
        assert_eq!(lane_runs(&sync, &note, &span(1, 4)), None);
    }
}
