//! Element types of device tensors and scalar kernel arguments.

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// An element type a [`crate::Tensor`] can hold: `bf16`, `f16`, `f32`, `i32`, `u32`.
///
/// Sealed: the runtime relies on these being plain bit patterns with no padding, valid
/// for every bit pattern (so downloads of any device memory are sound).
pub trait DType: sealed::Sealed + Copy + Send + Sync + PartialEq + std::fmt::Debug + Default + 'static {
    /// Name as written in Rust (`"bf16"`).
    const NAME: &'static str;
    /// Converts to f64 (for references and error metrics).
    fn to_f64(self) -> f64;
    /// Converts from f64 (rounding to nearest).
    fn from_f64(v: f64) -> Self;
}

macro_rules! float_dtype {
    ($t:ty, $name:literal, $to:expr, $from:expr) => {
        impl sealed::Sealed for $t {}
        impl DType for $t {
            const NAME: &'static str = $name;
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
        }
    };
}

float_dtype!(bf16, "bf16", |x: bf16| x.to_f64(), bf16::from_f64);
float_dtype!(f16, "f16", |x: f16| x.to_f64(), f16::from_f64);
float_dtype!(f32, "f32", |x: f32| x as f64, |v: f64| v as f32);
float_dtype!(i32, "i32", |x: i32| x as f64, |v: f64| v.round() as i32);
float_dtype!(u32, "u32", |x: u32| x as f64, |v: f64| v.round() as u32);

/// A value that can be passed by value as a kernel parameter: its bytes on the host are
/// its bytes on the device.
///
/// # Safety
/// Implementors must be `#[repr(C)]` (or primitive) with the same size, alignment and
/// layout on x86-64 and nvptx64, and contain no host pointers the kernel dereferences.
pub unsafe trait DeviceValue: Copy + Send + Sync + 'static {}

// SAFETY: primitives have identical layout on both targets (usize/isize are 64-bit on
// nvptx64 as on x86-64).
unsafe impl DeviceValue for u8 {}
unsafe impl DeviceValue for i8 {}
unsafe impl DeviceValue for u16 {}
unsafe impl DeviceValue for i16 {}
unsafe impl DeviceValue for u32 {}
unsafe impl DeviceValue for i32 {}
unsafe impl DeviceValue for u64 {}
unsafe impl DeviceValue for i64 {}
unsafe impl DeviceValue for usize {}
unsafe impl DeviceValue for isize {}
unsafe impl DeviceValue for f32 {}
unsafe impl DeviceValue for f64 {}
unsafe impl DeviceValue for bf16 {}
unsafe impl DeviceValue for f16 {}
// SAFETY: #[repr(C)] blocks shared with the device crate; their pointers are device
// addresses.
unsafe impl DeviceValue for megaops_device::sync::KernelCtx {}
unsafe impl DeviceValue for megaops_device::sync::TileSync {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip() {
        assert_eq!(bf16::from_f64(1.5).to_f64(), 1.5);
        assert_eq!(f16::from_f64(-2.25).to_f64(), -2.25);
        assert_eq!(<i32 as DType>::from_f64(2.6), 3);
        assert_eq!(<u32 as DType>::NAME, "u32");
    }
}
