// Annotation expressions are ordinary Rust: a type error points at the annotation.
pub static __MEGAOPS_PTX: megaops::PtxModule = megaops::PtxModule { name: "ui", ptx: &[], cubin: &[] };

#[megaops::kernel(block = "128", input(a[n] = [i: "64"]), output(c[n] = [i: 64]))]
pub unsafe fn copy(a: *const f32, c: *mut f32, n: u32) {
    unsafe { *c.add((i * 64) as usize) = *a.add((i * 64) as usize) };
}

fn main() {}
