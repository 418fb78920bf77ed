//! Checks the embedded PTX of every architecture built (`MEGAOPS_ARCHS`, default `sm_90`):
//!
//! - `ptxas_accepts_every_module`: `ptxas -arch=<arch> -v` assembles every module without
//!   an error, every kernel of `ENTRIES` is in it, none spills; prints registers, stack
//!   frame, spills, barriers and shared memory per entry. `ptxas` is found and run by
//!   `megaops_build::ptxas`; without one the test says why it is skipped.
//! - `ptx_has_the_instructions_we_meant`: each kernel's PTX contains the instructions its
//!   primitives are documented to emit (no `ptxas` needed).

use megaops_build::ptxas;
use megaops_device_kernels::ptx::{ENTRIES, MODULES};

#[test]
fn ptxas_accepts_every_module() {
    let ptxas = match ptxas::find() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED ptxas_accepts_every_module: {why}");
            return;
        }
    };
    assert!(!MODULES.is_empty(), "no PTX module was embedded");
    let dir = std::env::temp_dir().join(format!("megaops-ptxas-device-{}", std::process::id()));
    let mut failures = Vec::new();
    for (arch, ptx) in MODULES {
        let entries = match ptxas::assemble(&ptxas, arch, ptx, &dir, "kernels") {
            Ok(entries) => entries,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        println!("{arch}: {} entries ({})", entries.len(), ptxas.display());
        println!(
            "  {:<20} {:>4} {:>6} {:>7} {:>7} {:>4} {:>6}",
            "entry", "regs", "stack", "spill-st", "spill-ld", "bars", "smem"
        );
        for e in &entries {
            println!(
                "  {:<20} {:>4} {:>6} {:>7} {:>7} {:>4} {:>6}",
                e.name, e.registers, e.stack, e.spill_stores, e.spill_loads, e.barriers, e.smem
            );
            if e.spill_stores > 0 || e.spill_loads > 0 {
                failures.push(format!("{arch}: {} spills registers", e.name));
            }
        }
        for want in ENTRIES {
            if !entries.iter().any(|e| e.name == *want) {
                failures.push(format!("{arch}: entry `{want}` is missing from the PTX"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The body of `.entry name(...) { ... }` in `ptx`.
fn entry_body<'a>(ptx: &'a str, name: &str) -> Option<&'a str> {
    let start = ptx.find(&format!(".entry {name}("))?;
    let rest = &ptx[start..];
    let end = rest.find("\n}\n")?;
    Some(&rest[..end])
}

#[test]
fn ptx_has_the_instructions_we_meant() {
    let expect: &[(&str, &[&str])] = &[
        (
            "thread_indices",
            &["%tid.x", "%ctaid.y", "%ntid.z", "%nctaid.x", "%laneid"],
        ),
        (
            "barriers",
            &[
                "bar.sync 	0",
                "barrier.sync",
                "barrier.red.popc.u32",
                "barrier.red.and.pred",
                "barrier.red.or.pred",
            ],
        ),
        (
            "shared_static_a",
            &["mov.u32 %r1, __megaops_smem_TILE_", "st.shared.b32", "ld.shared.b32"],
        ),
        ("shared_static_b", &["ld.shared.v4.b32"]),
        (
            "shared_dynamic",
            &[
                "megaops_dynamic_smem",
                "%dynamic_smem_size",
                "cvta.shared.u64",
                "cvta.to.shared.u64",
                "st.shared.b64",
                "ld.shared.v2.b32",
                "st.shared.u8",
            ],
        ),
        (
            "atomics",
            &[
                "atom.relaxed.gpu.add.u32",
                "atom.acq_rel.gpu.add.s32",
                "atom.relaxed.gpu.add.f32",
                "atom.relaxed.cta.add.f64",
                "red.release.gpu.add.u32",
                "red.relaxed.gpu.max.s64",
                "atom.acq_rel.gpu.cas.b32",
                "atom.acq_rel.gpu.exch.b32",
                "ld.relaxed.gpu.b32",
                "st.release.gpu.b32",
                "atom.relaxed.gpu.global.add.u32",
                "ld.acquire.gpu.global.b32",
                "atom.relaxed.gpu.global.cas.b32",
                "red.release.gpu.global.add.u64",
                "st.relaxed.sys.global.b32",
                "st.relaxed.cta.b32",
                "atom.relaxed.cta.add.u32",
            ],
        ),
        (
            "mp_producer",
            &[
                "fence.acq_rel.gpu",
                "red.release.gpu.add.s32",
                "%globaltimer",
                "nanosleep.u32",
            ],
        ),
        (
            "mp_consumer",
            &[
                "ld.acquire.gpu.b32",
                "nanosleep.u32",
                "%globaltimer",
                "ld.global.cg.v4.u32",
            ],
        ),
        (
            "vector_copy",
            &[
                "ld.global.v4.u32",
                "ld.global.nc.v4.u32",
                "ld.global.cg.v4.u32",
                "ld.global.v2.u32",
                "ld.global.nc.v2.u32",
                "ld.global.cg.v2.u32",
                "st.global.v4.u32",
                "st.global.v2.u32",
                "prefetch.global.L2",
            ],
        ),
        (
            "cp_async_copy",
            &[
                "cp.async.cg.shared.global [%r",
                "cp.async.ca.shared.global",
                "], 8;",
                "], 4;",
                "], 16, %r",
                "cp.async.commit_group",
                "cp.async.wait_group 2",
                "cp.async.wait_all",
            ],
        ),
        (
            "ldmatrix_probe",
            &[
                "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
            ],
        ),
        (
            "mma_bf16",
            &[
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                "cp.async.cg.shared.global",
            ],
        ),
        ("mma_f16", &["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"]),
        (
            "warp_collectives",
            &[
                "shfl.sync.idx.b32",
                "shfl.sync.up.b32",
                "shfl.sync.down.b32",
                "shfl.sync.bfly.b32",
                "vote.sync.all.pred",
                "vote.sync.any.pred",
                "vote.sync.uni.pred",
                "vote.sync.ballot.b32",
                "match.any.sync.b32",
                "match.all.sync.b32",
                "activemask.b32",
            ],
        ),
        (
            "convert",
            &[
                "cvt.rn.bf16.f32",
                "cvt.rn.f16.f32",
                "cvt.f32.f16",
                "cvt.rn.bf16x2.f32",
                "cvt.rn.f16x2.f32",
            ],
        ),
        (
            "fences_and_timers",
            &[
                "%globaltimer",
                "%clock64",
                "nanosleep.u32",
                "fence.acq_rel.cta",
                "fence.acq_rel.gpu",
                "fence.acq_rel.sys",
                "fence.sc.cta",
                "fence.sc.gpu",
                "fence.sc.sys",
            ],
        ),
    ];
    let mut missing = Vec::new();
    for (arch, ptx) in MODULES {
        assert!(
            ptx.contains(".extern .shared .align 16 .b8 megaops_dynamic_smem[];"),
            "{arch}: no dynamic smem"
        );
        for (entry, instrs) in expect {
            let Some(body) = entry_body(ptx, entry) else {
                missing.push(format!("{arch}: no entry `{entry}`"));
                continue;
            };
            for i in *instrs {
                if !body.contains(i) {
                    missing.push(format!("{arch}: `{entry}` lacks `{i}`"));
                }
            }
            if body.contains(".local") {
                missing.push(format!("{arch}: `{entry}` uses local memory (a stack frame)"));
            }
        }
        // sm_90-only forms, and their replacements on earlier targets.
        let fences = entry_body(ptx, "fences_and_timers").unwrap_or_default();
        let convert = entry_body(ptx, "convert").unwrap_or_default();
        let sm90 = arch
            .trim_start_matches("sm_")
            .trim_end_matches('a')
            .parse::<u32>()
            .unwrap_or(0)
            >= 90;
        if fences.contains("fence.proxy.async.shared::cta") != sm90 {
            missing.push(format!("{arch}: fence.proxy.async.shared::cta expected iff sm_90+"));
        }
        if convert.contains("cvt.f32.bf16") != sm90 {
            missing.push(format!("{arch}: cvt.f32.bf16 expected iff sm_90+"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
