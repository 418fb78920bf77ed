//! Copy-engine transfers as subkernels: a copy of rows (dimension 0) of a row-major
//! tensor, device-to-device ([`copy_rows`]) or from page-locked host memory
//! ([`upload_rows`]), chunk by chunk, one `cuMemcpyAsync` per chunk, held back by the runtime's wait
//! kernel (a kernel before copy-engine work, so that the wait does not queue behind the
//! other side stream's copy). On the CPU backend each chunk is a host `memcpy` in stream
//! order.

use super::cublaslt::Shaped;
use super::{Chunk, ChunkOp, ChunkSignals, Chunking, SubkernelLaunch, Wrappers};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::launch::{AsInput, AsOutput, LaunchOptions, LaunchTarget};
use crate::pinned::PinnedHost;
use crate::stream::Stream;
use crate::tensor::Tensor;
use crate::tiling::Rank;
use std::sync::Arc;

/// How a copy subkernel is chunked.
#[derive(Clone, Debug)]
pub struct CopyChunks {
    /// At most this many chunks of rows (1 to [`super::MAX_CHUNKS`]).
    pub chunks: usize,
    /// Chunk sizes are multiples of this many rows.
    pub align: usize,
    /// Who signals each chunk's rows of the destination (its side stream when they align
    /// with the chunks, the default).
    pub signals: ChunkSignals,
    /// Options of the proxy launch (wait timeout).
    pub launch: LaunchOptions,
}

impl Default for CopyChunks {
    fn default() -> Self {
        CopyChunks {
            chunks: 4,
            align: 1,
            signals: ChunkSignals::default(),
            launch: LaunchOptions::default(),
        }
    }
}

/// Copies `src` into `dst` (same shape and element type, row-major, rank `R`) on the copy
/// engine, as a subkernel on `target` chunked by rows: chunk `c` waits for its rows of
/// `src` (when it is a produced `Tiled` tensor), copies them, and signals its rows of `dst`
/// (when it is a `Tiled` tensor).
pub fn copy_rows<T: DType, R: Rank>(
    target: &impl LaunchTarget,
    src: &(impl AsInput<T, R> + Shaped + ?Sized),
    dst: &mut (impl AsOutput<T, R> + Shaped + ?Sized),
    chunks: &CopyChunks,
) -> Result<()> {
    let shape = src.dims().to_vec();
    if dst.dims() != shape.as_slice() {
        return Err(Error::shape(format!(
            "a copy needs equal shapes: src {shape:?}, dst {:?}",
            dst.dims()
        )));
    }
    let (mut l, row_bytes, declared) = row_launch::<T>(target, "copy_rows", &shape, chunks)?;
    let src = l.input("src", src, &declared, Some(0))?;
    let dst = l.output("dst", dst, &declared, 0)?;
    l.submit(target, Arc::new(RowCopy { src, dst, row_bytes }))
}

/// Copies `src`, page-locked host memory, into `dst` (row-major, `src.len()` elements) on
/// the copy engine, as a subkernel on `target` chunked by rows (dimension 0 of `dst`):
/// chunk `c` copies its rows host-to-device and signals them (when `dst` is a `Tiled`
/// tensor), so consumers start on the first rows while later ones are in flight.
pub fn upload_rows<T: DType, R: Rank>(
    target: &impl LaunchTarget,
    src: &PinnedHost<T>,
    dst: &mut (impl AsOutput<T, R> + Shaped + ?Sized),
    chunks: &CopyChunks,
) -> Result<()> {
    let shape = dst.dims().to_vec();
    if shape.iter().product::<usize>() != src.len() {
        return Err(Error::shape(format!(
            "an upload of {} values into a tensor of shape {shape:?}",
            src.len()
        )));
    }
    if !src.device().same(target.device()) {
        return Err(Error::Invalid(format!(
            "an upload on {} from page-locked memory of {}",
            target.device().name(),
            src.device().name()
        )));
    }
    let (mut l, row_bytes, declared) = row_launch::<T>(target, "upload_rows", &shape, chunks)?;
    l.keep(src.buffer().clone());
    let dst = l.output("dst", dst, &declared, 0)?;
    let src = src.buffer().addr();
    l.submit(target, Arc::new(RowCopy { src, dst, row_bytes }))
}

/// The subkernel launch of a copy of rows of a tensor of `shape` (rank ≥ 1) chunked by
/// `chunks`, its bytes per row and its declared shape.
fn row_launch<'a, T: DType>(
    target: &impl LaunchTarget,
    name: &'static str,
    shape: &[usize],
    chunks: &'a CopyChunks,
) -> Result<(SubkernelLaunch<'a>, usize, Vec<u64>)> {
    let rows = *shape
        .first()
        .ok_or_else(|| Error::shape(format!("`{name}` copies rows: it needs a tensor of rank ≥ 1")))?;
    let row_bytes = shape[1..].iter().product::<usize>() * size_of::<T>();
    let chunking = Chunking::new(rows, chunks.chunks, chunks.align.max(1))?;
    let mut l = SubkernelLaunch::new(target.device(), name, &chunks.launch, chunking, Wrappers::Kernels)?;
    l.signals(chunks.signals);
    Ok((l, row_bytes, shape.iter().map(|&d| d as u64).collect()))
}

/// Copies `src` into `dst` (same shape and element type) as one copy-engine transfer on
/// `stream`, without the data-tile protocol (the reference for chunked copies, and an
/// unadapted operation for interop). Enqueued only: the caller keeps both tensors alive
/// until the stream is done with them.
pub fn copy_on<T: DType>(stream: &Stream, src: &Tensor<T>, dst: &mut Tensor<T>) -> Result<()> {
    if src.shape() != dst.shape() {
        return Err(Error::shape(format!(
            "a copy needs equal shapes: src {:?}, dst {:?}",
            src.shape(),
            dst.shape()
        )));
    }
    for t in [src.device(), dst.device()] {
        if !t.same(stream.device()) {
            return Err(Error::Invalid(format!(
                "a copy on a stream of {} got a tensor of {}",
                stream.device().name(),
                t.name()
            )));
        }
    }
    if src.buffer().addr() == dst.buffer().addr() {
        return Err(Error::Invalid(
            "a copy's source and destination are the same memory".into(),
        ));
    }
    let bytes = src.numel() * size_of::<T>();
    // SAFETY: two distinct tensors of `bytes` bytes on the stream's device (checked);
    // the caller keeps them alive until the stream is done.
    unsafe { stream.copy_raw(dst.addr(), src.addr(), bytes) }
}

/// The chunks of one copy.
struct RowCopy {
    src: u64,
    dst: u64,
    row_bytes: usize,
}

impl RowCopy {
    fn part(&self, chunk: Chunk) -> (u64, u64, usize) {
        let off = (chunk.start * self.row_bytes) as u64;
        (self.dst + off, self.src + off, chunk.len() * self.row_bytes)
    }
}

impl ChunkOp for RowCopy {
    unsafe fn enqueue(&self, chunk: Chunk, _lane: usize, stream: &Stream) -> Result<()> {
        let (dst, src, bytes) = self.part(chunk);
        // SAFETY: the chunk's rows of two operands of the checked size (tensors, or
        // page-locked host memory as the source), kept alive by the launch; distinct
        // operands do not overlap (a tensor cannot be bound as both).
        unsafe { stream.copy_raw(dst, src, bytes) }
    }

    unsafe fn run_on_host(&self, chunk: Chunk) {
        let (dst, src, bytes) = self.part(chunk);
        // SAFETY: as above; CPU-backend memory is host memory.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) }
    }
}
