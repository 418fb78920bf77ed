//! [`LaunchTarget`]: where checked launches go; a plain [`Stream`] runs them in order.

use super::PreparedLaunch;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::order;
use crate::stream::Stream;

/// Where launches go: a [`Stream`], or an `AsyncStream` that spreads them over several.
/// Sealed: the protocol state a target keeps (ordering, hazards, captures) is this
/// crate's to maintain.
pub trait LaunchTarget: sealed::Sealed {
    /// The device.
    fn device(&self) -> &Device;
    /// Runs a fully checked launch.
    fn submit(&self, launch: PreparedLaunch) -> Result<u32>;
    /// Whether a subkernel of one chunk runs on the launch's own stream here
    /// (`AsyncOptions::one_chunk_on_lane`); a plain `Stream` runs no subkernels.
    fn one_chunk_on_lane(&self) -> bool {
        false
    }
}

pub(crate) mod sealed {
    /// Implemented by the crate's launch targets only.
    pub trait Sealed {}
}

impl sealed::Sealed for Stream {}

impl LaunchTarget for Stream {
    fn device(&self) -> &Device {
        Stream::device(self)
    }

    fn submit(&self, mut launch: PreparedLaunch) -> Result<u32> {
        if launch.partition {
            return Err(Error::launch(
                launch.kernel,
                "asked for an SM partition, but a plain Stream has none (use an AsyncStream with one)",
            ));
        }
        if launch.side.is_some() {
            return Err(Error::launch(
                launch.kernel,
                "a subkernel runs its chunks on side streams, which a plain Stream does not have: launch it on an \
                 AsyncStream",
            ));
        }
        if let Some(why) = launch.unreplayed.first() {
            return Err(Error::Tiling {
                kind: crate::error::TilingErrorKind::NotYetReplayed,
                kernel: Some(launch.kernel.to_string()),
                tensor: None,
                message: why.clone(),
            });
        }
        order::order_on(self, &launch.uses, self.key())?;
        let id = launch.ctx.launch_id;
        launch.note.stream = format!("stream #{}", self.id());
        self.device().notes().insert(id, launch.note.clone());
        let event = launch.launch_on(self)?;
        order::record(&launch.uses, self.key(), &event);
        Ok(id)
    }
}
