// `block` is required.
#[megaops::kernel(scratch(c[1]), tiles(i = n))]
pub unsafe fn fill(c: *mut f32, n: u32) {
    unsafe { *c.add(i as usize) = 0.0 };
}

fn main() {}
