//! What a cache saves, when `--split-by-header` names a cache's status header: the share of
//! operations and of bytes the cache answered, over time (from `split.csv`), and the latency
//! of hits beside misses for every operation (from `summary.json`'s `split_by_header`).

use std::collections::BTreeMap;

use super::figure::Figure;
use crate::metrics::split::is_hit;
use crate::report::chart::{
    bar_chart, line_chart, BarChart, LineChart, Panel, Series, XScale, YScale,
};
use crate::results::ResultSet;

/// The cache's charts, over time from 0 to the end of `x_extent`; none when the split
/// header is not a cache's status.
pub(super) fn cache_figures(set: &ResultSet, x_extent: Vec<f64>) -> Vec<Figure> {
    let Some(split) = &set.summary.split_by_header else {
        return Vec::new();
    };
    if split.hit_ratio.is_empty() {
        return Vec::new();
    }
    let mut figs = Vec::new();
    figs.extend(hit_ratio_chart(set, &split.header, x_extent));
    figs.extend(hit_latency_chart(set, &split.header));
    figs
}

/// Points of a line: (seconds since the start, value).
type Points = Vec<(f64, f64)>;

/// Per interval (its midpoint): the share of operations, and of bytes, that were hits.
fn hit_ratio_series(set: &ResultSet) -> (Points, Points) {
    let len = set.meta.interval_s.max(1e-3);
    // Interval → (start, operations, hits, bytes, hit bytes).
    let mut by_interval: BTreeMap<u64, (f64, u64, u64, u64, u64)> = BTreeMap::new();
    for row in &set.split_rows {
        let num = |i: usize| row.get(i).and_then(|v| v.parse::<u64>().ok());
        let start = row.get(1).and_then(|v| v.parse::<f64>().ok());
        let (Some(interval), Some(start), Some(value), Some(n), Some(bytes)) =
            (num(0), start, row.get(2), num(3), num(4))
        else {
            continue;
        };
        let e = by_interval.entry(interval).or_insert((start, 0, 0, 0, 0));
        e.1 += n;
        e.3 += bytes;
        if is_hit(value) {
            e.2 += n;
            e.4 += bytes;
        }
    }
    let share = |part: u64, all: u64| part as f64 * 100.0 / all.max(1) as f64;
    let requests = by_interval
        .values()
        .filter(|e| e.1 > 0)
        .map(|e| (e.0 + len / 2.0, share(e.2, e.1)))
        .collect();
    let bytes = by_interval
        .values()
        .filter(|e| e.3 > 0)
        .map(|e| (e.0 + len / 2.0, share(e.4, e.3)))
        .collect();
    (requests, bytes)
}

fn hit_ratio_chart(set: &ResultSet, header: &str, x_extent: Vec<f64>) -> Option<Figure> {
    let (requests, bytes) = hit_ratio_series(set);
    if requests.is_empty() {
        return None;
    }
    let title = "Cache hit ratio over time";
    let all = set.summary.split_by_header.as_ref()?.hit_ratio.get("all")?;
    Some(Figure {
        id: "cache-hit-ratio",
        title: title.into(),
        caption: format!(
            "The share of operations (and of their bytes) the cache answered itself, per \
             interval: answers whose {header} says so (HIT, or nginx's STALE, UPDATING, \
             REVALIDATED). Over the run: {:.1}% of operations, {:.1}% of bytes. A cold \
             cache starts low and climbs as it fills; a ratio by bytes below the ratio by \
             operations means the large objects miss.",
            all.requests * 100.0,
            all.bytes * 100.0
        ),
        svg: line_chart(&LineChart {
            id: "cache-hit-ratio".into(),
            title: title.into(),
            x_label: "time since start (s)".into(),
            y_label: "hits (%)".into(),
            x: XScale::Linear,
            y: YScale::Linear,
            series: vec![
                Series {
                    name: "of operations".into(),
                    points: requests,
                    color: 0,
                    dashed: false,
                },
                Series {
                    name: "of bytes".into(),
                    points: bytes,
                    color: 1,
                    dashed: true,
                },
            ],
            subtitle: format!(
                "per interval of {} s; workload operations by {header}",
                set.meta.interval_s
            ),
            x_extent,
        }),
    })
}

/// Every operation's hits and misses (each value of the header with successes), p50 and
/// p99 side by side.
fn hit_latency_chart(set: &ResultSet, header: &str) -> Option<Figure> {
    let split = set.summary.split_by_header.as_ref()?;
    let mut rows = Vec::new();
    let mut groups = Vec::new();
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for (group, op) in set.summary.operations.keys().enumerate() {
        for (value, ops) in &split.values {
            let Some(latency) = ops.get(op).and_then(|c| c.latency_ms) else {
                continue;
            };
            rows.push(format!("{op}  {value}"));
            groups.push(group);
            p50.push(latency.p50);
            p99.push(latency.p99);
        }
    }
    if rows.is_empty() {
        return None;
    }
    let panel = |title: &str, values: Vec<Option<f64>>, color| Panel {
        title: title.into(),
        values,
        log_ratio: 100.0,
        color,
        integer: false,
        ranges: Vec::new(),
    };
    let title = "Latency of hits and misses";
    Some(Figure {
        id: "cache-latency",
        title: title.into(),
        caption: format!(
            "Each operation's successes by the {header} of their answer: what a hit saves \
             is the distance between its bars and the miss's."
        ),
        svg: bar_chart(&BarChart {
            id: "cache-latency".into(),
            title: title.into(),
            subtitle: format!("successes per operation and {header} value"),
            rows,
            groups,
            panels: vec![
                panel("p50 latency (ms)", p50, 0),
                panel("p99 latency (ms)", p99, 1),
            ],
        }),
    })
}
