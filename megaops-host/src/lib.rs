//! The MegaOps host runtime.
//!
//! - [`Device`]: a CUDA GPU (through cudarc, event tracking off) or the CPU backend;
//!   [`Device::auto`] picks the GPU when there is one and says why when it does not.
//! - [`Tensor`]: typed device memory; [`Tiled`]: a tensor with a data tiling (in its type)
//!   and one semaphore per data tile.
//! - [`Stream`], [`Event`]: ordered device work; [`launch`]: the typed launch machinery
//!   `#[megaops::kernel]` generates launchers against.

mod async_stream;
mod backend;
mod buffer;
mod delayed_release;
mod device;
mod dtype;
mod dump;
mod error;

pub mod launch;
mod module;
mod mutex;
mod notes;
pub mod nvtx;
mod order;
mod param;
mod partition;
mod pinned;
mod runtime;
mod stream;
pub mod subkernel;
mod tensor;
pub mod testing;
mod tiled;
pub mod tiling;
pub mod trace;

pub use async_stream::Graph;
pub use async_stream::{AsyncOptions, AsyncStream, BeginRule, LaunchSpan, SubkernelHold};
pub use backend::BackendKind;
pub use buffer::Buffer;
pub use cudarc::driver::DeviceRepr;
pub use device::{DEFAULT_POLL_SPIN, DEFAULT_WAIT_TIMEOUT, Device, MAX_POLL_SPIN, check_poll_spin};
pub use dtype::DType;
pub use dump::{DimDump, DumpPhase, ProducerDump, SemaphoreDump, TileDump, TiledDump};
pub use error::{Error, MemoryKind, Result, SyncFailure, TilingErrorKind};
pub use launch::{LaunchOptions, LaunchTarget, ReleaseNext, Remap};
pub use megaops_device::cpu::VgpuConfig;
pub use module::PtxModule;
pub use partition::SmPartition;
pub use pinned::PinnedHost;
pub use stream::{Event, Stream};
pub use tensor::Tensor;
pub use tiled::{Phase, ProducerTiling, Tiled};
pub use tiling::{
    Chunks, DataTiling, DimSpec, DynChunks, DynGrid, DynRows, Grid, Irregular, R1, R2, R3, R4, Rows, TilesRank,
};
pub use trace::{TileEvent, Trace, TracedLaunch};
