//! The kernel chain of the `boundary` benchmark: every link adds one, on an overlapping
//! AsyncStream (2 and 3 streams, each begin rule), its serial mode and under graph replay, with one data
//! tile per tensor and one per producer CTA, with spins before and after the waits and
//! (GPU) at several poll spins; bad shapes are refused. The ping-pong kernel of the same
//! suite hands its tile back and forth correctly in every hop variant. On the CPU backend
//! over several interleavings, and on the GPU when one is present.

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{AsyncOptions, AsyncStream, BeginRule, Device, Result, Tensor};
use megaops_examples::chain::{Chain, ChainShape};
use megaops_examples::protocol::{hop, pingpong};
use std::time::Duration;

/// Runs each shape on each target eagerly, then twice more under one graph, checking the
/// result after each (outputs poisoned first).
fn chains_add_one_per_link(dev: &Device, links: usize) -> Result<()> {
    let mut targets = Vec::new();
    for rule in BeginRule::ALL {
        for streams in [2, 3] {
            let on = AsyncStream::with_options(
                dev,
                AsyncOptions {
                    streams,
                    begin_rule: Some(rule),
                    ..AsyncOptions::default()
                },
            )?;
            targets.push((format!("{streams} streams, {}", rule.name()), on));
        }
    }
    targets.push(("serial".to_string(), AsyncStream::serial(dev)?));
    for (ctas, tiles) in [(1, 1), (3, 1), (3, 3), (4, 8)] {
        let shape = ChainShape { ctas, tiles, links };
        for (name, on) in &targets {
            let mut chain = Chain::new(dev, shape)?;
            chain.run(on, 0)?;
            on.synchronize()?;
            assert_eq!(chain.mismatches()?, 0, "{shape} on {name}, eager");
            chain.poison()?;
            let graph = on.capture(|s| {
                chain.run(s, 50)?;
                chain.run_spinning(s, 40, 0)?;
                chain.run(s, 0)
            })?;
            graph.launch(on)?;
            on.synchronize()?;
            assert_eq!(chain.mismatches()?, 0, "{shape} on {name}, graph");
        }
    }
    Ok(())
}

#[test]
fn a_chain_adds_one_per_link_on_every_target() -> Result<()> {
    for seed in 0..3 {
        chains_add_one_per_link(&cpu_device(seed)?, 5)?;
    }
    Ok(())
}

#[test]
fn bad_chain_shapes_are_refused() -> Result<()> {
    let dev = cpu_device(0)?;
    let err = |ctas, tiles, links| {
        Chain::new(&dev, ChainShape { ctas, tiles, links })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(
        err(0, 1, 4).contains("needs at least one CTA and one link"),
        "{}",
        err(0, 1, 4)
    );
    assert!(err(2, 1, 0).contains("needs at least one CTA and one link"));
    assert!(
        err(2, 3, 4).contains("3 data tiles do not divide the 256 elements"),
        "{}",
        err(2, 3, 4)
    );
    assert!(err(2, 0, 4).contains("0 data tiles"));
    assert!(err(u32::MAX, 1, 4).contains("overflow"));
    Ok(())
}

#[test]
fn gpu_chains_add_one_per_link() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_chains_add_one_per_link") else {
        return Ok(());
    };
    for spin in [Duration::ZERO, Duration::from_micros(5), Duration::from_millis(1)] {
        dev.set_poll_spin(spin)?;
        chains_add_one_per_link(&dev, 64)?;
    }
    Ok(())
}

/// Many eager chains, then one graph uploaded and replayed many times, on AsyncStreams
/// with start events (every start event must outlive its launch) and with programmatic
/// launches.
#[test]
fn gpu_chains_of_each_begin_rule_run_eagerly_and_replay_many_times() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_chains_of_each_begin_rule_run_eagerly_and_replay_many_times") else {
        return Ok(());
    };
    for rule in [BeginRule::StartEvent, BeginRule::Programmatic] {
        for streams in [2, 3] {
            let on = AsyncStream::with_options(
                &dev,
                AsyncOptions {
                    streams,
                    begin_rule: Some(rule),
                    ..AsyncOptions::default()
                },
            )?;
            let name = format!("{streams} streams, {}", rule.name());
            let shape = ChainShape {
                ctas: 132,
                tiles: 132,
                links: 64,
            };
            let mut chain = Chain::new(&dev, shape)?;
            for round in 0..20 {
                chain.run(&on, 0)?;
                if round % 5 == 4 {
                    on.synchronize()?;
                    assert_eq!(chain.mismatches()?, 0, "{name}, eager round {round}");
                }
            }
            eprintln!("{name}: eager rounds done");
            let graph = on.capture(|s| chain.run(s, 0))?;
            graph.upload()?;
            eprintln!("{name}: captured and uploaded");
            for replay in 0..10 {
                chain.poison()?;
                graph.launch(&on)?;
                on.synchronize()?;
                assert_eq!(chain.mismatches()?, 0, "{name}, replay {replay}");
            }
            eprintln!("{name}: replays done");
        }
    }
    Ok(())
}

/// Every hop variant of `pingpong` over `rounds` rounds leaves CTA 0's half at
/// `2 · rounds - 1`, CTA 1's at `2 · rounds` and both counters at `rounds`.
fn pingpong_hands_the_tile_back_and_forth(dev: &Device, rounds: u32) -> Result<()> {
    let on = AsyncStream::new(dev, 2)?;
    let mut flags = Tensor::<i32>::zeros(dev, &[2])?;
    let mut data = Tensor::<f32>::zeros(dev, &[256])?;
    let mut elapsed = Tensor::<u32>::zeros(dev, &[1])?;
    for signal in hop::SIGNALS {
        for poll in hop::POLLS {
            let variant = poll | signal;
            flags.fill(0)?;
            data.fill(0.0)?;
            pingpong::launch(&on, &mut flags, &mut data, &mut elapsed, rounds, variant)?;
            on.synchronize()?;
            let d = data.to_vec()?;
            let name = hop::name(variant);
            assert_ne!(name, "unknown");
            assert!(
                d[..128].iter().all(|&v| v == (2 * rounds - 1) as f32),
                "{name}: {:?}",
                &d[..4]
            );
            assert!(
                d[128..].iter().all(|&v| v == (2 * rounds) as f32),
                "{name}: {:?}",
                &d[128..132]
            );
            assert_eq!(flags.to_vec()?, vec![rounds as i32; 2], "{name}");
        }
    }
    Ok(())
}

#[test]
fn pingpong_hands_its_tile_back_and_forth_in_every_variant() -> Result<()> {
    for seed in 0..2 {
        pingpong_hands_the_tile_back_and_forth(&cpu_device(seed)?, 6)?;
    }
    Ok(())
}

#[test]
fn gpu_pingpong_hands_its_tile_back_and_forth() -> Result<()> {
    let Some(dev) = gpu_or_skip("gpu_pingpong_hands_its_tile_back_and_forth") else {
        return Ok(());
    };
    pingpong_hands_the_tile_back_and_forth(&dev, 500)
}

#[test]
fn a_poll_spin_longer_than_a_launch_can_carry_is_refused() -> Result<()> {
    let dev = cpu_device(0)?;
    let err = dev.set_poll_spin(Duration::from_secs(5)).unwrap_err().to_string();
    assert!(err.contains("longer than the 4s a launch can carry"), "{err}");
    dev.set_poll_spin(Duration::from_micros(3))?;
    assert_eq!(dev.poll_spin(), Duration::from_micros(3));
    Ok(())
}
