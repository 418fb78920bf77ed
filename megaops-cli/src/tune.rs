//! `megaops tune`: graph-level autotuning of the decode step (tune, cache, show, ablate),
//! and the cache lookup that `generate` and `bench` make.

use crate::args::{ModelArgs, Tune};
use crate::run::{Source, device, load_layers, open};
use indicatif::{ProgressBar, ProgressStyle};
use megaops::Device;
use megaops_models::bench::{Workload, median};
use megaops_models::layers::{GemmBackend, PrefillGemm};
use megaops_models::tune::cache::{self, CacheEntry, CacheKey, Lookup, TuneCache, workload_key};
use megaops_models::tune::{
    Event, Family, Move, PlanTimer, PrefillTimer, SearchOptions, Space, StepPlan, StepTimer, Tuned, tune,
};
use megaops_models::{CausalLm, Config, ModelError, Result};
use plotters::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The ablation's settings besides "full": one family held at the planners' values each
/// (SMEM padding with split counts, as the config families that size a kernel's
/// footprint; the paper's "SMEM padding and stages").
const HELD: [(&str, &[Family]); 6] = [
    ("no prefetch tuning", &[Family::Prefetch]),
    ("no padding / split tuning", &[Family::Padding, Family::Split]),
    ("no release tuning", &[Family::Release]),
    ("no stream tuning", &[Family::Streams]),
    ("no data-tile tuning", &[Family::DataTile]),
    ("no fusion tuning", &[Family::Fusion]),
];

/// The tune cache to use: `--cache` when given, else [`cache::default_path`].
fn cache_path(given: Option<&Path>) -> PathBuf {
    given.map(Path::to_path_buf).unwrap_or_else(cache::default_path)
}

/// The workload a decode of `prompt_len` tokens is closest to, for the cache lookup.
pub(crate) fn workload_for(prompt_len: usize) -> Workload {
    if prompt_len >= 512 {
        Workload::LongDecode
    } else {
        Workload::ShortDecode
    }
}

/// The cached plan for `config` at `batch` for `workload` on `device`, saying on stderr
/// what was found (a stale entry is not used). `None` when nothing matches or `off`.
pub(crate) fn cached_plan(
    device: &Device,
    config: &Config,
    batch: usize,
    workload: Workload,
    gemm: GemmBackend,
    off: bool,
) -> Result<StepPlan> {
    if off {
        return Ok(StepPlan::default());
    }
    let path = cache::default_path();
    let cache = TuneCache::load(&path)?;
    let name = workload_key(workload, gemm);
    let key = CacheKey::new(&device.name(), device.sm_count(), config, batch, &name);
    Ok(match cache.find(&key) {
        Lookup::Hit(e) => {
            eprintln!(
                "using the tuned plan for batch {batch}, {} from {} ({:.3} → {:.3} ms over {} layers when tuned)",
                name,
                path.display(),
                e.start_ms,
                e.tuned_ms,
                e.layers
            );
            e.plan.clone()
        }
        Lookup::Stale(e) => {
            eprintln!(
                "ignoring the tuned plan for batch {batch}, {} in {}: tuned by megaops {}, this is {} (run `megaops tune` again)",
                name,
                path.display(),
                e.key.version,
                key.version
            );
            StepPlan::default()
        }
        Lookup::Miss => StepPlan::default(),
    })
}

/// Runs `megaops tune`.
pub fn run_tune(t: Tune) -> Result<()> {
    let path = cache_path(t.cache.as_deref());
    if t.show {
        return show(&path);
    }
    let workload = Workload::parse(&t.workload)?;
    if workload != Workload::Prefill && t.prefill_gemm.is_some() {
        return Err(ModelError::Request(
            "--prefill-gemm applies to --workload prefill (a decode step runs GEMV kernels)".into(),
        ));
    }
    if workload == Workload::Prefill && t.ablation {
        return Err(ModelError::Request(
            "the ablation is of decode steps: --workload short-decode or long-decode".into(),
        ));
    }
    if t.batch.is_empty() || t.batch.iter().any(|&b| b == 0 || b > megaops_models::model::MAX_BATCH) {
        return Err(ModelError::Request(format!(
            "--batch takes sizes from 1 to {}",
            megaops_models::model::MAX_BATCH
        )));
    }
    if t.layers == 0 || t.replays == 0 || t.streams == 0 || t.budget_s.is_nan() || t.budget_s <= 0.0 {
        return Err(ModelError::Request(
            "--layers, --replays, --streams and --budget-s must be positive".into(),
        ));
    }
    let held = t
        .hold
        .iter()
        .map(|h| {
            Family::parse(h).ok_or_else(|| {
                let known: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
                ModelError::Request(format!("unknown knob family `{h}`; known: {}", known.join(", ")))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let args = ModelArgs {
        model: t.model.clone(),
        preset: t.preset.clone(),
        layers: None,
        seed: t.seed,
    };
    let src = open(&args)?;
    let name = t.preset.clone().unwrap_or_else(|| src.name.clone());
    let device = device()?;
    let layers = t.layers.min(src.config.num_hidden_layers);
    // The ablation times every plan on the whole model: load it once and tune on its
    // first layers (shared weights); a tuning alone loads only the layers it times.
    let whole = if t.ablation {
        Some(load_layers(&device, &src, src.config.num_hidden_layers)?.0)
    } else {
        None
    };
    let lm = match &whole {
        Some(w) => w.first_layers(layers)?,
        None => load_layers(&device, &src, layers)?.0,
    };
    let opts = SearchOptions {
        budget: Duration::from_secs_f64(t.budget_s),
        noise: t.noise,
        ..SearchOptions::default()
    };
    let mut cache = TuneCache::load(&path)?;
    if let Some(whole) = &whole {
        return ablation(&t, &name, &src, &lm, whole, &opts, &mut cache, &path);
    }
    for &batch in &t.batch {
        let title = format!("{name} batch {batch}");
        let tuned = tune_one(&lm, batch, workload, &t, &held, &opts, &title)?;
        print_tuned(&name, batch, &tuned);
        if held.is_empty() {
            cache.insert(entry(
                &device,
                &src.config,
                (batch, workload, t.prefill_gemm.unwrap_or_default()),
                layers,
                &tuned,
            ));
            cache.save(&path)?;
            eprintln!("cached in {}", path.display());
        } else {
            eprintln!("not cached: families were held ({})", t.hold.join(", "));
        }
    }
    Ok(())
}

/// Tunes one batch size of `workload`: its decode step after a prompt of its length
/// (graph replays), or its prefill (2 warm-up and at most 5 timed prefills per candidate).
fn tune_one(
    lm: &CausalLm,
    batch: usize,
    workload: Workload,
    t: &Tune,
    held: &[Family],
    opts: &SearchOptions,
    title: &str,
) -> Result<Tuned> {
    let sms = lm.lm_head().device().sm_count();
    let len = workload.prompt_len();
    if workload == Workload::Prefill {
        // The space of the backend as it runs here (`auto` without libcublasLt is `rust`).
        let gemm = PrefillGemm::new(lm.lm_head().device(), t.prefill_gemm.unwrap_or_default())?;
        let space = Space::prefill_with(lm, batch, len, sms, held, gemm.backend())?;
        let mut timer = PrefillTimer::new(lm, batch, len, t.streams, 2, t.replays.min(5))?.with_gemm(gemm);
        search_with_progress(&mut timer, &space, opts, title)
    } else {
        let mut timer = StepTimer::new(lm, batch, len, t.streams, 3, t.replays)?;
        let space = Space::decode(lm, batch, timer.max_len(), sms, t.streams, held)?;
        search_with_progress(&mut timer, &space, opts, title)
    }
}

/// Runs the search with a progress bar; the log says which knob moved.
fn search_with_progress(timer: &mut dyn PlanTimer, space: &Space, opts: &SearchOptions, title: &str) -> Result<Tuned> {
    let bar = ProgressBar::new(opts.budget.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("tuning {msg} {bar:40} {elapsed}/{duration} budget")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(title.to_string());
    // A hidden bar (stderr is not a terminal) drops its `println`s: log plain lines.
    let log = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    let t0 = Instant::now();
    let tuned = tune(timer, space, opts, &mut |e| {
        bar.set_position(t0.elapsed().as_millis() as u64);
        match e {
            Event::Start { cost } => log(format!("{title}: {} knobs, start {cost:.4} ms", space.knobs.len())),
            Event::Moved(m) => log(format!(
                "{title}: {} {} → {}: {:.4} → {:.4} ms ({:+.1} %){}",
                m.knob,
                m.from,
                m.to,
                m.before,
                m.after,
                (m.after / m.before - 1.0) * 100.0,
                joint_note(m)
            )),
            Event::BudgetSpent => log(format!("{title}: budget spent")),
            Event::Evaluated { .. } => {}
        }
    });
    bar.finish_and_clear();
    let tuned = tuned?;
    eprintln!(
        "{title}: {} evaluations in {:.1} s, {} rounds{}; {} candidates could not run",
        tuned.outcome.evaluations,
        t0.elapsed().as_secs_f64(),
        tuned.outcome.rounds,
        if tuned.outcome.budget_spent {
            " (budget spent)"
        } else {
            ""
        },
        tuned.failures.len()
    );
    Ok(tuned)
}

/// `, jointly with <group>` for a move of a group's knobs together.
fn joint_note(m: &Move) -> String {
    m.joint
        .as_ref()
        .map(|g| format!(", jointly with the other {g} knobs"))
        .unwrap_or_default()
}

fn print_tuned(name: &str, batch: usize, tuned: &Tuned) {
    let o = &tuned.outcome;
    println!(
        "{name} batch {batch}: {:.4} ms (planners) → {:.4} ms (tuned), {:.3}×",
        o.start_cost,
        o.best_cost,
        o.start_cost / o.best_cost
    );
    let changed: Vec<String> = tuned
        .plan
        .describe()
        .into_iter()
        .filter(|line| !tuned.start_plan.describe().contains(line))
        .collect();
    if changed.is_empty() {
        println!("  the planners' choices stay");
    }
    for line in changed {
        println!("  {line}");
    }
}

fn entry(
    device: &Device,
    config: &Config,
    (batch, workload, gemm): (usize, Workload, GemmBackend),
    layers: usize,
    tuned: &Tuned,
) -> CacheEntry {
    CacheEntry {
        key: CacheKey::new(
            &device.name(),
            device.sm_count(),
            config,
            batch,
            &workload_key(workload, gemm),
        ),
        plan: tuned.plan.clone(),
        start_ms: tuned.outcome.start_cost,
        tuned_ms: tuned.outcome.best_cost,
        layers,
        tuned_at: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        moves: tuned
            .outcome
            .moves
            .iter()
            .map(|m| {
                format!(
                    "{}: {} → {} ({:.4} → {:.4} ms){}",
                    m.knob,
                    m.from,
                    m.to,
                    m.before,
                    m.after,
                    joint_note(m)
                )
            })
            .collect(),
    }
}

/// `megaops tune --show`.
fn show(path: &Path) -> Result<()> {
    let cache = TuneCache::load(path)?;
    if cache.entries.is_empty() {
        println!("{}: no tuned plans", path.display());
        return Ok(());
    }
    let n = cache.entries.len();
    println!("{}: {n} tuned plan{}", path.display(), if n == 1 { "" } else { "s" });
    for e in &cache.entries {
        let k = &e.key;
        println!(
            "- {} ({} SMs), model {}, batch {}, {}, megaops {}: {:.4} → {:.4} ms ({:.3}×) over {} layers",
            k.gpu,
            k.sms,
            k.model,
            k.batch,
            k.workload,
            k.version,
            e.start_ms,
            e.tuned_ms,
            e.start_ms / e.tuned_ms,
            e.layers
        );
        for line in e.plan.describe() {
            println!("    {line}");
        }
    }
    Ok(())
}

/// One ablation row.
#[derive(Serialize)]
struct AblationRow {
    model: String,
    batch: usize,
    setting: String,
    step_ms: f64,
    slowdown_vs_full: f64,
    tune_s: f64,
    layers_tuned: usize,
}

/// Tunes each batch fully and with each family of [`HELD`] held, then times every plan
/// (and the planners') on the whole model, alternating, and reports each setting's
/// slowdown against full tuning. The full plans are cached.
#[allow(clippy::too_many_arguments)]
fn ablation(
    t: &Tune,
    name: &str,
    src: &Source,
    tuned_on: &CausalLm,
    whole: &CausalLm,
    opts: &SearchOptions,
    cache: &mut TuneCache,
    path: &Path,
) -> Result<()> {
    let device = whole.lm_head().device().clone();
    let workload = Workload::parse(&t.workload)?;
    let mut rows = Vec::new();
    for &batch in &t.batch {
        let mut settings: Vec<(String, StepPlan, f64)> = Vec::new();
        let t0 = Instant::now();
        let full = tune_one(
            tuned_on,
            batch,
            workload,
            t,
            &[],
            opts,
            &format!("{name} batch {batch} full"),
        )?;
        settings.push(("full tuning".into(), full.plan.clone(), t0.elapsed().as_secs_f64()));
        settings.push(("no graph-level tuning".into(), full.start_plan.clone(), 0.0));
        cache.insert(entry(
            &device,
            &src.config,
            (batch, workload, GemmBackend::Rust),
            tuned_on.model().layers().len(),
            &full,
        ));
        cache.save(path)?;
        for (label, held) in HELD {
            let t0 = Instant::now();
            let tuned = tune_one(
                tuned_on,
                batch,
                workload,
                t,
                held,
                opts,
                &format!("{name} batch {batch} {label}"),
            )?;
            settings.push((label.to_string(), tuned.plan, t0.elapsed().as_secs_f64()));
        }
        // Every plan on the whole model, interleaved rounds, medians.
        let mut timer = StepTimer::new(whole, batch, workload.prompt_len(), t.streams, 3, t.replays)?;
        let mut times = vec![Vec::new(); settings.len()];
        for _ in 0..5 {
            for (i, (_, plan, _)) in settings.iter().enumerate() {
                times[i].push(timer.time(plan)?);
            }
        }
        let med: Vec<f64> = times.into_iter().map(median).collect();
        for (i, (label, _, secs)) in settings.iter().enumerate() {
            rows.push(AblationRow {
                model: name.to_string(),
                batch,
                setting: label.clone(),
                step_ms: med[i],
                slowdown_vs_full: med[i] / med[0],
                tune_s: *secs,
                layers_tuned: tuned_on.model().layers().len(),
            });
        }
    }
    println!(
        "### {name}: graph-level tuning ablation ({}, whole model)\n",
        t.workload
    );
    println!("| batch | setting | step ms | slowdown vs full | tuning s |\n|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.4} | {:.3}× | {:.1} |",
            r.batch, r.setting, r.step_ms, r.slowdown_vs_full, r.tune_s
        );
    }
    if let Some(json) = &t.json {
        let mut text = String::new();
        for r in &rows {
            let line = serde_json::to_string(r).map_err(|source| ModelError::Json {
                path: json.clone(),
                source,
            })?;
            text.push_str(&line);
            text.push('\n');
        }
        std::fs::write(json, text).map_err(|source| ModelError::Io {
            path: json.clone(),
            source,
        })?;
    }
    if let Some(plot) = &t.plot {
        draw_ablation(
            plot,
            &format!("{name}, {}: slowdown vs full graph-level tuning", t.workload),
            &rows,
        )?;
    }
    Ok(())
}

/// One line per setting: its slowdown against full tuning at each batch size.
fn draw_ablation(path: &Path, title: &str, rows: &[AblationRow]) -> Result<()> {
    crate::trace::register_font();
    let mut batches: Vec<usize> = rows.iter().map(|r| r.batch).collect();
    batches.dedup();
    let mut settings: Vec<&str> = Vec::new();
    for r in rows {
        if !settings.contains(&r.setting.as_str()) {
            settings.push(&r.setting);
        }
    }
    let hi = rows.iter().map(|r| r.slowdown_vs_full).fold(1.05, f64::max) * 1.02;
    let lo = rows.iter().map(|r| r.slowdown_vs_full).fold(0.98, f64::min) * 0.99;
    let root = BitMapBackend::new(path, (1100, 650)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| crate::trace::plot_error(path, e);
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..(batches.len() as f64 - 1.0).max(1.0), lo..hi)
        .map_err(|e| err(&e))?;
    let labels = batches.clone();
    chart
        .configure_mesh()
        .x_labels(batches.len())
        .x_label_formatter(&|x| {
            labels
                .get(x.round() as usize)
                .map(|b| format!("batch {b}"))
                .unwrap_or_default()
        })
        .y_desc("step time / full tuning")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in settings.iter().enumerate() {
        let c = crate::trace::colour(i);
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.setting == *s)
            .filter_map(|r| {
                batches
                    .iter()
                    .position(|&b| b == r.batch)
                    .map(|x| (x as f64, r.slowdown_vs_full))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
