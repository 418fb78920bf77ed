//! Kernels the MegaOps runtime launches itself (no `#[megaops::kernel]`: they are part of
//! the protocol's machinery). Each is written once and compiled both to PTX and for the
//! CPU backend.
#![cfg_attr(target_arch = "nvptx64", no_std, feature(abi_ptx))]

pub mod proxy;

use megaops_device::sync::{KernelCtx, WaitSite, wait_one};
use megaops_device::thread::{block_dim_x, block_idx_x, grid_dim_x, thread_idx_x};

/// AsyncStream's wait kernel (paper §2.3): one thread holds the next launch on its stream
/// until the previous launch has started a CTA, i.e. its begin flag reached `token`
/// (serial-number comparison), so that earlier kernels get SMs first. Times out like a
/// tile wait, naming the launch that never started.
///
/// Then the same thread waits for the work before it on its stream
/// (`griddepcontrol.wait`: at once unless it was launched programmatically) and lets the
/// held launch start (`griddepcontrol.launch_dependents`), so a held launch made
/// programmatically starts only once both have happened.
///
/// # Safety
/// `flag` is a valid device `i32`; `ctx` is a valid launch context.
pub unsafe fn wait_begin(flag: *const i32, token: i32, ctx: KernelCtx) {
    if thread_idx_x() != 0 {
        return;
    }
    // SAFETY: forwarded.
    unsafe { wait_word(flag, token, 0, 0, ctx) };
    megaops_device::griddep::wait_prerequisite_grids();
    megaops_device::griddep::launch_dependents();
}

/// One thread holds later work on its stream until the word at `word` reaches `target`
/// (serial-number comparison); it times out like a tile wait, reported as semaphore
/// `sem_index` of tensor `tensor_id` (0, 0: the AsyncStream begin flag). Holds a chunk of
/// a copy-engine subkernel until its proxy lets it go.
///
/// # Safety
/// `word` is a valid device `i32`; `ctx` is a valid launch context.
pub unsafe fn wait_word(word: *const i32, target: i32, tensor_id: u32, sem_index: u32, ctx: KernelCtx) {
    if thread_idx_x() != 0 {
        return;
    }
    let site = WaitSite {
        sem: word,
        target,
        launch_id: ctx.launch_id,
        tile: 0,
        tensor_id,
        sem_index,
    };
    // SAFETY: caller's contract. A failed wait is recorded in the error log; the kernel
    // then simply ends.
    let _ = unsafe { wait_one(&ctx, &site) };
}

/// Writes `value` to `n` consecutive `u32`s (grid-stride loop). Used to poison outputs
/// before tests and to fill tensors without a host copy.
///
/// # Safety
/// `ptr` points to `n` writable `u32`s of device memory.
pub unsafe fn fill_u32(ptr: *mut u32, n: u64, value: u32) {
    let mut i = (block_idx_x() as u64) * block_dim_x() as u64 + thread_idx_x() as u64;
    let stride = grid_dim_x() as u64 * block_dim_x() as u64;
    while i < n {
        // SAFETY: i < n (caller's contract).
        unsafe { ptr.add(i as usize).write_volatile(value) };
        i += stride;
    }
}

/// One run of 32-bit words to set: `words` words from device address `addr` to `value`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillSpan {
    /// Device address of the first word (4-byte aligned).
    pub addr: u64,
    /// Number of words.
    pub words: u32,
    /// Value of every word.
    pub value: i32,
}

/// Spans one [`fill_spans`] launch takes: each CTA picks its span by constant-index
/// selects, which keeps the parameter block out of local memory.
pub const MAX_FILL_SPANS: usize = 32;

/// The spans of one [`fill_spans`] launch, passed by value as its kernel parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FillSpans {
    /// Spans in use (≤ [`MAX_FILL_SPANS`]).
    pub count: u32,
    /// Padding (keeps `spans` 8-byte aligned).
    pub _pad: u32,
    /// The spans; entries past `count` are ignored.
    pub spans: [FillSpan; MAX_FILL_SPANS],
}

/// Sets every span of `spans` (CTA `i` fills span `i`, its threads striding over the
/// words). Used to restore many tensors' semaphores at the end of a graph replay in a few
/// kernel nodes instead of one memset node per tensor.
///
/// # Safety
/// Each span in use covers `words` writable, 4-byte-aligned device words.
#[inline(always)]
pub unsafe fn fill_spans(spans: &FillSpans) {
    let i = block_idx_x() as usize;
    if i >= (spans.count as usize).min(MAX_FILL_SPANS) {
        return;
    }
    let mut span = FillSpan::default();
    // Constant indices only (unrolled): a dynamic index would copy the whole parameter
    // block to local memory in every thread.
    #[allow(clippy::needless_range_loop)]
    for j in 0..MAX_FILL_SPANS {
        if j == i {
            span = spans.spans[j];
        }
    }
    let mut w = thread_idx_x() as u64;
    while w < span.words as u64 {
        // SAFETY: w < words of the span (caller's contract).
        unsafe { (span.addr as *mut i32).add(w as usize).write_volatile(span.value) };
        w += block_dim_x() as u64;
    }
}

/// PTX entries.
#[cfg(target_arch = "nvptx64")]
mod entries {
    use super::proxy::{ProxyArgs, finish_chunk, release_chunk, wait_chunk_input};
    use super::*;
    use megaops_device::sync::TileSync;

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn megaops_wait_word(
        word: *const i32,
        target: i32,
        tensor_id: u32,
        sem_index: u32,
        ctx: KernelCtx,
    ) {
        // SAFETY: the runtime passes a valid word and context.
        unsafe { wait_word(word, target, tensor_id, sem_index, ctx) }
    }

    /// The proxy entry and the release-proxy entry of subkernels with the listed inputs
    /// (`input => its span index`), the output's span index last.
    ///
    /// SAFETY (every entry): the runtime passes the flags, context and syncs of one
    /// subkernel launch, inputs first, each at its span's index; a release proxy's output
    /// sync is unused (the side streams signal it).
    macro_rules! subkernel_entries {
        ($proxy:ident, $release:ident, [$($input:ident => $i:expr),*], $out:expr) => {
            #[unsafe(no_mangle)]
            pub unsafe extern "ptx-kernel" fn $proxy(args: ProxyArgs, ctx: KernelCtx, $($input: TileSync,)* out: TileSync) {
                unsafe {
                    let ok = true $(&& wait_chunk_input(&args, &ctx, $i, &$input))*;
                    finish_chunk(&args, &ctx, ok, &out, $out)
                }
            }

            #[unsafe(no_mangle)]
            pub unsafe extern "ptx-kernel" fn $release(args: ProxyArgs, ctx: KernelCtx, $($input: TileSync,)* _out: TileSync) {
                let _ = &ctx;
                unsafe {
                    let _ = true $(&& wait_chunk_input(&args, &ctx, $i, &$input))*;
                    release_chunk(&args)
                }
            }
        };
    }

    subkernel_entries!(megaops_subkernel_proxy_0, megaops_subkernel_release_0, [], 0);
    subkernel_entries!(megaops_subkernel_proxy_1, megaops_subkernel_release_1, [a => 0], 1);
    subkernel_entries!(megaops_subkernel_proxy_2, megaops_subkernel_release_2, [a => 0, b => 1], 2);
    subkernel_entries!(megaops_subkernel_proxy_3, megaops_subkernel_release_3, [a => 0, b => 1, c => 2], 3);

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn megaops_wait_begin(flag: *const i32, token: i32, ctx: KernelCtx) {
        // SAFETY: the runtime passes a valid flag and context.
        unsafe { wait_begin(flag, token, ctx) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn megaops_fill_spans(spans: FillSpans) {
        // SAFETY: the runtime passes spans of live device buffers.
        unsafe { fill_spans(&spans) }
    }

    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn megaops_fill_u32(ptr: *mut u32, n: u64, value: u32) {
        // SAFETY: the runtime passes a buffer of n u32s.
        unsafe { fill_u32(ptr, n, value) }
    }
}

/// The embedded PTX, one module per architecture.
#[cfg(not(target_arch = "nvptx64"))]
pub mod ptx {
    include!(concat!(env!("OUT_DIR"), "/megaops_ptx.rs"));
}
