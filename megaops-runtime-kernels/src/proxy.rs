//! The proxy of a chunked closed-source operation (paper §2.2 end, Appendix B): one CTA
//! per chunk runs the data-tile protocol on the chunk's behalf, because the chunk's own
//! kernel (a cuBLASLt GEMM, a copy-engine transfer) has no source to put it in.
//!
//! Each chunk has three flags: *go* (the proxy lets the chunk start), *started* (written
//! on the chunk's side stream right before the chunk) and *done* (written after it). CTA
//! `c` of the proxy:
//! 1. waits for the data tiles chunk `c` reads of every input (`wait_input`);
//! 2. sets *go* (`st.release.gpu`): the wrapper holding the chunk on its side stream lets
//!    it start;
//! 3. waits for *started* and counts it; then waits for *done* and counts it. The event
//!    after which every chunk is done raises the AsyncStream begin flag: the next launch
//!    (typically a consumer of the output) starts after the chunks. A closed-source
//!    kernel's CTAs cannot be seen starting; were the next launch to start earlier, its
//!    CTAs could take SMs a chunk still needs and spin there for its output (on the
//!    H200 that stalled a one-chunk cuBLASLt GEMM for good). The producers before the
//!    subkernel still overlap it: each chunk starts as soon as its inputs are ready;
//! 4. resets the three flags and the count to 0 (the same flags serve every replay of a
//!    graph), then signals the data tiles chunk `c` wrote of the output
//!    (`signal_output`).
//!
//! Every wait has the protocol's timeout. A failed input wait still releases the chunk (its
//! side stream must not block for ever: stream operations have no timeout) but signals
//! nothing; the error log names the wait that failed.
//!
//! **Release proxies.** When every data tile of the output lies inside one chunk, the
//! chunk's side stream signals its data tiles itself (stream memory operations after the
//! chunk, which write each one's ready value) and the begin flag is raised by the side
//! stream (one chunk) or the AsyncStream's lane, once every chunk is done. Its proxy
//! (`megaops_subkernel_release_N`) then only runs step 1 and sets *go* ([`release_chunk`]):
//! it ends before the chunk starts, and holds no SM while the chunks run. A failed input wait still sets *go*; the chunk then runs and
//! its data tiles are signalled, and the error log names the wait that failed (the host
//! reports it at the next synchronisation).

use megaops_device::atomic::{self, AcqRel, Gpu, Relaxed, Release};
use megaops_device::sync::{
    KernelCtx, MAX_RANK, ProducerTile, TileSync, WaitSite, kernel_begin_cta, signal_output, tile_region, wait_input,
    wait_one,
};
use megaops_device::thread::{block_idx_x, linear_thread_idx};

/// The most tensors (inputs and the output) one proxy synchronises.
pub const PROXY_MAX_TENSORS: usize = 4;

/// Marks a [`ChunkSpan`] whose tensor every chunk reads whole.
pub const WHOLE_TENSOR: u32 = u32::MAX;

/// Which part of a tensor chunk `c` reads or writes: elements `c·chunk .. (c+1)·chunk`
/// (clamped) along dimension `dim`, every element of the other dimensions; the whole
/// tensor when `dim` is [`WHOLE_TENSOR`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// The dimension the chunks cut, or [`WHOLE_TENSOR`].
    pub dim: u32,
    /// Elements per chunk along `dim` (≥ 1).
    pub chunk: u32,
}

impl ChunkSpan {
    /// Every chunk reads the whole tensor.
    pub const WHOLE: ChunkSpan = ChunkSpan {
        dim: WHOLE_TENSOR,
        chunk: 0,
    };

    /// The element region of chunk `c` of a tensor synchronised by `sync`.
    #[inline(always)]
    pub fn region(&self, sync: &TileSync, c: u32) -> [(u32, u32); MAX_RANK] {
        let mut region = [(0u32, 0u32); MAX_RANK];
        // Constant indices only (unrolled), so the arrays stay in registers.
        #[allow(clippy::needless_range_loop)]
        for d in 0..MAX_RANK {
            let size = sync.dims[d].size;
            if (d as u32) < sync.rank {
                region[d] = if d as u32 == self.dim {
                    tile_region(c, self.chunk, size)
                } else {
                    (0, size)
                };
            }
        }
        region
    }

    /// The kernel tile of a producer whose tiles are these chunks: `chunk` elements along
    /// `dim`, the whole of every other dimension.
    #[inline(always)]
    pub fn ktile(&self) -> [u32; MAX_RANK] {
        let mut ktile = [0u32; MAX_RANK];
        #[allow(clippy::needless_range_loop)]
        for d in 0..MAX_RANK {
            if d as u32 == self.dim {
                ktile[d] = self.chunk;
            }
        }
        ktile
    }
}

/// What a proxy launch needs besides its context and the tensors' [`TileSync`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyArgs {
    /// `3·chunks + 1` words: the go flags, the started flags, the done flags, the count of
    /// started (low 16 bits) and done (high 16 bits) chunks. All zero between operations.
    pub flags: *mut i32,
    /// Number of chunks (= CTAs of the proxy).
    pub chunks: u32,
    /// Tensor id of the flags, for the error report of a subkernel that never finished.
    pub flags_id: u32,
    /// Per synchronised tensor, inputs first, then the output: what each chunk touches.
    pub spans: [ChunkSpan; PROXY_MAX_TENSORS],
}

// SAFETY: the flags pointer is device memory the launch keeps; the block is copied into
// kernel parameters and CPU-backend closures, never dereferenced on the host.
unsafe impl Send for ProxyArgs {}
unsafe impl Sync for ProxyArgs {}

/// What a started chunk adds to the proxy's count.
const STARTED: i32 = 1;
/// What a finished chunk adds to the proxy's count.
const DONE: i32 = 1 << 16;

/// Whether the count lets the next launch go: every one of the `n` chunks is done.
#[inline(always)]
fn release_ready(count: i32, n: u32) -> bool {
    count >> 16 == n as i32
}

/// Step 1 of CTA `blockIdx.x` of a proxy (see the module docs) for its input `i`: waits
/// for the data tiles chunk `blockIdx.x` reads of the input `sync` synchronises. Returns
/// `false` if the wait failed. Every thread of the CTA runs it (one warp is enough); a
/// proxy entry calls it for each input in order, stopping at the first failure, then
/// [`finish_chunk`].
///
/// # Safety
/// `sync` describes valid semaphores (or is inactive); `ctx` is a valid launch context;
/// `i < PROXY_MAX_TENSORS`.
#[inline(always)]
pub unsafe fn wait_chunk_input(args: &ProxyArgs, ctx: &KernelCtx, i: usize, sync: &TileSync) -> bool {
    let c = block_idx_x();
    // SAFETY: the caller's contract.
    unsafe { wait_input(ctx, c, sync, &args.spans[i].region(sync, c)) }
}

/// Steps 2–4 of CTA `blockIdx.x` of a proxy (see the module docs) after its inputs'
/// waits (`ok`: all of them succeeded): lets the chunk go, waits for it, and signals the
/// output `output`, whose chunk span is `args.spans[out]`.
///
/// # Safety
/// `args.flags` holds `3·chunks + 1` device words; `output` describes valid semaphores
/// (or is inactive); `ctx` is a valid launch context; the grid has `chunks` CTAs;
/// `out < PROXY_MAX_TENSORS`.
#[inline(always)]
pub unsafe fn finish_chunk(args: &ProxyArgs, ctx: &KernelCtx, ok: bool, output: &TileSync, out: usize) {
    let c = block_idx_x();
    let mut failed = !ok;
    if linear_thread_idx() == 0 {
        let n = args.chunks;
        let flag = |i: u32| WaitSite {
            // SAFETY (of the `add`): i < 3·chunks + 1, inside the flag words.
            sem: unsafe { args.flags.add(i as usize) },
            target: 1,
            launch_id: ctx.launch_id,
            tile: c,
            tensor_id: args.flags_id,
            sem_index: i,
        };
        let (go, started, done) = (flag(c), flag(n + c), flag(2 * n + c));
        // SAFETY: c < chunks, so every index is inside the 3·chunks + 1 flag words.
        unsafe {
            let count = args.flags.add((3 * n) as usize);
            atomic::store(go.sem as *mut i32, 1, Release, Gpu);
            // Each event adds to the count (started: 1, done: 1 << 16) and learns the
            // count before it, so exactly one event sees the next launch's condition
            // come true, and the last event (the last chunk done) sees all of them.
            let event = |step: i32| {
                let before = atomic::add(count, step, AcqRel, Gpu);
                let after = before.wrapping_add(step);
                if !release_ready(before, n) && release_ready(after, n) {
                    let all = KernelCtx { begin_cta: 0, ..*ctx };
                    kernel_begin_cta(&all);
                }
                after
            };
            if wait_one(ctx, &started) {
                event(STARTED);
            } else {
                failed = true;
            }
            if wait_one(ctx, &done) {
                if event(DONE) == (n as i32) * (STARTED + DONE) {
                    // Every chunk started and is done: nobody touches the count again in
                    // this operation.
                    atomic::store(count, 0, Relaxed, Gpu);
                }
                // The chunk's side stream is past its wait for `go` and its write of
                // `started` (it wrote `done` after them): the flags are free again.
                atomic::store(done.sem as *mut i32, 0, Relaxed, Gpu);
                atomic::store(started.sem as *mut i32, 0, Relaxed, Gpu);
                atomic::store(go.sem as *mut i32, 0, Relaxed, Gpu);
            } else {
                failed = true;
            }
        }
    }
    let region = args.spans[out].region(output, c);
    let producer = ProducerTile {
        ktile: args.spans[out].ktile(),
        split: 1,
        split_index: 0,
    };
    // SAFETY: the caller's contract; chunk `c`'s subkernel wrote exactly this region. Every
    // thread gets here (the barrier inside also shares out whether thread 0 failed).
    unsafe { signal_output(output, &region, &producer, failed) };
}

/// Step 2 of a release proxy (see the module docs), after CTA `blockIdx.x`'s input waits:
/// thread 0 sets the chunk's *go* flag (`st.release.gpu`), also when a wait failed (the
/// side stream must not wait for ever; the error log has the failure). The CTA then ends:
/// the chunk's side stream signals its output.
///
/// # Safety
/// `args.flags` holds at least `chunks` device words; the grid has `chunks` CTAs.
#[inline(always)]
pub unsafe fn release_chunk(args: &ProxyArgs) {
    if linear_thread_idx() == 0 {
        // SAFETY: blockIdx.x < chunks, inside the go words (the caller's contract).
        unsafe { atomic::store(args.flags.add(block_idx_x() as usize), 1, Release, Gpu) };
    }
}
