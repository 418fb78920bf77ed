// A PTX entry is concrete: no type, lifetime or const generics.
#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub unsafe fn by_type<T: Copy>(p: *mut T, v: T, n: u32) {
    unsafe { *p.add(i as usize) = v };
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub unsafe fn by_lifetime<'a>(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize) = 0.0 };
}

#[megaops::kernel(scratch(p[1]), block = 128, tiles(i = n))]
pub unsafe fn by_const<const BM: usize>(p: *mut f32, n: u32) {
    unsafe { *p.add(i as usize * BM) = 0.0 };
}

fn main() {}
