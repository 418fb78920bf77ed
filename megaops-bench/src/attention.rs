//! `attention` suite: the non-GEMM kernels of the forward pass on the GPU.
//!
//! - Decode attention (`attention::decode`): batch 1/4/16 × context 1024/4096/16384 for
//!   Qwen3-8B (32/8 heads of 128), Qwen3-1.7B (16/8 × 128) and Llama-3.2-1B (32/8 × 64),
//!   every sequence at the full context; µs and bandwidth over the K and V bytes read, as
//!   a fraction of the pure-read bandwidth measured in the same run (`bandwidth`
//!   suite's kernel; 4.28 TB/s on the H200, bench/RESULTS.md "Pure-read bandwidth").
//! - Prefill attention (`attention::prefill`): one sequence of 1024 / 4096 tokens, every
//!   tile config of the head dim; TFLOP/s of the causal work (`2·hq·D·seq·(seq+1)`).
//! - Memory-bound kernels (add_rmsnorm, silu_mul, qk_norm_rope) at decode (16 tokens)
//!   and prefill (4096 tokens) sizes: µs and GB/s over the bytes each must move, next to
//!   a row copy done with the embedding kernel (identity ids) of the same size.
//!
//! `bench/sdpa_baseline.py` times PyTorch's `scaled_dot_product_attention` on the same
//! shapes and prints its tables in the same format; run both in one GPU call:
//! `megaops-bench attention && python3 bench/sdpa_baseline.py`.
//!
//! Timing: CUDA-graph replays (`harness::time_graph`) on a one-stream AsyncStream.
//! Inputs are random (never zeros) and, where one launch's data fits in L2, rotate over
//! disjoint slices of a large pool so that every replay reads from HBM. Errors are printed
//! and the suite moves on; shapes past the time budget are skipped.

use crate::harness::{Stats, Table, f3, time_graph};
use megaops::{AsyncStream, Device, LaunchOptions, Result, Tensor, bf16};
use megaops_kernels::attention::decode::{self, DecodeWorkspace, decode_attention};
use megaops_kernels::attention::prefill::{self, prefill_attention};
use megaops_kernels::elementwise::{embedding, silu_mul};
use megaops_kernels::norm::add_rmsnorm;
use megaops_kernels::rope::{QK_NORM, RopeScaling, RopeTable, qk_norm_rope};
use std::path::Path;
use std::time::Instant;

/// Wall-clock budget of the suite (≤ 90 s on an H200, all included).
const BUDGET_S: f64 = 80.0;
/// Pure-read bandwidth of the H200 (GB/s, bench/RESULTS.md "Pure-read bandwidth"): the
/// decode roofline when the measurement in the run fails.
const READ_GBPS_H200: f64 = 4280.0;
/// Bytes of each random pool (K, V): the largest decode cache, 16 × 16384 × 8 × 128 bf16.
const POOL_BYTES: usize = 16 * 16384 * 8 * 128 * 2;
/// Rotate inputs until one replay has touched at least this many bytes (> 2 × L2).
const ROTATE_BYTES: usize = 160 << 20;

/// (model, hq, hkv, D) of the presets the suite times.
fn models() -> Vec<(&'static str, usize, usize, usize)> {
    crate::models::shapes(&[
        ("Qwen3-8B", "qwen3-8b"),
        ("Qwen3-1.7B", "qwen3-1.7b"),
        ("Llama-3.2-1B", "llama-3.2-1b"),
    ])
    .iter()
    .map(|m| (m.name, m.hq, m.hkv, m.head_dim))
    .collect()
}

/// Runs the suite; errors are printed.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("attention suite stopped: {e}");
    }
}

struct Suite<'a> {
    dev: &'a Device,
    s: AsyncStream,
    start: Instant,
    quick: bool,
    /// Random bf16 pools viewed as K and V caches (and other inputs).
    k_pool: Tensor<bf16>,
    v_pool: Tensor<bf16>,
    /// Pure-read bandwidth measured in this run, GB/s.
    read_gbps: f64,
}

impl Suite<'_> {
    fn over_budget(&self) -> bool {
        self.start.elapsed().as_secs_f64() > crate::harness::budget_s(BUDGET_S)
    }

    /// Graph-timed launches: `reps` per replay.
    fn time(&self, reps: usize, body: impl FnMut(&AsyncStream, usize) -> Result<()>) -> Result<Stats> {
        time_graph(&self.s, reps, if self.quick { 3 } else { 10 }, body)
    }

    /// `rows` rows of `width` of a pool, starting at row `set · rows` (rotation sets
    /// wrap around the pool; a tail shorter than a row is left out, so any width works).
    fn view(pool: &Tensor<bf16>, rows: usize, width: usize, set: usize) -> Result<Tensor<bf16>> {
        let whole = pool.numel() / width;
        let all = pool.narrow(0, whole * width)?.reshape(&[whole, width])?;
        let sets = (all.shape()[0] / rows).max(1);
        let start = (set % sets) * rows;
        all.narrow(start, start + rows)
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("attention suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let n = POOL_BYTES / 2;
    let s = AsyncStream::serial(&dev)?;
    let read_gbps = match crate::bandwidth::measure(&dev, &s) {
        Ok(r) => r.gbps,
        Err(e) => {
            eprintln!("read bandwidth: {e}; using {READ_GBPS_H200} GB/s");
            READ_GBPS_H200
        }
    };
    let suite = Suite {
        s,
        read_gbps,
        start: Instant::now(),
        quick,
        k_pool: Tensor::from_slice(&dev, &[n], &random_bf16(n, 1))?,
        v_pool: Tensor::from_slice(&dev, &[n], &random_bf16(n, 2))?,
        dev: &dev,
    };
    report("decode attention", decode_table(&suite), out);
    report("prefill attention", prefill_table(&suite), out);
    report("memory-bound kernels", memory_table(&suite), out);
    Ok(())
}

fn report(what: &str, t: Result<Table>, out: Option<&Path>) {
    match t {
        Ok(t) => t.emit(out),
        Err(e) => eprintln!("{what}: {e}"),
    }
}

fn decode_table(suite: &Suite) -> Result<Table> {
    let mut t = Table::new(
        "Decode attention (MegaOps split-KV, bf16 KV cache)",
        &[
            "model",
            "batch",
            "context",
            "splits",
            "µs",
            "KV GB/s",
            "% of 4.28 TB/s",
            "µs per split count (¼, ½, 1, 2, 4 × splits)",
            "best splits",
        ],
    );
    for (model, hq, hkv, d) in models() {
        for batch in [1usize, 4, 16] {
            for ctx in [1024usize, 4096, 16384] {
                if suite.over_budget() {
                    eprintln!("decode {model} b={batch} ctx={ctx}: skipped (time budget)");
                    continue;
                }
                let plan = decode::splits_for(batch as u32, hkv as u32, ctx as u32, suite.dev.sm_count());
                // The planner's split count, and others around it (how far from the best it is).
                let mut others = Vec::new();
                for f in [0.25f64, 0.5, 2.0, 4.0] {
                    let s = ((plan as f64 * f).round() as u32).clamp(1, (ctx as u32).div_ceil(16));
                    others.push(s);
                }
                match decode_case(suite, hq, hkv, d, batch, ctx, plan) {
                    Ok((st, bytes)) => {
                        let gbps = bytes / st.median_us * 1e-3;
                        let mut sweep = Vec::new();
                        let mut best = (plan, st.median_us);
                        for &s in &others {
                            match decode_case(suite, hq, hkv, d, batch, ctx, s) {
                                Ok((o, _)) => {
                                    sweep.push(format!("{s}: {}", f3(o.median_us)));
                                    if o.median_us < best.1 {
                                        best = (s, o.median_us);
                                    }
                                }
                                Err(e) => eprintln!("decode {model} b={batch} ctx={ctx} splits={s}: {e}"),
                            }
                        }
                        t.row(vec![
                            model.into(),
                            batch.to_string(),
                            ctx.to_string(),
                            plan.to_string(),
                            f3(st.median_us),
                            f3(gbps),
                            f3(100.0 * gbps / suite.read_gbps),
                            sweep.join(", "),
                            format!("{} ({})", best.0, f3(best.1)),
                        ]);
                    }
                    Err(e) => eprintln!("decode {model} b={batch} ctx={ctx}: {e}"),
                }
            }
        }
    }
    Ok(t)
}

/// One decode shape with `splits` splits: (timing, K+V bytes per launch).
fn decode_case(
    suite: &Suite,
    hq: usize,
    hkv: usize,
    d: usize,
    batch: usize,
    ctx: usize,
    splits: u32,
) -> Result<(Stats, f64)> {
    let dev = suite.dev;
    let rows = batch * ctx;
    let width = hkv * d;
    let bytes = 2.0 * (rows * width * 2) as f64;
    let sets = (ROTATE_BYTES / (bytes as usize)).clamp(1, 64);
    let caches: Vec<(Tensor<bf16>, Tensor<bf16>)> = (0..sets)
        .map(|i| {
            Ok((
                Suite::view(&suite.k_pool, rows, width, i)?,
                Suite::view(&suite.v_pool, rows, width, i)?,
            ))
        })
        .collect::<Result<_>>()?;
    let q = Suite::view(&suite.k_pool, batch, hq * d, 7)?;
    let lens = Tensor::from_slice(dev, &[batch], &vec![ctx as u32; batch])?;
    let mut ws = DecodeWorkspace::new(dev, batch as u32, hq as u32, hkv as u32, d as u32, splits)?;
    let mut o = Tensor::<bf16>::zeros(dev, &[batch, hq * d])?;
    let config = decode::config_index(d as u32, hq as u32, hkv as u32)
        .ok_or_else(|| megaops::Error::Invalid(format!("no decode config for d={d} hq={hq} hkv={hkv}")))?;
    let opts = LaunchOptions::config(config);
    let st = suite.time(8, |s, i| {
        let (k, v) = &caches[i % sets];
        decode_attention::launch_with(
            s,
            &opts,
            &q,
            k,
            v,
            &lens,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut o,
            batch as u32,
            hq as u32,
            hkv as u32,
            ctx as u32,
            rows as u32,
            splits,
            1.0 / (d as f32).sqrt(),
        )
    })?;
    Ok((st, bytes))
}

fn prefill_table(suite: &Suite) -> Result<Table> {
    let mut t = Table::new(
        "Prefill attention (MegaOps causal flash attention, mma.sync)",
        &["model", "seq", "config", "CTA order", "µs", "TFLOP/s"],
    );
    for (model, hq, hkv, d) in models() {
        for seq in [1024usize, 4096] {
            let configs = (0..prefill_attention::CONFIGS.len()).filter(|&c| prefill_attention::CONSTS[c].D == d as u32);
            for config in configs {
                for longest_first in [false, true] {
                    if suite.over_budget() {
                        eprintln!("prefill {model} seq={seq} config {config}: skipped (time budget)");
                        continue;
                    }
                    match prefill_case(suite, hq, hkv, d, seq, config, longest_first) {
                        Ok(st) => {
                            let flops = 2.0 * (hq * d) as f64 * seq as f64 * (seq as f64 + 1.0);
                            t.row(vec![
                                model.into(),
                                seq.to_string(),
                                prefill_attention::CONFIGS[config].name.into(),
                                if longest_first { "longest first" } else { "identity" }.into(),
                                f3(st.median_us),
                                f3(flops / st.median_us * 1e-6),
                            ]);
                        }
                        Err(e) => eprintln!("prefill {model} seq={seq} config {config}: {e}"),
                    }
                }
            }
        }
    }
    Ok(t)
}

fn prefill_case(
    suite: &Suite,
    hq: usize,
    hkv: usize,
    d: usize,
    seq: usize,
    config: usize,
    longest_first: bool,
) -> Result<Stats> {
    let q = Suite::view(&suite.k_pool, seq, hq * d, 3)?;
    let k = Suite::view(&suite.k_pool, seq, hkv * d, 0)?;
    let v = Suite::view(&suite.v_pool, seq, hkv * d, 0)?;
    let mut o = Tensor::<bf16>::zeros(suite.dev, &[seq, hq * d])?;
    let mut opts = LaunchOptions::config(config);
    if longest_first {
        let bm = prefill_attention::CONSTS[config].BM;
        opts = opts.remap(prefill::longest_first(
            suite.dev, seq as u32, seq as u32, bm, hq as u32,
        )?);
    }
    suite.time(2, |s, _| {
        prefill_attention::launch_with(
            s,
            &opts,
            &q,
            &k,
            &v,
            &mut o,
            seq as u32,
            seq as u32,
            0,
            seq as u32,
            seq as u32,
            hq as u32,
            hkv as u32,
            1.0 / (d as f32).sqrt(),
        )
    })
}

/// A memory-bound benchmark: (timing, bytes moved) for `m` tokens.
type Case = Box<dyn Fn(&Suite, usize) -> Result<(Stats, f64)>>;

fn memory_table(suite: &Suite) -> Result<Table> {
    let mut t = Table::new(
        "Memory-bound kernels (Qwen3-8B sizes) vs a row copy of the same size",
        &["kernel", "tokens", "µs", "GB/s", "copy µs", "copy GB/s", "% of copy"],
    );
    for m in [16usize, 4096] {
        let cases: [(&str, Case); 3] = [
            ("add_rmsnorm h=4096", Box::new(|s, m| bench_add_rmsnorm(s, m, 4096))),
            ("silu_mul inter=12288", Box::new(|s, m| bench_silu_mul(s, m, 12288))),
            ("qk_norm_rope 32/8×128", Box::new(|s, m| bench_rope(s, m, 32, 8, 128))),
        ];
        for (name, case) in cases {
            if suite.over_budget() {
                eprintln!("{name} m={m}: skipped (time budget)");
                continue;
            }
            let res = case(suite, m).and_then(|(st, bytes)| {
                // A copy moving the same bytes: half read, half written.
                let row = 4096;
                let copy_rows = ((bytes / 2.0) as usize / (row * 2)).max(1);
                let copy = bench_copy(suite, copy_rows, row)?;
                Ok((st, bytes, copy))
            });
            match res {
                Ok((st, bytes, (cst, cbytes))) => {
                    let (gbps, cgbps) = (bytes / st.median_us * 1e-3, cbytes / cst.median_us * 1e-3);
                    t.row(vec![
                        name.into(),
                        m.to_string(),
                        f3(st.median_us),
                        f3(gbps),
                        f3(cst.median_us),
                        f3(cgbps),
                        f3(100.0 * gbps / cgbps),
                    ]);
                }
                Err(e) => eprintln!("{name} m={m}: {e}"),
            }
        }
    }
    Ok(t)
}

/// Rotation sets so that one replay touches `ROTATE_BYTES` (1 when a launch alone does).
fn rotation(bytes: f64) -> usize {
    (ROTATE_BYTES / (bytes as usize).max(1)).clamp(1, 32)
}

fn bench_add_rmsnorm(suite: &Suite, m: usize, h: usize) -> Result<(Stats, f64)> {
    let bytes = (4 * m * h * 2) as f64;
    let sets = rotation(bytes);
    let ins: Vec<(Tensor<bf16>, Tensor<bf16>)> = (0..sets)
        .map(|i| {
            Ok((
                Suite::view(&suite.k_pool, m, h, i)?,
                Suite::view(&suite.v_pool, m, h, i)?,
            ))
        })
        .collect::<Result<_>>()?;
    let w = Suite::view(&suite.k_pool, 1, h, 5)?.reshape(&[h])?;
    let mut y = Tensor::<bf16>::zeros(suite.dev, &[m, h])?;
    let mut r = Tensor::<bf16>::zeros(suite.dev, &[m, h])?;
    let opts = LaunchOptions::config(usize::from(m > 64));
    let st = suite.time(8, |s, i| {
        let (x, res) = &ins[i % sets];
        add_rmsnorm::launch_with(s, &opts, x, res, &w, &mut y, &mut r, m as u32, h as u32, 1e-6)
    })?;
    Ok((st, bytes))
}

fn bench_silu_mul(suite: &Suite, m: usize, inter: usize) -> Result<(Stats, f64)> {
    let bytes = (3 * m * inter * 2) as f64;
    let sets = rotation(bytes);
    let ins: Vec<Tensor<bf16>> = (0..sets)
        .map(|i| Suite::view(&suite.k_pool, m, 2 * inter, i))
        .collect::<Result<_>>()?;
    let mut y = Tensor::<bf16>::zeros(suite.dev, &[m, inter])?;
    let opts = LaunchOptions::config(usize::from(m > 64));
    let st = suite.time(8, |s, i| {
        silu_mul::launch_with(s, &opts, &ins[i % sets], &mut y, m as u32, inter as u32)
    })?;
    Ok((st, bytes))
}

fn bench_rope(suite: &Suite, m: usize, hq: usize, hkv: usize, d: usize) -> Result<(Stats, f64)> {
    let dev = suite.dev;
    let width = (hq + 2 * hkv) * d;
    let bytes = (2 * m * width * 2) as f64;
    let sets = rotation(bytes);
    let ins: Vec<Tensor<bf16>> = (0..sets)
        .map(|i| Suite::view(&suite.k_pool, m, width, i))
        .collect::<Result<_>>()?;
    let max_pos = 8192;
    let table = RopeTable::new(d, max_pos, 1_000_000.0, RopeScaling::None).upload(dev)?;
    let positions: Vec<u32> = (0..m as u32).map(|i| (i * 7) % max_pos as u32).collect();
    let slots: Vec<u32> = (0..m as u32).collect();
    let (pos, slot) = (
        Tensor::from_slice(dev, &[m], &positions)?,
        Tensor::from_slice(dev, &[m], &slots)?,
    );
    let nw = Suite::view(&suite.v_pool, 1, d, 9)?.reshape(&[d])?;
    let mut q = Tensor::<bf16>::zeros(dev, &[m, hq * d])?;
    let mut kc = Tensor::<bf16>::zeros(dev, &[m, hkv * d])?;
    let mut vc = Tensor::<bf16>::zeros(dev, &[m, hkv * d])?;
    let config = usize::from(m > 64) + if d == 128 { 0 } else { 2 };
    let opts = LaunchOptions::config(config);
    let st = suite.time(8, |s, i| {
        qk_norm_rope::launch_with(
            s,
            &opts,
            &ins[i % sets],
            &pos,
            &slot,
            &table,
            &nw,
            &nw,
            &mut q,
            &mut kc,
            &mut vc,
            m as u32,
            hq as u32,
            hkv as u32,
            m as u32,
            max_pos as u32,
            QK_NORM,
            1e-6,
        )
    })?;
    Ok((st, bytes))
}

/// A row copy (embedding gather with ids `0..rows`): (timing, bytes read + written).
fn bench_copy(suite: &Suite, rows: usize, h: usize) -> Result<(Stats, f64)> {
    let bytes = (2 * rows * h * 2) as f64;
    let sets = rotation(bytes);
    let tables: Vec<Tensor<bf16>> = (0..sets)
        .map(|i| Suite::view(&suite.k_pool, rows, h, i))
        .collect::<Result<_>>()?;
    let ids = Tensor::from_slice(suite.dev, &[rows], &(0..rows as u32).collect::<Vec<_>>())?;
    let mut y = Tensor::<bf16>::zeros(suite.dev, &[rows, h])?;
    let opts = LaunchOptions::config(usize::from(rows > 64));
    let st = suite.time(8, |s, i| {
        embedding::launch_with(
            s,
            &opts,
            &ids,
            &tables[i % sets],
            &mut y,
            rows as u32,
            rows as u32,
            h as u32,
        )
    })?;
    Ok((st, bytes))
}

/// `n` random bf16 in ±[2^-8, 2) with random mantissas (fast xorshift; never zeros).
fn random_bf16(n: usize, seed: u64) -> Vec<bf16> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let r = s as u32;
            let sign = (r & 1) << 15;
            let exp = 119 + (r >> 1) % 8; // 2^-8 .. 2^0
            let mant = (r >> 8) & 0x7f;
            bf16::from_bits((sign | (exp << 7) | mant) as u16)
        })
        .collect()
}
