// An input the body never reads has no statement to put its wait before; an output
// the body never writes would be signalled without data.
#[megaops::kernel(block = 128, input(a[n] = [i: 64]), output(c[n] = [i: 64]), output(d[n] = [i: 64]))]
pub unsafe fn f(a: *const f32, c: *mut f32, d: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = 1.0 };
    let _ = n;
}

fn main() {}
