//! Greedy argmax across CTAs against a plain reference: random logits with planted ties
//! (smallest index wins), NaNs (the first NaN wins, as `torch.argmax`), signed zeros, rows
//! of −∞, vocabularies with one chunk, several chunks and an unaligned length (4-byte
//! path); repeated launches through the same workspace (the counters must re-arm); the LM
//! head → argmax chain through a `Tiled` logits tensor on an AsyncStream; and, with a GPU,
//! the Qwen3 and Llama-3 vocabularies.

use megaops::testing::{cpu_device, fresh_seed, gpu_or_skip, random};
use megaops::{AsyncStream, Device, DynGrid, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::gemv::lm_head;
use megaops_kernels::sampling::{ArgmaxWorkspace, argmax};

/// `torch.argmax` semantics: the first NaN if any, else the first maximum (-0 == +0).
fn argmax_ref(row: &[f32]) -> u32 {
    if let Some(i) = row.iter().position(|v| v.is_nan()) {
        return i as u32;
    }
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Random logits with planted hazards, depending on the row: ties of the maximum at
/// several places, a NaN (or two), zeros of both signs as the maximum, all −∞.
fn logits(m: usize, vocab: usize, seed: u64) -> Vec<f32> {
    let mut l: Vec<f32> = random::<f32>(m * vocab, 8.0, seed);
    for (r, row) in l.chunks_mut(vocab).enumerate() {
        let at = |f: usize| (f * 7919 + r * 104_729) % vocab;
        match r % 6 {
            1 => {
                for f in [3, 1, 2] {
                    row[at(f)] = 100.0;
                }
            }
            2 => {
                row[at(5)] = f32::NAN;
                row[at(9)] = f32::NAN;
                row[at(1)] = f32::INFINITY;
            }
            3 => {
                row.iter_mut().for_each(|v| *v = -v.abs() - 1.0);
                row[at(4)] = -0.0;
                row[at(2)] = 0.0;
            }
            4 => row.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
            _ => {}
        }
    }
    l
}

fn check_argmax(dev: &Device, m: usize, vocab: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let mut ws = ArgmaxWorkspace::new(dev, m, vocab)?;
    for round in 0..2u64 {
        let l = logits(m, vocab, seed ^ (round << 40));
        let lt = Tensor::from_slice(dev, &[m, vocab], &l)?;
        let mut ids = Tensor::full(dev, &[m], u32::MAX)?;
        let opts = LaunchOptions::config(config);
        argmax::launch_with(
            &s,
            &opts,
            &lt,
            &mut ids,
            &mut ws.partial,
            &mut ws.counters,
            m as u32,
            vocab as u32,
        )?;
        let want: Vec<u32> = l.chunks(vocab).map(argmax_ref).collect();
        assert_eq!(
            ids.to_vec()?,
            want,
            "argmax m={m} vocab={vocab} config {config} round {round}"
        );
    }
    assert!(
        ws.counters.to_vec()?.iter().all(|&c| c == 0),
        "argmax counters not re-armed"
    );
    Ok(())
}

#[test]
fn argmax_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("argmax_on_the_cpu_backend");
    for vgpu in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(vgpu))?;
        for config in 0..argmax::CONFIGS.len() {
            // One element; one chunk; several chunks with a partial last one; unaligned
            // rows (vocab % 4 != 0: 4-byte loads); a tiny unaligned vocabulary.
            for (i, &(m, vocab)) in [(1, 1), (3, 2048), (6, 9000), (7, 5001), (16, 7)].iter().enumerate() {
                check_argmax(
                    &dev,
                    m,
                    vocab,
                    config,
                    seed ^ (vgpu << 20) ^ (i as u64) << 8 ^ config as u64,
                )?;
            }
        }
    }
    Ok(())
}

/// `logits = x · Wᵀ` into a `Tiled` tensor with column data tiles, then argmax over it on
/// an AsyncStream of two streams: the argmax CTAs wait only for the chunks they read.
#[test]
fn lm_head_then_argmax_through_tiled_logits() -> Result<()> {
    let seed = fresh_seed("lm_head_then_argmax_through_tiled_logits");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 2)?;
        let (m, vocab, k) = (4usize, 5000usize, 64usize);
        let x = random::<bf16>(m * k, 1.0, seed ^ round);
        let w = random::<bf16>(vocab * k, 0.25, seed ^ round ^ 0xff);
        let (xt, wt) = (
            Tensor::from_slice(&dev, &[m, k], &x)?,
            Tensor::from_slice(&dev, &[vocab, k], &w)?,
        );
        let mut l = Tiled::<f32, DynGrid>::new(&dev, &[m, vocab], DynGrid(2, 1024), "logits")?;
        let mut ids = Tiled::<u32, megaops::DynChunks>::new(&dev, &[m], megaops::DynChunks(1), "ids")?;
        let mut ws = ArgmaxWorkspace::new(&dev, m, vocab)?;
        let cfg = round as usize;
        lm_head::launch_with(
            &s,
            &LaunchOptions::config(cfg % lm_head::CONFIGS.len()),
            &xt,
            &wt,
            &mut l,
            m as u32,
            vocab as u32,
            k as u32,
        )?;
        let opts = LaunchOptions::config(cfg % argmax::CONFIGS.len());
        argmax::launch_with(
            &s,
            &opts,
            &l,
            &mut ids,
            &mut ws.partial,
            &mut ws.counters,
            m as u32,
            vocab as u32,
        )?;
        s.synchronize()?;
        // The reference argmax of the logits the kernel actually produced (bit-exact choice).
        let lv = l.to_vec()?;
        let want: Vec<u32> = lv.chunks(vocab).map(argmax_ref).collect();
        assert_eq!(ids.to_vec()?, want, "chain round {round}");
    }
    Ok(())
}

#[test]
fn argmax_on_the_gpu_at_vocabulary_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("argmax_on_the_gpu_at_vocabulary_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("argmax_on_the_gpu_at_vocabulary_sizes");
    for config in 0..argmax::CONFIGS.len() {
        for (i, &(m, vocab)) in [(1, 151_936), (16, 151_936), (16, 128_256), (12, 100_003)]
            .iter()
            .enumerate()
        {
            check_argmax(&dev, m, vocab, config, seed + i as u64)?;
        }
    }
    Ok(())
}
