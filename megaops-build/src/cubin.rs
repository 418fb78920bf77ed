//! Ahead-of-time assembly of the PTX to cubins with `ptxas`, so that the driver loads
//! machine code instead of compiling the PTX on the first run (about a minute for the
//! kernel library).
//!
//! Release builds assemble cubins by default; other profiles (the tests, which CI runs
//! without a GPU) only with `MEGAOPS_CUBIN=1`. Without a `ptxas` ([`crate::ptxas::find`])
//! or with `MEGAOPS_CUBIN=0` only the PTX is embedded and the driver JIT-compiles it. A cubin is cached under the
//! nested build's target directory by a hash of its PTX, its architecture and the
//! `ptxas` used, so an unchanged PTX is not assembled again.

use crate::{Arch, BuildError};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable that turns the cubins off (`0`) or on (anything else) whatever
/// the profile.
pub const CUBIN_ENV: &str = "MEGAOPS_CUBIN";

/// Whether this build script should assemble cubins: as `MEGAOPS_CUBIN` says when set,
/// else for the release profile (cargo's `PROFILE` of the outer build).
pub fn wanted() -> bool {
    wanted_for(
        std::env::var(CUBIN_ENV).ok().as_deref(),
        std::env::var("PROFILE").ok().as_deref(),
    )
}

/// The rule of [`wanted`] for a `MEGAOPS_CUBIN` value and a cargo `PROFILE`.
pub fn wanted_for(setting: Option<&str>, profile: Option<&str>) -> bool {
    match setting.map(str::trim) {
        Some("0") => false,
        Some(_) => true,
        None => profile == Some("release"),
    }
}

/// The cubin of `ptx` (a file) for `arch`, assembled by `ptxas` into `cache_dir`, or
/// taken from there when an identical PTX was assembled by the same `ptxas` before.
pub fn assemble(ptxas: &Path, arch: &Arch, ptx: &Path, cache_dir: &Path) -> Result<PathBuf, BuildError> {
    let text = std::fs::read(ptx).map_err(|e| BuildError::io("reading", ptx, e))?;
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    arch.name().hash(&mut h);
    ptxas.hash(&mut h);
    let stem = ptx.file_stem().and_then(|s| s.to_str()).unwrap_or("module");
    let cubin = cache_dir.join(format!("{stem}.{}.{:016x}.cubin", arch.name(), h.finish()));
    if cubin.exists() {
        return Ok(cubin);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| BuildError::io("creating", cache_dir, e))?;
    let partial = cubin.with_extension("cubin.part");
    let out = Command::new(ptxas)
        .arg(format!("-arch={}", arch.name()))
        .args(["-O3", "--split-compile", "0"])
        .arg(ptx)
        .arg("-o")
        .arg(&partial)
        .output()
        .map_err(|source| BuildError::Spawn {
            program: ptxas.display().to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(BuildError::Ptxas {
            ptx: ptx.to_path_buf(),
            arch: arch.name().into(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    std::fs::rename(&partial, &cubin).map_err(|e| BuildError::io("renaming", &partial, e))?;
    Ok(cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubins_are_assembled_for_release_builds_unless_told_otherwise() {
        assert!(wanted_for(None, Some("release")));
        assert!(!wanted_for(None, Some("debug")));
        assert!(!wanted_for(None, None));
        assert!(!wanted_for(Some("0"), Some("release")));
        assert!(wanted_for(Some("1"), Some("debug")));
    }

    #[test]
    fn assembles_a_cubin_once_and_reuses_it() {
        let Ok(ptxas) = crate::ptxas::find() else {
            eprintln!("skipped: no ptxas found (python3 -m pip install nvidia-cuda-nvcc==13.0.88)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("megaops-cubin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ptx = dir.join("tiny.ptx");
        std::fs::write(
            &ptx,
            ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry tiny()\n{\n\tret;\n}\n",
        )
        .expect("write ptx");
        let arch = Arch::parse("sm_90a").expect("arch");
        let first = assemble(&ptxas, &arch, &ptx, &dir.join("cache")).expect("ptxas assembles");
        let bytes = std::fs::read(&first).expect("cubin");
        assert_eq!(&bytes[..4], b"\x7fELF", "a cubin is an ELF image");
        let modified = std::fs::metadata(&first).and_then(|m| m.modified()).expect("mtime");
        let again = assemble(&ptxas, &arch, &ptx, &dir.join("cache")).expect("cached");
        assert_eq!(first, again);
        assert_eq!(
            std::fs::metadata(&again).and_then(|m| m.modified()).expect("mtime"),
            modified
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
