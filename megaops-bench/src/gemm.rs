//! `gemm` suite: the tensor-core GEMMs of `megaops_kernels::gemm` against cuBLAS
//! (`cublasGemmEx`, bf16 in/out, f32 compute, default algorithm) at 4096³ and at the
//! prefill shapes of Qwen3-0.6B/1.7B/8B and Llama-3.2-1B (M = 1024, 4096, 8192 tokens ×
//! each Linear: QKV (n = q + 2·kv), O, gate/up, down).
//!
//! Every tile config is timed on every shape (this is the tuning run), plus the best
//! config with a grouped CTA order (`Remap::Table` of `gemm::grouped_order`, for L2
//! reuse). Timing: CUDA-graph replays of several launches each (`harness::time_graph`,
//! median of the replays), inputs rotating over enough sets to exceed twice the L2 so
//! weights come from HBM as in a real forward pass. Inputs are random (a random pool on
//! the device, viewed at different offsets), never zeros. Each shape also compares the
//! best config's output with cuBLAS's on its first and last 32 rows.
//!
//! Prints one table per layout with TFLOP/s per config, the best config, its ratio to
//! cuBLAS, and a summary (geometric-mean ratio, wins per config). Errors are printed and
//! the suite moves on; it stops adding shapes past its time budget.

use crate::cublas::Cublas;
use crate::harness::{Table, f3, time_graph};
use megaops::{AsyncStream, Device, Error, LaunchOptions, Remap, Result, Tensor, bf16};
use megaops_kernels::gemm::{self, matmul, matmul_nn};
use std::path::Path;
use std::time::Instant;

/// Wall-clock budget of the suite (the brief: ≤ 90 s on an H200, all included).
const BUDGET_S: f64 = 80.0;
/// Elements of the random input pool (256 MiB of bf16).
const POOL: usize = 128 << 20;
/// GPU time one graph replay aims for.
const REPLAY_TARGET_S: f64 = 2e-3;

/// One GEMM shape: `C[m, n] = A[m, k] · W[n, k]ᵀ` (or `· B[k, n]`).
#[derive(Clone, Debug)]
struct Shape {
    label: String,
    m: usize,
    n: usize,
    k: usize,
}

impl Shape {
    fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// (model, hidden, intermediate, q width, kv width) of the presets the suite times.
fn models() -> Vec<(&'static str, usize, usize, usize, usize)> {
    crate::models::shapes(&crate::models::LINEAR_MODELS)
        .iter()
        .map(|m| (m.name, m.hidden, m.inter, m.q(), m.kv()))
        .collect()
}

/// The Linear layers of one model as (name, n, k).
fn linears(h: usize, inter: usize, q: usize, kv: usize) -> [(&'static str, usize, usize); 4] {
    [
        ("qkv", q + 2 * kv, h),
        ("o", h, q),
        ("gate/up", inter, h),
        ("down", h, inter),
    ]
}

/// NT shapes in priority order (the suite stops adding shapes past its budget): 4096³,
/// then M = 4096, 1024, 8192 over every model's Linears (duplicates dropped).
fn nt_shapes() -> Vec<Shape> {
    let mut v = vec![Shape {
        label: "square".into(),
        m: 4096,
        n: 4096,
        k: 4096,
    }];
    for m in [4096, 1024, 8192] {
        for (model, h, inter, q, kv) in models() {
            for (name, n, k) in linears(h, inter, q, kv) {
                if !v.iter().any(|s| (s.m, s.n, s.k) == (m, n, k)) {
                    v.push(Shape {
                        label: format!("{model} {name}"),
                        m,
                        n,
                        k,
                    });
                }
            }
        }
    }
    v
}

/// NN shapes: 4096³ and Qwen3-8B's Linears at M = 4096.
fn nn_shapes() -> Vec<Shape> {
    let mut v = vec![Shape {
        label: "square".into(),
        m: 4096,
        n: 4096,
        k: 4096,
    }];
    let Some(&(model, h, inter, q, kv)) = models().get(2) else {
        return Vec::new();
    };
    for (name, n, k) in linears(h, inter, q, kv) {
        v.push(Shape {
            label: format!("{model} {name}"),
            m: 4096,
            n,
            k,
        });
    }
    v
}

/// Inputs of one shape: rotating (A, W) views into the random pool and C tensors.
struct Operands {
    a: Vec<Tensor<bf16>>,
    b: Vec<Tensor<bf16>>,
    c: Vec<Tensor<bf16>>,
}

impl Operands {
    fn new(dev: &Device, pool: &Tensor<bf16>, s: &Shape, nn: bool) -> Result<Operands> {
        let (ma, mb) = (s.m * s.k, s.n * s.k);
        let span = (ma + mb).next_multiple_of(64) + 64;
        if span > POOL {
            return Err(Error::Invalid(format!(
                "{}×{}×{} does not fit the input pool",
                s.m, s.n, s.k
            )));
        }
        let bytes = 2 * (ma + mb + s.m * s.n);
        let l2 = (dev.l2_bytes() as usize).max(1 << 20);
        let sets = (2 * l2).div_ceil(bytes).clamp(1, 16);
        let mut ops = Operands {
            a: Vec::new(),
            b: Vec::new(),
            c: Vec::new(),
        };
        for i in 0..sets {
            // Sets start at spread-out, 64-element aligned offsets (views may overlap when
            // the pool is short: they are only read).
            let start = (i * span) % (POOL - span) / 64 * 64;
            let b_start = (start + ma).next_multiple_of(64);
            ops.a.push(pool.narrow(start, start + ma)?.reshape(&[s.m, s.k])?);
            let b_shape = if nn { [s.k, s.n] } else { [s.n, s.k] };
            ops.b.push(pool.narrow(b_start, b_start + mb)?.reshape(&b_shape)?);
            ops.c.push(Tensor::empty(dev, &[s.m, s.n])?);
        }
        Ok(ops)
    }

    fn sets(&self) -> usize {
        self.a.len()
    }
}

/// What is timed: cuBLAS, a tile config, or a config with the grouped CTA order.
#[derive(Clone)]
enum Variant {
    Cublas,
    Config(usize),
    Grouped(usize, Tensor<u32>),
}

struct Suite<'a> {
    dev: &'a Device,
    astream: AsyncStream,
    cublas: Cublas,
    pool: Tensor<bf16>,
    replays: usize,
    consecutive_errors: usize,
}

impl Suite<'_> {
    /// Median µs per GEMM of `variant` on `s`, by graph replay.
    fn time(&mut self, s: &Shape, ops: &mut Operands, variant: &Variant, nn: bool) -> Result<f64> {
        let reps = ((REPLAY_TARGET_S * 400e12 / s.flops()).ceil() as usize).clamp(2, 64);
        let sets = ops.sets();
        let (mu, nu, ku) = (s.m as u32, s.n as u32, s.k as u32);
        let cublas = &self.cublas;
        let stats = time_graph(&self.astream, reps, self.replays, |st, i| {
            let j = i % sets;
            let (a, b) = (&ops.a[j], &ops.b[j]);
            let c = &mut ops.c[j];
            match variant {
                Variant::Cublas => {
                    let stream = st.streams()[0]
                        .cu_stream()
                        .ok_or_else(|| Error::Invalid("cuBLAS needs a CUDA stream".into()))?;
                    cublas.gemm(stream, a, b, c, nn)
                }
                Variant::Config(cfg) => launch(st, &LaunchOptions::config(*cfg), a, b, c, (mu, nu, ku), nn),
                Variant::Grouped(cfg, table) => launch(
                    st,
                    &LaunchOptions::config(*cfg).remap(Remap::Table(table.clone())),
                    a,
                    b,
                    c,
                    (mu, nu, ku),
                    nn,
                ),
            }
        })?;
        Ok(stats.median_us)
    }

    /// Runs `variant` once into set 0's C and returns its first and last 32 rows.
    fn sample_rows(&mut self, s: &Shape, ops: &mut Operands, variant: &Variant, nn: bool) -> Result<Vec<bf16>> {
        let (mu, nu, ku) = (s.m as u32, s.n as u32, s.k as u32);
        let c = &mut ops.c[0];
        match variant {
            Variant::Cublas => {
                let st = &self.astream.streams()[0];
                let stream = st
                    .cu_stream()
                    .ok_or_else(|| Error::Invalid("cuBLAS needs a CUDA stream".into()))?;
                self.cublas.gemm(stream, &ops.a[0], &ops.b[0], c, nn)?;
            }
            Variant::Config(cfg) | Variant::Grouped(cfg, _) => launch(
                &self.astream,
                &LaunchOptions::config(*cfg),
                &ops.a[0],
                &ops.b[0],
                c,
                (mu, nu, ku),
                nn,
            )?,
        }
        self.astream.synchronize()?;
        let rows = s.m.min(32);
        let mut v = c.narrow(0, rows)?.to_vec()?;
        v.extend(c.narrow(s.m - rows, s.m)?.to_vec()?);
        Ok(v)
    }

    /// Records an error; after three in a row (a dead context) the suite stops.
    fn failed(&mut self, what: &str, e: &Error) -> Result<()> {
        eprintln!("gemm suite: {what}: {e}");
        self.consecutive_errors += 1;
        if self.consecutive_errors >= 3 {
            return Err(Error::Invalid("three errors in a row: stopping the gemm suite".into()));
        }
        Ok(())
    }
}

fn launch(
    on: &AsyncStream,
    opts: &LaunchOptions,
    a: &Tensor<bf16>,
    b: &Tensor<bf16>,
    c: &mut Tensor<bf16>,
    (m, n, k): (u32, u32, u32),
    nn: bool,
) -> Result<()> {
    if nn {
        gemm::check_matmul_nn(m, n, k, b)?;
        matmul_nn::launch_with(on, opts, a, b, c, m, n, k)
    } else {
        gemm::check_matmul(m, n, k, b)?;
        matmul::launch_with(on, opts, a, b, c, m, n, k)
    }
}

/// `‖x − y‖ / ‖y‖` over bf16 vectors (NaN → infinity).
fn rel_diff(x: &[bf16], y: &[bf16]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in x.iter().zip(y) {
        let (a, b) = (a.to_f64(), b.to_f64());
        if !a.is_finite() {
            return f64::INFINITY;
        }
        num += (a - b) * (a - b);
        den += b * b;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// Runs the suite; errors are printed, never panicked on.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("gemm suite stopped: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let start = Instant::now();
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("gemm suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let mut configs = Table::new(
        "GEMM tile configs (matmul and matmul_nn)",
        &["config", "constants", "entry"],
    );
    for (i, c) in matmul::CONFIGS.iter().enumerate() {
        configs.row(vec![i.to_string(), c.name.to_string(), c.entry.to_string()]);
    }
    configs.emit(out);
    let pool = Tensor::from_slice(&dev, &[POOL], &megaops::testing::random::<bf16>(POOL, 1.0, 0x6e6d))?;
    let mut suite = Suite {
        dev: &dev,
        astream: AsyncStream::serial(&dev)?,
        cublas: Cublas::new(&dev)?,
        pool,
        replays: if quick { 3 } else { 7 },
        consecutive_errors: 0,
    };
    let budget = crate::harness::budget_s(BUDGET_S) / if quick { 3.0 } else { 1.0 };
    for (nn, shapes) in [(false, nt_shapes()), (true, nn_shapes())] {
        let shapes = if quick {
            shapes.into_iter().step_by(4).collect()
        } else {
            shapes
        };
        layout(&mut suite, &shapes, nn, out, start, budget)?;
    }
    eprintln!("gemm suite: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Times every shape of one layout and emits its table and summary.
fn layout(
    suite: &mut Suite,
    shapes: &[Shape],
    nn: bool,
    out: Option<&Path>,
    start: Instant,
    budget: f64,
) -> Result<()> {
    let kernel = if nn {
        "matmul_nn (B[k, n])"
    } else {
        "matmul (W[n, k], C = A·Wᵀ)"
    };
    let nconf = matmul::CONFIGS.len();
    let mut cols: Vec<String> = ["shape", "m×n×k", "cuBLAS µs", "cuBLAS TFLOP/s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    cols.extend((0..nconf).map(|i| format!("cfg{i} TFLOP/s")));
    cols.extend(
        [
            "grouped TFLOP/s",
            "best",
            "best µs",
            "best TFLOP/s",
            "vs cuBLAS",
            "err vs cuBLAS",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let col_refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    let mut table = Table::new(
        &format!("GEMM {kernel}: TFLOP/s per tile config vs cuBLAS (bf16, f32 accumulate)"),
        &col_refs,
    );
    let mut ratios = Vec::new();
    let mut wins = vec![0usize; nconf + 1];
    for (si, s) in shapes.iter().enumerate() {
        if start.elapsed().as_secs_f64() > budget {
            eprintln!(
                "gemm suite: time budget reached; skipping {} more {kernel} shapes",
                shapes.len() - si
            );
            break;
        }
        let mut ops = match Operands::new(suite.dev, &suite.pool, s, nn) {
            Ok(o) => o,
            Err(e) => {
                suite.failed(&format!("{} inputs", s.label), &e)?;
                continue;
            }
        };
        let tflops = |us: f64| s.flops() / us * 1e-6;
        let mut row = vec![s.label.clone(), format!("{}×{}×{}", s.m, s.n, s.k)];
        let cublas_us = match suite.time(s, &mut ops, &Variant::Cublas, nn) {
            Ok(us) => {
                suite.consecutive_errors = 0;
                row.extend([f3(us), f3(tflops(us))]);
                Some(us)
            }
            Err(e) => {
                suite.failed(&format!("{} cuBLAS", s.label), &e)?;
                row.extend(["err".into(), "err".into()]);
                None
            }
        };
        let mut best: Option<(usize, f64)> = None;
        for cfg in 0..nconf {
            match suite.time(s, &mut ops, &Variant::Config(cfg), nn) {
                Ok(us) => {
                    suite.consecutive_errors = 0;
                    row.push(f3(tflops(us)));
                    if best.is_none_or(|(_, b)| us < b) {
                        best = Some((cfg, us));
                    }
                }
                Err(e) => {
                    suite.failed(&format!("{} config {cfg}", s.label), &e)?;
                    row.push("err".into());
                }
            }
        }
        let mut best_variant = best.map(|(cfg, _)| Variant::Config(cfg));
        let mut best_label = best.map(|(cfg, _)| format!("cfg{cfg}"));
        let mut best_us = best.map(|(_, us)| us);
        let mut grouped_won = false;
        if let Some((cfg, us)) = best {
            let (bm, bn) = matmul::CONSTS.get(cfg).map_or((128, 128), |c| (c.BM, c.BN));
            let order = gemm::grouped_order(s.m as u32, s.n as u32, bm, bn, 8);
            let grouped = Tensor::from_slice(suite.dev, &[order.len()], &order).map(|t| Variant::Grouped(cfg, t));
            match grouped.and_then(|v| suite.time(s, &mut ops, &v, nn).map(|g| (v, g))) {
                Ok((v, g)) => {
                    row.push(f3(tflops(g)));
                    if g < us {
                        grouped_won = true;
                        best_label = Some(format!("cfg{cfg}+grouped"));
                        best_us = Some(g);
                        best_variant = Some(v);
                    }
                }
                Err(e) => {
                    suite.failed(&format!("{} grouped", s.label), &e)?;
                    row.push("err".into());
                }
            }
        } else {
            row.push("-".into());
        }
        match (best_label, best_us) {
            (Some(l), Some(us)) => row.extend([l, f3(us), f3(tflops(us))]),
            _ => row.extend(["-".into(), "-".into(), "-".into()]),
        }
        match (cublas_us, best_us) {
            (Some(c), Some(b)) => {
                ratios.push(c / b);
                row.push(format!("{:.2}", c / b));
            }
            _ => row.push("-".into()),
        }
        if let Some((cfg, _)) = best {
            wins[if grouped_won { nconf } else { cfg }] += 1;
        }
        // Correctness: the best config against cuBLAS on the first and last 32 rows.
        let err = match best_variant {
            Some(v) => suite
                .sample_rows(s, &mut ops, &Variant::Cublas, nn)
                .and_then(|r| Ok((r, suite.sample_rows(s, &mut ops, &v, nn)?)))
                .map(|(r, o)| format!("{:.1e}", rel_diff(&o, &r))),
            None => Ok("-".into()),
        };
        row.push(err.unwrap_or_else(|e| format!("err: {e}")));
        eprintln!(
            "gemm {kernel}: {} done ({:.1} s)",
            s.label,
            start.elapsed().as_secs_f64()
        );
        table.row(row);
    }
    table.emit(out);
    let mut summary = Table::new(
        &format!("GEMM {kernel}: summary"),
        &[
            "shapes",
            "geomean vs cuBLAS",
            "min",
            "max",
            "≥ 0.7",
            "wins per config (cfg0.., grouped)",
        ],
    );
    if !ratios.is_empty() {
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let max = ratios.iter().copied().fold(0.0, f64::max);
        let ok = ratios.iter().filter(|&&r| r >= 0.7).count();
        summary.row(vec![
            ratios.len().to_string(),
            format!("{geo:.3}"),
            format!("{min:.3}"),
            format!("{max:.3}"),
            format!("{ok}/{}", ratios.len()),
            format!("{wins:?}"),
        ]);
    }
    summary.emit(out);
    Ok(())
}
