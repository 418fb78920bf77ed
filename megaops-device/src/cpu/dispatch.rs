//! Kernel dispatch and CTA placement on SMs.
//!
//! Ready kernels join the dispatch queue. CTAs are placed strictly in dispatch order: the
//! kernel at the front places its CTAs (in linear block order) on SMs with room for the
//! CTA's threads, a CTA slot and its shared memory, choosing among the SMs that fit with
//! the seed; when its next CTA fits nowhere, placement stops until a CTA finishes, and
//! later kernels do not jump ahead ("CUDA schedules all CTAs of a kernel before the
//! next"). A kernel leaves the queue once all its CTAs are placed; CTAs of different
//! kernels share SMs.

use std::collections::{BTreeMap, VecDeque};

use super::config::VgpuConfig;
use super::rng::Rng;
use super::stream::StreamId;
use super::vgpu::KernelEntry;
use crate::Dim3;

/// A launched kernel, from its launch until its last CTA finished.
pub(crate) struct KernelRun {
    /// Launch number on this virtual GPU (submission order, from 1).
    pub(crate) seq: u64,
    pub(crate) name: String,
    pub(crate) stream: StreamId,
    pub(crate) grid: Dim3,
    pub(crate) block: Dim3,
    pub(crate) threads_per_cta: u32,
    pub(crate) smem: usize,
    pub(crate) entry: KernelEntry,
    /// Number of CTAs (`grid.volume()`).
    pub(crate) ctas: u64,
    /// CTAs placed so far (they are placed in linear order).
    pub(crate) placed: u64,
    /// CTAs finished so far.
    pub(crate) finished: u64,
    /// The event that completes once every CTA has been placed (a launch's start
    /// event), if the launch asked for one.
    pub(crate) started: Option<u64>,
}

/// Resources in use on one SM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SmUsage {
    pub(crate) threads: u32,
    pub(crate) ctas: u32,
    pub(crate) smem: usize,
}

/// A CTA the dispatcher placed: kernel `seq`, linear block index `cta`, on SM `sm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) seq: u64,
    pub(crate) cta: u64,
    pub(crate) sm: u32,
    /// This was the kernel's last CTA, and the kernel has this start event.
    pub(crate) started: Option<u64>,
}

/// The dispatch queue, the kernels in flight and the SMs' occupancy.
pub(crate) struct Dispatcher {
    sms: Vec<SmUsage>,
    queue: VecDeque<u64>,
    kernels: BTreeMap<u64, KernelRun>,
}

impl Dispatcher {
    pub(crate) fn new(cfg: &VgpuConfig) -> Self {
        Dispatcher {
            sms: vec![SmUsage::default(); cfg.sms as usize],
            queue: VecDeque::new(),
            kernels: BTreeMap::new(),
        }
    }

    /// Appends a ready kernel to the dispatch queue.
    pub(crate) fn dispatch(&mut self, kernel: KernelRun) {
        self.queue.push_back(kernel.seq);
        self.kernels.insert(kernel.seq, kernel);
    }

    /// A kernel in flight.
    pub(crate) fn kernel(&self, seq: u64) -> Option<&KernelRun> {
        self.kernels.get(&seq)
    }

    /// Places the next CTA of the front kernel if some SM has room (reserving it there).
    pub(crate) fn place_next(&mut self, cfg: &VgpuConfig, rng: &mut Rng) -> Option<Placement> {
        let &seq = self.queue.front()?;
        let k = self.kernels.get_mut(&seq)?;
        let fits = |u: &SmUsage| {
            u.ctas < cfg.max_ctas_per_sm
                && u.threads + k.threads_per_cta <= cfg.max_threads_per_sm
                && u.smem + k.smem <= cfg.smem_per_sm
        };
        let candidates = self.sms.iter().filter(|u| fits(u)).count();
        if candidates == 0 {
            return None;
        }
        let pick = rng.below(candidates);
        let (sm, usage) = self.sms.iter_mut().enumerate().filter(|(_, u)| fits(u)).nth(pick)?;
        usage.ctas += 1;
        usage.threads += k.threads_per_cta;
        usage.smem += k.smem;
        let cta = k.placed;
        k.placed += 1;
        let mut started = None;
        if k.placed == k.ctas {
            self.queue.pop_front();
            started = k.started;
        }
        Some(Placement {
            seq,
            cta,
            sm: sm as u32,
            started,
        })
    }

    /// A CTA of kernel `seq` on SM `sm` finished: frees its resources. Returns the kernel
    /// when this was its last CTA.
    pub(crate) fn cta_finished(&mut self, seq: u64, sm: u32) -> Option<KernelRun> {
        let k = self.kernels.get_mut(&seq)?;
        if let Some(u) = self.sms.get_mut(sm as usize) {
            u.ctas -= 1;
            u.threads -= k.threads_per_cta;
            u.smem -= k.smem;
        }
        k.finished += 1;
        if k.finished == k.ctas {
            self.kernels.remove(&seq)
        } else {
            None
        }
    }

    /// Dispatched kernels that still have CTAs to place, front first.
    pub(crate) fn queued(&self) -> impl Iterator<Item = &KernelRun> {
        self.queue.iter().filter_map(|s| self.kernels.get(s))
    }

    /// Forgets every kernel and frees every SM.
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.kernels.clear();
        self.sms.iter_mut().for_each(|u| *u = SmUsage::default());
    }

    /// Current occupancy of each SM.
    #[cfg(test)]
    pub(crate) fn usage(&self) -> &[SmUsage] {
        &self.sms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn kernel(seq: u64, ctas: u32, threads: u32, smem: usize) -> KernelRun {
        KernelRun {
            seq,
            name: format!("k{seq}"),
            stream: StreamId { gpu: 0, index: 0 },
            grid: Dim3::new(ctas, 1, 1),
            block: Dim3::new(threads, 1, 1),
            threads_per_cta: threads,
            smem,
            entry: Arc::new(|| {}),
            ctas: ctas as u64,
            placed: 0,
            finished: 0,
            started: None,
        }
    }

    #[test]
    fn places_in_order_and_waits_for_room() {
        let cfg = VgpuConfig {
            sms: 2,
            max_ctas_per_sm: 2,
            ..VgpuConfig::default()
        };
        let mut d = Dispatcher::new(&cfg);
        let mut rng = Rng::new(1);
        d.dispatch(kernel(1, 3, 32, 0));
        d.dispatch(kernel(2, 2, 32, 0));
        let placed: Vec<_> = std::iter::from_fn(|| d.place_next(&cfg, &mut rng)).collect();
        // Four slots: all three CTAs of kernel 1, then one of kernel 2.
        assert_eq!(
            placed.iter().map(|p| (p.seq, p.cta)).collect::<Vec<_>>(),
            vec![(1, 0), (1, 1), (1, 2), (2, 0)]
        );
        assert!(d.usage().iter().all(|u| u.ctas == 2));
        assert!(d.cta_finished(1, placed[0].sm).is_none());
        let next = d.place_next(&cfg, &mut rng).expect("a slot is free");
        assert_eq!((next.seq, next.cta, next.sm), (2, 1, placed[0].sm));
        assert!(d.place_next(&cfg, &mut rng).is_none());
    }

    #[test]
    fn a_later_kernel_never_jumps_ahead() {
        let cfg = VgpuConfig {
            sms: 1,
            max_threads_per_sm: 1024,
            ..VgpuConfig::default()
        };
        let mut d = Dispatcher::new(&cfg);
        let mut rng = Rng::new(0);
        d.dispatch(kernel(1, 1, 768, 0));
        d.dispatch(kernel(2, 1, 512, 0));
        d.dispatch(kernel(3, 1, 32, 0));
        assert_eq!(d.place_next(&cfg, &mut rng).map(|p| p.seq), Some(1));
        // Kernel 2 does not fit; kernel 3 would, but must wait behind it.
        assert_eq!(d.place_next(&cfg, &mut rng), None);
        assert_eq!(d.queued().map(|k| k.seq).collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn shared_memory_limits_residency() {
        let cfg = VgpuConfig {
            sms: 1,
            smem_per_sm: 100 * 1024,
            max_smem_per_cta: 100 * 1024,
            ..VgpuConfig::default()
        };
        let mut d = Dispatcher::new(&cfg);
        let mut rng = Rng::new(0);
        d.dispatch(kernel(1, 4, 32, 40 * 1024));
        assert!(d.place_next(&cfg, &mut rng).is_some());
        assert!(d.place_next(&cfg, &mut rng).is_some());
        assert!(d.place_next(&cfg, &mut rng).is_none());
        assert!(d.cta_finished(1, 0).is_none());
        assert!(d.cta_finished(1, 0).is_none());
        assert!(d.place_next(&cfg, &mut rng).is_some());
        assert!(d.place_next(&cfg, &mut rng).is_some());
        assert!(d.cta_finished(1, 0).is_none());
        assert_eq!(d.cta_finished(1, 0).map(|k| k.seq), Some(1));
    }
}
