// Unknown annotation keys list the valid ones; unknown options of input/output too.
#[megaops::kernel(block = 128, threads = 128, output(c[n] = [i: 64], stride = 2))]
pub unsafe fn fill(c: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = 0.0 };
}

fn main() {}
