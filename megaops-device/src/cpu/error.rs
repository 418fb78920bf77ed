//! Errors of the virtual GPU.

use std::fmt;

use super::reads::TileRead;
use super::report::{DeadlockReport, HangReport, Xyz};
use super::stream::StreamId;
use crate::Dim3;

/// Why a virtual-GPU call failed.
///
/// Errors from a run ([`Self::KernelPanic`], [`Self::StackOverflow`],
/// [`Self::IllegalSync`], [`Self::OutOfTileRead`], [`Self::HostOpPanic`],
/// [`Self::Deadlock`], [`Self::Hang`], [`Self::Resource`]) discard all pending work of the virtual GPU, which then accepts new
/// work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// The [`super::VgpuConfig`] describes no usable device.
    InvalidConfig(String),
    /// A launch was rejected before it was enqueued (block or grid size, shared memory).
    InvalidLaunch {
        /// Kernel name.
        kernel: String,
        /// Which limit it broke.
        message: String,
    },
    /// A kernel thread panicked (a bounds check, an `unwrap`, [`super::hooks::trap`]).
    KernelPanic {
        /// Kernel name.
        kernel: String,
        /// Block index of the thread.
        block: Dim3,
        /// Thread index.
        thread: Dim3,
        /// The panic message.
        message: String,
    },
    /// A kernel thread overflowed its coroutine stack ([`super::VgpuConfig::stack_size`]):
    /// its local arrays and calls need more. Detected by the canary below every stack
    /// (see [`super::VgpuConfig::stack_size`]); the threads whose stacks it may have
    /// clobbered are leaked rather than run again.
    StackOverflow {
        /// Kernel name.
        kernel: String,
        /// Block index of the thread.
        block: Dim3,
        /// Thread index.
        thread: Dim3,
        /// The stack size it overflowed, in bytes.
        stack_size: usize,
    },
    /// A kernel misused a barrier or warp collective in a way that can never complete
    /// (a lane exited while others wait for it in `warp_exchange`, mismatched barrier
    /// counts, different types exchanged under one mask).
    IllegalSync {
        /// Kernel name.
        kernel: String,
        /// Block index of the thread that made the problem visible.
        block: Dim3,
        /// Its thread index.
        thread: Dim3,
        /// What went wrong.
        message: String,
    },
    /// A host operation ([`super::VirtualGpu::enqueue`]) panicked.
    HostOpPanic {
        /// The stream it ran on.
        stream: StreamId,
        /// The panic message.
        message: String,
    },
    /// A kernel thread read a synchronised input outside the data tiles it waited for
    /// ([`super::VgpuConfig::check_reads`]).
    OutOfTileRead(Box<TileRead>),
    /// No thread can run and work remains.
    Deadlock(DeadlockReport),
    /// Threads keep running without progress.
    Hang(HangReport),
    /// A coroutine stack or shared memory could not be allocated.
    Resource(String),
    /// A stream or event of another virtual GPU.
    UnknownId(String),
    /// `synchronize*` was called from inside a kernel or a host operation.
    Reentrant,
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::InvalidConfig(m) => write!(f, "invalid virtual GPU configuration: {m}"),
            CpuError::InvalidLaunch { kernel, message } => write!(f, "invalid launch of kernel `{kernel}`: {message}"),
            CpuError::KernelPanic {
                kernel,
                block,
                thread,
                message,
            } => write!(
                f,
                "kernel `{kernel}` panicked in block {}, thread {}: {message}",
                Xyz(*block),
                Xyz(*thread)
            ),
            CpuError::StackOverflow {
                kernel,
                block,
                thread,
                stack_size,
            } => write!(
                f,
                "kernel `{kernel}`, block {}, thread {}: stack overflow in a kernel thread: raise \
                 VgpuConfig::stack_size (now {} KiB)",
                Xyz(*block),
                Xyz(*thread),
                stack_size / 1024
            ),
            CpuError::IllegalSync {
                kernel,
                block,
                thread,
                message,
            } => write!(
                f,
                "kernel `{kernel}`, block {}, thread {}: {message}",
                Xyz(*block),
                Xyz(*thread)
            ),
            CpuError::HostOpPanic { stream, message } => write!(f, "host operation on {stream} panicked: {message}"),
            CpuError::OutOfTileRead(r) => r.fmt(f),
            CpuError::Deadlock(r) => r.fmt(f),
            CpuError::Hang(r) => r.fmt(f),
            CpuError::Resource(m) => write!(f, "virtual GPU out of resources: {m}"),
            CpuError::UnknownId(m) => write!(f, "{m}"),
            CpuError::Reentrant => {
                f.write_str("synchronize called from inside a kernel or host operation running on the virtual GPU")
            }
        }
    }
}

impl std::error::Error for CpuError {}
