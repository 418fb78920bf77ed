//! Helpers for correctness tests of kernels, shared by every kernel crate's tests and by
//! the GPU test binaries: device selection with a stated reason, seeded random inputs,
//! poisoning, and comparison against a higher-precision reference.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use megaops_device::cpu::VgpuConfig;
use rand::{Rng, SeedableRng};

/// The CPU backend for tests: a small virtual GPU (4 SMs) with the given interleaving seed.
pub fn cpu_device(seed: u64) -> Result<Device> {
    Device::cpu(VgpuConfig {
        sms: 4,
        max_threads_per_sm: 1024,
        seed,
        ..VgpuConfig::default()
    })
}

/// GPU 0, or `None` after printing why a GPU test is skipped (no driver, no device).
/// `MEGAOPS_REQUIRE_GPU=1` turns the skip into a panic (used on the GPU machine, so a
/// broken driver cannot pass silently).
pub fn gpu_or_skip(test: &str) -> Option<Device> {
    match Device::cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var_os("MEGAOPS_REQUIRE_GPU").is_some() {
                panic!("{test}: a GPU is required (MEGAOPS_REQUIRE_GPU is set) but: {e}");
            }
            eprintln!("skipped {test}: no GPU ({e})");
            None
        }
    }
}

/// Seeded uniform random values in `[-scale, scale)`, rounded to `T`.
pub fn random<T: DType>(n: usize, scale: f64, seed: u64) -> Vec<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| T::from_f64(rng.random_range(-scale..scale))).collect()
}

/// Seeded random integers in `lo..hi`.
pub fn random_ints(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// A fresh seed for each call (time-based), printed so a failure can be replayed with
/// `MEGAOPS_SEED=<n>`.
pub fn fresh_seed(test: &str) -> u64 {
    let seed = std::env::var("MEGAOPS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with MEGAOPS_SEED={seed})");
    seed
}

/// Word written over outputs before a kernel runs: NaN as f32, and both of its bf16
/// halves are NaN too, so any element the kernel fails to write fails the comparison.
pub const POISON_WORD: u32 = 0xFFC0_FFC0;

/// `‖out − ref‖₂ / ‖ref‖₂` in f64; NaN anywhere in `out` gives infinity.
pub fn rel_error<T: DType>(out: &[T], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    let (mut num, mut den) = (0f64, 0f64);
    for (o, r) in out.iter().zip(reference) {
        let o = o.to_f64();
        if !o.is_finite() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 { num.sqrt() } else { (num / den).sqrt() }
}

/// Panics with a helpful message (first bad element, sizes) unless
/// `rel_error(out, reference) <= tol`.
pub fn assert_close<T: DType>(what: &str, out: &[T], reference: &[f64], tol: f64) {
    let err = rel_error(out, reference);
    if err <= tol {
        return;
    }
    let worst = out
        .iter()
        .zip(reference)
        .enumerate()
        .map(|(i, (o, r))| {
            (
                i,
                o.to_f64(),
                *r,
                if o.to_f64().is_finite() {
                    (o.to_f64() - r).abs()
                } else {
                    f64::INFINITY
                },
            )
        })
        .max_by(|a, b| a.3.total_cmp(&b.3));
    let unwritten: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.to_f64().is_finite())
        .map(|(i, _)| i)
        .collect();
    let non_finite = match (unwritten.first(), unwritten.last()) {
        (Some(first), Some(last)) => format!("; {} not finite, indices {first} to {last}", unwritten.len()),
        _ => String::new(),
    };
    panic!(
        "{what}: relative error {err:.3e} > {tol:.1e} ({} outputs, {} references); worst element {:?} (index, got, expected, |diff|){non_finite}",
        out.len(),
        reference.len(),
        worst
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn poison_is_nan_in_every_float_view() {
        assert!(f32::from_bits(POISON_WORD).is_nan());
        assert!(bf16::from_bits((POISON_WORD & 0xFFFF) as u16).is_nan());
        assert!(bf16::from_bits((POISON_WORD >> 16) as u16).is_nan());
    }

    #[test]
    fn relative_error_and_nan() {
        let r = [1.0, 2.0, 2.0];
        assert_eq!(rel_error(&[1.0f32, 2.0, 2.0], &r), 0.0);
        assert!((rel_error(&[1.0f32, 2.0, 5.0], &r) - 1.0).abs() < 1e-12);
        assert!(rel_error(&[f32::NAN, 2.0, 2.0], &r).is_infinite());
        let v: Vec<bf16> = random(100, 1.0, 7);
        let r = std::panic::catch_unwind(|| assert_close("t", &[1.0f32, f32::NAN, 2.0, f32::NAN], &[1.0; 4], 1e-3));
        let msg = r
            .expect_err("NaN outputs fail")
            .downcast::<String>()
            .expect("a formatted message");
        assert!(msg.ends_with("; 2 not finite, indices 1 to 3"), "{msg}");
        assert_eq!(v, random::<bf16>(100, 1.0, 7));
    }
}
