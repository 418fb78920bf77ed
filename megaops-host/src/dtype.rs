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
