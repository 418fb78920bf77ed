//! A [`Trace`] as Chrome-trace JSON (`{"traceEvents": [...]}`, loads in Perfetto and
//! `chrome://tracing`).
//!
//! - Process "SMs": a track per SM and concurrency slot (`SM 12 · 1`: the CTAs resident
//!   on one SM at once get slots, so slices on a track never overlap). Each tile is a
//!   slice `kernel[config]` from the end of its input wait to its end, preceded by a
//!   slice `wait: kernel` from its start if it waited.
//! - Process "streams": a track per stream (and slot, if its launches overlap); each
//!   launch is one slice from its first tile's start to its last tile's end.
//!
//! Times are µs since the trace's first tile start.

use super::{TileEvent, Trace};
use crate::error::{Error, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

const SMS_PID: u32 = 1;
const STREAMS_PID: u32 = 2;
/// Track ids per SM: SM `s`, slot `k` is track `s * SLOTS_PER_SM + k`.
const SLOTS_PER_SM: u32 = 1024;

impl Trace {
    /// The Chrome-trace / Perfetto JSON value of this trace.
    pub fn to_perfetto(&self) -> Value {
        let origin = self.span().map_or(0, |(s, _)| s);
        let us = |ns: u64| (ns.saturating_sub(origin)) as f64 * 1e-3;
        let mut events: Vec<Value> = vec![
            json!({"ph": "M", "pid": SMS_PID, "name": "process_name", "args": {"name": "SMs"}}),
            json!({"ph": "M", "pid": STREAMS_PID, "name": "process_name", "args": {"name": "streams"}}),
        ];
        // Tiles on SM tracks.
        let mut sm_slots: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for t in &self.tiles {
            let ends = sm_slots.entry(t.sm).or_default();
            let slot = take_slot(ends, t.start_ns, t.end_ns);
            let tid = t.sm * SLOTS_PER_SM + slot;
            let label = self.label_of(t);
            let args = tile_args(self, t);
            if t.waited_ns > t.start_ns {
                events.push(json!({
                    "ph": "X", "pid": SMS_PID, "tid": tid, "cat": "wait",
                    "name": format!("wait: {label}"),
                    "ts": us(t.start_ns), "dur": us(t.waited_ns) - us(t.start_ns),
                    "args": args.clone(),
                }));
            }
            let begin = t.waited_ns.max(t.start_ns);
            events.push(json!({
                "ph": "X", "pid": SMS_PID, "tid": tid, "cat": "tile",
                "name": label,
                "ts": us(begin), "dur": us(t.end_ns.max(begin)) - us(begin),
                "args": args,
            }));
        }
        for (sm, ends) in &sm_slots {
            for slot in 0..ends.len() as u32 {
                let tid = sm * SLOTS_PER_SM + slot;
                events.push(json!({"ph": "M", "pid": SMS_PID, "tid": tid, "name": "thread_name",
                    "args": {"name": format!("SM {sm} · {slot}")}}));
                events.push(
                    json!({"ph": "M", "pid": SMS_PID, "tid": tid, "name": "thread_sort_index",
                    "args": {"sort_index": tid}}),
                );
            }
        }
        // Launches on stream tracks.
        let mut spans: BTreeMap<u32, (u64, u64, usize)> = BTreeMap::new();
        for t in &self.tiles {
            let e = spans.entry(t.launch_id).or_insert((u64::MAX, 0, 0));
            e.0 = e.0.min(t.start_ns);
            e.1 = e.1.max(t.end_ns);
            e.2 += 1;
        }
        let mut by_start: Vec<(u32, (u64, u64, usize))> = spans.into_iter().collect();
        by_start.sort_by_key(|(id, (s, _, _))| (*s, *id));
        let mut streams: Vec<(String, Vec<u64>)> = Vec::new();
        for (id, (start, end, tiles)) in by_start {
            let launch = self.launch(id);
            let stream = launch.map_or_else(String::new, |l| l.stream.clone());
            let stream = if stream.is_empty() {
                "unknown stream".to_string()
            } else {
                stream
            };
            let si = match streams.iter().position(|(s, _)| *s == stream) {
                Some(i) => i,
                None => {
                    streams.push((stream, Vec::new()));
                    streams.len() - 1
                }
            };
            let slot = take_slot(&mut streams[si].1, start, end);
            let tid = si as u32 * SLOTS_PER_SM + slot;
            let name = launch.map_or_else(|| format!("launch #{id}"), |l| l.label());
            events.push(json!({
                "ph": "X", "pid": STREAMS_PID, "tid": tid, "cat": "launch",
                "name": name, "ts": us(start), "dur": us(end) - us(start),
                "args": {"launch": id, "tiles": tiles,
                         "grid": launch.map(|l| l.tile_grid.clone()).unwrap_or_default()},
            }));
        }
        for (si, (stream, ends)) in streams.iter().enumerate() {
            for slot in 0..ends.len() as u32 {
                let tid = si as u32 * SLOTS_PER_SM + slot;
                let name = if slot == 0 {
                    stream.clone()
                } else {
                    format!("{stream} · {slot}")
                };
                events.push(json!({"ph": "M", "pid": STREAMS_PID, "tid": tid, "name": "thread_name",
                    "args": {"name": name}}));
            }
        }
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": {"tiles": self.tiles.len(), "launches": self.launches.len(), "dropped": self.dropped},
        })
    }

    /// Writes [`Trace::to_perfetto`] to `path`.
    pub fn write_perfetto(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(&self.to_perfetto())
            .map_err(|e| Error::Internal(format!("encoding the trace as JSON: {e}")))?;
        std::fs::write(path, text).map_err(|source| Error::Io {
            action: "writing the trace",
            path: path.to_path_buf(),
            source,
        })
    }
}

/// The first slot free at `start` (its last interval ended by then), which then ends at
/// `end`; a new slot if none is free.
fn take_slot(ends: &mut Vec<u64>, start: u64, end: u64) -> u32 {
    let slot = match ends.iter().position(|&e| e <= start) {
        Some(i) => i,
        None => {
            ends.push(0);
            ends.len() - 1
        }
    };
    ends[slot] = end.max(start);
    slot as u32
}

fn tile_args(trace: &Trace, t: &TileEvent) -> Value {
    let launch = trace.launch(t.launch_id);
    json!({
        "launch": t.launch_id,
        "tile": t.coords,
        "cta": t.cta,
        "sm": t.sm,
        "stream": launch.map(|l| l.stream.clone()).unwrap_or_default(),
        "wait_us": (t.waited_ns.saturating_sub(t.start_ns)) as f64 * 1e-3,
    })
}
