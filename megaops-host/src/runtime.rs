//! Launching the runtime's own kernels (`megaops-runtime-kernels`).

use crate::error::Result;
use crate::module::PtxModule;
use crate::stream::{Event, RawLaunch, Stream};
use crate::tensor::Tensor;
use megaops_device::sync::KernelCtx;
use std::sync::Arc;

/// PTX of the runtime kernels.
pub(crate) static RUNTIME_PTX: PtxModule = PtxModule {
    name: "megaops-runtime-kernels",
    ptx: megaops_runtime_kernels::ptx::MODULES,
};

fn bytes<V: Copy>(v: &V) -> Vec<u8> {
    // SAFETY: reading the bytes of a Copy value of a repr(C)/primitive type.
    unsafe { std::slice::from_raw_parts(v as *const V as *const u8, size_of::<V>()) }.to_vec()
}

/// Enqueues AsyncStream's wait kernel on `stream`: it holds later work there until the
/// begin flag at `flag` reaches `token` (the previous launch started a CTA).
pub(crate) fn wait_begin(stream: &Stream, flag: &Tensor<i32>, token: i32, ctx: KernelCtx) -> Result<Arc<Event>> {
    let addr = flag.addr();
    let params = [bytes(&addr), bytes(&token), bytes(&ctx)];
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

/// Fills `n` u32 words at `tensor`'s address with `value` on `stream` (no host copy).
pub(crate) fn fill_words(
    stream: &Stream,
    addr: u64,
    n: u64,
    value: u32,
    keep: Arc<crate::buffer::Buffer>,
) -> Result<Arc<Event>> {
    let params = [bytes(&addr), bytes(&n), bytes(&value)];
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
