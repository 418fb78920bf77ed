// No synchronised tensors: a plain launch over `tiles(...)`, values of several types,
// early returns, and an implicit config.
use megaops::{Stream, Tensor};

pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

/// Fills `p[..n]` with `v`, 256 elements per CTA.
#[megaops::kernel(block = 256, tiles(i = n.div_ceil(256)), scratch(p[n]))]
pub unsafe fn fill(p: *mut f32, n: u32, v: f32, scale: i64) {
    let idx = i * 256 + megaops::device::thread::thread_idx_x();
    if idx >= n {
        return;
    }
    unsafe { *p.add(idx as usize) = v * scale as f32 };
}

pub fn run(s: &Stream, p: &mut Tensor<f32>) -> megaops::Result<()> {
    fill::launch(s, p, 1000, 1.5, 2)
}

fn main() {
    assert_eq!(fill::CONFIGS[0].name, "default");
    assert_eq!(fill::CONFIGS[0].entry, "fill__cfg0");
}
