//! [`gemv_add_rmsnorm`]: a projection with the decoder layer's residual add and RMSNorm
//! *behind* it, run by the CTA of the launch that finishes last, so that the normalised
//! rows reach the next projection without a kernel in between.

use super::engine::{self, CtaJob, Epilogue, WarpJob};
use megaops::bf16;
use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::thread;

/// `y = x · Wᵀ` followed by the residual add and RMSNorm of the whole output:
/// `res_out = bf16(y + res)`, `xn = bf16(res_out · rstd · norm_w)` with
/// `rstd = 1 / sqrt(mean(res_out²) + eps)` per row (as
/// [`norm::add_rmsnorm`](crate::norm::add_rmsnorm), up to the order of the f32 sum of
/// squares), in one launch.
///
/// Every CTA computes its `BN` columns of `y` as [`gemv`](super::gemv) does (bf16, into
/// the scratch `y`) and takes a ticket ([`engine::last_to_arrive`]); the CTA that takes
/// the last one normalises all `m` rows (`norm::add_rmsnorm_by_warps`: the rows' chunks
/// spread over its warps) and resets the ticket. Both outputs are signalled by every CTA
/// (`split = pid_n`), so a consumer sees them ready only once the last CTA, which wrote
/// them, has signalled. The first `PF` batches of W are loaded before the waits; the
/// residual `res`, written kernels earlier, is waited for before `x`.
///
/// Layouts (row-major): `x` `[m, k]` (the sublayer input, e.g. attention's output);
/// `w` `[n, k]`; `res`, `res_out`, `xn` `[m, n]`; `norm_w` `[n]`; scratch `y` `[m, n]`
/// bf16 and `ticket` one u32, **zero before the first launch** (each complete launch
/// leaves it zero; register it with `Device::register_tickets` so that a failed launch
/// does not leave it set). Meant for `m · n ≤ NORM_PROLOGUE_MAX_ELEMS`, one CTA's norm.
/// Configs: [`gemv`](super::gemv)'s.
///
/// Emits what [`gemv`](super::gemv) does, then `fence.acq_rel.gpu`,
/// `atom.acq_rel.gpu.global.add.u32` and `bar.red.or` for the ticket, and in the last CTA
/// the norm's `ld.global.cg.v4`, `ld.global.nc.v4`, `st.global.v4`, `shfl.sync.bfly` and
/// `bar.sync`.
///
/// # Safety
/// Pointers valid for the shapes above; `n > 0`; no other launch that may run at the same
/// time uses `y` or `ticket`.
#[megaops::kernel(
    block = 2 * BN * WK,
    smem = engine::smem_bytes(BN, WK, 1),
    min_ctas = MIN_CTAS,
    tiles(pid_n = n.div_ceil(BN)),
    input(res[m, n] = [_, _]),
    input(x[m, k] = [_, _]),
    output(xn[m, n] = [_, _], split = pid_n),
    output(res_out[m, n] = [_, _], split = pid_n),
    tensor(w[n, k]),
    tensor(norm_w[n]),
    scratch(y[m * n]),
    scratch(ticket[1]),
    check(n > 0, "the output width n must be positive"),
    check(m * n <= crate::gemv::NORM_PROLOGUE_MAX_ELEMS, "one CTA normalises the whole output: m · n must be at most gemv::NORM_PROLOGUE_MAX_ELEMS"),
    configs = gemv_configs!,
)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv_add_rmsnorm(
    x: *const bf16,
    w: *const bf16,
    res: *const bf16,
    norm_w: *const bf16,
    y: *mut bf16,
    ticket: *mut u32,
    xn: *mut bf16,
    res_out: *mut bf16,
    m: u32,
    n: u32,
    k: u32,
    eps: f32,
) {
    let cta = CtaJob {
        n0: pid_n * BN,
        split: 0,
        splits: 1,
    };
    let job = WarpJob::<1>::new::<BN, WK, U>([w], n, k, cta);
    #[prefetch]
    // SAFETY: `w` is `[n, k]` (kernel contract); rows past `n` are not read.
    let ring = unsafe { job.prefetch::<U, PF>() };
    // The residual was written kernels ago: waiting for it here costs no time on the path
    // from `x`'s producer.
    let residual = res;
    let ep = Epilogue {
        out: y,
        ws: core::ptr::null_mut(),
        counters: core::ptr::null_mut(),
        m,
        n,
        tile: pid_n,
    };
    // SAFETY: a CTA of 2·BN·WK threads with smem_bytes(BN, WK, 1) bytes (the annotation);
    // pointers valid for the shapes (kernel contract); no split, so no workspace.
    unsafe { engine::run::<BN, WK, 1, U, PF, false, bf16>(x, &job, cta, ring, &ep) };
    // SAFETY: every thread calls it after its stores of `y`; one ticket for the launch
    // (kernel contract), which has `n.div_ceil(BN)` CTAs.
    if unsafe { engine::last_to_arrive(ticket, n.div_ceil(BN)) } {
        // SAFETY: the last CTA alone writes `xn` and `res_out` (`[m, n]`) and reads `y`,
        // complete and acquired by the ticket; `m · n` is within the norm's bound (check).
        unsafe {
            crate::norm::add_rmsnorm_by_warps::<{ 2 * BN * WK }>(y, residual, norm_w, xn, res_out, m, n, eps);
            if thread::linear_thread_idx() == 0 {
                // Every CTA has taken its ticket; the next launch is ordered after this one.
                atomic::global::store(ticket, 0u32, Relaxed, Gpu);
            }
        }
    }
}
