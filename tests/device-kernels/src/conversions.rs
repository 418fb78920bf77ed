//! bf16/f16 ↔ f32 conversions and packing.

use crate::global_id;
use megaops_device::convert::*;

/// Words [`convert`] writes per input.
pub const CONVERT_WORDS: usize = 8;

/// For each `i < n`, with `x = inp[i]` and `y = inp[(i + 1) % n]`, writes to
/// `out[8i..]`: `f32_to_bf16(x)`, `bf16_to_f32` of it, `f32_to_f16(x)`, `f16_to_f32` of
/// it, `pack_bf16x2(x, y)`, `pack_f16x2(x, y)`, `unpack_bf16x2(pack_bf16x2(x, y))[0]` and
/// `unpack_f16x2(pack_f16x2(x, y))[1]` (all as bits).
///
/// Launch: any 1-D grid and block with at least `n` threads. `inp` should not hold NaN
/// (the GPU returns a canonical NaN, `half` keeps the payload).
///
/// # Safety
/// `inp` holds `n` values and `out` `8n` words.
pub unsafe fn convert(inp: *const f32, out: *mut u32, n: u32) {
    let i = global_id();
    if i >= n {
        return;
    }
    // SAFETY: i < n and (i + 1) % n < n.
    let (x, y) = unsafe { (inp.add(i as usize).read(), inp.add(((i + 1) % n) as usize).read()) };
    let words = convert_one(x, y);
    for (k, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(i as usize * CONVERT_WORDS + k).write(w) };
    }
}
entry!(convert(inp: *const f32, out: *mut u32, n: u32));

/// The eight words [`convert`] writes for one pair (the same code on both targets).
#[inline(always)]
pub fn convert_one(x: f32, y: f32) -> [u32; CONVERT_WORDS] {
    let b = f32_to_bf16(x);
    let h = f32_to_f16(x);
    [
        b.to_bits() as u32,
        bf16_to_f32(b).to_bits(),
        h.to_bits() as u32,
        f16_to_f32(h).to_bits(),
        pack_bf16x2(x, y),
        pack_f16x2(x, y),
        unpack_bf16x2(pack_bf16x2(x, y))[0].to_bits(),
        unpack_f16x2(pack_f16x2(x, y))[1].to_bits(),
    ]
}

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// Inputs that exercise rounding: ties to even either way, just above and below ties,
    /// subnormals of both formats, overflow to infinity, infinities, signed zeros.
    pub fn convert_inputs() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            -2.5,
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            f32::from_bits(0x3f80_8001),
            f32::from_bits(0x3f80_7fff),
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            65519.0,
            65520.0,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            2f32.powi(-24),
            3.0 * 2f32.powi(-26),
            f32::MIN_POSITIVE,
        ];
        v.extend((0..44).map(|i| ((i * 7919) as f32).sin() * 10f32.powi(i % 9 - 4)));
        v
    }

    /// What [`convert`] writes for `inp` (the host conversions round like the GPU's).
    pub fn convert(inp: &[f32]) -> Vec<u32> {
        let n = inp.len();
        (0..n).flat_map(|i| convert_one(inp[i], inp[(i + 1) % n])).collect()
    }
}
