//! The machine side of a result directory, and reading one back.
//!
//! - `counters.json`: every (operation, size class) counter of the run (counts, errors by
//!   kind, bytes, late starts) and the events. With `histograms.hlog` it holds everything
//!   `summary.json` is computed from, so `merge` and `report` rebuild summaries exactly
//!   (counters add; histograms add; percentiles are recomputed, never averaged).
//! - `endpoints.hlog` (runs over several endpoints): each endpoint's whole-run histograms,
//!   tagged `INDEX/OP.CLASS.METRIC`; with the `endpoints` cells of `counters.json` it holds
//!   everything the summary's `endpoints` block is computed from, so it merges exactly too.
//! - `meta.json`: who ran what — version, resolved configuration and its hash, the dataset
//!   fingerprint, seed, shard, host, the anchor (shared start) and the actual start.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::hlog::{self, HlogContents, IntervalHistograms};
use super::summary::{EndpointSummary, HistogramInfo, Shard, Summary, Tool};
use crate::metrics::{Aggregator, Counts, ErrorKind, Event, Level, Op, SizeClass, StatsTable};
use crate::net::links::Link;

pub const COUNTERS_VERSION: u32 = 1;

/// The counters of one (operation, size class).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellCounters {
    pub op: String,
    pub class: String,
    #[serde(flatten)]
    pub counts: Counts<String>,
}

/// `counters.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub schema_version: u32,
    pub interval_s: f64,
    pub intervals: u64,
    pub cells: Vec<CellCounters>,
    pub events: BTreeMap<String, u64>,
    /// Runs over several endpoints: each endpoint's cells (every operation counted on
    /// exactly one endpoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointCells>,
    /// `--split-by-header`: the header, and each of its values' cells (every labelled
    /// operation counted under exactly one value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitCells>,
}

/// The counters of `--split-by-header`, in `counters.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitCells {
    pub header: String,
    pub values: Vec<ValueCells>,
}

/// One value's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueCells {
    pub value: String,
    pub cells: Vec<CellCounters>,
}

/// One endpoint's counters, in `counters.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointCells {
    pub url: String,
    /// Position in the endpoint list.
    pub index: usize,
    pub cells: Vec<CellCounters>,
}

/// The counters of every cell of `table`.
pub fn cells_of(table: &StatsTable) -> Vec<CellCounters> {
    table
        .cells()
        .map(|((op, class), s)| CellCounters {
            op: op.name().into(),
            class: class.name().into(),
            counts: s.counts.map_kinds(|k| Some(k.key())),
        })
        .collect()
}

fn add_cells(into: &mut Vec<CellCounters>, from: &[CellCounters]) {
    for cell in from {
        match into
            .iter_mut()
            .find(|c| c.op == cell.op && c.class == cell.class)
        {
            Some(c) => c.counts.add(&cell.counts),
            None => into.push(cell.clone()),
        }
    }
}

impl Counters {
    /// The counters of a run; `endpoints` names the tables of `Aggregator::endpoint`
    /// (URL and index, from the summary's `endpoints` block).
    pub fn of(
        aggregator: &Aggregator,
        interval: Duration,
        endpoints: Option<&BTreeMap<String, EndpointSummary>>,
    ) -> Counters {
        let endpoints = endpoints
            .into_iter()
            .flatten()
            .map(|(url, e)| EndpointCells {
                url: url.clone(),
                index: e.index,
                cells: aggregator
                    .endpoint(e.index)
                    .map(cells_of)
                    .unwrap_or_default(),
            })
            .collect();
        let split = aggregator
            .split_tables()
            .map(|(header, tables)| SplitCells {
                header: header.to_owned(),
                values: tables
                    .into_iter()
                    .map(|(value, table)| ValueCells {
                        value,
                        cells: cells_of(table),
                    })
                    .collect(),
            });
        Counters {
            schema_version: COUNTERS_VERSION,
            interval_s: interval.as_secs_f64(),
            intervals: aggregator.intervals(),
            cells: cells_of(aggregator.table()),
            events: aggregator.event_counts(),
            endpoints,
            split,
        }
    }

    /// Adds another run's counters (a merge). Endpoints match by URL.
    pub fn add(&mut self, other: &Counters) {
        add_cells(&mut self.cells, &other.cells);
        for (k, v) in &other.events {
            *self.events.entry(k.clone()).or_default() += v;
        }
        self.intervals = self.intervals.max(other.intervals);
        for e in &other.endpoints {
            match self.endpoints.iter_mut().find(|m| m.url == e.url) {
                Some(m) => add_cells(&mut m.cells, &e.cells),
                None => self.endpoints.push(e.clone()),
            }
        }
        // Values match by name (each run labels them in the order it met them).
        if let Some(theirs) = &other.split {
            let ours = self.split.get_or_insert_with(|| SplitCells {
                header: theirs.header.clone(),
                values: Vec::new(),
            });
            for v in &theirs.values {
                match ours.values.iter_mut().find(|m| m.value == v.value) {
                    Some(m) => add_cells(&mut m.cells, &v.cells),
                    None => ours.values.push(v.clone()),
                }
            }
        }
    }
}

/// A host that contributed to a (merged) result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub host: String,
    pub shard: Shard,
    pub actual_start: String,
    pub start_skew_ms: Option<f64>,
    pub requests: u64,
    pub errors: u64,
    pub p99_ms: Option<f64>,
    pub dir: String,
}

/// `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub schema_version: u32,
    pub tool: Tool,
    pub command: String,
    pub mode: String,
    pub model: String,
    pub host: String,
    pub seed: u64,
    pub shard: Shard,
    /// The resolved configuration (no secrets).
    pub config: serde_json::Value,
    /// SHA-256 of the configuration without per-host fields (shard, credentials).
    pub config_hash: String,
    /// SHA-256 of what the workload requests (trace identity, seed, content options):
    /// results compare only when it matches.
    pub dataset_hash: String,
    /// The anchor (interval 0 starts here), RFC 3339.
    pub anchor: String,
    pub start_at: Option<String>,
    pub actual_start: String,
    pub start_skew_ms: Option<f64>,
    pub interval_s: f64,
    pub histograms: HistogramInfo,
    pub clock: String,
    /// For merged results: every host that contributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostInfo>,
    /// How each registry endpoint was reached: protocol, TLS, connections opened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointLink>,
    /// A replay's preparation: reading the trace and computing digests, timed apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preparation: Option<serde_json::Value>,
}

/// One registry endpoint and how it was reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointLink {
    pub url: String,
    #[serde(flatten)]
    pub link: Link,
}

pub const CLOCK_NOTE: &str = "durations use the monotonic clock; wall-clock times only align starts and intervals across hosts";

/// This machine's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Removes per-host fields (any key named `shard` or `credentials`) before hashing.
fn strip_per_host(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("shard");
            map.remove("credentials");
            for v in map.values_mut() {
                strip_per_host(v);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_per_host),
        _ => {}
    }
}

/// `sha256:…` of a JSON value (serde_json objects serialize with sorted keys).
pub fn json_hash(value: &serde_json::Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The hash of a configuration, the same on every host of a run.
pub fn config_hash(config: &serde_json::Value) -> String {
    let mut v = config.clone();
    strip_per_host(&mut v);
    json_hash(&v)
}

/// What a result ran, for telling whether two results ran the same workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    pub dir: &'a Path,
    pub summary: &'a Summary,
    pub dataset_hash: &'a str,
}

/// Why `b` did not run `a`'s workload, if it did not — one rule for `compare` and
/// `--baseline`: another workload model (open or closed) is never comparable; another
/// dataset (trace, seed, selection, content options) only with `force`.
pub fn workload_difference(a: Workload<'_>, b: Workload<'_>, force: bool) -> Option<String> {
    if a.summary.model != b.summary.model || a.summary.mode != b.summary.mode {
        return Some(format!(
            "{} is {} and {} is {}: results of different workload models are not comparable",
            a.dir.display(),
            a.summary.model_label(),
            b.dir.display(),
            b.summary.model_label()
        ));
    }
    (a.dataset_hash != b.dataset_hash && !force).then(|| {
        format!(
            "{} and {} ran different workloads (dataset {} vs {}); use --force to compare anyway",
            a.dir.display(),
            b.dir.display(),
            a.dataset_hash,
            b.dataset_hash
        )
    })
}

impl ResultSet {
    /// What this result ran.
    pub fn workload(&self) -> Workload<'_> {
        Workload {
            dir: &self.dir,
            summary: &self.summary,
            dataset_hash: &self.meta.dataset_hash,
        }
    }
}

/// Everything read back from a result directory.
#[derive(Debug)]
pub struct ResultSet {
    pub dir: PathBuf,
    pub summary: Summary,
    pub meta: Meta,
    pub counters: Counters,
    pub hlog: HlogContents,
    /// `timeline.csv` rows (header excluded), as written.
    pub timeline: Vec<Vec<String>>,
    /// `endpoints.hlog` (runs over several endpoints): tag `INDEX/OP.CLASS.METRIC` →
    /// whole-run histogram.
    pub endpoint_histograms: Option<IntervalHistograms>,
    /// `split.hlog` (`--split-by-header`): tag `HEXVALUE/OP.CLASS.METRIC` → whole-run
    /// histogram.
    pub split_histograms: Option<IntervalHistograms>,
    /// `attribution.hlog`: tag `KIND/HEXNAME` → a listed entry's latency histogram.
    pub attribution_histograms: Option<IntervalHistograms>,
    /// `endpoints.csv` rows (header excluded), as written; empty without the file.
    pub endpoint_rows: Vec<Vec<String>>,
    /// `split.csv` rows (header excluded), as written; empty without the file.
    pub split_rows: Vec<Vec<String>>,
    /// `registry-metrics.json` (`--registry-metrics`); empty without the file.
    pub registry_metrics: Vec<super::registry_metrics::RegistryMetricsRecord>,
}

/// The whole-run histograms of every endpoint (runs over several endpoints).
pub const ENDPOINTS_HLOG: &str = "endpoints.hlog";
/// One row per interval and endpoint (runs over several endpoints).
pub const ENDPOINTS_CSV: &str = "endpoints.csv";
/// One row per interval and `--split-by-header` value.
pub const SPLIT_CSV: &str = "split.csv";

/// The `endpoints.hlog` tag of an endpoint's histogram.
pub fn endpoint_tag(index: usize, op: Op, class: SizeClass, metric: &str) -> String {
    format!("{index}/{}", hlog::tag_of(op, class, metric))
}

fn read_csv_rows(path: &Path) -> anyhow::Result<Vec<Vec<String>>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, row) in reader.records().enumerate() {
        let row = row.with_context(|| format!("{}: row {}", path.display(), i + 2))?;
        rows.push(row.iter().map(str::to_owned).collect());
    }
    Ok(rows)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not valid", path.display()))
}

/// Reads a result directory written by creb-rs.
pub fn load(dir: &Path) -> anyhow::Result<ResultSet> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a result directory", dir.display());
    }
    let summary: Summary = read_json(&dir.join("summary.json"))?;
    let meta: Meta = read_json(&dir.join("meta.json"))?;
    let counters: Counters = read_json(&dir.join("counters.json"))?;
    let interval = Duration::from_secs_f64(meta.interval_s.max(1e-3));
    let hlog_path = dir.join("histograms.hlog");
    let bytes =
        fs::read(&hlog_path).with_context(|| format!("cannot read {}", hlog_path.display()))?;
    let hlog = hlog::read(&bytes, interval)
        .with_context(|| format!("{} is not valid", hlog_path.display()))?;
    let timeline = read_csv_rows(&dir.join("timeline.csv"))?;
    // The files a run writes only when it has what they hold.
    let optional = |name: &str| Some(dir.join(name)).filter(|p| p.exists());
    let whole_run = |name: &str| optional(name).map(|p| read_whole_run(&p)).transpose();
    let rows = |name: &str| optional(name).map_or(Ok(Vec::new()), |p| read_csv_rows(&p));
    let endpoint_histograms = whole_run(ENDPOINTS_HLOG)?;
    let split_histograms = whole_run(SPLIT_HLOG)?;
    let attribution_histograms = whole_run(super::attribution::ATTRIBUTION_HLOG)?;
    let endpoint_rows = rows(ENDPOINTS_CSV)?;
    let split_rows = rows(SPLIT_CSV)?;
    let registry_metrics = match optional(super::registry_metrics::REGISTRY_METRICS_JSON) {
        Some(path) => read_json(&path)?,
        None => Vec::new(),
    };
    Ok(ResultSet {
        dir: dir.to_path_buf(),
        summary,
        meta,
        counters,
        hlog,
        timeline,
        endpoint_histograms,
        split_histograms,
        attribution_histograms,
        endpoint_rows,
        split_rows,
        registry_metrics,
    })
}

/// A table from its counters (histograms still empty).
fn table_of(cells: &[CellCounters]) -> anyhow::Result<StatsTable> {
    let mut table = StatsTable::default();
    for c in cells {
        let op = Op::from_name(&c.op).with_context(|| format!("unknown operation '{}'", c.op))?;
        let class = SizeClass::ALL
            .into_iter()
            .find(|k| k.name() == c.class)
            .with_context(|| format!("unknown size class '{}'", c.class))?;
        let mut unknown = None;
        let counts = c.counts.map_kinds(|k| {
            let kind = ErrorKind::from_key(k);
            if kind.is_none() {
                unknown = Some(k.clone());
            }
            kind
        });
        if let Some(k) = unknown {
            anyhow::bail!("unknown error kind '{k}'");
        }
        table.cell_mut(op, class).counts = counts;
    }
    Ok(table)
}

/// Rebuilds the aggregator state (totals and events) from counters and interval histograms.
pub fn aggregator_of(counters: &Counters, hlog: &HlogContents) -> anyhow::Result<Aggregator> {
    let mut table = table_of(&counters.cells)?;
    let mut batches = crate::metrics::uncertainty::Batches::default();
    let mut next = 0;
    for (index, histograms) in &hlog.intervals {
        // Intervals that saw nothing are not in the log, but they are in the run's batches.
        while next < *index {
            batches.end_interval();
            next += 1;
        }
        for (tag, h) in histograms {
            let (op, class, metric) =
                hlog::parse_tag(tag).with_context(|| format!("unknown histogram tag '{tag}'"))?;
            hlog::set_cell_histogram(table.cell_mut(op, class), metric, h);
            if let Some(m) = hlog::batch_metric(metric) {
                batches.add(op, m, h.iter());
            }
            // Completed operations: their successes and their failures.
            if matches!(metric, "latency" | "error") && op.level() == Level::Operation {
                batches.add_completed(h.len());
            }
        }
        batches.end_interval();
        next = index + 1;
    }
    let mut events = [0u64; Event::COUNT];
    for (name, n) in &counters.events {
        if let Some(e) = Event::from_name(name) {
            events[e.index()] = *n;
        }
    }
    Ok(Aggregator::from_parts(
        table,
        events,
        counters.intervals,
        batches,
    ))
}

/// Rebuilds each endpoint's whole-run table from the `endpoints` cells of the counters
/// and `endpoints.hlog`: (URL, index, table), by index.
pub fn endpoint_tables(
    counters: &Counters,
    histograms: &IntervalHistograms,
) -> anyhow::Result<Vec<(String, usize, StatsTable)>> {
    let mut tables: Vec<(String, usize, StatsTable)> = counters
        .endpoints
        .iter()
        .map(|e| Ok((e.url.clone(), e.index, table_of(&e.cells)?)))
        .collect::<anyhow::Result<_>>()?;
    for (tag, h) in histograms {
        let parsed = tag
            .split_once('/')
            .and_then(|(i, rest)| Some((i.parse::<usize>().ok()?, hlog::parse_tag(rest)?)));
        let Some((index, (op, class, metric))) = parsed else {
            anyhow::bail!("unknown endpoint histogram tag '{tag}'");
        };
        let Some((_, _, table)) = tables.iter_mut().find(|(_, i, _)| *i == index) else {
            anyhow::bail!("histogram '{tag}' names endpoint {index}, which has no counters");
        };
        hlog::set_cell_histogram(table.cell_mut(op, class), metric, h);
    }
    tables.sort_by_key(|(_, i, _)| *i);
    Ok(tables)
}

/// The whole-run histograms of each `--split-by-header` value (runs with the flag).
pub const SPLIT_HLOG: &str = "split.hlog";

/// The `split.hlog` tag of a value's histogram: the value in hex (any bytes a header
/// carries, none a tag may not), then the cell's tag.
pub fn split_tag(value: &str, op: Op, class: SizeClass, metric: &str) -> String {
    format!("{}/{}", hex::encode(value), hlog::tag_of(op, class, metric))
}

/// Each `--split-by-header` value's table, from its counters and whole-run histograms
/// (tags as [`split_tag`] makes them), in the counters' order.
pub fn split_tables(
    split: &SplitCells,
    histograms: &IntervalHistograms,
) -> anyhow::Result<Vec<(String, StatsTable)>> {
    let mut tables: Vec<(String, StatsTable)> = split
        .values
        .iter()
        .map(|v| Ok((v.value.clone(), table_of(&v.cells)?)))
        .collect::<anyhow::Result<_>>()?;
    for (tag, h) in histograms {
        let parsed = tag.split_once('/').and_then(|(value, rest)| {
            let value = String::from_utf8(hex::decode(value).ok()?).ok()?;
            Some((value, hlog::parse_tag(rest)?))
        });
        let Some((value, (op, class, metric))) = parsed else {
            anyhow::bail!("unknown {SPLIT_HLOG} tag '{tag}'");
        };
        let Some((_, table)) = tables.iter_mut().find(|(v, _)| *v == value) else {
            anyhow::bail!("{SPLIT_HLOG} has '{value}', which counters.json does not count");
        };
        hlog::set_cell_histogram(table.cell_mut(op, class), metric, h);
    }
    Ok(tables)
}

/// Writes `split.hlog`: each `--split-by-header` value's whole-run histograms, one entry
/// per series spanning the run (offset 0, length `duration`).
pub fn write_split_histograms(
    dir: &Path,
    anchor: std::time::SystemTime,
    duration: Duration,
    tables: &[(String, &StatsTable)],
) -> anyhow::Result<()> {
    let tagged = tables.iter().map(|(value, table)| {
        let tag = move |op, class, metric: &str| split_tag(value, op, class, metric);
        (tag, *table)
    });
    write_whole_run(dir, SPLIT_HLOG, anchor, duration, tagged)
}

/// Writes `file`: whole-run histograms of tables, each series tagged by its table's
/// function, one entry per series spanning the run (offset 0, length `duration`).
fn write_whole_run<'a, F>(
    dir: &Path,
    file: &str,
    anchor: std::time::SystemTime,
    duration: Duration,
    tables: impl Iterator<Item = (F, &'a StatsTable)>,
) -> anyhow::Result<()>
where
    F: Fn(Op, SizeClass, &str) -> String,
{
    let mut out = Vec::new();
    hlog::write_header(&mut out, anchor)?;
    let mut serializer = hlog::LogSerializer::new();
    for (tag, table) in tables {
        hlog::write_table(
            &mut out,
            &mut serializer,
            Duration::ZERO,
            duration,
            table,
            &mut None,
            tag,
        )?;
    }
    super::files::write_atomic(dir, file, &out)?;
    Ok(())
}

/// Reads a file of whole-run histograms (`endpoints.hlog`, `split.hlog`): tag → histogram.
fn read_whole_run(path: &Path) -> anyhow::Result<IntervalHistograms> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // One entry per series at offset 0: any interval length puts them in one slot.
    let contents = hlog::read(&bytes, Duration::from_secs(u32::MAX.into()))
        .with_context(|| format!("{} is not valid", path.display()))?;
    let mut all = IntervalHistograms::new();
    for (tag, h) in contents.intervals.into_values().flatten() {
        all.entry(tag).or_default().add(&h);
    }
    Ok(all)
}

/// Writes `attribution.hlog`: the latency histograms of the listed repositories and
/// clients, tagged as `results::attribution::Kind::tag` makes them.
pub fn write_attribution_histograms(
    dir: &Path,
    anchor: std::time::SystemTime,
    duration: Duration,
    tagged: &IntervalHistograms,
) -> anyhow::Result<()> {
    let mut out = Vec::new();
    hlog::write_header(&mut out, anchor)?;
    let mut serializer = hlog::LogSerializer::new();
    hlog::write_tagged(&mut out, &mut serializer, Duration::ZERO, duration, tagged)?;
    super::files::write_atomic(dir, super::attribution::ATTRIBUTION_HLOG, &out)?;
    Ok(())
}

/// Writes `endpoints.hlog`: each endpoint's whole-run histograms, one entry per series
/// spanning the run (offset 0, length `duration`).
pub fn write_endpoint_histograms(
    dir: &Path,
    anchor: std::time::SystemTime,
    duration: Duration,
    tables: &[(usize, &StatsTable)],
) -> anyhow::Result<()> {
    let tagged = tables.iter().map(|&(index, table)| {
        let tag = move |op, class, metric: &str| endpoint_tag(index, op, class, metric);
        (tag, table)
    });
    write_whole_run(dir, ENDPOINTS_HLOG, anchor, duration, tagged)
}

/// Writes the end-of-run files: `counters.json`, `meta.json`, then `summary.json` last (its
/// presence marks a complete result).
pub fn write_final(
    dir: &Path,
    summary: &Summary,
    aggregator: &Aggregator,
    meta: &Meta,
) -> anyhow::Result<()> {
    let interval = Duration::from_secs_f64(meta.interval_s.max(1e-3));
    let counters = Counters::of(aggregator, interval, summary.endpoints.as_ref());
    if let Some(endpoints) = summary.endpoints.as_ref().filter(|e| !e.is_empty()) {
        let anchor = humantime::parse_rfc3339_weak(&meta.anchor).unwrap_or(std::time::UNIX_EPOCH);
        let tables: Vec<(usize, &StatsTable)> = endpoints
            .values()
            .filter_map(|e| Some((e.index, aggregator.endpoint(e.index)?)))
            .collect();
        write_endpoint_histograms(
            dir,
            anchor,
            Duration::from_secs_f64(summary.duration_s.max(0.0)),
            &tables,
        )?;
    }
    if let Some((_, tables)) = aggregator.split_tables() {
        let anchor = humantime::parse_rfc3339_weak(&meta.anchor).unwrap_or(std::time::UNIX_EPOCH);
        let duration = Duration::from_secs_f64(summary.duration_s.max(0.0));
        write_split_histograms(dir, anchor, duration, &tables)?;
    }
    if summary.attribution.is_some() {
        let anchor = humantime::parse_rfc3339_weak(&meta.anchor).unwrap_or(std::time::UNIX_EPOCH);
        let duration = Duration::from_secs_f64(summary.duration_s.max(0.0));
        let tagged = super::attribution::histograms(aggregator);
        write_attribution_histograms(dir, anchor, duration, &tagged)?;
    }
    let mut json = serde_json::to_vec_pretty(&counters)?;
    json.push(b'\n');
    super::files::write_atomic(dir, "counters.json", &json)?;
    let mut json = serde_json::to_vec_pretty(meta)?;
    json.push(b'\n');
    super::files::write_atomic(dir, "meta.json", &json)?;
    super::files::write_summary(dir, summary)?;
    Ok(())
}
