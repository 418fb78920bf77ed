//! Atomic loads, stores, read-modify-writes and reductions with an explicit memory
//! ordering and scope, following the PTX memory consistency model.
//!
//! Orderings and scopes are zero-sized values, so call sites read like the PTX they emit:
//!
//! ```no_run
//! use megaops_device::atomic::{self, Acquire, Gpu, Release};
//! # let (flag, data): (*mut i32, *mut f32) = (std::ptr::null_mut(), std::ptr::null_mut());
//! // producer: publish data, then signal
//! unsafe {
//!     data.write(1.0);
//!     atomic::red_add(flag, 1, Release, Gpu); // red.release.gpu.add.s32
//! }
//! // consumer: wait for the signal, then read
//! unsafe {
//!     while atomic::load(flag, Acquire, Gpu) < 1 {} // ld.acquire.gpu.b32
//!     let _x = data.read();
//! }
//! ```
//!
//! Three layers, as Rust-CUDA's atomics: [`ptx`](self) (one inline-asm instruction per
//! combination) → [`ordering`] (marker types; which orderings each operation accepts, as
//! trait bounds, so invalid combinations do not compile) → the typed functions here.
//!
//! The functions here use **generic addressing** (the pointer may point to global or
//! shared memory), e.g. `atom.acq_rel.gpu.cas.b32`. The same functions in [`global`] emit
//! the `.global` forms (`red.release.gpu.global.add.s32`,
//! `atom.acq_rel.gpu.global.cas.b32`) for pointers known to point to global memory.
//!
//! Value types: `i32`, `u32`, `i64`, `u64` for everything; `f32` and `f64` for load,
//! store, exchange, compare-and-swap (bitwise) and add.
//!
//! On the host (CPU backend) each function is the `core::sync::atomic` operation with the
//! matching ordering; loads, [`cas`] and [`exch`] also call `hooks::yield_now()` first so
//! that spin loops let the other GPU threads of the virtual GPU run.

#[cfg(not(target_arch = "nvptx64"))]
mod host;
pub mod ordering;
#[cfg(target_arch = "nvptx64")]
mod ptx;

pub use ordering::op;
pub use ordering::{
    AcqRel, Acquire, AtomicCas, AtomicLoad, AtomicRed, AtomicRmw, AtomicStore, AtomicValue, Cta, Generic, Global, Gpu,
    LoadOrdering, Ordering, RedOrdering, Relaxed, Release, RmwOrdering, Scope, Space, StoreOrdering, Sys,
};

/// Defines the typed API for one state space (`$Sp`).
macro_rules! typed_api {
    ($Sp:ident, $space:literal) => {
        /// Atomically loads `*p` with ordering `O` (`Relaxed` or `Acquire`) at scope `S`.
        ///
        #[doc = concat!("Emits `ld.{relaxed|acquire}.{cta|gpu|sys}", $space, ".b32|b64 d, [p];`.")]
        /// Host: `load(O)` after `hooks::yield_now()`.
        ///
        /// # Safety
        /// `p` is valid for reads and aligned to `size_of::<T>()`; concurrent non-atomic
        /// writes to `*p` are a data race.
        #[inline(always)]
        pub unsafe fn load<T, O, S>(p: *const T, _order: O, _scope: S) -> T
        where
            T: AtomicLoad<O, S, $Sp>,
            O: LoadOrdering,
            S: Scope,
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::atomic_load(p) }
        }

        /// Atomically stores `v` to `*p` with ordering `O` (`Relaxed` or `Release`) at
        /// scope `S`.
        ///
        #[doc = concat!("Emits `st.{relaxed|release}.{cta|gpu|sys}", $space, ".b32|b64 [p], v;`.")]
        /// Host: `store(O)`.
        ///
        /// # Safety
        /// `p` is valid for writes and aligned to `size_of::<T>()`.
        #[inline(always)]
        pub unsafe fn store<T, O, S>(p: *mut T, v: T, _order: O, _scope: S)
        where
            T: AtomicStore<O, S, $Sp>,
            O: StoreOrdering,
            S: Scope,
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::atomic_store(p, v) }
        }

        /// Atomically replaces `*p` by `new` if it equals `cmp` (bitwise); returns the old
        /// value (the swap happened iff it equals `cmp`).
        ///
        #[doc = concat!("Emits `atom.{sem}.{scope}", $space, ".cas.b32|b64 d, [p], cmp, new;`.")]
        /// Host: `compare_exchange(O, load part of O)` after `hooks::yield_now()`.
        ///
        /// # Safety
        /// `p` is valid for reads and writes and aligned to `size_of::<T>()`.
        #[inline(always)]
        pub unsafe fn cas<T, O, S>(p: *mut T, cmp: T, new: T, _order: O, _scope: S) -> T
        where
            T: AtomicCas<O, S, $Sp>,
            O: RmwOrdering,
            S: Scope,
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::atomic_cas(p, cmp, new) }
        }

        typed_api!(@rmw $Sp, $space, exch, Exch, "exch", "b32|b64",
            "Atomically replaces `*p` by `v`; returns the old value.", "swap");
        typed_api!(@rmw $Sp, $space, add, Add, "add", "u32|s32|f32|u64|f64",
            "Atomically adds `v` to `*p` (wrapping for integers); returns the old value.", "fetch_add");
        typed_api!(@rmw $Sp, $space, max, Max, "max", "u32|s32|u64|s64",
            "Atomically sets `*p` to `max(*p, v)`; returns the old value.", "fetch_max");
        typed_api!(@rmw $Sp, $space, min, Min, "min", "u32|s32|u64|s64",
            "Atomically sets `*p` to `min(*p, v)`; returns the old value.", "fetch_min");
        typed_api!(@rmw $Sp, $space, or, Or, "or", "b32|b64",
            "Atomically sets `*p` to `*p | v`; returns the old value.", "fetch_or");
        typed_api!(@rmw $Sp, $space, and, And, "and", "b32|b64",
            "Atomically sets `*p` to `*p & v`; returns the old value.", "fetch_and");
        typed_api!(@rmw $Sp, $space, xor, Xor, "xor", "b32|b64",
            "Atomically sets `*p` to `*p ^ v`; returns the old value.", "fetch_xor");

        typed_api!(@red $Sp, $space, red_add, Add, "add", "u32|s32|f32|u64|f64",
            "Atomically adds `v` to `*p` (wrapping for integers), without returning the old value.", "fetch_add");
        typed_api!(@red $Sp, $space, red_max, Max, "max", "u32|s32|u64|s64",
            "Atomically sets `*p` to `max(*p, v)`, without returning the old value.", "fetch_max");
        typed_api!(@red $Sp, $space, red_min, Min, "min", "u32|s32|u64|s64",
            "Atomically sets `*p` to `min(*p, v)`, without returning the old value.", "fetch_min");
        typed_api!(@red $Sp, $space, red_or, Or, "or", "b32|b64",
            "Atomically sets `*p` to `*p | v`, without returning the old value.", "fetch_or");
        typed_api!(@red $Sp, $space, red_and, And, "and", "b32|b64",
            "Atomically sets `*p` to `*p & v`, without returning the old value.", "fetch_and");
        typed_api!(@red $Sp, $space, red_xor, Xor, "xor", "b32|b64",
            "Atomically sets `*p` to `*p ^ v`, without returning the old value.", "fetch_xor");
    };
    (@rmw $Sp:ident, $space:literal, $name:ident, $Op:ident, $op:literal, $types:literal, $what:literal, $host:literal) => {
        #[doc = $what]
        ///
        #[doc = concat!("Emits `atom.{relaxed|acquire|release|acq_rel}.{cta|gpu|sys}", $space, ".", $op,
            ".{", $types, "} d, [p], v;`. Host: `", $host, "(O)`.")]
        ///
        /// # Safety
        /// `p` is valid for reads and writes and aligned to `size_of::<T>()`.
        #[inline(always)]
        pub unsafe fn $name<T, O, S>(p: *mut T, v: T, _order: O, _scope: S) -> T
        where
            T: AtomicRmw<$Op, O, S, $Sp>,
            O: RmwOrdering,
            S: Scope,
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::atomic_rmw(p, v) }
        }
    };
    (@red $Sp:ident, $space:literal, $name:ident, $Op:ident, $op:literal, $types:literal, $what:literal, $host:literal) => {
        #[doc = $what]
        /// A reduction is cheaper than the read-modify-write when the result is not needed
        /// (e.g. signalling a semaphore), and takes only `Relaxed` or `Release`.
        ///
        #[doc = concat!("Emits `red.{relaxed|release}.{cta|gpu|sys}", $space, ".", $op,
            ".{", $types, "} [p], v;`. Host: `", $host, "(O)`.")]
        ///
        /// # Safety
        /// `p` is valid for reads and writes and aligned to `size_of::<T>()`.
        #[inline(always)]
        pub unsafe fn $name<T, O, S>(p: *mut T, v: T, _order: O, _scope: S)
        where
            T: AtomicRed<$Op, O, S, $Sp>,
            O: RedOrdering,
            S: Scope,
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::atomic_red(p, v) }
        }
    };
}

use op::*;
typed_api!(Generic, "");

/// The same operations on pointers into global memory: they emit the `.global` state
/// space (`ld.acquire.gpu.global.b32`, `red.release.gpu.global.add.s32`,
/// `atom.acq_rel.gpu.global.cas.b32`, …) after converting the generic pointer with
/// `cvta.to.global.u64`. Passing a pointer to shared memory is undefined behaviour.
pub mod global {
    use super::op::*;
    use super::ordering::*;
    typed_api!(Global, ".global");
}
