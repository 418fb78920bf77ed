// With `tiles(...)`, every axis a tiling uses must be declared there.
#[megaops::kernel(block = 128, tiles(pid_m = m.div_ceil(64)), input(a[m, n] = [pid_m: 64, pid_n: 64]), output(c[m] = [pid_m: 64]))]
pub unsafe fn f(a: *const f32, c: *mut f32, m: u32, n: u32) {
    unsafe { *c.add(pid_m as usize) = *a.add((pid_m * n) as usize) };
}

fn main() {}
