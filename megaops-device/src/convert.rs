//! Conversions between `f32` and the 16-bit floats `bf16` / `f16` (`half`'s types), and
//! packing of two 16-bit values into the `u32` registers `mma` takes.
//!
//! All float → 16-bit conversions round to nearest, ties to even (PTX `.rn`); the host
//! versions are `half`'s `from_f32`, which round the same way (NaN stays NaN; its payload
//! may differ from the GPU's canonical NaN).
//!
//! # Packing order
//!
//! A packed `u32` holds element `lo` in bits 0..16 and `hi` in bits 16..32: the element
//! with the *smaller* index of an `mma` fragment pair (`a0` of `{a0, a1}`) goes in the low
//! half, which is also the order of two consecutive `bf16` in memory (little-endian).
//! PTX's `cvt.rn.bf16x2.f32 d, a, b` puts `a` in the *upper* half, so
//! `pack_bf16x2(lo, hi)` emits `cvt.rn.bf16x2.f32 d, hi, lo`.

use half::{bf16, f16};

/// `f32` → `bf16`, round to nearest even. Emits `cvt.rn.bf16.f32` (sm_80+).
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> bf16 {
    #[cfg(target_arch = "nvptx64")]
    {
        let h: u16;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.bf16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
        bf16::from_bits(h)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        bf16::from_f32(x)
    }
}

/// `bf16` → `f32` (exact). Emits `cvt.f32.bf16` on sm_90 (earlier targets lack it; there it
/// is the equivalent 16-bit shift).
#[inline(always)]
pub fn bf16_to_f32(x: bf16) -> f32 {
    #[cfg(all(target_arch = "nvptx64", target_feature = "sm_90"))]
    {
        let f: f32;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.f32.bf16 {f}, {h};", f = out(reg32) f, h = in(reg16) x.to_bits(),
                options(pure, nomem, nostack));
        }
        f
    }
    #[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_90")))]
    {
        f32::from_bits((x.to_bits() as u32) << 16)
    }
}

/// `f32` → `f16`, round to nearest even. Emits `cvt.rn.f16.f32`.
#[inline(always)]
pub fn f32_to_f16(x: f32) -> f16 {
    #[cfg(target_arch = "nvptx64")]
    {
        let h: u16;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.f16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x,
                options(pure, nomem, nostack));
        }
        f16::from_bits(h)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        f16::from_f32(x)
    }
}

/// `f16` → `f32` (exact). Emits `cvt.f32.f16`.
#[inline(always)]
pub fn f16_to_f32(x: f16) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let f: f32;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.f32.f16 {f}, {h};", f = out(reg32) f, h = in(reg16) x.to_bits(),
                options(pure, nomem, nostack));
        }
        f
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.to_f32()
    }
}

/// Converts `lo` and `hi` to `bf16` (round to nearest even) and packs them, `lo` in bits
/// 0..16 (see the module docs). Emits `cvt.rn.bf16x2.f32 d, hi, lo;` (sm_80+).
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let d: u32;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.bf16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi,
                lo = in(reg32) lo, options(pure, nomem, nostack));
        }
        d
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        pack_bits(bf16::from_f32(lo).to_bits(), bf16::from_f32(hi).to_bits())
    }
}

/// Converts `lo` and `hi` to `f16` (round to nearest even) and packs them, `lo` in bits
/// 0..16. Emits `cvt.rn.f16x2.f32 d, hi, lo;` (sm_80+).
#[inline(always)]
pub fn pack_f16x2(lo: f32, hi: f32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let d: u32;
        // SAFETY: a register conversion.
        unsafe {
            core::arch::asm!("cvt.rn.f16x2.f32 {d}, {hi}, {lo};", d = out(reg32) d, hi = in(reg32) hi,
                lo = in(reg32) lo, options(pure, nomem, nostack));
        }
        d
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        pack_bits(f16::from_f32(lo).to_bits(), f16::from_f32(hi).to_bits())
    }
}

/// Unpacks a `bf16x2` word into `[lo, hi]` as `f32` (exact).
#[inline(always)]
pub fn unpack_bf16x2(v: u32) -> [f32; 2] {
    [
        bf16_to_f32(bf16::from_bits(v as u16)),
        bf16_to_f32(bf16::from_bits((v >> 16) as u16)),
    ]
}

/// Unpacks an `f16x2` word into `[lo, hi]` as `f32` (exact).
#[inline(always)]
pub fn unpack_f16x2(v: u32) -> [f32; 2] {
    [
        f16_to_f32(f16::from_bits(v as u16)),
        f16_to_f32(f16::from_bits((v >> 16) as u16)),
    ]
}

/// Packs two 16-bit patterns, `lo` in bits 0..16 (no conversion).
#[inline(always)]
pub const fn pack_bits(lo: u16, hi: u16) -> u32 {
    lo as u32 | (hi as u32) << 16
}

/// Packs two `bf16`, `lo` in bits 0..16 (no conversion).
#[inline(always)]
pub fn pack_bf16(lo: bf16, hi: bf16) -> u32 {
    pack_bits(lo.to_bits(), hi.to_bits())
}

/// Packs two `f16`, `lo` in bits 0..16 (no conversion).
#[inline(always)]
pub fn pack_f16(lo: f16, hi: f16) -> u32 {
    pack_bits(lo.to_bits(), hi.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round-to-nearest-even f32 → bf16 written out independently of `half`.
    fn rne_bf16(x: f32) -> u16 {
        let b = x.to_bits();
        let lower = b & 0xffff;
        let mut upper = b >> 16;
        if lower > 0x8000 || (lower == 0x8000 && upper & 1 == 1) {
            upper += 1;
        }
        upper as u16
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let cases = [
            1.0f32,
            -2.5,
            f32::from_bits(0x3f80_8000), // exactly halfway, even below: stays 0x3f80
            f32::from_bits(0x3f81_8000), // exactly halfway, odd below: rounds up to 0x3f82
            f32::from_bits(0x3f80_8001), // just above halfway: rounds up
            f32::from_bits(0x3f80_7fff), // just below halfway: rounds down
            f32::MAX,                    // overflows to infinity under RNE
            1e-40,                       // subnormal
            0.0,
            -0.0,
        ];
        for x in cases {
            assert_eq!(f32_to_bf16(x).to_bits(), rne_bf16(x), "{x:e} ({:#x})", x.to_bits());
        }
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)).to_bits(), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)).to_bits(), 0x3f82);
        assert!(f32_to_bf16(f32::MAX).to_f32().is_infinite());
        assert!(f32_to_bf16(f32::NAN).to_f32().is_nan());
        for bits in (0u32..=0xffff).step_by(7) {
            let x = f32::from_bits(bits << 16 | 0x1234);
            if !x.is_nan() {
                assert_eq!(f32_to_bf16(x).to_bits(), rne_bf16(x));
            }
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)).to_bits(), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up.
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)).to_bits(), 0x3c02);
        assert_eq!(f32_to_f16(65520.0).to_bits(), 0x7c00, "overflows to infinity");
        assert_eq!(f32_to_f16(65519.0).to_bits(), 0x7bff);
        assert_eq!(f16_to_f32(f16::from_bits(0x0001)), 2f32.powi(-24), "smallest subnormal");
    }

    #[test]
    fn widening_is_exact() {
        for bits in (0u16..=0xffff).step_by(3) {
            let b = bf16::from_bits(bits);
            if !b.is_nan() {
                assert_eq!(bf16_to_f32(b), b.to_f32());
                assert_eq!(f32_to_bf16(bf16_to_f32(b)), b);
            }
            let h = f16::from_bits(bits);
            if !h.is_nan() {
                assert_eq!(f16_to_f32(h), h.to_f32());
            }
        }
    }

    #[test]
    fn packing_puts_lo_in_the_low_half() {
        let w = pack_bf16x2(1.0, -2.0);
        assert_eq!(w, 0xc000_3f80);
        assert_eq!(unpack_bf16x2(w), [1.0, -2.0]);
        let w = pack_f16x2(1.0, -2.0);
        assert_eq!(w, 0xc000_3c00);
        assert_eq!(unpack_f16x2(w), [1.0, -2.0]);
        assert_eq!(pack_bf16(bf16::ONE, bf16::NEG_ONE), 0xbf80_3f80);
        assert_eq!(pack_f16(f16::ONE, f16::NEG_ONE), 0xbc00_3c00);
        // Same as two consecutive elements in (little-endian) memory.
        let mem = [bf16::from_f32(3.0), bf16::from_f32(5.0)];
        let word = u32::from_le_bytes([
            mem[0].to_bits() as u8,
            (mem[0].to_bits() >> 8) as u8,
            mem[1].to_bits() as u8,
            (mem[1].to_bits() >> 8) as u8,
        ]);
        assert_eq!(word, pack_bf16x2(3.0, 5.0));
    }
}
