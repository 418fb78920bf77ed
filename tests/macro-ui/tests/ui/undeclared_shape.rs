// Every plain pointer parameter declares its shape, so the launcher can check the tensor.
#[megaops::kernel(block = 128, tiles(i = n), input(x[n] = [i: 1]))]
pub unsafe fn scale(x: *const f32, w: *const f32, y: *mut f32, n: u32) {
    unsafe { *y.add(i as usize) = *x.add(i as usize) * *w.add(i as usize) };
}

fn main() {}
