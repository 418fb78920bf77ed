//! Binding arguments to kernel parameters: plain tensors and `Tiled` tensors as inputs
//! and outputs.

use super::prepared::TiledHandle;
use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::notes::TensorNote;
use crate::order::TiledUse;
use crate::tensor::Tensor;
use crate::tiled::Tiled;
use crate::tiling::{DataTiling, Rank, TilesRank};
use megaops_device::sync::TileSync;
use std::sync::Arc;

/// The shape a kernel declares for a plain pointer parameter.
#[derive(Clone, Copy, Debug)]
pub enum Declared<'a> {
    /// `tensor(p[dims])`: exactly this shape.
    Shape(&'a [u64]),
    /// `scratch(p[len])`: any shape with at least this many elements.
    AtLeast(u64),
}

/// What binding an argument yields (built by the implementations for [`Tensor`] and
/// [`Tiled`]; opaque outside the runtime).
pub struct Binding {
    /// Device address of the first element.
    pub(crate) addr: u64,
    /// The data buffer.
    pub(crate) data: Arc<Buffer>,
    /// Shape.
    pub(crate) shape: Vec<usize>,
    /// Device.
    pub(crate) device: Device,
    /// Semaphores (inactive for plain tensors).
    pub(crate) sync: TileSync,
    /// Buffers the launch keeps alive.
    pub(crate) buffers: Vec<Arc<Buffer>>,
    /// For messages: tensor id and note.
    pub(crate) note: Option<(u32, TensorNote)>,
    /// For `Tiled` outputs: the tensor's protocol state.
    pub(crate) tiled: Option<TiledHandle>,
    /// For `Tiled` tensors: how the launch uses it (ordering across targets).
    pub(crate) tiled_use: Option<TiledUse>,
    /// For `Tiled` inputs only a not yet replayed graph produces: why an eager launch
    /// must not read it.
    pub(crate) unreplayed: Option<String>,
}

/// An argument a kernel can read as a synchronised input of element type `T` and rank
/// `R`: a plain [`Tensor`] (complete data, no waiting) or a [`Tiled`] tensor whose data
/// tiling has rank `R` (consumers wait per data tile).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed where the kernel reads a `{T}` tensor of rank `{R}`",
    label = "expected `&Tensor<{T}>` or `&Tiled<{T}, D>` with a rank-`{R}` data tiling `D`",
    note = "the element type and the data tiling's rank are part of a `Tiled` tensor's type and must match the kernel's annotation"
)]
pub trait AsInput<T: DType, R: Rank> {
    /// Binds for reading.
    fn bind_input(&self, kernel: &str, param: &str) -> Result<Binding>;
}

/// An argument a kernel can write as a synchronised output of element type `T` and rank `R`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed where the kernel writes a `{T}` tensor of rank `{R}`",
    label = "expected `&mut Tensor<{T}>` or `&mut Tiled<{T}, D>` with a rank-`{R}` data tiling `D`",
    note = "the element type and the data tiling's rank are part of a `Tiled` tensor's type and must match the kernel's annotation"
)]
pub trait AsOutput<T: DType, R: Rank> {
    /// Binds for writing.
    fn bind_output(&mut self, kernel: &str, param: &str) -> Result<Binding>;
}

fn plain_binding<T: DType>(t: &Tensor<T>) -> Binding {
    Binding {
        addr: t.addr(),
        data: t.buffer().clone(),
        shape: t.shape().to_vec(),
        device: t.device().clone(),
        sync: TileSync::NONE,
        buffers: vec![t.buffer().clone()],
        note: None,
        tiled: None,
        tiled_use: None,
        unreplayed: None,
    }
}

impl<T: DType, R: Rank> AsInput<T, R> for Tensor<T> {
    fn bind_input(&self, _: &str, _: &str) -> Result<Binding> {
        Ok(plain_binding(self))
    }
}

impl<T: DType, R: Rank> AsOutput<T, R> for Tensor<T> {
    fn bind_output(&mut self, _: &str, _: &str) -> Result<Binding> {
        Ok(plain_binding(self))
    }
}

/// The binding of `t` with `sync` and `note`, read (`written` false) or written; the
/// producer's handle and the unreplayed-capture note are the caller's to add.
fn tiled_binding<T: DType, D: DataTiling>(t: &Tiled<T, D>, sync: TileSync, note: TensorNote, written: bool) -> Binding {
    Binding {
        addr: t.tensor().addr(),
        data: t.tensor().buffer().clone(),
        shape: t.shape().to_vec(),
        device: t.tensor().device().clone(),
        sync,
        buffers: t.buffers(),
        note: Some((t.id(), note)),
        tiled: None,
        tiled_use: Some(t.tiled_use(written)),
        unreplayed: None,
    }
}

impl<T: DType, R: Rank, D: DataTiling + TilesRank<R>> AsInput<T, R> for Tiled<T, D> {
    fn bind_input(&self, kernel: &str, param: &str) -> Result<Binding> {
        let (sync, note, unreplayed) = self.consumer_sync(kernel, param)?;
        Ok(Binding {
            unreplayed,
            ..tiled_binding(self, sync, note, false)
        })
    }
}

impl<T: DType, R: Rank, D: DataTiling + TilesRank<R>> AsOutput<T, R> for Tiled<T, D> {
    fn bind_output(&mut self, kernel: &str, param: &str) -> Result<Binding> {
        let sync = self.producer_sync(kernel, param)?;
        let note = self.note(self.epoch(), None);
        Ok(Binding {
            tiled: Some(TiledHandle {
                state: self.state().clone(),
                sema: self.semaphores().buffer().clone(),
                sema_count: self.semaphore_count(),
                uses: self.tiled_use(true).uses,
            }),
            ..tiled_binding(self, sync, note, true)
        })
    }
}
