//! What the host remembers about each launch, to turn a device-side failure record
//! (launch id, tile, tensor id, semaphore index, value, target) into a sentence such as
//! `matmul CTA (3,1) waited 5.0 s on y[2] = 1 of 3 signals`.

use megaops_device::cpu::{TileRead, coords};
use megaops_device::sync::tiling::{TileBox, signals_received, target_of};
use megaops_device::sync::{DimTiling, ErrorRecord, MAX_RANK, WaitSite};
use std::collections::BTreeMap;

/// Host copy of one dimension's data tiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostDim {
    pub size: u32,
    pub tile: u32,
    pub bounds: Vec<u32>,
}

impl HostDim {
    pub fn count(&self) -> u32 {
        if self.tile == 0 {
            self.bounds.len().saturating_sub(1) as u32
        } else {
            self.size.div_ceil(self.tile)
        }
    }

    /// Device-layout view (bounds point into this host copy; only for host arithmetic).
    pub fn as_dim(&self) -> DimTiling {
        DimTiling {
            size: self.size,
            tile: self.tile,
            count: self.count(),
            bounds: if self.tile == 0 {
                self.bounds.as_ptr()
            } else {
                std::ptr::null()
            },
        }
    }
}

/// How a synchronised tensor looked to one launch.
#[derive(Clone, Debug)]
pub(crate) struct TensorNote {
    pub name: String,
    pub dims: Vec<HostDim>,
    /// Consumer ready value (serial-compared).
    pub ready: i32,
    /// The producer's kernel tile per dimension and split factor, if known.
    pub producer: Option<([u32; MAX_RANK], u32)>,
    /// The producer's kernel and launch id (0: none was launched), if known.
    pub producer_launch: Option<(&'static str, u32)>,
}

/// One launch.
#[derive(Clone, Debug)]
pub(crate) struct LaunchNote {
    pub kernel: String,
    pub tile_grid: Vec<u32>,
    pub tensors: Vec<(u32, TensorNote)>,
    /// For AsyncStream wait kernels: the kernel whose start they wait for.
    pub waits_for: Option<String>,
    /// Its tile-wait timeout in ns (`LaunchOptions::timeout` or the device's).
    pub timeout_ns: u64,
    /// Its tile config's constants (`BM=64, BK=256`; empty if it has none).
    pub config: &'static str,
    /// The stream it was submitted to, as reports name it (`stream #4`, or
    /// `stream #4 (lane 1 of AsyncStream #2)`); empty until submitted.
    pub stream: String,
    /// The call site's name for it (`LaunchOptions::site`).
    pub site: Option<&'static str>,
}

/// Notes of recent launches, by launch id.
#[derive(Default)]
pub(crate) struct LaunchNotes {
    launches: BTreeMap<u32, LaunchNote>,
}

/// Launch notes kept (older ones are dropped; a failure then reads "launch #N").
const KEEP: usize = 1 << 16;

impl LaunchNotes {
    pub fn insert(&mut self, id: u32, note: LaunchNote) {
        self.launches.insert(id, note);
        while self.launches.len() > KEEP {
            self.launches.pop_first();
        }
    }

    /// The note of launch `id`, if kept.
    pub fn get(&self, id: u32) -> Option<&LaunchNote> {
        self.launches.get(&id)
    }

    fn kernel_and_tile(&self, launch_id: u32, tile: u32) -> String {
        match self.launches.get(&launch_id) {
            Some(n) if n.waits_for.is_some() => format!("AsyncStream wait before `{}`", n.kernel),
            Some(n) => {
                let site = n.site.map(|s| format!(" ({s})")).unwrap_or_default();
                format!(
                    "{}{site} CTA {}",
                    n.kernel,
                    fmt_coords(&tile_coords(tile, &n.tile_grid))
                )
            }
            None => format!("launch #{launch_id} tile {tile}"),
        }
    }

    fn what(&self, site: &WaitSite, value: i32) -> String {
        let Some(launch) = self.launches.get(&site.launch_id) else {
            return format!(
                "tensor#{}[{}] = {value}, target {}",
                site.tensor_id, site.sem_index, site.target
            );
        };
        if let Some(producer) = &launch.waits_for {
            return format!(
                "the start of `{producer}` (begin flag {value}, waiting for {})",
                site.target
            );
        }
        let Some((_, t)) = launch.tensors.iter().find(|(id, _)| *id == site.tensor_id) else {
            return format!(
                "tensor#{}[{}] = {value}, target {}",
                site.tensor_id, site.sem_index, site.target
            );
        };
        let counts: Vec<u32> = t.dims.iter().map(HostDim::count).collect();
        let coords = tile_coords(site.sem_index, &counts);
        let index = tile_index(&coords, &counts);
        match t.producer {
            Some((ktile, split)) => {
                let mut dims = [DimTiling::plain(0, 1); MAX_RANK];
                for (d, h) in dims.iter_mut().zip(&t.dims) {
                    *d = h.as_dim();
                }
                let mut c = [0u32; MAX_RANK];
                c[..coords.len()].copy_from_slice(&coords);
                // SAFETY: bounds point into t.dims, alive for this call.
                let target = unsafe { target_of(&dims, t.dims.len() as u32, &c, &ktile, split) };
                let got = signals_received(value, t.ready, target);
                format!("{}[{index}] = {got} of {target} signals", t.name)
            }
            None => format!("{}[{index}] (semaphore {value}, ready at {})", t.name, t.ready),
        }
    }

    /// `matmul CTA (3,1) waited 5.0 s on y[2] = 1 of 3 signals`.
    pub fn describe_timeout(&self, r: &ErrorRecord) -> String {
        let site = WaitSite {
            sem: std::ptr::null(),
            target: r.target,
            launch_id: r.launch_id,
            tile: r.tile,
            tensor_id: r.tensor_id,
            sem_index: r.sem_index,
        };
        format!(
            "{} waited {:.1} s on {}",
            self.kernel_and_tile(r.launch_id, r.tile),
            r.waited_ns as f64 * 1e-9,
            self.what(&site, r.value)
        )
    }

    /// For a failure report's headline: the producer each waited-on tensor expects, e.g.
    /// ``; expected producer: `y` from `matmul` (launch 3)`` (empty if none is known).
    pub fn expected_producers(&self, waits: impl Iterator<Item = (u32, u32)>) -> String {
        let mut seen: Vec<String> = Vec::new();
        for (launch_id, tensor_id) in waits {
            let Some(t) = self
                .launches
                .get(&launch_id)
                .and_then(|l| l.tensors.iter().find(|(id, _)| *id == tensor_id))
                .map(|(_, t)| t)
            else {
                continue;
            };
            let Some((kernel, launch)) = t.producer_launch else {
                continue;
            };
            let line = match (launch, self.launches.get(&launch).map(|n| n.stream.as_str())) {
                (0, _) => format!("`{}` from `{kernel}` (recorded, never launched)", t.name),
                (l, Some(stream)) if !stream.is_empty() => {
                    format!("`{}` from `{kernel}` (launch {l} on {stream})", t.name)
                }
                (l, _) => format!("`{}` from `{kernel}` (launch {l})", t.name),
            };
            if !seen.contains(&line) {
                seen.push(line);
            }
        }
        match seen.len() {
            0 => String::new(),
            1 => format!("; expected producer: {}", seen[0]),
            _ => format!("; expected producers: {}", seen.join(", ")),
        }
    }

    /// The stream launch `launch_id` was submitted to, if it is remembered and was submitted.
    pub fn stream_of(&self, launch_id: u32) -> Option<String> {
        self.launches
            .get(&launch_id)
            .filter(|n| !n.stream.is_empty())
            .map(|n| n.stream.clone())
    }

    /// The tile-wait timeout of the given launches, if they all have the same one.
    pub fn timeout_of(&self, launches: impl Iterator<Item = u32>) -> Option<std::time::Duration> {
        let mut limits = launches.filter_map(|l| self.launches.get(&l)).map(|n| n.timeout_ns);
        let first = limits.next()?;
        limits
            .all(|l| l == first)
            .then(|| std::time::Duration::from_nanos(first))
    }

    /// `out-of-tile read: stencil CTA (1), thread (0,0,0), read x[8, 0] in data tile x[2]
    /// but waited only for x[1]` (CPU backend, `VgpuConfig::check_reads`).
    pub fn describe_read(&self, r: &TileRead) -> String {
        let who = self.kernel_and_tile(r.launch_id, r.tile);
        let name = self
            .launches
            .get(&r.launch_id)
            .and_then(|l| l.tensors.iter().find(|(id, _)| *id == r.tensor_id))
            .map_or_else(|| format!("tensor#{}", r.tensor_id), |(_, t)| t.name.clone());
        let element = coords(&r.element).trim_matches(['(', ')']).to_string();
        let tile = format!("{name}[{}]", tile_index(&r.data_tile, &r.tiles_per_dim));
        let boxes: Vec<String> = r
            .waited
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| format!("{name}[{}]", box_index(b, &r.tiles_per_dim)))
            .collect();
        let waited = if boxes.is_empty() {
            format!("before it waited for any data tile of `{name}`")
        } else {
            format!("but waited only for {}", boxes.join(" and "))
        };
        format!(
            "out-of-tile read: {who}, thread ({},{},{}), read {name}[{element}] in data tile {tile} {waited}. On a GPU \
             this read races with the producer of {tile}: declare what the kernel reads in its `input(...)` tile",
            r.thread.x, r.thread.y, r.thread.z
        )
    }

    /// `matmul CTA (3,1) waits on y[2] = 1 of 3 signals` (CPU backend deadlock).
    pub fn describe_wait(&self, site: &WaitSite, value: i32) -> String {
        format!(
            "{} waits on {}",
            self.kernel_and_tile(site.launch_id, site.tile),
            self.what(site, value)
        )
    }
}

/// Row-major coordinates of linear index `i` in a grid.
pub(crate) fn tile_coords(mut i: u32, grid: &[u32]) -> Vec<u32> {
    let mut c = vec![0; grid.len()];
    for (k, &n) in grid.iter().enumerate().rev() {
        let n = n.max(1);
        c[k] = i % n;
        i /= n;
    }
    c
}

/// A data tile named by the dimensions that are actually tiled: `2` for a row tile of a
/// tensor cut into rows, `1, 3` for a 2-D tiling, `0` for a tensor of one data tile.
pub(crate) fn tile_index(coords: &[u32], counts: &[u32]) -> String {
    let shown: Vec<String> = coords
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 1)
        .map(|(c, _)| c.to_string())
        .collect();
    if shown.is_empty() {
        "0".to_string()
    } else {
        shown.join(",")
    }
}

/// A box of data tiles named as [`tile_index`] names one: `0..=1` for rows 0 and 1.
fn box_index(b: &TileBox, counts: &[u32]) -> String {
    let shown: Vec<String> = counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 1)
        .map(|(d, _)| match b.count[d] {
            1 => b.first[d].to_string(),
            n => format!("{}..={}", b.first[d], b.first[d] + n - 1),
        })
        .collect();
    if shown.is_empty() {
        "0".to_string()
    } else {
        shown.join(",")
    }
}

fn fmt_coords(c: &[u32]) -> String {
    let parts: Vec<String> = c.iter().map(u32::to_string).collect();
    format!("({})", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use megaops_device::sync::{EPOCH_STRIDE, tiling::signal_increment};

    fn note() -> LaunchNotes {
        let mut n = LaunchNotes::default();
        let y = TensorNote {
            name: "y".into(),
            dims: vec![
                HostDim {
                    size: 256,
                    tile: 64,
                    bounds: vec![],
                },
                HostDim {
                    size: 96,
                    tile: 96,
                    bounds: vec![],
                },
            ],
            ready: 3 * EPOCH_STRIDE,
            producer: Some(([64, 32, 0, 0], 1)),
            producer_launch: Some(("matmul", 3)),
        };
        n.insert(
            7,
            LaunchNote {
                kernel: "matmul".into(),
                tile_grid: vec![4, 2],
                tensors: vec![(11, y)],
                waits_for: None,
                timeout_ns: 5_000_000_000,
                config: "",
                stream: "stream #9".into(),
                site: None,
            },
        );
        n.insert(
            3,
            LaunchNote {
                kernel: "matmul".into(),
                tile_grid: vec![4, 2],
                tensors: vec![],
                waits_for: None,
                timeout_ns: 5_000_000_000,
                config: "",
                stream: "stream #4 (lane 1 of AsyncStream #2)".into(),
                site: None,
            },
        );
        n
    }

    #[test]
    fn expected_producers_name_kernel_launch_and_stream() {
        let notes = note();
        assert_eq!(
            notes.expected_producers([(7, 11), (7, 11)].into_iter()),
            "; expected producer: `y` from `matmul` (launch 3 on stream #4 (lane 1 of AsyncStream #2))"
        );
        assert_eq!(notes.expected_producers([(99, 11)].into_iter()), "");
    }

    #[test]
    fn timeout_reads_like_a_sentence() {
        let notes = note();
        // Producer tiles 64 x 32 over a 96-column tile: 3 signals; one arrived (not the
        // designated one) in epoch 2.
        let value = 2 * EPOCH_STRIDE + signal_increment(false, 3);
        let r = ErrorRecord {
            kind: 1,
            launch_id: 7,
            tile: 7,
            tensor_id: 11,
            sem_index: 2,
            value,
            target: 3 * EPOCH_STRIDE,
            _pad: 0,
            waited_ns: 5_000_000_000,
        };
        assert_eq!(
            notes.describe_timeout(&r),
            "matmul CTA (3,1) waited 5.0 s on y[2] = 1 of 3 signals"
        );
    }

    #[test]
    fn a_named_site_follows_the_kernel() {
        let mut notes = note();
        let mut named = notes.get(7).cloned().expect("launch 7");
        named.site = Some("mlp.down");
        notes.insert(8, named);
        let r = ErrorRecord {
            kind: 1,
            launch_id: 8,
            tile: 7,
            tensor_id: 11,
            sem_index: 2,
            value: 0,
            target: 3 * EPOCH_STRIDE,
            _pad: 0,
            waited_ns: 5_000_000_000,
        };
        assert!(
            notes
                .describe_timeout(&r)
                .starts_with("matmul (mlp.down) CTA (3,1) waited 5.0 s on y[2]"),
            "{}",
            notes.describe_timeout(&r)
        );
    }

    #[test]
    fn unknown_launches_still_say_something() {
        let r = ErrorRecord {
            kind: 1,
            launch_id: 99,
            tile: 1,
            tensor_id: 4,
            sem_index: 0,
            value: 0,
            target: 65536,
            _pad: 0,
            waited_ns: 1,
        };
        assert!(
            note()
                .describe_timeout(&r)
                .contains("launch #99 tile 1 waited 0.0 s on tensor#4[0] = 0, target 65536")
        );
    }

    #[test]
    fn out_of_tile_reads_name_the_tensor_element_and_tiles() {
        let mut r = TileRead {
            kernel: "matmul".into(),
            block: megaops_device::Dim3::new(7, 0, 0),
            thread: megaops_device::Dim3::new(3, 0, 0),
            launch_id: 7,
            tile: 7,
            tensor_id: 11,
            element: vec![128, 5],
            data_tile: vec![2, 0],
            tiles_per_dim: vec![4, 1],
            waited: vec![TileBox {
                first: [0, 0, 0, 0],
                count: [2, 1, 0, 0],
                rank: 2,
            }],
        };
        assert_eq!(
            note().describe_read(&r),
            "out-of-tile read: matmul CTA (3,1), thread (3,0,0), read y[128, 5] in data tile y[2] but waited only for \
             y[0..=1]. On a GPU this read races with the producer of y[2]: declare what the kernel reads in its \
             `input(...)` tile"
        );
        r.waited.clear();
        assert!(
            note()
                .describe_read(&r)
                .contains("in data tile y[2] before it waited for any data tile of `y`."),
        );
    }

    #[test]
    fn coordinates_are_row_major() {
        assert_eq!(tile_coords(7, &[4, 2]), [3, 1]);
        assert_eq!(tile_coords(5, &[6]), [5]);
    }
}
