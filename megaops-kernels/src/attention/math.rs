//! Scalar math and bf16 packing shared by the kernels of this crate (norms, activations,
//! RoPE, attention). The arithmetic is `megaops_device::math`'s: the special-function
//! unit on the GPU (`ex2.approx.ftz.f32`, `rcp.approx.ftz.f32`, `rsqrt.approx.ftz.f32`)
//! and std's functions on the CPU backend; this file adds the contracts the kernels rely
//! on (range clamps, NaN handling).

use megaops::device::math::{exp2_approx, recip_approx, rsqrt_approx};

pub use megaops::device::math::fma;

/// `log2(e)`: `exp(x) = exp2(x * LOG2_E)`.
pub const LOG2_E: f32 = core::f32::consts::LOG2_E;

/// `2^x`, for any `x` (NaN counts as very negative): results below `2^-125` come back as
/// `2^-125` (a tiny normal number, effectively 0 for softmax weights, and never 0 · ∞ or
/// 0 / 0), `x > 126` as `2^126`. Relative error ≤ 2⁻²² in between. One
/// `ex2.approx.ftz.f32` after the clamp (`max.f32`, `min.f32`).
#[inline(always)]
#[allow(clippy::manual_clamp)] // `clamp` would keep NaN; `max` maps it to -125
pub fn exp2(x: f32) -> f32 {
    // `max` returns the non-NaN operand (PTX `max.f32`), so NaN becomes -125.
    exp2_approx(x.max(-125.0).min(126.0))
}

/// `1 / sqrt(x)` for positive, normal `x` (relative error ≤ 2⁻²²·⁹; `rsqrt.approx`).
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    rsqrt_approx(x)
}

/// `1 / x` for positive `x` in `[2^-125, 2^125]` (relative error ≤ 2⁻²³; `rcp.approx`).
#[inline(always)]
pub fn recip(x: f32) -> f32 {
    recip_approx(x)
}

/// SiLU, `x * sigmoid(x) = x / (1 + e^-x)`, in f32.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    // exp2 saturates at 2^126, so the denominator stays in `recip`'s range.
    x * recip(1.0 + exp2(-x * LOG2_E))
}

/// The two bf16 of a packed word as f32: `[low half, high half]` (exact; two integer ops).
#[inline(always)]
pub fn unpack2(w: u32) -> [f32; 2] {
    [f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000)]
}

/// Eight bf16 (16 bytes, element 0 in the low half of word 0) as f32.
#[inline(always)]
pub fn unpack8(v: [u32; 4]) -> [f32; 8] {
    let [a, b] = unpack2(v[0]);
    let [c, d] = unpack2(v[1]);
    let [e, f] = unpack2(v[2]);
    let [g, h] = unpack2(v[3]);
    [a, b, c, d, e, f, g, h]
}

/// Eight f32 rounded to bf16 (nearest even) and packed as 16 bytes (inverse of
/// [`unpack8`] up to rounding).
#[inline(always)]
pub fn pack8(x: [f32; 8]) -> [u32; 4] {
    use megaops::device::convert::pack_bf16x2;
    [
        pack_bf16x2(x[0], x[1]),
        pack_bf16x2(x[2], x[3]),
        pack_bf16x2(x[4], x[5]),
        pack_bf16x2(x[6], x[7]),
    ]
}

/// A bf16 as f32 (exact).
#[inline(always)]
pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Runs `$body` once for each `$i` in `0..$n` as separate copies of the code, so that
/// register arrays indexed by `$i` stay in registers (LLVM does not always unroll large
/// loop bodies fully, and a run-time index moves an array to local memory).
///
/// `$n` is a constant and `$max` (2, 4, 8 or 16) a literal bound on it: the macro emits
/// `$max` guarded copies, and nested uses multiply, so keep `$max` tight.
///
/// ```ignore
/// unroll!(G, max 8, |g| { acc[g] += x[g]; });
/// ```
macro_rules! unroll {
    ($n:expr, max 2, |$i:ident| $body:block) => {
        $crate::attention::math::unroll!(@each $n, 2, $i, $body, 0 1)
    };
    ($n:expr, max 4, |$i:ident| $body:block) => {
        $crate::attention::math::unroll!(@each $n, 4, $i, $body, 0 1 2 3)
    };
    ($n:expr, max 8, |$i:ident| $body:block) => {
        $crate::attention::math::unroll!(@each $n, 8, $i, $body, 0 1 2 3 4 5 6 7)
    };
    ($n:expr, max 16, |$i:ident| $body:block) => {
        $crate::attention::math::unroll!(@each $n, 16, $i, $body, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@each $n:expr, $max:literal, $i:ident, $body:block, $($k:literal)*) => {{
        const { assert!($n <= $max, "unroll!: more iterations than its bound") };
        $( if $k < $n { #[allow(unused_variables)] let $i: usize = $k; $body } )*
    }};
}
pub(crate) use unroll;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp2_is_accurate_over_the_softmax_range() {
        let mut worst = 0f64;
        for i in 0..=200_000 {
            let x = -120.0 + i as f32 * (126.0 / 200_000.0);
            let want = (x as f64).exp2();
            worst = worst.max((exp2(x) as f64 / want - 1.0).abs());
        }
        assert!(worst < 5e-7, "relative error {worst:e}");
        assert!(exp2(f32::NEG_INFINITY) < 1e-37);
        assert!(exp2(f32::NAN) < 1e-37);
        assert!((exp2(0.0) - 1.0).abs() < 2e-7);
        assert!(exp2(1000.0).is_finite());
    }

    #[test]
    fn rsqrt_and_recip_are_accurate() {
        for i in 0..10_000 {
            let x = 1e-6f32 * 1.0037f32.powi(i);
            let r = rsqrt(x) as f64 * (x as f64).sqrt();
            assert!((r - 1.0).abs() < 2e-7, "rsqrt({x}) off by {r}");
            let q = recip(x) as f64 * x as f64;
            assert!((q - 1.0).abs() < 2e-7, "recip({x}) off by {q}");
        }
    }

    #[test]
    fn silu_matches_f64() {
        for i in -2000..2000 {
            let x = i as f32 * 0.05;
            let want = x as f64 / (1.0 + (-(x as f64)).exp());
            assert!((silu(x) as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "silu({x})");
        }
        assert!(silu(-200.0).abs() < 1e-30);
        assert!((silu(200.0) - 200.0).abs() < 1e-4);
    }

    #[test]
    fn packing_round_trips() {
        let x = [1.0, -2.0, 0.5, 3.25, -0.125, 7.0, 0.0, -1.5];
        assert_eq!(unpack8(pack8(x)), x);
    }
}
