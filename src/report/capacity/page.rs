//! The HTML report of a capacity search or ladder (`creb-rs report OUT --format html` where
//! OUT holds capacity.json): the answer, the curves people expect — latency percentiles
//! against offered load (the "hockey stick") and achieved against offered throughput — and
//! the steps' table. Read from capacity.json as written, so a merged ladder renders like
//! one host's; every step's own report is `report OUT/steps/NN`.

use std::fmt::Write as _;
use std::path::Path;

use crate::metrics::{Level, Op};
use crate::report::chart::{escape, line_chart, LineChart, Series, XScale, YScale, TOTAL};
use crate::report::page;
use crate::results::capacity::{CapacityResult, Outcome, StepRecord};
use crate::results::thresholds::Threshold;

/// The steps sorted by offered load: (offered, achieved, step).
fn by_offered(c: &CapacityResult) -> Vec<(f64, f64, &StepRecord)> {
    let mut steps: Vec<(f64, f64, &StepRecord)> = c
        .steps
        .iter()
        .map(|s| (s.offered_rps, s.achieved_rps, s))
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    steps
}

/// Latency percentiles (p50, p99) of every workload operation against the offered load.
fn latency_chart(c: &CapacityResult) -> String {
    let steps = by_offered(c);
    let mut ops: Vec<&String> = steps
        .iter()
        .flat_map(|(_, _, s)| s.percentiles.keys())
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
                    let v = s.percentiles.get(*op)?[which]?;
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
    for text in &c.objectives {
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
fn throughput_chart(c: &CapacityResult) -> String {
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

fn number(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |x| format!("{x:.digits$}"))
}

/// Every step: its speed, what it offered and achieved, its outcome and why.
fn steps_table(out: &mut String, c: &CapacityResult) {
    out.push_str(
        "<section id=\"steps\"><h2>Steps</h2><table><thead><tr><th>step</th><th>speed</th>\
         <th>offered/s</th><th>achieved/s</th><th class=\"l\">outcome</th><th class=\"l\">why</th>\
         </tr></thead><tbody>",
    );
    for s in &c.steps {
        let class = if s.outcome == Outcome::Sustained {
            ""
        } else {
            " class=\"failed\""
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}×</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l msg\">{}</td></tr>",
            s.index,
            number(Some(s.speed), 3),
            number(Some(s.offered_rps), 1),
            number(Some(s.achieved_rps), 1),
            escape(s.outcome.name()),
            escape(s.why.as_deref().unwrap_or(""))
        );
    }
}

/// The answer, the loads around it, the objectives and the steps' length.
fn answer_section(out: &mut String, c: &CapacityResult, answer: &str) {
    let cap = &c.capacity;
    let objectives: Vec<String> = c.objectives.iter().map(|o| escape(o)).collect();
    let throttled = c
        .throttle_onset
        .as_ref()
        .and_then(|t| Some((t.speed?, t.requests_per_s)));
    let _ = write!(
        out,
        "<section id=\"answer\"><h2>Answer</h2><dl class=\"facts\"><dt>capacity</dt><dd>{}</dd>\
         <dt>not sustained at</dt><dd>{}</dd><dt>throttled (429) from</dt><dd>{}</dd>\
         <dt>objectives</dt><dd>{}</dd><dt>steps</dt><dd>{} s measured after {} s of warm-up</dd></dl></section>",
        escape(answer),
        cap.upper_speed.map_or("–".to_owned(), |s| format!(
            "{s:.3}× ({} operations/s offered)",
            number(cap.upper_requests_per_s, 1)
        )),
        throttled.map_or("–".to_owned(), |(s, rate)| format!(
            "{s:.3}× ({} operations/s offered)",
            number(rate, 1)
        )),
        objectives.join(" · "),
        number(Some(c.step_s), 1),
        number(Some(c.warmup_s), 1)
    );
}

/// The page of the capacity result `c`, read from `dir`.
pub fn render(c: &CapacityResult, dir: &Path) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let kind = c.kind.name();
    page::begin(&mut out, &format!("creb-rs capacity {kind}"));
    let cap = &c.capacity;
    let answer = match cap.speed {
        Some(speed) => format!(
            "{}{speed:.3}× the trace's load, {} operations/s",
            if cap.at_least { "at least " } else { "" },
            number(cap.requests_per_s, 1)
        ),
        None => "no load sustained".to_owned(),
    };
    let _ = write!(
        out,
        "<header class=\"top\"><h1>creb-rs capacity ({})</h1><div class=\"sub\">{} · limited by {} · {}</div></header>",
        escape(kind),
        escape(&answer),
        escape(c.limited_by.name()),
        escape(&c.ended)
    );
    out.push_str(
        "<nav><a href=\"#answer\">answer</a><a href=\"#capacity-latency\">latency</a>\
         <a href=\"#capacity-throughput\">throughput</a><a href=\"#steps\">steps</a></nav><main>",
    );
    answer_section(&mut out, c, &answer);
    for (id, title, svg, caption) in [
        (
            "capacity-latency",
            "Latency against offered load",
            latency_chart(c),
            "Each step's percentiles against the load it offered: flat while the registry \
             keeps up, then the knee where queues build (the hockey stick).",
        ),
        (
            "capacity-throughput",
            "Achieved against offered throughput",
            throughput_chart(c),
            "Operations completed per second against those offered: on the dashed line while \
             the registry keeps up, below it once it falls behind.",
        ),
    ] {
        let _ = write!(
            out,
            "<section id=\"{id}\"><h2>{title}</h2><figure>{svg}<figcaption>{caption}</figcaption></figure></section>"
        );
    }
    steps_table(&mut out, c);
    out.push_str("</tbody></table></section></main>");
    page::end(&mut out, &format!("from {}", dir.display()));
    out
}
