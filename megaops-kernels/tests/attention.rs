//! Decode (split-KV with in-kernel combine) and prefill (causal flash attention on tensor
//! cores) against f64 softmax references: fresh random inputs, poisoned outputs, cache
//! positions past each sequence filled with NaN (any read of them shows), GQA groups 1 to
//! 8, head dims 64 and 128, batch 1 to 16, sequence lengths from 1 up and not multiples
//! of the split or block sizes, every tile config; plus the chain QKV → RoPE → decode
//! attention through `Tiled` tensors on an AsyncStream. CPU backend at small sizes, GPU
//! (when there is one) at model sizes.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random, random_ints};
use megaops::{AsyncStream, Device, DynRows, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::attention::decode::{self, DecodeWorkspace, decode_attention};
use megaops_kernels::attention::prefill::{self, prefill_attention};
use megaops_kernels::rope::{RopeScaling, RopeTable, qk_norm_rope};

const POISON: bf16 = bf16::from_bits(0xffc0);
const NAN: bf16 = bf16::from_bits(0x7fc0);

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// `softmax(scale · q·k_p) · v_p` over the given key rows (each `d` wide), in f64.
fn attend_ref(q: &[f64], keys: &[&[f64]], values: &[&[f64]], scale: f64) -> Vec<f64> {
    let d = q.len();
    let s: Vec<f64> = keys
        .iter()
        .map(|k| scale * q.iter().zip(*k).map(|(a, b)| a * b).sum::<f64>())
        .collect();
    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut o = vec![0.0; d];
    for (wi, v) in w.iter().zip(values) {
        for (oi, vi) in o.iter_mut().zip(*v) {
            *oi += wi / total * vi;
        }
    }
    o
}

/// A KV cache `[batch·max_seq, hkv·d]` of random values, NaN at positions `>= valid[b]`.
fn cache(batch: usize, max_seq: usize, hkv: usize, d: usize, valid: &[usize], seed: u64) -> Vec<bf16> {
    let mut c = random::<bf16>(batch * max_seq * hkv * d, 1.0, seed);
    for (b, &n) in valid.iter().enumerate() {
        for p in n..max_seq {
            let row = (b * max_seq + p) * hkv * d;
            c[row..row + hkv * d].fill(NAN);
        }
    }
    c
}

struct Decode {
    batch: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    max_seq: usize,
    lens: Vec<u32>,
    splits: u32,
    seed: u64,
}

fn decode_ref(c: &Decode, q: &[f64], k: &[f64], v: &[f64]) -> Vec<f64> {
    let (hq, hkv, d) = (c.hq, c.hkv, c.d);
    let mut o = Vec::with_capacity(c.batch * hq * d);
    for b in 0..c.batch {
        for j in 0..hq {
            let kvh = j / (hq / hkv);
            let rows = |t: &'_ [f64]| -> Vec<Vec<f64>> {
                (0..c.lens[b] as usize)
                    .map(|p| {
                        let r = ((b * c.max_seq + p) * hkv + kvh) * d;
                        t[r..r + d].to_vec()
                    })
                    .collect()
            };
            let (kr, vr) = (rows(k), rows(v));
            let qj = &q[(b * hq + j) * d..(b * hq + j + 1) * d];
            if kr.is_empty() {
                o.extend(std::iter::repeat_n(0.0, d));
                continue;
            }
            let kk: Vec<&[f64]> = kr.iter().map(|r| &r[..]).collect();
            let vv: Vec<&[f64]> = vr.iter().map(|r| &r[..]).collect();
            o.extend(attend_ref(qj, &kk, &vv, 1.0 / (d as f64).sqrt()));
        }
    }
    o
}

fn check_decode(dev: &Device, c: &Decode) -> Result<()> {
    let s = Stream::new(dev)?;
    let (batch, hq, hkv, d, max_seq) = (c.batch, c.hq, c.hkv, c.d, c.max_seq);
    let valid: Vec<usize> = c.lens.iter().map(|&l| l as usize).collect();
    let q = random::<bf16>(batch * hq * d, 2.0, c.seed);
    let k = cache(batch, max_seq, hkv, d, &valid, c.seed ^ 1);
    let v = cache(batch, max_seq, hkv, d, &valid, c.seed ^ 2);
    let rows = batch * max_seq;
    let qt = Tensor::from_slice(dev, &[batch, hq * d], &q)?;
    let kt = Tensor::from_slice(dev, &[rows, hkv * d], &k)?;
    let vt = Tensor::from_slice(dev, &[rows, hkv * d], &v)?;
    let lt = Tensor::from_slice(dev, &[batch], &c.lens)?;
    let mut ws = DecodeWorkspace::new(dev, batch as u32, hq as u32, hkv as u32, d as u32, c.splits)?;
    let config = decode::config_index(d as u32, hq as u32, hkv as u32).expect("a decode config for the shape");
    let want = decode_ref(c, &f64s(&q), &f64s(&k), &f64s(&v));
    // Twice: the second launch relies on the first having reset the split counters.
    for round in 0..2 {
        let mut o = Tensor::full(dev, &[batch, hq * d], POISON)?;
        decode_attention::launch_with(
            &s,
            &LaunchOptions::config(config),
            &qt,
            &kt,
            &vt,
            &lt,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut o,
            batch as u32,
            hq as u32,
            hkv as u32,
            max_seq as u32,
            rows as u32,
            c.splits,
            1.0 / (d as f32).sqrt(),
        )?;
        let what = format!(
            "decode batch={batch} hq={hq} hkv={hkv} d={d} lens={:?} splits={} round {round}",
            c.lens, c.splits
        );
        assert_close(&what, &o.to_vec()?, &want, 1e-2);
    }
    assert!(
        ws.counters.to_vec()?.iter().all(|&n| n == 0),
        "split counters are left at zero"
    );
    Ok(())
}

struct Prefill {
    /// Launch with the longest-first CTA order.
    longest_first: bool,
    batch: usize,
    seq: usize,
    start_pos: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    config: usize,
    seed: u64,
}

fn check_prefill(dev: &Device, c: &Prefill) -> Result<()> {
    let s = Stream::new(dev)?;
    let (batch, seq, hq, hkv, d) = (c.batch, c.seq, c.hq, c.hkv, c.d);
    let max_seq = c.start_pos + seq + 3;
    let m = batch * seq;
    let valid = vec![c.start_pos + seq; batch];
    let q = random::<bf16>(m * hq * d, 2.0, c.seed);
    let k = cache(batch, max_seq, hkv, d, &valid, c.seed ^ 1);
    let v = cache(batch, max_seq, hkv, d, &valid, c.seed ^ 2);
    let rows = batch * max_seq;
    let qt = Tensor::from_slice(dev, &[m, hq * d], &q)?;
    let kt = Tensor::from_slice(dev, &[rows, hkv * d], &k)?;
    let vt = Tensor::from_slice(dev, &[rows, hkv * d], &v)?;
    let mut o = Tensor::full(dev, &[m, hq * d], POISON)?;
    let scale = 1.0 / (d as f32).sqrt();
    let mut opts = LaunchOptions::config(c.config);
    if c.longest_first {
        let bm = prefill_attention::CONSTS[c.config].BM;
        opts = opts.remap(prefill::longest_first(dev, m as u32, seq as u32, bm, hq as u32)?);
    }
    prefill_attention::launch_with(
        &s,
        &opts,
        &qt,
        &kt,
        &vt,
        &mut o,
        m as u32,
        seq as u32,
        c.start_pos as u32,
        max_seq as u32,
        rows as u32,
        hq as u32,
        hkv as u32,
        scale,
    )?;
    let (qf, kf, vf) = (f64s(&q), f64s(&k), f64s(&v));
    let mut want = Vec::with_capacity(m * hq * d);
    for r in 0..m {
        let (b, i) = (r / seq, r % seq);
        for j in 0..hq {
            let kvh = j / (hq / hkv);
            let keys: Vec<&[f64]> = (0..=c.start_pos + i)
                .map(|p| {
                    let at = ((b * max_seq + p) * hkv + kvh) * d;
                    &kf[at..at + d]
                })
                .collect();
            let values: Vec<&[f64]> = (0..=c.start_pos + i)
                .map(|p| {
                    let at = ((b * max_seq + p) * hkv + kvh) * d;
                    &vf[at..at + d]
                })
                .collect();
            want.extend(attend_ref(
                &qf[(r * hq + j) * d..(r * hq + j + 1) * d],
                &keys,
                &values,
                scale as f64,
            ));
        }
    }
    let what = format!(
        "prefill batch={batch} seq={seq} start={} hq={hq} hkv={hkv} d={d} config {}",
        c.start_pos, c.config
    );
    assert_close(&what, &o.to_vec()?, &want, 1e-2);
    Ok(())
}

#[test]
fn configs_are_picked_by_their_constants() {
    assert_eq!(decode::config_index(128, 32, 8), Some(2));
    assert_eq!(decode::config_index(64, 32, 8), Some(6));
    assert_eq!(decode::config_index(128, 12, 8), None);
    assert_eq!(decode::config_index(128, 24, 8), Some(8), "Llama-3.2-3B: G = 3");
    assert_eq!(decode::config_index(128, 40, 8), Some(9), "Qwen3-14B: G = 5");
    for g in 1..=8 {
        assert!(decode::config_index(64, g, 1).is_some(), "a D = 64 config for G = {g}");
    }
    // Longest first: a permutation of the tiles, last row tile first.
    let order = prefill::longest_first_order(300, 100, 64, 3);
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(sorted, (0..15).collect::<Vec<u32>>());
    // Row tile 4 ends at row 299 (position 99), the most work; row tile 1 (position 27) the least.
    assert_eq!(&order[..3], &[12, 13, 14]);
    assert_eq!(&order[12..], &[3, 4, 5]);
}

/// The launchers refuse what the kernels cannot serve, before anything runs.
#[test]
fn launchers_reject_mismatched_configs_and_workspaces() -> Result<()> {
    let dev = cpu_device(1)?;
    let s = Stream::new(&dev)?;
    let (batch, hq, hkv, d, max_seq) = (2usize, 8usize, 2usize, 64usize, 16usize);
    let rows = batch * max_seq;
    let q = Tensor::<bf16>::zeros(&dev, &[batch, hq * d])?;
    let kv = Tensor::<bf16>::zeros(&dev, &[rows, hkv * d])?;
    let lens = Tensor::from_slice(&dev, &[batch], &[3u32, 4])?;
    let mut o = Tensor::<bf16>::zeros(&dev, &[batch, hq * d])?;
    let mut launch = |config: usize, ws: &mut DecodeWorkspace, splits: u32| {
        decode_attention::launch_with(
            &s,
            &LaunchOptions::config(config),
            &q,
            &kv,
            &kv,
            &lens,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut o,
            batch as u32,
            hq as u32,
            hkv as u32,
            max_seq as u32,
            rows as u32,
            splits,
            0.125,
        )
    };
    let mut ws = DecodeWorkspace::new(&dev, batch as u32, hq as u32, hkv as u32, d as u32, 2)?;
    let wrong_g = decode::config_index(64, 2, 1).expect("config");
    let err = launch(wrong_g, &mut ws, 2).expect_err("G = 2 config for hq / hkv = 4");
    assert!(err.to_string().contains("config_index"), "{err}");
    let right = decode::config_index(64, hq as u32, hkv as u32).expect("config");
    assert!(
        launch(right, &mut ws, 3).is_err(),
        "workspace sized for 2 splits, launch asks for 3"
    );
    launch(right, &mut ws, 2)?;
    // A workspace sized for more splits serves fewer.
    launch(right, &mut ws, 1)?;
    s.synchronize()
}

#[test]
fn decode_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("decode_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let mut k = 0;
    for d in [128usize, 64] {
        for (g, hkv) in [(1usize, 2usize), (2, 1), (4, 2), (8, 1), (3, 2), (5, 1), (6, 1), (7, 1)] {
            k += 1;
            // Lengths: 1, not multiples of the split, one empty sequence, one full.
            let (batch, lens, splits) = match k % 4 {
                0 => (1, vec![1], 1),
                1 => (3, vec![37, 1, 64], 3),
                2 => (2, vec![0, 50], 7),
                _ => (4, vec![13, 64, 5, 2], 2),
            };
            let c = Decode {
                batch,
                hq: g * hkv,
                hkv,
                d,
                max_seq: 64,
                lens,
                splits,
                seed: seed.wrapping_add(k),
            };
            check_decode(&dev, &c)?;
        }
    }
    Ok(())
}

#[test]
fn decode_with_many_splits_and_a_batch_of_sixteen() -> Result<()> {
    let seed = fresh_seed("decode_with_many_splits_and_a_batch_of_sixteen");
    let dev = cpu_device(seed)?;
    let lens: Vec<u32> = random_ints(16, 1, 41, seed).into_iter().map(|l| l as u32).collect();
    check_decode(
        &dev,
        &Decode {
            batch: 16,
            hq: 4,
            hkv: 1,
            d: 64,
            max_seq: 40,
            lens,
            splits: 5,
            seed,
        },
    )?;
    check_decode(
        &dev,
        &Decode {
            batch: 1,
            hq: 2,
            hkv: 1,
            d: 128,
            max_seq: 300,
            lens: vec![299],
            splits: 16,
            seed,
        },
    )?;
    Ok(())
}

#[test]
fn prefill_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("prefill_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    let mut k = 0u64;
    for config in 0..prefill_attention::CONFIGS.len() {
        let d = prefill_attention::CONSTS[config].D;
        // seq 1; a tile spanning several sequences; seq not a multiple of BM or BN; a
        // continued prompt (start_pos > 0).
        for (batch, seq, start_pos, hq, hkv) in [(1, 1, 0, 2, 1), (3, 5, 0, 4, 2), (1, 70, 9, 2, 2), (2, 66, 0, 4, 1)] {
            k += 1;
            let c = Prefill {
                longest_first: k.is_multiple_of(3),
                batch,
                seq,
                start_pos,
                hq,
                hkv,
                d: d as usize,
                config,
                seed: seed.wrapping_add(k),
            };
            check_prefill(&dev, &c)?;
        }
    }
    // The kernel takes the row max before scaling, so a non-positive scale is refused
    // before launch.
    let (m, hd, rows) = (4usize, 64usize, 8usize);
    let q = Tensor::<bf16>::zeros(&dev, &[m, hd])?;
    let kv = Tensor::<bf16>::zeros(&dev, &[rows, hd])?;
    let mut o = Tensor::<bf16>::zeros(&dev, &[m, hd])?;
    let s = Stream::new(&dev)?;
    let cfg = prefill::config_index(64, 64).expect("a D = 64 config");
    for scale in [0.0f32, -0.125] {
        let e = prefill_attention::launch_with(
            &s,
            &LaunchOptions::config(cfg),
            &q,
            &kv,
            &kv,
            &mut o,
            m as u32,
            m as u32,
            0,
            rows as u32,
            rows as u32,
            1,
            1,
            scale,
        )
        .expect_err("a non-positive scale must be refused");
        assert!(e.to_string().contains("scale must be positive"), "{e}");
    }
    Ok(())
}

/// QKV → RoPE (writes q and the new K/V rows) → decode attention, with q, the caches and
/// the output as `Tiled` tensors on an AsyncStream: attention waits on the data tiles
/// RoPE signals (q per row, the caches as a whole), never on stream order.
#[test]
fn rope_then_decode_through_tiled_tensors() -> Result<()> {
    let seed = fresh_seed("rope_then_decode_through_tiled_tensors");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 2)?;
        let (batch, hq, hkv, d, max_seq) = (3usize, 4usize, 2usize, 64usize, 48usize);
        let rows = batch * max_seq;
        let lens: Vec<u32> = vec![5, 48, 1];
        let positions: Vec<u32> = lens.iter().map(|l| l - 1).collect();
        let slots: Vec<u32> = positions
            .iter()
            .enumerate()
            .map(|(b, p)| (b * max_seq) as u32 + p)
            .collect();
        let valid: Vec<usize> = lens.iter().map(|&l| l as usize - 1).collect();
        let width = (hq + 2 * hkv) * d;
        let qkv = random::<bf16>(batch * width, 2.0, seed ^ round);
        let old_k = cache(batch, max_seq, hkv, d, &valid, seed ^ round ^ 1);
        let old_v = cache(batch, max_seq, hkv, d, &valid, seed ^ round ^ 2);
        let table = RopeTable::new(d, max_seq, 10_000.0, RopeScaling::None);

        let mut kc = Tiled::complete(
            Tensor::from_slice(&dev, &[rows, hkv * d], &old_k)?,
            DynRows(rows as u32),
            "k_cache",
        )?;
        let mut vc = Tiled::complete(
            Tensor::from_slice(&dev, &[rows, hkv * d], &old_v)?,
            DynRows(rows as u32),
            "v_cache",
        )?;
        kc.rearm();
        vc.rearm();
        let mut q = Tiled::<bf16, DynRows>::new(&dev, &[batch, hq * d], DynRows(2), "q")?;
        let mut o = Tiled::<bf16, DynRows>::new(&dev, &[batch, hq * d], DynRows(1), "o")?;
        let unused = Tensor::<bf16>::zeros(&dev, &[d])?;
        let splits = 3;
        let mut ws = DecodeWorkspace::new(&dev, batch as u32, hq as u32, hkv as u32, d as u32, splits)?;
        qk_norm_rope::launch_with(
            &s,
            &LaunchOptions::config(2),
            &Tensor::from_slice(&dev, &[batch, width], &qkv)?,
            &Tensor::from_slice(&dev, &[batch], &positions)?,
            &Tensor::from_slice(&dev, &[batch], &slots)?,
            &table.upload(&dev)?,
            &unused,
            &unused,
            &mut q,
            &mut kc,
            &mut vc,
            batch as u32,
            hq as u32,
            hkv as u32,
            rows as u32,
            max_seq as u32,
            0,
            1e-6,
        )?;
        decode_attention::launch_with(
            &s,
            &LaunchOptions::config(decode::config_index(d as u32, hq as u32, hkv as u32).expect("config")),
            &q,
            &kc,
            &vc,
            &Tensor::from_slice(&dev, &[batch], &lens)?,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut o,
            batch as u32,
            hq as u32,
            hkv as u32,
            max_seq as u32,
            rows as u32,
            splits,
            1.0 / (d as f32).sqrt(),
        )?;
        s.synchronize()?;

        // Reference: rotate (rotate_half) in f64, round to bf16 as the kernel stores.
        let inv: Vec<f64> = (0..d / 2)
            .map(|j| 10_000f64.powf(-((2 * j) as f64) / d as f64))
            .collect();
        let rot = |x: &[f64], pos: u32| -> Vec<f64> {
            let mut y = vec![0.0; d];
            for (j, f) in inv.iter().enumerate() {
                let (sn, cs) = (pos as f64 * f).sin_cos();
                y[j] = x[j] * cs - x[j + d / 2] * sn;
                y[j + d / 2] = x[j + d / 2] * cs + x[j] * sn;
            }
            y.into_iter().map(|v| bf16::from_f64(v).to_f64()).collect()
        };
        let qkvf = f64s(&qkv);
        let (mut kf, mut vf) = (f64s(&old_k), f64s(&old_v));
        let mut qf = Vec::new();
        for b in 0..batch {
            let row = &qkvf[b * width..(b + 1) * width];
            for j in 0..hq {
                qf.extend(rot(&row[j * d..(j + 1) * d], positions[b]));
            }
            for j in 0..hkv {
                let at = (slots[b] as usize * hkv + j) * d;
                kf[at..at + d].copy_from_slice(&rot(&row[(hq + j) * d..(hq + j + 1) * d], positions[b]));
                vf[at..at + d].copy_from_slice(&row[(hq + hkv + j) * d..(hq + hkv + j + 1) * d]);
            }
        }
        let c = Decode {
            batch,
            hq,
            hkv,
            d,
            max_seq,
            lens: lens.clone(),
            splits,
            seed,
        };
        assert_close(&format!("chain round {round}: q"), &q.to_vec()?, &qf, 6e-3);
        assert_close(
            &format!("chain round {round}: o"),
            &o.to_vec()?,
            &decode_ref(&c, &qf, &kf, &vf),
            1e-2,
        );
    }
    Ok(())
}

#[test]
fn attention_on_the_gpu_at_model_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("attention_on_the_gpu_at_model_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("attention_on_the_gpu_at_model_sizes");
    let sms = dev.sm_count();
    // Qwen3-8B (32/8 × 128), Qwen3-1.7B (16/8 × 128), Llama-3.2-1B (32/8 × 64),
    // Llama-3.2-3B (24/8 × 128, G = 3), Qwen3-14B (40/8 × 128, G = 5).
    for (i, &(hq, hkv, d)) in [
        (32usize, 8usize, 128usize),
        (16, 8, 128),
        (32, 8, 64),
        (24, 8, 128),
        (40, 8, 128),
    ]
    .iter()
    .enumerate()
    {
        for (batch, max_len) in [(1usize, 4096usize), (4, 1000), (16, 300)] {
            let lens: Vec<u32> = random_ints(batch, 1, max_len as i64 + 1, seed + i as u64)
                .into_iter()
                .map(|l| l as u32)
                .collect();
            let splits = decode::splits_for(batch as u32, hkv as u32, max_len as u32, sms);
            check_decode(
                &dev,
                &Decode {
                    batch,
                    hq,
                    hkv,
                    d,
                    max_seq: max_len,
                    lens,
                    splits,
                    seed: seed + 7,
                },
            )?;
        }
        for config in (0..prefill_attention::CONFIGS.len()).filter(|&c| prefill_attention::CONSTS[c].D == d as u32) {
            for (batch, seq, start_pos) in [(1usize, 1000usize, 0usize), (2, 129, 17)] {
                check_prefill(
                    &dev,
                    &Prefill {
                        longest_first: batch == 1,
                        batch,
                        seq,
                        start_pos,
                        hq,
                        hkv,
                        d,
                        config,
                        seed: seed + 11,
                    },
                )?;
            }
        }
    }
    Ok(())
}
