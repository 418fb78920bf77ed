// A kernel returns nothing; results go through `*mut` parameters.
#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub unsafe fn sum(p: *const f32, n: u32) -> f32 {
    unsafe { *p.add(i as usize) }
}

fn main() {}
