//! Per-operator exposed time (paper Appendix C.8): over a trace, for each operator (a
//! kernel and tile config), the time during which one of its tiles was running and no
//! other operator's was ("exposed": on the critical path alone) and the time it ran
//! beside another operator ("overlapped"). A tile runs from the end of its input wait to
//! its end; time a tile spends waiting counts for nothing.

use super::Trace;

/// One operator's share of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorTime {
    /// `kernel[config]` ([`super::TracedLaunch::label`]).
    pub operator: String,
    /// Launches of it in the trace.
    pub launches: usize,
    /// Tiles of it in the trace.
    pub tiles: usize,
    /// ns during which it ran and no other operator did.
    pub exposed_ns: u64,
    /// ns during which it ran beside another operator.
    pub overlapped_ns: u64,
}

impl OperatorTime {
    /// Time it ran at all.
    pub fn busy_ns(&self) -> u64 {
        self.exposed_ns + self.overlapped_ns
    }
}

/// The breakdown of a whole trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    /// Operators, most exposed time first.
    pub operators: Vec<OperatorTime>,
    /// From the first tile's start to the last tile's end.
    pub span_ns: u64,
    /// ns during which no tile ran (launch gaps, waits).
    pub idle_ns: u64,
    /// ns during which two or more operators ran.
    pub overlapped_ns: u64,
}

impl Trace {
    /// Per-operator exposed and overlapped time (a sweep over the tiles' run intervals).
    pub fn breakdown(&self) -> Breakdown {
        let Some((first, last)) = self.span() else {
            return Breakdown {
                operators: Vec::new(),
                span_ns: 0,
                idle_ns: 0,
                overlapped_ns: 0,
            };
        };
        // Operator index per tile.
        let mut names: Vec<String> = Vec::new();
        let mut ops: Vec<OperatorTime> = Vec::new();
        let mut launches_seen: Vec<Vec<u32>> = Vec::new();
        let mut edges: Vec<(u64, bool, usize)> = Vec::with_capacity(self.tiles.len() * 2);
        for t in &self.tiles {
            let name = self.label_of(t);
            let i = match names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    names.push(name.clone());
                    ops.push(OperatorTime {
                        operator: name,
                        launches: 0,
                        tiles: 0,
                        exposed_ns: 0,
                        overlapped_ns: 0,
                    });
                    launches_seen.push(Vec::new());
                    names.len() - 1
                }
            };
            ops[i].tiles += 1;
            if !launches_seen[i].contains(&t.launch_id) {
                launches_seen[i].push(t.launch_id);
            }
            let begin = t.waited_ns.max(t.start_ns);
            if t.end_ns > begin {
                edges.push((begin, true, i));
                edges.push((t.end_ns, false, i));
            }
        }
        for (op, seen) in ops.iter_mut().zip(&launches_seen) {
            op.launches = seen.len();
        }
        // Ends before starts at equal times: touching intervals do not overlap.
        edges.sort_by_key(|&(at, start, _)| (at, start));
        let mut running = vec![0u32; ops.len()];
        let mut active = 0usize; // operators with a running tile
        let (mut idle, mut overlapped) = (0u64, 0u64);
        let mut prev = first;
        for (at, start, i) in edges {
            let dt = at - prev;
            match active {
                0 => idle += dt,
                1 => {
                    if let Some(j) = running.iter().position(|&r| r > 0) {
                        ops[j].exposed_ns += dt;
                    }
                }
                _ => {
                    overlapped += dt;
                    for (j, r) in running.iter().enumerate() {
                        if *r > 0 {
                            ops[j].overlapped_ns += dt;
                        }
                    }
                }
            }
            prev = at;
            if start {
                running[i] += 1;
                if running[i] == 1 {
                    active += 1;
                }
            } else {
                running[i] -= 1;
                if running[i] == 0 {
                    active -= 1;
                }
            }
        }
        idle += last - prev;
        ops.sort_by(|a, b| b.exposed_ns.cmp(&a.exposed_ns).then(b.busy_ns().cmp(&a.busy_ns())));
        Breakdown {
            operators: ops,
            span_ns: last - first,
            idle_ns: idle,
            overlapped_ns: overlapped,
        }
    }
}

impl std::fmt::Display for Breakdown {
    /// A table: operator, launches, tiles, exposed µs, overlapped µs, share of the span.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self
            .operators
            .iter()
            .map(|o| o.operator.len())
            .max()
            .unwrap_or(8)
            .max(8);
        writeln!(
            f,
            "{:<width$}  {:>8}  {:>7}  {:>12}  {:>14}  {:>8}",
            "operator", "launches", "tiles", "exposed µs", "overlapped µs", "exposed"
        )?;
        let span = self.span_ns.max(1) as f64;
        for o in &self.operators {
            writeln!(
                f,
                "{:<width$}  {:>8}  {:>7}  {:>12.1}  {:>14.1}  {:>7.1}%",
                o.operator,
                o.launches,
                o.tiles,
                o.exposed_ns as f64 * 1e-3,
                o.overlapped_ns as f64 * 1e-3,
                100.0 * o.exposed_ns as f64 / span
            )?;
        }
        write!(
            f,
            "span {:.1} µs: {:.1} µs with two or more operators running, {:.1} µs with none",
            self.span_ns as f64 * 1e-3,
            self.overlapped_ns as f64 * 1e-3,
            self.idle_ns as f64 * 1e-3
        )
    }
}
