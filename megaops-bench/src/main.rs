//! `megaops-bench`: the GPU benchmarks of MegaOps. Each suite prints Markdown tables (the
//! figures in bench/RESULTS.md come from here) and appends them to `--out`.

mod attention;
mod bandwidth;
mod boundary;
mod cublas;
mod gemm;
mod gemv;
mod harness;
mod mlp;
mod models;
mod overlap;
mod subkernel;

use clap::Parser;

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "MegaOps GPU benchmarks")]
struct Args {
    /// Suites to run (default: all).
    suites: Vec<String>,
    /// Directory for results.md / results.jsonl.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Fewer repetitions, for a quick check.
    #[arg(long)]
    quick: bool,
}

fn main() {
    let args = Args::parse();
    let selected = |name: &str| args.suites.is_empty() || args.suites.iter().any(|s| s == name);
    if selected("gemm") {
        gemm::run(args.out.as_deref(), args.quick);
    }
    if selected("bandwidth") {
        bandwidth::run(args.out.as_deref(), args.quick);
    }
    if selected("gemv") {
        gemv::run(args.out.as_deref(), args.quick);
    }
    if selected("boundary") {
        boundary::run(args.out.as_deref(), args.quick);
    }
    if selected("overlap") {
        overlap::run(args.out.as_deref(), args.quick);
    }
    if selected("mlp") {
        mlp::run(args.out.as_deref(), args.quick);
    }
    if selected("attention") {
        attention::run(args.out.as_deref(), args.quick);
    }
    if selected("subkernel") {
        subkernel::run(args.out.as_deref(), args.quick);
    }
}
