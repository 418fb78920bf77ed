// Malformed annotation items: each is reported, and parsing continues with the next.
#[megaops::kernel(scratch(a[1]), scratch(c[1]), 
    block,
    input(a[n] = [i]),
    output(c[n] [i: 64]),
    persistent = true,
    tiles(i),
)]
pub unsafe fn f(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = *a.add((i * 64) as usize) };
    let _ = n;
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
#[config(BM)]
#[config = 3]
pub unsafe fn g(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize) = 0.0 };
}

fn main() {}
