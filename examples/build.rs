//! Compiles the kernels of this crate to PTX (see `megaops_build`).
fn main() {
    megaops_build::PtxBuilder::from_env().build_or_exit();
}
