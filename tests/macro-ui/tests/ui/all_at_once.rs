// Several mistakes are reported together, each at its tokens; the body still compiles
// against the axes and constants, so no follow-up error buries them.
#[megaops::kernel(
    input(a[m, k] = [pid_m: BM, _]),
    output(c[m, n] = [pid_m: BM]),
    colour = 3,
)]
#[config(BM = 64)]
pub fn matmul(a: *const f32, b: &[f32], c: *mut f32, m: u32, n: u32, k: u32) {
    let row = pid_m * BM;
    unsafe { *c.add(row as usize) = *a.add((row * k) as usize) + b[0] };
    let _ = (m, n);
}

fn main() {}
