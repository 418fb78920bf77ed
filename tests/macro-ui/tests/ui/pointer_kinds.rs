// Inputs are `*const T`, outputs `*mut T`.
#[megaops::kernel(block = 128, input(a[n] = [i: 64]), output(c[n] = [i: 64]))]
pub unsafe fn copy(a: *mut f32, c: *const f32, n: u32) {
    unsafe { *a.add((i * 64) as usize) = *c.add((i * 64) as usize) };
}

#[megaops::kernel(block = 128, input(n[m] = [i: 64]), output(c[m] = [i: 64]))]
pub unsafe fn scalar(c: *mut f32, n: u32, m: u32) {
    unsafe { *c.add((i * 64) as usize) = n as f32 };
    let _ = m;
}

fn main() {}
