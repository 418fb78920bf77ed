//! [`Graph`]: a captured AsyncStream program, replayable with one launch.

use super::AsyncStream;
use crate::backend::GraphBackend;
use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::launch::{LaunchTarget as _, TiledHandle};
use crate::mutex::lock;
use crate::order::{self, TiledUse};
use crate::runtime;
use crate::stream::Event;
use crate::tiled::{Phase, TiledState};
use megaops_device::sync::EPOCH_STRIDE;
use megaops_runtime_kernels::FillSpan;
use std::sync::{Arc, Mutex};

/// A replayable program recorded by [`AsyncStream::capture`]: a CUDA graph on a GPU, the
/// virtual GPU's graph on the CPU backend. It keeps every buffer it uses alive; dropping
/// it waits for its last replay to finish, so queued replays never run on freed memory.
pub struct Graph {
    device: Device,
    body: Box<dyn GraphBackend>,
    restores: Vec<SemaphoreRestore>,
    _buffers: Vec<Arc<Buffer>>,
    /// Completes when the last replay queued so far has finished.
    last_replay: Mutex<Option<Arc<Event>>>,
}

/// A `Tiled` tensor the graph produces: the semaphore value its captured launches count
/// from, and the host-side state to set after a replay.
pub(crate) struct SemaphoreRestore {
    pub(crate) handle: TiledHandle,
    pub(crate) epoch: u32,
}

impl SemaphoreRestore {
    fn value(&self) -> i32 {
        (self.epoch as i32).wrapping_mul(EPOCH_STRIDE)
    }

    /// The semaphore words and the value they are restored to.
    fn span(&self) -> FillSpan {
        FillSpan {
            addr: self.handle.sema.addr(),
            words: self.handle.sema_count as u32,
            value: self.value(),
        }
    }

    /// Whether the semaphores must be set before a replay. A replay ends by restoring
    /// them to [`Self::value`] and leaves the tensor complete at `epoch`; nothing else
    /// reaches that state with other semaphore values (an eager producer needs a rearm
    /// and leaves it produced; a rearm after production moves the epoch on), so an
    /// unchanged state means the previous replay's restore still holds.
    fn needs_reset(&self) -> bool {
        *lock(&self.handle.state)
            != TiledState {
                epoch: self.epoch,
                phase: Phase::Complete,
            }
    }
}

impl Graph {
    pub(crate) fn new(
        device: Device,
        body: Box<dyn GraphBackend>,
        restores: Vec<SemaphoreRestore>,
        buffers: Vec<Arc<Buffer>>,
    ) -> Graph {
        Graph {
            device,
            body,
            restores,
            _buffers: buffers,
            last_replay: Mutex::new(None),
        }
    }

    /// Replays the program on `on` (the AsyncStream it was captured from, or another on
    /// the same device). Later work on `on` runs after the replay.
    ///
    /// Eager launches may run between replays (also on the graph's `Tiled` tensors): after
    /// everything queued on `on`, the semaphores of the tensors the graph produces are set
    /// back to the values its launches were captured against, and once the replay is
    /// queued those tensors are *complete* on the host side (before the first replay
    /// they are [`Phase::Captured`]: eager reads are refused). Work on other targets that
    /// still uses them runs first, and a launch on another target that reads them waits
    /// for the replay (see [`Tiled`](crate::Tiled)).
    pub fn launch(&self, on: &AsyncStream) -> Result<()> {
        if !on.device().same(&self.device) {
            return Err(Error::Invalid(
                "a graph replays only on the device it was captured on".into(),
            ));
        }
        let uses: Vec<TiledUse> = self
            .restores
            .iter()
            .map(|r| TiledUse {
                uses: r.handle.uses.clone(),
                write: true,
            })
            .collect();
        for s in on.every_stream() {
            order::order_on(s, &uses, on.key())?;
        }
        // The graph runs on stream 0: order it after all of `on`'s streams, and them
        // after it.
        let s0 = &on.streams()[0];
        for s in on.every_stream().skip(1) {
            s0.wait_event(&s.record_marker()?)?;
        }
        let resets: Vec<&SemaphoreRestore> = self.restores.iter().filter(|r| r.needs_reset()).collect();
        let spans: Vec<FillSpan> = resets.iter().map(|r| r.span()).collect();
        let keep: Vec<Arc<Buffer>> = resets.iter().map(|r| r.handle.sema.clone()).collect();
        // SAFETY: each span is the semaphore array of a tensor whose semaphore buffer is
        // in `keep`.
        unsafe { runtime::fill_spans(s0, &spans, &keep)? };
        s0.launch_graph(self.body.as_ref())?;
        let done = Arc::new(s0.record_marker()?);
        order::record(&uses, on.key(), &done);
        *lock(&self.last_replay) = Some(done);
        on.wait_on(s0)?;
        // The next eager launch runs after the whole replay: it must not wait for the
        // begin flag of a launch made before it (the graph resets the flag).
        on.forget_previous_launch();
        for r in &self.restores {
            *lock(&r.handle.state) = TiledState {
                epoch: r.epoch,
                phase: Phase::Complete,
            };
        }
        Ok(())
    }

    /// Uploads the graph's resources so the first replay does not pay for it (GPU only).
    pub fn upload(&self) -> Result<()> {
        self.body.upload()
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // The executable graph and the buffers its kernels use must outlive every queued
        // replay. A failed wait has already been reported by the device (its error log,
        // the stream's failure); the graph is released after it either way.
        if let Some(done) = lock(&self.last_replay).take() {
            let _ = done.synchronize();
        }
    }
}
