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
    /// Shapes disagree; the message names both sides.
    #[error("{0}")]
    Shape(String),
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
    #[error("{0}")]
    Tiling(String),
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
