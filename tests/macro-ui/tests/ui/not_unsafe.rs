// A kernel must be an `unsafe fn`: its caller promises the pointers are valid.
#[megaops::kernel(block = 128, input(a[n] = [i: 64]), output(c[n] = [i: 64]))]
pub fn copy(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = *a.add((i * 64) as usize) };
    let _ = n;
}

fn main() {}
