//! Delayed release: memory goes back to the allocator only once no queued work can use
//! it.
//!
//! A [`Buffer`] frees its memory when its last `Arc` drops. Every launch hands the
//! buffers it uses to its stream's [`DelayedRelease`], which keeps them until the event
//! recorded after the launch has completed (checked, without blocking, at each later
//! launch and at every synchronisation), or — for work captured into a graph — for as
//! long as the graph lives. So a tensor dropped right after the launch that reads it
//! stays allocated until that kernel is done, and the CUDA allocator (which reuses
//! freed blocks instead of calling `cuMemFree`, which would synchronise the device) never
//! hands out memory a running kernel still touches.

use crate::buffer::Buffer;
use crate::stream::Event;
use std::collections::VecDeque;
use std::sync::Arc;

/// The buffers one stream's queued work still uses.
#[derive(Default)]
pub(crate) struct DelayedRelease {
    /// Buffers of launches whose completion is not yet known, with the event after them.
    pending: VecDeque<(Arc<Event>, Vec<Arc<Buffer>>)>,
    /// While a graph is being captured, buffers are kept here for the graph instead.
    captured: Option<Vec<Arc<Buffer>>>,
}

impl DelayedRelease {
    /// Keeps `buffers` until `event` (recorded after the work that uses them) completes,
    /// or for the graph being captured. Releases what finished before.
    pub fn hold(&mut self, buffers: Vec<Arc<Buffer>>, event: &Arc<Event>) {
        if let Some(captured) = self.captured.as_mut() {
            captured.extend(buffers);
            return;
        }
        while self.pending.front().is_some_and(|(e, _)| e.is_complete()) {
            self.pending.pop_front();
        }
        if !buffers.is_empty() {
            self.pending.push_back((event.clone(), buffers));
        }
    }

    /// Everything queued on the stream is done: releases all it held.
    pub fn release_all(&mut self) {
        self.pending.clear();
    }

    /// Starts keeping buffers for a graph capture instead of tracking them by events.
    pub fn begin_capture(&mut self) {
        self.captured = Some(Vec::new());
    }

    /// Ends a capture, returning the buffers the graph must keep alive.
    pub fn end_capture(&mut self) -> Vec<Arc<Buffer>> {
        self.captured.take().unwrap_or_default()
    }
}
