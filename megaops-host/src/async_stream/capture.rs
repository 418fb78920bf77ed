//! [`AsyncStream::capture`]: a whole multi-stream program recorded into a [`Graph`].
//!
//! The capture begins on stream 0, resets the begin flag inside the graph and forks the
//! other streams from it; the body's launches are recorded as on any stream; then the
//! other streams are joined back, the semaphores of every `Tiled` tensor the program
//! produced are restored to their values before the capture (so a replay leaves them as
//! it found them), and the capture ends. Both backends capture this way.

use super::{AsyncStream, Capture, Graph, SemaphoreRestore};
use crate::backend::GraphBackend;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::launch::TiledHandle;
use crate::mutex::lock;
use crate::runtime;
use crate::tiled::{Phase, TiledState};
use megaops_device::sync::EPOCH_STRIDE;
use megaops_runtime_kernels::FillSpan;
use std::sync::Arc;

/// A captured graph and the buffers its operations use.
type Captured = (Box<dyn GraphBackend>, Vec<Arc<Buffer>>);

impl AsyncStream {
    /// Records a whole program of launches on this AsyncStream into a replayable graph
    /// (a CUDA graph on a GPU; the virtual GPU's graph on the CPU backend). Nothing runs
    /// during the capture. Every replay starts from the semaphore state at capture time
    /// (set again before each replay, so eager launches may run in between) and restores
    /// it at the end; `Tiled` tensors the graph produces are left *complete* (readable
    /// without waiting) once a replay is done.
    pub fn capture(&self, body: impl FnOnce(&AsyncStream) -> Result<()>) -> Result<Graph> {
        // Everything before the capture must be done: captured launches do not order
        // after eager work, and the begin flag is reset inside the graph.
        self.synchronize()?;
        {
            let mut inner = lock(&self.inner);
            if inner.capture.is_some() {
                return Err(Error::Invalid("AsyncStream::capture cannot be nested".into()));
            }
            inner.capture = Some(Capture { touched: Vec::new() });
            inner.prev = None;
            inner.hazards.clear();
        }
        let result = self.capture_inner(body);
        let mut inner = lock(&self.inner);
        inner.prev = None;
        inner.hazards.clear();
        inner.started.retain(|l| !l.captured);
        let capture = inner.capture.take();
        drop(inner);
        let (graph, buffers) = result?;
        let capture = capture.ok_or_else(|| Error::Internal("the capture state was lost".into()))?;
        // Host state matches the device after a replay (restored semaphores), but the data
        // exists only once a replay has run: until then eager reads are refused.
        for (h, before) in &capture.touched {
            *lock(&h.state) = TiledState {
                epoch: before.epoch,
                phase: Phase::Captured,
            };
        }
        let restores = capture
            .touched
            .iter()
            .map(|(h, before)| SemaphoreRestore {
                handle: h.clone(),
                epoch: before.epoch,
            })
            .collect();
        Ok(Graph::new(self.device.clone(), graph, restores, buffers))
    }

    /// Runs the capture; returns the graph and the buffers it must keep alive.
    fn capture_inner(&self, body: impl FnOnce(&AsyncStream) -> Result<()>) -> Result<Captured> {
        for s in self.streams_and_side() {
            s.begin_capture_retention();
        }
        let s0 = &self.streams[0];
        if let Err(e) = s0.begin_capture() {
            for s in self.streams_and_side() {
                s.end_capture_retention();
            }
            return Err(e);
        }
        let run = (|| {
            // Reset the begin flag inside the graph, then fork the other streams.
            s0.fill_words(self.flag.buffer(), 0, 1, 0)?;
            let fork = s0.record_marker()?;
            for s in self.all_streams().skip(1) {
                s.wait_event(&fork)?;
            }
            body(self)
        })();
        // Join, restore semaphores, end the capture — also when the body failed.
        let finish = (|| -> Result<()> {
            let touched: Vec<(TiledHandle, TiledState)> = lock(&self.inner)
                .capture
                .as_ref()
                .map(|c| c.touched.clone())
                .unwrap_or_default();
            for s in self.all_streams().skip(1) {
                s0.wait_event(&s.record_marker()?)?;
            }
            let spans: Vec<FillSpan> = touched
                .iter()
                .map(|(h, before)| FillSpan {
                    addr: h.sema.addr(),
                    words: h.sema_count as u32,
                    value: (before.epoch as i32).wrapping_mul(EPOCH_STRIDE),
                })
                .collect();
            let keep: Vec<Arc<Buffer>> = touched.iter().map(|(h, _)| h.sema.clone()).collect();
            // SAFETY: each span is the semaphore array of a tensor whose semaphore buffer
            // is in `keep`.
            unsafe { runtime::fill_spans(s0, &spans, &keep) }
        })();
        let graph = s0.end_capture();
        let mut buffers: Vec<Arc<Buffer>> = self
            .streams_and_side()
            .flat_map(|s| s.end_capture_retention())
            .collect();
        buffers.push(self.flag.buffer().clone());
        run?;
        finish?;
        Ok((graph?, buffers))
    }
}
