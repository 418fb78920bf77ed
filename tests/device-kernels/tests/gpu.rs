//! Runs every test kernel on GPU 0 (through cudarc directly) and compares what it wrote
//! with the CPU references of this crate. Each test prints why it is skipped when there is
//! no CUDA driver or GPU. Run with `--test-threads=1` to keep the timing-sensitive message
//! passing test alone on the GPU.

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use megaops_device_kernels::ptx::MODULES;
use megaops_device_kernels::*;
use std::sync::Arc;

/// A context on GPU 0 (event tracking off, as MegaOps runs), a non-blocking stream and
/// this crate's module for the GPU's architecture.
struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    module: Arc<CudaModule>,
}

/// GPU 0, or `None` after printing why the test is skipped. `MEGAOPS_REQUIRE_GPU=1`
/// turns the skip into a failure (for the GPU machine).
fn gpu(test: &str) -> Option<Gpu> {
    // SAFETY: only probes whether the driver library can be loaded.
    let ctx = if unsafe { cudarc::driver::sys::is_culib_present() } {
        CudaContext::new(0).map_err(|e| format!("{e:?}"))
    } else {
        Err("the CUDA driver library (libcuda.so) is not installed".to_string())
    };
    let ctx = match ctx {
        Ok(ctx) => ctx,
        Err(why) => {
            assert!(
                std::env::var_os("MEGAOPS_REQUIRE_GPU").is_none(),
                "{test}: a GPU is required but: {why}"
            );
            eprintln!("SKIPPED {test}: no CUDA device ({why})");
            return None;
        }
    };
    // SAFETY: set before any allocation; kernels are ordered by stream syncs only.
    unsafe { ctx.disable_event_tracking() };
    let (major, minor) = ctx.compute_capability().expect("compute capability");
    let cc = (major * 10 + minor) as u32;
    let (arch, ptx) = MODULES
        .iter()
        .filter(|(a, _)| {
            a.trim_start_matches("sm_")
                .trim_end_matches('a')
                .parse::<u32>()
                .unwrap_or(0)
                <= cc
        })
        .max_by_key(|(a, _)| {
            a.trim_start_matches("sm_")
                .trim_end_matches('a')
                .parse::<u32>()
                .unwrap_or(0)
        })
        .expect("a PTX module for this GPU");
    eprintln!("{test}: {} (sm_{cc}), module {arch}", ctx.name().unwrap_or_default());
    let module = ctx.load_module(Ptx::from_src(*ptx)).expect("loading the PTX");
    // Not `default_stream()`: the legacy NULL stream waits for all other streams, which
    // would serialise the two kernels of the message-passing test.
    let stream = ctx.new_stream().expect("a stream");
    Some(Gpu { stream, ctx, module })
}

impl Gpu {
    fn f(&self, name: &str) -> CudaFunction {
        self.module.load_function(name).expect("kernel in module")
    }
    fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(&self, n: usize) -> CudaSlice<T> {
        self.stream.alloc_zeros(n).expect("alloc")
    }
    fn upload<T: cudarc::driver::DeviceRepr>(&self, v: &[T]) -> CudaSlice<T> {
        self.stream.clone_htod(v).expect("upload")
    }
    fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, d: &CudaSlice<T>) -> Vec<T> {
        self.stream.synchronize().expect("kernel failed");
        self.stream.clone_dtoh(d).expect("download")
    }
}

fn cfg(grid: (u32, u32, u32), block: (u32, u32, u32), smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: block,
        shared_mem_bytes: smem,
    }
}

/// The first differences between `got` and `want`, or `Ok`.
fn compare<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T], per: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(12)
        .map(|i| format!("  [{}][{}]: got {:?}, want {:?}", i / per, i % per, got[i], want[i]))
        .collect();
    let n_bad = (0..got.len()).filter(|&i| got[i] != want[i]).count();
    assert!(
        bad.is_empty(),
        "{what}: {n_bad} of {} words differ ([thread][word]):\n{}",
        got.len(),
        bad.join("\n")
    );
    eprintln!("{what}: {} words match", got.len());
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: reading the bytes of a `Copy` value of a `#[repr(C)]` type.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }.to_vec()
}

fn from_bytes<T: Copy>(b: &[u8]) -> T {
    assert_eq!(b.len(), size_of::<T>());
    // SAFETY: `b` holds a `T` written by the kernel (all bit patterns valid for its fields).
    unsafe { (b.as_ptr() as *const T).read_unaligned() }
}

#[test]
fn indices_and_barriers() {
    let Some(g) = gpu("indices_and_barriers") else {
        return;
    };
    let (grid, block) = ((3, 2, 1), (8, 4, 2));
    let out = g.zeros::<u32>(6 * 64 * indices::INDEX_WORDS);
    // SAFETY: the buffer has the size the kernel documents for this launch.
    unsafe {
        g.stream
            .launch_builder(&g.f("thread_indices"))
            .arg(&out)
            .launch(cfg(grid, block, 0))
    }
    .unwrap();
    let want = indices::reference::thread_indices(
        megaops_device::Dim3::new(grid.0, grid.1, grid.2),
        megaops_device::Dim3::new(block.0, block.1, block.2),
    );
    compare("thread_indices", &g.download(&out), &want, indices::INDEX_WORDS);

    let out = g.zeros::<u32>(3 * 128 * indices::BARRIER_WORDS);
    // SAFETY: as documented: block 128, 8 words per thread.
    unsafe {
        g.stream
            .launch_builder(&g.f("barriers"))
            .arg(&out)
            .launch(cfg((3, 1, 1), (128, 1, 1), 0))
    }
    .unwrap();
    compare(
        "barriers",
        &g.download(&out),
        &indices::reference::barriers(3),
        indices::BARRIER_WORDS,
    );
}

#[test]
fn shared_memory() {
    let Some(g) = gpu("shared_memory") else {
        return;
    };
    let out = g.zeros::<u32>(2 * 256);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("shared_static_a"))
            .arg(&out)
            .launch(cfg((2, 1, 1), (256, 1, 1), 0))
    }
    .unwrap();
    compare(
        "shared_static_a",
        &g.download(&out),
        &shared_mem::reference::shared_static_a(2),
        256,
    );

    let out = g.zeros::<u32>(2 * 64 * 4);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("shared_static_b"))
            .arg(&out)
            .launch(cfg((2, 1, 1), (64, 1, 1), 0))
    }
    .unwrap();
    compare(
        "shared_static_b",
        &g.download(&out),
        &shared_mem::reference::shared_static_b(2),
        4,
    );

    let out = g.zeros::<u32>(2 * 64 * shared_mem::DYNAMIC_WORDS);
    let c = cfg((2, 1, 1), (64, 1, 1), shared_mem::DYNAMIC_BYTES);
    // SAFETY: as documented.
    unsafe { g.stream.launch_builder(&g.f("shared_dynamic")).arg(&out).launch(c) }.unwrap();
    compare(
        "shared_dynamic",
        &g.download(&out),
        &shared_mem::reference::shared_dynamic(2),
        shared_mem::DYNAMIC_WORDS,
    );
}

#[test]
fn atomics_under_contention() {
    let Some(g) = gpu("atomics_under_contention") else {
        return;
    };
    let (ctas, threads) = (64u32, 256u32);
    let c = g.upload(&bytes_of(&atomics::Counters::INIT));
    // SAFETY: one `Counters`, initialised as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("atomics"))
            .arg(&c)
            .launch(cfg((ctas, 1, 1), (threads, 1, 1), 0))
    }
    .unwrap();
    let got: atomics::Counters = from_bytes(&g.download(&c));
    got.check(ctas * threads).unwrap();
    eprintln!("atomics: all counters match for {} threads", ctas * threads);
}

#[test]
fn message_passing_between_two_streams() {
    let Some(g) = gpu("message_passing_between_two_streams") else {
        return;
    };
    let consumer_stream = g.ctx.new_stream().unwrap();
    let (n, producers, consumers) = (1u32 << 20, 8u32, 4u32);
    let data = g.zeros::<u32>(n as usize);
    let flag = g.zeros::<i32>(1);
    let out = g.upload(&bytes_of(&message::MpResult::default()));
    g.stream.synchronize().unwrap();
    let (target, timeout_ns, delay_ns) = (producers as i32, 2_000_000_000u64, 200_000u32);
    let (consumer, producer) = (g.f("mp_consumer"), g.f("mp_producer"));
    // With lazy module loading (CUDA's default), the first launch of a kernel loads it,
    // and loading may wait until the running kernels finish: the producer would then
    // only start after the consumer gave up. Load both before either runs.
    for f in [&consumer, &producer] {
        // SAFETY: a valid function handle of a loaded module.
        let r = unsafe { cudarc::driver::sys::cuFuncLoad(f.cu_function()) };
        assert_eq!(r, cudarc::driver::sys::CUresult::CUDA_SUCCESS, "cuFuncLoad");
    }
    // The consumer first, on its own stream: it must wait for the producer.
    let f = consumer;
    let mut launch = consumer_stream.launch_builder(&f);
    launch
        .arg(&data)
        .arg(&flag)
        .arg(&target)
        .arg(&n)
        .arg(&timeout_ns)
        .arg(&out);
    // SAFETY: buffers as documented; the flag starts at 0.
    unsafe { launch.launch(cfg((consumers, 1, 1), (128, 1, 1), 0)) }.unwrap();
    let f = producer;
    let mut launch = g.stream.launch_builder(&f);
    launch.arg(&data).arg(&flag).arg(&n).arg(&delay_ns);
    // SAFETY: buffers as documented.
    unsafe { launch.launch(cfg((producers, 1, 1), (256, 1, 1), 0)) }.unwrap();
    consumer_stream.synchronize().unwrap();
    let got: message::MpResult = from_bytes(&g.download(&out));
    eprintln!("message passing: {got:?}");
    let want = message::reference::mp_result(consumers, producers, n, got.waited_ns);
    assert_eq!(got, want);
    assert!(
        got.waited_ns > 0 && got.waited_ns < timeout_ns,
        "the consumer did not wait: {got:?}"
    );
}

#[test]
fn vector_loads_and_stores() {
    let Some(g) = gpu("vector_loads_and_stores") else {
        return;
    };
    let n = 4096u32;
    let src: Vec<u32> = (0..n).map(|i| (i as f32 * 0.37 - 100.0).to_bits()).collect();
    let s = g.upload(&src);
    let d = g.zeros::<u32>(n as usize * vector::VECTOR_REGIONS);
    // SAFETY: sizes and alignment as documented (allocations are 256-byte aligned).
    unsafe {
        g.stream
            .launch_builder(&g.f("vector_copy"))
            .arg(&s)
            .arg(&d)
            .arg(&n)
            .launch(cfg((8, 1, 1), (128, 1, 1), 0))
    }
    .unwrap();
    compare(
        "vector_copy",
        &g.download(&d),
        &vector::reference::vector_copy(&src),
        n as usize,
    );
}

#[test]
fn cp_async() {
    let Some(g) = gpu("cp_async") else { return };
    let ctas = 3usize;
    let src: Vec<u8> = (0..ctas * copy_async::CP_SRC_BYTES)
        .map(|i| (i * 131 % 251) as u8 + 1)
        .collect();
    let s = g.upload(&src);
    let out = g.zeros::<u32>(ctas * 64 * copy_async::CP_WORDS);
    let c = cfg(
        (ctas as u32, 1, 1),
        (copy_async::CP_BLOCK, 1, 1),
        copy_async::CP_SMEM_BYTES,
    );
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("cp_async_copy"))
            .arg(&s)
            .arg(&out)
            .launch(c)
    }
    .unwrap();
    compare(
        "cp_async_copy",
        &g.download(&out),
        &copy_async::reference::cp_async_copy(&src),
        copy_async::CP_WORDS,
    );
}

#[test]
fn ldmatrix_and_mma() {
    let Some(g) = gpu("ldmatrix_and_mma") else {
        return;
    };
    let out = g.zeros::<u32>(32 * tensor_core::PROBE_WORDS);
    // SAFETY: as documented: one warp.
    unsafe {
        g.stream
            .launch_builder(&g.f("ldmatrix_probe"))
            .arg(&out)
            .launch(cfg((1, 1, 1), (32, 1, 1), 0))
    }
    .unwrap();
    compare(
        "ldmatrix_probe",
        &g.download(&out),
        &tensor_core::reference::ldmatrix_probe(),
        tensor_core::PROBE_WORDS,
    );

    let (a, b, c) = tensor_core::reference::mma_inputs();
    let bt = tensor_core::reference::transpose(&b);
    let want: Vec<u32> = tensor_core::reference::mma_tile(&a, &b, &c)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let to_bf16 = |v: &[f32]| {
        v.iter()
            .map(|&x| half::bf16::from_f32(x).to_bits())
            .collect::<Vec<u16>>()
    };
    let to_f16 = |v: &[f32]| {
        v.iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect::<Vec<u16>>()
    };
    for (kernel, conv) in [
        ("mma_bf16", &to_bf16 as &dyn Fn(&[f32]) -> Vec<u16>),
        ("mma_f16", &to_f16),
    ] {
        let (da, db, dbt, dc) = (
            g.upload(&conv(&a)),
            g.upload(&conv(&b)),
            g.upload(&conv(&bt)),
            g.upload(&c),
        );
        let d = g.zeros::<f32>(2 * 16 * 16);
        let f = g.f(kernel);
        let mut launch = g.stream.launch_builder(&f);
        launch.arg(&da).arg(&db).arg(&dbt).arg(&dc).arg(&d);
        // SAFETY: as documented: one warp, 16-byte aligned buffers of the documented sizes.
        unsafe { launch.launch(cfg((1, 1, 1), (32, 1, 1), 0)) }.unwrap();
        let got: Vec<u32> = g.download(&d).iter().map(|x| x.to_bits()).collect();
        compare(kernel, &got, &want, 16);
    }
}

#[test]
fn warp_collectives() {
    let Some(g) = gpu("warp_collectives") else {
        return;
    };
    let out = g.zeros::<u32>(2 * 64 * warp_ops::WARP_WORDS);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("warp_collectives"))
            .arg(&out)
            .launch(cfg((2, 1, 1), (64, 1, 1), 0))
    }
    .unwrap();
    compare(
        "warp_collectives",
        &g.download(&out),
        &warp_ops::reference::warp_collectives(128),
        warp_ops::WARP_WORDS,
    );
}

#[test]
fn conversions_round_like_half() {
    let Some(g) = gpu("conversions_round_like_half") else {
        return;
    };
    let inp = conversions::reference::convert_inputs();
    let n = inp.len() as u32;
    let i = g.upload(&inp);
    let out = g.zeros::<u32>(inp.len() * conversions::CONVERT_WORDS);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("convert"))
            .arg(&i)
            .arg(&out)
            .arg(&n)
            .launch(cfg((1, 1, 1), (n, 1, 1), 0))
    }
    .unwrap();
    compare(
        "convert",
        &g.download(&out),
        &conversions::reference::convert(&inp),
        conversions::CONVERT_WORDS,
    );
}

#[test]
fn math_fma_and_sfu_within_their_bounds() {
    let Some(g) = gpu("math_fma_and_sfu_within_their_bounds") else {
        return;
    };
    let inp = math::reference::math_inputs();
    let n = inp.len() as u32;
    let i = g.upload(&inp);
    let out = g.zeros::<u32>(inp.len() * math::MATH_WORDS);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("math"))
            .arg(&i)
            .arg(&out)
            .arg(&n)
            .launch(cfg((4, 1, 1), (128, 1, 1), 0))
    }
    .unwrap();
    let bad = math::reference::check_math(&inp, &g.download(&out));
    assert!(
        bad.is_empty(),
        "math: {} mismatches:\n{}",
        bad.len(),
        bad[..bad.len().min(12)].join("\n")
    );
}

#[test]
fn timers_and_fences() {
    let Some(g) = gpu("timers_and_fences") else {
        return;
    };
    let sleep_ns = 20_000u32;
    let out = g.zeros::<u64>(4 * timers::TIMER_WORDS);
    // SAFETY: as documented.
    unsafe {
        g.stream
            .launch_builder(&g.f("fences_and_timers"))
            .arg(&out)
            .arg(&sleep_ns)
            .launch(cfg((4, 1, 1), (32, 1, 1), 0))
    }
    .unwrap();
    let got = g.download(&out);
    eprintln!("timers: {got:?}");
    timers::reference::check_timers(&got, sleep_ns).unwrap();
}
