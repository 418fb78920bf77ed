//! [`Tensor`]: typed device memory with a shape.

use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::marker::PhantomData;
use std::sync::Arc;

/// A dense, row-major device tensor of `T` (rank 1 to 4). Cloning shares the memory.
#[derive(Clone)]
pub struct Tensor<T: DType> {
    device: Device,
    buf: Arc<Buffer>,
    /// Offset of the first element, in elements.
    offset: usize,
    shape: Vec<usize>,
    _t: PhantomData<T>,
}

/// Largest host buffer [`Tensor::full`] and [`Tensor::fill`] stage values in.
const FILL_CHUNK_BYTES: usize = 4 << 20;

/// Largest supported rank.
pub const MAX_TENSOR_RANK: usize = 4;

fn numel(shape: &[usize]) -> Result<usize> {
    if shape.is_empty() || shape.len() > MAX_TENSOR_RANK {
        return Err(Error::shape(format!(
            "tensor rank {} is not supported (1 to {MAX_TENSOR_RANK})",
            shape.len()
        )));
    }
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::shape(format!("shape {shape:?} has too many elements")))
}

impl<T: DType> Tensor<T> {
    /// Uninitialised (GPU) or zeroed (CPU backend) tensor. Prefer [`Tensor::zeros`] or
    /// [`Tensor::full`] unless every element is written before it is read.
    pub fn empty(device: &Device, shape: &[usize]) -> Result<Self> {
        let n = numel(shape)?;
        let bytes = n
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::shape(format!("shape {shape:?} is too large")))?;
        Ok(Tensor {
            device: device.clone(),
            buf: Arc::new(device.alloc(bytes)?),
            offset: 0,
            shape: shape.to_vec(),
            _t: PhantomData,
        })
    }

    /// A tensor holding `data` (row-major), which must have `shape`'s element count.
    pub fn from_slice(device: &Device, shape: &[usize], data: &[T]) -> Result<Self> {
        let n = numel(shape)?;
        if data.len() != n {
            return Err(Error::shape(format!(
                "{} values given for a tensor of shape {shape:?} ({n} elements)",
                data.len()
            )));
        }
        let t = Tensor::empty(device, shape)?;
        device.copy_to_device(&t.buf, 0, as_bytes(data))?;
        Ok(t)
    }

    /// A tensor with every element `value`. A shape too large for the device is an
    /// error (as for [`Tensor::empty`]): the device memory is allocated first, then
    /// written through a bounded host buffer.
    pub fn full(device: &Device, shape: &[usize], value: T) -> Result<Self> {
        let t = Tensor::empty(device, shape)?;
        t.write_repeated(value)?;
        Ok(t)
    }

    /// Writes `value` over every element, through host chunks of at most
    /// [`FILL_CHUNK_BYTES`] (never a host copy of the whole tensor). Synchronous; the
    /// caller has synchronised with queued work that uses the memory.
    fn write_repeated(&self, value: T) -> Result<()> {
        let n = self.numel();
        let chunk = vec![value; (FILL_CHUNK_BYTES / size_of::<T>()).clamp(1, n.max(1))];
        let mut done = 0;
        while done < n {
            let k = chunk.len().min(n - done);
            self.device()
                .copy_to_device(&self.buf, (self.offset + done) * size_of::<T>(), as_bytes(&chunk[..k]))?;
            done += k;
        }
        Ok(())
    }

    /// A tensor of zeros.
    pub fn zeros(device: &Device, shape: &[usize]) -> Result<Self> {
        Tensor::full(device, shape, T::default())
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Shape, outermost dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.numel() * size_of::<T>()
    }

    /// Device address of the first element (host address on the CPU backend).
    pub fn addr(&self) -> u64 {
        self.buf.addr() + (self.offset * size_of::<T>()) as u64
    }

    /// The underlying allocation (launches keep it alive while they may run).
    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buf
    }

    /// The same memory with another shape of equal element count.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        if numel(shape)? != self.numel() {
            return Err(Error::shape(format!(
                "cannot reshape {:?} ({} elements) to {shape:?}",
                self.shape,
                self.numel()
            )));
        }
        Ok(Tensor {
            device: self.device.clone(),
            buf: self.buf.clone(),
            offset: self.offset,
            shape: shape.to_vec(),
            _t: PhantomData,
        })
    }

    /// Rows `start..end` of the outermost dimension, sharing memory.
    pub fn narrow(&self, start: usize, end: usize) -> Result<Self> {
        if start > end || end > self.shape[0] {
            return Err(Error::shape(format!(
                "rows {start}..{end} out of range for shape {:?}",
                self.shape
            )));
        }
        let row: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        Ok(Tensor {
            device: self.device.clone(),
            buf: self.buf.clone(),
            offset: self.offset + start * row,
            shape,
            _t: PhantomData,
        })
    }

    /// Copies the tensor to the host after waiting for all queued work on the device
    /// (and reporting its failures).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.device().synchronize()?;
        let mut out = vec![T::default(); self.numel()];
        self.device()
            .copy_to_host(&self.buf, self.offset * size_of::<T>(), as_bytes_mut(&mut out))?;
        Ok(out)
    }

    /// Overwrites the tensor with `data` after waiting for all queued work on the device.
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        if data.len() != self.numel() {
            return Err(Error::shape(format!(
                "{} values given for a tensor of shape {:?}",
                data.len(),
                self.shape
            )));
        }
        self.device().synchronize()?;
        self.device()
            .copy_to_device(&self.buf, self.offset * size_of::<T>(), as_bytes(data))
    }

    /// Fills every element with `value` (after waiting for queued work).
    pub fn fill(&self, value: T) -> Result<()> {
        self.device().synchronize()?;
        self.write_repeated(value)
    }
}

impl<T: DType> std::fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor<{}>{:?}", T::NAME, self.shape)
    }
}

pub(crate) fn as_bytes<T: DType>(v: &[T]) -> &[u8] {
    // SAFETY: DType is sealed to plain-old-data types without padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

pub(crate) fn as_bytes_mut<T: DType>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: DType is sealed to plain-old-data types valid for every bit pattern.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

impl<T: DType> Tensor<T> {
    /// Fills the tensor with the bit pattern `word` repeated (e.g. `0xFFFF_FFFF` poisons
    /// f32/bf16 data with NaNs) by a kernel on `stream`, without a host copy. The byte
    /// size must be a multiple of 4.
    pub fn fill_bits_on(&self, stream: &crate::Stream, word: u32) -> Result<()> {
        if !self.size_bytes().is_multiple_of(4) {
            return Err(Error::shape(format!(
                "fill_bits_on needs a multiple of 4 bytes; {:?} has {}",
                self.shape,
                self.size_bytes()
            )));
        }
        if !stream.device().same(&self.device) {
            return Err(Error::Invalid(format!(
                "fill_bits_on: the tensor lives on {}, the stream on {}",
                self.device.name(),
                stream.device().name()
            )));
        }
        let start = self.offset * size_of::<T>();
        if !start.is_multiple_of(4) {
            return Err(Error::shape(format!(
                "fill_bits_on needs a view starting at a multiple of 4 bytes; this one starts at byte {start}"
            )));
        }
        let first = (start / 4) as u64;
        crate::runtime::fill_words(stream, &self.buf, first, (self.size_bytes() / 4) as u64, word).map(|_| ())
    }
}

// Defined here rather than in `device.rs`, which does not depend on tensors.
impl Device {
    /// Registers `counters` as ticket counters (split-K and "last CTA" reductions): u32s
    /// that every complete launch leaves zero. A launch that fails — a tile wait that
    /// times out, a CPU-backend deadlock — can leave some raised, which would silently
    /// corrupt the next launch that uses them; so when the device reports such a failure
    /// it waits for all queued work and zeroes every registered counter that is still
    /// allocated. The kernel library's workspaces register theirs.
    pub fn register_tickets(&self, counters: &Tensor<u32>) {
        let offset = (counters.addr() - counters.buffer().addr()) as usize;
        self.register_ticket_span(counters.buffer(), offset, counters.size_bytes());
    }
}
