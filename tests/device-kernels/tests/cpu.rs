//! Runs every test kernel body on the CPU backend (the virtual GPU of
//! `megaops_device::cpu`) and compares with the same CPU references as `tests/gpu.rs`:
//! this checks the host implementations of the primitives (hooks, `warp_exchange`-based
//! shuffles, `ldmatrix` and `mma`, atomics, `cp.async`, shared memory) against what the
//! H200 does. Each kernel runs under a few scheduling seeds.

use megaops_device::Dim3;
use megaops_device::cpu::{CpuLaunch, VgpuConfig, VirtualGpu};
use megaops_device_kernels::*;
use std::sync::Arc;
use std::time::Duration;

const SEEDS: [u64; 3] = [0, 1, 0x5eed];

fn vgpu(seed: u64) -> Arc<VirtualGpu> {
    VirtualGpu::new(VgpuConfig {
        seed,
        stack_size: 128 * 1024,
        hang_timeout: Some(Duration::from_secs(60)),
        ..VgpuConfig::default()
    })
}

fn x(n: u32) -> Dim3 {
    Dim3::new(n, 1, 1)
}

/// Launches `body` on `grid × block` threads of a fresh virtual GPU and waits for it.
fn run(seed: u64, name: &str, grid: Dim3, block: Dim3, smem: usize, body: impl Fn() + Send + Sync + 'static) {
    let gpu = vgpu(seed);
    let stream = gpu.create_stream();
    gpu.launch(stream, CpuLaunch::new(name, grid, block, body).with_dynamic_smem(smem))
        .expect("launch");
    gpu.synchronize()
        .unwrap_or_else(|e| panic!("{name} (seed {seed}): {e}"));
}

/// A host buffer a kernel writes through a raw pointer (passed as an address, since the
/// entry closure must be `Send + Sync`).
struct Buf<T>(Vec<T>);

impl<T: Copy> Buf<T> {
    fn new(v: Vec<T>) -> Self {
        Buf(v)
    }
    fn addr(&mut self) -> usize {
        self.0.as_mut_ptr() as usize
    }
}

fn compare<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T], per: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(12)
        .map(|i| format!("  [{}][{}]: got {:?}, want {:?}", i / per, i % per, got[i], want[i]))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: words differ ([thread][word]):\n{}",
        bad.join("\n")
    );
}

#[test]
fn indices_and_barriers() {
    for seed in SEEDS {
        let (grid, block) = (Dim3::new(3, 2, 1), Dim3::new(8, 4, 2));
        let mut out = Buf::new(vec![0u32; 6 * 64 * indices::INDEX_WORDS]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "thread_indices", grid, block, 0, move || unsafe {
            indices::thread_indices(p as *mut u32)
        });
        compare(
            "thread_indices",
            &out.0,
            &indices::reference::thread_indices(grid, block),
            indices::INDEX_WORDS,
        );

        let mut out = Buf::new(vec![0u32; 3 * 128 * indices::BARRIER_WORDS]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "barriers", x(3), x(128), 0, move || unsafe {
            indices::barriers(p as *mut u32)
        });
        compare(
            "barriers",
            &out.0,
            &indices::reference::barriers(3),
            indices::BARRIER_WORDS,
        );
    }
}

#[test]
fn shared_memory() {
    for seed in SEEDS {
        let mut out = Buf::new(vec![0u32; 2 * 256]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "shared_static_a", x(2), x(256), 0, move || unsafe {
            shared_mem::shared_static_a(p as *mut u32)
        });
        compare(
            "shared_static_a",
            &out.0,
            &shared_mem::reference::shared_static_a(2),
            256,
        );

        let mut out = Buf::new(vec![0u32; 2 * 64 * 4]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "shared_static_b", x(2), x(64), 0, move || unsafe {
            shared_mem::shared_static_b(p as *mut u32)
        });
        compare("shared_static_b", &out.0, &shared_mem::reference::shared_static_b(2), 4);

        let mut out = Buf::new(vec![0u32; 2 * 64 * shared_mem::DYNAMIC_WORDS]);
        let p = out.addr();
        let smem = shared_mem::DYNAMIC_BYTES as usize;
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "shared_dynamic", x(2), x(64), smem, move || unsafe {
            shared_mem::shared_dynamic(p as *mut u32)
        });
        compare(
            "shared_dynamic",
            &out.0,
            &shared_mem::reference::shared_dynamic(2),
            shared_mem::DYNAMIC_WORDS,
        );
    }
}

#[test]
fn atomics_under_contention() {
    for seed in SEEDS {
        let (ctas, threads) = (8u32, 128u32);
        let mut c = Buf::new(vec![atomics::Counters::INIT]);
        let p = c.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "atomics", x(ctas), x(threads), 0, move || unsafe {
            atomics::atomics(p as *mut atomics::Counters)
        });
        c.0[0].check(ctas * threads).unwrap();
    }
}

#[test]
fn message_passing_between_two_streams() {
    for seed in SEEDS {
        let gpu = vgpu(seed);
        let (consumer_stream, producer_stream) = (gpu.create_stream(), gpu.create_stream());
        let (n, producers, consumers) = (1u32 << 14, 4u32, 2u32);
        let mut data = Buf::new(vec![0u32; n as usize]);
        let mut flag = Buf::new(vec![0i32]);
        let mut out = Buf::new(vec![message::MpResult::default()]);
        let (d, f, o) = (data.addr(), flag.addr(), out.addr());
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        let consumer = CpuLaunch::new("mp_consumer", x(consumers), x(128), move || unsafe {
            message::mp_consumer(
                d as *const u32,
                f as *const i32,
                producers as i32,
                n,
                1 << 40,
                o as *mut _,
            )
        });
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        let producer = CpuLaunch::new("mp_producer", x(producers), x(64), move || unsafe {
            message::mp_producer(d as *mut u32, f as *mut i32, n, 1000)
        });
        gpu.launch(consumer_stream, consumer).expect("launch");
        gpu.launch(producer_stream, producer).expect("launch");
        gpu.synchronize()
            .unwrap_or_else(|e| panic!("message passing (seed {seed}): {e}"));
        let got = out.0[0];
        assert_eq!(
            got,
            message::reference::mp_result(consumers, producers, n, got.waited_ns),
            "seed {seed}"
        );
    }
}

#[test]
fn vector_loads_and_stores() {
    let n = 1024u32;
    let src: Vec<u32> = (0..n).map(|i| (i as f32 * 0.37 - 100.0).to_bits()).collect();
    let want = vector::reference::vector_copy(&src);
    for seed in SEEDS {
        let mut s = Buf::new(src.clone());
        let mut d = Buf::new(vec![0u32; n as usize * vector::VECTOR_REGIONS]);
        let (sp, dp) = (s.addr(), d.addr());
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "vector_copy", x(2), x(64), 0, move || unsafe {
            vector::vector_copy(sp as *const u32, dp as *mut u32, n)
        });
        compare("vector_copy", &d.0, &want, n as usize);
    }
}

#[test]
fn cp_async() {
    let ctas = 3usize;
    let src: Vec<u8> = (0..ctas * copy_async::CP_SRC_BYTES)
        .map(|i| (i * 131 % 251) as u8 + 1)
        .collect();
    let want = copy_async::reference::cp_async_copy(&src);
    for seed in SEEDS {
        // Keep the source 16-byte aligned, as the kernel requires.
        let mut s = Buf::new(vec![0u128; src.len() / 16]);
        // SAFETY: copies `src.len()` bytes into a buffer of exactly that size.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), s.addr() as *mut u8, src.len()) };
        let mut out = Buf::new(vec![0u32; ctas * 64 * copy_async::CP_WORDS]);
        let (sp, op) = (s.addr(), out.addr());
        let smem = copy_async::CP_SMEM_BYTES as usize;
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(
            seed,
            "cp_async_copy",
            x(ctas as u32),
            x(copy_async::CP_BLOCK),
            smem,
            move || unsafe { copy_async::cp_async_copy(sp as *const u8, op as *mut u32) },
        );
        compare("cp_async_copy", &out.0, &want, copy_async::CP_WORDS);
    }
}

#[test]
fn ldmatrix_and_mma() {
    let (a, b, c) = tensor_core::reference::mma_inputs();
    let bt = tensor_core::reference::transpose(&b);
    let want: Vec<u32> = tensor_core::reference::mma_tile(&a, &b, &c)
        .iter()
        .map(|x| x.to_bits())
        .collect();
    for seed in SEEDS {
        let mut out = Buf::new(vec![0u32; 32 * tensor_core::PROBE_WORDS]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "ldmatrix_probe", x(1), x(32), 0, move || unsafe {
            tensor_core::ldmatrix_probe(p as *mut u32)
        });
        compare(
            "ldmatrix_probe",
            &out.0,
            &tensor_core::reference::ldmatrix_probe(),
            tensor_core::PROBE_WORDS,
        );

        for f16 in [false, true] {
            // 16-byte aligned buffers of 16-bit patterns.
            let bits = |v: &[f32]| {
                let conv = |x: f32| {
                    if f16 {
                        half::f16::from_f32(x).to_bits()
                    } else {
                        half::bf16::from_f32(x).to_bits()
                    }
                };
                let mut buf = Buf::new(vec![0u128; v.len() / 8]);
                let p = buf.addr() as *mut u16;
                for (i, &x) in v.iter().enumerate() {
                    // SAFETY: i < v.len(), inside the buffer of v.len() u16.
                    unsafe { p.add(i).write(conv(x)) };
                }
                buf
            };
            let (mut da, mut db, mut dbt) = (bits(&a), bits(&b), bits(&bt));
            let mut dc = Buf::new(c.clone());
            let mut d = Buf::new(vec![0f32; 2 * 16 * 16]);
            let (pa, pb, pbt, pc, pd) = (da.addr(), db.addr(), dbt.addr(), dc.addr(), d.addr());
            // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
            run(seed, "mma", x(1), x(32), 0, move || unsafe {
                let args = (
                    pa as *const u16,
                    pb as *const u16,
                    pbt as *const u16,
                    pc as *const f32,
                    pd as *mut f32,
                );
                if f16 {
                    tensor_core::mma_f16(args.0, args.1, args.2, args.3, args.4)
                } else {
                    tensor_core::mma_bf16(args.0, args.1, args.2, args.3, args.4)
                }
            });
            let got: Vec<u32> = d.0.iter().map(|x| x.to_bits()).collect();
            compare(if f16 { "mma_f16" } else { "mma_bf16" }, &got, &want, 16);
        }
    }
}

#[test]
fn warp_collectives() {
    for seed in SEEDS {
        let mut out = Buf::new(vec![0u32; 2 * 64 * warp_ops::WARP_WORDS]);
        let p = out.addr();
        // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
        run(seed, "warp_collectives", x(2), x(64), 0, move || unsafe {
            warp_ops::warp_collectives(p as *mut u32)
        });
        compare(
            "warp_collectives",
            &out.0,
            &warp_ops::reference::warp_collectives(128),
            warp_ops::WARP_WORDS,
        );
    }
}

#[test]
fn conversions_round_like_half() {
    let inp = conversions::reference::convert_inputs();
    let want = conversions::reference::convert(&inp);
    let n = inp.len() as u32;
    let mut i = Buf::new(inp);
    let mut out = Buf::new(vec![0u32; n as usize * conversions::CONVERT_WORDS]);
    let (ip, op) = (i.addr(), out.addr());
    // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
    run(0, "convert", x(1), x(n), 0, move || unsafe {
        conversions::convert(ip as *const f32, op as *mut u32, n)
    });
    compare("convert", &out.0, &want, conversions::CONVERT_WORDS);
}

#[test]
fn math_fma_and_sfu_within_their_bounds() {
    let inp = math::reference::math_inputs();
    let n = inp.len() as u32;
    let mut i = Buf::new(inp.clone());
    let mut out = Buf::new(vec![0u32; n as usize * math::MATH_WORDS]);
    let (ip, op) = (i.addr(), out.addr());
    // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
    run(0, "math", x(4), x(128), 0, move || unsafe {
        math::math(ip as *const f32, op as *mut u32, n)
    });
    let bad = math::reference::check_math(&inp, &out.0);
    assert!(
        bad.is_empty(),
        "math: {} mismatches:\n{}",
        bad.len(),
        bad[..bad.len().min(12)].join("\n")
    );
}

#[test]
fn timers_and_fences() {
    let sleep_ns = 2000u32;
    let mut out = Buf::new(vec![0u64; 4 * timers::TIMER_WORDS]);
    let p = out.addr();
    // SAFETY: the buffers outlive the run and have the sizes the kernel documents.
    run(0, "fences_and_timers", x(4), x(32), 0, move || unsafe {
        timers::fences_and_timers(p as *mut u64, sleep_ns)
    });
    timers::reference::check_timers(&out.0, sleep_ns).unwrap();
}
