//! `fma.rn.f32` and the special-function unit (`ex2`, `rcp`, `rsqrt` approx).

use crate::global_id;
use megaops_device::math::*;

/// Words [`math`] writes per input.
pub const MATH_WORDS: usize = 4;

/// For each `i < n`, with `x = inp[i]` and `y = inp[(i + 1) % n]`, writes to `out[4i..]`
/// (as f32 bits): `fma(x, y, -(x·y))` (the rounding error of the product, which a separate
/// multiply and add would give as 0), `exp2_approx(x)`, `recip_approx(x)` and
/// `rsqrt_approx(|x|)`.
///
/// Launch: any 1-D grid and block with at least `n` threads.
///
/// # Safety
/// `inp` holds `n` values and `out` `4n` words.
pub unsafe fn math(inp: *const f32, out: *mut u32, n: u32) {
    let i = global_id();
    if i >= n {
        return;
    }
    // SAFETY: i < n and (i + 1) % n < n.
    let (x, y) = unsafe { (inp.add(i as usize).read(), inp.add(((i + 1) % n) as usize).read()) };
    let words = [
        fma(x, y, -(x * y)),
        exp2_approx(x),
        recip_approx(x),
        rsqrt_approx(x.abs()),
    ];
    for (k, w) in words.into_iter().enumerate() {
        // SAFETY: in bounds by the launch contract.
        unsafe { out.add(i as usize * MATH_WORDS + k).write(w.to_bits()) };
    }
}
entry!(math(inp: *const f32, out: *mut u32, n: u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::MATH_WORDS;

    /// Normal values of both signs across the exponent range, where the approximations
    /// are specified (no subnormal inputs or results: the GPU flushes them).
    pub fn math_inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..400)
            .map(|i| {
                let mag = 1.37f32.powi(i % 100 - 50) * (1.0 + 0.013 * i as f32);
                if i % 2 == 0 { mag } else { -mag }
            })
            .collect();
        v.extend([1.0, -1.0, 0.5, 2.0, 3.0, -7.25, 100.0, -100.0, 125.5, -125.5]);
        v
    }

    /// Checks what [`super::math`] wrote for `inp` against f64: the fma term exactly (the
    /// f64 product of two f32 is exact), the SFU functions within a relative error of
    /// 2⁻²¹ (their PTX bounds are 2⁻²² and tighter; results below the normal range: 0, as
    /// the GPU flushes them, or within 2⁻¹⁴⁹). Returns the mismatches.
    pub fn check_math(inp: &[f32], out: &[u32]) -> Vec<String> {
        let n = inp.len();
        let mut bad = Vec::new();
        for i in 0..n {
            let (x, y) = (inp[i], inp[(i + 1) % n]);
            let got: Vec<f32> = (0..MATH_WORDS)
                .map(|k| f32::from_bits(out[i * MATH_WORDS + k]))
                .collect();
            let (xd, yd) = (x as f64, y as f64);
            let fma_want = (xd * yd - (x * y) as f64) as f32;
            if got[0] != fma_want {
                bad.push(format!("fma({x}, {y}, -xy): got {:e}, want {fma_want:e}", got[0]));
            }
            let approx = [
                ("exp2_approx", xd.exp2()),
                ("recip_approx", 1.0 / xd),
                ("rsqrt_approx", 1.0 / xd.abs().sqrt()),
            ];
            for (k, (name, want)) in approx.into_iter().enumerate() {
                let g = got[k + 1] as f64;
                // Results outside the normal f32 range: the GPU gives 0 (ftz) or inf.
                let representable = want.abs() >= f32::MIN_POSITIVE as f64 && want.abs() <= f32::MAX as f64;
                let ok = if representable {
                    (g / want - 1.0).abs() <= 2f64.powi(-21)
                } else {
                    // Subnormal (the GPU flushes it to 0; the host keeps it, to within the
                    // spacing of subnormals, 2^-149) or overflowing.
                    g == 0.0 || g.is_infinite() || (g - want).abs() <= 2f64.powi(-149)
                };
                if !ok {
                    bad.push(format!("{name}({x}): got {g:e}, want {want:e}"));
                }
            }
        }
        bad
    }
}
