//! `megaops-bench`: the GPU benchmarks of MegaOps. Each suite prints Markdown tables (the
//! figures in bench/RESULTS.md come from here) and appends them to `--out`.

mod harness;

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
    let _ = (&args.suites, &args.out, args.quick);
    eprintln!("no suites are registered yet");
}
