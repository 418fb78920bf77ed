//! Timing and reporting shared by all suites: CUDA-event timing of plain launches and of
//! CUDA-graph replays (medians of many), and result tables printed and written as JSON
//! lines.

use megaops::{AsyncStream, Result, Stream};
use serde::Serialize;
use std::io::Write as _;

/// Timing statistics of repeated runs, in microseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Stats {
    /// Median.
    pub median_us: f64,
    /// Minimum.
    pub min_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Number of timed runs.
    pub runs: usize,
}

impl Stats {
    /// Median, minimum and 90th percentile of the timings `v` (µs).
    pub fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1);
        Stats {
            median_us: v.get(n / 2).copied().unwrap_or(f64::NAN),
            min_us: v.first().copied().unwrap_or(f64::NAN),
            p90_us: v.get((n * 9) / 10).copied().unwrap_or(f64::NAN),
            runs: v.len(),
        }
    }
}

/// Times `f` (which enqueues work on `stream`) with CUDA events around each call, after
/// `warmup` untimed calls. `f` gets the iteration number (to rotate inputs).
pub fn time_events(
    stream: &Stream,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<Stats> {
    for i in 0..warmup {
        f(i)?;
    }
    stream.synchronize()?;
    let mut times = Vec::with_capacity(iters);
    for i in 0..iters {
        let start = stream.record_event()?;
        f(warmup + i)?;
        let end = stream.record_event()?;
        end.synchronize()?;
        times.push(start.elapsed_ms(&end)? as f64 * 1e3);
    }
    stream.synchronize()?;
    Ok(Stats::of(times))
}

/// Captures `reps` calls of `body` on `astream` into one graph and times `replays`
/// replays with events (after warm-up replays); returns the time per call
/// (replay time / reps). `body` gets the call index (to rotate inputs).
pub fn time_graph(
    astream: &AsyncStream,
    reps: usize,
    replays: usize,
    mut body: impl FnMut(&AsyncStream, usize) -> Result<()>,
) -> Result<Stats> {
    let graph = astream.capture(|s| {
        for i in 0..reps {
            body(s, i)?;
        }
        Ok(())
    })?;
    graph.upload()?;
    for _ in 0..3 {
        graph.launch(astream)?;
    }
    astream.synchronize()?;
    let s0 = &astream.streams()[0];
    let mut times = Vec::with_capacity(replays);
    for _ in 0..replays {
        let start = s0.record_event()?;
        graph.launch(astream)?;
        let end = s0.record_event()?;
        end.synchronize()?;
        times.push(start.elapsed_ms(&end)? as f64 * 1e3 / reps as f64);
    }
    astream.synchronize()?;
    Ok(Stats::of(times))
}

/// A result table: printed as aligned text and appended to the JSON-lines log.
pub struct Table {
    title: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given title and column names.
    pub fn new(title: &str, columns: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders as Markdown (pasteable into bench/RESULTS.md).
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "### {}\n\n| {} |\n|{}|\n",
            self.title,
            self.columns.join(" | "),
            vec!["---"; self.columns.len()].join("|")
        );
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }

    /// Prints the table and appends it (markdown and JSON) to the files in `out_dir`.
    pub fn emit(&self, out_dir: Option<&std::path::Path>) {
        println!("{}", self.markdown());
        if let Some(dir) = out_dir {
            let _ = std::fs::create_dir_all(dir);
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("results.md"))
            {
                let _ = writeln!(f, "{}", self.markdown());
            }
            let json = serde_json::json!({ "title": self.title, "columns": self.columns, "rows": self.rows });
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("results.jsonl"))
            {
                let _ = writeln!(f, "{json}");
            }
        }
    }
}

/// Formats a float with 3 significant-ish decimals.
pub fn f3(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// Wall-clock budget of a suite in seconds: `MEGAOPS_BENCH_BUDGET_S` when set (to fit
/// several suites into one time-limited GPU session), otherwise `default`.
pub fn budget_s(default: f64) -> f64 {
    std::env::var("MEGAOPS_BENCH_BUDGET_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
