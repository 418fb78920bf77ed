//! Shared memory: the CTA-local scratchpad.
//!
//! A [`SharedPtr<T>`] points into shared memory. On `nvptx64` it holds the 32-bit
//! *shared-window* address (what `cp.async`, `ldmatrix` and `ld.shared` take); on the host
//! it holds a host pointer into the CTA's shared memory of the virtual GPU.
//!
//! - [`dynamic`] gives the CTA's dynamic shared memory (size chosen at launch), declared
//!   once for every kernel as `.extern .shared .align 16 .b8 megaops_dynamic_smem[];`.
//! - [`static_shared!`](crate::static_shared) declares a static shared variable inside a
//!   kernel body.
//!
//! ```no_run
//! use megaops_device::shared::{self, SharedPtr};
//! # fn body() {
//! let tile: SharedPtr<[f32; 256]> = megaops_device::static_shared!(TILE: [f32; 256]);
//! let i = megaops_device::thread::thread_idx_x() as usize;
//! unsafe { tile.at(i).write(1.0) };
//! let scratch: SharedPtr<u32> = shared::dynamic::<u32>();
//! # }
//! ```

use core::marker::PhantomData;

/// A pointer into shared memory (see the module docs). Copy, 4 bytes on the device.
///
/// Computing addresses is safe; reading and writing through them is not.
#[repr(transparent)]
pub struct SharedPtr<T> {
    #[cfg(target_arch = "nvptx64")]
    addr: u32,
    #[cfg(not(target_arch = "nvptx64"))]
    ptr: *mut T,
    _marker: PhantomData<*mut T>,
}

impl<T> Clone for SharedPtr<T> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedPtr<T> {}
impl<T> PartialEq for SharedPtr<T> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        self.addr() == other.addr()
    }
}
impl<T> Eq for SharedPtr<T> {}
impl<T> core::fmt::Debug for SharedPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SharedPtr({:#x})", self.addr())
    }
}

impl<T> SharedPtr<T> {
    /// A pointer from a 32-bit shared-window address (device only; on the host use
    /// [`SharedPtr::from_ptr`]).
    ///
    /// # Safety
    /// `addr` is an address in the shared window of the calling CTA.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub const unsafe fn from_addr(addr: u32) -> Self {
        SharedPtr {
            addr,
            _marker: PhantomData,
        }
    }

    /// A shared pointer from a generic pointer into shared memory.
    ///
    /// Emits `cvta.to.shared.u64` (and keeps the low 32 bits). Host: wraps `p`.
    ///
    /// # Safety
    /// `p` points into the calling CTA's shared memory.
    #[inline(always)]
    pub unsafe fn from_ptr(p: *mut T) -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            let a: u64;
            // SAFETY: an address conversion; `p` is in the shared window by contract.
            unsafe {
                core::arch::asm!("cvta.to.shared.u64 {a}, {p};", a = out(reg64) a, p = in(reg64) p,
                    options(pure, nomem, nostack));
            }
            SharedPtr {
                addr: a as u32,
                _marker: PhantomData,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            SharedPtr {
                ptr: p,
                _marker: PhantomData,
            }
        }
    }

    /// The 32-bit shared-window address, the operand of `ld.shared`, `cp.async`,
    /// `ldmatrix` in inline PTX. Host: the low 32 bits of the host pointer (useful for
    /// alignment checks only).
    #[inline(always)]
    pub fn addr(self) -> u32 {
        #[cfg(target_arch = "nvptx64")]
        {
            self.addr
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            self.ptr as usize as u32
        }
    }

    /// A generic pointer to the same location, for ordinary loads and stores and for
    /// functions that take `*mut T`.
    ///
    /// Emits `cvt.u64.u32` + `cvta.shared.u64`. Host: the host pointer.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        #[cfg(target_arch = "nvptx64")]
        {
            let p: u64;
            // SAFETY: an address conversion, no memory access.
            unsafe {
                core::arch::asm!(
                    "{{ .reg .u64 sa; cvt.u64.u32 sa, {a}; cvta.shared.u64 {p}, sa; }}",
                    p = out(reg64) p, a = in(reg32) self.addr, options(pure, nomem, nostack),
                );
            }
            p as usize as *mut T
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            self.ptr
        }
    }

    /// The pointer `n` elements further (wrapping address arithmetic, no bounds check).
    #[inline(always)]
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: usize) -> Self {
        self.byte_add(n.wrapping_mul(core::mem::size_of::<T>()))
    }

    /// The pointer `n` bytes further (wrapping address arithmetic, no bounds check).
    #[inline(always)]
    pub fn byte_add(self, n: usize) -> Self {
        #[cfg(target_arch = "nvptx64")]
        {
            SharedPtr {
                addr: self.addr.wrapping_add(n as u32),
                _marker: PhantomData,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            SharedPtr {
                ptr: self.ptr.cast::<u8>().wrapping_add(n).cast(),
                _marker: PhantomData,
            }
        }
    }

    /// The same address as a pointer to `U`.
    #[inline(always)]
    pub fn cast<U>(self) -> SharedPtr<U> {
        #[cfg(target_arch = "nvptx64")]
        {
            SharedPtr {
                addr: self.addr,
                _marker: PhantomData,
            }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            SharedPtr {
                ptr: self.ptr.cast(),
                _marker: PhantomData,
            }
        }
    }

    /// Whether the address is a multiple of `align` (a power of two).
    #[inline(always)]
    pub fn is_aligned_to(self, align: u32) -> bool {
        self.addr() & (align - 1) == 0
    }
}

impl<T: SharedValue> SharedPtr<T> {
    /// Reads the value.
    ///
    /// Emits `ld.shared.{b8|b16|b32|b64|v2.b32|v4.b32}` (per [`SharedValue`]). Host:
    /// `ptr::read`.
    ///
    /// # Safety
    /// The pointer is in bounds of a shared allocation, aligned for `T`, and no other
    /// thread writes the location concurrently (order with a barrier).
    #[inline(always)]
    pub unsafe fn read(self) -> T {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::ld_shared(self.addr) }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: forwarded from the caller.
            unsafe { self.ptr.read() }
        }
    }

    /// Writes `v`.
    ///
    /// Emits `st.shared.{b8|b16|b32|b64|v2.b32|v4.b32}` (per [`SharedValue`]). Host:
    /// `ptr::write`.
    ///
    /// # Safety
    /// As for [`SharedPtr::read`], and no other thread reads or writes the location
    /// concurrently.
    #[inline(always)]
    pub unsafe fn write(self, v: T) {
        #[cfg(target_arch = "nvptx64")]
        {
            // SAFETY: forwarded from the caller.
            unsafe { T::st_shared(self.addr, v) }
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            // SAFETY: forwarded from the caller.
            unsafe { self.ptr.write(v) }
        }
    }
}

impl<T, const N: usize> SharedPtr<[T; N]> {
    /// Pointer to element `i` (no bounds check; reading it out of bounds is UB).
    #[inline(always)]
    pub fn at(self, i: usize) -> SharedPtr<T> {
        self.cast::<T>().add(i)
    }

    /// Pointer to the first element.
    #[inline(always)]
    pub fn as_elems(self) -> SharedPtr<T> {
        self.cast()
    }

    /// Number of elements, `N`.
    #[inline(always)]
    pub const fn len(self) -> usize {
        N
    }

    /// Whether `N == 0`.
    #[inline(always)]
    pub const fn is_empty(self) -> bool {
        N == 0
    }
}

/// Types [`SharedPtr::read`] / [`SharedPtr::write`] move with one `ld.shared` /
/// `st.shared`: 1-, 2-, 4- and 8-byte scalars, `bf16`/`f16`, and `[u32|f32; 2|4]`
/// (`.v2.b32` / `.v4.b32`, which need 8-/16-byte alignment).
pub trait SharedValue: Copy + sealed::Sealed {
    /// `ld.shared` from shared-window address `addr`.
    ///
    /// # Safety
    /// As for [`SharedPtr::read`].
    #[cfg(target_arch = "nvptx64")]
    unsafe fn ld_shared(addr: u32) -> Self;
    /// `st.shared` to shared-window address `addr`.
    ///
    /// # Safety
    /// As for [`SharedPtr::write`].
    #[cfg(target_arch = "nvptx64")]
    unsafe fn st_shared(addr: u32, v: Self);
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! shared_scalar {
    ($($t:ty => $bits:ty, $ptx:literal, $cls:ident);* $(;)?) => {$(
        impl sealed::Sealed for $t {}
        impl SharedValue for $t {
            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn ld_shared(addr: u32) -> Self {
                let v: $bits;
                // SAFETY: the caller guarantees a valid, aligned shared address.
                unsafe {
                    core::arch::asm!(concat!("ld.shared.", $ptx, " {v}, [{a}];"), v = out($cls) v, a = in(reg32) addr,
                        options(readonly, nostack));
                }
                <$t>::from_bits_(v)
            }
            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn st_shared(addr: u32, v: Self) {
                // SAFETY: the caller guarantees a valid, aligned shared address.
                unsafe {
                    core::arch::asm!(concat!("st.shared.", $ptx, " [{a}], {v};"), v = in($cls) v.to_bits_(), a = in(reg32) addr,
                        options(nostack));
                }
            }
        }
    )*};
}

/// Bit casts between a value and the integer the asm moves.
#[cfg(target_arch = "nvptx64")]
trait Bits<B>: Sized {
    fn to_bits_(self) -> B;
    fn from_bits_(b: B) -> Self;
}
#[cfg(target_arch = "nvptx64")]
macro_rules! bits_identity {
    ($($t:ty),*) => {$( impl Bits<$t> for $t {
        #[inline(always)] fn to_bits_(self) -> $t { self }
        #[inline(always)] fn from_bits_(b: $t) -> $t { b }
    } )*};
}
#[cfg(target_arch = "nvptx64")]
bits_identity!(u8, i8, u16, i16, u32, i32, u64, i64);
#[cfg(target_arch = "nvptx64")]
macro_rules! bits_via {
    ($($t:ty => $b:ty),*) => {$( impl Bits<$b> for $t {
        #[inline(always)] fn to_bits_(self) -> $b { self.to_bits() }
        #[inline(always)] fn from_bits_(b: $b) -> $t { <$t>::from_bits(b) }
    } )*};
}
#[cfg(target_arch = "nvptx64")]
bits_via!(f32 => u32, f64 => u64, half::bf16 => u16, half::f16 => u16);

shared_scalar! {
    u8 => u8, "u8", reg16;
    i8 => i8, "s8", reg16;
    u16 => u16, "b16", reg16;
    i16 => i16, "b16", reg16;
    half::bf16 => u16, "b16", reg16;
    half::f16 => u16, "b16", reg16;
    u32 => u32, "b32", reg32;
    i32 => i32, "b32", reg32;
    f32 => u32, "b32", reg32;
    u64 => u64, "b64", reg64;
    i64 => i64, "b64", reg64;
    f64 => u64, "b64", reg64;
}

macro_rules! shared_vector {
    ($($t:ty, $e:ty, $n:literal, $w:ident);* $(;)?) => {$(
        impl sealed::Sealed for $t {}
        impl SharedValue for $t {
            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn ld_shared(addr: u32) -> Self {
                let mut v = [0 as $e; $n];
                // SAFETY: the caller guarantees a valid shared address aligned to the
                // vector size.
                unsafe { vector_asm!(ld, $w, v, addr) };
                v
            }
            #[cfg(target_arch = "nvptx64")]
            #[inline(always)]
            unsafe fn st_shared(addr: u32, v: Self) {
                // SAFETY: as for the load.
                unsafe { vector_asm!(st, $w, v, addr) };
            }
        }
    )*};
}

#[cfg(target_arch = "nvptx64")]
macro_rules! vector_asm {
    (ld, v2, $v:ident, $a:ident) => {
        core::arch::asm!("ld.shared.v2.b32 {{{x}, {y}}}, [{a}];", x = out(reg32) $v[0], y = out(reg32) $v[1],
            a = in(reg32) $a, options(readonly, nostack))
    };
    (st, v2, $v:ident, $a:ident) => {
        core::arch::asm!("st.shared.v2.b32 [{a}], {{{x}, {y}}};", x = in(reg32) $v[0], y = in(reg32) $v[1],
            a = in(reg32) $a, options(nostack))
    };
    (ld, v4, $v:ident, $a:ident) => {
        core::arch::asm!("ld.shared.v4.b32 {{{x}, {y}, {z}, {w}}}, [{a}];",
            x = out(reg32) $v[0], y = out(reg32) $v[1], z = out(reg32) $v[2], w = out(reg32) $v[3],
            a = in(reg32) $a, options(readonly, nostack))
    };
    (st, v4, $v:ident, $a:ident) => {
        core::arch::asm!("st.shared.v4.b32 [{a}], {{{x}, {y}, {z}, {w}}};",
            x = in(reg32) $v[0], y = in(reg32) $v[1], z = in(reg32) $v[2], w = in(reg32) $v[3],
            a = in(reg32) $a, options(nostack))
    };
}

shared_vector! {
    [u32; 2], u32, 2, v2;
    [f32; 2], f32, 2, v2;
    [u32; 4], u32, 4, v4;
    [f32; 4], f32, 4, v4;
}

#[cfg(target_arch = "nvptx64")]
core::arch::global_asm!(".extern .shared .align 16 .b8 megaops_dynamic_smem[];");

/// The calling CTA's dynamic shared memory (its size is chosen at launch; 16-byte
/// aligned), as a pointer to `T`.
///
/// Emits `mov.u32 %r, megaops_dynamic_smem;` (the symbol is declared once for all kernels
/// with `.extern .shared .align 16 .b8 megaops_dynamic_smem[];`). Host: the base from
/// `hooks::dynamic_shared()`.
#[inline(always)]
pub fn dynamic<T>() -> SharedPtr<T> {
    #[cfg(target_arch = "nvptx64")]
    {
        let addr: u32;
        // SAFETY: takes the address of the symbol declared above; no memory access.
        unsafe {
            core::arch::asm!("mov.u32 {a}, megaops_dynamic_smem;", a = out(reg32) addr, options(pure, nomem, nostack));
        }
        SharedPtr {
            addr,
            _marker: PhantomData,
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let (base, _) = crate::cpu::hooks::dynamic_shared();
        SharedPtr {
            ptr: base.cast(),
            _marker: PhantomData,
        }
    }
}

/// Size in bytes of the calling CTA's dynamic shared memory, as given at launch.
///
/// Emits `mov.u32 %r, %dynamic_smem_size;`. Host: from `hooks::dynamic_shared()`.
#[inline(always)]
pub fn dynamic_size_bytes() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let size: u32;
        // SAFETY: reads a special register.
        unsafe {
            core::arch::asm!("mov.u32 {s}, %dynamic_smem_size;", s = out(reg32) size, options(pure, nomem, nostack));
        }
        size
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        crate::cpu::hooks::dynamic_shared().1 as u32
    }
}

/// FNV-1a over `a` then `b`; makes the PTX symbol of a [`static_shared!`] variable unique
/// per module and file (used by the macro, not public API).
#[doc(hidden)]
pub const fn __symbol_hash(a: &str, b: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut i = 0;
    while i < a.len() + b.len() {
        let byte = if i < a.len() { a[i] } else { b[i - a.len()] };
        h = (h ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// Declares a static shared-memory variable inside a kernel (or device function) body and
/// evaluates to a [`SharedPtr`] to it: `static_shared!(NAME: TYPE)` →
/// `SharedPtr<TYPE>`, zero-sized at no cost for threads that do not use it.
///
/// ```no_run
/// # fn body() {
/// let tile = megaops_device::static_shared!(TILE: [f32; 256]); // SharedPtr<[f32; 256]>
/// let first = tile.at(0); // SharedPtr<f32>
/// # }
/// ```
///
/// `TYPE` must be a concrete type (not a generic parameter of the enclosing function):
/// its size and alignment are constants of the declaration.
///
/// On `nvptx64` this declares, with `global_asm!`,
/// `.shared .align A .b8 __megaops_smem_NAME_LINE_COLUMN_HASH[SIZE];` where HASH hashes
/// `module_path!()` and `file!()`, and takes its address with `mov.u32`. The symbol is
/// unique per invocation site; the one exception is a `macro_rules!` macro of yours that
/// expands `static_shared!` twice with the same `NAME` from one invocation (both get the
/// invocation's line and column) — give them different names. A kernel that uses the
/// variable gets its own instance per CTA (`ptxas` adds it to the kernel's static shared
/// memory); the variable is *not* zeroed on the device.
///
/// On the host it calls `hooks::static_shared(key, size, align)` with the address of a
/// per-invocation `static` as `key`; the virtual GPU allocates one zeroed instance per CTA.
///
/// The crate using it needs no unstable feature of its own.
#[macro_export]
#[cfg_attr(target_arch = "nvptx64", allow_internal_unstable(asm_experimental_arch))]
macro_rules! static_shared {
    ($name:ident : $ty:ty) => {{
        #[cfg(target_arch = "nvptx64")]
        let __megaops_smem = {
            ::core::arch::global_asm!(
                concat!(".shared .align {align} .b8 __megaops_smem_", stringify!($name), "_", line!(), "_", column!(),
                    "_{hash}[{size}];"),
                align = const ::core::mem::align_of::<$ty>(),
                size = const ::core::mem::size_of::<$ty>(),
                hash = const $crate::shared::__symbol_hash(module_path!(), file!()),
            );
            let addr: u32;
            // SAFETY: takes the address of the variable declared above; no memory access.
            unsafe {
                ::core::arch::asm!(
                    concat!("mov.u32 {a}, __megaops_smem_", stringify!($name), "_", line!(), "_", column!(), "_{hash};"),
                    a = out(reg32) addr,
                    hash = const $crate::shared::__symbol_hash(module_path!(), file!()),
                    options(pure, nomem, nostack),
                );
                $crate::shared::SharedPtr::<$ty>::from_addr(addr)
            }
        };
        #[cfg(not(target_arch = "nvptx64"))]
        let __megaops_smem = {
            static KEY: ::core::sync::atomic::AtomicU8 = ::core::sync::atomic::AtomicU8::new(0);
            let p = $crate::cpu::hooks::static_shared(
                &KEY as *const ::core::sync::atomic::AtomicU8 as *const u8,
                ::core::mem::size_of::<$ty>(),
                ::core::mem::align_of::<$ty>(),
            );
            // SAFETY: the hook returns this CTA's instance of the variable, in its shared
            // memory.
            unsafe { $crate::shared::SharedPtr::<$ty>::from_ptr(p.cast()) }
        };
        __megaops_smem
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_hash_is_fnv1a_of_the_concatenation() {
        assert_eq!(__symbol_hash("", ""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(__symbol_hash("a", ""), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(__symbol_hash("ab", "c"), __symbol_hash("a", "bc"));
        assert_ne!(__symbol_hash("k::a", "src/a.rs"), __symbol_hash("k::b", "src/b.rs"));
    }

    #[test]
    fn pointer_arithmetic_on_host() {
        let mut buf = [0u32; 8];
        // SAFETY: a host pointer stands in for shared memory on the CPU backend.
        let p = unsafe { SharedPtr::from_ptr(buf.as_mut_ptr()) };
        assert_eq!(p.add(3).as_ptr(), buf.as_mut_ptr().wrapping_add(3));
        assert_eq!(
            p.byte_add(8).cast::<u8>().as_ptr(),
            buf.as_mut_ptr().cast::<u8>().wrapping_add(8)
        );
        // SAFETY: in bounds and aligned.
        unsafe {
            p.add(2).write(7);
            assert_eq!(p.add(2).read(), 7);
            p.cast::<[u32; 4]>().write([1, 2, 3, 4]);
            assert_eq!(buf[..4], [1, 2, 3, 4]);
        }
        let arr: SharedPtr<[u32; 8]> = p.cast();
        assert_eq!(arr.at(5), p.add(5));
        assert_eq!(arr.len(), 8);
    }
}
