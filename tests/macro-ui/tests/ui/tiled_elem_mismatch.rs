// The element type is part of a `Tiled` tensor's type: a kernel that reads `bf16`
// does not accept a tensor of `f16`.
use megaops::{bf16, f16, Rows, Stream, Tiled};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(block = 128, input(x[m, k] = [i: 64, _]), output(y[m, k] = [i: 64, _]))]
pub unsafe fn copy(x: *const bf16, y: *mut bf16, m: u32, k: u32) {
    unsafe { *y.add((i * 64 * k) as usize) = *x.add((i * 64 * k) as usize) };
    let _ = m;
}

pub fn run(s: &Stream, x: &Tiled<f16, Rows<64>>, y: &mut Tiled<bf16, Rows<64>>) -> megaops::Result<()> {
    copy::launch(s, x, y, 128, 64)
}

fn main() {}
