// The kernel tile gives one coordinate per dimension of the shape.
#[megaops::kernel(block = 128, input(a[m, k] = [pid_m: 64]), output(c[m] = [pid_m: 64, _]))]
pub unsafe fn rowsum(a: *const f32, c: *mut f32, m: u32, k: u32) {
    unsafe { *c.add(pid_m as usize) = *a.add((pid_m * k) as usize) };
    let _ = m;
}

fn main() {}
