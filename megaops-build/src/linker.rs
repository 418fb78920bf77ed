//! The PTX "linker" that rustc calls for the nvptx64 cdylib.
//!
//! rustc (with fat LTO) hands us one LLVM bitcode object holding the whole crate graph,
//! plus `compiler_builtins` as an rlib of bitcode objects, and the list of exported
//! symbols (the `extern "ptx-kernel"` entries). We:
//! 1. `llvm-link` the crate object with the builtins that are actually needed
//!    (`--only-needed`),
//! 2. `opt -passes=internalize,globaldce` keeping only the exported entries public, so
//!    dead helper code disappears,
//! 3. `llc -O3 -mcpu=<arch> -mattr=+ptx80` to emit PTX at the output path.
//!
//! The arguments look like
//! `--export-symbol K ... crate.rcgu.o libcompiler_builtins-*.rlib -L .. --target
//! nvptx64-nvidia-cuda --target-cpu sm_90 -o out.ptx -O3 --debug`.

use crate::toolchain::run_tool;
use crate::{BuildError, Toolchain};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// What the linker was asked to do, parsed from rustc's command line.
#[derive(Debug, Default, PartialEq)]
pub struct LinkRequest {
    /// Symbols that stay public (kernel entries).
    pub exports: Vec<String>,
    /// Bitcode objects of the crate.
    pub objects: Vec<PathBuf>,
    /// Archives (rlibs) whose bitcode members may be needed.
    pub archives: Vec<PathBuf>,
    /// GPU architecture (`--target-cpu`).
    pub target_cpu: Option<String>,
    /// Output PTX file.
    pub output: Option<PathBuf>,
}

impl LinkRequest {
    /// Parses rustc's linker arguments.
    pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Self, BuildError> {
        let mut req = LinkRequest::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let s = arg.to_string_lossy().into_owned();
            let mut value = |flag: &str| {
                it.next()
                    .ok_or_else(|| BuildError::LinkerArgs(format!("`{flag}` needs a value")))
            };
            match s.as_str() {
                "--export-symbol" => req.exports.push(value(&s)?.to_string_lossy().into_owned()),
                "-o" => req.output = Some(PathBuf::from(value(&s)?)),
                "--target-cpu" => req.target_cpu = Some(value(&s)?.to_string_lossy().into_owned()),
                "-L" | "--target" => {
                    value(&s)?;
                }
                _ if s.ends_with(".o") => req.objects.push(PathBuf::from(arg)),
                _ if s.ends_with(".rlib") || s.ends_with(".a") => req.archives.push(PathBuf::from(arg)),
                _ => {} // -O3, --debug, ...: the optimisation level is ours to choose.
            }
        }
        if req.objects.is_empty() {
            return Err(BuildError::LinkerArgs("no bitcode object in the arguments".into()));
        }
        if req.output.is_none() {
            return Err(BuildError::LinkerArgs("no `-o <output>` in the arguments".into()));
        }
        Ok(req)
    }
}

/// If this process was started by rustc as the PTX linker, links and exits; otherwise
/// returns. Called first thing by [`crate::PtxBuilder::build`].
pub fn run_if_linker() {
    // The nested build also runs build scripts (with the same environment), so linker
    // mode is keyed to the exact executable rustc was told to call.
    let Some(linker) = std::env::var_os(crate::LINKER_MODE_ENV) else {
        return;
    };
    let me = std::env::current_exe().ok();
    if me.as_deref() != Some(std::path::Path::new(&linker)) {
        return;
    }
    let result = LinkRequest::parse(std::env::args_os().skip(1)).and_then(|req| {
        let tc = Toolchain::current()?;
        link(&tc, &req)
    });
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1)
        }
    }
}

/// Links bitcode to PTX as described in the module docs.
pub fn link(tc: &Toolchain, req: &LinkRequest) -> Result<(), BuildError> {
    let output = req
        .output
        .clone()
        .ok_or_else(|| BuildError::LinkerArgs("no output".into()))?;
    let work = output.with_extension("megaops-link");
    std::fs::create_dir_all(&work).map_err(|e| BuildError::io("creating", &work, e))?;

    // Bitcode members of the archives (compiler_builtins); other members (rmeta) are skipped.
    let mut extra = Vec::new();
    for (i, archive) in req.archives.iter().enumerate() {
        extra.extend(extract_bitcode_members(archive, &work.join(format!("ar{i}")))?);
    }

    let linked = work.join("linked.bc");
    let mut args: Vec<OsString> = req.objects.iter().map(|p| p.clone().into_os_string()).collect();
    for member in &extra {
        args.push("--only-needed".into());
        args.push(member.clone().into_os_string());
    }
    args.push("-o".into());
    args.push(linked.clone().into_os_string());
    run_tool(&tc.llvm_tool("llvm-link"), &as_refs(&args), &linked)?;

    let internalized = work.join("internalized.bc");
    let api = format!("-internalize-public-api-list={}", req.exports.join(","));
    run_tool(
        &tc.llvm_tool("opt"),
        &[
            OsStr::new("-passes=internalize,globaldce"),
            OsStr::new(&api),
            linked.as_os_str(),
            OsStr::new("-o"),
            internalized.as_os_str(),
        ],
        &internalized,
    )?;

    let cpu = format!("-mcpu={}", req.target_cpu.as_deref().unwrap_or("sm_90"));
    run_tool(
        &tc.llvm_tool("llc"),
        &[
            OsStr::new("-O3"),
            OsStr::new(&cpu),
            OsStr::new("-mattr=+ptx80"),
            internalized.as_os_str(),
            OsStr::new("-o"),
            output.as_os_str(),
        ],
        &output,
    )?;
    let ptx = std::fs::read_to_string(&output).map_err(|e| BuildError::io("reading", &output, e))?;
    let ptx = apply_launch_bounds(&ptx);
    std::fs::write(&output, ptx).map_err(|e| BuildError::io("writing", &output, e))?;
    Ok(())
}

/// Prefix of the marker statics `#[megaops::kernel(min_ctas = ...)]` emits.
const BOUNDS_PREFIX: &str = "__megaops_launch_bounds__";

/// Turns each marker global `__megaops_launch_bounds__<entry> = [threads, min_ctas]` into
/// `.maxntid threads, 1, 1` / `.minnctapersm min_ctas` directives on `.entry <entry>` and
/// removes the marker (rustc cannot express launch bounds). `min_ctas = 0` means no launch
/// bounds: the marker is removed and the entry left as rustc wrote it, so one config list
/// can mix bounded and unbounded configs.
pub fn apply_launch_bounds(ptx: &str) -> String {
    let mut bounds: Vec<(String, u32, u32)> = Vec::new();
    let mut kept = Vec::new();
    for line in ptx.lines() {
        if let Some(b) = parse_bounds_global(line) {
            bounds.push(b);
        } else {
            kept.push(line);
        }
    }
    if bounds.is_empty() {
        return ptx.to_string();
    }
    let mut out = String::with_capacity(ptx.len() + 64 * bounds.len());
    let mut pending: Option<(u32, u32)> = None;
    for line in kept {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed
            .strip_prefix(".visible .entry ")
            .or_else(|| trimmed.strip_prefix(".entry "))
        {
            let name = rest.split('(').next().unwrap_or_default().trim();
            pending = bounds
                .iter()
                .find(|(n, _, m)| n == name && *m > 0)
                .map(|&(_, t, m)| (t, m));
        }
        if trimmed == "{"
            && let Some((threads, min)) = pending.take()
        {
            out.push_str(&format!(".maxntid {threads}, 1, 1\n.minnctapersm {min}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Parses `.visible .global .align 4 .b8 __megaops_launch_bounds__E[8] = {..};` (bytes,
/// little-endian) or the `.u32 ...[2] = {t, m};` form.
fn parse_bounds_global(line: &str) -> Option<(String, u32, u32)> {
    let at = line.find(BOUNDS_PREFIX)?;
    if !line.contains(".global") {
        return None;
    }
    let name = line[at + BOUNDS_PREFIX.len()..].split('[').next()?.trim().to_string();
    let mut values: Vec<u64> = line
        .split('{')
        .nth(1)?
        .split('}')
        .next()?
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    // LLVM drops trailing zero bytes of an initializer: `{64, 0, 0, 0, 8}`.
    if line.contains(".b8") && values.len() <= 8 {
        values.resize(8, 0);
    }
    let (threads, min) = if line.contains(".b8") && values.len() == 8 {
        let word = |i: usize| (0..4).map(|b| (values[i * 4 + b] as u32) << (8 * b)).sum::<u32>();
        (word(0), word(1))
    } else if values.len() == 2 {
        (values[0] as u32, values[1] as u32)
    } else {
        return None;
    };
    Some((name, threads, min))
}

fn as_refs(v: &[OsString]) -> Vec<&OsStr> {
    v.iter().map(|s| s.as_os_str()).collect()
}

/// Extracts the LLVM-bitcode members of an `ar` archive into `dir`.
fn extract_bitcode_members(archive: &Path, dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let data = std::fs::read(archive).map_err(|e| BuildError::io("reading", archive, e))?;
    std::fs::create_dir_all(dir).map_err(|e| BuildError::io("creating", dir, e))?;
    let mut out = Vec::new();
    for (i, (name, body)) in ar_members(&data).into_iter().enumerate() {
        // LLVM bitcode starts with "BC\xC0\xDE" (or a wrapper magic 0x0B17C0DE).
        let is_bitcode = body.starts_with(b"BC\xC0\xDE") || body.starts_with(&[0xDE, 0xC0, 0x17, 0x0B]);
        if !is_bitcode {
            continue;
        }
        let path = dir.join(format!("{i}-{}", sanitize(&name)));
        std::fs::write(&path, body).map_err(|e| BuildError::io("writing", &path, e))?;
        out.push(path);
    }
    Ok(out)
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
        .collect();
    if s.ends_with(".o") { s } else { format!("{s}.o") }
}

/// Parses a GNU/SysV `ar` archive into (member name, contents) pairs.
fn ar_members(data: &[u8]) -> Vec<(String, &[u8])> {
    let mut members = Vec::new();
    if !data.starts_with(b"!<arch>\n") {
        return members;
    }
    let mut long_names: &[u8] = &[];
    let mut pos = 8;
    while pos + 60 <= data.len() {
        let header = &data[pos..pos + 60];
        let raw_name = String::from_utf8_lossy(&header[0..16]).trim_end().to_string();
        let size: usize = String::from_utf8_lossy(&header[48..58]).trim().parse().unwrap_or(0);
        let start = pos + 60;
        let end = (start + size).min(data.len());
        let body = &data[start..end];
        if raw_name == "//" {
            long_names = body;
        } else if raw_name != "/" && raw_name != "/SYM64/" {
            let name = if let Some(offset) = raw_name.strip_prefix('/').and_then(|o| o.parse::<usize>().ok()) {
                let rest = long_names.get(offset..).unwrap_or(&[]);
                let len = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                String::from_utf8_lossy(&rest[..len]).trim_end_matches('/').to_string()
            } else {
                raw_name.trim_end_matches('/').to_string()
            };
            members.push((name, body));
        }
        pos = end + (size % 2);
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_rustc_linker_line() {
        let req = LinkRequest::parse(os(&[
            "--export-symbol",
            "add",
            "--export-symbol",
            "mul",
            "/t/k.k.123-cgu.0.rcgu.o",
            "/t/libcompiler_builtins-1.rlib",
            "-L",
            "/t/raw",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_89",
            "-o",
            "/t/k.ptx",
            "-O3",
            "--debug",
        ]))
        .unwrap();
        assert_eq!(req.exports, ["add", "mul"]);
        assert_eq!(req.objects, [PathBuf::from("/t/k.k.123-cgu.0.rcgu.o")]);
        assert_eq!(req.archives, [PathBuf::from("/t/libcompiler_builtins-1.rlib")]);
        assert_eq!(req.target_cpu.as_deref(), Some("sm_89"));
        assert_eq!(req.output, Some(PathBuf::from("/t/k.ptx")));
    }

    #[test]
    fn rejects_missing_output_and_objects() {
        assert!(LinkRequest::parse(os(&["x.o"])).is_err());
        assert!(LinkRequest::parse(os(&["-o", "x.ptx"])).is_err());
        assert!(LinkRequest::parse(os(&["-o"])).is_err());
    }

    #[test]
    fn launch_bounds_become_entry_directives() {
        let ptx = "// x\n.visible .global .align 4 .b8 __megaops_launch_bounds__k__cfg0[8] = {0, 1, 0, 0, 2};\n\
                   .visible .global .align 4 .u32 __megaops_launch_bounds__j[2] = {128, 0};\n\
                   .visible .entry k__cfg0(\n\t.param .u64 k_param_0\n)\n{\n\tret;\n}\n\
                   .visible .entry other(\n)\n{\n\tret;\n}\n.visible .entry j(\n)\n{\n\tret;\n}\n";
        let out = apply_launch_bounds(ptx);
        assert!(!out.contains("__megaops_launch_bounds__"), "{out}");
        assert!(out.contains(")\n.maxntid 256, 1, 1\n.minnctapersm 2\n{"), "{out}");
        assert!(out.contains(".entry other(\n)\n{"), "{out}");
        // `min_ctas = 0`: no bounds at all.
        assert!(out.contains(".entry j(\n)\n{"), "{out}");
        assert_eq!(apply_launch_bounds("plain\n"), "plain\n");
    }

    #[test]
    fn reads_ar_archives_with_long_names() {
        let mut ar = b"!<arch>\n".to_vec();
        let long = b"a_very_long_member_name_indeed.o/\n";
        let push = |ar: &mut Vec<u8>, name: &str, body: &[u8]| {
            ar.extend(format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", name, 0, 0, 0, 644, body.len()).as_bytes());
            ar.extend(body);
            if body.len() % 2 == 1 {
                ar.push(b'\n');
            }
        };
        push(&mut ar, "//", long);
        push(&mut ar, "/0", b"BC\xC0\xDEabc");
        push(&mut ar, "short.o/", b"xyz");
        let m = ar_members(&ar);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].0, "a_very_long_member_name_indeed.o");
        assert_eq!(m[0].1, b"BC\xC0\xDEabc");
        assert_eq!(m[1].0, "short.o");
        assert_eq!(m[1].1, b"xyz");
    }
}
