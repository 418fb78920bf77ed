//! The bookkeeping at the end of a captured decode step ([`advance_decode`]): the sampled
//! ids become the next step's input, positions advance, and the ids are appended to a
//! device-side history, so a CUDA graph of the step replays with no host work.

use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::thread::{sync_threads, thread_idx_x};

/// After sampling: for each sequence `b < m`, `next[b] = ids[b]`, `positions[b]`,
/// `slots[b]` and `lens[b]` each grow by one, and, while `step[0] < steps`,
/// `history[step[0]·m + b] = ids[b]`; then `step[0]` grows by one.
///
/// Layouts (all u32): `ids` `[m]` (the sampler's output, a synchronised input), `next`,
/// `positions`, `slots`, `lens` `[m]`, `history` `[steps·m]`, `step` `[1]`. `positions`,
/// `slots` and `lens` are what [`crate::rope::qk_norm_rope`] and
/// [`crate::attention::decode::decode_attention`] read.
///
/// One CTA; thread `t` serves sequences `t, t + THREADS, …`.
///
/// # Safety
/// Pointers valid for the shapes above.
#[megaops::kernel(
    block = THREADS,
    tiles(pid = 1),
    input(ids[m] = [_]),
    scratch(next[m]),
    scratch(positions[m]),
    scratch(slots[m]),
    scratch(lens[m]),
    scratch(history[steps * m]),
    scratch(step[1]),
)]
#[config(THREADS = 128)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn advance_decode(
    ids: *const u32,
    next: *mut u32,
    positions: *mut u32,
    slots: *mut u32,
    lens: *mut u32,
    history: *mut u32,
    step: *mut u32,
    m: u32,
    steps: u32,
) {
    let _ = pid;
    // SAFETY: `step` holds one element (kernel contract).
    let s = unsafe { *step };
    let mut b = thread_idx_x();
    while b < m {
        let i = b as usize;
        // SAFETY: b < m for every `[m]` tensor; `s·m + b < steps·m` when `s < steps`; a
        // relaxed gpu-scope load reads the sampler's id after the wait.
        unsafe {
            let id = atomic::load(ids.add(i), Relaxed, Gpu);
            *next.add(i) = id;
            *positions.add(i) += 1;
            *slots.add(i) += 1;
            *lens.add(i) += 1;
            if s < steps {
                *history.add(s as usize * m as usize + i) = id;
            }
        }
        b += THREADS;
    }
    // Every thread has read `step` before thread 0 moves it.
    sync_threads();
    if thread_idx_x() == 0 {
        // SAFETY: as above.
        unsafe { *step = s + 1 };
    }
}
