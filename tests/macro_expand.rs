//! `#[megaops::kernel]` expansions compiled for real and run on the CPU backend, for
//! what the macro itself is responsible for: axis binding order and CTA remap, waits on
//! two inputs placed after a `#[prefetch]`, an early `return` that must not skip the
//! signal barrier, split-K targets, persistent CTAs, and config selection. (The protocol
//! over many tilings and interleavings is tested in `examples/tests/protocol.rs`.)

use megaops::device::atomic::{self, Gpu, Relaxed};
use megaops::device::thread::{block_dim_x, block_idx_x, thread_idx_x};
use megaops::testing::cpu_device;
use megaops::{AsyncStream, Chunks, DynChunks, Grid, LaunchOptions, Remap, Result, Stream, Tensor, Tiled};

/// No PTX: these kernels only run on the CPU backend.
pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule {
    name: "macro_expand",
    ptx: &[],
    cubin: &[],
};

/// Tile (a, b, c) writes `100a + 10b + c` at its row-major index and the CTA that ran it.
#[megaops::kernel(block = 32, tiles(a = na, b = nb, c = NC), tensor(out[na * nb * NC]), tensor(cta[na * nb * NC]))]
#[config(NC = 3)]
#[config(NC = 1)]
pub unsafe fn coords(out: *mut u32, cta: *mut u32, na: u32, nb: u32) {
    if thread_idx_x() != 0 {
        return;
    }
    let t = (a * nb + b) * NC + c;
    // SAFETY: t < na * nb * NC, the length of both outputs.
    unsafe {
        *out.add(t as usize) = 100 * a + 10 * b + c;
        *cta.add(t as usize) = block_idx_x();
    }
}

/// `y[e] = value + e` for the 8 elements of each kernel tile, written by threads 0..4;
/// threads 4..16 return at once and must still reach the signal barrier after the body.
#[megaops::kernel(block = 16, output(y[n] = [i: 8]))]
pub unsafe fn ramp(y: *mut f32, n: u32, value: f32) {
    let t = thread_idx_x();
    if t >= 4 {
        return;
    }
    for e in [i * 8 + t, i * 8 + t + 4] {
        if e < n {
            // SAFETY: e < n.
            unsafe { *y.add(e as usize) = value + e as f32 };
        }
    }
}

/// `z[i] = x[i] + y[i] + w[0]`: two synchronised inputs, a prefetched plain weight.
#[megaops::kernel(
    block = 32,
    input(x[n] = [i: 32]),
    input(y[n] = [i: 32]),
    output(z[n] = [i: 32]),
    tensor(w[1]),
)]
pub unsafe fn add3(x: *const f32, w: *const f32, y: *const f32, z: *mut f32, n: u32) {
    #[prefetch]
    let w0 = unsafe { *w };
    let e = i * 32 + thread_idx_x();
    if e >= n {
        return;
    }
    // SAFETY: e < n for all three.
    unsafe { *z.add(e as usize) = *x.add(e as usize) + *y.add(e as usize) + w0 };
}

/// Split-K row sums: tile (pid_m, pid_k) adds `Σ_k x[r, k]` over its `BK` columns into
/// `o[r]` for its `BM` rows; `o` is complete once every `pid_k` tile has signalled.
#[megaops::kernel(
    block = 32,
    tiles(pid_m = m.div_ceil(BM), pid_k = k.div_ceil(BK)),
    input(x[m, k] = [pid_m: BM, pid_k: BK]),
    output(o[m] = [pid_m: BM], split = pid_k),
)]
#[config(BM = 4, BK = 8)]
#[config(BM = 3, BK = 5)]
pub unsafe fn row_sums_splitk(x: *const f32, o: *mut f32, m: u32, k: u32) {
    let mut r = thread_idx_x();
    while r < BM {
        let row = pid_m * BM + r;
        if row < m {
            let mut s = 0.0f32;
            let mut col = pid_k * BK;
            while col < k && col < (pid_k + 1) * BK {
                // SAFETY: (row, col) lies inside the m × k input.
                s += unsafe { *x.add((row * k + col) as usize) };
                col += 1;
            }
            // SAFETY: row < m.
            unsafe { atomic::red_add(o.add(row as usize), s, Relaxed, Gpu) };
        }
        r += block_dim_x();
    }
}

/// `dst[i] = src[i]` per 4-element tile; reads through a wait on `src`.
#[megaops::kernel(block = 4, input(src[n] = [i: 4]), tensor(dst[n]))]
pub unsafe fn copy_out(src: *const f32, dst: *mut f32, n: u32) {
    let e = i * 4 + thread_idx_x();
    if e < n {
        // SAFETY: e < n.
        unsafe { *dst.add(e as usize) = *src.add(e as usize) };
    }
}

/// Persistent: each CTA loops over tiles; every tile counts itself once.
#[megaops::kernel(block = 8, persistent, tiles(t = n), tensor(hits[n]))]
pub unsafe fn count_tiles(hits: *mut u32, n: u32) {
    if thread_idx_x() == 0 && t < n {
        // SAFETY: t < n.
        unsafe { atomic::red_add(hits.add(t as usize), 1u32, Relaxed, Gpu) };
    }
}

#[test]
fn axes_bind_in_declaration_order_and_remap_reorders_ctas() -> Result<()> {
    let dev = cpu_device(1)?;
    let s = Stream::new(&dev)?;
    let (na, nb) = (2u32, 4u32);
    for (cfg, nc) in [(0usize, 3u32), (1, 1)] {
        let n = (na * nb * nc) as usize;
        for rot in [0u32, 5] {
            let mut out = Tensor::<u32>::zeros(&dev, &[n])?;
            let mut cta = Tensor::<u32>::zeros(&dev, &[n])?;
            let opts = LaunchOptions::config(cfg).remap(Remap::Rotate(rot));
            coords::launch_with(&s, &opts, &mut out, &mut cta, na, nb)?;
            let (out, cta) = (out.to_vec()?, cta.to_vec()?);
            for a in 0..na {
                for b in 0..nb {
                    for c in 0..nc {
                        let t = ((a * nb + b) * nc + c) as usize;
                        assert_eq!(out[t], 100 * a + 10 * b + c, "config {cfg}: tile {t}");
                        // CTA x runs tile (x + rot) % n.
                        assert_eq!(
                            (cta[t] as usize + rot as usize) % n,
                            t,
                            "config {cfg} rotate {rot}: tile {t}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn early_returns_still_signal_and_two_inputs_wait() -> Result<()> {
    for seed in 0..4 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 3)?;
        let n = 70u32;
        let mut x = Tiled::<f32, DynChunks>::new(&dev, &[n as usize], DynChunks(5), "x")?;
        let mut y = Tiled::<f32, Chunks<16>>::new(&dev, &[n as usize], Chunks, "y")?;
        let w = Tensor::from_slice(&dev, &[1], &[1000.0f32])?;
        let mut z = Tensor::<f32>::full(&dev, &[n as usize], f32::NAN)?;
        ramp::launch(&s, &mut x, n, 0.0)?;
        ramp::launch(&s, &mut y, n, 0.5)?;
        add3::launch(&s, &x, &w, &y, &mut z, n)?;
        let z = z.to_vec()?;
        for (e, v) in z.iter().enumerate() {
            assert_eq!(*v, 2.0 * e as f32 + 0.5 + 1000.0, "seed {seed}: z[{e}]");
        }
    }
    Ok(())
}

#[test]
fn split_k_outputs_are_complete_before_consumers_read_them() -> Result<()> {
    for seed in 0..3 {
        let dev = cpu_device(seed)?;
        let s = AsyncStream::new(&dev, 2)?;
        let (m, k) = (10u32, 23u32);
        let data: Vec<f32> = (0..m * k).map(|v| (v % 7) as f32).collect();
        let x = Tiled::complete(
            Tensor::from_slice(&dev, &[m as usize, k as usize], &data)?,
            Grid::<2, 23>,
            "x",
        )?;
        for cfg in 0..row_sums_splitk::CONFIGS.len() {
            let sema = Tensor::<i32>::zeros(&dev, &[(m as usize).div_ceil(2)])?;
            let mut o = Tiled::with_semaphores(Tensor::<f32>::zeros(&dev, &[m as usize])?, sema, Chunks::<2>, "o")?;
            let mut out = Tensor::<f32>::full(&dev, &[m as usize], f32::NAN)?;
            row_sums_splitk::launch_with(&s, &LaunchOptions::config(cfg), &x, &mut o, m, k)?;
            copy_out::launch(&s, &o, &mut out, m)?;
            let out = out.to_vec()?;
            for r in 0..m as usize {
                let want: f32 = data[r * k as usize..(r + 1) * k as usize].iter().sum();
                assert_eq!(out[r], want, "seed {seed} config {cfg}: row {r}");
            }
        }
    }
    Ok(())
}

#[test]
fn persistent_ctas_cover_every_tile_once() -> Result<()> {
    let dev = cpu_device(3)?;
    let s = Stream::new(&dev)?;
    for ctas in [1u32, 3, 64] {
        let n = 37u32;
        let mut hits = Tensor::<u32>::zeros(&dev, &[n as usize])?;
        count_tiles::launch_with(&s, &LaunchOptions::default().ctas(ctas), &mut hits, n)?;
        assert_eq!(hits.to_vec()?, vec![1; n as usize], "{ctas} CTAs");
    }
    Ok(())
}

#[test]
fn a_missing_config_is_an_error_before_anything_runs() -> Result<()> {
    let dev = cpu_device(0)?;
    let s = Stream::new(&dev)?;
    let mut out = Tensor::<u32>::zeros(&dev, &[6])?;
    let mut cta = Tensor::<u32>::zeros(&dev, &[6])?;
    let err = coords::launch_with(&s, &LaunchOptions::config(7), &mut out, &mut cta, 1, 2)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tile config 7 does not exist; `coords` has 2 (see `coords::CONFIGS`)"),
        "{err}"
    );
    assert_eq!(coords::CONFIGS[0].name, "NC=3");
    assert_eq!(coords::CONFIGS[1].entry, "coords__NC1");
    Ok(())
}

/// `y[e] = 1` over kernel tiles of `tile` elements, a size only known at launch.
#[megaops::kernel(block = 32, output(y[n] = [i: tile]))]
pub unsafe fn ones_by(y: *mut f32, n: u32, tile: u32) {
    let mut e = i * tile + thread_idx_x();
    while e < n && e < (i + 1) * tile {
        // SAFETY: e < n.
        unsafe { *y.add(e as usize) = 1.0 };
        e += block_dim_x();
    }
}

#[test]
fn a_kernel_tile_size_of_zero_at_launch_is_an_error_not_a_division_panic() -> Result<()> {
    let dev = cpu_device(0)?;
    let s = Stream::new(&dev)?;
    let mut y = Tensor::<f32>::zeros(&dev, &[10])?;
    // Before: the launcher divided the grid by the size and panicked.
    let err = ones_by::launch(&s, &mut y, 10, 0).expect_err("tile 0").to_string();
    assert!(
        err.contains("cannot launch `ones_by`: the kernel tile size `tile` of axis `i` is 0"),
        "{err}"
    );
    ones_by::launch(&s, &mut y, 10, 3)?;
    assert_eq!(y.to_vec()?, vec![1.0; 10]);
    Ok(())
}

#[test]
fn ctas_on_a_kernel_that_is_not_persistent_is_an_error_not_ignored() -> Result<()> {
    let dev = cpu_device(0)?;
    let s = Stream::new(&dev)?;
    let mut out = Tensor::<u32>::zeros(&dev, &[6])?;
    let mut cta = Tensor::<u32>::zeros(&dev, &[6])?;
    let err = coords::launch_with(&s, &LaunchOptions::config(0).ctas(2), &mut out, &mut cta, 1, 2)
        .expect_err("not persistent")
        .to_string();
    assert!(
        err.contains("cannot launch `coords`: `LaunchOptions::ctas(2)` applies to persistent kernels only"),
        "{err}"
    );
    Ok(())
}
