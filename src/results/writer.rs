//! Writing a result directory while the run goes: the aggregator hands every finished
//! interval to [`ResultWriter`], which appends it to `histograms.hlog` and `timeline.csv`
//! and flushes both, so a crash loses at most the intervals still open. With
//! `--record-requests`, every finished exchange is streamed to `requests.csv`. A run over
//! several endpoints also gets `endpoints.csv`: one row per interval and endpoint.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use hdrhistogram::Histogram;

use super::hlog;
use crate::metrics::attribution::Who;
use crate::metrics::hist::{new_histogram, Recording};
use crate::metrics::split::ValueCounters;
use crate::metrics::{Interval, IntervalSink, KeyCounters, Level, Op, Outcome, Sample, StatsTable};

/// Operations with their own columns in `timeline.csv` (count, p50, p99).
pub const TIMELINE_FAMILIES: [Op; 14] = [
    Op::ManifestGet,
    Op::ManifestHead,
    Op::ManifestPut,
    Op::BlobGet,
    Op::BlobHead,
    Op::BlobUpload,
    Op::BlobMount,
    Op::Ping,
    Op::TokenFetch,
    Op::ImagePull,
    Op::ImagePush,
    Op::LayerUnpack,
    Op::ImageReady,
    Op::Replication,
];

/// The columns of `endpoints.csv` (runs over several endpoints), in order.
pub const ENDPOINTS_HEADER: [&str; 8] = [
    "interval",
    "start_s",
    "endpoint",
    "completed",
    "ok",
    "errors",
    "bytes_sent",
    "bytes_received",
];

/// The columns of `split.csv` (`--split-by-header`), in order: each interval's workload
/// operations and bytes by the value their answer gave the header.
pub const SPLIT_HEADER: [&str; 5] = ["interval", "start_s", "value", "completed", "bytes"];

/// One row of `split.csv` (columns as in [`SPLIT_HEADER`]): the counters of header value
/// `value` in the interval `index` that starts `start` seconds (as written) after the anchor.
pub fn split_row(index: u64, start: &str, value: &str, c: &ValueCounters) -> [String; 5] {
    [
        index.to_string(),
        start.to_owned(),
        value.to_owned(),
        c.completed.to_string(),
        c.bytes.to_string(),
    ]
}

/// The per-endpoint columns `timeline.csv` ends with in a run over several endpoints:
/// `endpoint<i>_completed`, `endpoint<i>_ok`, `endpoint<i>_errors` for each endpoint index;
/// none for a run over one.
pub fn endpoint_columns(endpoints: usize) -> Vec<String> {
    (0..several(endpoints))
        .flat_map(|i| ["completed", "ok", "errors"].map(|what| format!("endpoint{i}_{what}")))
        .collect()
}

/// The values of [`endpoint_columns`] for one interval.
pub fn endpoint_values(endpoints: usize, counters: &[crate::metrics::KeyCounters]) -> Vec<String> {
    (0..several(endpoints))
        .flat_map(|i| {
            let c = counters.get(i).copied().unwrap_or_default();
            [c.completed, c.ok, c.errors].map(|v| v.to_string())
        })
        .collect()
}

/// Endpoints with their own columns: all of several, none of one.
fn several(endpoints: usize) -> usize {
    if endpoints > 1 {
        endpoints
    } else {
        0
    }
}

/// The fixed columns of `timeline.csv`, in order (a run over several endpoints adds
/// [`endpoint_columns`] after them).
pub fn timeline_header() -> Vec<String> {
    let mut h: Vec<String> = [
        "interval",
        "start_s",
        "duration_s",
        "offered",
        "achieved",
        "offered_per_s",
        "achieved_per_s",
        "in_flight",
        "ok",
        "errors",
        "bytes_sent",
        "bytes_received",
        "lag_p99_ms",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for op in TIMELINE_FAMILIES {
        for suffix in ["count", "p50_ms", "p99_ms"] {
            h.push(format!("{}_{suffix}", op.name()));
        }
    }
    h
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// One row of `timeline.csv` for an interval's table and counters; percentiles are read
/// from `scratch`, a dense histogram each series is added into in turn.
pub fn timeline_row(interval: &Interval<'_>, scratch: &mut Option<Histogram<u64>>) -> Vec<String> {
    let t = interval.table;
    let mut ok = 0;
    let mut errors = 0;
    let mut sent = 0;
    let mut received = 0;
    let mut lag_p99: Option<u64> = None;
    for ((op, _), s) in t.cells() {
        if op.level() == Level::Operation {
            ok += s.ok;
            errors += s.errors;
            sent += s.bytes_sent;
            received += s.bytes_received;
        }
        if let Some(lag) = s.schedule_lag.as_ref().filter(|h| !h.is_empty()) {
            let p = lag.dense(scratch).value_at_quantile(0.99);
            lag_p99 = Some(lag_p99.map_or(p, |x| x.max(p)));
        }
    }
    let secs = interval.length.as_secs_f64().max(1e-9);
    let c = interval.counters;
    let mut row = vec![
        interval.index.to_string(),
        format!("{:.3}", interval.start.as_secs_f64()),
        format!("{:.3}", interval.length.as_secs_f64()),
        c.offered.to_string(),
        c.completed.to_string(),
        format!("{:.3}", c.offered as f64 / secs),
        format!("{:.3}", c.completed as f64 / secs),
        c.in_flight.to_string(),
        ok.to_string(),
        errors.to_string(),
        sent.to_string(),
        received.to_string(),
        lag_p99.map(ms).unwrap_or_default(),
    ];
    for op in TIMELINE_FAMILIES {
        // Every size class of the family, added together. The dense scratch is zeroed
        // (188 KB) only for a family with a success in the interval: for all fourteen, it
        // was most of what an interval's row cost.
        let cells = || t.cells().filter(move |((o, _), _)| *o == op);
        row.push(cells().map(|(_, s)| s.count).sum::<u64>().to_string());
        if cells().all(|(_, s)| s.latency.is_empty()) {
            row.push(String::new());
            row.push(String::new());
            continue;
        }
        let latency = scratch.get_or_insert_with(new_histogram);
        latency.reset();
        for (_, s) in cells() {
            s.latency.add_to(latency);
        }
        row.push(ms(latency.value_at_quantile(0.5)));
        row.push(ms(latency.value_at_quantile(0.99)));
    }
    row
}

/// The interval sink of a result directory.
pub struct ResultWriter {
    dir: PathBuf,
    hlog: BufWriter<File>,
    serializer: hlog::LogSerializer,
    timeline: csv::Writer<BufWriter<File>>,
    requests: Option<csv::Writer<BufWriter<File>>>,
    /// Endpoints of the run (over several, their columns end `timeline.csv`).
    endpoint_count: usize,
    /// Created with the first interval that has endpoints.
    endpoints: Option<csv::Writer<BufWriter<File>>>,
    /// `split.csv`, created with the first interval that has header values.
    splits: Option<csv::Writer<BufWriter<File>>>,
    /// The one dense histogram the interval's sparse series are made dense in, in turn.
    scratch: Option<Histogram<u64>>,
}

impl std::fmt::Debug for ResultWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultWriter")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn create(dir: &Path, name: &str) -> anyhow::Result<BufWriter<File>> {
    let path = dir.join(name);
    let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(BufWriter::with_capacity(256 * 1024, file))
}

impl ResultWriter {
    /// Creates the per-interval files of a result directory (which must exist); a run over
    /// several endpoints names how many.
    pub fn create(
        dir: &Path,
        anchor: SystemTime,
        record_requests: bool,
        endpoints: usize,
    ) -> anyhow::Result<Self> {
        let mut hlog = create(dir, "histograms.hlog")?;
        hlog::write_header(&mut hlog, anchor)
            .and_then(|()| hlog.flush())
            .with_context(|| format!("cannot write {}", dir.join("histograms.hlog").display()))?;
        let mut timeline = csv::Writer::from_writer(create(dir, "timeline.csv")?);
        let mut header = timeline_header();
        header.extend(endpoint_columns(endpoints));
        timeline
            .write_record(header)
            .map_err(anyhow::Error::from)
            .and_then(|()| timeline.flush().map_err(anyhow::Error::from))
            .with_context(|| format!("cannot write {}", dir.join("timeline.csv").display()))?;
        let requests = if record_requests {
            let mut w = csv::Writer::from_writer(create(dir, "requests.csv")?);
            w.write_record([
                "end_s",
                "op",
                "size_class",
                "outcome",
                "latency_ms",
                "service_ms",
                "lag_ms",
                "ttfb_ms",
                "bytes_sent",
                "bytes_received",
                "http_requests",
                "repository",
                "client",
            ])?;
            Some(w)
        } else {
            None
        };
        Ok(ResultWriter {
            dir: dir.to_path_buf(),
            hlog,
            serializer: hlog::LogSerializer::new(),
            timeline,
            requests,
            endpoint_count: endpoints,
            endpoints: None,
            splits: None,
            scratch: None,
        })
    }

    /// As a boxed sink for the aggregator.
    pub fn boxed(self) -> Box<dyn IntervalSink> {
        Box::new(self)
    }
}

fn opt_ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.3}", d.as_secs_f64() * 1000.0))
        .unwrap_or_default()
}

/// One row of `endpoints.csv` (columns as in [`ENDPOINTS_HEADER`]): an endpoint's counters
/// in the interval `index` that starts `start` seconds (as written) after the anchor.
pub fn endpoint_row(index: u64, start: &str, endpoint: usize, c: &KeyCounters) -> [String; 8] {
    [
        index.to_string(),
        start.to_owned(),
        endpoint.to_string(),
        c.completed.to_string(),
        c.ok.to_string(),
        c.errors.to_string(),
        c.bytes_sent.to_string(),
        c.bytes_received.to_string(),
    ]
}

/// A row of `endpoints.csv` read back: (interval, start as written, endpoint, counters);
/// `None` when its interval or endpoint is not a number.
pub fn parse_endpoint_row(row: &[String]) -> Option<(u64, String, usize, KeyCounters)> {
    let num = |i: usize| row.get(i).and_then(|v| v.parse::<u64>().ok());
    let (interval, endpoint) = (num(0)?, num(2)?);
    let n = |i: usize| num(i).unwrap_or(0);
    let counters = KeyCounters {
        completed: n(3),
        ok: n(4),
        errors: n(5),
        bytes_sent: n(6),
        bytes_received: n(7),
    };
    let start = row.get(1).cloned().unwrap_or_default();
    Some((interval, start, usize::try_from(endpoint).ok()?, counters))
}

impl IntervalSink for ResultWriter {
    fn interval(&mut self, interval: &Interval<'_>) -> std::io::Result<()> {
        hlog::write_interval(
            &mut self.hlog,
            &mut self.serializer,
            interval.start,
            interval.length,
            interval.table,
            &mut self.scratch,
        )?;
        self.hlog.flush()?;
        let mut row = timeline_row(interval, &mut self.scratch);
        row.extend(endpoint_values(self.endpoint_count, interval.endpoints));
        self.timeline.write_record(row)?;
        self.timeline.flush()?;
        if !interval.endpoints.is_empty() {
            if self.endpoints.is_none() {
                let mut w = csv::Writer::from_writer(
                    create(&self.dir, super::store::ENDPOINTS_CSV)
                        .map_err(std::io::Error::other)?,
                );
                w.write_record(ENDPOINTS_HEADER)?;
                self.endpoints = Some(w);
            }
            if let Some(w) = self.endpoints.as_mut() {
                let start = format!("{:.3}", interval.start.as_secs_f64());
                for (i, e) in interval.endpoints.iter().enumerate() {
                    w.write_record(endpoint_row(interval.index, &start, i, e))?;
                }
                w.flush()?;
            }
        }
        if !interval.splits.is_empty() {
            if self.splits.is_none() {
                let mut w = csv::Writer::from_writer(
                    create(&self.dir, super::store::SPLIT_CSV).map_err(std::io::Error::other)?,
                );
                w.write_record(SPLIT_HEADER)?;
                self.splits = Some(w);
            }
            if let Some(w) = self.splits.as_mut() {
                let start = format!("{:.3}", interval.start.as_secs_f64());
                for (value, c) in interval.splits {
                    w.write_record(split_row(interval.index, &start, value, c))?;
                }
                w.flush()?;
            }
        }
        if let Some(r) = self.requests.as_mut() {
            r.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.hlog.flush()?;
        self.hlog.get_ref().sync_all()?;
        self.timeline.flush()?;
        if let Some(w) = self.endpoints.as_mut() {
            w.flush()?;
        }
        if let Some(w) = self.splits.as_mut() {
            w.flush()?;
        }
        if let Some(r) = self.requests.as_mut() {
            r.flush()?;
        }
        Ok(())
    }

    fn records_requests(&self) -> bool {
        self.requests.is_some()
    }

    fn request(&mut self, offset: Duration, s: &Sample, who: Option<&Who>) -> std::io::Result<()> {
        let Some(w) = self.requests.as_mut() else {
            return Ok(());
        };
        let outcome = match s.outcome {
            Outcome::Ok => "ok".to_owned(),
            Outcome::Error(k) => k.key(),
        };
        w.write_record([
            format!("{:.6}", offset.as_secs_f64()),
            s.op.name().to_owned(),
            s.size_class.name().to_owned(),
            outcome,
            format!("{:.3}", s.timing.latency().as_secs_f64() * 1000.0),
            opt_ms(s.timing.intended.map(|_| s.timing.service())),
            opt_ms(s.timing.schedule_lag()),
            opt_ms(s.timing.ttfb()),
            s.bytes_sent.to_string(),
            s.bytes_received.to_string(),
            s.http.total().to_string(),
            name(who.and_then(|w| w.repository.as_deref())),
            name(who.and_then(|w| w.client.as_deref())),
        ])?;
        Ok(())
    }
}

fn name(n: Option<&str>) -> String {
    n.unwrap_or_default().to_owned()
}

/// Sums the table of an interval (for tests and merges).
pub fn table_ok_errors(table: &StatsTable) -> (u64, u64) {
    table
        .cells()
        .filter(|((op, _), _)| op.level() == Level::Operation)
        .fold((0, 0), |(ok, err), (_, s)| (ok + s.ok, err + s.errors))
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::metrics::hist::SparseHistogram;
    use crate::metrics::{ErrorKind, IntervalCounters};

    /// A sample of `op` that took `ms`, ending as `outcome`.
    fn took(op: Op, outcome: Outcome, ms: u64) -> Sample {
        let sent = Instant::now();
        let mut sample = Sample::session(op, outcome, sent, 0, 0);
        sample.timing.end = sent + Duration::from_millis(ms);
        sample
    }

    #[test]
    fn a_timeline_row_has_percentiles_for_the_families_with_successes_only() {
        let mut table = StatsTable::<SparseHistogram>::default();
        let mut manifest_gets = new_histogram();
        for ms in 1..=100 {
            table.record(&took(Op::ManifestGet, Outcome::Ok, ms));
            manifest_gets.saturating_record(ms * 1000);
        }
        table.record(&took(Op::BlobGet, Outcome::Error(ErrorKind::Timeout), 5));
        table.record(&took(Op::ImagePull, Outcome::Ok, 40));
        let interval = Interval {
            index: 0,
            start: Duration::ZERO,
            length: Duration::from_secs(1),
            table: &table,
            counters: IntervalCounters::default(),
            endpoints: &[],
            splits: &[],
        };
        let row = timeline_row(&interval, &mut None);
        let header = timeline_header();
        assert_eq!(row.len(), header.len());
        let column = |name: &str| {
            let at = header.iter().position(|h| h == name).unwrap();
            row[at].as_str()
        };
        // Each family from its own values: the scratch the families share holds none of
        // another family's.
        assert_eq!(column("manifest_get_count"), "100");
        let p50 = ms(manifest_gets.value_at_quantile(0.5));
        let p99 = ms(manifest_gets.value_at_quantile(0.99));
        assert_eq!(column("manifest_get_p50_ms"), p50);
        assert_eq!(column("manifest_get_p99_ms"), p99);
        // Failures only: counted, no percentiles.
        assert_eq!(column("blob_get_count"), "1");
        assert_eq!(column("blob_get_p50_ms"), "");
        assert_eq!(column("blob_get_p99_ms"), "");
        // One value: both percentiles are its bucket's.
        assert_eq!(column("image_pull_count"), "1");
        let forty = column("image_pull_p50_ms");
        assert!(forty.starts_with("40.0"), "{forty}");
        assert_eq!(column("image_pull_p99_ms"), forty);
        // None at all.
        assert_eq!(column("manifest_head_count"), "0");
        assert_eq!(column("manifest_head_p50_ms"), "");
    }
}
