//! The HTML report of a capacity search or ladder (`creb-rs report OUT --format html` where
//! OUT holds capacity.json): the answer, the curves people expect — latency percentiles
//! against offered load (the "hockey stick") and achieved against offered throughput — and
//! the steps' table. Read from capacity.json as written, so a merged ladder renders like
//! one host's; every step's own report is `report OUT/steps/NN`.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::result::CAPACITY_JSON;
use crate::metrics::{Level, Op};
use crate::report::chart::{escape, line_chart, LineChart, Series, XScale, YScale, TOTAL};
use crate::report::page;
use crate::results::thresholds::Threshold;

/// The steps sorted by offered load: (offered, achieved, step).
fn by_offered(c: &Value) -> Vec<(f64, f64, &Value)> {
    let mut steps: Vec<(f64, f64, &Value)> = c["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["offered_rps"].as_f64().unwrap_or(0.0),
                s["achieved_rps"].as_f64().unwrap_or(0.0),
                s,
            )
        })
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    steps
}

/// Latency percentiles (p50, p99) of every workload operation against the offered load.
fn latency_chart(c: &Value) -> String {
    let steps = by_offered(c);
    let mut ops: Vec<String> = steps
        .iter()
        .flat_map(|(_, _, s)| s["percentiles"].as_object().into_iter().flatten())
        .map(|(op, _)| op.clone())
        // The workload's operations: the HTTP exchanges inside them (an upload's PATCHes)
        // are in each step's own report.
        .filter(|op| Op::from_name(op).map(Op::level) != Some(Level::Request))
        .collect();
    ops.sort();
    ops.dedup();
    let mut series = Vec::new();
    for (color, op) in ops.iter().enumerate() {
        for (which, name, dashed) in [(1, "p99", false), (0, "p50", true)] {
            let points: Vec<(f64, f64)> = steps
                .iter()
                .filter_map(|(offered, _, s)| {
                    let v = s["percentiles"][op][which].as_f64()?;
                    Some((*offered, v))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    name: format!("{op} {name}"),
                    points,
                    color,
                    dashed,
                });
            }
        }
    }
    // Each latency objective as a line across the loads: where a curve crosses it.
    let (lo, hi) = steps.iter().fold((0.0f64, 0.0f64), |(lo, hi), (x, _, _)| {
        (lo.min(*x), hi.max(*x))
    });
    let objectives = c["objectives"].as_array().into_iter().flatten();
    for text in objectives.filter_map(Value::as_str) {
        let limit = Threshold::parse(text)
            .ok()
            .and_then(|t| t.latency_limit_ms());
        if let (Some(ms), true) = (limit, hi > lo) {
            series.push(Series {
                name: format!("objective: {text}"),
                points: vec![(lo, ms), (hi, ms)],
                color: TOTAL,
                dashed: true,
            });
        }
    }
    line_chart(&LineChart {
        id: "capacity-latency".into(),
        title: "Latency against offered load".into(),
        x_label: "offered operations per second".into(),
        y_label: "latency (ms)".into(),
        x: XScale::Linear,
        y: YScale::Auto(20.0),
        series,
        subtitle: "each step's p99 (solid) and p50 (dashed), after its warm-up; sessions \
                   (image_pull) beside operations; each latency objective as a dashed line"
            .into(),
        x_extent: vec![0.0],
    })
}

/// Achieved against offered operations per second, with the line where they are equal.
fn throughput_chart(c: &Value) -> String {
    let steps = by_offered(c);
    let top = steps.iter().map(|(o, a, _)| o.max(*a)).fold(0.0, f64::max);
    line_chart(&LineChart {
        id: "capacity-throughput".into(),
        title: "Achieved against offered throughput".into(),
        x_label: "offered operations per second".into(),
        y_label: "achieved operations per second".into(),
        x: XScale::Linear,
        y: YScale::Linear,
        series: vec![
            Series {
                name: "achieved".into(),
                points: steps.iter().map(|(o, a, _)| (*o, *a)).collect(),
                color: 0,
                dashed: false,
            },
            Series {
                name: "achieved = offered".into(),
                points: vec![(0.0, 0.0), (top, top)],
                color: 7,
                dashed: true,
            },
        ],
        subtitle: "a registry that keeps up stays on the dashed line".into(),
        x_extent: vec![0.0],
    })
}

fn number(v: &Value, digits: usize) -> String {
    v.as_f64()
        .map_or_else(|| "–".to_owned(), |x| format!("{x:.digits$}"))
}

/// Every step: its speed, what it offered and achieved, its outcome and why.
fn steps_table(out: &mut String, c: &Value) {
    out.push_str(
        "<section id=\"steps\"><h2>Steps</h2><table><thead><tr><th>step</th><th>speed</th>\
         <th>offered/s</th><th>achieved/s</th><th class=\"l\">outcome</th><th class=\"l\">why</th>\
         </tr></thead><tbody>",
    );
    for s in c["steps"].as_array().into_iter().flatten() {
        let outcome = s["outcome"].as_str().unwrap_or("");
        let class = if outcome == "sustained" {
            ""
        } else {
            " class=\"failed\""
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}×</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l msg\">{}</td></tr>",
            s["index"],
            number(&s["speed"], 3),
            number(&s["offered_rps"], 1),
            number(&s["achieved_rps"], 1),
            escape(outcome),
            escape(s["why"].as_str().unwrap_or(""))
        );
    }
}

/// The page of the capacity result in `dir`.
pub fn render(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(CAPACITY_JSON);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let c: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not valid JSON: {e}", path.display()))?;
    let mut out = String::with_capacity(64 * 1024);
    let kind = c["kind"].as_str().unwrap_or("search");
    page::begin(&mut out, &format!("creb-rs capacity {kind}"));
    let cap = &c["capacity"];
    let answer = match cap["speed"].as_f64() {
        Some(speed) => format!(
            "{}{speed:.3}× the trace's load, {} operations/s",
            if cap["at_least"] == true {
                "at least "
            } else {
                ""
            },
            number(&cap["requests_per_s"], 1)
        ),
        None => "no load sustained".to_owned(),
    };
    let _ = write!(
        out,
        "<header class=\"top\"><h1>creb-rs capacity ({})</h1><div class=\"sub\">{} · limited by {} · {}</div></header>",
        escape(kind),
        escape(&answer),
        escape(c["limited_by"].as_str().unwrap_or("")),
        escape(c["ended"].as_str().unwrap_or(""))
    );
    out.push_str(
        "<nav><a href=\"#answer\">answer</a><a href=\"#capacity-latency\">latency</a>\
         <a href=\"#capacity-throughput\">throughput</a><a href=\"#steps\">steps</a></nav><main>",
    );
    let objectives: Vec<String> = c["objectives"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_str().map(escape))
        .collect();
    let _ = write!(
        out,
        "<section id=\"answer\"><h2>Answer</h2><dl class=\"facts\"><dt>capacity</dt><dd>{}</dd>\
         <dt>not sustained at</dt><dd>{}</dd><dt>throttled (429) from</dt><dd>{}</dd>\
         <dt>objectives</dt><dd>{}</dd><dt>steps</dt><dd>{} s measured after {} s of warm-up</dd></dl></section>",
        escape(&answer),
        cap["upper_speed"].as_f64().map_or("–".to_owned(), |s| format!(
            "{s:.3}× ({} operations/s offered)",
            number(&cap["upper_requests_per_s"], 1)
        )),
        c["throttle_onset"]["speed"].as_f64().map_or("–".to_owned(), |s| format!(
            "{s:.3}× ({} operations/s offered)",
            number(&c["throttle_onset"]["requests_per_s"], 1)
        )),
        objectives.join(" · "),
        number(&c["step_s"], 1),
        number(&c["warmup_s"], 1)
    );
    for (id, title, svg, caption) in [
        (
            "capacity-latency",
            "Latency against offered load",
            latency_chart(&c),
            "Each step's percentiles against the load it offered: flat while the registry \
             keeps up, then the knee where queues build (the hockey stick).",
        ),
        (
            "capacity-throughput",
            "Achieved against offered throughput",
            throughput_chart(&c),
            "Operations completed per second against those offered: on the dashed line while \
             the registry keeps up, below it once it falls behind.",
        ),
    ] {
        let _ = write!(
            out,
            "<section id=\"{id}\"><h2>{title}</h2><figure>{svg}<figcaption>{caption}</figcaption></figure></section>"
        );
    }
    steps_table(&mut out, &c);
    out.push_str("</tbody></table></section></main>");
    page::end(&mut out, &format!("from {}", dir.display()));
    Ok(out)
}
