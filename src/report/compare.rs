//! Result directories side by side, with relative deltas (`creb-rs compare A B`), and with
//! repetitions on either side (`compare A1,A2,A3 B1,B2,B3`) the median of each figure,
//! its spread (min to max), and whether the difference is real: Welch's t-test on the
//! logarithms of the runs' figures, at a 5% false-alarm rate, with the ratio's interval.
//! With one run a side, only the runs' own intervals speak (disjoint or not); run-to-run
//! noise is then unknown. The runs of one side must share every setting that changes a
//! number.
//!
//! Comparing only makes sense when both ran the same workload: the dataset fingerprints
//! (trace identity, seed, content options) must match unless `--force`, and the workload
//! models (open or closed) must match always — a closed-loop latency and an open-loop
//! latency are different quantities.

use std::fmt::Write as _;

use anyhow::bail;
use serde::Serialize;

use crate::metrics::uncertainty::welch;
use crate::results::store::workload_difference;
use crate::results::summary::{HitRatio, OpSummary};
use crate::results::thresholds::{relation, Cmp, Relation, Uncertain};
use crate::results::ResultSet;

/// The false-alarm rate of a difference called real.
pub const ALPHA: f64 = 0.05;

/// One figure over the repetitions of one side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// One operation on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpComparison {
    pub op: String,
    /// Operations counted (the median over the repetitions).
    pub count: (u64, u64),
    pub errors: (u64, u64),
    /// Medians over the repetitions (the values themselves with one run a side).
    pub p50_ms: (Option<f64>, Option<f64>),
    pub p99_ms: (Option<f64>, Option<f64>),
    pub requests_per_s: (f64, f64),
    /// Relative change of the median p99, B against A (0.1 = 10% slower).
    pub p99_delta: Option<f64>,
    pub rps_delta: Option<f64>,
    /// Min, median and max of p99 and of req/s on each side.
    pub p99_spread: (Option<Spread>, Option<Spread>),
    pub rps_spread: (Option<Spread>, Option<Spread>),
    /// With at least two runs a side: whether the difference is within the run-to-run noise
    /// (Welch's t-test on the logarithms not significant at [`ALPHA`]). `None` with fewer
    /// runs: unknown.
    pub p99_within_noise: Option<bool>,
    pub rps_within_noise: Option<bool>,
    /// With at least two runs a side: the 95% interval of the ratio B/A of the p99s and of
    /// the rates (geometric means), and the test's p-value.
    pub p99_ratio_ci: Option<[f64; 2]>,
    pub p99_p_value: Option<f64>,
    pub rps_ratio_ci: Option<[f64; 2]>,
    pub rps_p_value: Option<f64>,
    /// With at least two runs a side: the smallest change of the p99 and of the rate (a
    /// share, 0.1 = 10%) the runs could have detected, at the test's 5% false-alarm rate
    /// with 80% power, from their spread.
    pub p99_detectable: Option<f64>,
    pub rps_detectable: Option<f64>,
    /// With one run a side: each run's own 95% interval of its p99, and whether they are
    /// disjoint (a difference beyond the runs' sampling; run-to-run noise still unknown).
    pub p99_intervals: (Option<[f64; 2]>, Option<[f64; 2]>),
    pub p99_intervals_disjoint: Option<bool>,
}

/// A difference tested: within the noise or not, the ratio's interval, the p-value.
struct Tested {
    within_noise: Option<bool>,
    ratio_ci: Option<[f64; 2]>,
    p_value: Option<f64>,
    /// The smallest change (a share: 0.1 = 10%) these runs could have detected.
    detectable: Option<f64>,
}

/// Welch's t-test on the logarithms of the positive values of each side.
fn tested(a: &[f64], b: &[f64]) -> Tested {
    let logs = |v: &[f64]| -> Vec<f64> { v.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect() };
    match welch(&logs(a), &logs(b)) {
        Some(w) => Tested {
            within_noise: Some(w.p_value >= ALPHA),
            ratio_ci: Some(w.interval.map(f64::exp)),
            p_value: Some(w.p_value),
            detectable: Some(w.detectable.exp() - 1.0),
        },
        None => Tested {
            within_noise: None,
            ratio_ci: None,
            p_value: None,
            detectable: None,
        },
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The result directories of each side, comma-separated.
    pub a: String,
    pub b: String,
    /// Repetitions on each side.
    pub runs: (usize, usize),
    pub registries: (String, String),
    pub model: String,
    pub operations: Vec<OpComparison>,
    /// `--split-by-header` of a cache's status: each operation's hit ratio on both sides
    /// (medians over the repetitions; `None` on a side without the split).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hit_ratios: Vec<HitComparison>,
}

/// One operation's cache hit ratio on both sides, by operations and by bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HitComparison {
    pub op: String,
    pub requests: (Option<f64>, Option<f64>),
    pub bytes: (Option<f64>, Option<f64>),
}

/// The hit ratios of both sides, per operation (`all` first), where either side has them.
fn hit_ratios(a: &[ResultSet], b: &[ResultSet]) -> Vec<HitComparison> {
    let ratios = |s: &ResultSet| {
        s.summary
            .split_by_header
            .as_ref()
            .map(|h| h.hit_ratio.clone())
            .unwrap_or_default()
    };
    let mut ops: Vec<String> = a
        .iter()
        .chain(b)
        .flat_map(|s| ratios(s).into_keys())
        .collect();
    ops.sort_by_key(|op| (op != "all", op.clone()));
    ops.dedup();
    let median = |sets: &[ResultSet], op: &str, f: fn(&HitRatio) -> f64| {
        let values: Vec<f64> = sets
            .iter()
            .filter_map(|s| ratios(s).get(op).map(f))
            .collect();
        Spread::of(&values).map(|s| s.median)
    };
    ops.into_iter()
        .map(|op| HitComparison {
            requests: (
                median(a, &op, |h| h.requests),
                median(b, &op, |h| h.requests),
            ),
            bytes: (median(a, &op, |h| h.bytes), median(b, &op, |h| h.bytes)),
            op,
        })
        .collect()
}

fn delta(a: f64, b: f64) -> Option<f64> {
    (a > 0.0).then(|| (b - a) / a)
}

/// Compares two loaded results.
pub fn compare(a: &ResultSet, b: &ResultSet, force: bool) -> anyhow::Result<Comparison> {
    compare_runs(std::slice::from_ref(a), std::slice::from_ref(b), force)
}

/// Every result must have the first one's workload model, and (unless `force`) dataset
/// (the rule `--baseline` follows too).
fn check_comparable(first: &ResultSet, all: &[&ResultSet], force: bool) -> anyhow::Result<()> {
    for r in all {
        if let Some(why) = workload_difference(first.workload(), r.workload(), force) {
            bail!("{why}");
        }
    }
    Ok(())
}

/// Settings of a run's configuration that change none of its numbers: where its
/// credentials came from, when it was told to start, and the seed of its content (fresh
/// bytes of the same sizes; a different dataset is refused on its own, see
/// `check_comparable`).
const NOT_A_NUMBER: [&str; 4] = ["credentials", "start_at", "start_at_time", "seed"];

/// The settings in which two configurations differ, as `path: a vs b` (those of
/// [`NOT_A_NUMBER`] left out).
fn differences(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                if path.is_empty() && NOT_A_NUMBER.contains(&k.as_str()) {
                    continue;
                }
                let null = Value::Null;
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                differences(
                    &sub,
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// The runs of one side are repetitions of one configuration: refused, with what differs,
/// when any setting that changes a number differs (verify mode, sizes, mode, concurrency…).
fn check_one_configuration(side: &str, runs: &[ResultSet]) -> anyhow::Result<()> {
    let Some(first) = runs.first() else {
        return Ok(());
    };
    for r in &runs[1..] {
        let mut found = Vec::new();
        if r.summary.concurrency != first.summary.concurrency {
            found.push(format!(
                "concurrency: {} vs {}",
                first.summary.concurrency, r.summary.concurrency
            ));
        }
        differences("", &first.summary.config, &r.summary.config, &mut found);
        if !found.is_empty() {
            bail!(
                "{side}'s runs are not repetitions of one configuration: {} and {} differ in {}; \
                 compare them as two sides, or give each side runs of one configuration",
                first.dir.display(),
                r.dir.display(),
                found.join(", ")
            );
        }
    }
    Ok(())
}

/// Compares the repetitions `a` of one configuration with the repetitions `b` of another.
pub fn compare_runs(a: &[ResultSet], b: &[ResultSet], force: bool) -> anyhow::Result<Comparison> {
    let (Some(first), false) = (a.first(), b.is_empty()) else {
        bail!("nothing to compare: each side needs at least one result directory");
    };
    let all: Vec<&ResultSet> = a.iter().chain(b).collect();
    check_one_configuration("A", a)?;
    check_one_configuration("B", b)?;
    check_comparable(first, &all, force)?;
    let mut names: Vec<&String> = all
        .iter()
        .flat_map(|r| r.summary.operations.keys().chain(r.summary.sessions.keys()))
        .collect();
    names.sort();
    names.dedup();
    let operations = names
        .into_iter()
        .map(|name| compare_op(a, b, name))
        .collect();
    let dirs = |sets: &[ResultSet]| {
        sets.iter()
            .map(|s| s.dir.display().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    Ok(Comparison {
        a: dirs(a),
        b: dirs(b),
        runs: (a.len(), b.len()),
        registries: (
            first.summary.registry.clone(),
            b[0].summary.registry.clone(),
        ),
        model: first.summary.model_label(),
        operations,
        hit_ratios: hit_ratios(a, b),
    })
}

/// One operation (or session) of a run, if it has it.
fn figures(set: &ResultSet, name: &str) -> Option<OpSummary> {
    set.summary
        .operations
        .get(name)
        .or_else(|| set.summary.sessions.get(name))
        .cloned()
}

/// A figure over a side's runs. A run without the operation has none of it (count, errors
/// and rate 0) but no latency: `absent` is what it contributes, if anything.
fn spread(
    sets: &[ResultSet],
    name: &str,
    f: &dyn Fn(&OpSummary) -> Option<f64>,
    absent: Option<f64>,
) -> Option<Spread> {
    let values: Vec<f64> = sets
        .iter()
        .filter_map(|s| figures(s, name).as_ref().map_or(absent, f))
        .collect();
    Spread::of(&values)
}

/// Every run's value of one figure, for the test.
fn values(sets: &[ResultSet], name: &str, f: &dyn Fn(&OpSummary) -> Option<f64>) -> Vec<f64> {
    sets.iter()
        .filter_map(|s| figures(s, name).as_ref().and_then(f))
        .collect()
}

/// Operation `name` of side `a` against side `b`.
fn compare_op(a: &[ResultSet], b: &[ResultSet], name: &str) -> OpComparison {
    let p50 = |s: &OpSummary| s.latency_ms.and_then(|l| l.p50);
    let p99 = |s: &OpSummary| s.latency_ms.and_then(|l| l.p99);
    let rps = |s: &OpSummary| Some(s.requests_per_s);
    let count = |s: &OpSummary| Some(s.count as f64);
    let errors = |s: &OpSummary| Some(s.errors as f64);
    let both = |f: &dyn Fn(&OpSummary) -> Option<f64>, absent: Option<f64>| {
        (spread(a, name, f, absent), spread(b, name, f, absent))
    };
    let median = |s: Option<Spread>| s.map(|s| s.median);
    let whole = |s: Option<Spread>| s.map_or(0, |s| s.median.round() as u64);
    let (p99a, p99b) = both(&p99, None);
    let (rpsa, rpsb) = both(&rps, Some(0.0));
    let (p50a, p50b) = both(&p50, None);
    let (ca, cb) = both(&count, Some(0.0));
    let (ea, eb) = both(&errors, Some(0.0));
    let p99_test = tested(&values(a, name, &p99), &values(b, name, &p99));
    let rps_test = tested(&values(a, name, &rps), &values(b, name, &rps));
    // One run a side: each run's own interval of its p99, from its intervals.
    let own = |sets: &[ResultSet]| {
        figures(&sets[0], name).and_then(|o| o.latency_ms.and_then(|l| l.p99_ci))
    };
    let intervals = if a.len() == 1 && b.len() == 1 {
        (own(a), own(b))
    } else {
        (None, None)
    };
    // Disjoint: one run's p99 below the other's beyond both intervals, by the rule every
    // verdict beyond uncertainty follows.
    let disjoint = intervals.0.zip(intervals.1).map(|(x, y)| {
        let (x, y) = (Uncertain::new(x[0], Some(x)), Uncertain::new(y[0], Some(y)));
        relation(Cmp::Lt, x, y) == Relation::Always || relation(Cmp::Lt, y, x) == Relation::Always
    });
    OpComparison {
        op: name.to_owned(),
        count: (whole(ca), whole(cb)),
        errors: (whole(ea), whole(eb)),
        p50_ms: (median(p50a), median(p50b)),
        p99_ms: (median(p99a), median(p99b)),
        requests_per_s: (median(rpsa).unwrap_or(0.0), median(rpsb).unwrap_or(0.0)),
        p99_delta: median(p99a)
            .zip(median(p99b))
            .and_then(|(a, b)| delta(a, b)),
        rps_delta: delta(median(rpsa).unwrap_or(0.0), median(rpsb).unwrap_or(0.0)),
        p99_spread: (p99a, p99b),
        rps_spread: (rpsa, rpsb),
        p99_within_noise: p99_test.within_noise,
        rps_within_noise: rps_test.within_noise,
        p99_ratio_ci: p99_test.ratio_ci,
        p99_p_value: p99_test.p_value,
        rps_ratio_ci: rps_test.ratio_ci,
        rps_p_value: rps_test.p_value,
        p99_detectable: p99_test.detectable,
        rps_detectable: rps_test.detectable,
        p99_intervals: intervals,
        p99_intervals_disjoint: disjoint,
    }
}

fn show(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A relative change: `~` when it is within the run-to-run noise, `*` when the test calls
/// it real.
fn pct(v: Option<f64>, within_noise: Option<bool>) -> String {
    let mark = match within_noise {
        Some(true) => "~",
        Some(false) => "*",
        None => "",
    };
    v.map_or("".into(), |v| format!("{mark}{:+.1}%", v * 100.0))
}

/// A ratio's interval as percent changes: `+3.1%…+12.0%`.
fn ratio_range(ci: Option<[f64; 2]>) -> String {
    ci.map_or("-".into(), |[lo, hi]| {
        format!("{:+.1}%…{:+.1}%", (lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
    })
}

fn range(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| format!("{:.1}–{:.1}", s.min, s.max))
}

/// The comparison as a table.
pub fn render(c: &Comparison) -> String {
    let mut out = String::new();
    let runs = |n: usize| {
        if n > 1 {
            format!(", {n} runs")
        } else {
            String::new()
        }
    };
    let _ = writeln!(out, "A: {} ({}{})", c.a, c.registries.0, runs(c.runs.0));
    let _ = writeln!(out, "B: {} ({}{})", c.b, c.registries.1, runs(c.runs.1));
    let _ = writeln!(out, "model: {}\n", c.model);
    let repeated = c.runs.0 > 1 && c.runs.1 > 1;
    // An open model (delay mode) offers the trace's rate: the rate is the schedule's, not
    // a result of the registry.
    let open = c.model.contains("(open)");
    let _ = writeln!(
        out,
        "{:<16} {:>15} {:>13} {:>19} {:>9} {:>21} {:>9}",
        "operation",
        "count A/B",
        "errors A/B",
        if repeated {
            "median p99 ms A/B"
        } else {
            "p99 ms A/B"
        },
        "Δp99",
        match (repeated, open) {
            (_, true) => "offered req/s A/B",
            (true, false) => "median req/s A/B",
            (false, false) => "req/s A/B",
        },
        "Δreq/s"
    );
    for o in &c.operations {
        let _ = writeln!(
            out,
            "{:<16} {:>15} {:>13} {:>19} {:>9} {:>21} {:>9}",
            o.op,
            format!("{}/{}", o.count.0, o.count.1),
            format!("{}/{}", o.errors.0, o.errors.1),
            format!("{}/{}", show(o.p99_ms.0), show(o.p99_ms.1)),
            pct(o.p99_delta, o.p99_within_noise),
            format!("{:.1}/{:.1}", o.requests_per_s.0, o.requests_per_s.1),
            pct(o.rps_delta, o.rps_within_noise)
        );
    }
    if open {
        let _ = writeln!(
            out,
            "\nreq/s: the rate the trace's schedule offered (delay mode), not a result: the \
             registry's answer to it is the latency."
        );
    }
    hit_ratio_text(c, &mut out);
    if repeated {
        noise_text(c, &mut out);
    } else {
        single_run_text(c, &mut out);
    }
    out
}

/// What a cache in front answered on each side, when the runs split by a cache header.
fn hit_ratio_text(c: &Comparison, out: &mut String) {
    if !c.hit_ratios.is_empty() {
        let share = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}%", v * 100.0));
        let _ = writeln!(
            out,
            "\n{:<16} {:>21} {:>21}",
            "cache hits", "of operations A/B", "of bytes A/B"
        );
        for h in &c.hit_ratios {
            let _ = writeln!(
                out,
                "{:<16} {:>21} {:>21}",
                h.op,
                format!("{}/{}", share(h.requests.0), share(h.requests.1)),
                format!("{}/{}", share(h.bytes.0), share(h.bytes.1)),
            );
        }
    }
}

/// Several runs a side: their spread, and what is noise.
fn noise_text(c: &Comparison, out: &mut String) {
    let _ = writeln!(
        out,
        "\n{:<16} {:>25} {:>25} {:>21} {:>21}",
        "spread (min–max)", "p99 ms A", "p99 ms B", "req/s A", "req/s B"
    );
    for o in &c.operations {
        let _ = writeln!(
            out,
            "{:<16} {:>25} {:>25} {:>21} {:>21}",
            o.op,
            range(o.p99_spread.0),
            range(o.p99_spread.1),
            range(o.rps_spread.0),
            range(o.rps_spread.1)
        );
    }
    let _ = writeln!(
        out,
        "\n{:<16} {:>23} {:>9} {:>11} {:>23} {:>9} {:>11}",
        "B vs A (95%)", "p99 change", "p", "detects", "req/s change", "p", "detects"
    );
    for o in &c.operations {
        let p = |v: Option<f64>| v.map_or("-".into(), |p| format!("{p:.3}"));
        let d = |v: Option<f64>| v.map_or("-".into(), |d| format!("±{:.1}%", d * 100.0));
        let _ = writeln!(
            out,
            "{:<16} {:>23} {:>9} {:>11} {:>23} {:>9} {:>11}",
            o.op,
            ratio_range(o.p99_ratio_ci),
            p(o.p99_p_value),
            d(o.p99_detectable),
            ratio_range(o.rps_ratio_ci),
            p(o.rps_p_value),
            d(o.rps_detectable)
        );
    }
    let _ = writeln!(
        out,
        "\n* marks a real difference, ~ one within the run-to-run noise: Welch's t-test on the \
         logarithms of the runs' figures, {:.0}% false alarms when runs vary log-normally \
         (docs/results.md). `detects`: the smallest change these runs find {:.0}% of the \
         time, from their spread; more or longer runs detect less (docs/measurement.md).",
        ALPHA * 100.0,
        crate::metrics::uncertainty::POWER * 100.0
    );
}

/// One run a side: what its own intervals say, and how to tell noise.
fn single_run_text(c: &Comparison, out: &mut String) {
    let disjoint: Vec<&str> = c
        .operations
        .iter()
        .filter(|o| o.p99_intervals_disjoint == Some(true))
        .map(|o| o.op.as_str())
        .collect();
    if !disjoint.is_empty() {
        let _ = writeln!(
            out,
            "\nThe runs' own 95% p99 intervals are disjoint for {}: a difference beyond \
             each run's sampling, though run-to-run noise is unknown.",
            disjoint.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nA has {} run{}, B has {}: telling noise needs at least 2 a side. Repeat each \
         (creb-rs run --repeat N, or N runs by hand) and compare A1,A2,… B1,B2,… for \
         medians, spread and what is noise.",
        c.runs.0,
        if c.runs.0 == 1 { "" } else { "s" },
        c.runs.1
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_median_and_overlap_decides_noise() {
        let a = Spread::of(&[10.0, 12.0, 11.0]).unwrap();
        assert_eq!((a.median, a.min, a.max), (11.0, 10.0, 12.0));
        let even = Spread::of(&[1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(pct(Some(0.05), Some(true)), "~+5.0%");
        assert_eq!(pct(Some(-0.2), Some(false)), "*-20.0%");
        assert_eq!(pct(Some(0.1), None), "+10.0%");
    }

    #[test]
    fn a_difference_is_real_only_beyond_the_noise() {
        // Overlapping runs: within the noise.
        let t = tested(&[10.0, 12.0, 11.0], &[11.5, 13.0, 10.5]);
        assert_eq!(t.within_noise, Some(true));
        // A clear shift: real, and the ratio's interval holds the 1.3× change.
        let t = tested(&[10.0, 10.2, 9.9], &[13.0, 13.1, 12.9]);
        assert_eq!(t.within_noise, Some(false));
        let [lo, hi] = t.ratio_ci.unwrap();
        assert!(lo < 1.3 && 1.3 < hi, "{lo}..{hi}");
        // One run a side: unknown.
        assert_eq!(tested(&[10.0], &[20.0]).within_noise, None);
    }

    #[test]
    fn settings_that_change_a_number_are_found_and_the_others_not() {
        let a = serde_json::json!({"verify": "digest", "sizes": {"scale": 1.0},
            "credentials": {"source": "env"}, "start_at": "x"});
        let b = serde_json::json!({"verify": "none", "sizes": {"scale": 0.5},
            "credentials": {"source": "docker"}, "start_at": "y"});
        let mut found = Vec::new();
        differences("", &a, &b, &mut found);
        assert_eq!(
            found,
            vec![
                "sizes.scale: 1.0 vs 0.5".to_owned(),
                "verify: \"digest\" vs \"none\"".to_owned()
            ]
        );
    }
}
