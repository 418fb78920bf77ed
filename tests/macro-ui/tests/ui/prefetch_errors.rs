// `#[prefetch]` statements run before the waits: they must not read a synchronised
// input, must come before the first statement that reads one, and must be top-level.
#[megaops::kernel(scratch(w[1]), block = 128, input(a[n] = [i: 64]), output(c[n] = [i: 64]))]
pub unsafe fn f(a: *const f32, w: *const f32, c: *mut f32, n: u32) {
    #[prefetch]
    let early = unsafe { *a.add((i * 64) as usize) };
    let x = unsafe { *a.add((i * 64) as usize) };
    #[prefetch]
    let late = unsafe { *w };
    if n > 0 {
        #[prefetch]
        let nested = unsafe { *w.add(1) };
        let _ = nested;
    }
    #[prefetch(2)]
    let args = 0.0;
    unsafe { *c.add((i * 64) as usize) = x + early + late + args };
}

fn main() {}
