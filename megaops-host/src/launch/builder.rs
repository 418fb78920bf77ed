//! [`KernelLaunch`]: the launch a generated launcher assembles. Everything is checked
//! here before anything runs: shapes against the kernel's annotation, tile coverage, the
//! protocol state of each `Tiled` tensor, grid/block/shared-memory limits.

use super::bind::{AsInput, AsOutput, Binding, Declared};
use super::options::{LaunchOptions, ReleaseNext, Remap, padded_smem};
use super::prepared::{Access, PreparedLaunch, TiledHandle};
use super::target::LaunchTarget;
use super::targets::check_targets;
use crate::buffer::Buffer;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::PtxModule;
use crate::mutex::lock;
use crate::notes::{LaunchNote, TensorNote};
use crate::order::TiledUse;
use crate::param::{ParamBytes, param_bytes};
use crate::tensor::Tensor;
use crate::tiled::ProducerTiling;
use crate::tiling::Rank;
use megaops_device::sync::{CtaRemap, KernelCtx, MAX_RANK, RemapKind, TileSync, TraceLog};
use std::sync::Arc;

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
    side: Option<Arc<dyn crate::subkernel::SideWork>>,
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
            side: None,
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
            return Err(Error::Shape {
                kernel: Some(self.kernel.to_string()),
                tensor: Some(param.to_string()),
                expected: Some(declared.iter().map(|&d| d as usize).collect()),
                found: Some(actual.to_vec()),
                message: format!(
                    "`{}` expects `{param}` of shape {declared:?} (from its other arguments), got {actual:?}",
                    self.kernel
                ),
            });
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
                return Err(Error::Shape {
                    kernel: Some(self.kernel.to_string()),
                    tensor: Some(param.to_string()),
                    expected: None,
                    found: Some(x.shape().to_vec()),
                    message: format!(
                        "`{}` needs at least {len} elements in `{param}`, got {} ({:?})",
                        self.kernel,
                        x.numel(),
                        x.shape()
                    ),
                });
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
        let synced = b.sync.is_active();
        let (addr, sync, _) = self.push_binding(b, false, synced);
        Ok((addr, sync))
    }

    /// Records a bound tensor argument: its access (`write`, `synced`), buffers, pointer,
    /// sync, note, tiled use and unreplayed-capture note. Returns its pointer, its sync and
    /// its producer handle (outputs of `Tiled` tensors).
    fn push_binding(&mut self, b: Binding, write: bool, synced: bool) -> (u64, TileSync, Option<TiledHandle>) {
        self.accesses.push(Access {
            buffer: b.data.clone(),
            write,
            synced,
        });
        self.buffers.extend(b.buffers);
        self.args.push(param_bytes(&b.addr));
        self.syncs.push(b.sync);
        if let Some((id, note)) = b.note {
            self.tensors.push((id, note));
        }
        self.uses.extend(b.tiled_use);
        self.unreplayed.extend(b.unreplayed);
        (b.addr, b.sync, b.tiled)
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
        let synced = b.tiled.is_some();
        let (addr, sync, tiled) = self.push_binding(b, true, synced);
        if let Some(handle) = tiled {
            let producer = ProducerTiling {
                ktile,
                split,
                kernel: self.kernel,
                launch_id: 0,
            };
            self.produced.push((handle, producer));
        }
        Ok((addr, sync))
    }

    /// Replaces the by-value parameters bound so far (the tensors' addresses included)
    /// with `args`, and the entry with `entry`: a launch whose kernel takes its operands'
    /// addresses in another form (a subkernel's proxy, which takes none).
    pub(crate) fn replace_args(&mut self, entry: &'static str, args: Vec<ParamBytes>) {
        self.entry = entry;
        self.args = args;
    }

    /// Records that the launch reads (`write = false`) or writes a plain tensor of shape
    /// `shape` that is not one of its kernel parameters (a subkernel's operand): checked,
    /// kept alive and ordered like one.
    pub(crate) fn touch<T: DType>(&mut self, param: &str, x: &Tensor<T>, shape: &[u64], write: bool) -> Result<()> {
        self.check_device(param, x.device())?;
        self.check_shape(param, x.shape(), shape)?;
        self.buffers.push(x.buffer().clone());
        self.accesses.push(Access {
            buffer: x.buffer().clone(),
            write,
            synced: false,
        });
        Ok(())
    }

    /// Keeps `buffer` alive as long as the launch may run.
    pub(crate) fn keep(&mut self, buffer: Arc<Buffer>) {
        self.buffers.push(buffer);
    }

    /// Attaches the work the launch brings to its target's side streams.
    pub(crate) fn side(&mut self, work: Arc<dyn crate::subkernel::SideWork>) {
        self.side = Some(work);
    }

    /// Adds a note on a non-tensor word array the launch waits on (for error reports).
    pub(crate) fn note_tensor(&mut self, id: u32, note: TensorNote) {
        self.tensors.push((id, note));
    }

    /// The note of the tensor bound last, if it was a `Tiled` one.
    pub(crate) fn last_tensor_note(&self) -> Option<&TensorNote> {
        self.tensors.last().map(|(_, note)| note)
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
                .map_err(|e| self.err(e.to_string()))?;
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
            poll_spin_ns: self.device.poll_spin().as_nanos() as u32,
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
            site: self.opts.site,
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
            side: self.side,
            programmatic: false,
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
