//! The memory-model rule for reading synchronised inputs (see `megaops::device::memory`):
//! after the injected wait (an acquire at GPU scope), *plain* loads see the producer's
//! data, even when the same line was loaded into L1 before the wait. The probe reads every
//! element once before the wait (possibly the previous cycle's value) and once after;
//! the value after must always be the current cycle's. On the GPU this is the stress test
//! that would catch a stale read; on the CPU backend it checks the kernels themselves.

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{AsyncStream, Device, DynChunks, LaunchOptions, ReleaseNext, Result, Tensor, Tiled};
use megaops_examples::protocol::{stale_probe, stamp_values};

/// `rounds` cycles of produce → probe; returns how many reads *before* the wait saw the
/// previous cycle's value (the race the test needs), after checking every read after it.
fn probe(dev: &Device, n: u32, rounds: u32, delay_ns: u64) -> Result<usize> {
    let s = AsyncStream::new(dev, 2)?;
    let mut y = Tiled::<u32, DynChunks>::new(dev, &[n as usize], DynChunks(128), "y")?;
    let mut before = Tensor::<u32>::zeros(dev, &[n as usize])?;
    let mut after = Tensor::<u32>::zeros(dev, &[n as usize])?;
    let value = |r: u32| r.wrapping_mul(0x9E37_79B9) | 1;
    stamp_values::launch(&s, &mut y, n, value(0), 0)?;
    let mut stale_before = 0;
    for r in 1..=rounds {
        y.rearm();
        // The consumer starts once every producer CTA is dispatched, so its waiting CTAs
        // never hold SMs the producer's later waves need; the last wave still races.
        let last = LaunchOptions::default().release_next(ReleaseNext::LastCta);
        stamp_values::launch_with(&s, &last, &mut y, n, value(r), delay_ns)?;
        stale_probe::launch(&s, &y, y.tensor().addr(), &mut before, &mut after, n)?;
        let (b, a) = (before.to_vec()?, after.to_vec()?);
        for e in 0..n {
            let (want, old) = (value(r) ^ e, value(r - 1) ^ e);
            let got = a[e as usize];
            assert_eq!(
                got,
                want,
                "round {r}: element {e} read {got:#x} after the acquire ({}), want {want:#x}",
                if got == old {
                    "the previous cycle's value: a stale read"
                } else {
                    "neither cycle's value"
                }
            );
            stale_before += usize::from(b[e as usize] == old);
        }
    }
    Ok(stale_before)
}

#[test]
fn plain_loads_after_the_acquire_see_the_producers_data() -> Result<()> {
    for seed in 0..3 {
        probe(&cpu_device(seed)?, 1000, 3, 2_000)?;
    }
    Ok(())
}

#[test]
fn gpu_plain_loads_after_the_acquire_never_read_stale_data() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_plain_loads_after_the_acquire") else {
        return Ok(());
    };
    dev.preload(&megaops_examples::__MEGAOPS_PTX)?;
    let mut stale_before = 0;
    // Many rounds over 1 Mi elements (8192 CTAs per kernel, several waves: the consumer's
    // CTAs mostly run after the producer's), then over one CTA per SM with the producer
    // slowed far past the consumer's launch latency, so that every consumer CTA is
    // resident and reads its line before it is written.
    for (n, rounds, delay_ns) in [(1u32 << 20, 100u32, 20_000u64), (132 * 128, 1000, 100_000)] {
        stale_before += probe(&dev, n, rounds, delay_ns)?;
    }
    eprintln!("reads before the wait that saw the previous cycle: {stale_before}");
    assert!(
        stale_before > 0,
        "no consumer read its line before the producer wrote it: the test did not exercise the race \
         (raise the producer's delay)"
    );
    Ok(())
}
