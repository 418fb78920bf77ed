fn main() {
    megaops_build::PtxBuilder::from_env().build_or_exit();
}
