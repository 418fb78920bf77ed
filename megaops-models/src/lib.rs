//! The MegaOps model engine: dense Qwen3 and Llama-3 models from Hugging Face checkpoints
//! (or presets with random weights), a forward pass in which every operator is a MegaOps
//! kernel and every tensor between two kernels a `Tiled` tensor, and generation with a
//! static KV cache and a CUDA-graph decode step.
//!
//! Layout, as a Rust model reads (candle-transformers' `qwen3.rs`): [`config`] (the
//! `config.json`), [`checkpoint`] (safetensors, memory-mapped), [`presets`] (random
//! weights with real dimensions), [`layers`] (`Mlp`, `Attention`, `DecoderLayer`),
//! [`model`] (`Model`, `CausalLm`), [`generate`](mod@generate) (the generation loop), [`bench`](mod@bench) (end-to-end
//! timing of a workload), [`tune`] (graph-level autotuning of the decode step).

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod generate;
pub mod layers;
pub mod model;
pub mod presets;
pub mod tokenizer;
pub mod tune;

/// Streams of the overlapping AsyncStream when neither the command line nor a tuned plan
/// sets them.
pub const DEFAULT_STREAMS: usize = 2;

pub use config::{Architecture, Config};
pub use error::{ModelError, Result};
pub use generate::{Decoder, GenerateOptions, Generation, GenerationTraces, Prefill, Session, generate};
pub use model::{CausalLm, Model, Pass};
