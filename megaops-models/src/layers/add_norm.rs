//! The residual add and RMSNorm in front of a block of a decoder layer
//! (`h' = x + h; xn = rmsnorm(h') · w`), which the block either runs fused into its first
//! projection (`gemv::add_rmsnorm_gemv` / `add_rmsnorm_gate_up_silu`, where the planner's
//! `gemv::plan::fuse_add_norm` allows) or as its own `norm::add_rmsnorm` kernel.

use megaops::launch::AsInput;
use megaops::{DynRows, LaunchOptions, LaunchTarget, R2, Result, Tensor, Tiled, bf16};
use megaops_kernels::gemv::plan;
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
