//! `bandwidth` suite: the pure-read bandwidth of device memory, measured with
//! `megaops_kernels::bandwidth::read_bandwidth` (16-byte loads, 8 in flight per thread,
//! one word written per CTA) over a 1 GiB random buffer (16× the L2), by CUDA-graph
//! replay. It is the roofline the memory-bound suites (`gemv`) compare against; they call
//! [`measure`] in their own run.

use crate::harness::{Table, f3, time_graph};
use megaops::{AsyncStream, Device, Result, Tensor};
use megaops_kernels::bandwidth::read_bandwidth;
use std::path::Path;

/// Words of the buffer read (1 GiB).
const WORDS: usize = 256 << 20;

/// One measurement: bytes read, median µs, GB/s.
#[derive(Clone, Copy, Debug)]
pub struct ReadBandwidth {
    /// Bytes read per launch.
    pub bytes: f64,
    /// Median time per launch, µs.
    pub us: f64,
    /// `bytes / us` in GB/s (10⁹ bytes per second).
    pub gbps: f64,
    /// CTAs of the launch.
    pub ctas: u32,
}

/// Measures the pure-read bandwidth with `ctas_per_sm` CTAs per SM (4 by default) over
/// `words` random words; `replays` graph replays of 4 launches each.
pub fn measure_with(
    dev: &Device,
    astream: &AsyncStream,
    words: usize,
    ctas_per_sm: u32,
    replays: usize,
) -> Result<ReadBandwidth> {
    let data = Tensor::from_slice(dev, &[words], &random_words(words))?;
    let ctas = dev.sm_count() * ctas_per_sm;
    let mut out = Tensor::<u32>::zeros(dev, &[ctas as usize])?;
    let vectors = (words / 4) as u64;
    let stats = time_graph(astream, 4, replays, |s, _| {
        read_bandwidth::launch(s, &data, &mut out, vectors, ctas)
    })?;
    let bytes = (vectors * 16) as f64;
    Ok(ReadBandwidth {
        bytes,
        us: stats.median_us,
        gbps: bytes / stats.median_us * 1e-3,
        ctas,
    })
}

/// The pure-read bandwidth over 1 GiB with 4 CTAs per SM.
pub fn measure(dev: &Device, astream: &AsyncStream) -> Result<ReadBandwidth> {
    measure_with(dev, astream, WORDS, 4, 7)
}

/// Fast non-zero pseudo-random words (xorshift; timing must never run on zeros).
fn random_words(n: usize) -> Vec<u32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u32
        })
        .collect()
}

/// Runs the suite: the read bandwidth at 2, 4 and 8 CTAs per SM. Errors are printed.
pub fn run(out: Option<&Path>, quick: bool) {
    if let Err(e) = run_inner(out, quick) {
        eprintln!("bandwidth suite stopped: {e}");
    }
}

fn run_inner(out: Option<&Path>, quick: bool) -> Result<()> {
    let dev = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bandwidth suite skipped: no GPU ({e})");
            return Ok(());
        }
    };
    let astream = AsyncStream::serial(&dev)?;
    let mut table = Table::new(
        "Pure-read bandwidth (read_bandwidth: 16-byte loads, 1 GiB random buffer, graph replays)",
        &["CTAs/SM", "CTAs", "GiB read", "µs", "GB/s"],
    );
    for per_sm in [2, 4, 8] {
        match measure_with(&dev, &astream, WORDS, per_sm, if quick { 3 } else { 9 }) {
            Ok(r) => table.row(vec![
                per_sm.to_string(),
                r.ctas.to_string(),
                format!("{:.2}", r.bytes / (1u64 << 30) as f64),
                f3(r.us),
                format!("{:.0}", r.gbps),
            ]),
            Err(e) => {
                eprintln!("bandwidth suite: {per_sm} CTAs/SM: {e}");
                table.row(vec![
                    per_sm.to_string(),
                    "err".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
            }
        }
    }
    table.emit(out);
    Ok(())
}
