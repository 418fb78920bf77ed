//! The semaphore dump of live `Tiled` tensors (issue 15, part 4), on the CPU backend:
//! attached to hang and deadlock reports, and on demand through
//! `Device::dump_semaphores` — names, shapes, tilings, phases, producers, and each data
//! tile's signals received of expected, with complete tiles listed compactly.

use megaops::device::sync::EPOCH_STRIDE;
use megaops::testing::cpu_device;
use megaops::{
    AsyncStream, DumpPhase, DynGrid, DynRows, Error, Irregular, LaunchOptions, Result, SemaphoreDump, Tensor, Tiled,
};
use megaops_examples::protocol::{produce, row_sums};

/// The dump part of a failure message: everything after the first blank line.
fn dump_part(msg: &str) -> &str {
    msg.split_once("\n\n").map_or("", |(_, dump)| dump)
}

#[test]
fn a_deadlock_report_ends_with_the_semaphores_of_every_live_tiled_tensor() -> Result<()> {
    let dev = cpu_device(4)?;
    let s = AsyncStream::new(&dev, 2)?;
    // `x` is produced and consumed; `y` waits for a producer that never runs.
    let mut x = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "x")?;
    let mut x_sums = Tensor::<f32>::zeros(&dev, &[12])?;
    produce::launch_with(&s, &LaunchOptions::config(0), &mut x, 12, 8, 3, 0)?;
    row_sums::launch_with(&s, &LaunchOptions::config(0), &x, &mut x_sums, 12, 8)?;
    s.synchronize()?;
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y")?;
    let mut sums = Tensor::<f32>::zeros(&dev, &[12])?;
    y.plant_missing_producer("produce", &[4, 0]);
    row_sums::launch_with(&s, &LaunchOptions::config(0), &y, &mut sums, 12, 8)?;
    let err = s.synchronize().expect_err("nobody produces y");
    let msg = err.to_string();
    eprintln!("{msg}");
    let Error::Sync(failure) = &err else {
        panic!("not a synchronisation failure: {msg}");
    };
    let dump = failure.semaphores().expect("the failure carries the dump");

    // The typed dump: y with its shape, tiling, producer and three empty data tiles.
    let yd = dump.tensor("y").expect("y is live");
    assert_eq!(yd.shape, [12, 8]);
    assert_eq!(yd.tiling, "DynRows(4)");
    assert_eq!(
        yd.dims.iter().map(|d| (d.tile, d.count)).collect::<Vec<_>>(),
        [(4, 3), (8, 1)]
    );
    assert_eq!(yd.phase, DumpPhase::Produced);
    let producer = yd.producer.as_ref().expect("y's producer is recorded");
    assert_eq!((producer.kernel.as_str(), producer.launch_id), ("produce", 0));
    assert_eq!(producer.stream, None);
    assert_eq!(yd.tiles.len(), 3);
    for (i, t) in yd.tiles.iter().enumerate() {
        assert_eq!((t.index, t.coords.as_slice()), (i as u32, [i as u32, 0].as_slice()));
        assert_eq!((t.value, t.received, t.expected), (0, Some(0), Some(1)), "{msg}");
    }
    assert_eq!(yd.incomplete().count(), 3);
    // x: produced by its launch, every tile complete.
    let xd = dump.tensor("x").expect("x is live");
    let xp = xd.producer.as_ref().expect("x's producer is recorded");
    assert!(
        xp.launch_id > 0 && xp.stream.as_deref().is_some_and(|s| s.starts_with("stream #")),
        "{msg}"
    );
    assert!(xd.tiles.iter().all(|t| t.is_complete()), "{msg}");

    // The rendered report: the wait lines, a blank line, then the table.
    let waits: Vec<&str> = msg.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(
        waits
            .iter()
            .any(|w| w.trim() == "row_sums CTA (0) waits on y[0] = 0 of 1 signals"),
        "{msg}"
    );
    let table = dump_part(&msg);
    assert_eq!(table, dump.to_string());
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "live Tiled tensors:", "{msg}");
    let y_head = lines.iter().position(|l| l.starts_with("  `y`")).expect("a line for y");
    assert_eq!(
        lines[y_head],
        "  `y` f32[12, 8], DynRows(4): data tiles 4 x 8 (3 x 1 tiles), epoch 0: produced by `produce` (recorded, \
         never launched)",
        "{msg}"
    );
    for i in 0..3 {
        assert_eq!(
            lines[y_head + 1 + i],
            format!("    y[{i}] = 0 of 1 signals (tile {i} at ({i},0), semaphore 0)"),
            "{msg}"
        );
    }
    let x_head = lines.iter().position(|l| l.starts_with("  `x`")).expect("a line for x");
    assert!(
        lines[x_head].contains(&format!(
            "epoch 0: produced by `produce` (launch {} on {})",
            xp.launch_id,
            xp.stream.as_deref().unwrap_or_default()
        )),
        "{msg}"
    );
    assert_eq!(lines[x_head + 1], "    all tiles 0..=2 complete", "{msg}");
    Ok(())
}

#[test]
fn dump_semaphores_on_demand_shows_phases_producers_and_only_live_tensors() -> Result<()> {
    let dev = cpu_device(5)?;
    let s = AsyncStream::new(&dev, 2)?;
    let mut x = Tiled::<f32, DynRows>::new(&dev, &[16, 8], DynRows(8), "x")?;
    let mut sums = Tensor::<f32>::zeros(&dev, &[16])?;
    produce::launch_with(&s, &LaunchOptions::config(0), &mut x, 16, 8, 1, 0)?;
    row_sums::launch_with(&s, &LaunchOptions::config(0), &x, &mut sums, 16, 8)?;
    let w = Tiled::complete(Tensor::<f32>::zeros(&dev, &[4, 4])?, DynRows(2), "w")?;
    let mut armed = Tiled::<f32, DynRows>::new(&dev, &[6, 4], DynRows(3), "armed")?;
    let dropped = Tiled::<f32, DynRows>::new(&dev, &[6, 4], DynRows(3), "dropped")?;
    drop(dropped);
    s.synchronize()?;

    let dump: SemaphoreDump = dev.dump_semaphores()?;
    let names: Vec<&str> = dump.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["x", "w", "armed"], "{dump}");
    let xd = dump.tensor("x").expect("x");
    assert_eq!(xd.phase, DumpPhase::Produced);
    assert_eq!(xd.producer.as_ref().map(|p| p.kernel.as_str()), Some("produce"));
    assert!(xd.tiles.iter().all(|t| t.is_complete()), "{dump}");
    // produce's config 0 has 16-row kernel tiles: one signal per 8-row data tile.
    assert!(xd.tiles.iter().all(|t| t.expected == Some(1)), "{dump}");
    let wd = dump.tensor("w").expect("w");
    assert_eq!((wd.phase, wd.producer.is_none()), (DumpPhase::Complete, true));
    let ad = dump.tensor("armed").expect("armed");
    assert_eq!((ad.phase, ad.producer.is_none()), (DumpPhase::Armed, true));
    assert!(ad.tiles.iter().all(|t| t.value == 0 && t.received.is_none()), "{dump}");
    let text = dump.to_string();
    assert!(text.contains("    all tiles 0..=1 complete"), "{text}");
    assert!(
        text.contains("  `w` f32[4, 4], DynRows(2): data tiles 2 x 4 (2 x 1 tiles), epoch 0: complete"),
        "{text}"
    );
    assert!(text.contains("epoch 0: armed (no producer launched yet)"), "{text}");
    assert!(!text.contains("dropped"), "{text}");

    // While a producer is planted: the armed tensor now waits for it.
    armed.plant_missing_producer("produce", &[3, 0]);
    let dump = dev.dump_semaphores()?;
    let ad = dump.tensor("armed").expect("armed");
    assert_eq!(ad.phase, DumpPhase::Produced);
    assert_eq!(ad.incomplete().count(), 2, "{dump}");
    let text = dump.to_string();
    assert!(
        text.contains("produced by `produce` (recorded, never launched)"),
        "{text}"
    );
    assert!(
        text.contains("    armed[1] = 0 of 1 signals (tile 1 at (1,0), semaphore 0)"),
        "{text}"
    );
    drop(x);
    let names: Vec<String> = dev.dump_semaphores()?.tensors.into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["w", "armed"]);
    assert_eq!(w.name(), "w");
    Ok(())
}

#[test]
fn many_tiles_are_listed_compactly_with_a_cap_on_incomplete_lines() -> Result<()> {
    let dev = cpu_device(6)?;
    let mut y = Tiled::<f32, DynRows>::new(&dev, &[48, 4], DynRows(1), "y")?;
    // Tiles 0..=13 and 20 complete (a one-signal tile is complete at EPOCH_STRIDE).
    let values: Vec<i32> = (0..48)
        .map(|i| if i < 14 || i == 20 { EPOCH_STRIDE } else { 0 })
        .collect();
    y.semaphores().copy_from_slice(&values)?;
    y.plant_missing_producer("produce", &[1, 0]);
    let text = dev.dump_semaphores()?.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[2], "    tiles 0..=13, 20 complete", "{text}");
    assert_eq!(
        lines[3], "    y[14] = 0 of 1 signals (tile 14 at (14,0), semaphore 0)",
        "{text}"
    );
    // 33 incomplete tiles: 16 lines, then the count of the rest.
    assert_eq!(lines.len(), 3 + 16 + 1, "{text}");
    assert_eq!(lines[19], "    ... and 17 more incomplete", "{text}");
    Ok(())
}

#[test]
fn two_dimensional_and_irregular_tilings_name_their_tiles_and_targets() -> Result<()> {
    let dev = cpu_device(7)?;
    let mut g = Tiled::<f32, DynGrid>::new(&dev, &[8, 8], DynGrid(4, 4), "g")?;
    let mut z = Tiled::<f32, _>::new(&dev, &[12, 4], Irregular::rows(vec![0, 3, 12]), "z")?;
    // 4 x 2 producer tiles: two per 4 x 4 data tile. 4-row producer tiles: one covers
    // rows 0..3, three cover rows 3..12.
    g.plant_missing_producer("produce", &[4, 2]);
    z.plant_missing_producer("produce", &[4, 0]);
    let dump = dev.dump_semaphores()?;
    let gd = dump.tensor("g").expect("g");
    assert_eq!(gd.tiles[2].coords, [1, 0]);
    assert_eq!(dump.tensor("z").map(|z| z.dims[0].bounds.clone()), Some(vec![0, 3, 12]));
    let text = dump.to_string();
    assert!(
        text.contains("  `g` f32[8, 8], DynGrid(4, 4): data tiles 4 x 4 (2 x 2 tiles), epoch 0: "),
        "{text}"
    );
    assert!(
        text.contains("    g[1,0] = 0 of 2 signals (tile 2 at (1,0), semaphore 0)"),
        "{text}"
    );
    assert!(
        text.contains(": data tiles bounds [0, 3, 12] x 4 (2 x 1 tiles), epoch 0: "),
        "{text}"
    );
    assert!(
        text.contains("    z[0] = 0 of 1 signals (tile 0 at (0,0), semaphore 0)"),
        "{text}"
    );
    assert!(
        text.contains("    z[1] = 0 of 3 signals (tile 1 at (1,0), semaphore 0)"),
        "{text}"
    );
    Ok(())
}
