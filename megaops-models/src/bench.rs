//! End-to-end benchmark of a loaded model: one [`Workload`] at one batch size in one
//! [`Mode`], timed with CUDA events around each decode step (graph replays, or the eager
//! launches of a step between two full barriers) and around the prefill, with no host
//! synchronisation between steps. On the CPU backend the same run is timed by the wall
//! clock (the figures then only show that the path works).

use crate::error::{ModelError, Result};
use crate::generate::Session;
use crate::model::CausalLm;
use crate::tune::StepPlan;
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
    /// Overlapped on an [`AsyncStream`] of several streams; the prefill and the decode
    /// step are each captured once as a graph and replayed.
    Overlapped,
    /// The same kernels one after another ([`AsyncStream::serial`]), as graphs.
    Serial,
    /// Overlapped, but every prefill and decode step launched eagerly (no graph).
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
    /// The GEMMs of the prefill's projections.
    pub prefill_gemm: crate::layers::GemmBackend,
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
            prefill_gemm: crate::layers::GemmBackend::default(),
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
    /// Median prefill of the prompts, ms (graph replays in the graph modes).
    pub prefill_ms: f64,
    /// Whether the prefill was timed as replays of a captured graph.
    pub prefill_graph: bool,
    /// The device's pure-read bandwidth measured in the same run, GB/s.
    pub read_gbps: Option<f64>,
    /// `cuda-events` or `wall` (CPU backend).
    pub timing: String,
    /// The device.
    pub device: String,
    /// The prefill's GEMMs as they ran ([`PrefillGemm::name`](crate::layers::PrefillGemm::name)).
    pub prefill_gemm: String,
    /// Whether the decode steps ran their add + RMSNorms inside the projections
    /// ([`StepPlan::fuse_norms`]).
    pub norm_fusion: bool,
    /// Whether decode attention ran the QK-norm, RoPE and cache write itself
    /// ([`StepPlan::fuse_rope`]).
    pub rope_fusion: bool,
    /// Whether the decode steps ran their add + RMSNorms behind the output and down
    /// projections ([`StepPlan::norm_after`]).
    pub norm_after: bool,
    /// The device's begin rule for overlapping launches (`wait-kernel`, `start-event`).
    pub begin_rule: String,
    /// The device's poll spin of tile waits, ns.
    pub poll_spin_ns: u64,
    /// Whether one-chunk subkernels ran on the launch's own stream
    /// (`Device::one_chunk_on_lane`).
    pub one_chunk_on_lane: bool,
    /// Site knobs set by hand over the plan (`--site`, as given); empty at the defaults.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub site_overrides: Vec<String>,
    /// Whether the row ran the library's defaults: no tuned plan, no knob set by hand,
    /// the default prefill GEMMs, and the device's default sync settings (the caller
    /// decides; `false` from [`run`]).
    pub at_defaults: bool,
}

/// `n` deterministic pseudo-random values below `below` (xorshift).
fn random_ids(n: usize, below: u64, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % below) as u32
        })
        .collect()
}

/// Deterministic random prompts: `batch` of `len` ids below `vocab`.
pub fn random_prompts(batch: usize, len: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    random_ids(batch * len, vocab as u64, seed)
        .chunks(len.max(1))
        .map(<[u32]>::to_vec)
        .collect()
}

/// Brackets device work with full barriers: CUDA events on a GPU, the wall clock after
/// a synchronise on the CPU backend.
pub(crate) enum Mark {
    Event(Event),
    Wall(Instant),
}

pub(crate) fn mark(on: &AsyncStream) -> Result<Mark> {
    if on.device().is_cuda() {
        Ok(Mark::Event(on.record_event()?))
    } else {
        on.synchronize()?;
        Ok(Mark::Wall(Instant::now()))
    }
}

pub(crate) fn elapsed_ms(a: &Mark, b: &Mark) -> Result<f64> {
    match (a, b) {
        (Mark::Event(a), Mark::Event(b)) => Ok(a.elapsed_ms(b)? as f64),
        (Mark::Wall(a), Mark::Wall(b)) => Ok(b.duration_since(*a).as_secs_f64() * 1e3),
        _ => Err(ModelError::Request("timing marks of two kinds".into())),
    }
}

/// Median of `v` (`NaN` when empty).
pub fn median(v: Vec<f64>) -> f64 {
    percentiles(v).map_or(f64::NAN, |p| p.0)
}

/// Times `n` runs of `step` on `on`, ms each: CUDA events between consecutive steps on
/// the GPU, the wall clock on the CPU backend.
pub(crate) fn time_each(on: &AsyncStream, n: usize, mut step: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let mut marks = Vec::with_capacity(n + 1);
    marks.push(mark(on)?);
    for _ in 0..n {
        step()?;
        marks.push(mark(on)?);
    }
    on.synchronize()?;
    marks.windows(2).map(|w| elapsed_ms(&w[0], &w[1])).collect()
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

/// The prefill's and the decode step's plans of a bench row of `workload` run with
/// `plan`: a prefill row's plan is the prefill's, any other row's the decode step's (the
/// other phase runs the planners' choices).
fn phase_plans(workload: Workload, plan: &StepPlan) -> (StepPlan, StepPlan) {
    match workload {
        Workload::Prefill => (plan.clone(), StepPlan::default()),
        _ => (StepPlan::default(), plan.clone()),
    }
}

/// Runs `spec` on `lm` and returns its row; `read_gbps` is the roofline of the same run
/// (see [`read_bandwidth_gbps`]). The decode steps (the prefill, for
/// [`Workload::Prefill`]) launch with `plan`'s knob values (a tuned plan;
/// `StepPlan::default()` for the planners'), whose streams, when set, replace `streams`
/// in the overlapped modes.
pub fn run(
    lm: &CausalLm,
    model: &str,
    spec: &BenchSpec,
    streams: usize,
    plan: &StepPlan,
    read_gbps: Option<f64>,
) -> Result<BenchRow> {
    let streams = plan.streams.unwrap_or(streams);
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
    let (prefill_plan, decode_plan) = phase_plans(spec.workload, plan);
    let mut prefill = session.prefill_inputs_with(&prompts, &prefill_plan)?;
    let gemm = crate::layers::PrefillGemm::new(&device, spec.prefill_gemm)?;
    prefill.set_gemm(&gemm);

    // One untimed prefill (module loading, first-touch), then the timed ones: replays of
    // one captured prefill in the graph modes, launches in eager mode.
    session.prefill(&on, &mut prefill)?;
    on.synchronize()?;
    let prefill_graph = match spec.mode {
        Mode::Eager => None,
        Mode::Overlapped | Mode::Serial => Some(session.capture_prefill(&on, &mut prefill)?),
    };
    let mut prefill_times = Vec::new();
    for _ in 0..spec.prefill_reps.max(1) {
        let a = mark(&on)?;
        match &prefill_graph {
            Some(g) => g.launch(&on)?,
            None => session.prefill(&on, &mut prefill)?,
        }
        let b = mark(&on)?;
        on.synchronize()?;
        prefill_times.push(elapsed_ms(&a, &b)?);
    }
    let (prefill_ms, _, _) = percentiles(prefill_times).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    let first = prefill.pass().next_ids().tensor().to_vec()?;
    let prefill_replayed = prefill_graph.is_some();
    drop(prefill_graph);
    drop(prefill);

    let mut step_times = Vec::new();
    if new_tokens > 1 {
        let mut decoder = session.decoder_with(&first, &decode_plan)?;
        let graph = match spec.mode {
            Mode::Eager => None,
            Mode::Overlapped | Mode::Serial => Some(decoder.capture(&on)?),
        };
        let steps = decoder.max_steps();
        step_times = time_each(&on, steps, || {
            match &graph {
                Some(g) => g.launch(&on)?,
                None => decoder.step(&on)?,
            }
            Ok(())
        })?;
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
        prefill_graph: prefill_replayed,
        read_gbps,
        timing: if device.is_cuda() { "cuda-events" } else { "wall" }.into(),
        prefill_gemm: gemm.name(),
        norm_fusion: decode_plan.fuse_norms.unwrap_or(false),
        rope_fusion: decode_plan.fuse_rope.unwrap_or(true),
        norm_after: decode_plan.norm_after.unwrap_or(crate::model::DEFAULT_NORM_AFTER),
        begin_rule: device.begin_rule().name().into(),
        poll_spin_ns: device.poll_spin().as_nanos() as u64,
        one_chunk_on_lane: device.one_chunk_on_lane(),
        device: device.name(),
        site_overrides: Vec::new(),
        at_defaults: false,
    })
}

/// What [`trace`] recorded: the tiles of one prefill and of one decode step, and the
/// decode step's time with every launch traced.
pub struct TracedRun {
    /// One traced prefill.
    pub prefill: megaops::Trace,
    /// One traced decode step (a replay of a graph captured with tracing on), if the
    /// workload decodes.
    pub decode: Option<megaops::Trace>,
    /// Median step time of the traced graph's replays (CUDA events; wall time on the CPU
    /// backend), to set against the untraced [`BenchRow::step_ms`] of the same mode.
    pub traced_step_ms: Option<f64>,
}

/// Runs `spec` once more with tile tracing on: a traced prefill (recorded), a decode
/// graph captured with tracing on, one replay (recorded), then the workload's other
/// replays timed as [`run`] times them, all with `plan` and `spec`'s prefill GEMMs applied
/// as [`run`] applies them, so the trace shows the launches of the row it is set against.
/// Eager mode traces its first step and times nothing.
pub fn trace(lm: &CausalLm, spec: &BenchSpec, streams: usize, plan: &StepPlan) -> Result<TracedRun> {
    let streams = plan.streams.unwrap_or(streams);
    let c = lm.config();
    let device = lm.lm_head().device().clone();
    let (batch, prompt_len, new_tokens) = (spec.batch, spec.prompt_len(), spec.new_tokens());
    let prompts = random_prompts(batch, prompt_len, c.vocab_size, spec.seed);
    let on = spec.mode.stream(&device, streams)?;
    device.start_trace(crate::generate::TRACE_CAPACITY)?;
    let mut session = Session::new(lm, batch, prompt_len, new_tokens)?;
    let (prefill_plan, decode_plan) = phase_plans(spec.workload, plan);
    let mut prefill = session.prefill_inputs_with(&prompts, &prefill_plan)?;
    let gemm = crate::layers::PrefillGemm::new(&device, spec.prefill_gemm)?;
    prefill.set_gemm(&gemm);
    // An untraced prefill first (module loading), then the traced one.
    session.prefill(&on, &mut prefill)?;
    on.synchronize()?;
    on.set_tracing(true);
    session.prefill(&on, &mut prefill)?;
    on.synchronize()?;
    on.set_tracing(false);
    let prefill_trace = device.take_trace()?;
    let first = prefill.pass().next_ids().tensor().to_vec()?;
    drop(prefill);
    if new_tokens <= 1 {
        return Ok(TracedRun {
            prefill: prefill_trace,
            decode: None,
            traced_step_ms: None,
        });
    }
    let mut decoder = session.decoder_with(&first, &decode_plan)?;
    on.set_tracing(true);
    let graph = match spec.mode {
        Mode::Eager => None,
        Mode::Overlapped | Mode::Serial => Some(decoder.capture(&on)),
    };
    let graph = match graph {
        Some(g) => Some(g.inspect_err(|_| on.set_tracing(false))?),
        None => None,
    };
    let Some(graph) = graph else {
        decoder.step(&on)?;
        on.synchronize()?;
        on.set_tracing(false);
        return Ok(TracedRun {
            prefill: prefill_trace,
            decode: Some(device.take_trace()?),
            traced_step_ms: None,
        });
    };
    on.set_tracing(false);
    graph.launch(&on)?;
    on.synchronize()?;
    let decode = device.take_trace()?;
    // As many timed replays as the log holds whole (each writes as many records).
    let fit = crate::generate::TRACE_CAPACITY as usize / decode.tiles.len().max(1);
    let steps = decoder.max_steps().saturating_sub(1).min(fit.saturating_sub(1));
    let mut marks = Vec::with_capacity(steps + 1);
    marks.push(mark(&on)?);
    for _ in 0..steps {
        graph.launch(&on)?;
        marks.push(mark(&on)?);
    }
    on.synchronize()?;
    let mut times = Vec::new();
    for w in marks.windows(2) {
        times.push(elapsed_ms(&w[0], &w[1])?);
    }
    let dropped = device.take_trace()?.dropped;
    if dropped > 0 {
        return Err(ModelError::Request(format!(
            "the trace log overflowed by {dropped} records while timing traced replays: the traced step time \
             would not include their stores"
        )));
    }
    Ok(TracedRun {
        prefill: prefill_trace,
        decode: Some(decode),
        traced_step_ms: percentiles(times).map(|p| p.0),
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
    let words = random_ids(WORDS, 1 << 32, 7);
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

/// The time of one operator (a kernel at one config and grid, at one site of the model)
/// in a profiled step.
#[derive(Clone, Debug, Serialize)]
pub struct OpTime {
    /// `site: kernel[entry]×ctas` ([`op_name`]).
    pub op: String,
    /// Its launches in the step (one per layer for a layer's operator).
    pub launches: usize,
    /// Sum of its launches' spans with overlap, ms.
    pub span_ms: f64,
    /// Time during which it was the only kernel running, ms (the step waits on it).
    pub exposed_ms: f64,
    /// Sum of its launches' spans in the serial step, ms (its isolated cost).
    pub serial_ms: f64,
}

/// Where the time of one step goes: each operator's exposed time under overlap against
/// its isolated (serial) time, from [`LaunchSpan`](megaops::LaunchSpan) events.
#[derive(Clone, Debug, Serialize)]
pub struct Breakdown {
    /// The model.
    pub model: String,
    /// `decode` or `prefill`.
    pub phase: String,
    /// Sequences.
    pub batch: usize,
    /// Context (decode) or prompt length (prefill).
    pub context: usize,
    /// First kernel start to last kernel end, overlapped, ms (profiled: event nodes
    /// between kernels slow it down a little).
    pub step_ms: f64,
    /// The same in the serial mode, ms.
    pub serial_ms: f64,
    /// Time with no kernel running in the overlapped step, ms.
    pub idle_ms: f64,
    /// Time with two or more kernels running, ms.
    pub overlapped_ms: f64,
    /// Per operator, by exposed time (largest first).
    pub ops: Vec<OpTime>,
}

/// How a breakdown names a launch: `kernel[entry]×ctas`, after `site: ` when the launch
/// names its site (the engine's launches do: `attn.qkv`, `mlp.down`, …).
pub fn op_name(s: &megaops::LaunchSpan) -> String {
    megaops::trace::site_label(s.site, format!("{}[{}]×{}", s.kernel, s.entry, s.ctas))
}

/// Spans in ms from the first start: (op, start, end).
fn spans_ms(spans: &[megaops::LaunchSpan]) -> Result<Vec<(String, f64, f64)>> {
    let Some(first) = spans.first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(spans.len());
    for s in spans {
        let a = first.start.elapsed_ms(&s.start)? as f64;
        let b = first.start.elapsed_ms(&s.end)? as f64;
        out.push((op_name(s), a, b));
    }
    let t0 = out.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    for s in &mut out {
        s.1 -= t0;
        s.2 -= t0;
    }
    Ok(out)
}

/// Exposed time per op, idle and overlapped time of a set of spans (a sweep over their
/// boundaries).
fn sweep(spans: &[(String, f64, f64)]) -> (std::collections::HashMap<String, f64>, f64, f64, f64) {
    let mut cuts: Vec<f64> = spans.iter().flat_map(|s| [s.1, s.2]).collect();
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    let mut exposed = std::collections::HashMap::new();
    let (mut idle, mut overlapped) = (0.0, 0.0);
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let mid = 0.5 * (a + b);
        let active: Vec<&(String, f64, f64)> = spans.iter().filter(|s| s.1 <= mid && mid < s.2).collect();
        match active.len() {
            0 => idle += b - a,
            1 => *exposed.entry(active[0].0.clone()).or_insert(0.0) += b - a,
            _ => overlapped += b - a,
        }
    }
    let total = cuts.last().copied().unwrap_or(0.0) - cuts.first().copied().unwrap_or(0.0);
    (exposed, idle, overlapped, total)
}

/// Profiles one decode step (the last of `steps` graph replays at context
/// `prompt_len + steps`) or one prefill of `batch × prompt_len` tokens, overlapped on
/// `streams` streams and serial.
pub fn breakdown(
    lm: &CausalLm,
    model: &str,
    phase: Workload,
    batch: usize,
    prompt_len: usize,
    streams: usize,
) -> Result<Breakdown> {
    let c = lm.config();
    let device = lm.lm_head().device().clone();
    if !device.is_cuda() {
        return Err(ModelError::Request(
            "the breakdown times kernels with CUDA events: it needs a GPU".into(),
        ));
    }
    let steps = 4;
    let prompts = random_prompts(batch, prompt_len, c.vocab_size, 0);
    let mut session = Session::new(lm, batch, prompt_len, steps + 1)?;
    let mut profiles = Vec::new();
    for mode in [Mode::Overlapped, Mode::Serial] {
        let on = mode.stream(&device, streams)?;
        let mut prefill = session.prefill_inputs(&prompts)?;
        session.prefill(&on, &mut prefill)?;
        on.synchronize()?;
        let spans = if phase == Workload::Prefill {
            on.set_profiling(true);
            session.prefill(&on, &mut prefill)?;
            on.synchronize()?;
            let spans = on.take_profile();
            on.set_profiling(false);
            spans
        } else {
            let first = prefill.pass().next_ids().tensor().to_vec()?;
            drop(prefill);
            let mut decoder = session.decoder(&first)?;
            on.set_profiling(true);
            let graph = decoder.capture(&on);
            let spans = on.take_profile();
            on.set_profiling(false);
            let graph = graph?;
            for _ in 0..decoder.max_steps() {
                graph.launch(&on)?;
            }
            on.synchronize()?;
            spans
        };
        profiles.push(spans_ms(&spans)?);
    }
    let (serial, overlapped) = (profiles.pop().unwrap_or_default(), profiles.pop().unwrap_or_default());
    let (exposed, idle, overlap, step_ms) = sweep(&overlapped);
    let (_, _, _, serial_ms) = sweep(&serial);
    let mut ops: Vec<OpTime> = Vec::new();
    for (op, a, b) in &overlapped {
        match ops.iter_mut().find(|o| &o.op == op) {
            Some(o) => {
                o.launches += 1;
                o.span_ms += b - a;
            }
            None => ops.push(OpTime {
                op: op.clone(),
                launches: 1,
                span_ms: b - a,
                exposed_ms: exposed.get(op).copied().unwrap_or(0.0),
                serial_ms: 0.0,
            }),
        }
    }
    for (op, a, b) in &serial {
        if let Some(o) = ops.iter_mut().find(|o| &o.op == op) {
            o.serial_ms += b - a;
        }
    }
    ops.sort_by(|a, b| b.exposed_ms.total_cmp(&a.exposed_ms));
    Ok(Breakdown {
        model: model.to_string(),
        phase: if phase == Workload::Prefill {
            "prefill"
        } else {
            "decode"
        }
        .into(),
        batch,
        context: if phase == Workload::Prefill {
            prompt_len
        } else {
            prompt_len + steps
        },
        step_ms,
        serial_ms,
        idle_ms: idle,
        overlapped_ms: overlap,
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_splits_time_into_exposed_overlapped_and_idle() {
        let s = |op: &str, a: f64, b: f64| (op.to_string(), a, b);
        // a alone 0–1, a+b 1–2, b alone 2–3, idle 3–4, c alone 4–6, a again 5.5–7.
        let spans = [s("a", 0.0, 2.0), s("b", 1.0, 3.0), s("c", 4.0, 6.0), s("a", 5.5, 7.0)];
        let (exposed, idle, overlapped, total) = sweep(&spans);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(exposed["a"], 1.0 + 1.0), "{exposed:?}");
        assert!(close(exposed["b"], 1.0), "{exposed:?}");
        assert!(close(exposed["c"], 1.5), "{exposed:?}");
        assert!(close(idle, 1.0) && close(overlapped, 1.0 + 0.5) && close(total, 7.0));
    }

    #[test]
    fn percentiles_pick_ranks() {
        let v: Vec<f64> = (1..=11).rev().map(f64::from).collect();
        assert_eq!(percentiles(v), Some((6.0, 2.0, 10.0)));
        assert_eq!(percentiles(Vec::new()), None);
    }

    #[test]
    fn names_parse_back() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()).ok(), Some(w));
        }
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()).ok(), Some(m));
        }
        assert!(Workload::parse("medium").is_err());
    }
}
