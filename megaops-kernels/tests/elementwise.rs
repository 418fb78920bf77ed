//! Embedding gather and SiLU·mul against f64 references (fresh random inputs, poisoned
//! outputs, vector and scalar paths, every tile config, out-of-range ids), on the CPU
//! backend at small sizes and on the GPU (when there is one) at model sizes; plus a chain
//! embedding → RMSNorm → SiLU·mul through `Tiled` tensors on an AsyncStream.

use megaops::testing::{assert_close, cpu_device, fresh_seed, gpu_or_skip, random, random_ints};
use megaops::{AsyncStream, Device, DynGrid, DynRows, LaunchOptions, Result, Stream, Tensor, Tiled, bf16};
use megaops_kernels::elementwise::{embedding, silu_mul};
use megaops_kernels::norm::rmsnorm;

const POISON: bf16 = bf16::from_bits(0xffc0);

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn silu_mul_ref(gu: &[f64], m: usize, inter: usize) -> Vec<f64> {
    let mut y = Vec::with_capacity(m * inter);
    for r in 0..m {
        for j in 0..inter {
            let g = gu[r * 2 * inter + j];
            let u = gu[r * 2 * inter + inter + j];
            y.push(g / (1.0 + (-g).exp()) * u);
        }
    }
    y
}

fn embedding_ref(table: &[f64], ids: &[u32], vocab: usize, h: usize) -> Vec<f64> {
    ids.iter()
        .flat_map(|&id| {
            let id = id as usize;
            (0..h).map(move |i| if id < vocab { table[id * h + i] } else { 0.0 })
        })
        .collect()
}

fn check_embedding(dev: &Device, m: usize, vocab: usize, h: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let table = random::<bf16>(vocab * h, 1.0, seed);
    // Ids include a few past the vocabulary (they give zero rows).
    let ids: Vec<u32> = random_ints(m, 0, vocab as i64 + 3, seed ^ 1)
        .into_iter()
        .map(|i| i as u32)
        .collect();
    let (tt, it) = (
        Tensor::from_slice(dev, &[vocab, h], &table)?,
        Tensor::from_slice(dev, &[m], &ids)?,
    );
    let mut y = Tensor::full(dev, &[m, h], POISON)?;
    let opts = LaunchOptions::config(config);
    embedding::launch_with(&s, &opts, &it, &tt, &mut y, m as u32, vocab as u32, h as u32)?;
    let want = embedding_ref(&f64s(&table), &ids, vocab, h);
    assert_close(
        &format!("embedding m={m} vocab={vocab} h={h} config {config}"),
        &y.to_vec()?,
        &want,
        0.0,
    );
    Ok(())
}

fn check_silu_mul(dev: &Device, m: usize, inter: usize, config: usize, seed: u64) -> Result<()> {
    let s = Stream::new(dev)?;
    let gu = random::<bf16>(m * 2 * inter, 4.0, seed);
    let gt = Tensor::from_slice(dev, &[m, 2 * inter], &gu)?;
    let mut y = Tensor::full(dev, &[m, inter], POISON)?;
    silu_mul::launch_with(&s, &LaunchOptions::config(config), &gt, &mut y, m as u32, inter as u32)?;
    let want = silu_mul_ref(&f64s(&gu), m, inter);
    assert_close(
        &format!("silu_mul m={m} inter={inter} config {config}"),
        &y.to_vec()?,
        &want,
        5e-3,
    );
    Ok(())
}

#[test]
fn embedding_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("embedding_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    for (i, &(m, vocab, h)) in [(1, 10, 64), (9, 50, 136), (4, 7, 13), (17, 33, 2056)]
        .iter()
        .enumerate()
    {
        for config in 0..embedding::CONFIGS.len() {
            check_embedding(&dev, m, vocab, h, config, seed.wrapping_add(i as u64))?;
        }
    }
    Ok(())
}

#[test]
fn silu_mul_on_the_cpu_backend() -> Result<()> {
    let seed = fresh_seed("silu_mul_on_the_cpu_backend");
    let dev = cpu_device(seed)?;
    // inter: one vector, a partial column tile (1030 = 1024 + 6 is not a multiple of 8:
    // scalar path), several column tiles (2056), odd sizes.
    for (i, &(m, inter)) in [(1, 8), (3, 1030), (17, 2056), (2, 5), (20, 96)].iter().enumerate() {
        for config in 0..silu_mul::CONFIGS.len() {
            check_silu_mul(&dev, m, inter, config, seed.wrapping_add(i as u64))?;
        }
    }
    Ok(())
}

/// embedding → RMSNorm → SiLU·mul with every intermediate a `Tiled` tensor (row tiles and
/// 2-D tiles) on an AsyncStream of three streams: the consumers wait on data tiles only.
#[test]
fn embedding_rmsnorm_silu_chain_through_tiled_tensors() -> Result<()> {
    let seed = fresh_seed("embedding_rmsnorm_silu_chain_through_tiled_tensors");
    for round in 0..3u64 {
        let dev = cpu_device(seed.wrapping_add(round))?;
        let s = AsyncStream::new(&dev, 3)?;
        let (m, vocab, h) = (21usize, 40usize, 192usize);
        let inter = h / 2;
        let table = random::<bf16>(vocab * h, 1.0, seed ^ round);
        let w = random::<bf16>(h, 1.0, seed ^ round ^ 9);
        let ids: Vec<u32> = random_ints(m, 0, vocab as i64, seed ^ round ^ 5)
            .into_iter()
            .map(|i| i as u32)
            .collect();
        let (tt, wt) = (
            Tensor::from_slice(&dev, &[vocab, h], &table)?,
            Tensor::from_slice(&dev, &[h], &w)?,
        );
        let it = Tensor::from_slice(&dev, &[m], &ids)?;
        let mut x = Tiled::<bf16, DynRows>::new(&dev, &[m, h], DynRows(4), "x")?;
        let mut y = Tiled::<bf16, DynRows>::new(&dev, &[m, h], DynRows(8), "y")?;
        let mut a = Tiled::<bf16, DynGrid>::new(&dev, &[m, inter], DynGrid(5, 32), "a")?;
        embedding::launch_with(
            &s,
            &LaunchOptions::config(round as usize % 2),
            &it,
            &tt,
            &mut x,
            m as u32,
            vocab as u32,
            h as u32,
        )?;
        rmsnorm::launch_with(
            &s,
            &LaunchOptions::config(1 - round as usize % 2),
            &x,
            &wt,
            &mut y,
            m as u32,
            h as u32,
            1e-6,
        )?;
        silu_mul::launch_with(
            &s,
            &LaunchOptions::config(round as usize % 2),
            &y,
            &mut a,
            m as u32,
            inter as u32,
        )?;
        s.synchronize()?;
        let xr = embedding_ref(&f64s(&table), &ids, vocab, h);
        let mut yr = Vec::new();
        for row in xr.chunks(h) {
            let rstd = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / h as f64 + 1e-6).sqrt();
            yr.extend(
                row.iter()
                    .zip(&w)
                    .map(|(v, wi)| bf16::from_f64(v * rstd * wi.to_f64()).to_f64()),
            );
        }
        assert_close("chain: embedding", &x.to_vec()?, &xr, 0.0);
        assert_close("chain: silu_mul", &a.to_vec()?, &silu_mul_ref(&yr, m, inter), 5e-3);
    }
    Ok(())
}

#[test]
fn elementwise_on_the_gpu_at_model_sizes() -> Result<()> {
    let Some(dev) = gpu_or_skip("elementwise_on_the_gpu_at_model_sizes") else {
        return Ok(());
    };
    let seed = fresh_seed("elementwise_on_the_gpu_at_model_sizes");
    for config in 0..embedding::CONFIGS.len() {
        check_embedding(&dev, 16, 151_936, 1024, config, seed)?;
        check_embedding(&dev, 1000, 128_256, 2048, config, seed + 1)?;
    }
    for config in 0..silu_mul::CONFIGS.len() {
        for (m, inter) in [(1, 3072), (16, 12288), (1024, 8192), (77, 3001)] {
            check_silu_mul(&dev, m, inter, config, seed + 2)?;
        }
    }
    Ok(())
}
