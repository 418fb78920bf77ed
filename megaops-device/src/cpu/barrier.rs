//! The 16 named CTA barriers (`bar.sync id[, count]`, `bar.red`).
//!
//! A barrier releases once `count` threads arrived, or, without a count, once every
//! non-exited thread of the CTA arrived; a thread exiting can therefore complete a
//! barrier the others wait at. All arrivals of one phase must give the same count.

use super::hooks::BarrierReduce;

/// Number of named barriers per CTA (`bar.sync 0..15`).
pub(crate) const NUM_BARRIERS: u32 = 16;

#[derive(Debug)]
struct Barrier {
    /// Threads (linear indices) waiting in the current phase, in arrival order.
    waiting: Vec<u32>,
    /// The count the phase's first arrival gave.
    count: Option<u32>,
    popc: u32,
    all: bool,
    any: bool,
}

impl Default for Barrier {
    fn default() -> Self {
        Barrier {
            waiting: Vec::new(),
            count: None,
            popc: 0,
            all: true,
            any: false,
        }
    }
}

impl Barrier {
    fn expected(&self, live: u32) -> u32 {
        self.count.unwrap_or(live)
    }

    fn release(&mut self) -> Release {
        let result = BarrierReduce {
            count: self.popc,
            all: self.all,
            any: self.any,
        };
        let threads = std::mem::take(&mut self.waiting);
        *self = Barrier::default();
        Release { threads, result }
    }
}

/// Threads a barrier phase releases, and what `bar.red` computed over their predicates.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Release {
    pub(crate) threads: Vec<u32>,
    pub(crate) result: BarrierReduce,
}

/// What an arrival did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The thread waits.
    Wait,
    /// The phase completed.
    Release(Release),
}

/// The barriers of one CTA.
#[derive(Debug)]
pub(crate) struct Barriers {
    bars: Vec<Barrier>,
}

impl Barriers {
    pub(crate) fn new() -> Self {
        Barriers {
            bars: (0..NUM_BARRIERS).map(|_| Barrier::default()).collect(),
        }
    }

    /// Thread `thread` arrives at barrier `id` (< 16) expecting `count` threads (all `live`
    /// non-exited threads when `None`), contributing `pred` to `bar.red` when given.
    /// Errors when `count` differs from the phase's first arrival.
    pub(crate) fn arrive(
        &mut self,
        id: u32,
        thread: u32,
        count: Option<u32>,
        pred: Option<bool>,
        live: u32,
    ) -> Result<Arrival, String> {
        let bar = &mut self.bars[id as usize];
        if bar.waiting.is_empty() {
            bar.count = count;
        } else if bar.count != count {
            return Err(format!(
                "barrier {id}: thread {thread} arrives expecting {} while the {} threads already there expect {}",
                describe_count(count),
                bar.waiting.len(),
                describe_count(bar.count)
            ));
        }
        bar.waiting.push(thread);
        if let Some(p) = pred {
            bar.popc += p as u32;
            bar.all &= p;
            bar.any |= p;
        }
        if bar.waiting.len() as u32 >= bar.expected(live) {
            Ok(Arrival::Release(bar.release()))
        } else {
            Ok(Arrival::Wait)
        }
    }

    /// A thread exited, leaving `live` threads: completes the count-less barriers that
    /// every remaining thread is now waiting at.
    pub(crate) fn thread_exited(&mut self, live: u32) -> Vec<Release> {
        self.bars
            .iter_mut()
            .filter(|b| !b.waiting.is_empty() && b.count.is_none() && b.waiting.len() as u32 >= live)
            .map(Barrier::release)
            .collect()
    }

    /// Threads arrived at barrier `id` and the number it waits for, with `live` threads.
    pub(crate) fn progress(&self, id: u32, live: u32) -> (u32, u32) {
        let bar = &self.bars[id as usize];
        (bar.waiting.len() as u32, bar.expected(live))
    }
}

fn describe_count(count: Option<u32>) -> String {
    match count {
        Some(n) => format!("{n} threads"),
        None => "all threads".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_when_all_live_threads_arrived() {
        let mut b = Barriers::new();
        assert_eq!(b.arrive(0, 0, None, None, 3), Ok(Arrival::Wait));
        assert_eq!(b.arrive(0, 2, None, None, 3), Ok(Arrival::Wait));
        assert_eq!(b.progress(0, 3), (2, 3));
        match b.arrive(0, 1, None, None, 3) {
            Ok(Arrival::Release(r)) => assert_eq!(r.threads, vec![0, 2, 1]),
            other => panic!("expected a release, got {other:?}"),
        }
        assert_eq!(b.progress(0, 3), (0, 3));
    }

    #[test]
    fn an_exit_completes_a_countless_barrier() {
        let mut b = Barriers::new();
        assert_eq!(b.arrive(3, 0, None, None, 3), Ok(Arrival::Wait));
        assert_eq!(b.arrive(3, 1, None, None, 3), Ok(Arrival::Wait));
        let released = b.thread_exited(2);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].threads, vec![0, 1]);
    }

    #[test]
    fn explicit_counts_and_reductions() {
        let mut b = Barriers::new();
        assert_eq!(b.arrive(1, 0, Some(2), Some(true), 64), Ok(Arrival::Wait));
        assert!(b.thread_exited(10).is_empty(), "an explicit count ignores exits");
        match b.arrive(1, 5, Some(2), Some(false), 64) {
            Ok(Arrival::Release(r)) => {
                assert_eq!(
                    r.result,
                    BarrierReduce {
                        count: 1,
                        all: false,
                        any: true
                    }
                );
            }
            other => panic!("expected a release, got {other:?}"),
        }
        assert_eq!(b.arrive(1, 0, Some(2), None, 64), Ok(Arrival::Wait));
        assert!(b.arrive(1, 1, Some(4), None, 64).is_err());
    }
}
