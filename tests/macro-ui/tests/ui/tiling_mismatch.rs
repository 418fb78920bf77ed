// A producer and a consumer that disagree on the data tiling do not compile: the
// tiling is part of the `Tiled` type.
use megaops::{bf16, Rows, Tiled};

fn consume(_y: &Tiled<bf16, Rows<128>>) {}

pub fn produce_then_consume(y: &Tiled<bf16, Rows<64>>) {
    consume(y);
}

fn main() {}
