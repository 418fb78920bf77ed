//! Launching the runtime's own kernels (`megaops-runtime-kernels`).

use crate::error::Result;
use crate::module::PtxModule;
use crate::param::param_bytes;
use crate::stream::{Event, RawLaunch, Stream};
use crate::tensor::Tensor;
use megaops_device::sync::KernelCtx;
use megaops_runtime_kernels::{FillSpan, FillSpans, MAX_FILL_SPANS};
use std::sync::Arc;

/// PTX of the runtime kernels.
pub(crate) static RUNTIME_PTX: PtxModule = PtxModule {
    name: "megaops-runtime-kernels",
    ptx: megaops_runtime_kernels::ptx::MODULES,
};

/// Enqueues AsyncStream's wait kernel on `stream`: it holds later work there until the
/// begin flag at `flag` reaches `token` (the previous launch started a CTA).
pub(crate) fn wait_begin(stream: &Stream, flag: &Tensor<i32>, token: i32, ctx: KernelCtx) -> Result<Arc<Event>> {
    let addr = flag.addr();
    let params = [param_bytes(&addr), param_bytes(&token), param_bytes(&ctx)];
    let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        // SAFETY: `addr` is the begin flag tensor, kept alive by the retention below.
        unsafe { megaops_runtime_kernels::wait_begin(addr as *const i32, token, ctx) }
    });
    let l = RawLaunch {
        kernel: "megaops_wait_begin",
        module: &RUNTIME_PTX,
        entry: "megaops_wait_begin",
        grid: [1, 1, 1],
        block: [32, 1, 1],
        dynamic_smem: 0,
        params: &params,
        cpu,
    };
    stream.launch_raw(&l, vec![flag.buffer().clone()])
}

/// Sets each of `spans` on `stream` with [`megaops_runtime_kernels::fill_spans`]: one
/// launch per [`MAX_FILL_SPANS`] spans (none for an empty list). `keep` holds the buffers
/// the spans lie in.
pub(crate) fn fill_spans(stream: &Stream, spans: &[FillSpan], keep: &[Arc<crate::buffer::Buffer>]) -> Result<()> {
    for chunk in spans.chunks(MAX_FILL_SPANS) {
        let mut table = FillSpans {
            count: chunk.len() as u32,
            _pad: 0,
            spans: [FillSpan::default(); MAX_FILL_SPANS],
        };
        table.spans[..chunk.len()].copy_from_slice(chunk);
        let params = [param_bytes(&table)];
        let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            // SAFETY: every span lies in a buffer of `keep`, retained by the launch.
            unsafe { megaops_runtime_kernels::fill_spans(&table) }
        });
        let l = RawLaunch {
            kernel: "megaops_fill_spans",
            module: &RUNTIME_PTX,
            entry: "megaops_fill_spans",
            grid: [chunk.len() as u32, 1, 1],
            block: [128, 1, 1],
            dynamic_smem: 0,
            params: &params,
            cpu,
        };
        stream.launch_raw(&l, keep.to_vec())?;
    }
    Ok(())
}

/// Fills `n` u32 words at `tensor`'s address with `value` on `stream` (no host copy).
pub(crate) fn fill_words(
    stream: &Stream,
    addr: u64,
    n: u64,
    value: u32,
    keep: Arc<crate::buffer::Buffer>,
) -> Result<Arc<Event>> {
    let params = [param_bytes(&addr), param_bytes(&n), param_bytes(&value)];
    let cpu: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        // SAFETY: the buffer holding `n` words at `addr` is retained by the launch.
        unsafe { megaops_runtime_kernels::fill_u32(addr as *mut u32, n, value) }
    });
    let blocks = n.div_ceil(256).clamp(1, 4096) as u32;
    let l = RawLaunch {
        kernel: "megaops_fill_u32",
        module: &RUNTIME_PTX,
        entry: "megaops_fill_u32",
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        dynamic_smem: 0,
        params: &params,
        cpu,
    };
    stream.launch_raw(&l, vec![keep])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use megaops_device::cpu::VgpuConfig;

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
        fill_spans(&stream, &spans, &keep)?;
        stream.synchronize()?;
        for (i, (t, &n)) in tensors.iter().zip(&sizes).enumerate() {
            let v = t.to_vec()?;
            assert!(v[..n].iter().all(|&x| x == i as i32 * 3), "span {i}: {v:?}");
            assert_eq!(v[n], -1, "span {i} wrote past its end");
        }
        fill_spans(&stream, &[], &[])?;
        Ok(())
    }
}
