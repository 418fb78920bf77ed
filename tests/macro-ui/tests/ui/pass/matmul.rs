// The grammar of the crate docs: two configs, a prefetch, a plain weight pointer, a
// synchronised input and output. Launchers are type-checked, not run (no device).
use megaops::{bf16, LaunchOptions, Rows, Stream, Tensor, Tiled};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

/// C = A·B. Kernel tile (pid_m, pid_n): rows `pid_m * BM ..`, columns `pid_n * BN ..`.
#[megaops::kernel(
    block = THREADS,
    smem = (BM + BN) * BK * 2,
    input(a[m, k] = [pid_m: BM, _]),
    output(c[m, n] = [pid_m: BM, pid_n: BN]),
    tensor(b[n, k]),
    check(k % 8 == 0, "k must be a multiple of 8"),
)]
#[config(BM = 64, BN = 64, BK = 32, THREADS = 128)]
#[config(BM = 128, BN = 128, BK = 32, THREADS = 256)]
pub unsafe fn matmul(a: *const bf16, b: *const bf16, c: *mut bf16, m: u32, n: u32, k: u32) {
    #[prefetch]
    let w0 = unsafe { *b.add((pid_n * BN) as usize) };
    let mut acc = [0f32; BK as usize];
    if pid_m * BM >= m {
        return;
    }
    let x = unsafe { *a.add((pid_m * BM * k) as usize) };
    acc[0] = x.to_f32() * w0.to_f32();
    unsafe { *c.add((pid_m * BM * n + pid_n * BN) as usize) = bf16::from_f32(acc[0]) };
}

pub fn forward(
    s: &Stream,
    x: &Tiled<bf16, Rows<64>>,
    w: &Tensor<bf16>,
    y: &mut Tiled<bf16, Rows<64>>,
    plain: &Tensor<bf16>,
    out: &mut Tensor<bf16>,
) -> megaops::Result<()> {
    matmul::launch(s, x, w, y, 256, 128, 64)?;
    matmul::launch_with(s, &LaunchOptions::config(1), x, w, y, 256, 128, 64)?;
    // Plain tensors are accepted where the kernel synchronises: they are complete.
    matmul::launch(s, plain, w, out, 256, 128, 64)
}

fn main() {
    assert_eq!(matmul::CONFIGS.len(), 2);
    assert_eq!(matmul::CONFIGS[0].name, "BM=64, BN=64, BK=32, THREADS=128");
    assert_eq!(matmul::CONFIGS[1].entry, "matmul__BM128_BN128_BK32_THREADS256");
}
