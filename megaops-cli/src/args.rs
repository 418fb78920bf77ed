//! The command line.

use clap::{Args, Parser, Subcommand};
use megaops_models::layers::GemmBackend;
use megaops_models::tune::SiteOverride;
use std::path::PathBuf;

/// Qwen3 and Llama-3 inference with MegaOps kernels overlapped at data-tile granularity.
#[derive(Parser, Debug)]
#[command(name = "megaops", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate tokens greedily for a prompt.
    Generate(Generate),
    /// Print a model's config, weight bytes, KV-cache bytes and the device.
    Info(Info),
    /// Write a preset with seeded random weights as a Hugging Face folder.
    Export(Export),
    /// Time decode and prefill workloads end to end (presets with random weights or a
    /// folder), overlapped, serial and eager.
    Bench(Bench),
    /// Tune a decode step's knobs jointly (graph-level autotuning: tile configs,
    /// prefetch, splits, occupancy limits, release points, data tiles, streams), or a
    /// prefill's, and cache the plan, which `generate` and `bench` then use; `--show`
    /// prints the cache, `--ablation` measures what each knob family is worth.
    Tune(Tune),
}

/// Which model: a Hugging Face folder or a preset.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A Hugging Face folder (config.json, model.safetensors or a sharded index,
    /// optionally tokenizer.json).
    #[arg(long, conflicts_with = "preset", required_unless_present = "preset")]
    pub model: Option<PathBuf>,
    /// A preset with random weights: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,
    /// llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, tiny, tiny-llama.
    #[arg(long)]
    pub preset: Option<String>,
    /// Keep only the first N decoder layers (presets only).
    #[arg(long, requires = "preset")]
    pub layers: Option<usize>,
    /// Seed of a preset's random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `megaops generate`.
#[derive(Args, Debug)]
pub struct Generate {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt as text (needs the folder's tokenizer.json).
    #[arg(long, group = "input")]
    pub prompt: Option<String>,
    /// The prompt as token ids, e.g. `1,2,3`.
    #[arg(long, group = "input", value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// A JSON file with one prompt of token ids per sequence (`[[1,2],[3,4]]`, equal
    /// lengths); the batch is the number of prompts.
    #[arg(long, group = "input")]
    pub prompt_file: Option<PathBuf>,
    /// Sequences (the prompt is repeated); not with --prompt-file.
    #[arg(long, default_value_t = 1, conflicts_with = "prompt_file")]
    pub batch: usize,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Keep generating after an end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Run the same kernels without overlap (one stream, kernel barriers).
    #[arg(long)]
    pub no_overlap: bool,
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Streams of the overlapping AsyncStream (default: the tuned plan's, else 2).
    #[arg(long)]
    pub streams: Option<usize>,
    /// Launch the decode step eagerly every step instead of replaying a captured graph.
    #[arg(long)]
    pub no_graph: bool,
    /// Print one JSON object (with the generated ids of each sequence in `tokens`).
    #[arg(long)]
    pub json: bool,
    /// Teacher forcing: a JSON file with, per sequence, the ids that decode steps feed
    /// instead of the generated ones (checks against a reference).
    #[arg(long)]
    pub force_tokens: Option<PathBuf>,
    /// Write the f32 logits of every step, `[steps, batch, vocab]` little-endian.
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// Do not use a tuned plan from the tune cache (`megaops tune`).
    #[arg(long)]
    pub no_tune_cache: bool,
    /// A decode site's knobs by hand, over the tuned plan's: `<site>:<key>=<value>,…`,
    /// e.g. `mlp.down:placement=alone` (repeatable; keys: config, splits, occupancy,
    /// release, tile, chunks, placement).
    #[arg(long = "site", value_name = "SITE:KEY=VALUE,…")]
    pub sites: Vec<SiteOverride>,
    /// A prefill site's knobs by hand, over the tuned prefill plan's (same syntax as
    /// `--site`; the GEMM sites' configs are the prefill GEMM's, e.g.
    /// `mlp.down:config=11` or `norm:config=3`).
    #[arg(long = "prefill-site", value_name = "SITE:KEY=VALUE,…")]
    pub prefill_sites: Vec<SiteOverride>,
    /// Run the decode steps' add + RMSNorms behind the output and down projections (`on`,
    /// the default where the planner fuses them) or as kernels of their own (`off`), over
    /// the tuned plan's choice.
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub norm_after: Option<bool>,
    /// GEMMs of the prefill's projections: `auto` (per GEMM: one cuBLASLt chunk from 100
    /// GFLOP on, the kernel library's below; `auto:<GFLOP>` sets the threshold; the
    /// library's everywhere where libcublasLt is missing), `rust` (the kernel library's),
    /// `cublaslt` (cuBLASLt subkernels, 4 row chunks per GEMM) or `cublaslt:<chunks>`.
    #[arg(long, default_value = "auto")]
    pub prefill_gemm: GemmBackend,
    /// Trace the kernel tiles of the prefill and the first decode step: writes
    /// `prefill.json` / `decode.json` (Perfetto), their timeline and per-operator
    /// exposed-time charts (PNG) to this folder and prints the breakdowns.
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

/// `megaops info`.
#[derive(Args, Debug)]
pub struct Info {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Sequences, for the KV-cache size.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Context length per sequence, for the KV-cache size (default: the model's).
    #[arg(long)]
    pub context: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `megaops export`.
#[derive(Args, Debug)]
pub struct Export {
    /// The preset.
    #[arg(long)]
    pub preset: String,
    /// Keep only the first N decoder layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The folder to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// `megaops bench`.
#[derive(Args, Debug)]
pub struct Bench {
    /// Presets to run, one after another (random weights).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "qwen3-0.6b,qwen3-1.7b,qwen3-8b,llama-3.2-1b",
        conflicts_with = "model"
    )]
    pub presets: Vec<String>,
    /// A Hugging Face folder to run instead of presets.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Keep only the first N decoder layers of each preset.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed of the presets' random weights (and of the prompts).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Workloads: short-decode (128 + 64 tokens), long-decode (1024 + 1024), prefill
    /// (1024 tokens).
    #[arg(long, value_delimiter = ',', default_value = "short-decode,long-decode,prefill")]
    pub workloads: Vec<String>,
    /// Batch sizes.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub batches: Vec<usize>,
    /// Modes: overlapped, serial (same kernels, no overlap), eager (no graph). The
    /// graph modes capture the prefill and the decode step once each and time replays.
    #[arg(long, value_delimiter = ',', default_value = "overlapped,serial,eager")]
    pub modes: Vec<String>,
    /// Streams of the overlapping AsyncStream (default: the tuned plan's, else 2).
    #[arg(long)]
    pub streams: Option<usize>,
    /// Override every workload's prompt length.
    #[arg(long)]
    pub prompt_len: Option<usize>,
    /// Override every decode workload's new tokens.
    #[arg(long)]
    pub new_tokens: Option<usize>,
    /// Timed prefills per row (after one untimed); the median is reported.
    #[arg(long, default_value_t = 3)]
    pub prefill_reps: usize,
    /// Write one JSON object per row to this file (JSON lines).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Do not use tuned plans from the tune cache (`megaops tune`).
    #[arg(long)]
    pub no_tune_cache: bool,
    /// Run the decode steps' add + RMSNorms inside the QKV and gate/up GEMVs that follow
    /// them, where the planner can fuse them (overrides the tuned plan's choice).
    #[arg(long)]
    pub norm_fusion: bool,
    /// Run the decode steps' QK-norm, RoPE and KV-cache write as their own kernel before
    /// decode attention instead of inside it (overrides the tuned plan's choice).
    #[arg(long)]
    pub no_rope_fusion: bool,
    /// Run the decode steps' add + RMSNorms behind the output and down projections (`on`,
    /// the default where the planner fuses them) or as kernels of their own (`off`);
    /// overrides the tuned plan's choice.
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    pub norm_after: Option<bool>,
    /// A site's knobs by hand, over the tuned plan's, in the plan of each row's workload
    /// (the decode step's, or the prefill's): `<site>:<key>=<value>,…`, e.g.
    /// `mlp.down:placement=alone` or `mlp.gate_up:config=0,splits=2` (repeatable; see
    /// `megaops tune --show` for the sites).
    #[arg(long = "site", value_name = "SITE:KEY=VALUE,…")]
    pub sites: Vec<SiteOverride>,
    #[command(flatten)]
    pub sync: SyncArgs,
    /// GEMMs of the prefills' projections: `auto` (per GEMM: cuBLASLt from 100 GFLOP on),
    /// `auto:<GFLOP>`, `rust`, `cublaslt` (4 row chunks per GEMM) or `cublaslt:<chunks>`.
    /// A list (`rust,auto`) times every prefill row on each in turn; the decode rows'
    /// prefills run on the first.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub prefill_gemm: Vec<GemmBackend>,
    /// Instead of timing the workloads: where one decode step (at the first decode
    /// workload's prompt length) and one prefill (if listed) spend their time, per
    /// operator, overlapped against serial, at every batch size (GPU only).
    #[arg(long)]
    pub breakdown: bool,
    /// After each overlapped row, run it again with tile tracing on: write the traces of
    /// one prefill and one decode step (Perfetto JSON, timeline and exposed-time PNGs) to
    /// this folder, print their breakdowns and the traced step time against the
    /// untraced one.
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

/// `megaops tune`.
#[derive(Args, Debug)]
pub struct Tune {
    /// A Hugging Face folder.
    #[arg(long, conflicts_with = "preset")]
    pub model: Option<PathBuf>,
    /// A preset with random weights (see `generate --preset`).
    #[arg(long)]
    pub preset: Option<String>,
    /// Seed of a preset's random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Batch sizes to tune, one after another.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batch: Vec<usize>,
    /// The workload tuned: the decode step of short-decode (context 128) or long-decode
    /// (context 1024), or the prefill of 1024-token prompts (prefill: the GEMMs' tile
    /// configs, occupancy limits and release points).
    #[arg(long, default_value = "short-decode")]
    pub workload: String,
    /// Wall-clock budget per tuning, seconds.
    #[arg(long, default_value_t = 90.0)]
    pub budget_s: f64,
    /// Decoder layers the tuner runs (the first N; every layer shares the knobs).
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    /// Relative gain a knob move must bring (measurement noise).
    #[arg(long, default_value_t = 0.01)]
    pub noise: f64,
    /// Timed graph replays per candidate (median).
    #[arg(long, default_value_t = 30)]
    pub replays: usize,
    /// Streams the search starts from.
    #[arg(long, default_value_t = megaops_models::DEFAULT_STREAMS)]
    pub streams: usize,
    /// With `--workload prefill`: the GEMMs of the prefill's projections (`rust`,
    /// `cublaslt[:<chunks>]`, whose chunk counts are then tuned instead of `matmul`
    /// configs, or `auto[:<GFLOP>]`, which tunes each projection on the backend its size
    /// picks; each cached apart from the others' plans) [default: auto].
    #[arg(long)]
    pub prefill_gemm: Option<GemmBackend>,
    /// Knob families to hold at the planners' values (config, prefetch, padding,
    /// release, split, streams, tiles, chunks); a plan tuned so is not cached. Not with
    /// --ablation, which holds each family in turn.
    #[arg(long, value_delimiter = ',', conflicts_with = "ablation")]
    pub hold: Vec<String>,
    /// The cache file (default: $MEGAOPS_TUNE_CACHE, else ~/.cache/megaops/tune.json).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Print the cached plans and exit.
    #[arg(long)]
    pub show: bool,
    /// The ablation: per batch, no graph-level tuning, full tuning and full tuning with
    /// one knob family held, each timed on the whole model.
    #[arg(long)]
    pub ablation: bool,
    /// With --ablation: write its rows as JSON lines here.
    #[arg(long, requires = "ablation")]
    pub json: Option<PathBuf>,
    /// With --ablation: draw the slowdowns (PNG) here.
    #[arg(long, requires = "ablation")]
    pub plot: Option<PathBuf>,
}

/// How the device synchronises overlapping kernels (`generate` and `bench`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SyncArgs {
    /// How long every tile wait re-reads its semaphores without sleeping before it backs
    /// off (`Device::set_poll_spin`, ns; default: the library's).
    #[arg(long)]
    pub poll_spin_ns: Option<u64>,
    /// How overlapping launches wait until the previous one has begun: `wait-kernel`,
    /// `start-event` or `programmatic` (`Device::set_begin_rule`; default: the library's).
    #[arg(long)]
    pub begin_rule: Option<String>,
    /// Run cuBLASLt and copy subkernels of one chunk (`--prefill-gemm auto`, `cublaslt:1`)
    /// on a side stream, forked from and joined back to the launch's stream, instead of on
    /// the launch's own stream after their proxy (the default;
    /// `Device::set_one_chunk_on_lane`).
    #[arg(long)]
    pub no_one_chunk_on_lane: bool,
}

impl SyncArgs {
    /// Refuses an unknown begin rule or a poll spin longer than a launch can carry.
    pub fn check(&self) -> megaops::Result<()> {
        if let Some(rule) = &self.begin_rule {
            megaops::BeginRule::parse(rule)?;
        }
        self.poll_spin_ns.map_or(Ok(()), |ns| {
            megaops::check_poll_spin(std::time::Duration::from_nanos(ns))
        })
    }

    /// Whether none is given: the device keeps the library's defaults.
    pub fn is_default(&self) -> bool {
        self.poll_spin_ns.is_none() && self.begin_rule.is_none() && !self.no_one_chunk_on_lane
    }

    /// Sets the device's poll spin, begin rule and one-chunk subkernel streams where given.
    pub fn apply(&self, device: &megaops::Device) -> megaops::Result<()> {
        if let Some(rule) = &self.begin_rule {
            device.set_begin_rule(megaops::BeginRule::parse(rule)?);
        }
        if self.no_one_chunk_on_lane {
            device.set_one_chunk_on_lane(false);
        }
        if let Some(ns) = self.poll_spin_ns {
            device.set_poll_spin(std::time::Duration::from_nanos(ns))?;
        }
        Ok(())
    }
}

/// `on` / `off` as a flag's value.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}`: expected `on` or `off`")),
    }
}
