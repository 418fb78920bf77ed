//! What each subcommand does.

use crate::args::{Cli, Command, Export, Generate, Info, ModelArgs};
use crate::bench::run_bench;
use indicatif::{ProgressBar, ProgressStyle};
use megaops::{AsyncStream, Device};
use megaops_models::bench::Workload;
use megaops_models::checkpoint::{Checkpoint, WeightSource};
use megaops_models::layers::GemmBackend;
use megaops_models::presets::{self, RandomWeights};
use megaops_models::tokenizer::Tokenizer;
use megaops_models::{CausalLm, Config, GenerateOptions, ModelError, Result, generate};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Runs the command.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Generate(g) => run_generate(g),
        Command::Info(i) => run_info(i),
        Command::Export(e) => run_export(e),
        Command::Bench(b) => run_bench(b),
        Command::Tune(t) => crate::tune::run_tune(t),
    }
}

/// A model's config, its weights and (for a folder with `tokenizer.json`) its tokenizer.
pub(crate) struct Source {
    pub(crate) name: String,
    pub(crate) config: Config,
    /// The config before `--layers` (what tuned plans are cached under).
    pub(crate) full_config: Config,
    weights: Box<dyn WeightSource>,
    tokenizer: Option<Tokenizer>,
}

pub(crate) fn open(args: &ModelArgs) -> Result<Source> {
    match (&args.model, &args.preset) {
        (Some(dir), _) => {
            let ckpt = Checkpoint::open(dir)?;
            // Every tensor's presence, shape and dtype, before any device work.
            ckpt.check_tensors()?;
            let tokenizer = Tokenizer::from_dir(dir)?;
            Ok(Source {
                name: dir.display().to_string(),
                config: ckpt.config().clone(),
                full_config: ckpt.config().clone(),
                weights: Box::new(ckpt),
                tokenizer,
            })
        }
        (None, Some(name)) => {
            let full_config = presets::preset(name)?;
            let mut config = full_config.clone();
            if let Some(n) = args.layers {
                config = presets::with_layers(config, n)?;
            }
            Ok(Source {
                name: format!("preset {name}"),
                full_config,
                weights: Box::new(RandomWeights::new(config.clone(), args.seed)),
                config,
                tokenizer: None,
            })
        }
        (None, None) => Err(ModelError::Request("give --model DIR or --preset NAME".into())),
    }
}

/// The device, saying on stderr when it is the CPU backend and why.
pub(crate) fn device() -> Result<Device> {
    let (device, why) = Device::auto_with_reason()?;
    if let Some(why) = why {
        eprintln!("running on the CPU backend ({why})");
    }
    Ok(device)
}

/// Loads the model onto `device` with a progress bar; returns it and the load time.
pub(crate) fn load(device: &Device, src: &Source) -> Result<(CausalLm, f64)> {
    load_config(device, src, &src.config)
}

/// Loads the first `layers` decoder layers of the model (with its embedding, final norm
/// and LM head), as [`load`].
pub(crate) fn load_layers(device: &Device, src: &Source, layers: usize) -> Result<(CausalLm, f64)> {
    let config = presets::with_layers(src.config.clone(), layers)?;
    load_config(device, src, &config)
}

fn load_config(device: &Device, src: &Source, config: &Config) -> Result<(CausalLm, f64)> {
    let t0 = Instant::now();
    let bar = ProgressBar::new(config.weight_bytes() as u64);
    bar.set_style(
        ProgressStyle::with_template("loading {msg} {bar:40} {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(src.name.clone());
    let mut progress = |_: &str, bytes: usize| bar.inc(bytes as u64);
    let lm = CausalLm::load(device, config, src.weights.as_ref(), &mut progress)?;
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "loaded {} ({:.2} GB of weights) in {secs:.2} s on {}",
        src.name,
        config.weight_bytes() as f64 / 1e9,
        device.name()
    );
    Ok((lm, secs))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        source: e,
    })
}

fn prompts(g: &Generate, src: &Source) -> Result<Vec<Vec<u32>>> {
    if let Some(path) = &g.prompt_file {
        return read_json(path);
    }
    let one = match (&g.prompt, &g.prompt_ids) {
        (Some(text), _) => match &src.tokenizer {
            Some(t) => t.encode(text)?,
            None => {
                return Err(ModelError::Tokenizer(format!(
                    "{} has no tokenizer.json, so --prompt text cannot be tokenized: give --prompt-ids 1,2,3",
                    src.name
                )));
            }
        },
        (None, Some(ids)) => ids.clone(),
        (None, None) => {
            return Err(ModelError::Request(
                "give a prompt: --prompt TEXT, --prompt-ids 1,2,3 or --prompt-file FILE".into(),
            ));
        }
    };
    Ok(vec![one; g.batch.max(1)])
}

fn run_generate(g: Generate) -> Result<()> {
    let src = open(&g.model)?;
    let prompts = prompts(&g, &src)?;
    let opts = GenerateOptions {
        max_new_tokens: g.max_new_tokens,
        ignore_eos: g.ignore_eos,
        graph: !g.no_graph,
        force_tokens: g.force_tokens.as_deref().map(read_json).transpose()?,
        keep_logits: g.logits_out.is_some(),
        trace: g.trace.is_some(),
        plan: Default::default(),
        prefill_plan: Default::default(),
        prefill_gemm: g.prefill_gemm,
    };
    if g.streams == Some(0) {
        return Err(ModelError::Request("--streams must be at least 1".into()));
    }
    g.sync.check()?;
    let mut opts = opts;
    // Requests that cannot run fail before any device work.
    megaops_models::generate::check_request(&src.config, &prompts, &opts)?;
    let device = device()?;
    let (lm, load_s) = load(&device, &src)?;
    let workload = crate::tune::workload_for(prompts[0].len());
    opts.plan = crate::tune::cached_plan(
        &device,
        &src.full_config,
        prompts.len(),
        workload,
        GemmBackend::Rust,
        g.no_tune_cache,
    )?;
    for &over in &g.sites {
        opts.plan.override_site(over);
    }
    if let Some(on) = g.norm_after {
        opts.plan.norm_after = Some(on);
    }
    // A prefill plan is tuned for prompts of the prefill workload's length; shorter ones
    // keep the planners' GEMM configs.
    if workload == Workload::LongDecode {
        opts.prefill_plan = crate::tune::cached_plan(
            &device,
            &src.full_config,
            prompts.len(),
            Workload::Prefill,
            g.prefill_gemm,
            g.no_tune_cache,
        )?;
    }
    for &over in &g.prefill_sites {
        opts.prefill_plan.override_site(over);
    }
    let streams = g
        .streams
        .or(opts.plan.streams)
        .unwrap_or(megaops_models::DEFAULT_STREAMS);
    g.sync.apply(&device)?;
    let on = if g.no_overlap {
        AsyncStream::serial(&device)?
    } else {
        AsyncStream::new(&device, streams)?
    };
    let stream_text = !g.json && prompts.len() == 1 && src.tokenizer.is_some();
    let mut printed = Vec::new();
    let mut stdout = std::io::stdout();
    let mut on_tokens = |step: usize, ids: &[u32]| {
        if g.json {
            return;
        }
        if stream_text {
            if let Some(t) = &src.tokenizer {
                printed.push(ids[0]);
                if let Ok(text) = t.decode(&printed[printed.len() - 1..]) {
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
            }
        } else {
            let _ = writeln!(stdout, "step {step}: {ids:?}");
        }
    };
    let out = generate(&lm, &on, &prompts, &opts, &mut on_tokens)?;
    if let (Some(dir), Some(traces)) = (&g.trace, &out.traces) {
        let title = format!("{} batch {}", src.name, prompts.len());
        crate::trace::write(dir, "prefill", &format!("{title}: prefill"), &traces.prefill, g.json)?;
        if let Some(d) = &traces.decode {
            crate::trace::write(dir, "decode", &format!("{title}: decode step"), d, g.json)?;
        }
    }
    if let Some(path) = &g.logits_out {
        let bytes: Vec<u8> = out.logits.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| ModelError::Io {
            path: path.clone(),
            source: e,
        })?;
    }
    let texts: Option<Vec<String>> = src
        .tokenizer
        .as_ref()
        .map(|t| out.tokens.iter().map(|ids| t.decode(ids)).collect::<Result<Vec<_>>>())
        .transpose()?;
    let tokens_per_s = if out.decode_ms > 0.0 {
        (out.decode_steps * prompts.len()) as f64 / (out.decode_ms / 1e3)
    } else {
        0.0
    };
    if g.json {
        let obj = json!({
            "model": src.name,
            "backend": if device.is_cuda() { "cuda" } else { "cpu" },
            "device": device.name(),
            "batch": prompts.len(),
            "prompt_len": prompts[0].len(),
            "overlap": !g.no_overlap,
            "streams": if g.no_overlap { 1 } else { streams },
            "graph": !g.no_graph,
            "tokens": out.tokens,
            "text": texts,
            "load_s": load_s,
            "prefill_ms": out.prefill_ms,
            "decode_steps": out.decode_steps,
            "decode_ms_per_step": out.ms_per_step(),
            "decode_tokens_per_s": tokens_per_s,
        });
        println!("{obj}");
    } else {
        if stream_text {
            println!();
        }
        eprintln!(
            "prefill {:.2} ms; {} decode steps at {:.3} ms/step ({tokens_per_s:.1} tokens/s) on {}",
            out.prefill_ms,
            out.decode_steps,
            out.ms_per_step(),
            if device.is_cuda() { "the GPU" } else { "the CPU backend" }
        );
    }
    Ok(())
}

fn run_info(i: Info) -> Result<()> {
    let src = open(&i.model)?;
    let c = &src.config;
    let context = i.context.unwrap_or(c.max_position_embeddings);
    let kv = c.kv_bytes_per_token() * context * i.batch;
    let device = Device::auto_with_reason()?;
    let device_name = match &device.1 {
        None => device.0.name(),
        Some(why) => format!("CPU backend ({why})"),
    };
    if i.json {
        let obj = json!({
            "model": src.name,
            "config": c,
            "architecture": c.architecture()?.class_name(),
            "weight_bytes": c.weight_bytes(),
            "step_weight_bytes": c.step_weight_bytes(),
            "kv_bytes_per_token": c.kv_bytes_per_token(),
            "kv_cache_bytes": kv,
            "batch": i.batch,
            "context": context,
            "device": device_name,
        });
        println!("{obj}");
        return Ok(());
    }
    println!("model          {}", src.name);
    println!("architecture   {}", c.architecture()?.class_name());
    println!(
        "layers         {} (hidden {}, intermediate {}, heads {} q / {} kv × {}, vocab {})",
        c.num_hidden_layers,
        c.hidden_size,
        c.intermediate_size,
        c.num_attention_heads,
        c.num_kv_heads(),
        c.head_dim(),
        c.vocab_size
    );
    println!("tied embedding {}", c.tie_word_embeddings);
    println!(
        "weights        {:.3} GB (a decode step reads {:.3} GB)",
        c.weight_bytes() as f64 / 1e9,
        c.step_weight_bytes() as f64 / 1e9
    );
    println!(
        "KV cache       {:.1} KB per token; {:.3} GB for {} × {context} tokens",
        c.kv_bytes_per_token() as f64 / 1e3,
        kv as f64 / 1e9,
        i.batch
    );
    println!("device         {device_name}");
    Ok(())
}

fn run_export(e: Export) -> Result<()> {
    let mut config = presets::preset(&e.preset)?;
    if let Some(n) = e.layers {
        config = presets::with_layers(config, n)?;
    }
    let weights = RandomWeights::new(config.clone(), e.seed);
    let t0 = Instant::now();
    presets::write_hf_folder(&config, &weights, &e.out)?;
    eprintln!(
        "wrote {} ({} layers, {:.2} GB) to {} in {:.1} s",
        e.preset,
        config.num_hidden_layers,
        config.weight_bytes() as f64 / 1e9,
        e.out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
