//! The cost model: what a workload would cost on a hosted registry — storage, egress by tier,
//! requests and fixed fees — from the pricing table in `data/pricing.toml` ([`pricing`]).
//!
//! The workload is measured from either
//! - a **result directory**: its `summary.json` (only the fields read here: `duration_s`,
//!   `totals.bytes_received` = registry egress, `totals.bytes_sent` = ingress, and operation
//!   counts); storage is the ingress (what the run stored), or
//! - **trace files**: egress = bytes of the successful GETs; ingress = bytes of uploads and
//!   manifest PUTs; storage = bytes of the distinct blobs and manifests the trace names (a
//!   blob by digest, or by upload session when its digest cannot be inferred; a manifest by
//!   repository and reference; each at its largest size seen); the span is first to last
//!   record.
//!
//! **Projection**: egress and request counts are rates, scaled from the measured span to a
//! month of [`pricing::HOURS_PER_MONTH`] hours, or, with `--scale-to SIZE`, scaled so that a
//! month's egress is `SIZE` (requests by the same factor). Storage is a level, not a rate:
//! the stored bytes are billed for every month, not extrapolated (a registry's growth
//! depends on deletion and garbage collection, which a benchmark does not show; the monthly
//! ingress rate is reported so growth can be judged). `--months M` multiplies the monthly
//! bill by M. All of it is pure arithmetic on [`Workload`] and the table; only
//! [`measure`] and [`load_table`] touch files.

pub mod pricing;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::trace::{Method, SessionId, Sym, Target};

use super::simulate::push::{PushEvent, UploadTracker};
use pricing::{
    estimate_month, MonthlyCost, MonthlyUsage, PricingError, PricingTable, ResolvedPricing, GB,
    HOURS_PER_MONTH,
};

/// What was measured, before projection.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Workload {
    /// `result` or `trace`.
    pub source: String,
    /// Seconds the measurement covers.
    pub span_s: f64,
    pub egress_bytes: u64,
    pub ingress_bytes: u64,
    pub storage_bytes: u64,
    /// GET and HEAD requests.
    pub read_requests: u64,
    /// PUT, PATCH, POST and DELETE requests.
    pub write_requests: u64,
    /// What changes the meaning of the bytes (a result of a replay with scaled sizes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The fields of `summary.json` the cost model reads (any schema version that has them).
#[derive(Debug, Deserialize)]
struct SummaryView {
    duration_s: f64,
    totals: TotalsView,
    #[serde(default)]
    operations: HashMap<String, OpView>,
    #[serde(default)]
    warnings: Vec<WarningView>,
}

#[derive(Debug, Deserialize)]
struct WarningView {
    kind: String,
}

#[derive(Debug, Deserialize)]
struct TotalsView {
    bytes_sent: u64,
    bytes_received: u64,
}

#[derive(Debug, Deserialize)]
struct OpView {
    count: u64,
}

/// Whether an operation of `summary.json` is one HTTP read, one HTTP write, or neither (an
/// operation made of sub-requests counted on their own, a redirect, a token fetch, a session).
fn request_class(op: &str) -> Option<bool> {
    match op {
        "ping" | "manifest_get" | "manifest_head" | "blob_get" | "blob_head" | "tag_list"
        | "upload_status" => Some(true),
        "manifest_put" | "manifest_delete" | "blob_mount" | "blob_delete" | "upload_post"
        | "upload_patch" | "upload_put" => Some(false),
        _ => None,
    }
}

/// Reads the workload of a result directory.
pub fn workload_from_result_dir(dir: &Path) -> anyhow::Result<Workload> {
    let path = dir.join("summary.json");
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let s: SummaryView = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a valid summary", path.display()))?;
    let mut w = Workload {
        source: "result".into(),
        span_s: s.duration_s,
        egress_bytes: s.totals.bytes_received,
        ingress_bytes: s.totals.bytes_sent,
        storage_bytes: s.totals.bytes_sent,
        ..Workload::default()
    };
    for (name, op) in &s.operations {
        match request_class(name) {
            Some(true) => w.read_requests += op.count,
            Some(false) => w.write_requests += op.count,
            None => {}
        }
    }
    if s.warnings.iter().any(|x| x.kind == "sizes_scaled") {
        w.notes.push(
            "the run's sizes were scaled (--size-scale/--max-object-size): its bytes, and \
             what they cost, are not the trace's; cost the trace itself for those"
                .into(),
        );
    }
    Ok(w)
}

/// Distinct stored objects of a trace, for its storage figure.
#[derive(Debug, Default)]
struct Stored {
    blobs: HashMap<Sym, u64>,
    sessions: HashMap<SessionId, u64>,
    manifests: HashMap<(Sym, Sym), u64>,
}

fn keep_max<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u64>, key: K, size: u64) {
    let e = map.entry(key).or_insert(0);
    *e = (*e).max(size);
}

/// Measures the workload of trace files.
pub fn workload_from_traces(paths: &[PathBuf], skip_invalid: bool) -> anyhow::Result<Workload> {
    let mut w = Workload {
        source: "trace".into(),
        ..Workload::default()
    };
    let mut stored = Stored::default();
    let mut uploads = UploadTracker::new();
    let info = super::simulate::for_each_record(paths, skip_invalid, |r| {
        match r.method {
            Method::Get | Method::Head => w.read_requests += 1,
            _ => w.write_requests += 1,
        }
        match (r.method, r.target) {
            (Method::Get, _) => {
                w.egress_bytes += r.size;
                match r.target {
                    Target::Blob { digest, .. } if r.size > 0 => {
                        keep_max(&mut stored.blobs, digest, r.size)
                    }
                    Target::Manifest { repo, reference } if r.size > 0 => {
                        keep_max(&mut stored.manifests, (repo, reference), r.size)
                    }
                    _ => {}
                }
            }
            (Method::Put, Target::Manifest { repo, reference }) => {
                w.ingress_bytes += r.size;
                keep_max(&mut stored.manifests, (repo, reference), r.size);
            }
            (Method::Put | Method::Patch, Target::Upload { .. } | Target::Blob { .. }) => {
                w.ingress_bytes += r.size;
            }
            _ => {}
        }
        if let Some(PushEvent::Uploaded(l)) = uploads.observe(r) {
            match (l.digest, l.session) {
                (Some(d), _) => keep_max(&mut stored.blobs, d, l.size),
                (None, Some(s)) => keep_max(&mut stored.sessions, s, l.size),
                (None, None) => {}
            }
        }
    })?;
    w.span_s = info.span_s;
    w.storage_bytes = stored.blobs.values().sum::<u64>()
        + stored.sessions.values().sum::<u64>()
        + stored.manifests.values().sum::<u64>();
    Ok(w)
}

/// How the measured workload becomes a month.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Projection {
    pub months: f64,
    pub hours_per_month: f64,
    /// Monthly volume over measured volume.
    pub scale_factor: f64,
    /// `measured_rate` or `scale_to`.
    pub basis: &'static str,
    /// The measured ingress, as a monthly rate (storage growth if nothing is deleted).
    pub ingress_gb_per_month: f64,
}

/// A complete estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub provider: ResolvedPricing,
    pub workload: Workload,
    pub projection: Projection,
    pub monthly_usage: MonthlyUsage,
    /// One month's bill, itemized.
    pub monthly: MonthlyCost,
    /// `monthly.total × months`.
    pub total: f64,
}

/// Projects `w` to a month and prices it.
pub fn estimate(
    w: &Workload,
    p: &ResolvedPricing,
    months: f64,
    scale_to: Option<u64>,
) -> Result<Estimate, PricingError> {
    if !(months.is_finite() && months > 0.0) {
        return Err(PricingError::Workload(format!(
            "months must be positive, not {months}"
        )));
    }
    let month_s = HOURS_PER_MONTH * 3600.0;
    let (factor, basis) = match scale_to {
        Some(target) => {
            if w.egress_bytes == 0 {
                return Err(PricingError::Workload(
                    "--scale-to needs a workload with some egress to scale".into(),
                ));
            }
            (target as f64 / w.egress_bytes as f64, "scale_to")
        }
        None => {
            if !(w.span_s.is_finite() && w.span_s > 0.0) {
                return Err(PricingError::Workload(
                    "the workload spans no time, so it has no rate to project; give --scale-to"
                        .into(),
                ));
            }
            (month_s / w.span_s, "measured_rate")
        }
    };
    let usage = MonthlyUsage {
        egress_gb: w.egress_bytes as f64 * factor / GB,
        storage_gb: w.storage_bytes as f64 / GB,
        read_requests: w.read_requests as f64 * factor,
        write_requests: w.write_requests as f64 * factor,
    };
    let ingress_gb_per_month = if w.span_s > 0.0 {
        w.ingress_bytes as f64 / GB * month_s / w.span_s
    } else {
        0.0
    };
    let monthly = estimate_month(&usage, p);
    Ok(Estimate {
        provider: p.clone(),
        workload: w.clone(),
        projection: Projection {
            months,
            hours_per_month: HOURS_PER_MONTH,
            scale_factor: factor,
            basis,
            ingress_gb_per_month,
        },
        monthly_usage: usage,
        total: monthly.total * months,
        monthly,
    })
}

/// Loads the table `args` asks for.
pub fn load_table(pricing: Option<&Path>) -> anyhow::Result<PricingTable> {
    Ok(match pricing {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            PricingTable::parse(&text, &path.display().to_string())?
        }
        None => PricingTable::builtin()?,
    })
}

/// Measures the inputs: one result directory, or trace files.
pub fn measure(inputs: &[PathBuf], skip_invalid: bool) -> anyhow::Result<Workload> {
    match inputs {
        [dir] if dir.is_dir() && dir.join("summary.json").is_file() => {
            workload_from_result_dir(dir)
        }
        _ => {
            if let Some(d) = inputs
                .iter()
                .find(|p| p.is_dir() && p.join("summary.json").is_file())
            {
                anyhow::bail!(
                    "{} is a result directory: give it alone, not with other inputs",
                    d.display()
                );
            }
            workload_from_traces(inputs, skip_invalid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn month_workload(egress_gb: f64, storage_gb: f64) -> Workload {
        Workload {
            source: "test".into(),
            span_s: HOURS_PER_MONTH * 3600.0,
            egress_bytes: (egress_gb * GB) as u64,
            ingress_bytes: 0,
            storage_bytes: (storage_gb * GB) as u64,
            read_requests: 1000,
            write_requests: 10,
            notes: Vec::new(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn a_month_of_workload_on_ecr() {
        let p = PricingTable::builtin()
            .unwrap()
            .resolve("ecr", None)
            .unwrap();
        // 12 TB egress: $1,086.68 (see pricing tests); 500 GB × $0.10 = $50.
        let e = estimate(&month_workload(12_288.0, 500.0), &p, 1.0, None).unwrap();
        assert!(close(e.projection.scale_factor, 1.0));
        assert!(close(e.monthly.total, 1136.68), "{}", e.monthly.total);
        // Three months: three bills.
        let e3 = estimate(&month_workload(12_288.0, 500.0), &p, 3.0, None).unwrap();
        assert!(close(e3.total, 3.0 * 1136.68));
    }

    #[test]
    fn zero_spans_need_scale_to() {
        let p = PricingTable::builtin()
            .unwrap()
            .resolve("ecr", None)
            .unwrap();
        let mut w = month_workload(1.0, 1.0);
        w.span_s = 0.0;
        assert!(estimate(&w, &p, 1.0, None).is_err());
        assert!(estimate(&w, &p, 1.0, Some(1 << 30)).is_ok());
        w.egress_bytes = 0;
        assert!(estimate(&w, &p, 1.0, Some(1 << 30)).is_err());
    }

    #[test]
    fn request_classes() {
        assert_eq!(request_class("blob_get"), Some(true));
        assert_eq!(request_class("upload_patch"), Some(false));
        assert_eq!(request_class("blob_upload"), None);
        assert_eq!(request_class("image_pull"), None);
    }
}
