//! The GEMV kernels with the decoder layer's residual add and RMSNorm in front
//! (`add_rmsnorm_gemv`, `add_rmsnorm_gate_up_silu`) against f64 references: every config,
//! the vector and the scalar path (`k % 8 != 0`), m = 1…16, the new residual bit for bit,
//! poisoned outputs and scratch, repeated launches; the planner's fusion rule; a chain of
//! `Tiled` tensors on an AsyncStream whose consumers read both outputs; bad input; and
//! (with a GPU) the decode shapes of Qwen3 and Llama-3. The same for the projection with
//! the add + RMSNorm behind it (`gemv_add_rmsnorm`), against `gemv` then `add_rmsnorm`.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{AsyncStream, Device, DynGrid, DynRows, Error, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::gemv::plan::{self, AddNorm, Pick, Placement};
use megaops_kernels::gemv::{
    NORM_PROLOGUE_MAX_ELEMS, add_rmsnorm_gate_up_silu, add_rmsnorm_gemv, gate_up_silu, gemv, gemv_add_rmsnorm,
};
use megaops_kernels::norm::add_rmsnorm;

/// bf16 NaN: every element a kernel forgets to write fails the comparison.
const POISON: bf16 = bf16::from_bits(0xffc0);
/// Tolerance for bf16 outputs of a bf16 input that may differ by one rounding.
const TOL_BF16: f64 = 1e-2;
const EPS: f32 = 1e-6;
/// `(hidden, inter, q_dim, kv_dim)` of Qwen3-0.6B, Qwen3-1.7B, Qwen3-8B and Llama-3.2-1B:
/// the decode shapes of the GPU tests.
const MODELS: [(usize, usize, usize, usize); 4] = [
    (1024, 3072, 2048, 1024),
    (2048, 6144, 2048, 1024),
    (4096, 12288, 4096, 1024),
    (2048, 8192, 2048, 512),
];

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `bf16(x + res)`, as the kernels round it (an f32 sum of two bf16 is exact).
fn residual(x: &[bf16], res: &[bf16]) -> Vec<bf16> {
    x.iter()
        .zip(res)
        .map(|(a, b)| bf16::from_f32(a.to_f32() + b.to_f32()))
        .collect()
}

/// `bf16(sum · rstd · w)` per row of `k`, in f64 from the bf16 sums.
fn normed(sum: &[bf16], w: &[bf16], k: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(sum.len());
    for row in sum.chunks(k) {
        let ms = row.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>() / k as f64;
        let rstd = 1.0 / (ms + EPS as f64).sqrt();
        out.extend(
            row.iter()
                .zip(w)
                .map(|(v, w)| bf16::from_f64(v.to_f64() * rstd * w.to_f64()).to_f64()),
        );
    }
    out
}

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

fn gate_up_ref(x: &[f64], w: &[f64], m: usize, inter: usize, k: usize) -> Vec<f64> {
    let gu = matmul_nt(x, w, m, 2 * inter, k);
    let mut h = Vec::with_capacity(m * inter);
    for row in gu.chunks(2 * inter) {
        h.extend((0..inter).map(|j| {
            let g = row[j];
            g / (1.0 + (-g).exp()) * row[inter + j]
        }));
    }
    h
}

/// Inputs of one fused projection: `rows` rows of W (n, or 2·inter for gate/up).
struct Problem {
    m: usize,
    k: usize,
    rows: usize,
    x: Vec<bf16>,
    res: Vec<bf16>,
    norm_w: Vec<bf16>,
    w: Vec<bf16>,
}

impl Problem {
    fn new(m: usize, rows: usize, k: usize, seed: u64) -> Problem {
        Problem {
            m,
            k,
            rows,
            x: random(m * k, 1.0, seed),
            res: random(m * k, 2.0, seed ^ 1),
            norm_w: random(k, 1.5, seed ^ 2),
            w: random(rows * k, 2.0 / (k as f64).sqrt(), seed ^ 3),
        }
    }

    /// The normalised input the projection multiplies, in f64.
    fn xn(&self) -> Vec<f64> {
        normed(&residual(&self.x, &self.res), &self.norm_w, self.k)
    }
}

struct Bound {
    x: Tensor<bf16>,
    res: Tensor<bf16>,
    norm_w: Tensor<bf16>,
    w: Tensor<bf16>,
    res_out: Tensor<bf16>,
    scratch: Tensor<bf16>,
}

fn bind(dev: &Device, p: &Problem, n: usize) -> Result<Bound> {
    Ok(Bound {
        x: Tensor::from_slice(dev, &[p.m, p.k], &p.x)?,
        res: Tensor::from_slice(dev, &[p.m, p.k], &p.res)?,
        norm_w: Tensor::from_slice(dev, &[p.k], &p.norm_w)?,
        w: Tensor::from_slice(dev, &[p.rows, p.k], &p.w)?,
        res_out: Tensor::full(dev, &[p.m, p.k], POISON)?,
        scratch: Tensor::full(dev, &[plan::add_norm_scratch_len(p.m, n, p.k)], POISON)?,
    })
}

fn check_linear(dev: &Device, m: usize, n: usize, k: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    for round in 0..2u64 {
        let p = Problem::new(m, n, k, seed ^ (round << 40));
        let mut b = bind(dev, &p, n)?;
        let mut y = Tensor::full(dev, &[m, n], POISON)?;
        let (mu, nu, ku) = (m as u32, n as u32, k as u32);
        add_rmsnorm_gemv::launch_with(
            &s,
            &LaunchOptions::config(config),
            &b.x,
            &b.res,
            &b.norm_w,
            &b.w,
            &mut y,
            &mut b.res_out,
            &mut b.scratch,
            mu,
            nu,
            ku,
            EPS,
        )?;
        let what = format!("add_rmsnorm_gemv m={m} n={n} k={k} config {config} round {round}");
        assert_eq!(b.res_out.to_vec()?, residual(&p.x, &p.res), "{what}: res_out");
        let want = matmul_nt(&p.xn(), &f64s(&p.w), m, n, k);
        assert_close(&what, &y.to_vec()?, &want, TOL_BF16);
    }
    Ok(())
}

fn check_gate_up(dev: &Device, m: usize, inter: usize, k: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    for round in 0..2u64 {
        let p = Problem::new(m, 2 * inter, k, seed ^ (round << 40));
        let mut b = bind(dev, &p, inter)?;
        let mut h = Tensor::full(dev, &[m, inter], POISON)?;
        let (mu, iu, ku) = (m as u32, inter as u32, k as u32);
        add_rmsnorm_gate_up_silu::launch_with(
            &s,
            &LaunchOptions::config(config),
            &b.x,
            &b.res,
            &b.norm_w,
            &b.w,
            &mut h,
            &mut b.res_out,
            &mut b.scratch,
            mu,
            iu,
            ku,
            EPS,
        )?;
        let what = format!("add_rmsnorm_gate_up_silu m={m} inter={inter} k={k} config {config} round {round}");
        assert_eq!(b.res_out.to_vec()?, residual(&p.x, &p.res), "{what}: res_out");
        let want = gate_up_ref(&p.xn(), &f64s(&p.w), m, inter, k);
        assert_close(&what, &h.to_vec()?, &want, TOL_BF16);
    }
    Ok(())
}

#[test]
fn every_config_and_path_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("every_config_and_path_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for config in 0..add_rmsnorm_gemv::CONFIGS.len() {
        let sd = seed.wrapping_add(config as u64);
        // Chunks of 256 over all warps (k % 256 == 0, up to the 64 chunks of m = 16,
        // k = 1024), n not a multiple of any tile; one warp per row (k % 8 == 0 only, or
        // more than 64 chunks); the scalar path (k % 8 != 0).
        check_linear(
            &dev,
            [1, 3, 16][config % 3],
            150,
            [512, 256, 1024][config % 3],
            config,
            sd,
        )?;
        check_linear(&dev, [1, 3, 16][config % 3], 150, 96, config, sd ^ 0x33)?;
        check_linear(&dev, 9, 40, 2048, config, sd ^ 0x44)?;
        check_linear(&dev, [2, 1, 9][config % 3], 70, 44, config, sd ^ 0x55)?;
    }
    for config in 0..add_rmsnorm_gate_up_silu::CONFIGS.len() {
        let sd = seed.wrapping_add(100 + config as u64);
        check_gate_up(
            &dev,
            [1, 5, 16, 8][config],
            88,
            [768, 512, 1024, 256][config],
            config,
            sd,
        )?;
        check_gate_up(&dev, [1, 5, 16, 8][config], 88, 64, config, sd ^ 0x66)?;
        check_gate_up(&dev, 2, 40, 36, config, sd ^ 0x77)?;
    }
    Ok(())
}

/// Every fused config has a plain config of the same shape (a tuner's pick of a plain
/// config means the same tile fused); the planner fuses only small inputs without a
/// split, and a pick of a plain config the fused kernel lacks runs unfused.
#[test]
fn the_planner_fuses_small_unsplit_projections() -> Result<()> {
    for (fused, plain) in [
        (add_rmsnorm_gemv::CONFIGS, gemv::CONFIGS),
        (add_rmsnorm_gate_up_silu::CONFIGS, gate_up_silu::CONFIGS),
    ] {
        for f in fused {
            let shape = plan::ConfigShape::of(f);
            assert!(shape.is_some(), "{}", f.name);
            assert!(plain.iter().any(|p| plan::ConfigShape::of(p) == shape), "{}", f.name);
        }
    }
    let fuse = |pick: Pick, m: u32, n: u32, k: u32| {
        plan::fuse_add_norm(
            gemv::CONFIGS,
            add_rmsnorm_gemv::CONFIGS,
            pick,
            1,
            m,
            n,
            k,
            132,
            Placement::BesideProducer,
        )
    };
    // Qwen3-0.6B's QKV projection at m = 1 and m = 16: the plain kernel's choice, fused.
    let c = fuse(Pick::default(), 1, 4096, 1024)?.expect("small QKV fuses");
    let plain = plan::choose(
        gemv::CONFIGS,
        1,
        1,
        4096,
        1024,
        132,
        plan::MAX_SPLITS,
        Placement::BesideProducer,
    )?;
    assert_eq!((c.splits, c.shape), (1, plain.shape));
    assert_eq!(
        plan::ConfigShape::of(&add_rmsnorm_gemv::CONFIGS[c.config]),
        Some(plain.shape)
    );
    assert!(fuse(Pick::default(), 16, 4096, 1024)?.is_some());
    // Above the prologue's bound: not fused.
    let k = 4096;
    assert!(fuse(Pick::default(), NORM_PROLOGUE_MAX_ELEMS / k + 1, 6144, k)?.is_none());
    // A split (the planner's for a narrow output, or a pick) is not fused.
    assert!(fuse(Pick::default(), 1, 64, 4096)?.is_none());
    let pick = |config: Option<usize>, splits: Option<u32>| Pick {
        config,
        splits,
        placement: None,
    };
    assert!(fuse(pick(None, Some(2)), 1, 4096, 1024)?.is_none());
    // Plain configs 8 and 10 have no fused twin; config 9 maps to the twin of its shape.
    assert!(fuse(pick(Some(8), None), 1, 4096, 1024)?.is_none());
    assert!(fuse(pick(Some(10), None), 1, 4096, 1024)?.is_none());
    let c = fuse(pick(Some(9), None), 1, 4096, 1024)?.expect("config 9 fuses");
    assert_eq!(
        plan::ConfigShape::of(&add_rmsnorm_gemv::CONFIGS[c.config]),
        plan::ConfigShape::of(&gemv::CONFIGS[9])
    );
    Ok(())
}

/// Producer → fused projection → consumers of both outputs, on three streams, twice with
/// re-armed tensors: `a = x·W1ᵀ` (gemv, column tiles) is the sublayer output, `r` (a
/// row-tiled copy written by another gemv) the residual; the fused kernel writes `y` and
/// `r2 = a + r`; `add_rmsnorm` then reads `r2` row by row (its wait must see every CTA's
/// signal of the split output), and `y` is checked against the reference.
#[test]
fn a_fused_projection_in_a_tiled_chain() -> Result<()> {
    let seed = fresh_seed("a_fused_projection_in_a_tiled_chain");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 3)?;
        let (m, k0, k, n) = (4usize, 48usize, 256usize, 96usize);
        let r = seed ^ (round << 32);
        let x0 = random::<bf16>(m * k0, 1.0, r);
        let w1 = random::<bf16>(k * k0, 0.3, r ^ 1);
        let wr = random::<bf16>(k * k0, 0.3, r ^ 2);
        let nw = random::<bf16>(k, 1.2, r ^ 3);
        let w = random::<bf16>(n * k, 0.25, r ^ 4);
        let t = |shape: &[usize], v: &[bf16]| Tensor::from_slice(&dev, shape, v);
        let (x0t, w1t, wrt, nwt, wt) = (
            t(&[m, k0], &x0)?,
            t(&[k, k0], &w1)?,
            t(&[k, k0], &wr)?,
            t(&[k], &nw)?,
            t(&[n, k], &w)?,
        );
        let mut a = Tiled::<bf16, DynGrid>::new(&dev, &[m, k], DynGrid(16, 16), "a")?;
        let mut res = Tiled::<bf16, DynRows>::new(&dev, &[m, k], DynRows(1), "res")?;
        let mut res2 = Tiled::<bf16, DynRows>::new(&dev, &[m, k], DynRows(1), "res2")?;
        let mut y = Tiled::<bf16, DynRows>::new(&dev, &[m, n], DynRows(1), "y")?;
        let mut scratch = Tensor::full(&dev, &[plan::add_norm_scratch_len(m, n, k)], POISON)?;
        // The consumer of `r2`: `z = rmsnorm(r2 + r2)`, one CTA per row.
        let mut z = Tiled::<bf16, DynRows>::new(&dev, &[m, k], DynRows(1), "z")?;
        let mut zr = Tensor::full(&dev, &[m, k], POISON)?;
        let (mu, k0u, ku, nu) = (m as u32, k0 as u32, k as u32, n as u32);
        for pass in 0..2usize {
            if pass == 1 {
                a.rearm();
                res.rearm();
                res2.rearm();
                y.rearm();
                z.rearm();
            }
            let cfg = |i: usize, len: usize| LaunchOptions::config((i + round as usize + pass) % len);
            gemv::launch_with(&s, &cfg(0, gemv::CONFIGS.len()), &x0t, &wrt, &mut res, mu, ku, k0u)?;
            gemv::launch_with(&s, &cfg(1, gemv::CONFIGS.len()), &x0t, &w1t, &mut a, mu, ku, k0u)?;
            add_rmsnorm_gemv::launch_with(
                &s,
                &cfg(2, add_rmsnorm_gemv::CONFIGS.len()),
                &a,
                &res,
                &nwt,
                &wt,
                &mut y,
                &mut res2,
                &mut scratch,
                mu,
                nu,
                ku,
                EPS,
            )?;
            add_rmsnorm::launch_with(
                &s,
                &LaunchOptions::config(0),
                &res2,
                &res2,
                &nwt,
                &mut z,
                &mut zr,
                mu,
                ku,
                EPS,
            )?;
            s.synchronize()?;
            let what = |stage: &str| format!("chain round {round} pass {pass}: {stage}");
            let (av, rv) = (a.to_vec()?, res.to_vec()?);
            let r2 = residual(&av, &rv);
            assert_eq!(res2.to_vec()?, r2, "{}", what("res_out"));
            let xn = normed(&r2, &nw, k);
            assert_close(&what("y"), &y.to_vec()?, &matmul_nt(&xn, &f64s(&w), m, n, k), TOL_BF16);
            let zz = normed(&residual(&r2, &r2), &nw, k);
            assert_close(&what("z"), &z.to_vec()?, &zz, TOL_BF16);
        }
    }
    Ok(())
}

#[test]
fn bad_input_is_refused_before_launch() -> Result<()> {
    let seed = fresh_seed("bad_input_is_refused_before_launch");
    let dev = cpu_device(seed)?;
    let s = Stream::new(&dev)?;
    let (m, n, k) = (2usize, 64usize, 32usize);
    let p = Problem::new(m, n, k, seed);
    let mut b = bind(&dev, &p, n)?;
    let mut y = Tensor::full(&dev, &[m, n], POISON)?;
    // A norm weight of the wrong length.
    let short = Tensor::from_slice(&dev, &[k - 1], &p.norm_w[..k - 1])?;
    let err = plan::linear_add_norm_with(
        &s,
        &LaunchOptions::default(),
        Pick::default(),
        AddNorm {
            x: &b.x,
            res: &b.res,
            weight: &short,
            res_out: &mut b.res_out,
            eps: EPS,
        },
        &b.w,
        &mut y,
        &mut b.scratch,
        m as u32,
        n as u32,
        k as u32,
        Placement::Alone,
    )
    .expect_err("a short norm weight");
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert!(err.to_string().contains("norm weight"), "{err}");
    // A scratch too small for the chosen tile.
    let mut tiny = Tensor::full(&dev, &[m * k], POISON)?;
    let err = add_rmsnorm_gemv::launch_with(
        &s,
        &LaunchOptions::config(3),
        &b.x,
        &b.res,
        &b.norm_w,
        &b.w,
        &mut y,
        &mut b.res_out,
        &mut tiny,
        m as u32,
        n as u32,
        k as u32,
        EPS,
    )
    .expect_err("a scratch of one slot for four column tiles");
    assert!(err.to_string().contains("xn"), "{err}");
    // Nothing ran: the outputs are still poisoned.
    assert!(y.to_vec()?.iter().all(|v| v.to_bits() == POISON.to_bits()));
    Ok(())
}

/// The decode shapes of the benchmarked models through the planner: the QKV projection
/// and the gate/up projection at every m the planner fuses.
#[test]
fn fused_projections_on_the_gpu_at_model_shapes() -> Result<()> {
    let Some(dev) = gpu_or_skip("fused_projections_on_the_gpu_at_model_shapes") else {
        return Ok(());
    };
    let seed = fresh_seed("fused_projections_on_the_gpu_at_model_shapes");
    let s = Stream::new(&dev)?;
    for (i, &(hidden, inter, q, kv)) in MODELS.iter().enumerate() {
        for m in [1usize, 4, 16] {
            if m * hidden > NORM_PROLOGUE_MAX_ELEMS as usize {
                continue;
            }
            let sd = seed.wrapping_add(10 * i as u64 + m as u64);
            let n = q + 2 * kv;
            let p = Problem::new(m, n, hidden, sd);
            let mut b = bind(&dev, &p, n)?;
            let mut y = Tensor::full(&dev, &[m, n], POISON)?;
            let c = plan::linear_add_norm_with(
                &s,
                &LaunchOptions::default(),
                Pick::default(),
                AddNorm {
                    x: &b.x,
                    res: &b.res,
                    weight: &b.norm_w,
                    res_out: &mut b.res_out,
                    eps: EPS,
                },
                &b.w,
                &mut y,
                &mut b.scratch,
                m as u32,
                n as u32,
                hidden as u32,
                Placement::BesideProducer,
            )?
            .expect("the QKV projection fuses");
            let what = format!("fused qkv m={m} n={n} k={hidden} ({c:?})");
            assert_eq!(b.res_out.to_vec()?, residual(&p.x, &p.res), "{what}: res_out");
            assert_close(
                &what,
                &y.to_vec()?,
                &matmul_nt(&p.xn(), &f64s(&p.w), m, n, hidden),
                TOL_BF16,
            );

            let p = Problem::new(m, 2 * inter, hidden, sd ^ 99);
            let mut b = bind(&dev, &p, inter)?;
            let mut h = Tensor::full(&dev, &[m, inter], POISON)?;
            let c = plan::gate_up_add_norm_with(
                &s,
                &LaunchOptions::default(),
                Pick::default(),
                AddNorm {
                    x: &b.x,
                    res: &b.res,
                    weight: &b.norm_w,
                    res_out: &mut b.res_out,
                    eps: EPS,
                },
                &b.w,
                &mut h,
                &mut b.scratch,
                m as u32,
                inter as u32,
                hidden as u32,
                Placement::BesideProducer,
            )?
            .expect("the gate/up projection fuses");
            let what = format!("fused gate/up m={m} inter={inter} k={hidden} ({c:?})");
            assert_eq!(b.res_out.to_vec()?, residual(&p.x, &p.res), "{what}: res_out");
            let want = gate_up_ref(&p.xn(), &f64s(&p.w), m, inter, hidden);
            assert_close(&what, &h.to_vec()?, &want, TOL_BF16);
        }
    }
    Ok(())
}

/// Inputs of one projection with the add + RMSNorm behind it (`gemv_add_rmsnorm`):
/// `x` `[m, k]`, `w` `[n, k]`, the residual and norm weight over the `n` outputs.
struct After {
    x: Vec<bf16>,
    w: Vec<bf16>,
    res: Vec<bf16>,
    norm_w: Vec<bf16>,
}

impl After {
    fn new(m: usize, n: usize, k: usize, seed: u64) -> After {
        After {
            x: random(m * k, 1.0, seed),
            w: random(n * k, 2.0 / (k as f64).sqrt(), seed ^ 1),
            res: random(m * n, 2.0, seed ^ 2),
            norm_w: random(n, 1.5, seed ^ 3),
        }
    }
}

/// `gemv_add_rmsnorm` with `config` against the same config of `gemv` followed by
/// `add_rmsnorm` (the new residual bit for bit: the same projection bits), the normalised
/// rows against f64 from those bits and the projection against f64; two launches on the
/// same scratch (the ticket must be re-armed by the first), outputs poisoned each time.
fn check_norm_after(dev: &Device, m: usize, n: usize, k: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let mut scratch = plan::NormAfterScratch::new(dev, m, n)?;
    for round in 0..2u64 {
        let p = After::new(m, n, k, seed ^ (round << 40));
        let t = |shape: &[usize], v: &[bf16]| Tensor::from_slice(dev, shape, v);
        let (x, w, res, nw) = (
            t(&[m, k], &p.x)?,
            t(&[n, k], &p.w)?,
            t(&[m, n], &p.res)?,
            t(&[n], &p.norm_w)?,
        );
        let mut xn = Tensor::full(dev, &[m, n], POISON)?;
        let mut res_out = Tensor::full(dev, &[m, n], POISON)?;
        let (mu, nu, ku) = (m as u32, n as u32, k as u32);
        let opts = LaunchOptions::config(config);
        gemv_add_rmsnorm::launch_with(
            &s,
            &opts,
            &x,
            &w,
            &res,
            &nw,
            &mut scratch.y,
            &mut scratch.partials,
            &mut scratch.ticket,
            &mut xn,
            &mut res_out,
            mu,
            nu,
            ku,
            EPS,
        )?;
        let mut y = Tensor::full(dev, &[m, n], POISON)?;
        gemv::launch_with(&s, &opts, &x, &w, &mut y, mu, nu, ku)?;
        let yv = y.to_vec()?;
        let what = format!("gemv_add_rmsnorm m={m} n={n} k={k} config {config} round {round}");
        assert_close(
            &format!("{what}: projection"),
            &yv,
            &matmul_nt(&f64s(&p.x), &f64s(&p.w), m, n, k),
            TOL_BF16,
        );
        let sum = residual(&yv, &p.res);
        assert_eq!(res_out.to_vec()?, sum, "{what}: res_out");
        assert_close(
            &format!("{what}: xn"),
            &xn.to_vec()?,
            &normed(&sum, &p.norm_w, n),
            TOL_BF16,
        );
        assert_eq!(scratch.ticket.to_vec()?, [0], "{what}: the ticket is re-armed");
    }
    Ok(())
}

#[test]
fn norm_after_every_config_and_path_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("norm_after_every_config_and_path_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for config in 0..gemv_add_rmsnorm::CONFIGS.len() {
        let sd = seed.wrapping_add(config as u64);
        // The norm's chunks over all warps (n % 256 == 0, up to the bound at m = 16), one
        // warp per row (n % 8 == 0 only), its scalar path (n % 8 != 0), and the GEMV's
        // 2-byte path (k % 8 != 0); n not a multiple of any tile.
        check_norm_after(
            &dev,
            [1, 3, 16][config % 3],
            [256, 512, 1024][config % 3],
            96,
            config,
            sd,
        )?;
        check_norm_after(&dev, [2, 9][config % 2], 136, 64, config, sd ^ 0x11)?;
        check_norm_after(&dev, 3, 150, 48, config, sd ^ 0x22)?;
        check_norm_after(&dev, 2, 70, 44, config, sd ^ 0x33)?;
    }
    Ok(())
}

/// The planner takes the projection's own choice with the norm behind it, and declines
/// (the norm then runs as its own kernel) above one CTA's bound or where the projection
/// would split k.
#[test]
fn the_planner_fuses_the_norm_behind_small_unsplit_projections() -> Result<()> {
    let fuse = |pick: Pick, m: u32, n: u32, k: u32| {
        plan::fuse_norm_after(pick, m, n, k, 132, plan::MAX_SPLITS, Placement::Alone)
    };
    // Qwen3-0.6B's O projection at m = 1 and 8 (m · n = 8192, the planner's bound): the
    // plain kernel's choice.
    for m in [1, 8] {
        let c = fuse(Pick::default(), m, 1024, 2048)?.expect("small O projection fuses");
        let plain = plan::choose(gemv::CONFIGS, 1, m, 1024, 2048, 132, plan::MAX_SPLITS, Placement::Alone)?;
        assert_eq!(c, plain);
        assert_eq!(gemv_add_rmsnorm::CONFIGS[c.config].name, gemv::CONFIGS[c.config].name);
    }
    // More than 16 rows, or above the planner's bound (Qwen3-0.6B at m = 16, Qwen3-8B's
    // hidden size at m = 3), which is below what the kernel takes: not fused.
    assert!(fuse(Pick::default(), 17, 256, 1024)?.is_none());
    assert!(fuse(Pick::default(), 16, 1024, 2048)?.is_none());
    assert!(fuse(Pick::default(), plan::NORM_AFTER_MAX_ELEMS / 4096 + 1, 4096, 4096)?.is_none());
    const { assert!(plan::NORM_AFTER_MAX_ELEMS <= NORM_PROLOGUE_MAX_ELEMS) };
    // A split, the planner's for a narrow output or a pick: not fused.
    assert!(fuse(Pick::default(), 1, 64, 4096)?.is_none());
    let split = Pick {
        config: None,
        splits: Some(2),
        placement: None,
    };
    assert!(fuse(split, 1, 1024, 2048)?.is_none());
    // Without a split-K workspace the narrow output fuses unsplit, as it would run.
    assert!(plan::fuse_norm_after(Pick::default(), 1, 64, 4096, 132, 1, Placement::Alone)?.is_some());
    Ok(())
}

/// Producer → projection with the norm behind it → consumers of both outputs, on three
/// streams, twice with re-armed tensors: `a = x·W1ᵀ` (column tiles) is its input, `r` (a
/// row-tiled gemv output) its residual; a gemv reads `xn` whole and `add_rmsnorm` reads
/// `r2` row by row, so each must see the signals of every CTA, including the last one,
/// which wrote both.
#[test]
fn a_norm_after_projection_in_a_tiled_chain() -> Result<()> {
    let seed = fresh_seed("a_norm_after_projection_in_a_tiled_chain");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 3)?;
        let (m, k0, k, n, n2) = (4usize, 48usize, 128usize, 256usize, 80usize);
        let r = seed ^ (round << 32);
        let x0 = random::<bf16>(m * k0, 1.0, r);
        let w1 = random::<bf16>(k * k0, 0.3, r ^ 1);
        let wr = random::<bf16>(n * k0, 0.3, r ^ 2);
        let w = random::<bf16>(n * k, 0.25, r ^ 3);
        let nw = random::<bf16>(n, 1.2, r ^ 4);
        let w2 = random::<bf16>(n2 * n, 0.2, r ^ 5);
        let t = |shape: &[usize], v: &[bf16]| Tensor::from_slice(&dev, shape, v);
        let (x0t, w1t, wrt, wt, nwt, w2t) = (
            t(&[m, k0], &x0)?,
            t(&[k, k0], &w1)?,
            t(&[n, k0], &wr)?,
            t(&[n, k], &w)?,
            t(&[n], &nw)?,
            t(&[n2, n], &w2)?,
        );
        let mut a = Tiled::<bf16, DynGrid>::new(&dev, &[m, k], DynGrid(16, 16), "a")?;
        let mut res = Tiled::<bf16, DynRows>::new(&dev, &[m, n], DynRows(1), "res")?;
        let mut xn = Tiled::<bf16, DynRows>::new(&dev, &[m, n], DynRows(1), "xn")?;
        let mut res2 = Tiled::<bf16, DynRows>::new(&dev, &[m, n], DynRows(1), "res2")?;
        let mut z = Tiled::<bf16, DynRows>::new(&dev, &[m, n2], DynRows(1), "z")?;
        let mut zn = Tiled::<bf16, DynRows>::new(&dev, &[m, n], DynRows(1), "zn")?;
        let mut zr = Tensor::full(&dev, &[m, n], POISON)?;
        let mut scratch = plan::NormAfterScratch::new(&dev, m, n)?;
        let (mu, k0u, ku, nu, n2u) = (m as u32, k0 as u32, k as u32, n as u32, n2 as u32);
        for pass in 0..2usize {
            if pass == 1 {
                for tiled in [&mut res, &mut xn, &mut res2, &mut z, &mut zn] {
                    tiled.rearm();
                }
                a.rearm();
            }
            let cfg = |i: usize| LaunchOptions::config((i + round as usize + pass) % gemv::CONFIGS.len());
            gemv::launch_with(&s, &cfg(0), &x0t, &wrt, &mut res, mu, nu, k0u)?;
            gemv::launch_with(&s, &cfg(1), &x0t, &w1t, &mut a, mu, ku, k0u)?;
            gemv_add_rmsnorm::launch_with(
                &s,
                &cfg(2),
                &a,
                &wt,
                &res,
                &nwt,
                &mut scratch.y,
                &mut scratch.partials,
                &mut scratch.ticket,
                &mut xn,
                &mut res2,
                mu,
                nu,
                ku,
                EPS,
            )?;
            gemv::launch_with(&s, &cfg(3), &xn, &w2t, &mut z, mu, n2u, nu)?;
            add_rmsnorm::launch_with(
                &s,
                &LaunchOptions::config(0),
                &res2,
                &res2,
                &nwt,
                &mut zn,
                &mut zr,
                mu,
                nu,
                EPS,
            )?;
            s.synchronize()?;
            let what = |stage: &str| format!("chain round {round} pass {pass}: {stage}");
            let proj = matmul_nt(&f64s(&a.to_vec()?), &f64s(&w), m, n, k);
            let proj: Vec<bf16> = proj.iter().map(|v| bf16::from_f64(*v)).collect();
            let r2 = res2.to_vec()?;
            assert_close(&what("res_out"), &r2, &f64s(&residual(&proj, &res.to_vec()?)), TOL_BF16);
            let xv = xn.to_vec()?;
            assert_close(&what("xn"), &xv, &normed(&r2, &nw, n), TOL_BF16);
            assert_close(
                &what("z"),
                &z.to_vec()?,
                &matmul_nt(&f64s(&xv), &f64s(&w2), m, n2, n),
                TOL_BF16,
            );
            assert_close(
                &what("zn"),
                &zn.to_vec()?,
                &normed(&residual(&r2, &r2), &nw, n),
                TOL_BF16,
            );
        }
    }
    Ok(())
}

#[test]
fn norm_after_bad_input_is_refused_before_launch() -> Result<()> {
    let seed = fresh_seed("norm_after_bad_input_is_refused_before_launch");
    let dev = cpu_device(seed)?;
    let s = Stream::new(&dev)?;
    let (m, n, k) = (2usize, 64usize, 32usize);
    let p = After::new(m, n, k, seed);
    let t = |shape: &[usize], v: &[bf16]| Tensor::from_slice(&dev, shape, v);
    let (x, w, res) = (t(&[m, k], &p.x)?, t(&[n, k], &p.w)?, t(&[m, n], &p.res)?);
    let mut xn = Tensor::full(&dev, &[m, n], POISON)?;
    let mut res_out = Tensor::full(&dev, &[m, n], POISON)?;
    let mut scratch = plan::NormAfterScratch::new(&dev, m, n)?;
    // A norm weight over k instead of n.
    let wrong = t(&[k], &p.norm_w[..k])?;
    let err = plan::linear_norm_after_with(
        &s,
        &LaunchOptions::default(),
        Pick::default(),
        &x,
        &w,
        plan::NormAfter {
            res: &res,
            weight: &wrong,
            xn: &mut xn,
            res_out: &mut res_out,
            eps: EPS,
        },
        &mut scratch,
        (m as u32, n as u32, k as u32),
        1,
        Placement::Alone,
    )
    .expect_err("a norm weight of the wrong length");
    assert!(matches!(err, Error::Shape { .. }), "{err}");
    assert!(err.to_string().contains("norm weight"), "{err}");
    // More rows, or more elements, than one CTA normalises: refused by the kernel's checks.
    let nw = t(&[n], &p.norm_w)?;
    for (rows, cols, want) in [
        (17usize, n, "at most 16 rows"),
        (16, NORM_PROLOGUE_MAX_ELEMS as usize / 16 + 8, "NORM_PROLOGUE_MAX_ELEMS"),
    ] {
        let xb = Tensor::full(&dev, &[rows, k], bf16::ONE)?;
        let wb = Tensor::full(&dev, &[cols, k], bf16::ONE)?;
        let rb = Tensor::full(&dev, &[rows, cols], bf16::ONE)?;
        let nb = Tensor::full(&dev, &[cols], bf16::ONE)?;
        let mut xnb = Tensor::full(&dev, &[rows, cols], POISON)?;
        let mut rob = Tensor::full(&dev, &[rows, cols], POISON)?;
        let mut sb = plan::NormAfterScratch::new(&dev, rows, cols)?;
        let err = gemv_add_rmsnorm::launch(
            &s,
            &xb,
            &wb,
            &rb,
            &nb,
            &mut sb.y,
            &mut sb.partials,
            &mut sb.ticket,
            &mut xnb,
            &mut rob,
            rows as u32,
            cols as u32,
            k as u32,
            EPS,
        )
        .expect_err("above one CTA's norm");
        assert!(matches!(err, Error::Launch { .. }), "{err}");
        assert!(err.to_string().contains(want), "{err}");
        assert!(xnb.to_vec()?.iter().all(|v| v.to_bits() == POISON.to_bits()));
    }
    // A scratch too small for the projection.
    let mut small = plan::NormAfterScratch::new(&dev, 1, n)?;
    let err = gemv_add_rmsnorm::launch(
        &s,
        &x,
        &w,
        &res,
        &nw,
        &mut small.y,
        &mut small.partials,
        &mut small.ticket,
        &mut xn,
        &mut res_out,
        m as u32,
        n as u32,
        k as u32,
        EPS,
    )
    .expect_err("a scratch of one row for two");
    assert!(err.to_string().contains('y'), "{err}");
    // Nothing ran: the outputs are still poisoned.
    assert!(xn.to_vec()?.iter().all(|v| v.to_bits() == POISON.to_bits()));
    assert!(res_out.to_vec()?.iter().all(|v| v.to_bits() == POISON.to_bits()));
    Ok(())
}

/// The O and down projections of the benchmarked models with the norm behind them,
/// through the planner as the engine plans them (alone, split-K allowed), at every m it
/// fuses, against the unfused pair.
#[test]
fn norm_after_projections_on_the_gpu_at_model_shapes() -> Result<()> {
    let Some(dev) = gpu_or_skip("norm_after_projections_on_the_gpu_at_model_shapes") else {
        return Ok(());
    };
    let seed = fresh_seed("norm_after_projections_on_the_gpu_at_model_shapes");
    let s = Stream::new(&dev)?;
    for (i, &(hidden, inter, q, _)) in MODELS.iter().enumerate() {
        for m in [1usize, 4, 16] {
            if m * hidden > plan::NORM_AFTER_MAX_ELEMS as usize {
                continue;
            }
            for (j, k) in [q, inter].into_iter().enumerate() {
                let n = hidden;
                let sd = seed.wrapping_add(100 * i as u64 + 10 * m as u64 + j as u64);
                let p = After::new(m, n, k, sd);
                let t = |shape: &[usize], v: &[bf16]| Tensor::from_slice(&dev, shape, v);
                let (x, w, res, nw) = (
                    t(&[m, k], &p.x)?,
                    t(&[n, k], &p.w)?,
                    t(&[m, n], &p.res)?,
                    t(&[n], &p.norm_w)?,
                );
                let mut xn = Tensor::full(&dev, &[m, n], POISON)?;
                let mut res_out = Tensor::full(&dev, &[m, n], POISON)?;
                let mut scratch = plan::NormAfterScratch::new(&dev, m, n)?;
                let dims = (m as u32, n as u32, k as u32);
                let c = plan::linear_norm_after_with(
                    &s,
                    &LaunchOptions::default(),
                    Pick::default(),
                    &x,
                    &w,
                    plan::NormAfter {
                        res: &res,
                        weight: &nw,
                        xn: &mut xn,
                        res_out: &mut res_out,
                        eps: EPS,
                    },
                    &mut scratch,
                    dims,
                    plan::MAX_SPLITS,
                    Placement::Alone,
                )?
                .expect("the projection fuses");
                let mut y = Tensor::full(&dev, &[m, n], POISON)?;
                gemv::launch_with(
                    &s,
                    &LaunchOptions::config(c.config),
                    &x,
                    &w,
                    &mut y,
                    dims.0,
                    dims.1,
                    dims.2,
                )?;
                let yv = y.to_vec()?;
                let what = format!("norm after m={m} n={n} k={k} ({c:?})");
                let sum = residual(&yv, &p.res);
                assert_eq!(res_out.to_vec()?, sum, "{what}: res_out");
                assert_close(&what, &xn.to_vec()?, &normed(&sum, &p.norm_w, n), TOL_BF16);
            }
        }
    }
    Ok(())
}
