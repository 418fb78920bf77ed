//! Atomics under contention: every thread of every CTA hits the same counters with every
//! operation, ordering, scope and state space.

use crate::global_id;
use megaops_device::atomic::{self, AcqRel, Acquire, Cta, Gpu, Relaxed, Release, Sys};
use megaops_device::static_shared;
use megaops_device::thread::*;

/// The counters [`atomics`] updates. Initialise with [`Counters::INIT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counters {
    /// `add(1, Relaxed, Gpu)` per thread → `n`.
    pub add_u32: u32,
    /// `add(-1, AcqRel, Gpu)` per thread → `-n`.
    pub add_i32: i32,
    /// `add(g, Acquire, Gpu)` per thread → `Σ g`.
    pub add_u64: u64,
    /// `add(-g, Release, Sys)` per thread → `-Σ g`.
    pub add_i64: i64,
    /// `add(1.0, Relaxed, Gpu)` per thread → `n` (exact below 2^24).
    pub add_f32: f32,
    /// Padding (keeps `add_f64` 8-aligned).
    pub _pad0: u32,
    /// `add(0.5, Relaxed, Cta)` per thread → `n / 2`.
    pub add_f64: f64,
    /// `red_add(2, Release, Gpu)` per thread → `2n`.
    pub red_u32: u32,
    /// `red_add(2.0, Relaxed, Gpu)` per thread → `2n`.
    pub red_f32: f32,
    /// `max(g, Relaxed, Gpu)` → `n - 1`.
    pub max_u32: u32,
    /// `min(-g, AcqRel, Gpu)` → `-(n - 1)`.
    pub min_i32: i32,
    /// `red_max(g << 32, Relaxed, Gpu)` → `(n - 1) << 32`.
    pub red_max_i64: i64,
    /// `red_min(g + 5, Release, Gpu)`, initially `u64::MAX` → 5.
    pub red_min_u64: u64,
    /// `or(1 << g % 32)` → `0xffffffff` when `n >= 32`.
    pub or_u32: u32,
    /// `and(!(1 << g % 32))`, initially all ones → 0 when `n >= 32`.
    pub and_u32: u32,
    /// `xor(g)` → XOR of all `g`.
    pub xor_u32: u32,
    /// `red_or(1 << g % 32)` + `red_and(!0)` + `red_xor(0)` → `0xffffffff` when `n >= 32`.
    pub red_bits_u32: u32,
    /// Incremented by a compare-and-swap loop (load + `cas`) per thread → `n`.
    pub cas_u32: u32,
    /// Holds the last `exch(g + 1)`; initially 0.
    pub exch_slot: u32,
    /// `Σ` of the values `exch` returned; `exch_sum + exch_slot = Σ (g + 1)`.
    pub exch_sum: u64,
    /// `global::add(1, Relaxed, Gpu)` per thread → `n`.
    pub global_add_u32: u32,
    /// `global::cas` loop increment (with `global::load`) per thread → `n`.
    pub global_cas_u32: u32,
    /// `global::red_add(1, Release, Gpu)` per thread → `n`.
    pub global_red_u64: u64,
    /// Per CTA: threads `add` 1 to a shared counter (`Cta` scope), then thread 0
    /// `red_add`s it here → `n`.
    pub shared_sum: u32,
    /// Stored by thread 0 of CTA 0 with `store(7, Release, Gpu)` and by the last thread
    /// with `global::store(7, Relaxed, Sys)` → 7.
    pub stored: i32,
}

impl Counters {
    /// The initial values.
    pub const INIT: Counters = Counters {
        add_u32: 0,
        add_i32: 0,
        add_u64: 0,
        add_i64: 0,
        add_f32: 0.0,
        _pad0: 0,
        add_f64: 0.0,
        red_u32: 0,
        red_f32: 0.0,
        max_u32: 0,
        min_i32: 0,
        red_max_i64: i64::MIN,
        red_min_u64: u64::MAX,
        or_u32: 0,
        and_u32: u32::MAX,
        xor_u32: 0,
        red_bits_u32: 0,
        cas_u32: 0,
        exch_slot: 0,
        exch_sum: 0,
        global_add_u32: 0,
        global_cas_u32: 0,
        global_red_u64: 0,
        shared_sum: 0,
        stored: 0,
    };
}

#[cfg(not(target_arch = "nvptx64"))]
impl Counters {
    /// The values after [`atomics`] ran with `n` threads in total.
    pub fn expected(n: u32) -> Counters {
        let sum: u64 = (0..n as u64).sum();
        let xor = (0..n).fold(0, |a, g| a ^ g);
        let bits = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
        Counters {
            add_u32: n,
            add_i32: -(n as i32),
            add_u64: sum,
            add_i64: -(sum as i64),
            add_f32: n as f32,
            _pad0: 0,
            add_f64: n as f64 / 2.0,
            red_u32: 2 * n,
            red_f32: 2.0 * n as f32,
            max_u32: n - 1,
            min_i32: -(n as i32 - 1),
            red_max_i64: ((n - 1) as i64) << 32,
            red_min_u64: 5,
            or_u32: bits,
            and_u32: !bits,
            xor_u32: xor,
            red_bits_u32: bits,
            cas_u32: n,
            exch_slot: 0, // any g + 1: compare `exch_slot + exch_sum` instead
            exch_sum: 0,
            global_add_u32: n,
            global_cas_u32: n,
            global_red_u64: n as u64,
            shared_sum: n,
            stored: 7,
        }
    }

    /// Compares with [`Counters::expected`]; the exchange pair is checked through its
    /// invariant `exch_slot + exch_sum = Σ (g + 1)`.
    pub fn check(&self, n: u32) -> Result<(), String> {
        let mut want = Counters::expected(n);
        let total: u64 = (1..=n as u64).sum();
        if self.exch_slot as u64 + self.exch_sum != total || self.exch_slot == 0 {
            return Err(format!(
                "exch: slot {} + sum {} != {total}",
                self.exch_slot, self.exch_sum
            ));
        }
        want.exch_slot = self.exch_slot;
        want.exch_sum = self.exch_sum;
        if *self == want {
            Ok(())
        } else {
            Err(format!("counters\n  got  {self:?}\n  want {want:?}"))
        }
    }
}

/// Every thread (global id `g`, `n` threads in total) applies each operation of
/// [`Counters`] once.
///
/// Launch: any 1-D grid and block (≥ 32 threads in total for the bit counters to fill,
/// `n < 2^24`). `c`: one [`Counters`], initialised to [`Counters::INIT`].
///
/// # Safety
/// `c` points to a valid [`Counters`] in global memory.
pub unsafe fn atomics(c: *mut Counters) {
    let g = global_id();
    let bit = 1u32 << (g % 32);
    let cta_count = static_shared!(CTA_COUNT: u32);
    if thread_idx_x() == 0 {
        // SAFETY: a valid, aligned shared word.
        unsafe { atomic::store(cta_count.as_ptr(), 0, Relaxed, Cta) };
    }
    sync_threads();
    // SAFETY: every field pointer is valid and aligned; all
    // concurrent accesses to it are atomic.
    unsafe {
        atomic::add(&raw mut (*c).add_u32, 1, Relaxed, Gpu);
        atomic::add(&raw mut (*c).add_i32, -1, AcqRel, Gpu);
        atomic::add(&raw mut (*c).add_u64, g as u64, Acquire, Gpu);
        atomic::add(&raw mut (*c).add_i64, -(g as i64), Release, Sys);
        atomic::add(&raw mut (*c).add_f32, 1.0, Relaxed, Gpu);
        atomic::add(&raw mut (*c).add_f64, 0.5, Relaxed, Cta);
        atomic::red_add(&raw mut (*c).red_u32, 2, Release, Gpu);
        atomic::red_add(&raw mut (*c).red_f32, 2.0, Relaxed, Gpu);
        atomic::max(&raw mut (*c).max_u32, g, Relaxed, Gpu);
        atomic::min(&raw mut (*c).min_i32, -(g as i32), AcqRel, Gpu);
        atomic::red_max(&raw mut (*c).red_max_i64, (g as i64) << 32, Relaxed, Gpu);
        atomic::red_min(&raw mut (*c).red_min_u64, g as u64 + 5, Release, Gpu);
        atomic::or(&raw mut (*c).or_u32, bit, Relaxed, Gpu);
        atomic::and(&raw mut (*c).and_u32, !bit, Relaxed, Gpu);
        atomic::xor(&raw mut (*c).xor_u32, g, Relaxed, Gpu);
        atomic::red_or(&raw mut (*c).red_bits_u32, bit, Relaxed, Gpu);
        atomic::red_and(&raw mut (*c).red_bits_u32, u32::MAX, Relaxed, Gpu);
        atomic::red_xor(&raw mut (*c).red_bits_u32, 0, Release, Gpu);

        let p = &raw mut (*c).cas_u32;
        let mut old = atomic::load(p, Relaxed, Gpu);
        loop {
            let seen = atomic::cas(p, old, old + 1, AcqRel, Gpu);
            if seen == old {
                break;
            }
            old = seen;
        }

        let prev = atomic::exch(&raw mut (*c).exch_slot, g + 1, AcqRel, Gpu);
        atomic::red_add(&raw mut (*c).exch_sum, prev as u64, Relaxed, Gpu);

        atomic::global::add(&raw mut (*c).global_add_u32, 1, Relaxed, Gpu);
        let p = &raw mut (*c).global_cas_u32;
        let mut old = atomic::global::load(p, Acquire, Gpu);
        loop {
            let seen = atomic::global::cas(p, old, old + 1, Relaxed, Gpu);
            if seen == old {
                break;
            }
            old = seen;
        }
        atomic::global::red_add(&raw mut (*c).global_red_u64, 1, Release, Gpu);

        atomic::add(cta_count.as_ptr(), 1, Relaxed, Cta);
    }
    sync_threads();
    if thread_idx_x() == 0 {
        // SAFETY: the shared counter is complete after the barrier; the field is valid.
        unsafe {
            let cta_total = atomic::load(cta_count.as_ptr(), Acquire, Cta);
            atomic::red_add(&raw mut (*c).shared_sum, cta_total, Relaxed, Gpu);
        }
    }
    let n = block_dim().volume() as u32 * grid_dim().volume() as u32;
    if g == 0 {
        // SAFETY: a valid field, written atomically.
        unsafe { atomic::store(&raw mut (*c).stored, 7, Release, Gpu) };
    }
    if g == n - 1 {
        // SAFETY: a valid field, written atomically.
        unsafe { atomic::global::store(&raw mut (*c).stored, 7, Relaxed, Sys) };
    }
}
entry!(atomics(c: *mut Counters));

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    use super::*;

    #[test]
    fn expected_counters_are_consistent() {
        let want = Counters::expected(4096);
        assert_eq!(want.add_u64, 4096 * 4095 / 2);
        assert_eq!(want.xor_u32, 0, "xor of 0..4096 cancels out");
        assert_eq!(Counters::expected(3).or_u32, 0b111);
        assert_eq!(core::mem::offset_of!(Counters, add_f64) % 8, 0);
        let mut got = want;
        got.exch_slot = 17;
        got.exch_sum = (1..=4096u64).sum::<u64>() - 17;
        assert_eq!(got.check(4096), Ok(()));
        got.add_u32 += 1;
        assert!(got.check(4096).is_err());
    }
}
