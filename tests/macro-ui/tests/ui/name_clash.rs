// Axes and #[config] constants must not hide parameters.
#[megaops::kernel(block = 128, input(a[n] = [n: BM]), output(c[n] = [n: BM]))]
#[config(BM = 64, a = 1)]
pub unsafe fn copy(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add(n as usize) = *a.add(n as usize) };
}

fn main() {}
