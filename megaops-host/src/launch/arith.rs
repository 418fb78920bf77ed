//! Checked arithmetic for the launcher's evaluation of annotation expressions.

use crate::error::{Error, Result};

/// Checked arithmetic for the launcher's evaluation of annotation expressions: the
/// generated launcher computes every `+ - * / %` and `div_ceil` of a shape, tile size,
/// extent, `block`, `smem` or `check(...)` through it, in the expression's own type (the
/// type the kernel computes it in), and turns `None` (overflow, or division by zero) into
/// an error ([`checked_op`]). Floats never fail.
pub trait CheckedArith: Copy {
    /// `self + rhs`, `None` on overflow.
    fn checked_add(self, rhs: Self) -> Option<Self>;
    /// `self - rhs`, `None` on overflow.
    fn checked_sub(self, rhs: Self) -> Option<Self>;
    /// `self * rhs`, `None` on overflow.
    fn checked_mul(self, rhs: Self) -> Option<Self>;
    /// `self / rhs`, `None` on division by zero or overflow.
    fn checked_div(self, rhs: Self) -> Option<Self>;
    /// `self % rhs`, `None` on division by zero or overflow.
    fn checked_rem(self, rhs: Self) -> Option<Self>;
    /// `self.div_ceil(rhs)`, `None` on division by zero or overflow.
    fn checked_div_ceil(self, rhs: Self) -> Option<Self>;
}

macro_rules! checked_int {
    ($($t:ty),*) => {$(
        impl CheckedArith for $t {
            fn checked_add(self, rhs: Self) -> Option<Self> { <$t>::checked_add(self, rhs) }
            fn checked_sub(self, rhs: Self) -> Option<Self> { <$t>::checked_sub(self, rhs) }
            fn checked_mul(self, rhs: Self) -> Option<Self> { <$t>::checked_mul(self, rhs) }
            fn checked_div(self, rhs: Self) -> Option<Self> { <$t>::checked_div(self, rhs) }
            fn checked_rem(self, rhs: Self) -> Option<Self> { <$t>::checked_rem(self, rhs) }
            fn checked_div_ceil(self, rhs: Self) -> Option<Self> {
                let q = <$t>::checked_div(self, rhs)?;
                // Round towards +infinity: up when there is a remainder and the exact
                // quotient is positive (always, for unsigned types).
                #[allow(unused_comparisons)]
                let up = self % rhs != 0 && ((self < 0) == (rhs < 0));
                if up { q.checked_add(1) } else { Some(q) }
            }
        }
    )*};
}

checked_int!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

macro_rules! checked_float {
    ($($t:ty),*) => {$(
        impl CheckedArith for $t {
            fn checked_add(self, rhs: Self) -> Option<Self> { Some(self + rhs) }
            fn checked_sub(self, rhs: Self) -> Option<Self> { Some(self - rhs) }
            fn checked_mul(self, rhs: Self) -> Option<Self> { Some(self * rhs) }
            fn checked_div(self, rhs: Self) -> Option<Self> { Some(self / rhs) }
            fn checked_rem(self, rhs: Self) -> Option<Self> { Some(self % rhs) }
            fn checked_div_ceil(self, rhs: Self) -> Option<Self> { Some((self / rhs).ceil()) }
        }
    )*};
}

checked_float!(f32, f64);

/// Where a checked operation of an annotation expression is (for [`checked_op`]'s error).
#[derive(Clone, Copy, Debug)]
pub struct OverflowSite {
    /// The kernel.
    pub kernel: &'static str,
    /// The annotation, e.g. "the shape of `x`".
    pub what: &'static str,
    /// The operation, as written, e.g. `m * n`.
    pub expr: &'static str,
    /// A division (`/`, `%`, `div_ceil`): it can also divide by zero.
    pub divides: bool,
}

/// One operation of an annotation expression in the launcher: `op(lhs, rhs)`, or a launch
/// error naming the kernel, the annotation, the operation, its type and `values` (the
/// parameters and constants the operation mentions) if it overflows or divides by zero.
pub fn checked_op<T: CheckedArith>(
    op: fn(T, T) -> Option<T>,
    lhs: T,
    rhs: T,
    site: &OverflowSite,
    values: &[(&str, &dyn std::fmt::Debug)],
) -> Result<T> {
    op(lhs, rhs).ok_or_else(|| {
        let ty = std::any::type_name::<T>();
        let values: Vec<String> = values.iter().map(|(n, v)| format!("{n} = {v:?}")).collect();
        let with = if values.is_empty() {
            String::new()
        } else {
            format!(" with {}", values.join(", "))
        };
        let fails = if site.divides {
            "divides by zero or overflows"
        } else {
            "overflows"
        };
        Error::launch(
            site.kernel,
            format!(
                "{}: `{}` {fails} `{ty}`{with}; the kernel computes it in `{ty}` too, where it would be wrong: use \
                 smaller sizes, or compute it in a wider type (`(m as u64) * (n as u64)`)",
                site.what, site.expr
            ),
        )
    })
}
