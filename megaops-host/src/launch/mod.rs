//! Typed kernel launches. `#[megaops::kernel]` generates, per kernel, a launcher that
//! binds each argument through the traits here ([`AsInput`], [`AsOutput`]) and hands a
//! [`KernelLaunch`] to a [`LaunchTarget`] (a [`Stream`](crate::Stream) or an
//! [`AsyncStream`](crate::AsyncStream)). Everything a launch needs is checked here, before anything runs:
//! shapes against the kernel's annotation, tile coverage, the protocol state of each
//! `Tiled` tensor, grid/block/shared-memory limits.
//!
//! - `options`: what a caller chooses per launch ([`LaunchOptions`]).
//! - `bind`: how arguments bind to kernel parameters ([`AsInput`], [`AsOutput`]).
//! - `builder`: the launch a generated launcher assembles and checks ([`KernelLaunch`]).
//! - `prepared`: the checked launch a target runs ([`PreparedLaunch`]).
//! - `arith`, `targets`: the protocol arithmetic the checks use ([`CheckedArith`]).
//! - `target`: where launches go ([`LaunchTarget`], implemented for [`Stream`](crate::Stream)).

mod arith;
mod bind;
mod builder;
mod config;
mod options;
mod prepared;
mod target;
mod targets;

pub use arith::{CheckedArith, OverflowSite, checked_op};
pub use bind::{AsInput, AsOutput, Binding, Declared};
pub use builder::{KernelLaunch, TileDim};
pub use config::{ConfigInfo, ConfigValue, config_where};
pub use options::{LaunchOptions, ReleaseNext, Remap, padded_smem};
pub use prepared::{Access, PreparedLaunch, TiledHandle};
pub use target::LaunchTarget;
pub(crate) use target::sealed;
