//! cuBLASLt GEMMs as subkernels: `C = A·Wᵀ` (optionally `+ R`, the residual epilogue) in
//! bf16 with f32 accumulation, the semantics of the kernel library's `matmul`: activations
//! `A[m, k]`, the weight of a PyTorch `Linear(k, n)` `W[n, k]`, `C[m, n]`, all row-major;
//! `C` is rounded once, to nearest even.
//!
//! [`CublasLt::matmul`] runs it chunked, in the data-tile protocol, on an AsyncStream
//! ([`super`]); [`CublasLt::matmul_on`] is one plain call on a plain stream (the reference,
//! and interop without adaptation: join it with `AsyncStream::wait_on` / `block`).
//!
//! Row-major `C[m, n]` is column-major `Cᵀ (n × m, ld n)`, so each call computes
//! `Cᵀ = W · Aᵀ`: cuBLASLt's `A` operand is `W` stored as column-major `k × n` (ld `k`)
//! with `op = T`, its `B` operand is `A` stored as column-major `k × m` (ld `k`) with
//! `op = N`, and `C`/`D` are `n × m` with ld `n`. A chunk of rows of `C` offsets `A` and
//! `C`; a chunk of columns offsets `W` and `C` and keeps ld `n`. Workspaces: one of
//! [`WORKSPACE_BYTES`] per stream that runs calls (two chunks on two side streams run at
//! once), made on a stream's first call.
//!
//! On the CPU backend the same calls run a host GEMM with the same rounding.

use super::{Chunk, ChunkOp, ChunkSignals, Chunking, SubkernelLaunch, Wrappers};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::launch::{AsInput, AsOutput, LaunchOptions, LaunchTarget};
use crate::mutex::lock;
use crate::stream::Stream;
use crate::tensor::Tensor;
use crate::tiled::Tiled;
use crate::tiling::{DataTiling, R2};
use cudarc::cublaslt::{result as lt, sys};
use half::bf16;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Bytes of each stream's cuBLASLt workspace (NVIDIA's recommendation for Hopper).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// A tensor whose shape a subkernel client can read: a [`Tensor`] or a [`Tiled`] one.
pub trait Shaped {
    /// Shape, outermost first.
    fn dims(&self) -> &[usize];
}

impl<T: crate::dtype::DType> Shaped for Tensor<T> {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
}

impl<T: crate::dtype::DType, D: DataTiling> Shaped for Tiled<T, D> {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
}

/// A bf16 matrix a GEMM subkernel reads: a `Tensor<bf16>` or a rank-2 `Tiled<bf16, D>`.
pub trait Operand: AsInput<bf16, R2> + Shaped {}
impl<X: AsInput<bf16, R2> + Shaped + ?Sized> Operand for X {}

/// A bf16 matrix a GEMM subkernel writes.
pub trait Destination: AsOutput<bf16, R2> + Shaped {}
impl<X: AsOutput<bf16, R2> + Shaped + ?Sized> Destination for X {}

/// Which dimension of `C[m, n]` the chunks cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmAxis {
    /// Rows (`m`): chunk `c` reads its rows of `A` (and of `R`) and all of `W`.
    M,
    /// Columns (`n`): chunk `c` reads all of `A` and its rows of `W`.
    N,
}

/// How a GEMM subkernel is chunked.
#[derive(Clone, Debug)]
pub struct GemmChunks {
    /// At most this many chunks (1 to [`super::MAX_CHUNKS`]): the knob.
    pub chunks: usize,
    /// The dimension of `C` they cut.
    pub along: GemmAxis,
    /// Chunk sizes are multiples of this many rows or columns (columns: a multiple of 8,
    /// keeping the operands 16-byte aligned).
    pub align: usize,
    /// What holds each chunk until its proxy lets it go: a stream memory operation (the
    /// complementary backend of a kernel, the default) or the runtime's wait kernel.
    pub wrappers: Wrappers,
    /// Who signals each chunk's data tiles of `C` (its side stream when they align with
    /// the chunks, the default).
    pub signals: ChunkSignals,
    /// Options of the proxy launch (wait timeout).
    pub launch: LaunchOptions,
}

impl GemmChunks {
    /// Checks the chunk count (1 to [`super::MAX_CHUNKS`]) and the alignment (≥ 1).
    pub fn check(&self) -> Result<()> {
        Chunking::new(1, self.chunks, self.align).map(|_| ())
    }
}

impl Default for GemmChunks {
    fn default() -> Self {
        GemmChunks {
            chunks: 4,
            along: GemmAxis::M,
            align: 64,
            wrappers: Wrappers::StreamMemOps,
            signals: ChunkSignals::default(),
            launch: LaunchOptions::default(),
        }
    }
}

/// The GEMM's shape as cuBLASLt plans it: one call of `rows × cols` of `C` with `k`,
/// `ldc` the row stride of `C`, with or without the residual.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlanKey {
    rows: usize,
    cols: usize,
    k: usize,
    ldc: usize,
    residual: bool,
}

/// Descriptors and the chosen algorithm of one call shape.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    w_layout: sys::cublasLtMatrixLayout_t,
    a_layout: sys::cublasLtMatrixLayout_t,
    c_layout: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

// SAFETY: cuBLASLt descriptors are plain host objects, read-only once built; they are
// used under the plan cache's `Arc` and destroyed once, in `Drop`.
unsafe impl Send for Plan {}
unsafe impl Sync for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created in `Plan::new`, destroyed once; no call is being enqueued with
        // them (the cache drops plans only with the handle).
        unsafe {
            let _ = lt::destroy_matrix_layout(self.w_layout);
            let _ = lt::destroy_matrix_layout(self.a_layout);
            let _ = lt::destroy_matrix_layout(self.c_layout);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

/// A cuBLASLt handle (absent on the CPU backend).
struct Handle(sys::cublasLtHandle_t);

// SAFETY: a cuBLASLt handle may be used from any thread; calls on different streams do
// not share state other than the handle's (read-only) context.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created in `CublasLt::new`, destroyed once, after its plans.
        unsafe {
            let _ = lt::destroy_handle(self.0);
        }
    }
}

struct Inner {
    device: Device,
    // Field order is drop order: plans before the handle.
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
    workspaces: Mutex<HashMap<u64, Tensor<u32>>>,
    /// The stream a new plan's first call runs on (which loads its kernel), made on first
    /// use.
    warm: Mutex<Option<Stream>>,
    handle: Option<Handle>,
}

/// cuBLASLt on one device, with its plans and workspaces. Cheap to clone (shared).
#[derive(Clone)]
pub struct CublasLt {
    inner: Arc<Inner>,
}

fn lt_error(what: impl std::fmt::Display, e: lt::CublasError) -> Error {
    Error::Invalid(format!("cuBLASLt: {what}: {e:?}"))
}

impl CublasLt {
    /// Whether [`CublasLt::new`] can load cuBLASLt for `device`: on a GPU, whether
    /// `libcublasLt` is on the library path; always on the CPU backend.
    pub fn available(device: &Device) -> bool {
        // SAFETY: only probes for the library.
        !device.is_cuda() || unsafe { sys::is_culib_present() }
    }

    /// cuBLASLt for `device`. On a GPU this loads `libcublasLt` (an error names it when it
    /// is missing); the CPU backend needs no library.
    pub fn new(device: &Device) -> Result<CublasLt> {
        let handle = if device.is_cuda() {
            if !CublasLt::available(device) {
                return Err(Error::Invalid(
                    "cuBLASLt GEMMs need libcublasLt.so (CUDA's cuBLAS), which was not found on the library path"
                        .into(),
                ));
            }
            Some(Handle(
                lt::create_handle().map_err(|e| lt_error("creating a handle", e))?,
            ))
        } else {
            None
        };
        Ok(CublasLt {
            inner: Arc::new(Inner {
                device: device.clone(),
                plans: Mutex::default(),
                workspaces: Mutex::default(),
                warm: Mutex::default(),
                handle,
            }),
        })
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// `C = A·Wᵀ (+ R)` as a subkernel on `target` (an AsyncStream: the chunks run on its
    /// side streams), chunked by `chunks`. `A` and `R` may be
    /// produced `Tiled` tensors (each chunk waits for the rows it reads), `C` may be a
    /// `Tiled` tensor (each chunk signals its data tiles). Shapes: `A[m, k]`, `W[n, k]`,
    /// `C[m, n]`, `R[m, n]`; `k` and `n` multiples of 8.
    pub fn matmul(
        &self,
        target: &impl LaunchTarget,
        a: &(impl Operand + ?Sized),
        w: &Tensor<bf16>,
        residual: Option<&dyn Operand>,
        c: &mut (impl Destination + ?Sized),
        chunks: &GemmChunks,
    ) -> Result<()> {
        let (m, n, k) = gemm_shape(a.dims(), w.shape(), c.dims(), residual.map(|r| r.dims()))?;
        let (extent, align) = match chunks.along {
            GemmAxis::M => (m, chunks.align.max(1)),
            GemmAxis::N => (n, chunks.align.max(1).div_ceil(8) * 8),
        };
        let chunking = Chunking::new(extent, chunks.chunks, align)?;
        let device = target.device().clone();
        let mut l = SubkernelLaunch::new(&device, "cublaslt_matmul", &chunks.launch, chunking, chunks.wrappers)?;
        l.signals(chunks.signals);
        let rows = (chunks.along == GemmAxis::M).then_some(0);
        let (mu, nu, ku) = (m as u64, n as u64, k as u64);
        let a_addr = l.input("a", a, &[mu, ku], rows)?;
        let r_addr = residual.map(|r| l.input("residual", r, &[mu, nu], rows)).transpose()?;
        let w_addr = l.read("w", w, &[n, k])?;
        let c_addr = l.output("c", c, &[mu, nu], if rows.is_some() { 0 } else { 1 })?;
        let op = GemmChunk {
            lt: self.clone(),
            a: a_addr,
            w: w_addr,
            c: c_addr,
            r: r_addr,
            m,
            n,
            k,
            along: chunks.along,
        };
        l.submit(target, Arc::new(op))
    }

    /// `C = A·Wᵀ (+ R)` as one cuBLASLt call on `stream`, without the data-tile protocol
    /// (the reference for chunked calls, and an unadapted kernel for interop). Enqueued
    /// only; the caller keeps the tensors alive until the stream is done with them.
    pub fn matmul_on(
        &self,
        stream: &Stream,
        a: &Tensor<bf16>,
        w: &Tensor<bf16>,
        residual: Option<&Tensor<bf16>>,
        c: &mut Tensor<bf16>,
    ) -> Result<()> {
        let (m, n, k) = gemm_shape(a.shape(), w.shape(), c.shape(), residual.map(|r| r.shape()))?;
        for (name, t) in [("a", a), ("w", w), ("c", &*c)]
            .into_iter()
            .chain(residual.map(|r| ("residual", r)))
        {
            if !t.device().same(&self.inner.device) {
                return Err(Error::Invalid(format!(
                    "cuBLASLt matmul: `{name}` lives on {}, the handle on {}",
                    t.device().name(),
                    self.inner.device.name()
                )));
            }
        }
        let op = GemmChunk {
            lt: self.clone(),
            a: a.addr(),
            w: w.addr(),
            c: c.addr(),
            r: residual.map(Tensor::addr),
            m,
            n,
            k,
            along: GemmAxis::M,
        };
        let whole = Chunk {
            index: 0,
            start: 0,
            end: m,
        };
        if m == 0 || n == 0 {
            return Ok(());
        }
        if self.inner.device.is_cuda() {
            // SAFETY: the tensors were checked above (shapes, device); the caller keeps them
            // alive until the stream is done.
            unsafe { op.enqueue(whole, 2, stream) }
        } else {
            // SAFETY: as above; CPU-backend tensors are host memory. Runs in stream order.
            stream.host_op(Arc::new(move || unsafe { op.run_on_host(whole) }))
        }
    }

    /// The plan of one call shape, built on first use.
    fn plan(&self, key: PlanKey) -> Result<Arc<Plan>> {
        if let Some(p) = lock(&self.inner.plans).get(&key) {
            return Ok(p.clone());
        }
        let plan = Arc::new(build_plan(self.handle()?, key)?);
        lock(&self.inner.plans).insert(key, plan.clone());
        Ok(plan)
    }

    fn handle(&self) -> Result<sys::cublasLtHandle_t> {
        self.inner
            .handle
            .as_ref()
            .map(|h| h.0)
            .ok_or_else(|| Error::Internal("a cuBLASLt call on the CPU backend".into()))
    }

    /// Builds the plan of `key` if it is new and runs it once, synchronously, on the warm
    /// stream: `a` and `w` are read (their values do not matter), `r` too when the key has
    /// the residual, and the result goes to scratch memory. That loads the plan's kernel
    /// (CUDA loads library kernels on their first launch, which may synchronise the
    /// context) before any proxy waits for a chunk that runs it.
    fn warm_up(&self, key: PlanKey, a: u64, w: u64, r: Option<u64>) -> Result<()> {
        if lock(&self.inner.plans).contains_key(&key) {
            return Ok(());
        }
        let plan = Arc::new(build_plan(self.handle()?, key)?);
        let scratch = Tensor::<bf16>::empty(&self.inner.device, &[key.rows.max(1), key.ldc.max(1)])?;
        let mut warm = lock(&self.inner.warm);
        if warm.is_none() {
            *warm = Some(Stream::new(&self.inner.device)?);
        }
        let stream = warm
            .as_ref()
            .ok_or_else(|| Error::Internal("the warm-up stream was not made".into()))?;
        let ws = self.workspace(stream)?;
        // SAFETY: `a`, `w` and `r` hold the shapes of `key` (checked at bind time) and stay
        // allocated (the caller's launch keeps them); the scratch holds `rows × ldc` values;
        // the stream is synchronised before the scratch is dropped.
        unsafe {
            self.call(
                &plan,
                (a, w, r.unwrap_or(scratch.addr()), scratch.addr()),
                r.is_some(),
                ws,
                stream,
            )?
        };
        stream.synchronize()?;
        lock(&self.inner.plans).insert(key, plan);
        Ok(())
    }

    /// Enqueues one `cublasLtMatmul` of `plan` on `stream`: `d = a·wᵀ (+ c)`.
    ///
    /// # Safety
    /// The addresses hold the plan's shapes and stay allocated until the call is done;
    /// `ws` is `stream`'s own workspace of [`WORKSPACE_BYTES`].
    unsafe fn call(
        &self,
        plan: &Plan,
        (a, w, c, d): (u64, u64, u64, u64),
        residual: bool,
        ws: u64,
        stream: &Stream,
    ) -> Result<()> {
        let cu = stream
            .cu_stream()
            .ok_or_else(|| Error::Internal("a cuBLASLt call on a stream without a CUDA handle".into()))?;
        let (alpha, beta) = (1f32, if residual { 1f32 } else { 0f32 });
        // SAFETY: the caller's contract; live handle, plan and stream.
        unsafe {
            lt::matmul(
                self.handle()?,
                plan.desc,
                (&alpha) as *const f32 as *const _,
                (&beta) as *const f32 as *const _,
                w as *const _,
                plan.w_layout,
                a as *const _,
                plan.a_layout,
                c as *const _,
                plan.c_layout,
                d as *mut _,
                plan.c_layout,
                &plan.algo,
                ws as *mut _,
                WORKSPACE_BYTES,
                cu as *mut _,
            )
        }
        .map_err(|e| lt_error("enqueueing a GEMM", e))
    }

    /// The workspace of `stream`, made on its first call.
    fn workspace(&self, stream: &Stream) -> Result<u64> {
        let mut ws = lock(&self.inner.workspaces);
        if let Some(t) = ws.get(&stream.id()) {
            return Ok(t.addr());
        }
        let t = Tensor::<u32>::empty(&self.inner.device, &[WORKSPACE_BYTES / 4])?;
        let addr = t.addr();
        ws.insert(stream.id(), t);
        Ok(addr)
    }
}

/// Whether cuBLASLt subkernels take a GEMM of output width `n` over `k`: both multiples
/// of 8, so that rows and chunks are 16-byte aligned.
pub fn widths_fit(n: usize, k: usize) -> bool {
    n.is_multiple_of(8) && k.is_multiple_of(8)
}

/// Checks `A[m, k]`, `W[n, k]`, `C[m, n]` (and `R[m, n]`) and returns `(m, n, k)`.
fn gemm_shape(a: &[usize], w: &[usize], c: &[usize], r: Option<&[usize]>) -> Result<(usize, usize, usize)> {
    let bad = || {
        Error::shape(format!(
            "cuBLASLt matmul needs a[m, k], w[n, k], c[m, n]{}: got a {a:?}, w {w:?}, c {c:?}{}",
            if r.is_some() { ", residual[m, n]" } else { "" },
            r.map(|r| format!(", residual {r:?}")).unwrap_or_default()
        ))
    };
    let (&[m, k], &[n, wk], &[cm, cn]) = (a, w, c) else {
        return Err(bad());
    };
    if wk != k || cm != m || cn != n || r.is_some_and(|r| r != [m, n]) {
        return Err(bad());
    }
    if !widths_fit(n, k) {
        return Err(Error::shape(format!(
            "cuBLASLt matmul: k = {k} and n = {n} must be multiples of 8 (16-byte aligned rows and chunks)"
        )));
    }
    for (what, v) in [("m", m), ("n", n), ("k", k)] {
        if v > i32::MAX as usize {
            return Err(Error::shape(format!("cuBLASLt matmul: {what} = {v} exceeds i32")));
        }
    }
    Ok((m, n, k))
}

/// Descriptors for one call shape and the heuristic's first algorithm.
fn build_plan(handle: sys::cublasLtHandle_t, key: PlanKey) -> Result<Plan> {
    use sys::cublasLtMatmulDescAttributes_t::{CUBLASLT_MATMUL_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSB};
    let bf = sys::cudaDataType_t::CUDA_R_16BF;
    let what = || format!("planning a {}×{}×{} GEMM", key.rows, key.cols, key.k);
    let desc = lt::create_matmul_desc(
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        sys::cudaDataType_t::CUDA_R_32F,
    )
    .map_err(|e| lt_error(what(), e))?;
    // Column-major view (module docs): D (cols × rows, ld ldc) = op_T(W: k × cols) · A (k × rows).
    let (w_layout, a_layout, c_layout) = (
        lt::create_matrix_layout(bf, key.k as u64, key.cols as u64, key.k as i64),
        lt::create_matrix_layout(bf, key.k as u64, key.rows as u64, key.k as i64),
        lt::create_matrix_layout(bf, key.cols as u64, key.rows as u64, key.ldc as i64),
    );
    let mut plan = Plan {
        desc,
        w_layout: w_layout.map_err(|e| lt_error(what(), e))?,
        a_layout: a_layout.map_err(|e| lt_error(what(), e))?,
        c_layout: c_layout.map_err(|e| lt_error(what(), e))?,
        // SAFETY: a plain-data struct; overwritten by the heuristic below.
        algo: unsafe { std::mem::zeroed() },
    };
    // cublasOperation_t values (cuBLASLt's bindings take them as i32): T = 1, N = 0.
    let (ta, tb): (i32, i32) = (1, 0);
    // SAFETY: live descriptors; attribute values of the documented types and sizes.
    unsafe {
        lt::set_matmul_desc_attribute(
            plan.desc,
            CUBLASLT_MATMUL_DESC_TRANSA,
            (&ta) as *const _ as *const _,
            size_of::<i32>(),
        )
        .map_err(|e| lt_error(what(), e))?;
        lt::set_matmul_desc_attribute(
            plan.desc,
            CUBLASLT_MATMUL_DESC_TRANSB,
            (&tb) as *const _ as *const _,
            size_of::<i32>(),
        )
        .map_err(|e| lt_error(what(), e))?;
        let pref = lt::create_matmul_pref().map_err(|e| lt_error(what(), e))?;
        let bytes = WORKSPACE_BYTES as u64;
        let heuristic = lt::set_matmul_pref_attribute(
            pref,
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&bytes) as *const _ as *const _,
            size_of::<u64>(),
        )
        .and_then(|()| {
            lt::get_matmul_algo_heuristic(
                handle,
                plan.desc,
                plan.w_layout,
                plan.a_layout,
                plan.c_layout,
                plan.c_layout,
                pref,
            )
        });
        let _ = lt::destroy_matmul_pref(pref);
        plan.algo = heuristic.map_err(|e| lt_error(what(), e))?.algo;
    }
    let _ = key.residual;
    Ok(plan)
}

/// The chunks of one GEMM: its operands' addresses and shape.
struct GemmChunk {
    lt: CublasLt,
    a: u64,
    w: u64,
    c: u64,
    r: Option<u64>,
    m: usize,
    n: usize,
    k: usize,
    along: GemmAxis,
}

impl GemmChunk {
    /// The chunk's part: `(rows, cols, a, w, c, r)` with addresses offset to it.
    fn part(&self, chunk: Chunk) -> (usize, usize, u64, u64, u64, Option<u64>) {
        const B: u64 = 2; // bytes per bf16
        let s = chunk.start as u64;
        match self.along {
            GemmAxis::M => {
                let (a, c) = (s * self.k as u64 * B, s * self.n as u64 * B);
                (
                    chunk.len(),
                    self.n,
                    self.a + a,
                    self.w,
                    self.c + c,
                    self.r.map(|r| r + c),
                )
            }
            GemmAxis::N => (
                self.m,
                chunk.len(),
                self.a,
                self.w + s * self.k as u64 * B,
                self.c + s * B,
                self.r.map(|r| r + s * B),
            ),
        }
    }
}

impl GemmChunk {
    fn key(&self, rows: usize, cols: usize) -> PlanKey {
        PlanKey {
            rows,
            cols,
            k: self.k,
            ldc: self.n,
            residual: self.r.is_some(),
        }
    }
}

impl ChunkOp for GemmChunk {
    fn prepare(&self, chunks: &[Chunk], streams: &[&Stream]) -> Result<()> {
        for s in streams {
            self.lt.workspace(s)?;
        }
        for &c in chunks {
            let (rows, cols, a, w, _, r) = self.part(c);
            self.lt.warm_up(self.key(rows, cols), a, w, r)?;
        }
        Ok(())
    }

    unsafe fn enqueue(&self, chunk: Chunk, _lane: usize, stream: &Stream) -> Result<()> {
        let (rows, cols, a, w, c, r) = self.part(chunk);
        let plan = self.lt.plan(self.key(rows, cols))?;
        let ws = self.lt.workspace(stream)?;
        // SAFETY: the addresses are the chunk's part of operands whose shapes were checked
        // at bind time and which the caller keeps alive until the call is done; the
        // workspace is this stream's own.
        unsafe { self.lt.call(&plan, (a, w, r.unwrap_or(c), c), r.is_some(), ws, stream) }
            .map_err(|e| Error::Invalid(format!("{e} ({rows}×{cols}×{})", self.k)))
    }

    unsafe fn run_on_host(&self, chunk: Chunk) {
        let (rows, cols, a, w, c, r) = self.part(chunk);
        let (k, ld) = (self.k, self.n);
        // SAFETY: the chunk's part of host (CPU-backend) operands, alive and checked at
        // bind time: `rows` rows of `k` from `a`, `cols` rows of `k` from `w`, `rows` rows
        // of stride `ld` from `c` and `r`.
        unsafe {
            let a = std::slice::from_raw_parts(a as *const bf16, (rows.max(1) - 1) * k + k);
            let w = std::slice::from_raw_parts(w as *const bf16, (cols.max(1) - 1) * k + k);
            for i in 0..rows {
                for j in 0..cols {
                    let mut acc = 0f32;
                    for (x, y) in a[i * k..(i + 1) * k].iter().zip(&w[j * k..(j + 1) * k]) {
                        acc += x.to_f32() * y.to_f32();
                    }
                    if let Some(r) = r {
                        acc += (*(r as *const bf16).add(i * ld + j)).to_f32();
                    }
                    *(c as *mut bf16).add(i * ld + j) = bf16::from_f32(acc);
                }
            }
        }
    }
}
