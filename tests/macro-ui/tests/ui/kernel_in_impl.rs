// Kernels are free functions: the macro emits a launcher module beside the function,
// which an `impl` or `trait` block cannot hold.
pub struct Ops;

impl Ops {
    #[megaops::kernel(block = 128, input(x[n] = [i: 64]), output(y[n] = [i: 64]))]
    pub unsafe fn copy(x: *const f32, y: *mut f32, n: u32) {
        unsafe { *y.add((i * 64) as usize) = *x.add((i * 64) as usize) };
    }

    #[megaops::kernel(block = 128, output(y[n] = [i: 64]))]
    pub unsafe fn fill(&self, y: *mut f32, n: u32) {
        unsafe { *y.add((i * 64) as usize) = 0.0 };
    }
}

pub trait Kernels {
    #[megaops::kernel(block = 128, output(y[n] = [i: 64]))]
    unsafe fn zero(y: *mut f32, n: u32) {
        unsafe { *y.add((i * 64) as usize) = 0.0 };
    }
}

fn main() {}
