//! Ahead-of-time assembly of the PTX to cubins with `ptxas`, so that the driver loads
//! machine code instead of compiling the PTX on the first run (about a minute for the
//! kernel library).
//!
//! Optional: without a `ptxas` ([`crate::ptxas::find`]) or with `MEGAOPS_CUBIN=0` only the
//! PTX is embedded and the driver JIT-compiles it as before. A cubin is cached under the
//! nested build's target directory by a hash of its PTX, its architecture and the
//! `ptxas` used, so an unchanged PTX is not assembled again.

use crate::{Arch, BuildError};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable that turns the cubins off (`0`) or on (anything else; the default).
pub const CUBIN_ENV: &str = "MEGAOPS_CUBIN";

/// Whether cubins are wanted: `MEGAOPS_CUBIN` unset or not `0`.
pub fn wanted() -> bool {
    std::env::var(CUBIN_ENV).map_or(true, |v| v.trim() != "0")
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
