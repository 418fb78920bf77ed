// Split-K into one output, persistent CTAs, two synchronised inputs, a 2-D block,
// typed constants, and a kernel that is not `pub`.
use megaops::{Chunks, Grid, Stream, Tensor, Tiled};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(
    block = (32, 4),
    persistent,
    tiles(pid_m = (m as usize).div_ceil(BM), pid_k = (k as usize).div_ceil(BK)),
    input(x[m, k] = [pid_m: BM, pid_k: BK]),
    input(r[m] = [pid_m: BM]),
    output(o[m] = [pid_m: BM], split = pid_k),
)]
#[config(BM = 16usize, BK = 64usize, ALPHA: f32 = 0.5)]
#[config(BM = 32usize, BK = 128usize, ALPHA: f32 = 0.25)]
unsafe fn gemv_splitk(o: *mut f32, x: *const f32, r: *const f32, m: u32, k: u32) {
    let row = pid_m as usize * BM;
    let partial = unsafe { *x.add(row * k as usize + pid_k as usize * BK) };
    let residual = unsafe { *r.add(row) };
    unsafe { *o.add(row) += ALPHA * partial + residual };
}

fn run(s: &Stream, x: &Tiled<f32, Grid<16, 64>>, r: &Tensor<f32>, o: &mut Tiled<f32, Chunks<16>>) -> megaops::Result<()> {
    gemv_splitk::launch(s, o, x, r, 64, 256)
}

fn main() {
    let _ = run;
    assert_eq!(gemv_splitk::CONFIGS[1].name, "BM=32usize, BK=128usize, ALPHA=0.25");
    assert_eq!(gemv_splitk::CONFIGS[1].usize("BM"), Some(32));
    assert_eq!(gemv_splitk::CONFIGS[1].f32("ALPHA"), Some(0.25));
    assert_eq!(gemv_splitk::CONFIGS[1].u32("BM"), None, "BM is a usize");
    assert_eq!(gemv_splitk::CONSTS[0].BK, 64);
}
