//! QK-norm + RoPE + KV-cache write against an f64 reference that computes the rotary
//! angles itself (Hugging Face's default and `llama3` frequency rules, written out again
//! here): both head dims, both pairings, with and without QK-norm, random positions and
//! cache slots, untouched cache rows checked too; CPU backend at small sizes, GPU at
//! model sizes.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random, random_ints};
use megaops::{Device, LaunchOptions, Result, Stream, Tensor, bf16};
use megaops_kernels::rope::{INTERLEAVED, QK_NORM, RopeScaling, RopeTable, qk_norm_rope};

const POISON: bf16 = bf16::from_bits(0xffc0);

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Inverse frequencies as Hugging Face defines them, in f64 (independent of the crate's
/// `RopeTable::inv_freq`).
fn inv_freq_ref(d: usize, base: f64, llama3: Option<(f64, f64, f64, f64)>) -> Vec<f64> {
    (0..d / 2)
        .map(|j| {
            let f = base.powf(-((2 * j) as f64) / d as f64);
            let Some((factor, lo, hi, old)) = llama3 else {
                return f;
            };
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < old / hi {
                f
            } else if wavelen > old / lo {
                f / factor
            } else {
                let smooth = (old / wavelen - lo) / (hi - lo);
                (1.0 - smooth) * f / factor + smooth * f
            }
        })
        .collect()
}

/// RMSNorm (optional) and rotation of one head vector, in f64.
fn rotate_ref(x: &[f64], w: Option<&[f64]>, inv: &[f64], pos: u32, interleaved: bool, eps: f64) -> Vec<f64> {
    let d = x.len();
    let x: Vec<f64> = match w {
        Some(w) => {
            let rstd = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
            x.iter().zip(w).map(|(v, wi)| v * rstd * wi).collect()
        }
        None => x.to_vec(),
    };
    let mut y = vec![0.0; d];
    for (j, f) in inv.iter().enumerate() {
        let (s, c) = (pos as f64 * f).sin_cos();
        let (a, b) = if interleaved {
            (2 * j, 2 * j + 1)
        } else {
            (j, j + d / 2)
        };
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[b] * c + x[a] * s;
    }
    y
}

struct Case {
    d: usize,
    m: usize,
    hq: usize,
    hkv: usize,
    max_pos: usize,
    cache_rows: usize,
    flags: u32,
    llama3: bool,
    config: usize,
    seed: u64,
}

fn check(dev: &Device, c: &Case) -> Result<()> {
    let s = Stream::new(dev)?;
    let (d, m, hq, hkv) = (c.d, c.m, c.hq, c.hkv);
    let width = (hq + 2 * hkv) * d;
    let eps = 1e-6;
    let qkv = random::<bf16>(m * width, 3.0, c.seed);
    let qn = random::<bf16>(d, 1.5, c.seed ^ 1);
    let kn = random::<bf16>(d, 1.5, c.seed ^ 2);
    let positions: Vec<u32> = random_ints(m, 0, c.max_pos as i64, c.seed ^ 3)
        .into_iter()
        .map(|p| p as u32)
        .collect();
    // Distinct cache rows for the tokens; the last one, when m > 1, is out of range (not written).
    let mut slots: Vec<u32> = Vec::new();
    for r in random_ints(4 * m + 8, 0, c.cache_rows as i64, c.seed ^ 4) {
        if slots.len() < m && !slots.contains(&(r as u32)) {
            slots.push(r as u32);
        }
    }
    assert_eq!(slots.len(), m, "test setup: not enough distinct slots");
    if m > 1 {
        slots[m - 1] = c.cache_rows as u32 + 5;
    }
    let old_k = random::<bf16>(c.cache_rows * hkv * d, 1.0, c.seed ^ 5);
    let old_v = random::<bf16>(c.cache_rows * hkv * d, 1.0, c.seed ^ 6);
    let scaling = if c.llama3 {
        RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }
    } else {
        RopeScaling::None
    };
    let base = if c.llama3 { 500_000.0 } else { 1_000_000.0 };
    let table = RopeTable::new(d, c.max_pos, base, scaling);

    let qkv_t = Tensor::from_slice(dev, &[m, width], &qkv)?;
    let pos_t = Tensor::from_slice(dev, &[m], &positions)?;
    let slot_t = Tensor::from_slice(dev, &[m], &slots)?;
    let table_t = table.upload(dev)?;
    let (qn_t, kn_t) = (Tensor::from_slice(dev, &[d], &qn)?, Tensor::from_slice(dev, &[d], &kn)?);
    let mut q_out = Tensor::full(dev, &[m, hq * d], POISON)?;
    let mut kc = Tensor::from_slice(dev, &[c.cache_rows, hkv * d], &old_k)?;
    let mut vc = Tensor::from_slice(dev, &[c.cache_rows, hkv * d], &old_v)?;
    qk_norm_rope::launch_with(
        &s,
        &LaunchOptions::config(c.config),
        &qkv_t,
        &pos_t,
        &slot_t,
        &table_t,
        &qn_t,
        &kn_t,
        &mut q_out,
        &mut kc,
        &mut vc,
        m as u32,
        hq as u32,
        hkv as u32,
        c.cache_rows as u32,
        c.max_pos as u32,
        c.flags,
        eps as f32,
    )?;

    let llama3 = c.llama3.then_some((32.0, 1.0, 4.0, 8192.0));
    let inv = inv_freq_ref(d, base, llama3);
    let interleaved = c.flags & INTERLEAVED != 0;
    let norm = c.flags & QK_NORM != 0;
    let (qn, kn) = (f64s(&qn), f64s(&kn));
    let mut q_ref = Vec::with_capacity(m * hq * d);
    let mut k_ref = f64s(&old_k);
    let mut v_ref = f64s(&old_v);
    for t in 0..m {
        let row = f64s(&qkv[t * width..(t + 1) * width]);
        for j in 0..hq {
            q_ref.extend(rotate_ref(
                &row[j * d..(j + 1) * d],
                norm.then_some(&qn[..]),
                &inv,
                positions[t],
                interleaved,
                eps,
            ));
        }
        let slot = slots[t] as usize;
        if slot >= c.cache_rows {
            continue;
        }
        for j in 0..hkv {
            let k = &row[(hq + j) * d..(hq + j + 1) * d];
            let dst = slot * hkv * d + j * d;
            k_ref[dst..dst + d].copy_from_slice(&rotate_ref(
                k,
                norm.then_some(&kn[..]),
                &inv,
                positions[t],
                interleaved,
                eps,
            ));
            v_ref[dst..dst + d].copy_from_slice(&row[(hq + hkv + j) * d..(hq + hkv + j + 1) * d]);
        }
    }
    let what = format!(
        "d={d} m={m} hq={hq} hkv={hkv} flags={} llama3={} config {}",
        c.flags, c.llama3, c.config
    );
    assert_close(&format!("{what}: q"), &q_out.to_vec()?, &q_ref, 6e-3);
    assert_close(&format!("{what}: k cache"), &kc.to_vec()?, &k_ref, 6e-3);
    assert_close(&format!("{what}: v cache"), &vc.to_vec()?, &v_ref, 0.0);
    Ok(())
}

#[test]
fn table_matches_the_reference_frequencies() {
    for llama3 in [false, true] {
        let scaling = if llama3 {
            RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            }
        } else {
            RopeScaling::None
        };
        let t = RopeTable::new(128, 300, 500_000.0, scaling);
        let inv = inv_freq_ref(128, 500_000.0, llama3.then_some((8.0, 1.0, 4.0, 8192.0)));
        for p in [0usize, 1, 299] {
            for (j, f) in inv.iter().enumerate() {
                let a = p as f64 * f;
                assert!((t.values[p * 128 + j] as f64 - a.cos()).abs() < 1e-7);
                assert!((t.values[p * 128 + 64 + j] as f64 - a.sin()).abs() < 1e-7);
            }
        }
    }
}

#[test]
fn rope_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("rope_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let mut k = 0u64;
    for (config, consts) in qk_norm_rope::CONSTS.iter().enumerate() {
        let d = consts.D as usize;
        for flags in [0, QK_NORM, INTERLEAVED, QK_NORM | INTERLEAVED] {
            k += 1;
            let (m, hq, hkv) = [(1, 4, 2), (5, 3, 1), (3, 2, 2)][k as usize % 3];
            let c = Case {
                d,
                m,
                hq,
                hkv,
                max_pos: 3000,
                cache_rows: 24,
                flags,
                llama3: k.is_multiple_of(2),
                config,
                seed: seed.wrapping_add(k),
            };
            check(&dev, &c)?;
        }
    }
    Ok(())
}

#[test]
fn rope_on_the_gpu_at_model_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("rope_on_the_gpu_at_model_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("rope_on_the_gpu_at_model_sizes");
    // Qwen3-8B (32/8 heads of 128, QK-norm) and Llama-3.2-1B (32/8 heads of 64, llama3
    // scaling); decode and prefill token counts.
    let shapes = [(128usize, 32usize, 8usize, QK_NORM, false), (64, 32, 8, 0, true)];
    for (i, &(d, hq, hkv, flags, llama3)) in shapes.iter().enumerate() {
        // Every config of this head dim: the one-token configs at decode sizes, the
        // four-token ones at a prefill size.
        let configs = qk_norm_rope::CONSTS.iter().enumerate().filter(|(_, c)| c.D == d as u32);
        for (j, (config, consts)) in configs.enumerate() {
            let ms: &[usize] = if consts.BM == 1 { &[1, 16] } else { &[1000] };
            for &m in ms {
                let c = Case {
                    d,
                    m,
                    hq,
                    hkv,
                    max_pos: 32768,
                    cache_rows: 16 * 2048,
                    flags,
                    llama3,
                    config,
                    seed: seed + (16 * i + 2 * j + m) as u64,
                };
                check(&dev, &c)?;
            }
        }
    }
    Ok(())
}
