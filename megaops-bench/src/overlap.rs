//! `overlap` suite: the paper's Figure 1 (`Y = X·Wᵀ; Z = Y·Vᵀ`, the library's tensor-core
//! GEMM twice, `Y` in 64-row data tiles) overlapped on a two-stream AsyncStream against
//! the very same kernels without overlap.
//!
//! Columns, all measured in one run on the same tensors:
//! - **overlap**: CUDA-graph replays of the program captured from `AsyncStream::new(dev, 2)`;
//! - **no-overlap**: graph replays of `AsyncStream::serial` (one stream, ordinary kernel
//!   boundaries, same kernels and configs, no wait kernels);
//! - **eager**: the serial program launched without a graph (CUDA events around each run).
//!
//! Shapes: the GEMM tile is 128 × 128 (config 0) and SMEM padding caps residency at `c`
//! CTAs per SM (`LaunchOptions::occupancy_limit`, paper §3.2), so one wave is exactly
//! 132·c tiles. "partial" shapes have tile counts just above a multiple of the wave (the
//! last wave leaves most SMs idle, which the consumer can fill), "full" shapes an exact
//! multiple. Speedup = no-overlap / overlap (medians). GEMMs are compute-bound and their
//! weights fit in L2 at these sizes, so inputs are not rotated.

use crate::harness::{Table, f3, time_events, time_graph};
use megaops::{AsyncStream, Device, LaunchOptions, Result};
use megaops_examples::fig1::{Fig1, Shape};
use std::path::Path;

/// One benchmark case: shape, residency cap, label.
struct Case {
    label: &'static str,
    shape: Shape,
    occupancy: u32,
}

fn cases() -> Vec<Case> {
    let s = |m, k, n1, n2| Shape { m, k, n1, n2 };
    vec![
        // c = 1: a wave is 132 tiles of 128 × 128.
        Case {
            label: "partial 136 tiles",
            shape: s(17 * 128, 2048, 1024, 1024),
            occupancy: 1,
        },
        Case {
            label: "partial 143 tiles",
            shape: s(13 * 128, 4096, 11 * 128, 11 * 128),
            occupancy: 1,
        },
        Case {
            label: "partial 140 tiles",
            shape: s(35 * 128, 1024, 512, 512),
            occupancy: 1,
        },
        Case {
            label: "partial 272 tiles",
            shape: s(34 * 128, 2048, 1024, 1024),
            occupancy: 1,
        },
        Case {
            label: "full 132 tiles",
            shape: s(11 * 128, 4096, 12 * 128, 12 * 128),
            occupancy: 1,
        },
        Case {
            label: "full 264 tiles",
            shape: s(33 * 128, 2048, 1024, 1024),
            occupancy: 1,
        },
        // c = 2: a wave is 264 tiles.
        Case {
            label: "partial 272 tiles",
            shape: s(34 * 128, 2048, 1024, 1024),
            occupancy: 2,
        },
        Case {
            label: "full 264 tiles",
            shape: s(33 * 128, 2048, 1024, 1024),
            occupancy: 2,
        },
        Case {
            label: "full 528 tiles",
            shape: s(66 * 128, 2048, 1024, 1024),
            occupancy: 2,
        },
        // No residency cap (as many CTAs per SM as registers and SMEM allow).
        Case {
            label: "uncapped 4096³",
            shape: s(4096, 4096, 4096, 4096),
            occupancy: 0,
        },
        Case {
            label: "uncapped m=2176",
            shape: s(17 * 128, 2048, 1024, 1024),
            occupancy: 0,
        },
    ]
}

/// Runs the suite, printing and saving one table.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("overlap suite: error: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let dev = Device::cuda(0)?;
    let overlap = AsyncStream::new(&dev, 2)?;
    let serial = AsyncStream::serial(&dev)?;
    let replays = if quick { 10 } else { 30 };
    let mut table = Table::new(
        "Figure 1 (two back-to-back GEMMs, 128×128 tiles): overlap vs no-overlap",
        &[
            "case",
            "m×k×n1×n2",
            "c",
            "tiles/GEMM",
            "check",
            "overlap µs",
            "no-overlap µs",
            "eager µs",
            "speedup",
        ],
    );
    for (i, case) in cases().iter().enumerate() {
        let shape = case.shape;
        let mut fig1 = Fig1::new(&dev, shape, 0xf191 + i as u64)?;
        let mut opts = LaunchOptions::config(0);
        if case.occupancy > 0 {
            opts = opts.occupancy_limit(case.occupancy);
        }
        // Correctness first, overlapped.
        fig1.run_with(&overlap, &opts, &opts)?;
        overlap.synchronize()?;
        let report = fig1.check(64)?;
        let check = if report.ok() {
            format!("ok {:.1e}", report.z_error)
        } else {
            format!("FAIL {report}")
        };
        // Each graph replays enough runs to last about a millisecond.
        let reps = ((1.5e9 / shape.flops()).ceil() as usize).clamp(1, 20);
        let t_overlap = time_graph(&overlap, reps, replays, |s, _| fig1.run_with(s, &opts, &opts))?;
        let t_serial = time_graph(&serial, reps, replays, |s, _| fig1.run_with(s, &opts, &opts))?;
        let t_eager = time_events(&serial.streams()[0], 3, replays, |_| {
            fig1.run_with(&serial, &opts, &opts)
        })?;
        let tiles = shape.m.div_ceil(128) * shape.n1.div_ceil(128);
        table.row(vec![
            case.label.to_string(),
            format!("{}×{}×{}×{}", shape.m, shape.k, shape.n1, shape.n2),
            if case.occupancy > 0 {
                case.occupancy.to_string()
            } else {
                "-".into()
            },
            tiles.to_string(),
            check,
            f3(t_overlap.median_us),
            f3(t_serial.median_us),
            f3(t_eager.median_us),
            format!("{:.3}×", t_serial.median_us / t_overlap.median_us),
        ]);
    }
    table.emit(out);
    Ok(())
}
