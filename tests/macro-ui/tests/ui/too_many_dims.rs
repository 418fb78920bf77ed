// At most 4 dimensions per tensor and 4 axes per grid.
#[megaops::kernel(
    block = 128,
    input(a[n, n, n, n, n] = [i: 1, _, _, _, _]),
    output(c[n] = [i: 1]),
)]
pub unsafe fn five_dims(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add(i as usize) = *a };
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(a = 1, b = 1, c = 1, d = 1, e = n))]
pub unsafe fn five_axes(p: *mut f32, n: u32) {
    unsafe { *p.add((a + b + c + d + e) as usize) = 0.0 };
}

fn main() {}
