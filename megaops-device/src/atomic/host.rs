//! The CPU-backend layer: `core::sync::atomic` with the ordering that matches the marker.
//!
//! Scopes and state spaces make no difference on the host (one coherent memory). Loads,
//! compare-and-swap and exchange first call [`hooks::yield_now`], so that a spin loop
//! built on them lets the other (cooperatively scheduled) GPU threads run.

use super::ordering::op::*;
use super::ordering::*;
use crate::cpu::hooks;
use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};

macro_rules! host_common {
    ($T:ty, $A:ty, $to:expr, $from:expr) => {
        impl<O: LoadOrdering, S: Scope, Sp: Space> AtomicLoad<O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_load(p: *const Self) -> Self {
                hooks::yield_now();
                // SAFETY: the caller guarantees that `p` is valid and aligned; `$T` and
                // the atomic have the same size and alignment.
                let a = unsafe { <$A>::from_ptr(p as *mut _) };
                $from(a.load(O::HOST))
            }
        }
        impl<O: StoreOrdering, S: Scope, Sp: Space> AtomicStore<O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_store(p: *mut Self, v: Self) {
                // SAFETY: as for the load.
                let a = unsafe { <$A>::from_ptr(p as *mut _) };
                a.store($to(v), O::HOST)
            }
        }
        impl<O: RmwOrdering, S: Scope, Sp: Space> AtomicRmw<Exch, O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_rmw(p: *mut Self, v: Self) -> Self {
                hooks::yield_now();
                // SAFETY: as for the load.
                let a = unsafe { <$A>::from_ptr(p as *mut _) };
                $from(a.swap($to(v), O::HOST))
            }
        }
        impl<O: RmwOrdering, S: Scope, Sp: Space> AtomicCas<O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_cas(p: *mut Self, cmp: Self, new: Self) -> Self {
                hooks::yield_now();
                // SAFETY: as for the load.
                let a = unsafe { <$A>::from_ptr(p as *mut _) };
                match a.compare_exchange($to(cmp), $to(new), O::HOST, O::HOST_LOAD) {
                    Ok(old) | Err(old) => $from(old),
                }
            }
        }
    };
}

macro_rules! host_rmw_red {
    ($T:ty, $A:ty, $Op:ident, $method:ident) => {
        impl<O: RmwOrdering, S: Scope, Sp: Space> AtomicRmw<$Op, O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_rmw(p: *mut Self, v: Self) -> Self {
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                let a = unsafe { <$A>::from_ptr(p) };
                a.$method(v, O::HOST)
            }
        }
        impl<O: RedOrdering, S: Scope, Sp: Space> AtomicRed<$Op, O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_red(p: *mut Self, v: Self) {
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                let a = unsafe { <$A>::from_ptr(p) };
                a.$method(v, O::HOST);
            }
        }
    };
}

macro_rules! host_int {
    ($T:ty, $A:ty) => {
        host_common!($T, $A, |v| v, |v| v);
        host_rmw_red!($T, $A, Add, fetch_add);
        host_rmw_red!($T, $A, Max, fetch_max);
        host_rmw_red!($T, $A, Min, fetch_min);
        host_rmw_red!($T, $A, Or, fetch_or);
        host_rmw_red!($T, $A, And, fetch_and);
        host_rmw_red!($T, $A, Xor, fetch_xor);
    };
}
host_int!(u32, AtomicU32);
host_int!(i32, AtomicI32);
host_int!(u64, AtomicU64);
host_int!(i64, AtomicI64);

macro_rules! host_float {
    ($T:ty, $A:ty) => {
        host_common!($T, $A, <$T>::to_bits, <$T>::from_bits);
        impl<O: RmwOrdering, S: Scope, Sp: Space> AtomicRmw<Add, O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_rmw(p: *mut Self, v: Self) -> Self {
                // SAFETY: the caller guarantees that `p` is valid and aligned.
                let a = unsafe { <$A>::from_ptr(p as *mut _) };
                let add = |old| Some((<$T>::from_bits(old) + v).to_bits());
                match a.fetch_update(O::HOST, O::HOST_LOAD, add) {
                    Ok(old) | Err(old) => <$T>::from_bits(old),
                }
            }
        }
        impl<O: RedOrdering + RmwOrdering, S: Scope, Sp: Space> AtomicRed<Add, O, S, Sp> for $T {
            #[inline(always)]
            unsafe fn atomic_red(p: *mut Self, v: Self) {
                // SAFETY: forwarded from the caller.
                unsafe { <$T as AtomicRmw<Add, O, S, Sp>>::atomic_rmw(p, v) };
            }
        }
    };
}
host_float!(f32, AtomicU32);
host_float!(f64, AtomicU64);
