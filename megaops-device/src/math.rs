//! Fused multiply-add and the special-function unit (SFU): `fma`, `2^x`, `1/x`, `1/√x`.
//!
//! rustc's NVPTX backend emits every `a * b + c` of plain Rust as `mul.rn.f32` then
//! `add.rn.f32` (no contraction without fast-math flags), and ptxas never fuses
//! operations that carry a rounding modifier; [`fma`] is the one instruction. The SFU
//! functions are one instruction each where a software version takes 10–20.
//!
//! | function | PTX (nvptx64) | host (CPU backend) | accuracy on the GPU |
//! |---|---|---|---|
//! | [`fma`] | `fma.rn.f32` | `f32::mul_add` | exact (one rounding) |
//! | [`exp2_approx`] | `ex2.approx.ftz.f32` | `f32::exp2` | max relative error 2⁻²² |
//! | [`recip_approx`] | `rcp.approx.ftz.f32` | `1.0 / x` | max relative error 2⁻²³ |
//! | [`rsqrt_approx`] | `rsqrt.approx.ftz.f32` | `1.0 / x.sqrt()` | max relative error 2⁻²²·⁹ |
//!
//! `.ftz`: subnormal inputs and results are flushed to sign-preserving zero (the host
//! versions keep them). Special values follow IEEE on both: `2^-∞ = 0`, `2^+∞ = +∞`,
//! `1/0 = +∞`, NaN in, NaN out.

/// `a · b + c` with a single rounding (round to nearest even).
///
/// Emits `fma.rn.f32` (LLVM's `llvm.fma.f32`, which it may still schedule and fold).
/// Host: `f32::mul_add`, the same single rounding.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        core::f32::math::mul_add(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a.mul_add(b, c)
    }
}

/// `2^x` on the SFU. Emits `ex2.approx.ftz.f32` (max relative error 2⁻²² over the whole
/// range; results below 2⁻¹²⁶ flush to 0). Host: `f32::exp2`.
#[inline(always)]
pub fn exp2_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a register computation.
        unsafe {
            core::arch::asm!("ex2.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.exp2()
    }
}

/// `1 / x` on the SFU. Emits `rcp.approx.ftz.f32` (max relative error 2⁻²³ for normal
/// `x`; `1/±0 = ±∞`). Host: `1.0 / x`.
#[inline(always)]
pub fn recip_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a register computation.
        unsafe {
            core::arch::asm!("rcp.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x
    }
}

/// `1 / √x` on the SFU. Emits `rsqrt.approx.ftz.f32` (max relative error 2⁻²²·⁹ for
/// normal positive `x`; NaN for negative `x`). Host: `1.0 / x.sqrt()`.
#[inline(always)]
pub fn rsqrt_approx(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a register computation.
        unsafe {
            core::arch::asm!("rsqrt.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x.sqrt()
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    #[test]
    fn fma_rounds_once() {
        // (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; mul then add loses the 2^-24.
        let a = 1.0 + f32::EPSILON * 2048.0;
        assert_eq!(fma(a, a, -1.0), 2f32.powi(-11) + 2f32.powi(-24));
        assert_eq!(a * a - 1.0, 2f32.powi(-11));
    }

    #[test]
    fn sfu_host_versions_follow_ieee_special_values() {
        assert_eq!(exp2_approx(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp2_approx(3.0), 8.0);
        assert_eq!(recip_approx(4.0), 0.25);
        assert_eq!(recip_approx(0.0), f32::INFINITY);
        assert_eq!(rsqrt_approx(16.0), 0.25);
        assert!(rsqrt_approx(-1.0).is_nan());
    }
}
