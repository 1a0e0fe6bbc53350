//! Two result directories side by side, with relative deltas (`creb-rs compare A B`).
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

/// One operation in both runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpComparison {
    pub op: String,
    pub count: (u64, u64),
    pub errors: (u64, u64),
    pub p50_ms: (Option<f64>, Option<f64>),
    pub p99_ms: (Option<f64>, Option<f64>),
    pub requests_per_s: (f64, f64),
    /// Relative change of p99, B against A (0.1 = 10% slower).
    pub p99_delta: Option<f64>,
    pub rps_delta: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub registries: (String, String),
    pub model: String,
    pub operations: Vec<OpComparison>,
}

fn delta(a: f64, b: f64) -> Option<f64> {
    (a > 0.0).then(|| (b - a) / a)
}

fn pick(s: Option<&OpSummary>, f: impl Fn(&OpSummary) -> Option<f64>) -> Option<f64> {
    s.and_then(f)
}

/// Compares two loaded results.
pub fn compare(a: &ResultSet, b: &ResultSet, force: bool) -> anyhow::Result<Comparison> {
    if a.summary.model != b.summary.model || a.summary.mode != b.summary.mode {
        bail!(
            "{} is {} and {} is {}: results of different workload models are not comparable",
            a.dir.display(),
            a.summary.model_label(),
            b.dir.display(),
            b.summary.model_label()
        );
    }
    if a.meta.dataset_hash != b.meta.dataset_hash && !force {
        bail!(
            "{} and {} ran different workloads (dataset {} vs {}); use --force to compare anyway",
            a.dir.display(),
            b.dir.display(),
            a.meta.dataset_hash,
            b.meta.dataset_hash
        );
    }
    let mut names: Vec<&String> = a
        .summary
        .operations
        .keys()
        .chain(b.summary.operations.keys())
        .chain(a.summary.sessions.keys())
        .chain(b.summary.sessions.keys())
        .collect();
    names.sort();
    names.dedup();
    let get = |set: &'_ ResultSet, name: &str| -> Option<OpSummary> {
        set.summary
            .operations
            .get(name)
            .or_else(|| set.summary.sessions.get(name))
            .cloned()
    };
    let operations = names
        .into_iter()
        .map(|name| {
            let (x, y) = (get(a, name), get(b, name));
            let p50 = |s: &OpSummary| s.latency_ms.map(|l| l.p50);
            let p99 = |s: &OpSummary| s.latency_ms.map(|l| l.p99);
            let rps = |s: &Option<OpSummary>| s.as_ref().map_or(0.0, |s| s.requests_per_s);
            let (p99a, p99b) = (pick(x.as_ref(), p99), pick(y.as_ref(), p99));
            OpComparison {
                op: name.clone(),
                count: (
                    x.as_ref().map_or(0, |s| s.count),
                    y.as_ref().map_or(0, |s| s.count),
                ),
                errors: (
                    x.as_ref().map_or(0, |s| s.errors),
                    y.as_ref().map_or(0, |s| s.errors),
                ),
                p50_ms: (pick(x.as_ref(), p50), pick(y.as_ref(), p50)),
                p99_ms: (p99a, p99b),
                requests_per_s: (rps(&x), rps(&y)),
                p99_delta: p99a.zip(p99b).and_then(|(a, b)| delta(a, b)),
                rps_delta: delta(rps(&x), rps(&y)),
            }
        })
        .collect();
    Ok(Comparison {
        a: a.dir.display().to_string(),
        b: b.dir.display().to_string(),
        registries: (a.summary.registry.clone(), b.summary.registry.clone()),
        model: a.summary.model_label(),
        operations,
    })
}

fn show(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("".into(), |v| format!("{:+.1}%", v * 100.0))
}

/// The comparison as a table.
pub fn render(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {} ({})", c.a, c.registries.0);
    let _ = writeln!(out, "B: {} ({})", c.b, c.registries.1);
    let _ = writeln!(out, "model: {}\n", c.model);
    let _ = writeln!(
        out,
        "{:<16} {:>15} {:>13} {:>19} {:>9} {:>21} {:>9}",
        "operation", "count A/B", "errors A/B", "p99 ms A/B", "Δp99", "req/s A/B", "Δreq/s"
    );
    for o in &c.operations {
        let _ = writeln!(
            out,
            "{:<16} {:>15} {:>13} {:>19} {:>9} {:>21} {:>9}",
            o.op,
            format!("{}/{}", o.count.0, o.count.1),
            format!("{}/{}", o.errors.0, o.errors.1),
            format!("{}/{}", show(o.p99_ms.0), show(o.p99_ms.1)),
            pct(o.p99_delta),
            format!("{:.1}/{:.1}", o.requests_per_s.0, o.requests_per_s.1),
            pct(o.rps_delta)
        );
    }
    out
}
