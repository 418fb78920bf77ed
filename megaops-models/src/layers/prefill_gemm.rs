//! [`PrefillGemm`]: which GEMMs the prefill path's projections run — the kernel library's
//! `matmul` (the default) or chunked cuBLASLt subkernels in the data-tile protocol
//! (`megaops::subkernel::cublaslt`). The decode path always runs its GEMV kernels.

use megaops::launch::{AsInput, AsOutput, LaunchOptions, LaunchTarget};
use megaops::subkernel::cublaslt::{CublasLt, GemmAxis, GemmChunks, Shaped};
use megaops::subkernel::{ChunkSignals, Wrappers};
use megaops::{Device, R2, Result, Tensor, bf16};
use megaops_kernels::gemm::matmul;

/// Which GEMMs the prefill path runs, as options carry it (`rust`, `cublaslt:<chunks>`);
/// [`PrefillGemm::new`] makes the live backend of a device from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmBackend {
    /// The kernel library's tensor-core `matmul`.
    #[default]
    Rust,
    /// cuBLASLt subkernels, at most `chunks` row chunks per GEMM.
    CublasLt {
        /// At most this many chunks of rows per GEMM.
        chunks: usize,
    },
}

impl GemmBackend {
    /// `rust`, or `cublaslt:<chunks>`.
    pub fn name(&self) -> String {
        match self {
            GemmBackend::Rust => "rust".into(),
            GemmBackend::CublasLt { chunks } => format!("cublaslt:{chunks}"),
        }
    }
}

impl std::str::FromStr for GemmBackend {
    type Err = String;

    /// `rust`, `cublaslt` (4 chunks) or `cublaslt:<chunks>` (1 to 64).
    fn from_str(s: &str) -> std::result::Result<GemmBackend, String> {
        let bad = || format!("`{s}`: expected `rust`, `cublaslt` or `cublaslt:<chunks>` (1 to 64 chunks)");
        match s.split_once(':') {
            None if s == "rust" => Ok(GemmBackend::Rust),
            None if s == "cublaslt" => Ok(GemmBackend::CublasLt { chunks: 4 }),
            Some(("cublaslt", n)) => match n.parse::<usize>() {
                Ok(chunks) if (1..=megaops::subkernel::MAX_CHUNKS).contains(&chunks) => {
                    Ok(GemmBackend::CublasLt { chunks })
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }
}

/// The prefill path's live GEMM backend (one switch for every projection: qkv, o,
/// gate/up, down).
#[derive(Clone, Default)]
pub enum PrefillGemm {
    /// The kernel library's tensor-core `matmul`, with the planner's or the tuned config.
    #[default]
    Rust,
    /// cuBLASLt, each GEMM chunked into at most `chunks` row chunks (subkernels).
    CublasLt {
        /// The handle (plans and workspaces), shared by every projection.
        lt: CublasLt,
        /// At most this many chunks of rows per GEMM.
        chunks: usize,
        /// What holds each chunk until its proxy lets it go.
        wrappers: Wrappers,
    },
}

impl std::fmt::Debug for PrefillGemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Rows per chunk are a multiple of this (whole cuBLASLt tiles).
const CHUNK_ALIGN: usize = 64;

impl PrefillGemm {
    /// The backend `backend` names, on `device` (cuBLASLt loads its library here).
    pub fn new(device: &Device, backend: GemmBackend) -> Result<PrefillGemm> {
        match backend {
            GemmBackend::Rust => Ok(PrefillGemm::Rust),
            GemmBackend::CublasLt { chunks } => PrefillGemm::cublaslt(device, chunks),
        }
    }

    /// cuBLASLt on `device` with at most `chunks` row chunks per GEMM.
    pub fn cublaslt(device: &Device, chunks: usize) -> Result<PrefillGemm> {
        GemmChunks {
            chunks,
            ..GemmChunks::default()
        }
        .check()?;
        Ok(PrefillGemm::CublasLt {
            lt: CublasLt::new(device)?,
            chunks,
            wrappers: Wrappers::StreamMemOps,
        })
    }

    /// `rust`, or `cublaslt:<chunks>`.
    pub fn name(&self) -> String {
        match self {
            PrefillGemm::Rust => "rust".into(),
            PrefillGemm::CublasLt {
                chunks,
                wrappers: Wrappers::StreamMemOps,
                ..
            } => format!("cublaslt:{chunks}"),
            PrefillGemm::CublasLt { chunks, .. } => format!("cublaslt:{chunks} (wait kernels)"),
        }
    }

    /// Enqueues `C = A·Wᵀ` (`A[m, k]`, `W[n, k]`, `C[m, n]`) on `on`: `matmul` with `opts`
    /// (its tile config, occupancy limit, release point), or cuBLASLt chunks (`chunks`, the
    /// site's tuned count, else the backend's; with `opts`' wait timeout).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linear(
        &self,
        on: &impl LaunchTarget,
        opts: &LaunchOptions,
        chunks: Option<u32>,
        a: &(impl AsInput<bf16, R2> + Shaped + ?Sized),
        w: &Tensor<bf16>,
        c: &mut (impl AsOutput<bf16, R2> + Shaped + ?Sized),
        (m, n, k): (u32, u32, u32),
    ) -> Result<()> {
        match self {
            PrefillGemm::Rust => matmul::launch_with(on, opts, a, w, c, m, n, k),
            PrefillGemm::CublasLt {
                lt,
                chunks: default,
                wrappers,
            } => {
                let most = chunks.map_or(*default, |c| c as usize);
                let chunks = GemmChunks {
                    chunks: most.min((m as usize).div_ceil(CHUNK_ALIGN)).max(1),
                    along: GemmAxis::M,
                    align: CHUNK_ALIGN,
                    wrappers: *wrappers,
                    signals: ChunkSignals::SideStream,
                    launch: LaunchOptions {
                        timeout: opts.timeout,
                        ..LaunchOptions::default()
                    },
                };
                lt.matmul(on, a, w, None, c, &chunks)
            }
        }
    }
}
