// A kernel tile of 0 elements is a compile error at the value that makes it 0 (the
// launcher would divide the grid by it): a #[config] constant or a literal size.
#[megaops::kernel(block = 128, output(c[m, n] = [pid_m: BM, pid_n: 0]))]
#[config(BM = 64)]
#[config(BM = 0)]
pub unsafe fn fill(c: *mut f32, m: u32, n: u32) {
    unsafe { *c.add((pid_m * BM + pid_n) as usize) = 0.0 };
}

fn main() {}
