//! Closed-source kernels in the data-tile protocol (`megaops::subkernel`): chunked cuBLASLt
//! GEMMs and copy-engine copies between MegaOps kernels, against f64 references, with
//! fresh random inputs and poisoned outputs.
//!
//! - A Rust `matmul` produces `Y` (a `Tiled` tensor); a cuBLASLt subkernel consumes it (each
//!   chunk waits for its rows) and produces `Z`; a Rust `matmul` consumes `Z` (waiting for
//!   the chunks' data tiles): both directions of overlap, chunk counts 1 to 16, rows and
//!   columns, shapes the chunks and tiles do not divide, the residual epilogue.
//! - The same program captured into a graph and replayed.
//! - Both ways of signalling a chunk's output: by its side stream (chunks that hold whole
//!   data tiles) and by the proxy (chunks that cut data tiles, or chosen).
//! - A copy subkernel between a producer and a consumer.
//! - Bad input is refused before anything runs.
//!
//! On the CPU backend (in CI) the protocol runs with the CPU implementations of the
//! operations; on the GPU the same checks run with cuBLASLt and the copy engine, plus a
//! chunked call against one call (bitwise where cuBLASLt picked the same algorithm).

use megaops::subkernel::ChunkSignals;
use megaops::subkernel::copy::{CopyChunks, copy_rows, upload_rows};
use megaops::subkernel::cublaslt::{CublasLt, GemmAxis, GemmChunks};
use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{AsyncStream, Device, Error, LaunchOptions, PinnedHost, Result, Rows, Stream, Tensor, Tiled, bf16};
use megaops_kernels::gemm::matmul;

/// bf16 NaN: every element a kernel forgets to write fails the comparison.
const POISON: bf16 = bf16::from_bits(0xffc0);

/// Relative error allowed: bf16 rounding of the output is ≈ 1.5e-3 in norm.
const TOL: f64 = 5e-3;

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `C = A·Wᵀ (+ R)` in f64 (`A[m, k]`, `W[n, k]`, `R[m, n]`).
fn reference(a: &[f64], w: &[f64], r: Option<&[f64]>, m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = a[i * k..(i + 1) * k]
                .iter()
                .zip(&w[j * k..(j + 1) * k])
                .map(|(x, y)| x * y)
                .sum();
            c[i * n + j] = dot + r.map_or(0.0, |r| r[i * n + j]);
        }
    }
    c
}

/// One chain `X → matmul → Y → cuBLASLt subkernel → Z → matmul → O`, run eagerly or as a
/// captured graph (replayed twice).
struct Chain {
    m: usize,
    k: usize,
    n1: usize,
    n2: usize,
    residual: bool,
    chunks: GemmChunks,
    graph: bool,
}

impl Chain {
    /// Runs and checks the chain; returns whether the subkernel used the side streams.
    fn check(&self, dev: &Device, lt: &CublasLt, streams: usize, seed: u64) -> Result<bool> {
        let (m, k, n1, n2) = (self.m, self.k, self.n1, self.n2);
        let x = random::<bf16>(m * k, 1.0, seed);
        let w1 = random::<bf16>(n1 * k, 1.0, seed ^ 1);
        let w2 = random::<bf16>(n2 * n1, 0.5, seed ^ 2);
        let w3 = random::<bf16>(n1 * n2, 0.5, seed ^ 3);
        let r = random::<bf16>(m * n2, 1.0, seed ^ 4);
        let xt = Tensor::from_slice(dev, &[m, k], &x)?;
        let w1t = Tensor::from_slice(dev, &[n1, k], &w1)?;
        let w2t = Tensor::from_slice(dev, &[n2, n1], &w2)?;
        let w3t = Tensor::from_slice(dev, &[n1, n2], &w3)?;
        let rt = Tiled::complete(Tensor::from_slice(dev, &[m, n2], &r)?, Rows::<16>, "r")?;
        let mut y = Tiled::new(dev, &[m, n1], Rows::<64>, "y")?;
        let mut z = Tiled::new(dev, &[m, n2], Rows::<32>, "z")?;
        let mut o = Tensor::full(dev, &[m, n1], POISON)?;
        y.tensor().fill(POISON)?;
        z.tensor().fill(POISON)?;
        let s = AsyncStream::new(dev, streams)?;
        let (mu, ku, n1u, n2u) = (m as u32, k as u32, n1 as u32, n2 as u32);
        let opts = LaunchOptions::default();
        let residual = self
            .residual
            .then_some(&rt as &dyn megaops::subkernel::cublaslt::Operand);
        let mut body = |s: &AsyncStream| -> Result<()> {
            matmul::launch_with(s, &opts, &xt, &w1t, &mut y, mu, n1u, ku)?;
            lt.matmul(s, &y, &w2t, residual, &mut z, &self.chunks)?;
            matmul::launch_with(s, &opts, &z, &w3t, &mut o, mu, n1u, n2u)
        };
        if self.graph {
            let g = s.capture(|s| body(s))?;
            for _ in 0..2 {
                z.tensor().fill(POISON)?;
                o.fill(POISON)?;
                g.launch(&s)?;
                s.synchronize()?;
            }
        } else {
            body(&s)?;
            s.synchronize()?;
        }
        let what = format!(
            "m={m} k={k} n1={n1} n2={n2} {:?} chunks {} align {} {:?} residual {} graph {} streams {streams} \
             one chunk on the lane {}",
            self.chunks.along,
            self.chunks.chunks,
            self.chunks.align,
            self.chunks.signals,
            self.residual,
            self.graph,
            dev.one_chunk_on_lane()
        );
        let y_out = y.to_vec()?;
        assert_close(
            &format!("{what}: Y"),
            &y_out,
            &reference(&f64s(&x), &f64s(&w1), None, m, n1, k),
            TOL,
        );
        let rf = f64s(&r);
        let z_out = z.to_vec()?;
        assert_close(
            &format!("{what}: Z"),
            &z_out,
            &reference(&f64s(&y_out), &f64s(&w2), self.residual.then_some(&rf[..]), m, n2, n1),
            TOL,
        );
        assert_close(
            &format!("{what}: O"),
            &o.to_vec()?,
            &reference(&f64s(&z_out), &f64s(&w3), None, m, n1, n2),
            TOL,
        );
        Ok(s.side_streams_used())
    }
}

fn chains(small: bool) -> Vec<Chain> {
    // GPU: the f64 references run on the host, so sizes the GPU does in microseconds.
    let (m, k, n1, n2) = if small {
        (150, 32, 72, 40)
    } else {
        (1000, 256, 512, 776)
    };
    // `Z` has data tiles of 32 rows: row chunks aligned to 16 rows hold whole tiles at some
    // counts only (side-stream signals there, the proxy's elsewhere), aligned to 32 at every
    // count; column chunks always cut tiles.
    let mut v = Vec::new();
    for (i, chunks) in [1usize, 2, 3, 5, 16].into_iter().enumerate() {
        for (along, align, signals) in [
            (GemmAxis::M, 16, ChunkSignals::SideStream),
            (GemmAxis::M, 32, ChunkSignals::SideStream),
            (GemmAxis::M, 32, ChunkSignals::Proxy),
            (GemmAxis::N, 8, ChunkSignals::SideStream),
        ] {
            v.push(Chain {
                m,
                k,
                n1,
                n2,
                residual: i % 2 == 1,
                chunks: GemmChunks {
                    chunks,
                    along,
                    align,
                    signals,
                    ..GemmChunks::default()
                },
                graph: i == 2 || (i == 4 && align == 32),
            });
        }
    }
    v
}

/// The chain on the CPU backend, under two virtual-GPU seeds, with 1 and 2 streams: the
/// first with the device's default (one-chunk subkernels on the launch's own stream), the
/// second with every chunk on the side streams.
#[test]
fn cublaslt_subkernels_between_megaops_kernels_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("cublaslt_subkernels_between_megaops_kernels_on_the_cpu_backend");
    for (i, vseed) in [seed, seed ^ 0x5eed].into_iter().enumerate() {
        let dev = cpu_device(vseed)?;
        dev.set_one_chunk_on_lane(i == 0);
        let lt = CublasLt::new(&dev)?;
        for (j, chain) in chains(true).iter().enumerate() {
            chain.check(&dev, &lt, 1 + (i + j) % 2, vseed.wrapping_add(j as u64))?;
        }
    }
    Ok(())
}

/// By default ([`Device::one_chunk_on_lane`]) a one-chunk subkernel whose stream signals
/// its output runs on the launch's own stream after its proxy, eager and captured, between
/// MegaOps kernels on 1 and 2 streams (cuBLASLt with and without a residual, a copy), also
/// with more data tiles than the side streams signal (its semaphores as one run); one the
/// proxy signals, and more chunks, still use the side streams, as every chunk does with
/// the switch off.
#[test]
fn one_chunk_subkernels_run_on_the_launch_stream_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("one_chunk_subkernels_run_on_the_launch_stream_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    assert!(dev.one_chunk_on_lane(), "on by default");
    let lt = CublasLt::new(&dev)?;
    let (k, n1, n2) = (32, 72, 40);
    let mut j = 0u64;
    // `Z` has data tiles of 32 rows: 5 of them at 150 rows, 19 at 600.
    for (m, chunks, signals, lane) in [
        (150, 1, ChunkSignals::SideStream, true),
        (600, 1, ChunkSignals::SideStream, true),
        (150, 1, ChunkSignals::Proxy, false),
        (150, 3, ChunkSignals::SideStream, false),
    ] {
        for (graph, residual) in [(false, false), (true, true)] {
            for streams in [1, 2] {
                let chain = Chain {
                    m,
                    k,
                    n1,
                    n2,
                    residual,
                    chunks: GemmChunks {
                        chunks,
                        along: GemmAxis::M,
                        align: 32,
                        signals,
                        ..GemmChunks::default()
                    },
                    graph,
                };
                j += 1;
                let side = chain.check(&dev, &lt, streams, seed.wrapping_add(j))?;
                assert_eq!(
                    side, !lane,
                    "{m} rows, {chunks} chunks, {signals:?}, graph {graph}, {streams} streams: side streams used"
                );
            }
        }
    }
    assert!(
        !check_copy(&dev, (130, 32, 48), 1, 16, seed ^ 7)?,
        "a one-chunk copy on the lane"
    );
    assert!(
        check_copy(&dev, (130, 32, 48), 3, 16, seed ^ 8)?,
        "three chunks on the side"
    );
    check_upload(&dev, (130, 48), 1, 16, seed ^ 9)?;
    // 19 data tiles of 16 rows.
    assert!(
        !check_copy(&dev, (300, 32, 48), 1, 16, seed ^ 11)?,
        "300 rows on the lane"
    );
    check_upload(&dev, (300, 48), 1, 16, seed ^ 12)?;
    dev.set_one_chunk_on_lane(false);
    assert!(
        check_copy(&dev, (130, 32, 48), 1, 16, seed ^ 10)?,
        "switched off: side streams"
    );
    Ok(())
}

/// Producer → copy subkernel → consumer: the copy waits for its rows of `Y` and signals
/// its rows of `Y2`, which the consumer waits for.
fn check_copy(dev: &Device, (m, k, n): (usize, usize, usize), chunks: usize, align: usize, seed: u64) -> Result<bool> {
    let x = random::<bf16>(m * k, 1.0, seed);
    let w = random::<bf16>(n * k, 1.0, seed ^ 1);
    let w2 = random::<bf16>(n * n, 0.5, seed ^ 2);
    let xt = Tensor::from_slice(dev, &[m, k], &x)?;
    let wt = Tensor::from_slice(dev, &[n, k], &w)?;
    let w2t = Tensor::from_slice(dev, &[n, n], &w2)?;
    let mut y = Tiled::new(dev, &[m, n], Rows::<64>, "y")?;
    let mut y2 = Tiled::new(dev, &[m, n], Rows::<16>, "y2")?;
    y2.tensor().fill(POISON)?;
    let mut o = Tensor::full(dev, &[m, n], POISON)?;
    let s = AsyncStream::new(dev, 2)?;
    let (mu, ku, nu) = (m as u32, k as u32, n as u32);
    let opts = LaunchOptions::default();
    matmul::launch_with(&s, &opts, &xt, &wt, &mut y, mu, nu, ku)?;
    let c = CopyChunks {
        chunks,
        align,
        ..CopyChunks::default()
    };
    copy_rows(&s, &y, &mut y2, &c)?;
    matmul::launch_with(&s, &opts, &y2, &w2t, &mut o, mu, nu, nu)?;
    s.synchronize()?;
    let y_out = y.to_vec()?;
    assert_eq!(
        y2.to_vec()?,
        y_out,
        "copy m={m} n={n} chunks {chunks} align {align}: Y2 is not Y"
    );
    assert_close(
        &format!("copy m={m} n={n} chunks {chunks} align {align}: O"),
        &o.to_vec()?,
        &reference(&f64s(&y_out), &f64s(&w2), None, m, n, n),
        TOL,
    );
    Ok(s.side_streams_used())
}

/// Page-locked host memory → upload subkernel (host-to-device, chunked) → consumer: the
/// consumer waits for the uploaded rows; eager and captured.
fn check_upload(dev: &Device, (m, n): (usize, usize), chunks: usize, align: usize, seed: u64) -> Result<()> {
    let v = random::<bf16>(m * n, 1.0, seed);
    let w = random::<bf16>(n * n, 0.5, seed ^ 1);
    let host = PinnedHost::from_slice(dev, &v)?;
    let wt = Tensor::from_slice(dev, &[n, n], &w)?;
    let mut y = Tiled::new(dev, &[m, n], Rows::<16>, "y")?;
    let mut o = Tensor::full(dev, &[m, n], POISON)?;
    let s = AsyncStream::new(dev, 2)?;
    let c = CopyChunks {
        chunks,
        align,
        ..CopyChunks::default()
    };
    let (mu, nu) = (m as u32, n as u32);
    let mut body = |s: &AsyncStream| -> Result<()> {
        y.rearm();
        upload_rows(s, &host, &mut y, &c)?;
        matmul::launch_with(s, &LaunchOptions::default(), &y, &wt, &mut o, mu, nu, nu)
    };
    body(&s)?;
    s.synchronize()?;
    let g = s.capture(&mut body)?;
    o.fill(POISON)?;
    g.launch(&s)?;
    s.synchronize()?;
    assert_eq!(y.to_vec()?, v, "upload m={m} n={n} chunks {chunks} align {align}");
    assert_close(
        &format!("upload m={m} n={n} chunks {chunks} align {align}: O"),
        &o.to_vec()?,
        &reference(&f64s(&v), &f64s(&w), None, m, n, n),
        TOL,
    );
    Ok(())
}

#[test]
fn copy_subkernels_between_megaops_kernels_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("copy_subkernels_between_megaops_kernels_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    // Every chunk on the side streams (one on the launch's stream is tested apart).
    dev.set_one_chunk_on_lane(false);
    // The destinations have data tiles of 16 rows: chunks aligned to 1 row cut them (the
    // proxy signals), aligned to 16 they do not (the side streams signal).
    for (i, chunks) in [1, 3, 7].into_iter().enumerate() {
        for align in [1, 16] {
            check_copy(&dev, (130, 32, 48), chunks, align, seed.wrapping_add(i as u64))?;
            check_upload(&dev, (130, 48), chunks, align, seed.wrapping_add(10 + i as u64))?;
        }
    }
    let s = AsyncStream::new(&dev, 2)?;
    let host = PinnedHost::from_slice(&dev, &[bf16::ONE; 10])?;
    let mut y = Tiled::new(&dev, &[4, 4], Rows::<1>, "y")?;
    let e = upload_rows(&s, &host, &mut y, &CopyChunks::default()).expect_err("10 values into 16");
    assert!(e.to_string().contains("an upload of 10 values"), "{e}");
    Ok(())
}

/// A consumer of a subkernel's output with more CTAs than the virtual GPU holds at once
/// (every one spins on the chunks' rows) launched right after it: the chunks must still
/// run. The AsyncStream holds the consumer until every chunk has started, on both
/// subkernel clients; the protocol has each row once.
#[test]
fn a_consumer_that_fills_every_sm_does_not_starve_the_chunks() -> Result<()> {
    use megaops_kernels::norm::rmsnorm;
    let seed = fresh_seed("a_consumer_that_fills_every_sm_does_not_starve_the_chunks");
    let dev = cpu_device(seed)?;
    let lt = CublasLt::new(&dev)?;
    let (m, k, n) = (300, 16, 64);
    let x = random::<bf16>(m * k, 1.0, seed);
    let w = random::<bf16>(n * k, 1.0, seed ^ 1);
    let xt = Tensor::from_slice(&dev, &[m, k], &x)?;
    let wt = Tensor::from_slice(&dev, &[n, k], &w)?;
    let gamma = Tensor::from_slice(&dev, &[n], &vec![bf16::ONE; n])?;
    let z = reference(&f64s(&x), &f64s(&w), None, m, n, k);
    // The GEMM's chunks and the 16-row-aligned copy's hold whole data tiles (side-stream
    // signals); the 1-row-aligned copy's cut them (the proxy signals).
    for (copy, align) in [(false, 16), (true, 1), (true, 16)] {
        let s = AsyncStream::new(&dev, 2)?;
        let mut c = Tiled::new(&dev, &[m, n], Rows::<16>, "c")?;
        let mut c2 = Tiled::new(&dev, &[m, n], Rows::<16>, "c2")?;
        let mut y = Tensor::full(&dev, &[m, n], POISON)?;
        let g = GemmChunks {
            chunks: 5,
            align: 16,
            ..GemmChunks::default()
        };
        lt.matmul(&s, &xt, &wt, None, &mut c, &g)?;
        let input = if copy {
            let cc = CopyChunks {
                align,
                ..CopyChunks::default()
            };
            copy_rows(&s, &c, &mut c2, &cc)?;
            &c2
        } else {
            &c
        };
        // One row per CTA: 300 CTAs of 256 threads, 16 of them resident at a time.
        rmsnorm::launch_with(
            &s,
            &LaunchOptions::config(0),
            input,
            &gamma,
            &mut y,
            m as u32,
            n as u32,
            1e-6,
        )?;
        s.synchronize()?;
        let c_out = c.to_vec()?;
        assert_close(&format!("copy {copy} align {align}: C"), &c_out, &z, TOL);
        let want: Vec<f64> = f64s(&c_out)
            .chunks(n)
            .flat_map(|r| {
                let rms = (r.iter().map(|v| v * v).sum::<f64>() / n as f64 + 1e-6).sqrt();
                r.iter().map(move |v| v / rms).collect::<Vec<_>>()
            })
            .collect();
        assert_close(
            &format!("copy {copy} align {align}: rmsnorm of C"),
            &y.to_vec()?,
            &want,
            TOL,
        );
    }
    Ok(())
}

/// Interop without adaptation: one plain cuBLASLt call on an ordinary stream between
/// MegaOps kernels on an AsyncStream, ordered by `block` (the stream waits for the
/// producer) and `wait_on` (the consumer waits for the stream).
#[test]
fn an_unadapted_call_joins_through_block_and_wait_on() -> Result<()> {
    let seed = fresh_seed("an_unadapted_call_joins_through_block_and_wait_on");
    let dev = cpu_device(seed)?;
    let lt = CublasLt::new(&dev)?;
    let (m, k, n) = (96, 32, 48);
    let x = random::<bf16>(m * k, 1.0, seed);
    let w1 = random::<bf16>(n * k, 1.0, seed ^ 1);
    let w2 = random::<bf16>(n * n, 0.5, seed ^ 2);
    let xt = Tensor::from_slice(&dev, &[m, k], &x)?;
    let w1t = Tensor::from_slice(&dev, &[n, k], &w1)?;
    let w2t = Tensor::from_slice(&dev, &[n, n], &w2)?;
    let mut y = Tensor::full(&dev, &[m, n], POISON)?;
    let mut z = Tensor::full(&dev, &[m, n], POISON)?;
    let mut o = Tensor::full(&dev, &[m, n], POISON)?;
    let s = AsyncStream::new(&dev, 2)?;
    let plain = Stream::new(&dev)?;
    let (mu, ku, nu) = (m as u32, k as u32, n as u32);
    matmul::launch_with(&s, &LaunchOptions::default(), &xt, &w1t, &mut y, mu, nu, ku)?;
    s.block(&plain)?;
    lt.matmul_on(&plain, &y, &w2t, None, &mut z)?;
    s.wait_on(&plain)?;
    matmul::launch_with(&s, &LaunchOptions::default(), &z, &w2t, &mut o, mu, nu, nu)?;
    s.synchronize()?;
    let y_out = y.to_vec()?;
    let z_out = z.to_vec()?;
    assert_close("y", &y_out, &reference(&f64s(&x), &f64s(&w1), None, m, n, k), TOL);
    assert_close("z", &z_out, &reference(&f64s(&y_out), &f64s(&w2), None, m, n, n), TOL);
    assert_close(
        "o",
        &o.to_vec()?,
        &reference(&f64s(&z_out), &f64s(&w2), None, m, n, n),
        TOL,
    );
    Ok(())
}

/// A subkernel whose input is never produced: on the GPU the proxy's wait times out (no
/// hang: the chunk is let go, the side streams drain); the error names the proxy's CTA,
/// the tensor and the data tile, and the device runs the next program.
fn a_missing_producer_times_out(dev: &Device, timeout: std::time::Duration) -> Result<()> {
    let s = AsyncStream::new(dev, 2)?;
    let mut y = Tiled::<bf16, Rows<16>>::new(dev, &[64, 32], Rows::<16>, "y")?;
    y.plant_missing_producer("produce", &[16, 0]);
    let mut y2 = Tiled::new(dev, &[64, 32], Rows::<16>, "y2")?;
    let c = CopyChunks {
        chunks: 2,
        launch: LaunchOptions::default().timeout(timeout),
        ..CopyChunks::default()
    };
    copy_rows(&s, &y, &mut y2, &c)?;
    let msg = s.synchronize().expect_err("nobody produces y").to_string();
    // A GPU times the wait out; the CPU backend sees at once that nothing can run and
    // reports the same waits as a deadlock, with the chunks held behind the proxy.
    let wait = if dev.is_cuda() {
        format!(") waited {:.1} s on y[", timeout.as_secs_f64())
    } else {
        ") waits on y[".to_string()
    };
    assert!(
        msg.lines()
            .any(|l| l.trim().starts_with("copy_rows CTA (") && l.contains(&wait)),
        "{msg}"
    );
    assert!(
        dev.is_cuda() || msg.contains("`copy_rows` chunk 1 (held until its proxy lets it go)"),
        "{msg}"
    );
    // The device recovers.
    check_copy(dev, (64, 32, 48), 2, 1, 5).map(|_| ())
}

#[test]
fn a_subkernel_whose_input_never_comes_times_out_on_the_cpu_backend() -> Result<()> {
    a_missing_producer_times_out(&cpu_device(11)?, std::time::Duration::from_secs(2))
}

#[test]
fn a_subkernel_whose_input_never_comes_times_out_on_the_gpu() -> Result<()> {
    let Some(dev) = gpu_or_skip("a_subkernel_whose_input_never_comes_times_out_on_the_gpu") else {
        return Ok(());
    };
    a_missing_producer_times_out(&dev, std::time::Duration::from_millis(500))
}

/// Bad input is an error before anything runs.
#[test]
fn subkernels_refuse_bad_input_with_a_clear_error() -> Result<()> {
    let dev = cpu_device(7)?;
    let lt = CublasLt::new(&dev)?;
    let s = AsyncStream::new(&dev, 2)?;
    let a = Tensor::<bf16>::zeros(&dev, &[64, 32])?;
    let w = Tensor::<bf16>::zeros(&dev, &[48, 32])?;
    let mut c = Tensor::<bf16>::zeros(&dev, &[64, 48])?;
    let expect = |r: Result<()>, what: &str, needle: &str| {
        let e = r.expect_err(what);
        assert!(e.to_string().contains(needle), "{what}: {e}");
    };
    for chunks in [0, 65] {
        let g = GemmChunks {
            chunks,
            ..GemmChunks::default()
        };
        expect(lt.matmul(&s, &a, &w, None, &mut c, &g), "chunk count", "1 to 64 chunks");
    }
    let wrong = Tensor::<bf16>::zeros(&dev, &[40, 32])?;
    expect(
        lt.matmul(&s, &a, &wrong, None, &mut c, &GemmChunks::default()),
        "W of the wrong shape",
        "w[n, k]",
    );
    let odd = Tensor::<bf16>::zeros(&dev, &[64, 30])?;
    let odd_w = Tensor::<bf16>::zeros(&dev, &[48, 30])?;
    expect(
        lt.matmul(&s, &odd, &odd_w, None, &mut c, &GemmChunks::default()),
        "k not a multiple of 8",
        "multiples of 8",
    );
    let mut bad = Tensor::<bf16>::zeros(&dev, &[64, 40])?;
    let stream = Stream::new(&dev)?;
    expect(
        lt.matmul_on(&stream, &a, &w, None, &mut bad),
        "C of the wrong shape",
        "c[m, n]",
    );
    // An armed (never produced) `Tiled` input cannot be read.
    let armed = Tiled::new(&dev, &[64, 32], Rows::<16>, "armed")?;
    let e = lt
        .matmul(&s, &armed, &w, None, &mut c, &GemmChunks::default())
        .expect_err("an armed input");
    assert!(matches!(e, Error::Tiling { .. }), "{e}");
    s.synchronize()?;
    Ok(())
}

/// Chunked cuBLASLt against one call, on the GPU: within bf16 tolerance of each other
/// and of the f64 reference; counts how many outputs match bitwise (cuBLASLt may pick
/// another algorithm for a chunk's shape).
fn chunked_against_one_call(dev: &Device, lt: &CublasLt, (m, n, k): (usize, usize, usize), seed: u64) -> Result<()> {
    let a = random::<bf16>(m * k, 1.0, seed);
    let w = random::<bf16>(n * k, 1.0, seed ^ 1);
    let at = Tensor::from_slice(dev, &[m, k], &a)?;
    let wt = Tensor::from_slice(dev, &[n, k], &w)?;
    let mut one = Tensor::full(dev, &[m, n], POISON)?;
    let stream = Stream::new(dev)?;
    lt.matmul_on(&stream, &at, &wt, None, &mut one)?;
    stream.synchronize()?;
    let one = one.to_vec()?;
    let want = reference(&f64s(&a), &f64s(&w), None, m, n, k);
    assert_close(&format!("one call {m}×{n}×{k}"), &one, &want, TOL);
    // The Rust GEMM on the same inputs: another summation order, so within bf16 rounding.
    let mut rust = Tensor::full(dev, &[m, n], POISON)?;
    let (mu, nu, ku) = (m as u32, n as u32, k as u32);
    matmul::launch_with(&stream, &LaunchOptions::default(), &at, &wt, &mut rust, mu, nu, ku)?;
    stream.synchronize()?;
    let rust = rust.to_vec()?;
    assert_close(&format!("Rust matmul {m}×{n}×{k}"), &rust, &want, TOL);
    assert_close(
        &format!("one call against the Rust matmul {m}×{n}×{k}"),
        &one,
        &f64s(&rust),
        TOL,
    );
    let same = one
        .iter()
        .zip(&rust)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count();
    eprintln!(
        "{m}×{n}×{k}: one call and the Rust matmul agree bitwise on {same} of {}",
        one.len()
    );
    let s = AsyncStream::new(dev, 2)?;
    for chunks in [1, 2, 4, 7, 16] {
        for (along, signals) in [
            (GemmAxis::M, ChunkSignals::SideStream),
            (GemmAxis::M, ChunkSignals::Proxy),
            (GemmAxis::N, ChunkSignals::SideStream),
        ] {
            let mut c = Tiled::new(dev, &[m, n], Rows::<64>, "c")?;
            c.tensor().fill(POISON)?;
            let g = GemmChunks {
                chunks,
                along,
                align: 64,
                signals,
                ..GemmChunks::default()
            };
            lt.matmul(&s, &at, &wt, None, &mut c, &g)?;
            s.synchronize()?;
            let got = c.to_vec()?;
            let what = format!("{m}×{n}×{k} {along:?} chunks {chunks} {signals:?}");
            assert_close(&what, &got, &want, TOL);
            let same = got.iter().zip(&one).filter(|(x, y)| x.to_bits() == y.to_bits()).count();
            eprintln!("{what}: {same} of {} outputs bitwise equal to one call", got.len());
        }
    }
    Ok(())
}

#[test]
fn cublaslt_subkernels_on_the_gpu() -> Result<()> {
    let Some(dev) = gpu_or_skip("cublaslt_subkernels_on_the_gpu") else {
        return Ok(());
    };
    let seed = fresh_seed("cublaslt_subkernels_on_the_gpu");
    let lt = CublasLt::new(&dev)?;
    // Every chunk on the side streams first; one chunk on the launch's stream below.
    dev.set_one_chunk_on_lane(false);
    for (i, shape) in [(1024, 1024, 1024), (1000, 1000, 520), (37, 520, 264)]
        .into_iter()
        .enumerate()
    {
        chunked_against_one_call(&dev, &lt, shape, seed.wrapping_add(i as u64))?;
    }
    for (j, chain) in chains(false).iter().enumerate() {
        chain.check(&dev, &lt, 2, seed.wrapping_add(100 + j as u64))?;
    }
    // One chunk on the launch's own stream, eager and captured: 512 rows make 16 data
    // tiles of `Z`, 1000 rows 32 (its stream sets their semaphores as one run).
    dev.set_one_chunk_on_lane(true);
    for (j, (m, graph, residual)) in [(512, false, false), (512, true, true), (1000, false, true)]
        .into_iter()
        .enumerate()
    {
        let chain = Chain {
            m,
            k: 256,
            n1: 512,
            n2: 776,
            residual,
            chunks: GemmChunks {
                chunks: 1,
                along: GemmAxis::M,
                align: 32,
                ..GemmChunks::default()
            },
            graph,
        };
        let side = chain.check(&dev, &lt, 2, seed.wrapping_add(200 + j as u64))?;
        assert!(!side, "one chunk of {m} rows, graph {graph}: side streams used");
    }
    dev.set_one_chunk_on_lane(false);
    Ok(())
}

#[test]
fn copy_subkernels_on_the_gpu() -> Result<()> {
    let Some(dev) = gpu_or_skip("copy_subkernels_on_the_gpu") else {
        return Ok(());
    };
    let seed = fresh_seed("copy_subkernels_on_the_gpu");
    dev.set_one_chunk_on_lane(false);
    for (i, chunks) in [1, 4, 16].into_iter().enumerate() {
        for align in [1, 16] {
            check_copy(&dev, (1000, 256, 512), chunks, align, seed.wrapping_add(i as u64))?;
            check_upload(&dev, (1000, 512), chunks, align, seed.wrapping_add(10 + i as u64))?;
        }
    }
    // One chunk on the launch's own stream: 256 rows are 16 data tiles of 16 rows, 1000
    // rows 63 (its stream sets their semaphores as one run).
    dev.set_one_chunk_on_lane(true);
    assert!(
        !check_copy(&dev, (256, 256, 512), 1, 16, seed ^ 20)?,
        "256 rows: on the lane"
    );
    assert!(
        !check_copy(&dev, (1000, 256, 512), 1, 16, seed ^ 21)?,
        "1000 rows: on the lane"
    );
    check_upload(&dev, (1000, 512), 1, 16, seed ^ 22)?;
    dev.set_one_chunk_on_lane(false);
    // One plain copy-engine transfer, the unadapted form.
    let v = random::<bf16>(1000 * 1024, 1.0, seed);
    let src = Tensor::from_slice(&dev, &[1000, 1024], &v)?;
    let mut dst = Tensor::full(&dev, &[1000, 1024], POISON)?;
    let stream = Stream::new(&dev)?;
    megaops::subkernel::copy::copy_on(&stream, &src, &mut dst)?;
    stream.synchronize()?;
    assert_eq!(dst.to_vec()?, v, "copy_on");
    Ok(())
}
