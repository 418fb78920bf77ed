//! `megaops bench`: every model × workload × batch × mode, a table per model on stdout,
//! JSON lines to `--json`.

use crate::args::{Bench, ModelArgs};
use crate::run::{device, load, open};
use megaops_models::bench::{self, BenchRow, BenchSpec, Breakdown, Mode, Workload};
use megaops_models::layers::GemmBackend;
use megaops_models::model::DEFAULT_NORM_AFTER;
use megaops_models::tune::StepPlan;
use megaops_models::{DEFAULT_STREAMS, ModelError, Result};
use std::io::Write;

/// Runs the benchmark.
pub fn run_bench(b: Bench) -> Result<()> {
    let workloads = b
        .workloads
        .iter()
        .map(|w| Workload::parse(w))
        .collect::<Result<Vec<_>>>()?;
    let modes = b.modes.iter().map(|m| Mode::parse(m)).collect::<Result<Vec<_>>>()?;
    if b.batches.is_empty() || b.batches.contains(&0) {
        return Err(ModelError::Request("--batches must list sizes of at least 1".into()));
    }
    if b.streams == Some(0) {
        return Err(ModelError::Request("--streams must be at least 1".into()));
    }
    b.sync.check()?;
    let models: Vec<ModelArgs> = match &b.model {
        Some(dir) => vec![ModelArgs {
            model: Some(dir.clone()),
            preset: None,
            layers: None,
            seed: b.seed,
        }],
        None => b
            .presets
            .iter()
            .map(|p| ModelArgs {
                model: None,
                preset: Some(p.clone()),
                layers: b.layers,
                seed: b.seed,
            })
            .collect(),
    };
    // Every model opens (config, checkpoint tensors) and every request fits before any
    // device work.
    let sources = models.iter().map(open).collect::<Result<Vec<_>>>()?;
    let first_gemm = *b
        .prefill_gemm
        .first()
        .ok_or_else(|| ModelError::Request("--prefill-gemm must name a backend".into()))?;
    // Prefill rows run once per listed backend (backend innermost, so that a cell's rows
    // are timed back to back); decode rows once, their prefills on the first backend.
    let gemms = |w: Workload| match w {
        Workload::Prefill => b.prefill_gemm.clone(),
        _ => vec![first_gemm],
    };
    let specs: Vec<BenchSpec> = workloads
        .iter()
        .flat_map(|&w| b.batches.iter().map(move |&batch| (w, batch)))
        .flat_map(|(w, batch)| modes.iter().map(move |&m| (w, batch, m)))
        .flat_map(|(w, batch, m)| {
            gemms(w).into_iter().map(move |gemm| BenchSpec {
                prompt_len: b.prompt_len,
                new_tokens: b.new_tokens,
                prefill_reps: b.prefill_reps,
                seed: b.seed,
                prefill_gemm: gemm,
                ..BenchSpec::new(w, batch, m)
            })
        })
        .collect();
    for src in &sources {
        for s in &specs {
            let prompts = bench::random_prompts(s.batch, s.prompt_len(), src.config.vocab_size, 0);
            let opts = megaops_models::GenerateOptions {
                max_new_tokens: s.new_tokens(),
                ..Default::default()
            };
            megaops_models::generate::check_request(&src.config, &prompts, &opts).map_err(|e| {
                ModelError::Request(format!("{}: {} at batch {}: {e}", src.name, s.workload.name(), s.batch))
            })?;
        }
    }
    let mut json = match &b.json {
        Some(path) => Some(std::fs::File::create(path).map_err(|e| ModelError::Io {
            path: path.clone(),
            source: e,
        })?),
        None => None,
    };
    let device = device()?;
    b.sync.apply(&device)?;
    let read_gbps = bench::read_bandwidth_gbps(&device)?;
    if let Some(r) = read_gbps {
        eprintln!("pure-read bandwidth of {}: {r:.0} GB/s", device.name());
    }
    for (src, args) in sources.iter().zip(&models) {
        let (lm, _) = load(&device, src)?;
        let name = args.preset.clone().unwrap_or_else(|| src.name.clone());
        if b.breakdown {
            let phases = workloads
                .iter()
                .filter(|w| **w != Workload::LongDecode || !workloads.contains(&Workload::ShortDecode));
            for &w in phases {
                for &batch in &b.batches {
                    let prompt_len = b.prompt_len.unwrap_or(w.prompt_len());
                    eprintln!("{name}: breakdown of {} at batch {batch} …", w.name());
                    let d = bench::breakdown(&lm, &name, w, batch, prompt_len, b.streams.unwrap_or(DEFAULT_STREAMS))?;
                    write_json(&mut json, b.json.as_deref(), &d)?;
                    println!("{}", breakdown_table(&d));
                }
            }
            continue;
        }
        let mut rows = Vec::new();
        for s in &specs {
            eprintln!("{name}: {} batch {} {} …", s.workload.name(), s.batch, s.mode.name());
            let gemm = if s.workload == Workload::Prefill {
                s.prefill_gemm
            } else {
                GemmBackend::Rust
            };
            let mut plan =
                crate::tune::cached_plan(&device, &src.full_config, s.batch, s.workload, gemm, b.no_tune_cache)?;
            let at_defaults = plan == StepPlan::default()
                && s.prefill_gemm == GemmBackend::default()
                && !b.norm_fusion
                && !b.no_rope_fusion
                && b.norm_after.is_none()
                && b.sites.is_empty()
                && b.streams.is_none_or(|s| s == DEFAULT_STREAMS)
                && b.sync.is_default();
            if b.norm_fusion {
                plan.fuse_norms = Some(true);
            }
            if b.no_rope_fusion {
                plan.fuse_rope = Some(false);
            }
            if let Some(on) = b.norm_after {
                plan.norm_after = Some(on);
            }
            for &over in &b.sites {
                plan.override_site(over);
            }
            let streams = b.streams.or(plan.streams).unwrap_or(DEFAULT_STREAMS);
            let mut row = bench::run(&lm, &name, s, streams, &plan, read_gbps)?;
            row.site_overrides = b.sites.iter().map(ToString::to_string).collect();
            row.at_defaults = at_defaults;
            write_json(&mut json, b.json.as_deref(), &row)?;
            if let (Some(dir), Mode::Overlapped) = (&b.trace, s.mode) {
                eprintln!("{name}: {} batch {} traced …", s.workload.name(), s.batch);
                let traced = bench::trace(&lm, s, streams, &plan)?;
                let stem = format!("{name}-{}-b{}", s.workload.name(), s.batch);
                let title = format!("{name} {} batch {}", s.workload.name(), s.batch);
                crate::trace::write(
                    dir,
                    &format!("{stem}-prefill"),
                    &format!("{title}: prefill"),
                    &traced.prefill,
                    false,
                )?;
                if let Some(d) = &traced.decode {
                    crate::trace::write(
                        dir,
                        &format!("{stem}-decode"),
                        &format!("{title}: decode step"),
                        d,
                        false,
                    )?;
                }
                if let (Some(on), Some(off)) = (traced.traced_step_ms, row.step_ms) {
                    println!(
                        "tracing overhead, {title}: {on:.4} ms traced vs {off:.4} ms untraced ({:+.1} %)",
                        (on / off - 1.0) * 100.0
                    );
                    write_json(
                        &mut json,
                        b.json.as_deref(),
                        &serde_json::json!({
                            "model": name, "workload": s.workload.name(), "batch": s.batch,
                            "mode": "overlapped-traced", "step_ms": on, "untraced_step_ms": off,
                        }),
                    )?;
                }
            }
            rows.push(row);
        }
        println!("{}", table(&name, &rows));
    }
    Ok(())
}

/// Appends `value` as one JSON line to the `--json` file, if any.
fn write_json(
    file: &mut Option<std::fs::File>,
    path: Option<&std::path::Path>,
    value: &impl serde::Serialize,
) -> Result<()> {
    let (Some(f), Some(path)) = (file.as_mut(), path) else {
        return Ok(());
    };
    let line = serde_json::to_string(value).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        source: e,
    })?;
    writeln!(f, "{line}").map_err(|e| ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

/// A Markdown table of one breakdown.
fn breakdown_table(d: &Breakdown) -> String {
    let mut s = format!(
        "### {} {} batch {} (context {}): {:.3} ms overlapped, {:.3} ms serial; idle {:.3} ms, two or more kernels {:.3} ms\n\n\
         | operator | launches | serial ms | span ms | exposed ms |\n|---|---|---|---|---|\n",
        d.model, d.phase, d.batch, d.context, d.step_ms, d.serial_ms, d.idle_ms, d.overlapped_ms
    );
    for o in &d.ops {
        s.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.3} |\n",
            o.op, o.launches, o.serial_ms, o.span_ms, o.exposed_ms
        ));
    }
    s
}

/// A Markdown table of one model's rows.
fn table(model: &str, rows: &[BenchRow]) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    // One backend for every row: named in the heading (unless the default); several: in
    // the mode column of each prefill row.
    let mixed = rows
        .iter()
        .any(|r| rows.first().is_some_and(|f| f.prefill_gemm != r.prefill_gemm));
    let gemm = rows
        .first()
        .filter(|r| r.prefill_gemm != GemmBackend::default().name() && !mixed)
        .map(|r| format!(" (prefill GEMMs: {})", r.prefill_gemm))
        .unwrap_or_default();
    let mut fusions = Vec::new();
    if rows.iter().any(|r| r.norm_fusion) {
        fusions.push("norm fusion on");
    }
    if rows.iter().any(|r| !r.rope_fusion) {
        fusions.push("rope fusion off");
    }
    if rows.iter().any(|r| r.norm_after != DEFAULT_NORM_AFTER) {
        fusions.push(if DEFAULT_NORM_AFTER {
            "norms after off"
        } else {
            "norms after on"
        });
    }
    let fusion = if fusions.is_empty() {
        String::new()
    } else {
        format!(" ({})", fusions.join(", "))
    };
    let sites = rows
        .first()
        .filter(|r| !r.site_overrides.is_empty())
        .map(|r| format!(" (sites: {})", r.site_overrides.join(" ")))
        .unwrap_or_default();
    let mut s = format!(
        "### {model}{gemm}{fusion}{sites}\n\n| workload | batch | mode | step ms | p10–p90 ms | tokens/s | GB/s | MBU | prefill ms |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {}–{} | {:.0} | {} | {} | {:.2} |\n",
            r.workload,
            r.batch,
            if mixed && r.workload == Workload::Prefill.name() {
                format!("{}, {}", r.mode, r.prefill_gemm)
            } else {
                r.mode.clone()
            },
            opt(r.step_ms, 3),
            opt(r.step_p10_ms, 3),
            opt(r.step_p90_ms, 3),
            r.tokens_per_s,
            opt(r.step_gbps, 0),
            r.mbu.map_or("-".into(), |m| format!("{:.1} %", m * 100.0)),
            r.prefill_ms
        ));
    }
    s
}
