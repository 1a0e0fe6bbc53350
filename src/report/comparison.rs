//! The combined view of a run: `OUT/comparison.csv` (one row per cell) and
//! `OUT/comparison.html` (self-contained: the table, one bar chart per experiment comparing
//! the registries in the latest round, and — with more than one round — latency over time
//! per registry). Both are rewritten after every cell from the checkpoint and the cells'
//! `summary.json`, so they are always current, also in a run that lasts weeks.
//!
//! Every number is read from a cell's `summary.json` as written; nothing is recomputed. A
//! cell without a result (an unreachable registry) still has its row, with its status and
//! message and empty numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::chart::{
    bar_chart, escape, line_chart, BarChart, LineChart, Panel, Series, XScale, YScale,
};
use super::page;
use crate::experiment::checkpoint::{CellRecord, Checkpoint};
use crate::experiment::config::ExperimentFile;
use crate::metrics::hist::Percentiles;
use crate::results::capacity::CapacityResult;
use crate::results::summary::OpSummary;
use crate::results::{read_summary, write_atomic, Summary};

/// A line of the over-time chart: its label, whether it is dashed, and its percentile.
type Quantile = (&'static str, bool, fn(&Percentiles) -> Option<f64>);

/// The lowest and highest value of a bar's repetitions.
type Range = Option<(f64, f64)>;

/// The operations (and sessions) with their own columns, in this order.
pub const MAIN_OPS: [&str; 8] = [
    "manifest_get",
    "manifest_head",
    "manifest_put",
    "blob_get",
    "blob_head",
    "blob_upload",
    "image_pull",
    "image_push",
];

/// The operation a chart of an experiment shows: the first of these the results have —
/// uploads for a push, downloads otherwise.
fn headline_order(kind: &str) -> [&'static str; 5] {
    if kind == "push" {
        [
            "blob_upload",
            "manifest_put",
            "blob_head",
            "blob_get",
            "manifest_get",
        ]
    } else {
        [
            "blob_get",
            "manifest_get",
            "blob_upload",
            "manifest_put",
            "blob_head",
        ]
    }
}

/// One cell with its summary, if it has one (a capacity cell: its answer instead).
#[derive(Debug)]
pub struct Row {
    pub record: CellRecord,
    pub kind: String,
    pub summary: Option<Summary>,
    pub capacity: Option<CapacityFacts>,
}

/// A capacity cell's answer, as its capacity.json says it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityFacts {
    pub speed: Option<f64>,
    pub requests_per_s: Option<f64>,
    pub at_least: bool,
    pub limited_by: String,
    /// The search or ladder was cut off by a stop.
    pub stopped: bool,
}

impl CapacityFacts {
    /// The answer in `dir`'s capacity.json, if it holds one.
    pub fn read(dir: &Path) -> Option<CapacityFacts> {
        let c = CapacityResult::read(dir).ok()?;
        Some(CapacityFacts {
            speed: c.capacity.speed,
            requests_per_s: c.capacity.requests_per_s,
            at_least: c.capacity.at_least,
            limited_by: c.limited_by.name().to_owned(),
            stopped: c.stopped(),
        })
    }

    /// In a line: `capacity 4.000x, 280.0 op/s (limited by registry)`.
    pub fn describe(&self) -> String {
        let at_least = if self.at_least { "at least " } else { "" };
        match (self.speed, self.requests_per_s) {
            (Some(speed), Some(rate)) => format!(
                "capacity {at_least}{speed:.3}x, {rate:.1} op/s (limited by {})",
                self.limited_by
            ),
            _ => format!("no load sustained (limited by {})", self.limited_by),
        }
    }
}

fn op<'a>(s: &'a Summary, name: &str) -> Option<&'a OpSummary> {
    s.operations.get(name).or_else(|| s.sessions.get(name))
}

/// The headline operation of an experiment's results.
fn headline(kind: &str, rows: &[&Row]) -> Option<&'static str> {
    headline_order(kind).into_iter().find(|name| {
        rows.iter()
            .filter_map(|r| r.summary.as_ref())
            .any(|s| op(s, name).is_some_and(|o| o.ok > 0))
    })
}

/// The rows of every recorded cell, in run order.
pub fn rows(file: &ExperimentFile, checkpoint: &Checkpoint, out: &Path) -> Vec<Row> {
    let order = |c: &CellRecord| {
        let e = file
            .experiments
            .iter()
            .position(|x| x.spec.name == c.experiment)
            .unwrap_or(usize::MAX);
        let r = file
            .registries
            .iter()
            .position(|x| x.name == c.registry)
            .unwrap_or(usize::MAX);
        (c.round, e, r, c.rep)
    };
    let mut records: Vec<&CellRecord> = checkpoint.cells.iter().collect();
    records.sort_by_key(|c| order(c));
    records
        .into_iter()
        .map(|c| Row {
            record: c.clone(),
            kind: file
                .experiments
                .iter()
                .find(|x| x.spec.name == c.experiment)
                .map_or("", |x| x.spec.kind.name())
                .to_owned(),
            summary: read_summary(&out.join(&c.dir)).ok(),
            capacity: CapacityFacts::read(&out.join(&c.dir)),
        })
        .collect()
}

/// The table `run` prints at its end: one line per cell it ran (`ran` holds each cell's
/// experiment, registry, round and repetition), then where the comparison was written.
pub fn ran_text(
    file: &ExperimentFile,
    checkpoint: &Checkpoint,
    out: &Path,
    ran: &[(String, String, u64, u32)],
) -> String {
    let mut text = format!(
        "{:<20} {:<16} {:>5} {:>4} {:<12} {:>9} {:>7} {:>9}  result\n",
        "experiment", "registry", "round", "rep", "status", "requests", "errors", "op/s"
    );
    let was_run = |c: &CellRecord| {
        ran.iter().any(|(e, g, round, rep)| {
            &c.experiment == e && &c.registry == g && c.round == *round && c.rep == *rep
        })
    };
    for row in rows(file, checkpoint, out)
        .iter()
        .filter(|r| was_run(&r.record))
    {
        let c = &row.record;
        let (req, err, rps) = match (&row.summary, &row.capacity) {
            (Some(s), _) => (
                s.totals.requests.to_string(),
                s.totals.errors.to_string(),
                format!("{:.1}", s.throughput.requests_per_s),
            ),
            // A capacity cell: the rate it sustains.
            (None, Some(c)) => (
                "-".into(),
                "-".into(),
                c.requests_per_s.map_or("-".into(), |r| format!("{r:.1}")),
            ),
            (None, None) => ("-".into(), "-".into(), "-".into()),
        };
        let result = match (&row.summary, &row.capacity, &c.message) {
            (None, None, Some(m)) => m.clone(),
            (None, Some(cap), _) => format!("{} {}", cap.describe(), out.join(&c.dir).display()),
            _ => out.join(&c.dir).display().to_string(),
        };
        let _ = writeln!(
            text,
            "{:<20} {:<16} {:>5} {:>4} {:<12} {:>9} {:>7} {:>9}  {}",
            c.experiment,
            c.registry,
            c.round,
            c.rep,
            c.status.name(),
            req,
            err,
            rps,
            result
        );
    }
    let _ = writeln!(
        text,
        "\ncomparison: {}  {}",
        out.join("comparison.csv").display(),
        out.join("comparison.html").display()
    );
    text
}

fn num(v: f64) -> String {
    if v.is_finite() {
        let r = (v * 1000.0).round() / 1000.0;
        format!("{r}")
    } else {
        String::new()
    }
}

/// The CSV header.
pub fn csv_header() -> Vec<String> {
    let mut h: Vec<String> = [
        "experiment",
        "kind",
        "registry",
        "round",
        "rep",
        "started_at",
        "status",
        "exit_code",
        "mode",
        "duration_s",
        "requests",
        "ok",
        "errors",
        "error_rate",
        "requests_per_s",
        "bytes_per_s",
        "interrupted",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for name in MAIN_OPS {
        h.push(format!("{name}_count"));
        h.push(format!("{name}_p50_ms"));
        h.push(format!("{name}_p99_ms"));
    }
    // Capacity cells: the answer (empty for the other kinds).
    for name in [
        "capacity_speed",
        "capacity_requests_per_s",
        "capacity_at_least",
        "capacity_limited_by",
    ] {
        h.push(name.into());
    }
    h.push("dir".into());
    h.push("message".into());
    h
}

/// A main operation's count, p50 and p99 (empty when the run had none).
fn op_cells(o: Option<&OpSummary>) -> [String; 3] {
    let Some(o) = o else {
        return Default::default();
    };
    let latency = |p: fn(&Percentiles) -> Option<f64>| {
        o.latency_ms
            .as_ref()
            .and_then(p)
            .map(num)
            .unwrap_or_default()
    };
    [o.count.to_string(), latency(|p| p.p50), latency(|p| p.p99)]
}

fn csv_row(row: &Row) -> Vec<String> {
    let c = &row.record;
    let s = row.summary.as_ref();
    let mut v = vec![
        c.experiment.clone(),
        row.kind.clone(),
        c.registry.clone(),
        c.round.to_string(),
        c.rep.to_string(),
        s.map_or_else(|| c.started_at.clone(), |s| s.started_at.clone()),
        c.status.name().to_owned(),
        c.exit_code.map(|e| e.to_string()).unwrap_or_default(),
    ];
    match s {
        Some(s) => {
            let rate = if s.totals.requests > 0 {
                s.totals.errors as f64 / s.totals.requests as f64
            } else {
                0.0
            };
            v.extend([
                s.mode.clone(),
                num(s.duration_s),
                s.totals.requests.to_string(),
                s.totals.ok.to_string(),
                s.totals.errors.to_string(),
                num(rate),
                num(s.throughput.requests_per_s),
                num(s.throughput.bytes_per_s),
                s.interrupted.to_string(),
            ]);
            for name in MAIN_OPS {
                v.extend(op_cells(op(s, name)));
            }
        }
        None => v.extend(std::iter::repeat_n(String::new(), 9 + 3 * MAIN_OPS.len())),
    }
    match &row.capacity {
        Some(cap) => v.extend([
            cap.speed.map(num).unwrap_or_default(),
            cap.requests_per_s.map(num).unwrap_or_default(),
            cap.at_least.to_string(),
            cap.limited_by.clone(),
        ]),
        None => v.extend(std::iter::repeat_n(String::new(), 4)),
    }
    v.push(c.dir.to_string_lossy().into_owned());
    v.push(c.message.clone().unwrap_or_default());
    v
}

/// `comparison.csv` as text.
pub fn render_csv(rows: &[Row]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(csv_header())?;
    for row in rows {
        w.write_record(csv_row(row))?;
    }
    let bytes = w.into_inner().context("cannot write the comparison CSV")?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map(crate::report::chart::fmt_value)
        .unwrap_or_else(|| "–".into())
}

/// Seconds since `t0`, for the over-time charts.
fn seconds_since(t0: std::time::SystemTime, at: &str) -> Option<f64> {
    let t = humantime::parse_rfc3339_weak(at).ok()?;
    Some(match t.duration_since(t0) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    })
}

/// The time unit that suits a span of `secs`: (divisor, name).
fn time_unit(secs: f64) -> (f64, &'static str) {
    if secs < 2.0 * 3600.0 {
        (60.0, "minutes")
    } else if secs < 4.0 * 86400.0 {
        (3600.0, "hours")
    } else {
        (86400.0, "days")
    }
}

/// `comparison.html` as text: a header, the cells without a complete result, a section per
/// experiment (its registries compared, latency over time, its cells) and the last cleanup.
pub fn render_html(file: &ExperimentFile, checkpoint: &Checkpoint, rows: &[Row]) -> String {
    let mut out = String::new();
    let name = file.path.file_name().map_or_else(
        || file.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let title = format!("creb-rs run — {name}");
    page::begin(&mut out, &title);
    let rounds = checkpoint.rounds.len();
    let _ = write!(
        out,
        "<header class=\"top\"><h1>{}</h1><div class=\"sub\">Started {} · {} round{} · {} cells · updated {}. Latencies are of successful operations (ms); every number is from the cell's summary.json.</div></header><main>",
        escape(&title),
        escape(&checkpoint.started_at),
        rounds,
        if rounds == 1 { "" } else { "s" },
        rows.len(),
        escape(&humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
    );
    incomplete_section(&mut out, rows);
    let t0 = humantime::parse_rfc3339_weak(&checkpoint.started_at).ok();
    for (index, exp) in file.experiments.iter().enumerate() {
        let exp_rows: Vec<&Row> = rows
            .iter()
            .filter(|r| r.record.experiment == exp.spec.name)
            .collect();
        if !exp_rows.is_empty() {
            experiment_section(&mut out, file, index, &exp_rows, rounds, t0);
        }
    }
    cleanup_section(&mut out, checkpoint);
    out.push_str("</main>");
    page::end(&mut out, &format!("from {}", file.path.display()));
    out
}

/// The cells that have no complete result, with why.
fn incomplete_section(out: &mut String, rows: &[Row]) {
    let bad: Vec<&Row> = rows
        .iter()
        .filter(|r| matches!(r.record.status.name(), "error" | "interrupted" | "running"))
        .collect();
    if bad.is_empty() {
        return;
    }
    out.push_str("<section class=\"warnings\"><h2>Cells without a complete result</h2><ul>");
    for r in bad {
        let _ = write!(
            out,
            "<li>{} on {} (round {}, rep {}): {}{}</li>",
            escape(&r.record.experiment),
            escape(&r.record.registry),
            r.record.round,
            r.record.rep,
            escape(r.record.status.name()),
            r.record
                .message
                .as_ref()
                .map(|m| format!(" — {}", escape(m)))
                .unwrap_or_default()
        );
    }
    out.push_str("</ul></section>");
}

/// One experiment: its registries compared in the latest round, latency over time (with
/// more than one round) and the table of its cells.
fn experiment_section(
    out: &mut String,
    file: &ExperimentFile,
    index: usize,
    rows: &[&Row],
    rounds: usize,
    t0: Option<std::time::SystemTime>,
) {
    let exp = &file.experiments[index];
    let name = &exp.spec.name;
    let _ = write!(
        out,
        "<section id=\"exp-{0}\"><h2>{0} <small>({1})</small></h2>",
        escape(name),
        exp.spec.kind.name()
    );
    if exp.spec.kind == crate::experiment::config::Kind::Capacity {
        capacity_chart(out, name, exp.spec.repetitions(), rows, rounds);
    } else if let Some(op_name) = headline(exp.spec.kind.name(), rows) {
        registries_chart(out, name, exp.spec.repetitions(), rows, op_name, rounds);
        let distinct: std::collections::BTreeSet<u64> =
            rows.iter().map(|r| r.record.round).collect();
        if let (Some(t0), true) = (t0, distinct.len() > 1) {
            let registries: Vec<&str> = exp
                .registries
                .iter()
                .map(|&r| file.registries[r].name.as_str())
                .collect();
            over_time_chart(out, name, &registries, rows, op_name, t0);
        }
    }
    cells_table(out, rows);
    out.push_str("</section>");
}

/// The median of sorted values.
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The panels of a registries chart: `op_name`'s p50 and p99, operations per second and
/// errors, each a bar per registry.
fn panels(bars: &Bars, op_name: &str) -> Vec<Panel> {
    let panel = |title: String, f: &dyn Fn(&Row) -> Option<f64>, log_ratio, color, integer| {
        let (values, ranges) = bars.values(f);
        Panel {
            title,
            values,
            log_ratio,
            color,
            integer,
            ranges,
        }
    };
    let lat = |r: &Row, f: fn(&Percentiles) -> Option<f64>| {
        r.summary
            .as_ref()
            .and_then(|s| op(s, op_name))
            .and_then(|o| o.latency_ms.as_ref())
            .and_then(f)
    };
    vec![
        panel(
            format!("{op_name} p50 (ms)"),
            &|r| lat(r, |p| p.p50),
            100.0,
            0,
            false,
        ),
        panel(
            format!("{op_name} p99 (ms)"),
            &|r| lat(r, |p| p.p99),
            100.0,
            3,
            false,
        ),
        panel(
            "operations/s".into(),
            &|r| r.summary.as_ref().map(|s| s.throughput.requests_per_s),
            100.0,
            2,
            false,
        ),
        panel(
            "errors".into(),
            &|r| r.summary.as_ref().map(|s| s.totals.errors as f64),
            1e9,
            1,
            true,
        ),
    ]
}

/// The registries compared in the latest round that has results. With repetitions, one bar
/// per registry at the median of its repetitions, with a whisker from the lowest to the
/// highest: the spread is the noise a difference must clear. Without, one bar per cell.
fn registries_chart(
    out: &mut String,
    name: &str,
    repetitions: u32,
    rows: &[&Row],
    op_name: &str,
    rounds: usize,
) {
    let Some(last) = rows
        .iter()
        .filter(|r| r.summary.is_some())
        .map(|r| r.record.round)
        .max()
    else {
        return;
    };
    let bars = Bars::of(rows, last, repetitions);
    let labels = bars.labels(repetitions);
    let repeated = bars.repeated;
    let chart = BarChart {
        id: format!("compare-{}", chart_id(name)),
        title: format!("{name}: registries compared ({op_name})"),
        subtitle: match (rounds > 1, repeated) {
            (true, true) => format!("round {last}; whiskers: lowest to highest repetition"),
            (true, false) => format!("round {last}"),
            (false, true) => "whiskers: lowest to highest repetition".into(),
            (false, false) => String::new(),
        },
        groups: (0..labels.len()).collect(),
        rows: labels,
        panels: panels(&bars, op_name),
    };
    out.push_str(&bar_chart(&chart));
}

/// Registries compared by capacity in the latest round that has answers: the operations per
/// second and the speed factor each sustained (a lower bound is still drawn at its bound;
/// the table says which).
fn capacity_chart(out: &mut String, name: &str, repetitions: u32, rows: &[&Row], rounds: usize) {
    let Some(last) = rows
        .iter()
        .filter(|r| r.capacity.is_some())
        .map(|r| r.record.round)
        .max()
    else {
        return;
    };
    let bars = Bars::of(rows, last, repetitions);
    let (rates, rate_ranges) = bars.values(&|r| r.capacity.as_ref().and_then(|c| c.requests_per_s));
    let (speeds, speed_ranges) = bars.values(&|r| r.capacity.as_ref().and_then(|c| c.speed));
    let labels = bars.labels(repetitions);
    let chart = BarChart {
        id: format!("compare-{}", chart_id(name)),
        title: format!("{name}: registries compared by capacity"),
        subtitle: if rounds > 1 {
            format!("round {last}")
        } else {
            String::new()
        },
        groups: (0..labels.len()).collect(),
        rows: labels,
        panels: vec![
            Panel {
                title: "sustained operations/s".into(),
                values: rates,
                log_ratio: 100.0,
                color: 2,
                integer: false,
                ranges: rate_ranges,
            },
            Panel {
                title: "sustained speed (x the trace)".into(),
                values: speeds,
                log_ratio: 100.0,
                color: 0,
                integer: false,
                ranges: speed_ranges,
            },
        ],
    };
    out.push_str(&bar_chart(&chart));
}

/// The bars of a comparison: the cells of the latest round, one bar each, or with
/// repetitions one per registry.
struct Bars<'a> {
    latest: Vec<&'a Row>,
    registries: Vec<&'a str>,
    repeated: bool,
}

impl<'a> Bars<'a> {
    fn of(rows: &[&'a Row], round: u64, repetitions: u32) -> Bars<'a> {
        let latest: Vec<&Row> = rows
            .iter()
            .copied()
            .filter(|r| r.record.round == round && (r.summary.is_some() || r.capacity.is_some()))
            .collect();
        let mut registries: Vec<&str> = Vec::new();
        for r in &latest {
            if !registries.contains(&r.record.registry.as_str()) {
                registries.push(&r.record.registry);
            }
        }
        Bars {
            latest,
            registries,
            repeated: repetitions > 1,
        }
    }

    /// Each bar's value of `f`, and with repetitions the lowest and highest beside the
    /// median.
    fn values(&self, f: &dyn Fn(&Row) -> Option<f64>) -> (Vec<Option<f64>>, Vec<Range>) {
        if !self.repeated {
            return (self.latest.iter().map(|r| f(r)).collect(), Vec::new());
        }
        self.registries
            .iter()
            .map(|name| {
                let mut v: Vec<f64> = self
                    .latest
                    .iter()
                    .filter(|r| r.record.registry == *name)
                    .filter_map(|r| f(r))
                    .collect();
                v.sort_by(f64::total_cmp);
                match v.len() {
                    0 => (None, None),
                    n => (Some(median(&v)), Some((v[0], v[n - 1]))),
                }
            })
            .unzip()
    }

    fn labels(&self, repetitions: u32) -> Vec<String> {
        if self.repeated {
            self.registries
                .iter()
                .map(|name| format!("{name} (median of {repetitions})"))
                .collect()
        } else {
            self.latest
                .iter()
                .map(|r| r.record.registry.clone())
                .collect()
        }
    }
}

/// Latency over time per registry (monitoring mode): p99 solid, p50 dashed, one point per
/// round (the first repetition's start, the worst value).
fn over_time_chart(
    out: &mut String,
    name: &str,
    registries: &[&str],
    rows: &[&Row],
    op_name: &str,
    t0: std::time::SystemTime,
) {
    let mut series = Vec::new();
    for (i, registry) in registries.iter().enumerate() {
        let quantiles: [Quantile; 2] = [("p99", false, |p| p.p99), ("p50", true, |p| p.p50)];
        for (label, dashed, f) in quantiles {
            let mut points: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
            for r in rows.iter().filter(|r| r.record.registry == *registry) {
                let Some(s) = &r.summary else { continue };
                let (Some(x), Some(y)) = (
                    seconds_since(t0, &s.started_at),
                    op(s, op_name)
                        .and_then(|o| o.latency_ms.as_ref())
                        .and_then(f),
                ) else {
                    continue;
                };
                let e = points.entry(r.record.round).or_insert((x, y));
                e.1 = e.1.max(y);
            }
            if !points.is_empty() {
                series.push(Series {
                    name: format!("{registry} {label}"),
                    points: points.into_values().collect(),
                    color: i,
                    dashed,
                });
            }
        }
    }
    let span = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let (unit, unit_name) = time_unit(span);
    for s in &mut series {
        for p in &mut s.points {
            p.0 /= unit;
        }
    }
    let chart = LineChart {
        id: format!("over-time-{}", chart_id(name)),
        title: format!("{name}: {op_name} latency over time"),
        x_label: format!("{unit_name} since the first round"),
        y_label: "latency (ms)".into(),
        x: XScale::Linear,
        y: YScale::Auto(20.0),
        series,
        subtitle: "p99 solid, p50 dashed; one point per round".into(),
        x_extent: Vec::new(),
    };
    out.push_str(&line_chart(&chart));
}

/// The table of an experiment's cells: their status, counts and the main operations'
/// latencies, or the message of a cell without a result.
fn cells_table(out: &mut String, rows: &[&Row]) {
    let shown: Vec<&str> = MAIN_OPS
        .into_iter()
        .filter(|name| {
            rows.iter()
                .filter_map(|r| r.summary.as_ref())
                .any(|s| op(s, name).is_some())
        })
        .collect();
    out.push_str("<div class=\"scroll\"><table><tr><th class=\"l\">registry</th><th>round</th><th>rep</th><th class=\"l\">started</th><th class=\"l\">status</th><th>requests</th><th>errors</th><th>ops/s</th>");
    for name in &shown {
        let _ = write!(out, "<th>{name} p50</th><th>{name} p99</th>");
    }
    out.push_str("<th class=\"l\">result</th></tr>");
    for r in rows {
        let c = &r.record;
        let _ = write!(
            out,
            "<tr class=\"{}\"><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>",
            c.status.name(),
            escape(&c.registry),
            c.round,
            c.rep,
            escape(r.summary.as_ref().map_or(&c.started_at, |s| &s.started_at)),
            escape(c.status.name()),
        );
        match &r.summary {
            Some(s) => {
                let _ = write!(
                    out,
                    "<td>{}</td><td>{}</td><td>{}</td>",
                    s.totals.requests,
                    s.totals.errors,
                    num(s.throughput.requests_per_s)
                );
                for name in &shown {
                    let p = op(s, name).and_then(|o| o.latency_ms.as_ref());
                    let _ = write!(
                        out,
                        "<td>{}</td><td>{}</td>",
                        fmt_ms(p.and_then(|p| p.p50)),
                        fmt_ms(p.and_then(|p| p.p99))
                    );
                }
            }
            None => {
                let _ = write!(
                    out,
                    "<td colspan=\"{}\" class=\"l msg\">{}</td>",
                    3 + 2 * shown.len(),
                    escape(c.message.as_deref().unwrap_or("no result"))
                );
            }
        }
        let _ = write!(
            out,
            "<td class=\"l\">{}</td></tr>",
            escape(&c.dir.to_string_lossy())
        );
    }
    out.push_str("</table></div>");
}

/// What the last cleanup did, per registry.
fn cleanup_section(out: &mut String, checkpoint: &Checkpoint) {
    let Some(last) = checkpoint.rounds.iter().rev().find(|r| r.cleanup.is_some()) else {
        return;
    };
    out.push_str("<section><h2>Cleanup</h2><table><tr><th class=\"l\">registry</th><th>manifests deleted</th><th>blobs deleted</th><th>refused</th><th>not found</th><th>errors</th><th class=\"l\">notes</th></tr>");
    for c in last.cleanup.iter().flatten() {
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            escape(&c.registry),
            c.manifests_deleted,
            c.blobs_deleted,
            c.refused,
            c.not_found,
            c.errors,
            escape(&c.messages.join("; "))
        );
    }
    let _ = write!(
        out,
        "</table><p class=\"muted\">After round {}.</p></section>",
        last.round
    );
}

fn chart_id(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Rewrites `comparison.csv` and `comparison.html` in `out`.
pub fn write(file: &ExperimentFile, checkpoint: &Checkpoint, out: &Path) -> anyhow::Result<()> {
    let rows = rows(file, checkpoint, out);
    write_atomic(out, "comparison.csv", render_csv(&rows)?.as_bytes())?;
    write_atomic(
        out,
        "comparison.html",
        render_html(file, checkpoint, &rows).as_bytes(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_rows_have_the_same_width() {
        let record = CellRecord {
            experiment: "e".into(),
            registry: "r".into(),
            round: 1,
            rep: 1,
            dir: "e/r".into(),
            status: crate::experiment::checkpoint::CellStatus::Error,
            exit_code: Some(2),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: None,
            message: Some("connection refused".into()),
            attempts: 1,
        };
        let row = Row {
            record,
            kind: "push".into(),
            summary: None,
            capacity: None,
        };
        assert_eq!(csv_row(&row).len(), csv_header().len());
        let text = render_csv(&[row]).unwrap();
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("e/r,connection refused"));
    }
}
