use std::path::PathBuf;

/// Everything that can stop a kernel crate's PTX build, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A toolchain component is missing; the message carries the exact install line.
    #[error("the Rust toolchain `{toolchain}` lacks {what}; install it with:\n    {fix}")]
    MissingComponent {
        /// Toolchain name as rustup knows it.
        toolchain: String,
        /// What is missing, in words.
        what: String,
        /// The command that installs it.
        fix: String,
    },
    /// An environment variable that cargo always sets for build scripts is absent.
    #[error("environment variable `{0}` is not set: megaops_build must run from a build.rs")]
    MissingEnv(&'static str),
    /// An architecture name that is not of the form `sm_XY`.
    #[error("unknown GPU architecture `{0}`: expected e.g. `sm_80`, `sm_89`, `sm_90` or `sm_90a`")]
    BadArch(String),
    /// A command could not be started.
    #[error("could not run `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The nested nvptx compilation failed; rustc's diagnostics were printed above.
    #[error(
        "compiling `{package}` for nvptx64-nvidia-cuda ({arch}) failed; rustc's messages are above.\n    command: {command}"
    )]
    DeviceCompile {
        /// Package being compiled.
        package: String,
        /// GPU architecture.
        arch: String,
        /// The full command line, to reproduce by hand.
        command: String,
    },
    /// An LLVM tool failed while linking bitcode to PTX.
    #[error("`{tool}` failed while producing {output}: {stderr}")]
    LlvmTool {
        /// The tool (llvm-link, opt, llc).
        tool: String,
        /// The file it was producing.
        output: PathBuf,
        /// What the tool printed.
        stderr: String,
    },
    /// The linker was invoked with arguments it does not understand.
    #[error("megaops PTX linker: {0}")]
    LinkerArgs(String),
    /// A file could not be read or written.
    #[error("{action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `ptxas` rejected the PTX while assembling a cubin.
    #[error("ptxas -arch={arch} failed on `{ptx}` (set MEGAOPS_CUBIN=0 to embed the PTX alone):\n{stderr}")]
    Ptxas {
        /// The PTX file.
        ptx: PathBuf,
        /// GPU architecture.
        arch: String,
        /// What ptxas printed.
        stderr: String,
    },
    /// The nested build finished but its PTX is not where it should be.
    #[error("the nested build of `{package}` produced no PTX at `{path}`")]
    NoPtx {
        /// Package being compiled.
        package: String,
        /// Where the PTX was expected.
        path: PathBuf,
    },
}

impl BuildError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BuildError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
