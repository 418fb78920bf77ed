//! Kernel-tile ↔ data-tile arithmetic (the paper's `map`, `extent` and `target`,
//! `calc_extent` / `calc_target`), shared by the device runtime and the host.
//!
//! One dimension at a time: a dimension of `size` elements is cut into data tiles,
//! either plain (`tile` elements each, the last one partial) or irregular (ascending
//! `bounds`). A kernel tile covers an element range `[start, end)`. All functions are
//! pure and total: ranges are clamped to the dimension, empty ranges cover nothing.

use super::args::{DimTiling, MAX_RANK};

/// Element range `[start, end)` of data tile `j`.
///
/// # Safety
/// For an irregular tiling, `d.bounds` must point to `d.count + 1` readable `u32`s and
/// `j < d.count`.
#[inline(always)]
pub unsafe fn data_tile_range(d: &DimTiling, j: u32) -> (u32, u32) {
    if d.tile != 0 {
        let start = j.saturating_mul(d.tile).min(d.size);
        (start, start.saturating_add(d.tile).min(d.size))
    } else {
        // SAFETY: the caller guarantees `bounds[j]` and `bounds[j + 1]` are readable.
        unsafe { (*d.bounds.add(j as usize), *d.bounds.add(j as usize + 1)) }
    }
}

/// Index of the data tile that holds element `x` (`x < d.size`).
///
/// # Safety
/// As for [`data_tile_range`].
#[inline(always)]
pub unsafe fn data_tile_of(d: &DimTiling, x: u32) -> u32 {
    if let Some(tile) = x.checked_div(d.tile) {
        tile
    } else {
        // Last boundary index i with bounds[i] <= x, i in 0..count.
        let (mut lo, mut hi) = (0u32, d.count);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            // SAFETY: mid < count, and the caller guarantees count + 1 readable bounds.
            if unsafe { *d.bounds.add(mid as usize) } <= x {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// The data tiles a kernel tile covering `[start, end)` intersects: `(map, extent)`, i.e.
/// the first data tile and how many follow. `extent` is 0 for an empty range or one that
/// lies past the end of the dimension.
///
/// # Safety
/// As for [`data_tile_range`].
#[inline(always)]
pub unsafe fn covered(d: &DimTiling, start: u32, end: u32) -> (u32, u32) {
    let end = end.min(d.size);
    if start >= end {
        return (0, 0);
    }
    // SAFETY: start < end <= size, so both elements exist; forwarded contract.
    let (first, last) = unsafe { (data_tile_of(d, start), data_tile_of(d, end - 1)) };
    (first, last - first + 1)
}

/// Number of plain producer kernel tiles of `ktile` elements (tile `i` covers
/// `[i * ktile, (i + 1) * ktile)`) that intersect data tile `j`: the paper's `target`
/// along one dimension. `ktile == 0` means the producer's kernel tile spans the whole
/// dimension (count 1).
///
/// # Safety
/// As for [`data_tile_range`].
#[inline(always)]
pub unsafe fn producer_tiles_in(d: &DimTiling, j: u32, ktile: u32) -> u32 {
    // SAFETY: forwarded contract.
    let (s, e) = unsafe { data_tile_range(d, j) };
    if e <= s {
        return 0;
    }
    if ktile == 0 {
        return 1;
    }
    (e - 1) / ktile - s / ktile + 1
}

/// A box of data tiles: per dimension the first tile and the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileBox {
    /// First data tile per dimension.
    pub first: [u32; MAX_RANK],
    /// Number of data tiles per dimension.
    pub count: [u32; MAX_RANK],
    /// Rank in use.
    pub rank: u32,
}

impl TileBox {
    /// Total number of data tiles in the box.
    #[inline(always)]
    pub fn len(&self) -> u32 {
        // Loops run to the constant MAX_RANK (guarded by `rank`) so that they unroll and
        // the arrays stay in registers on the device.
        let mut n = 1u32;
        for i in 0..MAX_RANK {
            if i < self.rank as usize {
                n = n.saturating_mul(self.count[i]);
            }
        }
        n
    }

    /// True when the box holds no data tile.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Coordinates of the `k`-th tile of the box (row-major, last dimension fastest).
    #[inline(always)]
    pub fn coords(&self, mut k: u32) -> [u32; MAX_RANK] {
        let mut c = [0u32; MAX_RANK];
        for i in (0..MAX_RANK).rev() {
            if i < self.rank as usize {
                let n = self.count[i].max(1);
                c[i] = self.first[i] + k % n;
                k /= n;
            }
        }
        c
    }
}

/// The box of data tiles of a tiled tensor that the element region `region[d] =
/// [start, end)` intersects.
///
/// # Safety
/// For each irregular dimension, `bounds` must be readable as for [`data_tile_range`].
#[inline(always)]
pub unsafe fn covered_box(dims: &[DimTiling; MAX_RANK], rank: u32, region: &[(u32, u32); MAX_RANK]) -> TileBox {
    let mut b = TileBox {
        first: [0; MAX_RANK],
        count: [0; MAX_RANK],
        rank,
    };
    for i in 0..MAX_RANK {
        if i < rank as usize {
            // SAFETY: forwarded contract.
            let (f, n) = unsafe { covered(&dims[i], region[i].0, region[i].1) };
            b.first[i] = f;
            b.count[i] = n;
        }
    }
    b
}

/// Row-major linear index of data tile `coords` in the semaphore array.
#[inline(always)]
pub fn sem_index(dims: &[DimTiling; MAX_RANK], rank: u32, coords: &[u32; MAX_RANK]) -> u32 {
    let mut idx = 0u32;
    for i in 0..MAX_RANK {
        if i < rank as usize {
            idx = idx * dims[i].count + coords[i];
        }
    }
    idx
}

/// Number of semaphores (data tiles) of a tiling.
#[inline(always)]
pub fn num_data_tiles(dims: &[DimTiling; MAX_RANK], rank: u32) -> u32 {
    let mut n = 1u32;
    for (i, d) in dims.iter().enumerate() {
        if i < rank as usize {
            n = n.saturating_mul(d.count);
        }
    }
    n
}

/// Target of data tile `coords` for a producer whose kernel tile is `ktile[d]` elements
/// per dimension (0 = whole dimension) and which has `split` kernel tiles per output
/// tile (split-K): the number of producer signals that complete the data tile.
///
/// # Safety
/// As for [`data_tile_range`].
#[inline(always)]
pub unsafe fn target_of(
    dims: &[DimTiling; MAX_RANK],
    rank: u32,
    coords: &[u32; MAX_RANK],
    ktile: &[u32; MAX_RANK],
    split: u32,
) -> u32 {
    let mut t = split.max(1);
    for i in 0..MAX_RANK {
        if i < rank as usize {
            // SAFETY: forwarded contract.
            t = t.saturating_mul(unsafe { producer_tiles_in(&dims[i], coords[i], ktile[i]) });
        }
    }
    t
}

/// True when the producer kernel tile covering `region` is the designated signaller of
/// data tile `coords`: it holds the data tile's first element in every dimension (and
/// the caller checks split index 0).
///
/// # Safety
/// As for [`data_tile_range`].
#[inline(always)]
pub unsafe fn is_designated(
    dims: &[DimTiling; MAX_RANK],
    rank: u32,
    coords: &[u32; MAX_RANK],
    region: &[(u32, u32); MAX_RANK],
) -> bool {
    let mut designated = true;
    for i in 0..MAX_RANK {
        if i < rank as usize {
            // SAFETY: forwarded contract.
            let (s, _) = unsafe { data_tile_range(&dims[i], coords[i]) };
            designated &= s >= region[i].0 && s < region[i].1;
        }
    }
    designated
}

/// The semaphore increment a producer kernel tile adds to a data tile (see
/// [`super::EPOCH_STRIDE`]): `EPOCH_STRIDE - target + 1` for the designated signaller,
/// 1 for the others.
#[inline(always)]
pub fn signal_increment(designated: bool, target: u32) -> i32 {
    if designated {
        super::EPOCH_STRIDE - target as i32 + 1
    } else {
        1
    }
}

/// Decodes how many of `target` signals a data tile has received in the epoch whose
/// ready value is `ready` (the consumer's target), from the semaphore `value`. Used only
/// for error messages.
pub fn signals_received(value: i32, ready: i32, target: u32) -> u32 {
    let base = ready.wrapping_sub(super::EPOCH_STRIDE);
    let rel = value.wrapping_sub(base);
    if rel < 0 {
        return 0;
    }
    let rel = rel as u32;
    let pad = super::EPOCH_STRIDE as u32 - target;
    if rel > pad {
        (rel - pad).min(target)
    } else {
        rel.min(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::EPOCH_STRIDE;

    fn irregular(bounds: &'static [u32]) -> DimTiling {
        DimTiling {
            size: *bounds.last().unwrap(),
            tile: 0,
            count: bounds.len() as u32 - 1,
            bounds: bounds.as_ptr(),
        }
    }

    /// Brute force: data tiles (by element membership) that [start, end) touches.
    fn brute_cover(d: &DimTiling, start: u32, end: u32) -> (u32, u32) {
        let tiles: Vec<u32> = (start..end.min(d.size))
            .map(|x| unsafe { data_tile_of_brute(d, x) })
            .collect();
        match (tiles.first(), tiles.last()) {
            (Some(&f), Some(&l)) => (f, l - f + 1),
            _ => (0, 0),
        }
    }

    unsafe fn data_tile_of_brute(d: &DimTiling, x: u32) -> u32 {
        (0..d.count)
            .find(|&j| unsafe { data_tile_range(d, j) }.0 <= x && x < unsafe { data_tile_range(d, j) }.1)
            .unwrap()
    }

    #[test]
    fn covered_matches_brute_force_on_plain_tilings() {
        for size in 1..=40u32 {
            for tile in 1..=12u32 {
                let d = DimTiling::plain(size, tile);
                for k in 1..=13u32 {
                    for i in 0..size.div_ceil(k) + 1 {
                        let (s, e) = (i * k, i * k + k);
                        assert_eq!(
                            unsafe { covered(&d, s, e) },
                            brute_cover(&d, s, e),
                            "size {size} tile {tile} k {k} i {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn targets_match_brute_force_count_of_intersecting_kernel_tiles() {
        for size in 1..=40u32 {
            for tile in 1..=12u32 {
                let d = DimTiling::plain(size, tile);
                for k in 1..=13u32 {
                    for j in 0..d.count {
                        let (s, e) = unsafe { data_tile_range(&d, j) };
                        let brute = (0..size.div_ceil(k))
                            .filter(|&i| i * k < e && (i * k + k).min(size) > s)
                            .count() as u32;
                        assert_eq!(
                            unsafe { producer_tiles_in(&d, j, k) },
                            brute,
                            "size {size} tile {tile} k {k} j {j}"
                        );
                    }
                    // Every data tile has exactly one designated kernel tile.
                    for j in 0..d.count {
                        let (s, _) = unsafe { data_tile_range(&d, j) };
                        let designated = (0..size.div_ceil(k))
                            .filter(|&i| i * k <= s && s < (i * k + k).min(size))
                            .count();
                        assert_eq!(designated, 1);
                    }
                }
            }
        }
    }

    #[test]
    fn irregular_tilings_map_by_bounds() {
        static B: [u32; 5] = [0, 3, 4, 10, 17];
        let d = irregular(&B);
        for x in 0..17 {
            assert_eq!(unsafe { data_tile_of(&d, x) }, unsafe { data_tile_of_brute(&d, x) });
        }
        for k in 1..=18u32 {
            for i in 0..17u32.div_ceil(k) {
                assert_eq!(
                    unsafe { covered(&d, i * k, i * k + k) },
                    brute_cover(&d, i * k, i * k + k)
                );
            }
            for j in 0..4 {
                let (s, e) = unsafe { data_tile_range(&d, j) };
                let brute = (0..17u32.div_ceil(k))
                    .filter(|&i| i * k < e && (i * k + k).min(17) > s)
                    .count() as u32;
                assert_eq!(unsafe { producer_tiles_in(&d, j, k) }, brute);
            }
        }
    }

    #[test]
    fn two_dimensional_box_and_targets() {
        // 10 x 7 tensor, data tiles 4 x 3 (3 x 3 grid); producer kernel tiles 3 x 7 (whole rows).
        let mut dims = [DimTiling::plain(0, 1); MAX_RANK];
        dims[0] = DimTiling::plain(10, 4);
        dims[1] = DimTiling::plain(7, 3);
        assert_eq!(num_data_tiles(&dims, 2), 9);
        let region = [(3, 6), (0, 7), (0, 0), (0, 0)];
        let b = unsafe { covered_box(&dims, 2, &region) };
        assert_eq!((b.first[0], b.count[0], b.first[1], b.count[1]), (0, 2, 0, 3));
        assert_eq!(b.len(), 6);
        assert_eq!(b.coords(4), [1, 1, 0, 0]);
        assert_eq!(sem_index(&dims, 2, &[1, 2, 0, 0]), 5);
        // Data tile (1, *) covers rows 4..8, hit by producer row tiles 3..6 and 6..9.
        assert_eq!(unsafe { target_of(&dims, 2, &[1, 2, 0, 0], &[3, 0, 0, 0], 1) }, 2);
        assert_eq!(unsafe { target_of(&dims, 2, &[1, 2, 0, 0], &[3, 0, 0, 0], 4) }, 8);
        // Rows 3..6 do not hold row 4's tile start (4 is in 3..6: it does), nor row 0's.
        assert!(unsafe { is_designated(&dims, 2, &[1, 0, 0, 0], &region) });
        assert!(!unsafe { is_designated(&dims, 2, &[0, 0, 0, 0], &region) });
    }

    #[test]
    fn increments_of_one_production_sum_to_the_stride() {
        for target in 1..50u32 {
            let sum: i32 = (0..target).map(|i| signal_increment(i == 0, target)).sum();
            assert_eq!(sum, EPOCH_STRIDE);
        }
    }

    #[test]
    fn progress_decodes_from_semaphore_values_across_wrap() {
        for epoch in [0i32, 1, 5, 32766, 32767, 40000] {
            let base = epoch.wrapping_mul(EPOCH_STRIDE);
            let ready = base.wrapping_add(EPOCH_STRIDE);
            let target = 3;
            // Signals arrive in any order; the designated one adds the pad.
            for designated_at in 0..3 {
                let mut v = base;
                for i in 0..3u32 {
                    assert_eq!(signals_received(v, ready, target), i);
                    v = v.wrapping_add(signal_increment(i == designated_at, target));
                }
                assert_eq!(v, ready);
                assert_eq!(signals_received(v, ready, target), 3);
            }
        }
    }
}
