// A kernel with a mistake still gets its launcher module (a stub): the call sites,
// `launch_with`, `CONFIGS` and `CONSTS` give no follow-up errors, and a `&mut` argument
// is reborrowed, not moved, so it can be passed twice. One mistake, one error.
use megaops::{LaunchOptions, Stream, Tensor};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(block = THREADS, threads = 256, tiles(i = n.div_ceil(THREADS)), scratch(p[n]), tensor(w[n]))]
#[config(THREADS = 256)]
pub unsafe fn fill(p: *mut f32, w: *const f32, n: u32, v: f32) {
    unsafe { *p.add(i as usize) = v * *w };
}

pub fn run(s: &Stream, p: &mut Tensor<f32>, w: &Tensor<f32>, mut q: Tensor<f32>) -> megaops::Result<()> {
    fill::launch(s, p, w, 1000, 1.5)?;
    fill::launch_with(s, &LaunchOptions::default(), p, w, 1000, 1.5)?;
    fill::launch(s, &mut q, w, 8, 0.5)?;
    let threads: Option<u32> = fill::CONSTS.first().map(|c| c.THREADS);
    assert!(fill::CONFIGS.is_empty() && threads.is_none());
    Ok(())
}

fn main() {}
