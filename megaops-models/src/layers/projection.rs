//! A decoder layer's four weight projections as data — their site, weight shape and the
//! GEMV planner's placement on the decode path — and the one launch of each: a GEMV on the
//! decode path, the prefill GEMM otherwise. The layers launch through it and the tuner
//! builds its knob space from the same shapes.

use super::add_norm::NormAfter;
use super::attention::AttentionDims;
use super::mlp::DECODE_MAX_M;
use super::prefill_gemm::PrefillGemm;
use crate::tune::{Site, SiteChoice};
use megaops::launch::{AsInput, AsOutput, ConfigInfo, LaunchTarget};
use megaops::subkernel::cublaslt::Shaped;
use megaops::{Error, LaunchOptions, R2, ReleaseNext, Result, Tensor, bf16};
use megaops_kernels::gemv::plan::{self, Placement, SplitWorkspace};
use megaops_kernels::gemv::{add_rmsnorm_gate_up_silu, add_rmsnorm_gemv, gate_up_silu, gemv};

/// The placement the GEMV planner plans `site`'s decode GEMV for (unless the tuned plan
/// sets one): the O and down projections as if alone (bounded configs, two CTAs per SM);
/// the QKV and gate/up projections and the LM head beside their producer, which is still
/// running when the GEMV starts under overlap (unbounded configs, one CTA per SM, that
/// leave the producer room).
pub fn decode_placement(site: Site) -> Placement {
    match site {
        Site::OProj | Site::Down => Placement::Alone,
        _ => Placement::BesideProducer,
    }
}

/// One weight projection of a decoder layer: `y = x · wᵀ` with `w` `[row_groups · n, k]`.
/// The gate/up projection has two row groups, `[w_gate; w_up]`; its decode GEMV fuses
/// `silu(gate) · up` into `n` output columns, its prefill GEMM writes all `2·n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Projection {
    /// The site whose knobs it takes.
    pub site: Site,
    /// Row groups of the weight: 1, or 2 for gate/up.
    pub row_groups: usize,
    /// Output columns of the decode GEMV (per row group).
    pub n: usize,
    /// Input columns, the reduction length.
    pub k: usize,
}

impl Projection {
    /// The merged QKV projection, `[q_dim + 2·kv_dim, hidden]`.
    pub fn qkv(dims: &AttentionDims) -> Projection {
        Projection {
            site: Site::Qkv,
            row_groups: 1,
            n: dims.qkv_dim(),
            k: dims.hidden,
        }
    }

    /// The attention output projection, `[hidden, q_dim]`.
    pub fn o(dims: &AttentionDims) -> Projection {
        Projection {
            site: Site::OProj,
            row_groups: 1,
            n: dims.hidden,
            k: dims.q_dim(),
        }
    }

    /// The MLP's gate/up projection, `[2·inter, hidden]`.
    pub fn gate_up(hidden: usize, inter: usize) -> Projection {
        Projection {
            site: Site::GateUp,
            row_groups: 2,
            n: inter,
            k: hidden,
        }
    }

    /// The MLP's down projection, `[hidden, inter]`.
    pub fn down(hidden: usize, inter: usize) -> Projection {
        Projection {
            site: Site::Down,
            row_groups: 1,
            n: hidden,
            k: inter,
        }
    }

    /// A layer's projections in step order: QKV, O, gate/up, down.
    pub fn of_layer(dims: &AttentionDims, inter: usize) -> [Projection; 4] {
        [
            Projection::qkv(dims),
            Projection::o(dims),
            Projection::gate_up(dims.hidden, inter),
            Projection::down(dims.hidden, inter),
        ]
    }

    /// Rows of the weight: the prefill GEMM's output columns.
    pub fn weight_rows(&self) -> usize {
        self.row_groups * self.n
    }

    /// The configs of its decode GEMV kernel (`gemv`, or `gate_up_silu` for gate/up; the
    /// split-K kernels share them).
    pub fn gemv_configs(&self) -> &'static [ConfigInfo] {
        if self.row_groups == 2 {
            gate_up_silu::CONFIGS
        } else {
            gemv::CONFIGS
        }
    }

    /// [`decode_placement`] of its site.
    pub fn decode_placement(&self) -> Placement {
        decode_placement(self.site)
    }

    /// Launches the projection of `m` rows of `x` into `y` with `choice`'s knobs (named
    /// after the site): for `m ≤ DECODE_MAX_M` the GEMV planner's kernel for
    /// [`Projection::decode_placement`] (`choice`'s config, split and placement applied;
    /// split-K only with `ws`), else `gemm` with `choice`'s `matmul` config (or
    /// `prefill_config()`) and chunk count, releasing its successor at `release`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        on: &impl LaunchTarget,
        choice: SiteChoice,
        x: &(impl AsInput<bf16, R2> + Shaped + ?Sized),
        w: &Tensor<bf16>,
        y: &mut (impl AsOutput<bf16, R2> + Shaped + ?Sized),
        ws: Option<&mut SplitWorkspace>,
        gemm: &PrefillGemm,
        release: ReleaseNext,
        prefill_config: impl FnOnce() -> usize,
        m: usize,
    ) -> Result<()> {
        let (n, k) = (self.n as u32, self.k as u32);
        if m <= DECODE_MAX_M {
            let opts = choice.apply(self.site, LaunchOptions::default());
            let (pick, place) = (choice.pick(), self.decode_placement());
            let m = m as u32;
            if self.row_groups == 2 {
                plan::gate_up_with(on, &opts, pick, x, w, y, ws, m, n, k, place)?;
            } else {
                plan::linear_with(on, &opts, pick, x, w, y, ws, m, n, k, place)?;
            }
            return Ok(());
        }
        let config = choice.config.unwrap_or_else(prefill_config);
        let opts = choice.apply(self.site, LaunchOptions::config(config).release_next(release));
        let rows = self.weight_rows() as u32;
        gemm.linear(on, &opts, choice.chunks, x, w, y, (m as u32, rows, k))
    }
}

impl Projection {
    /// The configs of its decode GEMV with the add + RMSNorm fused in front
    /// (`add_rmsnorm_gemv`, `add_rmsnorm_gate_up_silu`).
    fn fused_configs(&self) -> &'static [ConfigInfo] {
        if self.row_groups == 2 {
            add_rmsnorm_gate_up_silu::CONFIGS
        } else {
            add_rmsnorm_gemv::CONFIGS
        }
    }

    /// Whether its decode GEMV of `m` rows with `choice` runs fused with the add + RMSNorm
    /// in front ([`plan::fuse_add_norm`]) on `sms` SMs.
    pub(crate) fn fuses_add_norm(&self, choice: SiteChoice, m: usize, sms: u32) -> Result<bool> {
        let (rg, n, k) = (self.row_groups as u32, self.n as u32, self.k as u32);
        let place = self.decode_placement();
        let fused = plan::fuse_add_norm(
            self.gemv_configs(),
            self.fused_configs(),
            choice.pick(),
            rg,
            m as u32,
            n,
            k,
            sms,
            place,
        )?;
        Ok(fused.is_some())
    }

    /// Launches its decode GEMV of `m` rows with the add + RMSNorm `norm` fused in front,
    /// where [`Projection::fuses_add_norm`] said so; `scratch` holds
    /// [`plan::add_norm_scratch_len`] elements.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_add_norm<X, R, O>(
        &self,
        on: &impl LaunchTarget,
        choice: SiteChoice,
        norm: plan::AddNorm<'_, X, R, O>,
        w: &Tensor<bf16>,
        y: &mut (impl AsOutput<bf16, R2> + ?Sized),
        scratch: &mut Tensor<bf16>,
        m: usize,
    ) -> Result<()>
    where
        X: AsInput<bf16, R2> + ?Sized,
        R: AsInput<bf16, R2> + ?Sized,
        O: AsOutput<bf16, R2> + ?Sized,
    {
        let opts = choice.apply(self.site, LaunchOptions::default());
        let (pick, place) = (choice.pick(), self.decode_placement());
        let (m, n, k) = (m as u32, self.n as u32, self.k as u32);
        let launched = if self.row_groups == 2 {
            plan::gate_up_add_norm_with(on, &opts, pick, norm, w, y, scratch, m, n, k, place)?
        } else {
            plan::linear_add_norm_with(on, &opts, pick, norm, w, y, scratch, m, n, k, place)?
        };
        launched.map(|_| ()).ok_or_else(|| {
            Error::Internal(format!(
                "{}: the add + RMSNorm was planned fused but the planner declined",
                self.site.name()
            ))
        })
    }
}

impl Projection {
    /// Launches its decode GEMV of `m` rows of `x` (one row group) with the add + RMSNorm
    /// `norm` behind it (`gemv::gemv_add_rmsnorm`) when `norm` has scratch and the planner
    /// fuses it ([`plan::fuse_norm_after`], with the split-K limit the unfused projection
    /// has: `split_k`) and returns `Ok(None)`; otherwise launches nothing and hands `norm`
    /// back, for the projection and the norm as two kernels.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_norm_after<'a>(
        &self,
        on: &impl LaunchTarget,
        choice: SiteChoice,
        x: &(impl AsInput<bf16, R2> + ?Sized),
        w: &Tensor<bf16>,
        norm: NormAfter<'a>,
        split_k: bool,
        m: usize,
    ) -> Result<Option<NormAfter<'a>>> {
        let sms = on.device().sm_count();
        let (mu, n, k) = (m as u32, self.n as u32, self.k as u32);
        let max_splits = if split_k { plan::MAX_SPLITS } else { 1 };
        let (pick, place) = (choice.pick(), self.decode_placement());
        if self.row_groups != 1
            || m > DECODE_MAX_M
            || norm.scratch.is_none()
            || plan::fuse_norm_after(pick, mu, n, k, sms, max_splits, place)?.is_none()
        {
            return Ok(Some(norm));
        }
        let (after, scratch) = norm
            .fused()
            .ok_or_else(|| Error::Internal("checked above: the norm has scratch".into()))?;
        let launch_opts = choice.apply(self.site, LaunchOptions::default());
        plan::linear_norm_after_with(
            on,
            &launch_opts,
            pick,
            x,
            w,
            after,
            scratch,
            (mu, n, k),
            max_splits,
            place,
        )?
        .ok_or_else(|| {
            Error::Internal(format!(
                "{}: the add + RMSNorm behind it was planned fused but the planner declined",
                self.site.name()
            ))
        })?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layers_projections_have_its_weight_shapes() {
        let dims = AttentionDims {
            hidden: 1024,
            hq: 16,
            hkv: 8,
            head_dim: 128,
            qk_norm: true,
            eps: 1e-6,
        };
        let shapes: Vec<(Site, usize, usize)> = Projection::of_layer(&dims, 3072)
            .iter()
            .map(|p| (p.site, p.weight_rows(), p.k))
            .collect();
        assert_eq!(
            shapes,
            [
                (Site::Qkv, 4096, 1024),
                (Site::OProj, 1024, 2048),
                (Site::GateUp, 6144, 1024),
                (Site::Down, 1024, 3072),
            ]
        );
        let gate_up = Projection::gate_up(1024, 3072);
        assert_eq!(
            (gate_up.n, gate_up.gemv_configs().len()),
            (3072, gate_up_silu::CONFIGS.len())
        );
        assert_eq!(Projection::down(1024, 3072).gemv_configs().len(), gemv::CONFIGS.len());
        // The O and down GEMVs are planned alone, the others beside their producer.
        let placements: Vec<(Site, Placement)> = Projection::of_layer(&dims, 3072)
            .iter()
            .map(|p| (p.site, p.decode_placement()))
            .collect();
        assert_eq!(
            placements,
            [
                (Site::Qkv, Placement::BesideProducer),
                (Site::OProj, Placement::Alone),
                (Site::GateUp, Placement::BesideProducer),
                (Site::Down, Placement::Alone),
            ]
        );
        assert_eq!(decode_placement(Site::LmHead), Placement::BesideProducer);
    }
}
