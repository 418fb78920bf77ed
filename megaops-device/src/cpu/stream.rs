//! Streams and events: what the host has submitted and how far each stream has got.
//!
//! Each stream is a FIFO of operations. Its head *starts* when everything before it on
//! the stream completed: a host operation runs then and there, an event record completes
//! its event, an event wait completes once its event has, and a kernel becomes ready and
//! keeps the stream busy until its last CTA finished. Host threads append here (under a
//! short lock) while the scheduler drains it.

use std::collections::VecDeque;
use std::fmt;

use super::dispatch::KernelRun;

/// A stream of one [`super::VirtualGpu`], from [`super::VirtualGpu::create_stream`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    pub(crate) gpu: u64,
    pub(crate) index: u32,
}

impl StreamId {
    /// Index of the stream on its virtual GPU (0 for the first stream created).
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}", self.index)
    }
}

/// An event of one [`super::VirtualGpu`], from [`super::VirtualGpu::record_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId {
    pub(crate) gpu: u64,
    pub(crate) index: u64,
}

impl EventId {
    /// Index of the event on its virtual GPU (in recording order).
    pub fn index(&self) -> u64 {
        self.index
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event {}", self.index)
    }
}

/// A host operation: runs on the scheduling host thread when its stream reaches it.
pub(crate) type HostOp = Box<dyn FnOnce() + Send>;

/// One stream operation.
pub(crate) enum Op {
    Kernel(KernelRun),
    Host(HostOp),
    Record(u64),
    Wait(u64),
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::Kernel(k) => format!("kernel `{}` (launch #{})", k.name, k.seq),
            Op::Host(_) => "host operation".to_string(),
            Op::Record(e) => format!("record of event {e}"),
            Op::Wait(e) => format!("wait for event {e}"),
        }
    }
}

/// What [`Queues::start_head`] found at a stream's head.
pub(crate) enum Started {
    /// Nothing can start: the stream is empty, busy, or waits for an event.
    Nothing,
    /// An event record or a satisfied event wait completed.
    Completed,
    /// A kernel became ready; the stream stays busy until [`Queues::finish_busy`].
    Kernel(KernelRun),
    /// A host operation to run now; then call [`Queues::finish_busy`].
    Host(HostOp),
}

#[derive(Default)]
struct StreamQueue {
    ops: VecDeque<Op>,
    /// Operations ever submitted.
    submitted: u64,
    /// Operations completed (a prefix of the submitted ones).
    completed: u64,
    /// What the stream is running now (a kernel or a host operation), if anything.
    busy: Option<String>,
}

struct EventState {
    stream: u32,
    complete: bool,
}

/// All streams and events of a virtual GPU.
pub(crate) struct Queues {
    gpu: u64,
    streams: Vec<StreamQueue>,
    events: Vec<EventState>,
    next_launch: u64,
}

/// What a synchronize call waits for.
pub(crate) enum Goal {
    /// Each listed stream completed at least this many operations.
    Streams(Vec<(u32, u64)>),
    /// The event completed.
    Event(u64),
}

impl Queues {
    pub(crate) fn new(gpu: u64) -> Self {
        Queues {
            gpu,
            streams: Vec::new(),
            events: Vec::new(),
            next_launch: 0,
        }
    }

    pub(crate) fn create_stream(&mut self) -> StreamId {
        self.streams.push(StreamQueue::default());
        StreamId {
            gpu: self.gpu,
            index: (self.streams.len() - 1) as u32,
        }
    }

    /// Whether `stream` is a stream of this GPU.
    pub(crate) fn owns(&self, stream: StreamId) -> bool {
        stream.gpu == self.gpu && (stream.index as usize) < self.streams.len()
    }

    /// Whether `event` is an event of this GPU.
    pub(crate) fn owns_event(&self, event: EventId) -> bool {
        event.gpu == self.gpu && (event.index as usize) < self.events.len()
    }

    /// A new launch number (launches are numbered in submission order).
    pub(crate) fn next_launch(&mut self) -> u64 {
        self.next_launch += 1;
        self.next_launch
    }

    /// Appends `op` to `stream` (which the caller checked with [`Queues::owns`]).
    pub(crate) fn push(&mut self, stream: StreamId, op: Op) {
        let q = &mut self.streams[stream.index as usize];
        q.ops.push_back(op);
        q.submitted += 1;
    }

    /// A new, incomplete event recorded on `stream`.
    pub(crate) fn new_event(&mut self, stream: StreamId) -> EventId {
        self.events.push(EventState {
            stream: stream.index,
            complete: false,
        });
        EventId {
            gpu: self.gpu,
            index: (self.events.len() - 1) as u64,
        }
    }

    /// Marks `event` complete (a launch's start event: its kernel placed its last CTA).
    pub(crate) fn complete_event(&mut self, event: u64) {
        if let Some(ev) = self.events.get_mut(event as usize) {
            ev.complete = true;
        }
    }

    pub(crate) fn event_complete(&self, event: u64) -> bool {
        self.events.get(event as usize).is_some_and(|e| e.complete)
    }

    /// The id of stream `index`.
    pub(crate) fn stream_id(&self, index: u32) -> StreamId {
        StreamId { gpu: self.gpu, index }
    }

    pub(crate) fn num_streams(&self) -> usize {
        self.streams.len()
    }

    /// Starts the head of stream `s` if it can start now.
    pub(crate) fn start_head(&mut self, s: u32) -> Started {
        let q = &mut self.streams[s as usize];
        if q.busy.is_some() {
            return Started::Nothing;
        }
        match q.ops.front() {
            None => Started::Nothing,
            Some(Op::Wait(e)) => {
                if self.events.get(*e as usize).is_some_and(|ev| ev.complete) {
                    q.ops.pop_front();
                    q.completed += 1;
                    Started::Completed
                } else {
                    Started::Nothing
                }
            }
            Some(Op::Record(e)) => {
                if let Some(ev) = self.events.get_mut(*e as usize) {
                    ev.complete = true;
                }
                q.ops.pop_front();
                q.completed += 1;
                Started::Completed
            }
            Some(Op::Kernel(_) | Op::Host(_)) => {
                let desc = q.ops.front().map(Op::describe);
                q.busy = desc;
                match q.ops.pop_front() {
                    Some(Op::Kernel(k)) => Started::Kernel(k),
                    Some(Op::Host(h)) => Started::Host(h),
                    _ => Started::Nothing,
                }
            }
        }
    }

    /// The kernel or host operation that stream `s` was busy with completed.
    pub(crate) fn finish_busy(&mut self, s: u32) {
        let q = &mut self.streams[s as usize];
        if q.busy.take().is_some() {
            q.completed += 1;
        }
    }

    /// The goal "everything submitted so far on every stream".
    pub(crate) fn goal_all(&self) -> Goal {
        Goal::Streams(
            self.streams
                .iter()
                .enumerate()
                .map(|(i, q)| (i as u32, q.submitted))
                .collect(),
        )
    }

    /// The goal "everything submitted so far on `stream`".
    pub(crate) fn goal_stream(&self, stream: StreamId) -> Goal {
        Goal::Streams(vec![(stream.index, self.streams[stream.index as usize].submitted)])
    }

    pub(crate) fn reached(&self, goal: &Goal) -> bool {
        match goal {
            Goal::Streams(targets) => targets.iter().all(|&(s, n)| self.streams[s as usize].completed >= n),
            Goal::Event(e) => self.event_complete(*e),
        }
    }

    /// Drops every pending operation; incomplete events count as complete from now on (so
    /// that later waits on them do not block forever).
    pub(crate) fn discard_all(&mut self) {
        for q in &mut self.streams {
            q.ops.clear();
            q.busy = None;
            q.completed = q.submitted;
        }
        for e in &mut self.events {
            e.complete = true;
        }
    }

    /// One line per stream that has unfinished work, saying what holds it up.
    pub(crate) fn blocked_streams(&self) -> Vec<(StreamId, String)> {
        let mut out = Vec::new();
        for (i, q) in self.streams.iter().enumerate() {
            let stream = StreamId {
                gpu: self.gpu,
                index: i as u32,
            };
            let queued = q.ops.len();
            let line = match (&q.busy, q.ops.front()) {
                (Some(_), None) | (None, None) => continue,
                (Some(running), Some(_)) => {
                    format!("{queued} operation(s) queued behind {running}")
                }
                (None, Some(Op::Wait(e))) => {
                    let on = self.events.get(*e as usize).map(|ev| ev.stream).unwrap_or(u32::MAX);
                    format!(
                        "waits for event {e} (recorded on stream {on}), {} operation(s) behind it",
                        queued - 1
                    )
                }
                (None, Some(op)) => format!("{} not started, {} operation(s) behind it", op.describe(), queued - 1),
            };
            out.push((stream, line));
        }
        out
    }
}
