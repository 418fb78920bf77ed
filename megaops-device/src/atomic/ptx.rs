//! The raw PTX layer: one inline-asm instruction per (operation, value type, ordering,
//! scope, state space), generated as trait impls of [`super::ordering`].
//!
//! Instructions (`{sem}` ∈ relaxed/acquire/release/acq_rel as the operation allows,
//! `{scope}` ∈ cta/gpu/sys, `{space}` empty for generic addressing or `.global`):
//! - load: `ld.{sem}.{scope}{space}.b32|b64 d, [p];`
//! - store: `st.{sem}.{scope}{space}.b32|b64 [p], v;`
//! - read-modify-write: `atom.{sem}.{scope}{space}.{op}.{type} d, [p], v;`
//! - compare-and-swap: `atom.{sem}.{scope}{space}.cas.b32|b64 d, [p], cmp, new;`
//! - reduction: `red.{sem}.{scope}{space}.{op}.{type} [p], v;`
//!
//! With `.global`, the generic pointer is first converted with `cvta.to.global.u64` (as
//! CUDA does for kernel parameters; `ptxas` folds it away).
//!
//! None of these asm blocks is `pure` or `nomem`: each one is a compiler memory barrier,
//! so plain loads and stores are never moved across an acquire or a release, and a load in
//! a spin loop is executed on every iteration.

use super::ordering::op::*;
use super::ordering::*;
use core::arch::asm;

/// Calls `$cb!($extra, $space, $type, $ordering, $scope)` for every space, type in
/// `$types`, ordering in `$orders` and scope.
macro_rules! product {
    ($cb:ident, $extra:tt, $types:tt, $orders:tt) => {
        product!(@types $cb, $extra, (Generic, "", "", "{p}", ""), $types, $orders);
        product!(@types $cb, $extra,
            (Global, ".global", "{{ .reg .b64 ga; cvta.to.global.u64 ga, {p}; ", "ga", " }}"),
            $types, $orders);
    };
    (@types $cb:ident, $extra:tt, $sp:tt, [$($t:tt),* $(,)?], $orders:tt) => {
        $( product!(@orders $cb, $extra, $sp, $t, $orders); )*
    };
    (@orders $cb:ident, $extra:tt, $sp:tt, $t:tt, [$($o:tt),* $(,)?]) => {
        $(
            $cb!($extra, $sp, $t, $o, (Cta, "cta"));
            $cb!($extra, $sp, $t, $o, (Gpu, "gpu"));
            $cb!($extra, $sp, $t, $o, (Sys, "sys"));
        )*
    };
}

macro_rules! impl_load {
    ((), ($Sp:ident, $sfx:literal, $pre:literal, $addr:literal, $post:literal), ($T:ty, $ty:literal, $cls:ident),
     ($O:ident, $sem:literal), ($S:ident, $scope:literal)) => {
        impl AtomicLoad<$O, $S, $Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_load(p: *const Self) -> Self {
                let v: $T;
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($pre, "ld.", $sem, ".", $scope, $sfx, ".", $ty, " {v}, [", $addr, "];", $post),
                        v = out($cls) v, p = in(reg64) p, options(nostack),
                    );
                }
                v
            }
        }
    };
}

macro_rules! impl_store {
    ((), ($Sp:ident, $sfx:literal, $pre:literal, $addr:literal, $post:literal), ($T:ty, $ty:literal, $cls:ident),
     ($O:ident, $sem:literal), ($S:ident, $scope:literal)) => {
        impl AtomicStore<$O, $S, $Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_store(p: *mut Self, v: Self) {
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($pre, "st.", $sem, ".", $scope, $sfx, ".", $ty, " [", $addr, "], {v};", $post),
                        v = in($cls) v, p = in(reg64) p, options(nostack),
                    );
                }
            }
        }
    };
}

macro_rules! impl_rmw {
    (($Op:ident, $op:literal), ($Sp:ident, $sfx:literal, $pre:literal, $addr:literal, $post:literal),
     ($T:ty, $ty:literal, $cls:ident), ($O:ident, $sem:literal), ($S:ident, $scope:literal)) => {
        impl AtomicRmw<$Op, $O, $S, $Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_rmw(p: *mut Self, v: Self) -> Self {
                let old: $T;
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($pre, "atom.", $sem, ".", $scope, $sfx, ".", $op, ".", $ty, " {d}, [", $addr, "], {v};", $post),
                        d = out($cls) old, p = in(reg64) p, v = in($cls) v, options(nostack),
                    );
                }
                old
            }
        }
    };
}

macro_rules! impl_cas {
    ((), ($Sp:ident, $sfx:literal, $pre:literal, $addr:literal, $post:literal), ($T:ty, $ty:literal, $cls:ident),
     ($O:ident, $sem:literal), ($S:ident, $scope:literal)) => {
        impl AtomicCas<$O, $S, $Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_cas(p: *mut Self, cmp: Self, new: Self) -> Self {
                let old: $T;
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($pre, "atom.", $sem, ".", $scope, $sfx, ".cas.", $ty, " {d}, [", $addr, "], {c}, {n};", $post),
                        d = out($cls) old, p = in(reg64) p, c = in($cls) cmp, n = in($cls) new, options(nostack),
                    );
                }
                old
            }
        }
    };
}

macro_rules! impl_red {
    (($Op:ident, $op:literal), ($Sp:ident, $sfx:literal, $pre:literal, $addr:literal, $post:literal),
     ($T:ty, $ty:literal, $cls:ident), ($O:ident, $sem:literal), ($S:ident, $scope:literal)) => {
        impl AtomicRed<$Op, $O, $S, $Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_red(p: *mut Self, v: Self) {
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                unsafe {
                    asm!(
                        concat!($pre, "red.", $sem, ".", $scope, $sfx, ".", $op, ".", $ty, " [", $addr, "], {v};", $post),
                        p = in(reg64) p, v = in($cls) v, options(nostack),
                    );
                }
            }
        }
    };
}

/// Untyped 32/64-bit words: loads, stores, exchange, compare-and-swap.
macro_rules! bits_types {
    ($m:ident, $extra:tt, $orders:tt) => {
        product!(
            $m,
            $extra,
            [
                (u32, "b32", reg32),
                (i32, "b32", reg32),
                (f32, "b32", reg32),
                (u64, "b64", reg64),
                (i64, "b64", reg64),
                (f64, "b64", reg64),
            ],
            $orders
        );
    };
}
/// `.add`: integers (two's complement, so `i64` uses `.u64`) and floats.
macro_rules! add_types {
    ($m:ident, $extra:tt, $orders:tt) => {
        product!(
            $m,
            $extra,
            [
                (u32, "u32", reg32),
                (i32, "s32", reg32),
                (f32, "f32", reg32),
                (u64, "u64", reg64),
                (i64, "u64", reg64),
                (f64, "f64", reg64),
            ],
            $orders
        );
    };
}
/// `.max` / `.min`: signed and unsigned integers.
macro_rules! minmax_types {
    ($m:ident, $extra:tt, $orders:tt) => {
        product!(
            $m,
            $extra,
            [
                (u32, "u32", reg32),
                (i32, "s32", reg32),
                (u64, "u64", reg64),
                (i64, "s64", reg64),
            ],
            $orders
        );
    };
}
/// `.or` / `.and` / `.xor`: integers as bits.
macro_rules! bitwise_types {
    ($m:ident, $extra:tt, $orders:tt) => {
        product!(
            $m,
            $extra,
            [
                (u32, "b32", reg32),
                (i32, "b32", reg32),
                (u64, "b64", reg64),
                (i64, "b64", reg64),
            ],
            $orders
        );
    };
}

bits_types!(impl_load, (), [(Relaxed, "relaxed"), (Acquire, "acquire")]);
bits_types!(impl_store, (), [(Relaxed, "relaxed"), (Release, "release")]);

macro_rules! rmw_orders {
    ($types:ident, $m:ident, $extra:tt) => {
        $types!(
            $m,
            $extra,
            [
                (Relaxed, "relaxed"),
                (Acquire, "acquire"),
                (Release, "release"),
                (AcqRel, "acq_rel")
            ]
        );
    };
}
rmw_orders!(bits_types, impl_cas, ());
rmw_orders!(bits_types, impl_rmw, (Exch, "exch"));
rmw_orders!(add_types, impl_rmw, (Add, "add"));
rmw_orders!(minmax_types, impl_rmw, (Max, "max"));
rmw_orders!(minmax_types, impl_rmw, (Min, "min"));
rmw_orders!(bitwise_types, impl_rmw, (Or, "or"));
rmw_orders!(bitwise_types, impl_rmw, (And, "and"));
rmw_orders!(bitwise_types, impl_rmw, (Xor, "xor"));

macro_rules! red_orders {
    ($types:ident, $extra:tt) => {
        $types!(impl_red, $extra, [(Relaxed, "relaxed"), (Release, "release")]);
    };
}
red_orders!(add_types, (Add, "add"));
red_orders!(minmax_types, (Max, "max"));
red_orders!(minmax_types, (Min, "min"));
red_orders!(bitwise_types, (Or, "or"));
red_orders!(bitwise_types, (And, "and"));
red_orders!(bitwise_types, (Xor, "xor"));
