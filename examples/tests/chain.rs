//! The kernel chain of the `boundary` benchmark: every link adds one, on an overlapping
//! AsyncStream (2 and 3 streams), its serial mode and under graph replay, with one data
//! tile per tensor and one per producer CTA; bad shapes are refused. On the CPU backend
//! over several interleavings, and on the GPU when one is present.

use megaops::testing::{cpu_device, gpu_or_skip};
use megaops::{AsyncStream, Device, Result};
use megaops_examples::chain::{Chain, ChainShape};

/// Runs each shape on each target eagerly, then twice more under one graph, checking the
/// result after each (outputs poisoned first).
fn chains_add_one_per_link(dev: &Device, links: usize) -> Result<()> {
    let targets = [
        ("2 streams", AsyncStream::new(dev, 2)?),
        ("3 streams", AsyncStream::new(dev, 3)?),
        ("serial", AsyncStream::serial(dev)?),
    ];
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
    chains_add_one_per_link(&dev, 64)
}
