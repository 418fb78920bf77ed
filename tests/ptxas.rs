//! Validates the PTX of every kernel crate of the workspace with `ptxas` for each
//! architecture it was built for (`MEGAOPS_ARCHS`, default `sm_90`, plus `sm_90a` for the
//! kernel library): every module must assemble, no entry may spill registers, and ptxas
//! may report no "Potential Performance Loss" (e.g. serialized `wgmma`). Prints registers, stack frame, spills,
//! barriers and static shared memory per entry. Without `ptxas` (see
//! `megaops_build::ptxas::find`) it says why it is skipped. A second test (no `ptxas`
//! needed) bounds the local memory of every function, which ptxas does not report as
//! spilling.

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
    // Every module is assembled at once (ptxas is single-threaded; the sm_90 and sm_90a
    // kernel modules take most of the time), then reported in order.
    let jobs: Vec<(&str, &str, &str)> = modules()
        .into_iter()
        .flat_map(|(krate, archs)| {
            assert!(!archs.is_empty(), "{krate} embeds no PTX");
            archs.iter().map(move |(arch, ptx)| (krate, *arch, *ptx))
        })
        .collect();
    let results: Vec<Result<Vec<EntryReport>, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|&(krate, arch, ptx)| {
                let (ptxas, dir) = (&ptxas, &dir);
                scope.spawn(move || ptxas::assemble(ptxas, arch, ptx, dir, krate))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("the ptxas thread panicked".into())))
            .collect()
    });
    for (&(krate, arch, _), result) in jobs.iter().zip(results) {
        match result {
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
                    performance_losses,
                } in &entries
                {
                    println!(
                        "  {name:<34} {registers:>4} {stack:>6} {spill_stores:>8} {spill_loads:>8} {barriers:>4} {smem:>6}"
                    );
                    if *spill_stores > 0 || *spill_loads > 0 {
                        failures.push(format!("{krate} {arch}: `{name}` spills registers"));
                    }
                    for loss in performance_losses {
                        failures.push(format!("{krate} {arch}: `{name}`: ptxas reports {loss}"));
                    }
                }
                total += entries.len();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("ptxas: {total} entries checked with {}", ptxas.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Most local-memory instructions one function may have. A value kept in local memory
/// (its address taken, e.g. by `iter_mut` over an array) costs a memory round trip per
/// use in a hot loop: decode attention had 545 in one function and ran at 1-4 % of the
/// bandwidth. Today's largest is 87 (decode attention with 8 query heads per KV head).
const LOCAL_BUDGET: usize = 100;

#[test]
fn no_function_keeps_much_state_in_local_memory() {
    let mut failures = Vec::new();
    for (krate, archs) in modules() {
        for (arch, ptx) in archs {
            for u in ptxas::local_memory_use(ptx) {
                println!(
                    "{krate} {arch}: {:<60} depot {:>4} B, {:>3} ld.local, {:>3} st.local",
                    u.name, u.depot_bytes, u.loads, u.stores
                );
                if u.loads + u.stores > LOCAL_BUDGET {
                    failures.push(format!(
                        "{krate} {arch}: `{}` has {} local loads and {} stores (budget {LOCAL_BUDGET}): keep its arrays in registers (constant-index loops, no iter_mut/zip over state)",
                        u.name, u.loads, u.stores
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
