//! A capacity search or ladder as people read it: each step's line as it finishes, the
//! steps and the answer as a table (`capacity`'s stdout, `report OUT`, a merged ladder),
//! and its HTML page with the curves ([`page`]). Rendered from [`CapacityResult`] only.

pub mod page;

use std::fmt::Write as _;

use crate::results::capacity::{CapacityResult, StepRecord};

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
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>12} {:>12} {:<17} why",
        "step", "speed", "offered/s", "achieved/s", "outcome"
    );
    for s in &r.steps {
        let _ = writeln!(
            out,
            "{:>4} {:>8.3}x {:>12.1} {:>12.1} {:<17} {}",
            s.index,
            s.speed,
            s.offered_rps,
            s.achieved_rps,
            s.outcome.name(),
            s.why.as_deref().unwrap_or("")
        );
    }
    answer(&mut out, r);
    for t in &r.thresholds {
        let _ = writeln!(out, "--fail-if '{}': {}", t.expression, t.verdict);
    }
    if let Some(t) = &r.throttle_onset {
        if let Some(speed) = t.speed {
            let _ = writeln!(
                out,
                "throttled (429) from {speed:.3}x, {:.1} operations/s offered",
                t.requests_per_s.unwrap_or(0.0)
            );
        }
    }
    out
}

/// The answer under the table: the capacity, the rates at it, the load above it.
fn answer(out: &mut String, r: &CapacityResult) {
    let c = &r.capacity;
    let ended = &r.ended;
    let at_least = if c.at_least { "at least " } else { "" };
    match c.speed {
        Some(speed) => {
            let _ = writeln!(
                out,
                "\ncapacity: {at_least}{speed:.3}x the trace's load{} ({ended}; limited by {})",
                c.requests_per_s
                    .map_or(String::new(), |r| format!(", {r:.1} operations/s")),
                r.limited_by
            );
        }
        None => {
            let _ = writeln!(out, "\ncapacity: no load sustained ({ended})");
        }
    }
    if !c.operations_per_s.is_empty() {
        let mut rates: Vec<(&String, f64)> =
            c.operations_per_s.iter().map(|(k, v)| (k, *v)).collect();
        rates.sort_by(|a, b| b.1.total_cmp(&a.1));
        let shown: Vec<String> = rates
            .iter()
            .take(6)
            .map(|(op, r)| format!("{op} {r:.1}/s"))
            .collect();
        let _ = writeln!(out, "at it: {}", shown.join(", "));
    }
    if let (Some(speed), Some(rate)) = (c.upper_speed, c.upper_requests_per_s) {
        let _ = writeln!(
            out,
            "not sustained at {speed:.3}x ({rate:.1} operations/s offered): the capacity lies \
             between"
        );
    }
}
