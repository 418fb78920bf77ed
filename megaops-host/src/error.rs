//! The one error type of the host runtime. Every message carries its context: the
//! kernel, the tensor, both sides of a mismatch, the CUDA error string.

use crate::dump::SemaphoreDump;
use std::fmt;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the host runtime can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CUDA driver call failed.
    #[error("CUDA error while {context}: {source}")]
    Cuda {
        /// What was being done.
        context: String,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// No usable GPU (or driver).
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// Shapes disagree, or a shape is not supported; the message names both sides.
    #[error("{message}")]
    Shape {
        /// The kernel whose launch found it (None outside launches).
        kernel: Option<String>,
        /// The tensor or kernel parameter it concerns, where one is named.
        tensor: Option<String>,
        /// The shape expected, where there is one.
        expected: Option<Vec<usize>>,
        /// The shape found, where there is one.
        found: Option<Vec<usize>>,
        /// The whole message.
        message: String,
    },
    /// A launch configuration is invalid (grid, block, shared memory, tile config).
    #[error("cannot launch `{kernel}`: {reason}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// Why.
        reason: String,
    },
    /// A data-tiled tensor is used against its protocol (read before produced, written
    /// twice without re-arming, semaphore tensor of the wrong length, ...).
    #[error("{message}")]
    Tiling {
        /// What is wrong.
        kind: TilingErrorKind,
        /// The kernel whose launch found it (None outside launches).
        kernel: Option<String>,
        /// The `Tiled` tensor (its name), where one is concerned.
        tensor: Option<String>,
        /// The whole message.
        message: String,
    },
    /// A tile wait timed out on the GPU, or the CPU backend found every CTA waiting.
    #[error("{0}")]
    Sync(SyncFailure),
    /// The CPU backend stopped the run (kernel panic, bad launch, step limit).
    #[error("CPU backend: {0}")]
    Cpu(String),
    /// Reading or writing a file.
    #[error("{action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bad argument that fits no other category.
    #[error("{0}")]
    Invalid(String),
    /// Not enough free memory for an allocation.
    #[error("out of {memory} memory on {device}: {bytes} bytes could not be allocated")]
    OutOfMemory {
        /// Which memory: the GPU's, or host memory standing in for it (CPU backend).
        memory: MemoryKind,
        /// Bytes asked for (rounded to the allocator's size class).
        bytes: usize,
        /// The device.
        device: String,
    },
    /// An invariant of the runtime broke: a bug in MegaOps, not in the caller's code
    /// (please report it with the message).
    #[error("internal error in the MegaOps runtime: {0}")]
    Internal(String),
}

/// What an [`Error::Tiling`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TilingErrorKind {
    /// A kernel reads a `Tiled` tensor no launch has produced since it was (re)armed.
    ReadBeforeProduced,
    /// A kernel writes a `Tiled` tensor already produced in this cycle.
    AlreadyProduced,
    /// A kernel writes a `Tiled` tensor that holds complete data (rearm it first).
    HoldsCompleteData,
    /// A kernel writes a `Tiled` tensor a captured graph produces (rearm it first).
    ProducedByGraph,
    /// An eager launch reads what only a graph that has not been replayed yet produces.
    NotYetReplayed,
    /// A semaphore tensor of the wrong length for the tiling.
    SemaphoreCount,
    /// Semaphore values that are not one common epoch.
    SemaphoreValues,
    /// The data tiling itself is invalid for the shape (zero tile, bad boundaries, too
    /// many tiles, wrong number of dimension specs).
    InvalidTiling,
    /// A data tile would get more producer signals than the protocol counts.
    TooManySignals,
    /// A kernel read outside the data tiles it waited for (CPU backend check).
    OutOfTileRead,
}

/// Which memory an allocation failed in ([`Error::OutOfMemory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// GPU memory.
    Device,
    /// Host memory (the CPU backend's device memory).
    Host,
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemoryKind::Device => "device",
            MemoryKind::Host => "host",
        })
    }
}

/// One or more tile waits that could not complete, each as a readable line such as
/// `matmul CTA (3,1) waited 5.0 s on y[2] = 1 of 3 signals`, and the semaphores of every
/// live `Tiled` tensor when it happened.
///
/// `Display` writes the headline, one indented line per wait and then, after a blank
/// line, the [`SemaphoreDump`] table (`live Tiled tensors:` ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFailure {
    /// Headline (timeout or deadlock).
    pub headline: String,
    /// One line per blocked wait.
    pub waits: Vec<String>,
    /// Every live `Tiled` tensor with its semaphores, read when the failure was reported
    /// (`None` if it could not be taken).
    pub semaphores: Option<SemaphoreDump>,
}

impl SyncFailure {
    /// The semaphores of every live `Tiled` tensor when the failure was reported.
    pub fn semaphores(&self) -> Option<&SemaphoreDump> {
        self.semaphores.as_ref()
    }
}

impl fmt::Display for SyncFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.headline)?;
        for w in &self.waits {
            write!(f, "\n  {w}")?;
        }
        if let Some(dump) = &self.semaphores {
            write!(f, "\n\n{dump}")?;
        }
        Ok(())
    }
}

impl Error {
    /// Wraps a CUDA error with what was being done.
    pub fn cuda(context: impl Into<String>, source: cudarc::driver::DriverError) -> Self {
        Error::Cuda {
            context: context.into(),
            source,
        }
    }

    /// A shape error with only a message (no kernel, tensor or shapes to name).
    pub fn shape(message: impl Into<String>) -> Self {
        Error::Shape {
            kernel: None,
            tensor: None,
            expected: None,
            found: None,
            message: message.into(),
        }
    }

    /// A tiling error of `kind` with its message.
    pub fn tiling(kind: TilingErrorKind, message: impl Into<String>) -> Self {
        Error::Tiling {
            kind,
            kernel: None,
            tensor: None,
            message: message.into(),
        }
    }

    /// A launch error for `kernel`.
    pub fn launch(kernel: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Launch {
            kernel: kernel.into(),
            reason: reason.into(),
        }
    }
}

/// Adds context to CUDA results.
pub(crate) trait CudaContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> CudaContext<T> for std::result::Result<T, cudarc::driver::DriverError> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::cuda(what(), e))
    }
}
