// `block`, `smem`, `tiles`, `persistent` and `debug` are given once.
#[megaops::kernel(scratch(c[1]), block = 128, block = 256, persistent, persistent, tiles(i = n))]
pub unsafe fn fill(c: *mut f32, n: u32) {
    unsafe { *c.add(i as usize) = 0.0 };
}

fn main() {}
