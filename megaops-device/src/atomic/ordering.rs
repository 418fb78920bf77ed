//! Orderings, scopes and state spaces as zero-sized marker types, and the traits through
//! which the typed API ([`super`]) dispatches to one PTX instruction per combination.
//!
//! Which orderings an operation accepts is a trait bound, so an invalid combination (a
//! store with [`Acquire`], a load with [`Release`], a reduction with [`Acquire`]) does not
//! compile:
//!
//! ```compile_fail,E0277
//! use megaops_device::atomic::{self, Acquire, Gpu};
//! let mut x = 0i32;
//! unsafe { atomic::store(&mut x, 1, Acquire, Gpu) }; // a store cannot acquire
//! ```
//!
//! ```compile_fail,E0277
//! use megaops_device::atomic::{self, Release, Gpu};
//! let x = 0i32;
//! unsafe { atomic::load(&x, Release, Gpu) }; // a load cannot release
//! ```
//!
//! ```compile_fail,E0277
//! use megaops_device::atomic::{self, AcqRel, Gpu};
//! let mut x = 0i32;
//! unsafe { atomic::red_add(&mut x, 1, AcqRel, Gpu) }; // `red` has no result to acquire with
//! ```
//!
//! ```compile_fail,E0277
//! use megaops_device::atomic::{self, Relaxed, Gpu};
//! let mut x = 0f32;
//! unsafe { atomic::or(&mut x, 1.0, Relaxed, Gpu) }; // no bitwise ops on floats
//! ```

use core::sync::atomic::Ordering as HostOrdering;

pub(crate) mod sealed {
    /// Seals the marker and value traits: the set of PTX combinations is closed.
    pub trait Sealed {}
}
use sealed::Sealed;

macro_rules! marker {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;
        impl Sealed for $name {}
    };
}

marker!(
    /// `.relaxed`: atomic, but orders nothing else.
    Relaxed
);
marker!(
    /// `.acquire`: later memory accesses of this thread are not performed before this
    /// load (or read-modify-write). Pairs with a [`Release`] of another thread.
    Acquire
);
marker!(
    /// `.release`: earlier memory accesses of this thread are performed before this store
    /// (or read-modify-write, or reduction).
    Release
);
marker!(
    /// `.acq_rel`: both [`Acquire`] and [`Release`] (read-modify-writes and fences).
    AcqRel
);
marker!(
    /// `.sc`: sequentially consistent; fences only (`fence.sc`, what CUDA's
    /// `__threadfence()` is at `.gpu` scope).
    Sc
);
marker!(
    /// `.cta`: the ordering is guaranteed to threads of the same CTA.
    Cta
);
marker!(
    /// `.gpu`: the ordering is guaranteed to all threads of the GPU (other CTAs, other
    /// kernels running at the same time).
    Gpu
);
marker!(
    /// `.sys`: the ordering is guaranteed to the whole system (host threads, peer GPUs).
    Sys
);
marker!(
    /// Generic addressing: the pointer may point to global or shared memory.
    Generic
);
marker!(
    /// The `.global` state space: the pointer must point to global memory (it is converted
    /// with `cvta.to.global.u64`).
    Global
);

/// A memory ordering of an atomic operation.
pub trait Ordering: Sealed + Copy + Default {
    /// The PTX `.sem` qualifier.
    const PTX: &'static str;
    /// The matching `core::sync::atomic` ordering (CPU backend).
    const HOST: HostOrdering;
    /// The load part of [`Self::HOST`], for the failure case of a compare-and-swap.
    const HOST_LOAD: HostOrdering;
}

/// Orderings an atomic load accepts: [`Relaxed`], [`Acquire`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an ordering an atomic load accepts",
    label = "a load takes `Relaxed` or `Acquire`"
)]
pub trait LoadOrdering: Ordering {}

/// Orderings an atomic store accepts: [`Relaxed`], [`Release`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an ordering an atomic store accepts",
    label = "a store takes `Relaxed` or `Release`"
)]
pub trait StoreOrdering: Ordering {}

/// Orderings an atomic read-modify-write (`atom`) accepts: all four.
#[diagnostic::on_unimplemented(message = "`{Self}` is not an atomic ordering")]
pub trait RmwOrdering: Ordering {}

/// Orderings a reduction (`red`, no result) accepts: [`Relaxed`], [`Release`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an ordering a reduction (`red`) accepts",
    label = "a reduction has no result to acquire with: it takes `Relaxed` or `Release`"
)]
pub trait RedOrdering: Ordering {}

/// Orderings a fence accepts: [`AcqRel`] and [`Sc`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an ordering a fence accepts",
    label = "a fence takes `AcqRel` or `Sc`"
)]
pub trait FenceOrdering: Sealed + Copy {
    /// The PTX `.sem` qualifier.
    const PTX: &'static str;
    /// `true` for [`Sc`].
    const SC: bool;
    /// The matching `core::sync::atomic` ordering (CPU backend).
    const HOST: HostOrdering;
}

impl Ordering for Relaxed {
    const PTX: &'static str = "relaxed";
    const HOST: HostOrdering = HostOrdering::Relaxed;
    const HOST_LOAD: HostOrdering = HostOrdering::Relaxed;
}
impl Ordering for Acquire {
    const PTX: &'static str = "acquire";
    const HOST: HostOrdering = HostOrdering::Acquire;
    const HOST_LOAD: HostOrdering = HostOrdering::Acquire;
}
impl Ordering for Release {
    const PTX: &'static str = "release";
    const HOST: HostOrdering = HostOrdering::Release;
    const HOST_LOAD: HostOrdering = HostOrdering::Relaxed;
}
impl Ordering for AcqRel {
    const PTX: &'static str = "acq_rel";
    const HOST: HostOrdering = HostOrdering::AcqRel;
    const HOST_LOAD: HostOrdering = HostOrdering::Acquire;
}
impl LoadOrdering for Relaxed {}
impl LoadOrdering for Acquire {}
impl StoreOrdering for Relaxed {}
impl StoreOrdering for Release {}
impl RmwOrdering for Relaxed {}
impl RmwOrdering for Acquire {}
impl RmwOrdering for Release {}
impl RmwOrdering for AcqRel {}
impl RedOrdering for Relaxed {}
impl RedOrdering for Release {}
impl FenceOrdering for AcqRel {
    const PTX: &'static str = "acq_rel";
    const SC: bool = false;
    const HOST: HostOrdering = HostOrdering::AcqRel;
}
impl FenceOrdering for Sc {
    const PTX: &'static str = "sc";
    const SC: bool = true;
    const HOST: HostOrdering = HostOrdering::SeqCst;
}

/// A memory scope: the set of threads an ordering is guaranteed to.
#[diagnostic::on_unimplemented(message = "`{Self}` is not a memory scope (`Cta`, `Gpu` or `Sys`)")]
pub trait Scope: Sealed + Copy + Default {
    /// The PTX `.scope` qualifier.
    const PTX: &'static str;
    /// 0 for [`Cta`], 1 for [`Gpu`], 2 for [`Sys`] (wider scopes are larger).
    const LEVEL: u8;
}
impl Scope for Cta {
    const PTX: &'static str = "cta";
    const LEVEL: u8 = 0;
}
impl Scope for Gpu {
    const PTX: &'static str = "gpu";
    const LEVEL: u8 = 1;
}
impl Scope for Sys {
    const PTX: &'static str = "sys";
    const LEVEL: u8 = 2;
}

/// A state space the pointer of an atomic operation lives in.
pub trait Space: Sealed + Copy + Default {
    /// The PTX state-space qualifier (`""` for generic addressing).
    const PTX: &'static str;
}
impl Space for Generic {
    const PTX: &'static str = "";
}
impl Space for Global {
    const PTX: &'static str = ".global";
}

/// Operations of `atom` / `red`, as marker types for [`AtomicRmw`] and [`AtomicRed`].
pub mod op {
    use super::Sealed;

    marker!(
        /// `.add` (wrapping for integers).
        Add
    );
    marker!(
        /// `.max`.
        Max
    );
    marker!(
        /// `.min`.
        Min
    );
    marker!(
        /// `.or` (bitwise).
        Or
    );
    marker!(
        /// `.and` (bitwise).
        And
    );
    marker!(
        /// `.xor` (bitwise).
        Xor
    );
    marker!(
        /// `.exch` (swap).
        Exch
    );
}

/// Value types of atomic operations (`i32`, `u32`, `i64`, `u64`, `f32`, `f64`).
pub trait AtomicValue: Sealed + Copy {}
macro_rules! values {
    ($($t:ty),*) => { $( impl Sealed for $t {} impl AtomicValue for $t {} )* };
}
values!(i32, u32, i64, u64, f32, f64);

/// `T` can be loaded atomically with ordering `O` at scope `S` in space `Sp`.
#[diagnostic::on_unimplemented(message = "no atomic load of `{Self}` with these ordering/scope/space")]
pub trait AtomicLoad<O, S, Sp = Generic>: AtomicValue {
    /// Loads `*p`.
    ///
    /// # Safety
    /// `p` is valid for reads and aligned to `size_of::<Self>()`.
    unsafe fn atomic_load(p: *const Self) -> Self;
}

/// `T` can be stored atomically with ordering `O` at scope `S` in space `Sp`.
#[diagnostic::on_unimplemented(message = "no atomic store of `{Self}` with these ordering/scope/space")]
pub trait AtomicStore<O, S, Sp = Generic>: AtomicValue {
    /// Stores `v` to `*p`.
    ///
    /// # Safety
    /// `p` is valid for writes and aligned to `size_of::<Self>()`.
    unsafe fn atomic_store(p: *mut Self, v: Self);
}

/// `T` supports the read-modify-write `Op` (an [`op`] marker) with ordering `O` at scope
/// `S` in space `Sp`.
#[diagnostic::on_unimplemented(message = "`{Self}` has no atomic `{Op}` with these ordering/scope/space")]
pub trait AtomicRmw<Op, O, S, Sp = Generic>: AtomicValue {
    /// Applies `Op` with operand `v` to `*p`; returns the old value.
    ///
    /// # Safety
    /// `p` is valid for reads and writes and aligned to `size_of::<Self>()`.
    unsafe fn atomic_rmw(p: *mut Self, v: Self) -> Self;
}

/// `T` supports compare-and-swap with ordering `O` at scope `S` in space `Sp`.
#[diagnostic::on_unimplemented(message = "no atomic compare-and-swap of `{Self}` with these ordering/scope/space")]
pub trait AtomicCas<O, S, Sp = Generic>: AtomicValue {
    /// Stores `new` if `*p == cmp` (bitwise); returns the old value.
    ///
    /// # Safety
    /// `p` is valid for reads and writes and aligned to `size_of::<Self>()`.
    unsafe fn atomic_cas(p: *mut Self, cmp: Self, new: Self) -> Self;
}

/// `T` supports the reduction `Op` (no result) with ordering `O` at scope `S` in space
/// `Sp`.
#[diagnostic::on_unimplemented(message = "`{Self}` has no reduction `{Op}` with these ordering/scope/space")]
pub trait AtomicRed<Op, O, S, Sp = Generic>: AtomicValue {
    /// Applies `Op` with operand `v` to `*p`.
    ///
    /// # Safety
    /// `p` is valid for reads and writes and aligned to `size_of::<Self>()`.
    unsafe fn atomic_red(p: *mut Self, v: Self);
}
