//! [`PreparedLaunch`]: a fully checked launch, as launch targets receive it.

use crate::backend::RawLaunch;
use crate::buffer::Buffer;
use crate::module::PtxModule;
use crate::notes::LaunchNote;
use crate::order::{SharedUses, TiledUse};
use crate::param::{ParamBytes, param_bytes};
use crate::stream::{Event, Stream};
use crate::tiled::TiledState;
use megaops_device::sync::{KernelCtx, TileSync};
use std::sync::{Arc, Mutex};

/// How a launch uses one buffer (for AsyncStream's cross-stream hazard tracking).
#[derive(Clone, Debug)]
pub struct Access {
    /// The buffer.
    pub buffer: Arc<Buffer>,
    /// Written (else only read).
    pub write: bool,
    /// Ordered by data-tile semaphores (a `Tiled` tensor), so read-after-write needs no
    /// stream-level wait.
    pub synced: bool,
}

/// A `Tiled` tensor a launch produces, as launch targets see it.
#[derive(Clone)]
pub struct TiledHandle {
    pub(crate) state: Arc<Mutex<TiledState>>,
    pub(crate) sema: Arc<Buffer>,
    pub(crate) sema_count: usize,
    pub(crate) uses: SharedUses,
}

/// A checked launch, ready for a [`LaunchTarget`](super::LaunchTarget).
#[derive(Clone)]
pub struct PreparedLaunch {
    /// Kernel name.
    pub kernel: &'static str,
    pub(crate) module: &'static PtxModule,
    /// The config's PTX entry without trace code.
    pub(crate) entry: &'static str,
    /// The config's PTX entry with the tile-trace calls, if it has one.
    pub(crate) traced_entry: Option<&'static str>,
    /// Grid (CTAs) and block (threads).
    pub grid: [u32; 3],
    /// Threads per CTA.
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes.
    pub dynamic_smem: u32,
    /// The per-launch context; targets fill in the begin flag.
    pub ctx: KernelCtx,
    pub(crate) args: Vec<ParamBytes>,
    pub(crate) syncs: Vec<TileSync>,
    pub(crate) cpu: Arc<dyn Fn(&KernelCtx) + Send + Sync>,
    pub(crate) buffers: Vec<Arc<Buffer>>,
    pub(crate) note: LaunchNote,
    /// Buffers read and written (for cross-stream hazard tracking).
    pub accesses: Vec<Access>,
    /// `Tiled` tensors this launch produces.
    pub produced: Vec<TiledHandle>,
    /// Asked to run on the SM partition.
    pub partition: bool,
    /// How it uses `Tiled` tensors, for ordering across launch targets.
    pub(crate) uses: Vec<TiledUse>,
    /// Why it must not run eagerly: it reads tensors only a not yet replayed graph
    /// produces (fine inside a capture).
    pub(crate) unreplayed: Vec<String>,
    /// Work on the target's side streams that belongs to this launch (the chunks of a
    /// subkernel, whose proxy this launch is).
    pub(crate) side: Option<Arc<dyn crate::subkernel::SideWork>>,
    /// Launch programmatically ([`BeginRule::Programmatic`](crate::BeginRule)); set by
    /// the target. Sound only for entries that wait for their prerequisites in every
    /// thread before touching memory: those `#[megaops::kernel]` generates do
    /// (`wait_prerequisite_grids` after `kernel_begin_cta`); a subkernel's proxy does not,
    /// and the AsyncStream never sets this for one.
    pub(crate) programmatic: bool,
}

impl PreparedLaunch {
    /// Packs the kernel parameters: the kernel's own, then the context, then one
    /// `TileSync` per synchronised tensor.
    pub(crate) fn params(&self) -> Vec<ParamBytes> {
        let mut p = self.args.clone();
        p.push(param_bytes(&self.ctx));
        p.extend(self.syncs.iter().map(param_bytes));
        p
    }

    /// The CPU-backend body with the context bound.
    pub(crate) fn cpu_entry(&self) -> Arc<dyn Fn() + Send + Sync> {
        let ctx = self.ctx;
        let body = self.cpu.clone();
        Arc::new(move || body(&ctx))
    }

    /// The PTX entry that runs: the traced one when the launch has a trace log (set by
    /// the launch options or by a tracing AsyncStream) and the config has one, else the
    /// plain one.
    pub(crate) fn entry_to_run(&self) -> &'static str {
        match self.traced_entry {
            Some(traced) if !self.ctx.trace.is_null() => traced,
            _ => self.entry,
        }
    }

    /// Launches on one stream; returns the event recorded after it.
    pub(crate) fn launch_on(&self, stream: &Stream) -> crate::Result<Arc<Event>> {
        self.launch_on_with(stream, false).map(|(done, _)| done)
    }

    /// [`PreparedLaunch::launch_on`], also returning the launch's start event (complete
    /// once every CTA has begun).
    pub(crate) fn launch_on_with_start(&self, stream: &Stream) -> crate::Result<(Arc<Event>, Event)> {
        let (done, started) = self.launch_on_with(stream, true)?;
        let started = started.ok_or_else(|| crate::Error::Internal("a launch made no start event".into()))?;
        Ok((done, started))
    }

    /// Enqueues the kernel on `stream`, with a start event when `start_event`.
    fn launch_on_with(&self, stream: &Stream, start_event: bool) -> crate::Result<(Arc<Event>, Option<Event>)> {
        let entry = self.entry_to_run();
        let _range = crate::nvtx::range(|| entry);
        let params = self.params();
        let raw = RawLaunch {
            kernel: self.kernel,
            module: self.module,
            entry,
            grid: self.grid,
            block: self.block,
            dynamic_smem: self.dynamic_smem,
            params: &params,
            cpu: self.cpu_entry(),
            programmatic: self.programmatic,
        };
        // SAFETY: the parameters were packed by the launcher the kernel macro generated
        // from the kernel's own signature (same order, sizes and layouts on host and
        // device), the CPU body is the same kernel body, and every pointer parameter is
        // the address of a buffer in `self.buffers` (bound and device-checked by
        // `KernelLaunch`), retained until the kernel is done.
        unsafe {
            if start_event {
                let (done, started) = stream.launch_raw_with_start(&raw, self.buffers.clone())?;
                Ok((done, Some(started)))
            } else {
                Ok((stream.launch_raw(&raw, self.buffers.clone())?, None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::error::Result;
    use crate::launch::{KernelLaunch, LaunchOptions, LaunchTarget, sealed};
    use crate::module::PtxModule;
    use crate::mutex::lock;

    /// A launch target that keeps the entry each launch would run.
    struct EntryRecorder {
        device: Device,
        entries: std::sync::Mutex<Vec<&'static str>>,
    }

    impl sealed::Sealed for EntryRecorder {}

    impl LaunchTarget for EntryRecorder {
        fn device(&self) -> &Device {
            &self.device
        }
        fn submit(&self, launch: PreparedLaunch) -> Result<u32> {
            lock(&self.entries).push(launch.entry_to_run());
            Ok(launch.ctx.launch_id)
        }
    }

    /// A traced launch runs the config's traced entry, an untraced one the plain entry; a
    /// config without a traced entry runs its plain one either way.
    #[test]
    fn traced_launches_run_the_traced_entry() {
        static MODULE: PtxModule = PtxModule {
            name: "test",
            ptx: &[],
            cubin: &[],
        };
        let device = Device::cpu(crate::VgpuConfig::default()).unwrap();
        device.start_trace(16).unwrap();
        let target = EntryRecorder {
            device: device.clone(),
            entries: Default::default(),
        };
        for (traced, traced_entry) in [(false, Some("k__traced")), (true, Some("k__traced")), (true, None)] {
            let opts = LaunchOptions {
                traced,
                ..LaunchOptions::default()
            };
            let mut l = KernelLaunch::new(&device, "k", &MODULE, "k__plain", &opts);
            l.traced_entry(traced_entry);
            l.tiles(&[2]).unwrap();
            l.block([32, 1, 1]).unwrap();
            l.submit(&target, |_| {}).unwrap();
        }
        assert_eq!(*lock(&target.entries), ["k__plain", "k__traced", "k__plain"]);
    }
}
