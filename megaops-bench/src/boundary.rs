//! `boundary` suite: what one kernel boundary costs. A chain of 64 dependent
//! [`relay`](megaops_examples::protocol::relay) kernels that do almost nothing (each CTA
//! adds one to 128 elements after its input wait, then spins `spin` ns), captured four
//! times into one graph; the figure is the replay time per kernel.
//!
//! Columns, all measured in one run on the same tensors:
//! - **2 streams / 3 streams**: `AsyncStream::new(dev, n)`: every boundary is a semaphore
//!   wait of each consumer CTA on the whole producer output, a begin-flag wait kernel and
//!   a launch;
//! - **serial**: `AsyncStream::serial`, ordinary stream boundaries in a graph;
//! - **eager**: the serial chain launched without a graph.
//!
//! With `spin = 0` the 2-stream figure is the cost of a boundary under overlap plus a
//! trivial kernel; with a spin it shows how much of the boundary the overlap hides behind
//! a kernel that runs that long (`over spin` = 2-stream time − spin).

use crate::harness::{Table, f3, time_events, time_graph};
use megaops::{AsyncStream, Device, Result};
use megaops_examples::chain::{Chain, ChainShape};
use std::path::Path;

/// Kernels per chain.
const LINKS: usize = 64;
/// Chains per graph.
const REPS: usize = 4;

/// Runs the suite, printing and saving one table.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("boundary suite: error: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let dev = Device::cuda(0)?;
    let targets = [
        AsyncStream::new(&dev, 2)?,
        AsyncStream::new(&dev, 3)?,
        AsyncStream::serial(&dev)?,
    ];
    let replays = if quick { 10 } else { 40 };
    let mut table = Table::new(
        "Kernel boundary: a chain of 64 trivial dependent kernels, µs per kernel (graph replays)",
        &[
            "CTAs",
            "data tiles",
            "spin ns",
            "check",
            "2 streams",
            "3 streams",
            "serial",
            "eager",
            "2 streams over spin",
            "serial / 2 streams",
        ],
    );
    for ctas in [1, 16, 64, 132] {
        let tilings: &[u32] = if ctas == 1 { &[1] } else { &[1, ctas] };
        for &tiles in tilings {
            for spin in [0u64, 2000] {
                let shape = ChainShape {
                    ctas,
                    tiles,
                    links: LINKS,
                };
                let mut chain = Chain::new(&dev, shape)?;
                let mut bad = 0;
                for on in &targets {
                    chain.poison()?;
                    chain.run(on, spin)?;
                    on.synchronize()?;
                    bad += chain.mismatches()?;
                }
                let check = if bad == 0 {
                    "ok".to_string()
                } else {
                    format!("FAIL {bad}")
                };
                let per_kernel = |us: f64| us / LINKS as f64;
                let mut graph = Vec::new();
                for on in &targets {
                    let t = time_graph(on, REPS, replays, |s, _| chain.run(s, spin))?;
                    graph.push(per_kernel(t.median_us));
                }
                let serial = &targets[2];
                let eager = time_events(&serial.streams()[0], 3, replays, |_| chain.run(serial, spin))?;
                table.row(vec![
                    ctas.to_string(),
                    tiles.to_string(),
                    spin.to_string(),
                    check,
                    f3(graph[0]),
                    f3(graph[1]),
                    f3(graph[2]),
                    f3(per_kernel(eager.median_us)),
                    f3(graph[0] - spin as f64 * 1e-3),
                    format!("{:.3}×", graph[2] / graph[0]),
                ]);
            }
        }
    }
    table.emit(out);
    Ok(())
}
