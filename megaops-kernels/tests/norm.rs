//! RMSNorm and the fused residual add + RMSNorm against f64 references: fresh random
//! inputs, poisoned outputs, hidden sizes on the vector path (with and without a tail
//! past the register stash) and on the scalar path, every tile config, in-place use; on
//! the CPU backend at small sizes and on the GPU (when there is one) at model sizes.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{Device, LaunchOptions, Result, Stream, Tensor, bf16};
use megaops_kernels::norm::{add_rmsnorm, rmsnorm};

/// bf16 NaN: every element a kernel forgets to write fails the comparison.
const POISON: bf16 = bf16::from_bits(0xffc0);

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w`, in f64.
fn rmsnorm_ref(x: &[f64], w: &[f64], h: usize, eps: f64) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(h) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / h as f64;
        let rstd = 1.0 / (ms + eps).sqrt();
        y.extend(row.iter().zip(w).map(|(v, wi)| v * rstd * wi));
    }
    y
}

struct Case {
    m: usize,
    h: usize,
    config: usize,
    seed: u64,
}

fn inputs(c: &Case) -> (Vec<bf16>, Vec<bf16>, Vec<bf16>) {
    let x = random::<bf16>(c.m * c.h, 2.0, c.seed);
    let res = random::<bf16>(c.m * c.h, 2.0, c.seed ^ 0x5eed);
    let w = random::<bf16>(c.h, 1.5, c.seed.wrapping_add(7));
    (x, res, w)
}

/// Runs `rmsnorm` of case `c` on `s` (fresh uploads, a poisoned output): what it wrote
/// and the f64 reference.
fn run_rmsnorm(dev: &Device, s: &Stream, c: &Case) -> Result<(Vec<bf16>, Vec<f64>)> {
    let (x, _, w) = inputs(c);
    let eps = 1e-6f32;
    let xt = Tensor::from_slice(dev, &[c.m, c.h], &x)?;
    let wt = Tensor::from_slice(dev, &[c.h], &w)?;
    let mut y = Tensor::full(dev, &[c.m, c.h], POISON)?;
    rmsnorm::launch_with(
        s,
        &LaunchOptions::config(c.config),
        &xt,
        &wt,
        &mut y,
        c.m as u32,
        c.h as u32,
        eps,
    )?;
    Ok((y.to_vec()?, rmsnorm_ref(&f64s(&x), &f64s(&w), c.h, eps as f64)))
}

fn check_rmsnorm(dev: &Device, c: &Case) -> Result<()> {
    let (got, want) = run_rmsnorm(dev, &Stream::new(dev)?, c)?;
    assert_close(
        &format!("rmsnorm m={} h={} config {}", c.m, c.h, c.config),
        &got,
        &want,
        5e-3,
    );
    Ok(())
}

fn check_add_rmsnorm(dev: &Device, c: &Case, in_place: bool) -> Result<()> {
    let s = Stream::new(dev)?;
    let (x, res, w) = inputs(c);
    let eps = 1e-5f32;
    let xt = Tensor::from_slice(dev, &[c.m, c.h], &x)?;
    let rt = Tensor::from_slice(dev, &[c.m, c.h], &res)?;
    let wt = Tensor::from_slice(dev, &[c.h], &w)?;
    let mut y = Tensor::full(dev, &[c.m, c.h], POISON)?;
    // In place: the new residual overwrites the old one (a clone shares the memory).
    let mut res_out = if in_place {
        rt.clone()
    } else {
        Tensor::full(dev, &[c.m, c.h], POISON)?
    };
    let opts = LaunchOptions::config(c.config);
    add_rmsnorm::launch_with(
        &s,
        &opts,
        &xt,
        &rt,
        &wt,
        &mut y,
        &mut res_out,
        c.m as u32,
        c.h as u32,
        eps,
    )?;
    // The residual stream is bf16: the sum is rounded before it is normalised.
    let sum: Vec<f64> = x
        .iter()
        .zip(&res)
        .map(|(a, b)| bf16::from_f64(a.to_f64() + b.to_f64()).to_f64())
        .collect();
    let what = format!(
        "add_rmsnorm m={} h={} config {} in_place={in_place}",
        c.m, c.h, c.config
    );
    assert_close(&format!("{what}: res_out"), &res_out.to_vec()?, &sum, 1e-6);
    assert_close(
        &format!("{what}: y"),
        &y.to_vec()?,
        &rmsnorm_ref(&sum, &f64s(&w), c.h, eps as f64),
        5e-3,
    );
    Ok(())
}

/// Hidden sizes: vector path (8, 1024, 8200 = one vector past the 4·256 stash), scalar
/// path (37: not a multiple of 8; 200: rows not 16-byte aligned from the second on).
const HIDDEN: [usize; 5] = [8, 37, 200, 1024, 8200];

#[test]
fn rmsnorm_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("rmsnorm_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for (i, &h) in HIDDEN.iter().enumerate() {
        for config in 0..rmsnorm::CONFIGS.len() {
            let m = [1, 3, 6][(i + config) % 3];
            check_rmsnorm(
                &dev,
                &Case {
                    m,
                    h,
                    config,
                    seed: seed.wrapping_add(i as u64),
                },
            )?;
        }
    }
    Ok(())
}

#[test]
fn add_rmsnorm_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("add_rmsnorm_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for (i, &h) in HIDDEN.iter().enumerate() {
        for config in 0..add_rmsnorm::CONFIGS.len() {
            let m = [5, 1, 2][(i + config) % 3];
            let c = Case {
                m,
                h,
                config,
                seed: seed.wrapping_add(100 + i as u64),
            };
            check_add_rmsnorm(&dev, &c, false)?;
        }
    }
    // More rows than a CTA of the warp-per-row configs has warps, and rows of several
    // register batches (8200 = 1025 vectors: four batches of 256 and a tail), in place too.
    for config in 0..add_rmsnorm::CONFIGS.len() {
        for (j, &h) in [1024, 8200, 37].iter().enumerate() {
            let c = Case {
                m: 37,
                h,
                config,
                seed: seed.wrapping_add(200 + j as u64),
            };
            check_add_rmsnorm(&dev, &c, j == 1)?;
            check_rmsnorm(&dev, &c)?;
        }
    }
    check_add_rmsnorm(
        &dev,
        &Case {
            m: 3,
            h: 1000,
            config: 1,
            seed,
        },
        true,
    )?;
    check_add_rmsnorm(
        &dev,
        &Case {
            m: 2,
            h: 37,
            config: 0,
            seed,
        },
        true,
    )?;
    Ok(())
}

#[test]
fn norms_on_the_gpu_at_model_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("norms_on_the_gpu_at_model_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("norms_on_the_gpu_at_model_sizes");
    // Every case runs, and every failing one is reported, before the test fails.
    let mut failed = Vec::new();
    // Qwen3-0.6B/1.7B/8B and Llama-3.2-1B hidden sizes; decode and prefill row counts.
    for (i, &(m, h)) in [
        (1, 1024),
        (16, 2048),
        (4096, 4096),
        (1023, 2048),
        (7, 4100),
        (300, 12345),
    ]
    .iter()
    .enumerate()
    {
        for config in 0..rmsnorm::CONFIGS.len() {
            let c = Case {
                m,
                h,
                config,
                seed: seed.wrapping_add(i as u64),
            };
            let rms = || check_rmsnorm(&dev, &c);
            let add = || check_add_rmsnorm(&dev, &c, i % 2 == 1);
            let checks: [(&str, &dyn Fn() -> Result<()>); 2] = [("rmsnorm", &rms), ("add_rmsnorm", &add)];
            for (name, check) in checks {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
                    Ok(r) => r?,
                    Err(_) => failed.push(format!("{name} m={m} h={h} config {config}")),
                }
            }
        }
    }
    assert!(failed.is_empty(), "failed (messages above): {failed:?}");
    Ok(())
}

/// A launch right after large uploads sees all of them: the input's and the poisoned
/// output's bytes are in device memory before the kernel reads or writes them (a pageable
/// copy's DMA can outlast the copy call, and launch streams do not wait for it), so no
/// stale input is read and no poison lands on a written output. Checked on the last rows,
/// which the DMA moves last, and as a whole.
#[test]
fn gpu_launch_right_after_an_upload_sees_all_of_it() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_launch_right_after_an_upload_sees_all_of_it") else {
        return Ok(());
    };
    let seed = fresh_seed("gpu_launch_right_after_an_upload_sees_all_of_it");
    let (m, h) = (8192, 4096);
    let s = Stream::new(&dev)?;
    for round in 0..4u64 {
        let c = Case {
            m,
            h,
            config: 1,
            seed: seed.wrapping_add(round),
        };
        let (got, want) = run_rmsnorm(&dev, &s, &c)?;
        let tail = (m - 16) * h;
        assert_close(
            &format!("round {round}: the last 16 rows"),
            &got[tail..],
            &want[tail..],
            5e-3,
        );
        assert_close(&format!("round {round}: every row"), &got, &want, 5e-3);
    }
    Ok(())
}
