//! The charts of a result directory: percentile spectra, throughput, errors, latency and
//! schedule lag over time, per endpoint and per size class, each with how to read it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::metrics::{new_histogram, Aggregator, Level, Op};
use crate::report::chart::{
    self, bar_chart, line_chart, BarChart, LineChart, Panel, Series, XScale, YScale,
};
use crate::results::hlog;
use crate::results::store::aggregator_of;
use crate::results::writer::{timeline_header, TIMELINE_FAMILIES};
use crate::results::ResultSet;

pub use super::figure::Figure;

/// Percentile spectrum resolution: points per nine.
const SPECTRUM_STEPS_PER_NINE: u32 = 50;
const SPECTRUM_NINES: u32 = 4;

pub(super) fn is_delay(set: &ResultSet) -> bool {
    set.summary.mode == "delay"
}

pub(super) fn level_of(name: &str) -> Option<Level> {
    Op::from_name(name).map(Op::level)
}

/// One colour per operation and session of the run, the same in every chart.
fn op_color(set: &ResultSet, op: &str) -> usize {
    let s = &set.summary;
    s.operations
        .keys()
        .filter(|n| level_of(n) != Some(Level::Request))
        .chain(s.sessions.keys())
        .position(|n| n == op)
        .unwrap_or_else(|| s.operations.len() + s.sessions.len())
}

/// `timeline.csv` by column name.
struct Timeline<'a> {
    columns: BTreeMap<String, usize>,
    rows: &'a [Vec<String>],
}

impl<'a> Timeline<'a> {
    fn new(rows: &'a [Vec<String>]) -> Self {
        let columns = timeline_header()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (c, i))
            .collect();
        Timeline { columns, rows }
    }

    fn get(&self, row: &[String], column: &str) -> Option<f64> {
        let i = *self.columns.get(column)?;
        row.get(i)?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
    }

    /// (interval index, midpoint in seconds from the anchor) of each row.
    fn positions(&self) -> Vec<(u64, f64)> {
        self.rows
            .iter()
            .enumerate()
            .map(|(n, r)| {
                let index = self.get(r, "interval").map_or(n as u64, |v| v as u64);
                let start = self.get(r, "start_s").unwrap_or(n as f64);
                let length = self.get(r, "duration_s").unwrap_or(1.0);
                (index, start + length / 2.0)
            })
            .collect()
    }

    /// The end of the last interval, seconds from the anchor.
    fn end(&self) -> Option<f64> {
        let r = self.rows.last()?;
        Some(self.get(r, "start_s")? + self.get(r, "duration_s").unwrap_or(0.0))
    }

    fn series(&self, column: &str) -> Vec<(f64, f64)> {
        self.positions()
            .into_iter()
            .zip(self.rows)
            .map(|((_, x), r)| (x, self.get(r, column).unwrap_or(f64::NAN)))
            .collect()
    }
}

/// Interval index → midpoint (s): from the timeline, else from the interval length.
fn interval_positions(set: &ResultSet) -> Vec<(u64, f64)> {
    let t = Timeline::new(&set.timeline);
    let mut pos = t.positions();
    if pos.is_empty() {
        let len = set.meta.interval_s.max(1e-3);
        pos = set
            .hlog
            .intervals
            .keys()
            .map(|&k| (k, (k as f64 + 0.5) * len))
            .collect();
    }
    pos
}

fn time_extent(set: &ResultSet) -> Vec<f64> {
    let t = Timeline::new(&set.timeline);
    let end = t.end().unwrap_or(set.summary.duration_s);
    vec![
        0.0,
        end.max(set.meta.interval_s.min(set.summary.duration_s)),
    ]
}

fn spectrum(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let steps = SPECTRUM_NINES * SPECTRUM_STEPS_PER_NINE;
    (0..=steps)
        .map(|i| {
            let t = f64::from(i) / f64::from(SPECTRUM_STEPS_PER_NINE);
            let q = 1.0 - 10f64.powf(-t);
            (q, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .collect()
}

/// Each operation's and session's latency (or service time) spectrum, one series each.
fn spectrum_series(set: &ResultSet, agg: &Aggregator, service: bool) -> Vec<Series> {
    let mut series = Vec::new();
    for op in agg.table().ops() {
        if op.level() == Level::Request {
            continue;
        }
        let Some(stats) = agg.table().op_total(op) else {
            continue;
        };
        let h = if service {
            match stats.service {
                Some(h) => h,
                None => continue,
            }
        } else {
            stats.latency
        };
        if h.is_empty() {
            continue;
        }
        series.push(Series {
            name: format!("{} (n={})", op.name(), h.len()),
            points: spectrum(&h),
            color: op_color(set, op.name()),
            dashed: op.level() == Level::Session,
        });
    }
    series
}

/// The percentile spectrum of every operation and session, from the exact totals.
fn spectrum_chart(
    set: &ResultSet,
    agg: &Aggregator,
    id: &'static str,
    service: bool,
) -> Option<Figure> {
    let series = spectrum_series(set, agg, service);
    if service && series.is_empty() {
        return None;
    }
    let delay = is_delay(set);
    let (title, subtitle, caption) = if service {
        (
            "Service time percentile spectrum",
            "service time = send → end of body, successes only; sessions dashed",
            "The same operations timed from when each request was actually sent. The gap \
             between this chart and the response-time spectrum is time spent waiting behind \
             the schedule (coordinated omission that delay mode does not hide).",
        )
    } else if delay {
        (
            "Response time percentile spectrum",
            "response time = intended start → end of body, successes only; sessions dashed",
            "Latency by percentile from the exact total histograms (all intervals and hosts \
             added). The x axis spreads the tail: each step right is one more nine.",
        )
    } else {
        (
            "Latency percentile spectrum",
            "latency = send → end of body, successes only; sessions dashed",
            "Latency by percentile from the exact total histograms (all intervals and hosts \
             added). The x axis spreads the tail: each step right is one more nine.",
        )
    };
    let svg = line_chart(&LineChart {
        id: id.into(),
        title: title.into(),
        x_label: "percentile".into(),
        y_label: "latency (ms)".into(),
        x: XScale::Nines(SPECTRUM_NINES),
        y: YScale::Auto(20.0),
        series,
        subtitle: subtitle.into(),
        x_extent: vec![],
    });
    Some(Figure {
        id,
        title: title.into(),
        caption: caption.into(),
        svg,
    })
}

fn throughput_chart(set: &ResultSet) -> Figure {
    let t = Timeline::new(&set.timeline);
    let mut series = vec![Series {
        name: "achieved (completed/s)".into(),
        points: t.series("achieved_per_s"),
        color: 0,
        dashed: false,
    }];
    let offered = t.series("offered_per_s");
    if offered.iter().any(|p| p.1 > 0.0) {
        series.push(Series {
            name: "offered (due/s)".into(),
            points: offered,
            color: 1,
            dashed: true,
        });
    }
    let closed = set.summary.model == "closed";
    let caption = if closed {
        "Operations completed per second in each interval. In a closed model a new operation \
         is dispatched when one completes, so offered follows achieved: throughput at this \
         in-flight level is the headline."
    } else {
        "Operations due per second by the schedule (offered) and completed per second \
         (achieved). Achieved below offered means a backlog is building."
    };
    let title = "Throughput over time";
    Figure {
        id: "throughput",
        title: title.into(),
        caption: caption.into(),
        svg: line_chart(&LineChart {
            id: "throughput".into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: "operations per second".into(),
            x: XScale::Linear,
            y: YScale::Linear,
            series,
            subtitle: format!(
                "per interval of {} s; workload operations",
                set.meta.interval_s
            ),
            x_extent: time_extent(set),
        }),
    }
}

#[allow(clippy::too_many_lines)]
fn errors_chart(set: &ResultSet) -> Figure {
    let t = Timeline::new(&set.timeline);
    let positions = interval_positions(set);
    let mut series = Vec::new();
    let total: Vec<(f64, f64)> = if set.timeline.is_empty() {
        Vec::new()
    } else {
        t.series("errors")
    };
    // Per operation: the failure histograms' counts (one value per failure).
    let mut per_op: BTreeMap<Op, BTreeMap<u64, u64>> = BTreeMap::new();
    for (&index, hs) in &set.hlog.intervals {
        for (tag, h) in hs {
            if let Some((op, _, "error")) = hlog::parse_tag(tag) {
                if op.level() == Level::Operation {
                    *per_op.entry(op).or_default().entry(index).or_default() += h.len();
                }
            }
        }
    }
    series.push(Series {
        name: "all operations".into(),
        points: if total.is_empty() {
            positions
                .iter()
                .map(|&(k, x)| {
                    (
                        x,
                        per_op
                            .values()
                            .map(|m| m.get(&k).copied().unwrap_or(0))
                            .sum::<u64>() as f64,
                    )
                })
                .collect()
        } else {
            total
        },
        color: chart::TOTAL,
        dashed: false,
    });
    for (op, counts) in &per_op {
        series.push(Series {
            name: op.name().into(),
            points: positions
                .iter()
                .map(|&(k, x)| (x, counts.get(&k).copied().unwrap_or(0) as f64))
                .collect(),
            color: op_color(set, op.name()),
            dashed: true,
        });
    }
    let title = "Errors over time";
    let total_errors = set.summary.totals.errors;
    Figure {
        id: "errors",
        title: title.into(),
        caption: format!(
            "Failed operations per interval ({total_errors} in total), by the interval in which \
             the failure was known; kinds are in the errors table."
        ),
        svg: line_chart(&LineChart {
            id: "errors".into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: "errors per interval".into(),
            x: XScale::Linear,
            y: YScale::Count,
            series,
            subtitle: format!(
                "failed workload operations per interval of {} s",
                set.meta.interval_s
            ),
            x_extent: time_extent(set),
        }),
    }
}

fn latency_over_time_chart(set: &ResultSet) -> Figure {
    let t = Timeline::new(&set.timeline);
    let mut series = Vec::new();
    for op in TIMELINE_FAMILIES {
        let name = op.name();
        let count: f64 = set
            .timeline
            .iter()
            .filter_map(|r| t.get(r, &format!("{name}_count")))
            .sum();
        let p99 = t.series(&format!("{name}_p99_ms"));
        if count <= 0.0 || !p99.iter().any(|p| p.1.is_finite()) {
            continue;
        }
        // One line per operation, its 99th percentile: several operations' medians and
        // tails on one chart were more lines than a reader can follow (the medians are in
        // the tables, the whole distributions in the percentile spectrum).
        series.push(Series {
            name: format!("{name} p99"),
            points: p99,
            color: op_color(set, name),
            dashed: false,
        });
    }
    let what = if is_delay(set) {
        "response time (intended start → end)"
    } else {
        "latency (send → end)"
    };
    let title = "Latency over time";
    Figure {
        id: "latency-over-time",
        title: title.into(),
        caption: "The 99th percentile of each operation family in every interval, one line \
                  each, successes only. Gaps are intervals in which that operation did not \
                  complete; medians are in the tables, whole distributions in the percentile \
                  spectrum."
            .into(),
        svg: line_chart(&LineChart {
            id: "latency-over-time".into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: "latency (ms)".into(),
            x: XScale::Linear,
            y: YScale::Auto(20.0),
            series,
            subtitle: format!("{what} per interval of {} s", set.meta.interval_s),
            x_extent: time_extent(set),
        }),
    }
}

/// Every interval's schedule lag: its operations' lag histograms added.
fn lag_by_interval(set: &ResultSet) -> BTreeMap<u64, Histogram<u64>> {
    let mut merged: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
    for (&index, hs) in &set.hlog.intervals {
        for (tag, h) in hs {
            if let Some((op, _, "lag")) = hlog::parse_tag(tag) {
                if op.level() == Level::Operation && !h.is_empty() {
                    h.add_to(merged.entry(index).or_insert_with(new_histogram));
                }
            }
        }
    }
    merged
}

/// Schedule lag per interval, all operations' lag histograms added; `None` without lag data.
fn lag_chart(set: &ResultSet) -> Option<Figure> {
    let positions = interval_positions(set);
    let merged = lag_by_interval(set);
    if merged.is_empty() {
        return None;
    }
    let line = |f: &dyn Fn(&Histogram<u64>) -> u64| -> Vec<(f64, f64)> {
        positions
            .iter()
            .map(|&(k, x)| (x, merged.get(&k).map_or(f64::NAN, |h| f(h) as f64 / 1000.0)))
            .collect()
    };
    let series = vec![
        Series {
            name: "max".into(),
            points: line(&|h| h.max()),
            color: 6,
            dashed: true,
        },
        Series {
            name: "p99".into(),
            points: line(&|h| h.value_at_quantile(0.99)),
            color: 3,
            dashed: false,
        },
        Series {
            name: "p50".into(),
            points: line(&|h| h.value_at_quantile(0.5)),
            color: 0,
            dashed: false,
        },
    ];
    let title = "Schedule lag over time";
    Some(Figure {
        id: "schedule-lag",
        title: title.into(),
        caption: "How late operations were sent after their intended start (including time \
                  waiting for an in-flight slot), all operations of each interval added \
                  exactly. A fraction of a millisecond is the timer's own slack; a rising p99 \
                  means the generator or the in-flight cap could not keep the schedule."
            .into(),
        svg: line_chart(&LineChart {
            id: "schedule-lag".into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: "schedule lag (ms)".into(),
            x: XScale::Linear,
            y: YScale::Auto(50.0),
            series,
            subtitle: format!(
                "intended start → send, per interval of {} s",
                set.meta.interval_s
            ),
            x_extent: time_extent(set),
        }),
    })
}

/// Endpoint index → URL (runs over several endpoints), in index order.
fn endpoint_names(set: &ResultSet) -> Vec<(usize, &str)> {
    let mut names: Vec<(usize, &str)> = set
        .summary
        .endpoints
        .iter()
        .flatten()
        .map(|(url, e)| (e.index, url.as_str()))
        .collect();
    names.sort_unstable();
    names
}

/// Per endpoint: (interval midpoint, value per second) of `endpoints.csv` column `column`.
fn endpoint_series(set: &ResultSet, column: usize) -> BTreeMap<usize, Vec<(f64, f64)>> {
    let len = set.meta.interval_s.max(1e-3);
    let mut out: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for row in &set.endpoint_rows {
        let num = |i: usize| row.get(i).and_then(|v| v.trim().parse::<f64>().ok());
        let (Some(start), Some(endpoint), Some(v)) = (num(1), num(2), num(column)) else {
            continue;
        };
        out.entry(endpoint as usize)
            .or_default()
            .push((start + len / 2.0, v / len));
    }
    out
}

/// Runs over several endpoints: completed (and, when any failed, failed) operations per
/// second on each node, so load balance and a sick node show.
fn endpoint_charts(set: &ResultSet) -> Vec<Figure> {
    let names = endpoint_names(set);
    if names.is_empty() || set.endpoint_rows.is_empty() {
        return Vec::new();
    }
    let chart = |id, column, [title, y_label, caption]: [&str; 3]| {
        endpoint_chart(set, &names, id, column, [title, y_label, caption])
    };
    let mut figs = vec![chart(
        "endpoint-throughput",
        3,
        [
            "Throughput per endpoint",
            "operations per second",
            "Operations completed per second on each endpoint (successes and failures). Even \
             lines mean the routing spreads the load; a line falling to zero is a node that \
             stopped answering, and the lines of the nodes that take over its share rise.",
        ],
    )];
    let any_errors = set
        .summary
        .endpoints
        .iter()
        .flatten()
        .any(|(_, e)| e.totals.errors > 0);
    if any_errors {
        figs.push(chart(
            "endpoint-errors",
            5,
            [
                "Failures per endpoint",
                "failed operations per second",
                "Failed operations per second on each endpoint: a sick node stands out here \
                 before it is marked down (see the transitions in the endpoints table).",
            ],
        ));
    }
    figs
}

/// One of [`endpoint_charts`]: `column` of the endpoints' timeline per second, a line per
/// endpoint; its title, y label and caption.
fn endpoint_chart(
    set: &ResultSet,
    names: &[(usize, &str)],
    id: &'static str,
    column: usize,
    [title, y_label, caption]: [&str; 3],
) -> Figure {
    let mut by_endpoint = endpoint_series(set, column);
    let series: Vec<Series> = names
        .iter()
        .map(|&(i, url)| Series {
            name: format!("{i}: {url}"),
            points: by_endpoint.remove(&i).unwrap_or_default(),
            color: i,
            dashed: false,
        })
        .collect();
    Figure {
        id,
        title: title.into(),
        caption: caption.into(),
        svg: line_chart(&LineChart {
            id: id.into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: y_label.into(),
            x: XScale::Linear,
            y: YScale::Linear,
            series,
            subtitle: format!(
                "per endpoint, per interval of {} s; workload operations",
                set.meta.interval_s
            ),
            x_extent: time_extent(set),
        }),
    }
}

/// Size classes as people read them.
pub fn class_label(class: &str) -> &str {
    match class {
        "lt_1mib" => "< 1 MiB",
        "1mib_10mib" => "1–10 MiB",
        "10mib_100mib" => "10–100 MiB",
        "100mib_1gib" => "100 MiB–1 GiB",
        "ge_1gib" => "≥ 1 GiB",
        other => other,
    }
}

/// (operation, size class, numbers) of every operation and session, in report order.
pub(super) fn class_rows(
    set: &ResultSet,
) -> Vec<(&str, &str, &crate::results::summary::ClassSummary)> {
    let s = &set.summary;
    let mut rows = Vec::new();
    for (name, op) in s.operations.iter().chain(s.sessions.iter()) {
        if level_of(name) == Some(Level::Request) {
            continue;
        }
        // Smallest class first.
        let mut classes: Vec<_> = op.size_classes.iter().collect();
        classes.sort_by_key(|(c, _)| {
            crate::metrics::SizeClass::ALL
                .iter()
                .position(|k| k.name() == c.as_str())
                .unwrap_or(usize::MAX)
        });
        for (class, cs) in classes {
            rows.push((name.as_str(), class.as_str(), cs));
        }
    }
    rows
}

/// Which run of equal neighbours each item is in (0, 0, 1, 2, 2 for a a b c c): rows of one
/// operation are drawn as one group.
fn runs_of<'a>(items: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let mut groups = Vec::new();
    let mut group = 0;
    let mut last = "";
    for item in items {
        if !last.is_empty() && item != last {
            group += 1;
        }
        last = item;
        groups.push(group);
    }
    groups
}

fn size_class_chart(set: &ResultSet) -> Figure {
    let rows = class_rows(set);
    let groups = runs_of(rows.iter().map(|(op, _, _)| *op));
    let mut panels = vec![
        Panel {
            title: "operations (count)".into(),
            values: rows.iter().map(|r| Some(r.2.count as f64)).collect(),
            log_ratio: 1000.0,
            color: 0,
            integer: true,
            ranges: Vec::new(),
        },
        Panel {
            title: "p99 latency (ms)".into(),
            values: rows
                .iter()
                .map(|r| r.2.latency_ms.and_then(|l| l.p99))
                .collect(),
            log_ratio: 100.0,
            color: 1,
            integer: false,
            ranges: Vec::new(),
        },
    ];
    if rows.iter().any(|r| r.2.errors > 0) {
        panels.push(Panel {
            title: "errors (count)".into(),
            values: rows.iter().map(|r| Some(r.2.errors as f64)).collect(),
            log_ratio: 1000.0,
            color: 3,
            integer: true,
            ranges: Vec::new(),
        });
    }
    let title = "Operations by size class";
    Figure {
        id: "size-classes",
        title: title.into(),
        caption: "Each operation by the size of what it moved: a 2 KB manifest and a 500 MB \
                  layer never share a histogram. p99 is of successes."
            .into(),
        svg: bar_chart(&BarChart {
            id: "size-classes".into(),
            title: title.into(),
            subtitle: "operations and sessions per size class".into(),
            rows: rows
                .iter()
                .map(|(op, class, _)| format!("{op}  {}", class_label(class)))
                .collect(),
            groups,
            panels,
        }),
    }
}

/// Every chart of the report, in report order. The schedule-lag and service-time charts
/// exist only for results with lag data (delay mode).
pub fn figures(set: &ResultSet) -> anyhow::Result<Vec<Figure>> {
    let agg = aggregator_of(&set.counters, &set.hlog)
        .with_context(|| format!("cannot rebuild the histograms of {}", set.dir.display()))?;
    let mut figs = Vec::new();
    figs.extend(spectrum_chart(set, &agg, "latency-percentiles", false));
    if is_delay(set) {
        figs.extend(spectrum_chart(set, &agg, "service-percentiles", true));
    }
    figs.push(throughput_chart(set));
    figs.push(latency_over_time_chart(set));
    // A chart of nothing is left out: without a failure there is no errors chart.
    if set.summary.totals.errors > 0 {
        figs.push(errors_chart(set));
    }
    if let Some(f) = lag_chart(set) {
        figs.push(f);
    }
    figs.extend(endpoint_charts(set));
    figs.extend(super::cache_figures::cache_figures(set, time_extent(set)));
    figs.push(size_class_chart(set));
    Ok(figs)
}

/// Pixels per SVG unit of the PNGs: 2 makes a 1640 px wide figure, sharp in print.
const PNG_SCALE: f32 = 2.0;

/// Writes every chart as `DIR/<id>.svg` and `DIR/<id>.png` (rendered at twice the size),
/// creating `dir`. Returns the files written, SVG then PNG of each chart.
pub fn write_charts(set: &ResultSet, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create chart directory {}", dir.display()))?;
    let raster = chart::Rasterizer::new();
    if !raster.has_fonts() {
        tracing::warn!("no fonts found on this system: the PNG charts have no text (the SVGs do)");
    }
    let mut written = Vec::new();
    for f in figures(set)? {
        let svg_path = dir.join(format!("{}.svg", f.id));
        let text = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}\n", f.svg);
        std::fs::write(&svg_path, text)
            .with_context(|| format!("cannot write {}", svg_path.display()))?;
        written.push(svg_path);
        let png_path = dir.join(format!("{}.png", f.id));
        let png = raster
            .png(&f.svg, PNG_SCALE)
            .with_context(|| format!("cannot render {}", png_path.display()))?;
        std::fs::write(&png_path, png)
            .with_context(|| format!("cannot write {}", png_path.display()))?;
        written.push(png_path);
    }
    Ok(written)
}
