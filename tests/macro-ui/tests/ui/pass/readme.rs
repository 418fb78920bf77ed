// The README's "Writing a kernel" example as written there (annotation, signature, host
// code), with a naive body in place of the README's elided one. Type-checked and built,
// not run (no device).
use megaops::device::thread::{block_dim_x, thread_idx_x};
use megaops::{bf16, AsyncStream, Device, LaunchOptions, Rows, Tensor, Tiled};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(
    block = THREADS,
    smem = (BM + BN) * BK * 2 * STAGES,
    input(a[m, k] = [pid_m: BM, _]),          // a CTA reads rows pid_m*BM.. of A, all of k
    output(c[m, n] = [pid_m: BM, pid_n: BN]), // and writes one BM × BN tile of C
    tensor(b[n, k]),                          // B is a plain weight: its shape, checked at launch
)]
#[config(BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256)]
#[config(BM = 64, BN = 128, BK = 64, STAGES = 3, THREADS = 128)]
pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
    let mut t = thread_idx_x();
    while t < BM * BN {
        let (i, j) = (pid_m * BM + t / BN, pid_n * BN + t % BN);
        if i < m && j < n {
            let mut acc = 0f32;
            for p in 0..k {
                // SAFETY: i < m, j < n and p < k: inside A and B.
                acc += unsafe { (*a.add((i * k + p) as usize)).to_f32() * (*b.add((j * k + p) as usize)).to_f32() };
            }
            // SAFETY: inside C.
            unsafe { *c.add((i * n + j) as usize) = bf16::from_f32(acc) };
        }
        t += block_dim_x();
    }
}

#[allow(dead_code)]
fn host() -> megaops::Result<()> {
    let dev = Device::auto()?;
    let (m, k, n, n2) = (512usize, 256, 384, 128);                // host shapes are usize
    let x = Tensor::<bf16>::zeros(&dev, &[m, k])?;
    let (w1, w2) = (Tensor::<bf16>::zeros(&dev, &[n, k])?, Tensor::<bf16>::zeros(&dev, &[n2, n])?);
    let s = AsyncStream::new(&dev, 2)?;                        // launches round-robin, no barriers
    let mut y = Tiled::<bf16, Rows<64>>::new(&dev, &[m, n], Rows, "y")?;  // data tiles: 64 rows
    let mut z = Tensor::<bf16>::zeros(&dev, &[m, n2])?;
    // Kernel sizes are the device's u32 indices; the launcher checks every shape against them.
    let (m, k, n, n2) = (m as u32, k as u32, n as u32, n2 as u32);
    matmul::launch(&s, &x, &w1, &mut y, m, n, k)?;             // producer signals y's tiles
    matmul::launch_with(&s, &LaunchOptions::config(1), &y, &w2, &mut z, m, n2, n)?; // consumer waits per tile
    Ok(())
}

fn main() {
    assert_eq!(matmul::CONFIGS.len(), 2);
}
