//! QK-norm, rotary position embedding and the KV-cache write, fused in one kernel
//! ([`qk_norm_rope`]) that sits between the QKV projection and attention.
//!
//! Per token `t` of the QKV projection output (`hq` query heads, then `hkv` key heads,
//! then `hkv` value heads, each `D` wide):
//!
//! 1. Qwen3 only (flag [`QK_NORM`]): RMSNorm over each q and k head with the weights
//!    `q_norm[D]` / `k_norm[D]` (same `eps` formula as [`crate::norm`]);
//! 2. RoPE at position `positions[t]` on q and k, with the angles read from a `cos_sin`
//!    table built on the host ([`RopeTable`], f64 angle math, so Llama-3's `rope_type =
//!    "llama3"` frequency scaling and any base are host-side choices): either Hugging
//!    Face's `rotate_half` pairing (element `i` with `i + D/2`, the default) or the
//!    interleaved GPT-J / original-Meta pairing (`2i` with `2i + 1`, flag
//!    [`INTERLEAVED`]);
//! 3. rotated q → `q_out[t]`; rotated k and the unchanged v → row `slots[t]` of the KV
//!    cache.
//!
//! # KV-cache layout (shared with [`crate::attention`])
//!
//! One bf16 tensor per layer for keys and one for values, each `[batch, max_seq, hkv, D]`
//! row-major, seen by the kernels as rank 2: `[cache_rows = batch · max_seq, hkv · D]`.
//! Token `p` of sequence `b` lives in row `b · max_seq + p`, so `slots[t]` of a token at
//! position `p` of sequence `b` is `b · max_seq + p`.

use crate::attention::math::{pack8, rsqrt, unpack8};
use megaops::bf16;
use megaops::device::memory::{ld_global_cg_v4_u32, ld_global_nc_v4_u32, st_global_v4_u32};
use megaops::device::thread::{lane_id, warp_id};
use megaops::device::warp::{FULL_MASK, shfl_xor_sync};

/// Flag of [`qk_norm_rope`]: RMSNorm each q and k head (Qwen3) before RoPE.
pub const QK_NORM: u32 = 1;
/// Flag of [`qk_norm_rope`]: interleaved RoPE pairs `(2i, 2i+1)` instead of `rotate_half`.
pub const INTERLEAVED: u32 = 2;

/// QK-norm (optional), RoPE on q and k, and the KV-cache write; see the module docs.
///
/// Layouts (`D` = head dim, a config constant):
/// - `qkv`: `[m, (hq + 2·hkv)·D]` bf16, per row the q heads, then k heads, then v heads;
/// - `positions`, `slots`: `[m]` u32, the RoPE position of each token and its KV-cache row
///   (`positions[t]` is clamped to `max_pos - 1`; a slot `>= cache_rows` is not written);
/// - `cos_sin`: `[max_pos, D]` f32 from [`RopeTable`]: per position `cos(p·θ_j)` for
///   `j < D/2`, then `sin(p·θ_j)`;
/// - `q_norm`, `k_norm`: `[D]` bf16 (read only with [`QK_NORM`]; pass any `[D]` tensor
///   otherwise);
/// - `q_out`: `[m, hq·D]` bf16;
/// - `k_cache`, `v_cache`: `[cache_rows, hkv·D]` bf16 (module docs).
///
/// `flags`: [`QK_NORM`] | [`INTERLEAVED`].
///
/// Kernel tile `pid_m`: tokens `pid_m·BM ..`: q rows are signalled per tile. The caches are
/// written at arbitrary rows, so they are signalled as a whole: every kernel tile adds one
/// signal (`split = pid_m`), and a consumer that waits on the whole cache (decode and
/// prefill attention do) starts once every token of the launch is in. Give a `Tiled`
/// cache a single data tile (e.g. `DynRows(cache_rows)`), and keep the number of tiles
/// `m / BM` below 32768 (the largest signal count per data tile).
///
/// Work split: a warp handles `32 / (D/8)` head vectors at a time, each lane 8 elements
/// (16-byte loads and stores); the norm reduces over the `D/8` lanes of a vector and
/// `rotate_half` swaps halves with one `shfl.bfly`. Configs: `D = 128` and `D = 64`, each
/// with `BM = 1` (decode) and `BM = 4` (prefill) at 256 threads; for decode also 512
/// (`D = 128` and `D = 64`) and 1024 threads (`D = 128`), so that one pass of the warps
/// covers every head of a token ([`heads_per_pass`]).
///
/// # Safety
/// Pointers valid for the shapes above; `max_pos > 0`.
#[megaops::kernel(
    block = THREADS,
    tiles(pid_m = m.div_ceil(BM)),
    input(qkv[m, (hq + 2 * hkv) * D] = [pid_m: BM, _]),
    output(q_out[m, hq * D] = [pid_m: BM, _]),
    output(k_cache[cache_rows, hkv * D] = [_, _], split = pid_m),
    output(v_cache[cache_rows, hkv * D] = [_, _], split = pid_m),
    tensor(positions[m]),
    tensor(slots[m]),
    tensor(cos_sin[max_pos, D]),
    tensor(q_norm[D]),
    tensor(k_norm[D]),
    check(max_pos > 0, "the cos/sin table needs at least one position"),
)]
#[config(D = 128, BM = 1, THREADS = 256)]
#[config(D = 128, BM = 4, THREADS = 256)]
#[config(D = 64, BM = 1, THREADS = 256)]
#[config(D = 64, BM = 4, THREADS = 256)]
#[config(D = 128, BM = 1, THREADS = 512)]
#[config(D = 128, BM = 1, THREADS = 1024)]
#[config(D = 64, BM = 1, THREADS = 512)]
pub unsafe fn qk_norm_rope(
    qkv: *const bf16,
    positions: *const u32,
    slots: *const u32,
    cos_sin: *const f32,
    q_norm: *const bf16,
    k_norm: *const bf16,
    q_out: *mut bf16,
    k_cache: *mut bf16,
    v_cache: *mut bf16,
    m: u32,
    hq: u32,
    hkv: u32,
    cache_rows: u32,
    max_pos: u32,
    flags: u32,
    eps: f32,
) {
    let out = Outputs {
        q_out,
        k_cache,
        v_cache,
        cache_rows,
    };
    let params = Params {
        positions,
        slots,
        cos_sin,
        q_norm,
        k_norm,
        hq,
        hkv,
        max_pos,
        flags,
        eps,
    };
    let row0 = pid_m * BM;
    let rows = BM.min(m - row0);
    // SAFETY: rows row0.. < m of every tensor (kernel contract).
    unsafe { rope_tile::<D, THREADS>(qkv, &params, &out, row0, rows) };
}

/// Head vectors one pass of a `threads`-thread CTA covers at head dim `d`: each warp takes
/// `32 / (d / 8)` vectors at a time.
pub const fn heads_per_pass(d: u32, threads: u32) -> u32 {
    (threads / 32) * (32 / (d / 8))
}

/// Where [`qk_norm_rope`] writes.
struct Outputs {
    q_out: *mut bf16,
    k_cache: *mut bf16,
    v_cache: *mut bf16,
    cache_rows: u32,
}

/// The plain parameters of [`qk_norm_rope`].
struct Params {
    positions: *const u32,
    slots: *const u32,
    cos_sin: *const f32,
    q_norm: *const bf16,
    k_norm: *const bf16,
    hq: u32,
    hkv: u32,
    max_pos: u32,
    flags: u32,
    eps: f32,
}

/// All head vectors of tokens `row0 .. row0 + rows`.
///
/// # Safety
/// As for [`qk_norm_rope`].
#[inline(always)]
unsafe fn rope_tile<const D: u32, const THREADS: u32>(
    qkv: *const bf16,
    p: &Params,
    out: &Outputs,
    row0: u32,
    rows: u32,
) {
    let lpv = D / 8; // lanes per head vector
    let vpw = 32 / lpv; // vectors per warp
    let (lane, warp) = (lane_id(), warp_id());
    let (slot_in_warp, chunk) = (lane / lpv, lane % lpv);
    let heads = p.hq + 2 * p.hkv;
    let total = rows * heads;
    let per_iter = (THREADS / 32) * vpw;
    // Uniform per warp: all lanes run every shuffle; lanes past the end are masked.
    let mut base = warp * vpw;
    while base < total {
        let item = base + slot_in_warp;
        let active = item < total;
        let (t, j) = (row0 + item / heads, item % heads);
        let src = t as usize * (heads * D) as usize + (j * D + 8 * chunk) as usize;
        // SAFETY: element `src..src+8` of qkv when active; the input was waited for.
        let raw = if active {
            unsafe { ld_global_cg_v4_u32(qkv.add(src).cast()) }
        } else {
            [0; 4]
        };
        let is_q = j < p.hq;
        let is_k = !is_q && j < p.hq + p.hkv;
        let mut x = unpack8(raw);
        if p.flags & QK_NORM != 0 {
            let w = if is_q { p.q_norm } else { p.k_norm };
            // SAFETY: lane reads of the [D] weights, only for q and k heads.
            let wv = if active && (is_q || is_k) {
                unpack8(unsafe { ld_global_nc_v4_u32(w.add(8 * chunk as usize).cast()) })
            } else {
                [0.0; 8]
            };
            x = head_norm(x, wv, lpv, D, p.eps, is_q || is_k);
        }
        let pos = if active {
            // SAFETY: t < m.
            unsafe { *p.positions.add(t as usize) }.min(p.max_pos - 1)
        } else {
            0
        };
        // SAFETY: row `pos < max_pos` of the table.
        let rotated = unsafe { rotate(x, p.cos_sin.add((pos * D) as usize), chunk, lpv, p.flags) };
        if active {
            // SAFETY: t < m, slot checked against cache_rows.
            unsafe {
                if is_q {
                    let dst = t as usize * (p.hq * D) as usize + (j * D + 8 * chunk) as usize;
                    st_global_v4_u32(out.q_out.add(dst).cast(), pack8(rotated));
                } else {
                    let slot = *p.slots.add(t as usize);
                    if slot < out.cache_rows {
                        let (cache, h, v) = if is_k {
                            (out.k_cache, j - p.hq, pack8(rotated))
                        } else {
                            (out.v_cache, j - p.hq - p.hkv, raw)
                        };
                        let dst = slot as usize * (p.hkv * D) as usize + (h * D + 8 * chunk) as usize;
                        st_global_v4_u32(cache.add(dst).cast(), v);
                    }
                }
            }
        }
        base += per_iter;
    }
}

/// RMSNorm of one head vector held as 8 elements per lane over `lpv` lanes (every lane of
/// the warp must call it; the sum reduces within aligned groups of `lpv` lanes). Returns
/// `x` unchanged when `apply` is false.
#[inline(always)]
pub(crate) fn head_norm(x: [f32; 8], w: [f32; 8], lpv: u32, d: u32, eps: f32, apply: bool) -> [f32; 8] {
    let mut ss = 0.0f32;
    for v in x {
        ss += v * v;
    }
    let mut off = 1;
    while off < lpv {
        ss += shfl_xor_sync(FULL_MASK, ss, off);
        off *= 2;
    }
    let rstd = rsqrt(ss / d as f32 + eps);
    if apply {
        core::array::from_fn(|i| x[i] * rstd * w[i])
    } else {
        x
    }
}

/// Rotates the 8 elements `8·chunk ..` of a head vector of `8·lpv` elements (every lane of the warp must call
/// it: `rotate_half` exchanges halves between lanes `lpv / 2` apart).
///
/// # Safety
/// `table` points to a row of `8·lpv` f32 (cos, then sin), 16-byte aligned.
#[inline(always)]
pub(crate) unsafe fn rotate(x: [f32; 8], table: *const f32, chunk: u32, lpv: u32, flags: u32) -> [f32; 8] {
    // A head vector is `lpv` lanes of 8 elements.
    let half = (4 * lpv) as usize;
    if flags & INTERLEAVED != 0 {
        // Pairs (2i, 2i+1) of this lane: frequencies 4·chunk .. 4·chunk + 4.
        let f = 4 * chunk as usize;
        // SAFETY: f + 4 <= D/2 (caller's table row).
        let (c, s) = unsafe {
            (
                ld_global_nc_v4_f32(table.add(f)),
                ld_global_nc_v4_f32(table.add(half + f)),
            )
        };
        let mut y = [0.0; 8];
        for i in 0..4 {
            y[2 * i] = x[2 * i] * c[i] - x[2 * i + 1] * s[i];
            y[2 * i + 1] = x[2 * i + 1] * c[i] + x[2 * i] * s[i];
        }
        y
    } else {
        let other: [f32; 8] = core::array::from_fn(|i| shfl_xor_sync(FULL_MASK, x[i], lpv / 2));
        let first = chunk < lpv / 2;
        let f = (8 * chunk as usize) % half;
        // SAFETY: f + 8 <= D/2.
        let (c0, c1, s0, s1) = unsafe {
            (
                ld_global_nc_v4_f32(table.add(f)),
                ld_global_nc_v4_f32(table.add(f + 4)),
                ld_global_nc_v4_f32(table.add(half + f)),
                ld_global_nc_v4_f32(table.add(half + f + 4)),
            )
        };
        let (c, s) = ([c0, c1].concat_arr(), [s0, s1].concat_arr());
        // rotate_half(x)[i] = -x[i + D/2] (first half), x[i - D/2] (second half).
        core::array::from_fn(|i| {
            if first {
                x[i] * c[i] - other[i] * s[i]
            } else {
                x[i] * c[i] + other[i] * s[i]
            }
        })
    }
}

/// Concatenation of two `[f32; 4]`.
trait Concat {
    fn concat_arr(self) -> [f32; 8];
}

impl Concat for [[f32; 4]; 2] {
    #[inline(always)]
    fn concat_arr(self) -> [f32; 8] {
        let [a, b] = self;
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    }
}

/// Loads four f32 through the read-only path.
///
/// # Safety
/// 16 readable, 16-byte aligned bytes that nobody writes while the kernel runs.
#[inline(always)]
unsafe fn ld_global_nc_v4_f32(p: *const f32) -> [f32; 4] {
    // SAFETY: forwarded.
    unsafe { ld_global_nc_v4_u32(p.cast()) }.map(f32::from_bits)
}

#[cfg(not(target_arch = "nvptx64"))]
pub use table::{RopeScaling, RopeTable};

/// Host side: the `cos_sin` table of [`qk_norm_rope`].
#[cfg(not(target_arch = "nvptx64"))]
mod table {
    use megaops::{Device, Result, Tensor};

    /// Frequency scaling of the rotary embedding (Hugging Face `rope_scaling`).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum RopeScaling {
        /// Plain RoPE: `θ_j = base^(-2j/D)` (Qwen3, Llama-2).
        None,
        /// `rope_type = "llama3"` (Llama-3.1/3.2): long wavelengths divided by `factor`,
        /// short ones kept, a smooth blend in between.
        Llama3 {
            /// `factor` (8 for Llama-3.1, 32 for Llama-3.2).
            factor: f64,
            /// `low_freq_factor` (1).
            low_freq_factor: f64,
            /// `high_freq_factor` (4).
            high_freq_factor: f64,
            /// `original_max_position_embeddings` (8192).
            original_max_position_embeddings: f64,
        },
    }

    /// The `[max_pos, D]` f32 table of `cos(p·θ_j)` (`j < D/2`) then `sin(p·θ_j)` per
    /// position `p`, computed in f64 and rounded once.
    #[derive(Clone, Debug)]
    pub struct RopeTable {
        /// Head dimension `D`.
        pub head_dim: usize,
        /// Number of positions (rows).
        pub max_pos: usize,
        /// Row-major values.
        pub values: Vec<f32>,
    }

    impl RopeTable {
        /// The inverse frequencies `θ_j`, `j < D/2`, for `base` (`rope_theta`) and `scaling`,
        /// as Hugging Face's `_compute_default_rope_parameters` /
        /// `_compute_llama3_parameters` define them (in f64).
        pub fn inv_freq(head_dim: usize, base: f64, scaling: RopeScaling) -> Vec<f64> {
            let d = head_dim as f64;
            let plain = (0..head_dim / 2).map(|j| 1.0 / base.powf(2.0 * j as f64 / d));
            match scaling {
                RopeScaling::None => plain.collect(),
                RopeScaling::Llama3 {
                    factor,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings: old,
                } => {
                    let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
                    plain
                        .map(|f| {
                            let wavelen = 2.0 * std::f64::consts::PI / f;
                            if wavelen < high_wavelen {
                                f
                            } else if wavelen > low_wavelen {
                                f / factor
                            } else {
                                let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                                (1.0 - smooth) * f / factor + smooth * f
                            }
                        })
                        .collect()
                }
            }
        }

        /// The table for positions `0..max_pos`.
        pub fn new(head_dim: usize, max_pos: usize, base: f64, scaling: RopeScaling) -> RopeTable {
            let inv = Self::inv_freq(head_dim, base, scaling);
            let half = head_dim / 2;
            let mut values = vec![0f32; max_pos * head_dim];
            for (p, row) in values.chunks_mut(head_dim).enumerate() {
                for (j, f) in inv.iter().enumerate() {
                    let a = p as f64 * f;
                    row[j] = a.cos() as f32;
                    row[half + j] = a.sin() as f32;
                }
            }
            RopeTable {
                head_dim,
                max_pos,
                values,
            }
        }

        /// Uploads the table as the `[max_pos, D]` tensor [`super::qk_norm_rope`] reads.
        pub fn upload(&self, device: &Device) -> Result<Tensor<f32>> {
            Tensor::from_slice(device, &[self.max_pos, self.head_dim], &self.values)
        }
    }
}
