// Without input/output (or with whole-dimension tiles only) the grid must be declared.
#[megaops::kernel(scratch(p[1]), block = 128)]
pub unsafe fn nothing(p: *mut f32) {
    unsafe { *p = 0.0 };
}

#[megaops::kernel(block = 128, input(a[n] = [_]), output(c[n] = [_]))]
pub unsafe fn whole(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c = *a };
    let _ = n;
}

fn main() {}
