//! `fig1`: the paper's Figure 1 (`Y = X·Wᵀ; Z = Y·Vᵀ`, overlapped on row data tiles of `Y`)
//! on the GPU, or on the CPU backend when there is none (it says so).
//!
//! Runs random shapes (by default sizes that are multiples of no tile size), each with
//! several producer/consumer tile-config pairs, overlapped on a two-stream AsyncStream and
//! in no-overlap mode, and checks `Y` and `Z` against f64 references. Exits non-zero on a
//! mismatch. Timings live in `megaops-bench overlap`.

use clap::Parser;
use megaops::testing::random_ints;
use megaops::{AsyncStream, BackendKind, Device, Result};
use megaops_examples::fig1::{Fig1, Shape};
use megaops_kernels::gemm::matmul;
use std::process::ExitCode;

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "MegaOps Figure 1: two back-to-back GEMMs overlapped through row data tiles")]
struct Args {
    /// Rows of X (random when not given).
    #[arg(long)]
    m: Option<usize>,
    /// Inner dimension of the first GEMM (a multiple of 8; random when not given).
    #[arg(long)]
    k: Option<usize>,
    /// Columns of Y (a multiple of 8; random when not given).
    #[arg(long)]
    n1: Option<usize>,
    /// Columns of Z (random when not given).
    #[arg(long)]
    n2: Option<usize>,
    /// Number of random shapes.
    #[arg(long, default_value_t = 3)]
    shapes: usize,
    /// Seed of the shapes and inputs (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Only this producer tile config (index into matmul's configs).
    #[arg(long)]
    producer: Option<usize>,
    /// Only this consumer tile config.
    #[arg(long)]
    consumer: Option<usize>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("fig1: MISMATCH (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("fig1: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<bool> {
    let (dev, fallback) = Device::auto_with_reason()?;
    let gpu = dev.kind() == BackendKind::Cuda;
    match &fallback {
        None => println!("fig1: running on {}", dev.name()),
        Some(reason) => println!("fig1: no GPU ({reason}); running on the CPU backend at small shapes"),
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("fig1: seed {seed} (rerun with --seed {seed})");
    let configs = matmul::CONFIGS;
    let pairs: Vec<(usize, usize)> = match (args.producer, args.consumer) {
        (Some(p), Some(q)) => vec![(p, q)],
        (Some(p), None) => vec![(p, 0), (p, configs.len() - 1)],
        (None, Some(q)) => vec![(0, q), (configs.len() - 1, q)],
        // The same consumer after different producers, and the reverse: tile configs are
        // swapped on one side without touching the other.
        (None, None) => vec![(0, 5), (1, 5), (5, 5), (2, 0), (2, 7)],
    };
    if let Some(&(p, q)) = pairs.iter().find(|(p, q)| *p >= configs.len() || *q >= configs.len()) {
        return Err(megaops::Error::Invalid(format!(
            "tile config {} does not exist: matmul has {} configs (0..{})",
            p.max(q),
            configs.len(),
            configs.len()
        )));
    }
    // Random sizes: m, n2 any; k and n1 multiples of 8 but not of 16 or 64 where possible.
    let (hi, k_hi) = if gpu { (4000, 2000) } else { (200, 96) };
    let draws = random_ints(4 * args.shapes, 1, hi, seed);
    let mut all_ok = true;
    for s in 0..args.shapes {
        let pick = |i: usize, lim: i64| (draws[4 * s + i].rem_euclid(lim) + 1) as usize;
        let shape = Shape {
            m: args.m.unwrap_or_else(|| pick(0, hi) + 1),
            k: args.k.unwrap_or_else(|| pick(1, k_hi / 8) * 8 + 8),
            n1: args.n1.unwrap_or_else(|| pick(2, hi / 8) * 8 + 8),
            n2: args.n2.unwrap_or_else(|| pick(3, hi) + 1),
        };
        let mut fig1 = Fig1::new(&dev, shape, seed.wrapping_add(s as u64))?;
        for &(p, q) in &pairs {
            for (mode, stream) in [
                ("overlap", AsyncStream::new(&dev, 2)?),
                ("no-overlap", AsyncStream::serial(&dev)?),
            ] {
                fig1.poison()?;
                fig1.run(&stream, p, q)?;
                stream.synchronize()?;
                let report = fig1.check(if gpu { 96 } else { usize::MAX })?;
                println!(
                    "{shape}  producer {p} ({})  consumer {q} ({})  {mode:<10}  {report}",
                    configs[p].name, configs[q].name
                );
                all_ok &= report.ok();
            }
        }
    }
    println!(
        "fig1: {}",
        if all_ok {
            "all results match the references"
        } else {
            "MISMATCH"
        }
    );
    Ok(all_ok)
}
