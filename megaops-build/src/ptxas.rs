//! Validating PTX with NVIDIA's `ptxas` (no GPU needed): find it, assemble a module for
//! its architecture, and read the per-entry resource report (registers, stack frame,
//! spills, barriers, shared memory).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Finds `ptxas`: `$PTXAS`, then the `nvidia-cuda-nvcc` Python wheel
/// (`pip install nvidia-cuda-nvcc==13.0.88`), then `PATH`, then `/usr/local/cuda/bin`.
/// The error says where it looked.
pub fn find() -> Result<PathBuf, String> {
    let works = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os("PTXAS").map(PathBuf::from) {
        if works(&p) {
            return Ok(p);
        }
        tried.push(format!("$PTXAS={}", p.display()));
    }
    let py = "import nvidia.cu13 as m, os; print(os.path.join(list(m.__path__)[0], 'bin', 'ptxas'))";
    if let Ok(out) = Command::new("python3").args(["-c", py]).output() {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && works(&p) {
            return Ok(p);
        }
    }
    tried.push("the nvidia-cuda-nvcc wheel (python3 -m pip install nvidia-cuda-nvcc==13.0.88)".into());
    for p in [PathBuf::from("ptxas"), PathBuf::from("/usr/local/cuda/bin/ptxas")] {
        if works(&p) {
            return Ok(p);
        }
        tried.push(p.display().to_string());
    }
    Err(format!("no ptxas found (tried {})", tried.join(", ")))
}

/// What `ptxas -v` reports for one entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryReport {
    /// Entry name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Stack frame bytes.
    pub stack: u32,
    /// Spill stores, bytes.
    pub spill_stores: u32,
    /// Spill loads, bytes.
    pub spill_loads: u32,
    /// Named barriers used.
    pub barriers: u32,
    /// Static shared memory, bytes.
    pub smem: u32,
    /// ptxas's "Potential Performance Loss" notes about this entry (e.g. `wgmma`
    /// instructions serialized because other instructions touch their accumulators
    /// between issue and wait), without the `ptxas info : (Cnnnn)` prefix.
    pub performance_losses: Vec<String>,
}

/// Assembles `ptx` for `arch` (`sm_90`, ...) in `dir`; returns the per-entry report, or
/// ptxas's messages on failure.
pub fn assemble(ptxas: &Path, arch: &str, ptx: &str, dir: &Path, name: &str) -> Result<Vec<EntryReport>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let src = dir.join(format!("{name}.{arch}.ptx"));
    std::fs::write(&src, ptx).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(dir.join(format!("{name}.{arch}.cubin")))
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.lines().any(|l| l.contains("error")) {
        return Err(format!(
            "ptxas -arch={arch} failed on {name} ({}):\n{stderr}",
            out.status
        ));
    }
    Ok(parse_report(&stderr))
}

/// The number just before `unit` in `line` (`"40 registers"` → 40).
fn number_before(line: &str, unit: &str) -> u32 {
    line.find(unit)
        .and_then(|at| line[..at].split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Parses `ptxas -v` output into per-entry reports.
pub fn parse_report(stderr: &str) -> Vec<EntryReport> {
    let mut entries: Vec<EntryReport> = Vec::new();
    let mut losses: Vec<(String, String)> = Vec::new();
    for line in stderr.lines() {
        if let Some(at) = line.find("Potential Performance Loss") {
            let function = line.rsplit("in the function '").next().unwrap_or_default();
            let function = function.trim_end().trim_end_matches('\'').to_string();
            losses.push((function, line[at..].trim().to_string()));
        } else if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            entries.push(EntryReport {
                name,
                ..Default::default()
            });
        } else if let Some(e) = entries.last_mut() {
            if line.contains("bytes stack frame") {
                e.stack = number_before(line, "bytes stack frame");
                e.spill_stores = number_before(line, "bytes spill stores");
                e.spill_loads = number_before(line, "bytes spill loads");
            } else if line.contains("Used") && line.contains("registers") {
                e.registers = number_before(line, "registers");
                e.barriers = number_before(line, "barriers");
                e.smem = number_before(line, "bytes smem");
            }
        }
    }
    for (function, note) in losses {
        if let Some(e) = entries.iter_mut().find(|e| e.name == function) {
            e.performance_losses.push(note);
        }
    }
    entries
}

/// Local memory (the per-thread stack) one PTX function uses, read from its text: rustc's
/// NVPTX backend puts a value there when its address is taken (e.g. iterating over an
/// array with `iter_mut`), and ptxas does not count that as spilling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalUse {
    /// Function or entry name.
    pub name: String,
    /// Bytes of `__local_depot` it declares.
    pub depot_bytes: u64,
    /// `ld.local` instructions in its body.
    pub loads: usize,
    /// `st.local` instructions in its body.
    pub stores: usize,
}

/// Every function and entry of `ptx` that declares a local depot or touches local memory.
pub fn local_memory_use(ptx: &str) -> Vec<LocalUse> {
    let mut out = Vec::new();
    let mut current: Option<LocalUse> = None;
    for line in ptx.lines() {
        let t = line.trim_start();
        let header = [
            ".visible .entry ",
            ".entry ",
            ".visible .func ",
            ".func ",
            ".weak .func ",
        ]
        .iter()
        .find_map(|p| t.strip_prefix(p));
        if let Some(rest) = header {
            out.extend(current.take().filter(|u| u.depot_bytes > 0 || u.loads + u.stores > 0));
            // `.func (.param .b32 r) name(` puts the return value first.
            let rest = if rest.starts_with('(') {
                rest.split_once(')').map_or(rest, |(_, r)| r.trim_start())
            } else {
                rest
            };
            let name = rest
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()
                .unwrap_or_default();
            current = Some(LocalUse {
                name: name.to_string(),
                depot_bytes: 0,
                loads: 0,
                stores: 0,
            });
            continue;
        }
        let Some(u) = current.as_mut() else { continue };
        if let Some(at) = t.find("__local_depot") {
            let bytes = t[at..]
                .split_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .and_then(|(n, _)| n.parse().ok());
            u.depot_bytes += bytes.unwrap_or(0);
        }
        if t.starts_with("ld.local") {
            u.loads += 1;
        } else if t.starts_with("st.local") {
            u.stores += 1;
        }
    }
    out.extend(current.filter(|u| u.depot_bytes > 0 || u.loads + u.stores > 0));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_local_memory_per_function() {
        let ptx = "\
.visible .func (.param .b32 r) helper(\n\t.param .b64 a\n)\n{\n\t.local .align 8 .b8 \t__local_depot0[240];\n\tst.local.f32 [%rd1], %f1;\n\tld.local.f32 %f2, [%rd1];\n\tld.local.f32 %f3, [%rd1+4];\n}\n\
.visible .entry clean(\n)\n{\n\tld.global.f32 %f1, [%rd1];\n}\n\
.visible .entry args(\n)\n{\n\t.local .align 8 .b8 \t__local_depot1[32];\n\tst.local.u32 [%rd2], %r1;\n}\n";
        let uses = super::local_memory_use(ptx);
        assert_eq!(
            uses,
            vec![
                super::LocalUse {
                    name: "helper".into(),
                    depot_bytes: 240,
                    loads: 2,
                    stores: 1
                },
                super::LocalUse {
                    name: "args".into(),
                    depot_bytes: 32,
                    loads: 0,
                    stores: 1
                },
            ]
        );
    }

    use super::*;

    #[test]
    fn parses_the_resource_report() {
        let text = "ptxas info    : Compiling entry function 'k__cfg0' for 'sm_90'\n\
                    ptxas info    : Function properties for k__cfg0\n\
                    \x20   32 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n\
                    ptxas info    : Used 56 registers, used 1 barriers, 1024 bytes smem, 32 bytes cumulative stack size\n";
        let r = parse_report(text);
        assert_eq!(
            r,
            [EntryReport {
                name: "k__cfg0".into(),
                registers: 56,
                stack: 32,
                spill_stores: 4,
                spill_loads: 8,
                barriers: 1,
                smem: 1024,
                performance_losses: Vec::new(),
            }]
        );
    }

    #[test]
    fn attributes_performance_losses_to_their_entry() {
        let text = "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n\
                    ptxas info    : Used 40 registers, used 1 barriers\n\
                    ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'a'\n\
                    ptxas info    : Compiling entry function 'b' for 'sm_90a'\n\
                    ptxas info    : Used 40 registers, used 1 barriers\n";
        let r = parse_report(text);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].performance_losses.len(), 1);
        assert!(r[0].performance_losses[0].starts_with("Potential Performance Loss: wgmma.mma_async"));
        assert!(r[1].performance_losses.is_empty());
    }
}
