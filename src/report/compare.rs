//! Result directories side by side, with relative deltas (`creb-rs compare A B`), and with
//! repetitions on either side (`compare A1,A2,A3 B1,B2,B3`) the median of each figure,
//! its spread (min to max), and whether the difference is within that noise.
//!
//! Comparing only makes sense when both ran the same workload: the dataset fingerprints
//! (trace identity, seed, content options) must match unless `--force`, and the workload
//! models (open or closed) must match always — a closed-loop latency and an open-loop
//! latency are different quantities.

use std::fmt::Write as _;

use anyhow::bail;
use serde::Serialize;

use crate::results::summary::OpSummary;
use crate::results::ResultSet;

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

    /// Whether the ranges of two sides overlap: the difference of the medians is then no
    /// larger than what repeating the same run already shows.
    fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
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
    /// With repetitions on both sides: whether the ranges overlap (the difference is within
    /// the run-to-run noise). `None` with a single run on either side: unknown.
    pub p99_within_noise: Option<bool>,
    pub rps_within_noise: Option<bool>,
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
}

fn delta(a: f64, b: f64) -> Option<f64> {
    (a > 0.0).then(|| (b - a) / a)
}

/// Compares two loaded results.
pub fn compare(a: &ResultSet, b: &ResultSet, force: bool) -> anyhow::Result<Comparison> {
    compare_runs(std::slice::from_ref(a), std::slice::from_ref(b), force)
}

/// Every result must have the first one's workload model, and (unless `force`) dataset.
fn check_comparable(first: &ResultSet, all: &[&ResultSet], force: bool) -> anyhow::Result<()> {
    for r in all {
        if r.summary.model != first.summary.model || r.summary.mode != first.summary.mode {
            bail!(
                "{} is {} and {} is {}: results of different workload models are not comparable",
                first.dir.display(),
                first.summary.model_label(),
                r.dir.display(),
                r.summary.model_label()
            );
        }
        if r.meta.dataset_hash != first.meta.dataset_hash && !force {
            bail!(
                "{} and {} ran different workloads (dataset {} vs {}); use --force to compare anyway",
                first.dir.display(),
                r.dir.display(),
                first.meta.dataset_hash,
                r.meta.dataset_hash
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
    check_comparable(first, &all, force)?;
    let mut names: Vec<&String> = all
        .iter()
        .flat_map(|r| r.summary.operations.keys().chain(r.summary.sessions.keys()))
        .collect();
    names.sort();
    names.dedup();
    let get = |set: &ResultSet, name: &str| -> Option<OpSummary> {
        set.summary
            .operations
            .get(name)
            .or_else(|| set.summary.sessions.get(name))
            .cloned()
    };
    // A run without the operation has none of it (count, errors and rate 0) but no
    // latency: `absent` is what it contributes, if anything.
    let side = |sets: &[ResultSet],
                name: &str,
                f: &dyn Fn(&OpSummary) -> Option<f64>,
                absent: Option<f64>| {
        let values: Vec<f64> = sets
            .iter()
            .filter_map(|s| get(s, name).as_ref().map_or(absent, f))
            .collect();
        Spread::of(&values)
    };
    let repeated = a.len() > 1 && b.len() > 1;
    let operations = names
        .into_iter()
        .map(|name| {
            let p50 = |s: &OpSummary| s.latency_ms.map(|l| l.p50);
            let p99 = |s: &OpSummary| s.latency_ms.map(|l| l.p99);
            let rps = |s: &OpSummary| Some(s.requests_per_s);
            let count = |s: &OpSummary| Some(s.count as f64);
            let errors = |s: &OpSummary| Some(s.errors as f64);
            let both = |f: &dyn Fn(&OpSummary) -> Option<f64>, absent: Option<f64>| {
                (side(a, name, f, absent), side(b, name, f, absent))
            };
            let median = |s: Option<Spread>| s.map(|s| s.median);
            let whole = |s: Option<Spread>| s.map_or(0, |s| s.median.round() as u64);
            let (p99a, p99b) = both(&p99, None);
            let (rpsa, rpsb) = both(&rps, Some(0.0));
            let (p50a, p50b) = both(&p50, None);
            let (ca, cb) = both(&count, Some(0.0));
            let (ea, eb) = both(&errors, Some(0.0));
            let noise = |x: Option<Spread>, y: Option<Spread>| {
                x.zip(y).filter(|_| repeated).map(|(x, y)| x.overlaps(&y))
            };
            OpComparison {
                op: name.clone(),
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
                p99_within_noise: noise(p99a, p99b),
                rps_within_noise: noise(rpsa, rpsb),
            }
        })
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
    })
}

fn show(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A relative change, with `~` when it is within the run-to-run noise.
fn pct(v: Option<f64>, within_noise: Option<bool>) -> String {
    let mark = if within_noise == Some(true) { "~" } else { "" };
    v.map_or("".into(), |v| format!("{mark}{:+.1}%", v * 100.0))
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
        if repeated {
            "median req/s A/B"
        } else {
            "req/s A/B"
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
    if repeated {
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
            "\n~ marks a difference within the noise: the ranges of the runs on each side overlap."
        );
    } else {
        let _ = writeln!(
            out,
            "\nOne run a side: no measure of noise. Repeat each (creb-rs run --repeat N, or N \
             runs by hand) and compare A1,A2,… B1,B2,… for medians, spread and what is noise."
        );
    }
    out
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
        let b = Spread::of(&[11.5, 13.0, 14.0]).unwrap();
        assert!(a.overlaps(&b), "10–12 and 11.5–14 overlap");
        let c = Spread::of(&[12.5, 13.0]).unwrap();
        assert!(!a.overlaps(&c), "10–12 and 12.5–13 do not");
        assert_eq!(pct(Some(0.05), Some(true)), "~+5.0%");
        assert_eq!(pct(Some(-0.2), Some(false)), "-20.0%");
        assert_eq!(pct(Some(0.1), None), "+10.0%");
    }
}
