//! `boundary` suite: what one kernel boundary costs. A chain of 64 dependent
//! [`relay`](megaops_examples::protocol::relay) kernels that do almost nothing (each CTA
//! spins `pre-spin` ns, waits for its input, adds one to 128 elements, then spins `spin`
//! ns), captured four times into one graph; the figure is the replay time per kernel.
//!
//! Columns, all measured in one run on the same tensors:
//! - **2 streams / 3 streams**: `AsyncStream::new(dev, n)` (the device's begin rule):
//!   every boundary is a semaphore wait of each consumer CTA on the whole producer output,
//!   a begin-flag wait kernel and a launch;
//! - **serial**: `AsyncStream::serial`, ordinary stream boundaries in a graph;
//! - **eager**: the serial chain launched without a graph.
//!
//! With no spins the 2-stream figure is the cost of a boundary under overlap plus a
//! trivial kernel; with a spin after the wait it shows how much of the boundary the
//! overlap hides behind a kernel that runs that long (`over spin` = 2-stream time −
//! spin); a spin before the wait is work the overlap can run early, so its row shows
//! how early the next kernel starts (the begin-flag wait kernel and the launch).
//!
//! Four more tables: first the chain under the wait kernel and programmatic launches
//! ([`BeginRule`]) on 2 to 4 streams, and the chain with and without the begin rule's
//! hold on 2 to 8 streams; then, after the chain table, [`pingpong`]: two CTAs
//! of one kernel handing a tile back and forth with hand-written waits and signals of
//! each [`hop`] variant, the floor of one dependent hop; and the chain at several
//! [`Device::set_poll_spin`] settings.

use crate::harness::{Stats, Table, f3, time_events, time_graph};
use megaops::{AsyncOptions, AsyncStream, BeginRule, Device, Result, Tensor};
use megaops_examples::chain::{Chain, ChainShape};
use megaops_examples::protocol::{hop, pingpong};
use std::path::Path;
use std::time::Duration;

/// Kernels per chain.
const LINKS: usize = 64;
/// Chains per graph.
const REPS: usize = 4;

/// Runs the suite, printing and saving its tables.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("boundary suite: error: {e}");
    }
}

/// The spins of one row: before and after the input wait, ns.
const SPINS: [(u64, u64); 3] = [(0, 0), (0, 2000), (2000, 0)];

/// Poll spins the sweep table tries.
const POLL_SPINS_NS: [u64; 4] = [0, 1000, 5000, 1_000_000];

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let dev = Device::cuda(0)?;
    let replays = if quick { 10 } else { 40 };
    begin_rule_table(&dev, replays)?.emit(out);
    begin_chain_table(&dev, replays)?.emit(out);
    chain_table(&dev, replays)?.emit(out);
    pingpong_table(&dev, if quick { 5 } else { 15 })?.emit(out);
    poll_spin_table(&dev, replays)?.emit(out);
    Ok(())
}

/// An overlapping AsyncStream over `streams` streams with begin rule `rule`.
fn overlapping(dev: &Device, streams: usize, rule: BeginRule) -> Result<AsyncStream> {
    AsyncStream::with_options(
        dev,
        AsyncOptions {
            streams,
            begin_rule: Some(rule),
            ..AsyncOptions::default()
        },
    )
}

/// An overlapping AsyncStream over `streams` streams that holds no launch until the
/// previous one began (`AsyncOptions::begin_wait` off: safe here only because every
/// chain below fits on the GPU many times over).
fn unheld(dev: &Device, streams: usize) -> Result<AsyncStream> {
    AsyncStream::with_options(
        dev,
        AsyncOptions {
            streams,
            begin_wait: false,
            ..AsyncOptions::default()
        },
    )
}

/// The chain with and without the begin rule's hold, on 2 to 8 streams: whether the
/// chain of "previous launch began → next launch" steps, one per kernel, sets the pace.
fn begin_chain_table(dev: &Device, replays: usize) -> Result<Table> {
    let mut table = Table::new(
        "The begin chain: the chain of 64 kernels with and without the begin-rule hold, µs per kernel (graph replays)",
        &[
            "CTAs",
            "data tiles",
            "pre-spin ns",
            "spin ns",
            "check",
            "2 streams",
            "4 streams",
            "8 streams",
            "2 streams, no hold",
            "4 streams, no hold",
            "8 streams, no hold",
        ],
    );
    let targets = [
        AsyncStream::new(dev, 2)?,
        AsyncStream::new(dev, 4)?,
        AsyncStream::new(dev, 8)?,
        unheld(dev, 2)?,
        unheld(dev, 4)?,
        unheld(dev, 8)?,
    ];
    for (ctas, tiles) in [(1, 1), (16, 16), (132, 1)] {
        for spins in [(0, 0), (2000, 0)] {
            let shape = ChainShape {
                ctas,
                tiles,
                links: LINKS,
            };
            let (bad, graph, _) = time_chain(dev, &targets, shape, spins, replays)?;
            let mut row = chain_cells(shape, spins, bad);
            row.extend(graph.iter().map(|&t| f3(t)));
            table.row(row);
        }
    }
    Ok(table)
}

/// 2 and 3 streams with the device's begin rule, then the serial mode.
fn targets(dev: &Device) -> Result<[AsyncStream; 3]> {
    Ok([
        AsyncStream::new(dev, 2)?,
        AsyncStream::new(dev, 3)?,
        AsyncStream::serial(dev)?,
    ])
}

/// The chain of `shape` on each target: the number of wrong elements over an eager run
/// of each, then the graph time per kernel on each (µs), then eager on the serial one.
fn time_chain(
    dev: &Device,
    targets: &[AsyncStream],
    shape: ChainShape,
    spins: (u64, u64),
    replays: usize,
) -> Result<(usize, Vec<f64>, f64)> {
    let (pre, spin) = spins;
    let mut chain = Chain::new(dev, shape)?;
    let mut bad = 0;
    for on in targets {
        chain.poison()?;
        chain.run_spinning(on, pre, spin)?;
        on.synchronize()?;
        bad += chain.mismatches()?;
    }
    let per_kernel = |t: Stats| t.median_us / LINKS as f64;
    let mut graph = Vec::new();
    for on in targets {
        let t = time_graph(on, REPS, replays, |s, _| chain.run_spinning(s, pre, spin))?;
        graph.push(per_kernel(t));
    }
    let last = &targets[targets.len() - 1];
    let eager = time_events(&last.streams()[0], 3, replays, |_| chain.run_spinning(last, pre, spin))?;
    Ok((bad, graph, per_kernel(eager)))
}

/// A chain row's first cells: CTAs, data tiles, pre-spin and spin (ns), check.
fn chain_cells(shape: ChainShape, spins: (u64, u64), bad: usize) -> Vec<String> {
    vec![
        shape.ctas.to_string(),
        shape.tiles.to_string(),
        spins.0.to_string(),
        spins.1.to_string(),
        check(bad),
    ]
}

fn check(bad: usize) -> String {
    if bad == 0 {
        "ok".to_string()
    } else {
        format!("FAIL {bad}")
    }
}

fn chain_table(dev: &Device, replays: usize) -> Result<Table> {
    let mut table = Table::new(
        &format!(
            "Kernel boundary: a chain of 64 trivial dependent kernels, µs per kernel (graph replays), poll spin {:?}",
            dev.poll_spin()
        ),
        &[
            "CTAs",
            "data tiles",
            "pre-spin ns",
            "spin ns",
            "check",
            "2 streams",
            "3 streams",
            "serial",
            "eager",
            "2 streams over spins",
            "serial / 2 streams",
        ],
    );
    let targets = targets(dev)?;
    for ctas in [1, 16, 64, 132] {
        let tilings: &[u32] = if ctas == 1 { &[1] } else { &[1, ctas] };
        for &tiles in tilings {
            for spins in SPINS {
                let shape = ChainShape {
                    ctas,
                    tiles,
                    links: LINKS,
                };
                let (bad, graph, eager) = match time_chain(dev, &targets, shape, spins, replays) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("boundary suite: {shape}: {e}");
                        continue;
                    }
                };
                let mut row = chain_cells(shape, spins, bad);
                row.extend([
                    f3(graph[0]),
                    f3(graph[1]),
                    f3(graph[2]),
                    f3(eager),
                    f3(graph[0] - (spins.0 + spins.1) as f64 * 1e-3),
                    format!("{:.3}×", graph[2] / graph[0]),
                ]);
                table.row(row);
            }
        }
    }
    Ok(table)
}

/// The chain at each of [`POLL_SPINS_NS`] (restoring the device's setting after).
fn poll_spin_table(dev: &Device, replays: usize) -> Result<Table> {
    let mut table = Table::new(
        "Kernel boundary by poll spin (Device::set_poll_spin): the chain of 64 kernels, µs per kernel",
        &[
            "CTAs",
            "data tiles",
            "pre-spin ns",
            "spin ns",
            "poll spin ns",
            "check",
            "2 streams",
            "3 streams",
            "serial",
        ],
    );
    let targets = targets(dev)?;
    let before = dev.poll_spin();
    for (ctas, tiles) in [(1, 1), (132, 1), (132, 132)] {
        for spins in SPINS {
            for poll in POLL_SPINS_NS {
                dev.set_poll_spin(Duration::from_nanos(poll))?;
                let shape = ChainShape {
                    ctas,
                    tiles,
                    links: LINKS,
                };
                let r = time_chain(dev, &targets, shape, spins, replays);
                let (bad, graph, _) = match r {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("boundary suite: {shape}, poll spin {poll} ns: {e}");
                        continue;
                    }
                };
                let mut row = chain_cells(shape, spins, bad);
                row.insert(4, poll.to_string());
                row.extend(graph.iter().map(|&t| f3(t)));
                table.row(row);
            }
        }
    }
    dev.set_poll_spin(before)?;
    Ok(table)
}

/// The chain on 2, 3 and 4 streams under the wait kernel and programmatic launches
/// (under graphs, [`BeginRule::StartEvent`] is the wait kernel), and eagerly on 2 streams.
fn begin_rule_table(dev: &Device, replays: usize) -> Result<Table> {
    let mut table = Table::new(
        "Kernel boundary by begin rule: the chain of 64 kernels, µs per kernel (graph replays; eager last)",
        &[
            "CTAs",
            "data tiles",
            "pre-spin ns",
            "spin ns",
            "check",
            "2 streams, wait kernel",
            "2 streams, programmatic",
            "3 streams, wait kernel",
            "3 streams, programmatic",
            "4 streams, programmatic",
            "serial",
            "wait kernel / programmatic, 2 streams",
            "eager 2 streams, wait kernel",
            "eager 2 streams, programmatic",
        ],
    );
    let targets = [
        overlapping(dev, 2, BeginRule::WaitKernel)?,
        overlapping(dev, 2, BeginRule::Programmatic)?,
        overlapping(dev, 3, BeginRule::WaitKernel)?,
        overlapping(dev, 3, BeginRule::Programmatic)?,
        overlapping(dev, 4, BeginRule::Programmatic)?,
        AsyncStream::serial(dev)?,
    ];
    for (ctas, tiles) in [(1, 1), (16, 16), (132, 1), (132, 132)] {
        for spins in SPINS {
            let shape = ChainShape {
                ctas,
                tiles,
                links: LINKS,
            };
            eprintln!("boundary suite: begin rules, {shape}, spins {spins:?}");
            let (bad, graph, _) = time_chain(dev, &targets, shape, spins, replays)?;
            let mut chain = Chain::new(dev, shape)?;
            let (pre, spin) = spins;
            let mut eager = Vec::new();
            for on in &targets[..2] {
                let t = time_events(&on.streams()[0], 3, replays, |_| chain.run_spinning(on, pre, spin))?;
                eager.push(t.median_us / LINKS as f64);
            }
            let mut row = chain_cells(shape, spins, bad);
            row.extend(graph.iter().map(|&t| f3(t)));
            row.push(format!("{:.3}×", graph[0] / graph[1]));
            row.extend(eager.iter().map(|&t| f3(t)));
            table.row(row);
        }
    }
    Ok(table)
}

/// Rounds of one [`pingpong`] launch.
const PINGPONG_ROUNDS: u32 = 2000;

/// One hop of [`pingpong`] per [`hop`] variant: median over `launches` launches.
fn pingpong_table(dev: &Device, launches: usize) -> Result<Table> {
    let mut table = Table::new(
        &format!("One dependent hop between two CTAs ({PINGPONG_ROUNDS} round trips of 128 floats), µs per hop"),
        &["poll", "signal", "variant", "check", "median µs", "min µs"],
    );
    let on = AsyncStream::new(dev, 2)?;
    let mut flags = Tensor::<i32>::zeros(dev, &[2])?;
    let mut data = Tensor::<f32>::zeros(dev, &[256])?;
    let mut elapsed = Tensor::<u32>::zeros(dev, &[1])?;
    for signal in hop::SIGNALS {
        for poll in hop::POLLS {
            let variant = poll | signal;
            let mut hops = Vec::with_capacity(launches);
            let mut bad = 0;
            for _ in 0..launches {
                flags.fill(0)?;
                data.fill(0.0)?;
                pingpong::launch(&on, &mut flags, &mut data, &mut elapsed, PINGPONG_ROUNDS, variant)?;
                on.synchronize()?;
                let d = data.to_vec()?;
                let want = |e: usize| (2 * PINGPONG_ROUNDS - u32::from(e < 128)) as f32;
                bad += d.iter().enumerate().filter(|(e, v)| **v != want(*e)).count();
                hops.push(elapsed.to_vec()?[0] as f64 * 1e-3 / (2 * PINGPONG_ROUNDS) as f64);
            }
            let stats = Stats::of(hops);
            let (p, s) = hop::name(variant).split_once(", ").unwrap_or((hop::name(variant), ""));
            table.row(vec![
                p.to_string(),
                s.to_string(),
                variant.to_string(),
                check(bad),
                f3(stats.median_us),
                f3(stats.min_us),
            ]);
        }
    }
    Ok(table)
}
