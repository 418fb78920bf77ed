//! Parameter blocks the host passes to every MegaOps kernel, laid out identically on the
//! host and the device (`#[repr(C)]`, passed by value as kernel parameters).

/// Semaphore increments of one complete production of a data tile: every producer kernel
/// tile that writes the data tile adds 1, except the *designated* one (the kernel tile
/// holding the data tile's first element, split index 0), which adds
/// `EPOCH_STRIDE - target + 1`. So after each complete production the semaphore has grown
/// by exactly `EPOCH_STRIDE`, whatever the producer's tiling, and a consumer of epoch `e`
/// waits for `(e + 1) * EPOCH_STRIDE` (wrapping, compared as serial numbers). Semaphores
/// are therefore never reset between uses: re-arming is a host-side epoch increment,
/// which also works inside CUDA graphs.
pub const EPOCH_STRIDE: i32 = 1 << 16;

/// Largest number of producer kernel tiles that may write one data tile (keeps the
/// designated increment unambiguous for error reports).
pub const MAX_TARGET: u32 = (EPOCH_STRIDE as u32) / 2;

/// Maximum rank of a synchronised tensor.
pub const MAX_RANK: usize = 4;

/// Number of error records the device error log keeps.
pub const MAX_ERRORS: usize = 8;

/// Which mapping a [`CtaRemap`] applies, stored as its `u32` value in `CtaRemap::kind`
/// (the kernel parameter keeps the plain integer the device code matches on).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemapKind {
    /// Tile `t` runs as tile `t`.
    Identity = 0,
    /// Tile `t` runs as `(t + offset) mod num_tiles`.
    Rotate = 1,
    /// Tile `t` runs as `table[t]`.
    Table = 2,
}

/// How a launch maps CTAs (linear tile indices) to kernel tiles (paper §3.1).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtaRemap {
    /// The mapping: a [`RemapKind`] as `u32`.
    pub kind: u32,
    /// Rotation offset in linear tiles ([`RemapKind::Rotate`]).
    pub offset: u32,
    /// Permutation of `0..num_tiles` in device memory ([`RemapKind::Table`]).
    pub table: *const u32,
}

impl CtaRemap {
    /// Tile `t` runs as tile `t`.
    pub const IDENTITY: CtaRemap = CtaRemap {
        kind: RemapKind::Identity as u32,
        offset: 0,
        table: core::ptr::null(),
    };
}

/// Per-launch context, the last parameter of every MegaOps kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelCtx {
    /// Where `kernel_begin_cta` stores `begin_token` (null: nobody waits for this launch).
    pub begin_flag: *mut i32,
    /// Value stored at `begin_flag` when a CTA starts.
    pub begin_token: i32,
    /// Only CTAs with `blockIdx.x >= begin_cta` raise the begin flag: 0 lets the next
    /// launch go once any CTA has started, `gridDim.x - 1` once the last one has (all CTAs
    /// dispatched, so the next kernel's CTAs never take SM room this one still needs).
    pub begin_cta: u32,
    /// Host-assigned launch number, reported in errors.
    pub launch_id: u32,
    /// A tile wait re-reads its semaphores without sleeping for its first `poll_spin_ns`
    /// nanoseconds of `%globaltimer`, then backs off with `nanosleep` (0: backs off from
    /// the first miss).
    pub poll_spin_ns: u32,
    /// CTA → kernel-tile order.
    pub remap: CtaRemap,
    /// Kernel-tile grid (row-major, outermost first; unused dims are 1).
    pub tile_grid: [u32; MAX_RANK],
    /// Number of kernel tiles (`tile_grid` product).
    pub num_tiles: u32,
    /// Wait timeout in nanoseconds of `%globaltimer`.
    pub timeout_ns: u64,
    /// Device error log (null: timeouts trap instead).
    pub errors: *mut ErrorLog,
    /// Tile-trace log (null: the launch is not traced; see `sync::trace`).
    pub trace: *mut TraceLog,
}

/// One kernel tile as a traced launch records it (40 bytes, `#[repr(C)]`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileTrace {
    /// When the tile started (`%globaltimer` ns; the virtual clock on the CPU backend).
    pub start_ns: u64,
    /// When its last input wait ended (`start_ns` if it waited for nothing).
    pub waited_ns: u64,
    /// When every thread had finished it, before its output signals.
    pub end_ns: u64,
    /// The launch (`KernelCtx::launch_id`).
    pub launch_id: u32,
    /// The kernel tile (linear, after the CTA remap).
    pub tile: u32,
    /// The SM that ran it (`%smid`).
    pub sm: u32,
    /// The CTA that ran it (`%ctaid.x`; a persistent CTA runs several tiles).
    pub cta: u32,
}

/// Header of a device-side tile-trace log: the traced launches append [`TileTrace`]s at
/// `head` (atomically); those past `capacity` are counted in `head` but not written.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TraceLog {
    /// Records appended (may exceed `capacity`).
    pub head: u32,
    /// Records `records` holds.
    pub capacity: u32,
    /// The records, in device memory.
    pub records: *mut TileTrace,
}

/// Data tiling of one dimension of a synchronised tensor.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimTiling {
    /// Tensor extent along this dimension, in elements.
    pub size: u32,
    /// Plain data-tile size; 0 means irregular, given by `bounds`.
    pub tile: u32,
    /// Number of data tiles along this dimension.
    pub count: u32,
    /// Irregular tiling: `count + 1` ascending boundaries from 0 to `size` (device memory).
    pub bounds: *const u32,
}

impl DimTiling {
    /// A dimension of `size` elements cut into tiles of `tile` (the last may be partial).
    pub const fn plain(size: u32, tile: u32) -> Self {
        let count = if tile == 0 { 0 } else { size.div_ceil(tile) };
        DimTiling {
            size,
            tile,
            count,
            bounds: core::ptr::null(),
        }
    }
}

/// The data-tile semaphores of one tensor, as one kernel launch sees them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TileSync {
    /// Semaphores, one `i32` per data tile, row-major over the data-tile grid. Null means
    /// the tensor is not synchronised: waits and signals are no-ops.
    pub sema: *mut i32,
    /// Host-assigned tensor id, reported in errors.
    pub tensor_id: u32,
    /// Consumer: the value (serial-number compared) at which a data tile is ready.
    pub target: i32,
    /// Number of used entries in `dims`.
    pub rank: u32,
    /// Data tiling per dimension, outermost first.
    pub dims: [DimTiling; MAX_RANK],
}

impl TileSync {
    /// A tensor without semaphores.
    pub const NONE: TileSync = TileSync {
        sema: core::ptr::null_mut(),
        tensor_id: 0,
        target: 0,
        rank: 0,
        dims: [DimTiling {
            size: 0,
            tile: 0,
            count: 0,
            bounds: core::ptr::null(),
        }; MAX_RANK],
    };

    /// True when waits and signals on this tensor do something.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        !self.sema.is_null()
    }
}

/// What a wait that timed out (or that a deadlock stopped) was waiting for.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitSite {
    /// The semaphore.
    pub sem: *const i32,
    /// Target value (serial-number compared).
    pub target: i32,
    /// Launch that waits.
    pub launch_id: u32,
    /// Linear (remapped) kernel tile that waits.
    pub tile: u32,
    /// Tensor whose semaphore it is (0 for the AsyncStream begin flag).
    pub tensor_id: u32,
    /// Index of the semaphore in the tensor's semaphore array.
    pub sem_index: u32,
}

/// One recorded synchronisation failure.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorRecord {
    /// 1: a wait timed out.
    pub kind: u32,
    /// Launch that waited.
    pub launch_id: u32,
    /// Linear kernel tile (after remap) that waited.
    pub tile: u32,
    /// Tensor id of the semaphore.
    pub tensor_id: u32,
    /// Semaphore index.
    pub sem_index: u32,
    /// Value seen last.
    pub value: i32,
    /// Target waited for.
    pub target: i32,
    /// Padding, keeps `waited_ns` 8-aligned on both sides.
    pub _pad: u32,
    /// How long it waited, in ns.
    pub waited_ns: u64,
}

/// Error record kind: a semaphore wait timed out.
pub const ERROR_WAIT_TIMEOUT: u32 = 1;

/// Device-side error log. `abort` set means "a wait failed: stop waiting, exit": every
/// waiter polls it, so one missing producer does not make every later kernel time out in
/// turn.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorLog {
    /// Non-zero once any wait failed.
    pub abort: i32,
    /// Number of records written (may exceed `MAX_ERRORS`; extra ones are dropped).
    pub count: u32,
    /// The first records.
    pub records: [ErrorRecord; MAX_ERRORS],
}

// SAFETY (for the CPU backend, which moves parameter blocks between host threads): the
// raw pointers are device addresses the kernel dereferences only on the device side.
unsafe impl Send for KernelCtx {}
unsafe impl Sync for KernelCtx {}
unsafe impl Send for TileSync {}
unsafe impl Sync for TileSync {}
unsafe impl Send for WaitSite {}
unsafe impl Sync for WaitSite {}
