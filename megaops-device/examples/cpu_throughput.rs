//! Emulated throughput of the CPU backend's virtual GPU.
//!
//! `cargo run --release -p megaops-device --example cpu_throughput`
//!
//! Three workloads, each run twice on one virtual GPU (the first run also allocates the
//! coroutine stacks; the second reuses them): barrier-heavy CTAs, warp-shuffle reductions,
//! and a producer/consumer pair overlapped on two streams through per-tile semaphores.
//!
//! Rates are per second of scheduler time (wall clock) and, less sensitive to other
//! processes on a shared host, per second of the scheduling thread's CPU time.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Instant;

use megaops_device::Dim3;
use megaops_device::cpu::{CpuLaunch, VgpuConfig, VgpuStats, VirtualGpu, hooks};
use megaops_device::sync::WaitSite;

fn tid() -> u32 {
    hooks::thread_idx().x
}

fn report(name: &str, before: VgpuStats, after: VgpuStats, wall: f64, cpu: f64) {
    let switches = after.switches - before.switches;
    let threads = after.threads - before.threads;
    let ctas = after.ctas - before.ctas;
    let busy = (after.busy - before.busy).as_secs_f64();
    println!(
        "{name:<34} {ctas:>6} CTAs {threads:>8} threads {switches:>9} switches in {:>7.1} ms: \
         {:>6.2} M switches/s, {:>6.2} M threads/s, {:>8.0} CTAs/s; {:>6.2} M switches/CPU-s",
        wall * 1e3,
        switches as f64 / busy / 1e6,
        threads as f64 / busy / 1e6,
        ctas as f64 / busy,
        switches as f64 / cpu / 1e6,
    );
}

fn run(gpu: &VirtualGpu, name: &str, submit: &dyn Fn(&VirtualGpu)) {
    for pass in ["first", "again"] {
        let before = gpu.stats();
        let t0 = Instant::now();
        let cpu0 = thread_cpu_time();
        submit(gpu);
        gpu.synchronize().unwrap_or_else(|e| panic!("{name}: {e}"));
        let cpu = thread_cpu_time() - cpu0;
        report(
            &format!("{name} ({pass})"),
            before,
            gpu.stats(),
            t0.elapsed().as_secs_f64(),
            cpu,
        );
    }
}

/// CPU time of the calling thread in seconds (the scheduler runs on it).
fn thread_cpu_time() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable `timespec`; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    // `cpu_throughput [cta_slice]`: the turn length to measure (default: the default).
    let mut cfg = VgpuConfig::default();
    if let Some(slice) = std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        cfg.cta_slice = slice;
    }
    let gpu = VirtualGpu::new(cfg);
    let cfg = gpu.config();
    println!(
        "virtual GPU: {} SMs x {} threads, stack {} KiB, cta_slice {}; {} host CPUs",
        cfg.sms,
        cfg.max_threads_per_sm,
        cfg.stack_size / 1024,
        cfg.cta_slice,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let s0 = gpu.create_stream();
    let s1 = gpu.create_stream();

    run(&gpu, "barriers: 256x256, 16 bar.sync", &|g| {
        g.launch(
            s0,
            CpuLaunch::new("barriers", Dim3::new(256, 1, 1), Dim3::new(256, 1, 1), || {
                for _ in 0..16 {
                    hooks::barrier(0, None);
                }
            }),
        )
        .expect("valid launch");
    });

    run(&gpu, "shuffles: 256x256, 4x5 shfl.xor", &|g| {
        g.launch(
            s0,
            CpuLaunch::new("shuffles", Dim3::new(256, 1, 1), Dim3::new(256, 1, 1), || {
                let lane = tid() % 32;
                let mut v = lane;
                for _ in 0..4 {
                    for m in [16, 8, 4, 2, 1] {
                        v = v.wrapping_add(hooks::warp_exchange(u32::MAX, v)[(lane ^ m) as usize]);
                    }
                }
                std::hint::black_box(v);
            }),
        )
        .expect("valid launch");
    });

    run(&gpu, "overlap: 2 streams, 512 tiles x128", &|g| {
        // The consumer is launched first and could fill every SM; as AsyncStream does, a
        // tiny kernel ahead of it waits until the producer has started a CTA.
        const TILES: u32 = 512;
        let sem: Arc<Vec<AtomicI32>> = Arc::new((0..TILES).map(|_| AtomicI32::new(0)).collect());
        let begin = Arc::new(AtomicI32::new(0));
        let data: Arc<Vec<AtomicU32>> = Arc::new((0..TILES * 128).map(|_| AtomicU32::new(0)).collect());
        let f = begin.clone();
        g.launch(
            s1,
            CpuLaunch::new("wait_begin", Dim3::new(1, 1, 1), Dim3::new(1, 1, 1), move || {
                let site = WaitSite {
                    sem: f.as_ptr(),
                    target: 1,
                    launch_id: 1,
                    tile: 0,
                    tensor_id: 0,
                    sem_index: 0,
                };
                hooks::wait_until(&site);
            }),
        )
        .expect("valid launch");
        let (s, d) = (sem.clone(), data.clone());
        g.launch(
            s1,
            CpuLaunch::new("consumer", Dim3::new(TILES, 1, 1), Dim3::new(128, 1, 1), move || {
                let c = hooks::block_idx().x;
                let site = WaitSite {
                    sem: s[c as usize].as_ptr(),
                    target: 1,
                    launch_id: 3,
                    tile: c,
                    tensor_id: 1,
                    sem_index: c,
                };
                hooks::wait_until(&site);
                std::hint::black_box(d[(c * 128 + tid()) as usize].load(Ordering::Relaxed));
            }),
        )
        .expect("valid launch");
        let (s, d, f) = (sem.clone(), data.clone(), begin.clone());
        g.launch(
            s0,
            CpuLaunch::new("producer", Dim3::new(TILES, 1, 1), Dim3::new(128, 1, 1), move || {
                let c = hooks::block_idx().x;
                if tid() == 0 {
                    f.store(1, Ordering::Release);
                }
                d[(c * 128 + tid()) as usize].store(c, Ordering::Relaxed);
                hooks::barrier(0, None);
                if tid() == 0 {
                    s[c as usize].fetch_add(1, Ordering::Release);
                }
            }),
        )
        .expect("valid launch");
    });

    let st = gpu.stats();
    println!(
        "total: {} kernels, {} CTAs, {} threads, {} switches, {} stacks, {:?} busy: {:.2} M switches/s; peak RSS {}; \
         {} memory mappings",
        st.kernels,
        st.ctas,
        st.threads,
        st.switches,
        st.stacks,
        st.busy,
        st.switches_per_second() / 1e6,
        peak_rss(),
        mappings()
    );
}

/// Memory mappings (kernel VMAs) of this process (Linux), for the `vm.max_map_count`
/// budget the coroutine stacks draw on.
fn mappings() -> String {
    std::fs::read_to_string("/proc/self/maps").map_or_else(|_| "unknown".to_string(), |s| s.lines().count().to_string())
}

/// Peak resident set size of this process (Linux), for the memory bound of the stacks.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}
