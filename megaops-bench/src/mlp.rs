//! `mlp` suite: the SwiGLU MLP block of `megaops_examples::mlp` (RMSNorm → gate/up →
//! SiLU·mul → down) at the shapes of Qwen3-0.6B (hidden 1024, intermediate 3072) and
//! Llama-3.2-1B (2048, 8192), decode-like m = 1, 4, 16 (GEMV kernels) and prefill-like
//! m = 1024, 4096, 8192 (GEMMs), three ways:
//!
//! - **overlap**: a CUDA graph of the forward on an `AsyncStream` of two streams (kernels
//!   overlap through the data tiles of the intermediates);
//! - **serial graph**: a CUDA graph of the very same kernels on `AsyncStream::serial` (one
//!   stream, kernel barriers);
//! - **eager**: the same kernels launched one by one on the serial stream, each forward
//!   timed with CUDA events (`harness::time_events`; includes launch overhead).
//!
//! Each graph (and the eager run) is a chain of blocks as in a decoder stack: block `i`
//! reads block `i - 1`'s output through its data tiles (block 0 reads `x`), and
//! consecutive blocks write alternating sets of activations; the overlapped chain's
//! output must equal the serial chain's bit for bit.
//!
//! The speedup column is serial graph / overlap. The overlap is timed twice: with the
//! path's release point (`MlpActivations::release`: the last CTA of each kernel on the
//! prefill path) and with every kernel releasing its successor at its first CTA. A second
//! table times each kernel of the pass alone (`Mlp::forward_stage`; a kernel alone
//! rotates over only its own weights, which may then fit in L2, e.g. the down projections
//! of the Qwen3-0.6B sets). Each graph holds several forwards that rotate over enough
//! weight sets (independent random blocks) to exceed twice the 50 MB L2, so the weights
//! come from HBM as in a real forward pass. Before timing, each shape
//! runs once with poisoned outputs and compares a few rows with the f64 reference
//! (`Mlp::reference`); errors are printed and the suite moves on.

use crate::harness::{Table, budget_s, f3, time_events, time_graph};
use megaops::testing::{POISON_WORD, random, rel_error};
use megaops::{AsyncStream, Device, ReleaseNext, Result, Tensor, bf16};
use megaops_examples::mlp::{Mlp, MlpActivations, MlpConfig};
use std::path::Path;
use std::time::Instant;

/// Wall-clock budget of the suite (all included; `MEGAOPS_BENCH_BUDGET_S` overrides it);
/// shapes past it are skipped.
const BUDGET_S: f64 = 60.0;
/// L2 of an H200; weights of the rotated sets exceed twice this.
const L2_BYTES: usize = 50 << 20;
/// Rows timed, decode-like then prefill-like.
const MS: [usize; 6] = [1, 4, 16, 1024, 4096, 8192];
/// The models (from the presets).
fn models() -> Vec<(&'static str, MlpConfig)> {
    crate::models::shapes(&[("Qwen3-0.6B", "qwen3-0.6b"), ("Llama-3.2-1B", "llama-3.2-1b")])
        .iter()
        .map(|m| {
            (
                m.name,
                MlpConfig {
                    hidden: m.hidden,
                    inter: m.inter,
                    eps: m.eps,
                },
            )
        })
        .collect()
}
/// Relative error above which the correctness check reports a failure.
const TOL: f64 = 1e-2;

/// Runs the suite, printing (and appending to `out`) one table; `quick` halves the
/// replays.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("mlp suite stopped: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let start = Instant::now();
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("mlp suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let overlap = AsyncStream::new(&dev, 2)?;
    let serial = AsyncStream::serial(&dev)?;
    let replays = if quick { 4 } else { 8 };
    let budget = budget_s(BUDGET_S);
    let mut table = Table::new(
        "MLP block (RMSNorm → gate/up → SiLU·mul → down): overlapped vs no-overlap",
        &[
            "model",
            "m",
            "path",
            "weights MB × sets",
            "overlap µs",
            "serial-graph µs",
            "eager µs",
            "speedup",
            "overlap, first-CTA release µs",
            "speedup, first-CTA release",
            "rel err",
        ],
    );
    let mut stages_table = Table::new(
        "MLP block: each kernel alone (serial graph of the same rotation), against the serial forward",
        &[
            "model",
            "m",
            "path",
            "kernels",
            "µs each",
            "sum µs",
            "serial forward µs",
        ],
    );
    'models: for (mi, (model, cfg)) in models().into_iter().enumerate() {
        let sets = (2 * L2_BYTES).div_ceil(cfg.weight_bytes()).max(2);
        let mlps = match (0..sets)
            .map(|i| Mlp::random(&dev, cfg, 0x6d6c70 + 16 * mi as u64 + i as u64))
            .collect::<Result<Vec<_>>>()
        {
            Ok(v) => v,
            Err(e) => {
                eprintln!("mlp {model}: weights: {e}");
                continue;
            }
        };
        for m in MS {
            if start.elapsed().as_secs_f64() > budget {
                eprintln!("mlp suite: over its {budget} s budget, skipping the remaining shapes");
                break 'models;
            }
            let shape = Shape {
                dev: &dev,
                overlap: &overlap,
                serial: &serial,
                mlps: &mlps,
                m,
                replays,
            };
            let path = MlpActivations::new(&dev, cfg, m).map(|a| format!("{:?}", a.path()));
            let mut row = vec![
                model.to_string(),
                m.to_string(),
                path.unwrap_or_else(|_| "-".into()),
                format!("{:.1} × {sets}", cfg.weight_bytes() as f64 / 1e6),
            ];
            match shape.measure() {
                Ok(r) => {
                    row.extend([
                        f3(r.overlap_us),
                        f3(r.serial_us),
                        f3(r.eager_us),
                        format!("{:.2}", r.serial_us / r.overlap_us),
                        f3(r.overlap_first_us),
                        format!("{:.2}", r.serial_us / r.overlap_first_us),
                        r.error.map_or("err".into(), |e| format!("{e:.1e}")),
                    ]);
                    let sum: f64 = r.stage_us.iter().sum();
                    stages_table.row(vec![
                        row[0].clone(),
                        row[1].clone(),
                        row[2].clone(),
                        r.stages.join(" / "),
                        r.stage_us.iter().map(|&t| f3(t)).collect::<Vec<_>>().join(" / "),
                        f3(sum),
                        f3(r.serial_us),
                    ]);
                }
                Err(e) => {
                    eprintln!("mlp {model} m={m}: {e}");
                    row.extend(["err", "err", "err", "-", "err", "-", "-"].map(String::from));
                }
            }
            table.row(row);
        }
    }
    table.emit(out);
    stages_table.emit(out);
    eprintln!("mlp suite: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Two sets of activations for a chain of blocks.
struct Chain {
    acts: [MlpActivations; 2],
}

impl Chain {
    /// Block `i` of the chain: input `x` for `i = 0`, else block `i - 1`'s output.
    fn forward(&mut self, mlp: &Mlp, s: &AsyncStream, x: &Tensor<bf16>, i: usize) -> Result<()> {
        let [a0, a1] = &mut self.acts;
        let (prev, cur) = if i.is_multiple_of(2) { (&*a1, a0) } else { (&*a0, a1) };
        if i == 0 {
            mlp.forward(s, x, cur)
        } else {
            mlp.forward(s, prev.output(), cur)
        }
    }

    fn set_release(&mut self, release: ReleaseNext) {
        for a in &mut self.acts {
            a.set_release(release);
        }
    }
}

/// One model at one m.
struct Shape<'a> {
    dev: &'a Device,
    overlap: &'a AsyncStream,
    serial: &'a AsyncStream,
    mlps: &'a [Mlp],
    m: usize,
    replays: usize,
}

/// What one shape measured (µs per forward).
struct Measured {
    /// Overlapped with the path's default release point (`MlpActivations::release`).
    overlap_us: f64,
    /// Overlapped with every kernel releasing its successor at its first CTA.
    overlap_first_us: f64,
    serial_us: f64,
    eager_us: f64,
    /// The path's kernels and each one's time alone (serial graph).
    stages: &'static [&'static str],
    stage_us: Vec<f64>,
    /// Relative error of the checked rows (None: the check itself failed).
    error: Option<f64>,
}

impl Shape<'_> {
    fn measure(&self) -> Result<Measured> {
        let (m, sets) = (self.m, self.mlps.len());
        let cfg = self.mlps[0].config();
        let x = Tensor::from_slice(
            self.dev,
            &[m, cfg.hidden],
            &random::<bf16>(m * cfg.hidden, 1.0, 0x78 ^ m as u64),
        )?;
        let mut acts = MlpActivations::new(self.dev, cfg, m)?;
        let error = match self.check(&x, &mut acts) {
            Ok(e) => {
                if e > TOL {
                    eprintln!(
                        "mlp {}×{} m={m}: relative error {e:.2e} > {TOL:.0e}",
                        cfg.hidden, cfg.inter
                    );
                }
                Some(e)
            }
            Err(e) => {
                eprintln!("mlp {}×{} m={m}: correctness check failed: {e}", cfg.hidden, cfg.inter);
                None
            }
        };
        // Decode forwards take microseconds: more of them per graph replay.
        let reps = if m <= 16 { sets * 16usize.div_ceil(sets) } else { sets };
        // Blocks chained as in a decoder stack: block i reads block i - 1's Tiled output
        // (block 0 reads x) and writes the activations of parity i % 2.
        let mut chain = Chain {
            acts: [
                MlpActivations::new(self.dev, cfg, m)?,
                MlpActivations::new(self.dev, cfg, m)?,
            ],
        };
        let default_release = chain.acts[0].release();
        let overlap_us = time_graph(self.overlap, reps, self.replays, |s, i| {
            chain.forward(&self.mlps[i % sets], s, &x, i)
        })?
        .median_us;
        self.overlap.synchronize()?;
        let overlap_out = chain.acts[(reps - 1) % 2].output().to_vec()?;
        chain.set_release(ReleaseNext::FirstCta);
        let overlap_first_us = time_graph(self.overlap, reps, self.replays, |s, i| {
            chain.forward(&self.mlps[i % sets], s, &x, i)
        })?
        .median_us;
        chain.set_release(default_release);
        let serial_us = time_graph(self.serial, reps, self.replays, |s, i| {
            chain.forward(&self.mlps[i % sets], s, &x, i)
        })?
        .median_us;
        self.serial.synchronize()?;
        // The same kernels on the same inputs: the overlapped chain must give the very
        // same bits (every kernel sums in a fixed order).
        let serial_out = chain.acts[(reps - 1) % 2].output().to_vec()?;
        let same = overlap_out
            .iter()
            .zip(&serial_out)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same || overlap_out.iter().any(|v| !v.to_f64().is_finite()) {
            eprintln!(
                "mlp {}×{} m={m}: the overlapped chain's output differs from the serial one's",
                cfg.hidden, cfg.inter
            );
            return Err(megaops::Error::Invalid("overlapped and serial chains disagree".into()));
        }
        let serial = self.serial;
        let eager_us = time_events(&serial.streams()[0], 3, self.replays * reps.min(8), |i| {
            chain.forward(&self.mlps[i % sets], serial, &x, i)
        })?
        .median_us;
        // Each kernel alone, on the intermediates the passes above left.
        let stages = acts.path().stages();
        let mut stage_us = Vec::with_capacity(stages.len());
        for stage in 0..stages.len() {
            let t = time_graph(self.serial, reps, self.replays, |s, i| {
                self.mlps[i % sets].forward_stage(s, &x, &mut acts, stage)
            })?;
            stage_us.push(t.median_us);
        }
        Ok(Measured {
            overlap_us,
            overlap_first_us,
            serial_us,
            eager_us,
            stages,
            stage_us,
            error,
        })
    }

    /// One overlapped forward with poisoned activations; the relative error of rows
    /// first, middle and last against the f64 reference (infinite if any output element
    /// was left unwritten).
    fn check(&self, x: &Tensor<bf16>, acts: &mut MlpActivations) -> Result<f64> {
        let mlp = &self.mlps[0];
        let h = mlp.config().hidden;
        acts.fill(bf16::from_bits((POISON_WORD & 0xffff) as u16))?;
        mlp.forward(self.overlap, x, acts)?;
        self.overlap.synchronize()?;
        let out = acts.output().to_vec()?;
        if out.iter().any(|v| !v.to_f64().is_finite()) {
            return Ok(f64::INFINITY);
        }
        let mut rows = vec![0, self.m / 2, self.m - 1];
        rows.dedup();
        let reference = mlp.reference(&x.to_vec()?, &rows)?;
        let got: Vec<bf16> = rows.iter().flat_map(|&r| out[r * h..(r + 1) * h].to_vec()).collect();
        Ok(rel_error(&got, &reference))
    }
}
