//! Host-side helpers of the GEMM kernels: the weight's shape and alignment checks (the
//! launchers check the shapes and `k` too, alignment only these helpers), and a grouped
//! CTA order for L2 reuse. Tile sizes of each config: `matmul::CONSTS`.

use megaops::{Error, Result, Tensor, bf16};

fn check_common(
    kernel: &str,
    m: u32,
    n: u32,
    k: u32,
    b: &Tensor<bf16>,
    b_shape: [usize; 2],
    b_name: &str,
) -> Result<()> {
    if b.shape() != b_shape {
        return Err(Error::shape(format!(
            "`{kernel}` with m = {m}, n = {n}, k = {k} expects `{b_name}` of shape {b_shape:?}, got {:?}",
            b.shape()
        )));
    }
    if !k.is_multiple_of(8) {
        return Err(Error::shape(format!(
            "`{kernel}` needs k % 8 == 0 (16-byte aligned rows for cp.async); k = {k}: pad k to a multiple of 8"
        )));
    }
    if !b.addr().is_multiple_of(16) {
        return Err(Error::shape(format!(
            "`{kernel}`: `{b_name}` must be 16-byte aligned (address {:#x})",
            b.addr()
        )));
    }
    let _ = m;
    Ok(())
}

/// Checks [`super::matmul`]'s weight: `w` is `[n, k]`, `k % 8 == 0` (as the launcher does),
/// and `w` is 16-byte aligned (which the launcher does not check; whole tensors are).
pub fn check_matmul(m: u32, n: u32, k: u32, w: &Tensor<bf16>) -> Result<()> {
    check_common("matmul", m, n, k, w, [n as usize, k as usize], "w")
}

/// Checks [`super::matmul_nn`]'s `b`: `[k, n]`, `k % 8 == 0`, `n % 8 == 0` (as the
/// launcher does), and 16-byte aligned (which the launcher does not check).
pub fn check_matmul_nn(m: u32, n: u32, k: u32, b: &Tensor<bf16>) -> Result<()> {
    check_common("matmul_nn", m, n, k, b, [k as usize, n as usize], "b")?;
    if !n.is_multiple_of(8) {
        return Err(Error::shape(format!(
            "`matmul_nn` needs n % 8 == 0 (16-byte aligned rows of B); n = {n}"
        )));
    }
    Ok(())
}

/// A CTA order (for `Remap::Table`) that walks the tile grid of an `m × n` output with
/// `bm × bn` tiles in groups of `group` tile rows: consecutive CTAs sweep `group` rows of
/// `A` across all of `n` column by column, so the CTAs resident at once share both A and
/// W tiles in L2 (Triton's "grouped ordering"). Entry `t` is the row-major kernel-tile
/// index (`pid_m · n.div_ceil(bn) + pid_n`) that CTA `t` computes; a permutation.
pub fn grouped_order(m: u32, n: u32, bm: u32, bn: u32, group: u32) -> Vec<u32> {
    let (tiles_m, tiles_n) = (m.div_ceil(bm.max(1)), n.div_ceil(bn.max(1)));
    let group = group.max(1);
    let per_group = group * tiles_n;
    (0..tiles_m * tiles_n)
        .map(|t| {
            let first_m = (t / per_group) * group;
            let rows = (tiles_m - first_m).min(group);
            let in_group = t % per_group;
            let (pid_m, pid_n) = (first_m + in_group % rows, in_group / rows);
            pid_m * tiles_n + pid_n
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_order_is_a_permutation() {
        for (m, n, bm, bn, g) in [
            (1000, 3000, 128, 128, 8),
            (64, 64, 128, 128, 4),
            (4096, 4096, 128, 256, 8),
            (300, 50, 64, 64, 3),
        ] {
            let mut order = grouped_order(m, n, bm, bn, g);
            let len = order.len();
            assert_eq!(len as u32, m.div_ceil(bm) * n.div_ceil(bn));
            order.sort_unstable();
            assert!(
                order.iter().enumerate().all(|(i, &t)| i as u32 == t),
                "{m}×{n} / {bm}×{bn} group {g}"
            );
        }
    }
}
