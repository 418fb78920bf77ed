// A kernel with a mistake still gets its launcher module (a stub), so the call sites,
// `launch_with` and `CONFIGS` give no follow-up errors: one mistake, one error.
use megaops::{LaunchOptions, Stream, Tensor};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[] };

#[megaops::kernel(block = 256, threads = 256, tiles(i = n.div_ceil(256)), scratch(p[n]))]
pub unsafe fn fill(p: *mut f32, n: u32, v: f32) {
    unsafe { *p.add(i as usize) = v };
}

pub fn run(s: &Stream, p: &mut Tensor<f32>) -> megaops::Result<()> {
    fill::launch(s, p, 1000, 1.5)?;
    fill::launch_with(s, &LaunchOptions::default(), p, 1000, 1.5)?;
    assert!(fill::CONFIGS.is_empty());
    Ok(())
}

fn main() {}
