//! Tile traces: which launches record their kernel tiles, the device-side log they write
//! to, and what the host makes of it.
//!
//! A launch is traced when its [`LaunchOptions::traced`](crate::LaunchOptions::traced)
//! is set or its [`AsyncStream`](crate::AsyncStream) has
//! [`set_tracing`](crate::AsyncStream::set_tracing) on, and the device has a trace log
//! ([`Device::start_trace`]). Each kernel tile of a traced launch appends one
//! [`TileTrace`] (start, wait end, end, SM, CTA);
//! [`Device::take_trace`] waits for the device, reads the log into a [`Trace`] that
//! names every launch (kernel, tile config, stream, tile grid) and empties the log. The
//! log is written by CUDA graph replays of traced captures as well.
//!
//! - [`perfetto`]: the Chrome-trace / Perfetto JSON of a trace.
//! - [`exposed`]: per-operator time alone on the GPU vs overlapped with other operators.
//! - [`boundary`]: per kernel boundary, the launch, hop and run phases after the producers
//!   ended.

pub mod boundary;
pub mod exposed;
pub mod perfetto;

use crate::buffer::Buffer;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::notes::tile_coords;
use megaops_device::sync::{TileTrace, TraceLog};
use std::sync::Arc;

/// One kernel tile of a traced launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileEvent {
    /// The launch (see [`Trace::launch`]).
    pub launch_id: u32,
    /// Linear kernel tile.
    pub tile: u32,
    /// Its coordinates in the launch's tile grid (row-major, outermost first).
    pub coords: Vec<u32>,
    /// SM that ran it.
    pub sm: u32,
    /// CTA that ran it.
    pub cta: u32,
    /// Start (ns of the device clock: `%globaltimer`, or the CPU backend's virtual clock).
    pub start_ns: u64,
    /// End of its last input wait (`start_ns` if it waited for nothing).
    pub waited_ns: u64,
    /// End: every thread done, before the output signals.
    pub end_ns: u64,
}

/// A traced launch as the host remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracedLaunch {
    /// Launch id.
    pub launch_id: u32,
    /// Kernel (operator) name.
    pub kernel: String,
    /// Its tile config's constants, e.g. `BM=64, BK=256` (empty if it has none).
    pub config: String,
    /// The stream it ran on (`stream #4 (lane 1 of AsyncStream #2)`).
    pub stream: String,
    /// Kernel-tile grid.
    pub tile_grid: Vec<u32>,
    /// The launches that produce the synchronised inputs it waits on.
    pub waits_on: Vec<u32>,
    /// The call site's name for it ([`LaunchOptions::site`](crate::LaunchOptions)).
    pub site: Option<&'static str>,
}

/// How traces, breakdowns and profiles name a launch: `name` (its kernel and config), after
/// `site: ` when the launch names its call site ([`LaunchOptions::site`](crate::LaunchOptions)).
pub fn site_label(site: Option<&str>, name: String) -> String {
    match site {
        Some(site) => format!("{site}: {name}"),
        None => name,
    }
}

impl TracedLaunch {
    /// `kernel[config]`, or the kernel alone when it has no config constants, after
    /// `site: ` when the launch names its site: the name timelines and breakdowns use.
    pub fn label(&self) -> String {
        let kernel = if self.config.is_empty() {
            self.kernel.clone()
        } else {
            format!("{}[{}]", self.kernel, self.config)
        };
        site_label(self.site, kernel)
    }
}

/// What [`Device::take_trace`] read: every recorded tile, by start time, and the launches
/// they belong to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Recorded tiles, sorted by start time.
    pub tiles: Vec<TileEvent>,
    /// The launches of `tiles`, by launch id.
    pub launches: Vec<TracedLaunch>,
    /// Tiles recorded past the log's capacity (not in `tiles`).
    pub dropped: u64,
}

impl Trace {
    /// The launch `id`, if one of its tiles was recorded.
    pub fn launch(&self, id: u32) -> Option<&TracedLaunch> {
        self.launches
            .binary_search_by_key(&id, |l| l.launch_id)
            .ok()
            .map(|i| &self.launches[i])
    }

    /// First start and last end of the recorded tiles (`None` if there are none).
    pub fn span(&self) -> Option<(u64, u64)> {
        let start = self.tiles.iter().map(|t| t.start_ns).min()?;
        let end = self.tiles.iter().map(|t| t.end_ns).max()?;
        Some((start, end))
    }

    /// Checks a trace of one execution of each launch (one eager run or one graph
    /// replay): every tile has start ≤ wait end ≤ end; every launch recorded each of its
    /// kernel tiles exactly once; and no tile of a launch stopped waiting before the
    /// first tile of a launch it waits on had ended (a tile's end is taken before its
    /// signals, so a consumer that passed its wait saw at least one producer tile end).
    /// Returns every violation found, described.
    pub fn check(&self) -> std::result::Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if self.dropped > 0 {
            problems.push(format!("{} tiles were not recorded (the log was full)", self.dropped));
        }
        let mut per_launch: std::collections::BTreeMap<u32, Vec<&TileEvent>> = Default::default();
        for t in &self.tiles {
            if !(t.start_ns <= t.waited_ns && t.waited_ns <= t.end_ns) {
                problems.push(format!(
                    "{} tile {:?}: times out of order: {t:?}",
                    self.label_of(t),
                    t.coords
                ));
            }
            per_launch.entry(t.launch_id).or_default().push(t);
        }
        for (id, tiles) in &per_launch {
            let Some(l) = self.launch(*id) else { continue };
            let mut seen: Vec<u32> = tiles.iter().map(|t| t.tile).collect();
            seen.sort_unstable();
            let n = seen.len();
            seen.dedup();
            let want: u64 = l.tile_grid.iter().map(|&g| u64::from(g)).product();
            if seen.len() != n || seen.len() as u64 != want {
                problems.push(format!(
                    "{} (launch {id}): {n} records of {} distinct tiles, the grid has {want}",
                    l.label(),
                    seen.len()
                ));
            }
            for p in &l.waits_on {
                let Some(first_end) = per_launch.get(p).and_then(|pt| pt.iter().map(|t| t.end_ns).min()) else {
                    continue;
                };
                if let Some(t) = tiles.iter().find(|t| t.waited_ns < first_end) {
                    problems.push(format!(
                        "{} tile {:?} (launch {id}) stopped waiting at {} ns, before any tile of launch {p} ended \
                         (first end {first_end} ns)",
                        l.label(),
                        t.coords,
                        t.waited_ns
                    ));
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// The label ([`TracedLaunch::label`]) of a tile's launch (`launch #N` if unknown).
    pub fn label_of(&self, tile: &TileEvent) -> String {
        self.launch(tile.launch_id)
            .map_or_else(|| format!("launch #{}", tile.launch_id), TracedLaunch::label)
    }
}

/// Records a log holds when [`Device::start_trace`] is given none (40 bytes each: 10 MiB).
pub const DEFAULT_TRACE_CAPACITY: u32 = 1 << 18;

/// The device's trace log: a [`TraceLog`] header followed by its records.
pub(crate) struct TraceBuffer {
    buffer: Arc<Buffer>,
    capacity: u32,
}

const HEADER: usize = std::mem::size_of::<TraceLog>();
const RECORD: usize = std::mem::size_of::<TileTrace>();

impl TraceBuffer {
    /// The header's device address, for `KernelCtx::trace`.
    pub(crate) fn addr(&self) -> u64 {
        self.buffer.addr()
    }

    /// The buffer, for launches to keep alive.
    pub(crate) fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }
}

impl Device {
    /// Gives the device a tile-trace log of `capacity` records (the first call allocates
    /// it; later calls empty it). Launches record into it only when traced
    /// ([`LaunchOptions::traced`](crate::LaunchOptions::traced),
    /// [`AsyncStream::set_tracing`](crate::AsyncStream::set_tracing)); emptying it first
    /// waits for the device's work. A log cannot
    /// shrink or grow once allocated, since captured graphs write to its address: asking
    /// for more than it holds is an error, as is any call in a build with tracing compiled
    /// out (`MEGAOPS_TRACE_OFF` set at build time).
    pub fn start_trace(&self, capacity: u32) -> Result<()> {
        if capacity == 0 {
            return Err(Error::Invalid("a trace log needs room for at least one record".into()));
        }
        if megaops_device::sync::TRACE_COMPILED_OUT {
            return Err(Error::Invalid(
                "this build has tile tracing compiled out (MEGAOPS_TRACE_OFF was set when it was built)".into(),
            ));
        }
        let mut slot = crate::mutex::lock(self.trace_slot());
        if let Some(log) = slot.as_ref() {
            if capacity > log.capacity {
                return Err(Error::Invalid(format!(
                    "the device's trace log holds {} records; it cannot grow to {capacity} (captured graphs \
                     write to its address): ask for the larger capacity in the first `start_trace`",
                    log.capacity
                )));
            }
            let log = TraceBuffer {
                buffer: log.buffer.clone(),
                capacity: log.capacity,
            };
            drop(slot);
            // Traced work still running would append while the header is rewritten.
            self.synchronize()?;
            return self.reset_trace(&log);
        }
        let bytes = HEADER + RECORD * capacity as usize;
        let buffer = Arc::new(self.alloc(bytes)?);
        let log = TraceBuffer { buffer, capacity };
        self.reset_trace(&log)?;
        *slot = Some(log);
        Ok(())
    }

    /// Writes an empty header (head 0) to the log.
    fn reset_trace(&self, log: &TraceBuffer) -> Result<()> {
        let header = TraceLog {
            head: 0,
            capacity: log.capacity,
            records: (log.buffer.addr() + HEADER as u64) as *mut TileTrace,
        };
        // SAFETY: TraceLog is repr(C) plain data (two u32 and a pointer, no padding).
        let bytes = unsafe { std::slice::from_raw_parts(&header as *const TraceLog as *const u8, HEADER) };
        self.copy_to_device(&log.buffer, 0, bytes)
    }

    /// The trace log's address and buffer, if [`Device::start_trace`] made one.
    pub(crate) fn trace_log(&self) -> Option<(u64, Arc<Buffer>)> {
        crate::mutex::lock(self.trace_slot())
            .as_ref()
            .map(|l| (l.addr(), l.buffer().clone()))
    }

    /// Waits for all work on the device, reads every tile recorded since the last
    /// [`Device::start_trace`] or `take_trace`, and empties the log. Errors if the
    /// device has no trace log.
    pub fn take_trace(&self) -> Result<Trace> {
        let (buffer, capacity) = {
            let slot = crate::mutex::lock(self.trace_slot());
            let Some(log) = slot.as_ref() else {
                return Err(Error::Invalid(
                    "the device has no trace log: call `Device::start_trace` before the traced launches".into(),
                ));
            };
            (log.buffer.clone(), log.capacity)
        };
        self.synchronize()?;
        let mut head = [0u8; 4];
        self.copy_to_host(&buffer, 0, &mut head)?;
        let head = u32::from_ne_bytes(head);
        let n = head.min(capacity) as usize;
        let mut raw = vec![TileTrace::default(); n];
        // SAFETY: TileTrace is repr(C) plain integers (valid for any bits, no padding:
        // three u64 then four u32), and `raw` holds exactly n of them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr() as *mut u8, n * RECORD) };
        self.copy_to_host(&buffer, HEADER, bytes)?;
        self.reset_trace(&TraceBuffer {
            buffer: buffer.clone(),
            capacity,
        })?;
        Ok(self.name_trace(raw, u64::from(head - n as u32)))
    }

    /// Turns raw records into a [`Trace`] with the launches' names from the launch notes.
    fn name_trace(&self, raw: Vec<TileTrace>, dropped: u64) -> Trace {
        let notes = self.notes();
        let mut launches: Vec<TracedLaunch> = Vec::new();
        let mut ids: Vec<u32> = raw.iter().map(|r| r.launch_id).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let launch = match notes.get(id) {
                Some(n) => TracedLaunch {
                    launch_id: id,
                    kernel: n.kernel.clone(),
                    config: n.config.to_string(),
                    stream: n.stream.clone(),
                    tile_grid: n.tile_grid.clone(),
                    waits_on: {
                        let mut w: Vec<u32> = n
                            .tensors
                            .iter()
                            .filter_map(|(_, t)| t.producer_launch.map(|(_, l)| l))
                            .filter(|&l| l != 0 && l != id)
                            .collect();
                        w.sort_unstable();
                        w.dedup();
                        w
                    },
                    site: n.site,
                },
                None => TracedLaunch {
                    launch_id: id,
                    kernel: format!("launch #{id}"),
                    config: String::new(),
                    stream: String::new(),
                    tile_grid: Vec::new(),
                    waits_on: Vec::new(),
                    site: None,
                },
            };
            launches.push(launch);
        }
        drop(notes);
        let mut tiles: Vec<TileEvent> = raw
            .iter()
            .map(|r| {
                let grid = launches
                    .binary_search_by_key(&r.launch_id, |l| l.launch_id)
                    .map(|i| launches[i].tile_grid.as_slice())
                    .unwrap_or(&[]);
                TileEvent {
                    launch_id: r.launch_id,
                    tile: r.tile,
                    coords: if grid.is_empty() {
                        vec![r.tile]
                    } else {
                        tile_coords(r.tile, grid)
                    },
                    sm: r.sm,
                    cta: r.cta,
                    start_ns: r.start_ns,
                    waited_ns: r.waited_ns,
                    end_ns: r.end_ns,
                }
            })
            .collect();
        tiles.sort_by_key(|t| (t.start_ns, t.launch_id, t.tile));
        Trace {
            tiles,
            launches,
            dropped,
        }
    }
}
