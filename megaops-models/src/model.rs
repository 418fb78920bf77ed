//! [`Model`] (embedding, decoder layers, final norm) and [`CausalLm`] (the model and its LM
//! head with greedy sampling on the device), built from a [`WeightSource`] by checkpoint
//! names, and [`Pass`]: the tensors of one forward pass of `m` rows.
//!
//! ```text
//! ids ─ embedding ─► x ─ layer 0 ─► … ─ layer L-1 ─► add_rmsnorm ─► xf ─(prefill: last row of each sequence)─► lm_head ─► logits ─ argmax ─► next ids
//! ```

use crate::checkpoint::WeightSource;
use crate::config::{Architecture, Config};
use crate::error::{ModelError, Result};
use crate::layers::attention::{Attention, AttentionDims, AttentionKind, KvCache, Positions};
use crate::layers::config_where;
use crate::layers::decoder::{DecoderLayer, LayerActivations, NextNorm, row_tile};
use crate::layers::layout::PassLayout;
use crate::layers::mlp::{DECODE_MAX_M, Mlp, MlpConfig};
use crate::layers::prefill_gemm::PrefillGemm;
use crate::tune::{Site, SiteChoice, StepPlan};
use megaops::{Device, DynChunks, DynGrid, DynRows, LaunchOptions, LaunchTarget, Tensor, Tiled, bf16};
use megaops_kernels::elementwise::embedding;
use megaops_kernels::gemv::lm_head;
use megaops_kernels::gemv::plan;
use megaops_kernels::norm::add_rmsnorm;
use megaops_kernels::sampling::{ArgmaxWorkspace, argmax};

/// Largest number of sequences a decode step serves (the GEMV kernels' row limit).
pub const MAX_BATCH: usize = DECODE_MAX_M;

/// Reports loading progress: called with the bytes of each tensor as it is uploaded.
pub type Progress<'a> = &'a mut dyn FnMut(&str, usize);

/// The decoder stack: token embedding, layers and the final norm. Cloning shares the
/// device weights.
#[derive(Clone)]
pub struct Model {
    config: Config,
    dims: AttentionDims,
    /// `model.embed_tokens.weight`, `[vocab, h]`.
    embed: Tensor<bf16>,
    layers: Vec<DecoderLayer>,
    /// `model.norm.weight`, `[h]`.
    norm: Tensor<bf16>,
}

/// The model and its LM head. Cloning shares the device weights.
#[derive(Clone)]
pub struct CausalLm {
    model: Model,
    /// `lm_head.weight`, `[vocab, h]`; `None` when tied to the embedding.
    lm_head: Option<Tensor<bf16>>,
}

/// Uploads `name` of `shape` from `weights`, reporting its bytes to `progress`.
fn upload(
    device: &Device,
    weights: &dyn WeightSource,
    name: &str,
    shape: &[usize],
    progress: &mut dyn FnMut(&str, usize),
) -> Result<Tensor<bf16>> {
    let values = weights.get(name, shape)?;
    let t = Tensor::from_slice(device, shape, &values)?;
    progress(name, 2 * values.len());
    Ok(t)
}

impl Model {
    /// Loads the stack of `config` from `weights` onto `device`.
    pub fn load(device: &Device, config: &Config, weights: &dyn WeightSource, progress: Progress<'_>) -> Result<Model> {
        config.validate()?;
        let dims = AttentionDims::of(config)?;
        let (h, v, d) = (config.hidden_size, config.vocab_size, config.head_dim());
        let embed = upload(device, weights, "model.embed_tokens.weight", &[v, h], progress)?;
        let mlp = MlpConfig::of(config);
        let qwen3 = config.architecture()? == Architecture::Qwen3;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = |name: &str| format!("model.layers.{l}.{name}");
            let host = |name: &str, shape: &[usize], progress: &mut dyn FnMut(&str, usize)| -> Result<Vec<bf16>> {
                let key = p(name);
                let values = weights.get(&key, shape)?;
                progress(&key, 2 * values.len());
                Ok(values)
            };
            let input_norm = upload(device, weights, &p("input_layernorm.weight"), &[h], progress)?;
            let q = host("self_attn.q_proj.weight", &[dims.q_dim(), h], progress)?;
            let k = host("self_attn.k_proj.weight", &[dims.kv_dim(), h], progress)?;
            let vv = host("self_attn.v_proj.weight", &[dims.kv_dim(), h], progress)?;
            let o = host("self_attn.o_proj.weight", &[h, dims.q_dim()], progress)?;
            let norms = if qwen3 {
                Some((
                    host("self_attn.q_norm.weight", &[d], progress)?,
                    host("self_attn.k_norm.weight", &[d], progress)?,
                ))
            } else {
                None
            };
            let attn = Attention::from_weights(
                device,
                dims,
                &q,
                &k,
                &vv,
                &o,
                norms.as_ref().map(|(a, b)| (&a[..], &b[..])),
            )?;
            let post_norm = host("post_attention_layernorm.weight", &[h], progress)?;
            let gate = host("mlp.gate_proj.weight", &[mlp.inter, h], progress)?;
            let up = host("mlp.up_proj.weight", &[mlp.inter, h], progress)?;
            let down = host("mlp.down_proj.weight", &[h, mlp.inter], progress)?;
            let gate_up: Vec<bf16> = [gate, up].concat();
            let mlp = Mlp::from_weights(device, mlp, &post_norm, &gate_up, &down)?;
            layers.push(DecoderLayer::new(input_norm, attn, mlp));
        }
        let norm = upload(device, weights, "model.norm.weight", &[h], progress)?;
        Ok(Model {
            config: config.clone(),
            dims,
            embed,
            layers,
            norm,
        })
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The layers.
    pub fn layers(&self) -> &[DecoderLayer] {
        &self.layers
    }

    /// The attention dimensions.
    pub fn dims(&self) -> AttentionDims {
        self.dims
    }

    /// The token embedding `[vocab, h]`.
    pub fn embedding(&self) -> &Tensor<bf16> {
        &self.embed
    }

    /// Enqueues embedding → layers → final add + RMSNorm for the `m = pass.rows()` token
    /// ids `ids` (a plain `[m]` u32 tensor), writing `pass.normed()`.
    pub fn forward(
        &self,
        on: &impl LaunchTarget,
        ids: &Tensor<u32>,
        caches: &mut [KvCache],
        pos: &Positions<'_>,
        pass: &mut Pass,
    ) -> Result<()> {
        if caches.len() != self.layers.len() {
            return Err(ModelError::Request(format!(
                "{} KV caches for {} layers",
                caches.len(),
                self.layers.len()
            )));
        }
        let c = &self.config;
        let (m, h, v) = (pass.m as u32, c.hidden_size as u32, c.vocab_size as u32);
        if ids.numel() != pass.m {
            return Err(ModelError::Request(format!(
                "{} token ids for a pass of {m} rows",
                ids.numel()
            )));
        }
        pass.x.rearm();
        // One row per CTA for decode, eight for prefill.
        let bm = if pass.m <= DECODE_MAX_M { 1 } else { 8 };
        let emb_config = config_where("embedding", embedding::CONSTS, &format!("BM = {bm}"), |c| c.BM == bm)?;
        embedding::launch_with(
            on,
            &LaunchOptions::config(emb_config),
            ids,
            &self.embed,
            &mut pass.x,
            m,
            v,
            h,
        )?;
        if pass.norm_after && pass.m <= DECODE_MAX_M {
            return self.forward_norm_after(on, caches, pos, pass);
        }
        for (l, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let _range = megaops::nvtx::range(|| format!("layer {l}"));
            if l == 0 {
                layer.forward(on, &pass.x, None, cache, pos, &mut pass.sets[0])?;
            } else {
                let (a, b) = pass.sets.split_at_mut(1);
                let (acts, prev) = if l % 2 == 0 {
                    (&mut a[0], &b[0])
                } else {
                    (&mut b[0], &a[0])
                };
                layer.forward(on, prev.output(), Some(prev.residual()), cache, pos, acts)?;
            }
        }
        let last = &pass.sets[(self.layers.len() - 1) % 2];
        pass.xf.rearm();
        pass.res_f.rearm();
        add_rmsnorm::launch_with(
            on,
            &LaunchOptions::config(last.norm_config()?),
            last.output(),
            last.residual(),
            &self.norm,
            &mut pass.xf,
            &mut pass.res_f,
            m,
            h,
            c.eps(),
        )?;
        Ok(())
    }
}

impl Model {
    /// The layers of [`Model::forward`] after the embedding, each add + RMSNorm run behind
    /// the projection before it ([`DecoderLayer::forward_norm_after`]): layer `l`'s down
    /// projection writes layer `l + 1`'s normalised input and residual into the other
    /// activation set, the last layer's the final norm's output.
    fn forward_norm_after(
        &self,
        on: &impl LaunchTarget,
        caches: &mut [KvCache],
        pos: &Positions<'_>,
        pass: &mut Pass,
    ) -> Result<()> {
        let layers = self.layers.len();
        for (l, (layer, cache)) in self.layers.iter().zip(caches.iter_mut()).enumerate() {
            let _range = megaops::nvtx::range(|| format!("layer {l}"));
            let (a, b) = pass.sets.split_at_mut(1);
            let (acts, other) = if l % 2 == 0 {
                (&mut a[0], b.first_mut())
            } else {
                (&mut b[0], Some(&mut a[0]))
            };
            let next = match (self.layers.get(l + 1), other) {
                (Some(following), Some(other)) => {
                    let (xn, res_out) = other.input_mut();
                    NextNorm {
                        weight: following.input_norm(),
                        xn,
                        res_out,
                    }
                }
                (None, _) => NextNorm {
                    weight: &self.norm,
                    xn: &mut pass.xf,
                    res_out: &mut pass.res_f,
                },
                (Some(_), None) => {
                    return Err(ModelError::Request(format!(
                        "a pass with one activation set for {layers} layers"
                    )));
                }
            };
            let embedded = (l == 0).then_some(&pass.x);
            layer.forward_norm_after(on, embedded, cache, pos, acts, next)?;
        }
        Ok(())
    }
}

impl CausalLm {
    /// Loads the model of `config` and its LM head (`lm_head.weight`, or the embedding
    /// when `tie_word_embeddings`) from `weights` onto `device`.
    pub fn load(
        device: &Device,
        config: &Config,
        weights: &dyn WeightSource,
        progress: Progress<'_>,
    ) -> Result<CausalLm> {
        let model = Model::load(device, config, weights, progress)?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(upload(
                device,
                weights,
                "lm_head.weight",
                &[config.vocab_size, config.hidden_size],
                progress,
            )?)
        };
        Ok(CausalLm { model, lm_head })
    }

    /// The decoder stack.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.model.config
    }

    /// The model cut to its first `layers` decoder layers (the embedding, final norm and
    /// LM head kept), sharing the device weights: what a tuner times on a few layers.
    pub fn first_layers(&self, layers: usize) -> Result<CausalLm> {
        if layers == 0 || layers > self.model.layers.len() {
            return Err(ModelError::Request(format!(
                "the first {layers} of {} decoder layers",
                self.model.layers.len()
            )));
        }
        let mut lm = self.clone();
        lm.model.layers.truncate(layers);
        lm.model.config.num_hidden_layers = layers;
        Ok(lm)
    }

    /// The LM head weight `[vocab, h]` (the embedding when tied).
    pub fn lm_head(&self) -> &Tensor<bf16> {
        self.lm_head.as_ref().unwrap_or(&self.model.embed)
    }

    /// Enqueues a whole forward pass of the `pass.rows()` tokens `ids` and greedy
    /// sampling: the f32 logits of one row per sequence (the new token in decode, the
    /// last prompt token in prefill) into `pass.logits()` and their argmax into
    /// `pass.next_ids()`.
    pub fn forward(
        &self,
        on: &impl LaunchTarget,
        ids: &Tensor<u32>,
        caches: &mut [KvCache],
        pos: &Positions<'_>,
        pass: &mut Pass,
    ) -> Result<()> {
        self.model.forward(on, ids, caches, pos, pass)?;
        let c = self.config();
        let (b, h, v) = (pass.batch as u32, c.hidden_size as u32, c.vocab_size as u32);
        let w = self.lm_head();
        let sms = on.device().sm_count();
        let pick = pass.lm_head_choice.pick();
        let place = crate::layers::decode_placement(Site::LmHead);
        let choice = plan::choose_with(lm_head::CONFIGS, pick, 1, b, v, h, sms, 1, place)?;
        let head_opts = pass
            .lm_head_choice
            .apply(Site::LmHead, LaunchOptions::config(choice.config));
        pass.logits.rearm();
        match pass.last_rows.as_ref() {
            None => lm_head::launch_with(on, &head_opts, &pass.xf, w, &mut pass.logits, b, v, h)?,
            Some(rows) => {
                let x_last = pass
                    .x_last
                    .as_mut()
                    .ok_or_else(|| ModelError::Request("a prefill pass lacks its last-row tensor".into()))?;
                // The last row of each sequence, gathered like an embedding lookup from the
                // normed rows (a plain read: ordered after the norm by the runtime).
                x_last.rearm();
                let one_row = config_where("embedding", embedding::CONSTS, "BM = 1", |c| c.BM == 1)?;
                embedding::launch_with(
                    on,
                    &LaunchOptions::config(one_row),
                    rows,
                    pass.xf.tensor(),
                    x_last,
                    b,
                    pass.m as u32,
                    h,
                )?;
                lm_head::launch_with(on, &head_opts, &*x_last, w, &mut pass.logits, b, v, h)?;
            }
        }
        pass.ids.rearm();
        // Large vocabularies in 8 Ki chunks, small ones in 2 Ki (enough CTAs either way).
        let chunk = if c.vocab_size >= 32_768 { 8192 } else { 2048 };
        let argmax_config = config_where("argmax", argmax::CONSTS, &format!("CHUNK = {chunk}"), |c| {
            c.CHUNK == chunk
        })?;
        argmax::launch_with(
            on,
            &LaunchOptions::config(argmax_config),
            &pass.logits,
            &mut pass.ids,
            &mut pass.argmax_ws.partial,
            &mut pass.argmax_ws.counters,
            b,
            v,
        )?;
        Ok(())
    }
}

/// Whether a decode pass runs its add + RMSNorms behind the projections before them unless
/// a plan says otherwise ([`Pass::set_norm_after`]).
pub const DEFAULT_NORM_AFTER: bool = true;

/// The tensors of one forward pass of `m` token rows: `batch` sequences of one new token
/// each (decode, `m = batch`) or of `seq` prompt tokens each (prefill, `m = batch · seq`,
/// sequence-major). Data tilings: rows of 1 up to 16 rows, rows of 64 above (the paper's
/// row tiles for prefill); the logits in the LM head's column tiles; the ids one per
/// sequence.
pub struct Pass {
    m: usize,
    batch: usize,
    kind: AttentionKind,
    x: Tiled<bf16, DynRows>,
    sets: Vec<LayerActivations>,
    xf: Tiled<bf16, DynRows>,
    res_f: Tiled<bf16, DynRows>,
    /// Prefill: `[batch]` row index of each sequence's last token, and those rows of `xf`.
    last_rows: Option<Tensor<u32>>,
    x_last: Option<Tiled<bf16, DynRows>>,
    logits: Tiled<f32, DynGrid>,
    ids: Tiled<u32, DynChunks>,
    argmax_ws: ArgmaxWorkspace,
    /// The tuner's LM head choice (unset: the planner's).
    lm_head_choice: SiteChoice,
    /// Whether a decode pass runs each add + RMSNorm behind the projection before it
    /// ([`Pass::set_norm_after`]).
    norm_after: bool,
}

impl Pass {
    /// Tensors for a pass of `batch` sequences of `seq` tokens (`seq = 1` and
    /// [`AttentionKind::Decode`] for a decode step) of `lm`, sized by `layout` (decode
    /// attention's workspace, the decode path's column data tiles).
    pub fn new(lm: &CausalLm, kind: AttentionKind, batch: usize, seq: usize, layout: PassLayout) -> Result<Pass> {
        let device = lm.lm_head().device();
        let c = lm.config();
        let m = batch * seq;
        if batch == 0 || seq == 0 || m > u32::MAX as usize {
            return Err(ModelError::Request(format!(
                "a pass of {batch} sequences × {seq} tokens"
            )));
        }
        if kind == AttentionKind::Decode && seq != 1 {
            return Err(ModelError::Request("a decode pass has one token per sequence".into()));
        }
        layout.tiles.check()?;
        let dims = lm.model.dims;
        let mlp = lm
            .model
            .layers
            .first()
            .map(|l| l.mlp().config())
            .ok_or_else(|| ModelError::Config("the model has no layers".into()))?;
        let h = c.hidden_size;
        let rows = |n: usize, name: &str| -> Result<Tiled<bf16, DynRows>> {
            Ok(Tiled::new(device, &[n, h], DynRows(row_tile(n)), name)?)
        };
        let sets = (0..lm.model.layers.len().min(2))
            .map(|i| LayerActivations::new(device, dims, mlp, kind, m, layout, &format!("set{i}")))
            .collect::<Result<Vec<_>>>()?;
        let (last_rows, x_last) = if kind == AttentionKind::Prefill {
            let idx: Vec<u32> = (0..batch).map(|b| (b * seq + seq - 1) as u32).collect();
            (
                Some(Tensor::from_slice(device, &[batch], &idx)?),
                Some(rows(batch, "x_last")?),
            )
        } else {
            (None, None)
        };
        Ok(Pass {
            m,
            batch,
            kind,
            x: rows(m, "x")?,
            sets,
            xf: rows(m, "xf")?,
            res_f: rows(m, "res_f")?,
            last_rows,
            x_last,
            logits: Tiled::new(
                device,
                &[batch, c.vocab_size],
                DynGrid(DECODE_MAX_M as u32, layout.tiles.logits),
                "logits",
            )?,
            ids: Tiled::new(device, &[batch], DynChunks(1), "next_ids")?,
            argmax_ws: ArgmaxWorkspace::new(device, batch, c.vocab_size)?,
            lm_head_choice: SiteChoice::default(),
            norm_after: DEFAULT_NORM_AFTER,
        })
    }

    /// Applies a tuned plan's per-site choices to the pass's launches (decode attention's
    /// split-KV count and the data tiles are fixed when the pass is built: [`Pass::new`]'s
    /// `layout`).
    pub fn set_plan(&mut self, plan: &StepPlan) -> Result<()> {
        for set in &mut self.sets {
            set.set_choices(plan);
        }
        self.lm_head_choice = plan.site(Site::LmHead);
        self.set_norm_fusion(plan.fuse_norms.unwrap_or(false))?;
        self.set_rope_fusion(plan.fuse_rope.unwrap_or(true));
        self.set_norm_after(plan.norm_after.unwrap_or(DEFAULT_NORM_AFTER));
        Ok(())
    }

    /// Whether a decode pass runs each layer's add + RMSNorms behind the projections before
    /// them, the output projection and the down projection (`gemv::gemv_add_rmsnorm`,
    /// where the GEMV planner fuses them; [`DEFAULT_NORM_AFTER`] unless a plan says
    /// otherwise). When on, the norms are not fused into the projections after them
    /// ([`Pass::set_norm_fusion`] changes nothing on the decode path). Prefill passes keep
    /// their norms as kernels of their own.
    pub fn set_norm_after(&mut self, on: bool) {
        self.norm_after = on;
    }

    /// Whether every layer's decode attention runs the QK-norm, RoPE and KV-cache write
    /// itself (on unless a plan turns it off; [`LayerActivations::set_rope_fusion`]).
    pub fn set_rope_fusion(&mut self, fuse: bool) {
        for set in &mut self.sets {
            set.set_rope_fusion(fuse);
        }
    }

    /// Whether every layer may run its add + RMSNorms inside the projections that follow
    /// them (off unless a plan turns it on; [`LayerActivations::set_norm_fusion`]).
    pub fn set_norm_fusion(&mut self, fuse: bool) -> Result<()> {
        let device = self.x.tensor().device();
        for set in &mut self.sets {
            set.set_norm_fusion(device, fuse)?;
        }
        Ok(())
    }

    /// Sets which GEMMs every layer's prefill projections run (the LM head and the decode
    /// path keep theirs).
    pub fn set_prefill_gemm(&mut self, gemm: &PrefillGemm) {
        for set in &mut self.sets {
            set.set_prefill_gemm(gemm);
        }
    }

    /// Token rows `m`.
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Sequences.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Decode or prefill.
    pub fn kind(&self) -> AttentionKind {
        self.kind
    }

    /// The final norm's output `[m, h]`.
    pub fn normed(&self) -> &Tiled<bf16, DynRows> {
        &self.xf
    }

    /// The f32 logits `[batch, vocab]` of the sampled row of each sequence.
    pub fn logits(&self) -> &Tiled<f32, DynGrid> {
        &self.logits
    }

    /// The greedy next token of each sequence, `[batch]`.
    pub fn next_ids(&self) -> &Tiled<u32, DynChunks> {
        &self.ids
    }

    /// The per-layer activations (two sets, used by even and odd layers).
    pub fn layer_sets_mut(&mut self) -> &mut [LayerActivations] {
        &mut self.sets
    }
}
