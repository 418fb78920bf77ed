// A CTA has 1 to 1024 threads: a #[config] or literal `block` outside that range is a
// compile error, not a launch failure.
#[megaops::kernel(block = THREADS, output(c[m] = [pid_m: 64]))]
#[config(THREADS = 128)]
#[config(THREADS = 2048)]
pub unsafe fn fill(c: *mut f32, m: u32) {
    unsafe { *c.add((pid_m * 64) as usize) = 0.0 };
}

#[megaops::kernel(block = (32, 64, 1), output(c[m] = [pid_m: 64]))]
pub unsafe fn fill2(c: *mut f32, m: u32) {
    unsafe { *c.add((pid_m * 64) as usize) = 0.0 };
}

#[megaops::kernel(block = 0, output(c[m] = [pid_m: 64]))]
pub unsafe fn fill3(c: *mut f32, m: u32) {
    unsafe { *c.add((pid_m * 64) as usize) = 0.0 };
}

fn main() {}
