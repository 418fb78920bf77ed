//! Tile traces on the CPU backend (and, when a GPU is present, on the GPU): every tile of
//! a traced launch is recorded once with start ≤ wait end ≤ end, a consumer tile's wait
//! ends after the ends of the producer tiles it reads, untraced launches record nothing,
//! captured graphs record at every replay, the Perfetto export is well formed, and the
//! exposed-time breakdown and the boundary phases add up.

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{AsyncStream, Device, DynRows, Error, LaunchOptions, Result, Tensor, Tiled, Trace};
use megaops_examples::protocol::{next_row_stencil, pattern, produce, row_sums};
use std::collections::BTreeMap;

const M: u32 = 40;
const N: u32 = 12;
const ROWS_PER_DATA_TILE: u32 = 10;
/// `produce` config 1 is BM = 7, BN = 5; `next_row_stencil` has BM = 4.
const P_BM: u32 = 7;
const P_BN: u32 = 5;
const C_BM: u32 = 4;

/// The program's tensors: `y` (the producer's output, tiled by 10 rows) and `z` (the
/// stencil's, by its 4-row tiles).
fn tensors(dev: &Device) -> Result<(Tiled<f32, DynRows>, Tiled<f32, DynRows>)> {
    let y = Tiled::<f32, DynRows>::new(dev, &[M as usize, N as usize], DynRows(ROWS_PER_DATA_TILE), "y")?;
    let z = Tiled::<f32, DynRows>::new(dev, &[M as usize, N as usize], DynRows(C_BM), "z")?;
    Ok((y, z))
}

/// produce (config 1) → next_row_stencil (within its 4-row tiles) through `y`, tiled by
/// 10 rows; returns the stencil's output.
fn program(dev: &Device, s: &AsyncStream, traced_consumer_only: bool) -> Result<Vec<f32>> {
    let (mut y, mut z) = tensors(dev)?;
    let popts = LaunchOptions::config(1);
    let popts = if traced_consumer_only { popts } else { popts.traced() };
    produce::launch_with(s, &popts, &mut y, M, N, 3, 0)?;
    next_row_stencil::launch_with(s, &LaunchOptions::default().traced(), &y, &mut z, M, N, 1)?;
    z.to_vec()
}

/// Every traced tile once, start ≤ wait end ≤ end, and each consumer tile's wait ended
/// at or after the end of every producer tile that wrote the data tiles it read.
fn check_trace(trace: &Trace) {
    assert_eq!(trace.check(), Ok(()));
    let r = trace.launch(
        trace
            .tiles
            .iter()
            .find(|t| {
                trace
                    .launch(t.launch_id)
                    .is_some_and(|l| l.kernel == "next_row_stencil")
            })
            .map_or(0, |t| t.launch_id),
    );
    if let Some(r) = r.filter(|_| trace.launches.len() == 2) {
        assert_eq!(
            r.waits_on,
            vec![trace.launches[0].launch_id],
            "the stencil waits on produce"
        );
    }
    let by_kernel = |k: &str| -> BTreeMap<Vec<u32>, &megaops::TileEvent> {
        let mut tiles = BTreeMap::new();
        for t in trace
            .tiles
            .iter()
            .filter(|t| trace.launch(t.launch_id).is_some_and(|l| l.kernel == k))
        {
            assert!(t.start_ns <= t.waited_ns && t.waited_ns <= t.end_ns, "{t:?}");
            assert!(
                tiles.insert(t.coords.clone(), t).is_none(),
                "tile {:?} of {k} recorded twice",
                t.coords
            );
        }
        tiles
    };
    let (producer, consumer) = (by_kernel("produce"), by_kernel("next_row_stencil"));
    assert_eq!(producer.len() as u32, M.div_ceil(P_BM) * N.div_ceil(P_BN));
    assert_eq!(consumer.len() as u32, M.div_ceil(C_BM));
    let p = trace
        .launch(producer.values().next().expect("a producer tile").launch_id)
        .expect("launch");
    assert_eq!(
        (p.config.as_str(), p.label()),
        ("BM=7, BN=5", "produce[BM=7, BN=5]".to_string())
    );
    assert!(p.stream.contains("AsyncStream"), "{p:?}");
    for (coords, c) in &consumer {
        let rows = (coords[0] * C_BM, ((coords[0] + 1) * C_BM).min(M));
        let data_tiles = rows.0 / ROWS_PER_DATA_TILE..=(rows.1 - 1) / ROWS_PER_DATA_TILE;
        let data_rows = (
            data_tiles.start() * ROWS_PER_DATA_TILE,
            ((data_tiles.end() + 1) * ROWS_PER_DATA_TILE).min(M),
        );
        for pm in data_rows.0 / P_BM..=(data_rows.1 - 1) / P_BM {
            for pn in 0..N.div_ceil(P_BN) {
                let p = producer[&vec![pm, pn]];
                assert!(
                    c.waited_ns >= p.end_ns,
                    "next_row_stencil tile {coords:?} stopped waiting at {} before produce tile ({pm}, {pn}) ended at {}",
                    c.waited_ns,
                    p.end_ns
                );
            }
        }
    }
}

/// The stencil's output: z[i, j] = y[i, j] + y[next, j], `next` the next row inside i's
/// 4-row kernel tile (i itself at the tile's last row).
fn check_stencil(z: &[f32]) {
    for i in 0..M {
        let last = ((i / C_BM + 1) * C_BM).min(M) - 1;
        let next = (i + 1).min(last);
        for j in 0..N {
            let want = pattern(i, j, 3) + pattern(next, j, 3);
            let got = z[(i * N + j) as usize];
            assert!((got - want).abs() < 1e-6, "z[{i}, {j}] = {got}, want {want}");
        }
    }
}

/// The JSON has `traceEvents`; complete events have non-negative times, and slices on
/// one track never overlap (a wait slice ends where its tile's slice begins).
fn check_perfetto(trace: &Trace) {
    let json = trace.to_perfetto();
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let mut tracks: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let mut tiles = 0;
    for e in events {
        match e["ph"].as_str() {
            Some("X") => {
                let (ts, dur) = (e["ts"].as_f64().expect("ts"), e["dur"].as_f64().expect("dur"));
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()), "{e}");
                let key = (e["pid"].as_u64().expect("pid"), e["tid"].as_u64().expect("tid"));
                tracks.entry(key).or_default().push((ts, ts + dur));
                tiles += usize::from(e["cat"] == "tile");
            }
            Some("M") => assert!(
                e["args"]["name"].is_string() || e["args"]["sort_index"].is_number(),
                "{e}"
            ),
            other => panic!("unexpected event kind {other:?}: {e}"),
        }
    }
    assert_eq!(tiles, trace.tiles.len());
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in slices.windows(2) {
            assert!(
                w[0].1 <= w[1].0 + 1e-9,
                "track {track:?}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
}

/// Exposed + overlapped time of every operator fits its run time, and the span is the
/// sum of time alone, time overlapped and idle time.
fn check_breakdown(trace: &Trace) {
    let b = trace.breakdown();
    let alone: u64 = b.operators.iter().map(|o| o.exposed_ns).sum();
    assert_eq!(alone + b.overlapped_ns + b.idle_ns, b.span_ns, "{b}");
    for o in &b.operators {
        assert!(o.overlapped_ns <= b.overlapped_ns, "{b}");
        assert!(o.busy_ns() <= b.span_ns, "{b}");
    }
    let names: Vec<&str> = b.operators.iter().map(|o| o.operator.as_str()).collect();
    assert!(
        names.contains(&"produce[BM=7, BN=5]") && names.contains(&"next_row_stencil[BM=4]"),
        "{b}"
    );
    assert!(b.to_string().contains("exposed µs"), "{b}");
}

/// The stencil's one boundary: it waits on produce, and its phases add up to the time
/// from produce's last tile end to its own last tile end.
fn check_boundaries(trace: &Trace) {
    let b = trace.boundaries();
    assert_eq!(b.boundaries.len(), 1, "{b}");
    let s = &b.boundaries[0];
    assert_eq!(s.operator, "next_row_stencil[BM=4]");
    let end = |k: &str| {
        trace
            .tiles
            .iter()
            .filter(|t| trace.launch(t.launch_id).is_some_and(|l| l.kernel == k))
            .map(|t| t.end_ns)
            .max()
            .expect("tiles")
    };
    assert_eq!(s.producers_end_ns, end("produce"));
    assert_eq!(s.end_ns, end("next_row_stencil"));
    assert_eq!(s.launch_ns() + s.hop_ns() + s.run_ns(), s.gap_ns());
    assert!(s.launch_ns() >= 0 && s.run_ns() >= 0, "{s:?}");
    assert_eq!(b.operators[0].count, 1);
    assert!(b.to_string().contains("Σgap"), "{b}");
}

#[test]
fn traced_tiles_are_recorded_once_in_dependency_order() -> Result<()> {
    for seed in 0..4 {
        let dev = cpu_device(seed)?;
        dev.start_trace(4096)?;
        let s = AsyncStream::new(&dev, 2)?;
        check_stencil(&program(&dev, &s, false)?);
        let trace = dev.take_trace()?;
        check_trace(&trace);
        check_perfetto(&trace);
        check_breakdown(&trace);
        check_boundaries(&trace);
        // take_trace emptied the log; the same seed gives the same trace.
        assert!(dev.take_trace()?.tiles.is_empty());
        let again = cpu_device(seed)?;
        again.start_trace(4096)?;
        program(&again, &AsyncStream::new(&again, 2)?, false)?;
        let second = again.take_trace()?;
        let times = |t: &Trace| -> Vec<(Vec<u32>, u32, u64, u64, u64)> {
            t.tiles
                .iter()
                .map(|e| (e.coords.clone(), e.sm, e.start_ns, e.waited_ns, e.end_ns))
                .collect()
        };
        assert_eq!(
            times(&trace),
            times(&second),
            "seed {seed}: the CPU backend's trace is deterministic"
        );
    }
    Ok(())
}

#[test]
fn only_traced_launches_record_and_an_async_stream_traces_all() -> Result<()> {
    let dev = cpu_device(7)?;
    dev.start_trace(4096)?;
    let s = AsyncStream::new(&dev, 2)?;
    program(&dev, &s, true)?;
    let trace = dev.take_trace()?;
    assert!(trace.tiles.iter().all(|t| {
        trace
            .launch(t.launch_id)
            .is_some_and(|l| l.kernel == "next_row_stencil")
    }));
    assert_eq!(trace.tiles.len() as u32, M.div_ceil(C_BM));
    // Tracing on the AsyncStream: the producer is traced too.
    s.set_tracing(true);
    program(&dev, &s, true)?;
    check_trace(&dev.take_trace()?);
    Ok(())
}

#[test]
fn a_launch_names_its_site_in_traces_breakdowns_and_profiles() -> Result<()> {
    let dev = cpu_device(7)?;
    dev.start_trace(4096)?;
    let s = AsyncStream::new(&dev, 2)?;
    s.set_profiling(true);
    let (mut y, mut z) = tensors(&dev)?;
    produce::launch_with(&s, &LaunchOptions::config(1).traced(), &mut y, M, N, 3, 0)?;
    let named = LaunchOptions::default().traced().site("layer.stencil");
    next_row_stencil::launch_with(&s, &named, &y, &mut z, M, N, 1)?;
    check_stencil(&z.to_vec()?);
    let sites: Vec<(&str, Option<&str>)> = s.take_profile().iter().map(|p| (p.kernel, p.site)).collect();
    assert_eq!(sites, [("produce", None), ("next_row_stencil", Some("layer.stencil"))]);
    let trace = dev.take_trace()?;
    let mut labels: Vec<String> = trace.launches.iter().map(|l| l.label()).collect();
    labels.sort();
    assert_eq!(labels, ["layer.stencil: next_row_stencil[BM=4]", "produce[BM=7, BN=5]"]);
    let mut ops: Vec<String> = trace.breakdown().operators.into_iter().map(|o| o.operator).collect();
    ops.sort();
    assert_eq!(ops, labels, "the breakdown's operators are the labels");
    Ok(())
}

#[test]
fn a_small_log_counts_what_it_drops() -> Result<()> {
    let dev = cpu_device(1)?;
    dev.start_trace(5)?;
    let s = AsyncStream::new(&dev, 2)?;
    program(&dev, &s, false)?;
    let trace = dev.take_trace()?;
    let all = M.div_ceil(P_BM) * N.div_ceil(P_BN) + M.div_ceil(C_BM);
    assert_eq!((trace.tiles.len() as u64, trace.dropped), (5, u64::from(all) - 5));
    assert!(trace.check().is_err_and(|p| p[0].contains("not recorded")));
    // It cannot grow once graphs may hold its address; it can be emptied again.
    let err = dev.start_trace(6).expect_err("a log cannot grow");
    assert!(
        matches!(err, Error::Invalid(_)) && err.to_string().contains("holds 5 records"),
        "{err}"
    );
    dev.start_trace(5)?;
    Ok(())
}

#[test]
fn a_traced_launch_without_a_log_is_an_error() -> Result<()> {
    let dev = cpu_device(1)?;
    let s = AsyncStream::new(&dev, 2)?;
    let err = program(&dev, &s, false).expect_err("no trace log");
    assert!(err.to_string().contains("call `Device::start_trace` first"), "{err}");
    assert!(dev.take_trace().is_err());
    Ok(())
}

#[test]
fn captured_graphs_record_at_every_replay() -> Result<()> {
    let dev = cpu_device(5)?;
    dev.start_trace(4096)?;
    let s = AsyncStream::new(&dev, 2)?;
    s.set_tracing(true);
    let (mut y, mut z) = tensors(&dev)?;
    let graph = s.capture(|s| {
        produce::launch_with(s, &LaunchOptions::config(1), &mut y, M, N, 3, 0)?;
        next_row_stencil::launch(s, &y, &mut z, M, N, 1)
    })?;
    assert!(dev.take_trace()?.tiles.is_empty(), "capturing runs nothing");
    for _ in 0..2 {
        graph.launch(&s)?;
        check_trace(&dev.take_trace()?);
    }
    check_stencil(&z.to_vec()?);
    Ok(())
}

#[test]
fn configs_with_launch_bounds_are_traced() -> Result<()> {
    // `row_sums` declares `min_ctas = 8`: its register-capped configs record their tiles
    // too, so a trace shows every launch of a step.
    let dev = cpu_device(3)?;
    dev.start_trace(4096)?;
    let s = AsyncStream::new(&dev, 2)?;
    s.set_tracing(true);
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[M as usize, N as usize], DynRows(ROWS_PER_DATA_TILE), "y")?;
    let mut sums = Tensor::<f32>::full(&dev, &[M as usize], f32::NAN)?;
    produce::launch_with(&s, &LaunchOptions::config(1), &mut y, M, N, 3, 0)?;
    row_sums::launch(&s, &y, &mut sums, M, N)?;
    let trace = dev.take_trace()?;
    let kernels: Vec<&str> = trace.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(kernels, ["produce", "row_sums"], "{:?}", trace.launches);
    let sums_launch = trace.launches[1].launch_id;
    let tiles = trace.tiles.iter().filter(|t| t.launch_id == sums_launch).count();
    assert_eq!(tiles, M.div_ceil(8) as usize, "one record per kernel tile of row_sums");
    assert_eq!(trace.check(), Ok(()));
    Ok(())
}

#[test]
fn gpu_trace_of_a_producer_consumer_chain() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_trace") else {
        return Ok(());
    };
    dev.start_trace(1 << 16)?;
    let s = AsyncStream::new(&dev, 2)?;
    for _ in 0..3 {
        check_stencil(&program(&dev, &s, false)?);
        let trace = dev.take_trace()?;
        check_trace(&trace);
        check_perfetto(&trace);
        check_breakdown(&trace);
        check_boundaries(&trace);
    }
    Ok(())
}
