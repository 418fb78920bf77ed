// An annotation names a parameter that does not exist.
#[megaops::kernel(scratch(a[1]), block = 128, input(x[n] = [i: 64]), output(c[n] = [i: 64]))]
pub unsafe fn copy(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = *a.add((i * 64) as usize) };
}

fn main() {}
