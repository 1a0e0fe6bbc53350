//! The capacity search, pure: which load to offer next given the verdicts so far (grow
//! geometrically until an objective breaks, bisect to the resolution, confirm the answer
//! with a longer step), and the verdict of one step from its summary (objectives met beyond
//! their uncertainty, the run steady, the generator not the limit). No clock, no request:
//! the replay engine runs the steps.

use serde::{Deserialize, Serialize};

use crate::metrics::StatsTable;
use crate::results::thresholds::Threshold;
use crate::results::Summary;

/// How the search grows, narrows and stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchOptions {
    /// The first load offered (the trace's speed factor).
    pub start: f64,
    /// Each passing step before the first failure multiplies the load by this (2: the
    /// search never drives the registry past twice the last load that passed).
    pub growth: f64,
    /// Bisection stops when the failing load is within this share above the passing one.
    pub resolution: f64,
    /// The highest load offered.
    pub ceiling: f64,
    /// The lowest load tried when even the first fails (below it: no capacity found).
    pub floor: f64,
    /// An undecided step is repeated this many times, each twice as long, before it counts
    /// as failed.
    pub retries: u32,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            start: 1.0,
            growth: 2.0,
            resolution: 0.05,
            ceiling: 1024.0,
            floor: 1.0 / 64.0,
            retries: 2,
        }
    }
}

/// How one step came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every objective held, the run was steady, the generator kept up.
    Sustained,
    /// An objective broke, or the run was not steady (queues growing).
    Unsustained,
    /// An objective too close to its limit to decide with the samples the step had.
    Undecided,
    /// The generator could not offer the load (its in-flight cap, its lag, its CPU): the
    /// registry's capacity above this load is unknown.
    GeneratorLimited,
}

/// The next thing the search wants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// A step at `speed`, `length` times the step length.
    Step { speed: f64, length: f64 },
    /// The answer: the highest load sustained (and confirmed), if any, and whether it is a
    /// lower bound only (the generator or the ceiling stopped the search).
    Done {
        capacity: Option<f64>,
        at_least: bool,
    },
}

/// The search's state: the highest load sustained, the lowest that was not, and what is
/// being repeated or confirmed.
#[derive(Debug, Clone)]
pub struct Search {
    options: SearchOptions,
    passed: Option<f64>,
    failed: Option<f64>,
    /// The step asked for last, and how many times it was repeated undecided.
    current: (f64, f64),
    retried: u32,
    /// The longer step that confirms `passed` is running.
    confirming: bool,
    done: Option<Next>,
}

impl Search {
    pub fn new(options: SearchOptions) -> Search {
        Search {
            options,
            passed: None,
            failed: None,
            current: (options.start.clamp(options.floor, options.ceiling), 1.0),
            retried: 0,
            confirming: false,
            done: None,
        }
    }

    /// What to run next.
    pub fn next(&self) -> Next {
        self.done.unwrap_or(Next::Step {
            speed: self.current.0,
            length: self.current.1,
        })
    }

    /// Records how the step [`Self::next`] asked for came out.
    pub fn record(&mut self, outcome: Outcome) {
        if self.done.is_some() {
            return;
        }
        let (speed, length) = self.current;
        let o = self.options;
        match outcome {
            Outcome::Undecided if self.retried < o.retries => {
                self.retried += 1;
                self.current = (speed, length * 2.0);
                return;
            }
            Outcome::GeneratorLimited => {
                self.done = Some(Next::Done {
                    capacity: self.passed,
                    at_least: true,
                });
                return;
            }
            _ => {}
        }
        self.retried = 0;
        let sustained = outcome == Outcome::Sustained;
        if self.confirming {
            self.confirming = false;
            if sustained {
                // At the ceiling, with nothing failed yet, it is only a lower bound.
                self.done = Some(Next::Done {
                    capacity: Some(speed),
                    at_least: self.failed.is_none(),
                });
                return;
            }
            // The longer step did not hold it: it is a failure, and the search narrows
            // below it.
            self.passed = None;
        }
        if sustained {
            self.passed = Some(self.passed.map_or(speed, |p| p.max(speed)));
        } else {
            self.failed = Some(self.failed.map_or(speed, |f| f.min(speed)));
        }
        self.current = match (self.passed, self.failed) {
            (Some(p), None) if p >= o.ceiling => {
                // The ceiling sustained: confirm it; the capacity is at least that.
                self.confirming = true;
                (p, 2.0)
            }
            (Some(p), None) => ((p * o.growth).min(o.ceiling), 1.0),
            (None, Some(f)) if f / o.growth < o.floor => {
                self.done = Some(Next::Done {
                    capacity: None,
                    at_least: false,
                });
                return;
            }
            (None, Some(f)) => (f / o.growth, 1.0),
            (Some(p), Some(f)) if f / p - 1.0 <= o.resolution => {
                self.confirming = true;
                (p, 2.0)
            }
            (Some(p), Some(f)) => ((p * f).sqrt(), 1.0),
            (None, None) => (speed, length),
        };
    }

    /// The highest load sustained so far.
    pub fn passed(&self) -> Option<f64> {
        self.passed
    }
}

/// How one objective came out on one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectiveVerdict {
    pub objective: String,
    /// `met`, `broken`, `undecided` (the interval straddles the limit) or `no_data`.
    pub verdict: String,
    pub value: Option<f64>,
    pub interval: Option<[f64; 2]>,
}

/// Judges one step: every objective (an expression that must hold, `--slo`) and whether the
/// run was steady. The step's outcome, each objective's verdict, and why. Whether the
/// generator kept up is [`generator_limit`]'s to say, for a step that did not pass.
pub fn judge_step(
    objectives: &[Threshold],
    summary: &Summary,
    table: &StatsTable,
) -> (Outcome, Vec<ObjectiveVerdict>, Option<String>) {
    let verdicts: Vec<ObjectiveVerdict> = objectives
        .iter()
        .map(|t| {
            let (verdict, value, interval) = t.decide(summary, table);
            ObjectiveVerdict {
                objective: t.to_string(),
                verdict: verdict.into(),
                value,
                interval,
            }
        })
        .collect();
    let broken = verdicts.iter().find(|v| v.verdict == "broken");
    if let Some(v) = broken {
        return (
            Outcome::Unsustained,
            verdicts.clone(),
            Some(format!("{} broke", v.objective)),
        );
    }
    if let Some(s) = summary
        .steady_state
        .as_ref()
        .filter(|s| s.steady == Some(false))
    {
        let moved: Vec<String> = s.drift.iter().map(|d| d.describe()).collect();
        return (
            Outcome::Unsustained,
            verdicts,
            Some(format!("not steady: {}", moved.join("; "))),
        );
    }
    if let Some(v) = verdicts.iter().find(|v| v.verdict == "undecided") {
        return (
            Outcome::Undecided,
            verdicts.clone(),
            Some(format!("{} too close to decide", v.objective)),
        );
    }
    if let Some(v) = verdicts.iter().find(|v| v.verdict == "no_data") {
        return (
            Outcome::Undecided,
            verdicts.clone(),
            Some(format!("nothing measured for {}", v.objective)),
        );
    }
    (Outcome::Sustained, verdicts, None)
}

/// Why the generator, not the registry, may have limited a step: its in-flight cap binding,
/// its runtime late to wake, its CPU. Asked only of a step that did not pass: one that
/// passed served what was offered, however late the generator woke.
pub fn generator_limit(summary: &Summary) -> Option<String> {
    let c = summary.checks.as_ref()?;
    if c.cap_binding_share > 0.05 {
        return Some(format!(
            "the in-flight cap ({}) held operations back {:.0}% of the step: raise --concurrency",
            c.max_in_flight,
            c.cap_binding_share * 100.0
        ));
    }
    if let Some(share) = c.cpu_share.filter(|s| *s > 0.9) {
        return Some(format!("creb-rs used {:.0}% of its cores", share * 100.0));
    }
    if let Some(p99) = c
        .canary_wake_ms
        .as_ref()
        .and_then(|w| w.p99)
        .filter(|p| *p > 10.0)
    {
        return Some(format!("the runtime woke {p99:.1} ms late (p99)"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a registry that sustains every load up to `capacity`.
    fn find(capacity: f64, options: SearchOptions) -> (Option<f64>, Vec<f64>) {
        let mut search = Search::new(options);
        let mut offered = Vec::new();
        for _ in 0..100 {
            match search.next() {
                Next::Step { speed, .. } => {
                    offered.push(speed);
                    search.record(if speed <= capacity {
                        Outcome::Sustained
                    } else {
                        Outcome::Unsustained
                    });
                }
                Next::Done { capacity, .. } => return (capacity, offered),
            }
        }
        panic!("the search did not end: {offered:?}");
    }

    #[test]
    fn the_search_finds_a_known_capacity_within_its_resolution() {
        for capacity in [0.3, 1.0, 6.5, 37.0, 300.0] {
            let (found, offered) = find(capacity, SearchOptions::default());
            let found = found.unwrap_or_else(|| panic!("{capacity}: none in {offered:?}"));
            assert!(
                found <= capacity && found >= capacity / 1.05,
                "{capacity}: found {found} via {offered:?}"
            );
            // Never past twice the last load that passed.
            let mut passed = 0.0f64;
            for &o in &offered {
                assert!(passed == 0.0 || o <= 2.0 * passed + 1e-9, "{offered:?}");
                if o <= capacity {
                    passed = passed.max(o);
                }
            }
        }
    }

    #[test]
    fn nothing_sustained_is_no_capacity_and_the_ceiling_is_a_lower_bound() {
        let (found, _) = find(0.001, SearchOptions::default());
        assert_eq!(found, None);
        let mut search = Search::new(SearchOptions {
            ceiling: 8.0,
            ..SearchOptions::default()
        });
        while let Next::Step { .. } = search.next() {
            search.record(Outcome::Sustained);
        }
        assert_eq!(
            search.next(),
            Next::Done {
                capacity: Some(8.0),
                at_least: true
            }
        );
    }

    #[test]
    fn an_undecided_step_is_lengthened_and_a_held_back_generator_stops_the_search() {
        let mut search = Search::new(SearchOptions::default());
        search.record(Outcome::Sustained);
        assert_eq!(
            search.next(),
            Next::Step {
                speed: 2.0,
                length: 1.0
            }
        );
        search.record(Outcome::Undecided);
        assert_eq!(
            search.next(),
            Next::Step {
                speed: 2.0,
                length: 2.0
            }
        );
        search.record(Outcome::GeneratorLimited);
        assert_eq!(
            search.next(),
            Next::Done {
                capacity: Some(1.0),
                at_least: true
            }
        );
    }
}
