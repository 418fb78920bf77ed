//! The self-attention block of a decoder layer:
//!
//! ```text
//! xn [m, h] ─ qkv ─► qkv [m, (hq+2hkv)·D] ─ qk_norm_rope ─► q [m, hq·D] ─ attention ─► o [m, hq·D] ─ o_proj ─► out [m, h]
//!                                                    └────► k/v cache rows ──┘
//! ```
//!
//! On the decode path `qk_norm_rope` and attention are one kernel by default,
//! `decode_attention_rope`, which reads `qkv` directly and writes the cache rows itself
//! ([`AttentionActivations::set_rope_fusion`]).
//!
//! Projections take the GEMV kernels for at most [`DECODE_MAX_M`] rows and the
//! tensor-core GEMM above; attention is split-KV decode attention for one new token per
//! sequence and causal flash attention over the cache for a prompt.

use super::add_norm::{AddNormInput, FusedNorm, NormAfter};
use super::layout::PassLayout;
use super::mlp::{DECODE_MAX_M, PREFILL_ROW_TILE, prefill_gemm_config};
use super::prefill_gemm::PrefillGemm;
use super::projection::Projection;
use crate::config::{Architecture, Config};
use crate::error::{ModelError, Result};
use crate::tune::{Site, SiteChoice};
use megaops::launch::AsInput;
use megaops::subkernel::cublaslt::Shaped;
use megaops::{Device, DynGrid, DynRows, LaunchOptions, LaunchTarget, R2, ReleaseNext, Tensor, Tiled, bf16};
use megaops_kernels::attention::decode::{self, DecodeWorkspace, decode_attention, decode_attention_rope};
use megaops_kernels::attention::prefill::{self, prefill_attention};
use megaops_kernels::gemv::plan::{self, SplitWorkspace};
use megaops_kernels::rope::{self, qk_norm_rope};

/// The attention dimensions of a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDims {
    /// Hidden size `h`.
    pub hidden: usize,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads.
    pub hkv: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Qwen3's RMSNorm on each q and k head.
    pub qk_norm: bool,
    /// Epsilon of that norm.
    pub eps: f32,
}

impl AttentionDims {
    /// The dimensions `config` implies.
    pub fn of(config: &Config) -> Result<AttentionDims> {
        Ok(AttentionDims {
            hidden: config.hidden_size,
            hq: config.num_attention_heads,
            hkv: config.num_kv_heads(),
            head_dim: config.head_dim(),
            qk_norm: config.architecture()? == Architecture::Qwen3,
            eps: config.eps(),
        })
    }

    /// Columns of q (`hq · D`).
    pub fn q_dim(&self) -> usize {
        self.hq * self.head_dim
    }

    /// Columns of k and of v (`hkv · D`).
    pub fn kv_dim(&self) -> usize {
        self.hkv * self.head_dim
    }

    /// Columns of the merged QKV projection.
    pub fn qkv_dim(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }

    /// Softmax scale `1 / √D`.
    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }
}

/// One layer's KV cache: keys and values `[batch · max_seq, hkv · D]` bf16 (sequence `b`
/// at rows `b · max_seq ..`, the layout of the RoPE and attention kernels), each a single
/// data tile: the RoPE kernel writes tokens at arbitrary rows and signals the cache as a
/// whole, and attention reads it whole.
pub struct KvCache {
    /// Keys.
    pub k: Tiled<bf16, DynRows>,
    /// Values.
    pub v: Tiled<bf16, DynRows>,
    /// Sequences.
    pub batch: usize,
    /// Positions per sequence.
    pub max_seq: usize,
}

impl KvCache {
    /// A zeroed cache for `batch` sequences of up to `max_seq` positions.
    pub fn new(device: &Device, dims: &AttentionDims, batch: usize, max_seq: usize, layer: usize) -> Result<KvCache> {
        let rows = batch * max_seq;
        if rows == 0 || rows > u32::MAX as usize || rows * dims.kv_dim() > u32::MAX as usize {
            return Err(ModelError::Request(format!(
                "a KV cache of {batch} sequences × {max_seq} positions does not fit the kernels' 32-bit indices"
            )));
        }
        let make = |what: &str| -> Result<Tiled<bf16, DynRows>> {
            let t = Tensor::zeros(device, &[rows, dims.kv_dim()])?;
            Ok(Tiled::complete(
                t,
                DynRows(rows as u32),
                &format!("layers.{layer}.{what}_cache"),
            )?)
        };
        Ok(KvCache {
            k: make("k")?,
            v: make("v")?,
            batch,
            max_seq,
        })
    }

    /// Rows of each tensor (`batch · max_seq`).
    pub fn rows(&self) -> usize {
        self.batch * self.max_seq
    }
}

/// Per-token inputs of the RoPE and attention kernels that a pass shares across layers.
pub struct Positions<'a> {
    /// `[m]` u32 RoPE positions.
    pub positions: &'a Tensor<u32>,
    /// `[m]` u32 KV-cache rows of the tokens.
    pub slots: &'a Tensor<u32>,
    /// Decode: `[batch]` u32 cached positions per sequence including the new token.
    pub lens: &'a Tensor<u32>,
    /// `[max_pos, D]` f32 cos/sin table.
    pub cos_sin: &'a Tensor<f32>,
    /// Prefill: tokens per sequence (rows are `batch · seq`, sequence-major).
    pub seq: usize,
}

/// Which attention kernel a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// One new token per sequence: split-KV decode attention (`m = batch`).
    Decode,
    /// A prompt of `seq` tokens per sequence: causal flash attention (`m = batch · seq`).
    Prefill,
}

/// The weights of one attention block (PyTorch `Linear` layouts, bf16; cloning shares
/// the device weights).
#[derive(Clone)]
pub struct Attention {
    dims: AttentionDims,
    /// `[q; k; v]` rows, `[qkv_dim, h]`.
    w_qkv: Tensor<bf16>,
    /// `[h, q_dim]`.
    w_o: Tensor<bf16>,
    /// `[D]` (ones when the model has no QK-norm; the kernel then ignores them).
    q_norm: Tensor<bf16>,
    k_norm: Tensor<bf16>,
}

impl Attention {
    /// A block from host weights: the three projections `[hq·D, h]`, `[hkv·D, h]`,
    /// `[hkv·D, h]` (merged into one QKV weight here), `o [h, hq·D]` and, with QK-norm,
    /// `q_norm`/`k_norm [D]`.
    pub fn from_weights(
        device: &Device,
        dims: AttentionDims,
        q: &[bf16],
        k: &[bf16],
        v: &[bf16],
        o: &[bf16],
        qk_norms: Option<(&[bf16], &[bf16])>,
    ) -> Result<Attention> {
        let h = dims.hidden;
        let qkv: Vec<bf16> = [q, k, v].concat();
        let w_qkv = Tensor::from_slice(device, &[dims.qkv_dim(), h], &qkv)?;
        let w_o = Tensor::from_slice(device, &[h, dims.q_dim()], o)?;
        let ones = vec![bf16::ONE; dims.head_dim];
        let (qn, kn) = qk_norms.unwrap_or((&ones, &ones));
        Ok(Attention {
            dims,
            w_qkv,
            w_o,
            q_norm: Tensor::from_slice(device, &[dims.head_dim], qn)?,
            k_norm: Tensor::from_slice(device, &[dims.head_dim], kn)?,
        })
    }

    /// The dimensions.
    pub fn dims(&self) -> AttentionDims {
        self.dims
    }

    /// The merged QKV weight `[qkv_dim, h]`.
    pub fn w_qkv(&self) -> &Tensor<bf16> {
        &self.w_qkv
    }

    /// The output projection `[h, q_dim]`.
    pub fn w_o(&self) -> &Tensor<bf16> {
        &self.w_o
    }

    /// Enqueues the block for the normalised input `xn` (`[m, h]`, `m = acts.rows()`),
    /// writing the new tokens' keys and values into `cache` and the block's output into
    /// `acts.output()`. Every kernel re-arms the tensor it writes just before its launch.
    pub fn forward(
        &self,
        on: &impl LaunchTarget,
        xn: &(impl AsInput<bf16, R2> + Shaped + ?Sized),
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        self.check(acts)?;
        self.qkv(on, xn, acts)?;
        self.after_qkv(on, cache, pos, acts)
    }

    /// [`Attention::forward`] with the layer's residual add and RMSNorm in front: on the
    /// decode path the QKV projection runs them itself (`gemv::add_rmsnorm_gemv`) when the
    /// planner fuses them (`gemv::plan::fuse_add_norm`) and the activations allow it
    /// ([`AttentionActivations::set_norm_fusion`]); otherwise `norm::add_rmsnorm` writes
    /// `normed` first. Either way `norm.res_out` receives the new residual stream.
    pub fn forward_add_norm<X: AsInput<bf16, R2> + ?Sized>(
        &self,
        on: &impl LaunchTarget,
        norm: AddNormInput<'_, X>,
        normed: &mut Tiled<bf16, DynRows>,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        self.check(acts)?;
        let (m, h) = (acts.m as u32, self.dims.hidden as u32);
        let p = Projection::qkv(&self.dims);
        if let Some(scratch) = acts.norm.active() {
            let choice = acts.choices[0];
            if p.fuses_add_norm(choice, acts.m, on.device().sm_count())? {
                acts.qkv.rearm();
                p.launch_add_norm(on, choice, norm.fused(), &self.w_qkv, &mut acts.qkv, scratch, acts.m)?;
                return self.after_qkv(on, cache, pos, acts);
            }
        }
        norm.launch(on, normed, m, h)?;
        self.qkv(on, &*normed, acts)?;
        self.after_qkv(on, cache, pos, acts)
    }

    /// [`Attention::forward`] with the add + RMSNorm that follows the block (`next`: the
    /// MLP's norm, on `next.res` and the block's output) behind the output projection:
    /// inside it on the decode path where the planner fuses it
    /// (`gemv::gemv_add_rmsnorm`), else as `norm::add_rmsnorm` after it, writing
    /// `next.xn` and `next.res_out` either way (not `acts.output()`, when fused).
    pub fn forward_norm_after(
        &self,
        on: &impl LaunchTarget,
        xn: &(impl AsInput<bf16, R2> + Shaped + ?Sized),
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
        next: NormAfter<'_>,
    ) -> Result<()> {
        self.check(acts)?;
        self.qkv(on, xn, acts)?;
        self.attend(on, cache, pos, acts)?;
        let p = Projection::o(&self.dims);
        let split_k = acts.ws_o.is_some();
        if let Some(next) = p.launch_norm_after(on, acts.choices[3], &acts.o, &self.w_o, next, split_k, acts.m)? {
            self.o_proj(on, acts)?;
            let (m, h) = (acts.m as u32, self.dims.hidden as u32);
            next.launch_after(on, &acts.out, m, h)?;
        }
        Ok(())
    }

    fn check(&self, acts: &AttentionActivations) -> Result<()> {
        if acts.dims != self.dims {
            return Err(ModelError::Request(format!(
                "attention activations built for {:?}, block is {:?}",
                acts.dims, self.dims
            )));
        }
        Ok(())
    }

    /// The QKV projection of `xn` into `acts.qkv`.
    fn qkv(
        &self,
        on: &impl LaunchTarget,
        xn: &(impl AsInput<bf16, R2> + Shaped + ?Sized),
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        let (m, sms) = (acts.m, on.device().sm_count());
        let p = Projection::qkv(&self.dims);
        acts.qkv.rearm();
        p.launch(
            on,
            acts.choices[0],
            xn,
            &self.w_qkv,
            &mut acts.qkv,
            acts.ws_qkv.as_mut(),
            &acts.gemm,
            acts.release,
            || prefill_gemm_config(m, p.weight_rows(), sms),
            m,
        )?;
        Ok(())
    }

    /// Everything after the QKV projection: [`Attention::attend`], the output projection.
    fn after_qkv(
        &self,
        on: &impl LaunchTarget,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        self.attend(on, cache, pos, acts)?;
        self.o_proj(on, acts)
    }

    /// QK-norm, RoPE and the cache write, and attention (one fused kernel on the decode
    /// path, [`AttentionActivations::set_rope_fusion`]), into `acts.o`.
    fn attend(
        &self,
        on: &impl LaunchTarget,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        if acts.kind == AttentionKind::Decode && acts.fuse_rope && acts.m == cache.batch {
            return self.rope_attention(on, cache, pos, acts);
        }
        let d = self.dims;
        let m = acts.m as u32;
        let (hq, hkv, dh) = (d.hq as u32, d.hkv as u32, d.head_dim as u32);
        // QK-norm, RoPE and the cache write.
        let rope_config = rope_config(dh, (d.hq + 2 * d.hkv) as u32, acts.kind)?;
        let flags = if d.qk_norm { rope::QK_NORM } else { 0 };
        let cache_rows = cache.rows() as u32;
        let max_pos = pos.cos_sin.shape()[0] as u32;
        acts.q.rearm();
        cache.k.rearm();
        cache.v.rearm();
        qk_norm_rope::launch_with(
            on,
            &acts.choices[1].apply(Site::Rope, acts.opts(rope_config)),
            &acts.qkv,
            pos.positions,
            pos.slots,
            pos.cos_sin,
            &self.q_norm,
            &self.k_norm,
            &mut acts.q,
            &mut cache.k,
            &mut cache.v,
            m,
            hq,
            hkv,
            cache_rows,
            max_pos,
            flags,
            d.eps,
        )?;
        // Attention.
        acts.o.rearm();
        match acts.kind {
            AttentionKind::Decode => {
                let config = decode::config_index(dh, hq, hkv).ok_or_else(|| {
                    ModelError::Unsupported(format!("decode attention for head_dim {dh}, {hq}/{hkv} heads"))
                })?;
                let opts = acts.choices[2].apply(Site::Attention, acts.opts(config));
                let ws = acts
                    .decode_ws
                    .as_mut()
                    .ok_or_else(|| ModelError::Request("decode activations lack their workspace".into()))?;
                decode_attention::launch_with(
                    on,
                    &opts,
                    &acts.q,
                    &cache.k,
                    &cache.v,
                    pos.lens,
                    &mut ws.part_o,
                    &mut ws.part_ml,
                    &mut ws.counters,
                    &mut acts.o,
                    m,
                    hq,
                    hkv,
                    cache.max_seq as u32,
                    cache_rows,
                    ws.splits,
                    d.scale(),
                )?;
            }
            AttentionKind::Prefill => {
                let seq = pos.seq as u32;
                let bm = if acts.m >= 4096 { 128 } else { 64 };
                let config = prefill::config_index(dh, bm)
                    .ok_or_else(|| ModelError::Unsupported(format!("prefill attention for head_dim {dh}")))?;
                let order = prefill::longest_first(on.device(), m, seq, bm, hq)?;
                prefill_attention::launch_with(
                    on,
                    &acts.choices[2].apply(Site::Attention, acts.opts(config).remap(order)),
                    &acts.q,
                    &cache.k,
                    &cache.v,
                    &mut acts.o,
                    m,
                    seq,
                    0,
                    cache.max_seq as u32,
                    cache_rows,
                    hq,
                    hkv,
                    d.scale(),
                )?;
            }
        }
        Ok(())
    }

    /// The decode path's QK-norm, RoPE, cache write and attention in one kernel
    /// (`decode::decode_attention_rope`), reading `acts.qkv` directly.
    fn rope_attention(
        &self,
        on: &impl LaunchTarget,
        cache: &mut KvCache,
        pos: &Positions<'_>,
        acts: &mut AttentionActivations,
    ) -> Result<()> {
        let d = self.dims;
        let (hq, hkv, dh) = (d.hq as u32, d.hkv as u32, d.head_dim as u32);
        let config = decode::config_index(dh, hq, hkv)
            .ok_or_else(|| ModelError::Unsupported(format!("decode attention for head_dim {dh}, {hq}/{hkv} heads")))?;
        let opts = acts.choices[2].apply(Site::Attention, acts.opts(config));
        let flags = if d.qk_norm { rope::QK_NORM } else { 0 };
        let ws = acts
            .decode_ws
            .as_mut()
            .ok_or_else(|| ModelError::Request("decode activations lack their workspace".into()))?;
        let (max_seq, cache_rows) = (cache.max_seq as u32, cache.rows() as u32);
        acts.o.rearm();
        cache.k.rearm();
        cache.v.rearm();
        decode_attention_rope::launch_with(
            on,
            &opts,
            &acts.qkv,
            pos.positions,
            pos.slots,
            pos.lens,
            pos.cos_sin,
            &self.q_norm,
            &self.k_norm,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut cache.k,
            &mut cache.v,
            &mut acts.o,
            acts.m as u32,
            hq,
            hkv,
            max_seq,
            cache_rows,
            ws.splits,
            pos.cos_sin.shape()[0] as u32,
            flags,
            d.eps,
            d.scale(),
        )?;
        Ok(())
    }

    /// The output projection of `acts.o` into `acts.out`.
    fn o_proj(&self, on: &impl LaunchTarget, acts: &mut AttentionActivations) -> Result<()> {
        let (m, sms) = (acts.m, on.device().sm_count());
        let p = Projection::o(&self.dims);
        acts.out.rearm();
        p.launch(
            on,
            acts.choices[3],
            &acts.o,
            &self.w_o,
            &mut acts.out,
            acts.ws_o.as_mut(),
            &acts.gemm,
            acts.release,
            || prefill_gemm_config(m, p.weight_rows(), sms),
            m,
        )?;
        Ok(())
    }
}

/// The `qk_norm_rope` config for head dim `d` and `heads` head vectors per token (q, k
/// and v): one token per CTA for decode, with the fewest threads whose one pass covers
/// every head (else the most threads); four tokens per CTA for prefill.
fn rope_config(d: u32, heads: u32, kind: AttentionKind) -> Result<usize> {
    let bm = match kind {
        AttentionKind::Decode => 1,
        AttentionKind::Prefill => 4,
    };
    let fits: Vec<(usize, u32)> = qk_norm_rope::CONSTS
        .iter()
        .enumerate()
        .filter(|(_, c)| c.D == d && c.BM == bm)
        .map(|(i, c)| (i, c.THREADS))
        .collect();
    let covers = |t: u32| rope::heads_per_pass(d, t) >= heads;
    let pick = match kind {
        AttentionKind::Decode => fits
            .iter()
            .filter(|(_, t)| covers(*t))
            .min_by_key(|(_, t)| *t)
            .or_else(|| fits.iter().max_by_key(|(_, t)| *t)),
        AttentionKind::Prefill => fits.iter().min_by_key(|(_, t)| *t),
    };
    pick.map(|(i, _)| *i)
        .ok_or_else(|| ModelError::Unsupported(format!("RoPE for head_dim {d}")))
}

/// The tensors of one attention pass of `m` rows. Data tilings, matched to the kernels:
///
/// | tensor | decode (`m ≤ 16`) | prefill |
/// |---|---|---|
/// | `qkv [m, qkv_dim]` (projection → RoPE) | `DynGrid(16, tiles.qkv)`: the GEMV's column tiles | `DynRows(64)` |
/// | `q [m, q_dim]` (RoPE → attention) | `DynRows(1)`: one per RoPE CTA | `DynRows(64)` |
/// | `o [m, q_dim]` (attention → o_proj) | `DynRows(1)`: a sequence's heads | `DynRows(64)` |
/// | `out [m, h]` (o_proj →) | `DynGrid(16, tiles.attn_out)` | `DynRows(64)` |
pub struct AttentionActivations {
    dims: AttentionDims,
    m: usize,
    kind: AttentionKind,
    qkv: Tiled<bf16, DynGrid>,
    q: Tiled<bf16, DynRows>,
    o: Tiled<bf16, DynRows>,
    out: Tiled<bf16, DynGrid>,
    ws_qkv: Option<SplitWorkspace>,
    ws_o: Option<SplitWorkspace>,
    decode_ws: Option<DecodeWorkspace>,
    release: ReleaseNext,
    /// The tuner's choices `[qkv, rope, attention, o]` (unset: the planners').
    choices: [SiteChoice; 4],
    /// The prefill path's GEMMs (qkv and o).
    gemm: PrefillGemm,
    /// Whether [`Attention::forward_add_norm`] may fuse the add + RMSNorm into the QKV
    /// projection (the decode path, when `m · h` is within the fused kernel's bound), and
    /// the fused kernel's scratch.
    norm: FusedNorm,
    /// Whether the decode path runs QK-norm, RoPE and the cache write inside attention.
    fuse_rope: bool,
}

impl AttentionActivations {
    /// Tensors for `m` rows of `kind`; decode attention gets a workspace for
    /// `layout.attention_splits` splits per sequence and kv head, and the decode path's
    /// `qkv` and `out` take `layout.tiles`' column tiles.
    pub fn new(
        device: &Device,
        dims: AttentionDims,
        kind: AttentionKind,
        m: usize,
        layout: PassLayout,
        name: &str,
    ) -> Result<AttentionActivations> {
        if m == 0 || m > u32::MAX as usize {
            return Err(ModelError::Request(format!("attention pass of {m} rows")));
        }
        layout.tiles.check()?;
        let splits = layout.attention_splits;
        let gemv = m <= DECODE_MAX_M;
        let row_tile = if gemv { 1 } else { PREFILL_ROW_TILE };
        let grid = |cols: usize, tile: u32| {
            if gemv {
                DynGrid(DECODE_MAX_M as u32, tile)
            } else {
                DynGrid(PREFILL_ROW_TILE, cols as u32)
            }
        };
        let name = |t: &str| format!("{name}.{t}");
        let split_ws = |n: usize| -> Result<Option<SplitWorkspace>> {
            Ok(if gemv {
                Some(SplitWorkspace::new(device, m, n, plan::MAX_SPLITS as usize, 1)?)
            } else {
                None
            })
        };
        let decode_ws = match kind {
            AttentionKind::Decode => Some(DecodeWorkspace::new(
                device,
                m as u32,
                dims.hq as u32,
                dims.hkv as u32,
                dims.head_dim as u32,
                splits,
            )?),
            AttentionKind::Prefill => None,
        };
        Ok(AttentionActivations {
            dims,
            m,
            kind,
            qkv: Tiled::new(
                device,
                &[m, dims.qkv_dim()],
                grid(dims.qkv_dim(), layout.tiles.qkv),
                &name("qkv"),
            )?,
            q: Tiled::new(device, &[m, dims.q_dim()], DynRows(row_tile), &name("q"))?,
            o: Tiled::new(device, &[m, dims.q_dim()], DynRows(row_tile), &name("o"))?,
            out: Tiled::new(
                device,
                &[m, dims.hidden],
                grid(dims.hidden, layout.tiles.attn_out),
                &name("out"),
            )?,
            ws_qkv: split_ws(dims.qkv_dim())?,
            ws_o: split_ws(dims.hidden)?,
            decode_ws,
            release: if gemv {
                ReleaseNext::FirstCta
            } else {
                ReleaseNext::LastCta
            },
            choices: [SiteChoice::default(); 4],
            gemm: PrefillGemm::default(),
            norm: FusedNorm::for_projection(gemv, m, dims.qkv_dim(), dims.hidden),
            fuse_rope: true,
        })
    }

    /// Whether [`Attention::forward_add_norm`] may run the add + RMSNorm inside the QKV
    /// projection (off by default: `norm::add_rmsnorm` runs as its own kernel). The fused
    /// kernel's scratch is allocated on `device` the first time fusion is turned on.
    pub fn set_norm_fusion(&mut self, device: &Device, fuse: bool) -> Result<()> {
        Ok(self.norm.set(device, fuse)?)
    }

    /// Whether the decode path runs the QK-norm, RoPE and KV-cache write inside decode
    /// attention (`decode::decode_attention_rope`, one kernel; the default) or as
    /// `rope::qk_norm_rope` before `decode::decode_attention` (two). The fused kernel
    /// needs a cache of exactly the pass's sequences; otherwise the two run.
    pub fn set_rope_fusion(&mut self, fuse: bool) {
        self.fuse_rope = fuse;
    }

    /// Rows of the pass.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// The block's output `[m, h]`.
    pub fn output(&self) -> &Tiled<bf16, DynGrid> {
        &self.out
    }

    /// The attention output before the output projection, `[m, hq·D]`.
    pub fn attention_output(&self) -> &Tiled<bf16, DynRows> {
        &self.o
    }

    /// The rotated queries `[m, hq·D]`.
    pub fn queries(&self) -> &Tiled<bf16, DynRows> {
        &self.q
    }

    /// When an AsyncStream lets each kernel's successor start (see `MlpActivations::release`).
    pub fn set_release(&mut self, release: ReleaseNext) {
        self.release = release;
    }

    /// Sets which GEMMs the prefill path's qkv and o projections run (the decode path
    /// ignores it).
    pub fn set_prefill_gemm(&mut self, gemm: PrefillGemm) {
        self.gemm = gemm;
    }

    /// Sets the tuner's choices `[qkv, rope, attention, o]`: the two projections' config
    /// (a GEMV config and split on the decode path, a `matmul` config on the prefill
    /// path), occupancy limit and release point of all four (decode attention's split-KV
    /// count is the workspace's, set when the activations are built). On cuBLASLt
    /// ([`PrefillGemm::CublasLt`]) the prefill projections' configs do not apply.
    pub fn set_choices(&mut self, choices: [SiteChoice; 4]) {
        self.choices = choices;
    }

    fn opts(&self, config: usize) -> LaunchOptions {
        LaunchOptions::config(config).release_next(self.release)
    }
}
