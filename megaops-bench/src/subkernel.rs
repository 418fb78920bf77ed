//! `subkernel` suite: closed-source kernels in the data-tile protocol
//! (`megaops::subkernel`), three tables:
//!
//! - **chunked cuBLASLt against one call** at the prefill shapes of the presets (the MLP's
//!   gate/up and down projections, m = 1024 and 4096): one `cublasLtMatmul` on a stream
//!   against the subkernel with 1, 2, 4 and 8 row chunks (side streams, memop waits,
//!   side-stream signals), 4 chunks held by wait kernels, and 1 and 4 chunks signalled by
//!   the proxy, 1 and 4 chunks with launches after a subkernel held by a stream wait, and
//!   1 chunk on the launch's own stream (`AsyncOptions::one_chunk_on_lane`; its stream
//!   sets the output's 16 or 64 semaphores by one memset);
//! - **the wrappers' sync cost per chunk**: a subkernel too small to cost anything itself
//!   (a 256 × 64 × 64 GEMM, held by stream memory operations or by wait kernels; a copy of
//!   256 × 64 bf16; each signalled by its side streams, and by the proxy), timed at 1 to 16
//!   chunks; the slope of a least-squares line through those times is the cost of one more
//!   chunk; two rows with one chunk on the launch's own stream (more chunks there use the
//!   side streams);
//! - **the prefill MLP block** (RMSNorm → gate/up → SiLU·mul → down, m = 1024 and 4096) with
//!   the Rust GEMM and with cuBLASLt subkernels (`PrefillGemm`; 1 and 4 chunks, memop
//!   waits and wait kernels, stream-wait holds, 1 chunk on the lane), each overlapped (an
//!   AsyncStream of two streams) and serial (`AsyncStream::serial`, the same kernels with
//!   kernel barriers), checked against the f64 reference first.
//!
//! Every time is a median of CUDA-graph replays (`harness::time_graph`), several calls per
//! replay.

use crate::harness::{Table, budget_s, f3, time_graph};
use megaops::subkernel::copy::{CopyChunks, copy_on, copy_rows};
use megaops::subkernel::cublaslt::{CublasLt, GemmAxis, GemmChunks};
use megaops::subkernel::{ChunkSignals, Wrappers};
use megaops::testing::{POISON_WORD, random, rel_error};
use megaops::{AsyncOptions, AsyncStream, Device, Result, Rows, SubkernelHold, Tensor, Tiled, bf16};
use megaops_models::layers::{Mlp, MlpActivations, MlpConfig, PrefillGemm};
use std::path::Path;
use std::time::Instant;

/// Wall-clock budget of the suite (`MEGAOPS_BENCH_BUDGET_S` overrides it).
const BUDGET_S: f64 = 120.0;
/// Prefill rows timed.
const MS: [usize; 2] = [1024, 4096];
/// Chunk counts of the chunked GEMMs.
const CHUNKS: [usize; 4] = [1, 2, 4, 8];

/// Runs the suite.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("subkernel suite stopped: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let start = Instant::now();
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("subkernel suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let lt = CublasLt::new(&dev)?;
    // The columns name where one chunk runs: side streams unless they say the lane.
    dev.set_one_chunk_on_lane(false);
    let s = AsyncStream::new(&dev, 2)?;
    // The same, with launches after a subkernel held by a stream wait, not a wait kernel.
    let sw = AsyncStream::with_options(
        &dev,
        AsyncOptions {
            streams: 2,
            subkernel_hold: SubkernelHold::StreamWait,
            ..AsyncOptions::default()
        },
    )?;
    // The same, with one-chunk subkernels on the launch's own stream (overlapped and
    // serial).
    let lane = AsyncStream::with_options(
        &dev,
        AsyncOptions {
            streams: 2,
            one_chunk_on_lane: Some(true),
            ..AsyncOptions::default()
        },
    )?;
    let serial = AsyncStream::serial(&dev)?;
    let serial_lane = AsyncStream::with_options(
        &dev,
        AsyncOptions {
            streams: 1,
            overlap: false,
            one_chunk_on_lane: Some(true),
            ..AsyncOptions::default()
        },
    )?;
    let replays = if quick { 5 } else { 15 };
    let budget = budget_s(BUDGET_S);
    let shapes = crate::models::shapes(&[
        ("Qwen3-0.6B", "qwen3-0.6b"),
        ("Llama-3.2-1B", "llama-3.2-1b"),
        ("Qwen3-8B", "qwen3-8b"),
    ]);

    // Chunked against one call.
    let mut chunked = Table::new(
        "cuBLASLt GEMM subkernels (row chunks) against one cuBLASLt call",
        &[
            "model",
            "GEMM",
            "m × n × k",
            "one call µs",
            "1 chunk",
            "2 chunks",
            "4 chunks",
            "8 chunks",
            "4 chunks, wait kernels",
            "1 chunk, proxy signals",
            "4 chunks, proxy signals",
            "1 chunk, stream-wait hold",
            "4 chunks, stream-wait hold",
            "1 chunk, on the lane",
            "one call / 1 chunk",
            "one call / 4 chunks",
            "one call / 1 chunk on the lane",
        ],
    );
    'shapes: for shape in &shapes {
        for (what, n, k) in [
            ("gate/up", 2 * shape.inter, shape.hidden),
            ("down", shape.hidden, shape.inter),
        ] {
            for m in MS {
                if start.elapsed().as_secs_f64() > budget {
                    eprintln!("subkernel suite: over its budget, skipping the remaining GEMMs");
                    break 'shapes;
                }
                match gemm_row(&dev, &lt, [&s, &sw, &lane], (m, n, k), replays) {
                    Ok(t) => {
                        let mut row = vec![
                            shape.name.to_string(),
                            what.to_string(),
                            format!("{m} × {n} × {k}"),
                            f3(t[0]),
                        ];
                        row.extend(t[1..].iter().map(|&x| f3(x)));
                        row.push(format!("{:.3}", t[0] / t[1]));
                        row.push(format!("{:.3}", t[0] / t[3]));
                        row.push(format!("{:.3}", t[0] / t[t.len() - 1]));
                        chunked.row(row);
                    }
                    Err(e) => eprintln!("subkernel {} {what} m={m}: {e}", shape.name),
                }
            }
        }
    }
    chunked.emit(out);

    // Sync cost per chunk.
    let mut sync = Table::new(
        "Subkernel wrappers: time of a near-empty subkernel by chunk count, and the cost per chunk",
        &[
            "subkernel",
            "1 chunk µs",
            "2",
            "4",
            "8",
            "16",
            "µs per chunk (slope)",
            "one plain call µs",
        ],
    );
    use ChunkSignals::{Proxy, SideStream};
    use Wrappers::{Kernels, StreamMemOps};
    for (what, copy, wrappers, signals, on) in [
        (
            "cuBLASLt 256 × 64 × 64, memop waits",
            false,
            StreamMemOps,
            SideStream,
            &s,
        ),
        ("cuBLASLt 256 × 64 × 64, wait kernels", false, Kernels, SideStream, &s),
        ("copy 256 × 64 bf16, wait kernels", true, Kernels, SideStream, &s),
        (
            "cuBLASLt 256 × 64 × 64, memop waits, proxy signals",
            false,
            StreamMemOps,
            Proxy,
            &s,
        ),
        (
            "copy 256 × 64 bf16, wait kernels, proxy signals",
            true,
            Kernels,
            Proxy,
            &s,
        ),
        (
            "cuBLASLt 256 × 64 × 64, memop waits, stream-wait hold",
            false,
            StreamMemOps,
            SideStream,
            &sw,
        ),
        (
            "cuBLASLt 256 × 64 × 64, proxy signals, stream-wait hold",
            false,
            StreamMemOps,
            Proxy,
            &sw,
        ),
        (
            "cuBLASLt 256 × 64 × 64, memop waits, 1 chunk on the lane",
            false,
            StreamMemOps,
            SideStream,
            &lane,
        ),
        (
            "copy 256 × 64 bf16, wait kernels, 1 chunk on the lane",
            true,
            Kernels,
            SideStream,
            &lane,
        ),
    ] {
        match sync_row(&dev, &lt, on, copy, wrappers, signals, replays) {
            Ok((t, plain)) => {
                let xs = [1.0, 2.0, 4.0, 8.0, 16.0];
                let slope = fit_slope(&xs, &t);
                let mut row = vec![what.to_string()];
                row.extend(t.iter().map(|&x| f3(x)));
                row.push(f3(slope));
                row.push(f3(plain));
                sync.row(row);
            }
            Err(e) => eprintln!("subkernel sync cost ({what}): {e}"),
        }
    }
    sync.emit(out);

    // The prefill MLP block.
    let mut mlp = Table::new(
        "Prefill MLP block with the Rust GEMM and with cuBLASLt subkernels, overlapped and serial",
        &[
            "model",
            "m",
            "GEMMs",
            "overlap µs",
            "serial µs",
            "serial / overlap",
            "vs Rust overlap",
            "rel err",
        ],
    );
    'mlp: for (i, shape) in shapes.iter().take(2).enumerate() {
        let cfg = MlpConfig {
            hidden: shape.hidden,
            inter: shape.inter,
            eps: shape.eps,
        };
        let block = Mlp::random(&dev, cfg, 0x5b + i as u64)?;
        for m in MS {
            let mut rust_overlap = f64::NAN;
            let lt_with = |chunks: usize, wrappers: Wrappers| PrefillGemm::CublasLt {
                lt: lt.clone(),
                chunks,
                wrappers,
            };
            for (name, gemm, on, serial) in [
                ("rust", PrefillGemm::Rust, &s, &serial),
                ("cublaslt:1", lt_with(1, StreamMemOps), &s, &serial),
                ("cublaslt:4", lt_with(4, StreamMemOps), &s, &serial),
                ("cublaslt:1, wait kernels", lt_with(1, Kernels), &s, &serial),
                ("cublaslt:4, wait kernels", lt_with(4, Kernels), &s, &serial),
                ("cublaslt:1, stream-wait hold", lt_with(1, StreamMemOps), &sw, &serial),
                ("cublaslt:4, stream-wait hold", lt_with(4, StreamMemOps), &sw, &serial),
                ("cublaslt:1, on the lane", lt_with(1, StreamMemOps), &lane, &serial_lane),
            ] {
                if start.elapsed().as_secs_f64() > budget {
                    eprintln!("subkernel suite: over its budget, skipping the remaining MLP rows");
                    break 'mlp;
                }
                match mlp_row(&dev, &block, on, serial, m, &gemm, replays) {
                    Ok((overlap, ser, err)) => {
                        if name == "rust" {
                            rust_overlap = overlap;
                        }
                        mlp.row(vec![
                            shape.name.to_string(),
                            m.to_string(),
                            name.to_string(),
                            f3(overlap),
                            f3(ser),
                            format!("{:.3}", ser / overlap),
                            format!("{:.3}", rust_overlap / overlap),
                            format!("{err:.1e}"),
                        ]);
                    }
                    Err(e) => eprintln!("subkernel mlp {} m={m} {name}: {e}", shape.name),
                }
            }
        }
    }
    mlp.emit(out);
    eprintln!("subkernel suite: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Times one cuBLASLt call and the subkernel at each of [`CHUNKS`] (µs per GEMM), after
/// checking the 4-chunk result against the one call.
fn gemm_row(
    dev: &Device,
    lt: &CublasLt,
    [s, sw, lane]: [&AsyncStream; 3],
    (m, n, k): (usize, usize, usize),
    replays: usize,
) -> Result<Vec<f64>> {
    let a = Tensor::from_slice(dev, &[m, k], &random::<bf16>(m * k, 1.0, 1))?;
    let w = Tensor::from_slice(dev, &[n, k], &random::<bf16>(n * k, 1.0, 2))?;
    let mut one = Tensor::<bf16>::empty(dev, &[m, n])?;
    let mut c = Tiled::new(dev, &[m, n], Rows::<64>, "c")?;
    let reps = 4;
    let mut times = vec![
        time_graph(s, reps, replays, |s, _| {
            lt.matmul_on(&s.streams()[0], &a, &w, None, &mut one)
        })?
        .median_us,
    ];
    for (chunks, wrappers, signals, on) in CHUNKS
        .into_iter()
        .map(|c| (c, Wrappers::StreamMemOps, ChunkSignals::SideStream, s))
        .chain([
            (4, Wrappers::Kernels, ChunkSignals::SideStream, s),
            (1, Wrappers::StreamMemOps, ChunkSignals::Proxy, s),
            (4, Wrappers::StreamMemOps, ChunkSignals::Proxy, s),
            (1, Wrappers::StreamMemOps, ChunkSignals::SideStream, sw),
            (4, Wrappers::StreamMemOps, ChunkSignals::SideStream, sw),
            (1, Wrappers::StreamMemOps, ChunkSignals::SideStream, lane),
        ])
    {
        let g = GemmChunks {
            chunks,
            along: GemmAxis::M,
            align: 64,
            wrappers,
            signals,
            ..GemmChunks::default()
        };
        times.push(
            time_graph(on, reps, replays, |s, _| {
                c.rearm();
                lt.matmul(s, &a, &w, None, &mut c, &g)
            })?
            .median_us,
        );
        if chunks == 4 {
            let (x, y) = (one.to_vec()?, c.to_vec()?);
            let err = rel_error(&y, &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>());
            if err > 1e-2 {
                eprintln!(
                    "subkernel {m}×{n}×{k}: 4 chunks ({wrappers:?}, {signals:?}) differ from one call by {err:.2e}"
                );
            }
        }
    }
    Ok(times)
}

/// A near-empty subkernel timed at 1, 2, 4, 8 and 16 chunks, and the same operation as one
/// plain call on a stream (µs each).
fn sync_row(
    dev: &Device,
    lt: &CublasLt,
    s: &AsyncStream,
    copy: bool,
    wrappers: Wrappers,
    signals: ChunkSignals,
    replays: usize,
) -> Result<(Vec<f64>, f64)> {
    let (m, n, k) = (256, 64, 64);
    let a = Tensor::from_slice(dev, &[m, k], &random::<bf16>(m * k, 1.0, 3))?;
    let w = Tensor::from_slice(dev, &[n, k], &random::<bf16>(n * k, 1.0, 4))?;
    let src = Tiled::complete(
        Tensor::from_slice(dev, &[m, n], &random::<bf16>(m * n, 1.0, 5))?,
        Rows::<16>,
        "src",
    )?;
    let mut one = Tensor::<bf16>::empty(dev, &[m, n])?;
    let mut c = Tiled::new(dev, &[m, n], Rows::<16>, "c")?;
    let reps = 16;
    let mut times = Vec::new();
    for chunks in [1, 2, 4, 8, 16] {
        let t = time_graph(s, reps, replays, |s, _| {
            c.rearm();
            if copy {
                let cc = CopyChunks {
                    chunks,
                    align: 16,
                    signals,
                    ..CopyChunks::default()
                };
                copy_rows(s, &src, &mut c, &cc)
            } else {
                let g = GemmChunks {
                    chunks,
                    align: 16,
                    wrappers,
                    signals,
                    ..GemmChunks::default()
                };
                lt.matmul(s, &a, &w, None, &mut c, &g)
            }
        })?;
        times.push(t.median_us);
    }
    let plain = if copy {
        let mut dst = Tensor::<bf16>::empty(dev, &[m, n])?;
        time_graph(s, reps, replays, |s, _| {
            copy_on(&s.streams()[0], src.tensor(), &mut dst)
        })?
        .median_us
    } else {
        time_graph(s, reps, replays, |s, _| {
            lt.matmul_on(&s.streams()[0], &a, &w, None, &mut one)
        })?
        .median_us
    };
    Ok((times, plain))
}

/// The least-squares slope of `ys` over `xs`.
fn fit_slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let cov: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let var: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    cov / var
}

/// The MLP block at `m` rows with `gemm`: overlapped and serial µs per forward, and the
/// relative error of rows first, middle and last against the f64 reference.
fn mlp_row(
    dev: &Device,
    block: &Mlp,
    s: &AsyncStream,
    serial: &AsyncStream,
    m: usize,
    gemm: &PrefillGemm,
    replays: usize,
) -> Result<(f64, f64, f64)> {
    let cfg = block.config();
    let xv = random::<bf16>(m * cfg.hidden, 1.0, 0x78 ^ m as u64);
    let x = Tensor::from_slice(dev, &[m, cfg.hidden], &xv)?;
    let mut acts = MlpActivations::new(dev, cfg, m)?;
    acts.set_prefill_gemm(gemm.clone());
    acts.fill(bf16::from_bits((POISON_WORD & 0xffff) as u16))?;
    block.forward(s, &x, &mut acts)?;
    s.synchronize()?;
    let out = acts.output().to_vec()?;
    let rows = [0, m / 2, m - 1];
    let want = block.reference(&xv, &rows)?;
    let h = cfg.hidden;
    let got: Vec<bf16> = rows.iter().flat_map(|&r| out[r * h..(r + 1) * h].to_vec()).collect();
    let err = if out.iter().any(|v| !v.to_f64().is_finite()) {
        f64::INFINITY
    } else {
        rel_error(&got, &want)
    };
    let reps = 4;
    let overlap = time_graph(s, reps, replays, |s, _| block.forward(s, &x, &mut acts))?.median_us;
    let ser = time_graph(serial, reps, replays, |s, _| block.forward(s, &x, &mut acts))?.median_us;
    Ok((overlap, ser, err))
}
