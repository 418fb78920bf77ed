//! `Tiled` tensors are never read before their data exists, whichever target launches:
//! after `AsyncStream::capture` a captured output refuses eager reads until a replay has
//! produced it (issue 18 a), and a consumer or a re-producer on another target than the
//! tensor's last producer is ordered after it by an event (issue 18 b) instead of reading
//! the next cycle's rows or deadlocking. CPU backend over several interleavings; the same
//! on the GPU when there is one (tests named `gpu_*`).

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{AsyncStream, Device, DynRows, LaunchOptions, Phase, Result, Stream, Tensor, Tiled};
use megaops_examples::protocol::{busy, pattern, produce, row_sums};
use std::time::Duration;

/// Rows of `got` that differ from the row sums of `pattern(.., seed)`.
fn wrong_rows(got: &[f32], m: u32, n: u32, seed: u32) -> usize {
    (0..m)
        .filter(|&i| {
            let want: f64 = (0..n).map(|j| pattern(i, j, seed) as f64).sum();
            let g = got.get(i as usize).copied().unwrap_or(f32::NAN) as f64;
            g.is_nan() || (g - want).abs() > 1e-3 * (1.0 + want.abs())
        })
        .count()
}

fn assert_sums(what: &str, got: &[f32], m: u32, n: u32, seed: u32) {
    let bad = wrong_rows(got, m, n, seed);
    assert_eq!(bad, 0, "{what}: {bad} of {m} rows wrong");
}

const UNREPLAYED: &str =
    "reads `y` (parameter `x`), whose producer was captured into a graph that has not been replayed yet";

/// Issue 18 (a): capture a producer, then try to read its output eagerly (AsyncStream and
/// plain stream), read it inside another capture, replay, read it.
fn captured_outputs(dev: &Device, m: u32, n: u32) -> Result<()> {
    let s = AsyncStream::new(dev, 2)?;
    let plain = Stream::new(dev)?;
    let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(5), "y")?;
    let mut sums = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    let graph = s.capture(|s| produce::launch(s, &mut y, m, n, 21, 0))?;
    assert_eq!(y.phase(), Phase::Captured);
    for (what, got) in [
        ("AsyncStream", row_sums::launch(&s, &y, &mut sums, m, n)),
        ("plain stream", row_sums::launch(&plain, &y, &mut sums, m, n)),
    ] {
        let e = got.expect_err(what).to_string();
        assert!(e.contains(UNREPLAYED), "{what}: {e}");
    }
    // A producer must re-arm first, as for complete data.
    let e = produce::launch(&s, &mut y, m, n, 1, 0).expect_err("write").to_string();
    assert!(e.contains("which a captured graph produces: call `rearm()`"), "{e}");
    // Another capture may read it: it runs when that graph is replayed, after this one.
    let mut sums2 = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    let consume = s.capture(|s| row_sums::launch(s, &y, &mut sums2, m, n))?;
    assert!(sums.to_vec()?.iter().all(|v| v.is_nan()), "nothing may have run");

    graph.launch(&s)?;
    assert_eq!(y.phase(), Phase::Complete);
    row_sums::launch(&s, &y, &mut sums, m, n)?;
    assert_sums("eager read after the replay", &sums.to_vec()?, m, n, 21);
    consume.launch(&s)?;
    s.synchronize()?;
    assert_sums("a graph reading a captured output", &sums2.to_vec()?, m, n, 21);
    // A plain stream reading it after a replay waits for the replay.
    sums.fill(f32::NAN)?;
    graph.launch(&s)?;
    row_sums::launch(&plain, &y, &mut sums, m, n)?;
    plain.synchronize()?;
    assert_sums("plain stream after a replay", &sums.to_vec()?, m, n, 21);
    s.synchronize()
}

#[test]
fn a_captured_output_refuses_eager_reads_until_a_replay_produced_it() -> Result<()> {
    for seed in 0..3 {
        captured_outputs(&cpu_device(seed)?, 24, 16)?;
    }
    Ok(())
}

/// Issue 18 (b): produce on `a`; consume on `b` behind a busy kernel; re-arm and produce
/// the next cycle on `a` and consume it there. Returns both consumers' sums.
fn reproduce_across_streams(dev: &Device, m: u32, n: u32, busy_ns: u64) -> Result<(Vec<f32>, Vec<f32>)> {
    let (a, b) = (Stream::new(dev)?, Stream::new(dev)?);
    let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(8), "y")?;
    let mut first = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    let mut second = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    produce::launch(&a, &mut y, m, n, 1, 0)?;
    busy::launch(&b, busy_ns, 1)?; // b's consumer is still queued when…
    row_sums::launch(&b, &y, &mut first, m, n)?;
    y.rearm();
    produce::launch(&a, &mut y, m, n, 2, 0)?; // …the next cycle is produced on a
    row_sums::launch(&a, &y, &mut second, m, n)?;
    b.synchronize()?;
    a.synchronize()?;
    Ok((first.to_vec()?, second.to_vec()?))
}

#[test]
fn a_reproducer_on_another_stream_waits_for_the_previous_consumer() -> Result<()> {
    let (m, n) = (64u32, 10u32);
    for seed in 0..4 {
        let (first, second) = reproduce_across_streams(&cpu_device(seed)?, m, n, 100_000)?;
        assert_sums(&format!("seed {seed}: consumer of cycle 1"), &first, m, n, 1);
        assert_sums(&format!("seed {seed}: consumer of cycle 2"), &second, m, n, 2);
    }
    Ok(())
}

/// Issue 18 (b), the deadlock: the producer is queued on `a` behind a busy kernel; its
/// consumer on `b` has more CTAs than the GPU holds. Ordered by an event, the consumer
/// starts after the producer instead of taking every SM before it.
fn consumer_on_another_stream(dev: &Device, rows: u32, busy_ns: u64) -> Result<Vec<f32>> {
    let (a, b) = (Stream::new(dev)?, Stream::new(dev)?);
    let n = 4u32;
    let mut y = Tiled::<f32, DynRows>::new(dev, &[rows as usize, n as usize], DynRows(64), "y")?;
    let mut sums = Tensor::<f32>::full(dev, &[rows as usize], f32::NAN)?;
    busy::launch(&a, busy_ns, 4)?;
    produce::launch_with(&a, &LaunchOptions::config(2), &mut y, rows, n, 77, 0)?;
    row_sums::launch_with(&b, &LaunchOptions::config(1), &y, &mut sums, rows, n)?; // one CTA per row
    b.synchronize()?;
    a.synchronize()?;
    sums.to_vec()
}

#[test]
fn a_consumer_on_another_stream_than_its_producer_does_not_deadlock() -> Result<()> {
    for seed in 0..4 {
        // 4 virtual SMs hold 128 CTAs of 64 threads: 1024 consumer CTAs overflow them.
        let sums = consumer_on_another_stream(&cpu_device(seed)?, 1024, 200_000)?;
        assert_sums(&format!("seed {seed}"), &sums, 1024, 4, 77);
    }
    Ok(())
}

/// An AsyncStream producer and a plain-stream re-producer: the same rule between a plain
/// stream and an AsyncStream.
#[test]
fn a_plain_stream_reproducer_waits_for_an_async_stream_consumer() -> Result<()> {
    let (m, n) = (40u32, 12u32);
    for seed in 0..3 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let plain = Stream::new(&dev)?;
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[m as usize, n as usize], DynRows(8), "y")?;
        let mut first = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
        busy::launch(&s, 100_000, 1)?; // stream 0
        produce::launch(&s, &mut y, m, n, 5, 0)?; // stream 1
        row_sums::launch(&s, &y, &mut first, m, n)?; // stream 0, behind the busy kernel
        y.rearm();
        produce::launch(&plain, &mut y, m, n, 6, 0)?;
        plain.synchronize()?;
        s.synchronize()?;
        assert_sums(&format!("seed {seed}"), &first.to_vec()?, m, n, 5);
        assert_sums(
            &format!("seed {seed}: plain"),
            &y.to_vec()?
                .chunks(n as usize)
                .map(|r| r.iter().sum())
                .collect::<Vec<f32>>(),
            m,
            n,
            6,
        );
    }
    Ok(())
}

// ---- The same on the GPU (skipped with a reason when there is none) ----

/// A graph dropped while its replays are still queued (behind a busy kernel) keeps the
/// memory its kernels use until they are done. Here that is an input made and dropped
/// inside the capture: freed early, it would be handed out to (and overwritten by) the
/// tensors allocated right after the drop. Returns the replays' row sums.
fn graph_dropped_with_queued_replays(dev: &Device, m: u32, n: u32, busy_ns: u64) -> Result<Vec<f32>> {
    let s = AsyncStream::new(dev, 2)?;
    let mut sums = Tensor::<f32>::full(dev, &[m as usize], f32::NAN)?;
    let graph = s.capture(|s| {
        let mut y = Tiled::<f32, DynRows>::new(dev, &[m as usize, n as usize], DynRows(8), "y")?;
        produce::launch(s, &mut y, m, n, 9, 0)?;
        row_sums::launch(s, &y, &mut sums, m, n)
    })?;
    busy::launch(&s, busy_ns, 1)?;
    graph.launch(&s)?;
    graph.launch(&s)?;
    drop(graph);
    let junk = (0..32)
        .map(|_| Tensor::<f32>::full(dev, &[(m * n) as usize], 7.0))
        .collect::<Result<Vec<_>>>()?;
    s.synchronize()?;
    drop(junk);
    sums.to_vec()
}

#[test]
fn a_graph_dropped_with_queued_replays_keeps_their_memory() -> Result<()> {
    for seed in 0..3 {
        let sums = graph_dropped_with_queued_replays(&cpu_device(seed)?, 24, 16, 2_000_000)?;
        assert_sums("replays of a dropped graph", &sums, 24, 16, 9);
    }
    Ok(())
}

#[test]
fn gpu_a_graph_dropped_with_queued_replays_keeps_their_memory() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_a_graph_dropped_with_queued_replays") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    let sums = graph_dropped_with_queued_replays(&dev, 4096, 64, 20_000_000)?;
    assert_sums("gpu: replays of a dropped graph", &sums, 4096, 64, 9);
    Ok(())
}

#[test]
fn gpu_a_captured_output_refuses_eager_reads_until_a_replay_produced_it() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_a_captured_output_refuses_eager_reads") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    captured_outputs(&dev, 1000, 300)
}

#[test]
fn gpu_a_reproducer_on_another_stream_waits_for_the_previous_consumer() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_a_reproducer_on_another_stream") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    let (m, n) = (4096u32, 64u32);
    // The consumer on b sits 20 ms behind a busy kernel: without ordering, the next
    // cycle on a is long done by then.
    let (first, second) = reproduce_across_streams(&dev, m, n, 20_000_000)?;
    assert_sums("gpu: consumer of cycle 1", &first, m, n, 1);
    assert_sums("gpu: consumer of cycle 2", &second, m, n, 2);
    Ok(())
}

#[test]
fn gpu_a_consumer_on_another_stream_than_its_producer_does_not_deadlock() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_a_consumer_on_another_stream") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    dev.set_wait_timeout(Duration::from_secs(1));
    let rows = dev.sm_count() * 32 * 4; // more consumer CTAs than the GPU holds
    let sums = consumer_on_another_stream(&dev, rows, 50_000_000)?;
    assert_sums("gpu", &sums, rows, 4, 77);
    Ok(())
}
