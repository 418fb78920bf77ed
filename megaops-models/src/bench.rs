//! End-to-end benchmark of a loaded model: one [`Workload`] at one batch size in one
//! [`Mode`], timed with CUDA events around each decode step (graph replays, or the eager
//! launches of a step between two full barriers) and around the prefill, with no host
//! synchronisation between steps. On the CPU backend the same run is timed by the wall
//! clock (the figures then only show that the path works).

use crate::error::{ModelError, Result};
use crate::generate::Session;
use crate::model::CausalLm;
use megaops::{AsyncStream, Device, Event, LaunchTarget as _, Tensor};
use megaops_kernels::bandwidth::read_bandwidth;
use serde::Serialize;
use std::time::Instant;

/// What a benchmark row runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A 128-token prompt, then 64 new tokens.
    ShortDecode,
    /// A 1024-token prompt, then 1024 new tokens.
    LongDecode,
    /// The prefill of a 1024-token prompt per sequence (and its first token).
    Prefill,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 3] = [Workload::ShortDecode, Workload::LongDecode, Workload::Prefill];

    /// The name used on the command line and in the JSON rows.
    pub fn name(self) -> &'static str {
        match self {
            Workload::ShortDecode => "short-decode",
            Workload::LongDecode => "long-decode",
            Workload::Prefill => "prefill",
        }
    }

    /// Parses [`Workload::name`].
    pub fn parse(s: &str) -> Result<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            ModelError::Request(format!(
                "unknown workload `{s}`; known: short-decode, long-decode, prefill"
            ))
        })
    }

    /// Prompt tokens per sequence.
    pub fn prompt_len(self) -> usize {
        match self {
            Workload::ShortDecode => 128,
            Workload::LongDecode | Workload::Prefill => 1024,
        }
    }

    /// New tokens per sequence (the first comes from the prefill).
    pub fn new_tokens(self) -> usize {
        match self {
            Workload::ShortDecode => 64,
            Workload::LongDecode => 1024,
            Workload::Prefill => 1,
        }
    }
}

/// How the kernels of a step are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Overlapped on an [`AsyncStream`] of several streams, the decode step a graph.
    Overlapped,
    /// The same kernels one after another ([`AsyncStream::serial`]), the step a graph.
    Serial,
    /// Overlapped, but every decode step launched eagerly (no graph).
    Eager,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::Overlapped, Mode::Serial, Mode::Eager];

    /// The name used on the command line and in the JSON rows.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Overlapped => "overlapped",
            Mode::Serial => "serial",
            Mode::Eager => "eager",
        }
    }

    /// Parses [`Mode::name`].
    pub fn parse(s: &str) -> Result<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ModelError::Request(format!("unknown mode `{s}`; known: overlapped, serial, eager")))
    }

    /// The AsyncStream this mode runs on (`streams` for the overlapped ones).
    pub fn stream(self, device: &Device, streams: usize) -> Result<AsyncStream> {
        Ok(match self {
            Mode::Serial => AsyncStream::serial(device)?,
            Mode::Overlapped | Mode::Eager => AsyncStream::new(device, streams)?,
        })
    }
}

/// One benchmark run.
#[derive(Clone, Copy, Debug)]
pub struct BenchSpec {
    /// What to run.
    pub workload: Workload,
    /// Sequences.
    pub batch: usize,
    /// How.
    pub mode: Mode,
    /// Overrides the workload's prompt length (small runs, tests).
    pub prompt_len: Option<usize>,
    /// Overrides the workload's new tokens.
    pub new_tokens: Option<usize>,
    /// Timed prefills (after one untimed); the row reports their median.
    pub prefill_reps: usize,
    /// Seed of the random prompts.
    pub seed: u64,
}

impl BenchSpec {
    /// A run of `workload` at `batch` in `mode`, with the workload's lengths.
    pub fn new(workload: Workload, batch: usize, mode: Mode) -> BenchSpec {
        BenchSpec {
            workload,
            batch,
            mode,
            prompt_len: None,
            new_tokens: None,
            prefill_reps: 3,
            seed: 0,
        }
    }

    /// Prompt tokens per sequence.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len.unwrap_or(self.workload.prompt_len())
    }

    /// New tokens per sequence.
    pub fn new_tokens(&self) -> usize {
        match self.workload {
            Workload::Prefill => 1,
            _ => self.new_tokens.unwrap_or(self.workload.new_tokens()),
        }
    }
}

/// One result row (the JSON shape `megaops bench --json` writes and
/// `bench/torch_baseline.py` matches).
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// The model (preset name or folder).
    pub model: String,
    /// [`Workload::name`].
    pub workload: String,
    /// Sequences.
    pub batch: usize,
    /// [`Mode::name`].
    pub mode: String,
    /// Prompt tokens per sequence.
    pub prompt_len: usize,
    /// New tokens per sequence.
    pub new_tokens: usize,
    /// Median decode step, ms (none for the prefill workload).
    pub step_ms: Option<f64>,
    /// 10th and 90th percentile of the decode step, ms.
    pub step_p10_ms: Option<f64>,
    /// See `step_p10_ms`.
    pub step_p90_ms: Option<f64>,
    /// Decode: sequences / step time; prefill: prompt tokens / prefill time.
    pub tokens_per_s: f64,
    /// Bytes a decode step reads (weights + the KV cache at the run's mean context) over
    /// the step time, in GB/s.
    pub step_gbps: Option<f64>,
    /// `step_gbps` over `read_gbps`.
    pub mbu: Option<f64>,
    /// Median prefill of the prompts, ms.
    pub prefill_ms: f64,
    /// The device's pure-read bandwidth measured in the same run, GB/s.
    pub read_gbps: Option<f64>,
    /// `cuda-events` or `wall` (CPU backend).
    pub timing: String,
    /// The device.
    pub device: String,
}

/// Deterministic random prompts: `batch` of `len` ids below `vocab`.
pub fn random_prompts(batch: usize, len: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
    (0..batch)
        .map(|_| {
            (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % vocab as u64) as u32
                })
                .collect()
        })
        .collect()
}

/// Brackets device work with full barriers: CUDA events on a GPU, the wall clock after
/// a synchronise on the CPU backend.
enum Mark {
    Event(Event),
    Wall(Instant),
}

fn mark(on: &AsyncStream) -> Result<Mark> {
    if on.device().is_cuda() {
        Ok(Mark::Event(on.record_event()?))
    } else {
        on.synchronize()?;
        Ok(Mark::Wall(Instant::now()))
    }
}

fn elapsed_ms(a: &Mark, b: &Mark) -> Result<f64> {
    match (a, b) {
        (Mark::Event(a), Mark::Event(b)) => Ok(a.elapsed_ms(b)? as f64),
        (Mark::Wall(a), Mark::Wall(b)) => Ok(b.duration_since(*a).as_secs_f64() * 1e3),
        _ => Err(ModelError::Request("timing marks of two kinds".into())),
    }
}

/// Median of `v` and its 10th / 90th percentiles.
fn percentiles(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.1), at(0.9)))
}

/// Runs `spec` on `lm` and returns its row; `read_gbps` is the roofline of the same run
/// (see [`read_bandwidth_gbps`]).
pub fn run(lm: &CausalLm, model: &str, spec: &BenchSpec, streams: usize, read_gbps: Option<f64>) -> Result<BenchRow> {
    let c = lm.config();
    let device = lm.lm_head().device().clone();
    let (batch, prompt_len, new_tokens) = (spec.batch, spec.prompt_len(), spec.new_tokens());
    let prompts = random_prompts(batch, prompt_len, c.vocab_size, spec.seed);
    let opts = crate::GenerateOptions {
        max_new_tokens: new_tokens,
        ignore_eos: true,
        ..crate::GenerateOptions::default()
    };
    crate::generate::check_request(c, &prompts, &opts)?;
    let on = spec.mode.stream(&device, streams)?;
    let mut session = Session::new(lm, batch, prompt_len, new_tokens)?;
    let mut prefill = session.prefill_inputs(&prompts)?;

    // One untimed prefill (module loading, first-touch), then the timed ones.
    session.prefill(&on, &mut prefill)?;
    on.synchronize()?;
    let mut prefill_times = Vec::new();
    for _ in 0..spec.prefill_reps.max(1) {
        let a = mark(&on)?;
        session.prefill(&on, &mut prefill)?;
        let b = mark(&on)?;
        on.synchronize()?;
        prefill_times.push(elapsed_ms(&a, &b)?);
    }
    let (prefill_ms, _, _) = percentiles(prefill_times).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    let first = prefill.pass().next_ids().tensor().to_vec()?;
    drop(prefill);

    let mut step_times = Vec::new();
    if new_tokens > 1 {
        let mut decoder = session.decoder(&first)?;
        let graph = match spec.mode {
            Mode::Eager => None,
            Mode::Overlapped | Mode::Serial => Some(decoder.capture(&on)?),
        };
        let steps = decoder.max_steps();
        let mut marks = Vec::with_capacity(steps + 1);
        marks.push(mark(&on)?);
        for _ in 0..steps {
            match &graph {
                Some(g) => g.launch(&on)?,
                None => decoder.step(&on)?,
            }
            marks.push(mark(&on)?);
        }
        on.synchronize()?;
        for w in marks.windows(2) {
            step_times.push(elapsed_ms(&w[0], &w[1])?);
        }
    }
    let step = percentiles(step_times);
    let step_ms = step.map(|s| s.0);
    // A step at context `n` reads the weights and `n` cached positions per sequence; the
    // run's steps see contexts prompt_len + 1 ..= prompt_len + new_tokens - 1.
    let mean_context = prompt_len as f64 + new_tokens as f64 / 2.0;
    let step_bytes = c.step_weight_bytes() as f64 + c.kv_bytes_per_token() as f64 * mean_context * batch as f64;
    let step_gbps = step_ms.map(|ms| step_bytes / (ms * 1e-3) / 1e9);
    let tokens_per_s = match step_ms {
        Some(ms) => batch as f64 / (ms * 1e-3),
        None => (batch * prompt_len) as f64 / (prefill_ms * 1e-3),
    };
    Ok(BenchRow {
        model: model.to_string(),
        workload: spec.workload.name().into(),
        batch,
        mode: spec.mode.name().into(),
        prompt_len,
        new_tokens,
        step_ms,
        step_p10_ms: step.map(|s| s.1),
        step_p90_ms: step.map(|s| s.2),
        tokens_per_s,
        step_gbps,
        mbu: step_gbps.zip(read_gbps).map(|(s, r)| s / r),
        prefill_ms,
        read_gbps,
        timing: if device.is_cuda() { "cuda-events" } else { "wall" }.into(),
        device: device.name(),
    })
}

/// The device's pure-read bandwidth in GB/s (`bandwidth::read_bandwidth` over a 1 GiB
/// buffer, 4 CTAs per SM, median of 7 graph replays of 4 launches); `None` on the CPU
/// backend.
pub fn read_bandwidth_gbps(device: &Device) -> Result<Option<f64>> {
    if !device.is_cuda() {
        return Ok(None);
    }
    const WORDS: usize = 256 << 20;
    let on = AsyncStream::serial(device)?;
    let words: Vec<u32> = random_prompts(1, WORDS, u32::MAX as usize, 7).concat();
    let data = Tensor::from_slice(device, &[WORDS], &words)?;
    let ctas = device.sm_count() * 4;
    let mut out = Tensor::<u32>::zeros(device, &[ctas as usize])?;
    let vectors = (WORDS / 4) as u64;
    let g = on.capture(|s| {
        for _ in 0..4 {
            read_bandwidth::launch(s, &data, &mut out, vectors, ctas)?;
        }
        Ok(())
    })?;
    g.upload()?;
    g.launch(&on)?;
    on.synchronize()?;
    let mut times = Vec::new();
    for _ in 0..7 {
        let a = on.record_event()?;
        g.launch(&on)?;
        let b = on.record_event()?;
        on.synchronize()?;
        times.push(a.elapsed_ms(&b)? as f64 / 4.0);
    }
    let (ms, _, _) = percentiles(times).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    Ok(Some((vectors * 16) as f64 / (ms * 1e-3) / 1e9))
}
