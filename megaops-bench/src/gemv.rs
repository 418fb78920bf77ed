//! `gemv` suite: the decode GEMVs of `megaops_kernels::gemv` against the pure-read
//! roofline (measured in the same run by `bandwidth::measure`) and against cuBLAS
//! (`cublasGemmEx`, bf16 in/out, f32 compute, on the same tensors), at the decode shapes
//! of Qwen3-0.6B/1.7B/8B and Llama-3.2-1B (QKV, o, gate+up, down) for m = 1, 4, 8, 16;
//! plus one decoder layer's four projections in sequence, LM heads, and greedy argmax.
//!
//! Per shape it times cuBLAS, the config and split `plan` picks, and every config (plain
//! and with split-K at the plan's split, or 4 when the plan does not split): the table
//! shows the plan's time, GB/s over the fewest bytes (W + x + y), % of the measured read
//! bandwidth, the ratio to cuBLAS (> 1: faster than cuBLAS), and the best measured config.
//! Timing: CUDA-graph replays of many calls (`harness::time_graph`), with the weights
//! rotating through views of a 320 MiB random pool (more than 5× the L2) so they come from
//! HBM. Errors are printed and the suite moves on; it stops adding shapes past its time
//! budget (60 s on an H200).

use crate::bandwidth;
use crate::cublas::Cublas;
use crate::harness::{Table, f3, time_graph};
use megaops::{AsyncStream, Device, Error, LaunchOptions, Result, Tensor, bf16};
use megaops_kernels::gemv::plan::{self, Choice, Placement, SplitWorkspace};
use megaops_kernels::gemv::{gate_up_silu, gate_up_silu_splitk, gemv, gemv_splitk, lm_head};
use megaops_kernels::sampling::{ArgmaxWorkspace, argmax};
use std::path::Path;
use std::time::Instant;

/// Wall-clock budget of the suite.
const BUDGET_S: f64 = 55.0;
/// Elements of the random weight pool (320 MiB of bf16).
const POOL: usize = 160 << 20;
/// Bytes of weights one rotation covers (over 2× the largest L2 of the machines).
const ROTATION_BYTES: usize = 160 << 20;
/// GPU time one graph replay aims for.
const REPLAY_TARGET_US: f64 = 1000.0;

/// (model, hidden, intermediate, q width, kv width, vocab) of the presets the suite times.
fn models() -> Vec<(&'static str, usize, usize, usize, usize, usize)> {
    crate::models::shapes(&crate::models::LINEAR_MODELS)
        .iter()
        .map(|m| (m.name, m.hidden, m.inter, m.q(), m.kv(), m.vocab))
        .collect()
}

/// What one row times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `y = x·Wᵀ`, W `[n, k]` (QKV, o, down, and gate+up as one `[2·inter, k]` GEMV).
    Linear,
    /// `h = silu(x·W_gᵀ)·(x·W_uᵀ)`, W `[2·n, k]`, output `[m, n]`.
    GateUp,
}

/// One GEMV shape.
#[derive(Clone, Debug)]
struct Shape {
    label: String,
    op: Op,
    m: usize,
    /// Output columns.
    n: usize,
    k: usize,
}

impl Shape {
    /// Rows of W.
    fn w_rows(&self) -> usize {
        if self.op == Op::GateUp { 2 * self.n } else { self.n }
    }

    /// The fewest bytes: W, x and y once.
    fn bytes(&self) -> f64 {
        2.0 * (self.w_rows() * self.k + self.m * self.k + self.m * self.n) as f64
    }
}

/// What is timed.
#[derive(Clone, Copy, Debug)]
enum Variant {
    Cublas,
    /// Kernel config `cfg` with `splits` (1: the plain kernel).
    Config {
        cfg: usize,
        splits: u32,
    },
}

/// Rotating operands of one shape: W views into the pool (enough sets to cover
/// [`ROTATION_BYTES`]), x and y per set, and a split-K workspace per set.
struct Operands {
    x: Vec<Tensor<bf16>>,
    w: Vec<Tensor<bf16>>,
    y: Vec<Tensor<bf16>>,
    ws: Vec<SplitWorkspace>,
}

impl Operands {
    fn new(dev: &Device, pool: &Tensor<bf16>, s: &Shape) -> Result<Operands> {
        let wn = s.w_rows() * s.k;
        let span = wn.next_multiple_of(64) + 64;
        if span > POOL {
            return Err(Error::Invalid(format!("{} does not fit the weight pool", s.label)));
        }
        let sets = ROTATION_BYTES.div_ceil(2 * wn).clamp(1, 64);
        let mut ops = Operands {
            x: Vec::new(),
            w: Vec::new(),
            y: Vec::new(),
            ws: Vec::new(),
        };
        for i in 0..sets {
            let start = (i * span) % (POOL - span + 1) / 64 * 64;
            ops.w.push(pool.narrow(start, start + wn)?.reshape(&[s.w_rows(), s.k])?);
            // x from another part of the pool (random, never zeros).
            let xs = (start + POOL / 2) % (POOL - s.m * s.k) / 64 * 64;
            ops.x.push(pool.narrow(xs, xs + s.m * s.k)?.reshape(&[s.m, s.k])?);
            let out_cols = if s.op == Op::GateUp { s.n } else { s.w_rows() };
            ops.y.push(Tensor::empty(dev, &[s.m, out_cols])?);
            ops.ws
                .push(SplitWorkspace::new(dev, s.m, s.n, plan::MAX_SPLITS as usize, 2)?);
        }
        Ok(ops)
    }
}

/// Launches `variant` of `s` on set `j`.
fn launch(on: &AsyncStream, cublas: &Cublas, s: &Shape, ops: &mut Operands, j: usize, variant: Variant) -> Result<()> {
    let (m, n, k) = (s.m as u32, s.n as u32, s.k as u32);
    let (x, w) = (&ops.x[j], &ops.w[j]);
    let (y, ws) = (&mut ops.y[j], &mut ops.ws[j]);
    match (variant, s.op) {
        (Variant::Cublas, _) => {
            let stream = on.streams()[0]
                .cu_stream()
                .ok_or_else(|| Error::Invalid("cuBLAS needs a CUDA stream".into()))?;
            if s.op == Op::GateUp {
                return Err(Error::Invalid("cuBLAS has no fused gate+up".into()));
            }
            cublas.gemm(stream, x, w, y, false)
        }
        (Variant::Config { cfg, splits: 1 }, Op::Linear) => {
            gemv::launch_with(on, &LaunchOptions::config(cfg), x, w, y, m, n, k)
        }
        (Variant::Config { cfg, splits }, Op::Linear) => {
            ws.check(splits, 1, m, n, 16)?;
            gemv_splitk::launch_with(
                on,
                &LaunchOptions::config(cfg),
                x,
                w,
                y,
                &mut ws.ws,
                &mut ws.counters,
                m,
                n,
                k,
                splits,
            )
        }
        (Variant::Config { cfg, splits: 1 }, Op::GateUp) => {
            gate_up_silu::launch_with(on, &LaunchOptions::config(cfg), x, w, y, m, n, k)
        }
        (Variant::Config { cfg, splits }, Op::GateUp) => {
            ws.check(splits, 2, m, n, 16)?;
            gate_up_silu_splitk::launch_with(
                on,
                &LaunchOptions::config(cfg),
                x,
                w,
                y,
                &mut ws.ws,
                &mut ws.counters,
                m,
                n,
                k,
                splits,
            )
        }
    }
}

struct Suite {
    dev: Device,
    astream: AsyncStream,
    cublas: Cublas,
    pool: Tensor<bf16>,
    replays: usize,
    read_gbps: f64,
    consecutive_errors: usize,
}

impl Suite {
    /// Median µs per call of `variant` on `s`, by graph replay over the rotating sets.
    fn time(&mut self, s: &Shape, ops: &mut Operands, variant: Variant) -> Result<f64> {
        let floor_us = s.bytes() / (self.read_gbps * 1e3);
        let reps = ((REPLAY_TARGET_US / floor_us.max(1.0)).ceil() as usize).clamp(ops.w.len().min(64), 128);
        let sets = ops.w.len();
        let (astream, cublas) = (&self.astream, &self.cublas);
        let stats = time_graph(astream, reps, self.replays, |st, i| {
            launch(st, cublas, s, ops, i % sets, variant)
        })?;
        Ok(stats.median_us)
    }

    /// Records an error; after three in a row (a dead context) the suite stops.
    fn failed(&mut self, what: &str, e: &Error) -> Result<()> {
        eprintln!("gemv suite: {what}: {e}");
        self.consecutive_errors += 1;
        if self.consecutive_errors >= 3 {
            return Err(Error::Invalid("three errors in a row: stopping the gemv suite".into()));
        }
        Ok(())
    }

    fn ok<T>(&mut self, what: &str, r: Result<T>) -> Result<Option<T>> {
        match r {
            Ok(v) => {
                self.consecutive_errors = 0;
                Ok(Some(v))
            }
            Err(e) => {
                self.failed(what, &e)?;
                Ok(None)
            }
        }
    }
}

/// The shapes of one model at `m` tokens.
fn model_shapes(model: &str, h: usize, inter: usize, q: usize, kv: usize, m: usize) -> Vec<Shape> {
    let s = |name: &str, op, n, k| Shape {
        label: format!("{model} {name}"),
        op,
        m,
        n,
        k,
    };
    vec![
        s("qkv", Op::Linear, q + 2 * kv, h),
        s("o", Op::Linear, h, q),
        s("gate+up", Op::Linear, 2 * inter, h),
        s("gate+up+silu", Op::GateUp, inter, h),
        s("down", Op::Linear, h, inter),
    ]
}

/// Runs the suite; errors are printed, never panicked on.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("gemv suite stopped: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let start = Instant::now();
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gemv suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let astream = AsyncStream::serial(&dev)?;
    let read = bandwidth::measure(&dev, &astream)?;
    eprintln!("gemv suite: pure-read bandwidth {:.0} GB/s", read.gbps);
    // 32 MiB of random values tiled over the pool (generating 320 MiB would take seconds;
    // a repeated block is as good for streaming: no cache holds it).
    let block = megaops::testing::random::<bf16>(POOL / 10, 1.0, 0x6e76);
    let pool: Vec<bf16> = block.iter().copied().cycle().take(POOL).collect();
    let pool = Tensor::from_slice(&dev, &[POOL], &pool)?;
    let mut suite = Suite {
        cublas: Cublas::new(&dev)?,
        dev,
        astream,
        pool,
        replays: if quick { 3 } else { 7 },
        read_gbps: read.gbps,
        consecutive_errors: 0,
    };
    let budget = crate::harness::budget_s(BUDGET_S) / if quick { 3.0 } else { 1.0 };
    shapes_table(&mut suite, out, start, budget, quick)?;
    layer_table(&mut suite, out, quick)?;
    head_table(&mut suite, out)?;
    eprintln!("gemv suite: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Every projection of every model at every m: the plan, every config, cuBLAS.
fn shapes_table(suite: &mut Suite, out: Option<&Path>, start: Instant, budget: f64, quick: bool) -> Result<()> {
    let nconf = gemv::CONFIGS.len();
    let mut cols: Vec<String> = [
        "shape",
        "m×n×k",
        "MB",
        "plan",
        "plan µs",
        "GB/s",
        "% read BW",
        "cuBLAS µs",
        "vs cuBLAS",
        "best",
        "best µs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    cols.extend((0..nconf).map(|i| format!("cfg{i} µs (split)")));
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let title = format!(
        "Decode GEMV y = x·Wᵀ (bf16, f32 accumulate): plan vs cuBLAS, % of the {:.0} GB/s pure-read bandwidth",
        suite.read_gbps
    );
    let mut table = Table::new(&title, &col_refs);
    let ms: &[usize] = if quick { &[1, 16] } else { &[1, 4, 8, 16] };
    let mut ratios = Vec::new();
    'shapes: for &m in ms {
        for (model, h, inter, q, kv, _) in models() {
            for s in model_shapes(model, h, inter, q, kv, m) {
                if start.elapsed().as_secs_f64() > budget {
                    eprintln!("gemv suite: time budget reached at {} m={m}", s.label);
                    break 'shapes;
                }
                if let Some(row) = shape_row(suite, &s, &mut ratios)? {
                    table.row(row);
                }
            }
        }
    }
    table.emit(out);
    if !ratios.is_empty() {
        let geo = (ratios.iter().map(|r: &f64| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let mut summary = Table::new(
            "Decode GEMV summary",
            &["shapes vs cuBLAS", "geomean ratio (>1: faster)", "min", "max"],
        );
        let (min, max) = ratios.iter().fold((f64::MAX, 0f64), |(a, b), &r| (a.min(r), b.max(r)));
        summary.row(vec![
            ratios.len().to_string(),
            format!("{geo:.3}"),
            format!("{min:.2}"),
            format!("{max:.2}"),
        ]);
        summary.emit(out);
    }
    Ok(())
}

/// One row of the shapes table (None when the inputs could not be built).
fn shape_row(suite: &mut Suite, s: &Shape, ratios: &mut Vec<f64>) -> Result<Option<Vec<String>>> {
    let built = Operands::new(&suite.dev, &suite.pool, s);
    let Some(mut ops) = suite.ok(&format!("{} inputs", s.label), built)? else {
        return Ok(None);
    };
    let (configs, rg) = if s.op == Op::GateUp {
        (gate_up_silu::CONFIGS, 2)
    } else {
        (gemv::CONFIGS, 1)
    };
    let sms = suite.dev.sm_count();
    let (m, n, k) = (s.m as u32, s.n as u32, s.k as u32);
    let choice = plan::choose(configs, rg, m, n, k, sms, plan::MAX_SPLITS, Placement::Alone);
    let Some(choice) = suite.ok(&format!("{} plan", s.label), choice)? else {
        return Ok(None);
    };
    let gbps = |us: f64| s.bytes() / us * 1e-3;
    let label = |c: &Choice| format!("cfg{}×{}", c.config, c.splits);
    let mut row = vec![
        s.label.clone(),
        format!("{}×{}×{}", s.m, s.n, s.k),
        format!("{:.1}", s.bytes() / 1e6),
        label(&choice),
    ];
    let plan_us = suite.time(
        s,
        &mut ops,
        Variant::Config {
            cfg: choice.config,
            splits: choice.splits,
        },
    );
    let plan_us = suite.ok(&format!("{} plan", s.label), plan_us)?;
    match plan_us {
        Some(us) => row.extend([
            f3(us),
            format!("{:.0}", gbps(us)),
            format!("{:.1}", 100.0 * gbps(us) / suite.read_gbps),
        ]),
        None => row.extend(["err".into(), "-".into(), "-".into()]),
    }
    let cublas_us = if s.op == Op::Linear {
        let r = suite.time(s, &mut ops, Variant::Cublas);
        suite.ok(&format!("{} cuBLAS", s.label), r)?
    } else {
        None
    };
    row.push(cublas_us.map_or("-".into(), f3));
    match (cublas_us, plan_us) {
        (Some(c), Some(p)) => {
            ratios.push(c / p);
            row.push(format!("{:.2}", c / p));
        }
        _ => row.push("-".into()),
    }
    // Every config, plain and split (the plan's split, or 4).
    let split = if choice.splits > 1 { choice.splits } else { 4 };
    let mut best: Option<(String, f64)> = plan_us.map(|us| (label(&choice), us));
    let mut cells = Vec::new();
    for cfg in 0..configs.len() {
        let mut cell = Vec::new();
        for splits in [1, split] {
            let r = suite.time(s, &mut ops, Variant::Config { cfg, splits });
            match suite.ok(&format!("{} cfg{cfg}×{splits}", s.label), r)? {
                Some(us) => {
                    cell.push(f3(us));
                    if best.as_ref().is_none_or(|(_, b)| us < *b) {
                        best = Some((format!("cfg{cfg}×{splits}"), us));
                    }
                }
                None => cell.push("err".into()),
            }
        }
        cells.push(format!("{} ({})", cell[0], cell[1]));
    }
    match best {
        Some((l, us)) => row.extend([l, f3(us)]),
        None => row.extend(["-".into(), "-".into()]),
    }
    row.extend(cells);
    Ok(Some(row))
}

/// One decoder layer's projections in sequence (QKV, o, gate+up+SiLU, down with the
/// plan's choices) vs cuBLAS (QKV, o, gate+up as one GEMM, down; no SiLU), as the model
/// sees them in a graph, at m = 1 and 16.
fn layer_table(suite: &mut Suite, out: Option<&Path>, quick: bool) -> Result<()> {
    let mut table = Table::new(
        "One decoder layer's projections in sequence (graph replay; MegaOps includes the fused SiLU)",
        &[
            "model",
            "m",
            "weights MB",
            "MegaOps µs",
            "GB/s",
            "% read BW",
            "cuBLAS µs",
            "vs cuBLAS",
        ],
    );
    for (model, h, inter, q, kv, _) in models() {
        for m in if quick { vec![1] } else { vec![1, 16] } {
            let shapes = model_shapes(model, h, inter, q, kv, m);
            // QKV, o, gate+up+silu, down (ours); QKV, o, gate+up, down (cuBLAS).
            let ours: Vec<&Shape> = [0, 1, 3, 4].iter().map(|&i| &shapes[i]).collect();
            let theirs: Vec<&Shape> = [0, 1, 2, 4].iter().map(|&i| &shapes[i]).collect();
            let built: Result<(Vec<Operands>, Vec<Operands>)> = (|| {
                let a = ours
                    .iter()
                    .map(|s| Operands::new(&suite.dev, &suite.pool, s))
                    .collect::<Result<Vec<_>>>()?;
                let b = theirs
                    .iter()
                    .map(|s| Operands::new(&suite.dev, &suite.pool, s))
                    .collect::<Result<Vec<_>>>()?;
                Ok((a, b))
            })();
            let Some((mut ops_ours, mut ops_theirs)) = suite.ok(&format!("{model} layer inputs"), built)? else {
                continue;
            };
            let sms = suite.dev.sm_count();
            // Each projection overlaps the one before it (the replays chain layers).
            let placement = Placement::BesideProducer;
            let mut variants = Vec::new();
            for s in &ours {
                let (configs, rg) = if s.op == Op::GateUp {
                    (gate_up_silu::CONFIGS, 2)
                } else {
                    (gemv::CONFIGS, 1)
                };
                let (m, n, k) = (s.m as u32, s.n as u32, s.k as u32);
                let c = plan::choose(configs, rg, m, n, k, sms, plan::MAX_SPLITS, placement)?;
                variants.push(Variant::Config {
                    cfg: c.config,
                    splits: c.splits,
                });
            }
            let bytes: f64 = ours.iter().map(|s| s.bytes()).sum();
            let sets = ops_ours.iter().chain(&ops_theirs).map(|o| o.w.len()).min().unwrap_or(1);
            let (astream, cublas) = (&suite.astream, &suite.cublas);
            let reps = sets.clamp(4, 32);
            let mine = time_graph(astream, reps, suite.replays, |st, i| {
                for ((s, ops), v) in ours.iter().zip(ops_ours.iter_mut()).zip(&variants) {
                    launch(st, cublas, s, ops, i % sets, *v)?;
                }
                Ok(())
            });
            let base = time_graph(astream, reps, suite.replays, |st, i| {
                for (s, ops) in theirs.iter().zip(ops_theirs.iter_mut()) {
                    launch(st, cublas, s, ops, i % sets, Variant::Cublas)?;
                }
                Ok(())
            });
            let mine = suite.ok(&format!("{model} layer m={m}"), mine)?.map(|st| st.median_us);
            let base = suite
                .ok(&format!("{model} layer m={m} cuBLAS"), base)?
                .map(|st| st.median_us);
            let gbps = mine.map(|us| bytes / us * 1e-3);
            table.row(vec![
                model.to_string(),
                m.to_string(),
                format!("{:.1}", bytes / 1e6),
                mine.map_or("err".into(), f3),
                gbps.map_or("-".into(), |g| format!("{g:.0}")),
                gbps.map_or("-".into(), |g| format!("{:.1}", 100.0 * g / suite.read_gbps)),
                base.map_or("err".into(), f3),
                match (mine, base) {
                    (Some(a), Some(b)) => format!("{:.2}", b / a),
                    _ => "-".into(),
                },
            ]);
        }
    }
    table.emit(out);
    Ok(())
}

/// LM heads (f32 logits, every config) vs cuBLAS (bf16 logits), and greedy argmax alone.
fn head_table(suite: &mut Suite, out: Option<&Path>) -> Result<()> {
    let mut table = Table::new(
        "LM head (f32 logits) and greedy argmax",
        &[
            "model",
            "m",
            "vocab×k",
            "MB",
            "best cfg",
            "lm_head µs",
            "GB/s",
            "% read BW",
            "cuBLAS µs (bf16 out)",
            "vs cuBLAS",
            "argmax µs",
            "argmax cfg",
        ],
    );
    // The heads that fit the pool (Qwen3-0.6B's tied 151936×1024); the others from a
    // pool-filled tensor of their own.
    for (model, h, _, _, _, vocab) in models()
        .into_iter()
        .filter(|m| m.0 == "Qwen3-0.6B" || m.0 == "Llama-3.2-1B")
    {
        for m in [1usize, 16] {
            let built = head_operands(suite, m, vocab, h);
            let Some((x, w, mut logits, y16)) = suite.ok(&format!("{model} head inputs"), built)? else {
                continue;
            };
            let (mu, vu, ku) = (m as u32, vocab as u32, h as u32);
            let bytes = 2.0 * (vocab * h + m * h) as f64 + 4.0 * (m * vocab) as f64;
            let mut best: Option<(usize, f64)> = None;
            for cfg in 0..lm_head::CONFIGS.len() {
                let r = time_graph(&suite.astream, 4, suite.replays, |st, _| {
                    lm_head::launch_with(st, &LaunchOptions::config(cfg), &x, &w, &mut logits, mu, vu, ku)
                });
                if let Some(st) = suite.ok(&format!("{model} lm_head cfg{cfg}"), r)?
                    && best.is_none_or(|(_, b)| st.median_us < b)
                {
                    best = Some((cfg, st.median_us));
                }
            }
            let (astream, cublas) = (&suite.astream, &suite.cublas);
            let c = time_graph(astream, 4, suite.replays, |st, _| {
                let stream = st.streams()[0]
                    .cu_stream()
                    .ok_or_else(|| Error::Invalid("cuBLAS needs a CUDA stream".into()))?;
                cublas.gemm(stream, &x, &w, &y16, false)
            });
            let c = suite.ok(&format!("{model} head cuBLAS"), c)?.map(|s| s.median_us);
            let (a, acfg) = argmax_time(suite, &logits, m, vocab)?;
            table.row(vec![
                model.to_string(),
                m.to_string(),
                format!("{vocab}×{h}"),
                format!("{:.0}", bytes / 1e6),
                best.map_or("-".into(), |(c, _)| format!("cfg{c}")),
                best.map_or("err".into(), |(_, us)| f3(us)),
                best.map_or("-".into(), |(_, us)| format!("{:.0}", bytes / us * 1e-3)),
                best.map_or("-".into(), |(_, us)| {
                    format!("{:.1}", 100.0 * bytes / us * 1e-3 / suite.read_gbps)
                }),
                c.map_or("err".into(), f3),
                match (best, c) {
                    (Some((_, b)), Some(c)) => format!("{:.2}", c / b),
                    _ => "-".into(),
                },
                a.map_or("err".into(), f3),
                acfg,
            ]);
        }
    }
    table.emit(out);
    Ok(())
}

type HeadOperands = (Tensor<bf16>, Tensor<bf16>, Tensor<f32>, Tensor<bf16>);

/// x `[m, k]`, W `[vocab, k]` (a view of the pool when it fits, else the pool tiled into
/// a tensor of its own), f32 logits and bf16 logits for cuBLAS.
fn head_operands(suite: &Suite, m: usize, vocab: usize, k: usize) -> Result<HeadOperands> {
    let n = vocab * k;
    let w = if n <= POOL {
        suite.pool.narrow(0, n)?.reshape(&[vocab, k])?
    } else {
        let w = Tensor::<bf16>::empty(&suite.dev, &[vocab, k])?;
        let mut done = 0;
        while done < n {
            let len = (n - done).min(POOL);
            suite.dev.synchronize()?;
            // SAFETY: both ranges lie inside live device allocations of the same device
            // (`done + len <= n` elements of `w`, `len <= POOL` of the pool), no work is
            // queued on either (synchronised above).
            unsafe { cudarc::driver::result::memcpy_dtod_sync(w.addr() + 2 * done as u64, suite.pool.addr(), 2 * len) }
                .map_err(|e| Error::Invalid(format!("filling the LM head: {e:?}")))?;
            done += len;
        }
        w
    };
    let xs = POOL - m * k;
    let x = suite.pool.narrow(xs, xs + m * k)?.reshape(&[m, k])?;
    Ok((
        x,
        w,
        Tensor::empty(&suite.dev, &[m, vocab])?,
        Tensor::empty(&suite.dev, &[m, vocab])?,
    ))
}

/// Best median µs of argmax over its configs on `logits` (must hold values: the LM head
/// wrote them).
fn argmax_time(suite: &mut Suite, logits: &Tensor<f32>, m: usize, vocab: usize) -> Result<(Option<f64>, String)> {
    let mut ws = ArgmaxWorkspace::new(&suite.dev, m, vocab)?;
    let mut ids = Tensor::<u32>::zeros(&suite.dev, &[m])?;
    let mut best: Option<(usize, f64)> = None;
    for cfg in 0..argmax::CONFIGS.len() {
        let r = time_graph(&suite.astream, 8, suite.replays, |st, _| {
            let opts = LaunchOptions::config(cfg);
            argmax::launch_with(
                st,
                &opts,
                logits,
                &mut ids,
                &mut ws.partial,
                &mut ws.counters,
                m as u32,
                vocab as u32,
            )
        });
        if let Some(st) = suite.ok(&format!("argmax cfg{cfg}"), r)?
            && best.is_none_or(|(_, b)| st.median_us < b)
        {
            best = Some((cfg, st.median_us));
        }
    }
    Ok((
        best.map(|(_, us)| us),
        best.map_or("-".into(), |(c, _)| format!("cfg{c}")),
    ))
}
