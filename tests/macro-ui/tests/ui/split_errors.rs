// `split` is for outputs, names a grid axis with a known extent, and does not also
// select a dimension of the output.
#[megaops::kernel(block = 128, input(a[m, k] = [i: 64, _], split = i), output(c[m] = [i: 64]))]
pub unsafe fn on_input(a: *const f32, c: *mut f32, m: u32, k: u32) {
    unsafe { *c.add(i as usize) = *a.add((i * k) as usize) };
    let _ = m;
}

#[megaops::kernel(block = 128, input(a[m, k] = [i: 64, _]), output(c[m] = [i: 64], split = kk))]
pub unsafe fn not_derivable(a: *const f32, c: *mut f32, m: u32, k: u32) {
    unsafe { *c.add(i as usize) += *a.add((i * k) as usize) };
    let _ = m;
}

#[megaops::kernel(block = 128, tiles(i = m.div_ceil(64)), input(a[m, k] = [i: 64, _]), output(c[m] = [i: 64], split = kk))]
pub unsafe fn not_in_tiles(a: *const f32, c: *mut f32, m: u32, k: u32) {
    unsafe { *c.add(i as usize) += *a.add((i * k) as usize) };
}

#[megaops::kernel(block = 128, input(a[m, k] = [i: 64, _]), output(c[m] = [i: 64], split = i))]
pub unsafe fn selects_and_splits(a: *const f32, c: *mut f32, m: u32, k: u32) {
    unsafe { *c.add(i as usize) += *a.add((i * k) as usize) };
    let _ = m;
}

fn main() {}
