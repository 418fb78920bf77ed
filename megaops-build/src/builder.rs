use crate::{ARCHS_ENV, BuildError, EMBED_FILE, INNER_BUILD_ENV, LINKER_MODE_ENV, Toolchain};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A GPU architecture PTX is generated for, e.g. `sm_90`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arch(String);

impl Arch {
    /// Parses `sm_XY` / `sm_XYa`.
    pub fn parse(name: &str) -> Result<Self, BuildError> {
        let name = name.trim();
        let digits = name.strip_prefix("sm_").map(|d| d.trim_end_matches('a'));
        match digits {
            Some(d) if d.len() >= 2 && d.chars().all(|c| c.is_ascii_digit()) => Ok(Arch(name.to_string())),
            _ => Err(BuildError::BadArch(name.to_string())),
        }
    }

    /// The name, e.g. `sm_90`.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// Compute capability as `major * 10 + minor` (`sm_90a` → 90).
    pub fn capability(&self) -> u32 {
        self.0
            .trim_start_matches("sm_")
            .trim_end_matches('a')
            .parse()
            .unwrap_or(0)
    }
}

/// Compiles the package whose build script is running to PTX, once per architecture,
/// and writes `OUT_DIR/megaops_ptx.rs` for `megaops::kernel_crate!()` to include.
#[derive(Debug, Clone)]
pub struct PtxBuilder {
    package: String,
    lib_name: String,
    manifest_dir: PathBuf,
    out_dir: PathBuf,
    archs: Vec<Arch>,
    target_dir: Option<PathBuf>,
}

impl PtxBuilder {
    /// A builder for the package of the running build script, with the default
    /// architecture `sm_90` (overridden by the `MEGAOPS_ARCHS` environment variable).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        let package = var("CARGO_PKG_NAME");
        let lib_name = package.replace('-', "_");
        PtxBuilder {
            package,
            lib_name,
            manifest_dir: PathBuf::from(var("CARGO_MANIFEST_DIR")),
            out_dir: PathBuf::from(var("OUT_DIR")),
            archs: vec![Arch("sm_90".into())],
            target_dir: None,
        }
    }

    /// Sets the architectures (e.g. `["sm_80", "sm_90"]`). `MEGAOPS_ARCHS` still wins.
    pub fn archs<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, archs: I) -> Result<Self, BuildError> {
        self.archs = archs
            .into_iter()
            .map(|a| Arch::parse(a.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// Target directory of the nested nvptx build (default: `<outer target>/megaops-ptx`,
    /// shared by all kernel crates of a workspace so `core` is compiled once).
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Builds, printing the error and exiting the build script with status 1 on failure.
    pub fn build_or_exit(self) {
        if let Err(e) = self.build() {
            // Full text (with the command to reproduce) on stderr; one line for cargo.
            eprintln!("error: {e}");
            let first = e.to_string().lines().next().unwrap_or_default().to_string();
            println!("cargo::error={first}");
            std::process::exit(1);
        }
    }

    /// Builds the PTX. In linker mode this never returns (see [`crate::linker`]); inside
    /// the nested device build it does nothing.
    pub fn build(self) -> Result<(), BuildError> {
        crate::linker::run_if_linker();
        println!("cargo::rerun-if-env-changed={ARCHS_ENV}");
        // `megaops_device::sync::TRACE_COMPILED_OUT` reads it at compile time.
        println!("cargo::rerun-if-env-changed=MEGAOPS_TRACE_OFF");
        if std::env::var_os(INNER_BUILD_ENV).is_some() {
            return Ok(());
        }
        if self.out_dir.as_os_str().is_empty() {
            return Err(BuildError::MissingEnv("OUT_DIR"));
        }
        println!("cargo::rerun-if-changed={}", self.manifest_dir.join("src").display());
        println!(
            "cargo::rerun-if-changed={}",
            self.manifest_dir.join("Cargo.toml").display()
        );

        let archs = match std::env::var(ARCHS_ENV) {
            Ok(list) if !list.trim().is_empty() => list
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(Arch::parse)
                .collect::<Result<Vec<_>, _>>()?,
            _ => self.archs.clone(),
        };
        let tc = Toolchain::current()?;
        tc.check_components()?;
        let target_dir = self
            .target_dir
            .clone()
            .unwrap_or_else(|| default_target_dir(&self.out_dir));
        let linker = std::env::current_exe().map_err(|e| BuildError::io("locating", "build script", e))?;

        // One nested build per architecture, all running at once: each ends in a single
        // fat-LTO codegen unit (one core), so on a machine of several cores they overlap.
        // Every started build is waited for, also when another one failed.
        let mut first_error = None;
        let mut builds = Vec::new();
        for arch in &archs {
            match self.spawn_compile(&tc, arch, &target_dir.join(arch.name()), &linker) {
                Ok(build) => builds.push(build),
                Err(e) => {
                    first_error = Some(e);
                    break;
                }
            }
        }
        let mut done = Vec::new();
        for build in builds {
            match self.finish_compile(build) {
                Ok(ok) => done.push(ok),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let mut embedded = Vec::new();
        for (arch, arch_dir, ptx) in done {
            // The PTX depends on every crate compiled into it (megaops-device, the macros'
            // expansions, ...), not only this package's `src`: cargo reruns this script
            // only for the files named here, so name all of them, from the device build's
            // dep-info.
            let dep_info = arch_dir
                .join("nvptx64-nvidia-cuda/megaops-ptx")
                .join(format!("{}.d", self.lib_name));
            let text = std::fs::read_to_string(&dep_info).map_err(|e| BuildError::io("reading", &dep_info, e))?;
            for path in dep_info_sources(&text) {
                println!("cargo::rerun-if-changed={path}");
            }
            let dest = self.out_dir.join(format!("{}.{}.ptx", self.lib_name, arch.name()));
            std::fs::copy(&ptx, &dest).map_err(|e| BuildError::io("copying", &ptx, e))?;
            embedded.push((arch, dest));
        }
        let cubins = self.assemble_cubins(&embedded, &target_dir)?;
        self.write_embed_file(&embedded, &cubins)
    }

    /// Assembles a cubin for each architecture a device would load it on (an `sm_XY` is
    /// skipped when `sm_XYa` is built too: on that capability the `a` module wins) when
    /// cubins are wanted and a `ptxas` is found; none otherwise, with a warning.
    fn assemble_cubins(
        &self,
        embedded: &[(Arch, PathBuf)],
        target_dir: &Path,
    ) -> Result<Vec<(Arch, PathBuf)>, BuildError> {
        println!("cargo::rerun-if-env-changed={}", crate::cubin::CUBIN_ENV);
        println!("cargo::rerun-if-env-changed=PTXAS");
        if !crate::cubin::wanted() {
            return Ok(Vec::new());
        }
        let ptxas = match crate::ptxas::find() {
            Ok(p) => p,
            Err(why) => {
                println!(
                    "cargo::warning={}: {why}; embedding PTX only, which the driver compiles on first use",
                    self.package
                );
                return Ok(Vec::new());
            }
        };
        let mut cubins = Vec::new();
        for (arch, ptx) in embedded {
            let superseded =
                !arch.name().ends_with('a') && embedded.iter().any(|(a, _)| a.name() == format!("{}a", arch.name()));
            if superseded {
                continue;
            }
            let cached = crate::cubin::assemble(&ptxas, arch, ptx, &target_dir.join("cubin"))?;
            let dest = self.out_dir.join(format!("{}.{}.cubin", self.lib_name, arch.name()));
            std::fs::copy(&cached, &dest).map_err(|e| BuildError::io("copying", &cached, e))?;
            cubins.push((arch.clone(), dest));
        }
        Ok(cubins)
    }

    /// Starts the nested nvptx build of this crate for `arch` into `target_dir`.
    fn spawn_compile(
        &self,
        tc: &Toolchain,
        arch: &Arch,
        target_dir: &Path,
        linker: &Path,
    ) -> Result<NestedBuild, BuildError> {
        let mut cmd = Command::new(&tc.cargo);
        cmd.current_dir(&self.manifest_dir)
            .args([
                "rustc",
                "--lib",
                "--crate-type",
                "cdylib",
                "--target",
                "nvptx64-nvidia-cuda",
            ])
            .args(["-Zbuild-std=core,panic_abort", "--profile", "megaops-ptx"])
            .args(["--config", "profile.megaops-ptx.inherits=\"release\""])
            .args(["--config", "profile.megaops-ptx.panic=\"abort\""])
            .args(["--config", "profile.megaops-ptx.lto=\"fat\""])
            .args(["--config", "profile.megaops-ptx.codegen-units=1"])
            .args(["--config", "profile.megaops-ptx.opt-level=3"])
            .args(["--config", "profile.megaops-ptx.debug=false"])
            .args(["--config", "profile.megaops-ptx.debug-assertions=false"])
            .args(["--config", "profile.megaops-ptx.overflow-checks=false"])
            .arg("--manifest-path")
            .arg(self.manifest_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir)
            .arg("--")
            .arg(format!("-Clinker={}", linker.display()));
        // The outer build's flags are for the host; the device build gets its own.
        for var in [
            "RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("CARGO_ENCODED_RUSTFLAGS", format!("-Ctarget-cpu={}", arch.name()))
            .env(INNER_BUILD_ENV, "1")
            .env(LINKER_MODE_ENV, linker);
        let command = format!("{cmd:?}");
        let child = cmd.spawn().map_err(|source| BuildError::Spawn {
            program: tc.cargo.display().to_string(),
            source,
        })?;
        Ok(NestedBuild {
            arch: arch.clone(),
            target_dir: target_dir.to_path_buf(),
            command,
            child,
        })
    }

    /// Waits for a nested build; returns its architecture, target dir and PTX file.
    fn finish_compile(&self, build: NestedBuild) -> Result<(Arch, PathBuf, PathBuf), BuildError> {
        let NestedBuild {
            arch,
            target_dir,
            command,
            mut child,
        } = build;
        let status = child.wait().map_err(|source| BuildError::Spawn {
            program: command.clone(),
            source,
        })?;
        if !status.success() {
            return Err(BuildError::DeviceCompile {
                package: self.package.clone(),
                arch: arch.name().into(),
                command,
            });
        }
        let ptx = target_dir
            .join("nvptx64-nvidia-cuda/megaops-ptx")
            .join(format!("{}.ptx", self.lib_name));
        if !ptx.exists() {
            return Err(BuildError::NoPtx {
                package: self.package.clone(),
                path: ptx,
            });
        }
        Ok((arch, target_dir, ptx))
    }

    fn write_embed_file(&self, embedded: &[(Arch, PathBuf)], cubins: &[(Arch, PathBuf)]) -> Result<(), BuildError> {
        let mut src = String::from("// Generated by megaops-build: one PTX module per GPU architecture.\n");
        src.push_str("/// This crate's kernels as PTX: `(architecture, PTX text)` per architecture built.\n");
        src.push_str("pub static MODULES: &[(&str, &str)] = &[\n");
        for (arch, path) in embedded {
            let _ = writeln!(
                src,
                "    ({:?}, include_str!({:?})),",
                arch.name(),
                path.display().to_string()
            );
        }
        src.push_str("];\n");
        src.push_str("/// The same kernels assembled by ptxas: `(architecture, cubin)`; empty without ptxas.\n");
        src.push_str("pub static CUBINS: &[(&str, &[u8])] = &[\n");
        for (arch, path) in cubins {
            let _ = writeln!(
                src,
                "    ({:?}, include_bytes!({:?})),",
                arch.name(),
                path.display().to_string()
            );
        }
        src.push_str("];\n");
        let path = self.out_dir.join(EMBED_FILE);
        std::fs::write(&path, src).map_err(|e| BuildError::io("writing", &path, e))
    }
}

/// The source files a cargo dep-info file (`target: dep dep ...`, spaces in paths escaped
/// with a backslash) lists, less those of the Rust sysroot and of registry crates, which
/// change only with the toolchain or the lock file.
fn dep_info_sources(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        // The first `: ` not preceded by a backslash ends the target.
        let Some(colon) = line.find(": ") else {
            continue;
        };
        let mut path = String::new();
        let mut chars = line[colon + 2..].chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => {
                    path.push(' ');
                    chars.next();
                }
                ' ' => {
                    if !path.is_empty() {
                        out.push(std::mem::take(&mut path));
                    }
                }
                _ => path.push(c),
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    out.retain(|p| !p.contains("/lib/rustlib/") && !p.contains("/registry/src/"));
    out.sort();
    out.dedup();
    out
}

/// A nested nvptx build that is running.
struct NestedBuild {
    arch: Arch,
    target_dir: PathBuf,
    /// The command line, for the error message.
    command: String,
    child: std::process::Child,
}

/// `<target>/<profile>/build/<pkg>-<hash>/out` → `<target>/megaops-ptx`.
fn default_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .nth(4)
        .map(|t| t.join("megaops-ptx"))
        .unwrap_or_else(|| out_dir.join("megaops-ptx"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_info_lists_local_sources_with_escaped_spaces() {
        let text = "/t/x.ptx: /w/megaops-device/src/lib.rs /w/my\\ dir/a.rs /r/lib/rustlib/src/rust/library/core/src/lib.rs /h/.cargo/registry/src/index/half-2/src/lib.rs /w/megaops-device/src/lib.rs\n\n/w/megaops-device/src/lib.rs:\n";
        assert_eq!(
            dep_info_sources(text),
            vec!["/w/megaops-device/src/lib.rs".to_string(), "/w/my dir/a.rs".to_string()]
        );
    }

    #[test]
    fn parses_archs() {
        assert_eq!(Arch::parse("sm_90").unwrap().capability(), 90);
        assert_eq!(Arch::parse("sm_90a").unwrap().capability(), 90);
        assert_eq!(Arch::parse("sm_89").unwrap().capability(), 89);
        assert!(Arch::parse("compute_90").is_err());
        assert!(Arch::parse("sm_x").is_err());
    }

    #[test]
    fn target_dir_sits_beside_profiles() {
        let out = Path::new("/w/target/release/build/k-123/out");
        assert_eq!(default_target_dir(out), PathBuf::from("/w/target/megaops-ptx"));
    }
}
