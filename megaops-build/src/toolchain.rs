use crate::BuildError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust toolchain a build runs under, and the LLVM tools inside it.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// `rustc` as cargo gave it to the build script (`RUSTC`), or `rustc`.
    pub rustc: PathBuf,
    /// `cargo` as cargo gave it to the build script (`CARGO`), or `cargo`.
    pub cargo: PathBuf,
    /// The toolchain's sysroot (`rustc --print sysroot`).
    pub sysroot: PathBuf,
    /// Toolchain name for messages and `rustup` commands.
    pub name: String,
}

impl Toolchain {
    /// Finds the toolchain the current build runs under.
    pub fn current() -> Result<Self, BuildError> {
        let rustc = std::env::var_os("RUSTC")
            .map(PathBuf::from)
            .unwrap_or_else(|| "rustc".into());
        let cargo = std::env::var_os("CARGO")
            .map(PathBuf::from)
            .unwrap_or_else(|| "cargo".into());
        let out = Command::new(&rustc)
            .args(["--print", "sysroot"])
            .output()
            .map_err(|source| BuildError::Spawn {
                program: rustc.display().to_string(),
                source,
            })?;
        let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let name = std::env::var("RUSTUP_TOOLCHAIN").unwrap_or_else(|_| {
            sysroot
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "nightly".into())
        });
        Ok(Toolchain {
            rustc,
            cargo,
            sysroot,
            name,
        })
    }

    /// Directory of `llvm-link`, `opt` and `llc` (component `llvm-tools`).
    pub fn llvm_bin_dir(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib").join(host_triple()).join("bin")
    }

    /// Path of one LLVM tool.
    pub fn llvm_tool(&self, name: &str) -> PathBuf {
        self.llvm_bin_dir().join(name)
    }

    /// Checks that `rust-src` and `llvm-tools` are installed, with the exact fix if not.
    pub fn check_components(&self) -> Result<(), BuildError> {
        let src = self.sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml");
        if !src.exists() {
            return Err(self.missing("the standard library sources (component `rust-src`)", "rust-src"));
        }
        for tool in ["llvm-link", "opt", "llc"] {
            if !self.llvm_tool(tool).exists() {
                return Err(self.missing(&format!("`{tool}` (component `llvm-tools`)"), "llvm-tools"));
            }
        }
        Ok(())
    }

    fn missing(&self, what: &str, component: &str) -> BuildError {
        BuildError::MissingComponent {
            toolchain: self.name.clone(),
            what: what.to_string(),
            fix: format!("rustup component add {component} --toolchain {}", self.name),
        }
    }
}

/// The triple of the machine running the build (where the LLVM tools live).
pub(crate) fn host_triple() -> String {
    std::env::var("HOST").unwrap_or_else(|_| "x86_64-unknown-linux-gnu".to_string())
}

/// Runs `program args` and maps a failure to [`BuildError::LlvmTool`].
pub(crate) fn run_tool(program: &Path, args: &[&std::ffi::OsStr], output: &Path) -> Result<(), BuildError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| BuildError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(BuildError::LlvmTool {
            tool: program
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            output: output.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(())
}
