//! The decode GEMV kernels against f64 references: `gemv`, `gemv_splitk`, `gate_up_silu`,
//! `gate_up_silu_splitk` and `lm_head` with fresh random inputs and poisoned outputs, at
//! awkward sizes (n and k not multiples of any tile, `k % 8 != 0` on the 2-byte path,
//! misaligned x, m = 1, 8, 9, 16 and above 16), every tile config, several splits and
//! repeated launches (the split-K counters must re-arm); a producer → consumer chain of
//! `Tiled` tensors on an AsyncStream; and (with a GPU) the real decode shapes of Qwen3
//! and Llama-3.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{AsyncStream, Device, DynGrid, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::gemv::plan::{self, Placement, SplitWorkspace};
use megaops_kernels::gemv::{gate_up_silu, gate_up_silu_splitk, gemv, gemv_splitk, lm_head};

/// bf16 NaN: every element a kernel forgets to write fails the comparison.
const POISON: bf16 = bf16::from_bits(0xffc0);
/// Tolerance for bf16 outputs (one bf16 rounding: ~2e-3 relative).
const TOL_BF16: f64 = 1e-2;
/// Tolerance for f32 outputs of bf16 products (f32 accumulation only).
const TOL_F32: f64 = 1e-5;

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `y[i, j] = Σ_k x[i, k] · w[j, k]` in f64.
fn matmul_nt(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        for j in 0..n {
            y[i * n + j] = xr.iter().zip(&w[j * k..(j + 1) * k]).map(|(a, b)| a * b).sum();
        }
    }
    y
}

fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

/// `h[i, j] = silu(g) · u`, gate rows `0..inter` and up rows `inter..2·inter` of `w`.
fn gate_up_ref(x: &[f64], w: &[f64], m: usize, inter: usize, k: usize) -> Vec<f64> {
    let gu = matmul_nt(x, w, m, 2 * inter, k);
    let mut h = Vec::with_capacity(m * inter);
    for row in gu.chunks(2 * inter) {
        h.extend((0..inter).map(|j| silu(row[j]) * row[inter + j]));
    }
    h
}

/// A problem: inputs drawn from `seed`, x scaled so outputs are O(1).
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    x: Vec<bf16>,
    w: Vec<bf16>,
}

impl Problem {
    /// `rows` rows of W (n, or 2·inter for gate+up).
    fn new(m: usize, rows: usize, k: usize, seed: u64) -> Problem {
        let scale = 2.0 / (k.max(1) as f64).sqrt();
        Problem {
            m,
            n: rows,
            k,
            x: random(m * k, 1.0, seed),
            w: random(rows * k, scale, seed ^ 0xabcd),
        }
    }

    fn tensors(&self, dev: &Device) -> Result<(Tensor<bf16>, Tensor<bf16>)> {
        Ok((
            Tensor::from_slice(dev, &[self.m, self.k], &self.x)?,
            Tensor::from_slice(dev, &[self.n, self.k], &self.w)?,
        ))
    }

    fn reference(&self) -> Vec<f64> {
        matmul_nt(&f64s(&self.x), &f64s(&self.w), self.m, self.n, self.k)
    }
}

fn check_gemv(dev: &Device, m: usize, n: usize, k: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let p = Problem::new(m, n, k, seed);
    let (x, w) = p.tensors(dev)?;
    let mut y = Tensor::full(dev, &[m, n], POISON)?;
    gemv::launch_with(
        &s,
        &LaunchOptions::config(config),
        &x,
        &w,
        &mut y,
        m as u32,
        n as u32,
        k as u32,
    )?;
    assert_close(
        &format!("gemv m={m} n={n} k={k} config {config}"),
        &y.to_vec()?,
        &p.reference(),
        TOL_BF16,
    );
    Ok(())
}

/// Two launches with fresh inputs through the same workspace: the second only works if
/// the first left every counter at zero (checked at the end too).
fn check_gemv_splitk(dev: &Device, m: usize, n: usize, k: usize, config: usize, splits: u32, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let mut ws = SplitWorkspace::new(dev, m, n, splits as usize, 1)?;
    for round in 0..2u64 {
        let p = Problem::new(m, n, k, seed ^ (round << 40));
        let (x, w) = p.tensors(dev)?;
        let mut y = Tensor::full(dev, &[m, n], POISON)?;
        let opts = LaunchOptions::config(config);
        let (mu, nu, ku) = (m as u32, n as u32, k as u32);
        gemv_splitk::launch_with(
            &s,
            &opts,
            &x,
            &w,
            &mut y,
            &mut ws.ws,
            &mut ws.counters,
            mu,
            nu,
            ku,
            splits,
        )?;
        let what = format!("gemv_splitk m={m} n={n} k={k} config {config} splits {splits} round {round}");
        assert_close(&what, &y.to_vec()?, &p.reference(), TOL_BF16);
    }
    assert!(
        ws.counters.to_vec()?.iter().all(|&c| c == 0),
        "split-K counters not re-armed"
    );
    Ok(())
}

fn check_gate_up(dev: &Device, m: usize, inter: usize, k: usize, config: usize, splits: u32, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let mut ws = SplitWorkspace::new(dev, m, inter, splits as usize, 2)?;
    for round in 0..2u64 {
        let p = Problem::new(m, 2 * inter, k, seed ^ (round << 40));
        let (x, w) = p.tensors(dev)?;
        let mut h = Tensor::full(dev, &[m, inter], POISON)?;
        let opts = LaunchOptions::config(config);
        let (mu, iu, ku) = (m as u32, inter as u32, k as u32);
        if splits == 1 {
            gate_up_silu::launch_with(&s, &opts, &x, &w, &mut h, mu, iu, ku)?;
        } else {
            gate_up_silu_splitk::launch_with(
                &s,
                &opts,
                &x,
                &w,
                &mut h,
                &mut ws.ws,
                &mut ws.counters,
                mu,
                iu,
                ku,
                splits,
            )?;
        }
        let want = gate_up_ref(&f64s(&p.x), &f64s(&p.w), m, inter, k);
        let what = format!("gate_up_silu m={m} inter={inter} k={k} config {config} splits {splits} round {round}");
        assert_close(&what, &h.to_vec()?, &want, TOL_BF16);
    }
    assert!(
        ws.counters.to_vec()?.iter().all(|&c| c == 0),
        "split-K counters not re-armed"
    );
    Ok(())
}

fn check_lm_head(dev: &Device, m: usize, vocab: usize, k: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let p = Problem::new(m, vocab, k, seed);
    let (x, w) = p.tensors(dev)?;
    let mut logits = Tensor::full(dev, &[m, vocab], f32::from_bits(megaops::testing::POISON_WORD))?;
    lm_head::launch_with(
        &s,
        &LaunchOptions::config(config),
        &x,
        &w,
        &mut logits,
        m as u32,
        vocab as u32,
        k as u32,
    )?;
    let what = format!("lm_head m={m} vocab={vocab} k={k} config {config}");
    assert_close(&what, &logits.to_vec()?, &p.reference(), TOL_F32);
    Ok(())
}

/// (m, n, k): n and k off every tile size; m on both n-tile counts and the single-tile
/// fast path (m ≤ 8).
const SHAPES: [(usize, usize, usize); 4] = [(1, 40, 64), (16, 200, 520), (5, 130, 264), (9, 17, 1000)];

#[test]
fn gemv_every_config_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("gemv_every_config_on_the_cpu_backend");
    for vgpu in 0..2u64 {
        let dev = cpu_device(seed.wrapping_add(vgpu))?;
        for (i, &(m, n, k)) in SHAPES.iter().enumerate() {
            for config in 0..gemv::CONFIGS.len() {
                if (i + config + vgpu as usize).is_multiple_of(2) {
                    check_gemv(&dev, m, n, k, config, seed ^ (i as u64) << 8 ^ config as u64)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn gemv_slow_paths_and_many_tokens_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("gemv_slow_paths_and_many_tokens_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    // k % 8 != 0: rows not 16-byte aligned, 2-byte loads, partial 8-element pieces.
    check_gemv(&dev, 3, 50, 37, 0, seed)?;
    check_gemv(&dev, 16, 33, 1001, 2, seed + 1)?;
    // m > 16: several passes over W (the second without the prefetched batches).
    check_gemv(&dev, 20, 70, 96, 1, seed + 2)?;
    check_gemv(&dev, 33, 20, 200, 3, seed + 3)?;
    // x at a 2-byte offset (k % 8 == 0 but x misaligned): the 2-byte path for everything.
    let s = Stream::new(&dev)?;
    let (m, n, k) = (4usize, 48usize, 72usize);
    let p = Problem::new(m, n, k, seed + 4);
    let mut padded = vec![bf16::ZERO; m * k + 1];
    padded[1..].copy_from_slice(&p.x);
    let x = Tensor::from_slice(&dev, &[m * k + 1], &padded)?
        .narrow(1, m * k + 1)?
        .reshape(&[m, k])?;
    let w = Tensor::from_slice(&dev, &[n, k], &p.w)?;
    let mut y = Tensor::full(&dev, &[m, n], POISON)?;
    gemv::launch(&s, &x, &w, &mut y, m as u32, n as u32, k as u32)?;
    assert_close("gemv with misaligned x", &y.to_vec()?, &p.reference(), TOL_BF16);
    Ok(())
}

#[test]
fn gemv_splitk_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("gemv_splitk_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let cases = [
        (1, 40, 512, 0, 2),
        (16, 70, 600, 1, 3),
        (8, 33, 256, 3, 5),
        (9, 20, 1000, 2, 8),
        (2, 64, 96, 4, 4),
        (17, 30, 130, 5, 2),
    ];
    for (i, &(m, n, k, config, splits)) in cases.iter().enumerate() {
        check_gemv_splitk(&dev, m, n, k, config, splits, seed.wrapping_add(i as u64))?;
    }
    // More splits than batches: some CTAs have no k at all and still take their ticket.
    check_gemv_splitk(&dev, 3, 16, 40, 3, 6, seed + 99)?;
    Ok(())
}

#[test]
fn gate_up_silu_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("gate_up_silu_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for config in 0..gate_up_silu::CONFIGS.len() {
        let (m, inter, k) = [(1, 70, 200), (16, 40, 136), (7, 33, 64), (12, 16, 333)][config % 4];
        check_gate_up(&dev, m, inter, k, config, 1, seed.wrapping_add(config as u64))?;
        check_gate_up(
            &dev,
            m,
            inter,
            k,
            config,
            1 + config as u32 % 3 + 1,
            seed.wrapping_add(10 + config as u64),
        )?;
    }
    Ok(())
}

#[test]
fn lm_head_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("lm_head_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for config in 0..lm_head::CONFIGS.len() {
        let (m, vocab, k) = [(1, 300, 128), (16, 257, 96), (3, 129, 72)][config % 3];
        check_lm_head(&dev, m, vocab, k, config, seed.wrapping_add(config as u64))?;
    }
    Ok(())
}

/// A decoder MLP and the next projection as a chain of `Tiled` tensors on an AsyncStream
/// of three streams, launched twice (the second time after `rearm`):
/// `a = x·W1ᵀ` (gemv, 2-D data tiles) → `b = a·W2ᵀ` (gemv_splitk, row-less column tiles)
/// → `h = silu(b·Wgᵀ)·(b·Wuᵀ)` (gate_up_silu) → `y = h·Wdᵀ` (plan::linear, plain output).
/// Each stage is checked against the reference of its actual input, so an error points
/// at the stage that made it.
#[test]
fn tiled_chain_on_an_async_stream() -> Result<()> {
    let seed = fresh_seed("tiled_chain_on_an_async_stream");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 3)?;
        let (m, h0, h1, inter) = (5usize, 96usize, 80usize, 48usize);
        let r = seed ^ (round << 32);
        let x = random::<bf16>(m * h0, 1.0, r);
        let w1 = random::<bf16>(h1 * h0, 0.2, r ^ 1);
        let w2 = random::<bf16>(h1 * h1, 0.2, r ^ 2);
        let wgu = random::<bf16>(2 * inter * h1, 0.2, r ^ 3);
        let wd = random::<bf16>(h0 * inter, 0.2, r ^ 4);
        let xt = Tensor::from_slice(&dev, &[m, h0], &x)?;
        let (w1t, w2t) = (
            Tensor::from_slice(&dev, &[h1, h0], &w1)?,
            Tensor::from_slice(&dev, &[h1, h1], &w2)?,
        );
        let (wgut, wdt) = (
            Tensor::from_slice(&dev, &[2 * inter, h1], &wgu)?,
            Tensor::from_slice(&dev, &[h0, inter], &wd)?,
        );
        let mut a = Tiled::<bf16, DynGrid>::new(&dev, &[m, h1], DynGrid(2, 32), "a")?;
        let mut b = Tiled::<bf16, DynGrid>::new(&dev, &[m, h1], DynGrid(8, 16), "b")?;
        let mut hh = Tiled::<bf16, DynGrid>::new(&dev, &[m, inter], DynGrid(3, 24), "h")?;
        let mut y = Tensor::full(&dev, &[m, h0], POISON)?;
        let mut ws = SplitWorkspace::new(&dev, m, h1, 4, 1)?;
        let mut ws_down = SplitWorkspace::new(&dev, m, h0, plan::MAX_SPLITS as usize, 1)?;
        let (mu, h0u, h1u, iu) = (m as u32, h0 as u32, h1 as u32, inter as u32);
        for pass in 0..2 {
            if pass == 1 {
                a.rearm();
                b.rearm();
                hh.rearm();
            }
            let cfg = |i: usize, n: usize| LaunchOptions::config((i + round as usize + pass) % n);
            gemv::launch_with(&s, &cfg(0, gemv::CONFIGS.len()), &xt, &w1t, &mut a, mu, h1u, h0u)?;
            let splits = 2 + pass as u32;
            let opts = cfg(1, gemv_splitk::CONFIGS.len());
            gemv_splitk::launch_with(
                &s,
                &opts,
                &a,
                &w2t,
                &mut b,
                &mut ws.ws,
                &mut ws.counters,
                mu,
                h1u,
                h1u,
                splits,
            )?;
            gate_up_silu::launch_with(
                &s,
                &cfg(2, gate_up_silu::CONFIGS.len()),
                &b,
                &wgut,
                &mut hh,
                mu,
                iu,
                h1u,
            )?;
            plan::linear(
                &s,
                &hh,
                &wdt,
                &mut y,
                Some(&mut ws_down),
                mu,
                h0u,
                iu,
                Placement::BesideProducer,
            )?;
            s.synchronize()?;
            let (av, bv, hv) = (a.to_vec()?, b.to_vec()?, hh.to_vec()?);
            let what = |stage: &str| format!("chain round {round} pass {pass}: {stage}");
            assert_close(&what("a"), &av, &matmul_nt(&f64s(&x), &f64s(&w1), m, h1, h0), TOL_BF16);
            assert_close(&what("b"), &bv, &matmul_nt(&f64s(&av), &f64s(&w2), m, h1, h1), TOL_BF16);
            assert_close(
                &what("h"),
                &hv,
                &gate_up_ref(&f64s(&bv), &f64s(&wgu), m, inter, h1),
                TOL_BF16,
            );
            assert_close(
                &what("y"),
                &y.to_vec()?,
                &matmul_nt(&f64s(&hv), &f64s(&wd), m, h0, inter),
                TOL_BF16,
            );
            y.fill(POISON)?;
        }
    }
    Ok(())
}

/// The planner's choices on a virtual GPU of 16 SMs (more would exceed the host's limit on
/// coroutine stacks), through [`plan::linear`] and [`plan::gate_up`]: Qwen3-0.6B's o
/// projection at m = 16 and its down projection at m = 1 (enough column tiles: no split,
/// as measured best on the H200), outputs narrow enough that the planner splits k, and a
/// gate+up of each kind.
/// Ticket counters left raised by a failed launch (simulated by writing them) are zeroed
/// when the device reports a synchronisation failure (here a consumer whose producer never
/// runs: a CPU-backend deadlock), so the next split-K launch on the same workspace is
/// right.
#[test]
fn a_reported_failure_rezeroes_the_split_k_tickets() -> Result<()> {
    let seed = fresh_seed("a_reported_failure_rezeroes_the_split_k_tickets");
    let dev = cpu_device(seed)?;
    let (m, n, k, splits) = (2usize, 40usize, 256usize, 4u32);
    let mut ws = SplitWorkspace::new(&dev, m, n, splits as usize, 1)?;
    let dirty = vec![3u32; ws.counters.numel()];
    ws.counters.copy_from_slice(&dirty)?;
    // A launch that fails: its input's producer never runs.
    let s = AsyncStream::new(&dev, 2)?;
    let mut x = Tiled::<bf16, DynGrid>::new(&dev, &[m, k], DynGrid(m as u32, 64), "x")?;
    x.plant_missing_producer("nobody", &[0, 64]);
    let w = Tensor::from_slice(&dev, &[n, k], &random::<bf16>(n * k, 0.1, seed))?;
    let mut y = Tensor::full(&dev, &[m, n], POISON)?;
    let opts = LaunchOptions::config(0);
    let (mu, nu, ku) = (m as u32, n as u32, k as u32);
    gemv_splitk::launch_with(
        &s,
        &opts,
        &x,
        &w,
        &mut y,
        &mut ws.ws,
        &mut ws.counters,
        mu,
        nu,
        ku,
        splits,
    )?;
    let err = s.synchronize().expect_err("the input is never produced");
    assert!(err.to_string().contains("waits on x["), "{err}");
    assert!(
        ws.counters.to_vec()?.iter().all(|&c| c == 0),
        "ticket counters not re-zeroed after the failure"
    );
    // The next launch on the same workspace.
    let p = Problem::new(m, n, k, seed ^ 1);
    let (x, w) = p.tensors(&dev)?;
    gemv_splitk::launch_with(
        &s,
        &opts,
        &x,
        &w,
        &mut y,
        &mut ws.ws,
        &mut ws.counters,
        mu,
        nu,
        ku,
        splits,
    )?;
    assert_close("split-K after a failure", &y.to_vec()?, &p.reference(), TOL_BF16);
    Ok(())
}

#[test]
fn planner_choices_at_model_shapes_on_a_16_sm_virtual_gpu() -> Result<()> {
    let seed = fresh_seed("planner_choices_at_model_shapes_on_a_16_sm_virtual_gpu");
    let config = megaops::VgpuConfig {
        sms: 16,
        max_threads_per_sm: 256,
        max_threads_per_cta: 256,
        seed,
        ..megaops::VgpuConfig::default()
    };
    let dev = Device::cpu(config)?;
    let s = Stream::new(&dev)?;
    let mut ws = SplitWorkspace::new(&dev, 16, 1024, plan::MAX_SPLITS as usize, 2)?;
    for (m, n, k, split) in [
        (16usize, 1024usize, 2048usize, false),
        (1, 1024, 3072, false),
        (16, 48, 2048, true),
        (1, 32, 3072, true),
    ] {
        let p = Problem::new(m, n, k, seed ^ n as u64 ^ k as u64);
        let (x, w) = p.tensors(&dev)?;
        let mut y = Tensor::full(&dev, &[m, n], POISON)?;
        let c = plan::linear(
            &s,
            &x,
            &w,
            &mut y,
            Some(&mut ws),
            m as u32,
            n as u32,
            k as u32,
            Placement::Alone,
        )?;
        assert_eq!(c.splits > 1, split, "n = {n} on 16 SMs: {c:?}");
        assert_close(
            &format!("linear m={m} n={n} k={k} ({c:?})"),
            &y.to_vec()?,
            &p.reference(),
            TOL_BF16,
        );
    }
    for (m, inter, k, split) in [(4usize, 512usize, 1024usize, false), (3, 16, 2048, true)] {
        let p = Problem::new(m, 2 * inter, k, seed ^ 0x9a7e ^ inter as u64);
        let (x, w) = p.tensors(&dev)?;
        let mut h = Tensor::full(&dev, &[m, inter], POISON)?;
        let c = plan::gate_up(
            &s,
            &x,
            &w,
            &mut h,
            Some(&mut ws),
            m as u32,
            inter as u32,
            k as u32,
            Placement::Alone,
        )?;
        assert_eq!(c.splits > 1, split, "gate_up inter = {inter} on 16 SMs: {c:?}");
        let want = gate_up_ref(&f64s(&p.x), &f64s(&p.w), m, inter, k);
        assert_close(
            &format!("gate_up m={m} inter={inter} k={k} ({c:?})"),
            &h.to_vec()?,
            &want,
            TOL_BF16,
        );
    }
    assert!(
        ws.counters.to_vec()?.iter().all(|&c| c == 0),
        "split-K counters not re-armed"
    );
    Ok(())
}

/// The decode shapes of the benchmarked models (QKV, o, gate+up, down) and LM heads.
#[test]
fn gemv_on_the_gpu_at_model_shapes() -> Result<()> {
    let Some(dev) = gpu_or_skip("gemv_on_the_gpu_at_model_shapes") else {
        return Ok(());
    };
    let seed = fresh_seed("gemv_on_the_gpu_at_model_shapes");
    // (hidden, inter, q, kv) of Qwen3-0.6B, Qwen3-1.7B, Qwen3-8B, Llama-3.2-1B.
    let models = [
        (1024, 3072, 2048, 1024),
        (2048, 6144, 2048, 1024),
        (4096, 12288, 4096, 1024),
        (2048, 8192, 2048, 512),
    ];
    for (i, &(hidden, inter, q, kv)) in models.iter().enumerate() {
        for m in [1usize, 16] {
            let sd = seed.wrapping_add(10 * i as u64 + m as u64);
            let s = Stream::new(&dev)?;
            let max_n = (q + 2 * kv).max(hidden).max(inter);
            let mut ws = SplitWorkspace::new(&dev, m, max_n, plan::MAX_SPLITS as usize, 2)?;
            for (n, k) in [(q + 2 * kv, hidden), (hidden, q), (hidden, inter)] {
                let p = Problem::new(m, n, k, sd ^ n as u64);
                let (x, w) = p.tensors(&dev)?;
                let mut y = Tensor::full(&dev, &[m, n], POISON)?;
                let c = plan::linear(
                    &s,
                    &x,
                    &w,
                    &mut y,
                    Some(&mut ws),
                    m as u32,
                    n as u32,
                    k as u32,
                    Placement::Alone,
                )?;
                assert_close(
                    &format!("linear m={m} n={n} k={k} ({c:?})"),
                    &y.to_vec()?,
                    &p.reference(),
                    TOL_BF16,
                );
            }
            let p = Problem::new(m, 2 * inter, hidden, sd ^ 77);
            let (x, w) = p.tensors(&dev)?;
            let mut hh = Tensor::full(&dev, &[m, inter], POISON)?;
            let c = plan::gate_up(
                &s,
                &x,
                &w,
                &mut hh,
                Some(&mut ws),
                m as u32,
                inter as u32,
                hidden as u32,
                Placement::Alone,
            )?;
            let want = gate_up_ref(&f64s(&p.x), &f64s(&p.w), m, inter, hidden);
            assert_close(
                &format!("gate_up m={m} inter={inter} k={hidden} ({c:?})"),
                &hh.to_vec()?,
                &want,
                TOL_BF16,
            );
        }
    }
    // Every config once at an awkward large shape, plain and split.
    for config in 0..gemv::CONFIGS.len() {
        check_gemv(&dev, 16, 3001, 2056, config, seed + config as u64)?;
        check_gemv_splitk(&dev, 7, 1000, 4104, config, 3, seed + 50 + config as u64)?;
    }
    for config in 0..gate_up_silu::CONFIGS.len() {
        check_gate_up(
            &dev,
            9,
            1500,
            1032,
            config,
            1 + config as u32,
            seed + 100 + config as u64,
        )?;
    }
    // LM heads: Qwen3 (tied, hidden 1024) and Llama-3 (hidden 2048).
    for (config, &(vocab, k)) in [
        (151_936usize, 1024usize),
        (128_256, 2048),
        (151_936, 1024),
        (128_256, 2048),
        (151_936, 1024),
    ]
    .iter()
    .enumerate()
    {
        check_lm_head(&dev, [1, 16, 5, 16, 9][config], vocab, k, config, seed + 200)?;
    }
    Ok(())
}
