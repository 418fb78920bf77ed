//! The shape and limits of a virtual GPU.

use std::time::Duration;

use super::CpuError;
use super::stack::MAX_STACK_SIZE;

/// Shape, limits and seed of a [`super::VirtualGpu`].
///
/// The defaults describe a small Hopper-like device: 8 SMs with H100/H200 per-SM limits.
/// Every field is public; start from [`VgpuConfig::default`] and change what a test needs:
///
/// ```
/// use megaops_device::cpu::VgpuConfig;
/// let cfg = VgpuConfig { sms: 2, seed: 7, ..VgpuConfig::default() };
/// assert_eq!(cfg.max_threads_per_sm, 2048);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VgpuConfig {
    /// Number of streaming multiprocessors.
    pub sms: u32,
    /// Threads one SM holds at a time (sum over its resident CTAs).
    pub max_threads_per_sm: u32,
    /// CTAs one SM holds at a time.
    pub max_ctas_per_sm: u32,
    /// Shared memory of one SM in bytes (sum of the resident CTAs' dynamic shared memory).
    pub smem_per_sm: usize,
    /// Largest dynamic shared memory one CTA may request, in bytes.
    pub max_smem_per_cta: usize,
    /// Largest block (threads per CTA).
    pub max_threads_per_cta: u32,
    /// Seed of every scheduling choice: the order of kernels that become ready together on
    /// different streams, the SM a CTA is placed on and the order runnable threads resume
    /// in. The same seed and the same sequence of host calls give the same interleaving.
    pub seed: u64,
    /// Stack size of one GPU thread's coroutine, in bytes (rounded up to whole pages, at
    /// most 1 GiB), plus one canary page below it. Kernels keep their local arrays here;
    /// raise it for kernels with large per-thread arrays. Only the pages a thread touches
    /// use memory.
    ///
    /// A thread that overflows its stack clobbers the canary, and the run stops with
    /// [`CpuError::StackOverflow`] naming the kernel, block and thread. The canary is
    /// checked after every resume: the stack pointer of a suspension and the canary's top
    /// line always, the whole page when the thread exits in builds with debug assertions
    /// (release builds can miss a frame that reaches into the canary page without writing
    /// its top line and returns before the thread suspends). Stacks are slots of large
    /// shared mappings with a guard region only at each mapping's low end: an overflow so
    /// large that it runs through every stack below it in its mapping still crashes the
    /// process there.
    pub stack_size: usize,
    /// Most consecutive sub-rounds one CTA runs before the next CTA gets its turn; each
    /// turn's length is drawn by the seed from `1..=cta_slice`. 1 interleaves CTAs most
    /// finely; longer turns keep a CTA's stacks in the host's caches, which makes runs
    /// with thousands of resident threads several times faster.
    pub cta_slice: u32,
    /// Virtual nanoseconds the clock of [`super::hooks::global_timer_ns`] advances per
    /// coroutine switch.
    pub switch_ns: u64,
    /// Hang limit, in coroutine switches: a run stops with [`CpuError::Hang`] after this
    /// many consecutive switches without progress (a thread exiting, a barrier or
    /// collective completing, a semaphore wait ending, a CTA being placed, a host
    /// operation running). Catches spin loops (on atomics) that can never end but that are
    /// not structurally visible as a deadlock. Deterministic.
    pub max_idle_switches: u64,
    /// Hang limit in virtual time: a run stops with [`CpuError::Hang`] after this many
    /// virtual nanoseconds without progress while threads only wait on time (`nanosleep`,
    /// `%globaltimer`; the clock then runs fast, see
    /// [`super::hooks::global_timer_ns`]) and no semaphore wait has a deadline ahead (one
    /// that has times out first). Catches time-based spins that can never end, e.g. on a
    /// flag nobody writes, with `nanosleep` back-off; a kernel that spins on the clock for
    /// less than this is left alone. Deterministic.
    pub max_idle_virtual_ns: u64,
    /// Hang limit in wall-clock time without progress (as for `max_idle_switches`);
    /// `None` disables it. Not deterministic; a safety net for CI.
    pub hang_timeout: Option<Duration>,
    /// Check that kernels read synchronised inputs only inside the data tiles they waited
    /// for: a read outside them (which races with the producer on a GPU) stops the run
    /// with [`CpuError::OutOfTileRead`], naming the kernel, CTA, thread, tensor, element
    /// and data tile read and the data tiles waited for. Reads through dereferences and
    /// `read()` calls whose operand mentions the input, and through the device library's
    /// vector loads and `cp.async`, are checked (see `megaops_device::cpu::hooks::check_read`).
    ///
    /// Default: on in builds with debug assertions (so `cargo test` checks), off
    /// otherwise; the environment variable `MEGAOPS_CHECK_READS=1` (or `=0`) turns it on
    /// (off) in either.
    pub check_reads: bool,
}

impl Default for VgpuConfig {
    fn default() -> Self {
        VgpuConfig {
            sms: 8,
            max_threads_per_sm: 2048,
            max_ctas_per_sm: 32,
            smem_per_sm: 228 * 1024,
            max_smem_per_cta: 227 * 1024,
            max_threads_per_cta: 1024,
            seed: 0,
            stack_size: 256 * 1024,
            cta_slice: 16,
            switch_ns: 10,
            max_idle_switches: 50_000_000,
            max_idle_virtual_ns: 600_000_000_000,
            hang_timeout: Some(Duration::from_secs(60)),
            check_reads: check_reads_default(),
        }
    }
}

/// [`VgpuConfig::check_reads`]'s default: `MEGAOPS_CHECK_READS` if set to `1` or `0`,
/// otherwise whether debug assertions are on.
fn check_reads_default() -> bool {
    match std::env::var("MEGAOPS_CHECK_READS").ok().as_deref() {
        Some("1") => true,
        Some("0") => false,
        _ => cfg!(debug_assertions),
    }
}

impl VgpuConfig {
    /// Checks that the limits describe a device that can run at least a one-thread CTA.
    pub fn validate(&self) -> Result<(), CpuError> {
        let bad = |what: &str| Err(CpuError::InvalidConfig(what.to_string()));
        if self.sms == 0 {
            return bad("sms must be at least 1");
        }
        if self.max_ctas_per_sm == 0 {
            return bad("max_ctas_per_sm must be at least 1");
        }
        if self.max_threads_per_cta == 0 || self.max_threads_per_sm == 0 {
            return bad("max_threads_per_cta and max_threads_per_sm must be at least 1");
        }
        if self.max_threads_per_cta > self.max_threads_per_sm {
            return bad("max_threads_per_cta exceeds max_threads_per_sm: no CTA of that size fits an SM");
        }
        if self.max_smem_per_cta > self.smem_per_sm {
            return bad("max_smem_per_cta exceeds smem_per_sm: no CTA of that size fits an SM");
        }
        if self.stack_size > MAX_STACK_SIZE {
            return bad("stack_size must be at most 1 GiB");
        }
        if self.cta_slice == 0 {
            return bad("cta_slice must be at least 1");
        }
        if self.max_idle_switches == 0 {
            return bad("max_idle_switches must be at least 1");
        }
        Ok(())
    }

    /// Most threads that can be resident at once (`sms × max_threads_per_sm`), which also
    /// bounds the number of coroutine stacks in use at once.
    pub fn max_resident_threads(&self) -> u64 {
        self.sms as u64 * self.max_threads_per_sm as u64
    }
}
