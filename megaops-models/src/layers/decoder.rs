//! A decoder layer: `h = x + attn(norm₁(x))`, `out = h + mlp(norm₂(h))`, with each residual
//! add fused into the RMSNorm that follows it.
//!
//! ```text
//! input ─┬─ add_rmsnorm ─► xn ─ attention ─► attn_out ─┬─ add_rmsnorm ─► mlp.xn ─ mlp ─► output
//! (prev) └─ residual ────► res_in ─────────────────────┴─────────────► res_mid ─────────► residual
//! ```
//!
//! With norm fusion on ([`LayerActivations::set_norm_fusion`], a plan's `fuse_norms`), each
//! add + RMSNorm of the decode path runs inside the block's first projection where the
//! planner fuses it (`gemv::add_rmsnorm_gemv` for QKV, `gemv::add_rmsnorm_gate_up_silu`
//! for gate/up: every CTA normalises its own copy of the rows), which takes two kernels
//! out of the layer; otherwise it is `norm::add_rmsnorm`. The layer's output is the pair
//! (MLP output, residual stream `res_mid`), which the next layer's first add + RMSNorm (or
//! the final norm) sums; layer 0 takes the embedding as both its input and its residual (a
//! plain RMSNorm, never fused).
//!
//! With the norms behind the projections ([`DecoderLayer::forward_norm_after`], a plan's
//! `norm_after`, on by default) the output projection runs the MLP's add + RMSNorm behind
//! its output, and the down projection the next layer's (or the final) one, writing the
//! next layer's normalised input and residual directly (`gemv::gemv_add_rmsnorm`): five
//! kernels a layer on the decode path (QKV, attention, O, gate/up, down) and no norm
//! between them, where the planner fuses (`gemv::plan::fuse_norm_after`).

use super::add_norm::{AddNormInput, NormAfter};
use super::attention::{Attention, AttentionActivations, AttentionDims, AttentionKind, KvCache, Positions};
use super::layout::PassLayout;
use super::mlp::{DECODE_MAX_M, Mlp, MlpActivations, MlpConfig, PREFILL_ROW_TILE};
use super::prefill_gemm::PrefillGemm;
use crate::error::Result;
use crate::tune::{Site, SiteChoice, StepPlan};
use megaops::{Device, DynRows, LaunchOptions, LaunchTarget, Tensor, Tiled, bf16};
use megaops_kernels::gemv::plan::{self, NormAfterScratch};
use megaops_kernels::norm::rmsnorm;

/// The weights of one decoder layer (cloning shares the device weights).
#[derive(Clone)]
pub struct DecoderLayer {
    /// `input_layernorm.weight`, `[h]`.
    input_norm: Tensor<bf16>,
    /// `self_attn.*`.
    attn: Attention,
    /// `mlp.*`, with `post_attention_layernorm.weight` as its norm weight.
    mlp: Mlp,
    eps: f32,
}

impl DecoderLayer {
    /// A layer from its parts; `mlp`'s norm weight is the post-attention norm.
    pub fn new(input_norm: Tensor<bf16>, attn: Attention, mlp: Mlp) -> DecoderLayer {
        let eps = mlp.config().eps;
        DecoderLayer {
            input_norm,
            attn,
            mlp,
            eps,
        }
    }

    /// The attention block.
    pub fn attention(&self) -> &Attention {
        &self.attn
    }

    /// The MLP block.
    pub fn mlp(&self) -> &Mlp {
        &self.mlp
    }

    /// `input_layernorm.weight`, `[h]`.
    pub fn input_norm(&self) -> &Tensor<bf16> {
        &self.input_norm
    }

    /// Enqueues the layer with each add + RMSNorm run behind the projection before it
    /// ([`NormAfter`]): on `embedded` (layer 0: the embedding, normalised here by a plain
    /// RMSNorm into `acts`' normed input, and its own residual), or else on the normalised
    /// input and residual the previous layer's down projection wrote into `acts`
    /// ([`LayerActivations::input_mut`]). The output projection runs the MLP's norm, and
    /// the down projection `next`, the norm of what follows the layer (the next layer's
    /// input norm, or the model's final norm), into the tensors `next` names.
    pub fn forward_norm_after(
        &self,
        on: &impl LaunchTarget,
        embedded: Option<&Tiled<bf16, DynRows>>,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut LayerActivations,
        next: NextNorm<'_>,
    ) -> Result<()> {
        let m = acts.m as u32;
        let h = self.mlp.config().hidden as u32;
        let opts = acts.norm.apply(Site::Norm, LaunchOptions::config(acts.norm_config()?));
        let res = match embedded {
            Some(x) => {
                acts.xn.rearm();
                rmsnorm::launch_with(on, &opts, x, &self.input_norm, &mut acts.xn, m, h, self.eps)?;
                x
            }
            None => &acts.res_in,
        };
        let [after_o, after_down] = &mut acts.after;
        let mid = NormAfter {
            res,
            weight: self.mlp.norm_weight(),
            xn: acts.mlp.normed_mut(),
            res_out: &mut acts.res_mid,
            eps: self.eps,
            opts: opts.clone(),
            scratch: after_o.as_mut(),
        };
        self.attn
            .forward_norm_after(on, &acts.xn, cache, pos, &mut acts.attn, mid)?;
        let out = NormAfter {
            res: &acts.res_mid,
            weight: next.weight,
            xn: next.xn,
            res_out: next.res_out,
            eps: self.eps,
            opts,
            scratch: after_down.as_mut(),
        };
        Ok(self.mlp.forward_norm_after(on, &mut acts.mlp, out)?)
    }

    /// Enqueues the layer on `input` (the previous layer's MLP output, or the embedding)
    /// and `residual` (the previous layer's residual stream; `None` for layer 0, whose
    /// residual is `input` itself), writing `acts.output()` and `acts.residual()`.
    pub fn forward(
        &self,
        on: &impl LaunchTarget,
        input: &Tiled<bf16, DynRows>,
        residual: Option<&Tiled<bf16, DynRows>>,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut LayerActivations,
    ) -> Result<()> {
        let m = acts.m as u32;
        let h = self.mlp.config().hidden as u32;
        let opts = acts.norm.apply(Site::Norm, LaunchOptions::config(acts.norm_config()?));
        let res = match residual {
            Some(res) => {
                let norm = AddNormInput {
                    x: input,
                    res,
                    weight: &self.input_norm,
                    res_out: &mut acts.res_in,
                    eps: self.eps,
                    opts: opts.clone(),
                };
                self.attn
                    .forward_add_norm(on, norm, &mut acts.xn, cache, pos, &mut acts.attn)?;
                &acts.res_in
            }
            None => {
                acts.xn.rearm();
                rmsnorm::launch_with(on, &opts, input, &self.input_norm, &mut acts.xn, m, h, self.eps)?;
                self.attn.forward(on, &acts.xn, cache, pos, &mut acts.attn)?;
                input
            }
        };
        let norm = AddNormInput {
            x: acts.attn.output(),
            res,
            weight: self.mlp.norm_weight(),
            res_out: &mut acts.res_mid,
            eps: self.eps,
            opts,
        };
        Ok(self.mlp.forward_add_norm(on, norm, &mut acts.mlp)?)
    }
}

/// Where the add + RMSNorm that follows a layer writes when the layer's down projection
/// runs it ([`DecoderLayer::forward_norm_after`]): the next layer's normalised input and
/// residual stream ([`LayerActivations::input_mut`]), or the model's final norm.
pub struct NextNorm<'a> {
    /// The norm weight, `[h]`.
    pub weight: &'a Tensor<bf16>,
    /// The normalised rows, `[m, h]`.
    pub xn: &'a mut Tiled<bf16, DynRows>,
    /// The residual stream out, `[m, h]`.
    pub res_out: &'a mut Tiled<bf16, DynRows>,
}

/// The `rmsnorm` / `add_rmsnorm` config (the two share one list) for `m` rows: one row
/// per CTA (`BM = 1`) up to [`DECODE_MAX_M`] rows, four (`BM = 4`) above.
pub(crate) fn norm_config(m: usize) -> megaops::Result<usize> {
    let bm = if m <= DECODE_MAX_M { 1 } else { 4 };
    super::config_where("rmsnorm", rmsnorm::CONSTS, &format!("BM = {bm}"), |c| c.BM == bm)
}

/// The norms' config for `m` rows under `choice`: its config where it sets one, else
/// [`norm_config`].
fn chosen_norm_config(choice: &SiteChoice, m: usize) -> megaops::Result<usize> {
    choice.config.map_or_else(|| norm_config(m), Ok)
}

/// The rows per data tile of the row-tiled tensors of a pass of `m` rows.
pub(crate) fn row_tile(m: usize) -> u32 {
    if m <= DECODE_MAX_M { 1 } else { PREFILL_ROW_TILE }
}

/// The tensors of one layer's pass of `m` rows (one set serves every other layer).
pub struct LayerActivations {
    m: usize,
    xn: Tiled<bf16, DynRows>,
    res_in: Tiled<bf16, DynRows>,
    res_mid: Tiled<bf16, DynRows>,
    attn: AttentionActivations,
    mlp: MlpActivations,
    /// The tuner's choice for both norms (unset: the defaults).
    norm: SiteChoice,
    /// Scratch of the output and down projections with the norm behind them, on the
    /// decode path ([`DecoderLayer::forward_norm_after`]; `None`: those norms run as
    /// their own kernels).
    after: [Option<NormAfterScratch>; 2],
}

impl LayerActivations {
    /// Tensors for `m` rows, sized by `layout` (decode attention's workspace, the decode
    /// path's column tiles).
    pub fn new(
        device: &Device,
        dims: AttentionDims,
        mlp: MlpConfig,
        kind: AttentionKind,
        m: usize,
        layout: PassLayout,
        name: &str,
    ) -> Result<LayerActivations> {
        let rows = |what: &str| -> Result<Tiled<bf16, DynRows>> {
            Ok(Tiled::new(
                device,
                &[m, dims.hidden],
                DynRows(row_tile(m)),
                &format!("{name}.{what}"),
            )?)
        };
        Ok(LayerActivations {
            m,
            xn: rows("xn")?,
            res_in: rows("res_in")?,
            res_mid: rows("res_mid")?,
            attn: AttentionActivations::new(device, dims, kind, m, layout, &format!("{name}.attn"))?,
            mlp: MlpActivations::with_col_tile(device, mlp, m, layout.tiles.act)?,
            norm: SiteChoice::default(),
            after: if m <= DECODE_MAX_M && m * dims.hidden <= plan::NORM_AFTER_MAX_ELEMS as usize {
                [
                    Some(NormAfterScratch::new(device, m, dims.hidden)?),
                    Some(NormAfterScratch::new(device, m, dims.hidden)?),
                ]
            } else {
                [None, None]
            },
        })
    }

    /// The `rmsnorm` / `add_rmsnorm` config of this pass: the plan's `norm` choice where it
    /// sets one (a launch refuses one that does not exist), else the planner's
    /// ([`norm_config`]).
    pub(crate) fn norm_config(&self) -> megaops::Result<usize> {
        chosen_norm_config(&self.norm, self.m)
    }

    /// Applies a tuned plan's choices to every kernel of the layer.
    pub fn set_choices(&mut self, plan: &StepPlan) {
        self.norm = plan.site(Site::Norm);
        self.attn.set_choices([
            plan.site(Site::Qkv),
            plan.site(Site::Rope),
            plan.site(Site::Attention),
            plan.site(Site::OProj),
        ]);
        self.mlp.set_choices([plan.site(Site::GateUp), plan.site(Site::Down)]);
    }

    /// Whether both blocks may run the add + RMSNorm in front of them inside their first
    /// projection (off by default; see [`Attention::forward_add_norm`] and
    /// [`Mlp::forward_add_norm`]).
    pub fn set_norm_fusion(&mut self, device: &Device, fuse: bool) -> Result<()> {
        self.attn.set_norm_fusion(device, fuse)?;
        Ok(self.mlp.set_norm_fusion(device, fuse)?)
    }

    /// Whether the decode path's attention runs the QK-norm, RoPE and cache write itself
    /// (on by default; see [`AttentionActivations::set_rope_fusion`]).
    pub fn set_rope_fusion(&mut self, fuse: bool) {
        self.attn.set_rope_fusion(fuse);
    }

    /// Sets which GEMMs the layer's prefill projections run.
    pub fn set_prefill_gemm(&mut self, gemm: &PrefillGemm) {
        self.attn.set_prefill_gemm(gemm.clone());
        self.mlp.set_prefill_gemm(gemm.clone());
    }

    /// The layer's normalised input and its residual stream in, which the previous
    /// layer's down projection writes under [`DecoderLayer::forward_norm_after`].
    pub fn input_mut(&mut self) -> (&mut Tiled<bf16, DynRows>, &mut Tiled<bf16, DynRows>) {
        (&mut self.xn, &mut self.res_in)
    }

    /// The MLP output `[m, h]`.
    pub fn output(&self) -> &Tiled<bf16, DynRows> {
        self.mlp.output()
    }

    /// The residual stream after the attention block, `[m, h]`.
    pub fn residual(&self) -> &Tiled<bf16, DynRows> {
        &self.res_mid
    }

    /// The attention block's tensors.
    pub fn attention(&self) -> &AttentionActivations {
        &self.attn
    }

    /// The attention block's tensors, mutable (release points).
    pub fn attention_mut(&mut self) -> &mut AttentionActivations {
        &mut self.attn
    }

    /// The MLP block's tensors.
    pub fn mlp(&self) -> &MlpActivations {
        &self.mlp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_norm_site_config_overrides_the_planner() -> megaops::Result<()> {
        let planner = norm_config(1)?;
        assert_eq!(chosen_norm_config(&SiteChoice::default(), 1)?, planner);
        assert_ne!(norm_config(4096)?, planner);
        let choice = SiteChoice {
            config: Some(3),
            ..SiteChoice::default()
        };
        assert_eq!(chosen_norm_config(&choice, 1)?, 3);
        assert_eq!(chosen_norm_config(&choice, 4096)?, 3);
        Ok(())
    }
}
