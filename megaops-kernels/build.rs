//! Compiles the kernels of this crate to PTX (see `megaops_build`).
fn main() {
    // sm_90a adds the Hopper-only `wgmma` GEMM path; the host loads it on compute
    // capability 9.0 exactly and the portable sm_90 module elsewhere.
    let builder = match megaops_build::PtxBuilder::from_env().archs(["sm_90", "sm_90a"]) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("megaops-kernels build script: {e}");
            std::process::exit(1)
        }
    };
    builder.build_or_exit();
}
