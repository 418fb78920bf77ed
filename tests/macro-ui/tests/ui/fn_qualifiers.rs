// `async`, `const` and `extern` functions cannot be kernels.
#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub async unsafe fn a(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize) = 0.0 };
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub const unsafe fn b(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize) = 0.0 };
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub unsafe extern "C" fn c(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize) = 0.0 };
}

fn main() {}
