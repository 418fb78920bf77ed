//! Greedy generation: the prompt's prefill on the GEMM path, then decode steps on the GEMV
//! path against a static KV cache. The decode step is captured once as a graph and
//! replayed; the step's last kernel (`decode_step::advance_decode`) feeds the sampled ids
//! back and advances the positions on the device, so a replay needs no host work.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layers::attention::{AttentionKind, KvCache, Positions};
use crate::model::{CausalLm, MAX_BATCH, Pass};
use megaops::{AsyncStream, Tensor};
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
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 16,
            ignore_eos: false,
            graph: true,
            force_tokens: None,
            keep_logits: false,
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
}

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
    let device = lm.lm_head().device();
    let (batch, seq) = (prompts.len(), prompts[0].len());
    let max_seq = seq + opts.max_new_tokens;
    let dims = lm.model().dims();
    let mut caches = (0..c.num_hidden_layers)
        .map(|l| KvCache::new(device, &dims, batch, max_seq, l))
        .collect::<Result<Vec<_>>>()?;
    let cos_sin = RopeTable::new(dims.head_dim, max_seq, c.rope_base(), c.rope_scaling_kind()?).upload(device)?;
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

    // Prefill.
    let t0 = Instant::now();
    let flat: Vec<u32> = prompts.concat();
    let m = batch * seq;
    let ids = Tensor::from_slice(device, &[m], &flat)?;
    let positions: Vec<u32> = (0..m).map(|r| (r % seq) as u32).collect();
    let slots: Vec<u32> = (0..m).map(|r| ((r / seq) * max_seq + r % seq) as u32).collect();
    let positions = Tensor::from_slice(device, &[m], &positions)?;
    let slots = Tensor::from_slice(device, &[m], &slots)?;
    let lens = Tensor::from_slice(device, &[batch], &vec![seq as u32; batch])?;
    let mut prefill = Pass::new(lm, AttentionKind::Prefill, batch, seq, 1)?;
    let pos = Positions {
        positions: &positions,
        slots: &slots,
        lens: &lens,
        cos_sin: &cos_sin,
        seq,
    };
    lm.forward(on, &ids, &mut caches, &pos, &mut prefill)?;
    on.synchronize()?;
    let first = prefill.next_ids().tensor().to_vec()?;
    if opts.keep_logits {
        out.logits.push(prefill.logits().tensor().to_vec()?);
    }
    out.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    drop(prefill);
    let finished = record(0, &first, &mut out);
    if opts.max_new_tokens == 1 || finished {
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
    let mut st = DecodeState {
        ids: Tensor::from_slice(device, &[batch], &feed(1, &first))?,
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
    let splits = decode::splits_for(batch as u32, dims.hkv as u32, max_seq as u32, device.sm_count());
    let mut pass = Pass::new(lm, AttentionKind::Decode, batch, 1, splits)?;
    let mut body = |s: &AsyncStream, st: &mut DecodeState, pass: &mut Pass| -> Result<()> {
        let pos = Positions {
            positions: &st.positions,
            slots: &st.slots,
            lens: &st.lens,
            cos_sin: &cos_sin,
            seq: 1,
        };
        lm.forward(s, &st.ids, &mut caches, &pos, pass)?;
        advance_decode::launch(
            s,
            pass.next_ids(),
            &mut st.ids,
            &mut st.positions,
            &mut st.slots,
            &mut st.lens,
            &mut st.history,
            &mut st.step,
            batch as u32,
            st.steps as u32,
        )?;
        Ok(())
    };
    let graph = if opts.graph {
        let mut captured = Err(ModelError::Request("capture did not run".into()));
        let g = on.capture(|s| {
            captured = body(s, &mut st, &mut pass);
            captured
                .as_ref()
                .map(|_| ())
                .map_err(|e| megaops::Error::Invalid(e.to_string()))
        });
        captured?;
        let g = g?;
        g.upload()?;
        Some(g)
    } else {
        None
    };
    let t1 = Instant::now();
    for t in 1..=steps {
        match &graph {
            Some(g) => g.launch(on)?,
            None => body(on, &mut st, &mut pass)?,
        }
        on.synchronize()?;
        let sampled = pass.next_ids().tensor().to_vec()?;
        if opts.keep_logits {
            out.logits.push(pass.logits().tensor().to_vec()?);
        }
        out.decode_steps = t;
        let finished = record(t, &sampled, &mut out);
        if finished {
            break;
        }
        if opts.force_tokens.is_some() && t < steps {
            st.ids.copy_from_slice(&feed(t + 1, &sampled))?;
        }
    }
    out.decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(out)
}
