//! `GUIDE.md` is true: its Rust blocks appear as written in the files that are compiled
//! (`examples/src/guide.rs`, `src/lib.rs`, `build.rs`, this test), and its code runs.

use megaops::Result;
use megaops::testing::cpu_device;
use megaops_examples::guide::guide_run;

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
