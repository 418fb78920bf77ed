//! Per-launch knobs: tile config, CTA order, persistent CTA count, SMEM padding,
//! timeout, SM partition, release point, tracing.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::time::Duration;

/// How CTAs are mapped to kernel tiles (paper §3.1), chosen at launch without recompiling.
#[derive(Clone, Debug, Default)]
pub enum Remap {
    /// CTA `t` runs kernel tile `t`.
    #[default]
    Identity,
    /// CTA `t` runs kernel tile `(t + offset) % tiles` (e.g. local shard first in an
    /// allgather-GEMM).
    Rotate(u32),
    /// CTA `t` runs kernel tile `table[t]`; the table is a permutation of `0..tiles`.
    Table(Tensor<u32>),
}

/// When an [`AsyncStream`](crate::AsyncStream) lets the launch after this one start (the
/// deadlock-freedom rule holds each launch until the previous one has begun, paper §2.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReleaseNext {
    /// As soon as any CTA of this launch has started: the next kernel's CTAs may take SM
    /// room while this one still has CTAs to dispatch (the earliest overlap).
    #[default]
    FirstCta,
    /// Once this launch's last CTA (`blockIdx.x = gridDim.x - 1`) has started, i.e. all of
    /// its CTAs are dispatched: the next kernel only fills the room this one's last wave
    /// leaves. For a producer of several waves whose consumer's waiting CTAs would
    /// otherwise hold SM resources (shared memory, registers, thread slots) that the
    /// producer's remaining waves need.
    LastCta,
}

/// Per-launch knobs. `Default` runs the first tile config with identity order.
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// Index into the kernel's tile configs (`CONFIGS`); default 0.
    pub config: Option<usize>,
    /// CTA → kernel tile order.
    pub remap: Remap,
    /// Persistent kernels: number of CTAs (default: one per SM).
    pub ctas: Option<u32>,
    /// SMEM padding (paper §3.2): raise the dynamic shared memory so that at most this
    /// many CTAs of the kernel fit on one SM.
    pub occupancy_limit: Option<u32>,
    /// Tile-wait timeout for this launch (default: the device's).
    pub timeout: Option<Duration>,
    /// Run on the AsyncStream's SM partition (green context), e.g. for a communication
    /// kernel that must not compete with computation for SMs.
    pub partition: bool,
    /// When an AsyncStream releases the next launch (ignored by plain streams).
    pub release_next: ReleaseNext,
    /// Record this launch's kernel tiles in the device's trace log
    /// ([`Device::start_trace`](crate::Device::start_trace)); an AsyncStream with tracing on traces every launch.
    pub traced: bool,
    /// What the launch computes in the caller's terms, e.g. the model operator whose
    /// kernel it runs (`attn.qkv`): profiles ([`LaunchSpan::site`](crate::LaunchSpan)) and
    /// traces ([`TracedLaunch::label`](crate::trace::TracedLaunch::label)) show it before the
    /// kernel's name, so that two sites running one kernel and config stay apart, and a
    /// wait timeout's error names it after the kernel (`gemv (attn.qkv) CTA (3)`).
    pub site: Option<&'static str>,
}

impl LaunchOptions {
    /// Options with tile config `i`.
    pub fn config(i: usize) -> Self {
        LaunchOptions {
            config: Some(i),
            ..Default::default()
        }
    }

    /// Sets the CTA remap.
    pub fn remap(mut self, remap: Remap) -> Self {
        self.remap = remap;
        self
    }

    /// Sets the persistent CTA count.
    pub fn ctas(mut self, ctas: u32) -> Self {
        self.ctas = Some(ctas);
        self
    }

    /// Sets the occupancy limit (SMEM padding).
    pub fn occupancy_limit(mut self, c: u32) -> Self {
        self.occupancy_limit = Some(c);
        self
    }

    /// Sets the wait timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Runs the launch on the AsyncStream's SM partition.
    pub fn on_partition(mut self) -> Self {
        self.partition = true;
        self
    }

    /// Sets when an AsyncStream releases the next launch.
    pub fn release_next(mut self, when: ReleaseNext) -> Self {
        self.release_next = when;
        self
    }

    /// Records the launch's kernel tiles in the device's trace log.
    pub fn traced(mut self) -> Self {
        self.traced = true;
        self
    }

    /// Names the call site (see [`LaunchOptions::site`]).
    pub fn site(mut self, site: &'static str) -> Self {
        self.site = Some(site);
        self
    }
}

/// Dynamic shared memory that leaves room for at most `c` CTAs per SM (paper §3.2).
/// A limit of 0, or padding beyond `max_per_block`, is [`Error::Invalid`].
pub fn padded_smem(requested: u32, c: u32, smem_per_sm: u32, max_per_block: u32) -> Result<u32> {
    if c == 0 {
        return Err(Error::Invalid("occupancy limit must be at least 1".into()));
    }
    // The driver reserves 1 KiB per CTA; c + 1 CTAs must not fit.
    let per_cta = (smem_per_sm / (c + 1)).saturating_sub(1024) + 1;
    let padded = requested.max(per_cta.div_ceil(128) * 128);
    if padded > max_per_block {
        return Err(Error::Invalid(format!(
            "occupancy limit {c} needs {padded} B of shared memory per CTA, more than {max_per_block} B"
        )));
    }
    Ok(padded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smem_padding_caps_ctas_per_sm() {
        let sm = 233_472; // H100/H200: 228 KiB per SM
        for c in 1..=8u32 {
            let s = padded_smem(0, c, sm, 232_448).unwrap();
            let fit = sm / (s + 1024);
            assert!(fit <= c, "c={c}: {s} B lets {fit} CTAs fit");
            assert!(fit >= 1);
        }
        assert_eq!(padded_smem(100_000, 2, sm, 232_448).unwrap(), 100_000);
        assert!(padded_smem(0, 0, sm, 232_448).is_err());
    }
}
