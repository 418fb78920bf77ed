//! Validates the PTX of every kernel crate of the workspace with `ptxas` for each
//! architecture it was built for (`MEGAOPS_ARCHS`, default `sm_90`): every module must
//! assemble and no entry may spill registers. Prints registers, stack frame, spills,
//! barriers and static shared memory per entry. Without `ptxas` (see
//! `megaops_build::ptxas::find`) it says why it is skipped.

use megaops_build::ptxas::{self, EntryReport};

fn modules() -> Vec<(&'static str, &'static [(&'static str, &'static str)])> {
    vec![
        ("megaops-runtime-kernels", megaops_runtime_kernels::ptx::MODULES),
        ("megaops-kernels", megaops_kernels::__MEGAOPS_PTX.ptx),
        ("megaops-examples", megaops_examples::__MEGAOPS_PTX.ptx),
        ("megaops-device-kernels", megaops_device_kernels::ptx::MODULES),
    ]
}

#[test]
fn every_kernel_entry_assembles_without_spills() {
    let ptxas = match ptxas::find() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED every_kernel_entry_assembles_without_spills: {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("megaops-ptxas-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut total = 0;
    for (krate, archs) in modules() {
        assert!(!archs.is_empty(), "{krate} embeds no PTX");
        for (arch, ptx) in archs {
            match ptxas::assemble(&ptxas, arch, ptx, &dir, krate) {
                Err(e) => failures.push(e),
                Ok(entries) => {
                    println!("{krate} ({arch}, {} entries):", entries.len());
                    println!(
                        "  {:<34} {:>4} {:>6} {:>8} {:>8} {:>4} {:>6}",
                        "entry", "regs", "stack", "spill-st", "spill-ld", "bars", "smem"
                    );
                    for EntryReport {
                        name,
                        registers,
                        stack,
                        spill_stores,
                        spill_loads,
                        barriers,
                        smem,
                    } in &entries
                    {
                        println!(
                            "  {name:<34} {registers:>4} {stack:>6} {spill_stores:>8} {spill_loads:>8} {barriers:>4} {smem:>6}"
                        );
                        if *spill_stores > 0 || *spill_loads > 0 {
                            failures.push(format!("{krate} {arch}: `{name}` spills registers"));
                        }
                    }
                    total += entries.len();
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("ptxas: {total} entries checked with {}", ptxas.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
