//! The self-contained HTML report of a result directory (`creb-rs report DIR --format
//! html`), and the same charts as standalone SVG files for papers ([`write_charts`]).
//!
//! One file, nothing fetched when it is viewed: inline CSS, inline SVG, no script. Every
//! number comes from the result directory as written — `summary.json` for the tables,
//! the exact total histograms rebuilt from `counters.json` + `histograms.hlog` for the
//! percentile spectra, `timeline.csv` and the interval histograms for the time series —
//! so a merged result renders exactly like a single run. Every piece of text from the
//! results (names, messages, the configuration) is escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use hdrhistogram::Histogram;

use super::chart::{
    self, bar_chart, escape, line_chart, BarChart, LineChart, Panel, Series, XScale, YScale,
};
use super::ms;
use crate::metrics::hist::Percentiles;
use crate::metrics::{new_histogram, Aggregator, Level, Op};
use crate::results::hlog;
use crate::results::store::aggregator_of;
use crate::results::summary::OpSummary;
use crate::results::writer::{timeline_header, TIMELINE_FAMILIES};
use crate::results::ResultSet;

/// One chart of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable name: the `data-chart` attribute and the file stem in [`write_charts`].
    pub id: &'static str,
    pub title: String,
    /// How to read it (shown under the chart in the HTML).
    pub caption: String,
    pub svg: String,
}

/// Percentile spectrum resolution: points per nine.
const SPECTRUM_STEPS_PER_NINE: u32 = 50;
const SPECTRUM_NINES: u32 = 4;

fn is_delay(set: &ResultSet) -> bool {
    set.summary.mode == "delay"
}

fn level_of(name: &str) -> Option<Level> {
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

/// The percentile spectrum of every operation and session, from the exact totals.
fn spectrum_chart(
    set: &ResultSet,
    agg: &Aggregator,
    id: &'static str,
    service: bool,
) -> Option<Figure> {
    let mut series = Vec::new();
    for op in agg.table.ops() {
        if op.level() == Level::Request {
            continue;
        }
        let Some(stats) = agg.table.op_total(op) else {
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
        let color = op_color(set, name);
        series.push(Series {
            name: format!("{name} p99"),
            points: p99,
            color,
            dashed: false,
        });
        series.push(Series {
            name: format!("{name} p50"),
            points: t.series(&format!("{name}_p50_ms")),
            color,
            dashed: true,
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
        caption: "Median (dashed) and 99th percentile (solid) of each operation family in every \
                  interval, successes only. Gaps are intervals in which that operation did not \
                  complete."
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

/// Schedule lag per interval, all operations' lag histograms added; `None` without lag data.
fn lag_chart(set: &ResultSet) -> Option<Figure> {
    let positions = interval_positions(set);
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
    let chart = |id: &'static str, column: usize, title: &str, y_label: &str, caption: &str| {
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
    };
    let mut figs = vec![chart(
        "endpoint-throughput",
        3,
        "Throughput per endpoint",
        "operations per second",
        "Operations completed per second on each endpoint (successes and failures). Even \
         lines mean the routing spreads the load; a line falling to zero is a node that \
         stopped answering, and the lines of the nodes that take over its share rise.",
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
            "Failures per endpoint",
            "failed operations per second",
            "Failed operations per second on each endpoint: a sick node stands out here \
             before it is marked down (see the transitions in the endpoints table).",
        ));
    }
    figs
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
fn class_rows(set: &ResultSet) -> Vec<(&str, &str, &crate::results::summary::ClassSummary)> {
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

fn size_class_chart(set: &ResultSet) -> Figure {
    let rows = class_rows(set);
    let mut groups = Vec::new();
    let mut group = 0;
    let mut last = "";
    for (op, _, _) in &rows {
        if !last.is_empty() && *op != last {
            group += 1;
        }
        last = op;
        groups.push(group);
    }
    let mut panels = vec![
        Panel {
            title: "operations (count)".into(),
            values: rows.iter().map(|r| Some(r.2.count as f64)).collect(),
            log_ratio: 1000.0,
            color: 0,
            integer: true,
        },
        Panel {
            title: "p99 latency (ms)".into(),
            values: rows.iter().map(|r| r.2.latency_ms.map(|l| l.p99)).collect(),
            log_ratio: 100.0,
            color: 1,
            integer: false,
        },
    ];
    if rows.iter().any(|r| r.2.errors > 0) {
        panels.push(Panel {
            title: "errors (count)".into(),
            values: rows.iter().map(|r| Some(r.2.errors as f64)).collect(),
            log_ratio: 1000.0,
            color: 3,
            integer: true,
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
    figs.push(errors_chart(set));
    if let Some(f) = lag_chart(set) {
        figs.push(f);
    }
    figs.extend(endpoint_charts(set));
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

// ---------------------------------------------------------------------------------------
// The page.

const CSS: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans","Liberation Sans",sans-serif;color:#1d232b;background:#f4f5f7}
header.top{background:#1f2d3d;color:#fff;padding:18px 28px}
header.top h1{margin:0 0 4px;font-size:22px;font-weight:600}
header.top .sub{color:#c9d3df;font-size:14px}
header.top .model{display:inline-block;background:#0072b2;color:#fff;border-radius:4px;padding:1px 8px;margin-right:8px;font-weight:600}
header.top .flag{display:inline-block;background:#d55e00;color:#fff;border-radius:4px;padding:1px 8px;margin-left:8px;font-weight:600}
nav{background:#fff;border-bottom:1px solid #dde1e6;padding:6px 28px;font-size:13px;position:sticky;top:0;z-index:1}
nav a{color:#0b5ea8;text-decoration:none;margin-right:14px}
main{max-width:1320px;margin:0 auto;padding:8px 24px 40px}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:14px 20px;margin:16px 0}
h2{font-size:17px;margin:0 0 10px;font-weight:600}
h3{font-size:14px;margin:14px 0 6px;font-weight:600;color:#39424e}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:4px 0}
th,td{padding:3px 8px;border-bottom:1px solid #e8eaee;text-align:right;white-space:nowrap}
th{font-weight:600;color:#39424e;background:#f7f8fa;border-bottom:1px solid #cfd4da}
th:first-child,td:first-child{text-align:left}
td.name{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:13px}
tr.sub td.name{padding-left:24px;color:#555}
.scroll{overflow-x:auto}
dl.facts{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:4px 16px;margin:0}
dl.facts dt{color:#5b6570}
dl.facts dd{margin:0;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
.warnings{border-left:6px solid #d55e00;background:#fff6ef}
.warnings ul{margin:4px 0;padding-left:18px}
.warnings li{margin:4px 0}
.warnings code{background:#fde3d0;border-radius:3px;padding:0 4px}
.ok{border-left:6px solid #009e73}
.muted{color:#68727d}
.bad{color:#b3261e;font-weight:600}
figure{margin:8px 0 22px}
figure svg{display:block;width:100%;max-width:1000px;height:auto}
figcaption{color:#4b5561;font-size:13px;max-width:1000px;margin-top:4px}
pre{background:#f4f5f7;border:1px solid #e1e4e8;border-radius:4px;padding:10px 12px;max-height:520px;overflow:auto;font-size:12px;line-height:1.4}
footer{color:#68727d;font-size:12px;text-align:center;margin:24px 0}
@media print{nav{display:none}body{background:#fff}section{border:none;padding:0}pre{max-height:none}}
"#;

fn opt_ms(p: Option<&Percentiles>, f: impl Fn(&Percentiles) -> f64) -> String {
    p.map(|p| ms(f(p))).unwrap_or_else(|| "–".into())
}

fn mib(bytes_per_s: f64) -> String {
    format!("{:.2}", bytes_per_s / (1024.0 * 1024.0))
}

fn bytes(n: u64) -> String {
    crate::units::ByteSize(n).to_string()
}

fn td(out: &mut String, v: impl std::fmt::Display) {
    let _ = write!(out, "<td>{}</td>", escape(&v.to_string()));
}

fn fact(out: &mut String, name: &str, value: &str) {
    let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(value));
}

fn ops_table(out: &mut String, rows: &[(&String, &OpSummary)], delay: bool, class: &str) {
    // Schedule columns only where some row was scheduled (not upload sub-requests, sessions).
    let delay = delay
        && rows
            .iter()
            .any(|(_, s)| s.schedule_lag_ms.is_some() || s.service_ms.is_some());
    let any_errors = rows.iter().any(|(_, s)| s.errors > 0);
    out.push_str("<div class=\"scroll\"><table class=\"ops\"><thead><tr><th>operation</th><th>count</th><th>ok</th><th>errors</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>mean</th><th>req/s</th><th>MiB/s</th>");
    if any_errors {
        out.push_str("<th title=\"latency of failures; timeouts are censored at the timeout\">failed p99</th>");
    }
    if delay {
        out.push_str("<th title=\"send → end\">service p99</th><th title=\"intended start → send\">lag p99</th><th title=\"operations sent more than 10 ms after their intended start\">late &gt;10 ms</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (name, s) in rows {
        let l = s.latency_ms.as_ref();
        let _ = write!(
            out,
            "<tr class=\"{class}\"><td class=\"name\">{}</td>",
            escape(name)
        );
        td(out, s.count);
        td(out, s.ok);
        if s.errors > 0 {
            let _ = write!(out, "<td class=\"bad\">{}</td>", s.errors);
        } else {
            td(out, 0);
        }
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p90));
        td(out, opt_ms(l, |p| p.p99));
        td(out, opt_ms(l, |p| p.p999));
        td(out, opt_ms(l, |p| p.max));
        td(out, opt_ms(l, |p| p.mean));
        td(out, format!("{:.1}", s.requests_per_s));
        td(out, mib(s.bytes_per_s));
        if any_errors {
            td(out, opt_ms(s.error_latency_ms.as_ref(), |p| p.p99));
        }
        if delay {
            td(out, opt_ms(s.service_ms.as_ref(), |p| p.p99));
            td(out, opt_ms(s.schedule_lag_ms.as_ref(), |p| p.p99));
            td(
                out,
                s.late_starts
                    .map_or_else(|| "–".to_owned(), |l| l.over_10ms.to_string()),
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

fn header_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let _ = write!(
        out,
        "<header class=\"top\"><h1>creb-rs {} → {}</h1><div class=\"sub\"><span class=\"model\">{}</span>started {} · {:.2} s · {} operations · {}{}</div></header>",
        escape(&s.command),
        escape(&s.registry),
        escape(&s.model_label()),
        escape(&s.started_at),
        s.duration_s,
        s.totals.requests,
        if s.totals.errors > 0 {
            format!("<span class=\"flag\">{} errors</span>", s.totals.errors)
        } else {
            "0 errors".to_owned()
        },
        if s.interrupted {
            "<span class=\"flag\">INTERRUPTED</span>"
        } else {
            ""
        }
    );
}

fn nav(out: &mut String, figs: &[Figure]) {
    out.push_str("<nav><a href=\"#run\">run</a><a href=\"#operations\">operations</a><a href=\"#errors\">errors</a>");
    for f in figs {
        let _ = write!(
            out,
            "<a href=\"#fig-{}\">{}</a>",
            f.id,
            escape(&f.title.to_lowercase())
        );
    }
    out.push_str(
        "<a href=\"#size-classes\">size classes</a><a href=\"#metadata\">metadata</a></nav>",
    );
}

fn warnings_section(out: &mut String, set: &ResultSet) {
    let w = &set.summary.warnings;
    if w.is_empty() {
        out.push_str("<section class=\"ok\" id=\"warnings\"><h2>Validity</h2><p class=\"muted\">No warnings: the self-checks found nothing that invalidates these numbers.</p></section>");
        return;
    }
    let _ = write!(
        out,
        "<section class=\"warnings\" id=\"warnings\"><h2>⚠ {} warning{} about the validity of this result</h2><ul>",
        w.len(),
        if w.len() == 1 { "" } else { "s" }
    );
    for w in w {
        let _ = write!(
            out,
            "<li><code>{}</code> {}</li>",
            escape(&w.kind),
            escape(&w.message)
        );
    }
    out.push_str("</ul></section>");
}

fn run_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let m = &set.meta;
    out.push_str("<section id=\"run\"><h2>Run</h2><dl class=\"facts\">");
    fact(out, "command", &s.command);
    fact(out, "mode (model)", &s.model_label());
    fact(out, "registry", &s.registry);
    // A pull generates nothing, so its seed means nothing.
    let seed = if s.command == "pull" {
        "–".to_owned()
    } else {
        s.seed.to_string()
    };
    fact(out, "seed", &seed);
    if m.hosts.is_empty() {
        fact(
            out,
            "shard",
            &format!("{}/{}", s.shard.index, s.shard.count),
        );
        fact(out, "host", &m.host);
    } else {
        let shards: Vec<String> = m
            .hosts
            .iter()
            .map(|h| format!("{}/{}", h.shard.index, h.shard.count))
            .collect();
        fact(out, "shards", &format!("merged: {}", shards.join(", ")));
        fact(out, "hosts", &format!("{} (table below)", m.hosts.len()));
    }
    fact(out, "started at", &s.started_at);
    fact(out, "duration", &format!("{:.3} s", s.duration_s));
    fact(
        out,
        "interrupted",
        if s.interrupted {
            "yes — partial results"
        } else {
            "no"
        },
    );
    fact(out, "interval", &format!("{} s", m.interval_s));
    fact(out, "anchor (interval 0)", &m.anchor);
    fact(out, "actual start", &m.actual_start);
    fact(out, "tool", &format!("{} {}", s.tool.name, s.tool.version));
    fact(out, "in-flight limit", &s.concurrency.to_string());
    fact(out, "config hash", &m.config_hash);
    fact(out, "dataset hash", &m.dataset_hash);
    fact(out, "result directory", &set.dir.display().to_string());
    let t = &s.totals;
    fact(
        out,
        "totals",
        &format!(
            "{} operations ({} ok, {} errors), {} HTTP requests",
            t.requests, t.ok, t.errors, t.http_requests
        ),
    );
    fact(
        out,
        "bytes",
        &format!(
            "sent {}, received {}",
            bytes(t.bytes_sent),
            bytes(t.bytes_received)
        ),
    );
    fact(
        out,
        "throughput",
        &format!(
            "{:.1} op/s, {} MiB/s",
            s.throughput.requests_per_s,
            mib(s.throughput.bytes_per_s)
        ),
    );
    out.push_str("</dl>");

    if !m.hosts.is_empty() {
        out.push_str("<h3>Hosts (merged result)</h3><div class=\"scroll\"><table><thead><tr><th>host</th><th>shard</th><th>actual start</th><th>start skew</th><th>operations</th><th>errors</th><th>p99</th><th>directory</th></tr></thead><tbody>");
        for h in &m.hosts {
            let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(&h.host));
            td(out, format!("{}/{}", h.shard.index, h.shard.count));
            td(out, &h.actual_start);
            td(out, h.start_skew_ms.map_or_else(|| "–".into(), ms));
            td(out, h.requests);
            if h.errors > 0 {
                let _ = write!(out, "<td class=\"bad\">{}</td>", h.errors);
            } else {
                td(out, 0);
            }
            td(out, h.p99_ms.map_or_else(|| "–".into(), ms));
            let _ = write!(
                out,
                "<td class=\"mono\" style=\"text-align:left\">{}</td></tr>",
                escape(&h.dir)
            );
        }
        out.push_str("</tbody></table></div>");
    }

    if let Some(tr) = &s.trace {
        let skipped: u64 = tr.skipped.values().sum();
        let balanced = tr.records == tr.replayed + tr.folded + skipped;
        out.push_str("<h3>Trace accounting</h3><table><thead><tr><th>records</th><th>replayed</th><th>folded</th><th>skipped</th>");
        for reason in tr.skipped.keys() {
            let _ = write!(out, "<th>skipped: {}</th>", escape(reason));
        }
        out.push_str("</tr></thead><tbody><tr>");
        let _ = write!(out, "<td style=\"text-align:right\">{}</td>", tr.records);
        td(out, tr.replayed);
        td(out, tr.folded);
        td(out, skipped);
        for n in tr.skipped.values() {
            td(out, n);
        }
        let _ = write!(
            out,
            "</tr></tbody></table><p class=\"muted\">records = replayed + folded + skipped: {}. Folded records were carried out inside another operation (a PATCH or closing PUT of an upload replayed as one session).</p>",
            if balanced {
                "balanced".to_owned()
            } else {
                format!(
                    "<span class=\"bad\">does not add up ({} ≠ {})</span>",
                    tr.records,
                    tr.replayed + tr.folded + skipped
                )
            }
        );
    }

    if let Some(c) = &s.checks {
        out.push_str("<h3>Self-checks</h3><dl class=\"facts\">");
        if let Some(p) = &c.canary_wake_ms {
            fact(
                out,
                "canary wake-up (10 ms sleep)",
                &format!("p50 {} · p99 {} · max {}", ms(p.p50), ms(p.p99), ms(p.max)),
            );
        }
        match (c.cpu_seconds, c.cpu_share) {
            (Some(sec), Some(share)) => fact(
                out,
                "generator CPU",
                &format!("{sec:.2} s, {:.1}% of {} cores", share * 100.0, c.cores),
            ),
            _ => fact(
                out,
                "generator CPU",
                &format!("not measured ({} cores)", c.cores),
            ),
        }
        fact(
            out,
            "in-flight cap binding",
            &format!("{:.1}% of the run", c.cap_binding_share * 100.0),
        );
        fact(out, "max in flight", &c.max_in_flight.to_string());
        fact(out, "shared start", c.start_at.as_deref().unwrap_or("–"));
        fact(
            out,
            "start skew",
            &c.start_skew_ms.map_or_else(|| "–".into(), ms),
        );
        out.push_str("</dl>");
    }
    out.push_str("</section>");
}

fn operations_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let delay = is_delay(set);
    let ops: Vec<_> = s
        .operations
        .iter()
        .filter(|(n, _)| level_of(n) != Some(Level::Request))
        .collect();
    let requests: Vec<_> = s
        .operations
        .iter()
        .filter(|(n, _)| level_of(n) == Some(Level::Request))
        .collect();
    let sessions: Vec<_> = s.sessions.iter().collect();
    let what = if delay {
        "Response time from the intended start (the schedule) to the end of the body, successes only; service time from the send; lag from the intended start to the send."
    } else {
        "Latency from the send to the end of the body, successes only."
    };
    let _ = write!(
        out,
        "<section id=\"operations\"><h2>Operations</h2><p class=\"muted\">{}</p>",
        escape(what)
    );
    ops_table(out, &ops, delay, "op");
    if !requests.is_empty() {
        out.push_str("<h3>HTTP requests inside operations</h3><p class=\"muted\">The single exchanges of uploads, redirect hops and token fetches; not counted in the totals.</p>");
        ops_table(out, &requests, delay, "sub");
    }
    if !sessions.is_empty() {
        out.push_str("<h3>Sessions</h3><p class=\"muted\">An image pull or push as a whole: from the (intended) start of its first operation to the end of its last.</p>");
        ops_table(out, &sessions, delay, "session");
    }
    out.push_str("</section>");
}

/// Runs over several endpoints: one line per node.
fn endpoints_section(out: &mut String, set: &ResultSet) {
    let Some(endpoints) = &set.summary.endpoints else {
        return;
    };
    let s = &set.summary;
    out.push_str("<section id=\"endpoints\"><h2>Endpoints</h2><p class=\"muted\">Every workload operation is counted on exactly the endpoint that carried it (or, failing as endpoint_down, the one it was meant for): the lines add up to the totals. Latency is that of the operation the node carried most; percentiles never mix operations.</p>");
    out.push_str("<div class=\"scroll\"><table class=\"ops\"><thead><tr><th>#</th><th>endpoint</th><th>count</th><th>share</th><th>ok</th><th>errors</th><th>req/s</th><th>MiB/s</th><th>busiest op</th><th>p50</th><th>p99</th><th style=\"text-align:left\">down/up</th></tr></thead><tbody>");
    let all = s.totals.requests.max(1) as f64;
    let secs = s.duration_s.max(1e-9);
    let mut by_index: Vec<_> = endpoints.iter().collect();
    by_index.sort_by_key(|(_, e)| e.index);
    for (url, e) in by_index {
        let main = e
            .operations
            .iter()
            .filter(|(_, o)| o.latency_ms.is_some())
            .max_by_key(|(_, o)| o.count);
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"name\">{}</td>",
            e.index,
            escape(url)
        );
        td(out, e.totals.requests);
        td(
            out,
            format!("{:.1}%", e.totals.requests as f64 * 100.0 / all),
        );
        td(out, e.totals.ok);
        if e.totals.errors > 0 {
            let _ = write!(out, "<td class=\"bad\">{}</td>", e.totals.errors);
        } else {
            td(out, 0);
        }
        td(out, format!("{:.1}", e.totals.requests as f64 / secs));
        td(
            out,
            mib((e.totals.bytes_received + e.totals.bytes_sent) as f64 / secs),
        );
        td(out, escape(main.map_or("–", |(n, _)| n.as_str())));
        let l = main.and_then(|(_, o)| o.latency_ms.as_ref());
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p99));
        let transitions: Vec<String> = e
            .transitions
            .iter()
            .map(|t| {
                let host = t
                    .host
                    .as_deref()
                    .map_or(String::new(), |h| format!(" ({h})"));
                format!("{} at {:.1} s{host}", t.state, t.offset_s)
            })
            .collect();
        let _ = write!(
            out,
            "<td style=\"text-align:left\">{}</td></tr>",
            escape(&if transitions.is_empty() {
                "–".to_owned()
            } else {
                transitions.join(", ")
            })
        );
    }
    out.push_str("</tbody></table></div></section>");
}

fn errors_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    out.push_str("<section id=\"errors\"><h2>Errors and events</h2>");
    if s.errors.is_empty() {
        out.push_str("<p class=\"muted\">No failed operations.</p>");
    } else {
        out.push_str("<table><thead><tr><th>kind</th><th>count</th><th style=\"text-align:left\">by operation</th></tr></thead><tbody>");
        for (kind, n) in &s.errors {
            let by: Vec<String> = s
                .operations
                .iter()
                .chain(s.sessions.iter())
                .filter_map(|(op, o)| o.errors_by_kind.get(kind).map(|k| format!("{op} {k}")))
                .collect();
            let _ = write!(
                out,
                "<tr><td class=\"name\">{}</td><td class=\"bad\">{}</td><td style=\"text-align:left\">{}</td></tr>",
                escape(kind),
                n,
                escape(&by.join(", "))
            );
        }
        out.push_str("</tbody></table>");
    }
    if !s.events.is_empty() {
        out.push_str(
            "<h3>Events</h3><table><thead><tr><th>event</th><th>count</th></tr></thead><tbody>",
        );
        for (name, n) in &s.events {
            let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(name));
            td(out, n);
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

fn charts_section(out: &mut String, figs: &[Figure]) {
    out.push_str("<section id=\"charts\"><h2>Charts</h2>");
    for f in figs.iter().filter(|f| f.id != "size-classes") {
        let _ = write!(
            out,
            "<figure id=\"fig-{}\">{}<figcaption>{}</figcaption></figure>",
            f.id,
            f.svg,
            escape(&f.caption)
        );
    }
    out.push_str("</section>");
}

fn size_class_section(out: &mut String, set: &ResultSet, figs: &[Figure]) {
    out.push_str("<section id=\"size-classes\"><h2>Size classes</h2>");
    if let Some(f) = figs.iter().find(|f| f.id == "size-classes") {
        let _ = write!(
            out,
            "<figure id=\"fig-{}\">{}<figcaption>{}</figcaption></figure>",
            f.id,
            f.svg,
            escape(&f.caption)
        );
    }
    let rows = class_rows(set);
    out.push_str("<div class=\"scroll\"><table><thead><tr><th>operation</th><th>size class</th><th>count</th><th>ok</th><th>errors</th><th>bytes</th><th>p50</th><th>p99</th><th>max</th></tr></thead><tbody>");
    for (op, class, c) in rows {
        let _ = write!(
            out,
            "<tr><td class=\"name\">{}</td><td style=\"text-align:left\">{}</td>",
            escape(op),
            escape(class_label(class))
        );
        td(out, c.count);
        td(out, c.ok);
        td(out, c.errors);
        td(out, bytes(c.bytes));
        let l = c.latency_ms.as_ref();
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p99));
        td(out, opt_ms(l, |p| p.max));
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>");
}

fn metadata_section(out: &mut String, set: &ResultSet) -> anyhow::Result<()> {
    out.push_str("<section id=\"metadata\"><h2>Metadata</h2>");
    let h = &set.summary.histograms;
    let _ = write!(
        out,
        "<p class=\"muted\">Histograms: {} to {} {} with {} significant digits. {}</p>",
        h.lowest_discernible,
        h.highest_trackable,
        escape(&h.unit),
        h.significant_digits,
        escape(&set.meta.clock)
    );
    let config = serde_json::to_string_pretty(&set.meta.config)?;
    let _ = write!(
        out,
        "<h3>Resolved configuration</h3><pre class=\"mono\" id=\"config\">{}</pre>",
        escape(&config)
    );
    let mut meta = serde_json::to_value(&set.meta)?;
    if let Some(obj) = meta.as_object_mut() {
        obj.remove("config");
    }
    let _ = write!(
        out,
        "<h3>meta.json (without the configuration)</h3><pre class=\"mono\" id=\"meta\">{}</pre></section>",
        escape(&serde_json::to_string_pretty(&meta)?)
    );
    Ok(())
}

/// Renders the HTML report of a result directory.
pub fn render(set: &ResultSet) -> anyhow::Result<String> {
    let figs = figures(set)?;
    let s = &set.summary;
    let mut out = String::with_capacity(256 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"generator\" content=\"creb-rs {}\"><title>creb-rs {} {} — {}</title><style>{CSS}</style></head><body>",
        escape(env!("CARGO_PKG_VERSION")),
        escape(&s.command),
        escape(&s.model_label()),
        escape(&s.registry)
    );
    header_section(&mut out, set);
    nav(
        &mut out,
        &figs
            .iter()
            .filter(|f| f.id != "size-classes")
            .cloned()
            .collect::<Vec<_>>(),
    );
    out.push_str("<main>");
    warnings_section(&mut out, set);
    run_section(&mut out, set);
    operations_section(&mut out, set);
    endpoints_section(&mut out, set);
    errors_section(&mut out, set);
    charts_section(&mut out, &figs);
    size_class_section(&mut out, set, &figs);
    metadata_section(&mut out, set)?;
    let _ = writeln!(
        out,
        "</main><footer>Generated by creb-rs {} from {}. Self-contained: no scripts, nothing fetched.</footer></body></html>",
        escape(env!("CARGO_PKG_VERSION")),
        escape(&set.dir.display().to_string())
    );
    Ok(out)
}
