//! Ordering of `Tiled` tensors across launch targets.
//!
//! Data-tile semaphores order a producer and its consumers wherever they run, but only
//! within one cycle (epoch) of the tensor, and only if the producer gets SMs: a consumer
//! on one target can fill the GPU with waiting CTAs while its producer is still queued
//! behind other work on another target (the deadlock the AsyncStream's begin-CTA rule
//! prevents inside one AsyncStream), and a re-producer of the next cycle on one target can
//! overwrite the data while a consumer of the previous cycle on another target has not
//! read it yet. An [`AsyncStream`](crate::AsyncStream) orders its own streams; between
//! *different* targets (two plain [`Stream`](crate::Stream)s, or a plain stream and an
//! AsyncStream) every `Tiled` tensor keeps a log of the launches that used it, and a
//! launch on another target first waits, stream-level, for
//! - the last launch that wrote the tensor (a consumer, or the next producer), and
//! - the launches that read it since (the next producer).
//!
//! Work on one target overlaps through semaphores as before; across targets the
//! consumer runs after its producer (correct and deadlock-free, without overlap).

use crate::error::Result;
use crate::mutex::lock;
use crate::stream::{Event, Stream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Identifies a launch target (a plain stream, or an AsyncStream as a whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TargetKey(u64);

impl TargetKey {
    /// A key no other target has.
    pub(crate) fn fresh() -> TargetKey {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        TargetKey(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The key's number, unique among the process's launch targets.
    pub(crate) fn number(self) -> u64 {
        self.0
    }
}

/// The launches that used one `Tiled` tensor, as far as ordering needs them.
#[derive(Default)]
pub(crate) struct Uses {
    /// The last launch that wrote it: its target and the event recorded after it.
    write: Option<(TargetKey, Arc<Event>)>,
    /// Launches that read it since, that may still run.
    reads: Vec<(TargetKey, Arc<Event>)>,
}

/// A tensor's log, shared by the tensor and the launches that use it.
pub(crate) type SharedUses = Arc<Mutex<Uses>>;

/// How one launch uses one `Tiled` tensor.
#[derive(Clone)]
pub(crate) struct TiledUse {
    /// The tensor's log.
    pub(crate) uses: SharedUses,
    /// Written (a producer), else read.
    pub(crate) write: bool,
}

impl Uses {
    /// Events a launch on `on` must wait for before it reads (or, `write`, writes).
    fn waits(&self, on: TargetKey, write: bool) -> Vec<Arc<Event>> {
        let foreign = |(k, e): &(TargetKey, Arc<Event>)| (*k != on && !e.is_complete()).then(|| e.clone());
        let mut waits: Vec<Arc<Event>> = self.write.iter().filter_map(foreign).collect();
        if write {
            waits.extend(self.reads.iter().filter_map(foreign));
        }
        waits
    }

    /// Records a launch on `on`, followed by `event`.
    fn record(&mut self, on: TargetKey, write: bool, event: &Arc<Event>) {
        if write {
            self.write = Some((on, event.clone()));
            self.reads.clear();
        } else {
            self.reads.retain(|(_, e)| !e.is_complete());
            self.reads.push((on, event.clone()));
        }
    }
}

/// Every event a launch on `on` with these uses must wait for (deduplicated).
pub(crate) fn foreign_waits(uses: &[TiledUse], on: TargetKey) -> Vec<Arc<Event>> {
    let mut waits: Vec<Arc<Event>> = Vec::new();
    for u in uses {
        for e in lock(&u.uses).waits(on, u.write) {
            if !waits.iter().any(|w| Arc::ptr_eq(w, &e)) {
                waits.push(e);
            }
        }
    }
    waits
}

/// Makes `stream` wait for every event a launch on `on` with these uses needs.
pub(crate) fn order_on(stream: &Stream, uses: &[TiledUse], on: TargetKey) -> Result<()> {
    foreign_waits(uses, on).iter().try_for_each(|e| stream.wait_event(e))
}

/// Records a launch on `on` (followed by `event`) in the logs of the tensors it uses.
pub(crate) fn record(uses: &[TiledUse], on: TargetKey, event: &Arc<Event>) {
    for u in uses {
        lock(&u.uses).record(on, u.write, event);
    }
}
