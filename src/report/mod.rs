//! What people read, rendered from results: the summary table printed on stdout after a
//! run, the per-host table of a merged run, the operations as CSV, the self-contained HTML
//! page ([`html`], with its [`chart`]s), and the side-by-side comparison of two runs
//! ([`compare`]). Rendering only: the commands decide where it goes, and diagnostics go
//! to stderr.

pub mod analysis;
pub mod capacity;
pub mod chart;
pub mod compare;
pub mod comparison;
pub mod html;
pub mod page;
pub mod run;

use std::fmt::Write as _;

use crate::metrics::hist::Percentiles;
use crate::results::attribution::Attributed;
use crate::results::config::ConfigFacts;
use crate::results::registry_metrics::RegistryMetricsRecord;
use crate::results::store::{EndpointLink, HostInfo};
use crate::results::summary::{OpSummary, Summary};
use crate::units::ByteSize;

/// A latency in milliseconds for a table column: µs below 1 ms, ms below 1 s, seconds
/// above (never `7893ms` beside `10.3s`).
fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1}s", v / 1000.0)
    } else if v >= 999.5 {
        format!("{:.2}s", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}ms")
    } else if v >= 1.0 {
        format!("{v:.1}ms")
    } else {
        format!("{:.0}µs", v * 1000.0)
    }
}

/// Under the operations table: each latency percentile with its 95% interval, where the run
/// establishes one (`p99 783ms (760ms–810ms)`), and what `-` means when a percentile is not
/// shown.
fn intervals(out: &mut String, summary: &Summary) {
    let mut lines = Vec::new();
    let mut too_few = false;
    for (name, s) in &summary.operations {
        let Some(l) = &s.latency_ms else { continue };
        too_few |= l.p50.is_none() || l.p90.is_none() || l.p99.is_none();
        let shown: Vec<String> = [
            ("p50", l.p50, l.p50_ci),
            ("p90", l.p90, l.p90_ci),
            ("p99", l.p99, l.p99_ci),
            ("p99.9", l.p999, l.p999_ci),
        ]
        .into_iter()
        .filter_map(|(label, v, ci)| {
            let [lo, hi] = ci?;
            Some(format!("{label} {} ({}–{})", ms(v?), ms(lo), ms(hi)))
        })
        .collect();
        if !shown.is_empty() {
            lines.push(format!("{name:<16} {}", shown.join("  ")));
        }
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\n95% intervals (docs/measurement.md)");
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
    }
    if too_few {
        let _ = writeln!(out, "- : too few samples to estimate that percentile");
    }
}

/// Whether the run was steady, in one line (absent from results of older versions).
pub fn steady_line(summary: &Summary) -> Option<String> {
    let s = summary.steady_state.as_ref()?;
    let warmup = if s.warmup_s > 0.0 {
        format!(", a warm-up of {:.1}s", s.warmup_s)
    } else {
        String::new()
    };
    let batch = if s.batch_s < 1.0 {
        format!("{:.0}ms", s.batch_s * 1000.0)
    } else {
        format!("{:.1}s", s.batch_s)
    };
    Some(match s.steady {
        Some(true) => format!("steady: yes ({} batches of {batch}{warmup})", s.batches),
        Some(false) => format!(
            "steady: NO — {}",
            s.drift
                .iter()
                .map(|d| d.describe())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        None => format!(
            "steady: too short to tell ({} batches of {batch})",
            s.batches
        ),
    })
}

/// A percentile for a table column, `-` where the run has too few samples to estimate it.
fn oms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), ms)
}

fn rate(bytes_per_s: f64) -> String {
    format!("{:.1}", bytes_per_s / (1024.0 * 1024.0))
}

fn row(out: &mut String, name: &str, s: &OpSummary) {
    let (p50, p90, p99, max) = match &s.latency_ms {
        Some(Percentiles {
            p50, p90, p99, max, ..
        }) => (oms(*p50), oms(*p90), oms(*p99), ms(*max)),
        None => ("-".into(), "-".into(), "-".into(), "-".into()),
    };
    let _ = writeln!(
        out,
        "{name:<16} {:>8} {:>8} {:>7} {p50:>9} {p90:>9} {p99:>9} {max:>9} {:>9.1} {:>8}",
        s.count,
        s.ok,
        s.errors,
        s.requests_per_s,
        rate(s.bytes_per_s)
    );
}

/// The human summary table.
pub fn render_text(summary: &Summary) -> String {
    render_text_with(summary, &[], &[])
}

/// Which shards a result holds, as its table's header says it (with its leading space):
/// nothing for a run that was not sharded, `shard I/N` for one host's share,
/// `merged N shards` (or `merged K of N shards`) for a merge of `hosts`.
fn shards_label(summary: &Summary, hosts: &[HostInfo]) -> String {
    let count = summary.shard.count;
    if hosts.is_empty() {
        if count <= 1 {
            return String::new();
        }
        return format!("  shard {}/{count}", summary.shard.index);
    }
    let held: std::collections::BTreeSet<u32> = hosts.iter().map(|h| h.shard.index).collect();
    if held.len() as u32 == count {
        format!(
            "  merged {count} shard{}",
            if count == 1 { "" } else { "s" }
        )
    } else {
        format!("  merged {} of {count} shards", held.len())
    }
}

/// What a replay's prewarm pushed and found, in a line (and a blank one after it).
pub(crate) fn prewarm_line(report: &crate::exec::prewarm::PrewarmReport) -> String {
    let digests = if report.digests_learned + report.digests_computed > 0 {
        format!(
            "; digests: {} computed while sending, {} after",
            report.digests_learned, report.digests_computed
        )
    } else {
        String::new()
    };
    format!(
        "prewarm: {} blobs pushed, {} present; {} manifests pushed, {} present; {} failed{digests}\n",
        report.blobs_pushed,
        report.blobs_present,
        report.manifests_pushed,
        report.manifests_present,
        report.failed
    )
}

/// A result directory as text (`report OUT`): the hosts of a merged run, the table, and
/// the registry's own metrics when they were scraped.
pub fn render_result(set: &crate::results::ResultSet) -> String {
    let mut t = String::new();
    if !set.meta.hosts.is_empty() {
        t.push_str(&host_table(&set.meta.hosts));
        t.push('\n');
    }
    t.push_str(&render_text_with(
        &set.summary,
        &set.meta.endpoints,
        &set.meta.hosts,
    ));
    if !set.registry_metrics.is_empty() {
        t.push('\n');
        t.push_str(&registry_table(&set.registry_metrics));
    }
    t
}

/// The first lines of the table: what ran against which registry, and its totals.
fn head_lines(out: &mut String, summary: &Summary, hosts: &[HostInfo]) {
    // A pull generates nothing, so its seed means nothing.
    let seed = if summary.command == "pull" {
        String::new()
    } else {
        format!("  seed {}", summary.seed)
    };
    // How downloads were checked changes what a read costs creb-rs: said with the model.
    // (A prewarm and a push read nothing back.)
    let verify = ConfigFacts::of(&summary.config)
        .verify
        .filter(|_| summary.mode != "prewarm")
        .map_or(String::new(), |v| format!("  verify {v}"));
    let _ = writeln!(
        out,
        "creb-rs {} → {}  [{}]{seed}{verify}{}",
        summary.command,
        summary.registry,
        summary.model_label(),
        shards_label(summary, hosts)
    );
    let t = &summary.totals;
    let _ = writeln!(
        out,
        "duration {:.2}s  operations {} (ok {}, errors {})  http requests {}  sent {}  received {}  {:.1} op/s{}",
        summary.duration_s,
        t.requests,
        t.ok,
        t.errors,
        t.http_requests,
        ByteSize(t.bytes_sent),
        ByteSize(t.bytes_received),
        summary.throughput.requests_per_s,
        if summary.interrupted { "  INTERRUPTED" } else { "" }
    );
}

/// The human summary table, with how each endpoint was reached (from `meta.json`) and, for
/// a merged result, the hosts it holds.
pub fn render_text_with(summary: &Summary, links: &[EndpointLink], hosts: &[HostInfo]) -> String {
    let mut out = String::new();
    head_lines(&mut out, summary, hosts);
    if let Some(line) = steady_line(summary) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(trace) = &summary.trace {
        let skipped: u64 = trace.skipped.values().sum();
        let _ = writeln!(
            out,
            "trace records {}  replayed {}  folded {}  skipped {}",
            trace.records, trace.replayed, trace.folded, skipped
        );
    }
    for e in links {
        let _ = writeln!(out, "endpoint {}  {}", e.url, e.link.describe());
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "operation", "count", "ok", "errors", "p50", "p90", "p99", "max", "req/s", "MiB/s"
    );
    for (name, s) in &summary.operations {
        row(&mut out, name, s);
    }
    for (name, s) in &summary.sessions {
        row(&mut out, name, s);
    }
    intervals(&mut out, summary);
    schedule_lines(&mut out, summary);
    endpoint_lines(&mut out, summary);
    split_lines(&mut out, summary);
    attribution_lines(&mut out, "repository", &summary.by_repository);
    attribution_lines(&mut out, "client", &summary.by_client);
    closing_lines(&mut out, summary);
    out
}

/// Delay mode: each operation's service time and schedule lag.
fn schedule_lines(out: &mut String, summary: &Summary) {
    let delay: Vec<_> = summary
        .operations
        .iter()
        .filter_map(|(n, s)| s.schedule_lag_ms.as_ref().map(|lag| (n, lag, s)))
        .collect();
    if !delay.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "schedule", "svc p50", "svc p99", "lag p50", "lag p99", "lag max", "late>10ms"
        );
        for (name, lag, s) in delay {
            let (sp50, sp99) = s
                .service_ms
                .as_ref()
                .map_or(("-".into(), "-".into()), |p| (oms(p.p50), oms(p.p99)));
            let late = s.late_starts.map_or(0, |l| l.over_10ms);
            let _ = writeln!(
                out,
                "{name:<16} {sp50:>9} {sp99:>9} {:>9} {:>9} {:>9} {late:>10}",
                oms(lag.p50),
                oms(lag.p99),
                ms(lag.max)
            );
        }
    }
}

/// Several endpoints: each one's share, errors, busiest operation and states.
fn endpoint_lines(out: &mut String, summary: &Summary) {
    if let Some(endpoints) = &summary.endpoints {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<32} {:>8} {:>7} {:>7} {:>9} {:>14} {:>9} {:>9}  state",
            "endpoint", "count", "share", "errors", "req/s", "busiest op", "p50", "p99"
        );
        let all = summary.totals.requests.max(1) as f64;
        let mut by_index: Vec<_> = endpoints.iter().collect();
        by_index.sort_by_key(|(_, e)| e.index);
        for (url, e) in by_index {
            let main = e.busiest_op();
            let op = main.map_or("-", |(name, _)| name);
            let (p50, p99) = main
                .and_then(|(_, o)| o.latency_ms.as_ref())
                .map_or(("-".into(), "-".into()), |p| (oms(p.p50), oms(p.p99)));
            let state = match e.transitions.as_slice() {
                [] => "up".to_owned(),
                list => list
                    .iter()
                    .map(|t| format!("{}@{:.1}s", t.state, t.offset_s))
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            let _ = writeln!(
                out,
                "{url:<32} {:>8} {:>6.1}% {:>7} {:>9.1} {op:>14} {p50:>9} {p99:>9}  {state}",
                e.totals.requests,
                e.totals.requests as f64 * 100.0 / all,
                e.totals.errors,
                e.totals.requests as f64 / summary.duration_s.max(1e-9),
            );
        }
    }
}

/// The errors and events by kind, the warnings and the thresholds' verdicts.
fn closing_lines(out: &mut String, summary: &Summary) {
    if !summary.errors.is_empty() {
        let _ = writeln!(out);
        let parts: Vec<String> = summary
            .errors
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "errors: {}", parts.join(" "));
    }
    if !summary.events.is_empty() {
        let parts: Vec<String> = summary
            .events
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "events: {}", parts.join(" "));
    }
    for w in &summary.warnings {
        let _ = writeln!(out, "warning [{}]: {}", w.kind, w.message);
    }
    for t in &summary.thresholds {
        let verdict = match t.verdict.as_str() {
            "held" => "HELD (fails the run)",
            "clear" => "clear",
            _ => "not checked (nothing measured)",
        };
        let measured = t.measured.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "threshold '{}': {verdict}, measured {measured}",
            t.expression
        );
    }
}

/// `--split-by-header`: a line per operation and header value, with its share of the
/// operation's count and its latency.
fn split_lines(out: &mut String, summary: &Summary) {
    let Some(split) = &summary.split_by_header else {
        return;
    };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<16} {:<20} {:>8} {:>7} {:>9} {:>9} {:>9}",
        "operation", split.header, "count", "share", "p50", "p99", "max"
    );
    for (op, total) in &summary.operations {
        for (value, ops) in &split.values {
            let Some(s) = ops.get(op) else { continue };
            let (p50, p99, max) = s
                .latency_ms
                .as_ref()
                .map_or(("-".into(), "-".into(), "-".into()), |p| {
                    (oms(p.p50), oms(p.p99), ms(p.max))
                });
            let _ = writeln!(
                out,
                "{op:<16} {value:<20} {:>8} {:>6.1}% {p50:>9} {p99:>9} {max:>9}",
                s.count,
                s.count as f64 * 100.0 / total.count.max(1) as f64,
            );
        }
    }
    if let Some(all) = split.hit_ratio.get("all") {
        let per_op: Vec<String> = split
            .hit_ratio
            .iter()
            .filter(|(op, h)| *op != "all" && h.hits > 0)
            .map(|(op, h)| format!("{op} {:.1}%", h.requests * 100.0))
            .collect();
        let _ = writeln!(
            out,
            "cache hits: {:.1}% of operations, {:.1}% of bytes{}",
            all.requests * 100.0,
            all.bytes * 100.0,
            if per_op.is_empty() {
                String::new()
            } else {
                format!(" ({})", per_op.join(", "))
            }
        );
    }
}

/// Lines shown of each attribution list (summary.json and the HTML report hold them all).
const ATTRIBUTION_LINES: usize = 5;

/// The repositories or clients that cost most, heaviest in time first; `≥` marks figures
/// counted from when the entry joined a bounded list.
fn attribution_lines(out: &mut String, what: &str, entries: &[Attributed]) {
    if entries.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<32} {:>8} {:>7} {:>9} {:>10} {:>9} {:>9}",
        format!("{what} (by time)"),
        "count",
        "errors",
        "time",
        "bytes",
        "p50",
        "p99"
    );
    for e in entries.iter().take(ATTRIBUTION_LINES) {
        let (p50, p99) = e
            .latency_ms
            .as_ref()
            .map_or(("-".into(), "-".into()), |p| (oms(p.p50), oms(p.p99)));
        let mark = if e.exact { "" } else { "≥ " };
        let _ = writeln!(
            out,
            "{:<32} {:>8} {:>7} {:>9} {:>10} {p50:>9} {p99:>9}",
            format!("{mark}{}", e.name),
            e.count,
            e.errors,
            format!("{:.2}s", e.time_s),
            ByteSize(e.bytes).to_string(),
        );
    }
    if entries.len() > ATTRIBUTION_LINES {
        let _ = writeln!(
            out,
            "… {} more by requests, bytes, errors or slowness in summary.json and the HTML \
             report",
            entries.len() - ATTRIBUTION_LINES
        );
    }
    slowest_lines(out, what, entries);
}

/// The slowest names by the p90 of their successes, slowest first.
fn slowest_lines(out: &mut String, what: &str, entries: &[Attributed]) {
    let slow = crate::results::attribution::slowest(entries);
    if slow.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<32} {:>9} {:>9} {:>8}",
        format!(
            "slowest {what} (p90, ≥{} ok)",
            crate::metrics::attribution::SLOW_MIN_SUCCESSES
        ),
        "p90",
        "p99",
        "count"
    );
    for e in slow.into_iter().take(ATTRIBUTION_LINES) {
        let l = e.latency_ms.as_ref();
        let mark = if e.exact { "" } else { "≥ " };
        let _ = writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>8}",
            format!("{mark}{}", e.name),
            oms(l.and_then(|p| p.p90)),
            oms(l.and_then(|p| p.p99)),
            e.count
        );
    }
}

/// One registry metrics endpoint in a line of its table: its request count beside
/// creb-rs's, whether they agree, its mean request duration and busiest interval.
#[derive(Debug)]
pub struct RegistryLine {
    pub url: String,
    pub registry_requests: String,
    pub creb_requests: String,
    pub agreement: String,
    pub mean_duration: String,
    pub busiest: String,
}

/// The cells of the registry metrics table, shared by the text and HTML reports.
pub fn registry_lines(records: &[RegistryMetricsRecord]) -> Vec<RegistryLine> {
    records
        .iter()
        .map(|r| {
            let agreement = match (&r.error, r.registry_requests) {
                (Some(e), _) => format!("not read: {e}"),
                (None, None) => "no request counter".into(),
                (None, Some(n)) if n.round() as u64 == r.creb_http_requests => "agree".into(),
                (None, Some(n)) => format!(
                    "differ by {:+}",
                    n.round() as i64 - i64::try_from(r.creb_http_requests).unwrap_or(i64::MAX)
                ),
            };
            let busiest = r
                .intervals
                .iter()
                .filter_map(|i| Some((i.requests? / (i.to_s - i.from_s).max(1e-9), i)))
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map_or("-".into(), |(rate, i)| {
                    format!("{rate:.1} req/s at {:.0}s", i.from_s)
                });
            RegistryLine {
                url: r.url.clone(),
                registry_requests: r
                    .registry_requests
                    .map_or("-".into(), |n| format!("{n:.0}")),
                creb_requests: r.creb_http_requests.to_string(),
                agreement,
                mean_duration: r
                    .registry_mean_duration_s
                    .map_or("-".into(), |s| ms(s * 1e3)),
                busiest,
            }
        })
        .collect()
}

/// The registry's own metrics (`--registry-metrics`) beside creb-rs's counts.
pub fn registry_table(records: &[RegistryMetricsRecord]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "registry's own metrics\n{:<40} {:>9} {:>9} {:>9}  {:<22} busiest interval",
        "endpoint", "requests", "creb-rs", "mean", "agreement"
    );
    for l in registry_lines(records) {
        let _ = writeln!(
            out,
            "{:<40} {:>9} {:>9} {:>9}  {:<22} {}",
            l.url, l.registry_requests, l.creb_requests, l.mean_duration, l.agreement, l.busiest
        );
    }
    out
}

/// The per-host table: an unhealthy host stands out.
pub fn host_table(hosts: &[HostInfo]) -> String {
    let mut p99s: Vec<f64> = hosts.iter().filter_map(|h| h.p99_ms).collect();
    p99s.sort_by(f64::total_cmp);
    let median_p99 = p99s.get(p99s.len() / 2).copied();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>7} {:>9} {:>7} {:>10} {:>11}  dir",
        "host", "shard", "requests", "errors", "p99", "start skew"
    );
    for h in hosts {
        let p99 = h.p99_ms.map_or("-".into(), |v| format!("{v:.1}ms"));
        let skew = h.start_skew_ms.map_or("-".into(), |v| format!("{v:+.1}ms"));
        let slow = match (h.p99_ms, median_p99) {
            (Some(v), Some(m)) if m > 0.0 && v > 2.0 * m => "  ← p99 over 2× the median",
            _ => "",
        };
        let failing = if h.requests > 0 && h.errors * 100 > h.requests {
            "  ← errors over 1%"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<20} {:>7} {:>9} {:>7} {:>10} {:>11}  {}{slow}{failing}",
            h.host,
            format!("{}/{}", h.shard.index, h.shard.count),
            h.requests,
            h.errors,
            p99,
            skew,
            h.dir
        );
    }
    out
}

/// The columns of the operations table as CSV.
const CSV_COLUMNS: [&str; 16] = [
    "operation",
    "count",
    "ok",
    "errors",
    "bytes",
    "requests_per_s",
    "bytes_per_s",
    "mean_ms",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "service_p99_ms",
    "lag_p99_ms",
    "value",
];

/// The operations table as CSV: one row per operation and session.
pub fn render_csv(summary: &Summary) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_COLUMNS)?;
    let num = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_default();
    // One row: operation, its counts and rates, its latency, then the rest.
    let row = |name: &str, counts: [String; 6], l: Option<Percentiles>, rest: [String; 3]| {
        let mut cells = vec![name.to_owned()];
        cells.extend(counts);
        cells.extend([
            num(l.map(|l| l.mean)),
            num(l.and_then(|l| l.p50)),
            num(l.and_then(|l| l.p90)),
            num(l.and_then(|l| l.p99)),
            num(l.and_then(|l| l.p999)),
            num(l.map(|l| l.max)),
        ]);
        cells.extend(rest);
        cells
    };
    for (name, s) in summary.operations.iter().chain(summary.sessions.iter()) {
        let counts = [
            s.count.to_string(),
            s.ok.to_string(),
            s.errors.to_string(),
            s.bytes.to_string(),
            format!("{}", s.requests_per_s),
            format!("{}", s.bytes_per_s),
        ];
        let rest = [
            num(s.service_ms.and_then(|l| l.p99)),
            num(s.schedule_lag_ms.and_then(|l| l.p99)),
            String::new(),
        ];
        w.write_record(row(name, counts, s.latency_ms, rest))?;
    }
    // `--split-by-header`: a row per operation and value of the header (`value`).
    let secs = summary.duration_s.max(1e-9);
    for (value, ops) in summary.split_by_header.iter().flat_map(|s| &s.values) {
        for (name, c) in ops {
            let counts = [
                c.count.to_string(),
                c.ok.to_string(),
                c.errors.to_string(),
                c.bytes.to_string(),
                format!("{}", c.count as f64 / secs),
                format!("{}", c.bytes as f64 / secs),
            ];
            let rest = [String::new(), String::new(), value.clone()];
            w.write_record(row(name, counts, c.latency_ms, rest))?;
        }
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(ms(0.25), "250µs");
        assert_eq!(ms(12.34), "12.3ms");
        assert_eq!(ms(250.0), "250ms");
        assert_eq!(ms(12_500.0), "12.5s");
        // One unit per magnitude: seconds from 1 s on, never `7893ms`.
        assert_eq!(ms(999.0), "999ms");
        assert_eq!(ms(999.7), "1.00s");
        assert_eq!(ms(7893.0), "7.89s");
        assert_eq!(ms(10_300.0), "10.3s");
    }
}
