//! The CPU backend end to end: kernels written as closures that call the hooks directly.
//!
//! Every test that could deadlock or hang relies on the virtual GPU's structural deadlock
//! detection and its hang limits (set low here), so none of them can hang the suite.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use megaops_device::Dim3;
use megaops_device::cpu::{CpuError, CpuLaunch, ThreadWait, VgpuConfig, VirtualGpu, hooks};
use megaops_device::sync::{ErrorLog, WaitSite};

const FULL: u32 = u32::MAX;

/// A small device with tight hang limits, so that no test can run away.
fn cfg(seed: u64) -> VgpuConfig {
    VgpuConfig {
        seed,
        stack_size: 64 * 1024,
        max_idle_switches: 200_000,
        hang_timeout: Some(Duration::from_secs(20)),
        ..VgpuConfig::default()
    }
}

fn x(n: u32) -> Dim3 {
    Dim3::new(n, 1, 1)
}

fn linear_tid() -> u32 {
    let t = hooks::thread_idx();
    let b = hooks::block_dim();
    t.x + t.y * b.x + t.z * b.x * b.y
}

fn lane() -> u32 {
    linear_tid() % 32
}

fn site(sem: &AtomicI32, target: i32, tensor_id: u32, sem_index: u32) -> WaitSite {
    WaitSite {
        sem: sem.as_ptr(),
        target,
        launch_id: 7,
        tile: hooks::block_idx().x,
        tensor_id,
        sem_index,
    }
}

fn sems(n: usize) -> Arc<Vec<AtomicI32>> {
    Arc::new((0..n).map(|_| AtomicI32::new(0)).collect())
}

#[test]
fn barriers_with_partial_exits() {
    // Thread t passes `t % 4` count-less barriers, then exits: each barrier phase must
    // complete once the threads that already exited stop counting.
    let n = 96u32;
    let marks: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
    let passes = Arc::new(AtomicU32::new(0));
    let bad = Arc::new(AtomicU32::new(0));
    let gpu = VirtualGpu::new(cfg(1));
    let s = gpu.create_stream();
    let (m, p, b) = (marks.clone(), passes.clone(), bad.clone());
    let kernel = CpuLaunch::new("partial_exits", x(1), x(n), move || {
        let tid = linear_tid();
        for phase in 0..tid % 4 {
            m[tid as usize].store(phase + 1, Ordering::Relaxed);
            hooks::barrier(0, None);
            p.fetch_add(1, Ordering::Relaxed);
            // Every thread still in this phase wrote its mark before the barrier.
            for (u, mark) in m.iter().enumerate() {
                if u as u32 % 4 > phase && mark.load(Ordering::Relaxed) < phase + 1 {
                    b.fetch_add(1, Ordering::Relaxed);
                }
            }
            hooks::barrier(0, None);
        }
    });
    gpu.launch(s, kernel).expect("valid launch");
    gpu.synchronize().expect("completes");
    assert_eq!(bad.load(Ordering::Relaxed), 0);
    assert_eq!(passes.load(Ordering::Relaxed), (0..n).map(|t| t % 4).sum::<u32>());
}

#[test]
fn named_barrier_with_a_count() {
    // Warp 0 alone syncs on barrier 1 with a count of 32 while the other warps use 0.
    let gpu = VirtualGpu::new(cfg(2));
    let s = gpu.create_stream();
    let hits = Arc::new(AtomicU32::new(0));
    let h = hits.clone();
    gpu.launch(
        s,
        CpuLaunch::new("named", x(2), x(128), move || {
            for _ in 0..3 {
                if linear_tid() < 32 {
                    hooks::barrier(1, Some(32));
                } else {
                    hooks::barrier(0, Some(96));
                }
                h.fetch_add(1, Ordering::Relaxed);
            }
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    assert_eq!(hits.load(Ordering::Relaxed), 2 * 128 * 3);
}

#[test]
fn barrier_reduce_counts_and_votes() {
    let gpu = VirtualGpu::new(cfg(3));
    let s = gpu.create_stream();
    let bad = Arc::new(AtomicU32::new(0));
    let b = bad.clone();
    gpu.launch(
        s,
        CpuLaunch::new("bar_red", x(3), x(100), move || {
            let t = linear_tid();
            if t >= 90 {
                return; // exited threads do not take part
            }
            let r = hooks::barrier_reduce(t.is_multiple_of(3));
            if r.count != 30 || r.all || !r.any {
                b.fetch_add(1, Ordering::Relaxed);
            }
            let r = hooks::barrier_reduce(true);
            if r.count != 90 || !r.all || !r.any {
                b.fetch_add(1, Ordering::Relaxed);
            }
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    assert_eq!(bad.load(Ordering::Relaxed), 0);
}

fn shfl_xor(mask: u32, v: u32, m: u32) -> u32 {
    hooks::warp_exchange(mask, v)[(lane() ^ m) as usize]
}

fn ballot(mask: u32, p: bool) -> u32 {
    let all = hooks::warp_exchange(mask, p);
    (0..32)
        .filter(|&l| mask & (1 << l) != 0 && all[l as usize])
        .fold(0, |acc, l| acc | 1 << l)
}

#[test]
fn warp_exchange_shuffles_and_votes() {
    let gpu = VirtualGpu::new(cfg(4));
    let s = gpu.create_stream();
    let bad = Arc::new(AtomicU32::new(0));
    let b = bad.clone();
    gpu.launch(
        s,
        CpuLaunch::new("shuffle_vote", x(2), x(64), move || {
            let l = lane();
            let fail = || b.fetch_add(1, Ordering::Relaxed);
            // Butterfly sum over the warp.
            let mut v = l + 1;
            for m in [16, 8, 4, 2, 1] {
                v += shfl_xor(FULL, v, m);
            }
            if v != 528 {
                fail();
            }
            // Votes.
            if ballot(FULL, l.is_multiple_of(2)) != 0x5555_5555 {
                fail();
            }
            let all = hooks::warp_exchange(FULL, l < 40);
            if !all.iter().all(|&p| p) {
                fail();
            }
            // Divergent halves shuffle within their own mask.
            let half = if l < 16 { 0x0000_ffff } else { 0xffff_0000 };
            let mut w = 1u32;
            for m in [8, 4, 2, 1] {
                w += shfl_xor(half, w, m);
            }
            if w != 16 {
                fail();
            }
            // A wider value type.
            let wide = hooks::warp_exchange(FULL, [l as u64; 4]);
            if wide[31 - l as usize] != [31 - l as u64; 4] {
                fail();
            }
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    assert_eq!(bad.load(Ordering::Relaxed), 0);
}

#[test]
fn warp_exchange_with_an_exited_lane_is_an_error() {
    let gpu = VirtualGpu::new(cfg(5));
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("lost_lane", x(1), x(32), || {
            if lane() == 5 {
                return;
            }
            hooks::warp_exchange(FULL, 1u32);
        }),
    )
    .expect("valid launch");
    match gpu.synchronize() {
        Err(e @ CpuError::IllegalSync { .. }) => {
            let text = e.to_string();
            assert!(text.contains("lost_lane") && text.contains("5"), "{text}");
        }
        other => panic!("expected IllegalSync, got {other:?}"),
    }
}

#[test]
fn collective_beyond_a_partial_warp_is_an_error() {
    let gpu = VirtualGpu::new(cfg(6));
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("partial_warp", x(1), x(40), || {
            hooks::warp_exchange(FULL, 0u8);
        }),
    )
    .expect("valid launch");
    assert!(matches!(gpu.synchronize(), Err(CpuError::IllegalSync { .. })));
}

/// Producer CTA `c` writes data tile `c` and then releases semaphore `c`; consumer CTA
/// `c` waits for it (every thread, as the sync runtime does) and doubles the tile.
fn producer_consumer(seed: u64) {
    const TILES: usize = 8;
    const TILE: usize = 64;
    let data: Arc<Vec<AtomicU32>> = Arc::new((0..TILES * TILE).map(|_| AtomicU32::new(0)).collect());
    let out: Arc<Vec<AtomicU32>> = Arc::new((0..TILES * TILE).map(|_| AtomicU32::new(0)).collect());
    let sem = sems(TILES);
    let gpu = VirtualGpu::new(VgpuConfig { sms: 4, ..cfg(seed) });
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let (d, o, s) = (data.clone(), out.clone(), sem.clone());
    gpu.launch(
        b,
        CpuLaunch::new("consumer", x(TILES as u32), x(TILE as u32), move || {
            let c = hooks::block_idx().x as usize;
            let t = linear_tid() as usize;
            assert!(hooks::wait_until(&site(&s[c], 1, 2, c as u32)));
            let v = d[c * TILE + t].load(Ordering::Relaxed);
            o[c * TILE + t].store(v * 2, Ordering::Relaxed);
        }),
    )
    .expect("valid launch");
    let (d, s) = (data.clone(), sem.clone());
    gpu.launch(
        a,
        CpuLaunch::new("producer", x(TILES as u32), x(TILE as u32), move || {
            let c = hooks::block_idx().x as usize;
            let t = linear_tid() as usize;
            hooks::yield_now();
            d[c * TILE + t].store((c * TILE + t) as u32 + 1, Ordering::Relaxed);
            hooks::barrier(0, None);
            if t == 0 {
                s[c].fetch_add(1, Ordering::Release);
            }
        }),
    )
    .expect("valid launch");
    gpu.synchronize().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (i, v) in out.iter().enumerate() {
        assert_eq!(
            v.load(Ordering::Relaxed),
            2 * (i as u32 + 1),
            "seed {seed}, element {i}"
        );
    }
    assert_eq!(gpu.stats().kernels, 2);
}

#[test]
fn producer_and_consumer_on_two_streams_over_many_seeds() {
    for seed in 0..48 {
        producer_consumer(seed);
    }
}

/// Stream A: a long kernel K0, then producer P; stream B: [optionally a tiny kernel that
/// waits until P has started a CTA, then] consumer C, whose CTAs fill every SM and wait
/// for P. Returns the GPU, the result and the semaphores' addresses.
fn classic_program(
    seed: u64,
    wait_for_producer_start: bool,
) -> (Arc<VirtualGpu>, Result<(), CpuError>, Vec<*const i32>) {
    let gpu = VirtualGpu::new(VgpuConfig {
        sms: 2,
        max_ctas_per_sm: 2,
        ..cfg(seed)
    });
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let sem = sems(2);
    let begin = Arc::new(AtomicI32::new(0));
    gpu.launch(
        a,
        CpuLaunch::new("long_k0", x(2), x(32), || {
            for _ in 0..20 {
                hooks::barrier(0, None);
            }
        }),
    )
    .expect("valid launch");
    let (s, f) = (sem.clone(), begin.clone());
    gpu.launch(
        a,
        CpuLaunch::new("producer", x(2), x(32), move || {
            let c = hooks::block_idx().x as usize;
            if linear_tid() == 0 {
                f.fetch_add(1, Ordering::Release); // kernel_begin_cta
            }
            hooks::barrier(0, None);
            if linear_tid() == 0 {
                s[c].fetch_add(1, Ordering::Release);
            }
        }),
    )
    .expect("valid launch");
    if wait_for_producer_start {
        let f = begin.clone();
        gpu.launch(
            b,
            CpuLaunch::new("wait_begin", x(1), x(1), move || {
                let site = WaitSite {
                    sem: f.as_ptr(),
                    target: 1,
                    launch_id: 8,
                    tile: 0,
                    tensor_id: 0,
                    sem_index: 0,
                };
                hooks::wait_until(&site);
            }),
        )
        .expect("valid launch");
    }
    let s = sem.clone();
    gpu.launch(
        b,
        CpuLaunch::new("consumer", x(4), x(32), move || {
            let c = hooks::block_idx().x as usize;
            hooks::wait_until(&site(&s[c % 2], 1, 5, (c % 2) as u32));
        }),
    )
    .expect("valid launch");
    let result = gpu.synchronize();
    // The semaphores must outlive any report that reads them.
    let addresses = sem.iter().map(|s| s.as_ptr().cast_const()).collect();
    drop(sem);
    (gpu, result, addresses)
}

#[test]
fn classic_deadlock_is_reported_on_every_seed() {
    for seed in 0..24 {
        let started = Instant::now();
        let (gpu, result, sem_addr) = classic_program(seed, false);
        let report = match result {
            Err(CpuError::Deadlock(r)) => r,
            other => panic!("seed {seed}: expected a deadlock, got {other:?}"),
        };
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "detected structurally, not by timeout"
        );
        // Every resident CTA is a consumer CTA waiting on a tensor#5 semaphore.
        assert!(!report.ctas.is_empty());
        for cta in &report.ctas {
            assert_eq!(cta.kernel, "consumer", "seed {seed}: {report}");
            assert!(cta.groups.iter().all(|g| matches!(
                g.wait,
                ThreadWait::Semaphore { site, value: 0 } if site.tensor_id == 5 && site.target == 1
            )));
        }
        // The consumer fills all four CTA slots, or K0 holds two and the rest wait.
        // The flat list of semaphore waits, one per consumer CTA.
        assert_eq!(report.waits.len(), report.ctas.len());
        assert!(
            report
                .waits
                .iter()
                .all(|w| w.kernel == "consumer" && w.threads == 32 && w.value == 0)
        );
        assert!(
            report
                .waits
                .iter()
                .all(|w| w.site.sem == sem_addr[w.site.sem_index as usize])
        );
        let queued: Vec<&str> = report.queued.iter().map(|q| q.kernel.as_str()).collect();
        assert!(queued == ["producer"] || queued == ["long_k0"], "seed {seed}: {report}");
        let text = report.to_string();
        assert!(
            text.starts_with("deadlock: every resident CTA is waiting\n  consumer CTA "),
            "{text}"
        );
        assert!(text.contains("wait on semaphore tensor#5["), "{text}");
        assert!(text.contains("no SM has room"), "{text}");
        // The virtual GPU accepts new work afterwards.
        let s = gpu.create_stream();
        gpu.launch(s, CpuLaunch::new("after", x(1), x(1), || {}))
            .expect("valid launch");
        gpu.synchronize().expect("new work runs after a deadlock");
    }
}

#[test]
fn waiting_for_the_producer_to_start_avoids_the_deadlock_on_every_seed() {
    for seed in 0..32 {
        let (gpu, result, _) = classic_program(seed, true);
        result.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(gpu.stats().kernels, 4);
    }
}

/// Stream A: kernel `k` of `ctas` CTAs that each wait for a flag; stream B: waits for
/// `k`'s start event, then a kernel that raises the flag. The start event completes once
/// every CTA of `k` has been placed, so B's kernel runs beside `k` when `k` fits on the
/// device, and never when it does not (a deadlock).
fn start_event_program(seed: u64, ctas: u32) -> Result<(), CpuError> {
    let gpu = VirtualGpu::new(VgpuConfig {
        sms: 2,
        max_ctas_per_sm: 2,
        ..cfg(seed)
    });
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let flag = Arc::new(AtomicI32::new(0));
    let f = flag.clone();
    let started = gpu
        .launch_with_start_event(
            a,
            CpuLaunch::new("k", x(ctas), x(32), move || {
                assert!(hooks::wait_until(&site(&f, 1, 9, 0)));
            }),
        )
        .expect("valid launch");
    assert!(!gpu.event_complete(started), "nothing has run yet");
    gpu.stream_wait_event(b, started);
    let f = flag.clone();
    gpu.launch(
        b,
        CpuLaunch::new("raise", x(1), x(1), move || {
            f.store(1, Ordering::Release);
        }),
    )
    .expect("valid launch");
    gpu.synchronize()?;
    assert!(gpu.event_complete(started));
    Ok(())
}

#[test]
fn a_start_event_completes_once_every_cta_has_begun() {
    for seed in 0..16 {
        // Three CTAs fit beside the raiser (four slots); five never all begin.
        start_event_program(seed, 3).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        match start_event_program(seed, 5) {
            Err(CpuError::Deadlock(r)) => {
                // Four of k's CTAs wait on the flag; the fifth has no room, and the
                // raiser waits behind k's start event.
                assert_eq!(r.ctas.len(), 4, "seed {seed}: {r}");
                assert!(r.ctas.iter().all(|c| c.kernel == "k"), "seed {seed}: {r}");
                let queued: Vec<&str> = r.queued.iter().map(|q| q.kernel.as_str()).collect();
                assert_eq!(queued, ["k"], "seed {seed}: {r}");
            }
            other => panic!("seed {seed}: expected a deadlock, got {other:?}"),
        }
    }
}

#[test]
fn a_kernel_panic_is_reported_and_pending_work_discarded() {
    let gpu = VirtualGpu::new(cfg(7));
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("oob", x(2), x(8), || {
            let v = [0u32; 4];
            let i = linear_tid() as usize + 7 * hooks::block_idx().x as usize;
            if hooks::block_idx().x == 1 && linear_tid() == 3 {
                std::hint::black_box(v[i]);
            }
        }),
    )
    .expect("valid launch");
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    gpu.enqueue(s, Box::new(move || r.store(true, Ordering::Relaxed)));
    let event = gpu.record_event(s);
    match gpu.synchronize() {
        Err(CpuError::KernelPanic {
            kernel,
            block,
            thread,
            message,
        }) => {
            assert_eq!(kernel, "oob");
            assert_eq!(block, Dim3::new(1, 0, 0));
            assert_eq!(thread, Dim3::new(3, 0, 0));
            assert!(message.contains("index out of bounds"), "{message}");
        }
        other => panic!("expected a kernel panic, got {other:?}"),
    }
    assert!(
        !ran.load(Ordering::Relaxed),
        "work behind the failed kernel is discarded"
    );
    assert!(gpu.event_complete(event), "events of discarded work count as complete");
    gpu.launch(s, CpuLaunch::new("fine", x(4), x(32), || hooks::barrier(0, None)))
        .expect("valid launch");
    gpu.synchronize().expect("new work runs after a panic");
}

#[test]
fn trap_is_a_kernel_failure() {
    let gpu = VirtualGpu::new(cfg(8));
    let s = gpu.create_stream();
    gpu.launch(s, CpuLaunch::new("trapper", x(1), x(4), || hooks::trap("bad tile")))
        .expect("valid launch");
    match gpu.synchronize() {
        Err(e @ CpuError::KernelPanic { .. }) => {
            assert!(e.to_string().contains("kernel `trapper` panicked"), "{e}");
            assert!(e.to_string().contains("kernel trap: bad tile"), "{e}");
        }
        other => panic!("expected a kernel panic, got {other:?}"),
    }
}

#[test]
fn launch_validation_names_kernel_and_limit() {
    let gpu = VirtualGpu::new(cfg(9));
    let s = gpu.create_stream();
    let check = |launch: CpuLaunch, limit: &str| match gpu.launch(s, launch) {
        Err(e @ CpuError::InvalidLaunch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`big`") && text.contains(limit), "{text}");
        }
        other => panic!("expected InvalidLaunch, got {other:?}"),
    };
    check(
        CpuLaunch::new("big", x(1), x(2048), || {}),
        "max_threads_per_cta = 1024",
    );
    check(
        CpuLaunch::new("big", x(1), x(64), || {}).with_dynamic_smem(300 * 1024),
        "max_smem_per_cta",
    );
    check(
        CpuLaunch::new("big", Dim3::new(4, 0, 1), x(64), || {}),
        "grid (4,0,1) is empty",
    );
    check(CpuLaunch::new("big", x(1), Dim3::new(1, 1, 0), || {}), "is empty");
    check(
        CpuLaunch::new("big", x(1), Dim3::new(1, 1, 128), || {}),
        "exceeds CUDA's limit",
    );
    let other = VirtualGpu::new(cfg(9)).create_stream();
    assert!(matches!(
        gpu.launch(other, CpuLaunch::new("k", x(1), x(1), || {})),
        Err(CpuError::UnknownId(_))
    ));
    assert!(matches!(
        VirtualGpu::try_new(VgpuConfig { sms: 0, ..cfg(0) }),
        Err(CpuError::InvalidConfig(_))
    ));
}

#[test]
fn events_order_work_across_streams() {
    for seed in 0..8 {
        let gpu = VirtualGpu::new(cfg(seed));
        let (a, b) = (gpu.create_stream(), gpu.create_stream());
        let value = Arc::new(AtomicU32::new(0));
        let out = Arc::new(AtomicU32::new(0));
        let v = value.clone();
        gpu.launch(
            a,
            CpuLaunch::new("slow_writer", x(2), x(32), move || {
                for _ in 0..5 {
                    hooks::yield_now();
                }
                hooks::barrier(0, None);
                if hooks::block_idx().x == 0 && linear_tid() == 0 {
                    v.store(40, Ordering::Relaxed);
                }
            }),
        )
        .expect("valid launch");
        let v = value.clone();
        gpu.enqueue(
            a,
            Box::new(move || {
                v.fetch_add(2, Ordering::Relaxed);
            }),
        );
        let event = gpu.record_event(a);
        assert!(!gpu.event_complete(event));
        gpu.stream_wait_event(b, event);
        let (v, o) = (value.clone(), out.clone());
        gpu.launch(
            b,
            CpuLaunch::new("reader", x(1), x(1), move || {
                o.store(v.load(Ordering::Relaxed), Ordering::Relaxed);
            }),
        )
        .expect("valid launch");
        let later = gpu.record_event(b);
        gpu.synchronize_event(event).expect("event completes");
        assert!(gpu.event_complete(event));
        gpu.synchronize_event(later).expect("reader completes");
        assert_eq!(out.load(Ordering::Relaxed), 42, "seed {seed}");
        gpu.synchronize().expect("nothing left");
    }
}

#[test]
fn synchronize_stream_leaves_other_streams_mid_way() {
    let gpu = VirtualGpu::new(cfg(10));
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let sem = sems(1);
    let done = Arc::new(AtomicBool::new(false));
    let (s, d) = (sem.clone(), done.clone());
    gpu.launch(
        a,
        CpuLaunch::new("waits_for_host", x(1), x(4), move || {
            hooks::wait_until(&site(&s[0], 1, 1, 0));
            d.store(true, Ordering::Relaxed);
        }),
    )
    .expect("valid launch");
    gpu.launch(b, CpuLaunch::new("quick", x(2), x(32), || hooks::barrier(0, None)))
        .expect("valid launch");
    gpu.synchronize_stream(b).expect("stream b completes while a waits");
    assert!(!done.load(Ordering::Relaxed));
    sem[0].store(1, Ordering::Release);
    gpu.synchronize().expect("a completes once the host signalled");
    assert!(done.load(Ordering::Relaxed));
}

#[test]
fn thousands_of_threads_run_with_bounded_stacks() {
    let config = VgpuConfig { sms: 4, ..cfg(11) };
    let max_resident = config.max_resident_threads();
    let gpu = VirtualGpu::new(config);
    let s = gpu.create_stream();
    let sum = Arc::new(AtomicU64::new(0));
    let sm = sum.clone();
    gpu.launch(
        s,
        CpuLaunch::new("many", x(64), x(256), move || {
            let mut v = lane() + 1;
            for m in [16, 8, 4, 2, 1] {
                v += shfl_xor(FULL, v, m);
            }
            hooks::barrier(0, None);
            if lane() == 0 {
                sm.fetch_add(v as u64, Ordering::Relaxed);
            }
            hooks::barrier(0, None);
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    let st = gpu.stats();
    assert_eq!(sum.load(Ordering::Relaxed), 64 * 8 * 528);
    assert_eq!((st.kernels, st.ctas, st.threads), (1, 64, 64 * 256));
    assert!(
        st.stacks <= max_resident,
        "{} stacks for at most {max_resident} resident threads",
        st.stacks
    );
    println!(
        "64 CTAs x 256 threads: {:.1} M switches/s, {:.0} k threads/s, {:.0} CTAs/s ({} switches, {} stacks, {:?})",
        st.switches_per_second() / 1e6,
        st.threads_per_second() / 1e3,
        st.ctas_per_second(),
        st.switches,
        st.stacks,
        st.busy
    );
}

/// The order in which threads pass their scheduling points, for one seed.
fn trace(seed: u64) -> Vec<(u32, u32, u32)> {
    let gpu = VirtualGpu::new(VgpuConfig { sms: 2, ..cfg(seed) });
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let log = Arc::new(Mutex::new(Vec::new()));
    for (k, s) in [(0u32, a), (1u32, b)] {
        let l = log.clone();
        gpu.launch(
            s,
            CpuLaunch::new(format!("k{k}"), x(3), x(8), move || {
                for step in 0..3 {
                    l.lock()
                        .expect("not poisoned")
                        .push((k * 100 + hooks::block_idx().x, linear_tid(), step));
                    hooks::yield_now();
                }
            }),
        )
        .expect("valid launch");
    }
    gpu.synchronize().expect("completes");
    log.lock().expect("not poisoned").clone()
}

#[test]
fn same_seed_same_interleaving_other_seeds_differ() {
    assert_eq!(trace(5), trace(5));
    let base = trace(5);
    assert!(
        (6..12).any(|s| trace(s) != base),
        "other seeds explore other interleavings"
    );
}

#[test]
fn a_spin_without_progress_is_a_hang() {
    let gpu = VirtualGpu::new(VgpuConfig {
        max_idle_switches: 10_000,
        ..cfg(12)
    });
    let s = gpu.create_stream();
    let flag = Arc::new(AtomicU32::new(0));
    let f = flag.clone();
    gpu.launch(
        s,
        CpuLaunch::new("spinner", x(1), x(2), move || {
            if linear_tid() == 0 {
                while f.load(Ordering::Acquire) == 0 {
                    hooks::yield_now();
                }
            }
        }),
    )
    .expect("valid launch");
    match gpu.synchronize() {
        Err(CpuError::Hang(r)) => {
            assert_eq!(r.ctas.len(), 1);
            assert_eq!(r.ctas[0].groups[0].wait, ThreadWait::Runnable);
            let text = r.to_string();
            assert!(text.starts_with("hang: no progress in "), "{text}");
            assert!(text.contains("(max_idle_switches = 10000)"), "{text}");
        }
        other => panic!("expected a hang, got {other:?}"),
    }
    gpu.launch(s, CpuLaunch::new("after", x(1), x(1), || {}))
        .expect("valid launch");
    gpu.synchronize().expect("new work runs after a hang");
}

#[test]
fn a_barrier_that_can_never_fill_is_a_deadlock() {
    let gpu = VirtualGpu::new(cfg(13));
    let s = gpu.create_stream();
    gpu.launch(
        s,
        CpuLaunch::new("short_barrier", x(1), x(64), || {
            if linear_tid() < 32 {
                hooks::barrier(1, Some(64));
            }
        }),
    )
    .expect("valid launch");
    match gpu.synchronize() {
        Err(CpuError::Deadlock(r)) => {
            let text = r.to_string();
            assert!(
                text.contains("short_barrier CTA 0 (block (0,0,0), SM ")
                    && text.contains("threads 0..=31 (32) wait at barrier 1 (32 of 64 threads arrived)"),
                "{text}"
            );
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

#[test]
fn shared_memory_is_per_cta_zeroed_and_aligned() {
    static COUNTER: u8 = 0;
    let gpu = VirtualGpu::new(VgpuConfig { sms: 1, ..cfg(14) });
    let s = gpu.create_stream();
    let bad = Arc::new(AtomicU32::new(0));
    let b = bad.clone();
    gpu.launch(
        s,
        CpuLaunch::new("smem", x(6), x(64), move || {
            let fail = || b.fetch_add(1, Ordering::Relaxed);
            let (dyn_base, len) = hooks::dynamic_shared();
            if len != 1000 || !(dyn_base as usize).is_multiple_of(16) {
                fail();
            }
            let counter = hooks::static_shared(&COUNTER, 4, 4) as *mut u32;
            let dyn_u32 = dyn_base as *mut u32;
            let t = linear_tid() as usize;
            // SAFETY: the buffers belong to this CTA, are 4-aligned and large enough; its
            // threads run one at a time.
            unsafe {
                if *dyn_u32.add(t) != 0 {
                    fail();
                }
                *dyn_u32.add(t) = hooks::block_idx().x + 1;
                *counter += 1;
            }
            hooks::barrier(0, None);
            // SAFETY: as above.
            unsafe {
                if *counter != 64 || *dyn_u32.add(63 - t) != hooks::block_idx().x + 1 {
                    fail();
                }
            }
        })
        .with_dynamic_smem(1000),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    assert_eq!(bad.load(Ordering::Relaxed), 0);
}

#[test]
fn synchronize_inside_a_host_operation_is_refused() {
    let gpu = VirtualGpu::new(cfg(15));
    let s = gpu.create_stream();
    let seen = Arc::new(Mutex::new(None));
    let (weak, sn) = (Arc::downgrade(&gpu), seen.clone());
    gpu.enqueue(
        s,
        Box::new(move || {
            if let Some(g) = weak.upgrade() {
                *sn.lock().expect("not poisoned") = Some(g.synchronize());
            }
        }),
    );
    gpu.synchronize().expect("completes");
    assert_eq!(*seen.lock().expect("not poisoned"), Some(Err(CpuError::Reentrant)));
}

#[test]
fn the_virtual_clock_advances() {
    let gpu = VirtualGpu::new(cfg(16));
    let s = gpu.create_stream();
    let ok = Arc::new(AtomicBool::new(false));
    let o = ok.clone();
    gpu.launch(
        s,
        CpuLaunch::new("clock", x(1), x(2), move || {
            let t0 = hooks::global_timer_ns();
            hooks::yield_now();
            let t1 = hooks::global_timer_ns();
            let c = hooks::clock64();
            if t1 > t0 && c > 2 * t0 {
                o.store(true, Ordering::Relaxed);
            }
        }),
    )
    .expect("valid launch");
    gpu.synchronize().expect("completes");
    assert!(ok.load(Ordering::Relaxed));
}

#[test]
#[should_panic(expected = "outside a kernel")]
fn hooks_outside_a_kernel_say_so() {
    hooks::thread_idx();
}

#[test]
fn suspended_threads_continue_on_another_host_thread() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<VirtualGpu>();
    let gpu = VirtualGpu::new(cfg(17));
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let sem = sems(4);
    let out = Arc::new(AtomicU32::new(0));
    let (s, o) = (sem.clone(), out.clone());
    gpu.launch(
        a,
        CpuLaunch::new("waiter", x(4), x(64), move || {
            let c = hooks::block_idx().x as usize;
            let before = hooks::block_idx();
            hooks::wait_until(&site(&s[c], 1, 3, c as u32));
            hooks::barrier(0, None);
            // The hooks still answer for this GPU thread on the new host thread.
            if hooks::block_idx() == before {
                o.fetch_add(1, Ordering::Relaxed);
            }
        }),
    )
    .expect("valid launch");
    gpu.launch(b, CpuLaunch::new("quick", x(1), x(32), || hooks::barrier(0, None)))
        .expect("valid launch");
    // On this host thread: the waiter's CTAs become resident and block.
    gpu.synchronize_stream(b).expect("stream b completes");
    assert_eq!(out.load(Ordering::Relaxed), 0);
    let (g, s) = (gpu.clone(), sem.clone());
    let other = std::thread::spawn(move || {
        for sem in s.iter() {
            sem.store(1, Ordering::Release);
        }
        g.synchronize()
    });
    other
        .join()
        .expect("host thread did not panic")
        .expect("the waiters finish there");
    assert_eq!(out.load(Ordering::Relaxed), 4 * 64);
}

/// The real sync runtime (`signal_output` / `wait_input`, as `#[megaops::kernel]` injects
/// them) on the virtual GPU: a producer with 64-element kernel tiles and a consumer with
/// 256-element kernel tiles meet on 128-element data tiles.
fn sync_runtime_program(seed: u64, with_producer: bool) -> Result<(Vec<u32>, Vec<i32>), CpuError> {
    use megaops_device::sync::{self, CtaRemap, DimTiling, EPOCH_STRIDE, KernelCtx, ProducerTile, TileSync};
    const N: u32 = 512;
    let data: Arc<Vec<AtomicU32>> = Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
    let out: Arc<Vec<AtomicU32>> = Arc::new((0..N).map(|_| AtomicU32::new(0)).collect());
    let sem = sems(4);
    let tiling = |target: i32| TileSync {
        sema: sem[0].as_ptr(),
        tensor_id: 9,
        target,
        rank: 1,
        dims: [
            DimTiling::plain(N, 128),
            DimTiling::plain(1, 1),
            DimTiling::plain(1, 1),
            DimTiling::plain(1, 1),
        ],
    };
    let region = |start: u32, len: u32| [(start, start + len), (0, 1), (0, 1), (0, 1)];
    let gpu = VirtualGpu::new(cfg(seed));
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    let ctx = KernelCtx {
        begin_flag: std::ptr::null_mut(),
        begin_token: 0,
        begin_cta: 0,
        launch_id: 3,
        poll_spin_ns: 0,
        remap: CtaRemap::IDENTITY,
        tile_grid: [2, 1, 1, 1],
        num_tiles: 2,
        timeout_ns: u64::MAX,
        errors: std::ptr::null_mut(),
        trace: std::ptr::null_mut(),
    };
    let (ts, d, o) = (tiling(EPOCH_STRIDE), data.clone(), out.clone());
    gpu.launch(
        b,
        CpuLaunch::new("consumer", x(2), x(256), move || {
            let c = hooks::block_idx().x;
            // SAFETY: `ts` describes 4 live semaphores; the error log is null.
            let ok = unsafe { sync::wait_input(&ctx, c, &ts, &region(c * 256, 256)) };
            assert!(ok, "the CPU backend never gives a wait up by returning false");
            let i = (c * 256 + linear_tid()) as usize;
            o[i].store(2 * d[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }),
    )
    .expect("valid launch");
    if with_producer {
        let (ts, d) = (tiling(0), data.clone());
        gpu.launch(
            a,
            CpuLaunch::new("producer", x(8), x(64), move || {
                let c = hooks::block_idx().x;
                let i = c * 64 + linear_tid();
                d[i as usize].store(i + 1, Ordering::Relaxed);
                let tile = ProducerTile {
                    ktile: [64, 0, 0, 0],
                    split: 1,
                    split_index: 0,
                };
                // SAFETY: `ts` describes 4 live semaphores; this CTA wrote its region.
                unsafe { sync::signal_output(&ts, &region(c * 64, 64), &tile, false) };
            }),
        )
        .expect("valid launch");
    }
    gpu.synchronize()?;
    Ok((
        out.iter().map(|v| v.load(Ordering::Relaxed)).collect(),
        sem.iter().map(|s| s.load(Ordering::Relaxed)).collect(),
    ))
}

#[test]
fn the_sync_runtime_runs_on_the_virtual_gpu() {
    use megaops_device::sync::EPOCH_STRIDE;
    for seed in 0..16 {
        let (out, sems) = sync_runtime_program(seed, true).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            out.iter().enumerate().all(|(i, &v)| v == 2 * (i as u32 + 1)),
            "seed {seed}"
        );
        assert_eq!(sems, vec![EPOCH_STRIDE; 4], "one complete production adds EPOCH_STRIDE");
    }
    // Without the producer, every consumer thread is reported at its first data tile.
    match sync_runtime_program(0, false) {
        Err(CpuError::Deadlock(r)) => {
            assert_eq!(r.waits.len(), 2);
            for w in &r.waits {
                assert_eq!(
                    (w.site.tensor_id, w.site.target, w.value, w.threads),
                    (9, EPOCH_STRIDE, 0, 256)
                );
                assert_eq!((w.site.launch_id, w.site.sem_index), (3, 2 * w.block.x));
            }
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

#[test]
fn only_ctas_from_begin_cta_on_raise_the_begin_flag() {
    use megaops_device::sync::{self, CtaRemap, KernelCtx};
    // A grid of 6 CTAs; begin_cta 6 names no CTA, so nobody may raise the flag.
    for (begin_cta, raised) in [(0u32, true), (3, true), (5, true), (6, false)] {
        for seed in 0..4 {
            let flag = Arc::new(AtomicI32::new(0));
            let ctx = KernelCtx {
                begin_flag: flag.as_ptr(),
                begin_token: 7,
                begin_cta,
                launch_id: 1,
                poll_spin_ns: 0,
                remap: CtaRemap::IDENTITY,
                tile_grid: [6, 1, 1, 1],
                num_tiles: 6,
                timeout_ns: u64::MAX,
                errors: std::ptr::null_mut(),
                trace: std::ptr::null_mut(),
            };
            let gpu = VirtualGpu::new(cfg(seed));
            let s = gpu.create_stream();
            let keep = flag.clone();
            gpu.launch(
                s,
                CpuLaunch::new("begin", x(6), x(32), move || {
                    let _ = &keep;
                    // SAFETY: the flag is a live i32 (kept by the closure).
                    unsafe { sync::kernel_begin_cta(&ctx) };
                }),
            )
            .expect("valid launch");
            gpu.synchronize().expect("no waits");
            let want = if raised { 7 } else { 0 };
            assert_eq!(flag.load(Ordering::SeqCst), want, "begin_cta {begin_cta}, seed {seed}");
        }
    }
}

/// Spins until `ns` of `%globaltimer` have passed, with `nanosleep` between reads (as
/// a kernel that waits on the clock does).
fn spin_on_the_clock(ns: u64) {
    use megaops_device::time::{global_timer, nanosleep};
    let start = global_timer();
    while global_timer().wrapping_sub(start) < ns {
        nanosleep(1000);
    }
}

#[test]
fn a_kernel_spinning_ten_seconds_on_the_clock_is_not_a_hang() {
    for seed in 0..3 {
        let gpu = VirtualGpu::new(cfg(100 + seed));
        let s = gpu.create_stream();
        let wall = Instant::now();
        gpu.launch(
            s,
            CpuLaunch::new("spinner", x(4), x(64), || spin_on_the_clock(10_000_000_000)),
        )
        .expect("valid launch");
        gpu.synchronize().expect("a 10 s spin on the clock ends");
        let stats = gpu.stats();
        assert!(stats.virtual_ns >= 10_000_000_000, "{stats:?}");
        // 256 threads polling the clock: at 10 ns per switch that would be 10⁹ switches
        // (and a hang after max_idle_switches = 200000).
        assert!(stats.switches < 200_000, "{stats:?}");
        assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
    }
}

#[test]
fn a_tile_wait_times_out_beside_a_kernel_spinning_on_the_clock() {
    use megaops_device::sync::{self, CtaRemap, DimTiling, EPOCH_STRIDE, KernelCtx, TileSync};
    let gpu = VirtualGpu::new(cfg(110));
    let (a, b) = (gpu.create_stream(), gpu.create_stream());
    // The innocent bystander: 20 s on the clock.
    gpu.launch(
        a,
        CpuLaunch::new("spinner", x(2), x(32), || spin_on_the_clock(20_000_000_000)),
    )
    .expect("valid launch");
    // A consumer of a tensor nobody produces, with a 2 s timeout and an error log.
    let sem = sems(2);
    let log = Arc::new(Mutex::new(ErrorLog::default()));
    let log_ptr = {
        let mut guard = log.lock().expect("not poisoned");
        &raw mut *guard
    };
    let ctx = KernelCtx {
        begin_flag: std::ptr::null_mut(),
        begin_token: 0,
        begin_cta: 0,
        launch_id: 4,
        poll_spin_ns: 0,
        remap: CtaRemap::IDENTITY,
        tile_grid: [2, 1, 1, 1],
        num_tiles: 2,
        timeout_ns: 2_000_000_000,
        errors: log_ptr,
        trace: std::ptr::null_mut(),
    };
    let mut dims = [DimTiling::plain(1, 1); 4];
    dims[0] = DimTiling::plain(64, 32);
    let ts = TileSync {
        sema: sem[0].as_ptr(),
        tensor_id: 6,
        target: EPOCH_STRIDE,
        rank: 1,
        dims,
    };
    let failed = Arc::new(AtomicU32::new(0));
    let f = failed.clone();
    gpu.launch(
        b,
        CpuLaunch::new("consumer", x(2), x(32), move || {
            let c = hooks::block_idx().x;
            let region = [(c * 32, c * 32 + 32), (0, 1), (0, 1), (0, 1)];
            // SAFETY: `ts` describes 2 live semaphores, `ctx.errors` a live error log.
            if !unsafe { sync::wait_input(&ctx, c, &ts, &region) } {
                f.fetch_add(1, Ordering::Relaxed);
            }
        }),
    )
    .expect("valid launch");
    let wall = Instant::now();
    gpu.synchronize().expect("the spinner ends; the waits time out");
    assert!(wall.elapsed() < Duration::from_secs(10), "{:?}", wall.elapsed());
    // Every waiting thread gave its tile up; the first to time out recorded it as on the
    // GPU (2 s of the clock, tensor, semaphore, value, target) and raised the abort flag.
    assert_eq!(failed.load(Ordering::Relaxed), 64);
    let log = *log.lock().expect("not poisoned");
    assert_eq!(log.abort, 1);
    assert!(log.count >= 1, "{log:?}");
    let r = log.records[0];
    assert_eq!(
        (r.kind, r.launch_id, r.tensor_id, r.value, r.target),
        (1, 4, 6, 0, EPOCH_STRIDE)
    );
    assert!(r.sem_index < 2 && r.tile == r.sem_index, "{r:?}");
    assert!((2_000_000_000..2_001_000_000).contains(&r.waited_ns), "{r:?}");
    assert!(gpu.stats().virtual_ns >= 20_000_000_000);
}

#[test]
fn a_spin_on_the_clock_that_never_ends_is_a_hang_in_virtual_time() {
    let gpu = VirtualGpu::new(VgpuConfig {
        max_idle_virtual_ns: 60_000_000_000,
        ..cfg(111)
    });
    let s = gpu.create_stream();
    let flag = Arc::new(AtomicU32::new(0));
    let f = flag.clone();
    gpu.launch(
        s,
        CpuLaunch::new("sleeper", x(1), x(1), move || {
            // A flag spin with nanosleep back-off, the flag read without yielding.
            while f.load(Ordering::Relaxed) == 0 {
                megaops_device::time::nanosleep(100);
            }
        }),
    )
    .expect("valid launch");
    match gpu.synchronize() {
        Err(CpuError::Hang(r)) => {
            let text = r.to_string();
            assert!(text.starts_with("hang: no progress for "), "{text}");
            assert!(
                text.contains("s of virtual time (max_idle_virtual_ns = 60000000000)"),
                "{text}"
            );
        }
        other => panic!("expected a hang, got {other:?}"),
    }
}
