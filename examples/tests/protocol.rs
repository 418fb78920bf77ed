//! The data-tile protocol end to end, on the CPU backend over many interleavings (seeds)
//! and, when a GPU is present, on the GPU: producer → consumer through `Tiled` tensors with
//! every pairing of kernel tiles and data tiles (including sizes that do not divide each
//! other, 2-D and irregular tilings), epochs, AsyncStream and its no-overlap mode, graph
//! capture and replay, hazard ordering of plain tensors, the deadlock that the begin-CTA
//! rule prevents, hang reports, and the errors raised before anything runs.

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{
    AsyncOptions, AsyncStream, BeginRule, DataTiling, Device, DynGrid, DynRows, Error, Irregular, LaunchOptions,
    LaunchTarget, R2, ReleaseNext, Result, Stream, Tensor, Tiled,
};
use megaops_examples::protocol::{busy, flat_copy, next_row_stencil, pattern, produce, row_sums, stamp, stamp_values};
use std::time::{Duration, Instant};

fn expected_sums(m: u32, n: u32, seed: u32) -> Vec<f64> {
    (0..m)
        .map(|i| (0..n).map(|j| pattern(i, j, seed) as f64).sum())
        .collect()
}

fn check_sums(what: &str, got: &[f32], m: u32, n: u32, seed: u32) {
    let want = expected_sums(m, n, seed);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-3 * (1.0 + w.abs()),
            "{what}: row {i}: got {g}, want {w}"
        );
    }
}

/// The semaphore dump of a 12 × 8 `y` in 4-row data tiles whose producer was planted
/// (`plant_missing_producer`) and never launched.
const PLANTED_Y_DUMP: [&str; 4] = [
    "  `y` f32[12, 8], DynRows(4): data tiles 4 x 8 (3 x 1 tiles), epoch 0: produced by `produce` \
     (recorded, never launched)",
    "    y[0] = 0 of 1 signals (tile 0 at (0,0), semaphore 0)",
    "    y[1] = 0 of 1 signals (tile 1 at (1,0), semaphore 0)",
    "    y[2] = 0 of 1 signals (tile 2 at (2,0), semaphore 0)",
];

/// Produce into a `Tiled` with `tiling`, consume on `on`; returns the row sums.
#[allow(clippy::too_many_arguments)] // one knob per argument keeps the call sites readable
fn chain<D: DataTiling<Rank = R2>, L: LaunchTarget>(
    dev: &Device,
    on: &L,
    m: u32,
    n: u32,
    tiling: D,
    pcfg: usize,
    ccfg: usize,
    seed: u32,
    delay_ns: u64,
) -> Result<Vec<f32>> {
    let mut y = Tiled::<f32, D>::new(dev, &[m as usize, n as usize], tiling, "y")?;
    let mut sums = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    produce::launch_with(on, &LaunchOptions::config(pcfg), &mut y, m, n, seed, delay_ns)?;
    row_sums::launch_with(on, &LaunchOptions::config(ccfg), &y, &mut sums, m, n)?;
    sums.to_vec()
}

#[test]
fn every_pairing_of_kernel_and_data_tiles_on_the_cpu_backend() -> Result<()> {
    for seed in 0..3u64 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        for (m, n) in [(70u32, 45u32), (1, 3), (64, 64)] {
            for dtile in [1u32, 5, 16, 70] {
                for pcfg in 0..produce::CONFIGS.len() {
                    for ccfg in 0..row_sums::CONFIGS.len() {
                        let what = format!("seed {seed} {m}x{n} rows of {dtile} producer {pcfg} consumer {ccfg}");
                        let got = chain(&dev, &s, m, n, DynRows(dtile), pcfg, ccfg, seed as u32 + dtile, 0)?;
                        check_sums(&what, &got, m, n, seed as u32 + dtile);
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn two_dimensional_and_irregular_tilings() -> Result<()> {
    let dev = cpu_device(11)?;
    let s = AsyncStream::new(&dev, 3)?;
    let (m, n) = (50u32, 37u32);
    for (r, c) in [(1u32, 1u32), (7, 9), (16, 37), (64, 64)] {
        for pcfg in 0..produce::CONFIGS.len() {
            let got = chain(&dev, &s, m, n, DynGrid(r, c), pcfg, 0, r * 100 + c, 0)?;
            check_sums(&format!("grid {r}x{c} producer {pcfg}"), &got, m, n, r * 100 + c);
        }
    }
    let got = chain(&dev, &s, m, n, Irregular::rows(vec![0, 3, 4, 20, 49, 50]), 1, 2, 5, 0)?;
    check_sums("irregular rows", &got, m, n, 5);
    Ok(())
}

#[test]
fn slow_producer_and_many_epochs_of_one_tensor() -> Result<()> {
    let dev = cpu_device(3)?;
    let s = AsyncStream::new(&dev, 2)?;
    let (m, n) = (40u32, 24u32);
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(8), "y")?;
    let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
    for epoch in 0..6u32 {
        if epoch > 0 {
            y.rearm();
        }
        produce::launch_with(
            &s,
            &LaunchOptions::config((epoch % 3) as usize),
            &mut y,
            m,
            n,
            epoch,
            20_000,
        )?;
        row_sums::launch_with(&s, &LaunchOptions::config((epoch % 2) as usize), &y, &mut sums, m, n)?;
        check_sums(&format!("epoch {epoch}"), &sums.to_vec()?, m, n, epoch);
        assert_eq!(y.epoch(), epoch);
    }
    // Progress decodes the semaphores: every data tile has all its signals.
    assert!(y.progress()?.iter().all(|(got, want)| got == want && *want > 0));
    Ok(())
}

#[test]
fn no_overlap_mode_and_plain_stream_give_the_same_results() -> Result<()> {
    let dev = cpu_device(5)?;
    let serial = AsyncStream::serial(&dev)?;
    let got = chain(&dev, &serial, 33, 17, DynRows(4), 1, 2, 9, 0)?;
    check_sums("serial", &got, 33, 17, 9);
    let stream = Stream::new(&dev)?;
    let got = chain(&dev, &stream, 33, 17, DynRows(4), 2, 0, 10, 0)?;
    check_sums("plain stream", &got, 33, 17, 10);
    Ok(())
}

#[test]
fn plain_tensors_are_ordered_across_streams() -> Result<()> {
    // No semaphores: the AsyncStream must order the consumer after the producer itself.
    for seed in 0..4 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let (m, n) = (30u32, 20u32);
        let mut y = Tensor::<f32>::full(&dev, &[m as usize, n as usize], f32::NAN)?;
        let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
        produce::launch_with(&s, &LaunchOptions::config(0), &mut y, m, n, 4, 50_000)?;
        row_sums::launch(&s, &y, &mut sums, m, n)?;
        check_sums("plain", &sums.to_vec()?, m, n, 4);
    }
    Ok(())
}

#[test]
fn captured_graphs_replay_with_rearmed_semaphores() -> Result<()> {
    let dev = cpu_device(8)?;
    let s = AsyncStream::new(&dev, 2)?;
    let (m, n) = (24u32, 16u32);
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(5), "y")?;
    let mut z = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(3), "z")?;
    let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
    let mut sums2 = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
    let graph = s.capture(|s| {
        produce::launch(s, &mut y, m, n, 21, 0)?;
        row_sums::launch(s, &y, &mut sums, m, n)?;
        // The same tensor re-armed inside the graph: a second epoch per replay.
        y.rearm();
        produce::launch_with(s, &LaunchOptions::config(1), &mut y, m, n, 22, 0)?;
        produce::launch_with(s, &LaunchOptions::config(2), &mut z, m, n, 23, 0)?;
        row_sums::launch(s, &z, &mut sums2, m, n)?;
        Ok(())
    })?;
    let replay = |r: u32, sums: &mut Tensor<f32>, sums2: &mut Tensor<f32>| -> Result<()> {
        sums.fill(f32::NAN)?;
        sums2.fill(f32::NAN)?;
        graph.launch(&s)?;
        s.synchronize()?;
        check_sums(&format!("replay {r} sums"), &sums.to_vec()?, m, n, 21);
        check_sums(&format!("replay {r} sums2"), &sums2.to_vec()?, m, n, 23);
        Ok(())
    };
    for r in 0..3 {
        replay(r, &mut sums, &mut sums2)?;
    }
    // After a replay the graph's outputs are complete: readable without waiting, and
    // usable again after re-arming.
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    check_sums("after graph", &sums.to_vec()?, m, n, 22);
    y.rearm();
    produce::launch(&s, &mut y, m, n, 30, 0)?;
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    check_sums("eager after graph", &sums.to_vec()?, m, n, 30);
    // Replays again after the eager cycle (its semaphores must be set back first), then
    // back to back (the previous replay's restore holds).
    for r in 3..5 {
        replay(r, &mut sums, &mut sums2)?;
    }
    Ok(())
}

#[test]
fn profiling_records_a_span_per_eager_launch() -> Result<()> {
    let dev = cpu_device(3)?;
    let s = AsyncStream::new(&dev, 2)?;
    let (m, n) = (8u32, 16u32);
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(4), "y")?;
    let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
    produce::launch(&s, &mut y, m, n, 1, 0)?;
    s.set_profiling(true);
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    y.rearm();
    produce::launch(&s, &mut y, m, n, 2, 0)?;
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    s.synchronize()?;
    let spans = s.take_profile();
    let got: Vec<(&str, usize)> = spans.iter().map(|p| (p.kernel, p.stream)).collect();
    // Round robin over the two streams, continuing from the launch before profiling.
    assert_eq!(got, [("row_sums", 1), ("produce", 0), ("row_sums", 1)]);
    assert!(spans.iter().all(|p| p.start.is_complete() && p.end.is_complete()));
    assert!(s.take_profile().is_empty(), "taking the profile empties it");
    s.set_profiling(false);
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    assert!(s.take_profile().is_empty(), "nothing is recorded once profiling stops");
    check_sums("profiled", &sums.to_vec()?, m, n, 2);
    Ok(())
}

/// The scenario of paper §2.3: K0 keeps stream A busy; the producer P waits behind it on
/// A; the consumer C on stream B is launched after P, has more CTAs than the GPU holds
/// and waits for P's data. Without the begin-CTA rule C's CTAs take every SM and P never
/// starts; with it (each [`BeginRule`]), C is held until P has started.
fn consumer_first(dev: &Device, begin_wait: bool, rule: BeginRule, rows: u32, busy_ns: u64) -> Result<Vec<f32>> {
    let s = AsyncStream::with_options(
        dev,
        AsyncOptions {
            streams: 2,
            begin_wait,
            begin_rule: Some(rule),
            ..AsyncOptions::default()
        },
    )?;
    let n = 4u32;
    let mut y = Tiled::<f32, DynRows>::new(dev, &[rows as usize, n as usize], DynRows(64), "y")?;
    let mut sums = Tensor::<f32>::full(dev, &[rows as usize], f32::NAN)?;
    let mut dummy = Tiled::<f32, DynRows>::new(dev, &[1, 1], DynRows(1), "dummy")?;
    busy::launch(&s, busy_ns, 4)?; // stream A
    produce::launch_with(&s, &LaunchOptions::config(0), &mut dummy, 1, 1, 0, 0)?; // stream B
    produce::launch_with(&s, &LaunchOptions::config(2), &mut y, rows, n, 77, 0)?; // stream A, behind K0
    row_sums::launch_with(&s, &LaunchOptions::config(1), &y, &mut sums, rows, n)?; // stream B, one CTA per row
    sums.to_vec()
}

#[test]
fn consumer_first_deadlocks_without_the_begin_rule_and_not_with_it() -> Result<()> {
    for seed in 0..4 {
        let dev = cpu_device(seed)?;
        // 4 virtual SMs hold 128 CTAs of 64 threads: 1024 consumer CTAs overflow them.
        let err = consumer_first(&dev, false, BeginRule::WaitKernel, 1024, 200_000)
            .expect_err("the consumer-first order must deadlock");
        let msg = err.to_string();
        assert!(matches!(err, Error::Sync(_)), "{msg}");
        assert!(msg.contains("row_sums CTA") && msg.contains("waits on y["), "{msg}");
        for rule in BeginRule::ALL {
            let dev = cpu_device(seed)?;
            let sums = consumer_first(&dev, true, rule, 1024, 200_000)?;
            check_sums(&format!("with the begin rule ({})", rule.name()), &sums, 1024, 4, 77);
        }
    }
    Ok(())
}

#[test]
fn a_missing_producer_is_reported_with_kernel_cta_tensor_and_progress() -> Result<()> {
    let dev = cpu_device(1)?;
    let s = AsyncStream::new(&dev, 2)?;
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y")?;
    let mut sums = Tensor::<f32>::zeros(&dev, &[12])?;
    y.plant_missing_producer("produce", &[4, 0]);
    row_sums::launch_with(&s, &LaunchOptions::config(0), &y, &mut sums, 12, 8)?;
    let err = s.synchronize().expect_err("nobody produces y");
    let msg = err.to_string();
    // The first line names the producer each waited-on tensor expects (the GPU's shape).
    let first = msg.lines().next().unwrap_or_default();
    assert!(
        first.contains("; expected producer: `y` from `produce` (recorded, never launched)"),
        "{msg}"
    );
    assert!(msg.contains("row_sums CTA (0) waits on y[0] = 0 of 1 signals"), "{msg}");
    assert!(msg.contains("row_sums CTA (1) waits on y[2] = 0 of 1 signals"), "{msg}");
    Ok(())
}

#[test]
fn a_stuck_producer_is_named_with_its_launch_and_stream() -> Result<()> {
    // x has no producer; `next_row_stencil` (x -> y) waits on it, so `row_sums` (y) waits
    // on a producer that was launched: the report names its launch and stream.
    let dev = cpu_device(2)?;
    type Rows = Tiled<f32, DynRows>;
    type Program<'a> = &'a dyn Fn(&mut Rows, &mut Rows, &mut Tensor<f32>) -> Result<()>;
    let run = |on: Program| {
        let mut x = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "x")?;
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y")?;
        let mut sums = Tensor::<f32>::zeros(&dev, &[12])?;
        x.plant_missing_producer("produce", &[4, 0]);
        let err = on(&mut x, &mut y, &mut sums).expect_err("nobody produces x");
        Ok::<String, Error>(err.to_string())
    };
    let s = AsyncStream::new(&dev, 2)?;
    let msg = run(&|x, y, sums| {
        next_row_stencil::launch(&s, x, y, 12, 8, 1)?;
        row_sums::launch_with(&s, &LaunchOptions::config(0), y, sums, 12, 8)?;
        s.synchronize()
    })?;
    let first = msg.lines().next().unwrap_or_default();
    let lane = format!(" (lane 0 of AsyncStream #{}))", s.id());
    assert!(
        first.contains("`x` from `produce` (recorded, never launched)")
            && first.contains("`y` from `next_row_stencil` (launch ")
            && first.contains(&format!(" on stream #{}{lane}", s.streams()[0].id())),
        "{msg}"
    );
    // Two plain streams: the consumer waits (stream-level) for the stencil's stream.
    let (a, b) = (Stream::new(&dev)?, Stream::new(&dev)?);
    let msg = run(&|x, y, sums| {
        next_row_stencil::launch(&a, x, y, 12, 8, 1)?;
        row_sums::launch_with(&b, &LaunchOptions::config(0), y, sums, 12, 8)?;
        b.synchronize()
    })?;
    assert!(msg.contains(&format!("stream {}: ", a.id())), "{msg}");
    assert!(msg.contains(&format!("stream {}: waits for event", b.id())), "{msg}");
    Ok(())
}

#[test]
fn a_missing_producer_beside_a_spinning_kernel_times_out_as_on_the_gpu() -> Result<()> {
    for seed in 0..3 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y")?;
        let mut sums = Tensor::<f32>::zeros(&dev, &[12])?;
        y.plant_missing_producer("produce", &[4, 0]);
        // Other work, innocent: it spins 30 s on %globaltimer.
        busy::launch(&s, 30_000_000_000, 4)?;
        let opts = LaunchOptions::config(0).timeout(Duration::from_secs(2));
        row_sums::launch_with(&s, &opts, &y, &mut sums, 12, 8)?;
        let wall = Instant::now();
        let msg = s.synchronize().expect_err("nobody produces y").to_string();
        // The GPU's report: the waits that timed out after the launch's 2 s (of the virtual
        // clock), the producer y expects, one line per wait with tensor, tile and signals.
        let first = msg.lines().next().unwrap_or_default();
        assert!(
            first.contains(
                " tile wait(s) timed out (limit 2.0s); expected producer: `y` from `produce` (recorded, never launched)"
            ),
            "{msg}"
        );
        // The wait lines run up to a blank line; after it comes the semaphore dump.
        let waits: Vec<&str> = msg.lines().skip(1).take_while(|l| !l.is_empty()).collect();
        assert!(!waits.is_empty(), "{msg}");
        for w in waits {
            let w = w.trim();
            assert!(
                w.starts_with("row_sums CTA (")
                    && w.contains(") waited 2.0 s on y[")
                    && w.ends_with("] = 0 of 1 signals"),
                "{msg}"
            );
        }
        let dump = msg
            .split_once("\n\nlive Tiled tensors:\n")
            .map(|(_, d)| d)
            .unwrap_or_default();
        assert_eq!(dump.lines().collect::<Vec<_>>(), PLANTED_Y_DUMP, "{msg}");
        assert!(!msg.contains("busy") && !msg.contains("hang"), "{msg}");
        assert!(wall.elapsed() < Duration::from_secs(30), "{:?}", wall.elapsed());
        // The device recovers: the next program runs.
        let got = chain(&dev, &s, 40, 8, DynRows(8), 0, 0, 1, 0)?;
        check_sums("after the timeout", &got, 40, 8, 1);
    }
    Ok(())
}

#[test]
fn a_kernel_spinning_ten_seconds_on_the_clock_is_not_a_hang() -> Result<()> {
    let dev = cpu_device(3)?;
    let s = AsyncStream::new(&dev, 2)?;
    let (m, n) = (24u32, 8u32);
    let wall = Instant::now();
    busy::launch(&s, 10_000_000_000, 8)?;
    // A producer that spins 10 s before it writes, and a consumer whose waits allow 30 s.
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(8), "y")?;
    let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
    produce::launch_with(&s, &LaunchOptions::config(0), &mut y, m, n, 5, 10_000_000_000)?;
    let opts = LaunchOptions::config(0).timeout(Duration::from_secs(30));
    row_sums::launch_with(&s, &opts, &y, &mut sums, m, n)?;
    check_sums("after 10 s spins", &sums.to_vec()?, m, n, 5);
    assert!(wall.elapsed() < Duration::from_secs(30), "{:?}", wall.elapsed());
    Ok(())
}

#[test]
fn a_stencil_that_reads_the_next_data_tile_is_reported() -> Result<()> {
    let (m, n) = (8u32, 8u32);
    let run = |dev: &Device, within_tile: u32| -> Result<Vec<f32>> {
        let s = AsyncStream::new(dev, 2)?;
        let mut x = Tiled::<f32, DynRows>::new(dev, &[8, 8], DynRows(4), "x")?;
        let mut y = Tensor::<f32>::zeros(dev, &[8, 8])?;
        produce::launch_with(&s, &LaunchOptions::config(1), &mut x, m, n, 9, 0)?;
        next_row_stencil::launch(&s, &x, &mut y, m, n, within_tile)?;
        y.to_vec()
    };
    for seed in 0..4 {
        // Reads within the kernel tile's own rows: nothing to report, right values. The
        // check is asked for, since its default follows the build's debug assertions.
        let dev = Device::cpu(megaops::VgpuConfig {
            sms: 4,
            max_threads_per_sm: 1024,
            seed,
            check_reads: true,
            ..megaops::VgpuConfig::default()
        })?;
        let y = run(&dev, 1)?;
        for i in 0..m {
            let next = (i + 1).min(i / 4 * 4 + 3);
            for j in 0..n {
                let want = pattern(i, j, 9) + pattern(next, j, 9);
                assert_eq!(y[(i * n + j) as usize], want, "({i}, {j})");
            }
        }
        // CTA 0 (rows 0..4, data tile x[0]) reads row 4, in data tile x[1], which it never
        // waited for: on a GPU a race with the producer, here an error every time.
        let err = run(&dev, 0).expect_err("an out-of-tile read");
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Tiling {
                    kind: megaops::TilingErrorKind::OutOfTileRead,
                    ..
                }
            ),
            "{msg}"
        );
        // (Which of the threads that read row 4 is first depends on the seed.)
        assert!(
            msg.starts_with("CPU backend: out-of-tile read: next_row_stencil CTA (0), thread (")
                && msg.contains(", read x[4, ")
                && msg.contains(
                    "] in data tile x[1] but waited only for x[0]. On a GPU this read races with the producer of x[1]"
                ),
            "{msg}"
        );
        // The device recovers.
        run(&dev, 1)?;
    }
    // With the check off, nothing notices.
    let dev = Device::cpu(megaops::VgpuConfig {
        check_reads: false,
        ..megaops::VgpuConfig::default()
    })?;
    run(&dev, 0)?;
    Ok(())
}

#[test]
fn index_ranges_past_u32_are_launch_errors() -> Result<()> {
    let dev = cpu_device(4)?;
    let s = Stream::new(&dev)?;
    let x = Tensor::<f32>::full(&dev, &[16], 1.5)?;
    let mut y = Tensor::<f32>::zeros(&dev, &[16])?;
    // `x[m * n]`: 70000 · 70000 overflows the u32 the kernel computes it in.
    let e = flat_copy::launch(&s, &x, &mut y, 70_000, 70_000)
        .expect_err("overflow")
        .to_string();
    assert!(
        e.starts_with(
            "cannot launch `flat_copy`: the extent of axis `i`: `m * n` overflows `u32` with m = 70000, n = 70000; \
             the kernel computes it in `u32` too"
        ),
        "{e}"
    );
    flat_copy::launch(&s, &x, &mut y, 4, 4)?;
    assert_eq!(y.to_vec()?, vec![1.5; 16]);
    // u32::MAX elements in 2^25 kernel tiles of 128: the last tile ends at 2^32, past the
    // u32 indices of the kernel (the launch is refused before it looks at the tensor).
    let mut z = Tensor::<u32>::zeros(&dev, &[16])?;
    let e = stamp_values::launch(&s, &mut z, u32::MAX, 0, 0)
        .expect_err("range")
        .to_string();
    assert!(
        e.starts_with(
            "cannot launch `stamp_values`: the kernel tiles of `y` along dimension 0 (33554432 tiles of 128 elements, \
             grid axis 0) end at element 4294967296, past the u32 range of a kernel's indices"
        ),
        "{e}"
    );
    s.synchronize()
}

#[test]
fn bad_launches_fail_before_anything_runs() -> Result<()> {
    let dev = cpu_device(2)?;
    let s = AsyncStream::new(&dev, 2)?;
    // Shape mismatch between the tensor and the kernel's other arguments.
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[10, 8], DynRows(4), "y")?;
    let e = produce::launch(&s, &mut y, 11, 8, 0, 0).expect_err("shape").to_string();
    assert!(
        e.contains("`produce` expects `y` of shape [11, 8]") && e.contains("got [10, 8]"),
        "{e}"
    );
    // Reading before any producer.
    let mut sums = Tensor::<f32>::zeros(&dev, &[10])?;
    let e = row_sums::launch(&s, &y, &mut sums, 10, 8)
        .expect_err("unproduced")
        .to_string();
    assert!(
        e.contains("reads `y` (parameter `x`) before any kernel produced it"),
        "{e}"
    );
    // Writing twice without re-arming.
    produce::launch(&s, &mut y, 10, 8, 0, 0)?;
    let e = produce::launch(&s, &mut y, 10, 8, 0, 0).expect_err("rearm").to_string();
    assert!(e.contains("call `rearm()`"), "{e}");
    // A semaphore tensor of the wrong length.
    let data = Tensor::<f32>::zeros(&dev, &[10, 8])?;
    let sema = Tensor::<i32>::zeros(&dev, &[2])?;
    let e = Tiled::with_semaphores(data, sema, DynRows(4), "w")
        .expect_err("length")
        .to_string();
    assert!(
        e.contains("into 3 data tiles, but its semaphore tensor has 2 entries"),
        "{e}"
    );
    // A tile config that does not exist, and a remap table of the wrong length.
    let mut y2 = Tiled::<f32, DynRows>::new(&dev, &[10, 8], DynRows(4), "y2")?;
    let e = produce::launch_with(&s, &LaunchOptions::config(9), &mut y2, 10, 8, 0, 0)
        .expect_err("config")
        .to_string();
    assert!(e.contains("tile config 9 does not exist"), "{e}");
    let table = Tensor::<u32>::zeros(&dev, &[3])?;
    let opts = LaunchOptions::config(0).remap(megaops::Remap::Table(table));
    let e = produce::launch_with(&s, &opts, &mut y2, 10, 8, 0, 0)
        .expect_err("remap")
        .to_string();
    assert!(e.contains("remap table has 3 entries for 1 kernel tiles"), "{e}");
    s.synchronize()
}

#[test]
fn cta_remaps_keep_results() -> Result<()> {
    let dev = cpu_device(6)?;
    let s = AsyncStream::new(&dev, 2)?;
    let (m, n) = (64u32, 8u32);
    for remap in [
        megaops::Remap::Rotate(3),
        megaops::Remap::Table(Tensor::from_slice(&dev, &[8], &[7u32, 6, 5, 4, 3, 2, 1, 0])?),
    ] {
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(8), "y")?;
        let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
        produce::launch_with(&s, &LaunchOptions::config(2), &mut y, m, n, 1, 0)?;
        row_sums::launch_with(&s, &LaunchOptions::config(0).remap(remap), &y, &mut sums, m, n)?;
        check_sums("remap", &sums.to_vec()?, m, n, 1);
    }
    Ok(())
}

#[test]
fn a_producer_that_releases_its_consumer_at_its_last_cta_gives_the_same_results() -> Result<()> {
    for seed in 0..4u64 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        // 1000 rows in 16-row tiles: 63 producer CTAs, more than the 4 virtual SMs hold.
        let (m, n) = (1000u32, 40u32);
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(16), "y")?;
        let mut sums = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
        let last = LaunchOptions::config(0).release_next(ReleaseNext::LastCta);
        produce::launch_with(&s, &last, &mut y, m, n, 5, 1_000)?;
        row_sums::launch_with(&s, &LaunchOptions::config(0), &y, &mut sums, m, n)?;
        check_sums("release at the last CTA", &sums.to_vec()?, m, n, 5);
        // And a release at the last CTA of the last kernel: nobody waits for it.
        y.rearm();
        produce::launch_with(&s, &last, &mut y, m, n, 6, 0)?;
        s.synchronize()?;
    }
    Ok(())
}

/// Start times (ns, relative to the first producer CTA's) of a long producer of many
/// waves and of a consumer launched after it on the other stream.
fn producer_then_consumer_starts(dev: &Device, release: ReleaseNext, ctas: u32) -> Result<(Vec<i64>, Vec<i64>)> {
    let s = AsyncStream::new(dev, 2)?;
    let mut p = Tensor::<u32>::zeros(dev, &[ctas as usize])?;
    let mut c = Tensor::<u32>::zeros(dev, &[dev.sm_count() as usize])?;
    stamp::launch_with(
        &s,
        &LaunchOptions::default().release_next(release),
        &mut p,
        20_000,
        ctas,
    )?;
    stamp::launch(&s, &mut c, 0, dev.sm_count())?;
    let (p, c) = (p.to_vec()?, c.to_vec()?);
    let rel = |v: &[u32]| {
        v.iter()
            .map(|&t| t.wrapping_sub(p[0]) as i32 as i64)
            .collect::<Vec<_>>()
    };
    Ok((rel(&p), rel(&c)))
}

// ---- The same on the GPU (skipped with a reason when there is none) ----

#[test]
fn gpu_a_consumer_released_at_the_last_cta_starts_after_every_producer_cta() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_release_at_last_cta") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    // 32-thread CTAs: at most 32 per SM, so 4 × 32 per SM is at least 4 waves of 20 µs.
    let ctas = dev.sm_count() * 32 * 4;
    let (p, c) = producer_then_consumer_starts(&dev, ReleaseNext::LastCta, ctas)?;
    let (last, first_c) = (p[p.len() - 1], *c.iter().min().unwrap_or(&0));
    let p_max = *p.iter().max().unwrap_or(&0);
    eprintln!(
        "release at the last CTA: producer last CTA at {last} ns, latest {p_max} ns; consumer first at {first_c} ns"
    );
    assert!(
        first_c >= last,
        "a consumer CTA started at {first_c} ns, before the producer's last CTA ({last} ns)"
    );
    // The default (first CTA) releases it earlier: report, do not assert (hardware dispatch order decides).
    let (p, c) = producer_then_consumer_starts(&dev, ReleaseNext::FirstCta, ctas)?;
    eprintln!(
        "release at the first CTA: producer last CTA at {} ns; consumer first at {} ns",
        p[p.len() - 1],
        c.iter().min().unwrap_or(&0)
    );
    Ok(())
}

// ---- The same on the GPU (skipped with a reason when there is none) ----

#[test]
fn gpu_protocol() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_protocol") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    let s = AsyncStream::new(&dev, 2)?;
    for (m, n) in [(1000u32, 300u32), (4097, 129)] {
        for dtile in [1u32, 7, 64, 128, 1000] {
            for pcfg in 0..produce::CONFIGS.len() {
                for ccfg in 0..row_sums::CONFIGS.len() {
                    let seed = m + dtile + pcfg as u32;
                    let got = chain(&dev, &s, m, n, DynRows(dtile), pcfg, ccfg, seed, 2_000)?;
                    check_sums(&format!("gpu {m}x{n} rows {dtile} p{pcfg} c{ccfg}"), &got, m, n, seed);
                }
            }
        }
    }
    let got = chain(&dev, &s, 999, 77, DynGrid(13, 10), 1, 2, 3, 1_000)?;
    check_sums("gpu grid", &got, 999, 77, 3);
    Ok(())
}

#[test]
fn gpu_consumer_first_deadlock_times_out_without_the_rule_and_runs_with_it() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_consumer_first") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    dev.set_wait_timeout(Duration::from_secs(1));
    let rows = dev.sm_count() * 32 * 4; // more consumer CTAs than the GPU holds
    let err = consumer_first(&dev, false, BeginRule::WaitKernel, rows, 50_000_000).expect_err("must time out");
    let msg = err.to_string();
    eprintln!("without the begin rule: {msg}");
    assert!(
        msg.contains("row_sums CTA") && msg.contains("waited 1.0 s on y["),
        "{msg}"
    );
    for rule in BeginRule::ALL {
        let sums = consumer_first(&dev, true, rule, rows, 50_000_000)?;
        check_sums(
            &format!("gpu with the begin rule ({})", rule.name()),
            &sums,
            rows,
            4,
            77,
        );
    }
    Ok(())
}

#[test]
fn gpu_missing_producer_times_out_with_a_readable_message() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_missing_producer") else {
        return Ok(());
    };
    dev.set_wait_timeout(Duration::from_millis(500));
    let s = AsyncStream::new(&dev, 2)?;
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y")?;
    let mut sums = Tensor::<f32>::zeros(&dev, &[12])?;
    y.plant_missing_producer("produce", &[4, 0]);
    row_sums::launch_with(&s, &LaunchOptions::config(0), &y, &mut sums, 12, 8)?;
    let msg = s.synchronize().expect_err("nobody produces y").to_string();
    eprintln!("{msg}");
    // Every lane that times out writes a record and the log keeps the first eight, so
    // which stuck CTA they name is a race (one warp's lanes can fill it); each must name
    // the kernel, a CTA, the tensor and data tile, the value seen and the target.
    // The wait lines run up to a blank line; after it comes the semaphore dump.
    let waits: Vec<&str> = msg.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(!waits.is_empty(), "{msg}");
    for w in waits {
        let w = w.trim();
        assert!(
            w.starts_with("row_sums CTA (") && w.contains(") waited 0.5 s on y[") && w.ends_with("] = 0 of 1 signals"),
            "{msg}"
        );
    }
    // The dump, read after the timeout: y's three data tiles, none signalled.
    let dump = msg
        .split_once("\n\nlive Tiled tensors:\n")
        .map(|(_, d)| d)
        .unwrap_or_default();
    let lines: Vec<&str> = dump.lines().collect();
    assert_eq!(lines, PLANTED_Y_DUMP, "{msg}");
    // The device recovers: the next program runs.
    let got = chain(&dev, &s, 100, 10, DynRows(10), 0, 0, 1, 0)?;
    check_sums("after the timeout", &got, 100, 10, 1);
    Ok(())
}

/// Delayed release under overlap: every iteration allocates fresh tensors, launches a slow
/// producer and a consumer, and drops the intermediate (and most outputs) at once, while
/// the kernels may still run. Freed memory must not be handed to a later iteration while
/// a kernel that uses it can still run: every kept output must match its own seed.
fn alloc_free_under_overlap(dev: &Device, iterations: u32, m: u32, n: u32, delay_ns: u64) -> Result<()> {
    let s = AsyncStream::new(dev, 3)?;
    let mut kept = Vec::new();
    for it in 0..iterations {
        let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(8), "y")?;
        let mut sums = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
        produce::launch_with(
            &s,
            &LaunchOptions::config((it % 3) as usize),
            &mut y,
            m,
            n,
            1000 + it,
            delay_ns,
        )?;
        row_sums::launch_with(&s, &LaunchOptions::config((it % 2) as usize), &y, &mut sums, m, n)?;
        drop(y);
        // A plain scratch tensor written and dropped in between, to take freed memory.
        let scratch = Tensor::<f32>::full(dev, &[m as usize, n as usize], -7.0)?;
        drop(scratch);
        if it % 4 == 0 {
            kept.push((it, sums));
        }
    }
    for (it, sums) in kept {
        check_sums(&format!("iteration {it}"), &sums.to_vec()?, m, n, 1000 + it);
    }
    Ok(())
}

#[test]
fn tensors_dropped_under_overlap_are_not_reused_early() -> Result<()> {
    for seed in 0..2 {
        alloc_free_under_overlap(&cpu_device(seed)?, 12, 40, 24, 20_000)?;
    }
    Ok(())
}

/// Interop with ordinary streams: a plain stream writes a tensor, the AsyncStream waits
/// for it (`wait_on`), consumes it and produces a tiled tensor; the plain stream then
/// waits for the AsyncStream (`block`) before reading the result with an unadapted launch.
fn interop(dev: &Device, m: u32, n: u32, delay_ns: u64) -> Result<()> {
    let plain = Stream::new(dev)?;
    let s = AsyncStream::new(dev, 2)?;
    let mut x = Tensor::<f32>::full(dev, &[m as usize, n as usize], f32::NAN)?;
    produce::launch_with(&plain, &LaunchOptions::config(0), &mut x, m, n, 41, delay_ns)?;
    s.wait_on(&plain)?;
    let mut sums_x = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    row_sums::launch(&s, &x, &mut sums_x, m, n)?;
    let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(16), "y")?;
    produce::launch_with(&s, &LaunchOptions::config(1), &mut y, m, n, 42, delay_ns)?;
    s.block(&plain)?;
    let mut sums_y = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    row_sums::launch(&plain, &y, &mut sums_y, m, n)?;
    plain.synchronize()?;
    check_sums("async consumer of a plain-stream producer", &sums_x.to_vec()?, m, n, 41);
    check_sums(
        "plain-stream consumer of an async producer",
        &sums_y.to_vec()?,
        m,
        n,
        42,
    );
    Ok(())
}

#[test]
fn async_and_plain_streams_interoperate() -> Result<()> {
    for seed in 0..3 {
        interop(&cpu_device(seed)?, 37, 21, 30_000)?;
    }
    Ok(())
}

#[test]
fn gpu_tensors_dropped_under_overlap_and_interop() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_tensors_dropped_under_overlap_and_interop") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    alloc_free_under_overlap(&dev, 200, 2000, 256, 20_000)?;
    interop(&dev, 3000, 200, 200_000)?;
    Ok(())
}

/// SM partitioning (green contexts on the GPU): a communication-like kernel launched on
/// the AsyncStream's partition produces a tiled tensor that kernels on the main streams
/// consume tile by tile, and the reverse; a launch asking for a partition the AsyncStream
/// does not have is refused before anything runs.
fn sm_partition(dev: &Device, m: u32, n: u32, delay_ns: u64) -> Result<()> {
    let opts = AsyncOptions {
        streams: 2,
        partition_sms: Some(16),
        ..AsyncOptions::default()
    };
    let s = AsyncStream::with_options(dev, opts)?;
    let on_partition = LaunchOptions::config(0).on_partition();
    for (seed, producer_on_partition) in [(61u32, true), (62, false)] {
        let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(8), "y")?;
        let mut sums = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
        if producer_on_partition {
            produce::launch_with(&s, &on_partition, &mut y, m, n, seed, delay_ns)?;
            row_sums::launch(&s, &y, &mut sums, m, n)?;
        } else {
            produce::launch_with(&s, &LaunchOptions::config(0), &mut y, m, n, seed, delay_ns)?;
            row_sums::launch_with(&s, &on_partition, &y, &mut sums, m, n)?;
        }
        s.synchronize()?;
        let what = if producer_on_partition {
            "producer on the partition"
        } else {
            "consumer on the partition"
        };
        check_sums(what, &sums.to_vec()?, m, n, seed);
    }
    let plain = AsyncStream::new(dev, 2)?;
    let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(8), "y")?;
    let err = produce::launch_with(&plain, &on_partition, &mut y, m, n, 1, 0).expect_err("no partition to run on");
    assert!(err.to_string().contains("partition_sms"), "{err}");
    Ok(())
}

#[test]
fn sm_partition_launches_on_the_cpu_backend() -> Result<()> {
    for seed in 0..2 {
        sm_partition(&cpu_device(seed)?, 45, 20, 20_000)?;
    }
    Ok(())
}

#[test]
fn gpu_sm_partition() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_sm_partition") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    sm_partition(&dev, 4000, 256, 100_000)?;
    let s = AsyncStream::with_options(
        &dev,
        AsyncOptions {
            streams: 2,
            partition_sms: Some(16),
            ..AsyncOptions::default()
        },
    )?;
    let sms = s.partition().map(|p| p.sms()).unwrap_or(0);
    assert!((16..dev.sm_count()).contains(&sms), "partition of {sms} SMs");
    Ok(())
}
