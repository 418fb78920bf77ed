//! Stream-level ordering of plain tensors inside an AsyncStream: a launch that reads a
//! buffer another of its streams wrote waits for that writer's event (unless data-tile
//! semaphores order them), and one that overwrites a buffer waits for earlier readers and
//! writers on other streams.

use crate::launch::Access;
use crate::stream::Event;
use std::collections::HashMap;
use std::sync::Arc;

/// Above this many tracked buffers, entries whose events all completed are dropped.
const PRUNE_ABOVE: usize = 4096;

/// Last writer and readers (per stream, latest event) of one buffer.
#[derive(Default)]
struct Hazard {
    write: Option<(usize, Arc<Event>)>,
    reads: Vec<(usize, Arc<Event>)>,
}

/// The hazards of every buffer an AsyncStream's launches used, by address.
#[derive(Default)]
pub(super) struct Hazards {
    by_buffer: HashMap<u64, Hazard>,
}

impl Hazards {
    /// Forgets everything (all work is done, or a capture starts afresh).
    pub fn clear(&mut self) {
        self.by_buffer.clear();
    }

    /// Events a launch with `accesses` must wait for on stream `s`.
    pub fn waits(&self, s: usize, accesses: &[Access]) -> Vec<Arc<Event>> {
        let mut waits: Vec<Arc<Event>> = Vec::new();
        for a in accesses {
            let Some(h) = self.by_buffer.get(&a.buffer.addr()) else {
                continue;
            };
            let other = |(i, e): &(usize, Arc<Event>)| (*i != s).then(|| e.clone());
            // Read-after-write needs a wait unless semaphores order it.
            if !a.synced || a.write {
                waits.extend(h.write.iter().filter_map(other));
            }
            // Write-after-read: earlier readers on other streams must be done.
            if a.write {
                waits.extend(h.reads.iter().filter_map(other));
            }
        }
        waits
    }

    /// Records a launch with `accesses` on stream `s`, followed by `event`. Outside a
    /// capture, entries of finished work are pruned once there are many.
    pub fn record(&mut self, s: usize, accesses: &[Access], event: &Arc<Event>, capturing: bool) {
        for a in accesses {
            let h = self.by_buffer.entry(a.buffer.addr()).or_default();
            if a.write {
                h.write = Some((s, event.clone()));
                h.reads.clear();
            } else {
                h.reads.retain(|(i, _)| *i != s);
                h.reads.push((s, event.clone()));
            }
        }
        if !capturing && self.by_buffer.len() > PRUNE_ABOVE {
            self.by_buffer.retain(|_, h| {
                h.write.as_ref().is_some_and(|(_, e)| !e.is_complete()) || h.reads.iter().any(|(_, e)| !e.is_complete())
            });
        }
    }
}
