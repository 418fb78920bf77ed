//! Coroutine stacks of the CPU backend: many resident threads on several virtual GPUs at
//! once (within `vm.max_map_count`), and stack overflows reported as errors.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use megaops_device::Dim3;
use megaops_device::cpu::{CpuError, CpuLaunch, VgpuConfig, VirtualGpu, hooks};
use megaops_device::sync::WaitSite;

fn x(n: u32) -> Dim3 {
    Dim3::new(n, 1, 1)
}

fn linear_tid() -> u32 {
    hooks::thread_idx().x
}

/// Memory mappings (VMAs) of this process, where `/proc` tells.
fn mappings() -> Option<usize> {
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .map(|m| m.lines().count())
}

/// Six virtual GPUs of 8 SMs × 2048 resident threads, each with all 16384 threads alive
/// at once, run concurrently on six host threads. With a mapping and a guard page per
/// coroutine stack they would need 6 × 32768 VMAs, three times `vm.max_map_count`.
#[test]
fn six_full_virtual_gpus_run_concurrently() {
    const GPUS: usize = 6;
    const THREADS: u32 = 8 * 2048;
    let alive = Arc::new(Barrier::new(GPUS + 1));
    let counted = Arc::new(Barrier::new(GPUS + 1));
    let workers: Vec<_> = (0..GPUS)
        .map(|g| {
            let (alive, counted) = (alive.clone(), counted.clone());
            std::thread::spawn(move || {
                let run = || -> Result<(u64, u32), CpuError> {
                    let gpu = VirtualGpu::try_new(VgpuConfig {
                        sms: 8,
                        max_threads_per_sm: 2048,
                        seed: g as u64,
                        stack_size: 64 * 1024,
                        max_idle_switches: 2_000_000,
                        hang_timeout: Some(Duration::from_secs(120)),
                        ..VgpuConfig::default()
                    })?;
                    let s = gpu.create_stream();
                    // Every thread counts itself in, then waits for all 16384: two CTAs of
                    // 1024 per SM are resident at once, each thread holding its stack.
                    let started = Arc::new(AtomicI32::new(0));
                    let done = Arc::new(AtomicU32::new(0));
                    let (st, d) = (started.clone(), done.clone());
                    gpu.launch(
                        s,
                        CpuLaunch::new("all_resident", x(16), x(1024), move || {
                            st.fetch_add(1, Ordering::AcqRel);
                            let site = WaitSite {
                                sem: st.as_ptr(),
                                target: THREADS as i32,
                                launch_id: 1,
                                tile: hooks::block_idx().x,
                                tensor_id: 0,
                                sem_index: 0,
                            };
                            hooks::wait_until(&site);
                            hooks::barrier(0, None);
                            d.fetch_add(1, Ordering::Relaxed);
                        }),
                    )?;
                    gpu.synchronize()?;
                    // Keep the virtual GPU (and its stacks) alive while the mappings are
                    // counted.
                    alive.wait();
                    counted.wait();
                    Ok((gpu.stats().stacks, done.load(Ordering::Relaxed)))
                };
                let result = run();
                if result.is_err() {
                    // Do not leave the main thread waiting.
                    alive.wait();
                    counted.wait();
                }
                result
            })
        })
        .collect();
    alive.wait();
    let maps = mappings();
    counted.wait();
    for (g, w) in workers.into_iter().enumerate() {
        let (stacks, done) = w
            .join()
            .expect("worker thread")
            .unwrap_or_else(|e| panic!("virtual GPU {g}: {e}"));
        assert_eq!(done, THREADS, "virtual GPU {g}");
        assert_eq!(stacks, THREADS as u64, "virtual GPU {g}: every thread resident at once");
    }
    if let Some(maps) = maps {
        // A few dozen per virtual GPU; other tests of this binary add their own.
        assert!(maps < 2_000, "{maps} mappings with {GPUS} full virtual GPUs alive");
    }
}

/// A device whose stacks are small: 32 KiB plus the canary page, one SM of 64 threads
/// (so the first stack chunk has 64 slots, of which a 32-thread CTA uses the top half).
fn small_stacks(seed: u64) -> VgpuConfig {
    VgpuConfig {
        sms: 1,
        max_threads_per_sm: 64,
        max_threads_per_cta: 64,
        seed,
        stack_size: 32 * 1024,
        max_idle_switches: 100_000,
        hang_timeout: Some(Duration::from_secs(20)),
        ..VgpuConfig::default()
    }
}

/// 128 KiB of locals, written in full: far beyond a 32 KiB stack, through the slots of
/// the threads below it (which sit at a barrier), but not through the whole chunk.
#[inline(never)]
fn large_local_array(seed: u32) -> u32 {
    let mut a = [0u32; 32 * 1024];
    for (i, v) in a.iter_mut().enumerate() {
        *v = seed.wrapping_mul(i as u32) | 1;
    }
    black_box(&mut a);
    a[seed as usize % a.len()]
}

/// 128 KiB of locals of which only the top end is written: the frame is probed (one zero
/// word per 4 KiB), not filled. With `suspend`, the thread suspends inside the frame.
#[inline(never)]
fn large_frame(seed: u32, suspend: bool) -> u32 {
    let mut a = MaybeUninit::<[u32; 32 * 1024]>::uninit();
    let top = a.as_mut_ptr().cast::<u32>().wrapping_add(32 * 1024 - 1);
    // SAFETY: `top` is the last element of `a`, in bounds; only it is written and read.
    unsafe { top.write(seed) };
    black_box(&mut a);
    if suspend {
        hooks::yield_now();
    }
    // SAFETY: as above.
    unsafe { top.read() }
}

/// Runs a 32-thread kernel in which thread 5 calls `overflow` after a barrier (every
/// thread holds its stack by then, the threads on the slots below it sit at the next
/// barrier) and exits; returns the error of the run.
fn overflow_in(seed: u64, overflow: fn(u32) -> u32) -> (Arc<VirtualGpu>, CpuError) {
    let gpu = VirtualGpu::try_new(small_stacks(seed)).expect("valid config");
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("deep_locals", x(1), x(32), move || {
            hooks::barrier(0, None);
            if linear_tid() == 5 {
                black_box(overflow(linear_tid()));
                return;
            }
            hooks::barrier(0, None);
        }),
    )
    .expect("valid launch");
    let err = gpu.synchronize().expect_err("the stack overflow must be reported");
    (gpu, err)
}

fn assert_overflow(err: &CpuError) {
    match err {
        CpuError::StackOverflow {
            kernel,
            block,
            thread,
            stack_size,
        } => {
            assert_eq!(kernel, "deep_locals");
            assert_eq!(*block, Dim3::new(0, 0, 0));
            assert_eq!(*thread, Dim3::new(5, 0, 0));
            assert_eq!(*stack_size, 32 * 1024);
        }
        other => panic!("expected a stack overflow, got: {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("stack overflow in a kernel thread: raise VgpuConfig::stack_size"),
        "{message}"
    );
    assert!(
        message.contains("deep_locals") && message.contains("thread (5,0,0)"),
        "{message}"
    );
}

/// The virtual GPU still runs kernels after an overflow (on fresh stacks).
fn assert_recovers(gpu: &VirtualGpu) {
    let s = gpu.create_stream();
    let ran = Arc::new(AtomicU32::new(0));
    let r = ran.clone();
    gpu.launch(
        s,
        CpuLaunch::new("after_overflow", x(4), x(32), move || {
            hooks::barrier(0, None);
            r.fetch_add(1, Ordering::Relaxed);
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("the virtual GPU accepts new work");
    assert_eq!(ran.load(Ordering::Relaxed), 128);
}

/// Found when the thread exits: the array runs through the canary's top line.
#[test]
fn a_filled_local_array_beyond_the_stack_is_an_error() {
    for seed in 0..4 {
        let (gpu, err) = overflow_in(seed, large_local_array);
        assert_overflow(&err);
        assert_recovers(&gpu);
    }
}

/// Found when the thread suspends: its stack pointer lies below the floor.
#[test]
fn a_frame_beyond_the_stack_at_a_suspension_is_an_error() {
    for seed in 0..4 {
        let (gpu, err) = overflow_in(seed, |t| large_frame(t, true));
        assert_overflow(&err);
        assert_recovers(&gpu);
    }
}

/// Found when the thread exits, by the whole-page check of builds with debug assertions:
/// only a probe's zero word marks the canary (release builds can miss this one).
#[cfg(debug_assertions)]
#[test]
fn a_probed_frame_beyond_the_stack_is_an_error_in_debug_builds() {
    for seed in 0..4 {
        let (gpu, err) = overflow_in(seed, |t| large_frame(t, false));
        assert_overflow(&err);
        assert_recovers(&gpu);
    }
}

/// Deep but legal stack use: 24 KiB of locals on a 32 KiB stack.
#[test]
fn deep_stacks_within_the_limit_run() {
    #[inline(never)]
    fn deep(seed: u32) -> u32 {
        let mut a = [0u32; 6 * 1024];
        for (i, v) in a.iter_mut().enumerate() {
            *v = seed ^ i as u32;
        }
        black_box(&mut a);
        hooks::yield_now();
        a.iter().fold(0, |s, v| s ^ v)
    }
    let gpu = VirtualGpu::try_new(small_stacks(3)).expect("valid config");
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("deep_but_legal", x(8), x(32), || {
            hooks::barrier(0, None);
            black_box(deep(linear_tid()));
            hooks::barrier(0, None);
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("24 KiB of locals fit a 32 KiB stack");
}
