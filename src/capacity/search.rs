//! The capacity search, pure: which load to offer next given the verdicts so far (grow
//! geometrically until an objective breaks, bisect to the resolution, confirm the answer
//! with a longer step), and the verdict of one step from its summary (objectives met beyond
//! their uncertainty, the run steady, the generator not the limit). No clock, no request:
//! the replay engine runs the steps.

use crate::metrics::StatsTable;
pub use crate::results::capacity::{ObjectiveVerdict, Outcome};
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
    /// The step asked for last is the repeat of one the generator could not offer.
    held_back: bool,
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
            held_back: false,
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
        if self.done.is_some() || self.repeats(outcome) {
            return;
        }
        let (speed, length) = self.current;
        let o = self.options;
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

    /// Whether `outcome` leaves the step to be run again, twice as long (or, for a generator
    /// held back twice, ends the search); else the repeats start over.
    fn repeats(&mut self, outcome: Outcome) -> bool {
        let (speed, length) = self.current;
        match outcome {
            Outcome::Undecided if self.retried < self.options.retries => {
                self.retried += 1;
                self.current = (speed, length * 2.0);
            }
            // A step the generator could not offer is repeated once before the search ends
            // on it: a passing hiccup of the machine (a neighbour's burst, a stalled
            // scheduler) is not the registry's capacity, and an overloaded machine stays
            // overloaded.
            Outcome::GeneratorLimited if !self.held_back => {
                self.held_back = true;
                self.current = (speed, length * 2.0);
            }
            Outcome::GeneratorLimited => {
                self.done = Some(Next::Done {
                    capacity: self.passed,
                    at_least: true,
                });
            }
            _ => {
                self.retried = 0;
                self.held_back = false;
                return false;
            }
        }
        true
    }

    /// The highest load sustained so far.
    pub fn passed(&self) -> Option<f64> {
        self.passed
    }
}

/// Judges one step: every objective (an expression that must hold, `--slo`) and whether the
/// run was steady. The step's outcome, each objective's verdict, and why. On whose side a
/// step that did not pass failed is [`blame`]'s to say.
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
        let why = match v.interval {
            Some(_) => format!("{} too close to decide", v.objective),
            None => format!(
                "{}: too few samples past the limit to be more than chance",
                v.objective
            ),
        };
        return (Outcome::Undecided, verdicts.clone(), Some(why));
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

/// How late the canary's 10 ms sleep may wake at p99 before the generator's own timings
/// are in doubt, ms.
const LATE_WAKE_MS: f64 = 10.0;

/// Who a step that did not pass is to blame on: the registry, or the generator that could
/// not offer the load. Asked only of a step that did not pass: one that passed served what
/// was offered, however late the generator woke.
#[derive(Debug, Clone, PartialEq)]
pub enum Blame {
    /// The registry: its own service time broke an objective, its failures passed the
    /// bound, or nothing points at the generator. A note when the in-flight cap bound too
    /// (the registry's slowness filling it).
    Registry(Option<String>),
    /// The generator, for reasons of its own (why, and what to change).
    Generator(String),
}

/// Whose a step that did not pass is (docs/capacity.md, "Who is to blame"):
/// - the generator's when it could not run as meant: its CPU saturated, or its runtime
///   woke late (its own timings are then not the registry's either) unless the registry's
///   service time breaks a latency objective by more than twice the latest wake — more
///   than the lateness could have added;
/// - the registry's when its failures passed the bound, or its own service time (send to
///   end, no wait for a slot) breaks a latency objective, whatever the in-flight cap did:
///   at a fixed offered rate λ a registry answering in W keeps L = λ·W operations in
///   flight (Little's law), so a slower registry fills a fixed cap — the cap binding is
///   then its symptom;
/// - the generator's when the cap held operations back while the service times stay
///   within every latency objective (raise `--concurrency`); with no latency objective,
///   when the registry's service time would not fill the cap at the offered rate;
/// - the registry's otherwise.
pub fn blame(
    summary: &Summary,
    table: &StatsTable,
    objectives: &[Threshold],
    offered_rps: f64,
    errors_beyond_bound: bool,
) -> Blame {
    let Some(c) = summary.checks.as_ref() else {
        return Blame::Registry(None);
    };
    if let Some(share) = c.cpu_share.filter(|s| *s > 0.9) {
        return Blame::Generator(format!(
            "creb-rs used {:.0}% of its cores: more hosts, or a faster machine",
            share * 100.0
        ));
    }
    let latency: Vec<Threshold> = objectives
        .iter()
        .filter_map(Threshold::service_side)
        .collect();
    if let Some(blamed) = late_runtime(c, &latency, summary, table) {
        return blamed;
    }
    if errors_beyond_bound || c.cap_binding_share <= 0.05 {
        return Blame::Registry(None);
    }
    let binding = format!(
        "the in-flight cap ({}) held operations back {:.0}% of the step",
        c.max_in_flight,
        c.cap_binding_share * 100.0
    );
    if let Some(broken) = latency.iter().find(|t| t.fails(summary, table)) {
        return Blame::Registry(Some(format!(
            "{binding}, filled by the registry's own service time ({} fails)",
            broken.text
        )));
    }
    if latency.is_empty() {
        // No latency limit to hold the service time to: Little's law says whether the
        // registry's time alone fills the cap at the offered rate.
        let in_service = registry_in_flight(table, offered_rps);
        if in_service >= 0.8 * c.max_in_flight as f64 {
            return Blame::Registry(Some(format!(
                "{binding}: at {offered_rps:.1} op/s the registry's service time keeps \
                 {in_service:.1} in flight (Little's law), the cap filled by it"
            )));
        }
    }
    Blame::Generator(format!(
        "{binding} while the registry's service times stayed within the objectives: raise \
         --concurrency"
    ))
}

/// Whom a late runtime (the canary's p99 past [`LATE_WAKE_MS`]) leaves the step to: the
/// generator, unless the registry's own service time breaks a latency objective by more
/// than the lateness could have added. `None` when the runtime woke in time.
fn late_runtime(
    c: &crate::results::summary::Checks,
    latency: &[Threshold],
    summary: &Summary,
    table: &StatsTable,
) -> Option<Blame> {
    let wake = c.canary_wake_ms.as_ref()?;
    let p99 = wake.p99.filter(|p| *p > LATE_WAKE_MS)?;
    // A late runtime moves each timing by about its lateness: a service time past a latency
    // objective by more than twice the worst wake is the registry's, however late the
    // generator woke.
    let slack = 2.0 * wake.max;
    Some(
        match latency
            .iter()
            .find(|t| t.fails_beyond(summary, table, slack))
        {
            Some(broken) => Blame::Registry(Some(format!(
                "the runtime woke {p99:.1} ms late (p99, {:.1} ms at worst), but the \
                 registry's own service time fails {} by more than twice that",
                wake.max, broken.text
            ))),
            None => Blame::Generator(format!(
                "the runtime woke {p99:.1} ms late (p99): the generator's machine is overloaded"
            )),
        },
    )
}

/// L = λ·W: the operations in flight at the registry at `offered_rps` with the step's mean
/// service time (send to end) of its workload operations.
fn registry_in_flight(table: &StatsTable, offered_rps: f64) -> f64 {
    let (mut count, mut total_us) = (0u64, 0.0f64);
    for op in table.ops() {
        if op.level() != crate::metrics::Level::Operation {
            continue;
        }
        if let Some(service) = table.op_total(op).and_then(|s| s.service) {
            count += service.len();
            total_us += service.mean() * service.len() as f64;
        }
    }
    if count == 0 {
        return 0.0;
    }
    offered_rps * total_us / count as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::metrics::hist::Percentiles;
    use crate::results::summary::Checks;
    use crate::results::thresholds::tests::{summary, table};

    /// Whom [`blame`] names for blob GETs of service p99 about 1000 ms, given `objective`,
    /// the canary's p99 and worst wake and the generator's CPU share.
    fn blamed(objective: &str, wake: (f64, f64), cpu: f64) -> Blame {
        let mut s = summary();
        s.checks = Some(Checks {
            start_at: None,
            start_skew_ms: None,
            canary_wake_ms: Some(Percentiles {
                p99: Some(wake.0),
                max: wake.1,
                ..Percentiles::default()
            }),
            cpu_seconds: None,
            cpu_share: Some(cpu),
            cores: 2,
            cap_binding_share: 0.0,
            max_in_flight: 64,
            gathered: None,
            event_loops: None,
        });
        let objectives = [Threshold::parse(objective).unwrap()];
        blame(&s, &table(), &objectives, 10.0, false)
    }

    #[test]
    fn a_late_runtime_is_blamed_only_for_what_its_lateness_could_explain() {
        // On time: the registry's, the cap never bound.
        assert_eq!(
            blamed("p99(blob_get) < 150ms", (1.0, 3.0), 0.3),
            Blame::Registry(None)
        );
        // Late, but the service time (1000 ms) is far past 150 ms + 2 × 30 ms.
        match blamed("p99(blob_get) < 150ms", (12.0, 30.0), 0.3) {
            Blame::Registry(Some(why)) => assert!(why.contains("12.0 ms late"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Late, and 950 ms + 2 × 30 ms covers the 1000 ms: the generator's timings decide
        // nothing.
        assert!(matches!(
            blamed("p99(blob_get) < 950ms", (12.0, 30.0), 0.3),
            Blame::Generator(why) if why.contains("overloaded")
        ));
        // An objective on errors says nothing of latency: the late generator's.
        assert!(matches!(
            blamed("errors(http_429) == 0", (12.0, 30.0), 0.3),
            Blame::Generator(_)
        ));
        // A saturated CPU is the generator's whatever the registry's times.
        assert!(matches!(
            blamed("p99(blob_get) < 150ms", (1.0, 3.0), 0.95),
            Blame::Generator(why) if why.contains("cores")
        ));
    }

    #[test]
    fn a_lone_late_sample_leaves_a_step_undecided_not_unsustained() {
        let judge = |objective: &str| {
            let objectives = [Threshold::parse(objective).unwrap()];
            let (outcome, _, why) = judge_step(&objectives, &summary(), &table());
            (outcome, why.unwrap_or_default())
        };
        // 97 successes without an interval, the largest at 1,005 ms: one past 1 s is chance.
        let (outcome, why) = judge("p99(blob_get) < 1s");
        assert_eq!(outcome, Outcome::Undecided);
        assert!(why.contains("too few samples past the limit"), "{why}");
        // Half of them past 500 ms is not.
        assert_eq!(judge("p99(blob_get) < 500ms").0, Outcome::Unsustained);
        assert_eq!(judge("p99(blob_get) < 2s").0, Outcome::Sustained);
    }

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
        let step = |speed, length| Next::Step { speed, length };
        let mut search = Search::new(SearchOptions::default());
        search.record(Outcome::Sustained);
        assert_eq!(search.next(), step(2.0, 1.0));
        search.record(Outcome::Undecided);
        assert_eq!(search.next(), step(2.0, 2.0));
        // Held back once: the same load again, twice as long; held back again: the end.
        search.record(Outcome::GeneratorLimited);
        assert_eq!(search.next(), step(2.0, 4.0));
        search.record(Outcome::GeneratorLimited);
        assert_eq!(
            search.next(),
            Next::Done {
                capacity: Some(1.0),
                at_least: true
            }
        );
    }

    #[test]
    fn a_generator_held_back_once_is_repeated_and_the_search_goes_on() {
        let step = |speed, length| Next::Step { speed, length };
        let mut search = Search::new(SearchOptions::default());
        search.record(Outcome::GeneratorLimited);
        assert_eq!(search.next(), step(1.0, 2.0));
        search.record(Outcome::Sustained);
        assert_eq!(search.next(), step(2.0, 1.0));
        // Each hiccup is forgiven once: a later one is repeated too, not the end.
        search.record(Outcome::GeneratorLimited);
        assert_eq!(search.next(), step(2.0, 2.0));
        search.record(Outcome::Unsustained);
        assert_eq!(search.next(), step(2.0_f64.sqrt(), 1.0));
        assert_eq!(search.passed(), Some(1.0));
    }
}
