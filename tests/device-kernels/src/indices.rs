//! Indices, lane/warp ids and CTA barriers.

use crate::global_id;
use megaops_device::static_shared;
use megaops_device::thread::*;

/// Words [`thread_indices`] writes per thread.
pub const INDEX_WORDS: usize = 16;

/// Every thread writes its indices to `out[global_id * 16..][..16]`:
/// `tid.xyz, ctaid.xyz, ntid.xyz, nctaid.xyz, linear_thread_idx, lane_id, warp_id`, and a
/// last word that is 1 iff every `*_x/_y/_z` accessor agrees with the `Dim3` ones.
///
/// Launch: any grid and block, 1-, 2- or 3-D. `out`: `16 × threads` words.
///
/// # Safety
/// `out` is valid for the writes above.
pub unsafe fn thread_indices(out: *mut u32) {
    let (t, b, nt, nb) = (thread_idx(), block_idx(), block_dim(), grid_dim());
    let components_agree = [
        (thread_idx_x(), t.x),
        (thread_idx_y(), t.y),
        (thread_idx_z(), t.z),
        (block_idx_x(), b.x),
        (block_idx_y(), b.y),
        (block_idx_z(), b.z),
        (block_dim_x(), nt.x),
        (block_dim_y(), nt.y),
        (block_dim_z(), nt.z),
        (grid_dim_x(), nb.x),
        (grid_dim_y(), nb.y),
        (grid_dim_z(), nb.z),
    ]
    .iter()
    .all(|(a, b)| a == b);
    let words = [
        t.x,
        t.y,
        t.z,
        b.x,
        b.y,
        b.z,
        nt.x,
        nt.y,
        nt.z,
        nb.x,
        nb.y,
        nb.z,
        linear_thread_idx(),
        lane_id(),
        warp_id(),
        components_agree as u32,
    ];
    let base = global_id() as usize * INDEX_WORDS;
    for (i, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(base + i).write(w) };
    }
}
entry!(thread_indices(out: *mut u32));

/// Threads per CTA [`barriers`] must be launched with.
pub const BARRIER_BLOCK: u32 = 128;
/// Words [`barriers`] writes per thread.
pub const BARRIER_WORDS: usize = 8;

/// Exercises `sync_threads`, `sync_threads_count/and/or` and named barriers.
///
/// Thread `t` of CTA `b` writes to `out[global_id * 8..]`: the value its right neighbour
/// `(t+1) % 128` stored before `sync_threads` (`3·(t+1)%128 + 1`); the count of threads
/// with `t % 3 == 0` (43); `and(true)` (1); `and(t != 5)` (0); `or(t == 127)` (1);
/// `or(false)` (0); for the odd warp of each warp pair, what the even warp stored across
/// a named barrier of 64 threads (barrier 1 for warps 0-1, 2 for warps 2-3:
/// `t - 32 + 1000·(b+1)`, else 0); and `0xba44`.
///
/// Launch: block `(128, 1, 1)`, any 1-D grid. `out`: `8 × threads` words.
///
/// # Safety
/// `out` is valid for the writes above; the block has 128 threads.
pub unsafe fn barriers(out: *mut u32) {
    let ring = static_shared!(RING: [u32; 128]);
    let pairs = static_shared!(PAIRS: [u32; 128]);
    let t = thread_idx_x() as usize;
    let n = block_dim_x() as usize;
    // SAFETY: t < 128, the size of `ring`; read by another thread after the barrier.
    unsafe { ring.at(t).write(3 * t as u32 + 1) };
    sync_threads();
    // SAFETY: (t + 1) % n < 128, written before the barrier.
    let neighbour = unsafe { ring.at((t + 1) % n).read() };

    let count = sync_threads_count(t.is_multiple_of(3));
    let and_true = sync_threads_and(t < n);
    let and_false = sync_threads_and(t != 5);
    let or_true = sync_threads_or(t == n - 1);
    let or_false = sync_threads_or(false);

    let w = warp_id();
    if w.is_multiple_of(2) {
        // SAFETY: t < 128; read by the partner warp after the named barrier.
        unsafe { pairs.at(t).write(t as u32 + 1000 * (block_idx_x() + 1)) };
    }
    barrier_sync(1 + w / 2, 64);
    let from_partner = if w % 2 == 1 {
        // SAFETY: t - 32 < 128 (odd warps have t >= 32), written before the named barrier.
        unsafe { pairs.at(t - 32).read() }
    } else {
        0
    };

    let words = [
        neighbour,
        count,
        and_true as u32,
        and_false as u32,
        or_true as u32,
        or_false as u32,
        from_partner,
        0xba44,
    ];
    let base = crate::global_id() as usize * BARRIER_WORDS;
    for (i, v) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(base + i).write(v) };
    }
}
entry!(barriers(out: *mut u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;
    use megaops_device::Dim3;

    /// What [`thread_indices`] writes for a launch of `grid` × `block`.
    pub fn thread_indices(grid: Dim3, block: Dim3) -> Vec<u32> {
        let mut out = vec![0; (grid.volume() * block.volume()) as usize * INDEX_WORDS];
        for (bz, by, bx) in boxes(grid) {
            for (tz, ty, tx) in boxes(block) {
                let lt = linear_index(Dim3::new(tx, ty, tz), block);
                let lb = linear_index(Dim3::new(bx, by, bz), grid);
                let g = (lb as u64 * block.volume() + lt as u64) as usize;
                let words = [
                    tx,
                    ty,
                    tz,
                    bx,
                    by,
                    bz,
                    block.x,
                    block.y,
                    block.z,
                    grid.x,
                    grid.y,
                    grid.z,
                    lt,
                    lt % 32,
                    lt / 32,
                    1,
                ];
                out[g * INDEX_WORDS..][..INDEX_WORDS].copy_from_slice(&words);
            }
        }
        out
    }

    fn boxes(d: Dim3) -> impl Iterator<Item = (u32, u32, u32)> {
        (0..d.z).flat_map(move |z| (0..d.y).flat_map(move |y| (0..d.x).map(move |x| (z, y, x))))
    }

    /// What [`barriers`] writes for `ctas` CTAs.
    pub fn barriers(ctas: u32) -> Vec<u32> {
        let n = BARRIER_BLOCK;
        let mut out = Vec::new();
        for b in 0..ctas {
            for t in 0..n {
                let w = t / 32;
                let partner = if w % 2 == 1 { t - 32 + 1000 * (b + 1) } else { 0 };
                let count = (0..n).filter(|t| t % 3 == 0).count() as u32;
                out.extend([3 * ((t + 1) % n) + 1, count, 1, 0, 1, 0, partner, 0xba44]);
            }
        }
        out
    }
}
