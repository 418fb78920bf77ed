// The kernel body keeps Rust's rules for `unsafe`: an unsafe operation needs its own
// `unsafe { .. }` block (with its SAFETY reason), as in any `unsafe fn` of edition 2024.
use megaops::{Stream, Tensor};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(block = 256, tiles(i = n.div_ceil(256)), scratch(p[n]))]
pub unsafe fn fill(p: *mut f32, n: u32) {
    *p.add(i as usize) = 1.0;
}

pub fn run(s: &Stream, p: &mut Tensor<f32>) -> megaops::Result<()> {
    fill::launch(s, p, 1000)
}

fn main() {}
