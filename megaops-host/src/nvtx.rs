//! NVTX ranges for Nsight Systems: one per kernel launch (named by its PTX entry, which
//! says operator and config) and whatever ranges the caller opens (the model engine opens
//! one per layer). On only when enabled ([`set_enabled`], or `MEGAOPS_NVTX=1` in the
//! environment) and the NVTX library (`libnvToolsExt`) loads; otherwise every call is a
//! test of one flag. Ranges opened while a CUDA graph is captured cover the captured
//! launches (`nsys --cuda-graph-trace=node` shows them at each replay).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0: not decided yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether the NVTX library can be loaded (checked once).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: probing for a shared library by name has no preconditions.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvtx::sys::is_culib_present() })
}

/// Turns the ranges on or off for the whole process; on only takes effect if
/// [`available`]. Returns whether ranges are now recorded.
pub fn set_enabled(on: bool) -> bool {
    let on = on && available();
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// Whether ranges are recorded: [`set_enabled`]'s last choice, else `MEGAOPS_NVTX=1` in
/// the environment (and the library present).
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => set_enabled(std::env::var("MEGAOPS_NVTX").is_ok_and(|v| v == "1")),
        s => s == 2,
    }
}

/// An open NVTX range; it ends when dropped. Inert when ranges are off.
#[must_use = "the range ends when this value is dropped"]
pub struct Range(Option<cudarc::nvtx::Range>);

/// Opens a range named `name()` if ranges are on (the name is only built then).
pub fn range<S: AsRef<str>>(name: impl FnOnce() -> S) -> Range {
    if !enabled() {
        return Range(None);
    }
    let text = name();
    // NVTX messages are C strings: an interior NUL would end them early.
    let text = text.as_ref().replace('\0', " ");
    Range(Some(cudarc::nvtx::scoped_range(text)))
}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Range").field(&self.0.is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the library (CI machines) ranges stay off whatever is asked; with it they
    /// follow the switch. Either way opening and dropping one is safe.
    #[test]
    fn ranges_follow_the_switch_and_the_library() {
        assert_eq!(set_enabled(true), available());
        assert_eq!(enabled(), available());
        drop(range(|| "megaops test range"));
        assert!(!set_enabled(false));
        assert!(!enabled());
        let mut built = false;
        drop(range(|| {
            built = true;
            "never built"
        }));
        assert!(!built, "an off range must not build its name");
    }
}
