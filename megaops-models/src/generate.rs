//! Greedy generation: the prompt's prefill on the GEMM path, then decode steps on the GEMV
//! path against a static KV cache. The decode step is captured once as a graph and
//! replayed; the step's last kernel (`decode_step::advance_decode`) feeds the sampled ids
//! back and advances the positions on the device, so a replay needs no host work.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layers::attention::{AttentionKind, KvCache, Positions};
use crate::layers::layout::PassLayout;
use crate::layers::prefill_gemm::{GemmBackend, PrefillGemm};
use crate::model::{CausalLm, MAX_BATCH, Pass};
use crate::tune::{Site, StepPlan};
use megaops::{AsyncStream, Graph, LaunchTarget as _, Tensor, Trace};
use megaops_kernels::attention::decode;
use megaops_kernels::decode_step::advance_decode;
use megaops_kernels::rope::RopeTable;
use std::time::Instant;

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate per sequence (≥ 1; the first comes from the prefill).
    pub max_new_tokens: usize,
    /// Keep generating after an end-of-sequence token.
    pub ignore_eos: bool,
    /// Capture the decode step once and replay it (else launch it eagerly every step).
    pub graph: bool,
    /// Teacher forcing: decode step `t` (1-based) feeds `force[b][t - 1]` instead of the
    /// sequence's generated token `t`; the generated tokens are still reported.
    pub force_tokens: Option<Vec<Vec<u32>>>,
    /// Keep the f32 logits of every step (prefill first), `[steps][batch][vocab]`.
    pub keep_logits: bool,
    /// Record the kernel tiles of the prefill and of the first decode step
    /// ([`Generation::traces`]; later steps of a traced graph record past the log's end,
    /// which only counts them).
    pub trace: bool,
    /// The decode step's knob values (a tuned plan, e.g. from the tune cache); the
    /// default runs the planners' choices.
    pub plan: StepPlan,
    /// The prefill's knob values (a plan tuned for prefill); the default runs the
    /// planners' choices.
    pub prefill_plan: StepPlan,
    /// The GEMMs of the prefill's projections (the kernel library's `matmul`, or cuBLASLt
    /// subkernels).
    pub prefill_gemm: GemmBackend,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 16,
            ignore_eos: false,
            graph: true,
            force_tokens: None,
            keep_logits: false,
            trace: false,
            plan: StepPlan::default(),
            prefill_plan: StepPlan::default(),
            prefill_gemm: GemmBackend::default(),
        }
    }
}

/// What a generation produced.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// The generated ids of each sequence (cut after its first end-of-sequence token
    /// unless `ignore_eos`).
    pub tokens: Vec<Vec<u32>>,
    /// With `keep_logits`: the logits of each step, each `batch · vocab` values.
    pub logits: Vec<Vec<f32>>,
    /// Wall time of the prefill, including the first token's read-back.
    pub prefill_ms: f64,
    /// Decode steps run (the first token comes from the prefill).
    pub decode_steps: usize,
    /// Wall time of all decode steps, including each step's read-back.
    pub decode_ms: f64,
    /// With `trace`: the tile traces of the prefill and the first decode step.
    pub traces: Option<GenerationTraces>,
}

/// The tile traces of a traced generation.
#[derive(Clone, Debug, Default)]
pub struct GenerationTraces {
    /// The prefill.
    pub prefill: Trace,
    /// The first decode step (`None` if the generation had no decode step).
    pub decode: Option<Trace>,
}

/// Records a trace log holds for a traced generation or bench (40 MiB).
pub const TRACE_CAPACITY: u32 = 1 << 20;

impl Generation {
    /// Mean wall time per decode step.
    pub fn ms_per_step(&self) -> f64 {
        if self.decode_steps == 0 {
            0.0
        } else {
            self.decode_ms / self.decode_steps as f64
        }
    }
}

/// Checks a request against the model before any device work: equal, non-empty prompts
/// of valid ids, a batch the decode kernels serve, a context that fits.
pub fn check_request(c: &Config, prompts: &[Vec<u32>], opts: &GenerateOptions) -> Result<()> {
    let bad = |m: String| Err(ModelError::Request(m));
    if prompts.is_empty() {
        return bad("no prompt".into());
    }
    if prompts.len() > MAX_BATCH {
        return bad(format!(
            "batch {} is larger than {MAX_BATCH}, the most a decode step serves",
            prompts.len()
        ));
    }
    let seq = prompts[0].len();
    if seq == 0 {
        return bad("an empty prompt".into());
    }
    if let Some((b, p)) = prompts.iter().enumerate().find(|(_, p)| p.len() != seq) {
        return bad(format!(
            "prompts must have equal lengths: prompt 0 has {seq} tokens, prompt {b} has {}",
            p.len()
        ));
    }
    if let Some(id) = prompts.iter().flatten().find(|&&id| id as usize >= c.vocab_size) {
        return bad(format!("token id {id} is outside the vocabulary of {}", c.vocab_size));
    }
    if opts.max_new_tokens == 0 {
        return bad("max_new_tokens must be at least 1".into());
    }
    let context = seq + opts.max_new_tokens;
    if context > c.max_position_embeddings {
        return bad(format!(
            "a prompt of {seq} tokens plus {} new tokens ({context}) is longer than the model's context of {}",
            opts.max_new_tokens, c.max_position_embeddings
        ));
    }
    if let Some(force) = &opts.force_tokens {
        if force.len() != prompts.len() {
            return bad(format!(
                "forced tokens for {} sequences, batch is {}",
                force.len(),
                prompts.len()
            ));
        }
        let need = opts.max_new_tokens - 1;
        if let Some((b, f)) = force.iter().enumerate().find(|(_, f)| f.len() < need) {
            return bad(format!(
                "sequence {b} has {} forced tokens, {need} decode steps need one each",
                f.len()
            ));
        }
        if let Some(id) = force.iter().flatten().find(|&&id| id as usize >= c.vocab_size) {
            return bad(format!(
                "forced token id {id} is outside the vocabulary of {}",
                c.vocab_size
            ));
        }
    }
    Ok(())
}

/// The device-side state of a decode loop: the next input ids, per-sequence positions,
/// KV-cache rows and lengths, and the history of sampled ids.
struct DecodeState {
    ids: Tensor<u32>,
    positions: Tensor<u32>,
    slots: Tensor<u32>,
    lens: Tensor<u32>,
    history: Tensor<u32>,
    step: Tensor<u32>,
    steps: usize,
}

/// One batch of equal-length sequences on the device: a KV cache per layer sized for the
/// prompt plus the new tokens, and the RoPE table. [`Session::prefill`] fills the caches
/// from the prompts; [`Session::decoder`] then runs decode steps against them.
pub struct Session<'m> {
    lm: &'m CausalLm,
    batch: usize,
    seq: usize,
    max_seq: usize,
    caches: Vec<KvCache>,
    cos_sin: Tensor<f32>,
}

/// The uploaded inputs and the pass of one prefill (built before anything is enqueued,
/// so a timed region holds only device work).
pub struct Prefill {
    ids: Tensor<u32>,
    positions: Tensor<u32>,
    slots: Tensor<u32>,
    lens: Tensor<u32>,
    pass: Pass,
}

impl Prefill {
    /// The pass: [`Pass::next_ids`] and [`Pass::logits`] hold the first new token.
    pub fn pass(&self) -> &Pass {
        &self.pass
    }

    /// Sets which GEMMs the prefill's projections run ([`Pass::set_prefill_gemm`]).
    pub fn set_gemm(&mut self, gemm: &PrefillGemm) {
        self.pass.set_prefill_gemm(gemm);
    }
}

impl<'m> Session<'m> {
    /// Positions per sequence the caches hold (prompt plus new tokens).
    pub fn max_seq(&self) -> usize {
        self.max_seq
    }

    /// Caches for `batch` sequences of `prompt_len` tokens plus `max_new_tokens`.
    pub fn new(lm: &'m CausalLm, batch: usize, prompt_len: usize, max_new_tokens: usize) -> Result<Session<'m>> {
        let c = lm.config();
        let device = lm.lm_head().device();
        let max_seq = prompt_len + max_new_tokens;
        let dims = lm.model().dims();
        let caches = (0..c.num_hidden_layers)
            .map(|l| KvCache::new(device, &dims, batch, max_seq, l))
            .collect::<Result<Vec<_>>>()?;
        let cos_sin = RopeTable::new(dims.head_dim, max_seq, c.rope_base(), c.rope_scaling_kind()?).upload(device)?;
        Ok(Session {
            lm,
            batch,
            seq: prompt_len,
            max_seq,
            caches,
            cos_sin,
        })
    }

    /// Sequences.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Uploads the prompts (`batch` of `prompt_len` ids) and builds the prefill pass.
    pub fn prefill_inputs(&self, prompts: &[Vec<u32>]) -> Result<Prefill> {
        self.prefill_inputs_with(prompts, &StepPlan::default())
    }

    /// [`Session::prefill_inputs`] whose pass launches with the knob values of `plan` (a
    /// prefill plan: `matmul` configs, occupancy limits and release points; its streams
    /// are the caller's to use).
    pub fn prefill_inputs_with(&self, prompts: &[Vec<u32>], plan: &StepPlan) -> Result<Prefill> {
        let (batch, seq, max_seq) = (self.batch, self.seq, self.max_seq);
        if prompts.len() != batch || prompts.iter().any(|p| p.len() != seq) {
            return Err(ModelError::Request(format!(
                "the session holds {batch} prompts of {seq} tokens"
            )));
        }
        let device = self.lm.lm_head().device();
        let m = batch * seq;
        let flat: Vec<u32> = prompts.concat();
        let positions: Vec<u32> = (0..m).map(|r| (r % seq) as u32).collect();
        let slots: Vec<u32> = (0..m).map(|r| ((r / seq) * max_seq + r % seq) as u32).collect();
        Ok(Prefill {
            ids: Tensor::from_slice(device, &[m], &flat)?,
            positions: Tensor::from_slice(device, &[m], &positions)?,
            slots: Tensor::from_slice(device, &[m], &slots)?,
            lens: Tensor::from_slice(device, &[batch], &vec![seq as u32; batch])?,
            pass: {
                let mut pass = Pass::new(self.lm, AttentionKind::Prefill, batch, seq, PassLayout::default())?;
                pass.set_plan(plan)?;
                pass
            },
        })
    }

    /// Enqueues the prefill: the prompts' keys and values into the caches, the first new
    /// token of each sequence into `p.pass().next_ids()`.
    pub fn prefill(&mut self, on: &AsyncStream, p: &mut Prefill) -> Result<()> {
        let pos = Positions {
            positions: &p.positions,
            slots: &p.slots,
            lens: &p.lens,
            cos_sin: &self.cos_sin,
            seq: self.seq,
        };
        self.lm.forward(on, &p.ids, &mut self.caches, &pos, &mut p.pass)
    }

    /// Captures the prefill of `p` as a graph; each replay runs it again on the uploaded
    /// prompts (the same cache rows, the same first tokens).
    pub fn capture_prefill(&mut self, on: &AsyncStream, p: &mut Prefill) -> Result<Graph> {
        capture_graph(on, |s| self.prefill(s, p))
    }

    /// A decode loop after the prefill, feeding `first` (one id per sequence) to its first
    /// step; it runs at most `max_new_tokens - 1` steps.
    pub fn decoder(&mut self, first: &[u32]) -> Result<Decoder<'_, 'm>> {
        self.decoder_with(first, &StepPlan::default())
    }

    /// [`Session::decoder`] whose steps launch with the knob values of `plan` (its
    /// attention split-KV count sizes the workspace and its data tiles tile the pass; its
    /// streams are the caller's to use).
    pub fn decoder_with(&mut self, first: &[u32], plan: &StepPlan) -> Result<Decoder<'_, 'm>> {
        let (batch, seq, max_seq) = (self.batch, self.seq, self.max_seq);
        let steps = max_seq - seq - 1;
        if first.len() != batch {
            return Err(ModelError::Request(format!(
                "{} first ids for {batch} sequences",
                first.len()
            )));
        }
        if steps == 0 {
            return Err(ModelError::Request("the session has no room for a decode step".into()));
        }
        let device = self.lm.lm_head().device();
        let st = DecodeState {
            ids: Tensor::from_slice(device, &[batch], first)?,
            positions: Tensor::from_slice(device, &[batch], &vec![seq as u32; batch])?,
            slots: Tensor::from_slice(
                device,
                &[batch],
                &(0..batch).map(|b| (b * max_seq + seq) as u32).collect::<Vec<_>>(),
            )?,
            lens: Tensor::from_slice(device, &[batch], &vec![seq as u32 + 1; batch])?,
            history: Tensor::zeros(device, &[steps * batch])?,
            step: Tensor::zeros(device, &[1])?,
            steps,
        };
        let dims = self.lm.model().dims();
        let splits = match plan.site(Site::Attention).splits {
            Some(s) if (1..=decode::MAX_SPLITS).contains(&s) => s,
            Some(s) => {
                return Err(ModelError::Request(format!(
                    "decode attention split {s}: it takes 1 to {}",
                    decode::MAX_SPLITS
                )));
            }
            None => decode::splits_for(batch as u32, dims.hkv as u32, max_seq as u32, device.sm_count()),
        };
        let layout = PassLayout {
            attention_splits: splits,
            tiles: plan.decode_tiles(),
        };
        let mut pass = Pass::new(self.lm, AttentionKind::Decode, batch, 1, layout)?;
        pass.set_plan(plan)?;
        Ok(Decoder {
            lm: self.lm,
            caches: &mut self.caches,
            cos_sin: &self.cos_sin,
            st,
            pass,
        })
    }
}

/// Decode steps against a [`Session`]'s caches: each step runs the model on the ids of
/// the previous one and `decode_step::advance_decode` feeds the sampled ids back and
/// advances positions, cache rows and lengths on the device.
pub struct Decoder<'s, 'm> {
    lm: &'m CausalLm,
    caches: &'s mut [KvCache],
    cos_sin: &'s Tensor<f32>,
    st: DecodeState,
    pass: Pass,
}

impl Decoder<'_, '_> {
    /// Enqueues one decode step eagerly.
    pub fn step(&mut self, on: &AsyncStream) -> Result<()> {
        let st = &mut self.st;
        let pos = Positions {
            positions: &st.positions,
            slots: &st.slots,
            lens: &st.lens,
            cos_sin: self.cos_sin,
            seq: 1,
        };
        self.lm.forward(on, &st.ids, self.caches, &pos, &mut self.pass)?;
        advance_decode::launch(
            on,
            self.pass.next_ids(),
            &mut st.ids,
            &mut st.positions,
            &mut st.slots,
            &mut st.lens,
            &mut st.history,
            &mut st.step,
            self.pass.batch() as u32,
            st.steps as u32,
        )?;
        Ok(())
    }

    /// Captures one decode step as a graph; each replay runs the next step.
    pub fn capture(&mut self, on: &AsyncStream) -> Result<Graph> {
        capture_graph(on, |s| self.step(s))
    }

    /// The step's pass: [`Pass::next_ids`] and [`Pass::logits`] of the last step run.
    pub fn pass(&self) -> &Pass {
        &self.pass
    }

    /// Replaces the ids the next step feeds (teacher forcing).
    pub fn feed(&self, ids: &[u32]) -> Result<()> {
        Ok(self.st.ids.copy_from_slice(ids)?)
    }

    /// Decode steps the loop has room for.
    pub fn max_steps(&self) -> usize {
        self.st.steps
    }
}

/// Generates greedily for `prompts` (equal lengths) on `on`, calling `on_tokens(step,
/// ids)` with each step's token of every sequence as soon as it is read back.
pub fn generate(
    lm: &CausalLm,
    on: &AsyncStream,
    prompts: &[Vec<u32>],
    opts: &GenerateOptions,
    on_tokens: &mut dyn FnMut(usize, &[u32]),
) -> Result<Generation> {
    check_request(lm.config(), prompts, opts)?;
    let c = lm.config();
    let (batch, seq) = (prompts.len(), prompts[0].len());
    let mut session = Session::new(lm, batch, seq, opts.max_new_tokens)?;
    let eos = if opts.ignore_eos { Vec::new() } else { c.eos_ids() };
    let mut out = Generation {
        tokens: vec![Vec::new(); batch],
        ..Generation::default()
    };
    let mut done = vec![false; batch];
    let mut record = |step: usize, ids: &[u32], out: &mut Generation| {
        for (b, &id) in ids.iter().enumerate() {
            if !done[b] {
                out.tokens[b].push(id);
                done[b] = eos.contains(&id);
            }
        }
        on_tokens(step, ids);
        done.iter().all(|&d| d)
    };

    let device = on.device().clone();
    if opts.trace {
        device.start_trace(TRACE_CAPACITY)?;
        on.set_tracing(true);
    }

    // Prefill.
    let t0 = Instant::now();
    let mut prefill = session.prefill_inputs_with(prompts, &opts.prefill_plan)?;
    prefill.set_gemm(&PrefillGemm::new(&device, opts.prefill_gemm)?);
    session.prefill(on, &mut prefill)?;
    on.synchronize()?;
    if opts.trace {
        out.traces = Some(GenerationTraces {
            prefill: device.take_trace()?,
            decode: None,
        });
    }
    let first = prefill.pass().next_ids().tensor().to_vec()?;
    if opts.keep_logits {
        out.logits.push(prefill.pass().logits().tensor().to_vec()?);
    }
    out.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    drop(prefill);
    let finished = record(0, &first, &mut out);
    if opts.max_new_tokens == 1 || finished {
        on.set_tracing(false);
        return Ok(out);
    }

    // Decode.
    let steps = opts.max_new_tokens - 1;
    let feed = |t: usize, sampled: &[u32]| -> Vec<u32> {
        match &opts.force_tokens {
            Some(f) => f.iter().map(|f| f[t - 1]).collect(),
            None => sampled.to_vec(),
        }
    };
    let mut decoder = session.decoder_with(&feed(1, &first), &opts.plan)?;
    let graph = if opts.graph { Some(decoder.capture(on)?) } else { None };
    let t1 = Instant::now();
    for t in 1..=steps {
        match &graph {
            Some(g) => g.launch(on)?,
            None => decoder.step(on)?,
        }
        on.synchronize()?;
        if t == 1 && opts.trace {
            let decode = device.take_trace()?;
            if let Some(traces) = out.traces.as_mut() {
                traces.decode = Some(decode);
            }
            // Eager steps stop recording; a traced graph goes on (past the log's end).
            on.set_tracing(false);
        }
        let sampled = decoder.pass().next_ids().tensor().to_vec()?;
        if opts.keep_logits {
            out.logits.push(decoder.pass().logits().tensor().to_vec()?);
        }
        out.decode_steps = t;
        let finished = record(t, &sampled, &mut out);
        if finished {
            break;
        }
        if opts.force_tokens.is_some() && t < steps {
            decoder.feed(&feed(t + 1, &sampled))?;
        }
    }
    out.decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    if opts.trace {
        device.take_trace()?;
    }
    Ok(out)
}

/// Captures what `enqueue` enqueues on `on` as a graph and uploads it; an engine error
/// inside the capture is returned as itself.
fn capture_graph(on: &AsyncStream, mut enqueue: impl FnMut(&AsyncStream) -> Result<()>) -> Result<Graph> {
    let mut captured = Err(ModelError::Request("capture did not run".into()));
    let g = on.capture(|s| {
        captured = enqueue(s);
        captured
            .as_ref()
            .map(|_| ())
            .map_err(|e| megaops::Error::Invalid(e.to_string()))
    });
    captured?;
    let g = g?;
    g.upload()?;
    Ok(g)
}
