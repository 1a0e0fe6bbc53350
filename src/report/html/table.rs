//! The table helpers the report's sections share: cells, facts, and the operations table
//! with its percentiles (every text escaped).

use std::fmt::Write as _;

use crate::metrics::hist::Percentiles;
use crate::report::chart::escape;
use crate::report::ms;
use crate::results::summary::OpSummary;

pub(super) fn opt_ms(p: Option<&Percentiles>, f: impl Fn(&Percentiles) -> f64) -> String {
    p.map(|p| ms(f(p))).unwrap_or_else(|| "–".into())
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
