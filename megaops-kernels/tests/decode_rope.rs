//! `decode_attention_rope` (QK-norm + RoPE + cache write fused into decode attention)
//! against the pair it replaces, `qk_norm_rope` then `decode_attention`, on fresh random
//! inputs: output and both caches bit for bit (that pair is checked against f64 in
//! `attention.rs` and `rope.rs`). Both head dims, GQA groups 1 to 4, with and without
//! QK-norm, both RoPE pairings, split counts from 1 to more splits than positions, the new
//! token in any split or past `lens`, a slot outside its sequence (not written); a chain
//! through `Tiled` tensors on an AsyncStream whose cache consumer starts only when every
//! CTA has signalled; the launch checks. CPU backend at small sizes, GPU at model sizes.

use megaops::testing::{cpu_device, fresh_seed, gpu_or_skip, random, random_ints};
use megaops::{AsyncStream, Device, DynGrid, DynRows, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::attention::decode::{self, DecodeWorkspace, decode_attention, decode_attention_rope};
use megaops_kernels::gemv::gemv;
use megaops_kernels::rope::{INTERLEAVED, QK_NORM, RopeScaling, RopeTable, qk_norm_rope};

const POISON: bf16 = bf16::from_bits(0xffc0);
const NAN: bf16 = bf16::from_bits(0x7fc0);

/// One decode step's shape and inputs.
struct Case {
    batch: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    max_seq: usize,
    /// Cached positions per sequence including the new token.
    lens: Vec<u32>,
    /// The new token's position and cache row per sequence.
    positions: Vec<u32>,
    slots: Vec<u32>,
    splits: u32,
    flags: u32,
    seed: u64,
}

impl Case {
    /// The usual decode step: the new token at `lens[b] - 1`, in its sequence's rows;
    /// heads are `(hq, hkv, d)`.
    fn step(
        batch: usize,
        (hq, hkv, d): (usize, usize, usize),
        max_seq: usize,
        lens: Vec<u32>,
        splits: u32,
        flags: u32,
        seed: u64,
    ) -> Case {
        let positions: Vec<u32> = lens.iter().map(|&l| l.saturating_sub(1)).collect();
        let slots = positions
            .iter()
            .enumerate()
            .map(|(b, p)| (b * max_seq) as u32 + p)
            .collect();
        Case {
            batch,
            hq,
            hkv,
            d,
            max_seq,
            lens,
            positions,
            slots,
            splits,
            flags,
            seed,
        }
    }

    fn width(&self) -> usize {
        (self.hq + 2 * self.hkv) * self.d
    }

    fn rows(&self) -> usize {
        self.batch * self.max_seq
    }
}

/// Host inputs of a case: qkv, both caches (NaN past `lens`), norm weights, table.
struct Inputs {
    qkv: Vec<bf16>,
    k: Vec<bf16>,
    v: Vec<bf16>,
    q_norm: Vec<bf16>,
    k_norm: Vec<bf16>,
    table: RopeTable,
}

fn inputs(c: &Case) -> Inputs {
    let kv_dim = c.hkv * c.d;
    let cache = |seed: u64| {
        let mut t = random::<bf16>(c.rows() * kv_dim, 1.0, seed);
        for (b, &len) in c.lens.iter().enumerate() {
            for p in len as usize..c.max_seq {
                let r = (b * c.max_seq + p) * kv_dim;
                t[r..r + kv_dim].fill(NAN);
            }
        }
        t
    };
    Inputs {
        qkv: random::<bf16>(c.batch * c.width(), 2.0, c.seed),
        k: cache(c.seed ^ 1),
        v: cache(c.seed ^ 2),
        q_norm: random::<bf16>(c.d, 1.5, c.seed ^ 3),
        k_norm: random::<bf16>(c.d, 1.5, c.seed ^ 4),
        table: RopeTable::new(c.d, c.max_seq, 1_000_000.0, RopeScaling::None),
    }
}

/// Output and caches after one step.
struct Outputs {
    o: Vec<bf16>,
    k: Vec<bf16>,
    v: Vec<bf16>,
}

/// The device tensors of a case's inputs.
struct Device_ {
    qkv: Tensor<bf16>,
    positions: Tensor<u32>,
    slots: Tensor<u32>,
    lens: Tensor<u32>,
    table: Tensor<f32>,
    q_norm: Tensor<bf16>,
    k_norm: Tensor<bf16>,
    k: Tensor<bf16>,
    v: Tensor<bf16>,
}

fn upload(dev: &Device, c: &Case, i: &Inputs) -> Result<Device_> {
    let (rows, kv_dim) = (c.rows(), c.hkv * c.d);
    Ok(Device_ {
        qkv: Tensor::from_slice(dev, &[c.batch, c.width()], &i.qkv)?,
        positions: Tensor::from_slice(dev, &[c.batch], &c.positions)?,
        slots: Tensor::from_slice(dev, &[c.batch], &c.slots)?,
        lens: Tensor::from_slice(dev, &[c.batch], &c.lens)?,
        table: i.table.upload(dev)?,
        q_norm: Tensor::from_slice(dev, &[c.d], &i.q_norm)?,
        k_norm: Tensor::from_slice(dev, &[c.d], &i.k_norm)?,
        k: Tensor::from_slice(dev, &[rows, kv_dim], &i.k)?,
        v: Tensor::from_slice(dev, &[rows, kv_dim], &i.v)?,
    })
}

fn rope_config(d: usize) -> usize {
    qk_norm_rope::CONSTS
        .iter()
        .position(|k| k.D == d as u32 && k.BM == 1)
        .expect("a decode RoPE config")
}

/// `qk_norm_rope` then `decode_attention`.
fn unfused(dev: &Device, c: &Case, i: &Inputs) -> Result<Outputs> {
    let s = Stream::new(dev)?;
    let mut t = upload(dev, c, i)?;
    let (batch, hq, hkv, d) = (c.batch as u32, c.hq as u32, c.hkv as u32, c.d as u32);
    let mut q = Tensor::full(dev, &[c.batch, c.hq * c.d], POISON)?;
    let mut o = Tensor::full(dev, &[c.batch, c.hq * c.d], POISON)?;
    let mut ws = DecodeWorkspace::new(dev, batch, hq, hkv, d, c.splits)?;
    qk_norm_rope::launch_with(
        &s,
        &LaunchOptions::config(rope_config(c.d)),
        &t.qkv,
        &t.positions,
        &t.slots,
        &t.table,
        &t.q_norm,
        &t.k_norm,
        &mut q,
        &mut t.k,
        &mut t.v,
        batch,
        hq,
        hkv,
        c.rows() as u32,
        c.max_seq as u32,
        c.flags,
        1e-6,
    )?;
    decode_attention::launch_with(
        &s,
        &LaunchOptions::config(decode::config_index(d, hq, hkv).expect("config")),
        &q,
        &t.k,
        &t.v,
        &t.lens,
        &mut ws.part_o,
        &mut ws.part_ml,
        &mut ws.counters,
        &mut o,
        batch,
        hq,
        hkv,
        c.max_seq as u32,
        c.rows() as u32,
        c.splits,
        1.0 / (c.d as f32).sqrt(),
    )?;
    Ok(Outputs {
        o: o.to_vec()?,
        k: t.k.to_vec()?,
        v: t.v.to_vec()?,
    })
}

/// `decode_attention_rope`, twice (the second launch relies on the first having reset
/// the split counters and recomputes the same row).
fn fused(dev: &Device, c: &Case, i: &Inputs) -> Result<Outputs> {
    let s = Stream::new(dev)?;
    let mut t = upload(dev, c, i)?;
    let (batch, hq, hkv, d) = (c.batch as u32, c.hq as u32, c.hkv as u32, c.d as u32);
    let mut ws = DecodeWorkspace::new(dev, batch, hq, hkv, d, c.splits)?;
    let mut outs = Vec::new();
    for _ in 0..2 {
        let mut o = Tensor::full(dev, &[c.batch, c.hq * c.d], POISON)?;
        decode_attention_rope::launch_with(
            &s,
            &LaunchOptions::config(decode::config_index(d, hq, hkv).expect("config")),
            &t.qkv,
            &t.positions,
            &t.slots,
            &t.lens,
            &t.table,
            &t.q_norm,
            &t.k_norm,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut t.k,
            &mut t.v,
            &mut o,
            batch,
            hq,
            hkv,
            c.max_seq as u32,
            c.rows() as u32,
            c.splits,
            c.max_seq as u32,
            c.flags,
            1e-6,
            1.0 / (c.d as f32).sqrt(),
        )?;
        outs.push(o.to_vec()?);
    }
    assert_eq!(bits(&outs[0]), bits(&outs[1]), "a second launch gives the same output");
    assert!(
        ws.counters.to_vec()?.iter().all(|&n| n == 0),
        "split counters are left at zero"
    );
    Ok(Outputs {
        o: outs.pop().unwrap_or_default(),
        k: t.k.to_vec()?,
        v: t.v.to_vec()?,
    })
}

/// Bit patterns, so that NaN compares equal to itself (rows past `lens` stay NaN).
fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check(dev: &Device, c: &Case) -> Result<()> {
    let i = inputs(c);
    let (want, got) = (unfused(dev, c, &i)?, fused(dev, c, &i)?);
    let what = format!(
        "batch={} hq={} hkv={} d={} lens={:?} slots={:?} splits={} flags={}",
        c.batch, c.hq, c.hkv, c.d, c.lens, c.slots, c.splits, c.flags
    );
    assert!(
        got.o.iter().all(|x| x.to_bits() != POISON.to_bits()),
        "{what}: output not written"
    );
    assert_eq!(bits(&got.o), bits(&want.o), "{what}: output");
    assert_eq!(bits(&got.k), bits(&want.k), "{what}: key cache");
    assert_eq!(bits(&got.v), bits(&want.v), "{what}: value cache");
    Ok(())
}

#[test]
fn fused_rope_matches_rope_then_attention_bit_for_bit() -> Result<()> {
    let seed = fresh_seed("fused_rope_matches_rope_then_attention_bit_for_bit");
    let dev = cpu_device(seed)?;
    let mut n = 0u64;
    for (hq, hkv, d) in [(4usize, 2usize, 64usize), (2, 2, 128), (8, 2, 64), (4, 1, 128)] {
        for flags in [0, QK_NORM, QK_NORM | INTERLEAVED, INTERLEAVED] {
            for splits in [1u32, 2, 3, 16] {
                n += 1;
                // New tokens early, late and at the end of the cache; splits past the positions.
                check(
                    &dev,
                    &Case::step(3, (hq, hkv, d), 40, vec![1, 23, 40], splits, flags, seed + n),
                )?;
            }
        }
    }
    Ok(())
}

/// The new token's row past `lens` (written by the last split, read by nobody), a slot in
/// another sequence's rows (not written: the fused kernel writes only its own sequence,
/// unlike `qk_norm_rope`, so the key cache differs there and nowhere else), and an empty
/// sequence.
#[test]
fn fused_rope_places_odd_slots_like_the_pair_or_not_at_all() -> Result<()> {
    let seed = fresh_seed("fused_rope_places_odd_slots_like_the_pair_or_not_at_all");
    let dev = cpu_device(seed)?;
    let (hq, hkv, d, max_seq) = (4usize, 2usize, 64usize, 32usize);
    // Sequence 0: the token's row 20 is past lens = 9. Sequence 1: empty (lens 0), token
    // at row 3. Sequence 2: usual.
    let mut c = Case::step(3, (hq, hkv, d), max_seq, vec![9, 0, 17], 3, QK_NORM, seed);
    c.positions = vec![20, 3, 16];
    c.slots = vec![20, max_seq as u32 + 3, 2 * max_seq as u32 + 16];
    check(&dev, &c)?;
    // Sequence 0's slot points into sequence 1's rows.
    let mut c = Case::step(2, (hq, hkv, d), max_seq, vec![5, 7], 2, 0, seed + 1);
    c.slots = vec![max_seq as u32 + 30, max_seq as u32 + 6];
    let i = inputs(&c);
    let (want, got) = (unfused(&dev, &c, &i)?, fused(&dev, &c, &i)?);
    let row = (max_seq + 30) * hkv * d..(max_seq + 31) * hkv * d;
    assert_eq!(
        bits(&got.k[row.clone()]),
        bits(&i.k[row.clone()]),
        "a foreign slot is not written"
    );
    assert_eq!(
        bits(&got.v[row.clone()]),
        bits(&i.v[row.clone()]),
        "a foreign slot is not written"
    );
    let outside = |v: &[bf16]| [&v[..row.start], &v[row.end..]].concat();
    assert_eq!(bits(&outside(&got.k)), bits(&outside(&want.k)), "the other rows agree");
    assert_eq!(bits(&got.o), bits(&want.o), "the output agrees (that row is past lens)");
    Ok(())
}

/// QKV GEMV → fused kernel → unfused `decode_attention` reading the caches the fused
/// kernel signalled, all through `Tiled` tensors on an AsyncStream: the last kernel waits
/// on the caches' semaphores, which reach their target only when every fused CTA has
/// signalled (too many or too few signals would fail or hang).
#[test]
fn fused_rope_chains_through_tiled_tensors() -> Result<()> {
    let seed = fresh_seed("fused_rope_chains_through_tiled_tensors");
    let dev = cpu_device(seed)?;
    let s = AsyncStream::new(&dev, 3)?;
    let (hq, hkv, d, max_seq, h) = (4usize, 2usize, 64usize, 24usize, 64usize);
    let c = Case::step(2, (hq, hkv, d), max_seq, vec![7, 24], 3, QK_NORM, seed);
    let i = inputs(&c);
    let t = upload(&dev, &c, &i)?;
    let (batch, width, rows) = (c.batch, c.width(), c.rows());
    let x = random::<bf16>(batch * h, 1.0, seed ^ 9);
    let w = random::<bf16>(width * h, 0.2, seed ^ 10);
    let xt = Tiled::complete(Tensor::from_slice(&dev, &[batch, h], &x)?, DynRows(1), "x")?;
    let wt = Tensor::from_slice(&dev, &[width, h], &w)?;
    let mut qkv = Tiled::<bf16, DynGrid>::new(&dev, &[batch, width], DynGrid(16, 64), "qkv")?;
    let mut kc = Tiled::complete(t.k, DynRows(rows as u32), "k_cache")?;
    let mut vc = Tiled::complete(t.v, DynRows(rows as u32), "v_cache")?;
    let mut o = Tiled::<bf16, DynRows>::new(&dev, &[batch, hq * d], DynRows(1), "o")?;
    let mut o2 = Tiled::<bf16, DynRows>::new(&dev, &[batch, hq * d], DynRows(1), "o2")?;
    let (b32, hq32, hkv32) = (batch as u32, hq as u32, hkv as u32);
    let config = decode::config_index(d as u32, hq32, hkv32).expect("config");
    let mut ws = DecodeWorkspace::new(&dev, b32, hq32, hkv32, d as u32, c.splits)?;
    let mut ws2 = DecodeWorkspace::new(&dev, b32, hq32, hkv32, d as u32, 2)?;
    let gemv_cfg = gemv::CONSTS
        .iter()
        .position(|k| k.BN == 32 && k.MIN_CTAS == 0)
        .expect("config");
    gemv::launch_with(
        &s,
        &LaunchOptions::config(gemv_cfg),
        &xt,
        &wt,
        &mut qkv,
        b32,
        width as u32,
        h as u32,
    )?;
    kc.rearm();
    vc.rearm();
    decode_attention_rope::launch_with(
        &s,
        &LaunchOptions::config(config),
        &qkv,
        &t.positions,
        &t.slots,
        &t.lens,
        &t.table,
        &t.q_norm,
        &t.k_norm,
        &mut ws.part_o,
        &mut ws.part_ml,
        &mut ws.counters,
        &mut kc,
        &mut vc,
        &mut o,
        b32,
        hq32,
        hkv32,
        max_seq as u32,
        rows as u32,
        c.splits,
        max_seq as u32,
        c.flags,
        1e-6,
        1.0 / (d as f32).sqrt(),
    )?;
    // Attention again from the caches alone, with the fused kernel's queries recomputed
    // by the pair (`q` from qk_norm_rope on the GEMV's output, into scratch caches).
    let mut q = Tiled::<bf16, DynRows>::new(&dev, &[batch, hq * d], DynRows(1), "q")?;
    let mut k_scratch = Tensor::<bf16>::zeros(&dev, &[rows, hkv * d])?;
    let mut v_scratch = Tensor::<bf16>::zeros(&dev, &[rows, hkv * d])?;
    qk_norm_rope::launch_with(
        &s,
        &LaunchOptions::config(rope_config(d)),
        &qkv,
        &t.positions,
        &t.slots,
        &t.table,
        &t.q_norm,
        &t.k_norm,
        &mut q,
        &mut k_scratch,
        &mut v_scratch,
        b32,
        hq32,
        hkv32,
        rows as u32,
        max_seq as u32,
        c.flags,
        1e-6,
    )?;
    decode_attention::launch_with(
        &s,
        &LaunchOptions::config(config),
        &q,
        &kc,
        &vc,
        &t.lens,
        &mut ws2.part_o,
        &mut ws2.part_ml,
        &mut ws2.counters,
        &mut o2,
        b32,
        hq32,
        hkv32,
        max_seq as u32,
        rows as u32,
        2,
        1.0 / (d as f32).sqrt(),
    )?;
    s.synchronize()?;
    let (a, b) = (o.to_vec()?, o2.to_vec()?);
    assert!(a.iter().all(|x| x.is_finite()), "fused output finite");
    // Different split counts merge in another order: close, not bitwise.
    for (x, y) in a.iter().zip(&b) {
        let (x, y) = (x.to_f64(), y.to_f64());
        assert!((x - y).abs() <= 1e-2 * (1.0 + y.abs()), "fused {x} vs pair {y}");
    }
    assert_eq!(
        bits(&kc.to_vec()?),
        bits(&with_new_rows(&i.k, &k_scratch.to_vec()?, &c)),
        "key cache"
    );
    assert_eq!(
        bits(&vc.to_vec()?),
        bits(&with_new_rows(&i.v, &v_scratch.to_vec()?, &c)),
        "value cache"
    );
    Ok(())
}

/// The original cache with the new rows that `qk_norm_rope` wrote into `scratch`.
fn with_new_rows(old: &[bf16], scratch: &[bf16], c: &Case) -> Vec<bf16> {
    let kv_dim = c.hkv * c.d;
    let mut k = old.to_vec();
    for &slot in &c.slots {
        let r = slot as usize * kv_dim;
        k[r..r + kv_dim].copy_from_slice(&scratch[r..r + kv_dim]);
    }
    k
}

#[test]
fn fused_rope_refuses_bad_launches() -> Result<()> {
    let dev = cpu_device(1)?;
    let s = Stream::new(&dev)?;
    let c = Case::step(2, (4, 2, 64), 8, vec![3, 4], 2, 0, 1);
    let i = inputs(&c);
    let t = upload(&dev, &c, &i)?;
    let mut ws = DecodeWorkspace::new(&dev, 2, 4, 2, 64, 2)?;
    let mut o = Tensor::<bf16>::zeros(&dev, &[2, 4 * 64])?;
    let mut launch = |config: usize, cache_rows: u32| -> Result<()> {
        let mut k = Tensor::<bf16>::zeros(&dev, &[cache_rows as usize, 2 * 64])?;
        let mut v = Tensor::<bf16>::zeros(&dev, &[cache_rows as usize, 2 * 64])?;
        decode_attention_rope::launch_with(
            &s,
            &LaunchOptions::config(config),
            &t.qkv,
            &t.positions,
            &t.slots,
            &t.lens,
            &t.table,
            &t.q_norm,
            &t.k_norm,
            &mut ws.part_o,
            &mut ws.part_ml,
            &mut ws.counters,
            &mut k,
            &mut v,
            &mut o,
            2,
            4,
            2,
            8,
            cache_rows,
            2,
            8,
            0,
            1e-6,
            0.125,
        )
    };
    let right = decode::config_index(64, 4, 2).expect("config");
    let wrong_g = decode::config_index(64, 4, 4).expect("config");
    let e = launch(wrong_g, 16).expect_err("a config for another G");
    assert!(e.to_string().contains("G = hq / hkv"), "{e}");
    // Each CTA signals its sequence's rows, so the caches must have exactly batch·max_seq.
    let e = launch(right, 24).expect_err("cache rows beyond batch·max_seq");
    assert!(e.to_string().contains("exactly batch·max_seq rows"), "{e}");
    launch(right, 16)?;
    s.synchronize()?;
    Ok(())
}

#[test]
fn fused_rope_on_the_gpu_at_model_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("fused_rope_on_the_gpu_at_model_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("fused_rope_on_the_gpu_at_model_sizes");
    let sms = dev.sm_count();
    // Qwen3-0.6B / 1.7B (16/8 × 128), Qwen3-8B (32/8 × 128), Llama-3.2-1B (32/8 × 64).
    for (n, &(hq, hkv, d, flags)) in [
        (16usize, 8usize, 128usize, QK_NORM),
        (32, 8, 128, QK_NORM),
        (32, 8, 64, 0),
    ]
    .iter()
    .enumerate()
    {
        for (batch, max_seq) in [(1usize, 2048usize), (4, 700), (16, 300)] {
            let lens: Vec<u32> = random_ints(batch, 1, max_seq as i64 + 1, seed + n as u64)
                .into_iter()
                .map(|l| l as u32)
                .collect();
            let splits = decode::splits_for(batch as u32, hkv as u32, max_seq as u32, sms);
            check(
                &dev,
                &Case::step(batch, (hq, hkv, d), max_seq, lens, splits, flags, seed + 3 * n as u64),
            )?;
        }
    }
    Ok(())
}
