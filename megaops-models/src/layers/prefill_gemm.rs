//! [`PrefillGemm`]: which GEMMs the prefill path's projections run — the kernel library's
//! `matmul` (the default), chunked cuBLASLt subkernels in the data-tile protocol
//! (`megaops::subkernel::cublaslt`), or per GEMM whichever of the two its size favours
//! (`auto`). The decode path always runs its GEMV kernels.

use megaops::launch::{AsInput, AsOutput, LaunchOptions, LaunchTarget};
use megaops::subkernel::cublaslt::{self, CublasLt, GemmAxis, GemmChunks, Shaped};
use megaops::subkernel::{ChunkSignals, Wrappers};
use megaops::{Device, R2, Result, Tensor, bf16};
use megaops_kernels::gemm::matmul;

/// The size from which `auto` runs a GEMM on cuBLASLt: 100 GFLOP (`2·m·n·k`), where the
/// subkernel's fixed cost is a few percent of the GEMM.
pub const AUTO_MIN_FLOPS: u64 = 100_000_000_000;

/// Which GEMMs the prefill path runs, as options carry it (`rust`, `cublaslt:<chunks>`,
/// `auto`, `auto:<GFLOP>`); [`PrefillGemm::new`] makes the live backend of a device from
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmBackend {
    /// The kernel library's tensor-core `matmul`.
    Rust,
    /// cuBLASLt subkernels, at most `chunks` row chunks per GEMM.
    CublasLt {
        /// At most this many chunks of rows per GEMM.
        chunks: usize,
    },
    /// Per GEMM: a one-chunk cuBLASLt subkernel from `min_flops` (`2·m·n·k`) on, the
    /// kernel library's `matmul` below and for shapes cuBLASLt does not take (`n` or `k`
    /// not a multiple of 8).
    Auto {
        /// The smallest GEMM, in floating-point operations, that runs on cuBLASLt.
        min_flops: u64,
    },
}

/// Which backend one GEMM of a prefill runs ([`GemmBackend::pick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Picked {
    /// The kernel library's `matmul`.
    Rust,
    /// A cuBLASLt subkernel with at most this many row chunks (unless a tuned plan says).
    CublasLt {
        /// The default chunk count.
        chunks: usize,
    },
}

impl GemmBackend {
    /// `auto` with the default threshold ([`AUTO_MIN_FLOPS`]).
    pub const AUTO: GemmBackend = GemmBackend::Auto {
        min_flops: AUTO_MIN_FLOPS,
    };

    /// `rust`, `cublaslt:<chunks>`, `auto` or `auto:<GFLOP>`.
    pub fn name(&self) -> String {
        match self {
            GemmBackend::Rust => "rust".into(),
            GemmBackend::CublasLt { chunks } => format!("cublaslt:{chunks}"),
            GemmBackend::Auto {
                min_flops: AUTO_MIN_FLOPS,
            } => "auto".into(),
            GemmBackend::Auto { min_flops } => format!("auto:{}", *min_flops as f64 / 1e9),
        }
    }

    /// The backend of an `m × n × k` GEMM (`C[m, n] = A[m, k]·W[n, k]ᵀ`).
    pub fn pick(&self, m: u32, n: u32, k: u32) -> Picked {
        match *self {
            GemmBackend::Rust => Picked::Rust,
            GemmBackend::CublasLt { chunks } => Picked::CublasLt { chunks },
            GemmBackend::Auto { min_flops } => {
                if cublaslt::widths_fit(n as usize, k as usize)
                    && 2 * m as u128 * n as u128 * k as u128 >= min_flops as u128
                {
                    Picked::CublasLt { chunks: 1 }
                } else {
                    Picked::Rust
                }
            }
        }
    }
}

impl Default for GemmBackend {
    /// [`GemmBackend::AUTO`].
    fn default() -> GemmBackend {
        GemmBackend::AUTO
    }
}

impl std::str::FromStr for GemmBackend {
    type Err = String;

    /// `rust`, `cublaslt` (4 chunks), `cublaslt:<chunks>` (1 to 64), `auto` (cuBLASLt from
    /// 100 GFLOP a GEMM) or `auto:<GFLOP>` (from that many GFLOP, a decimal ≥ 0).
    fn from_str(s: &str) -> std::result::Result<GemmBackend, String> {
        let bad = || {
            format!(
                "`{s}`: expected `rust`, `cublaslt`, `cublaslt:<chunks>` (1 to 64 chunks), `auto` or `auto:<GFLOP>`"
            )
        };
        match s.split_once(':') {
            None if s == "rust" => Ok(GemmBackend::Rust),
            None if s == "cublaslt" => Ok(GemmBackend::CublasLt { chunks: 4 }),
            None if s == "auto" => Ok(GemmBackend::AUTO),
            Some(("cublaslt", n)) => match n.parse::<usize>() {
                Ok(chunks) if (1..=megaops::subkernel::MAX_CHUNKS).contains(&chunks) => {
                    Ok(GemmBackend::CublasLt { chunks })
                }
                _ => Err(bad()),
            },
            Some(("auto", g)) => match g.parse::<f64>() {
                Ok(gflop) if gflop.is_finite() && (0.0..=1e9).contains(&gflop) => Ok(GemmBackend::Auto {
                    min_flops: (gflop * 1e9).round() as u64,
                }),
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
    /// Per GEMM: a one-chunk cuBLASLt subkernel (stream memory operations as its
    /// wrappers) from `min_flops` on, `matmul` below ([`GemmBackend::pick`]).
    Auto {
        /// The handle, shared by every projection.
        lt: CublasLt,
        /// The smallest GEMM, in floating-point operations, that runs on cuBLASLt.
        min_flops: u64,
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
    /// The backend `backend` names, on `device` (cuBLASLt loads its library here). `auto`
    /// runs every GEMM on `matmul` where the GPU has no `libcublasLt` to load (the live
    /// backend is then [`PrefillGemm::Rust`], and its [`name`](PrefillGemm::name) says so);
    /// `cublaslt` is an error there.
    pub fn new(device: &Device, backend: GemmBackend) -> Result<PrefillGemm> {
        match backend {
            GemmBackend::Rust => Ok(PrefillGemm::Rust),
            GemmBackend::CublasLt { chunks } => PrefillGemm::cublaslt(device, chunks),
            GemmBackend::Auto { .. } if !CublasLt::available(device) => Ok(PrefillGemm::Rust),
            GemmBackend::Auto { min_flops } => Ok(PrefillGemm::Auto {
                lt: CublasLt::new(device)?,
                min_flops,
            }),
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

    /// The options form of this backend (its wrappers aside).
    pub fn backend(&self) -> GemmBackend {
        match self {
            PrefillGemm::Rust => GemmBackend::Rust,
            PrefillGemm::CublasLt { chunks, .. } => GemmBackend::CublasLt { chunks: *chunks },
            PrefillGemm::Auto { min_flops, .. } => GemmBackend::Auto { min_flops: *min_flops },
        }
    }

    /// `rust`, `cublaslt:<chunks>` (with ` (wait kernels)` for those wrappers), `auto` or
    /// `auto:<GFLOP>`.
    pub fn name(&self) -> String {
        match self {
            PrefillGemm::CublasLt {
                wrappers: Wrappers::Kernels,
                ..
            } => format!("{} (wait kernels)", self.backend().name()),
            _ => self.backend().name(),
        }
    }

    /// Enqueues `C = A·Wᵀ` (`A[m, k]`, `W[n, k]`, `C[m, n]`) on `on`, on the backend
    /// [`GemmBackend::pick`] chooses for the shape: `matmul` with `opts` (its tile config,
    /// occupancy limit, release point), or cuBLASLt chunks (`chunks`, the site's tuned
    /// count, else the backend's; with `opts`' wait timeout).
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
        let (lt, wrappers) = match self {
            PrefillGemm::Rust => return matmul::launch_with(on, opts, a, w, c, m, n, k),
            PrefillGemm::CublasLt { lt, wrappers, .. } => (lt, *wrappers),
            PrefillGemm::Auto { lt, .. } => (lt, Wrappers::StreamMemOps),
        };
        let default = match self.backend().pick(m, n, k) {
            Picked::Rust => return matmul::launch_with(on, opts, a, w, c, m, n, k),
            Picked::CublasLt { chunks } => chunks,
        };
        let most = chunks.map_or(default, |c| c as usize);
        let chunks = GemmChunks {
            chunks: most.min((m as usize).div_ceil(CHUNK_ALIGN)).max(1),
            along: GemmAxis::M,
            align: CHUNK_ALIGN,
            wrappers,
            signals: ChunkSignals::SideStream,
            launch: LaunchOptions {
                timeout: opts.timeout,
                ..LaunchOptions::default()
            },
        };
        lt.matmul(on, a, w, None, c, &chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::{AUTO_MIN_FLOPS, GemmBackend, Picked};

    #[test]
    fn parses_and_names_every_backend() {
        for (text, backend, name) in [
            ("rust", GemmBackend::Rust, "rust"),
            ("cublaslt", GemmBackend::CublasLt { chunks: 4 }, "cublaslt:4"),
            ("cublaslt:1", GemmBackend::CublasLt { chunks: 1 }, "cublaslt:1"),
            ("auto", GemmBackend::AUTO, "auto"),
            ("auto:100", GemmBackend::AUTO, "auto"),
            ("auto:0.5", GemmBackend::Auto { min_flops: 500_000_000 }, "auto:0.5"),
            ("auto:0", GemmBackend::Auto { min_flops: 0 }, "auto:0"),
        ] {
            assert_eq!(text.parse::<GemmBackend>(), Ok(backend), "{text}");
            assert_eq!(backend.name(), name, "{text}");
            assert_eq!(name.parse::<GemmBackend>(), Ok(backend), "{name} names {text} again");
        }
        for bad in [
            "",
            "cublas",
            "cublaslt:0",
            "cublaslt:65",
            "auto:",
            "auto:-1",
            "auto:nan",
            "auto:x",
            "rust:1",
        ] {
            let err = bad.parse::<GemmBackend>().expect_err(bad);
            assert!(err.contains("expected `rust`"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_default_backend_is_auto() {
        assert_eq!(GemmBackend::default(), GemmBackend::AUTO);
        assert_eq!(GemmBackend::default().name(), "auto");
    }

    #[test]
    fn auto_picks_cublaslt_from_its_threshold_on() {
        // Qwen3-8B's gate/up at a 1024-token prefill: 2 · 1024 · 24576 · 4096 ≈ 206 GFLOP.
        assert_eq!(
            GemmBackend::AUTO.pick(1024, 24576, 4096),
            Picked::CublasLt { chunks: 1 }
        );
        // Qwen3-0.6B's gate/up there: 12.9 GFLOP.
        assert_eq!(GemmBackend::AUTO.pick(1024, 6144, 1024), Picked::Rust);
        // Exactly at the threshold, and one row below it.
        let (n, k) = (1 << 20, 1 << 10);
        let m = (AUTO_MIN_FLOPS / (2 * n * k)) as u32;
        let at = GemmBackend::Auto {
            min_flops: 2 * m as u64 * n * k,
        };
        assert_eq!(at.pick(m, n as u32, k as u32), Picked::CublasLt { chunks: 1 });
        assert_eq!(at.pick(m - 1, n as u32, k as u32), Picked::Rust);
        assert_eq!(GemmBackend::Rust.pick(u32::MAX, u32::MAX, u32::MAX), Picked::Rust);
        let most = u32::MAX - 7;
        assert_eq!(GemmBackend::AUTO.pick(most, most, most), Picked::CublasLt { chunks: 1 });
        // Rows cuBLASLt cannot take stay on `matmul`, however large.
        assert_eq!(GemmBackend::AUTO.pick(most, most + 1, most), Picked::Rust);
        assert_eq!(GemmBackend::AUTO.pick(most, most, most - 4), Picked::Rust);
        assert_eq!(
            GemmBackend::CublasLt { chunks: 3 }.pick(1, 8, 8),
            Picked::CublasLt { chunks: 3 }
        );
    }
}
