//! The Figure 1 example (`Y = X·Wᵀ; Z = Y·Vᵀ` through row data tiles of `Y`): on the CPU
//! backend over several interleavings (seeds), and on the GPU at sizes that are multiples
//! of no tile size, with swapped producer configs under one consumer, overlapped, in
//! no-overlap mode, and replayed from a CUDA graph.

use megaops::testing::{cpu_device, fresh_seed, gpu_or_skip};
use megaops::{AsyncStream, Device, Result};
use megaops_examples::fig1::{Fig1, Shape};

fn check(fig1: &Fig1, rows: usize, what: &str) -> Result<()> {
    let report = fig1.check(rows)?;
    assert!(report.ok(), "{what} ({}): {report}", fig1.shape());
    Ok(())
}

/// Runs `pairs` of (producer, consumer) configs on an overlapping and a serial AsyncStream.
fn run_pairs(dev: &Device, shape: Shape, pairs: &[(usize, usize)], seed: u64, rows: usize) -> Result<()> {
    let mut fig1 = Fig1::new(dev, shape, seed)?;
    for &(p, q) in pairs {
        for (mode, s) in [
            ("overlap", AsyncStream::new(dev, 2)?),
            ("serial", AsyncStream::serial(dev)?),
        ] {
            fig1.poison()?;
            fig1.run(&s, p, q)?;
            s.synchronize()?;
            check(&fig1, rows, &format!("producer {p} consumer {q} {mode}"))?;
        }
    }
    Ok(())
}

#[test]
fn figure1_on_the_cpu_backend_over_seeds() -> Result<()> {
    let seed = fresh_seed("figure1_on_the_cpu_backend_over_seeds");
    for v in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(v))?;
        // 130 rows: three 64-row data tiles, the last one partial; producers of 64- and
        // 128-row kernel tiles under one consumer, and the reverse.
        let shape = Shape {
            m: 130,
            k: 40,
            n1: 72,
            n2: 50,
        };
        run_pairs(&dev, shape, &[(5, 0), (0, 5), (2, 4)], seed ^ v, usize::MAX)?;
    }
    Ok(())
}

/// Graph replays interleaved with eager runs of the same program on the same tensors:
/// each replay must start from the semaphore values it was captured against, and the
/// eager run after a replay must not wait for a launch made before it.
fn replays_between_eager_runs(dev: &Device, shape: Shape, seed: u64, rows: usize) -> Result<()> {
    let s = AsyncStream::new(dev, 2)?;
    let mut fig1 = Fig1::new(dev, shape, seed)?;
    fig1.run(&s, 5, 0)?;
    s.synchronize()?;
    check(&fig1, rows, "eager before the capture")?;
    let graph = s.capture(|s| fig1.run(s, 5, 5))?;
    for round in 0..3 {
        fig1.poison()?;
        graph.launch(&s)?;
        s.synchronize()?;
        check(&fig1, rows, &format!("replay {round}"))?;
        for eager in 0..2 {
            fig1.poison()?;
            fig1.run(&s, eager, 5)?;
            s.synchronize()?;
            check(&fig1, rows, &format!("eager run {eager} after replay {round}"))?;
        }
    }
    // Two replays back to back, and an eager run queued right behind a replay.
    fig1.poison()?;
    graph.launch(&s)?;
    graph.launch(&s)?;
    fig1.run(&s, 1, 2)?;
    s.synchronize()?;
    check(&fig1, rows, "eager run queued behind two replays")
}

#[test]
fn figure1_graph_replays_between_eager_runs_on_the_cpu_backend() -> Result<()> {
    for seed in 0..2 {
        replays_between_eager_runs(
            &cpu_device(seed)?,
            Shape {
                m: 70,
                k: 24,
                n1: 40,
                n2: 9,
            },
            seed,
            usize::MAX,
        )?;
    }
    Ok(())
}

#[test]
fn figure1_refuses_shapes_the_gemm_cannot_run() -> Result<()> {
    let dev = cpu_device(1)?;
    let err = Fig1::new(
        &dev,
        Shape {
            m: 4,
            k: 12,
            n1: 16,
            n2: 8,
        },
        0,
    )
    .err()
    .expect("k = 12 must be refused");
    assert!(err.to_string().contains("multiples of 8"), "{err}");
    assert!(
        Fig1::new(
            &dev,
            Shape {
                m: 0,
                k: 16,
                n1: 16,
                n2: 8
            },
            0
        )
        .is_err(),
        "m = 0 must be refused"
    );
    Ok(())
}

/// A traced Figure 1 run and a traced graph replay: every tile of both GEMMs recorded
/// once, times in order, and no consumer tile past its wait before a producer tile ended.
fn traced_runs(dev: &Device, shape: Shape, seed: u64, rows: usize) -> Result<()> {
    dev.start_trace(1 << 18)?;
    let s = AsyncStream::new(dev, 2)?;
    s.set_tracing(true);
    let mut fig1 = Fig1::new(dev, shape, seed)?;
    for (p, c) in [(5, 0), (0, 5)] {
        fig1.run(&s, p, c)?;
        let trace = dev.take_trace()?;
        check(&fig1, rows, "a traced run")?;
        assert_eq!(trace.check(), Ok(()), "configs ({p}, {c})");
        assert_eq!(trace.launches.len(), 2);
        assert_eq!(trace.launches[1].waits_on, vec![trace.launches[0].launch_id]);
    }
    let graph = s.capture(|s| fig1.run(s, 5, 5))?;
    fig1.poison()?;
    graph.launch(&s)?;
    let trace = dev.take_trace()?;
    check(&fig1, rows, "a traced replay")?;
    assert_eq!(trace.check(), Ok(()), "replay");
    Ok(())
}

#[test]
fn figure1_traced_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("figure1_traced_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let shape = Shape {
        m: 130,
        k: 40,
        n1: 72,
        n2: 50,
    };
    traced_runs(&dev, shape, seed, usize::MAX)
}

#[test]
fn gpu_figure1_traced() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_figure1_traced") else {
        return Ok(());
    };
    let shape = Shape {
        m: 2177,
        k: 1032,
        n1: 1544,
        n2: 1001,
    };
    traced_runs(&dev, shape, fresh_seed("gpu_figure1_traced"), 128)
}

#[test]
fn figure1_on_the_gpu() -> Result<()> {
    let Some(dev) = gpu_or_skip("figure1_on_the_gpu") else {
        return Ok(());
    };
    let seed = fresh_seed("figure1_on_the_gpu");
    let shapes = [
        Shape {
            m: 1000,
            k: 520,
            n1: 1000,
            n2: 777,
        },
        Shape {
            m: 2177,
            k: 1032,
            n1: 1544,
            n2: 1001,
        },
        Shape {
            m: 1,
            k: 8,
            n1: 8,
            n2: 1,
        },
        Shape {
            m: 4099,
            k: 4096,
            n1: 4096,
            n2: 4096,
        },
    ];
    let pairs = [(0, 5), (1, 5), (5, 5), (7, 5), (2, 0), (2, 3), (6, 1)];
    for (i, &shape) in shapes.iter().enumerate() {
        run_pairs(&dev, shape, &pairs, seed.wrapping_add(i as u64), 128)?;
    }
    // Graph capture and replay on the GPU, between eager runs.
    replays_between_eager_runs(&dev, shapes[1], seed, 128)?;
    Ok(())
}
