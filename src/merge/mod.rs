//! Merging result directories: the results of many hosts as one (`creb-rs merge`).
//!
//! Exact by construction: counters add, histograms add (interval by interval, tag by tag),
//! and every percentile is recomputed from the merged histograms — nothing is averaged.
//! Intervals align by index: with a shared `--start-at`, interval *k* is the same wall-clock
//! span on every host. The merge refuses results that do not belong together (different
//! versions, configurations, seeds, histogram settings, modes or interval lengths) and
//! shards that overlap or leave gaps, naming the directories at fault. Its output is a
//! result directory like any other, so merges of merges work.

mod split;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::metrics::hist::add_exact;
use crate::metrics::split::{ABSENT_NAME, MAX_VALUES, OTHER_NAME};
use crate::metrics::KeyCounters;
use crate::metrics::{new_histogram, Level, StatsTable};
use crate::outfile::same_path;
use crate::results::attribution;
use crate::results::hlog::{self, HlogContents, IntervalHistograms};
use crate::results::store::{
    self, aggregator_of, cells_of, endpoint_tables, load, split_tables, write_endpoint_histograms,
    write_split_histograms, Counters, HostInfo, Meta, ResultSet, SplitCells, ValueCells,
    ENDPOINTS_CSV, SPLIT_HLOG,
};
use crate::results::summary::{
    EndpointSummary, HeaderSplitSummary, RunInfo, Shard, Summary, TraceCounts, Warning,
};
use crate::results::writer::{
    endpoint_columns, endpoint_row, endpoint_values, parse_endpoint_row, timeline_header,
    ENDPOINTS_HEADER, TIMELINE_FAMILIES,
};
use crate::results::{prepare_result_dir, write_atomic};

/// The shards a result covers: its own, or its hosts' for a merged result.
fn shards_of(set: &ResultSet) -> Vec<Shard> {
    if set.meta.hosts.is_empty() {
        vec![set.meta.shard]
    } else {
        set.meta.hosts.iter().map(|h| h.shard).collect()
    }
}

fn hosts_of(set: &ResultSet) -> anyhow::Result<Vec<HostInfo>> {
    if !set.meta.hosts.is_empty() {
        return Ok(set.meta.hosts.clone());
    }
    let aggregator = aggregator_of(&set.counters, &set.hlog)?;
    let mut all = new_histogram();
    for ((op, _), s) in aggregator.table().cells() {
        if op.level() == Level::Operation {
            add_exact(&mut all, &s.latency);
        }
    }
    Ok(vec![HostInfo {
        host: set.meta.host.clone(),
        shard: set.meta.shard,
        actual_start: set.meta.actual_start.clone(),
        start_skew_ms: set.meta.start_skew_ms,
        requests: set.summary.totals.requests,
        errors: set.summary.totals.errors,
        p99_ms: (!all.is_empty()).then(|| all.value_at_quantile(0.99) as f64 / 1000.0),
        dir: set.dir.display().to_string(),
    }])
}

/// Refuses results that do not belong together.
#[allow(clippy::too_many_lines)]
fn check_compatible(sets: &[ResultSet], partial: bool) -> anyhow::Result<u32> {
    let first = &sets[0];
    let name = |s: &ResultSet| s.dir.display().to_string();
    for s in &sets[1..] {
        let differs = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            anyhow::anyhow!(
                "{} and {} differ in {what} ({a:?} vs {b:?}): they are not parts of one run",
                name(first),
                name(s)
            )
        };
        if s.summary.tool.version != first.summary.tool.version {
            return Err(differs(
                "creb-rs version",
                &first.summary.tool.version,
                &s.summary.tool.version,
            ));
        }
        if (
            s.summary.command.as_str(),
            s.summary.mode.as_str(),
            s.summary.model.as_str(),
        ) != (
            first.summary.command.as_str(),
            first.summary.mode.as_str(),
            first.summary.model.as_str(),
        ) {
            return Err(differs(
                "command or mode",
                &(&first.summary.command, &first.summary.mode),
                &(&s.summary.command, &s.summary.mode),
            ));
        }
        if s.meta.config_hash != first.meta.config_hash {
            return Err(differs(
                "configuration",
                &first.meta.config_hash,
                &s.meta.config_hash,
            ));
        }
        if s.meta.seed != first.meta.seed {
            return Err(differs("seed", &first.meta.seed, &s.meta.seed));
        }
        if s.summary.histograms != first.summary.histograms {
            return Err(differs(
                "histogram settings",
                &first.summary.histograms,
                &s.summary.histograms,
            ));
        }
        if (s.meta.interval_s - first.meta.interval_s).abs() > 1e-9 {
            return Err(differs(
                "interval length",
                &first.meta.interval_s,
                &s.meta.interval_s,
            ));
        }
    }
    // Shards: one count, every index exactly once.
    let mut owner: BTreeMap<u32, String> = BTreeMap::new();
    let count = shards_of(first).first().map_or(1, |s| s.count);
    for s in sets {
        for shard in shards_of(s) {
            if shard.count != count {
                bail!(
                    "{} is shard {}/{} but {} is of {} shards",
                    name(s),
                    shard.index,
                    shard.count,
                    name(first),
                    count
                );
            }
            if let Some(other) = owner.insert(shard.index, name(s)) {
                bail!(
                    "shard {}/{count} appears twice: in {other} and in {}",
                    shard.index,
                    name(s)
                );
            }
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| !owner.contains_key(i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() && !partial {
        bail!(
            "shards {} are missing (pass --partial to merge in stages)",
            missing.join(", ")
        );
    }
    Ok(count)
}

fn merge_hlogs(sets: &[ResultSet]) -> HlogContents {
    let mut merged = HlogContents {
        start_time: sets.iter().find_map(|s| s.hlog.start_time),
        intervals: BTreeMap::new(),
    };
    for s in sets {
        for (index, histograms) in &s.hlog.intervals {
            let slot = merged.intervals.entry(*index).or_default();
            for (tag, h) in histograms {
                slot.entry(tag.clone()).or_default().add(h);
            }
        }
    }
    merged
}

/// Per-endpoint numbers of results over several endpoints, merged exactly: the endpoints'
/// counters add (in `counters`, already merged), their whole-run histograms add, and the
/// summaries are recomputed; every host's down/up transitions are kept, named by host.
struct MergedEndpoints {
    histograms: IntervalHistograms,
    summaries: BTreeMap<String, EndpointSummary>,
}

fn merge_endpoints(
    sets: &[ResultSet],
    counters: &Counters,
    duration: Duration,
) -> anyhow::Result<Option<MergedEndpoints>> {
    let name = |s: &ResultSet| s.dir.display().to_string();
    if sets.iter().all(|s| s.summary.endpoints.is_none()) {
        return Ok(None);
    }
    let mut index_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut histograms = IntervalHistograms::new();
    let mut transitions: BTreeMap<String, Vec<crate::route::health::Transition>> = BTreeMap::new();
    for s in sets {
        let (Some(endpoints), Some(h)) = (&s.summary.endpoints, &s.endpoint_histograms) else {
            bail!(
                "{} has no per-endpoint numbers ({} or its summary's endpoints block is missing): it cannot be merged with runs over several endpoints",
                name(s),
                store::ENDPOINTS_HLOG
            );
        };
        for (url, e) in endpoints {
            if let Some(i) = index_of.insert(url, e.index) {
                if i != e.index {
                    bail!(
                        "{} lists endpoint {url} at position {} but another result has it at {i}: they are not parts of one run",
                        name(s),
                        e.index
                    );
                }
            }
            let host = s.meta.host.clone();
            transitions
                .entry(url.clone())
                .or_default()
                .extend(e.transitions.iter().map(|t| {
                    let mut t = t.clone();
                    t.host.get_or_insert_with(|| host.clone());
                    t
                }));
        }
        for (tag, v) in h {
            histograms.entry(tag.clone()).or_default().add(v);
        }
    }
    let mut summaries = BTreeMap::new();
    for (url, index, table) in endpoint_tables(counters, &histograms)? {
        let mut t = transitions.remove(&url).unwrap_or_default();
        t.sort_by(|a, b| a.offset_s.total_cmp(&b.offset_s));
        summaries.insert(
            url.clone(),
            EndpointSummary::build(index, Some(&table), duration, t),
        );
    }
    Ok(Some(MergedEndpoints {
        histograms,
        summaries,
    }))
}

/// `endpoints.csv` summed by interval: (start_s as written, counters by endpoint index).
type EndpointIntervals = BTreeMap<u64, (String, Vec<KeyCounters>)>;

/// Sums `endpoints.csv` (columns as in [`ENDPOINTS_HEADER`]) by interval and endpoint.
fn merge_endpoint_rows(sets: &[ResultSet]) -> EndpointIntervals {
    let mut merged = EndpointIntervals::new();
    for s in sets {
        for row in &s.endpoint_rows {
            let Some((interval, start, endpoint, counters)) = parse_endpoint_row(row) else {
                continue;
            };
            let (_, slots) = merged
                .entry(interval)
                .or_insert_with(|| (start, Vec::new()));
            if slots.len() <= endpoint {
                slots.resize(endpoint + 1, KeyCounters::default());
            }
            slots[endpoint].add(&counters);
        }
    }
    merged
}

fn write_endpoint_rows(dir: &Path, merged: &EndpointIntervals) -> anyhow::Result<()> {
    let path = dir.join(ENDPOINTS_CSV);
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    w.write_record(ENDPOINTS_HEADER)?;
    for (interval, (start, slots)) in merged {
        for (endpoint, c) in slots.iter().enumerate() {
            w.write_record(endpoint_row(*interval, start, endpoint, c))?;
        }
    }
    w.flush()?;
    Ok(())
}

fn merge_trace(sets: &[ResultSet]) -> Option<TraceCounts> {
    let mut any = false;
    let mut total = TraceCounts::default();
    for s in sets {
        if let Some(t) = &s.summary.trace {
            any = true;
            total.records += t.records;
            total.replayed += t.replayed;
            total.folded += t.folded;
            for (k, v) in &t.skipped {
                *total.skipped.entry(k.clone()).or_default() += v;
            }
        }
    }
    any.then_some(total)
}

/// The histogram of an operation family's latency in one interval (all size classes).
fn family_latency(
    histograms: &IntervalHistograms,
    op: &str,
    metric: &str,
) -> Option<hdrhistogram::Histogram<u64>> {
    let mut h: Option<hdrhistogram::Histogram<u64>> = None;
    for (tag, v) in histograms {
        let mut parts = tag.splitn(3, '.');
        let (Some(o), Some(_), Some(m)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if (o == op || op == "*") && m == metric {
            v.add_to(h.get_or_insert_with(crate::metrics::hist::new_histogram));
        }
    }
    h.filter(|h| !h.is_empty())
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

/// Sums the timelines by interval; recomputes rates and percentiles.
#[allow(clippy::too_many_lines)]
fn merge_timelines(
    sets: &[ResultSet],
    hlog: &HlogContents,
    interval: Duration,
) -> Vec<Vec<String>> {
    let header = timeline_header();
    let col = |name: &str| header.iter().position(|h| h == name);
    let summed = [
        "offered",
        "achieved",
        "in_flight",
        "ok",
        "errors",
        "bytes_sent",
        "bytes_received",
    ];
    let mut rows: BTreeMap<u64, BTreeMap<&str, u64>> = BTreeMap::new();
    for s in sets {
        for row in &s.timeline {
            let Some(index) = row.first().and_then(|v| v.parse::<u64>().ok()) else {
                continue;
            };
            let entry = rows.entry(index).or_default();
            for name in summed {
                if let Some(v) = col(name)
                    .and_then(|c| row.get(c))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    *entry.entry(name).or_default() += v;
                }
            }
            for op in TIMELINE_FAMILIES {
                let name = format!("{}_count", op.name());
                if let Some(v) = col(&name)
                    .and_then(|c| row.get(c))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    *entry.entry(op.name()).or_default() += v;
                }
            }
        }
    }
    let secs = interval.as_secs_f64().max(1e-9);
    let empty = IntervalHistograms::new();
    rows.into_iter()
        .map(|(index, sums)| {
            let get = |k: &str| sums.get(k).copied().unwrap_or(0);
            let histograms = hlog.intervals.get(&index).unwrap_or(&empty);
            let lag = family_latency(histograms, "*", "lag").map(|h| ms(h.value_at_quantile(0.99)));
            let mut row = vec![
                index.to_string(),
                format!("{:.3}", index as f64 * secs),
                format!("{secs:.3}"),
                get("offered").to_string(),
                get("achieved").to_string(),
                format!("{:.3}", get("offered") as f64 / secs),
                format!("{:.3}", get("achieved") as f64 / secs),
                get("in_flight").to_string(),
                get("ok").to_string(),
                get("errors").to_string(),
                get("bytes_sent").to_string(),
                get("bytes_received").to_string(),
                lag.unwrap_or_default(),
            ];
            for op in TIMELINE_FAMILIES {
                row.push(get(op.name()).to_string());
                match family_latency(histograms, op.name(), "latency") {
                    Some(h) => {
                        row.push(ms(h.value_at_quantile(0.5)));
                        row.push(ms(h.value_at_quantile(0.99)));
                    }
                    None => {
                        row.push(String::new());
                        row.push(String::new());
                    }
                }
            }
            row
        })
        .collect()
}

fn write_hlog(dir: &Path, hlog: &HlogContents, interval: Duration) -> anyhow::Result<()> {
    let path = dir.join("histograms.hlog");
    let mut out = BufWriter::new(
        File::create(&path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    let start = std::time::UNIX_EPOCH + hlog.start_time.unwrap_or_default();
    hlog::write_header(&mut out, start)?;
    let mut serializer = hlog::LogSerializer::new();
    for (index, histograms) in &hlog.intervals {
        let offset = interval.mul_f64(*index as f64);
        hlog::write_tagged(&mut out, &mut serializer, offset, interval, histograms)?;
    }
    out.flush()?;
    Ok(())
}

/// Writes `timeline.csv`; a run over several endpoints gets their columns from the
/// merged `endpoints.csv` numbers.
fn write_timeline(
    dir: &Path,
    rows: &[Vec<String>],
    endpoints: usize,
    per_interval: &EndpointIntervals,
) -> anyhow::Result<()> {
    let path = dir.join("timeline.csv");
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut header = timeline_header();
    header.extend(endpoint_columns(endpoints));
    w.write_record(header)?;
    for row in rows {
        let counters = row
            .first()
            .and_then(|v| v.parse::<u64>().ok())
            .and_then(|i| per_interval.get(&i))
            .map_or(&[][..], |(_, slots)| slots.as_slice());
        let mut row = row.clone();
        row.extend(endpoint_values(endpoints, counters));
        w.write_record(row)?;
    }
    w.flush()?;
    Ok(())
}

/// The header a merged result is split by, and each value's table.
type MergedSplit = (String, Vec<(String, StatsTable)>);

/// The merged `--split-by-header` tables (values matched by name), bounded as a run's are:
/// past [`MAX_VALUES`] values (shards may each have met others), the least counted are
/// folded into `(other)`; `counters` follows. `None` when no result split its operations.
fn merge_split(sets: &[ResultSet], counters: &mut Counters) -> anyhow::Result<Option<MergedSplit>> {
    let Some(split) = &counters.split else {
        return Ok(None);
    };
    let mut histograms = IntervalHistograms::new();
    for s in sets {
        let name = s.dir.display();
        let (Some(theirs), Some(h)) = (&s.counters.split, &s.split_histograms) else {
            bail!(
                "{name} has no --split-by-header numbers ({SPLIT_HLOG} or its counters are missing): it cannot be merged with results split by {}",
                split.header
            );
        };
        if theirs.header != split.header {
            bail!(
                "{name} is split by {}, another result by {}: they are not parts of one run",
                theirs.header,
                split.header
            );
        }
        for (tag, v) in h {
            histograms.entry(tag.clone()).or_default().add(v);
        }
    }
    let header = split.header.clone();
    let mut tables = split_tables(split, &histograms)?;
    let count = |t: &StatsTable| t.cells().map(|(_, s)| s.count).sum::<u64>();
    let special = |v: &str| v == ABSENT_NAME || v == OTHER_NAME;
    let mut named: Vec<(u64, String)> = tables
        .iter()
        .filter(|(v, _)| !special(v))
        .map(|(v, t)| (count(t), v.clone()))
        .collect();
    if named.len() > MAX_VALUES {
        named.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let folded: BTreeSet<String> = named
            .split_off(MAX_VALUES)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let mut other = StatsTable::default();
        tables.retain(|(v, t)| {
            let fold = folded.contains(v) || v == OTHER_NAME;
            if fold {
                other.add(t);
            }
            !fold
        });
        tables.push((OTHER_NAME.to_owned(), other));
    }
    counters.split = Some(SplitCells {
        header: header.clone(),
        values: tables
            .iter()
            .map(|(value, table)| ValueCells {
                value: value.clone(),
                cells: cells_of(table),
            })
            .collect(),
    });
    Ok(Some((header, tables)))
}

/// What a merge writes.
struct Merged<'a> {
    counters: &'a Counters,
    hlog: &'a HlogContents,
    interval: Duration,
    duration: Duration,
    endpoints: Option<&'a MergedEndpoints>,
    /// `--split-by-header`: each value's merged table.
    split: Option<&'a [(String, StatsTable)]>,
    /// The merged `attribution.hlog`.
    attribution: Option<&'a IntervalHistograms>,
    meta: &'a Meta,
    summary: &'a Summary,
}

/// The hosts' repository and client lists merged into `summary` (exact where no host can
/// hide a share of an entry, `results::attribution`); the merged entries' histograms.
fn merge_attribution(sets: &[ResultSet], summary: &mut Summary) -> Option<IntervalHistograms> {
    use attribution::{Kind, Part};
    if sets.iter().all(|s| s.summary.attribution.is_none()) {
        return None;
    }
    let parts = |kind: Kind| -> Vec<Part<'_>> {
        sets.iter()
            .map(|s| {
                let info = s.summary.attribution;
                // A host that attributed nothing saw no names, unless it is of a version
                // before attribution (then it ran operations).
                let (entries, complete) = match kind {
                    Kind::Repository => (
                        &s.summary.by_repository,
                        info.map(|i| i.repositories_complete),
                    ),
                    Kind::Client => (&s.summary.by_client, info.map(|i| i.clients_complete)),
                };
                Part {
                    entries,
                    complete: complete.unwrap_or(s.summary.totals.requests == 0),
                    histograms: s.attribution_histograms.as_ref(),
                }
            })
            .collect()
    };
    let (repositories, repositories_complete, mut histograms) =
        attribution::merge(&parts(Kind::Repository), Kind::Repository);
    let (clients, clients_complete, client_histograms) =
        attribution::merge(&parts(Kind::Client), Kind::Client);
    histograms.extend(client_histograms);
    summary.by_repository = repositories;
    summary.by_client = clients;
    summary.attribution = Some(attribution::AttributionInfo {
        listed: crate::metrics::attribution::LISTED,
        tracked: crate::metrics::attribution::TRACKED,
        repositories_complete,
        clients_complete,
    });
    Some(histograms)
}

/// Writes the merged result directory `out` (summary.json last).
fn write_merged(
    out: &Path,
    sets: &[ResultSet],
    merged: &Merged<'_>,
    force: bool,
) -> anyhow::Result<()> {
    prepare_result_dir(out, force)?;
    write_hlog(out, merged.hlog, merged.interval)?;
    let endpoint_rows = merge_endpoint_rows(sets);
    write_timeline(
        out,
        &merge_timelines(sets, merged.hlog, merged.interval),
        merged.endpoints.map_or(0, |e| e.summaries.len()),
        &endpoint_rows,
    )?;
    if let Some(e) = merged.endpoints {
        let tables = endpoint_tables(merged.counters, &e.histograms)?;
        let refs: Vec<(usize, &crate::metrics::StatsTable)> =
            tables.iter().map(|(_, i, t)| (*i, t)).collect();
        let start = std::time::UNIX_EPOCH + merged.hlog.start_time.unwrap_or_default();
        write_endpoint_histograms(out, start, merged.duration, &refs)?;
        if !endpoint_rows.is_empty() {
            write_endpoint_rows(out, &endpoint_rows)?;
        }
    }
    if let Some(tables) = merged.split {
        let refs: Vec<(String, &StatsTable)> = tables.iter().map(|(v, t)| (v.clone(), t)).collect();
        let start = std::time::UNIX_EPOCH + merged.hlog.start_time.unwrap_or_default();
        write_split_histograms(out, start, merged.duration, &refs)?;
        let kept: BTreeSet<&str> = tables.iter().map(|(v, _)| v.as_str()).collect();
        split::write_rows(out, &split::merge_rows(sets, &kept))?;
    }
    if let Some(tagged) = merged.attribution {
        let start = std::time::UNIX_EPOCH + merged.hlog.start_time.unwrap_or_default();
        store::write_attribution_histograms(out, start, merged.duration, tagged)?;
    }
    let mut json = serde_json::to_vec_pretty(merged.counters)?;
    json.push(b'\n');
    write_atomic(out, "counters.json", &json)?;
    let mut json = serde_json::to_vec_pretty(merged.meta)?;
    json.push(b'\n');
    write_atomic(out, "meta.json", &json)?;
    crate::results::write_summary(out, merged.summary)?;
    Ok(())
}

/// Merges result directories into `out`.
pub fn merge(
    dirs: &[PathBuf],
    out: &Path,
    partial: bool,
) -> anyhow::Result<(Summary, Vec<HostInfo>)> {
    merge_into(dirs, out, partial, false)
}

/// The results in `dirs`, read; none of them may be `out` (or its prewarm), which the merge
/// replaces.
fn load_all(dirs: &[PathBuf], out: &Path) -> anyhow::Result<Vec<ResultSet>> {
    if dirs.is_empty() {
        bail!("nothing to merge");
    }
    let prewarm = out.join(crate::results::PREWARM_DIR);
    if let Some(d) = dirs
        .iter()
        .find(|d| same_path(d, out) || same_path(d, &prewarm))
    {
        bail!(
            "--output-dir {}: {} is one of the results being merged; write the merge elsewhere",
            out.display(),
            d.display()
        );
    }
    dirs.iter()
        .map(|d| load(d).with_context(|| format!("cannot merge {}", d.display())))
        .collect()
}

/// Every host's warnings, each said with its host.
fn host_warnings(sets: &[ResultSet]) -> Vec<Warning> {
    let mut warnings = Vec::new();
    for s in sets {
        for w in &s.summary.warnings {
            warnings.push(Warning {
                kind: w.kind.clone(),
                message: format!("{}: {}", s.meta.host, w.message),
            });
        }
    }
    warnings
}

/// [`merge`]; an earlier result in `out` is replaced (never one being merged), and with
/// `force` files of a result's names that creb-rs did not write too.
#[allow(clippy::too_many_lines)]
pub fn merge_into(
    dirs: &[PathBuf],
    out: &Path,
    partial: bool,
    force: bool,
) -> anyhow::Result<(Summary, Vec<HostInfo>)> {
    let sets = load_all(dirs, out)?;
    let count = check_compatible(&sets, partial)?;
    let interval = Duration::from_secs_f64(sets[0].meta.interval_s.max(1e-3));

    let mut counters: Counters = sets[0].counters.clone();
    for s in &sets[1..] {
        counters.add(&s.counters);
    }
    let hlog = merge_hlogs(&sets);
    let aggregator = aggregator_of(&counters, &hlog)?.with_batch_interval(interval);
    let mut hosts = Vec::new();
    for s in &sets {
        hosts.extend(hosts_of(s)?);
    }
    hosts.sort_by_key(|h| h.shard.index);
    let first = &sets[0];
    let duration = sets
        .iter()
        .map(|s| s.summary.duration_s)
        .fold(0.0, f64::max);
    let started = sets
        .iter()
        .filter_map(|s| humantime::parse_rfc3339_weak(&s.summary.started_at).ok())
        .min()
        .unwrap_or_else(std::time::SystemTime::now);
    let endpoints = merge_endpoints(&sets, &counters, Duration::from_secs_f64(duration))?;
    let mut summary = Summary::build(
        RunInfo {
            command: first.summary.command.clone(),
            mode: first.summary.mode.clone(),
            model: first.summary.model.clone(),
            concurrency: sets.iter().map(|s| s.summary.concurrency).sum(),
            registry: first.summary.registry.clone(),
            seed: first.summary.seed,
            shard: Shard { index: 0, count },
            started_at: started,
            duration: Duration::from_secs_f64(duration),
            interrupted: sets.iter().any(|s| s.summary.interrupted),
            trace: merge_trace(&sets),
            warnings: host_warnings(&sets),
            checks: None,
            config: crate::results::config::RunConfig::Read(first.summary.config.clone()),
        },
        &aggregator,
    );
    summary.endpoints = endpoints.as_ref().map(|e| e.summaries.clone());
    let split = merge_split(&sets, &mut counters)?;
    let attribution = merge_attribution(&sets, &mut summary);
    summary.split_by_header = split.as_ref().map(|(header, tables)| {
        HeaderSplitSummary::from_tables(
            header,
            tables.iter().map(|(v, t)| (v.clone(), t)).collect(),
        )
    });
    let mut meta: Meta = first.meta.clone();
    meta.host = store::hostname();
    meta.shard = Shard { index: 0, count };
    meta.hosts = hosts.clone();
    meta.start_skew_ms = None;

    let merged = Merged {
        counters: &counters,
        hlog: &hlog,
        interval,
        duration: Duration::from_secs_f64(duration),
        endpoints: endpoints.as_ref(),
        split: split.as_ref().map(|(_, tables)| tables.as_slice()),
        attribution: attribution.as_ref(),
        meta: &meta,
        summary: &summary,
    };
    write_merged(out, &sets, &merged, force)?;
    let covered: BTreeSet<u32> = hosts.iter().map(|h| h.shard.index).collect();
    if covered.len() as u32 != count {
        eprintln!(
            "creb-rs: partial merge: {} of {count} shards",
            covered.len()
        );
    }
    Ok((summary, hosts))
}
