//! The search of the tuner (paper §3.3): coordinate descent over named knobs, one knob at
//! a time over its candidates with the others fixed, then the knobs of each group jointly
//! (every combination), repeated until a whole round moves no knob by more than the noise,
//! within a time budget. Knows nothing of GPUs or models: it calls a cost function on
//! assignments, so it runs (and is tested) anywhere.

use super::knobs::Family;
use crate::bench::median;
use std::time::{Duration, Instant};

/// One tunable choice: its name, family and candidate values (indices into whatever the
/// caller maps them to), and the value the search starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Knob {
    /// A name that says what it sets, e.g. `mlp.down.config`.
    pub name: String,
    /// Its family (the ablation holds a family at its start values).
    pub family: Family,
    /// The values it may take; `start` is one of them.
    pub candidates: Vec<u32>,
    /// The value the search starts from (the planners' choice).
    pub start: u32,
    /// Knobs that share a group (e.g. one kernel's tile config, prefetch depth and split)
    /// are also searched jointly, when no single knob moves any more.
    pub group: Option<String>,
}

/// One value per knob, in the order of the knobs.
pub type Assignment = Vec<u32>;

/// Limits of a search.
#[derive(Clone, Copy, Debug)]
pub struct SearchOptions {
    /// Wall-clock budget after the start's measurement: no new evaluation starts after it
    /// (the final confirmation still runs).
    pub budget: Duration,
    /// Relative improvement a move must bring to be taken (measurement noise), e.g. 0.01.
    pub noise: f64,
    /// Most rounds over all knobs.
    pub max_rounds: usize,
    /// Times the best and the start assignment are each measured again at the end; the
    /// start wins unless the best is faster on the median.
    pub confirm: usize,
    /// Whether knobs of a group are searched jointly once single moves stop.
    pub joint: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            budget: Duration::from_secs(90),
            noise: 0.01,
            max_rounds: 4,
            confirm: 3,
            joint: true,
        }
    }
}

/// What the search reports as it goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The start assignment's cost.
    Start {
        /// Its cost.
        cost: f64,
    },
    /// One candidate measured (`None`: it cannot run, e.g. a config that does not fit).
    Evaluated {
        /// Evaluations so far, this one included.
        evaluations: usize,
        /// The knob being varied (its group, in a joint move).
        knob: String,
        /// The candidate value (the combination's index, in a joint move).
        value: u32,
        /// Its cost.
        cost: Option<f64>,
    },
    /// A knob moved: it now has `to` and the best cost went from `before` to `after`.
    Moved(Move),
    /// The budget ran out before the search converged.
    BudgetSpent,
}

/// A knob that moved.
#[derive(Clone, Debug, PartialEq)]
pub struct Move {
    /// The knob.
    pub knob: String,
    /// Its value before.
    pub from: u32,
    /// Its value after.
    pub to: u32,
    /// The best cost before the move.
    pub before: f64,
    /// The cost with the move.
    pub after: f64,
    /// The group, when the knob moved together with others of its group (each reported
    /// with the same costs).
    pub joint: Option<String>,
}

/// The result of a search.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The assignment returned: the best found, or the start when the confirmation did not
    /// find the best faster.
    pub best: Assignment,
    /// Median confirmed cost of `best`.
    pub best_cost: f64,
    /// Median confirmed cost of the start.
    pub start_cost: f64,
    /// Cost evaluations made (confirmation included).
    pub evaluations: usize,
    /// Every move taken, in order.
    pub moves: Vec<Move>,
    /// Whether the budget ended the search before a round without moves.
    pub budget_spent: bool,
    /// Rounds run.
    pub rounds: usize,
}

/// Errors of a search: a knob whose start is not a candidate, or the cost function's own
/// error, or a start that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SearchError<E> {
    /// A knob is malformed.
    #[error("knob `{knob}`: {message}")]
    Knob {
        /// The knob.
        knob: String,
        /// What is wrong.
        message: String,
    },
    /// The start assignment cannot run, so there is nothing to improve on.
    #[error("the start assignment cannot run")]
    StartFails,
    /// The cost function failed.
    #[error(transparent)]
    Cost(E),
}

/// The groups of `knobs` with at least two members, as (name, knob indices), in order of
/// first appearance.
fn groups(knobs: &[Knob]) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, k) in knobs.iter().enumerate() {
        let Some(g) = &k.group else { continue };
        match out.iter_mut().find(|(name, _)| name == g) {
            Some((_, members)) => members.push(i),
            None => out.push((g.clone(), vec![i])),
        }
    }
    out.retain(|(_, members)| members.len() > 1);
    out
}

/// Every combination of the candidates of the knobs `members` (the last varies fastest).
fn combinations(knobs: &[Knob], members: &[usize]) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::new()];
    for &k in members {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                knobs[k].candidates.iter().map(move |&v| {
                    let mut c = prefix.clone();
                    c.push(v);
                    c
                })
            })
            .collect();
    }
    out
}

/// Coordinate descent from the knobs' `start` values: for each knob in turn, every other
/// candidate is measured with the other knobs at their current values, and the knob moves
/// to the cheapest candidate if it beats the current best by more than `opts.noise`. When
/// a round moves no single knob and `opts.joint` is set, every combination of each
/// group's knobs is measured the same way, and the group moves together to the cheapest.
/// Rounds repeat until one moves nothing, `opts.max_rounds` is reached or the budget is
/// spent. `cost` returns `Ok(None)` for an assignment that cannot run. At the end the best
/// and the start are each measured `opts.confirm` more times, alternating, and the start
/// is returned unless the best's median is lower: the result is never slower than the
/// start as measured.
pub fn coordinate_descent<E>(
    knobs: &[Knob],
    opts: &SearchOptions,
    cost: &mut dyn FnMut(&Assignment) -> Result<Option<f64>, E>,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Outcome, SearchError<E>> {
    for k in knobs {
        if !k.candidates.contains(&k.start) {
            return Err(SearchError::Knob {
                knob: k.name.clone(),
                message: format!(
                    "the start value {} is not among the candidates {:?}",
                    k.start, k.candidates
                ),
            });
        }
    }
    let start: Assignment = knobs.iter().map(|k| k.start).collect();
    let mut evaluations = 1;
    let start_cost = cost(&start)
        .map_err(SearchError::Cost)?
        .ok_or(SearchError::StartFails)?;
    on_event(&Event::Start { cost: start_cost });
    // The budget counts from here: the start's measurement may carry one-time costs
    // (loading and JIT-compiling the kernels' modules).
    let t0 = Instant::now();
    let mut current = start.clone();
    let mut best_cost = start_cost;
    let mut moves = Vec::new();
    let mut rounds = 0;
    let mut budget_spent = false;
    'rounds: while rounds < opts.max_rounds {
        rounds += 1;
        let mut moved = false;
        for (i, knob) in knobs.iter().enumerate() {
            let mut round_best: Option<(u32, f64)> = None;
            for &value in &knob.candidates {
                if value == current[i] {
                    continue;
                }
                if t0.elapsed() >= opts.budget {
                    budget_spent = true;
                    on_event(&Event::BudgetSpent);
                    break 'rounds;
                }
                let mut trial = current.clone();
                trial[i] = value;
                evaluations += 1;
                let c = cost(&trial).map_err(SearchError::Cost)?;
                on_event(&Event::Evaluated {
                    evaluations,
                    knob: knob.name.clone(),
                    value,
                    cost: c,
                });
                if let Some(c) = c
                    && round_best.is_none_or(|(_, b)| c < b)
                {
                    round_best = Some((value, c));
                }
            }
            if let Some((value, c)) = round_best
                && c < best_cost * (1.0 - opts.noise)
            {
                let m = Move {
                    knob: knob.name.clone(),
                    from: current[i],
                    to: value,
                    before: best_cost,
                    after: c,
                    joint: None,
                };
                on_event(&Event::Moved(m.clone()));
                moves.push(m);
                current[i] = value;
                best_cost = c;
                moved = true;
            }
        }
        if !moved && opts.joint {
            for (group, members) in groups(knobs) {
                let mut round_best: Option<(Assignment, f64)> = None;
                for (index, combination) in combinations(knobs, &members).into_iter().enumerate() {
                    let mut trial = current.clone();
                    for (&k, &v) in members.iter().zip(&combination) {
                        trial[k] = v;
                    }
                    if trial == current {
                        continue;
                    }
                    if t0.elapsed() >= opts.budget {
                        budget_spent = true;
                        on_event(&Event::BudgetSpent);
                        break 'rounds;
                    }
                    evaluations += 1;
                    let c = cost(&trial).map_err(SearchError::Cost)?;
                    on_event(&Event::Evaluated {
                        evaluations,
                        knob: group.clone(),
                        value: index as u32,
                        cost: c,
                    });
                    if let Some(c) = c
                        && round_best.as_ref().is_none_or(|(_, b)| c < *b)
                    {
                        round_best = Some((trial, c));
                    }
                }
                if let Some((trial, c)) = round_best
                    && c < best_cost * (1.0 - opts.noise)
                {
                    for &k in &members {
                        if trial[k] != current[k] {
                            let m = Move {
                                knob: knobs[k].name.clone(),
                                from: current[k],
                                to: trial[k],
                                before: best_cost,
                                after: c,
                                joint: Some(group.clone()),
                            };
                            on_event(&Event::Moved(m.clone()));
                            moves.push(m);
                        }
                    }
                    current = trial;
                    best_cost = c;
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
    if current == start || opts.confirm == 0 {
        let cost = if current == start { start_cost } else { best_cost };
        return Ok(Outcome {
            best: current,
            best_cost: cost,
            start_cost,
            evaluations,
            moves,
            budget_spent,
            rounds,
        });
    }
    let (mut at_best, mut at_start) = (Vec::new(), Vec::new());
    for _ in 0..opts.confirm {
        for (a, into) in [(&current, &mut at_best), (&start, &mut at_start)] {
            evaluations += 1;
            // An assignment that ran before and fails now counts as infinitely slow.
            into.push(cost(a).map_err(SearchError::Cost)?.unwrap_or(f64::INFINITY));
        }
    }
    let (b, s) = (median(at_best), median(at_start));
    let best = if b < s { current } else { start };
    Ok(Outcome {
        best,
        best_cost: b.min(s),
        start_cost: s,
        evaluations,
        moves,
        budget_spent,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn knob(name: &str, n: u32, start: u32) -> Knob {
        Knob {
            name: name.into(),
            family: Family::TileConfig,
            candidates: (0..n).collect(),
            start,
            group: None,
        }
    }

    /// A separable cost with its minimum at `planted`, plus a coupling term so that the
    /// best of one knob depends on another (as overlap knobs do).
    fn planted_cost(a: &Assignment, planted: &[u32]) -> f64 {
        let sep: f64 = a
            .iter()
            .zip(planted)
            .map(|(&v, &p)| (v as f64 - p as f64).powi(2))
            .sum();
        10.0 + sep + 0.5 * (a[0] as f64 - a[1] as f64).abs() * if a[2] == planted[2] { 0.0 } else { 1.0 }
    }

    #[test]
    fn finds_the_planted_best() {
        let knobs = [knob("a", 6, 0), knob("b", 5, 4), knob("c", 3, 0), knob("d", 4, 1)];
        let planted = [3, 1, 2, 3];
        let mut events = Vec::new();
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &SearchOptions::default(),
            &mut |a| Ok(Some(planted_cost(a, &planted))),
            &mut |e| events.push(e.clone()),
        )
        .expect("search");
        assert_eq!(out.best, planted.to_vec());
        assert_eq!(out.best_cost, 10.0);
        assert!(out.start_cost > out.best_cost);
        assert!(!out.budget_spent);
        // Every move improved the best, and the log names them.
        assert!(!out.moves.is_empty());
        for m in &out.moves {
            assert!(m.after < m.before, "{m:?}");
        }
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Moved(m) if m.knob == "a" && m.to == 3))
        );
    }

    #[test]
    fn a_group_moves_jointly_where_no_single_knob_can() {
        // The cost falls only when both knobs move together (a valley along the diagonal):
        // single moves see no gain, the joint move finds (2, 2).
        let cost = |a: &Assignment| 10.0 - if a[0] == a[1] { a[0] as f64 } else { -5.0 };
        let single = [knob("a", 3, 0), knob("b", 3, 0)];
        let opts = SearchOptions::default();
        let out =
            coordinate_descent::<Infallible>(&single, &opts, &mut |a| Ok(Some(cost(a))), &mut |_| {}).expect("search");
        assert_eq!(out.best, vec![0, 0], "without a group the valley is not found");
        let grouped: Vec<Knob> = single
            .iter()
            .map(|k| Knob {
                group: Some("g".into()),
                ..k.clone()
            })
            .collect();
        let mut joint_moves = Vec::new();
        let out = coordinate_descent::<Infallible>(&grouped, &opts, &mut |a| Ok(Some(cost(a))), &mut |e| {
            if let Event::Moved(m) = e {
                joint_moves.push(m.clone())
            }
        })
        .expect("search");
        assert_eq!(out.best, vec![2, 2]);
        assert_eq!(joint_moves.len(), 2);
        assert!(joint_moves.iter().all(|m| m.joint.as_deref() == Some("g") && m.to == 2));
        // Switched off, the group is searched one knob at a time only.
        let off = SearchOptions { joint: false, ..opts };
        let out =
            coordinate_descent::<Infallible>(&grouped, &off, &mut |a| Ok(Some(cost(a))), &mut |_| {}).expect("search");
        assert_eq!(out.best, vec![0, 0]);
    }

    #[test]
    fn skips_candidates_that_cannot_run() {
        let knobs = [knob("a", 6, 0)];
        // Value 4 would be best but cannot run; 3 is the best that runs.
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &SearchOptions::default(),
            &mut |a| Ok(if a[0] == 4 { None } else { Some(10.0 - a[0] as f64) }),
            &mut |_| {},
        )
        .expect("search");
        assert_eq!(out.best, vec![5]);
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &SearchOptions::default(),
            &mut |a| Ok(if a[0] >= 4 { None } else { Some(10.0 - a[0] as f64) }),
            &mut |_| {},
        )
        .expect("search");
        assert_eq!(out.best, vec![3]);
    }

    #[test]
    fn never_returns_slower_than_the_start() {
        // A noisy cost where one candidate measures fast once (a lucky measurement) but is
        // slower on every re-measure: the confirmation keeps the start.
        let knobs = [knob("a", 3, 0)];
        let mut calls = 0;
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &SearchOptions::default(),
            &mut |a| {
                calls += 1;
                Ok(Some(match a[0] {
                    0 => 10.0,
                    1 if calls == 2 => 5.0,
                    _ => 12.0,
                }))
            },
            &mut |_| {},
        )
        .expect("search");
        assert_eq!(out.best, vec![0]);
        assert_eq!(out.best_cost, 10.0);
        assert!(out.best_cost <= out.start_cost);
    }

    #[test]
    fn moves_only_beyond_the_noise() {
        let knobs = [knob("a", 2, 0)];
        let opts = SearchOptions {
            noise: 0.05,
            ..SearchOptions::default()
        };
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &opts,
            &mut |a| Ok(Some(if a[0] == 1 { 9.7 } else { 10.0 })),
            &mut |_| {},
        )
        .expect("search");
        assert_eq!(out.best, vec![0], "a 3 % gain is inside 5 % noise");
        assert!(out.moves.is_empty());
    }

    #[test]
    fn respects_the_budget() {
        let knobs = [knob("a", 50, 0), knob("b", 50, 0)];
        let opts = SearchOptions {
            budget: Duration::from_millis(30),
            ..SearchOptions::default()
        };
        let t0 = Instant::now();
        let mut evaluated = 0;
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &opts,
            &mut |a| {
                evaluated += 1;
                std::thread::sleep(Duration::from_millis(5));
                Ok(Some(100.0 - a[0] as f64 - a[1] as f64))
            },
            &mut |_| {},
        )
        .expect("search");
        assert!(out.budget_spent);
        // The budget stops new evaluations; the confirmation adds 2 · confirm more.
        assert!(evaluated < 20, "{evaluated} evaluations in a 30 ms budget of 5 ms each");
        assert!(t0.elapsed() < Duration::from_millis(300));
        assert!(out.best_cost <= out.start_cost);
    }

    #[test]
    fn a_slow_start_does_not_spend_the_budget() {
        // The first measurement loads the kernels (a JIT of a minute on a fresh GPU
        // machine): the budget counts after it.
        let knobs = [knob("a", 4, 0)];
        let opts = SearchOptions {
            budget: Duration::from_millis(200),
            ..SearchOptions::default()
        };
        let mut calls = 0;
        let out = coordinate_descent::<Infallible>(
            &knobs,
            &opts,
            &mut |a| {
                calls += 1;
                if calls == 1 {
                    std::thread::sleep(Duration::from_millis(300));
                }
                Ok(Some(10.0 - a[0] as f64))
            },
            &mut |_| {},
        )
        .expect("search");
        assert!(!out.budget_spent);
        assert_eq!(out.best, vec![3]);
    }

    #[test]
    fn rejects_a_start_outside_the_candidates_and_a_start_that_fails() {
        let bad = [Knob {
            start: 9,
            ..knob("a", 3, 0)
        }];
        let e = coordinate_descent::<Infallible>(&bad, &SearchOptions::default(), &mut |_| Ok(Some(1.0)), &mut |_| {})
            .expect_err("bad start");
        assert!(e.to_string().contains("knob `a`: the start value 9"), "{e}");
        let e = coordinate_descent::<Infallible>(
            &[knob("a", 3, 0)],
            &SearchOptions::default(),
            &mut |_| Ok(None),
            &mut |_| {},
        )
        .expect_err("failing start");
        assert!(matches!(e, SearchError::StartFails));
    }
}
