//! Shared-memory layouts of the GEMM tiles: XOR swizzles on 16-byte chunks that make every
//! access the kernels issue free of bank conflicts, and the compile-time unroller the
//! kernels use for register arrays.
//!
//! Shared memory has 32 banks of 4 bytes; a 128-byte *line* (8 chunks of 16 bytes) covers
//! each bank once. A warp-wide access of 16 bytes per lane is served in 4 phases of 8
//! lanes (`ldmatrix`: one phase per 8×8 matrix, each lane of the phase giving one row);
//! it is conflict-free when the 8 chunks of every phase sit in 8 different *slots*
//! (chunk position within a line). The layouts below guarantee that for:
//!
//! - `ldmatrix` of 8 consecutive tile rows (a multiple of 8 apart from row 0) at one chunk
//!   column — the A and B fragment loads;
//! - 16-byte `cp.async` writes of consecutive chunks in row-major order — the tile loads;
//! - 4-byte writes of an 8×8 block of accumulators by a warp (row `g`, word `t` of a
//!   chunk) and 16-byte reads of consecutive chunks — the epilogue's staging tile.
//!
//! Two swizzles, chosen by the number of chunks per row (`cpr`) at compile time:
//!
//! - `cpr >= 8` (rows of 128 bytes or more): chunk `c` of row `r` is stored at chunk
//!   `c ^ (r % 8)` of the row (the XOR only touches the low 3 bits of `c`);
//! - `cpr` 2 or 4 (rows of 32 or 64 bytes, several rows per line): the linear chunk index
//!   `L = r * cpr + c` is split into line `L / 8` and slot `L % 8`, and the slot is XORed
//!   with `line % 8`.
//!
//! Its tests check conflict-freedom by simulating the bank slots of every access pattern.

/// Index (in 16-byte chunks from the tile start) where chunk `chunk` of row `row` of a
/// row-major tile with `cpr` chunks per row is stored. `cpr` is a power of two ≥ 2 and
/// `chunk < cpr`. A bijection on `0..rows * cpr`, and the identity on `row * cpr` (the
/// first chunk of rows `8q`, and of every line for `cpr < 8`, stays put).
#[inline(always)]
pub const fn swizzle(row: u32, chunk: u32, cpr: u32) -> u32 {
    if cpr >= 8 {
        row * cpr + (chunk ^ (row & 7))
    } else {
        let l = row * cpr + chunk;
        (l & !7) | ((l & 7) ^ ((l >> 3) & 7))
    }
}

/// Byte offset of [`swizzle`]`(row, chunk, cpr)`.
#[inline(always)]
pub const fn swizzle_bytes(row: u32, chunk: u32, cpr: u32) -> u32 {
    swizzle(row, chunk, cpr) * 16
}

/// The threads of a CTA of `threads` that copy tiles between global and shared memory:
/// the largest power of two not above `threads` (all of a CTA of 128 or 256; 256 of 384),
/// so one copy iteration covers a power-of-two number of rows, a multiple of the
/// swizzle's 8. The others skip the copies.
pub const fn copy_threads(threads: usize) -> usize {
    if threads == 0 { 0 } else { 1 << threads.ilog2() }
}

/// Unrolls `for $i in 0..$n { $body }` at compile time: the body is emitted once per
/// possible value (up to 16), each copy guarded by `if K < $n`, which is a constant after
/// monomorphisation. Register arrays indexed by `$i` therefore see constant indices and
/// stay in registers (a rolled loop would index them dynamically and spill them to local
/// memory). `$n` is a constant expression (it may use const generics) of at most 16.
macro_rules! unroll {
    ($i:ident in 0..$n:expr => $body:block) => {
        unroll!(@expand $i, $n, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@expand $i:ident, $n:expr, $body:block, $($k:literal)*) => {{
        const { assert!($n <= 16, "unroll! supports at most 16 iterations") };
        $(
            #[allow(clippy::reversed_empty_ranges, unused_comparisons)]
            if $k < $n {
                let $i: usize = $k;
                $body
            }
        )*
    }};
}
pub(crate) use unroll;

#[cfg(test)]
mod tests {
    use super::*;

    /// Slot (chunk position in its 128-byte line) of a chunk index.
    fn slot(chunk_index: u32) -> u32 {
        chunk_index % 8
    }

    /// Asserts that the 8 chunk indices of one phase hit 8 different slots.
    fn conflict_free(what: &str, chunks: [u32; 8]) {
        let mut seen = [false; 8];
        for c in chunks {
            assert!(!seen[slot(c) as usize], "{what}: bank conflict among chunks {chunks:?}");
            seen[slot(c) as usize] = true;
        }
    }

    const CPRS: [u32; 5] = [2, 4, 8, 16, 32];

    #[test]
    fn is_a_bijection_per_tile() {
        for cpr in CPRS {
            let rows = 64;
            let mut seen = vec![false; (rows * cpr) as usize];
            for r in 0..rows {
                for c in 0..cpr {
                    let s = swizzle(r, c, cpr) as usize;
                    assert!(!seen[s], "cpr {cpr}: ({r}, {c}) collides");
                    seen[s] = true;
                }
            }
        }
    }

    #[test]
    fn ldmatrix_phases_are_conflict_free() {
        // 8 consecutive rows starting at a multiple of 8, one chunk column.
        for cpr in CPRS {
            for r0 in (0..128).step_by(8) {
                for c in 0..cpr {
                    conflict_free(
                        &format!("ldmatrix cpr {cpr} rows {r0}.. chunk {c}"),
                        core::array::from_fn(|i| swizzle(r0 + i as u32, c, cpr)),
                    );
                }
            }
        }
    }

    #[test]
    fn row_major_chunk_writes_are_conflict_free() {
        // cp.async / epilogue reads: thread t handles linear chunk t (row t / cpr, chunk
        // t % cpr); a phase is 8 consecutive threads.
        for cpr in CPRS {
            for t0 in (0..1024).step_by(8) {
                conflict_free(
                    &format!("row-major cpr {cpr} from chunk {t0}"),
                    core::array::from_fn(|i| {
                        let t = t0 + i as u32;
                        swizzle(t / cpr, t % cpr, cpr)
                    }),
                );
            }
        }
    }

    #[test]
    fn accumulator_word_writes_are_conflict_free() {
        // A warp writes an 8×8 bf16 block: lane (g, t) writes word t of chunk c in row
        // r0 + g: 32 words, which must land in 32 different banks.
        for cpr in [8u32, 16, 32] {
            for r0 in (0..64).step_by(8) {
                for c in 0..cpr {
                    let mut banks = [false; 32];
                    for g in 0..8 {
                        for t in 0..4 {
                            let bank = ((swizzle(r0 + g, c, cpr) * 16 + 4 * t) / 4 % 32) as usize;
                            assert!(!banks[bank], "cpr {cpr}, rows {r0}.., chunk {c}: conflict");
                            banks[bank] = true;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn shifts_by_whole_copy_iterations_keep_the_pattern() {
        // A copy iteration moves `threads` chunks (`threads / cpr` rows) further; the
        // kernels add that shift to a thread's first destination, so the swizzle must
        // commute with it. (`tile_kernel_invariants` in the kernel asserts the row shift
        // is a multiple of 8 when cpr >= 8.)
        for cpr in CPRS {
            for threads in [64u32, 128, 256] {
                let rows = threads / cpr;
                if rows == 0 || (cpr >= 8 && rows % 8 != 0) {
                    continue;
                }
                for r in 0..64 {
                    for c in 0..cpr {
                        assert_eq!(
                            swizzle(r + rows, c, cpr),
                            swizzle(r, c, cpr) + threads,
                            "cpr {cpr} threads {threads} r {r} c {c}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fragment_address_identities() {
        // What `pipeline::Tile::fragments` relies on, for K-contiguous tiles (cpr 4, 8)
        // and N-contiguous ones (cpr >= 8): 16 more rows add a constant, and k-step `ks`
        // (chunks 2ks, 2ks+1) XORs the address of k-step 0 with 32·ks.
        for cpr in [4u32, 8, 16, 32] {
            for r in 0..64 {
                for c in 0..cpr {
                    for i in 0..4 {
                        assert_eq!(
                            swizzle_bytes(r + 16 * i, c, cpr),
                            swizzle_bytes(r, c, cpr) + 16 * i * cpr * 16
                        );
                    }
                }
            }
        }
        for cpr in [4u32, 8] {
            for r in 0..64 {
                for h in 0..2 {
                    for ks in 0..cpr / 2 {
                        assert_eq!(
                            swizzle_bytes(r, 2 * ks + h, cpr),
                            swizzle_bytes(r, h, cpr) ^ (32 * ks),
                            "cpr {cpr} r {r} h {h} ks {ks}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn copy_threads_is_the_largest_power_of_two() {
        assert_eq!([128, 256, 384, 512].map(copy_threads), [128, 256, 256, 512]);
    }

    #[test]
    fn unroll_runs_each_index_once_in_order() {
        let mut v = Vec::new();
        unroll!(i in 0..5 => { v.push(i); });
        assert_eq!(v, [0, 1, 2, 3, 4]);
        let mut n = 0;
        unroll!(i in 0..0 => { n += i + 1; });
        assert_eq!(n, 0);
    }
}
