//! Warp collectives: the exchange every shuffle, vote, `match`, `ldmatrix` and `mma.sync`
//! is built on.
//!
//! Lanes that name the same `mask` meet in one pending collective; each deposits its
//! value; the lane that completes the mask publishes the 32 values to all of them at once.
//! Disjoint or overlapping masks may be pending side by side (divergent lanes). A mask
//! that names a lane that has exited (or that does not exist in a partial last warp) can
//! never complete: that is reported as an error instead of waiting forever.

use std::any::TypeId;
use std::mem::MaybeUninit;
use std::rc::Rc;

/// Lanes per warp.
pub(crate) const WARP_SIZE: u32 = 32;

/// Largest value one lane may contribute, in bytes.
pub(crate) const MAX_VALUE_SIZE: usize = 64;

struct Pending {
    warp: u32,
    mask: u32,
    arrived: u32,
    size: usize,
    type_id: TypeId,
    /// `WARP_SIZE * size` bytes; lane `l`'s value at `l * size`. `MaybeUninit` because
    /// values may contain padding.
    data: Vec<MaybeUninit<u8>>,
}

/// What an arrival did.
#[derive(Debug)]
pub(crate) enum Exchange {
    /// The lane waits for the rest of its mask.
    Wait,
    /// The mask is complete: every lane in it gets `data`.
    Complete { data: Rc<[MaybeUninit<u8>]> },
}

/// The warp collectives of one CTA.
pub(crate) struct Warps {
    /// Per warp: lanes that exited, or that do not exist (beyond the block).
    gone: Vec<u32>,
    pending: Vec<Pending>,
}

impl Warps {
    /// Collectives for a CTA of `threads` threads.
    pub(crate) fn new(threads: u32) -> Self {
        let warps = threads.div_ceil(WARP_SIZE);
        let gone = (0..warps)
            .map(|w| {
                let lanes = (threads - w * WARP_SIZE).min(WARP_SIZE);
                if lanes == WARP_SIZE { 0 } else { !0u32 << lanes }
            })
            .collect();
        Warps {
            gone,
            pending: Vec::new(),
        }
    }

    /// Lane `lane` of warp `warp` contributes `value` (of type `type_id`) to the
    /// collective of `mask` (which includes the lane).
    pub(crate) fn arrive(
        &mut self,
        warp: u32,
        lane: u32,
        mask: u32,
        type_id: TypeId,
        value: &[MaybeUninit<u8>],
    ) -> Result<Exchange, String> {
        let gone = self.gone[warp as usize] & mask;
        if gone != 0 {
            return Err(format!(
                "warp_exchange in warp {warp} by lane {lane} with mask {mask:#010x}: lanes {} have exited or do not exist, so the collective can never complete",
                lanes(gone)
            ));
        }
        let size = value.len();
        let idx = match self.pending.iter().position(|p| p.warp == warp && p.mask == mask) {
            Some(i) => {
                let p = &self.pending[i];
                if p.size != size || p.type_id != type_id {
                    return Err(format!(
                        "warp_exchange in warp {warp} with mask {mask:#010x}: lane {lane} exchanges a {size}-byte value while lanes {} exchange a different type ({} bytes)",
                        lanes(p.arrived),
                        p.size
                    ));
                }
                i
            }
            None => {
                self.pending.push(Pending {
                    warp,
                    mask,
                    arrived: 0,
                    size,
                    type_id,
                    data: vec![MaybeUninit::new(0); WARP_SIZE as usize * size],
                });
                self.pending.len() - 1
            }
        };
        let p = &mut self.pending[idx];
        let at = lane as usize * size;
        p.data[at..at + size].copy_from_slice(value);
        p.arrived |= 1 << lane;
        if p.arrived == mask {
            let done = self.pending.swap_remove(idx);
            Ok(Exchange::Complete { data: done.data.into() })
        } else {
            Ok(Exchange::Wait)
        }
    }

    /// Lane `lane` of warp `warp` exited. Errors when lanes wait in a collective that
    /// names it.
    pub(crate) fn thread_exited(&mut self, warp: u32, lane: u32) -> Result<(), String> {
        self.gone[warp as usize] |= 1 << lane;
        match self
            .pending
            .iter()
            .find(|p| p.warp == warp && p.mask & (1 << lane) != 0)
        {
            Some(p) => Err(format!(
                "lane {lane} of warp {warp} exited while lanes {} wait for it in warp_exchange with mask {:#010x}",
                lanes(p.arrived),
                p.mask
            )),
            None => Ok(()),
        }
    }

    /// Lanes arrived at the pending collective of `mask` in `warp`.
    pub(crate) fn arrived(&self, warp: u32, mask: u32) -> u32 {
        self.pending
            .iter()
            .find(|p| p.warp == warp && p.mask == mask)
            .map_or(0, |p| p.arrived)
    }
}

/// Lane list of a bit mask, e.g. `{0, 3, 31}`.
pub(crate) fn lanes(mask: u32) -> String {
    let list: Vec<String> = (0..WARP_SIZE)
        .filter(|l| mask & (1 << l) != 0)
        .map(|l| l.to_string())
        .collect();
    format!("{{{}}}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> TypeId {
        TypeId::of::<u32>()
    }

    fn b<const N: usize>(bytes: [u8; N]) -> [MaybeUninit<u8>; N] {
        bytes.map(MaybeUninit::new)
    }

    #[test]
    fn completes_when_the_mask_is_full() {
        let mut w = Warps::new(64);
        let mask = 0b111;
        assert!(matches!(
            w.arrive(1, 2, mask, t(), &b([2, 0, 0, 0])),
            Ok(Exchange::Wait)
        ));
        assert!(matches!(
            w.arrive(1, 0, mask, t(), &b([0, 0, 0, 0])),
            Ok(Exchange::Wait)
        ));
        assert_eq!(w.arrived(1, mask), 0b101);
        match w.arrive(1, 1, mask, t(), &b([1, 0, 0, 0])) {
            Ok(Exchange::Complete { data }) => {
                assert_eq!(data.len(), 32 * 4);
                // SAFETY: lanes 0..3 deposited initialised bytes.
                let bytes: Vec<u8> = data[..12].iter().map(|x| unsafe { x.assume_init() }).collect();
                assert_eq!(bytes, [0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
            }
            other => panic!("expected completion, got {other:?}"),
        }
        assert_eq!(w.arrived(1, mask), 0);
    }

    #[test]
    fn disjoint_masks_are_independent() {
        let mut w = Warps::new(32);
        assert!(matches!(w.arrive(0, 0, 0b11, t(), &b([0; 4])), Ok(Exchange::Wait)));
        assert!(matches!(w.arrive(0, 2, 0b1100, t(), &b([0; 4])), Ok(Exchange::Wait)));
        assert!(matches!(
            w.arrive(0, 1, 0b11, t(), &b([0; 4])),
            Ok(Exchange::Complete { .. })
        ));
        assert_eq!(w.arrived(0, 0b1100), 0b100);
    }

    #[test]
    fn exited_and_missing_lanes_are_errors() {
        let mut w = Warps::new(40);
        // Warp 1 has lanes 0..8 only.
        assert!(w.arrive(1, 0, u32::MAX, t(), &b([0; 4])).is_err());
        assert!(matches!(w.arrive(0, 0, 0b11, t(), &b([0; 4])), Ok(Exchange::Wait)));
        let err = w.thread_exited(0, 1).expect_err("lane 0 waits for lane 1");
        assert!(err.contains("lane 1 of warp 0 exited"), "{err}");
        assert!(w.thread_exited(0, 5).is_ok(), "lane 5 is not in the pending mask");
    }

    #[test]
    fn mismatched_types_are_errors() {
        let mut w = Warps::new(32);
        assert!(matches!(w.arrive(0, 0, 0b11, t(), &b([0; 4])), Ok(Exchange::Wait)));
        assert!(w.arrive(0, 1, 0b11, TypeId::of::<f32>(), &b([0; 4])).is_err());
        assert!(w.arrive(0, 1, 0b11, t(), &b([0; 8])).is_err());
    }

    #[test]
    fn lane_lists() {
        assert_eq!(lanes(0b1001), "{0, 3}");
        assert_eq!(lanes(0), "{}");
    }
}
