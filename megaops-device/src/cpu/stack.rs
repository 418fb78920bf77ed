//! Coroutine stacks, carved out of large `mmap`ed arenas.
//!
//! Every GPU thread runs on its own coroutine stack. Giving each stack its own mapping
//! and guard page (corosensei's `DefaultStack`) costs two kernel VMAs per thread, and a
//! few virtual GPUs with thousands of resident threads each exhaust `vm.max_map_count`
//! (65530 by default). Here stacks are slots of a few large *chunks* instead: one
//! `mmap` per chunk, two VMAs per chunk (its guard region and its slots), whatever the
//! number of slots.
//!
//! ```text
//!  low addresses                                                         high addresses
//!  | guard (PROT_NONE) | canary | stack 0 ... | canary | stack 1 ... | ... | stack n-1 |
//!                      ^ limit of stack 0      ^ base of stack 0 = limit of stack 1
//!                               ^ floor of stack 0
//! ```
//!
//! - **Canaries instead of guard pages.** The lowest page of every slot holds a fixed
//!   pattern, written when the slot is created; a thread's *floor* is the top of that
//!   page. A thread that overflows its stack writes into the page before it writes below
//!   it: a frame smaller than a page cannot span it, so calls and pushes below it land in
//!   it, and rustc *probes* every frame larger than a page (one `mov qword [rsp], 0` per
//!   4 KiB on x86-64 and AArch64), so a frame that spans the page leaves a zero word in it.
//! - **Checks.** The scheduler checks a thread's stack after every resume, before any
//!   other coroutine runs: after a suspension, that the suspending frame lies above the
//!   floor and that the canary's top cache line (the first one contiguous growth reaches)
//!   is intact; when the thread exits or is discarded and its stack goes back to the
//!   pool, the top line again — and, in builds with debug assertions (tests), the whole
//!   page. A clobbered canary becomes [`super::CpuError::StackOverflow`]. The scheduler
//!   prefetches the top line as it resumes the thread, so the check rarely waits for
//!   memory.
//! - **What the cheap checks can miss.** A frame that reaches into the canary page, writes
//!   neither the page's top line nor below the floor while the thread is suspended, and
//!   returns before the thread next suspends: e.g. a large local array, probed but only
//!   partly written, in a function that calls no suspending hook. Only the whole-page
//!   check sees it, and in release builds only a later overflow of the same kernel that
//!   the cheap checks catch reports it. The whole-page check reads a page of cold memory
//!   per thread, which halves the throughput of short-lived threads; debug builds pay it.
//! - **Quarantine.** An overflow may already have written into the slots below it (the
//!   saved state of suspended threads). The chunk is then *poisoned*: none of its slots is
//!   handed out again, and no coroutine on it is resumed or unwound again — they are
//!   leaked, with whatever they own. Everything else goes on; the virtual GPU discards
//!   the run and accepts new work.
//! - **Guard regions** stay at the low end of every chunk: an overflow large enough to run
//!   through every slot below it faults there (as a `DefaultStack` overflow would) instead
//!   of writing into unrelated memory. Fresh slots are handed out from the top of a chunk
//!   down, so a young chunk's unused slots lie below its busy ones.
//! - **Lazily committed.** Chunks are mapped `MAP_NORESERVE` without transparent huge
//!   pages; a slot costs the pages its thread touches plus its canary page.
//! - **Pooled and bounded.** A thread takes a stack when it first runs and gives it back
//!   when it exits, so at most [`super::VgpuConfig::max_resident_threads`] stacks are live
//!   at once, however many CTAs a run goes through. Chunks grow geometrically (64 slots,
//!   doubling, at most 4096 slots or 1 GiB, never beyond the resident-thread bound) and
//!   are unmapped when the pool and every stack on them are gone (the virtual GPU drops).

use std::cell::Cell;
use std::io;
use std::ptr::{self, NonNull};
use std::rc::Rc;

use corosensei::stack::{MIN_STACK_SIZE, STACK_ALIGNMENT, Stack, StackPointer};

use super::CpuError;

/// The pattern of canary words. Not zero (stack probes and zeroed locals write zeros) and
/// not a plausible pointer or small integer.
const CANARY: u64 = 0xC5AC_CA4A_9E57_F00D;

/// Slots of the first chunk; later chunks double.
const FIRST_CHUNK_SLOTS: usize = 64;

/// Most slots of one chunk.
const MAX_CHUNK_SLOTS: usize = 4096;

/// Most bytes of one chunk's slots (a chunk has at least one slot).
const MAX_CHUNK_BYTES: usize = 1 << 30;

/// Guard region at the low end of a chunk (rounded up to whole pages).
const GUARD_BYTES: usize = 64 * 1024;

/// Words of the canary's top that the cheap check reads: one cache line.
const TOP_WORDS: usize = 8;

/// Whether a stack returned to the pool gets its whole canary checked, not only the top
/// line (see the module docs).
const FULL_CHECK_ON_RETURN: bool = cfg!(debug_assertions);

/// The largest [`super::VgpuConfig::stack_size`] accepted.
pub(crate) const MAX_STACK_SIZE: usize = 1 << 30;

/// The host's page size.
fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match usize::try_from(n) {
        Ok(n) if n.is_power_of_two() && n >= 4096 => n,
        _ => 4096,
    }
}

/// One mapping: a guard region, then `slots` slots of `slot` bytes, each a canary page of
/// `canary_words` words below the usable stack. Unmapped on drop.
struct Chunk {
    map: NonNull<u8>,
    len: usize,
    guard: usize,
    slot: usize,
    slots: usize,
    canary_words: usize,
    /// Set when an overflow was detected on one of its slots (see the module docs).
    poisoned: Cell<bool>,
}

impl Chunk {
    /// Maps a chunk of `slots` slots of `slot` bytes (each with a canary page of
    /// `canary_words` words) above a `guard`-byte guard region.
    fn map(guard: usize, slot: usize, slots: usize, canary_words: usize) -> io::Result<Chunk> {
        let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "chunk size overflows usize");
        let len = slot
            .checked_mul(slots)
            .and_then(|b| b.checked_add(guard))
            .ok_or_else(too_large)?;
        #[cfg(target_os = "linux")]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK;
        #[cfg(not(target_os = "linux"))]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: an anonymous private mapping at an address of the kernel's choice touches
        // no existing memory; the result is checked below.
        let map = unsafe { libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let chunk = Chunk {
            map: NonNull::new(map.cast::<u8>()).ok_or_else(io::Error::last_os_error)?,
            len,
            guard,
            slot,
            slots,
            canary_words,
            poisoned: Cell::new(false),
        };
        // Stack memory must stay lazily committed, page by page, also where transparent
        // huge pages are enabled for every mapping. Advisory: a kernel without THP
        // rejects it, which is fine.
        #[cfg(target_os = "linux")]
        // SAFETY: the range is exactly the mapping made above, which nothing uses yet.
        unsafe {
            libc::madvise(map, len, libc::MADV_NOHUGEPAGE);
        }
        // SAFETY: the first `guard` bytes lie inside the mapping made above (`guard <
        // len`), which nothing uses yet; on error `chunk` unmaps it.
        if unsafe { libc::mprotect(map, guard, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(chunk)
    }

    /// The lowest address of slot `i` (its canary).
    fn slot_low(&self, i: usize) -> NonNull<u8> {
        debug_assert!(i < self.slots);
        // SAFETY: `guard + i * slot < len` for `i < slots`, so the result stays inside
        // the mapping (and is therefore not null).
        unsafe { self.map.add(self.guard + i * self.slot) }
    }

    /// Whether `addr` lies in this chunk.
    fn contains(&self, addr: usize) -> bool {
        let start = self.map.as_ptr() as usize;
        (start..start + self.len).contains(&addr)
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `map`/`len` are exactly the mapping made in `Chunk::map`, and every
        // stack carved out of it holds an `Rc` to this chunk: none is left.
        let ret = unsafe { libc::munmap(self.map.as_ptr().cast(), self.len) };
        debug_assert_eq!(ret, 0, "munmap of a coroutine-stack chunk failed");
    }
}

/// The canary page that ends at `floor`, as words.
///
/// # Safety
/// `floor` is [`ArenaStack::floor`] of a stack that is alive (in the pool or owned by a
/// coroutine) during the returned borrow, and nothing runs on that stack or on the stacks
/// above it in its chunk meanwhile (the scheduler checks between coroutine switches).
unsafe fn canary_words<'a>(floor: usize, words: usize) -> &'a [u64] {
    // SAFETY: the caller's contract: `floor - 8 * words .. floor` is the canary page of a
    // live stack, mapped read-write (the stack's `Rc` keeps its chunk mapped), page-aligned
    // (so aligned for `u64`), and not written while the borrow lives.
    unsafe { std::slice::from_raw_parts((floor - words * 8) as *const u64, words) }
}

/// The cheap canary check: its top cache line (the first any contiguous overflow reaches)
/// is intact.
///
/// # Safety
/// As for `canary_words`: `floor` is the floor of a live stack nothing runs on now.
pub(crate) unsafe fn canary_top_intact(floor: usize) -> bool {
    // SAFETY: the caller's contract; a canary page holds far more than `TOP_WORDS` words.
    let top = unsafe { canary_words(floor, TOP_WORDS) };
    top.iter().all(|&w| w == CANARY)
}

/// Starts loading the canary's top line (below `floor`) into the cache, so that the check
/// after the thread's next suspension does not wait for memory: the canary is the one
/// line of a stack that the thread itself never touches. A hint; any address will do.
#[inline(always)]
pub(crate) fn prefetch_canary_top(floor: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has; a prefetch is only a
    // hint to the cache and never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(floor.wrapping_sub(TOP_WORDS * 8) as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = floor;
}

/// A coroutine stack: one slot of a chunk, `[limit, base)`, whose lowest page is its
/// canary.
pub(crate) struct ArenaStack {
    base: StackPointer,
    chunk: Rc<Chunk>,
}

impl ArenaStack {
    /// The lowest address the thread may use: the top of its canary page.
    pub(crate) fn floor(&self) -> usize {
        self.base.get() - self.chunk.slot + self.chunk.canary_words * 8
    }

    /// The whole canary is intact.
    fn canary_intact(&self) -> bool {
        // SAFETY: `self` is alive and owned by the caller, so no coroutine runs on it; the
        // stacks above it belong to coroutines that are suspended while the scheduler,
        // the only caller, runs.
        let words = unsafe { canary_words(self.floor(), self.chunk.canary_words) };
        words.iter().fold(true, |ok, &w| ok & (w == CANARY))
    }
}

// SAFETY: corosensei requires `base` and `limit` aligned to `STACK_ALIGNMENT`, at least
// `MIN_STACK_SIZE` usable bytes between them, memory that stays valid and exclusively the
// coroutine's while the `ArenaStack` lives, and a guard page that catches overflows.
// - Slot boundaries are page multiples from a page-aligned mapping (so aligned to
//   `STACK_ALIGNMENT`); the usable part is at least `MIN_STACK_SIZE` (`StackPool::new`).
// - `[limit, base)` is mapped read-write until the chunk is unmapped, which the `Rc` in
//   `chunk` prevents while this stack lives; the pool hands each slot to one
//   `ArenaStack` at a time (fresh slots are counted down once, returned ones are moved).
// - The guard page is where this departs from the letter of the contract, deliberately:
//   one per stack costs two VMAs per stack. Instead, the canary page at `limit` (which
//   `limit` covers, as it would a guard page) is checked after every resume before any
//   other coroutine runs, and a guard region at the bottom of each chunk stops overflows
//   that run through the whole chunk. An overflow detected on a slot quarantines its
//   chunk: no coroutine on it runs or unwinds again, so one that wrote into a neighbour's
//   slot never lets the neighbour run on clobbered state. The module docs say which
//   overflows the cheap checks of release builds can miss.
unsafe impl Stack for ArenaStack {
    #[inline]
    fn base(&self) -> StackPointer {
        self.base
    }

    #[inline]
    fn limit(&self) -> StackPointer {
        // The slot's lowest address lies inside the mapping, above its guard region, so it
        // is never zero (the fallback, an empty stack, is unreachable).
        StackPointer::new(self.base.get() - self.chunk.slot).unwrap_or(self.base)
    }
}

/// Free stacks of one size, carved out of chunks mapped on demand.
pub(crate) struct StackPool {
    /// Bytes per slot (canary page + usable stack).
    slot: usize,
    /// Words of a slot's canary (one page).
    canary_words: usize,
    /// Bytes of a chunk's guard region.
    guard: usize,
    free: Vec<ArenaStack>,
    /// The newest chunk and how many of its slots (from its bottom) were never handed out.
    fresh: Option<(Rc<Chunk>, usize)>,
    /// Every chunk mapped so far (to find a stack's chunk by address).
    chunks: Vec<Rc<Chunk>>,
    /// Slots of all chunks mapped so far that are not poisoned.
    capacity: usize,
    any_poisoned: bool,
    allocated: u64,
    /// Stacks handed out and neither returned nor abandoned.
    live: u64,
    max_live: u64,
}

impl StackPool {
    /// A pool of stacks with at least `stack_size` usable bytes, at most `max_live` of
    /// them handed out at once. `stack_size` is at most [`MAX_STACK_SIZE`]
    /// ([`super::VgpuConfig::validate`]).
    pub(crate) fn new(stack_size: usize, max_live: u64) -> Self {
        let page = page_size();
        let usable = stack_size.clamp(MIN_STACK_SIZE, MAX_STACK_SIZE).next_multiple_of(page);
        debug_assert_eq!(page % STACK_ALIGNMENT, 0);
        StackPool {
            slot: page + usable,
            canary_words: page / 8,
            guard: GUARD_BYTES.next_multiple_of(page),
            free: Vec::new(),
            fresh: None,
            chunks: Vec::new(),
            capacity: 0,
            any_poisoned: false,
            allocated: 0,
            live: 0,
            max_live,
        }
    }

    /// A free stack, or a new one.
    pub(crate) fn take(&mut self) -> Result<ArenaStack, CpuError> {
        if self.live >= self.max_live {
            return Err(CpuError::Resource(format!(
                "more than {} coroutine stacks (the resident-thread limit) in use at once",
                self.max_live
            )));
        }
        let stack = loop {
            match self.free.pop() {
                // Stacks of a chunk poisoned while they were free are dropped.
                Some(s) if s.chunk.poisoned.get() => continue,
                Some(s) => break s,
                None => break self.fresh()?,
            }
        };
        self.live += 1;
        Ok(stack)
    }

    /// A never-used slot: the highest one left of the newest chunk, or of a new chunk.
    fn fresh(&mut self) -> Result<ArenaStack, CpuError> {
        let (chunk, left) = match self.fresh.take() {
            Some((chunk, left)) if left > 0 && !chunk.poisoned.get() => (chunk, left),
            _ => {
                let chunk = self.map_chunk()?;
                let slots = chunk.slots;
                (chunk, slots)
            }
        };
        let i = left - 1;
        let low = chunk.slot_low(i);
        // SAFETY: the canary page of slot `i` lies in the chunk's read-write part and
        // belongs to no stack yet; page-aligned, so aligned for `u64`.
        unsafe { std::slice::from_raw_parts_mut(low.as_ptr().cast::<u64>(), self.canary_words) }.fill(CANARY);
        // `low + slot` is the next slot's low end, or the end of the mapping.
        let base = StackPointer::new(low.as_ptr() as usize + self.slot)
            .ok_or_else(|| CpuError::Resource("coroutine stack at the top of the address space".into()))?;
        let stack = ArenaStack {
            base,
            chunk: Rc::clone(&chunk),
        };
        self.fresh = Some((chunk, i));
        self.allocated += 1;
        Ok(stack)
    }

    /// Maps the next chunk: twice the slots of the last one, within the limits.
    fn map_chunk(&mut self) -> Result<Rc<Chunk>, CpuError> {
        let grown = FIRST_CHUNK_SLOTS << self.chunks.len().min(16);
        let needed = usize::try_from(self.max_live)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.capacity);
        let slots = grown
            .min(MAX_CHUNK_SLOTS)
            .min(MAX_CHUNK_BYTES / self.slot)
            .min(needed)
            .max(1);
        let chunk = Chunk::map(self.guard, self.slot, slots, self.canary_words).map_err(|e| {
            CpuError::Resource(format!(
                "cannot map a chunk of {slots} coroutine stacks of {} KiB after {} stacks in {} chunks: {e}",
                self.slot / 1024,
                self.allocated,
                self.chunks.len()
            ))
        })?;
        let chunk = Rc::new(chunk);
        self.chunks.push(Rc::clone(&chunk));
        self.capacity += slots;
        Ok(chunk)
    }

    /// Returns a stack whose coroutine has finished (or was unwound). Checks its canary
    /// (the top line; the whole page with debug assertions): `false` when it was clobbered
    /// (its chunk is then quarantined).
    pub(crate) fn put(&mut self, stack: ArenaStack) -> bool {
        self.put_checked(stack, FULL_CHECK_ON_RETURN)
    }

    /// [`Self::put`], checking the whole canary or only its top line.
    fn put_checked(&mut self, stack: ArenaStack, full: bool) -> bool {
        self.live = self.live.saturating_sub(1);
        let intact = if full {
            stack.canary_intact()
        } else {
            // SAFETY: `stack` is alive and owned here, so nothing runs on it; the stacks
            // above it are suspended while the scheduler, the only caller, runs.
            unsafe { canary_top_intact(stack.floor()) }
        };
        if !intact {
            self.poison(&stack.chunk);
        }
        if !stack.chunk.poisoned.get() {
            self.free.push(stack);
        }
        intact
    }

    /// Quarantines the chunk of the stack with floor `floor` (see the module docs), whose
    /// coroutine the caller leaks.
    pub(crate) fn abandon(&mut self, floor: usize) {
        self.live = self.live.saturating_sub(1);
        if let Some(chunk) = self.chunks.iter().find(|c| c.contains(floor)).cloned() {
            self.poison(&chunk);
        }
    }

    /// Whether the stack with floor `floor` lies in a quarantined chunk: its coroutine
    /// must never run (or unwind) again.
    pub(crate) fn poisoned_at(&self, floor: usize) -> bool {
        self.any_poisoned && self.chunks.iter().any(|c| c.poisoned.get() && c.contains(floor))
    }

    fn poison(&mut self, chunk: &Rc<Chunk>) {
        if !chunk.poisoned.replace(true) {
            self.any_poisoned = true;
            self.capacity = self.capacity.saturating_sub(chunk.slots);
            if self.fresh.as_ref().is_some_and(|(c, _)| Rc::ptr_eq(c, chunk)) {
                self.fresh = None;
            }
        }
    }

    /// Stacks allocated so far.
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Chunks mapped so far.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `value` at `addr`, inside a stack the test owns.
    fn poke(addr: usize, value: u64) {
        // SAFETY: the tests only poke words of slots they hold (usable part or canary).
        unsafe { ptr::write_volatile(addr as *mut u64, value) }
    }

    #[test]
    fn reuses_returned_stacks() {
        let mut pool = StackPool::new(64 * 1024, 16);
        let a = pool.take().expect("stack");
        let b = pool.take().expect("stack");
        assert!(pool.put(a));
        assert!(pool.put(b));
        let _c = pool.take().expect("stack");
        assert_eq!(pool.allocated(), 2);
        assert_eq!(pool.chunks(), 1);
    }

    #[test]
    fn stacks_are_aligned_disjoint_and_writable() {
        let mut pool = StackPool::new(10_000, 8);
        let stacks: Vec<ArenaStack> = (0..8).map(|_| pool.take().expect("stack")).collect();
        let page = page_size();
        let mut ranges: Vec<(usize, usize)> = stacks.iter().map(|s| (s.limit().get(), s.base().get())).collect();
        ranges.sort_unstable();
        for &(limit, base) in &ranges {
            assert_eq!(limit % page, 0);
            assert_eq!(base % STACK_ALIGNMENT, 0);
            // A canary page plus at least the requested size, rounded up to pages.
            assert_eq!(base - limit, page + 10_000usize.next_multiple_of(page));
        }
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
        for s in &stacks {
            assert_eq!(s.floor(), s.limit().get() + page);
            assert!(s.canary_intact());
            // The usable part is writable, from the floor to the base.
            poke(s.floor(), 1);
            poke(s.base().get() - 8, 2);
            assert!(s.canary_intact());
        }
        assert_eq!(pool.chunks(), 1);
    }

    #[test]
    fn a_clobbered_canary_quarantines_its_chunk() {
        let mut pool = StackPool::new(16 * 1024, 64);
        let a = pool.take().expect("stack");
        let b = pool.take().expect("stack");
        let floor = a.floor();
        // A probe-like zero word in the middle of `a`'s canary page.
        poke(a.limit().get() + 2048, 0);
        // SAFETY: `a` is alive and nothing runs on it.
        assert!(
            unsafe { canary_top_intact(floor) },
            "the cheap check only sees the top line"
        );
        assert!(!a.canary_intact());
        assert!(!pool.poisoned_at(floor));
        assert!(!pool.put_checked(a, true));
        assert!(pool.poisoned_at(floor));
        // `b` shares the chunk: it is dropped, not reused; new stacks come from a new chunk.
        assert!(pool.poisoned_at(b.floor()));
        assert!(pool.put(b));
        let c = pool.take().expect("stack");
        assert!(!pool.poisoned_at(c.floor()));
        assert_eq!(pool.chunks(), 2);
    }

    #[test]
    fn the_cheap_check_sees_the_top_line() {
        let mut pool = StackPool::new(16 * 1024, 4);
        let s = pool.take().expect("stack");
        // SAFETY: `s` is alive and nothing runs on it.
        assert!(unsafe { canary_top_intact(s.floor()) });
        poke(s.floor() - 16, 7);
        // SAFETY: as above.
        assert!(!unsafe { canary_top_intact(s.floor()) });
        assert!(!pool.put(s));
    }

    #[test]
    fn an_abandoned_stack_quarantines_its_chunk() {
        let mut pool = StackPool::new(16 * 1024, 4);
        let s = pool.take().expect("stack");
        let floor = s.floor();
        pool.abandon(floor);
        std::mem::forget(s);
        assert!(pool.poisoned_at(floor));
        // The leaked stack no longer counts against the bound.
        let held: Vec<ArenaStack> = (0..4).map(|_| pool.take().expect("stack")).collect();
        assert!(held.iter().all(|s| !pool.poisoned_at(s.floor())));
    }

    #[test]
    fn live_stacks_are_bounded() {
        let mut pool = StackPool::new(16 * 1024, 3);
        let held: Vec<ArenaStack> = (0..3).map(|_| pool.take().expect("stack")).collect();
        assert!(matches!(pool.take(), Err(CpuError::Resource(_))));
        for s in held {
            pool.put(s);
        }
        assert!(pool.take().is_ok());
        // The first chunk is sized to the bound: 3 slots.
        assert_eq!((pool.allocated(), pool.chunks()), (3, 1));
    }

    /// Two VMAs per chunk, however many stacks: what the arenas are for.
    #[cfg(target_os = "linux")]
    #[test]
    fn few_mappings_for_many_stacks() {
        let mut pool = StackPool::new(16 * 1024, 20_000);
        let _stacks: Vec<ArenaStack> = (0..20_000).map(|_| pool.take().expect("stack")).collect();
        let chunks: Vec<(usize, usize)> = pool
            .chunks
            .iter()
            .map(|c| (c.map.as_ptr() as usize, c.map.as_ptr() as usize + c.len))
            .collect();
        assert!(chunks.len() <= 10, "{} chunks", chunks.len());
        // Mappings of this process that overlap the chunks (others' may merge with ours,
        // never split them).
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        let vmas = maps
            .lines()
            .filter_map(|l| {
                let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
                Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?))
            })
            .filter(|&(lo, hi)| chunks.iter().any(|&(a, b)| lo < b && a < hi))
            .count();
        assert!(vmas <= 2 * chunks.len(), "{vmas} VMAs for {} chunks", chunks.len());
    }
}
