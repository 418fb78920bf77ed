//! The code of `GUIDE.md` (from an empty crate to a launched, overlapped kernel), compiled
//! for both targets with this crate and run by `examples/tests/guide.rs`; that test also
//! checks that every code block of the guide appears here (or in this crate's
//! `Cargo.toml` / `build.rs` / `lib.rs`) as written.

use megaops::device::thread::{block_dim_x, thread_idx_x};

/// `y = alpha · x` for `m × n` row-major tensors; each kernel tile is `BM` whole rows.
#[megaops::kernel(
    block = 128,
    input(x[m, n] = [pid: BM, _]),  // a CTA reads rows pid*BM.. of x (and waits for them)
    output(y[m, n] = [pid: BM, _]), // and writes the same rows of y (and signals them)
)]
#[config(BM = 4)]
#[config(BM = 16)]
pub unsafe fn guide_scale(x: *const f32, y: *mut f32, m: u32, n: u32, alpha: f32) {
    let mut t = thread_idx_x();
    while t < BM * n {
        let (i, j) = (pid * BM + t / n, t % n);
        if i < m {
            // SAFETY: (i, j) lies inside the m × n tensors.
            unsafe { *y.add((i * n + j) as usize) = alpha * *x.add((i * n + j) as usize) };
        }
        t += block_dim_x();
    }
}

/// Host code exists only for the host target: the kernel module is also compiled for
/// nvptx64, where there is no `Device`.
#[cfg(not(target_arch = "nvptx64"))]
pub fn guide_run(dev: &megaops::Device, m: usize, n: usize) -> megaops::Result<Vec<f32>> {
    use megaops::{AsyncStream, DynRows, LaunchOptions, Tensor, Tiled};
    let values: Vec<f32> = (0..m * n).map(|v| v as f32).collect();
    let x = Tensor::from_slice(dev, &[m, n], &values)?;
    let s = AsyncStream::new(dev, 2)?; // two streams, launches round-robin
    let mut y = Tiled::<f32, DynRows>::new(dev, &[m, n], DynRows(8), "y")?; // data tiles: 8 rows
    let mut z = Tensor::<f32>::zeros(dev, &[m, n])?;
    let (m32, n32) = (m as u32, n as u32); // kernel sizes are u32; shapes are checked
    guide_scale::launch(&s, &x, &mut y, m32, n32, 2.0)?; // producer: signals y's data tiles
    // The second launch takes the config with 16-row kernel tiles, found by its constants.
    let bm16 = guide_scale::CONSTS.iter().position(|c| c.BM == 16);
    let bm16 = bm16.ok_or_else(|| megaops::Error::Invalid("no BM = 16 config".into()))?;
    let second = LaunchOptions::config(bm16);
    guide_scale::launch_with(&s, &second, &y, &mut z, m32, n32, 0.5)?; // waits per data tile
    z.to_vec() // waits for the work, reports tile-wait failures
}
