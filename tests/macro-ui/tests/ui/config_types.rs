// A constant's type is written or follows from its value, and is the same in every config.
#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
#[config(SCALE = 0.5, BM = 64, LEN = len())]
#[config(SCALE = 0.25, BM = 64usize, LEN = len())]
pub unsafe fn scale(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize * BM as usize) *= SCALE * LEN as f32 };
}

const fn len() -> usize {
    4
}

fn main() {}
