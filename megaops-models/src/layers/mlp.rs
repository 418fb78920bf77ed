//! A SwiGLU MLP block of a Llama-3 / Qwen3 decoder layer, composed from the kernel library
//! with MegaOps: `out = down(silu(gate(rmsnorm(x))) · up(rmsnorm(x)))`.
//!
//! ```text
//! x [m, h] ─ rmsnorm ─► xn [m, h] ─ gate/up ─► (gu [m, 2·inter]) ─ silu·mul ─► act [m, inter] ─ down ─► out [m, h]
//! ```
//!
//! Every tensor between two kernels is a [`Tiled`] tensor, so on an
//! [`AsyncStream`](megaops::AsyncStream) of several streams each kernel starts as soon as the
//! data tiles it reads are ready (no kernel barrier); on `AsyncStream::serial` or a plain
//! [`Stream`](megaops::Stream) the same kernels run one after the other.
//!
//! Two paths, chosen by the number of rows `m` ([`MlpPath::for_rows`]):
//!
//! - **decode** (`m ≤` [`DECODE_MAX_M`]): `norm::rmsnorm` (`BM = 1`, one CTA per row) →
//!   `gemv::plan::gate_up`, i.e. the fused `gemv::gate_up_silu` (or its split-K variant,
//!   as the library's planner picks for the shape) → `gemv::plan::linear`, i.e. `gemv::gemv`
//!   or `gemv::gemv_splitk` for the down projection. The fused gate/up kernel is what the
//!   library offers for decode: at these `m` the block is bound by reading the weights,
//!   and fusing SiLU·mul into the gate/up GEMV saves a launch and the round trip of the
//!   `[m, 2·inter]` intermediate;
//! - **prefill** (`m >` [`DECODE_MAX_M`]): `norm::rmsnorm` (`BM = 4`, 4 rows per CTA) →
//!   `gemm::matmul` (gate/up as one GEMM with `n = 2·inter`) → `elementwise::silu_mul`
//!   (config 1) → `gemm::matmul` (down), tensor-core GEMMs with a tile config chosen for
//!   the shape ([`mlp_gemm_configs`]).
//!
//! The residual add of the decoder layer is not part of the block: in a full layer it is
//! fused into the next layer's `norm::add_rmsnorm`, which consumes [`MlpActivations::output`].
//!
//! Rounding: every kernel computes in f32 and stores bf16, so the stored intermediates
//! are bf16; [`Mlp::reference`] is an f64 reference that rounds to bf16 where the kernels
//! store (`xn`, `gu` on the prefill path, `act`), and leaves the output unrounded.
//!
//! Re-running: [`Mlp::forward`] re-arms its `Tiled` tensors (the epoch API of [`Tiled`])
//! before producing them, so it can be called again and again, and captured into a graph
//! (`AsyncStream::capture`) that is replayed with new inputs written into `x`.

use super::add_norm::{AddNormInput, FusedNorm, NormAfter};
use super::prefill_gemm::PrefillGemm;
use super::projection::Projection;
use crate::tune::SiteChoice;
use megaops::launch::AsInput;
use megaops::{
    Device, DynGrid, DynRows, Error, LaunchOptions, LaunchTarget, R2, ReleaseNext, Result, Tensor, Tiled, bf16,
};
use megaops_kernels::elementwise::silu_mul;
use megaops_kernels::gemm::{self, matmul};
use megaops_kernels::gemv::plan::{self, SplitWorkspace};
use megaops_kernels::norm::rmsnorm;

/// Largest number of rows that takes the decode (GEMV) path; more rows take the prefill
/// (GEMM) path.
pub const DECODE_MAX_M: usize = 16;

/// Rows per data tile of the row-tiled tensors on the prefill path (as the paper's
/// Figure 1): a GEMM CTA of 128 rows waits for two semaphores, a norm CTA of 4 rows
/// signals one of them.
pub const PREFILL_ROW_TILE: u32 = 64;

/// Default columns per data tile of the decode path's column-tiled tensors (`act`, the
/// gate/up output, produced in column tiles of 16–64 by the GEMV kernels; see
/// [`DecodeTiles`](super::DecodeTiles)).
pub const DECODE_COL_TILE: u32 = 128;

/// The shape of an MLP block: hidden size, intermediate size and the RMSNorm epsilon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlpConfig {
    /// Hidden size `h` (columns of the input and output).
    pub hidden: usize,
    /// Intermediate size `inter` (columns of the gate, up and `act` tensors).
    pub inter: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl MlpConfig {
    /// The MLP block of a model's `config.json`.
    pub fn of(config: &crate::config::Config) -> MlpConfig {
        MlpConfig {
            hidden: config.hidden_size,
            inter: config.intermediate_size,
            eps: config.eps(),
        }
    }

    /// A block of the given sizes with `eps = 1e-6`.
    pub fn new(hidden: usize, inter: usize) -> MlpConfig {
        MlpConfig {
            hidden,
            inter,
            eps: 1e-6,
        }
    }

    /// Bytes of the block's bf16 weights (norm weight, gate/up and down).
    pub fn weight_bytes(&self) -> usize {
        2 * (self.hidden + 3 * self.hidden * self.inter)
    }

    /// Checks the sizes the kernels need: positive, multiples of 8 (the GEMMs copy rows
    /// 16 bytes at a time), and `2·inter · hidden` within `u32` kernel arguments.
    pub fn check(&self) -> Result<()> {
        let (h, i) = (self.hidden, self.inter);
        if h == 0 || i == 0 || !h.is_multiple_of(8) || !i.is_multiple_of(8) {
            return Err(Error::shape(format!(
                "MLP block: hidden ({h}) and intermediate ({i}) sizes must be positive multiples of 8"
            )));
        }
        if 2 * i > u32::MAX as usize || h > u32::MAX as usize {
            return Err(Error::shape(format!(
                "MLP block: sizes {h}, {i} exceed u32 kernel arguments"
            )));
        }
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::Invalid(format!(
                "MLP block: eps must be finite and ≥ 0, got {}",
                self.eps
            )));
        }
        Ok(())
    }
}

/// Which kernels run a forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlpPath {
    /// `m ≤` [`DECODE_MAX_M`]: RMSNorm → fused gate/up + SiLU·mul GEMV → down GEMV.
    Decode,
    /// `m >` [`DECODE_MAX_M`]: RMSNorm → gate/up GEMM → SiLU·mul → down GEMM.
    Prefill,
}

impl MlpPath {
    /// The kernels of a forward pass on this path, in order ([`Mlp::forward_stage`]).
    pub fn stages(self) -> &'static [&'static str] {
        match self {
            MlpPath::Decode => &["rmsnorm", "gate_up_silu (GEMV)", "down (GEMV)"],
            MlpPath::Prefill => &["rmsnorm", "gate/up (GEMM)", "silu_mul", "down (GEMM)"],
        }
    }

    /// The path for `m` rows.
    pub fn for_rows(m: usize) -> MlpPath {
        if m <= DECODE_MAX_M {
            MlpPath::Decode
        } else {
            MlpPath::Prefill
        }
    }
}

/// The `matmul` configs of an MLP block's prefill GEMMs (`[gate/up, down]`) for `m`
/// rows on `sms` SMs: [`prefill_gemm_config`] of each from [`WAVE_RULE_MIN_ROWS`] rows on;
/// below, both use the `wgmma` tiles ([`gemm_config`] with `wgmma`) when the gate/up GEMM
/// has at least two waves of 128×256 tiles, else both the `mma.sync` ones.
pub fn mlp_gemm_configs(m: usize, hidden: usize, inter: usize, sms: u32) -> [usize; 2] {
    if m >= WAVE_RULE_MIN_ROWS {
        return [
            prefill_gemm_config(m, 2 * inter, sms),
            prefill_gemm_config(m, hidden, sms),
        ];
    }
    let wgmma = wide_gemm(m, 2 * inter, sms);
    [
        gemm_config(m, 2 * inter, sms, wgmma),
        gemm_config(m, hidden, sms, wgmma),
    ]
}

/// From this many rows on, a prefill GEMM takes one of the warp-specialised `wgmma`
/// tiles by [`prefill_gemm_config`]'s wave rule.
pub const WAVE_RULE_MIN_ROWS: usize = 1024;

/// Whether a prefill GEMM of `m × n` below [`WAVE_RULE_MIN_ROWS`] rows takes the `wgmma`
/// tiles: at least two waves of 128×256 tiles.
pub(crate) fn wide_gemm(m: usize, n: usize, sms: u32) -> bool {
    m.div_ceil(128) * n.div_ceil(256) >= 2 * sms as usize
}

/// The `matmul` config of a projection of a prefill (`m × n` output, `sms` SMs).
///
/// From [`WAVE_RULE_MIN_ROWS`] rows on, one of the two warp-specialised `wgmma` tiles:
/// 128×256 unless 128×128 fills the last wave of CTAs more than 15 % better (the share of
/// the SM slots of all waves that hold a tile), since the larger tile does more per byte
/// loaded. Below, [`gemm_config`] with `wgmma` where `wide_gemm` says so.
pub fn prefill_gemm_config(m: usize, n: usize, sms: u32) -> usize {
    if m < WAVE_RULE_MIN_ROWS {
        return gemm_config(m, n, sms, wide_gemm(m, n, sms));
    }
    let sms = (sms as usize).max(1);
    let fill = |bm: usize, bn: usize| {
        let tiles = m.div_ceil(bm) * n.div_ceil(bn);
        tiles as f64 / (tiles.div_ceil(sms) * sms) as f64
    };
    let tile = if fill(128, 128) > 1.15 * fill(128, 256) {
        (128, 128, 2)
    } else {
        (128, 256, 2)
    };
    matmul::CONSTS
        .iter()
        .position(|c| (c.BM, c.BN, c.WG) == tile)
        .unwrap_or_else(|| gemm_config(m, n, sms as u32, true))
}

/// The `matmul` config for an `m × n` output on `sms` SMs.
///
/// - `wgmma`: the first of 128×256 (`WG = 2`, warp-specialised `wgmma` on sm_90a),
///   128×128 (`WG = 1`, `wgmma`), 64×128 and 64×64 (`mma.sync`) tiles that gives at
///   least 0.9 CTAs per SM;
/// - else: the first of 128×128, 64×128 and 64×64 `mma.sync` tiles that gives at least
///   one CTA per SM.
///
/// Configs are found by these constants in `matmul::CONSTS` (the first of each tile).
///
/// Else 64×64 (the most CTAs). `megaops-bench gemm` measures every config per shape.
pub fn gemm_config(m: usize, n: usize, sms: u32, wgmma: bool) -> usize {
    // (BM, BN, WG): the first config of each tile, `WG` 2 warp-specialised `wgmma`, 1
    // `wgmma`, 0 `mma.sync`.
    let (candidates, min_tiles): (&[(u32, u32, u32)], usize) = if wgmma {
        (
            &[(128, 256, 2), (128, 128, 1), (64, 128, 0), (64, 64, 0)],
            (sms as usize * 9).div_ceil(10),
        )
    } else {
        (&[(128, 128, 0), (64, 128, 0), (64, 64, 0)], sms as usize)
    };
    let config = |(bm, bn, wg): (u32, u32, u32)| matmul::CONSTS.iter().position(|c| (c.BM, c.BN, c.WG) == (bm, bn, wg));
    for &(bm, bn, wg) in candidates {
        let tiles = m.div_ceil(bm as usize) * n.div_ceil(bn as usize);
        if tiles >= min_tiles
            && let Some(c) = config((bm, bn, wg))
        {
            return c;
        }
    }
    // The most CTAs: 64×64 (`matmul` has it; 0, its default, otherwise).
    config((64, 64, 0)).unwrap_or(0)
}

/// The weights of one MLP block on a device (bf16, PyTorch `Linear` layouts; cloning
/// shares the device weights).
#[derive(Clone)]
pub struct Mlp {
    config: MlpConfig,
    norm_w: Tensor<bf16>,
    w_gate_up: Tensor<bf16>,
    w_down: Tensor<bf16>,
}

impl Mlp {
    /// A block with seeded random weights: the norm weight uniform in `[0.5, 1.5)`, the
    /// projections uniform with variance `1 / fan_in` (so activations stay of order one).
    pub fn random(device: &Device, config: MlpConfig, seed: u64) -> Result<Mlp> {
        config.check()?;
        let (h, i) = (config.hidden, config.inter);
        let norm_w: Vec<bf16> = megaops::testing::random::<f32>(h, 0.5, seed)
            .into_iter()
            .map(|v| bf16::from_f32(1.0 + v))
            .collect();
        let w_gate_up = megaops::testing::random::<bf16>(2 * i * h, (3.0 / h as f64).sqrt(), seed ^ 0x6a7e);
        let w_down = megaops::testing::random::<bf16>(h * i, (3.0 / i as f64).sqrt(), seed ^ 0xd0e1);
        Mlp::from_weights(device, config, &norm_w, &w_gate_up, &w_down)
    }

    /// A block from host weights: `norm_w [hidden]`, `w_gate_up [2·inter, hidden]` (the
    /// gate rows then the up rows, as vLLM's merged `gate_up_proj`), `w_down [hidden,
    /// inter]`, all row-major.
    pub fn from_weights(
        device: &Device,
        config: MlpConfig,
        norm_w: &[bf16],
        w_gate_up: &[bf16],
        w_down: &[bf16],
    ) -> Result<Mlp> {
        config.check()?;
        let (h, i) = (config.hidden, config.inter);
        let norm_w = Tensor::from_slice(device, &[h], norm_w)?;
        let w_gate_up = Tensor::from_slice(device, &[2 * i, h], w_gate_up)?;
        let w_down = Tensor::from_slice(device, &[h, i], w_down)?;
        // Shape, k and alignment checks of the GEMMs' weights (m does not matter).
        gemm::check_matmul(0, 2 * i as u32, h as u32, &w_gate_up)?;
        gemm::check_matmul(0, h as u32, i as u32, &w_down)?;
        Ok(Mlp {
            config,
            norm_w,
            w_gate_up,
            w_down,
        })
    }

    /// The block's sizes.
    pub fn config(&self) -> MlpConfig {
        self.config
    }

    /// The RMSNorm weight, `[hidden]`.
    pub fn norm_weight(&self) -> &Tensor<bf16> {
        &self.norm_w
    }

    /// The merged gate/up weight, `[2·inter, hidden]`: gate rows `0..inter`, up rows
    /// `inter..2·inter`.
    pub fn w_gate_up(&self) -> &Tensor<bf16> {
        &self.w_gate_up
    }

    /// The down-projection weight, `[hidden, inter]`.
    pub fn w_down(&self) -> &Tensor<bf16> {
        &self.w_down
    }

    /// Activations for a forward pass of `m` rows of this block (see [`MlpActivations::new`]).
    pub fn activations(&self, device: &Device, m: usize) -> Result<MlpActivations> {
        MlpActivations::new(device, self.config, m)
    }

    /// Enqueues the block on `on` for the input `x` (`[m, hidden]` bf16, a plain tensor or
    /// a `Tiled` tensor a previous kernel produces; `m = acts.rows()`), writing
    /// `acts.output()`. The kernels are those of `acts.path()` (see the [module
    /// docs](self)); on an `AsyncStream` of several streams they overlap through the data
    /// tiles of `acts`' tensors.
    ///
    /// Each kernel re-arms the `Tiled` tensor it writes right before its launch, so the
    /// previous pass's output must have no consumer left to launch; the output is
    /// produced (consumers launched after this wait on its data tiles). Works inside
    /// `AsyncStream::capture`. When an AsyncStream lets each kernel's successor start is
    /// [`MlpActivations::release`].
    ///
    /// Graphs: eager passes and replays of a captured pass may alternate on the same
    /// `MlpActivations` (`Graph::launch` sets the semaphores back to the values the
    /// capture saw before each replay).
    pub fn forward(
        &self,
        on: &impl LaunchTarget,
        x: &(impl AsInput<bf16, R2> + ?Sized),
        acts: &mut MlpActivations,
    ) -> Result<()> {
        for stage in 0..acts.path.stages().len() {
            self.forward_stage(on, x, acts, stage)?;
        }
        Ok(())
    }

    /// Enqueues kernel `stage` of the forward pass alone (the names are
    /// [`MlpPath::stages`]): re-arms its output and launches it on the intermediates of
    /// `acts`, whose inputs must have been produced (by the previous stage, or by an
    /// earlier pass, which makes a single stage repeatable for timing). [`Mlp::forward`]
    /// is every stage in order.
    pub fn forward_stage(
        &self,
        on: &impl LaunchTarget,
        x: &(impl AsInput<bf16, R2> + ?Sized),
        acts: &mut MlpActivations,
        stage: usize,
    ) -> Result<()> {
        if acts.config != self.config {
            return Err(Error::shape(format!(
                "MLP forward: activations built for {:?}, block is {:?}",
                acts.config, self.config
            )));
        }
        if stage == 0 {
            let c = self.config;
            // One row per CTA on the decode path, four on the prefill path.
            let bm = if acts.path == MlpPath::Decode { 1 } else { 4 };
            let norm = super::config_where("rmsnorm", rmsnorm::CONSTS, &format!("BM = {bm}"), |c| c.BM == bm)?;
            let opts = LaunchOptions::config(norm).release_next(acts.release);
            acts.xn.rearm();
            rmsnorm::launch_with(
                on,
                &opts,
                x,
                &self.norm_w,
                &mut acts.xn,
                acts.m as u32,
                c.hidden as u32,
                c.eps,
            )?;
            return Ok(());
        }
        self.projection_stage(on, acts, stage)
    }

    /// Enqueues the stages after the norm (gate/up, SiLU·mul, down) on the normalised
    /// input that `acts.normed()` holds, which the caller produced, e.g. a decoder layer's
    /// fused add + RMSNorm writing [`MlpActivations::normed_mut`].
    pub fn forward_projections(&self, on: &impl LaunchTarget, acts: &mut MlpActivations) -> Result<()> {
        if acts.config != self.config {
            return Err(Error::shape(format!(
                "MLP forward: activations built for {:?}, block is {:?}",
                acts.config, self.config
            )));
        }
        for stage in 1..acts.path.stages().len() {
            self.projection_stage(on, acts, stage)?;
        }
        Ok(())
    }

    /// The block with the layer's residual add and RMSNorm in front (`norm.x` the
    /// attention output, `norm.res` the residual stream): on the decode path the gate/up
    /// projection runs them itself (`gemv::add_rmsnorm_gate_up_silu`) when the planner fuses
    /// them (`gemv::plan::fuse_add_norm`) and [`MlpActivations::set_norm_fusion`] allows;
    /// otherwise `norm::add_rmsnorm` writes [`MlpActivations::normed`] and the projections
    /// follow. Either way `norm.res_out` receives the new residual stream.
    pub fn forward_add_norm<X: AsInput<bf16, R2> + ?Sized>(
        &self,
        on: &impl LaunchTarget,
        norm: AddNormInput<'_, X>,
        acts: &mut MlpActivations,
    ) -> Result<()> {
        if acts.config != self.config {
            return Err(Error::shape(format!(
                "MLP forward: activations built for {:?}, block is {:?}",
                acts.config, self.config
            )));
        }
        let (m, h) = (acts.m as u32, self.config.hidden as u32);
        let p = Projection::gate_up(self.config.hidden, self.config.inter);
        if let Some(scratch) = acts.norm.active() {
            let choice = acts.choices[0];
            if p.fuses_add_norm(choice, acts.m, on.device().sm_count())? {
                acts.act.rearm();
                p.launch_add_norm(
                    on,
                    choice,
                    norm.fused(),
                    &self.w_gate_up,
                    &mut acts.act,
                    scratch,
                    acts.m,
                )?;
                return self.projection_stage(on, acts, 2);
            }
        }
        norm.launch(on, &mut acts.xn, m, h)?;
        self.forward_projections(on, acts)
    }

    /// [`Mlp::forward_projections`] with the add + RMSNorm that follows the block (`next`:
    /// the next layer's norm, or the final one, on `next.res` and the block's output)
    /// behind the down projection: inside it on the decode path where the planner fuses
    /// it (`gemv::gemv_add_rmsnorm`), else as `norm::add_rmsnorm` after it, writing
    /// `next.xn` and `next.res_out` either way (not [`MlpActivations::output`], when fused).
    pub fn forward_norm_after(
        &self,
        on: &impl LaunchTarget,
        acts: &mut MlpActivations,
        next: NormAfter<'_>,
    ) -> Result<()> {
        if acts.config != self.config {
            return Err(Error::shape(format!(
                "MLP forward: activations built for {:?}, block is {:?}",
                acts.config, self.config
            )));
        }
        let last = acts.path.stages().len() - 1;
        for stage in 1..last {
            self.projection_stage(on, acts, stage)?;
        }
        let down = Projection::down(self.config.hidden, self.config.inter);
        let next = if acts.path == MlpPath::Decode {
            let split_k = acts.ws_down.is_some();
            down.launch_norm_after(on, acts.choices[1], &acts.act, &self.w_down, next, split_k, acts.m)?
        } else {
            Some(next)
        };
        if let Some(next) = next {
            self.projection_stage(on, acts, last)?;
            next.launch_after(on, &acts.out, acts.m as u32, self.config.hidden as u32)?;
        }
        Ok(())
    }

    /// Stage `stage ≥ 1` of the forward pass (see [`Mlp::forward_stage`]).
    fn projection_stage(&self, on: &impl LaunchTarget, acts: &mut MlpActivations, stage: usize) -> Result<()> {
        let c = self.config;
        let m = acts.m;
        let (gate_up, down) = (
            Projection::gate_up(c.hidden, c.inter),
            Projection::down(c.hidden, c.inter),
        );
        let [gate_up_config, down_config] = acts.gemm_configs;
        match (acts.path, stage) {
            (MlpPath::Decode, 1) => {
                acts.act.rearm();
                gate_up.launch(
                    on,
                    acts.choices[0],
                    &acts.xn,
                    &self.w_gate_up,
                    &mut acts.act,
                    acts.ws_gate_up.as_mut(),
                    &acts.gemm,
                    acts.release,
                    || gate_up_config,
                    m,
                )?;
            }
            // On the decode path the down GEMV is planned beside the running gate/up GEMV
            // also in the serial forward, so that both forwards run the same kernels.
            (MlpPath::Decode, 2) | (MlpPath::Prefill, 3) => {
                acts.out.rearm();
                down.launch(
                    on,
                    acts.choices[1],
                    &acts.act,
                    &self.w_down,
                    &mut acts.out,
                    acts.ws_down.as_mut(),
                    &acts.gemm,
                    acts.release,
                    || down_config,
                    m,
                )?;
            }
            (MlpPath::Prefill, 1 | 2) => {
                let gu = acts
                    .gu
                    .as_mut()
                    .ok_or_else(|| Error::Invalid("MLP forward: prefill activations lack the gate/up tensor".into()))?;
                if stage == 1 {
                    gu.rearm();
                    gate_up.launch(
                        on,
                        acts.choices[0],
                        &acts.xn,
                        &self.w_gate_up,
                        gu,
                        None,
                        &acts.gemm,
                        acts.release,
                        || gate_up_config,
                        m,
                    )?;
                } else {
                    acts.act.rearm();
                    // 16 rows × 2048 columns per CTA: the prefill tile.
                    let wide = super::config_where("silu_mul", silu_mul::CONSTS, "BM = 16", |c| c.BM == 16)?;
                    let opts = LaunchOptions::config(wide).release_next(acts.release);
                    silu_mul::launch_with(on, &opts, &*gu, &mut acts.act, m as u32, c.inter as u32)?;
                }
            }
            (path, _) => {
                return Err(Error::Invalid(format!(
                    "MLP forward: stage {stage} of the {path:?} path, which has {} ({:?})",
                    path.stages().len(),
                    path.stages()
                )));
            }
        }
        Ok(())
    }

    /// f64 reference of the block for rows `rows` of the input `x` (`[m, hidden]` bf16,
    /// row-major; `m = x.len() / hidden` selects the path as [`Mlp::forward`] does),
    /// computed from the weights downloaded from the device. Rounds to bf16 where the
    /// kernels store bf16 intermediates (`xn`; on the prefill path the gate and up values;
    /// `act`) and returns the output unrounded, `rows.len() × hidden` values.
    pub fn reference(&self, x: &[bf16], rows: &[usize]) -> Result<Vec<f64>> {
        let c = self.config;
        let (h, inter) = (c.hidden, c.inter);
        if !x.len().is_multiple_of(h) {
            return Err(Error::shape(format!(
                "MLP reference: {} input values are not whole rows of {h}",
                x.len()
            )));
        }
        let m = x.len() / h;
        if let Some(&r) = rows.iter().find(|&&r| r >= m) {
            return Err(Error::shape(format!("MLP reference: row {r} of an input of {m} rows")));
        }
        let path = MlpPath::for_rows(m);
        let norm_w = self.norm_w.to_vec()?;
        let w_gu = self.w_gate_up.to_vec()?;
        let w_down = self.w_down.to_vec()?;
        let round = |v: f64| bf16::from_f64(v).to_f64();
        let dot = |a: &[f64], w: &[bf16]| a.iter().zip(w).map(|(a, w)| a * w.to_f64()).sum::<f64>();
        let silu = |g: f64| g / (1.0 + (-g).exp());
        let mut out = Vec::with_capacity(rows.len() * h);
        for &r in rows {
            let xr: Vec<f64> = x[r * h..(r + 1) * h].iter().map(|v| v.to_f64()).collect();
            let ms = xr.iter().map(|v| v * v).sum::<f64>() / h as f64;
            let rstd = 1.0 / (ms + c.eps as f64).sqrt();
            let xn: Vec<f64> = xr
                .iter()
                .zip(&norm_w)
                .map(|(v, w)| round(v * rstd * w.to_f64()))
                .collect();
            let act: Vec<f64> = (0..inter)
                .map(|j| {
                    let g = dot(&xn, &w_gu[j * h..(j + 1) * h]);
                    let u = dot(&xn, &w_gu[(inter + j) * h..(inter + j + 1) * h]);
                    match path {
                        MlpPath::Decode => round(silu(g) * u),
                        MlpPath::Prefill => round(silu(round(g)) * round(u)),
                    }
                })
                .collect();
            out.extend((0..h).map(|i| dot(&act, &w_down[i * inter..(i + 1) * inter])));
        }
        Ok(out)
    }
}

/// The tensors of one forward pass of `m` rows: the `Tiled` intermediates between the
/// kernels, the output, and the split-K scratch of the decode path. One per concurrent
/// pass (a pass re-arms and rewrites them).
pub struct MlpActivations {
    config: MlpConfig,
    m: usize,
    path: MlpPath,
    xn: Tiled<bf16, DynRows>,
    gu: Option<Tiled<bf16, DynRows>>,
    act: Tiled<bf16, DynGrid>,
    out: Tiled<bf16, DynRows>,
    ws_gate_up: Option<SplitWorkspace>,
    ws_down: Option<SplitWorkspace>,
    gemm_configs: [usize; 2],
    release: ReleaseNext,
    /// The tuner's choices `[gate/up, down]` (unset: the planner's).
    choices: [SiteChoice; 2],
    /// The prefill path's GEMMs (gate/up and down).
    gemm: PrefillGemm,
    /// Whether [`Mlp::forward_add_norm`] may fuse the add + RMSNorm into the gate/up
    /// projection (the decode path, when `m · h` is within the fused kernel's bound), and
    /// the fused kernel's scratch.
    norm: FusedNorm,
}

impl MlpActivations {
    /// Tensors for `m ≥ 1` rows of a block of `config`. Data tilings, matched to the
    /// kernels' kernel tilings:
    ///
    /// | tensor | decode (`m ≤ 16`) | prefill |
    /// |---|---|---|
    /// | `xn [m, h]` (rmsnorm → gate/up) | `DynRows(1)`: one per norm CTA; the GEMV waits for all | `DynRows(64)` |
    /// | `gu [m, 2·inter]` (GEMM → silu·mul) | — (fused) | `DynRows(64)` |
    /// | `act [m, inter]` (→ down) | `DynGrid(16, 128)`: column tiles of the GEMV | `DynGrid(64, inter)`: row tiles |
    /// | `out [m, h]` (down →) | `DynRows(1)` | `DynRows(64)` |
    ///
    /// The decode path gets split-K scratch for the gate/up and the down GEMVs (one each:
    /// they may run at the same time). The prefill GEMM configs come from
    /// [`gemm_config`] for the device's SM count ([`MlpActivations::set_gemm_configs`]
    /// overrides them).
    pub fn new(device: &Device, config: MlpConfig, m: usize) -> Result<MlpActivations> {
        MlpActivations::with_col_tile(device, config, m, DECODE_COL_TILE)
    }

    /// [`MlpActivations::new`] with `act_cols` columns per data tile of the decode path's
    /// `act` (see [`DecodeTiles`](super::DecodeTiles); the prefill path ignores it).
    pub fn with_col_tile(device: &Device, config: MlpConfig, m: usize, act_cols: u32) -> Result<MlpActivations> {
        config.check()?;
        super::DecodeTiles {
            act: act_cols,
            ..super::DecodeTiles::default()
        }
        .check()?;
        if m == 0 || m > u32::MAX as usize {
            return Err(Error::shape(format!(
                "MLP activations: m = {m} rows (need 1 ≤ m < 2³²)"
            )));
        }
        let (h, inter) = (config.hidden, config.inter);
        let path = MlpPath::for_rows(m);
        let sms = device.sm_count();
        Ok(match path {
            MlpPath::Decode => MlpActivations {
                config,
                m,
                path,
                xn: Tiled::new(device, &[m, h], DynRows(1), "mlp.xn")?,
                gu: None,
                act: Tiled::new(device, &[m, inter], DynGrid(DECODE_MAX_M as u32, act_cols), "mlp.act")?,
                out: Tiled::new(device, &[m, h], DynRows(1), "mlp.out")?,
                ws_gate_up: Some(SplitWorkspace::new(device, m, inter, plan::MAX_SPLITS as usize, 2)?),
                ws_down: Some(SplitWorkspace::new(device, m, h, plan::MAX_SPLITS as usize, 1)?),
                gemm_configs: [0, 0],
                release: ReleaseNext::FirstCta,
                choices: [SiteChoice::default(); 2],
                gemm: PrefillGemm::default(),
                norm: FusedNorm::for_projection(true, m, inter, h),
            },
            MlpPath::Prefill => MlpActivations {
                config,
                m,
                path,
                xn: Tiled::new(device, &[m, h], DynRows(PREFILL_ROW_TILE), "mlp.xn")?,
                gu: Some(Tiled::new(
                    device,
                    &[m, 2 * inter],
                    DynRows(PREFILL_ROW_TILE),
                    "mlp.gu",
                )?),
                act: Tiled::new(device, &[m, inter], DynGrid(PREFILL_ROW_TILE, inter as u32), "mlp.act")?,
                out: Tiled::new(device, &[m, h], DynRows(PREFILL_ROW_TILE), "mlp.out")?,
                ws_gate_up: None,
                ws_down: None,
                gemm_configs: mlp_gemm_configs(m, h, inter, sms),
                release: ReleaseNext::LastCta,
                choices: [SiteChoice::default(); 2],
                gemm: PrefillGemm::default(),
                norm: FusedNorm::new(None),
            },
        })
    }

    /// Whether [`Mlp::forward_add_norm`] may run the add + RMSNorm inside the gate/up
    /// projection (off by default: `norm::add_rmsnorm` runs as its own kernel). The fused
    /// kernel's scratch is allocated on `device` the first time fusion is turned on.
    pub fn set_norm_fusion(&mut self, device: &Device, fuse: bool) -> Result<()> {
        self.norm.set(device, fuse)
    }

    /// Sets which GEMMs the prefill path's gate/up and down projections run (the decode
    /// path ignores it).
    pub fn set_prefill_gemm(&mut self, gemm: PrefillGemm) {
        self.gemm = gemm;
    }

    /// Rows `m` of the pass.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// The path the pass takes.
    pub fn path(&self) -> MlpPath {
        self.path
    }

    /// The block sizes they were built for.
    pub fn config(&self) -> MlpConfig {
        self.config
    }

    /// The prefill path's `matmul` configs `[gate/up, down]` (unused on the decode path).
    pub fn gemm_configs(&self) -> [usize; 2] {
        self.gemm_configs
    }

    /// Sets the prefill path's `matmul` configs `[gate/up, down]` (indices into
    /// `matmul::CONFIGS`).
    pub fn set_gemm_configs(&mut self, configs: [usize; 2]) -> Result<()> {
        if let Some(&c) = configs.iter().find(|&&c| c >= matmul::CONFIGS.len()) {
            return Err(Error::Invalid(format!(
                "matmul config {c} does not exist ({} configs)",
                matmul::CONFIGS.len()
            )));
        }
        self.gemm_configs = configs;
        Ok(())
    }

    /// Sets the tuner's choices `[gate/up, down]`: on the decode path the GEMVs' config,
    /// split, occupancy limit and release point; on the prefill path the `matmul` config
    /// (instead of [`MlpActivations::gemm_configs`]), occupancy limit and release point.
    /// Unset fields keep the planner's.
    pub fn set_choices(&mut self, choices: [SiteChoice; 2]) {
        self.choices = choices;
    }

    /// When an AsyncStream lets the next kernel of the pass start, for the kernels that
    /// take launch options (the norm, and on the prefill path every kernel; the decode
    /// GEMVs run in one wave, where it makes no difference). Default: at the first CTA on
    /// the decode path; at the last CTA on the prefill path, whose gate/up GEMM runs in
    /// several waves: released earlier, the waiting CTAs of `silu_mul` and the down GEMM
    /// hold registers and thread slots that the GEMM's later waves need.
    pub fn release(&self) -> ReleaseNext {
        self.release
    }

    /// Sets [`MlpActivations::release`].
    pub fn set_release(&mut self, release: ReleaseNext) {
        self.release = release;
    }

    /// The normalised input `xn = rmsnorm(x) · norm_w`, `[m, hidden]`.
    pub fn normed(&self) -> &Tiled<bf16, DynRows> {
        &self.xn
    }

    /// The normalised input, for a producer other than the block's own RMSNorm (e.g. a
    /// fused add + RMSNorm) before [`Mlp::forward_projections`].
    pub fn normed_mut(&mut self) -> &mut Tiled<bf16, DynRows> {
        &mut self.xn
    }

    /// The gate/up GEMM output `[m, 2·inter]` (gate columns, then up columns): prefill
    /// path only (the decode path fuses it away).
    pub fn gate_up(&self) -> Option<&Tiled<bf16, DynRows>> {
        self.gu.as_ref()
    }

    /// `act = silu(gate) · up`, `[m, inter]`.
    pub fn act(&self) -> &Tiled<bf16, DynGrid> {
        &self.act
    }

    /// The block's output `[m, hidden]`.
    pub fn output(&self) -> &Tiled<bf16, DynRows> {
        &self.out
    }

    /// Overwrites every intermediate and the output with `value` (after queued work), e.g.
    /// NaN in tests so that an element no kernel writes fails the comparison.
    pub fn fill(&self, value: bf16) -> Result<()> {
        self.xn.tensor().fill(value)?;
        if let Some(gu) = &self.gu {
            gu.tensor().fill(value)?;
        }
        self.act.tensor().fill(value)?;
        self.out.tensor().fill(value)
    }
}

#[cfg(test)]
mod tests {
    use super::{gemm_config, mlp_gemm_configs, prefill_gemm_config};

    #[test]
    fn gemm_config_picks_the_first_tile_that_fills_the_sms() {
        assert_eq!(gemm_config(1024, 6144, 132, false), 0);
        assert_eq!(
            gemm_config(1024, 1024, 132, false),
            5,
            "64×128 gives 128 tiles, fewer than the SMs"
        );
        assert_eq!(gemm_config(4096, 6144, 132, true), 11);
        assert_eq!(
            gemm_config(4096, 1024, 132, true),
            11,
            "128 tiles of 128×256: 0.97 per SM"
        );
        assert_eq!(gemm_config(2048, 1024, 132, true), 8);
        assert_eq!(gemm_config(2048, 512, 132, true), 4);
        assert_eq!(gemm_config(64, 64, 132, true), 5);
    }

    #[test]
    fn mlp_prefill_uses_wgmma_tiles_for_long_or_wide_gemms() {
        // Below 1024 rows: wgmma tiles only for two waves of 128×256 gate/up tiles.
        assert_eq!(mlp_gemm_configs(512, 1024, 3072, 132), [0, 5], "Qwen3-0.6B, m = 512");
        assert_eq!(mlp_gemm_configs(512, 2048, 8192, 132), [0, 5], "Llama-3.2-1B, m = 512");
        assert_eq!(mlp_gemm_configs(768, 2048, 8192, 132), [11, 4], "Llama-3.2-1B, m = 768");
        // From 1024 rows on, the wave rule (the gemm sweep's fastest tiles at these shapes).
        assert_eq!(
            mlp_gemm_configs(1024, 1024, 3072, 132),
            [12, 12],
            "Qwen3-0.6B, m = 1024"
        );
        assert_eq!(
            mlp_gemm_configs(1024, 2048, 8192, 132),
            [11, 12],
            "Llama-3.2-1B, m = 1024"
        );
        assert_eq!(
            mlp_gemm_configs(4096, 1024, 3072, 132),
            [11, 11],
            "Qwen3-0.6B, m = 4096"
        );
        assert_eq!(
            mlp_gemm_configs(8192, 2048, 8192, 132),
            [11, 11],
            "Llama-3.2-1B, m = 8192"
        );
    }

    #[test]
    fn prefill_projections_take_the_tile_that_fills_the_waves() {
        // bench/gemm-sweep.md (run O), m = 1024: the fastest config of each shape.
        for (n, want, what) in [
            (4096, 11, "Qwen3-0.6B/1.7B qkv: 128 tiles of 128×256"),
            (1024, 12, "Qwen3-0.6B o: 32 tiles of 128×256, 64 of 128×128"),
            (2048, 12, "Qwen3-1.7B o / Llama down: 64 tiles of 128×256"),
            (6144, 12, "Qwen3-8B qkv: 1.45 waves of 128×256, 2.9 of 128×128"),
            (3072, 11, "Llama-3.2-1B qkv: 96 tiles, both tiles fill 73 %"),
            (16384, 11, "Llama-3.2-1B gate/up: 3.9 waves"),
        ] {
            assert_eq!(prefill_gemm_config(1024, n, 132), want, "{what}");
        }
        // Below the threshold the old rule stands.
        assert_eq!(prefill_gemm_config(512, 1024, 132), gemm_config(512, 1024, 132, false));
    }
}
