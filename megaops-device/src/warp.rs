//! Warp-level collectives: shuffles, votes, match, and butterfly reductions.
//!
//! Every function takes the `mask` of participating lanes (bit *i* = lane *i*), as CUDA's
//! `*_sync` intrinsics do; the calling lane must be in it, and every lane in it must call a
//! collective of the same kind with the same mask (on sm_70+ not necessarily at the same
//! instruction). Use [`FULL_MASK`] when the whole warp is converged.
//!
//! On the host each collective is one `hooks::warp_exchange(mask, value)` (every lane of
//! `mask` gets the values of all lanes) followed by the pure functions of [`semantics`],
//! which transcribe the PTX ISA's definitions, including the clamping at the warp (or
//! segment) edge.
//!
//! # Shuffles
//!
//! [`shfl_sync`], [`shfl_up_sync`], [`shfl_down_sync`] and [`shfl_xor_sync`] use the
//! whole warp as one segment (CUDA's default `width = 32`): a source lane outside
//! `0..32` (e.g. `lane - delta < 0` for up) yields the caller's own value. The general
//! form is [`shfl_sync_raw`], which takes the PTX `c` operand (segment mask and clamp
//! value, see [`semantics::shfl_c`] for CUDA's `width`) and also returns whether the
//! source lane was in range. 64-bit values take two 32-bit shuffles.
//!
//! # Convergence
//!
//! The collectives are inline PTX, which this rustc does not mark `convergent` for LLVM.
//! They are never `pure` (so LLVM neither hoists, sinks, merges nor deletes them), but an
//! optimisation could still duplicate one into two branches. For the `.sync` forms with an
//! explicit mask used here that is harmless on sm_70+, where the lanes of a mask may reach
//! the collective at different instructions.

#[cfg(not(target_arch = "nvptx64"))]
use crate::cpu::hooks;
#[cfg(not(target_arch = "nvptx64"))]
use crate::thread::lane_id;

pub use semantics::ShflMode;

/// All 32 lanes.
pub const FULL_MASK: u32 = 0xffff_ffff;

/// Pure transcriptions of the PTX semantics of the warp collectives (used by the host
/// implementation, and unit-tested against the PTX ISA's examples).
pub mod semantics {
    /// The `.mode` of `shfl.sync`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ShflMode {
        /// `.idx`: read lane `b` (within the segment).
        Idx,
        /// `.up`: read lane `lane - b`.
        Up,
        /// `.down`: read lane `lane + b`.
        Down,
        /// `.bfly`: read lane `lane ^ b`.
        Bfly,
    }

    /// The `c` operand CUDA uses for a shuffle of `width` lanes (a power of two ≤ 32):
    /// segment mask `(32 - width) << 8`, clamp value 0 for `.up` and 31 otherwise.
    pub const fn shfl_c(mode: ShflMode, width: u32) -> u32 {
        let seg = (32 - width) << 8;
        match mode {
            ShflMode::Up => seg,
            _ => seg | 0x1f,
        }
    }

    /// The PTX ISA definition of `shfl.sync`: the lane `lane` reads from, and `pval`
    /// (whether that lane was in range; when it is not, the lane reads its own value, so
    /// the returned lane is `lane`).
    ///
    /// ```text
    /// bval = b[4:0]; cval = c[4:0]; segmask = c[12:8]
    /// maxLane = (lane & segmask) | (cval & ~segmask); minLane = lane & segmask
    /// up:   j = lane - bval; pval = j >= maxLane
    /// down: j = lane + bval; pval = j <= maxLane
    /// bfly: j = lane ^ bval; pval = j <= maxLane
    /// idx:  j = minLane | (bval & ~segmask); pval = j <= maxLane
    /// if !pval { j = lane }
    /// ```
    pub const fn shfl_source_lane(mode: ShflMode, lane: u32, b: u32, c: u32) -> (u32, bool) {
        let lane = lane & 31;
        let bval = b & 31;
        let cval = c & 31;
        let segmask = (c >> 8) & 31;
        let max_lane = ((lane & segmask) | (cval & !segmask)) as i32;
        let min_lane = lane & segmask;
        let (j, pval) = match mode {
            ShflMode::Up => {
                let j = lane as i32 - bval as i32;
                (j, j >= max_lane)
            }
            ShflMode::Down => {
                let j = (lane + bval) as i32;
                (j, j <= max_lane)
            }
            ShflMode::Bfly => {
                let j = (lane ^ bval) as i32;
                (j, j <= max_lane)
            }
            ShflMode::Idx => {
                let j = (min_lane | (bval & !segmask)) as i32;
                (j, j <= max_lane)
            }
        };
        if pval { (j as u32, true) } else { (lane, false) }
    }

    /// `vote.sync.ballot.b32`: bit *i* set iff lane *i* is in `mask` and its predicate is
    /// true.
    pub fn ballot(preds: &[bool; 32], mask: u32) -> u32 {
        (0..32)
            .filter(|&i| mask >> i & 1 == 1 && preds[i])
            .fold(0, |acc, i| acc | 1 << i)
    }

    /// `vote.sync.all.pred`: the predicate is true in every lane of `mask`.
    pub fn all(preds: &[bool; 32], mask: u32) -> bool {
        ballot(preds, mask) == mask
    }

    /// `vote.sync.any.pred`: the predicate is true in some lane of `mask`.
    pub fn any(preds: &[bool; 32], mask: u32) -> bool {
        ballot(preds, mask) != 0
    }

    /// `vote.sync.uni.pred`: the predicate has the same value in every lane of `mask`.
    pub fn uni(preds: &[bool; 32], mask: u32) -> bool {
        let b = ballot(preds, mask);
        b == 0 || b == mask
    }

    /// `match.any.sync.b32`: the lanes of `mask` whose value equals `values[lane]`.
    pub fn match_any(values: &[u32; 32], mask: u32, lane: u32) -> u32 {
        let own = values[lane as usize & 31];
        (0..32)
            .filter(|&i| mask >> i & 1 == 1 && values[i] == own)
            .fold(0, |acc, i| acc | 1 << i)
    }

    /// `match.all.sync.b32`: `mask` if every lane of `mask` has the same value, else 0.
    pub fn match_all(values: &[u32; 32], mask: u32, lane: u32) -> u32 {
        if match_any(values, mask, lane) == mask { mask } else { 0 }
    }
}

/// Values a warp shuffle can move: 32-bit types in one `shfl.sync.*.b32`, 64-bit types in
/// two, 16-bit floats zero-extended to one.
pub trait WarpShuffle: Copy + 'static {
    /// Applies `f` to each 32-bit word of the value (device implementation detail).
    #[doc(hidden)]
    fn __map_words(self, f: impl FnMut(u32) -> u32) -> Self;
}

macro_rules! shuffle32 {
    ($($t:ty: $to:expr, $from:expr);* $(;)?) => {$(
        impl WarpShuffle for $t {
            #[inline(always)]
            fn __map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
                $from(f($to(self)))
            }
        }
    )*};
}
shuffle32! {
    u32: |v| v, |w| w;
    i32: |v: i32| v as u32, |w: u32| w as i32;
    f32: f32::to_bits, f32::from_bits;
    half::bf16: |v: half::bf16| v.to_bits() as u32, |w: u32| half::bf16::from_bits(w as u16);
    half::f16: |v: half::f16| v.to_bits() as u32, |w: u32| half::f16::from_bits(w as u16);
}
macro_rules! shuffle64 {
    ($($t:ty: $to:expr, $from:expr);* $(;)?) => {$(
        impl WarpShuffle for $t {
            #[inline(always)]
            fn __map_words(self, mut f: impl FnMut(u32) -> u32) -> Self {
                let bits: u64 = $to(self);
                let lo = f(bits as u32) as u64;
                let hi = f((bits >> 32) as u32) as u64;
                $from(lo | hi << 32)
            }
        }
    )*};
}
shuffle64! {
    u64: |v| v, |w| w;
    i64: |v: i64| v as u64, |w: u64| w as i64;
    f64: f64::to_bits, f64::from_bits;
}

/// General `shfl.sync`: mode `mode`, source operand `b` (lane or offset) and PTX operand
/// `c` (segment mask in bits 12:8, clamp value in bits 4:0; see [`semantics`]). Returns
/// the value read and whether the source lane was in range (if not, the value is the
/// caller's own `v`).
///
/// Emits `shfl.sync.{idx|up|down|bfly}.b32 d|p, a, b, c, mask;` per 32-bit word. Host:
/// `hooks::warp_exchange` + [`semantics::shfl_source_lane`].
#[inline(always)]
pub fn shfl_sync_raw<T: WarpShuffle>(mode: ShflMode, mask: u32, v: T, b: u32, c: u32) -> (T, bool) {
    #[cfg(target_arch = "nvptx64")]
    {
        let mut in_range = 0u32;
        let out = v.__map_words(|w| {
            let (r, p): (u32, u32);
            // SAFETY: a warp collective on registers; the caller keeps the documented
            // contract on `mask`. The mode is a constant after inlining, so only one arm
            // remains.
            unsafe {
                match mode {
                    ShflMode::Idx => core::arch::asm!(
                        "{{ .reg .pred p; shfl.sync.idx.b32 {r}|p, {a}, {b}, {c}, {m}; selp.u32 {q}, 1, 0, p; }}",
                        r = out(reg32) r, q = out(reg32) p, a = in(reg32) w, b = in(reg32) b, c = in(reg32) c,
                        m = in(reg32) mask, options(nomem, nostack)),
                    ShflMode::Up => core::arch::asm!(
                        "{{ .reg .pred p; shfl.sync.up.b32 {r}|p, {a}, {b}, {c}, {m}; selp.u32 {q}, 1, 0, p; }}",
                        r = out(reg32) r, q = out(reg32) p, a = in(reg32) w, b = in(reg32) b, c = in(reg32) c,
                        m = in(reg32) mask, options(nomem, nostack)),
                    ShflMode::Down => core::arch::asm!(
                        "{{ .reg .pred p; shfl.sync.down.b32 {r}|p, {a}, {b}, {c}, {m}; selp.u32 {q}, 1, 0, p; }}",
                        r = out(reg32) r, q = out(reg32) p, a = in(reg32) w, b = in(reg32) b, c = in(reg32) c,
                        m = in(reg32) mask, options(nomem, nostack)),
                    ShflMode::Bfly => core::arch::asm!(
                        "{{ .reg .pred p; shfl.sync.bfly.b32 {r}|p, {a}, {b}, {c}, {m}; selp.u32 {q}, 1, 0, p; }}",
                        r = out(reg32) r, q = out(reg32) p, a = in(reg32) w, b = in(reg32) b, c = in(reg32) c,
                        m = in(reg32) mask, options(nomem, nostack)),
                }
            }
            in_range = p;
            r
        });
        (out, in_range != 0)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let all = hooks::warp_exchange(mask, v);
        let (j, in_range) = semantics::shfl_source_lane(mode, lane_id(), b, c);
        (all[j as usize], in_range)
    }
}

/// The value of lane `src_lane % 32` (CUDA's `__shfl_sync(mask, v, src_lane)`).
///
/// Emits `shfl.sync.idx.b32 d, v, src_lane, 0x1f, mask;`.
#[inline(always)]
pub fn shfl_sync<T: WarpShuffle>(mask: u32, v: T, src_lane: u32) -> T {
    shfl_sync_raw(ShflMode::Idx, mask, v, src_lane, 0x1f).0
}

/// The value of lane `lane - delta`, or the caller's own `v` when that is below lane 0
/// (CUDA's `__shfl_up_sync`).
///
/// Emits `shfl.sync.up.b32 d, v, delta, 0, mask;`.
#[inline(always)]
pub fn shfl_up_sync<T: WarpShuffle>(mask: u32, v: T, delta: u32) -> T {
    shfl_sync_raw(ShflMode::Up, mask, v, delta, 0).0
}

/// The value of lane `lane + delta`, or the caller's own `v` when that is above lane 31
/// (CUDA's `__shfl_down_sync`).
///
/// Emits `shfl.sync.down.b32 d, v, delta, 0x1f, mask;`.
#[inline(always)]
pub fn shfl_down_sync<T: WarpShuffle>(mask: u32, v: T, delta: u32) -> T {
    shfl_sync_raw(ShflMode::Down, mask, v, delta, 0x1f).0
}

/// The value of lane `lane ^ lane_mask` (CUDA's `__shfl_xor_sync`).
///
/// Emits `shfl.sync.bfly.b32 d, v, lane_mask, 0x1f, mask;`.
#[inline(always)]
pub fn shfl_xor_sync<T: WarpShuffle>(mask: u32, v: T, lane_mask: u32) -> T {
    shfl_sync_raw(ShflMode::Bfly, mask, v, lane_mask, 0x1f).0
}

/// Lanes of the warp that are executing this instruction together.
///
/// Emits `activemask.b32 d;`. Host: the lanes of the caller's warp that exist in the CTA
/// (a partial last warp has fewer); the CPU backend does not track divergence or exited
/// lanes here.
#[inline(always)]
pub fn activemask() -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let m: u32;
        // SAFETY: reads the active mask; not `pure`, so it is never moved.
        unsafe { core::arch::asm!("activemask.b32 {m};", m = out(reg32) m, options(nomem, nostack)) }
        m
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let threads = crate::thread::block_dim().volume();
        let first = u64::from(crate::thread::warp_id()) * 32;
        let lanes = threads.saturating_sub(first).min(32) as u32;
        if lanes == 32 { FULL_MASK } else { (1u32 << lanes) - 1 }
    }
}

macro_rules! vote {
    ($(#[$doc:meta])* $name:ident, $mode:literal, $sem:ident) => {
        $(#[$doc])*
        #[doc = concat!("\n\nEmits `vote.sync.", $mode, ".pred q, p, mask;`. Host: `hooks::warp_exchange` + [`semantics::",
            stringify!($sem), "`].")]
        #[inline(always)]
        pub fn $name(mask: u32, pred: bool) -> bool {
            #[cfg(target_arch = "nvptx64")]
            {
                let r: u32;
                // SAFETY: a warp collective on registers.
                unsafe {
                    core::arch::asm!(
                        concat!("{{ .reg .pred p, q; setp.ne.u32 p, {a}, 0; vote.sync.", $mode,
                            ".pred q, p, {m}; selp.u32 {r}, 1, 0, q; }}"),
                        r = out(reg32) r, a = in(reg32) pred as u32, m = in(reg32) mask, options(nomem, nostack),
                    );
                }
                r != 0
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                semantics::$sem(&hooks::warp_exchange(mask, pred), mask)
            }
        }
    };
}

vote!(
    /// Whether `pred` is true in every lane of `mask` (CUDA's `__all_sync`).
    vote_all_sync, "all", all
);
vote!(
    /// Whether `pred` is true in some lane of `mask` (CUDA's `__any_sync`).
    vote_any_sync, "any", any
);
vote!(
    /// Whether `pred` is the same in every lane of `mask` (CUDA's `__uni_sync`).
    vote_uni_sync, "uni", uni
);

/// Bit *i* set iff lane *i* is in `mask` and its `pred` is true (CUDA's `__ballot_sync`).
///
/// Emits `vote.sync.ballot.b32 d, p, mask;`. Host: [`semantics::ballot`].
#[inline(always)]
pub fn ballot_sync(mask: u32, pred: bool) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a warp collective on registers.
        unsafe {
            core::arch::asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {a}, 0; vote.sync.ballot.b32 {r}, p, {m}; }}",
                r = out(reg32) r, a = in(reg32) pred as u32, m = in(reg32) mask, options(nomem, nostack),
            );
        }
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        semantics::ballot(&hooks::warp_exchange(mask, pred), mask)
    }
}

/// The lanes of `mask` whose `v` equals the caller's (CUDA's `__match_any_sync`).
///
/// Emits `match.any.sync.b32 d, v, mask;` (sm_70+). Host: [`semantics::match_any`].
#[inline(always)]
pub fn match_any_sync(mask: u32, v: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a warp collective on registers.
        unsafe {
            core::arch::asm!("match.any.sync.b32 {r}, {v}, {m};", r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask,
                options(nomem, nostack));
        }
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        semantics::match_any(&hooks::warp_exchange(mask, v), mask, lane_id())
    }
}

/// `mask` if every lane of `mask` has the same `v`, else 0 (CUDA's `__match_all_sync`).
///
/// Emits `match.all.sync.b32 d, v, mask;` (sm_70+). Host: [`semantics::match_all`].
#[inline(always)]
pub fn match_all_sync(mask: u32, v: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a warp collective on registers.
        unsafe {
            core::arch::asm!("match.all.sync.b32 {r}, {v}, {m};", r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask,
                options(nomem, nostack));
        }
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        semantics::match_all(&hooks::warp_exchange(mask, v), mask, lane_id())
    }
}

/// Minimum of `v` over the lanes of `mask`, in every lane of it (CUDA's
/// `__reduce_min_sync`).
///
/// Emits `redux.sync.min.u32 d, v, mask;` (sm_80+). Host: `hooks::warp_exchange` and the
/// minimum over the lanes of `mask`.
#[inline(always)]
pub fn reduce_min_sync_u32(mask: u32, v: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let r: u32;
        // SAFETY: a warp collective on registers.
        unsafe {
            core::arch::asm!("redux.sync.min.u32 {r}, {v}, {m};", r = out(reg32) r, v = in(reg32) v, m = in(reg32) mask,
                options(nomem, nostack));
        }
        r
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let values = hooks::warp_exchange(mask, v);
        (0..32)
            .filter(|&i| mask >> i & 1 == 1)
            .map(|i| values[i])
            .min()
            .unwrap_or(v)
    }
}

/// Waits until every lane of `mask` has arrived, and orders their memory accesses (the PTX
/// ISA: "bar.warp.sync also guarantees memory ordering among threads participating in
/// barrier"; CUDA's `__syncwarp(mask)`).
///
/// Emits `bar.warp.sync mask;`. Host: `hooks::warp_exchange(mask, ())`.
#[inline(always)]
pub fn sync_warp(mask: u32) {
    #[cfg(target_arch = "nvptx64")]
    {
        // SAFETY: a warp barrier; `memory` clobber (no `nomem`) so that no access moves
        // across it.
        unsafe { core::arch::asm!("bar.warp.sync {m};", m = in(reg32) mask, options(nostack)) }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let _ = hooks::warp_exchange(mask, ());
    }
}

/// Butterfly reduction over the full warp with `op` (which must be commutative): after
/// steps with lane masks 16, 8, 4, 2, 1, every lane holds `op` over all 32 values — the
/// same bits in every lane, since partners always combine the same two values.
///
/// Emits five `shfl.sync.bfly.b32 d, v, m, 0x1f, 0xffffffff;` (per 32-bit word).
#[inline(always)]
pub fn warp_reduce<T: WarpShuffle>(v: T, op: impl Fn(T, T) -> T) -> T {
    let mut acc = v;
    let mut m = 16;
    while m > 0 {
        acc = op(acc, shfl_xor_sync(FULL_MASK, acc, m));
        m /= 2;
    }
    acc
}

/// Sum of `v` over the full warp, in every lane ([`warp_reduce`] with `+`).
#[inline(always)]
pub fn warp_reduce_sum_f32(v: f32) -> f32 {
    warp_reduce(v, |a, b| a + b)
}

/// Maximum of `v` over the full warp, in every lane ([`warp_reduce`] with `f32::max`,
/// which ignores NaN like PTX `max.f32`).
#[inline(always)]
pub fn warp_reduce_max_f32(v: f32) -> f32 {
    warp_reduce(v, f32::max)
}

/// Wrapping sum of `v` over the full warp, in every lane ([`warp_reduce`] with
/// `wrapping_add`).
#[inline(always)]
pub fn warp_reduce_sum_u32(v: u32) -> u32 {
    warp_reduce(v, u32::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::semantics::*;
    use super::*;

    fn src(mode: ShflMode, lane: u32, b: u32, width: u32) -> (u32, bool) {
        shfl_source_lane(mode, lane, b, shfl_c(mode, width))
    }

    #[test]
    fn full_warp_shuffles_clamp_at_the_edges() {
        for lane in 0..32 {
            assert_eq!(src(ShflMode::Idx, lane, 7, 32), (7, true));
            assert_eq!(
                src(ShflMode::Idx, lane, 39, 32),
                (7, true),
                "source lane is taken mod 32"
            );
            assert_eq!(src(ShflMode::Bfly, lane, 5, 32), (lane ^ 5, true));
            let up = if lane >= 3 { (lane - 3, true) } else { (lane, false) };
            assert_eq!(src(ShflMode::Up, lane, 3, 32), up);
            let down = if lane + 3 <= 31 {
                (lane + 3, true)
            } else {
                (lane, false)
            };
            assert_eq!(src(ShflMode::Down, lane, 3, 32), down);
        }
    }

    #[test]
    fn segmented_shuffles_stay_in_their_segment() {
        // width 16: lanes 0..16 and 16..32 are separate segments.
        assert_eq!(src(ShflMode::Idx, 20, 3, 16), (19, true));
        assert_eq!(src(ShflMode::Idx, 4, 3, 16), (3, true));
        assert_eq!(
            src(ShflMode::Idx, 20, 19, 16),
            (19, true),
            "source lane is taken mod width"
        );
        assert_eq!(src(ShflMode::Up, 16, 1, 16), (16, false));
        assert_eq!(src(ShflMode::Up, 17, 1, 16), (16, true));
        assert_eq!(src(ShflMode::Down, 15, 1, 16), (15, false));
        assert_eq!(src(ShflMode::Down, 14, 1, 16), (15, true));
        assert_eq!(src(ShflMode::Bfly, 3, 4, 8), (7, true));
        assert_eq!(
            src(ShflMode::Bfly, 3, 8, 8),
            (3, false),
            "xor leaving the segment upwards is clamped"
        );
        // width 8, up: lane 8 is the first of its segment.
        assert_eq!(src(ShflMode::Up, 8, 2, 8), (8, false));
        assert_eq!(src(ShflMode::Up, 10, 2, 8), (8, true));
    }

    #[test]
    fn ptx_isa_scan_example_predicates() {
        // `shfl.up.b32 Ry|p, Rx, 0x1, 0x0`: p is false only in lane 0.
        for lane in 0..32 {
            assert_eq!(shfl_source_lane(ShflMode::Up, lane, 1, 0).1, lane >= 1);
            assert_eq!(shfl_source_lane(ShflMode::Down, lane, 0x10, 0x1f).1, lane + 16 <= 31);
        }
    }

    #[test]
    fn votes_and_match_follow_the_mask() {
        let mut preds = [false; 32];
        preds[1] = true;
        preds[3] = true;
        preds[31] = true;
        assert_eq!(ballot(&preds, FULL_MASK), 0x8000_000a);
        assert_eq!(ballot(&preds, 0x0000_00ff), 0x0a, "lanes outside the mask contribute 0");
        assert!(!all(&preds, FULL_MASK));
        assert!(all(&preds, 0x0000_000a));
        assert!(any(&preds, 0x0000_0002));
        assert!(!any(&preds, 0x0000_0005));
        assert!(uni(&preds, 0x0000_0005));
        assert!(!uni(&preds, 0x0000_0006));

        let values: [u32; 32] = core::array::from_fn(|i| (i % 3) as u32);
        let threes = (0..32).filter(|i| i % 3 == 0).fold(0u32, |m, i| m | 1 << i);
        assert_eq!(match_any(&values, FULL_MASK, 0), threes);
        assert_eq!(match_any(&values, FULL_MASK, 9), threes);
        assert_eq!(match_any(&values, 0x0000_000f, 3), 0b1001);
        assert_eq!(match_all(&values, FULL_MASK, 0), 0);
        assert_eq!(match_all(&values, 0x0000_0009, 0), 0x0000_0009);
    }

    #[test]
    fn shuffle_words_round_trip() {
        let id = |w| w;
        assert_eq!((-5i64).__map_words(id), -5);
        assert_eq!(1.5f64.__map_words(id), 1.5);
        assert_eq!(half::bf16::from_f32(2.0).__map_words(id), half::bf16::from_f32(2.0));
        let mut words = Vec::new();
        0x1122_3344_5566_7788u64.__map_words(|w| {
            words.push(w);
            w
        });
        assert_eq!(words, [0x5566_7788, 0x1122_3344], "low word first");
    }
}
