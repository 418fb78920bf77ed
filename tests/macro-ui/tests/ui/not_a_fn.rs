// The attribute applies to functions only.
#[megaops::kernel(block = 128)]
pub struct Kernel;

fn main() {}
