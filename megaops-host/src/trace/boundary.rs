//! Kernel boundaries of a trace: for every launch that waits on other launches, how long
//! after its producers' last tile ended it finished, split into three phases:
//!
//! - **launch**: the producers had ended, and no tile of the consumer had started yet
//!   (`first start − producers' end`, when positive): the consumer was not resident in
//!   time;
//! - **hop**: from the later of the producers' end and the consumer's first start to the
//!   first end of a consumer wait (`first wait end − that`): the semaphore round trip,
//!   negative when a consumer tile passed its wait before the producers' *last* tile
//!   ended (tile-granular overlap);
//! - **run**: from that first wait end to the consumer's last tile end.
//!
//! The three add up to the boundary's **gap** (`consumer end − producers' end`). Along a
//! chain of dependent launches (a decode step) the gaps add up to the chain's span, so
//! each phase's sum says where the step goes.

use super::Trace;
use std::collections::BTreeMap;

/// One launch that waits on others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The consumer launch.
    pub launch_id: u32,
    /// Its label ([`super::TracedLaunch::label`]).
    pub operator: String,
    /// Last tile end over the launches it waits on (those recorded).
    pub producers_end_ns: u64,
    /// Its first tile's start.
    pub first_start_ns: u64,
    /// The earliest end of a wait among its tiles.
    pub first_waited_ns: u64,
    /// Its last tile's end.
    pub end_ns: u64,
}

impl Boundary {
    /// ns during which the producers had ended and no consumer tile had started.
    pub fn launch_ns(&self) -> i64 {
        (self.first_start_ns as i64 - self.producers_end_ns as i64).max(0)
    }

    /// ns from the later of the producers' end and the first start to the first wait end
    /// (negative when a tile passed its wait before the producers' last tile ended).
    pub fn hop_ns(&self) -> i64 {
        self.first_waited_ns as i64 - self.producers_end_ns.max(self.first_start_ns) as i64
    }

    /// ns from the first wait end to the last tile end.
    pub fn run_ns(&self) -> i64 {
        self.end_ns as i64 - self.first_waited_ns as i64
    }

    /// `launch + hop + run`: ns from the producers' end to the consumer's end.
    pub fn gap_ns(&self) -> i64 {
        self.end_ns as i64 - self.producers_end_ns as i64
    }
}

/// The boundaries of one consumer operator, summed and as medians.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorBoundaries {
    /// The consumer operator (`kernel[config]`).
    pub operator: String,
    /// Its launches that wait on a recorded launch.
    pub count: usize,
    /// Median launch phase, ns.
    pub median_launch_ns: i64,
    /// Median hop phase, ns.
    pub median_hop_ns: i64,
    /// Median run phase, ns.
    pub median_run_ns: i64,
    /// Sum of the launch phases, ns.
    pub launch_ns: i64,
    /// Sum of the hop phases, ns.
    pub hop_ns: i64,
    /// Sum of the run phases, ns.
    pub run_ns: i64,
}

impl OperatorBoundaries {
    /// Sum of the gaps, ns.
    pub fn gap_ns(&self) -> i64 {
        self.launch_ns + self.hop_ns + self.run_ns
    }
}

/// Every boundary of a trace and their sums per consumer operator.
#[derive(Clone, Debug, PartialEq)]
pub struct Boundaries {
    /// One per waiting launch, by consumer end.
    pub boundaries: Vec<Boundary>,
    /// Per consumer operator, largest summed gap first.
    pub operators: Vec<OperatorBoundaries>,
}

impl Boundaries {
    /// Sums of the launch, hop and run phases over every boundary, ns.
    pub fn totals(&self) -> (i64, i64, i64) {
        self.boundaries.iter().fold((0, 0, 0), |(l, h, r), b| {
            (l + b.launch_ns(), h + b.hop_ns(), r + b.run_ns())
        })
    }
}

/// The median of `v` (the lower middle value for an even count; 0 when empty).
fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

impl Trace {
    /// The boundary of every launch that waits on a launch with recorded tiles (a trace of
    /// one execution of each launch: one eager run or one graph replay).
    pub fn boundaries(&self) -> Boundaries {
        #[derive(Clone, Copy)]
        struct Span {
            first_start: u64,
            first_waited: u64,
            end: u64,
        }
        let mut spans: BTreeMap<u32, Span> = BTreeMap::new();
        for t in &self.tiles {
            let s = spans.entry(t.launch_id).or_insert(Span {
                first_start: u64::MAX,
                first_waited: u64::MAX,
                end: 0,
            });
            s.first_start = s.first_start.min(t.start_ns);
            s.first_waited = s.first_waited.min(t.waited_ns.max(t.start_ns));
            s.end = s.end.max(t.end_ns);
        }
        let mut boundaries: Vec<Boundary> = self
            .launches
            .iter()
            .filter_map(|l| {
                let s = spans.get(&l.launch_id)?;
                let producers_end = l.waits_on.iter().filter_map(|p| spans.get(p)).map(|p| p.end).max()?;
                Some(Boundary {
                    launch_id: l.launch_id,
                    operator: l.label(),
                    producers_end_ns: producers_end,
                    first_start_ns: s.first_start,
                    first_waited_ns: s.first_waited,
                    end_ns: s.end,
                })
            })
            .collect();
        boundaries.sort_by_key(|b| (b.end_ns, b.launch_id));
        let mut by_operator: BTreeMap<&str, Vec<&Boundary>> = BTreeMap::new();
        for b in &boundaries {
            by_operator.entry(b.operator.as_str()).or_default().push(b);
        }
        let mut operators: Vec<OperatorBoundaries> = by_operator
            .into_iter()
            .map(|(name, bs)| {
                let phase = |f: fn(&Boundary) -> i64| bs.iter().map(|b| f(b)).collect::<Vec<i64>>();
                OperatorBoundaries {
                    operator: name.to_string(),
                    count: bs.len(),
                    median_launch_ns: median(phase(Boundary::launch_ns)),
                    median_hop_ns: median(phase(Boundary::hop_ns)),
                    median_run_ns: median(phase(Boundary::run_ns)),
                    launch_ns: phase(Boundary::launch_ns).iter().sum(),
                    hop_ns: phase(Boundary::hop_ns).iter().sum(),
                    run_ns: phase(Boundary::run_ns).iter().sum(),
                }
            })
            .collect();
        operators.sort_by(|a, b| b.gap_ns().cmp(&a.gap_ns()).then(a.operator.cmp(&b.operator)));
        Boundaries { boundaries, operators }
    }
}

impl std::fmt::Display for Boundaries {
    /// A table per consumer operator: boundaries, median launch / hop / run µs, summed
    /// launch / hop / run / gap µs; then the totals.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self
            .operators
            .iter()
            .map(|o| o.operator.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let us = |ns: i64| ns as f64 * 1e-3;
        writeln!(
            f,
            "{:<width$}  {:>5}  {:>9}  {:>7}  {:>7}  {:>10}  {:>8}  {:>8}  {:>8}",
            "consumer", "count", "launch µs", "hop µs", "run µs", "Σlaunch µs", "Σhop µs", "Σrun µs", "Σgap µs"
        )?;
        for o in &self.operators {
            writeln!(
                f,
                "{:<width$}  {:>5}  {:>9.2}  {:>7.2}  {:>7.2}  {:>10.1}  {:>8.1}  {:>8.1}  {:>8.1}",
                o.operator,
                o.count,
                us(o.median_launch_ns),
                us(o.median_hop_ns),
                us(o.median_run_ns),
                us(o.launch_ns),
                us(o.hop_ns),
                us(o.run_ns),
                us(o.gap_ns())
            )?;
        }
        let (l, h, r) = self.totals();
        write!(
            f,
            "{} boundaries (medians per boundary, Σ over all): Σlaunch {:.1} µs, Σhop {:.1} µs, Σrun {:.1} µs, Σgap {:.1} µs",
            self.boundaries.len(),
            us(l),
            us(h),
            us(r),
            us(l + h + r)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{TileEvent, TracedLaunch};
    use super::*;

    fn launch(id: u32, kernel: &str, waits_on: &[u32]) -> TracedLaunch {
        TracedLaunch {
            launch_id: id,
            kernel: kernel.into(),
            config: String::new(),
            stream: "stream #1".into(),
            tile_grid: vec![2],
            waits_on: waits_on.to_vec(),
            site: None,
        }
    }

    fn tile(launch_id: u32, tile: u32, start_ns: u64, waited_ns: u64, end_ns: u64) -> TileEvent {
        TileEvent {
            launch_id,
            tile,
            coords: vec![tile],
            sm: tile,
            cta: tile,
            start_ns,
            waited_ns,
            end_ns,
        }
    }

    /// a (ends 1000) → b (resident early, waits until 1300, ends 2000) → c (starts late at
    /// 2500, no wait, ends 3000) and c also waits on a; d waits on a launch with no tiles.
    fn chain() -> Trace {
        let mut tiles = vec![
            tile(1, 0, 0, 0, 900),
            tile(1, 1, 0, 0, 1000),
            tile(2, 0, 200, 1300, 1800),
            tile(2, 1, 250, 1400, 2000),
            tile(3, 0, 2500, 2500, 3000),
            tile(3, 1, 2600, 2600, 2900),
            tile(4, 0, 100, 100, 150),
            tile(4, 1, 100, 100, 160),
        ];
        tiles.sort_by_key(|t| t.start_ns);
        Trace {
            tiles,
            launches: vec![
                launch(1, "a", &[]),
                launch(2, "b", &[1]),
                launch(3, "c", &[1, 2]),
                launch(4, "d", &[9]),
            ],
            dropped: 0,
        }
    }

    #[test]
    fn phases_split_each_gap() {
        let b = chain().boundaries();
        assert_eq!(b.boundaries.len(), 2, "{b}");
        let (ab, bc) = (&b.boundaries[0], &b.boundaries[1]);
        assert_eq!(
            (ab.operator.as_str(), ab.launch_ns(), ab.hop_ns(), ab.run_ns()),
            ("b", 0, 300, 700)
        );
        assert_eq!(ab.gap_ns(), 1000);
        // c's producers end with b at 2000; it starts 500 later and does not wait.
        assert_eq!(
            (bc.operator.as_str(), bc.launch_ns(), bc.hop_ns(), bc.run_ns()),
            ("c", 500, 0, 500)
        );
        assert_eq!(b.totals(), (500, 300, 1200));
        assert_eq!(b.operators[0].operator, "b");
        assert_eq!(b.operators[0].gap_ns(), 1000);
        let text = b.to_string();
        assert!(text.contains("Σgap 2.0 µs"), "{text}");
    }

    #[test]
    fn a_wait_passed_before_the_last_producer_tile_is_a_negative_hop() {
        let mut t = chain();
        // b's tile 0 passes its wait at 950, before a's last tile ends at 1000.
        for e in &mut t.tiles {
            if (e.launch_id, e.tile) == (2, 0) {
                e.waited_ns = 950;
            }
        }
        let b = t.boundaries();
        assert_eq!(b.boundaries[0].hop_ns(), -50);
        assert_eq!(b.boundaries[0].run_ns(), 1050);
        assert_eq!(b.boundaries[0].gap_ns(), 1000);
    }

    #[test]
    fn medians_and_sums_per_operator() {
        let mut t = chain();
        // A second b → c pair later: b waits on c's launch 3.
        t.launches.push(launch(5, "b", &[3]));
        t.tiles.push(tile(5, 0, 3000, 3100, 3300));
        t.tiles.push(tile(5, 1, 3200, 3200, 3400));
        let b = t.boundaries();
        let ob = b.operators.iter().find(|o| o.operator == "b").expect("b");
        assert_eq!(ob.count, 2);
        // Phases of the two b boundaries: (0, 300, 700) and (0, 100, 300).
        assert_eq!((ob.launch_ns, ob.hop_ns, ob.run_ns), (0, 400, 1000));
        assert_eq!((ob.median_launch_ns, ob.median_hop_ns, ob.median_run_ns), (0, 100, 300));
        assert_eq!(median(vec![]), 0);
    }
}
