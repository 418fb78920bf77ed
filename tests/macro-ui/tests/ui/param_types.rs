// The PTX ABI takes raw pointers and plain values only.
#[megaops::kernel(block = 128, tiles(i = n))]
pub unsafe fn bad(
    r: &f32,
    s: &mut [f32],
    t: (u32, u32),
    u: impl Copy,
    Pair(x, y): Pair,
    n: u32,
) {
    let _ = (r, s, t, u, x, y, i);
}

pub struct Pair(u32, u32);

fn main() {}
