//! Greedy sampling: the index of the largest logit of each row, computed across CTAs.
//!
//! [`argmax`] cuts each row of `logits [m, vocab]` into chunks of `CHUNK` columns, one CTA
//! per `(row, chunk)`. Each CTA reduces its chunk to one 64-bit key (below) and, when the
//! row has several chunks, publishes it in `partial` and takes a ticket on the row's
//! counter (`fence.acq_rel.gpu`, `atom.acq_rel.gpu.add`); the CTA that takes the last
//! ticket reduces the row's partial keys, writes the token id and resets the counter to 0,
//! so the next launch finds it re-armed. No CTA ever waits for another.
//!
//! # Order (matches `torch.argmax`)
//!
//! Values compare as numbers, `-0.0 == +0.0`; NaN is larger than every number (so a row
//! with a NaN returns its first NaN, as PyTorch does); among equal values the smallest
//! index wins. The key of `(value, index)` is `(ord(value) << 32) | !index`, where `ord`
//! maps f32 to u32 monotonically (sign-magnitude to offset binary, both zeros to
//! `0x8000_0000`, every NaN to `u32::MAX`): the largest key is the answer, whatever order
//! CTAs and threads combine keys in.
//!
//! # PTX features
//!
//! `ld.global.v4.u32` (or 4-byte loads when rows are not 16-byte aligned),
//! `shfl.sync.bfly.b32`, `bar.sync`, `bar.red.or`, `fence.acq_rel.gpu`,
//! `atom.acq_rel.gpu.global.add.u32`, `ld.relaxed.gpu.global.b32`,
//! `st.relaxed.gpu.global.b32`.

use crate::attention::math::unroll;
use megaops::device::atomic::{self, AcqRel, Gpu, Relaxed};
use megaops::device::shared::{self, SharedPtr};
use megaops::device::{fence, memory, thread, warp};

/// Monotonic map of f32 to u32 (see the module docs): `a < b ⇒ ord(a) < ord(b)`, both
/// zeros equal, NaN above +∞.
#[inline(always)]
pub fn ord(v: f32) -> u32 {
    if v.is_nan() {
        return u32::MAX;
    }
    let b = if v == 0.0 { 0 } else { v.to_bits() };
    if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 }
}

/// The sort key of logit `v` at column `index`: larger key = better (larger value, then
/// smaller index).
#[inline(always)]
pub fn key(v: f32, index: u32) -> u64 {
    ((ord(v) as u64) << 32) | (!index) as u64
}

/// The column a key came from.
#[inline(always)]
pub fn key_index(key: u64) -> u32 {
    !(key as u32)
}

/// Greedy sampling: `ids[i] = argmax_v logits[i, v]` (order in the [module docs](self)).
///
/// Layouts: `logits` `[m, vocab]` f32 (e.g. from [`crate::gemv::lm_head`]); `ids` `[m]`
/// u32; `partial`: u32 scratch `[m, vocab.div_ceil(CHUNK), 2]`; `counters`: u32 `[m]`,
/// **zero before the first launch** (each complete launch leaves them zero; after a failed
/// one the device re-zeroes the registered counters of an [`ArgmaxWorkspace`]). Two launches that may
/// run at the same time need separate `partial` and `counters` ([`ArgmaxWorkspace`]).
///
/// Kernel tile `(pid_m, pid_v)`: row `pid_m`, columns `pid_v·CHUNK .. +CHUNK` of `logits`
/// (it waits only for the data tiles of `logits` it reads, so it starts on the first
/// chunks while the LM head still computes the last); every chunk signals `ids[pid_m]`
/// (`split = pid_v`), so a consumer sees the id once all chunks of the row are done.
///
/// Configs: 0: `CHUNK = 8192`, 256 threads (32 values per thread, loads of 8 vectors in
/// flight); 1: `CHUNK = 2048`, 128 threads (many small CTAs).
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = THREADS,
    smem = 8 * (THREADS / 32),
    tiles(pid_m = m, pid_v = vocab.div_ceil(CHUNK)),
    input(logits[m, vocab] = [pid_m: 1, pid_v: CHUNK]),
    output(ids[m] = [pid_m: 1], split = pid_v),
    scratch(partial[m * vocab.div_ceil(CHUNK) * 2]),
    scratch(counters[m]),
)]
#[config(CHUNK = 8192, THREADS = 256)]
#[config(CHUNK = 2048, THREADS = 128)]
pub unsafe fn argmax(logits: *const f32, ids: *mut u32, partial: *mut u32, counters: *mut u32, m: u32, vocab: u32) {
    let chunks = vocab.div_ceil(CHUNK);
    let (v0, v1) = (pid_v * CHUNK, (pid_v * CHUNK + CHUNK).min(vocab));
    let red = shared::dynamic::<u64>();
    let row = logits.wrapping_add(pid_m as usize * vocab as usize);
    // SAFETY: row `pid_m` holds `vocab` readable values (kernel contract); the wait for
    // this tile's data tiles of `logits` precedes this statement.
    let mine = unsafe { scan_chunk::<THREADS>(row, v0, v1, vocab) };
    // SAFETY: every thread of the CTA calls it; `red` holds THREADS / 32 keys.
    let best = unsafe { block_max::<THREADS>(mine, red) };
    let tid = thread::linear_thread_idx();
    if chunks == 1 {
        if tid == 0 {
            // SAFETY: `ids` has `m` entries (kernel contract).
            unsafe { ids.add(pid_m as usize).write(key_index(best)) };
        }
        return;
    }
    // SAFETY: every thread calls it; shapes and zeroed counters as documented.
    unsafe { finish_row::<THREADS>(best, partial, counters, ids, pid_m, pid_v, chunks, red) };
}

/// The best key of the calling thread over columns `[v0, v1)` of `row`: 16-byte loads
/// (8 vectors in flight per round) when the row is 16-byte aligned and `vocab % 4 == 0`,
/// else 4-byte loads. Threads take interleaved vectors so each load instruction of a
/// warp reads 512 contiguous bytes.
///
/// # Safety
/// `row[..vocab]` is readable; `v0 % 4 == 0`.
#[inline(always)]
unsafe fn scan_chunk<const THREADS: u32>(row: *const f32, v0: u32, v1: u32, vocab: u32) -> u64 {
    let tid = thread::linear_thread_idx();
    let mut best = 0u64;
    if vocab.is_multiple_of(4) && (row as usize).is_multiple_of(16) {
        const ROUND: usize = 8;
        let mut base = v0 + 4 * tid;
        while base < v1 {
            let mut vals = [[f32::NAN; 4]; ROUND];
            unroll!(ROUND, max 8, |r| {
                let i = base + 4 * THREADS * r as u32;
                if i < v1 {
                    // SAFETY: i + 4 <= v1 <= vocab (both multiples of 4); 16-byte aligned.
                    vals[r] = unsafe { memory::ld_global_v4_f32(row.add(i as usize)) };
                }
            });
            unroll!(ROUND, max 8, |r| {
                let i = base + 4 * THREADS * r as u32;
                if i < v1 {
                    let v = vals[r];
                    best = best.max(key(v[0], i)).max(key(v[1], i + 1)).max(key(v[2], i + 2)).max(key(v[3], i + 3));
                }
            });
            base += 4 * THREADS * ROUND as u32;
        }
    } else {
        let mut i = v0 + tid;
        while i < v1 {
            // SAFETY: i < v1 <= vocab.
            let v = unsafe { row.add(i as usize).read() };
            best = best.max(key(v, i));
            i += THREADS;
        }
    }
    best
}

/// The largest `v` over the CTA, in every thread (warp butterfly, then one key per warp
/// through shared memory).
///
/// # Safety
/// Called by every thread of a CTA of `THREADS` threads (a multiple of 32); `red` holds
/// `THREADS / 32` keys and nobody else uses it meanwhile.
#[inline(always)]
unsafe fn block_max<const THREADS: u32>(v: u64, red: SharedPtr<u64>) -> u64 {
    let v = warp::warp_reduce(v, u64::max);
    if thread::lane_id() == 0 {
        // SAFETY: one slot per warp.
        unsafe { red.add(thread::warp_id() as usize).write(v) };
    }
    thread::sync_threads();
    let mut best = 0u64;
    let mut w = 0;
    while w < THREADS / 32 {
        // SAFETY: written before the barrier.
        best = best.max(unsafe { red.add(w as usize).read() });
        w += 1;
    }
    // Every thread has read the slots before anyone writes them again.
    thread::sync_threads();
    best
}

/// The cross-CTA step of a row with several chunks: publish this chunk's key, take a
/// ticket; the last CTA of the row reduces all keys, writes the id and re-arms the
/// counter.
///
/// # Safety
/// Called by every thread of the CTA; `partial` holds `2 · chunks` words for row
/// `pid_m`, `counters[pid_m]` counts this launch's tickets (zero before it).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn finish_row<const THREADS: u32>(
    best: u64,
    partial: *mut u32,
    counters: *mut u32,
    ids: *mut u32,
    pid_m: u32,
    pid_v: u32,
    chunks: u32,
    red: SharedPtr<u64>,
) {
    let tid = thread::linear_thread_idx();
    let row_keys = partial.wrapping_add(2 * pid_m as usize * chunks as usize);
    let counter = counters.wrapping_add(pid_m as usize);
    let mut last = false;
    if tid == 0 {
        // SAFETY: slot `pid_v` of the row and the row's counter (caller's contract).
        unsafe {
            let slot = row_keys.add(2 * pid_v as usize);
            slot.write((best >> 32) as u32);
            slot.add(1).write(best as u32);
            // Release the key, then take a ticket (acq_rel: the last one also acquires
            // every other CTA's key).
            fence::fence(AcqRel, Gpu);
            last = atomic::global::add(counter, 1u32, AcqRel, Gpu) == chunks - 1;
        }
    }
    if !thread::sync_threads_or(last) {
        return;
    }
    let mut row_best = 0u64;
    let mut c = tid;
    while c < chunks {
        // SAFETY: slot c < chunks of the row; strong loads read L2, where the released
        // keys are (thread 0 acquired them; the barrier passes that on).
        let (hi, lo) = unsafe {
            let slot = row_keys.add(2 * c as usize);
            (
                atomic::global::load(slot, Relaxed, Gpu),
                atomic::global::load(slot.add(1), Relaxed, Gpu),
            )
        };
        row_best = row_best.max(((hi as u64) << 32) | lo as u64);
        c += THREADS;
    }
    // SAFETY: every thread of the CTA is here (the branch above is uniform).
    let row_best = unsafe { block_max::<THREADS>(row_best, red) };
    if tid == 0 {
        // SAFETY: `ids` has `m > pid_m` entries; every chunk of the row has taken its
        // ticket, and the next launch using the counters is ordered after this one.
        unsafe {
            ids.add(pid_m as usize).write(key_index(row_best));
            atomic::global::store(counter, 0u32, Relaxed, Gpu);
        }
    }
}

#[cfg(not(target_arch = "nvptx64"))]
pub use host::ArgmaxWorkspace;

#[cfg(not(target_arch = "nvptx64"))]
mod host {
    use megaops::{Device, Result, Tensor};

    /// Scratch for [`argmax`](super::argmax): partial keys and zeroed ticket counters,
    /// sized for up to `max_m` rows of `vocab` columns under every config.
    pub struct ArgmaxWorkspace {
        /// Partial keys, `2 · max_m · vocab.div_ceil(smallest CHUNK)` words.
        pub partial: Tensor<u32>,
        /// One zeroed ticket counter per row.
        pub counters: Tensor<u32>,
    }

    impl ArgmaxWorkspace {
        /// Smallest `CHUNK` of the configs (sizes `partial` for all of them).
        pub const MIN_CHUNK: usize = 2048;

        /// Scratch for up to `max_m` rows of `vocab` logits.
        pub fn new(device: &Device, max_m: usize, vocab: usize) -> Result<Self> {
            let words = 2 * max_m.max(1) * vocab.div_ceil(Self::MIN_CHUNK).max(1);
            let counters = Tensor::zeros(device, &[max_m.max(1)])?;
            // Re-zeroed by the device after a failed launch (see `Device::register_tickets`).
            device.register_tickets(&counters);
            Ok(ArgmaxWorkspace {
                partial: Tensor::zeros(device, &[words])?,
                counters,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ord_is_monotonic_and_merges_zeros() {
        let values = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            2.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for w in values.windows(2) {
            if w[0] == w[1] {
                assert_eq!(ord(w[0]), ord(w[1]));
            } else {
                assert!(ord(w[0]) < ord(w[1]), "{} vs {}", w[0], w[1]);
            }
        }
        assert_eq!(ord(-f32::NAN), u32::MAX);
        assert!(ord(f32::NEG_INFINITY) > 0);
    }

    #[test]
    fn keys_prefer_larger_values_then_smaller_indices() {
        assert!(key(1.0, 7) > key(0.5, 0));
        assert!(key(1.0, 3) > key(1.0, 4));
        assert!(key(0.0, 3) > key(-0.0, 4));
        assert!(key(-0.0, 3) > key(0.0, 4));
        assert!(key(f32::NAN, 9) > key(f32::INFINITY, 0));
        assert_eq!(key_index(key(5.0, 123_456)), 123_456);
        assert!(key(f32::NEG_INFINITY, u32::MAX - 1) > 0);
    }
}
