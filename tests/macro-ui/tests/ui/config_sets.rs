// Every #[config] defines the same constants, each once.
#[megaops::kernel(scratch(p[1]), block = THREADS, tiles(i = n.div_ceil(BM)))]
#[config(BM = 64, THREADS = 128)]
#[config(BM = 128, THREADS = 256, STAGES = 3)]
#[config(BM = 32)]
#[config(BM = 16, BM = 16, THREADS = 64)]
pub unsafe fn fill(p: *mut f32, n: u32) {
    unsafe { *p.add((i * BM) as usize) = 0.0 };
}

fn main() {}
