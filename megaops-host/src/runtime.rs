//! Launching the runtime's own kernels (`megaops-runtime-kernels`).

use crate::backend::RawLaunch;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::module::PtxModule;
use crate::param::{ParamBytes, param_bytes};
use crate::stream::{Event, Stream};
use megaops_device::sync::{CtaRemap, ErrorLog, KernelCtx, MAX_RANK};
use megaops_runtime_kernels::{FillSpan, FillSpans, MAX_FILL_SPANS};
use std::sync::Arc;

/// PTX of the runtime kernels.
pub(crate) static RUNTIME_PTX: PtxModule = PtxModule {
    name: "megaops-runtime-kernels",
    ptx: megaops_runtime_kernels::ptx::MODULES,
    cubin: megaops_runtime_kernels::ptx::CUBINS,
};

/// Launches runtime kernel `entry` on `stream` with `(CTAs, threads per CTA)` `shape`
/// (programmatically when `programmatic`, see [`RawLaunch::programmatic`]), keeping `keep`
/// alive until it is done.
///
/// # Safety
/// `params` match `entry`'s signature, `cpu` does what the entry does, and every address
/// they carry lies in a buffer of `keep`.
unsafe fn launch(
    stream: &Stream,
    entry: &'static str,
    (grid, block): (u32, u32),
    params: &[ParamBytes],
    cpu: Arc<dyn Fn() + Send + Sync>,
    keep: Vec<Arc<Buffer>>,
    programmatic: bool,
) -> Result<Arc<Event>> {
    let l = RawLaunch {
        kernel: entry,
        module: &RUNTIME_PTX,
        entry,
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_smem: 0,
        params,
        cpu,
        programmatic,
    };
    // SAFETY: the caller's contract.
    unsafe { stream.launch_raw(&l, keep) }
}

/// The context of a runtime wait kernel (one CTA, no begin flag, no remap, no trace):
/// launch `launch_id`, polling without sleep for `poll_spin_ns`, giving up after
/// `timeout_ns` into the error log `errors`.
pub(crate) fn wait_ctx(launch_id: u32, timeout_ns: u64, poll_spin_ns: u32, errors: *mut ErrorLog) -> KernelCtx {
    KernelCtx {
        begin_flag: std::ptr::null_mut(),
        begin_token: 0,
        begin_cta: 0,
        launch_id,
        poll_spin_ns,
        remap: CtaRemap::IDENTITY,
        tile_grid: [1; MAX_RANK],
        num_tiles: 1,
        timeout_ns,
        errors,
        trace: std::ptr::null_mut(),
    }
}

/// Enqueues AsyncStream's wait kernel on `stream`: it holds later work there until the
/// begin flag at `flag` reaches `token` (the previous launch started a CTA) and the work
/// before it on the stream has ended. `programmatic`: launched programmatically (it may
/// start while that work runs, and waits for it itself).
pub(crate) fn wait_begin(
    stream: &Stream,
    flag: &Arc<Buffer>,
    token: i32,
    ctx: KernelCtx,
    programmatic: bool,
) -> Result<Arc<Event>> {
    let addr = flag.addr();
    let params = [param_bytes(&addr), param_bytes(&token), param_bytes(&ctx)];
    let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        // SAFETY: `addr` is the begin flag's buffer, kept alive by the launch.
        unsafe { megaops_runtime_kernels::wait_begin(addr as *const i32, token, ctx) }
    });
    // SAFETY: `megaops_wait_begin(flag: *const i32, token: i32, ctx: KernelCtx)`; the
    // flag's buffer is kept; the context's pointers (error log, no trace) are the
    // device's own.
    unsafe {
        launch(
            stream,
            "megaops_wait_begin",
            (1, 32),
            &params,
            cpu,
            vec![flag.clone()],
            programmatic,
        )
    }
}

/// Enqueues [`megaops_runtime_kernels::wait_word`] on `stream`: later work there waits
/// until word `index` of `words` reaches `target` (or the wait times out, reported as
/// semaphore `index` of tensor `tensor_id` under `ctx.launch_id`).
pub(crate) fn wait_word(
    stream: &Stream,
    words: &Arc<Buffer>,
    index: u32,
    target: i32,
    tensor_id: u32,
    ctx: KernelCtx,
) -> Result<Arc<Event>> {
    let addr = word_addr(words, index)?;
    let params = [
        param_bytes(&addr),
        param_bytes(&target),
        param_bytes(&tensor_id),
        param_bytes(&index),
        param_bytes(&ctx),
    ];
    let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        // SAFETY: `addr` lies in `words` (checked), kept alive by the launch.
        unsafe { megaops_runtime_kernels::wait_word(addr as *const i32, target, tensor_id, index, ctx) }
    });
    // SAFETY: `megaops_wait_word(word: *const i32, target: i32, tensor_id: u32,
    // sem_index: u32, ctx: KernelCtx)`; the word lies in `words`, which the launch keeps;
    // the context's pointers are the device's own.
    unsafe {
        launch(
            stream,
            "megaops_wait_word",
            (1, 32),
            &params,
            cpu,
            vec![words.clone()],
            false,
        )
    }
}

/// The address of 32-bit word `index` of `words`, checked to lie inside it.
fn word_addr(words: &Buffer, index: u32) -> Result<u64> {
    if (index as usize + 1) * 4 > words.len() {
        return Err(Error::Internal(format!(
            "word {index} lies outside a {}-byte buffer",
            words.len()
        )));
    }
    Ok(words.addr() + 4 * index as u64)
}

/// Sets each of `spans` on `stream` with [`megaops_runtime_kernels::fill_spans`]: one
/// launch per [`MAX_FILL_SPANS`] spans (none for an empty list).
///
/// # Safety
/// Every span lies in a buffer of `keep`.
pub(crate) unsafe fn fill_spans(stream: &Stream, spans: &[FillSpan], keep: &[Arc<Buffer>]) -> Result<()> {
    for chunk in spans.chunks(MAX_FILL_SPANS) {
        let mut table = FillSpans {
            count: chunk.len() as u32,
            _pad: 0,
            spans: [FillSpan::default(); MAX_FILL_SPANS],
        };
        table.spans[..chunk.len()].copy_from_slice(chunk);
        let params = [param_bytes(&table)];
        let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            // SAFETY: every span lies in a buffer of `keep`, kept by the launch.
            unsafe { megaops_runtime_kernels::fill_spans(&table) }
        });
        // SAFETY: `megaops_fill_spans(table: FillSpans)`, by value; the spans lie in
        // `keep` (the caller's contract).
        unsafe {
            launch(
                stream,
                "megaops_fill_spans",
                (chunk.len() as u32, 128),
                &params,
                cpu,
                keep.to_vec(),
                false,
            )?
        };
    }
    Ok(())
}

/// Fills the 32-bit words `first..first + n` of `buffer` with `value` on `stream` by a
/// kernel (no host copy).
pub(crate) fn fill_words(stream: &Stream, buffer: &Arc<Buffer>, first: u64, n: u64, value: u32) -> Result<Arc<Event>> {
    if first
        .checked_add(n)
        .is_none_or(|end| end.saturating_mul(4) > buffer.len() as u64)
    {
        return Err(Error::Internal(format!(
            "a fill of words {first}..{first}+{n} overruns a {}-byte buffer",
            buffer.len()
        )));
    }
    let addr = buffer.addr() + 4 * first;
    let params = [param_bytes(&addr), param_bytes(&n), param_bytes(&value)];
    let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        // SAFETY: the buffer holding `n` words at `addr` is kept by the launch.
        unsafe { megaops_runtime_kernels::fill_u32(addr as *mut u32, n, value) }
    });
    let blocks = n.div_ceil(256).clamp(1, 4096) as u32;
    // SAFETY: `megaops_fill_u32(dst: *mut u32, n: u64, value: u32)`; the words lie in
    // `buffer` (checked above), which the launch keeps.
    unsafe {
        launch(
            stream,
            "megaops_fill_u32",
            (blocks, 256),
            &params,
            cpu,
            vec![buffer.clone()],
            false,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use crate::tensor::Tensor;
    use megaops_device::cpu::VgpuConfig;

    /// Every entry the runtime launches is in the embedded PTX of every architecture (the
    /// CPU backend runs the bodies, so only this sees an entry lost from the PTX).
    #[test]
    fn the_runtime_ptx_has_every_entry_the_runtime_launches() {
        let entries = [
            "megaops_wait_begin",
            "megaops_wait_word",
            "megaops_fill_spans",
            "megaops_fill_u32",
            "megaops_subkernel_proxy_0",
            "megaops_subkernel_proxy_1",
            "megaops_subkernel_proxy_2",
            "megaops_subkernel_proxy_3",
            "megaops_subkernel_release_0",
            "megaops_subkernel_release_1",
            "megaops_subkernel_release_2",
            "megaops_subkernel_release_3",
        ];
        assert!(!RUNTIME_PTX.ptx.is_empty());
        for (arch, ptx) in RUNTIME_PTX.ptx {
            for e in entries {
                assert!(
                    ptx.contains(&format!(".entry {e}(")),
                    "{arch}: no `.entry {e}` in the runtime kernels' PTX"
                );
            }
        }
    }

    /// Spans of several tensors, more than one launch's worth, each set to its own value;
    /// words outside the spans stay as they were.
    #[test]
    fn fill_spans_sets_every_span_across_launches() -> Result<()> {
        let device = Device::cpu(VgpuConfig::default())?;
        let stream = Stream::new(&device)?;
        let sizes: Vec<usize> = (0..MAX_FILL_SPANS + 7).map(|i| 1 + (i * 37) % 300).collect();
        let tensors: Vec<Tensor<i32>> = sizes
            .iter()
            .map(|&n| Tensor::from_slice(&device, &[n + 1], &vec![-1; n + 1]))
            .collect::<Result<_>>()?;
        let spans: Vec<FillSpan> = tensors
            .iter()
            .zip(&sizes)
            .enumerate()
            .map(|(i, (t, &n))| FillSpan {
                addr: t.addr(),
                words: n as u32,
                value: i as i32 * 3,
            })
            .collect();
        let keep: Vec<_> = tensors.iter().map(|t| t.buffer().clone()).collect();
        // SAFETY: every span lies in its own tensor, whose buffer is in `keep`.
        unsafe { fill_spans(&stream, &spans, &keep)? };
        stream.synchronize()?;
        for (i, (t, &n)) in tensors.iter().zip(&sizes).enumerate() {
            let v = t.to_vec()?;
            assert!(v[..n].iter().all(|&x| x == i as i32 * 3), "span {i}: {v:?}");
            assert_eq!(v[n], -1, "span {i} wrote past its end");
        }
        // SAFETY: no spans.
        unsafe { fill_spans(&stream, &[], &[])? };
        Ok(())
    }
}
