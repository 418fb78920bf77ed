//! The CPU backend: a virtual GPU that runs MegaOps kernels, unchanged, on the host.
//!
//! Kernels compiled for the host call the device primitives of this crate, whose host
//! implementations reach the running virtual GPU through [`hooks`]. A [`VirtualGpu`]
//! executes them as follows.
//!
//! - **Streams** are FIFOs of kernels, host operations and event records/waits. An
//!   operation starts when everything before it on its stream has completed.
//! - **Dispatch**: a kernel is *ready* when it reaches the head of its stream. Ready
//!   kernels join the dispatch queue in the order they become ready; kernels that become
//!   ready at the same scheduling point (on different streams) are shuffled by the seed,
//!   since a GPU orders nothing across streams.
//! - **Placement**: CTAs are placed strictly in dispatch order — every CTA of a kernel
//!   before any CTA of a later one — each on an SM with room for its threads, a CTA slot
//!   and its shared memory (the SM chosen by the seed). When the next CTA fits nowhere,
//!   placement waits for a CTA to finish; later kernels do not jump ahead. CTAs of
//!   different kernels share SMs. A kernel completes when its last CTA has finished.
//! - **Threads**: each GPU thread runs the kernel entry on its own stackful coroutine.
//!   Rounds resume every runnable thread once, in a seeded order; a thread runs until a
//!   hook suspends it — a barrier, a warp collective, a yield (spins on atomics), a wait
//!   on time (`nanosleep`, a read of `%globaltimer`) or a semaphore wait — or until it
//!   exits.
//! - **Time**: the virtual clock advances with every switch, and jumps ahead after rounds
//!   in which every thread only waited on time and nothing progressed (see
//!   [`hooks::global_timer_ns`]): a kernel that spins 10 s on the clock ends in a few
//!   dozen rounds. Semaphore waits of the sync runtime time out after the launch's
//!   timeout of that clock, and record the same error as on the GPU.
//! - **Stops**: when no thread is runnable and work remains, the run stops with a
//!   [`DeadlockReport`] (every blocked CTA with its semaphore, barrier or collective, and
//!   the kernels that find no SM room). A run without progress for
//!   [`VgpuConfig::max_idle_switches`] switches, [`VgpuConfig::max_idle_virtual_ns`] of
//!   virtual time spent waiting on time with no wait deadline ahead, or
//!   [`VgpuConfig::hang_timeout`] stops with a [`HangReport`]; a panicking kernel thread
//!   with [`CpuError::KernelPanic`]; a read of a synchronised input outside the data
//!   tiles the thread waited for with [`CpuError::OutOfTileRead`]
//!   ([`VgpuConfig::check_reads`]). The virtual GPU then discards the pending work and
//!   accepts new work.
//!
//! The same seed and the same sequence of host calls give the same interleaving;
//! different seeds explore different legal ones (kernel order across streams, SM choice,
//! thread order).
//!
//! Coroutine stacks are slots of a few large mappings (two kernel VMAs per mapping, not
//! per thread), each with a canary page below it: a thread that overflows its stack
//! ([`VgpuConfig::stack_size`]) stops the run with [`CpuError::StackOverflow`].
//!
//! Limits of the emulation: a loop that calls no hook cannot be interrupted (only spins
//! through atomics, `nanosleep` or the sync runtime are); a stack overflow large enough to
//! run through every stack below it in its mapping crashes the process, and in release
//! builds one that only grazes the canary between two suspensions can go unreported (see
//! [`VgpuConfig::stack_size`]); static shared memory does not count towards an SM's
//! shared-memory limit; kernels need `panic = "unwind"` for panics to become errors.

mod barrier;
mod config;
mod cta;
mod dispatch;
mod error;
pub mod hooks;
mod reads;
mod report;
mod rng;
mod scheduler;
mod shared;
mod stack;
mod stream;
mod thread;
mod vgpu;
mod wait;
mod warp;

pub use config::VgpuConfig;
pub use error::CpuError;
pub(crate) use reads::record_waited;
#[doc(hidden)]
pub use reads::{ProbeOther, ProbePointer, ReadProbe};
pub use reads::{TileRead, coords, waited_text};
pub use report::{
    CtaReport, DeadlockReport, HangReport, QueuedKernel, SemaphoreWait, StreamReport, ThreadGroup, ThreadWait,
};
pub use stream::{EventId, StreamId};
pub use vgpu::{CpuLaunch, KernelEntry, VgpuStats, VirtualGpu};
