//! `GUIDE.md` is true: its Rust blocks appear as written in the files that are compiled
//! (`examples/src/guide.rs`, `src/lib.rs`, `build.rs`, this test), and its code runs.

use megaops::testing::cpu_device;
use megaops::{AsyncStream, DynRows, LaunchOptions, Result, Tensor, Tiled};
use megaops_examples::guide::{guide_run, guide_scale};

/// The ```rust blocks of the guide.
fn rust_blocks(guide: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in guide.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap_or_default().join("\n")),
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_rust_block_of_the_guide_is_compiled_code() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).unwrap_or_else(|e| panic!("{p}: {e}"));
    let guide = read("GUIDE.md");
    let sources: Vec<(&str, String)> = [
        "examples/src/guide.rs",
        "examples/src/lib.rs",
        "examples/build.rs",
        "examples/tests/guide.rs",
    ]
    .into_iter()
    .map(|p| (p, read(p)))
    .collect();
    let blocks = rust_blocks(&guide);
    assert!(blocks.len() >= 4, "found {} rust blocks", blocks.len());
    for block in blocks {
        assert!(
            sources.iter().any(|(_, s)| s.contains(&block)),
            "this block of GUIDE.md is in none of {:?}:\n{block}",
            sources.iter().map(|(p, _)| *p).collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_guide_runs_on_the_cpu_backend() -> Result<()> {
    for seed in 0..4 {
        let dev = cpu_device(seed)?;
        let z = guide_run(&dev, 37, 5)?;
        let want: Vec<f32> = (0..37 * 5).map(|v| v as f32).collect();
        assert_eq!(z, want, "seed {seed}");
    }
    Ok(())
}

#[test]
fn the_guide_traces_on_the_cpu_backend() -> Result<()> {
    let dev = cpu_device(2)?;
    let (m, n) = (37usize, 5usize);
    let (m32, n32) = (m as u32, n as u32);
    let values: Vec<f32> = (0..m * n).map(|v| v as f32).collect();
    let x = Tensor::from_slice(&dev, &[m, n], &values)?;
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[m, n], DynRows(8), "y")?;
    let mut z = Tensor::<f32>::zeros(&dev, &[m, n])?;
    let dir = std::env::temp_dir().join(format!("megaops-guide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| megaops::Error::Invalid(e.to_string()))?;
    dev.start_trace(1 << 16)?; // room for 65536 tile records
    let s = AsyncStream::new(&dev, 2)?;
    s.set_tracing(true); // every launch on s records its tiles (or LaunchOptions::traced())
    guide_scale::launch(&s, &x, &mut y, m32, n32, 2.0)?;
    guide_scale::launch_with(&s, &LaunchOptions::config(1), &y, &mut z, m32, n32, 0.5)?;
    let trace = dev.take_trace()?; // waits for the device, empties the log
    trace.check().expect("every tile once, consumers after producers");
    trace.write_perfetto(&dir.join("guide.json"))?; // open in ui.perfetto.dev
    println!("{}", trace.breakdown()); // per operator: exposed vs overlapped µs
    assert_eq!(z.to_vec()?, values);
    assert_eq!(trace.launches.len(), 2);
    assert!(std::fs::metadata(dir.join("guide.json")).is_ok_and(|m| m.len() > 100));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// GUIDE.md §8 as written: tuning the tiny model's decode step on the CPU backend.
#[test]
fn the_guide_tunes_a_decode_step() -> std::result::Result<(), Box<dyn std::error::Error>> {
    use megaops_models::GenerateOptions;
    use std::time::Duration;
    let dev = cpu_device(8)?;
    let config = megaops_models::presets::preset("tiny")?;
    let weights = megaops_models::presets::RandomWeights::new(config.clone(), 8);
    let lm = megaops_models::CausalLm::load(&dev, &config, &weights, &mut |_, _| {})?;
    let batch = 1;
    use megaops_models::tune::{SearchOptions, Space, StepTimer, tune};
    let mut timer = StepTimer::new(&lm, batch, 128, 2, 3, 30)?; // context 128, 2 streams, 3 + 30 replays
    let space = Space::decode(&lm, batch, timer.max_len(), dev.sm_count(), 2, &[])?;
    let budget = SearchOptions {
        budget: Duration::from_secs(2),
        ..SearchOptions::default()
    };
    let tuned = tune(&mut timer, &space, &budget, &mut |event| println!("{event:?}"))?;
    let opts = GenerateOptions {
        plan: tuned.plan,
        ..GenerateOptions::default()
    };
    assert!(!opts.plan.is_default(), "the tuned plan is explicit");
    Ok(())
}
