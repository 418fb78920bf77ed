// A shape, tile size or block names a constant that no #[config] defines.
#[megaops::kernel(block = THREADS, input(x[m, n] = [pid: BM, _]), output(y[m, n] = [pid: BM, col: BN]))]
#[config(BM = 64, THREADS = 128)]
#[config(BM = 32, THREADS = 64)]
pub unsafe fn copy(x: *const f32, y: *mut f32, m: u32, n: u32) {
    unsafe { *y.add((pid * BM * n + col) as usize) = *x.add((pid * BM * n) as usize) };
}

// Without any #[config].
#[megaops::kernel(block = THREADS, output(y[n] = [i: 64]))]
pub unsafe fn fill(y: *mut f32, n: u32) {
    unsafe { *y.add((i * 64) as usize) = 0.0 };
}

fn main() {}
