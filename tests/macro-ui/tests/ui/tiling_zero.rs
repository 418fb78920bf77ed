// A constant data tile of size 0 cannot be mapped: creating the tensor fails to compile.
// (`DataTiling::CHECK` is evaluated when `Tiled::new` is instantiated, i.e. when the
// code is built, not by `cargo check`; trybuild builds because the suite has pass cases,
// and `main` makes `make` reachable
// through a function pointer.)
use megaops::{bf16, Device, Rows, Tiled};

pub fn make(dev: &Device) -> megaops::Result<Tiled<bf16, Rows<0>>> {
    Tiled::<bf16, Rows<0>>::new(dev, &[128, 64], Rows, "y")
}

fn main() {
    let reachable: fn(&Device) -> megaops::Result<Tiled<bf16, Rows<0>>> = make;
    std::hint::black_box(reachable);
}
