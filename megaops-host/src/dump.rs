//! [`SemaphoreDump`]: every live [`Tiled`](crate::Tiled) tensor of a device with each data
//! tile's semaphore against its target — the table a hang or timeout report ends with, and
//! what [`Device::dump_semaphores`](crate::Device::dump_semaphores) returns on demand.

use crate::device::Device;
use crate::mutex::lock;
use crate::notes::{HostDim, LaunchNotes, tile_coords, tile_index};
use crate::tensor::Tensor;
use crate::tiled::{Phase, TiledState, ready_value};
use megaops_device::sync::tiling::{signals_received, target_of};
use megaops_device::sync::{DimTiling, EPOCH_STRIDE, MAX_RANK};
use serde::Serialize;
use std::fmt;
use std::sync::{Arc, Mutex};

/// Incomplete data tiles listed one per line for each tensor; the rest are counted.
const MAX_TILE_LINES: usize = 16;

/// Ranges of complete tiles named on one line before the rest are counted.
const MAX_RANGES: usize = 8;

/// What the device's registry of live `Tiled` tensors holds for each: enough to read and
/// explain its semaphores. A `Tiled` owns the only strong reference, so the entry dies
/// with it.
pub(crate) struct LiveTiled {
    pub name: String,
    pub dtype: &'static str,
    pub shape: Vec<usize>,
    pub tiling: String,
    pub dims: Vec<HostDim>,
    pub sema: Tensor<i32>,
    pub state: Arc<Mutex<TiledState>>,
}

/// Every live [`Tiled`](crate::Tiled) tensor of a device, in creation order, with its
/// data-tile semaphores read at one moment. `Display` renders a table that lists complete
/// data tiles compactly and every incomplete one (up to 16 per tensor) on its own line,
/// e.g. `y[2] = 0 of 1 signals (tile 2 at (2,0), semaphore 0)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SemaphoreDump {
    /// One entry per live `Tiled` tensor.
    pub tensors: Vec<TiledDump>,
}

/// One `Tiled` tensor in a [`SemaphoreDump`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TiledDump {
    /// Its name (as in error messages).
    pub name: String,
    /// Element type (`"f32"`).
    pub dtype: &'static str,
    /// Shape of the data.
    pub shape: Vec<usize>,
    /// The data tiling as its type describes itself (`"DynRows(4)"`).
    pub tiling: String,
    /// Per dimension: how the data tiling cuts it.
    pub dims: Vec<DimDump>,
    /// Current epoch (re-arms since the semaphores were zero).
    pub epoch: u32,
    /// Where it is in its produce/consume cycle.
    pub phase: DumpPhase,
    /// This cycle's producer, when one was launched (or planted).
    pub producer: Option<ProducerDump>,
    /// Every data tile, row-major over the data-tile grid (empty if they could not be read).
    pub tiles: Vec<TileDump>,
    /// Why the semaphores could not be read, if they could not.
    pub read_error: Option<String>,
}

/// How a data tiling cuts one dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DimDump {
    /// Elements along the dimension.
    pub size: u32,
    /// Data-tile size (0 = irregular: see `bounds`).
    pub tile: u32,
    /// Data tiles along the dimension.
    pub count: u32,
    /// For an irregular tiling, the tile boundaries (`count + 1` of them); else empty.
    pub bounds: Vec<u32>,
}

/// [`Phase`] without its payload (the producer is in [`TiledDump::producer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DumpPhase {
    /// Waiting for a producer.
    Armed,
    /// A producer was launched (or planted): consumers wait on the semaphores.
    Produced,
    /// Built from existing data: consumers do not wait.
    Complete,
    /// Produced by a captured graph not replayed yet.
    Captured,
}

/// The producer of a tensor's current cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProducerDump {
    /// Its kernel.
    pub kernel: String,
    /// Its launch id (0: recorded, never launched).
    pub launch_id: u32,
    /// The stream it was submitted to, if the device still remembers the launch.
    pub stream: Option<String>,
    /// Its kernel tile per dimension (0 = the whole dimension).
    pub ktile: Vec<u32>,
    /// Kernel tiles per output tile (split-K).
    pub split: u32,
}

/// One data tile's semaphore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TileDump {
    /// Row-major index over the data-tile grid (the semaphore's index).
    pub index: u32,
    /// Coordinates in the data-tile grid.
    pub coords: Vec<u32>,
    /// The raw semaphore value.
    pub value: i32,
    /// Signals received this cycle (known once a producer is recorded).
    pub received: Option<u32>,
    /// Signals that complete the tile (known once a producer is recorded).
    pub expected: Option<u32>,
}

impl TileDump {
    /// True when every expected signal arrived.
    pub fn is_complete(&self) -> bool {
        matches!((self.received, self.expected), (Some(r), Some(e)) if r >= e)
    }
}

impl SemaphoreDump {
    /// The entry of the live tensor named `name` (the first, if several share it).
    pub fn tensor(&self, name: &str) -> Option<&TiledDump> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

impl TiledDump {
    /// The data tiles still waiting for signals (empty unless [`DumpPhase::Produced`]).
    pub fn incomplete(&self) -> impl Iterator<Item = &TileDump> {
        self.tiles.iter().filter(|t| t.expected.is_some() && !t.is_complete())
    }

    fn counts(&self) -> Vec<u32> {
        self.dims.iter().map(|d| d.count).collect()
    }

    /// `y[2]`, naming only the dimensions that are actually tiled.
    fn tile_name(&self, t: &TileDump) -> String {
        format!("{}[{}]", self.name, tile_index(&t.coords, &self.counts()))
    }

    /// `4 x 8 (3 x 1 tiles)`, or `bounds [0, 3, 12] x 8 (2 x 1 tiles)`.
    fn describe_dims(&self) -> String {
        let sizes: Vec<String> = self
            .dims
            .iter()
            .map(|d| match d.tile {
                0 => format!("bounds {:?}", d.bounds),
                t => t.min(d.size).to_string(),
            })
            .collect();
        let counts: Vec<String> = self.dims.iter().map(|d| d.count.to_string()).collect();
        format!("{} ({} tiles)", sizes.join(" x "), counts.join(" x "))
    }

    fn describe_phase(&self) -> String {
        match (self.phase, &self.producer) {
            (DumpPhase::Produced, Some(p)) => match (p.launch_id, &p.stream) {
                (0, _) => format!("produced by `{}` (recorded, never launched)", p.kernel),
                (l, Some(s)) => format!("produced by `{}` (launch {l} on {s})", p.kernel),
                (l, None) => format!("produced by `{}` (launch {l})", p.kernel),
            },
            (DumpPhase::Produced, None) => "produced".into(),
            (DumpPhase::Armed, _) => "armed (no producer launched yet)".into(),
            (DumpPhase::Complete, _) => "complete (built from existing data; consumers do not wait)".into(),
            (DumpPhase::Captured, _) => "produced by a captured graph that was not replayed yet".into(),
        }
    }
}

/// `0..=3, 5, 8..=13` for sorted indices (the first [`MAX_RANGES`] ranges, then a count).
fn ranges(indices: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &i in indices {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    let mut parts: Vec<String> = runs
        .iter()
        .take(MAX_RANGES)
        .map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}..={b}") })
        .collect();
    if runs.len() > MAX_RANGES {
        let rest: u32 = runs[MAX_RANGES..].iter().map(|(a, b)| b - a + 1).sum();
        parts.push(format!("and {rest} more"));
    }
    parts.join(", ")
}

impl fmt::Display for TiledDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "  `{}` {}{:?}, {}: data tiles {}, epoch {}: {}",
            self.name,
            self.dtype,
            self.shape,
            self.tiling,
            self.describe_dims(),
            self.epoch,
            self.describe_phase()
        )?;
        if let Some(e) = &self.read_error {
            return write!(f, "\n    semaphores not read: {e}");
        }
        match self.phase {
            DumpPhase::Produced => {
                let complete: Vec<u32> = self.tiles.iter().filter(|t| t.is_complete()).map(|t| t.index).collect();
                let incomplete: Vec<&TileDump> = self.incomplete().collect();
                if !complete.is_empty() {
                    let which = if incomplete.is_empty() { "all " } else { "" };
                    write!(f, "\n    {which}tiles {} complete", ranges(&complete))?;
                }
                for t in incomplete.iter().take(MAX_TILE_LINES) {
                    let coords: Vec<String> = t.coords.iter().map(u32::to_string).collect();
                    write!(
                        f,
                        "\n    {} = {} of {} signals (tile {} at ({}), semaphore {})",
                        self.tile_name(t),
                        t.received.unwrap_or(0),
                        t.expected.unwrap_or(0),
                        t.index,
                        coords.join(","),
                        t.value
                    )?;
                }
                if incomplete.len() > MAX_TILE_LINES {
                    write!(f, "\n    ... and {} more incomplete", incomplete.len() - MAX_TILE_LINES)?;
                }
            }
            DumpPhase::Armed => {
                // Signals in an armed tensor: a producer ran without being recorded, or the
                // previous cycle's producer is still writing.
                let base = ready_value(self.epoch).wrapping_sub(EPOCH_STRIDE);
                let moved: Vec<&TileDump> = self.tiles.iter().filter(|t| t.value != base).collect();
                if !moved.is_empty() {
                    write!(
                        f,
                        "\n    {} of {} semaphores moved past this epoch's start ({base}):",
                        moved.len(),
                        self.tiles.len()
                    )?;
                }
                for t in moved.iter().take(MAX_TILE_LINES) {
                    write!(f, "\n    {} (tile {}) = {}", self.tile_name(t), t.index, t.value)?;
                }
                if moved.len() > MAX_TILE_LINES {
                    write!(f, "\n    ... and {} more", moved.len() - MAX_TILE_LINES)?;
                }
            }
            DumpPhase::Complete | DumpPhase::Captured => {}
        }
        Ok(())
    }
}

impl fmt::Display for SemaphoreDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tensors.is_empty() {
            return write!(f, "live Tiled tensors: none");
        }
        write!(f, "live Tiled tensors:")?;
        for t in &self.tensors {
            write!(f, "\n{t}")?;
        }
        Ok(())
    }
}

impl LiveTiled {
    /// Reads the semaphores (without waiting for queued work) and explains each against
    /// its target. A failed read is reported in the entry, never returned.
    pub(crate) fn dump(&self, device: &Device, notes: &LaunchNotes) -> TiledDump {
        let st = lock(&self.state).clone();
        let (phase, producer) = match &st.phase {
            Phase::Armed => (DumpPhase::Armed, None),
            Phase::Complete => (DumpPhase::Complete, None),
            Phase::Captured => (DumpPhase::Captured, None),
            Phase::Produced(p) => (DumpPhase::Produced, Some(*p)),
        };
        let rank = self.dims.len();
        let mut entry = TiledDump {
            name: self.name.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            tiling: self.tiling.clone(),
            dims: self
                .dims
                .iter()
                .map(|d| DimDump {
                    size: d.size,
                    tile: d.tile,
                    count: d.count(),
                    bounds: if d.tile == 0 { d.bounds.clone() } else { Vec::new() },
                })
                .collect(),
            epoch: st.epoch,
            phase,
            producer: producer.map(|p| ProducerDump {
                kernel: p.kernel.to_string(),
                launch_id: p.launch_id,
                stream: (p.launch_id != 0).then(|| notes.stream_of(p.launch_id)).flatten(),
                ktile: p.ktile[..rank.min(MAX_RANK)].to_vec(),
                split: p.split,
            }),
            tiles: Vec::new(),
            read_error: None,
        };
        let values = match self.read_semaphores(device) {
            Ok(v) => v,
            Err(e) => {
                entry.read_error = Some(e.to_string());
                return entry;
            }
        };
        let counts: Vec<u32> = self.dims.iter().map(HostDim::count).collect();
        let mut host_dims = [DimTiling::plain(0, 1); MAX_RANK];
        for (d, h) in host_dims.iter_mut().zip(&self.dims) {
            *d = h.as_dim();
        }
        let ready = ready_value(st.epoch);
        entry.tiles = values
            .iter()
            .enumerate()
            .map(|(i, &value)| {
                let coords = tile_coords(i as u32, &counts);
                let (received, expected) = match &producer {
                    Some(p) => {
                        let mut c = [0u32; MAX_RANK];
                        for (dst, src) in c.iter_mut().zip(&coords) {
                            *dst = *src;
                        }
                        // SAFETY: irregular bounds point into self.dims, alive for this call.
                        let target = unsafe { target_of(&host_dims, rank.min(MAX_RANK) as u32, &c, &p.ktile, p.split) };
                        (Some(signals_received(value, ready, target)), Some(target))
                    }
                    None => (None, None),
                };
                TileDump {
                    index: i as u32,
                    coords,
                    value,
                    received,
                    expected,
                }
            })
            .collect();
        entry
    }

    fn read_semaphores(&self, device: &Device) -> crate::Result<Vec<i32>> {
        let mut values = vec![0i32; self.sema.numel()];
        let offset = (self.sema.addr() - self.sema.buffer().addr()) as usize;
        device.copy_to_host(self.sema.buffer(), offset, crate::tensor::as_bytes_mut(&mut values))?;
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn complete_tiles_read_as_ranges_with_a_cap() {
        assert_eq!(ranges(&[0, 1, 2, 3, 5, 8, 9]), "0..=3, 5, 8..=9");
        assert_eq!(ranges(&[7]), "7");
        let every_other: Vec<u32> = (0..24).step_by(2).collect();
        assert_eq!(ranges(&every_other), "0, 2, 4, 6, 8, 10, 12, 14, and 4 more");
    }
}
