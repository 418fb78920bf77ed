//! The four operations `#[megaops::kernel]` injects (paper Listing 3):
//! [`kernel_begin_cta`], [`remap_tile`] / [`tile_coords`], [`wait_input`] and
//! [`signal_output`].
//!
//! Memory ordering:
//! - *signal*: all threads of the CTA finish their stores of the tile and meet at a
//!   barrier (`bar.red.or`, which also tells everyone whether a wait failed); then the
//!   first warp issues `fence.acq_rel.gpu` and its lanes share out one
//!   `red.relaxed.gpu.global.add.s32` per data tile (fence then strong write: a release
//!   pattern; the barrier makes every thread's stores precede the fence).
//! - *wait*: the active lanes of each warp (`activemask`) that reach the wait scan the
//!   semaphores together: each reads its share (up to four per lane per round, so one
//!   round trip covers 128 data tiles of a full warp) and `redux.sync.min` finds the
//!   first tile not ready. With at most one tile per lane the loads are `ld.acquire.gpu`;
//!   with more they are `ld.relaxed.gpu` and, when all are ready, every lane issues
//!   `fence.acq_rel.gpu` (the reader's acquire pattern). Then the lanes meet at
//!   `bar.warp.sync` (which orders that acquire before the other lanes' reads); otherwise
//!   they sleep and scan again from the first tile that was not ready. Waiting per warp
//!   instead of "thread 0 then CTA barrier" keeps the wait correct wherever the macro
//!   places it — also after an early `return` of some threads or inside divergent code.
//!   On the CPU backend each thread scans alone.
//! - a wait that is not satisfied re-reads at once for its first `ctx.poll_spin_ns`, then
//!   spins with `nanosleep` back-off, and gives up after
//!   `ctx.timeout_ns` of `%globaltimer`: it records (launch, tile, tensor, semaphore
//!   index, value, target) in the device error log, raises the log's abort flag (which
//!   every waiter reads once per 10 µs of waiting, so one failure does not cascade into a
//!   chain of timeouts)
//!   and returns `false`; the kernel then skips the rest of the tile and does not signal.
//!   On the CPU backend the wait blocks in the virtual GPU until the semaphore is ready,
//!   the same timeout passes on the virtual clock (then it records the same error, and
//!   every other waiter of the log aborts), or no thread can run at all (a deadlock,
//!   reported with the same sites at once).

use super::args::*;
use super::tiling::{TileBox, covered_box, is_designated, sem_index, signal_increment, target_of};
use crate::atomic::{self, AcqRel, Acquire, Gpu, Relaxed};
use crate::fence::fence;
use crate::thread::{block_idx_x, linear_thread_idx, sync_threads_or};

/// Records that this CTA has started, for the AsyncStream wait kernel that holds the next
/// launch back until then (deadlock freedom, paper §2.3). Thread 0 of every CTA lets a
/// programmatically dependent launch start (`griddepcontrol.launch_dependents`, see
/// [`crate::griddep`]: the wait kernel after this launch on its stream starts once every
/// CTA has begun). Thread 0 of a CTA with `blockIdx.x >= ctx.begin_cta` then raises the
/// launch's begin flag to `begin_token` (`ld.relaxed.gpu` then, if lower,
/// `red.relaxed.gpu.max`); other CTAs do nothing more.
///
/// # Safety
/// `ctx.begin_flag` is null or a valid device `i32`; some CTA of the grid has
/// `blockIdx.x >= ctx.begin_cta` (or nobody waits for the flag).
#[inline(always)]
pub unsafe fn kernel_begin_cta(ctx: &KernelCtx) {
    if linear_thread_idx() != 0 {
        return;
    }
    crate::griddep::launch_dependents();
    if ctx.begin_flag.is_null() || block_idx_x() < ctx.begin_cta {
        return;
    }
    // SAFETY: non-null begin_flag is a valid device i32 (caller's contract).
    unsafe {
        let seen = atomic::load(ctx.begin_flag as *const i32, Relaxed, Gpu);
        if seen.wrapping_sub(ctx.begin_token) < 0 {
            atomic::red_max(ctx.begin_flag, ctx.begin_token, Relaxed, Gpu);
        }
    }
}

/// The kernel tile a CTA (or a persistent CTA's `t`-th tile) works on: identity, rotation
/// by `remap.offset`, or `remap.table[t]` (paper §3.1, `cta_remap`).
///
/// # Safety
/// For a table remap, `ctx.remap.table` holds `ctx.num_tiles` readable entries.
#[inline(always)]
pub unsafe fn remap_tile(ctx: &KernelCtx, t: u32) -> u32 {
    const ROTATE: u32 = RemapKind::Rotate as u32;
    const TABLE: u32 = RemapKind::Table as u32;
    match ctx.remap.kind {
        ROTATE => {
            // offset < num_tiles (the host reduces it), so one conditional subtraction.
            let n = ctx.num_tiles.max(1);
            let r = t + ctx.remap.offset % n;
            if r >= n { r - n } else { r }
        }
        // SAFETY: caller's contract; t < num_tiles for every CTA the launch runs.
        TABLE => unsafe { *ctx.remap.table.add(t as usize) },
        _ => t,
    }
}

/// Row-major coordinates of linear kernel tile `r` in `ctx.tile_grid`.
#[inline(always)]
pub fn tile_coords(ctx: &KernelCtx, mut r: u32) -> [u32; MAX_RANK] {
    let mut c = [0u32; MAX_RANK];
    for i in (0..MAX_RANK).rev() {
        let n = ctx.tile_grid[i];
        if n > 1 {
            c[i] = r % n;
            r /= n;
        }
    }
    c
}

/// Waits until every data tile of `sync` that the element region `region` (per dimension
/// `[start, end)`) intersects is ready, i.e. its semaphore reached `sync.target`
/// (serial-number comparison). Returns `false` if the wait failed (timeout, abort or CPU
/// deadlock): the caller must then skip the tile.
///
/// # Safety
/// `sync` describes valid device semaphores (or is inactive), `ctx.errors` is null or a
/// valid error log.
#[inline(always)]
pub unsafe fn wait_input(ctx: &KernelCtx, tile: u32, sync: &TileSync, region: &[(u32, u32); MAX_RANK]) -> bool {
    if !sync.is_active() {
        return true;
    }
    // SAFETY: the tiling's bounds tables are valid (caller's contract).
    let tiles = unsafe { covered_box(&sync.dims, sync.rank, region) };
    let n = tiles.len();
    let lanes = LaneShare::current();
    let mut spin = Spin::new();
    let mut k = 0;
    // One semaphore per lane at most: each lane's single load can be `ld.acquire` (no
    // fence after, and no later load of the lane waits for it). More: relaxed loads that
    // overlap, then one fence.
    let acquire = n <= lanes.count;
    loop {
        // SAFETY: the semaphores of the tiling are valid (caller's contract).
        let Some(pk) = (unsafe { first_pending(sync, &tiles, n, k, &lanes, acquire) }) else {
            // Acquire in every lane that read a semaphore (its load, or the fence after
            // its relaxed loads), then the warp barrier: a lane that read a semaphore
            // synchronised with its producer, and `bar.warp.sync` orders that before the
            // other lanes' reads of the tile.
            if !acquire {
                fence(AcqRel, Gpu);
            }
            lanes.sync();
            #[cfg(not(target_arch = "nvptx64"))]
            crate::cpu::record_waited(sync, &tiles);
            return true;
        };
        // Data tiles before `pk` were ready, and a ready tile stays ready in this epoch.
        k = pk;
        let idx = sem_index(&sync.dims, sync.rank, &tiles.coords(pk));
        let site = WaitSite {
            // SAFETY: idx < number of semaphores of the tiling.
            sem: unsafe { sync.sema.add(idx as usize) },
            target: sync.target,
            launch_id: ctx.launch_id,
            tile,
            tensor_id: sync.tensor_id,
            sem_index: idx,
        };
        // SAFETY: forwarded contract.
        if !unsafe { spin.step(ctx, &site) } {
            return false;
        }
    }
}

/// Semaphores each lane of a scan reads in one round before any is compared.
const LANE_BATCH: u32 = 4;

/// How the lanes that wait together share a scan of the semaphores. On the GPU those are
/// the warp's active lanes (`activemask`): lane of rank `r` among `count` reads the data
/// tiles `base + r + j·count`, so one round of loads covers `count · LANE_BATCH` tiles
/// and their round trips overlap. On the CPU backend each thread scans alone (its
/// `activemask` does not know about exited lanes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneShare {
    /// Lanes that scan together (bit *i* = lane *i*).
    pub mask: u32,
    /// This lane's rank among them.
    pub rank: u32,
    /// How many they are (≥ 1).
    pub count: u32,
}

impl LaneShare {
    /// The lanes that execute this call together.
    #[inline(always)]
    pub fn current() -> LaneShare {
        #[cfg(target_arch = "nvptx64")]
        {
            let mask = crate::warp::activemask();
            let lane = crate::thread::lane_id();
            LaneShare::of(mask, lane)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            LaneShare::alone()
        }
    }

    /// Lane `lane` of the active lanes `mask` (which contains it).
    #[inline(always)]
    pub fn of(mask: u32, lane: u32) -> LaneShare {
        let below = mask & ((1u32 << lane) - 1);
        LaneShare {
            mask,
            rank: below.count_ones(),
            count: mask.count_ones().max(1),
        }
    }

    /// A thread that scans alone.
    #[inline(always)]
    pub fn alone() -> LaneShare {
        LaneShare {
            mask: 1,
            rank: 0,
            count: 1,
        }
    }

    /// The tile this lane reads as its `j`-th of the round starting at `base`.
    #[inline(always)]
    pub fn tile(&self, base: u32, j: u32) -> u32 {
        base.saturating_add(self.rank)
            .saturating_add(j.saturating_mul(self.count))
    }

    /// Tiles one round covers.
    #[inline(always)]
    pub fn round(&self) -> u32 {
        self.count.saturating_mul(LANE_BATCH)
    }

    /// Minimum of `v` over the lanes (`redux.sync.min.u32` on the GPU).
    #[inline(always)]
    fn min(&self, v: u32) -> u32 {
        #[cfg(target_arch = "nvptx64")]
        {
            crate::warp::reduce_min_sync_u32(self.mask, v)
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            v
        }
    }

    /// Barrier of the lanes (`bar.warp.sync` on the GPU; nothing for a lone thread).
    #[inline(always)]
    fn sync(&self) {
        #[cfg(target_arch = "nvptx64")]
        crate::warp::sync_warp(self.mask);
    }
}

/// The first data tile of `tiles`, from the `from`-th on, whose semaphore has not reached
/// `sync.target`, or `None` if all have. The lanes of `lanes` share each round of loads
/// ([`LaneShare`]) and agree on the smallest pending tile. With `acquire` (at most one
/// tile per lane) each load is `ld.acquire.gpu`; otherwise they are `ld.relaxed.gpu` and
/// the caller's `fence.acq_rel.gpu` after a `None` makes them an acquire pattern of the
/// PTX memory model (several `ld.acquire.gpu` of one lane would be one ordered round trip
/// after another). Either way each lane synchronises with the producers it read.
///
/// # Safety
/// As for [`wait_input`].
#[inline(always)]
unsafe fn first_pending(
    sync: &TileSync,
    tiles: &TileBox,
    n: u32,
    from: u32,
    lanes: &LaneShare,
    acquire: bool,
) -> Option<u32> {
    let mut base = from;
    while base < n {
        // Constant-index loops: the round stays in registers.
        let mut vals = [sync.target; LANE_BATCH as usize];
        #[allow(clippy::needless_range_loop)]
        for j in 0..LANE_BATCH as usize {
            let k = lanes.tile(base, j as u32);
            if k < n {
                let idx = sem_index(&sync.dims, sync.rank, &tiles.coords(k));
                let sem = sync.sema.wrapping_add(idx as usize);
                // SAFETY: idx < number of semaphores of the tiling, which the host allocated.
                vals[j] = unsafe {
                    if acquire {
                        atomic::load(sem, Acquire, Gpu)
                    } else {
                        atomic::load(sem, Relaxed, Gpu)
                    }
                };
            }
        }
        let mut mine = u32::MAX;
        for j in (0..LANE_BATCH as usize).rev() {
            if vals[j].wrapping_sub(sync.target) < 0 {
                mine = lanes.tile(base, j as u32);
            }
        }
        let first = lanes.min(mine);
        if first != u32::MAX {
            return Some(first);
        }
        base = base.saturating_add(lanes.round());
    }
    None
}

/// A wait reads the error log's abort flag once it has waited this long, and again each
/// time this much more has passed: a short wait never pays for that load, and a long one
/// pays for it once per period, not once per scan (the load is a round trip to L2 that
/// would otherwise delay every scan after the first 10 µs).
#[cfg_attr(not(target_arch = "nvptx64"), allow(dead_code))]
const ABORT_POLL_PERIOD_NS: u64 = 10_000;

/// The waiting between two scans of [`wait_input`]: timeout, abort and back-off.
struct Spin {
    /// `%globaltimer` at the first step (0: not started).
    start: u64,
    #[cfg_attr(not(target_arch = "nvptx64"), allow(dead_code))]
    backoff: u32,
    /// Time waited at which the abort flag is read next.
    #[cfg_attr(not(target_arch = "nvptx64"), allow(dead_code))]
    abort_check: u64,
}

impl Spin {
    #[inline(always)]
    fn new() -> Spin {
        Spin {
            start: 0,
            backoff: 32,
            abort_check: ABORT_POLL_PERIOD_NS,
        }
    }

    /// Waits a little for `site`; `false` if the wait has failed (timeout: recorded in the
    /// error log with the semaphore's value then; abort raised by another waiter).
    ///
    /// # Safety
    /// As for [`wait_input`].
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    unsafe fn step(&mut self, ctx: &KernelCtx, site: &WaitSite) -> bool {
        use crate::time::{global_timer, nanosleep};
        let now = global_timer();
        if self.start == 0 {
            self.start = now;
        }
        let waited = now.wrapping_sub(self.start);
        if waited > self.abort_check && !ctx.errors.is_null() {
            self.abort_check = waited + ABORT_POLL_PERIOD_NS;
            // SAFETY: errors is a valid log (caller's contract).
            if unsafe { atomic::load(&raw const (*ctx.errors).abort, Relaxed, Gpu) } != 0 {
                return false;
            }
        }
        if waited > ctx.timeout_ns {
            // SAFETY: site.sem is a valid semaphore; forwarded contract.
            unsafe {
                let value = atomic::load(site.sem, Relaxed, Gpu);
                record_timeout(ctx, site, value, waited)
            };
            return false;
        }
        // Short sleeps, and none at all while the wait is young: a consumer that
        // overslept its producer's last tile delays the whole overlap.
        if waited >= ctx.poll_spin_ns as u64 {
            nanosleep(self.backoff);
            self.backoff = (self.backoff * 2).min(128);
        }
        true
    }

    /// CPU backend: blocks in the virtual GPU until the semaphore is ready, or until
    /// `ctx.timeout_ns` of the virtual clock have passed since the first step (then it
    /// records the timeout as the GPU does) or the error log's abort flag is raised.
    ///
    /// # Safety
    /// As for [`wait_input`].
    #[cfg(not(target_arch = "nvptx64"))]
    unsafe fn step(&mut self, ctx: &KernelCtx, site: &WaitSite) -> bool {
        if self.start == 0 {
            self.start = crate::cpu::hooks::clock_now().max(1);
        }
        // SAFETY: forwarded contract.
        unsafe { cpu_wait(ctx, site, self.start) }
    }
}

/// CPU backend: [`crate::cpu::hooks::wait_until_deadline`] with the launch's timeout from
/// `start`; a timeout is recorded in the error log.
///
/// # Safety
/// As for [`wait_input`].
#[cfg(not(target_arch = "nvptx64"))]
unsafe fn cpu_wait(ctx: &KernelCtx, site: &WaitSite, start: u64) -> bool {
    use crate::cpu::hooks::{WaitEnd, wait_until_deadline};
    match wait_until_deadline(site, start.saturating_add(ctx.timeout_ns), ctx.errors) {
        WaitEnd::Reached => true,
        WaitEnd::Aborted => false,
        WaitEnd::TimedOut { value, now } => {
            // SAFETY: forwarded contract.
            unsafe { record_timeout(ctx, site, value, now.saturating_sub(start)) };
            false
        }
    }
}

/// Spins until `site.sem` reaches `site.target`.
///
/// # Safety
/// As for [`wait_input`].
#[inline(always)]
pub unsafe fn wait_one(ctx: &KernelCtx, site: &WaitSite) -> bool {
    // SAFETY: site.sem is a valid device semaphore.
    let first = unsafe { atomic::load(site.sem, Acquire, Gpu) };
    if first.wrapping_sub(site.target) >= 0 {
        return true;
    }
    // SAFETY: forwarded contract.
    unsafe { wait_slow(ctx, site) }
}

#[cfg(target_arch = "nvptx64")]
#[inline(never)]
unsafe fn wait_slow(ctx: &KernelCtx, site: &WaitSite) -> bool {
    use crate::time::{global_timer, nanosleep};
    let start = global_timer();
    let mut backoff = 32u32;
    let mut abort_check = ABORT_POLL_PERIOD_NS;
    loop {
        // SAFETY: valid semaphore (caller's contract).
        let v = unsafe { atomic::load(site.sem, Acquire, Gpu) };
        if v.wrapping_sub(site.target) >= 0 {
            return true;
        }
        let waited = global_timer().wrapping_sub(start);
        if waited > abort_check && !ctx.errors.is_null() {
            abort_check = waited + ABORT_POLL_PERIOD_NS;
            // SAFETY: errors is a valid log (caller's contract).
            if unsafe { atomic::load(&raw const (*ctx.errors).abort, Relaxed, Gpu) } != 0 {
                return false;
            }
        }
        if waited > ctx.timeout_ns {
            // SAFETY: forwarded contract.
            unsafe { record_timeout(ctx, site, v, waited) };
            return false;
        }
        if waited >= ctx.poll_spin_ns as u64 {
            nanosleep(backoff);
            backoff = (backoff * 2).min(256);
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
unsafe fn wait_slow(ctx: &KernelCtx, site: &WaitSite) -> bool {
    let start = crate::cpu::hooks::clock_now().max(1);
    // SAFETY: forwarded contract.
    unsafe { cpu_wait(ctx, site, start) }
}

/// Writes a timeout record into the error log and raises its abort flag; traps if the
/// launch has no error log.
unsafe fn record_timeout(ctx: &KernelCtx, site: &WaitSite, value: i32, waited_ns: u64) {
    if ctx.errors.is_null() {
        #[cfg(target_arch = "nvptx64")]
        // SAFETY: aborting the kernel is the only report left.
        unsafe {
            core::arch::nvptx::trap()
        }
        #[cfg(not(target_arch = "nvptx64"))]
        crate::cpu::hooks::trap("a tile wait timed out, and the launch has no error log to report it in");
    }
    // SAFETY: errors is a valid log (caller's contract); the slot index is unique.
    unsafe {
        let log = ctx.errors;
        let slot = atomic::add(&raw mut (*log).count, 1u32, Relaxed, Gpu);
        if (slot as usize) < MAX_ERRORS {
            let rec = &raw mut (*log).records[slot as usize];
            rec.write(ErrorRecord {
                kind: ERROR_WAIT_TIMEOUT,
                launch_id: site.launch_id,
                tile: site.tile,
                tensor_id: site.tensor_id,
                sem_index: site.sem_index,
                value,
                target: site.target,
                _pad: 0,
                waited_ns,
            });
        }
        atomic::store(&raw mut (*log).abort, 1i32, atomic::Release, Gpu);
    }
}

/// Where a producer kernel tile sits in the producer's tiling, to derive the semaphore
/// increments (see [`super::EPOCH_STRIDE`]).
#[derive(Clone, Copy, Debug)]
pub struct ProducerTile {
    /// The producer's kernel-tile size per dimension (0 = whole dimension).
    pub ktile: [u32; MAX_RANK],
    /// Kernel tiles per output tile (split-K factor), ≥ 1.
    pub split: u32,
    /// This kernel tile's split index (only index 0 can be the designated signaller).
    pub split_index: u32,
}

/// Signals every data tile of `sync` that the element region `region` intersects, after
/// all threads of the CTA finished writing it: [`begin_signals`] then [`signal_tiles`].
/// Every thread of the CTA must call this (it contains a barrier); `failed` is whether
/// this thread's tile was abandoned (a wait failed), in which case nothing is signalled by
/// the CTA.
///
/// # Safety
/// As for [`wait_input`]; additionally the caller writes exactly the region it signals.
#[inline(always)]
pub unsafe fn signal_output(sync: &TileSync, region: &[(u32, u32); MAX_RANK], producer: &ProducerTile, failed: bool) {
    let signalling = begin_signals(&[sync], failed);
    // SAFETY: forwarded from the caller.
    unsafe { signal_tiles(sync, region, producer, signalling) };
}

/// The release before a CTA's signals, once for all of its outputs: when any of `syncs`
/// has semaphores, a barrier (`bar.red.or`: every thread's stores of its tiles happen
/// before the release, and all threads learn whether any of them gave its tile up), then
/// `fence.acq_rel.gpu` in the signalling lanes (the first warp; one instruction for the
/// warp). Returns whether the calling thread signals ([`signal_tiles`]): a signalling lane
/// of a CTA none of whose threads failed. Every thread of the CTA must call it.
#[inline(always)]
pub fn begin_signals(syncs: &[&TileSync], failed: bool) -> bool {
    let mut active = false;
    let mut i = 0;
    while i < syncs.len() {
        active |= syncs[i].is_active();
        i += 1;
    }
    if !active {
        return false;
    }
    let any_failed = sync_threads_or(failed);
    if any_failed || linear_thread_idx() >= SIGNAL_LANES {
        return false;
    }
    fence(AcqRel, Gpu);
    true
}

/// The relaxed reductions that signal every data tile of `sync` that `region` intersects,
/// shared out over the signalling lanes (a CTA that writes many data tiles, a GEMV column
/// tile across 16 row tiles, does not pay one ordered release after another); nothing when
/// `signalling` is false or `sync` has no semaphores. Emits `red.relaxed.gpu.global.add`.
///
/// # Safety
/// As for [`signal_output`]; `signalling` is what [`begin_signals`] returned to this
/// thread, for a set of outputs that includes `sync`, after the CTA's last store to them.
#[inline(always)]
pub unsafe fn signal_tiles(
    sync: &TileSync,
    region: &[(u32, u32); MAX_RANK],
    producer: &ProducerTile,
    signalling: bool,
) {
    if !signalling || !sync.is_active() {
        return;
    }
    let lane = linear_thread_idx();
    // SAFETY: valid bounds tables (caller's contract).
    let tiles = unsafe { covered_box(&sync.dims, sync.rank, region) };
    let n = tiles.len();
    let mut k = lane;
    while k < n {
        let coords = tiles.coords(k);
        let idx = sem_index(&sync.dims, sync.rank, &coords);
        // SAFETY: valid tiling (caller's contract).
        let (target, designated) = unsafe {
            (
                target_of(&sync.dims, sync.rank, &coords, &producer.ktile, producer.split),
                producer.split_index == 0 && is_designated(&sync.dims, sync.rank, &coords, region),
            )
        };
        // SAFETY: idx < number of semaphores of the tiling.
        unsafe {
            atomic::red_add(
                sync.sema.add(idx as usize),
                signal_increment(designated, target),
                Relaxed,
                Gpu,
            )
        };
        k += SIGNAL_LANES;
    }
}

/// Threads of a CTA (its first warp) that share out [`signal_tiles`]' reductions.
const SIGNAL_LANES: u32 = 32;

/// Element region of a kernel tile along one dimension: tile `coord` of `ktile` elements,
/// or the whole dimension when `ktile == 0`, clamped to `size`.
#[inline(always)]
pub fn tile_region(coord: u32, ktile: u32, size: u32) -> (u32, u32) {
    if ktile == 0 {
        (0, size)
    } else {
        let start = coord.saturating_mul(ktile).min(size);
        (start, start.saturating_add(ktile).min(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile of a round is read by exactly one lane of the mask, whatever lanes are
    /// active, and the rounds tile the range.
    #[test]
    fn the_active_lanes_share_each_round_of_a_scan() {
        for mask in [u32::MAX, 1, 0x8000_0000, 0x0000_ffff, 0xa5a5_5a5a, 0x7fff_fffe] {
            let lanes: Vec<LaneShare> = (0..32)
                .filter(|l| mask >> l & 1 == 1)
                .map(|l| LaneShare::of(mask, l))
                .collect();
            let round = lanes[0].round();
            assert_eq!(round, mask.count_ones() * LANE_BATCH);
            for base in [0u32, 5, round] {
                let mut seen = vec![0u32; round as usize];
                for lane in &lanes {
                    assert_eq!(lane.round(), round);
                    for j in 0..LANE_BATCH {
                        seen[(lane.tile(base, j) - base) as usize] += 1;
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "mask {mask:#x}: {seen:?}");
            }
        }
        assert_eq!(LaneShare::alone().round(), LANE_BATCH);
        assert_eq!(LaneShare::alone().tile(7, 2), 9);
    }
}
