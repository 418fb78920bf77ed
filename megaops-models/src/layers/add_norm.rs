//! The residual add and RMSNorm in front of a block of a decoder layer
//! (`h' = x + h; xn = rmsnorm(h') · w`), which the block either runs fused into its first
//! projection (`gemv::add_rmsnorm_gemv` / `add_rmsnorm_gate_up_silu`, where the planner's
//! `gemv::plan::fuse_add_norm` allows) or as its own `norm::add_rmsnorm` kernel; and
//! [`NormAfter`], the same norm run behind the previous block's last projection.

use megaops::launch::AsInput;
use megaops::{Device, DynRows, LaunchOptions, LaunchTarget, R2, Result, Tensor, Tiled, bf16};
use megaops_kernels::gemv::{NORM_PROLOGUE_MAX_ELEMS, plan};
use megaops_kernels::norm::add_rmsnorm;

/// What the add + RMSNorm in front of a block reads and writes.
pub struct AddNormInput<'a, X: ?Sized> {
    /// The previous sublayer's output, `[m, h]`.
    pub x: &'a X,
    /// The residual stream in, `[m, h]`.
    pub res: &'a Tiled<bf16, DynRows>,
    /// The norm weight, `[h]`.
    pub weight: &'a Tensor<bf16>,
    /// The residual stream out, `bf16(x + res)`; re-armed by whichever kernel writes it.
    pub res_out: &'a mut Tiled<bf16, DynRows>,
    /// The norm's epsilon.
    pub eps: f32,
    /// Launch options of `add_rmsnorm` when it runs as its own kernel.
    pub opts: LaunchOptions,
}

impl<'a, X: AsInput<bf16, R2> + ?Sized> AddNormInput<'a, X> {
    /// Re-arms `res_out` and `normed` and launches `add_rmsnorm` over `m` rows of `h`,
    /// writing the normalised rows into `normed`.
    pub(crate) fn launch(
        self,
        on: &impl LaunchTarget,
        normed: &mut Tiled<bf16, DynRows>,
        m: u32,
        h: u32,
    ) -> Result<()> {
        self.res_out.rearm();
        normed.rearm();
        add_rmsnorm::launch_with(
            on,
            &self.opts,
            self.x,
            self.res,
            self.weight,
            normed,
            self.res_out,
            m,
            h,
            self.eps,
        )
    }

    /// Re-arms `res_out` and hands the tensors to a fused projection of the planner.
    pub(crate) fn fused(self) -> plan::AddNorm<'a, X, Tiled<bf16, DynRows>, Tiled<bf16, DynRows>> {
        self.res_out.rearm();
        plan::AddNorm {
            x: self.x,
            res: self.res,
            weight: self.weight,
            res_out: self.res_out,
            eps: self.eps,
        }
    }
}

/// The add + RMSNorm that follows a block (the next block's norm) when the block's last
/// projection may run it behind its output (`gemv::gemv_add_rmsnorm`, where the planner's
/// `gemv::plan::fuse_norm_after` allows; otherwise `norm::add_rmsnorm` after the
/// projection): the residual it adds to the block's output and what it writes.
pub struct NormAfter<'a> {
    /// The residual stream in, `[m, h]`.
    pub res: &'a Tiled<bf16, DynRows>,
    /// The norm weight, `[h]`.
    pub weight: &'a Tensor<bf16>,
    /// The normalised rows, the next block's input; re-armed by whichever kernel writes it.
    pub xn: &'a mut Tiled<bf16, DynRows>,
    /// The residual stream out, `bf16(block output + res)`; re-armed likewise.
    pub res_out: &'a mut Tiled<bf16, DynRows>,
    /// The norm's epsilon.
    pub eps: f32,
    /// Launch options of `add_rmsnorm` when it runs as its own kernel.
    pub opts: LaunchOptions,
    /// The fused kernel's scratch; `None` runs the norm as its own kernel.
    pub scratch: Option<&'a mut plan::NormAfterScratch>,
}

impl<'a> NormAfter<'a> {
    /// The norm as its own kernel on the block's output `x`: `add_rmsnorm` over `m` rows
    /// of `h`.
    pub(crate) fn launch_after<X: AsInput<bf16, R2> + ?Sized>(
        self,
        on: &impl LaunchTarget,
        x: &X,
        m: u32,
        h: u32,
    ) -> Result<()> {
        let NormAfter {
            res,
            weight,
            xn,
            res_out,
            eps,
            opts,
            ..
        } = self;
        AddNormInput {
            x,
            res,
            weight,
            res_out,
            eps,
            opts,
        }
        .launch(on, xn, m, h)
    }

    /// Re-arms `xn` and `res_out` and hands the tensors and the scratch to the planner's
    /// fused projection (`plan::linear_norm_after_with`); `None` when the norm has no
    /// scratch.
    #[allow(clippy::type_complexity)]
    pub(crate) fn fused(
        self,
    ) -> Option<(
        plan::NormAfter<'a, Tiled<bf16, DynRows>, Tiled<bf16, DynRows>, Tiled<bf16, DynRows>>,
        &'a mut plan::NormAfterScratch,
    )> {
        let NormAfter {
            res,
            weight,
            xn,
            res_out,
            eps,
            scratch,
            ..
        } = self;
        let scratch = scratch?;
        xn.rearm();
        res_out.rearm();
        Some((
            plan::NormAfter {
                res,
                weight,
                xn,
                res_out,
                eps,
            },
            scratch,
        ))
    }
}

/// Whether a block's first projection runs fused with the add + RMSNorm in front of it,
/// and the scratch the fused kernel needs: allocated the first time fusion is turned on
/// (a pass that never fuses holds none) and kept after it is turned off, since a captured
/// graph may still read it.
pub(crate) struct FusedNorm {
    /// Elements of the fused kernel's scratch; `None` where the fused kernel cannot run
    /// (the prefill path, or `m · h` above `gemv::NORM_PROLOGUE_MAX_ELEMS`).
    len: Option<usize>,
    scratch: Option<Tensor<bf16>>,
    on: bool,
}

impl FusedNorm {
    /// Fusion off; `len` elements of scratch when it is turned on (`None`: never fuses).
    pub(crate) fn new(len: Option<usize>) -> FusedNorm {
        FusedNorm {
            len,
            scratch: None,
            on: false,
        }
    }

    /// Fusion off, for a projection of `n` output columns over `m × k` inputs: it may fuse
    /// on the decode path (`gemv`) when `m · k ≤ gemv::NORM_PROLOGUE_MAX_ELEMS`, with
    /// `plan::add_norm_scratch_len(m, n, k)` elements of scratch.
    pub(crate) fn for_projection(gemv: bool, m: usize, n: usize, k: usize) -> FusedNorm {
        FusedNorm::new((gemv && m * k <= NORM_PROLOGUE_MAX_ELEMS as usize).then(|| plan::add_norm_scratch_len(m, n, k)))
    }

    /// Turns fusion on or off, allocating the scratch on `device` when it is first on.
    pub(crate) fn set(&mut self, device: &Device, on: bool) -> Result<()> {
        if on
            && self.scratch.is_none()
            && let Some(len) = self.len
        {
            self.scratch = Some(Tensor::zeros(device, &[len])?);
        }
        self.on = on;
        Ok(())
    }

    /// The scratch, when fusion is on and the fused kernel can run.
    pub(crate) fn active(&mut self) -> Option<&mut Tensor<bf16>> {
        if self.on { self.scratch.as_mut() } else { None }
    }

    /// Whether the scratch has been allocated.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> bool {
        self.scratch.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::FusedNorm;
    use megaops::{Device, VgpuConfig};

    #[test]
    fn fused_norm_scratch_is_allocated_when_fusion_is_first_on_and_kept() {
        let device = Device::cpu(VgpuConfig::default()).expect("cpu device");
        let mut norm = FusedNorm::new(Some(64));
        assert!(!norm.allocated() && norm.active().is_none(), "off: no scratch");
        norm.set(&device, false).expect("off");
        assert!(!norm.allocated(), "turning it off allocates nothing");
        norm.set(&device, true).expect("on");
        assert_eq!(norm.active().map(|t| t.numel()), Some(64));
        norm.set(&device, false).expect("off again");
        assert!(norm.active().is_none(), "off: not used");
        assert!(norm.allocated(), "kept for graphs captured while it was on");

        let mut never = FusedNorm::new(None);
        never.set(&device, true).expect("on");
        assert!(
            never.active().is_none() && !never.allocated(),
            "no fused kernel: no scratch"
        );
    }
}
