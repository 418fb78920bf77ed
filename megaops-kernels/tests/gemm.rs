//! The tensor-core GEMMs (`matmul`: C = A·Wᵀ with `W[n, k]`; `matmul_nn`: C = A·B with
//! `B[k, n]`) against f64 references: fresh random inputs, outputs poisoned with NaN
//! first, every tile config, awkward shapes (m and n not multiples of the tiles, m < BM,
//! n not a multiple of 8, k of one tile and k not a multiple of BK, long k, empty k), on
//! the CPU backend (emulated `ldmatrix`/`mma`) at small sizes under two virtual-GPU
//! seeds, and on the GPU (when there is one) at prefill sizes. Plus the paper's Figure 1:
//! `Y = X·W1ᵀ` into a `Tiled<bf16, Rows<64>>`, then `Z = Y·W2ᵀ` on a 2-stream
//! `AsyncStream`, the consumer overlapping the producer through the data-tile semaphores,
//! with different producer and consumer tile configs.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{AsyncStream, Device, LaunchOptions, Result, Rows, Stream, Tensor, Tiled, bf16};
use megaops_kernels::gemm::{self, matmul, matmul_nn};

/// bf16 NaN: every element a kernel forgets to write fails the comparison.
const POISON: bf16 = bf16::from_bits(0xffc0);

/// Relative error allowed: bf16 rounding of the output is ≈ 1.5e-3 in norm.
const TOL: f64 = 5e-3;

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Rows `rows` of `C = A·Wᵀ` (`A[m, k]`, `W[n, k]`), in f64.
fn reference_nt(a: &[f64], w: &[f64], n: usize, k: usize, rows: &[usize]) -> Vec<f64> {
    let mut c = Vec::with_capacity(rows.len() * n);
    for &i in rows {
        let ar = &a[i * k..(i + 1) * k];
        c.extend((0..n).map(|j| ar.iter().zip(&w[j * k..(j + 1) * k]).map(|(x, y)| x * y).sum::<f64>()));
    }
    c
}

/// Rows `rows` of `C = A·B` (`A[m, k]`, `B[k, n]`), in f64.
fn reference_nn(a: &[f64], b: &[f64], n: usize, k: usize, rows: &[usize]) -> Vec<f64> {
    let mut c = Vec::with_capacity(rows.len() * n);
    for &i in rows {
        let mut acc = vec![0.0; n];
        for kk in 0..k {
            let x = a[i * k + kk];
            acc.iter_mut()
                .zip(&b[kk * n..(kk + 1) * n])
                .for_each(|(s, y)| *s += x * y);
        }
        c.extend(acc);
    }
    c
}

/// The rows a check compares: all of them, or (large outputs) the first and last rows of
/// every 64-row block plus a seeded sample — every element is still checked to be written.
fn rows_to_check(m: usize, n: usize, k: usize, seed: u64) -> Vec<usize> {
    if m * n * k <= 1 << 27 {
        return (0..m).collect();
    }
    let mut rows: Vec<usize> = (0..m).step_by(64).flat_map(|r| [r, (r + 63).min(m - 1)]).collect();
    rows.extend(
        megaops::testing::random_ints(16, 0, m as i64, seed)
            .into_iter()
            .map(|r| r as usize),
    );
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// One GEMM problem: inputs on the device and the f64 reference of the rows compared.
struct Problem {
    m: usize,
    n: usize,
    k: usize,
    nn: bool,
    a: Tensor<bf16>,
    b: Tensor<bf16>,
    rows: Vec<usize>,
    want: Vec<f64>,
}

impl Problem {
    /// Fresh random inputs (uniform in [-1, 1)) for `C[m, n] = A[m, k]·W[n, k]ᵀ` (or
    /// `A·B[k, n]` when `nn`), and the reference.
    fn new(dev: &Device, (m, n, k): (usize, usize, usize), nn: bool, seed: u64) -> Result<Problem> {
        let a = random::<bf16>(m * k, 1.0, seed);
        let b = random::<bf16>(n * k, 1.0, seed ^ 0xb0b);
        let rows = rows_to_check(m, n, k, seed);
        let (af, bf) = (f64s(&a), f64s(&b));
        let want = if nn {
            reference_nn(&af, &bf, n, k, &rows)
        } else {
            reference_nt(&af, &bf, n, k, &rows)
        };
        let a = Tensor::from_slice(dev, &[m, k], &a)?;
        let b_shape = if nn { [k, n] } else { [n, k] };
        let b = Tensor::from_slice(dev, &b_shape, &b)?;
        Ok(Problem {
            m,
            n,
            k,
            nn,
            a,
            b,
            rows,
            want,
        })
    }

    /// Runs tile config `config` into a poisoned C and compares.
    fn run(&self, config: usize) -> Result<()> {
        let Problem { m, n, k, nn, .. } = *self;
        let dev = self.a.device();
        let s = Stream::new(dev)?;
        let mut c = Tensor::full(dev, &[m, n], POISON)?;
        let opts = LaunchOptions::config(config);
        let (mu, nu, ku) = (m as u32, n as u32, k as u32);
        if nn {
            gemm::check_matmul_nn(mu, nu, ku, &self.b)?;
            matmul_nn::launch_with(&s, &opts, &self.a, &self.b, &mut c, mu, nu, ku)?;
        } else {
            gemm::check_matmul(mu, nu, ku, &self.b)?;
            matmul::launch_with(&s, &opts, &self.a, &self.b, &mut c, mu, nu, ku)?;
        }
        let out = c.to_vec()?;
        let kernel = if nn { "matmul_nn" } else { "matmul" };
        let what = format!(
            "{kernel} m={m} n={n} k={k} config {config} ({})",
            kernel_config_name(nn, config)
        );
        if let Some(i) = out.iter().position(|x| x.is_nan()) {
            panic!("{what}: element ({}, {}) was not written", i / n.max(1), i % n.max(1));
        }
        let got: Vec<bf16> = self
            .rows
            .iter()
            .flat_map(|&r| out[r * n..(r + 1) * n].iter().copied())
            .collect();
        assert_close(&what, &got, &self.want, TOL);
        Ok(())
    }
}

/// One problem, one config.
fn check(dev: &Device, shape: (usize, usize, usize), config: usize, nn: bool, seed: u64) -> Result<()> {
    Problem::new(dev, shape, nn, seed)?.run(config)
}

fn kernel_config_name(nn: bool, config: usize) -> &'static str {
    let configs = if nn { matmul_nn::CONFIGS } else { matmul::CONFIGS };
    configs.get(config).map_or("?", |c| c.name)
}

/// Awkward shapes, each run on a rotating config (NT allows any n; NN needs n % 8 == 0).
/// k is always a multiple of 8 (the kernels' documented requirement).
const AWKWARD: [(usize, usize, usize); 6] = [
    (77, 100, 40), // m, n not multiples of any tile; n % 8 != 0 (NT); k not a multiple of BK
    (5, 136, 32),  // m < BM; k = one tile of BK = 32
    (130, 72, 64), // one row past a 128-row tile; k = one tile of BK = 64
    (33, 264, 8),  // k shorter than a k-step
    (64, 64, 520), // long k, not a multiple of BK
    (1, 8, 16),    // a single row
];

#[test]
fn every_config_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("every_config_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    // One list serves both kernels (`matmul_configs!`): config `i` exists in each.
    for config in 0..matmul::CONFIGS.len() {
        for nn in [false, true] {
            check(&dev, (128, 128, 64), config, nn, seed.wrapping_add(config as u64))?;
            let (m, n, k) = AWKWARD[(config + 3 * nn as usize) % AWKWARD.len()];
            let n = if nn { n.next_multiple_of(8) } else { n };
            check(&dev, (m, n, k), config, nn, seed.wrapping_add(100 + config as u64))?;
        }
    }
    Ok(())
}

#[test]
fn edge_shapes_on_the_cpu_backend_under_two_seeds() -> Result<()> {
    let seed = fresh_seed("edge_shapes_on_the_cpu_backend_under_two_seeds");
    for vseed in [seed, seed ^ 0x9e37_79b9] {
        let dev = cpu_device(vseed)?;
        for (i, &shape) in AWKWARD.iter().enumerate() {
            check(&dev, shape, 0, false, vseed.wrapping_add(i as u64))?;
        }
        // n = 1 (scalar store path), k = 0 (C = 0), several tiles in both directions.
        check(&dev, (3, 1, 8), 5, false, vseed)?;
        check(&dev, (70, 24, 0), 5, false, vseed)?;
        check(&dev, (70, 24, 0), 4, true, vseed)?;
        check(&dev, (200, 264, 72), 5, true, vseed)?;
    }
    Ok(())
}

/// The `wgmma` configs (`WG = 1`, and `WG = 2` with its warp-specialised `mbarrier`
/// pipeline; on the CPU backend the emulated `wgmma` path) on every awkward shape and on a
/// k of many k-tiles, so the pipeline wraps around its stages several times.
#[test]
fn wgmma_configs_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("wgmma_configs_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let wgmma: Vec<usize> = (0..matmul::CONFIGS.len())
        .filter(|&c| matches!(matmul::CONSTS[c].WG, 1 | 2))
        .collect();
    assert!(wgmma.len() >= 4, "expected wgmma configs, got {wgmma:?}");
    for &config in &wgmma {
        for (i, &shape) in AWKWARD.iter().chain(&[(200, 300, 1000), (64, 256, 64)]).enumerate() {
            check(&dev, shape, config, false, seed.wrapping_add(i as u64))?;
        }
    }
    Ok(())
}

#[test]
fn host_checks_reject_unsupported_shapes() -> Result<()> {
    let dev = cpu_device(1)?;
    let w = Tensor::<bf16>::zeros(&dev, &[16, 12])?;
    assert!(
        gemm::check_matmul(4, 16, 12, &w).is_err(),
        "k % 8 != 0 must be rejected"
    );
    let w = Tensor::<bf16>::zeros(&dev, &[16, 24])?;
    assert!(gemm::check_matmul(4, 16, 24, &w).is_ok());
    assert!(gemm::check_matmul(4, 24, 16, &w).is_err(), "W must be [n, k]");
    assert!(gemm::check_matmul_nn(4, 16, 24, &w).is_err(), "B must be [k, n]");
    let b = Tensor::<bf16>::zeros(&dev, &[24, 12])?;
    assert!(gemm::check_matmul_nn(4, 12, 24, &b).is_err(), "NN needs n % 8 == 0");
    // The launchers refuse the same before anything runs.
    let s = Stream::new(&dev)?;
    let a = Tensor::<bf16>::zeros(&dev, &[4, 12])?;
    let w = Tensor::<bf16>::zeros(&dev, &[16, 12])?;
    let mut c = Tensor::<bf16>::zeros(&dev, &[4, 16])?;
    assert!(
        matmul::launch(&s, &a, &w, &mut c, 4, 16, 12).is_err(),
        "launcher: k % 8 != 0"
    );
    let a = Tensor::<bf16>::zeros(&dev, &[4, 16])?;
    let w = Tensor::<bf16>::zeros(&dev, &[24, 16])?;
    assert!(
        matmul::launch(&s, &a, &w, &mut c, 4, 16, 16).is_err(),
        "launcher: W must be [n, k]"
    );
    let b = Tensor::<bf16>::zeros(&dev, &[16, 12])?;
    let mut c = Tensor::<bf16>::zeros(&dev, &[4, 12])?;
    assert!(
        matmul_nn::launch(&s, &a, &b, &mut c, 4, 12, 16).is_err(),
        "launcher: NN needs n % 8 == 0"
    );
    Ok(())
}

/// Figure 1 of the paper: `Y = X·W1ᵀ` (producer, config `p`) into `Tiled<Rows<64>>`, then
/// `Z = Y·W2ᵀ` (consumer, config `q`) on an AsyncStream of two streams. The consumer's
/// CTAs wait only for the 64-row data tiles of Y they read.
fn check_chain(
    dev: &Device,
    (m, k1, n1, n2): (usize, usize, usize, usize),
    p: usize,
    q: usize,
    seed: u64,
) -> Result<()> {
    let x = random::<bf16>(m * k1, 1.0, seed);
    let w1 = random::<bf16>(n1 * k1, 1.0, seed ^ 1);
    let w2 = random::<bf16>(n2 * n1, 1.0, seed ^ 2);
    let xt = Tensor::from_slice(dev, &[m, k1], &x)?;
    let w1t = Tensor::from_slice(dev, &[n1, k1], &w1)?;
    let w2t = Tensor::from_slice(dev, &[n2, n1], &w2)?;
    let mut y = Tiled::new(dev, &[m, n1], Rows::<64>, "y")?;
    y.tensor().fill(POISON)?;
    let mut z = Tensor::full(dev, &[m, n2], POISON)?;
    let s = AsyncStream::new(dev, 2)?;
    let (mu, k1u, n1u, n2u) = (m as u32, k1 as u32, n1 as u32, n2 as u32);
    gemm::check_matmul(mu, n1u, k1u, &w1t)?;
    gemm::check_matmul(mu, n2u, n1u, &w2t)?;
    matmul::launch_with(&s, &LaunchOptions::config(p), &xt, &w1t, &mut y, mu, n1u, k1u)?;
    matmul::launch_with(&s, &LaunchOptions::config(q), &y, &w2t, &mut z, mu, n2u, n1u)?;
    s.synchronize()?;
    let what = format!("chain m={m} k1={k1} n1={n1} n2={n2}, producer config {p}, consumer config {q}");
    let rows: Vec<usize> = (0..m).collect();
    let y_ref = reference_nt(&f64s(&x), &f64s(&w1), n1, k1, &rows);
    let y_out = y.to_vec()?;
    assert_close(&format!("{what}: Y"), &y_out, &y_ref, TOL);
    // Z is computed from the bf16 Y the producer stored.
    let z_ref = reference_nt(&f64s(&y_out), &f64s(&w2), n2, n1, &rows);
    assert_close(&format!("{what}: Z"), &z.to_vec()?, &z_ref, TOL);
    Ok(())
}

#[test]
fn figure1_chain_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("figure1_chain_on_the_cpu_backend");
    for (i, vseed) in [seed, seed ^ 0x5eed].into_iter().enumerate() {
        let dev = cpu_device(vseed)?;
        // Producer 128×256 tiles (2 data tiles per CTA row) → consumer 64×64 tiles.
        check_chain(&dev, (192, 64, 128, 96), 1, 5, vseed.wrapping_add(i as u64))?;
        // Producer 64×64 tiles (several CTAs per data tile) → consumer 128×128 tiles.
        check_chain(&dev, (150, 32, 136, 72), 5, 0, vseed.wrapping_add(10 + i as u64))?;
        // Warp-specialised 128×256 tiles on both sides: the producer warpgroup of the
        // consumer waits for its rows of Y too.
        check_chain(&dev, (300, 64, 264, 520), 11, 11, vseed.wrapping_add(20 + i as u64))?;
    }
    Ok(())
}

/// Prefill-like shapes on the GPU, every config; the largest at full reference only on
/// sampled rows (every element is still checked to be written).
#[test]
fn every_config_on_the_gpu_at_prefill_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("every_config_on_the_gpu_at_prefill_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("every_config_on_the_gpu_at_prefill_sizes");
    let shapes: [(usize, usize, usize); 6] = [
        (1024, 1024, 1024),
        (2048, 4096, 1024),
        (1000, 3000, 2056),
        (4096, 2048, 6144),
        (37, 1100, 520),
        (8192, 1024, 3072),
    ];
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        for nn in [false, true] {
            let n = if nn { n.next_multiple_of(8) } else { n };
            let problem = Problem::new(&dev, (m, n, k), nn, seed.wrapping_add(i as u64))?;
            for config in 0..matmul::CONFIGS.len() {
                problem.run(config)?;
            }
        }
    }
    Ok(())
}

#[test]
fn figure1_chain_on_the_gpu() -> Result<()> {
    let Some(dev) = gpu_or_skip("figure1_chain_on_the_gpu") else {
        return Ok(());
    };
    let seed = fresh_seed("figure1_chain_on_the_gpu");
    for (i, &(p, q)) in [(1, 5), (0, 4), (2, 3), (5, 1)].iter().enumerate() {
        check_chain(&dev, (1000, 512, 1024, 768), p, q, seed.wrapping_add(i as u64))?;
    }
    Ok(())
}
