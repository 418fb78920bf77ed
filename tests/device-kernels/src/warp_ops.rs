//! Warp shuffles (every mode, segment widths, 64-bit and 16-bit values), votes, ballot,
//! match and butterfly reductions.

use crate::global_id;
use megaops_device::thread::*;
use megaops_device::warp::semantics::shfl_c;
use megaops_device::warp::*;

/// Words [`warp_collectives`] writes per thread.
pub const WARP_WORDS: usize = 32;

/// The value global thread `g` contributes.
pub const fn warp_value(g: u32) -> u32 {
    g * 3 + 1
}

/// Every thread (lane `l`, global id `g`, value `v = 3g + 1`) writes 32 words to
/// `out[32g..]`; see [`reference::warp_collectives`] for what each one must be:
/// shuffles `idx` (lane `7l % 32`, lane `l + 37`), `up 1`, `down 3`, `xor 5`, an `f32`
/// shuffle, a `u64` `down 2`, an `i32` `xor 1`; raw shuffles with segment widths 16 and 8
/// and their in-range predicates; votes `all`/`any`/`uni`, `ballot`, `match.any`/`.all`,
/// `activemask`; reductions (`f32` sum and max, `u32` sum); collectives of half warps
/// with half masks in divergent branches; a `bf16` shuffle.
///
/// Launch: any 1-D grid and block with a multiple of 32 threads. `out`: 32 words per
/// thread.
///
/// # Safety
/// `out` is valid for the writes above.
pub unsafe fn warp_collectives(out: *mut u32) {
    let g = global_id();
    let l = lane_id();
    let v = warp_value(g);
    let mut w = [0u32; WARP_WORDS];
    w[0] = shfl_sync(FULL_MASK, v, (7 * l) % 32);
    w[1] = shfl_sync(FULL_MASK, v, l + 37);
    w[2] = shfl_up_sync(FULL_MASK, v, 1);
    w[3] = shfl_down_sync(FULL_MASK, v, 3);
    w[4] = shfl_xor_sync(FULL_MASK, v, 5);
    w[5] = shfl_sync(FULL_MASK, v as f32 * 0.5, 31 - l).to_bits();
    let wide = shfl_down_sync(FULL_MASK, (v as u64) << 33 | l as u64, 2);
    w[6] = wide as u32;
    w[7] = (wide >> 32) as u32;
    w[8] = shfl_xor_sync(FULL_MASK, -(v as i32), 1) as u32;
    let raw = [
        shfl_sync_raw(ShflMode::Idx, FULL_MASK, v, 3, shfl_c(ShflMode::Idx, 16)),
        shfl_sync_raw(ShflMode::Up, FULL_MASK, v, 2, shfl_c(ShflMode::Up, 8)),
        shfl_sync_raw(ShflMode::Down, FULL_MASK, v, 4, shfl_c(ShflMode::Down, 16)),
        shfl_sync_raw(ShflMode::Bfly, FULL_MASK, v, 8, shfl_c(ShflMode::Bfly, 8)),
    ];
    for (i, (value, in_range)) in raw.into_iter().enumerate() {
        w[9 + 2 * i] = value;
        w[10 + 2 * i] = in_range as u32;
    }
    w[17] = vote_all_sync(FULL_MASK, l < 32) as u32;
    w[18] = vote_all_sync(FULL_MASK, l != 7) as u32;
    w[19] = vote_any_sync(FULL_MASK, l == 31) as u32;
    w[20] = vote_uni_sync(FULL_MASK, l.is_multiple_of(2)) as u32;
    w[21] = ballot_sync(FULL_MASK, l.is_multiple_of(3));
    w[22] = match_any_sync(FULL_MASK, l % 5);
    w[23] = match_all_sync(FULL_MASK, warp_id());
    w[24] = match_all_sync(FULL_MASK, l / 16);
    w[25] = activemask();
    w[26] = warp_reduce_sum_f32(l as f32 + 0.25).to_bits();
    w[27] = warp_reduce_max_f32(((l * 13) % 32) as f32).to_bits();
    w[28] = warp_reduce_sum_u32(v);
    w[29] = if l < 16 {
        ballot_sync(0x0000_ffff, l.is_multiple_of(2))
    } else {
        shfl_sync(0xffff_0000, v, 16)
    };
    w[30] = shfl_xor_sync(FULL_MASK, half::bf16::from_f32(l as f32), 2).to_bits() as u32;
    w[31] = vote_uni_sync(FULL_MASK, true) as u32;
    for (i, x) in w.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(g as usize * WARP_WORDS + i).write(x) };
    }
}
entry!(warp_collectives(out: *mut u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;
    use megaops_device::warp::semantics::*;

    /// What [`warp_collectives`] writes for `threads` threads in total.
    pub fn warp_collectives(threads: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for warp in 0..threads / 32 {
            let g0 = warp * 32;
            let val = |lane: u32| warp_value(g0 + lane);
            for l in 0..32 {
                let from = |mode, b, c| shfl_source_lane(mode, l, b, c);
                let sh = |mode, b, c| val(from(mode, b, c).0);
                let mut w = [0u32; WARP_WORDS];
                w[0] = val((7 * l) % 32);
                w[1] = val((l + 37) % 32);
                w[2] = sh(ShflMode::Up, 1, 0);
                w[3] = sh(ShflMode::Down, 3, 0x1f);
                w[4] = val(l ^ 5);
                w[5] = (val(31 - l) as f32 * 0.5).to_bits();
                let j = from(ShflMode::Down, 2, 0x1f).0;
                let wide = (val(j) as u64) << 33 | j as u64;
                w[6] = wide as u32;
                w[7] = (wide >> 32) as u32;
                w[8] = -(val(l ^ 1) as i32) as u32;
                let raw = [
                    (ShflMode::Idx, 3, shfl_c(ShflMode::Idx, 16)),
                    (ShflMode::Up, 2, shfl_c(ShflMode::Up, 8)),
                    (ShflMode::Down, 4, shfl_c(ShflMode::Down, 16)),
                    (ShflMode::Bfly, 8, shfl_c(ShflMode::Bfly, 8)),
                ];
                for (i, (mode, b, c)) in raw.into_iter().enumerate() {
                    let (j, in_range) = from(mode, b, c);
                    w[9 + 2 * i] = val(j);
                    w[10 + 2 * i] = in_range as u32;
                }
                let preds = |f: &dyn Fn(u32) -> bool| core::array::from_fn::<bool, 32, _>(|i| f(i as u32));
                w[17] = all(&preds(&|_| true), FULL_MASK) as u32;
                w[18] = all(&preds(&|i| i != 7), FULL_MASK) as u32;
                w[19] = any(&preds(&|i| i == 31), FULL_MASK) as u32;
                w[20] = uni(&preds(&|i| i % 2 == 0), FULL_MASK) as u32;
                w[21] = ballot(&preds(&|i| i % 3 == 0), FULL_MASK);
                w[22] = match_any(&core::array::from_fn(|i| i as u32 % 5), FULL_MASK, l);
                // Every lane of a warp has the same `warp_id`.
                w[23] = FULL_MASK;
                w[24] = match_all(&core::array::from_fn(|i| i as u32 / 16), FULL_MASK, l);
                w[25] = FULL_MASK;
                w[26] = (0..32).map(|i| i as f32 + 0.25).sum::<f32>().to_bits();
                w[27] = 31f32.to_bits();
                w[28] = (0..32).map(val).fold(0u32, u32::wrapping_add);
                w[29] = if l < 16 { 0x5555 } else { val(16) };
                w[30] = half::bf16::from_f32((l ^ 2) as f32).to_bits() as u32;
                w[31] = 1;
                out.extend(w);
            }
        }
        out
    }
}
