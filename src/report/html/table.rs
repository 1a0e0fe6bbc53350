//! The table helpers the report's sections share: cells, facts, and the operations table
//! with its percentiles (every text escaped).

use std::fmt::Write as _;

use crate::metrics::hist::Percentiles;
use crate::report::chart::escape;
use crate::report::ms;
use crate::results::summary::OpSummary;

pub(super) fn opt_ms(p: Option<&Percentiles>, f: impl Fn(&Percentiles) -> Option<f64>) -> String {
    p.and_then(f).map_or_else(|| "–".into(), ms)
}

/// A percentile's cell: its value over its 95% interval (where established); `–` with a
/// tooltip where the run has too few samples to estimate it.
fn td_ci(
    out: &mut String,
    p: Option<&Percentiles>,
    f: impl Fn(&Percentiles) -> (Option<f64>, Option<[f64; 2]>),
) {
    match p.map(f) {
        Some((Some(v), Some([lo, hi]))) => {
            let _ = write!(
                out,
                "<td title=\"95% interval\">{}<br><small>{}–{}</small></td>",
                escape(&ms(v)),
                escape(&ms(lo)),
                escape(&ms(hi))
            );
        }
        Some((Some(v), None)) => td(out, ms(v)),
        Some((None, _)) => {
            out.push_str("<td title=\"too few samples to estimate it\">–</td>");
        }
        None => td(out, "–"),
    }
}

pub(super) fn mib(bytes_per_s: f64) -> String {
    format!("{:.2}", bytes_per_s / (1024.0 * 1024.0))
}

pub(super) fn bytes(n: u64) -> String {
    crate::units::ByteSize(n).to_string()
}

pub(super) fn td(out: &mut String, v: impl std::fmt::Display) {
    let _ = write!(out, "<td>{}</td>", escape(&v.to_string()));
}

pub(super) fn fact(out: &mut String, name: &str, value: &str) {
    let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(name), escape(value));
}

pub(super) fn ops_table(
    out: &mut String,
    rows: &[(&String, &OpSummary)],
    delay: bool,
    class: &str,
) {
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
        td_ci(out, l, |p| (p.p50, p.p50_ci));
        td_ci(out, l, |p| (p.p90, p.p90_ci));
        td_ci(out, l, |p| (p.p99, p.p99_ci));
        td_ci(out, l, |p| (p.p999, p.p999_ci));
        td(out, opt_ms(l, |p| Some(p.max)));
        td(out, opt_ms(l, |p| Some(p.mean)));
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
