//! The paper's Figure 1: two back-to-back GEMMs, `Y = X·Wᵀ` then `Z = Y·Vᵀ`, overlapped
//! through row data tiles of `Y`.
//!
//! Both GEMMs are the kernel library's [`matmul`] (a `#[megaops::kernel]` whose kernel
//! tiling is `a: [pid_m: BM, _]`, `c: [pid_m: BM, pid_n: BN]`). `Y` is a
//! `Tiled<bf16, Rows<64>>`: the producer signals each 64-row data tile once every CTA
//! writing into it is done, and a consumer CTA waits only for the data tiles of the rows
//! it reads, so the second GEMM starts while the first one still runs. The producer and
//! the consumer pick their tile configs independently at launch
//! ([`LaunchOptions::config`]): swapping the producer's config changes nothing on the
//! consumer's side, the targets of the semaphores are derived from the producer's kernel
//! tiling.
//!
//! ```no_run
//! use megaops::{AsyncStream, Device};
//! use megaops_examples::fig1::{Fig1, Shape};
//!
//! let dev = Device::auto()?;
//! let mut fig1 = Fig1::new(&dev, Shape { m: 1000, k: 512, n1: 1000, n2: 768 }, 7)?;
//! let s = AsyncStream::new(&dev, 2)?;
//! fig1.run(&s, 0, 5)?; // producer config 0, consumer config 5
//! s.synchronize()?;
//! let report = fig1.check(64)?;
//! assert!(report.ok(), "{report}");
//! # Ok::<(), megaops::Error>(())
//! ```

use megaops::testing::{POISON_WORD, random, rel_error};
use megaops::{AsyncStream, Device, Error, LaunchOptions, Result, Rows, Tensor, Tiled, bf16};
use megaops_kernels::gemm::{self, matmul};
use std::fmt;

/// Relative error (‖out − ref‖₂ / ‖ref‖₂) accepted for bf16 outputs of f32-accumulated
/// GEMMs: bf16 rounding of the stored result is 2⁻⁹ relative.
pub const TOLERANCE: f64 = 1e-2;

/// The data tiling of `Y`: 64-row data tiles.
pub type YTiling = Rows<64>;

/// Problem size: `X[m, k]`, `W[n1, k]`, `Y[m, n1]`, `V[n2, n1]`, `Z[m, n2]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Rows of `X`, `Y` and `Z`.
    pub m: usize,
    /// Inner dimension of the first GEMM (a multiple of 8).
    pub k: usize,
    /// Columns of `Y` = inner dimension of the second GEMM (a multiple of 8).
    pub n1: usize,
    /// Columns of `Z`.
    pub n2: usize,
}

impl Shape {
    /// Floating-point operations of both GEMMs.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * (self.k as f64 * self.n1 as f64 + self.n1 as f64 * self.n2 as f64)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m={} k={} n1={} n2={}", self.m, self.k, self.n1, self.n2)
    }
}

/// The Figure 1 program: inputs, the tiled intermediate `Y` and the output `Z`.
pub struct Fig1 {
    shape: Shape,
    x: Tensor<bf16>,
    w: Tensor<bf16>,
    v: Tensor<bf16>,
    y: Tiled<bf16, YTiling>,
    z: Tensor<bf16>,
    runs: u64,
}

impl Fig1 {
    /// Random `X`, `W`, `V` (uniform in ±1, ±1/√k and ±1/√n1, so `Y` and `Z` stay of
    /// order one) from `seed`; `Y` and `Z` poisoned. Refuses shapes the GEMM cannot run
    /// (`k` or `n1` not a multiple of 8) before allocating anything.
    pub fn new(device: &Device, shape: Shape, seed: u64) -> Result<Fig1> {
        let Shape { m, k, n1, n2 } = shape;
        if !k.is_multiple_of(8) || !n1.is_multiple_of(8) {
            return Err(Error::Invalid(format!(
                "Figure 1 with {shape}: k and n1 must be multiples of 8 (the GEMM copies rows 16 bytes at a time)"
            )));
        }
        if m == 0 || k == 0 || n1 == 0 || n2 == 0 {
            return Err(Error::Invalid(format!(
                "Figure 1 with {shape}: every dimension must be positive"
            )));
        }
        let x = Tensor::from_slice(device, &[m, k], &random::<bf16>(m * k, 1.0, seed))?;
        let w = Tensor::from_slice(
            device,
            &[n1, k],
            &random::<bf16>(n1 * k, 1.0 / (k as f64).sqrt(), seed ^ 1),
        )?;
        let v = Tensor::from_slice(
            device,
            &[n2, n1],
            &random::<bf16>(n2 * n1, 1.0 / (n1 as f64).sqrt(), seed ^ 2),
        )?;
        let y = Tiled::new(device, &[m, n1], Rows::<64>, "y")?;
        let z = Tensor::zeros(device, &[m, n2])?;
        let fig1 = Fig1 {
            shape,
            x,
            w,
            v,
            y,
            z,
            runs: 0,
        };
        fig1.poison()?;
        Ok(fig1)
    }

    /// The problem size.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The intermediate `Y` (its data and semaphores).
    pub fn y(&self) -> &Tiled<bf16, YTiling> {
        &self.y
    }

    /// The output `Z`.
    pub fn z(&self) -> &Tensor<bf16> {
        &self.z
    }

    /// Overwrites `Y` and `Z` with NaNs, so elements a run fails to write fail [`Fig1::check`].
    pub fn poison(&self) -> Result<()> {
        let nan = bf16::from_bits((POISON_WORD & 0xFFFF) as u16);
        self.y.tensor().fill(nan)?;
        self.z.fill(nan)
    }

    /// Enqueues both GEMMs on `on`: the producer with tile config `producer` of
    /// [`matmul::CONFIGS`], the consumer with config `consumer`. On an overlapping
    /// AsyncStream the consumer's CTAs start as soon as the rows of `Y` they read are
    /// done; on [`AsyncStream::serial`] the same kernels run one after the other. Re-arms
    /// `Y` first when it was produced by an earlier run (also inside a graph capture).
    pub fn run(&mut self, on: &AsyncStream, producer: usize, consumer: usize) -> Result<()> {
        self.run_with(on, &LaunchOptions::config(producer), &LaunchOptions::config(consumer))
    }

    /// [`Fig1::run`] with full launch options for each GEMM (tile config, CTA remap,
    /// occupancy limit, wait timeout).
    pub fn run_with(&mut self, on: &AsyncStream, producer: &LaunchOptions, consumer: &LaunchOptions) -> Result<()> {
        let Shape { m, k, n1, n2 } = self.shape;
        let (m, k, n1, n2) = (dim(m)?, dim(k)?, dim(n1)?, dim(n2)?);
        if self.runs > 0 {
            self.y.rearm();
        }
        gemm::check_matmul(m, n1, k, &self.w)?;
        gemm::check_matmul(m, n2, n1, &self.v)?;
        matmul::launch_with(on, producer, &self.x, &self.w, &mut self.y, m, n1, k)?;
        matmul::launch_with(on, consumer, &self.y, &self.v, &mut self.z, m, n2, n1)?;
        self.runs += 1;
        Ok(())
    }

    /// Compares `Y` and `Z` (after the queued work finishes) with f64 references on `rows`
    /// rows spread over `m` (all rows when `rows >= m`; always the first and last). `Z`'s
    /// reference is computed from the bf16 `Y` the producer stored, so each GEMM is judged
    /// on its own rounding.
    pub fn check(&self, rows: usize) -> Result<Report> {
        let Shape { m, k, n1, n2 } = self.shape;
        let picked: Vec<usize> = if rows >= m {
            (0..m).collect()
        } else {
            let mut r: Vec<usize> = (0..rows).map(|i| i * (m - 1) / (rows - 1).max(1)).collect();
            r.dedup();
            r
        };
        let x = to_f64(&self.x.to_vec()?);
        let w = to_f64(&self.w.to_vec()?);
        let v = to_f64(&self.v.to_vec()?);
        let y_all = self.y.to_vec()?;
        let z_all = self.z.to_vec()?;
        let (mut y_out, mut y_ref, mut z_out, mut z_ref) = (vec![], vec![], vec![], vec![]);
        for &i in &picked {
            let y_row = &y_all[i * n1..(i + 1) * n1];
            y_out.extend_from_slice(y_row);
            y_ref.extend(row_times_nt(&x[i * k..(i + 1) * k], &w, n1, k));
            z_out.extend_from_slice(&z_all[i * n2..(i + 1) * n2]);
            z_ref.extend(row_times_nt(&to_f64(y_row), &v, n2, n1));
        }
        Ok(Report {
            rows: picked.len(),
            y_error: rel_error(&y_out, &y_ref),
            z_error: rel_error(&z_out, &z_ref),
        })
    }
}

/// How far a run's outputs are from the f64 references.
#[derive(Clone, Copy, Debug)]
pub struct Report {
    /// Rows compared.
    pub rows: usize,
    /// Relative error of `Y` (infinite when an element was not written).
    pub y_error: f64,
    /// Relative error of `Z` (infinite when an element was not written).
    pub z_error: f64,
}

impl Report {
    /// Both errors within [`TOLERANCE`].
    pub fn ok(&self) -> bool {
        self.y_error <= TOLERANCE && self.z_error <= TOLERANCE
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows checked: Y rel. error {:.2e}, Z rel. error {:.2e} (tolerance {TOLERANCE:.0e}){}",
            self.rows,
            self.y_error,
            self.z_error,
            if self.ok() { "" } else { " — MISMATCH" }
        )
    }
}

fn dim(x: usize) -> Result<u32> {
    u32::try_from(x).map_err(|_| Error::Invalid(format!("Figure 1: dimension {x} does not fit the kernels' u32")))
}

fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `row · Wᵀ` for `W[n, k]`, in f64.
fn row_times_nt(row: &[f64], w: &[f64], n: usize, k: usize) -> Vec<f64> {
    (0..n)
        .map(|j| row.iter().zip(&w[j * k..(j + 1) * k]).map(|(a, b)| a * b).sum())
        .collect()
}
