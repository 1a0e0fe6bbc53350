//! What a capacity search writes: `capacity.json`'s types (every step, the answer, the
//! gates' verdicts), the file itself, and the table people read.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::search::{ObjectiveVerdict, Outcome};

pub use crate::results::CAPACITY_JSON;

pub use crate::results::STEPS_DIR;

/// One step as capacity.json records it.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub index: usize,
    /// The trace's speed factor offered.
    pub speed: f64,
    /// Where in the trace the step's window started and how long it was (trace time).
    pub trace_from_s: f64,
    pub trace_length_s: f64,
    /// The measured part of the step's schedule, seconds.
    pub length_s: f64,
    /// Operations per second the window's records asked for, and those completed.
    pub offered_rps: f64,
    pub achieved_rps: f64,
    /// The operations due in the measured part, by how they ended (whenever they ended):
    /// the achieved rate counts the successes only.
    pub operations_ok: u64,
    pub operations_failed: u64,
    pub outcome: Outcome,
    pub why: Option<String>,
    pub objectives: Vec<ObjectiveVerdict>,
    /// Every operation's p50 and p99 (ms), and the failures by kind.
    pub percentiles: std::collections::BTreeMap<String, [Option<f64>; 2]>,
    /// Their 95% confidence intervals (ms), null where not established.
    pub percentiles_ci: std::collections::BTreeMap<String, [Option<[f64; 2]>; 2]>,
    /// Every operation's successes per second over the measured part (image pulls per
    /// second beside blob GETs per second).
    pub rates: std::collections::BTreeMap<String, f64>,
    pub errors: std::collections::BTreeMap<String, u64>,
}

/// The answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Capacity {
    /// The speed factor of the trace at the capacity, and the operations per second it
    /// sustained; null when no load passed.
    pub speed: Option<f64>,
    pub requests_per_s: Option<f64>,
    /// The search stopped before it found a load that failed (the ceiling, the generator,
    /// --max-time): the capacity is at least this.
    pub at_least: bool,
    /// The lowest load above the capacity that was not sustained, and the operations per
    /// second it offered: the capacity lies between (the search's resolution). Null when
    /// no load above it failed.
    pub upper_speed: Option<f64>,
    pub upper_requests_per_s: Option<f64>,
    /// Every operation's successes per second at the capacity (its step's `rates`).
    pub operations_per_s: std::collections::BTreeMap<String, f64>,
}

/// `capacity.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityResult {
    /// `search` (the load found step by step) or `ladder` (a fixed ladder of loads, every
    /// step run: what many hosts run and `merge` merges step by step).
    pub kind: &'static str,
    pub objectives: Vec<String>,
    /// The failures a step may have before it is not sustained (`--max-errors`: a count or
    /// a share, `1%` by default).
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
    /// What bounds the answer: `registry` (a higher load failed), `generator` (creb-rs could
    /// not offer a higher load: a lower bound, not the registry's capacity), `ceiling`
    /// (--max-speed, or the ladder's top), `max_time`, `stopped`, `undecided` (a ladder's
    /// next step too close to decide), or `error` (a step could not run).
    pub limited_by: &'static str,
    /// The `--fail-if` gates on the answer and how they came out.
    pub thresholds: Vec<GateVerdict>,
}

/// How a `--fail-if` gate came out, as capacity.json records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateVerdict {
    pub expression: String,
    /// The capacity compared (operations/s or speed factor; 0 when no load passed).
    pub value: f64,
    /// `held` (the search exits 3) or `clear`.
    pub verdict: String,
    /// The capacity is a lower bound only: the search stopped before a load failed.
    pub at_least: bool,
}

/// Writes `capacity.json` into `dir`.
pub fn write_result(dir: &Path, result: &CapacityResult) -> anyhow::Result<()> {
    let path = dir.join(CAPACITY_JSON);
    let text = serde_json::to_string_pretty(result)?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// One step in one line, as it finishes.
pub fn step_line(s: &StepRecord) -> String {
    format!(
        "step {:>2}: {:>7.3}x  offered {:>8.1} op/s  achieved {:>8.1} op/s  {:?}{}",
        s.index,
        s.speed,
        s.offered_rps,
        s.achieved_rps,
        s.outcome,
        s.why.as_ref().map_or(String::new(), |w| format!(" ({w})"))
    )
}

/// The steps and the answer, as a table.
pub fn render(r: &CapacityResult) -> String {
    render_value(&serde_json::to_value(r).unwrap_or_default())
}

/// [`render`] of capacity.json as read back (`creb-rs report OUT`, a merged ladder).
pub fn render_value(r: &serde_json::Value) -> String {
    let n = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>12} {:>12} {:<17} why",
        "step", "speed", "offered/s", "achieved/s", "outcome"
    );
    for s in r["steps"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:>4} {:>8.3}x {:>12.1} {:>12.1} {:<17} {}",
            s["index"].as_u64().unwrap_or(0),
            n(&s["speed"]),
            n(&s["offered_rps"]),
            n(&s["achieved_rps"]),
            text(&s["outcome"]),
            text(&s["why"])
        );
    }
    let c = &r["capacity"];
    let ended = text(&r["ended"]);
    let at_least = if c["at_least"] == true {
        "at least "
    } else {
        ""
    };
    match c["speed"].as_f64() {
        Some(speed) => {
            let _ = writeln!(
                out,
                "\ncapacity: {at_least}{speed:.3}x the trace's load{} ({ended}; limited by {})",
                c["requests_per_s"]
                    .as_f64()
                    .map_or(String::new(), |r| format!(", {r:.1} operations/s")),
                text(&r["limited_by"])
            );
        }
        None => {
            let _ = writeln!(out, "\ncapacity: no load sustained ({ended})");
        }
    }
    if let Some(rates) = c["operations_per_s"].as_object().filter(|r| !r.is_empty()) {
        let mut rates: Vec<(&String, f64)> = rates.iter().map(|(k, v)| (k, n(v))).collect();
        rates.sort_by(|a, b| b.1.total_cmp(&a.1));
        let shown: Vec<String> = rates
            .iter()
            .take(6)
            .map(|(op, r)| format!("{op} {r:.1}/s"))
            .collect();
        let _ = writeln!(out, "at it: {}", shown.join(", "));
    }
    if let (Some(speed), Some(rate)) = (
        c["upper_speed"].as_f64(),
        c["upper_requests_per_s"].as_f64(),
    ) {
        let _ = writeln!(
            out,
            "not sustained at {speed:.3}x ({rate:.1} operations/s offered): the capacity lies \
             between"
        );
    }
    for t in r["thresholds"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "--fail-if '{}': {}",
            text(&t["expression"]),
            text(&t["verdict"])
        );
    }
    let t = &r["throttle_onset"];
    if let Some(speed) = t["speed"].as_f64() {
        let _ = writeln!(
            out,
            "throttled (429) from {speed:.3}x, {:.1} operations/s offered",
            n(&t["requests_per_s"])
        );
    }
    out
}
