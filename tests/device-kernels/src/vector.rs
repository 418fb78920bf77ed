//! 16- and 8-byte vector loads and stores of global memory, and L2 prefetch.

use crate::global_id;
use megaops_device::memory::*;
use megaops_device::thread::*;

/// Number of `n`-word regions [`vector_copy`] writes.
pub const VECTOR_REGIONS: usize = 6;

/// Copies `src[0..n]` into six regions of `dst` (`dst[r·n..(r+1)·n]`), each through a
/// different path, in 16-byte chunks (grid-stride):
///
/// 0. `ld.global.v4.u32` → `st.global.v4.u32`
/// 1. `ld.global.nc.v4.u32` → `st.global.v4.u32`
/// 2. `ld.global.cg.v4.u32` → `st.global.v4.u32`
/// 3. two `ld.global.v2.u32` → two `st.global.v2.u32`
/// 4. `ld.global.nc.v2.u32` + `ld.global.cg.v2.u32` → `st.global.v2.u32` ×2
/// 5. `ld_global_v4_f32`, each value doubled (as `f32`), `st_global_v4_f32`
///
/// Every 128-byte line of `src` is prefetched to L2 first (`prefetch.global.L2`).
///
/// Launch: any 1-D grid and block; `n` a multiple of 4, `src` and `dst` 16-byte aligned.
/// For a bit-exact region 5, let `src` hold finite `f32` bit patterns (NaN payloads may
/// differ between the GPU and the host).
///
/// # Safety
/// `src` holds `n` words, `dst` `6n` words, both in global memory, not overlapping.
pub unsafe fn vector_copy(src: *const u32, dst: *mut u32, n: u32) {
    let stride = block_dim_x() * grid_dim_x();
    let mut line = global_id();
    while line * 32 < n {
        // SAFETY: inside `src`.
        unsafe { prefetch_l2(src.add(line as usize * 32)) };
        line += stride;
    }
    let mut c = global_id();
    while c * 4 < n {
        let i = c as usize * 4;
        let region = |r: usize| dst.wrapping_add(r * n as usize + i);
        // SAFETY: chunk `c` is inside `src` and inside every region of `dst`; all
        // addresses are 16-byte aligned (aligned bases, i a multiple of 4 words).
        unsafe {
            st_global_v4_u32(region(0), ld_global_v4_u32(src.add(i)));
            st_global_v4_u32(region(1), ld_global_nc_v4_u32(src.add(i)));
            st_global_v4_u32(region(2), ld_global_cg_v4_u32(src.add(i)));
            st_global_v2_u32(region(3), ld_global_v2_u32(src.add(i)));
            st_global_v2_u32(region(3).add(2), ld_global_v2_u32(src.add(i + 2)));
            st_global_v2_u32(region(4), ld_global_nc_v2_u32(src.add(i)));
            st_global_v2_u32(region(4).add(2), ld_global_cg_v2_u32(src.add(i + 2)));
            let f = ld_global_v4_f32(src.add(i).cast());
            st_global_v4_f32(region(5).cast(), f.map(|x| x * 2.0));
        }
        c += stride;
    }
}
entry!(vector_copy(src: *const u32, dst: *mut u32, n: u32));

/// CPU references.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    use super::*;

    /// What [`vector_copy`] writes to `dst` for input `src`.
    pub fn vector_copy(src: &[u32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(src.len() * VECTOR_REGIONS);
        for _ in 0..5 {
            out.extend_from_slice(src);
        }
        out.extend(src.iter().map(|&w| (f32::from_bits(w) * 2.0).to_bits()));
        out
    }
}
