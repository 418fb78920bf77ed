//! What a stopped run reports: every resident CTA and what its threads wait on, the
//! kernels that could not place their CTAs, and the streams whose work could not start.

use std::fmt;

use super::stream::StreamId;
use crate::Dim3;
use crate::sync::WaitSite;

/// What a group of threads of one CTA is waiting on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadWait {
    /// Blocked in `wait_until` on `site`, whose semaphore held `value` when reported.
    Semaphore {
        /// The wait site, as the sync runtime gave it.
        site: WaitSite,
        /// The semaphore's value at the time of the report.
        value: i32,
    },
    /// At CTA barrier `id`, where `arrived` of the `expected` threads are.
    Barrier {
        /// Barrier number (0..16).
        id: u32,
        /// Threads at the barrier.
        arrived: u32,
        /// Threads it waits for (its count, or all non-exited threads).
        expected: u32,
    },
    /// In a warp collective (`warp_exchange`) of `mask` in warp `warp`.
    Collective {
        /// Warp index within the CTA.
        warp: u32,
        /// Lanes the collective waits for.
        mask: u32,
        /// Lanes that have arrived.
        arrived: u32,
    },
    /// Runnable: spinning (yielding) or not started yet. Only in hang reports.
    Runnable,
}

/// Threads of one CTA (linear thread indices, ascending) that wait on the same thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadGroup {
    /// Linear thread indices (`x + y·bx + z·bx·by`), ascending.
    pub threads: Vec<u32>,
    /// What they wait on.
    pub wait: ThreadWait,
}

/// A resident CTA and where its unfinished threads are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtaReport {
    /// Kernel name.
    pub kernel: String,
    /// Launch number of the kernel on the virtual GPU (submission order, from 1).
    pub launch: u64,
    /// Block index.
    pub block: Dim3,
    /// Linear block index.
    pub cta: u64,
    /// SM it is resident on.
    pub sm: u32,
    /// Groups of its unfinished threads, semaphore waits first.
    pub groups: Vec<ThreadGroup>,
}

/// One semaphore wait of a blocked CTA: the site, the semaphore's value, and who waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemaphoreWait {
    /// Kernel name.
    pub kernel: String,
    /// Block index of the waiting CTA.
    pub block: Dim3,
    /// Number of its threads waiting on this site.
    pub threads: u32,
    /// The wait site, as the sync runtime gave it.
    pub site: WaitSite,
    /// The semaphore's value at the time of the report.
    pub value: i32,
}

/// A dispatched kernel that still has CTAs to place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedKernel {
    /// Kernel name.
    pub kernel: String,
    /// Launch number on the virtual GPU.
    pub launch: u64,
    /// Stream it was launched on.
    pub stream: StreamId,
    /// CTAs in its grid.
    pub ctas: u64,
    /// CTAs placed so far.
    pub placed: u64,
    /// Threads per CTA.
    pub threads_per_cta: u32,
    /// Dynamic shared memory per CTA in bytes.
    pub smem: usize,
}

/// A stream with work that has not started, and what holds it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// The stream.
    pub stream: StreamId,
    /// What holds it up, in words.
    pub state: String,
}

/// Why a run stopped with [`super::CpuError::Deadlock`]: no thread can run and work
/// remains.
///
/// `Display` gives one line per resident CTA (the first 16; `{:#}` lists all), then the
/// kernels waiting for SM room and the stuck streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlockReport {
    /// Every resident CTA (all of them blocked).
    pub ctas: Vec<CtaReport>,
    /// Every semaphore wait among them (one per CTA and site), in CTA order: what the
    /// host runtime maps back to tensors and tiles.
    pub waits: Vec<SemaphoreWait>,
    /// Dispatched kernels whose remaining CTAs find no SM with room.
    pub queued: Vec<QueuedKernel>,
    /// Streams whose next operation cannot start.
    pub streams: Vec<StreamReport>,
}

/// Why a run stopped with [`super::CpuError::Hang`]: threads keep running without
/// progress (see [`super::VgpuConfig::max_idle_switches`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangReport {
    /// Which limit was hit.
    pub reason: String,
    /// Every resident CTA; spinning threads show as [`ThreadWait::Runnable`].
    pub ctas: Vec<CtaReport>,
    /// Every semaphore wait among them (one per CTA and site), in CTA order: what the
    /// host runtime maps back to tensors, tiles and their expected producers.
    pub waits: Vec<SemaphoreWait>,
    /// Dispatched kernels whose remaining CTAs find no SM with room.
    pub queued: Vec<QueuedKernel>,
    /// Streams whose next operation cannot start.
    pub streams: Vec<StreamReport>,
}

/// `(x,y,z)`.
pub(crate) struct Xyz(pub(crate) Dim3);

impl fmt::Display for Xyz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{},{})", self.0.x, self.0.y, self.0.z)
    }
}

impl fmt::Display for ThreadGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = self.threads.len() == 1;
        if one {
            write!(f, "thread {}", self.threads[0])?;
        } else {
            write!(f, "threads {} ({})", ranges(&self.threads), self.threads.len())?;
        }
        let s = if one { "s" } else { "" };
        match &self.wait {
            ThreadWait::Semaphore { site, value } => write!(
                f,
                " wait{s} on semaphore tensor#{}[{}] = {value}, target {} (launch {}, tile {}, at {:p})",
                site.tensor_id, site.sem_index, site.target, site.launch_id, site.tile, site.sem
            ),
            ThreadWait::Barrier { id, arrived, expected } => {
                write!(f, " wait{s} at barrier {id} ({arrived} of {expected} threads arrived)")
            }
            ThreadWait::Collective { warp, mask, arrived } => write!(
                f,
                " wait{s} in warp_exchange of warp {warp}, mask {mask:#010x} (lanes {} arrived)",
                super::warp::lanes(*arrived)
            ),
            ThreadWait::Runnable => write!(
                f,
                " {} runnable (spinning or not started)",
                if one { "is" } else { "are" }
            ),
        }
    }
}

impl fmt::Display for CtaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} CTA {} (block {}, SM {}): ",
            self.kernel,
            self.cta,
            Xyz(self.block),
            self.sm
        )?;
        for (i, g) in self.groups.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl fmt::Display for QueuedKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (launch #{}, {}): {} of {} CTAs queued, no SM has room ({} threads, {} B shared memory per CTA)",
            self.kernel,
            self.launch,
            self.stream,
            self.ctas - self.placed,
            self.ctas,
            self.threads_per_cta,
            self.smem
        )
    }
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.stream, self.state)
    }
}

/// CTA lines `Display` shows before summarising the rest (`{:#}` shows all).
const SHOWN_CTAS: usize = 16;

fn write_state(
    f: &mut fmt::Formatter<'_>,
    ctas: &[CtaReport],
    queued: &[QueuedKernel],
    streams: &[StreamReport],
) -> fmt::Result {
    let shown = if f.alternate() {
        ctas.len()
    } else {
        ctas.len().min(SHOWN_CTAS)
    };
    for c in &ctas[..shown] {
        write!(f, "\n  {c}")?;
    }
    if shown < ctas.len() {
        write!(
            f,
            "\n  ... and {} more CTAs (format with {{:#}} to list all)",
            ctas.len() - shown
        )?;
    }
    for q in queued {
        write!(f, "\n  {q}")?;
    }
    for s in streams {
        write!(f, "\n  {s}")?;
    }
    Ok(())
}

impl fmt::Display for DeadlockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ctas.is_empty() {
            f.write_str("deadlock: no CTA is resident and no queued work can start")?;
        } else {
            f.write_str("deadlock: every resident CTA is waiting")?;
        }
        write_state(f, &self.ctas, &self.queued, &self.streams)
    }
}

impl fmt::Display for HangReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hang: {}", self.reason)?;
        write_state(f, &self.ctas, &self.queued, &self.streams)
    }
}

/// `0..=3, 7, 9..=10` for a sorted index list.
fn ranges(v: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}..={}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_reports_are_summarised() {
        let cta = CtaReport {
            kernel: "k".into(),
            launch: 1,
            block: Dim3::new(0, 0, 0),
            cta: 0,
            sm: 0,
            groups: vec![],
        };
        let report = DeadlockReport {
            ctas: vec![cta; 40],
            waits: vec![],
            queued: vec![],
            streams: vec![],
        };
        let short = report.to_string();
        assert_eq!(short.lines().count(), 1 + SHOWN_CTAS + 1);
        assert!(
            short.ends_with("... and 24 more CTAs (format with {:#} to list all)"),
            "{short}"
        );
        assert_eq!(format!("{report:#}").lines().count(), 41);
    }

    #[test]
    fn index_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0..=3, 7, 9..=10");
        assert_eq!(ranges(&[5]), "5");
    }

    #[test]
    fn reads_well() {
        let sem = 0i32;
        let site = WaitSite {
            sem: &sem,
            target: 65536,
            launch_id: 7,
            tile: 3,
            tensor_id: 2,
            sem_index: 1,
        };
        let report = DeadlockReport {
            ctas: vec![CtaReport {
                kernel: "consumer".into(),
                launch: 3,
                block: Dim3::new(3, 0, 0),
                cta: 3,
                sm: 1,
                groups: vec![
                    ThreadGroup {
                        threads: vec![0],
                        wait: ThreadWait::Semaphore { site, value: 0 },
                    },
                    ThreadGroup {
                        threads: (1..64).collect(),
                        wait: ThreadWait::Barrier {
                            id: 0,
                            arrived: 63,
                            expected: 64,
                        },
                    },
                ],
            }],
            waits: vec![],
            queued: vec![QueuedKernel {
                kernel: "producer".into(),
                launch: 2,
                stream: StreamId { gpu: 0, index: 0 },
                ctas: 4,
                placed: 0,
                threads_per_cta: 128,
                smem: 0,
            }],
            streams: vec![],
        };
        let text = report.to_string();
        let expected = "deadlock: every resident CTA is waiting\n  \
            consumer CTA 3 (block (3,0,0), SM 1): thread 0 waits on semaphore tensor#2[1] = 0, target 65536 (launch 7, tile 3, at ";
        assert!(text.starts_with(expected), "{text}");
        assert!(
            text.contains("; threads 1..=63 (63) wait at barrier 0 (63 of 64 threads arrived)"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\n  producer (launch #2, stream 0): 4 of 4 CTAs queued, no SM has room (128 threads, 0 B shared memory per CTA)"
            ),
            "{text}"
        );
    }
}
