//! The MLP block (`megaops_examples::mlp`) against f64 references: the decode path (GEMV
//! kernels, m ≤ 16) and the prefill path (GEMMs), on the CPU backend at small shapes under
//! several virtual-GPU seeds, overlapped (2-stream AsyncStream) and not (serial), each
//! pass re-run with fresh inputs after the tensors are re-armed, plus a captured graph
//! replayed with new inputs. Every intermediate is also checked against the reference of
//! the bf16 value the previous kernel actually stored, so a failure names its stage. With
//! a GPU: the real shapes of Qwen3-0.6B and Llama-3.2-1B at m = 1, 16, 1024.
//!
//! Outputs and intermediates are poisoned with NaN before every pass, so an element no
//! kernel writes fails the comparison.

use megaops::testing::{POISON_WORD, assert_close, cpu_device, fresh_seed, gpu_or_skip, random, random_ints};
use megaops::{AsyncStream, Device, ReleaseNext, Result, Tensor, bf16};
use megaops_examples::mlp::{Mlp, MlpActivations, MlpConfig, MlpPath};
use std::time::Instant;

/// bf16 NaN (half of [`POISON_WORD`]).
const POISON: bf16 = bf16::from_bits((POISON_WORD & 0xffff) as u16);

/// Relative error allowed for one kernel's bf16 output against the f64 reference of its
/// stored input (bf16 rounding of the output ≈ 1.5e-3 in norm).
const TOL_STAGE: f64 = 5e-3;
/// Relative error allowed for the block's output against the end-to-end f64 reference
/// (which rounds where the kernels store, but can differ by an ulp of an intermediate).
const TOL_BLOCK: f64 = 1e-2;

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `x · Wᵀ` for the rows `rows` of `x [_, k]`, `W [n, k]`.
fn matmul_nt(x: &[f64], w: &[f64], n: usize, k: usize, rows: &[usize]) -> Vec<f64> {
    let mut y = Vec::with_capacity(rows.len() * n);
    for &i in rows {
        let xr = &x[i * k..(i + 1) * k];
        y.extend((0..n).map(|j| xr.iter().zip(&w[j * k..(j + 1) * k]).map(|(a, b)| a * b).sum::<f64>()));
    }
    y
}

fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

/// Stage by stage: each stored intermediate against the f64 reference of the stored
/// input of its kernel, on rows `rows`.
fn check_stages(mlp: &Mlp, acts: &MlpActivations, x: &[bf16], rows: &[usize], what: &str) -> Result<()> {
    let c = mlp.config();
    let (h, inter) = (c.hidden, c.inter);
    let pick =
        |v: Vec<bf16>, n: usize| -> Vec<bf16> { rows.iter().flat_map(|&r| v[r * n..(r + 1) * n].to_vec()).collect() };
    let w = f64s(&mlp.norm_weight().to_vec()?);
    let wgu = f64s(&mlp.w_gate_up().to_vec()?);
    let wd = f64s(&mlp.w_down().to_vec()?);
    // rmsnorm
    let mut xn_ref = Vec::new();
    for &r in rows {
        let xr = f64s(&x[r * h..(r + 1) * h]);
        let rstd = 1.0 / (xr.iter().map(|v| v * v).sum::<f64>() / h as f64 + c.eps as f64).sqrt();
        xn_ref.extend(xr.iter().zip(&w).map(|(v, wi)| v * rstd * wi));
    }
    let xn = acts.normed().to_vec()?;
    assert_close(&format!("{what}: xn"), &pick(xn.clone(), h), &xn_ref, TOL_STAGE);
    let xn = f64s(&xn);
    // gate/up (+ silu·mul)
    let gu_ref = matmul_nt(&xn, &wgu, 2 * inter, h, rows);
    let act_ref: Vec<f64> = match acts.gate_up() {
        None => gu_ref
            .chunks(2 * inter)
            .flat_map(|r| (0..inter).map(move |j| silu(r[j]) * r[inter + j]))
            .collect(),
        Some(gu) => {
            let gu = pick(gu.to_vec()?, 2 * inter);
            assert_close(&format!("{what}: gate/up"), &gu, &gu_ref, TOL_STAGE);
            f64s(&gu)
                .chunks(2 * inter)
                .flat_map(|r| (0..inter).map(move |j| silu(r[j]) * r[inter + j]).collect::<Vec<_>>())
                .collect()
        }
    };
    let act = acts.act().to_vec()?;
    assert_close(&format!("{what}: act"), &pick(act.clone(), inter), &act_ref, TOL_STAGE);
    // down
    let out_ref = matmul_nt(&f64s(&act), &wd, h, inter, rows);
    let out = pick(acts.output().to_vec()?, h);
    assert_close(&format!("{what}: out (from stored act)"), &out, &out_ref, TOL_STAGE);
    Ok(())
}

/// The block's output against the end-to-end reference on rows `rows`, after checking
/// that every element of the output was written (finite).
fn check_block(mlp: &Mlp, acts: &MlpActivations, x: &[bf16], rows: &[usize], what: &str) -> Result<()> {
    let h = mlp.config().hidden;
    let out = acts.output().to_vec()?;
    if let Some(i) = out.iter().position(|v| !v.to_f64().is_finite()) {
        panic!("{what}: output element {i} (row {}) is not finite: {}", i / h, out[i]);
    }
    let got: Vec<bf16> = rows.iter().flat_map(|&r| out[r * h..(r + 1) * h].to_vec()).collect();
    assert_close(
        &format!("{what}: block output"),
        &got,
        &mlp.reference(x, rows)?,
        TOL_BLOCK,
    );
    Ok(())
}

/// Two passes of the block on `s` with fresh inputs (the second after the automatic
/// re-arm), each checked stage by stage and end to end.
fn check_passes(
    dev: &Device,
    s: &AsyncStream,
    cfg: MlpConfig,
    m: usize,
    seed: u64,
    gemm_configs: Option<[usize; 2]>,
    what: &str,
) -> Result<()> {
    let mlp = Mlp::random(dev, cfg, seed)?;
    let mut acts = mlp.activations(dev, m)?;
    if let Some(c) = gemm_configs {
        acts.set_gemm_configs(c)?;
    }
    assert_eq!(acts.path(), MlpPath::for_rows(m));
    let xt = Tensor::<bf16>::empty(dev, &[m, cfg.hidden])?;
    let rows: Vec<usize> = (0..m).collect();
    for pass in 0..2u64 {
        let x = random::<bf16>(m * cfg.hidden, 1.0, seed ^ (0x1000 + pass));
        xt.copy_from_slice(&x)?;
        acts.fill(POISON)?;
        mlp.forward(s, &xt, &mut acts)?;
        s.synchronize()?;
        let what = format!(
            "{what} h={} inter={} m={m} {:?} gemm configs {:?} pass {pass}",
            cfg.hidden,
            cfg.inter,
            acts.path(),
            acts.gemm_configs()
        );
        check_stages(&mlp, &acts, &x, &rows, &what)?;
        check_block(&mlp, &acts, &x, &rows, &what)?;
    }
    Ok(())
}

#[test]
fn decode_path_on_the_cpu_backend() -> Result<()> {
    let t = Instant::now();
    let seed = fresh_seed("decode_path_on_the_cpu_backend");
    let shapes = [(64, 96, 1), (128, 256, 3), (256, 512, 16), (96, 160, 5)];
    // Every shape under two virtual-GPU seeds.
    for (i, (h, inter, m)) in shapes.into_iter().cycle().take(2 * shapes.len()).enumerate() {
        let vseed = seed.wrapping_add(i as u64);
        let dev = cpu_device(vseed)?;
        let cfg = MlpConfig::new(h, inter);
        check_passes(&dev, &AsyncStream::new(&dev, 2)?, cfg, m, vseed, None, "overlapped")?;
        check_passes(&dev, &AsyncStream::serial(&dev)?, cfg, m, vseed ^ 7, None, "serial")?;
    }
    eprintln!("decode_path_on_the_cpu_backend: {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}

#[test]
fn prefill_path_on_the_cpu_backend() -> Result<()> {
    let t = Instant::now();
    let seed = fresh_seed("prefill_path_on_the_cpu_backend");
    // (h, inter, m, [gate/up config, down config]): the planner's choice (128×128 or 64×64
    // tiles on 4 SMs), 64×64 / 64×128, 128×256 / 256×128.
    let shapes = [
        (64, 96, 130, None),
        (128, 192, 200, Some([5, 4])),
        (96, 160, 17, Some([4, 5])),
        (256, 512, 160, None),
        (64, 128, 140, Some([1, 2])),
    ];
    for (i, (h, inter, m, gc)) in shapes.into_iter().enumerate() {
        let vseed = seed.wrapping_add(i as u64);
        let dev = cpu_device(vseed)?;
        let cfg = MlpConfig::new(h, inter);
        check_passes(&dev, &AsyncStream::new(&dev, 2)?, cfg, m, vseed, gc, "overlapped")?;
        check_passes(&dev, &AsyncStream::serial(&dev)?, cfg, m, vseed ^ 7, gc, "serial")?;
    }
    eprintln!("prefill_path_on_the_cpu_backend: {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}

/// Single stages (`Mlp::forward_stage`, used to time each kernel alone): a forward pass
/// run stage by stage, with one stage repeated on the inputs the previous pass left,
/// gives the same checked results; the prefill path is also run with the early release
/// (`ReleaseNext::FirstCta`, default `LastCta`); a stage the path lacks is refused.
#[test]
fn stages_alone_and_both_release_points_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("stages_alone_and_both_release_points_on_the_cpu_backend");
    for (i, (h, inter, m)) in [(64usize, 96usize, 3usize), (128, 192, 150)].into_iter().enumerate() {
        let vseed = seed.wrapping_add(i as u64);
        let dev = cpu_device(vseed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let mlp = Mlp::random(&dev, MlpConfig::new(h, inter), vseed)?;
        let mut acts = mlp.activations(&dev, m)?;
        let want = if acts.path() == MlpPath::Decode {
            ReleaseNext::FirstCta
        } else {
            ReleaseNext::LastCta
        };
        assert_eq!(acts.release(), want);
        let stages = acts.path().stages().len();
        let rows: Vec<usize> = (0..m).collect();
        for (pass, release) in [ReleaseNext::FirstCta, ReleaseNext::LastCta].into_iter().enumerate() {
            acts.set_release(release);
            let x = random::<bf16>(m * h, 1.0, vseed ^ (0x2000 + pass as u64));
            let xt = Tensor::from_slice(&dev, &[m, h], &x)?;
            acts.fill(POISON)?;
            for stage in 0..stages {
                mlp.forward_stage(&s, &xt, &mut acts, stage)?;
            }
            // The last stage again, alone, on the intermediates of this pass.
            mlp.forward_stage(&s, &xt, &mut acts, stages - 1)?;
            s.synchronize()?;
            let what = format!("stages h={h} inter={inter} m={m} {:?} {release:?}", acts.path());
            check_stages(&mlp, &acts, &x, &rows, &what)?;
            check_block(&mlp, &acts, &x, &rows, &what)?;
        }
        let x = Tensor::<bf16>::zeros(&dev, &[m, h])?;
        let err = mlp
            .forward_stage(&s, &x, &mut acts, stages)
            .expect_err("a stage past the last");
        assert!(err.to_string().contains(&format!("stage {stages} of the")), "{err}");
    }
    Ok(())
}

/// Eager passes, then one forward captured into a graph and replayed twice with fresh
/// inputs written between the replays, then an eager pass after the replays (the forward
/// re-arms the tensors the graph left complete). Each pass with poisoned activations,
/// checked end to end on `rows` and stage by stage on `stage_rows`.
/// (Replays interleaved with eager passes are tested in `tests/fig1.rs`.)
#[allow(clippy::too_many_arguments)]
fn check_graph(
    dev: &Device,
    s: &AsyncStream,
    mlp: &Mlp,
    m: usize,
    seed: u64,
    rows: &[usize],
    stage_rows: &[usize],
    what: &str,
) -> Result<()> {
    let cfg = mlp.config();
    let mut acts = mlp.activations(dev, m)?;
    let xt = Tensor::<bf16>::empty(dev, &[m, cfg.hidden])?;
    let mut graph = None;
    for run in 0..5u64 {
        let replay = run == 2 || run == 3;
        if run == 2 {
            graph = Some(s.capture(|s| mlp.forward(s, &xt, &mut acts))?);
        }
        let x = random::<bf16>(m * cfg.hidden, 1.0, seed ^ (0x2000 + run));
        xt.copy_from_slice(&x)?;
        acts.fill(POISON)?;
        match graph.as_ref().filter(|_| replay) {
            Some(g) => g.launch(s)?,
            None => mlp.forward(s, &xt, &mut acts)?,
        }
        s.synchronize()?;
        let what = format!(
            "{what} h={} inter={} m={m} {:?} run {run} ({})",
            cfg.hidden,
            cfg.inter,
            acts.path(),
            if replay { "graph replay" } else { "eager" }
        );
        check_stages(mlp, &acts, &x, stage_rows, &what)?;
        check_block(mlp, &acts, &x, rows, &what)?;
    }
    Ok(())
}

#[test]
fn graph_capture_and_replay_on_the_cpu_backend() -> Result<()> {
    let t = Instant::now();
    let seed = fresh_seed("graph_capture_and_replay_on_the_cpu_backend");
    for (i, (h, inter, m)) in [(128, 256, 4), (64, 128, 150)].into_iter().enumerate() {
        let vseed = seed.wrapping_add(i as u64);
        let dev = cpu_device(vseed)?;
        let cfg = MlpConfig::new(h, inter);
        let mlp = Mlp::random(&dev, cfg, vseed)?;
        let rows: Vec<usize> = (0..m).collect();
        for (mode, s) in [
            ("overlapped", AsyncStream::new(&dev, 2)?),
            ("serial", AsyncStream::serial(&dev)?),
        ] {
            check_graph(&dev, &s, &mlp, m, vseed ^ 3, &rows, &rows, mode)?;
        }
    }
    eprintln!(
        "graph_capture_and_replay_on_the_cpu_backend: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Two blocks back to back, the second reading the first's `Tiled` output (as the next
/// layer would): on a 2-stream AsyncStream its RMSNorm waits on the first block's output
/// data tiles. Decode and prefill; the second block is checked against the reference of
/// the output the first one stored.
#[test]
fn two_blocks_chained_through_the_tiled_output() -> Result<()> {
    let t = Instant::now();
    let seed = fresh_seed("two_blocks_chained_through_the_tiled_output");
    for (i, (h, inter, m)) in [(128, 192, 2), (64, 96, 133)].into_iter().enumerate() {
        let vseed = seed.wrapping_add(i as u64);
        let dev = cpu_device(vseed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let cfg = MlpConfig::new(h, inter);
        let (a, b) = (Mlp::random(&dev, cfg, vseed)?, Mlp::random(&dev, cfg, vseed ^ 1)?);
        let (mut acts_a, mut acts_b) = (a.activations(&dev, m)?, b.activations(&dev, m)?);
        let xt = Tensor::<bf16>::empty(&dev, &[m, h])?;
        let rows: Vec<usize> = (0..m).collect();
        for pass in 0..2u64 {
            let x = random::<bf16>(m * h, 1.0, vseed ^ (0x3000 + pass));
            xt.copy_from_slice(&x)?;
            acts_a.fill(POISON)?;
            acts_b.fill(POISON)?;
            a.forward(&s, &xt, &mut acts_a)?;
            b.forward(&s, acts_a.output(), &mut acts_b)?;
            s.synchronize()?;
            let what = format!("chained h={h} inter={inter} m={m} pass {pass}");
            check_block(&a, &acts_a, &x, &rows, &format!("{what}: first block"))?;
            let mid = acts_a.output().to_vec()?;
            check_stages(&b, &acts_b, &mid, &rows, &format!("{what}: second block"))?;
            check_block(&b, &acts_b, &mid, &rows, &format!("{what}: second block"))?;
        }
    }
    eprintln!(
        "two_blocks_chained_through_the_tiled_output: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

#[test]
fn bad_shapes_are_refused() -> Result<()> {
    let dev = cpu_device(1)?;
    assert!(
        Mlp::random(&dev, MlpConfig::new(60, 96), 1).is_err(),
        "hidden not a multiple of 8"
    );
    assert!(
        Mlp::random(&dev, MlpConfig::new(64, 0), 1).is_err(),
        "empty intermediate"
    );
    assert!(MlpActivations::new(&dev, MlpConfig::new(64, 96), 0).is_err(), "m = 0");
    let mlp = Mlp::random(&dev, MlpConfig::new(64, 96), 1)?;
    let mut other = MlpActivations::new(&dev, MlpConfig::new(64, 128), 2)?;
    let x = Tensor::<bf16>::zeros(&dev, &[2, 64])?;
    assert!(
        mlp.forward(&AsyncStream::serial(&dev)?, &x, &mut other).is_err(),
        "mismatched activations"
    );
    assert!(other.set_gemm_configs([0, 99]).is_err());
    assert!(mlp.reference(&[bf16::ZERO; 65], &[0]).is_err(), "partial row");
    assert!(mlp.reference(&[bf16::ZERO; 128], &[2]).is_err(), "row out of range");
    Ok(())
}

/// The rows a GPU check compares at large m: the edges of every 64-row data tile in the
/// first and last 128 rows, and a seeded sample (every element is still checked finite).
fn rows_to_check(m: usize, seed: u64) -> Vec<usize> {
    if m <= 16 {
        return (0..m).collect();
    }
    let mut rows = vec![0, 1, 63, 64, 127, m - 128, m - 65, m - 64, m - 1];
    rows.extend(random_ints(4, 0, m as i64, seed).into_iter().map(|r| r as usize));
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Real shapes on the GPU, overlapped and serial: eager passes, graph replays with fresh
/// inputs, an eager pass after them ([`check_graph`]), each with poisoned activations.
fn gpu_model_shapes(test: &str, ms: &[usize]) -> Result<()> {
    let Some(dev) = gpu_or_skip(test) else {
        return Ok(());
    };
    let seed = fresh_seed(test);
    for (model, preset) in [("Qwen3-0.6B", "qwen3-0.6b"), ("Llama-3.2-1B", "llama-3.2-1b")] {
        let cfg = MlpConfig::of(&megaops_models::presets::preset(preset).expect("a preset"));
        let mlp = Mlp::random(&dev, cfg, seed ^ cfg.inter as u64)?;
        for &m in ms {
            let rows = rows_to_check(m, seed ^ m as u64);
            for (mode, s) in [
                ("overlapped", AsyncStream::new(&dev, 2)?),
                ("serial", AsyncStream::serial(&dev)?),
            ] {
                let what = format!("{model} {mode}");
                check_graph(
                    &dev,
                    &s,
                    &mlp,
                    m,
                    seed ^ ((m as u64) << 8),
                    &rows,
                    &rows[..rows.len().min(4)],
                    &what,
                )?;
            }
        }
    }
    Ok(())
}

#[test]
fn decode_on_the_gpu_at_model_shapes() -> Result<()> {
    gpu_model_shapes("decode_on_the_gpu_at_model_shapes", &[1, 16])
}

#[test]
fn prefill_on_the_gpu_at_model_shapes() -> Result<()> {
    gpu_model_shapes("prefill_on_the_gpu_at_model_shapes", &[1024])
}
