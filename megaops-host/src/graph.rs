//! [`Graph`]: a captured AsyncStream program, replayable with one launch.

use crate::async_stream::{AsyncStream, CpuOp};
use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{CudaContext as _, Error, Result};
use std::sync::Arc;

/// A replayable program recorded by [`AsyncStream::capture`]: a CUDA graph on a GPU, a
/// recorded launch list on the CPU backend. It keeps every buffer it uses alive.
pub struct Graph {
    device: Device,
    body: GraphBody,
    _buffers: Vec<Arc<Buffer>>,
}

pub(crate) enum GraphBody {
    Cuda(cudarc::driver::CudaGraph),
    Cpu(Vec<CpuOp>),
}

impl Graph {
    pub(crate) fn new(device: Device, body: GraphBody, buffers: Vec<Arc<Buffer>>) -> Graph {
        Graph {
            device,
            body,
            _buffers: buffers,
        }
    }

    /// Replays the program on `on` (the AsyncStream it was captured from, or another on
    /// the same device). Later work on `on` runs after the replay.
    pub fn launch(&self, on: &AsyncStream) -> Result<()> {
        if !on.device().same(&self.device) {
            return Err(Error::Invalid(
                "a graph replays only on the device it was captured on".into(),
            ));
        }
        match &self.body {
            GraphBody::Cuda(g) => {
                // The graph runs on the stream it was captured from: order it after all
                // of `on`'s streams, and them after it.
                let s0 = &on.streams()[0];
                for s in on.streams().iter().skip(1).chain(on.partition().map(|p| p.stream())) {
                    s0.wait_event(&s.record_marker()?)?;
                }
                g.launch().ctx(|| "launching a graph".into())?;
                on.wait_on(s0)
            }
            GraphBody::Cpu(ops) => on.replay_cpu(ops),
        }
    }

    /// Uploads the graph's resources so the first replay does not pay for it (GPU only).
    pub fn upload(&self) -> Result<()> {
        match &self.body {
            GraphBody::Cuda(g) => g.upload().ctx(|| "uploading a graph".into()),
            GraphBody::Cpu(_) => Ok(()),
        }
    }
}

use crate::launch::LaunchTarget as _;
