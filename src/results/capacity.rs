//! `capacity.json`, the result of a capacity search or ladder: its types (every step, the
//! answer, the gates' verdicts), written by `capacity`, read back by `report`, `merge` and
//! `run`'s checkpoint and comparison. Schema in `schema/capacity.schema.json`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read as _;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::files::{write_atomic, CAPACITY_JSON};

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

impl Outcome {
    /// Its name in capacity.json.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Sustained => "sustained",
            Outcome::Unsustained => "unsustained",
            Outcome::Undecided => "undecided",
            Outcome::GeneratorLimited => "generator_limited",
        }
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

/// One step as capacity.json records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: usize,
    /// The trace's speed factor offered.
    pub speed: f64,
    /// Where in the trace the step's window started and how long it was (trace time).
    pub trace_from_s: f64,
    pub trace_length_s: f64,
    /// The measured part of the step's schedule, seconds (none recorded by an older
    /// ladder).
    #[serde(default)]
    pub length_s: Option<f64>,
    /// Operations per second the window's records asked for, and those completed.
    pub offered_rps: f64,
    pub achieved_rps: f64,
    /// The operations due in the measured part, by how they ended (whenever they ended):
    /// the achieved rate counts the successes only. None recorded by an older ladder.
    #[serde(default)]
    pub operations_ok: Option<u64>,
    #[serde(default)]
    pub operations_failed: Option<u64>,
    pub outcome: Outcome,
    pub why: Option<String>,
    pub objectives: Vec<ObjectiveVerdict>,
    /// Every operation's p50 and p99 (ms), and the failures by kind.
    pub percentiles: BTreeMap<String, [Option<f64>; 2]>,
    /// Their 95% confidence intervals (ms), null where not established.
    #[serde(default)]
    pub percentiles_ci: BTreeMap<String, [Option<[f64; 2]>; 2]>,
    /// Every operation's successes per second over the measured part (image pulls per
    /// second beside blob GETs per second).
    #[serde(default)]
    pub rates: BTreeMap<String, f64>,
    pub errors: BTreeMap<String, u64>,
}

/// The answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Capacity {
    /// The speed factor of the trace at the capacity, and the operations per second it
    /// sustained; null when no load passed.
    pub speed: Option<f64>,
    pub requests_per_s: Option<f64>,
    /// The search stopped before it found a load that failed (the ceiling, the generator,
    /// --max-time): the capacity is at least this.
    #[serde(default)]
    pub at_least: bool,
    /// The lowest load above the capacity that was not sustained, and the operations per
    /// second it offered: the capacity lies between (the search's resolution). Null when
    /// no load above it failed.
    #[serde(default)]
    pub upper_speed: Option<f64>,
    #[serde(default)]
    pub upper_requests_per_s: Option<f64>,
    /// Every operation's successes per second at the capacity (its step's `rates`).
    #[serde(default)]
    pub operations_per_s: BTreeMap<String, f64>,
}

/// A search or a ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The load found step by step.
    Search,
    /// A fixed ladder of loads, every step run: what many hosts run and `merge` merges
    /// step by step.
    Ladder,
}

impl Kind {
    /// Its name in capacity.json.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Search => "search",
            Kind::Ladder => "ladder",
        }
    }
}

/// What bounds the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    /// A higher load failed.
    Registry,
    /// creb-rs could not offer a higher load: a lower bound, not the registry's capacity.
    Generator,
    /// `--max-speed`, or the ladder's top.
    Ceiling,
    MaxTime,
    /// A signal or `--max-run-time`.
    Stopped,
    /// A ladder's next step too close to decide.
    Undecided,
    /// A step could not run.
    Error,
}

impl LimitedBy {
    /// Its name in capacity.json.
    pub fn name(self) -> &'static str {
        match self {
            LimitedBy::Registry => "registry",
            LimitedBy::Generator => "generator",
            LimitedBy::Ceiling => "ceiling",
            LimitedBy::MaxTime => "max_time",
            LimitedBy::Stopped => "stopped",
            LimitedBy::Undecided => "undecided",
            LimitedBy::Error => "error",
        }
    }
}

impl fmt::Display for LimitedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `capacity.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CapacityResult {
    pub kind: Kind,
    pub objectives: Vec<String>,
    /// The failures a step may have before it is not sustained (`--max-errors`: a count or
    /// a share, `1%` by default). A ladder written before the bound was recorded judged
    /// failures by the objectives only: `100%`.
    #[serde(default = "all_errors")]
    pub max_errors: String,
    pub step_s: f64,
    pub warmup_s: f64,
    pub trace_span_s: f64,
    pub steps: Vec<StepRecord>,
    pub capacity: Capacity,
    /// The first load at which the registry answered 429.
    pub throttle_onset: Option<Capacity>,
    /// Why the search ended.
    pub ended: String,
    pub limited_by: LimitedBy,
    /// The `--fail-if` gates on the answer and how they came out.
    #[serde(default)]
    pub thresholds: Vec<GateVerdict>,
}

fn all_errors() -> String {
    "100%".to_owned()
}

/// How a `--fail-if` gate came out, as capacity.json records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateVerdict {
    pub expression: String,
    /// The capacity compared (operations/s or speed factor; 0 when no load passed).
    pub value: f64,
    /// `held` (the search exits 3) or `clear`.
    pub verdict: String,
    /// The capacity is a lower bound only: the search stopped before a load failed.
    pub at_least: bool,
}

impl CapacityResult {
    /// Writes `capacity.json` into `dir` (whole, under a temporary name first).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        write_atomic(dir, CAPACITY_JSON, text.as_bytes()).map(drop)
    }

    /// Reads `dir/capacity.json`.
    pub fn read(dir: &Path) -> anyhow::Result<CapacityResult> {
        Self::read_with_text(dir).map(|(result, _)| result)
    }

    /// Reads `dir/capacity.json`: the result and the file's text as written (`report
    /// --format json` shows the file, to the last digit, once it reads as a result).
    pub fn read_with_text(dir: &Path) -> anyhow::Result<(CapacityResult, String)> {
        let path = dir.join(CAPACITY_JSON);
        let mut text = String::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_CAPACITY_JSON + 1).read_to_string(&mut text))
            .with_context(|| format!("cannot read {}", path.display()))?;
        if text.len() as u64 > MAX_CAPACITY_JSON {
            anyhow::bail!(
                "{} is larger than {} MiB: not a capacity result of creb-rs",
                path.display(),
                MAX_CAPACITY_JSON >> 20
            );
        }
        let result = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a capacity result of creb-rs", path.display()))?;
        Ok((result, text))
    }

    /// Whether `dir` holds a capacity search or ladder (its `capacity.json`).
    pub fn is_in(dir: &Path) -> bool {
        dir.join(CAPACITY_JSON).is_file()
    }

    /// Whether a stop cut the search or ladder off before its answer.
    pub fn stopped(&self) -> bool {
        self.limited_by == LimitedBy::Stopped
    }
}

/// The largest capacity.json read back: a search of a few hundred steps, each with a few
/// dozen operations, is well under it.
const MAX_CAPACITY_JSON: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> CapacityResult {
        CapacityResult {
            kind: Kind::Ladder,
            objectives: vec!["p99(blob_get) < 2s".into()],
            max_errors: "1%".into(),
            step_s: 2.0,
            warmup_s: 0.5,
            trace_span_s: 60.0,
            steps: vec![StepRecord {
                index: 0,
                speed: 4.0,
                trace_from_s: 0.0,
                trace_length_s: 10.0,
                length_s: Some(2.0),
                offered_rps: 44.5,
                achieved_rps: 44.0,
                operations_ok: Some(88),
                operations_failed: Some(1),
                outcome: Outcome::GeneratorLimited,
                why: Some("the in-flight cap".into()),
                objectives: vec![],
                percentiles: BTreeMap::from([("blob_get".into(), [Some(1.5), None])]),
                percentiles_ci: BTreeMap::new(),
                rates: BTreeMap::from([("blob_get".into(), 20.0)]),
                errors: BTreeMap::from([("http_500".into(), 1)]),
            }],
            capacity: Capacity::default(),
            throttle_onset: None,
            ended: "the ladder ran".into(),
            limited_by: LimitedBy::MaxTime,
            thresholds: vec![],
        }
    }

    #[test]
    fn a_written_result_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let r = result();
        r.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(CAPACITY_JSON)).unwrap();
        assert!(text.contains("\"limited_by\": \"max_time\""), "{text}");
        assert!(
            text.contains("\"outcome\": \"generator_limited\""),
            "{text}"
        );
        let back = CapacityResult::read(dir.path()).unwrap();
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&r).unwrap()
        );
        assert!(CapacityResult::is_in(dir.path()));
        assert!(!back.stopped());
    }

    #[test]
    fn an_older_ladder_reads_with_what_it_did_not_record_left_open() {
        let mut v = serde_json::to_value(result()).unwrap();
        v.as_object_mut().unwrap().remove("max_errors");
        let step = v["steps"][0].as_object_mut().unwrap();
        for field in ["length_s", "operations_ok", "operations_failed", "rates"] {
            step.remove(field);
        }
        let r: CapacityResult = serde_json::from_value(v).unwrap();
        assert_eq!(r.max_errors, "100%");
        let s = &r.steps[0];
        assert_eq!(
            (s.length_s, s.operations_ok, s.operations_failed),
            (None, None, None)
        );
    }

    #[test]
    fn a_file_that_is_not_a_capacity_result_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CAPACITY_JSON), b"{\"kind\": \"plan\"}").unwrap();
        let e = format!("{:#}", CapacityResult::read(dir.path()).unwrap_err());
        assert!(
            e.contains("capacity.json is not a capacity result of creb-rs"),
            "{e}"
        );
    }
}
