//! `--trace DIR`: a tile trace written as Perfetto JSON, a timeline PNG and a per-operator
//! exposed-time chart (PNG), with the breakdown and boundary tables on the terminal.

use megaops::Trace;
use megaops::trace::exposed::Breakdown;
use megaops_models::{ModelError, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The font the charts use (DejaVu Sans, see `assets/DejaVuSans.LICENSE`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Operators the exposed-time chart shows by name (the rest share one bar).
const CHART_OPERATORS: usize = 24;

/// Writes `DIR/NAME.json`, `DIR/NAME-timeline.png` and `DIR/NAME-breakdown.png` for
/// `trace`, and prints its breakdown and its boundaries (to stderr when `quiet_stdout`, e.g. under `--json`).
pub fn write(dir: &Path, name: &str, title: &str, trace: &Trace, quiet_stdout: bool) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let json = dir.join(format!("{name}.json"));
    trace.write_perfetto(&json)?;
    let breakdown = trace.breakdown();
    let timeline = dir.join(format!("{name}-timeline.png"));
    draw_timeline(&timeline, title, trace, &breakdown)?;
    let chart = dir.join(format!("{name}-breakdown.png"));
    draw_breakdown(&chart, title, &breakdown)?;
    let checked = match trace.check() {
        Ok(()) => "checked: every tile once, times in order, consumers after producers".to_string(),
        Err(p) => format!("CHECK FAILED ({} problems):\n  {}", p.len(), p.join("\n  ")),
    };
    let text = format!(
        "== {title}: {} tiles of {} launches{} ==\n{breakdown}\n{}\n{checked}\nwrote {}, {}, {}",
        trace.tiles.len(),
        trace.launches.len(),
        if trace.dropped > 0 {
            format!(" ({} not recorded: the log was full)", trace.dropped)
        } else {
            String::new()
        },
        trace.boundaries(),
        json.display(),
        timeline.display(),
        chart.display()
    );
    if quiet_stdout {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
    Ok(vec![json, timeline, chart])
}

fn io(path: &Path, e: std::io::Error) -> ModelError {
    ModelError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

pub(crate) fn plot_error(path: &Path, e: impl std::fmt::Display) -> ModelError {
    io(path, std::io::Error::other(format!("drawing the chart: {e}")))
}

pub(crate) fn register_font() {
    // Registering twice replaces the same font; a font that does not parse leaves the
    // charts without text, which the drawing then reports.
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
}

/// A colour per operator rank (most exposed first), cycling through a qualitative palette.
pub(crate) fn colour(i: usize) -> RGBColor {
    const PALETTE: [(u8, u8, u8); 12] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
        (57, 59, 121),
        (173, 73, 74),
    ];
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Tiles as bars on their SM (y) over time (x): waits in light grey, running time in
/// the operator's colour; a legend names the most exposed operators.
fn draw_timeline(path: &Path, title: &str, trace: &Trace, breakdown: &Breakdown) -> Result<()> {
    register_font();
    let Some((origin, end)) = trace.span() else {
        return Err(ModelError::Request(format!("{title}: the trace recorded no tile")));
    };
    let span_us = ((end - origin) as f64 * 1e-3).max(1e-3);
    let sms = trace.tiles.iter().map(|t| t.sm).max().unwrap_or(0) + 1;
    let height = (sms * 6 + 140).clamp(400, 1400);
    let root = BitMapBackend::new(path, (1800, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{title}: tiles per SM"), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..span_us, 0f64..sms as f64)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("µs since the first tile")
        .y_desc("SM")
        .y_label_formatter(&|v| format!("{}", *v as u32))
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let us = |ns: u64| (ns.saturating_sub(origin)) as f64 * 1e-3;
    let waits = trace.tiles.iter().filter(|t| t.waited_ns > t.start_ns).map(|t| {
        let y = t.sm as f64;
        Rectangle::new(
            [(us(t.start_ns), y + 0.1), (us(t.waited_ns), y + 0.9)],
            RGBColor(210, 210, 210).filled(),
        )
    });
    chart.draw_series(waits).map_err(|e| plot_error(path, e))?;
    let legend = CHART_OPERATORS.min(12);
    for (rank, op) in breakdown.operators.iter().enumerate() {
        let c = if rank < legend {
            colour(rank)
        } else {
            RGBColor(90, 90, 90)
        };
        let bars = trace
            .tiles
            .iter()
            .filter(|t| trace.label_of(t) == op.operator)
            .map(move |t| {
                let y = t.sm as f64;
                Rectangle::new(
                    [(us(t.waited_ns.max(t.start_ns)), y + 0.1), (us(t.end_ns), y + 0.9)],
                    c.mix(0.8).filled(),
                )
            });
        let series = chart.draw_series(bars).map_err(|e| plot_error(path, e))?;
        if rank < legend {
            series
                .label(op.operator.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
    }
    legend_and_present(&mut chart, &root, SeriesLabelPosition::UpperRight, path)
}

/// Per operator, a bar of its exposed time (alone on the GPU) and, after it, its
/// overlapped time (beside other operators), most exposed first.
fn draw_breakdown(path: &Path, title: &str, b: &Breakdown) -> Result<()> {
    register_font();
    let mut rows: Vec<(String, f64, f64)> = b
        .operators
        .iter()
        .take(CHART_OPERATORS)
        .map(|o| {
            (
                o.operator.clone(),
                o.exposed_ns as f64 * 1e-3,
                o.overlapped_ns as f64 * 1e-3,
            )
        })
        .collect();
    let rest = &b.operators[b.operators.len().min(CHART_OPERATORS)..];
    if !rest.is_empty() {
        rows.push((
            format!("{} other operators", rest.len()),
            rest.iter().map(|o| o.exposed_ns as f64 * 1e-3).sum(),
            rest.iter().map(|o| o.overlapped_ns as f64 * 1e-3).sum(),
        ));
    }
    rows.push(("(nothing running)".into(), b.idle_ns as f64 * 1e-3, 0.0));
    // Most exposed at the top: row i is drawn in segment n - 1 - i.
    let n = rows.len() as i32;
    let max = rows.iter().map(|r| r.1 + r.2).fold(1e-3, f64::max) * 1.05;
    let height = (rows.len() as u32 * 28 + 140).max(300);
    let root = BitMapBackend::new(path, (1400, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{title}: exposed vs overlapped time per operator (span {:.1} µs)",
                b.span_ns as f64 * 1e-3
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(380)
        .build_cartesian_2d(0f64..max, (0..n).into_segmented())
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                names.get((n - 1 - *i) as usize).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .x_desc("µs")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let blue = RGBColor(31, 119, 180);
    let light = RGBColor(158, 202, 225);
    let bar = |i: i32, x0: f64, x1: f64, c: RGBColor| {
        let i = n - 1 - i;
        let mut r = Rectangle::new(
            [(x0, SegmentValue::Exact(i)), (x1, SegmentValue::Exact(i + 1))],
            c.filled(),
        );
        r.set_margin(4, 4, 0, 0);
        r
    };
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| bar(i as i32, 0.0, r.1, blue)))
        .map_err(|e| plot_error(path, e))?
        .label("exposed (alone on the GPU)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], blue.filled()));
    chart
        .draw_series(
            rows.iter()
                .enumerate()
                .map(|(i, r)| bar(i as i32, r.1, r.1 + r.2, light)),
        )
        .map_err(|e| plot_error(path, e))?
        .label("overlapped (beside other operators)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], light.filled()));
    legend_and_present(&mut chart, &root, SeriesLabelPosition::LowerRight, path)
}

/// Draws the series legend at `position` and writes the image.
fn legend_and_present<'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    position: SeriesLabelPosition,
    path: &Path,
) -> Result<()>
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}
