//! `megaops`: generate with a Qwen3 / Llama-3 model on MegaOps (a Hugging Face folder or a
//! preset with random weights), show a model's sizes, write a preset out as a Hugging
//! Face folder, or benchmark workloads end to end. Runs on the GPU when there is one, else on the CPU backend (and says so).

mod args;
mod bench;
mod run;
mod trace;

use clap::Parser;

fn main() {
    let cli = args::Cli::parse();
    if let Err(e) = run::run(cli) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
