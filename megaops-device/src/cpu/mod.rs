//! The CPU backend: a virtual GPU that runs MegaOps kernels, unchanged, on the host.
//!
//! Kernels compiled for the host call the device primitives of this crate, whose host
//! implementations reach the running virtual GPU through [`hooks`]. A [`VirtualGpu`] has a
//! configurable number of SMs; each admits CTAs up to the limits their block size and
//! shared memory imply; CTA threads run as cooperatively scheduled coroutines that switch
//! at barriers, warp collectives and spin-waits; CTAs of kernels launched on different
//! streams are resident at the same time; a seed picks among legal interleavings. When
//! every resident CTA is waiting, the run stops with a [`DeadlockReport`].

// Building blocks of the virtual GPU; the engine that uses them comes next.
#![allow(dead_code)]

mod barrier;
pub mod hooks;
mod rng;
mod shared;
mod vgpu;
mod wait;
mod warp;

pub use vgpu::*;
