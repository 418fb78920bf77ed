//! cuBLAS as the library anchor of the GEMV and GEMM suites: one handle with an explicit
//! workspace, and row-major bf16 `cublasGemmEx` with f32 accumulation.

use cudarc::cublas::{result as cublas, sys as cublas_sys};
use megaops::{Device, Error, Result, Tensor, bf16};

/// A cuBLAS handle with an explicit workspace (no allocation during graph capture).
pub struct Cublas {
    handle: cublas_sys::cublasHandle_t,
    _workspace: Tensor<i32>,
}

impl Cublas {
    /// A handle with a 32 MiB workspace on `dev`.
    pub fn new(dev: &Device) -> Result<Cublas> {
        let handle = cublas::create_handle().map_err(|e| Error::Invalid(format!("cublasCreate: {e:?}")))?;
        let workspace = Tensor::<i32>::zeros(dev, &[8 << 20])?; // 32 MiB
        // SAFETY: a live handle and a device buffer of the given size that outlives it.
        unsafe { cublas_sys::cublasSetWorkspace_v2(handle, workspace.addr() as *mut _, workspace.size_bytes()) }
            .result()
            .map_err(|e| Error::Invalid(format!("cublasSetWorkspace: {e:?}")))?;
        Ok(Cublas {
            handle,
            _workspace: workspace,
        })
    }

    /// Enqueues `C = A·Wᵀ` (`nn`: `C = A·B`) on `stream`, all row-major bf16: `A[m, k]`,
    /// `W[n, k]` (`B[k, n]`), `C[m, n]`, checked before anything is enqueued.
    ///
    /// Row-major `C[m, n]` is column-major `Cᵀ[n, m]`: `Cᵀ = W·Aᵀ`, with row-major
    /// `W[n, k]` seen as column-major `Wᵀ (k × n, ld k)` → `op = T`, and `A[m, k]` as
    /// `Aᵀ (k × m, ld k)` → `op = N` (cuBLAS "TN"). NN: `B[k, n]` is column-major
    /// `Bᵀ (n × k, ld n)` → `op = N` ("NN").
    pub fn gemm(
        &self,
        stream: cudarc::driver::sys::CUstream,
        a: &Tensor<bf16>,
        b: &Tensor<bf16>,
        c: &Tensor<bf16>,
        nn: bool,
    ) -> Result<()> {
        use cublas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let (&[m, k], &[b0, b1], &[cm, cn]) = (a.shape(), b.shape(), c.shape()) else {
            return Err(Error::shape(format!(
                "cuBLAS gemm needs 2-D tensors: a {:?}, b {:?}, c {:?}",
                a.shape(),
                b.shape(),
                c.shape()
            )));
        };
        let (bk, n) = if nn { (b0, b1) } else { (b1, b0) };
        if bk != k || cm != m || cn != n {
            return Err(Error::shape(format!(
                "cuBLAS gemm{}: a {:?}, b {:?}, c {:?}",
                if nn { " (NN)" } else { "" },
                a.shape(),
                b.shape(),
                c.shape()
            )));
        }
        let (m, n, k) = (m as i32, n as i32, k as i32);
        let (alpha, beta) = (1f32, 0f32);
        let (op_b, ld_b) = if nn { (CUBLAS_OP_N, n) } else { (CUBLAS_OP_T, k) };
        // SAFETY: live handle and stream; the tensors hold the shapes checked above and
        // stay alive until the stream (or graph) using them completes (the caller keeps
        // them).
        unsafe {
            cublas::set_stream(self.handle, stream as *mut _)
                .map_err(|e| Error::Invalid(format!("cublasSetStream: {e:?}")))?;
            cublas::gemm_ex(
                self.handle,
                op_b,
                CUBLAS_OP_N,
                n,
                m,
                k,
                (&alpha) as *const f32 as *const _,
                b.addr() as *const _,
                cublas_sys::cudaDataType_t::CUDA_R_16BF,
                ld_b,
                a.addr() as *const _,
                cublas_sys::cudaDataType_t::CUDA_R_16BF,
                k,
                (&beta) as *const f32 as *const _,
                c.addr() as *mut _,
                cublas_sys::cudaDataType_t::CUDA_R_16BF,
                n,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Invalid(format!("cublasGemmEx {m}×{n}×{k}: {e:?}")))
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { cublas::destroy_handle(self.handle) };
    }
}
