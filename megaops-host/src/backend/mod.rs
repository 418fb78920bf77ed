//! The two ways to run kernels: a CUDA GPU through cudarc, or the CPU backend's virtual
//! GPU. Everything above this module is backend-agnostic.

pub(crate) mod cpu;
pub(crate) mod cuda;

/// Which backend a [`crate::Device`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// An NVIDIA GPU.
    Cuda,
    /// The CPU backend (virtual GPU).
    Cpu,
}
