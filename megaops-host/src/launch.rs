//! Typed kernel launches. `#[megaops::kernel]` generates, per kernel, a launcher that
//! binds each argument through the traits here ([`AsInput`], [`AsOutput`], [`AsPtr`],
//! [`AsMutPtr`]) and hands a [`KernelLaunch`] to a [`LaunchTarget`] (a [`Stream`] or an
//! `AsyncStream`). Everything a launch needs is checked here, before anything runs:
//! shapes against the kernel's annotation, tile coverage, the protocol state of each
//! `Tiled` tensor, grid/block/shared-memory limits.

use crate::backend::cuda::lock;
use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::PtxModule;
use crate::notes::{LaunchNote, TensorNote};
use crate::order;
use crate::order::{SharedUses, TiledUse};
use crate::param::{ParamBytes, param_bytes};
use crate::stream::{RawLaunch, Stream};
use crate::tensor::Tensor;
use crate::tiled::{ProducerTiling, Tiled, TiledState};
use crate::tiling::{DataTiling, Rank, TilesRank};
use megaops_device::sync::tiling::{num_data_tiles, target_of};
use megaops_device::sync::{CtaRemap, KernelCtx, MAX_RANK, MAX_TARGET, RemapKind, TileSync, TraceLog};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// How CTAs are mapped to kernel tiles (paper §3.1), chosen at launch without recompiling.
#[derive(Clone, Debug, Default)]
pub enum Remap {
    /// CTA `t` runs kernel tile `t`.
    #[default]
    Identity,
    /// CTA `t` runs kernel tile `(t + offset) % tiles` (e.g. local shard first in an
    /// allgather-GEMM).
    Rotate(u32),
    /// CTA `t` runs kernel tile `table[t]`; the table is a permutation of `0..tiles`.
    Table(Tensor<u32>),
}

/// When an [`AsyncStream`](crate::AsyncStream) lets the launch after this one start (the
/// deadlock-freedom rule holds each launch until the previous one has begun, paper §2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReleaseNext {
    /// As soon as any CTA of this launch has started: the next kernel's CTAs may take SM
    /// room while this one still has CTAs to dispatch (the earliest overlap).
    #[default]
    FirstCta,
    /// Once this launch's last CTA (`blockIdx.x = gridDim.x - 1`) has started, i.e. all of
    /// its CTAs are dispatched: the next kernel only fills the room this one's last wave
    /// leaves. For a producer of several waves whose consumer's waiting CTAs would
    /// otherwise hold SM resources (shared memory, registers, thread slots) that the
    /// producer's remaining waves need.
    LastCta,
}

/// Per-launch knobs. `Default` runs the first tile config with identity order.
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// Index into the kernel's tile configs (`CONFIGS`); default 0.
    pub config: Option<usize>,
    /// CTA → kernel tile order.
    pub remap: Remap,
    /// Persistent kernels: number of CTAs (default: one per SM).
    pub ctas: Option<u32>,
    /// SMEM padding (paper §3.2): raise the dynamic shared memory so that at most this
    /// many CTAs of the kernel fit on one SM.
    pub occupancy_limit: Option<u32>,
    /// Tile-wait timeout for this launch (default: the device's).
    pub timeout: Option<Duration>,
    /// Run on the AsyncStream's SM partition (green context), e.g. for a communication
    /// kernel that must not compete with computation for SMs.
    pub partition: bool,
    /// When an AsyncStream releases the next launch (ignored by plain streams).
    pub release_next: ReleaseNext,
    /// Record this launch's kernel tiles in the device's trace log
    /// ([`Device::start_trace`]); an AsyncStream with tracing on traces every launch.
    pub traced: bool,
}

impl LaunchOptions {
    /// Options with tile config `i`.
    pub fn config(i: usize) -> Self {
        LaunchOptions {
            config: Some(i),
            ..Default::default()
        }
    }

    /// Sets the CTA remap.
    pub fn remap(mut self, remap: Remap) -> Self {
        self.remap = remap;
        self
    }

    /// Sets the persistent CTA count.
    pub fn ctas(mut self, ctas: u32) -> Self {
        self.ctas = Some(ctas);
        self
    }

    /// Sets the occupancy limit (SMEM padding).
    pub fn occupancy_limit(mut self, c: u32) -> Self {
        self.occupancy_limit = Some(c);
        self
    }

    /// Sets the wait timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Runs the launch on the AsyncStream's SM partition.
    pub fn on_partition(mut self) -> Self {
        self.partition = true;
        self
    }

    /// Sets when an AsyncStream releases the next launch.
    pub fn release_next(mut self, when: ReleaseNext) -> Self {
        self.release_next = when;
        self
    }

    /// Records the launch's kernel tiles in the device's trace log.
    pub fn traced(mut self) -> Self {
        self.traced = true;
        self
    }
}

/// The shape a kernel declares for a plain pointer parameter.
#[derive(Clone, Copy, Debug)]
pub enum Declared<'a> {
    /// `tensor(p[dims])`: exactly this shape.
    Shape(&'a [u64]),
    /// `scratch(p[len])`: any shape with at least this many elements.
    AtLeast(u64),
}

pub use crate::launch_config::{ConfigValue, config_where};

/// Description of one tile config of a kernel (generated by the macro); read its
/// constants with [`ConfigInfo::get`] and the typed accessors beside it.
#[derive(Clone, Copy, Debug)]
pub struct ConfigInfo {
    /// Constants of the config as written, e.g. `"BM=64, BN=64"` (for people: read values
    /// from [`consts`](Self::consts)).
    pub name: &'static str,
    /// The config's constants by name, in the order written, with their values as the
    /// kernel types them (constants of types [`ConfigValue`] does not cover are left out).
    pub consts: &'static [(&'static str, ConfigValue)],
    /// PTX entry of the config (no tile-trace code).
    pub entry: &'static str,
    /// PTX entry a traced launch of the config runs (the same body with the tile-trace
    /// calls); `None` for a config that records no tiles (one with launch bounds).
    pub traced_entry: Option<&'static str>,
}

/// Where launches go: a [`Stream`], or an `AsyncStream` that spreads them over several.
/// Sealed: the protocol state a target keeps (ordering, hazards, captures) is this
/// crate's to maintain.
pub trait LaunchTarget: sealed::Sealed {
    /// The device.
    fn device(&self) -> &Device;
    /// Runs a fully checked launch.
    fn submit(&self, launch: PreparedLaunch) -> Result<u32>;
}

pub(crate) mod sealed {
    /// Implemented by the crate's launch targets only.
    pub trait Sealed {}
}

/// One dimension of a synchronised tensor as the kernel annotation states it: which
/// kernel-tile axis indexes it (None = the tile spans the whole dimension) and the kernel
/// tile size along it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileDim {
    /// Kernel-tile grid axis whose coordinate selects the tile along this dimension.
    pub axis: Option<usize>,
    /// Elements per kernel tile along this dimension (ignored when `axis` is None).
    pub size: u64,
}

impl TileDim {
    /// The tile spans the whole dimension.
    pub const WHOLE: TileDim = TileDim { axis: None, size: 0 };

    /// Tile `size` elements selected by grid axis `axis`.
    pub const fn axis(axis: usize, size: u64) -> TileDim {
        TileDim { axis: Some(axis), size }
    }
}

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

/// A launch being assembled by a generated launcher.
pub struct KernelLaunch<'a> {
    device: Device,
    kernel: &'static str,
    module: &'static PtxModule,
    entry: &'static str,
    traced_entry: Option<&'static str>,
    config_name: &'static str,
    opts: &'a LaunchOptions,
    tile_grid: Vec<u32>,
    block: [u32; 3],
    smem: u32,
    persistent: bool,
    args: Vec<ParamBytes>,
    syncs: Vec<TileSync>,
    buffers: Vec<Arc<Buffer>>,
    accesses: Vec<Access>,
    tensors: Vec<(u32, TensorNote)>,
    produced: Vec<(TiledHandle, ProducerTiling)>,
    uses: Vec<TiledUse>,
    unreplayed: Vec<String>,
}

/// A checked launch, ready for a [`LaunchTarget`].
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
    pub(crate) fn launch_on(&self, stream: &Stream) -> Result<Arc<crate::stream::Event>> {
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
        };
        stream.launch_raw(&raw, self.buffers.clone())
    }
}

impl<'a> KernelLaunch<'a> {
    /// Starts a launch of `entry` (tile config entry) of `kernel`.
    pub fn new(
        device: &Device,
        kernel: &'static str,
        module: &'static PtxModule,
        entry: &'static str,
        opts: &'a LaunchOptions,
    ) -> Self {
        KernelLaunch {
            device: device.clone(),
            kernel,
            module,
            entry,
            traced_entry: None,
            config_name: "",
            opts,
            tile_grid: vec![1],
            block: [1, 1, 1],
            smem: 0,
            persistent: false,
            args: Vec::new(),
            syncs: Vec::new(),
            buffers: Vec::new(),
            accesses: Vec::new(),
            tensors: Vec::new(),
            produced: Vec::new(),
            uses: Vec::new(),
            unreplayed: Vec::new(),
        }
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        Error::launch(self.kernel, reason)
    }

    /// Names the tile config (its constants, `ConfigInfo::name`) for traces and reports.
    pub fn config_name(&mut self, name: &'static str) {
        self.config_name = name;
    }

    /// The PTX entry to run instead of the plain one when the launch is traced
    /// (`ConfigInfo::traced_entry`); without one a traced launch runs the plain entry and
    /// records no tile on the GPU.
    pub fn traced_entry(&mut self, entry: Option<&'static str>) {
        self.traced_entry = entry;
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Kernel name.
    pub fn kernel(&self) -> &'static str {
        self.kernel
    }

    /// Sets the kernel-tile grid (outermost axis first).
    pub fn tiles(&mut self, grid: &[u64]) -> Result<()> {
        if grid.is_empty() || grid.len() > MAX_RANK {
            return Err(self.err(format!(
                "a kernel-tile grid has 1 to {MAX_RANK} axes, not {}",
                grid.len()
            )));
        }
        let total = grid.iter().try_fold(1u64, |a, &g| a.checked_mul(g)).unwrap_or(u64::MAX);
        if total > i32::MAX as u64 {
            return Err(self.err(format!(
                "kernel-tile grid {grid:?} has {total} tiles, more than a launch can hold"
            )));
        }
        self.tile_grid = grid.iter().map(|&g| g as u32).collect();
        Ok(())
    }

    /// Marks the kernel persistent: fewer CTAs than tiles, each looping over tiles.
    pub fn persistent(&mut self) {
        self.persistent = true;
    }

    /// Threads per CTA.
    pub fn block(&mut self, block: [u64; 3]) -> Result<()> {
        let total = block.iter().product::<u64>();
        if total == 0 || total > 1024 || block.iter().any(|&b| b > 1024) {
            return Err(self.err(format!("block {block:?} is not a valid CTA shape (1 to 1024 threads)")));
        }
        self.block = block.map(|b| b as u32);
        Ok(())
    }

    /// Dynamic shared memory in bytes.
    pub fn dynamic_smem(&mut self, bytes: u64) -> Result<()> {
        let max = self.device.max_smem_per_block() as u64;
        if bytes > max {
            return Err(self.err(format!(
                "needs {bytes} B of dynamic shared memory; {} allows {max} B per block",
                self.device.name()
            )));
        }
        self.smem = bytes as u32;
        Ok(())
    }

    /// Appends a by-value kernel parameter: a primitive, `bf16`/`f16`, or a type that
    /// implements cudarc's [`DeviceRepr`](cudarc::driver::DeviceRepr) (same layout on the
    /// host and the device).
    pub fn arg<V: cudarc::driver::DeviceRepr + Copy>(&mut self, v: V) {
        self.args.push(param_bytes(&v));
    }

    fn check_device(&self, param: &str, dev: &Device) -> Result<()> {
        if !dev.same(&self.device) {
            return Err(self.err(format!(
                "argument `{param}` lives on {}, the launch targets {}",
                dev.name(),
                self.device.name()
            )));
        }
        Ok(())
    }

    fn check_shape(&self, param: &str, actual: &[usize], declared: &[u64]) -> Result<()> {
        if actual.len() != declared.len() || actual.iter().zip(declared).any(|(&a, &d)| a as u64 != d) {
            return Err(Error::Shape(format!(
                "`{}` expects `{param}` of shape {declared:?} (from its other arguments), got {actual:?}",
                self.kernel
            )));
        }
        Ok(())
    }

    /// Checks that a synchronised parameter's declared geometry fits the kernel's `u32`
    /// indices: every dimension, and every index a kernel tile along it reaches (the
    /// kernel computes `axis * SIZE + i` in `u32`; past `u32::MAX` that would wrap onto
    /// other elements).
    fn check_index_range(&self, param: &str, shape: &[u64], tile: &[TileDim]) -> Result<()> {
        const LIMIT: u64 = u32::MAX as u64;
        if let Some((d, size)) = shape.iter().enumerate().find(|&(_, &s)| s > LIMIT) {
            return Err(self.err(format!(
                "dimension {d} of `{param}` is {size} elements, more than the u32 indices of a kernel reach \
                 (u32::MAX = {LIMIT}): split the tensor"
            )));
        }
        for (d, td) in tile.iter().enumerate() {
            let (Some(axis), Some(&n)) = (td.axis, td.axis.and_then(|a| self.tile_grid.get(a))) else {
                continue;
            };
            let end = (n as u64).saturating_mul(td.size);
            if end > LIMIT {
                return Err(self.err(format!(
                    "the kernel tiles of `{param}` along dimension {d} ({n} tiles of {} elements, grid axis {axis}) \
                     end at element {end}, past the u32 range of a kernel's indices (u32::MAX = {LIMIT}), where \
                     indices and tile ends would wrap onto other elements: use fewer or smaller tiles, or split the \
                     tensor",
                    td.size
                )));
            }
        }
        Ok(())
    }

    /// Binds a plain pointer parameter (read-only) with the shape the kernel declared with
    /// `tensor(p[...])` / `scratch(p[len])`.
    pub fn ptr<T: DType>(&mut self, param: &str, x: &Tensor<T>, declared: Option<Declared<'_>>) -> Result<u64> {
        self.bind_plain(param, x, declared, false)
    }

    fn bind_plain<T: DType>(
        &mut self,
        param: &str,
        x: &Tensor<T>,
        declared: Option<Declared<'_>>,
        write: bool,
    ) -> Result<u64> {
        self.check_device(param, x.device())?;
        match declared {
            Some(Declared::Shape(shape)) => self.check_shape(param, x.shape(), shape)?,
            Some(Declared::AtLeast(len)) if (x.numel() as u64) < len => {
                return Err(Error::Shape(format!(
                    "`{}` needs at least {len} elements in `{param}`, got {} ({:?})",
                    self.kernel,
                    x.numel(),
                    x.shape()
                )));
            }
            _ => {}
        }
        self.buffers.push(x.buffer().clone());
        self.accesses.push(Access {
            buffer: x.buffer().clone(),
            write,
            synced: false,
        });
        self.args.push(param_bytes(&x.addr()));
        Ok(x.addr())
    }

    /// Binds a synchronised input: checks its shape against the annotation, waits on
    /// its data tiles if it is a produced `Tiled` tensor.
    pub fn input<T: DType, R: Rank, X: AsInput<T, R> + ?Sized>(
        &mut self,
        param: &str,
        x: &X,
        shape: &[u64],
        tile: &[TileDim],
    ) -> Result<(u64, TileSync)> {
        self.check_index_range(param, shape, tile)?;
        let b = x.bind_input(self.kernel, param)?;
        self.check_device(param, &b.device)?;
        self.check_shape(param, &b.shape, shape)?;
        self.accesses.push(Access {
            buffer: b.data.clone(),
            write: false,
            synced: b.sync.is_active(),
        });
        self.buffers.extend(b.buffers);
        self.args.push(param_bytes(&b.addr));
        self.syncs.push(b.sync);
        if let Some((id, note)) = b.note {
            self.tensors.push((id, note));
        }
        self.uses.extend(b.tiled_use);
        self.unreplayed.extend(b.unreplayed);
        Ok((b.addr, b.sync))
    }

    /// Binds a synchronised output: checks shape and that the kernel tiles cover it,
    /// and records this launch as its producer.
    pub fn output<T: DType, R: Rank, X: AsOutput<T, R> + ?Sized>(
        &mut self,
        param: &str,
        x: &mut X,
        shape: &[u64],
        tile: &[TileDim],
        split_axis: Option<usize>,
    ) -> Result<(u64, TileSync)> {
        self.check_index_range(param, shape, tile)?;
        let b = x.bind_output(self.kernel, param)?;
        self.check_device(param, &b.device)?;
        self.check_shape(param, &b.shape, shape)?;
        let mut ktile = [0u32; MAX_RANK];
        for (d, td) in tile.iter().enumerate() {
            if let Some(axis) = td.axis {
                let n = *self.tile_grid.get(axis).ok_or_else(|| {
                    self.err(format!(
                        "`{param}` names tile axis {axis}, the grid has {}",
                        self.tile_grid.len()
                    ))
                })? as u64;
                if td.size == 0 || n * td.size < shape[d] {
                    return Err(self.err(format!(
                        "its kernel tiles cover {} of the {} elements of `{param}` along dimension {d} ({n} tiles of {}): \
                         the data tiles past that would never be signalled",
                        n * td.size,
                        shape[d],
                        td.size
                    )));
                }
                // In range: check_index_range bounds tiles × size by u32::MAX.
                ktile[d] = td.size as u32;
            }
        }
        let split = match split_axis {
            Some(a) => *self
                .tile_grid
                .get(a)
                .ok_or_else(|| self.err("split axis outside the grid"))?,
            None => 1,
        };
        if b.sync.is_active() {
            check_targets(self.kernel, param, &b.sync, &ktile, split)?;
        }
        self.accesses.push(Access {
            buffer: b.data.clone(),
            write: true,
            synced: b.tiled.is_some(),
        });
        self.buffers.extend(b.buffers);
        self.args.push(param_bytes(&b.addr));
        self.syncs.push(b.sync);
        if let Some(handle) = b.tiled {
            let producer = ProducerTiling {
                ktile,
                split,
                kernel: self.kernel,
                launch_id: 0,
            };
            self.produced.push((handle, producer));
        }
        if let Some((id, note)) = b.note {
            self.tensors.push((id, note));
        }
        self.uses.extend(b.tiled_use);
        Ok((b.addr, b.sync))
    }

    /// Binds a plain mutable pointer parameter with its declared shape.
    pub fn ptr_mut<T: DType>(&mut self, param: &str, x: &mut Tensor<T>, declared: Option<Declared<'_>>) -> Result<u64> {
        self.bind_plain(param, x, declared, true)
    }

    /// Checks geometry, builds the context, and submits to `target`. `cpu` is the
    /// kernel body for the CPU backend.
    pub fn submit(self, target: &impl LaunchTarget, cpu: impl Fn(&KernelCtx) + Send + Sync + 'static) -> Result<()> {
        if !target.device().same(&self.device) {
            return Err(self.err("the launch target belongs to another device"));
        }
        let num_tiles: u64 = self.tile_grid.iter().map(|&g| g as u64).product();
        if let (Some(n), false) = (self.opts.ctas, self.persistent) {
            return Err(self.err(format!(
                "`LaunchOptions::ctas({n})` applies to persistent kernels only; this kernel runs one CTA per kernel \
                 tile ({num_tiles} here): drop `.ctas(..)`, or declare the kernel `persistent` so that each CTA loops \
                 over tiles"
            )));
        }
        let ctas = if self.persistent {
            let want = self.opts.ctas.unwrap_or(self.device.sm_count()).max(1) as u64;
            want.min(num_tiles)
        } else {
            num_tiles
        };
        let mut smem = self.smem;
        if let Some(c) = self.opts.occupancy_limit {
            smem = padded_smem(smem, c, self.device.smem_per_sm(), self.device.max_smem_per_block())
                .map_err(|r| self.err(r))?;
        }
        let mut tile_grid = [1u32; MAX_RANK];
        tile_grid[..self.tile_grid.len()].copy_from_slice(&self.tile_grid);
        let remap = match &self.opts.remap {
            Remap::Identity => CtaRemap::IDENTITY,
            Remap::Rotate(o) => CtaRemap {
                kind: RemapKind::Rotate as u32,
                offset: *o,
                table: std::ptr::null(),
            },
            Remap::Table(t) => {
                if t.numel() as u64 != num_tiles {
                    return Err(self.err(format!(
                        "remap table has {} entries for {num_tiles} kernel tiles",
                        t.numel()
                    )));
                }
                CtaRemap {
                    kind: RemapKind::Table as u32,
                    offset: 0,
                    table: t.addr() as *const u32,
                }
            }
        };
        let mut buffers = self.buffers;
        if let Remap::Table(t) = &self.opts.remap {
            buffers.push(t.buffer().clone());
        }
        let trace = if self.opts.traced {
            let (addr, log) = self.device.trace_log().ok_or_else(|| {
                Error::launch(
                    self.kernel,
                    "the launch is traced, but the device has no trace log: call `Device::start_trace` first",
                )
            })?;
            buffers.push(log);
            addr as *mut TraceLog
        } else {
            std::ptr::null_mut()
        };
        let launch_id = self.device.next_launch_id();
        let timeout = self.opts.timeout.unwrap_or_else(|| self.device.wait_timeout());
        let ctx = KernelCtx {
            begin_flag: std::ptr::null_mut(),
            begin_token: 0,
            begin_cta: match self.opts.release_next {
                ReleaseNext::FirstCta => 0,
                // `ctas >= 1` here (an empty launch returns below before it is submitted).
                ReleaseNext::LastCta => (ctas as u32).saturating_sub(1),
            },
            launch_id,
            remap,
            tile_grid,
            num_tiles: num_tiles as u32,
            timeout_ns: timeout.as_nanos().min(u64::MAX as u128) as u64,
            errors: self.device.error_log_addr() as *mut _,
            trace,
        };
        let note = LaunchNote {
            kernel: self.kernel.to_string(),
            tile_grid: self.tile_grid.clone(),
            tensors: self.tensors,
            waits_for: None,
            timeout_ns: ctx.timeout_ns,
            config: self.config_name,
            stream: String::new(),
        };
        let prepared = PreparedLaunch {
            kernel: self.kernel,
            module: self.module,
            entry: self.entry,
            traced_entry: self.traced_entry,
            grid: [ctas as u32, 1, 1],
            block: self.block,
            dynamic_smem: smem,
            ctx,
            args: self.args,
            syncs: self.syncs,
            cpu: Arc::new(cpu),
            buffers,
            note,
            accesses: self.accesses,
            produced: self.produced.iter().map(|(h, _)| h.clone()).collect(),
            partition: self.opts.partition,
            uses: self.uses,
            unreplayed: self.unreplayed,
        };
        if num_tiles == 0 {
            // Nothing to compute (an empty dimension): no launch; the (empty) outputs
            // are complete.
            for (h, _) in &self.produced {
                lock(&h.state).phase = crate::tiled::Phase::Complete;
            }
            return Ok(());
        }
        let id = target.submit(prepared)?;
        for (h, p) in self.produced {
            lock(&h.state).phase = crate::tiled::Phase::Produced(ProducerTiling { launch_id: id, ..p });
        }
        Ok(())
    }
}

/// Checked arithmetic for the launcher's evaluation of annotation expressions: the
/// generated launcher computes every `+ - * / %` and `div_ceil` of a shape, tile size,
/// extent, `block`, `smem` or `check(...)` through it, in the expression's own type (the
/// type the kernel computes it in), and turns `None` (overflow, or division by zero) into
/// [`overflow_error`]. Floats never fail.
pub trait CheckedArith: Copy {
    /// `self + rhs`, `None` on overflow.
    fn checked_add(self, rhs: Self) -> Option<Self>;
    /// `self - rhs`, `None` on overflow.
    fn checked_sub(self, rhs: Self) -> Option<Self>;
    /// `self * rhs`, `None` on overflow.
    fn checked_mul(self, rhs: Self) -> Option<Self>;
    /// `self / rhs`, `None` on division by zero or overflow.
    fn checked_div(self, rhs: Self) -> Option<Self>;
    /// `self % rhs`, `None` on division by zero or overflow.
    fn checked_rem(self, rhs: Self) -> Option<Self>;
    /// `self.div_ceil(rhs)`, `None` on division by zero or overflow.
    fn checked_div_ceil(self, rhs: Self) -> Option<Self>;
}

macro_rules! checked_int {
    ($($t:ty),*) => {$(
        impl CheckedArith for $t {
            fn checked_add(self, rhs: Self) -> Option<Self> { <$t>::checked_add(self, rhs) }
            fn checked_sub(self, rhs: Self) -> Option<Self> { <$t>::checked_sub(self, rhs) }
            fn checked_mul(self, rhs: Self) -> Option<Self> { <$t>::checked_mul(self, rhs) }
            fn checked_div(self, rhs: Self) -> Option<Self> { <$t>::checked_div(self, rhs) }
            fn checked_rem(self, rhs: Self) -> Option<Self> { <$t>::checked_rem(self, rhs) }
            fn checked_div_ceil(self, rhs: Self) -> Option<Self> {
                let q = <$t>::checked_div(self, rhs)?;
                // Round towards +infinity: up when there is a remainder and the exact
                // quotient is positive (always, for unsigned types).
                #[allow(unused_comparisons)]
                let up = self % rhs != 0 && ((self < 0) == (rhs < 0));
                if up { q.checked_add(1) } else { Some(q) }
            }
        }
    )*};
}

checked_int!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

macro_rules! checked_float {
    ($($t:ty),*) => {$(
        impl CheckedArith for $t {
            fn checked_add(self, rhs: Self) -> Option<Self> { Some(self + rhs) }
            fn checked_sub(self, rhs: Self) -> Option<Self> { Some(self - rhs) }
            fn checked_mul(self, rhs: Self) -> Option<Self> { Some(self * rhs) }
            fn checked_div(self, rhs: Self) -> Option<Self> { Some(self / rhs) }
            fn checked_rem(self, rhs: Self) -> Option<Self> { Some(self % rhs) }
            fn checked_div_ceil(self, rhs: Self) -> Option<Self> { Some((self / rhs).ceil()) }
        }
    )*};
}

checked_float!(f32, f64);

/// Where a checked operation of an annotation expression is (for [`checked_op`]'s error).
#[derive(Clone, Copy, Debug)]
pub struct OverflowSite {
    /// The kernel.
    pub kernel: &'static str,
    /// The annotation, e.g. "the shape of `x`".
    pub what: &'static str,
    /// The operation, as written, e.g. `m * n`.
    pub expr: &'static str,
    /// A division (`/`, `%`, `div_ceil`): it can also divide by zero.
    pub divides: bool,
}

/// One operation of an annotation expression in the launcher: `op(lhs, rhs)`, or a launch
/// error naming the kernel, the annotation, the operation, its type and `values` (the
/// parameters and constants the operation mentions) if it overflows or divides by zero.
pub fn checked_op<T: CheckedArith>(
    op: fn(T, T) -> Option<T>,
    lhs: T,
    rhs: T,
    site: &OverflowSite,
    values: &[(&str, &dyn std::fmt::Debug)],
) -> Result<T> {
    op(lhs, rhs).ok_or_else(|| {
        let ty = std::any::type_name::<T>();
        let values: Vec<String> = values.iter().map(|(n, v)| format!("{n} = {v:?}")).collect();
        let with = if values.is_empty() {
            String::new()
        } else {
            format!(" with {}", values.join(", "))
        };
        let fails = if site.divides {
            "divides by zero or overflows"
        } else {
            "overflows"
        };
        Error::launch(
            site.kernel,
            format!(
                "{}: `{}` {fails} `{ty}`{with}; the kernel computes it in `{ty}` too, where it would be wrong: use \
                 smaller sizes, or compute it in a wider type (`(m as u64) * (n as u64)`)",
                site.what, site.expr
            ),
        )
    })
}

/// Checks that no data tile gets more producer signals than the protocol can count.
fn check_targets(kernel: &str, param: &str, sync: &TileSync, ktile: &[u32; MAX_RANK], split: u32) -> Result<()> {
    // The largest target is that of an interior data tile: check the first tile of each
    // dimension's interior, bounded by the full count.
    let n = num_data_tiles(&sync.dims, sync.rank);
    if n == 0 {
        return Ok(());
    }
    let mut worst = split.max(1) as u64;
    for (dim, &kt) in sync.dims.iter().zip(ktile).take(sync.rank as usize) {
        let per = if kt == 0 {
            1
        } else if dim.tile == 0 {
            // Irregular: bound by the whole dimension.
            dim.size.div_ceil(kt) as u64
        } else {
            (dim.tile.div_ceil(kt) + 1) as u64
        };
        worst = worst.saturating_mul(per);
    }
    if worst > MAX_TARGET as u64 {
        let exact = if sync.dims.iter().take(sync.rank as usize).all(|d| d.tile != 0) {
            // SAFETY: plain tilings have no bounds table.
            unsafe { target_of(&sync.dims, sync.rank, &[0; MAX_RANK], ktile, split) as u64 }
        } else {
            worst
        };
        if exact > MAX_TARGET as u64 || worst > 4 * MAX_TARGET as u64 {
            return Err(Error::Tiling(format!(
                "`{kernel}` would signal each data tile of `{param}` up to {worst} times; at most {MAX_TARGET} are supported: \
                 use larger kernel tiles or smaller data tiles"
            )));
        }
    }
    Ok(())
}

/// Dynamic shared memory that leaves room for at most `c` CTAs per SM (paper §3.2).
pub fn padded_smem(requested: u32, c: u32, smem_per_sm: u32, max_per_block: u32) -> std::result::Result<u32, String> {
    if c == 0 {
        return Err("occupancy limit must be at least 1".into());
    }
    // The driver reserves 1 KiB per CTA; c + 1 CTAs must not fit.
    let per_cta = (smem_per_sm / (c + 1)).saturating_sub(1024) + 1;
    let padded = requested.max(per_cta.div_ceil(128) * 128);
    if padded > max_per_block {
        return Err(format!(
            "occupancy limit {c} needs {padded} B of shared memory per CTA, more than {max_per_block} B"
        ));
    }
    Ok(padded)
}

impl sealed::Sealed for Stream {}

impl LaunchTarget for Stream {
    fn device(&self) -> &Device {
        Stream::device(self)
    }

    fn submit(&self, mut launch: PreparedLaunch) -> Result<u32> {
        if launch.partition {
            return Err(Error::launch(
                launch.kernel,
                "asked for an SM partition, but a plain Stream has none (use an AsyncStream with one)",
            ));
        }
        if let Some(why) = launch.unreplayed.first() {
            return Err(Error::Tiling(why.clone()));
        }
        order::order_on(self, &launch.uses, self.key())?;
        let id = launch.ctx.launch_id;
        launch.note.stream = format!("stream #{}", self.id());
        self.device().notes().insert(id, launch.note.clone());
        let event = launch.launch_on(self)?;
        order::record(&launch.uses, self.key(), &event);
        Ok(id)
    }
}

/// What binding an argument yields (built by the implementations for [`Tensor`] and
/// [`Tiled`]; opaque outside the runtime).
pub struct Binding {
    /// Device address of the first element.
    pub(crate) addr: u64,
    /// The data buffer.
    pub(crate) data: Arc<Buffer>,
    /// Shape.
    pub(crate) shape: Vec<usize>,
    /// Device.
    pub(crate) device: Device,
    /// Semaphores (inactive for plain tensors).
    pub(crate) sync: TileSync,
    /// Buffers the launch keeps alive.
    pub(crate) buffers: Vec<Arc<Buffer>>,
    /// For messages: tensor id and note.
    pub(crate) note: Option<(u32, TensorNote)>,
    /// For `Tiled` outputs: the tensor's protocol state.
    pub(crate) tiled: Option<TiledHandle>,
    /// For `Tiled` tensors: how the launch uses it (ordering across targets).
    pub(crate) tiled_use: Option<TiledUse>,
    /// For `Tiled` inputs only a not yet replayed graph produces: why an eager launch
    /// must not read it.
    pub(crate) unreplayed: Option<String>,
}

/// An argument a kernel can read as a synchronised input of element type `T` and rank
/// `R`: a plain [`Tensor`] (complete data, no waiting) or a [`Tiled`] tensor whose data
/// tiling has rank `R` (consumers wait per data tile).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed where the kernel reads a `{T}` tensor of rank `{R}`",
    label = "expected `&Tensor<{T}>` or `&Tiled<{T}, D>` with a rank-`{R}` data tiling `D`",
    note = "the element type and the data tiling's rank are part of a `Tiled` tensor's type and must match the kernel's annotation"
)]
pub trait AsInput<T: DType, R: Rank> {
    /// Binds for reading.
    fn bind_input(&self, kernel: &str, param: &str) -> Result<Binding>;
}

/// An argument a kernel can write as a synchronised output of element type `T` and rank `R`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed where the kernel writes a `{T}` tensor of rank `{R}`",
    label = "expected `&mut Tensor<{T}>` or `&mut Tiled<{T}, D>` with a rank-`{R}` data tiling `D`",
    note = "the element type and the data tiling's rank are part of a `Tiled` tensor's type and must match the kernel's annotation"
)]
pub trait AsOutput<T: DType, R: Rank> {
    /// Binds for writing.
    fn bind_output(&mut self, kernel: &str, param: &str) -> Result<Binding>;
}

fn plain_binding<T: DType>(t: &Tensor<T>) -> Binding {
    Binding {
        addr: t.addr(),
        data: t.buffer().clone(),
        shape: t.shape().to_vec(),
        device: t.device().clone(),
        sync: TileSync::NONE,
        buffers: vec![t.buffer().clone()],
        note: None,
        tiled: None,
        tiled_use: None,
        unreplayed: None,
    }
}

impl<T: DType, R: Rank> AsInput<T, R> for Tensor<T> {
    fn bind_input(&self, _: &str, _: &str) -> Result<Binding> {
        Ok(plain_binding(self))
    }
}

impl<T: DType, R: Rank> AsOutput<T, R> for Tensor<T> {
    fn bind_output(&mut self, _: &str, _: &str) -> Result<Binding> {
        Ok(plain_binding(self))
    }
}

impl<T: DType, R: Rank, D: DataTiling + TilesRank<R>> AsInput<T, R> for Tiled<T, D> {
    fn bind_input(&self, kernel: &str, param: &str) -> Result<Binding> {
        let (sync, note, unreplayed) = self.consumer_sync(kernel, param)?;
        Ok(Binding {
            addr: self.tensor().addr(),
            data: self.tensor().buffer().clone(),
            shape: self.shape().to_vec(),
            device: self.tensor().device().clone(),
            sync,
            buffers: self.buffers(),
            note: Some((self.id(), note)),
            tiled: None,
            tiled_use: Some(self.tiled_use(false)),
            unreplayed,
        })
    }
}

impl<T: DType, R: Rank, D: DataTiling + TilesRank<R>> AsOutput<T, R> for Tiled<T, D> {
    fn bind_output(&mut self, kernel: &str, param: &str) -> Result<Binding> {
        let sync = self.producer_sync(kernel, param)?;
        let note = self.note(self.epoch(), None);
        Ok(Binding {
            addr: self.tensor().addr(),
            data: self.tensor().buffer().clone(),
            shape: self.shape().to_vec(),
            device: self.tensor().device().clone(),
            sync,
            buffers: self.buffers(),
            note: Some((self.id(), note)),
            tiled: Some(TiledHandle {
                state: self.state().clone(),
                sema: self.semaphores().buffer().clone(),
                sema_count: self.semaphore_count(),
                uses: self.tiled_use(true).uses,
            }),
            tiled_use: Some(self.tiled_use(true)),
            unreplayed: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smem_padding_caps_ctas_per_sm() {
        let sm = 233_472; // H100/H200: 228 KiB per SM
        for c in 1..=8u32 {
            let s = padded_smem(0, c, sm, 232_448).unwrap();
            let fit = sm / (s + 1024);
            assert!(fit <= c, "c={c}: {s} B lets {fit} CTAs fit");
            assert!(fit >= 1);
        }
        assert_eq!(padded_smem(100_000, 2, sm, 232_448).unwrap(), 100_000);
        assert!(padded_smem(0, 0, sm, 232_448).is_err());
    }

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
        static MODULE: PtxModule = PtxModule { name: "test", ptx: &[] };
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
