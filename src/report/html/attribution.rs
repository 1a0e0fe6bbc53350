//! The report's "Who costs most" section: the repositories and the clients that cost the
//! most (`summary.json`'s `by_repository` and `by_client`), each with its share of the run's
//! time, bytes and failures, and the latency of its successes.

use std::fmt::Write as _;

use super::table::{bytes, opt_ms, td};
use crate::metrics::attribution::SLOW_MIN_SUCCESSES;
use crate::report::chart::escape;
use crate::results::attribution::{slowest, Attributed};
use crate::results::Summary;

/// Whether the section has anything to show.
pub(super) fn present(s: &Summary) -> bool {
    !s.by_repository.is_empty() || !s.by_client.is_empty()
}

pub(super) fn attribution_section(out: &mut String, s: &Summary) {
    if !present(s) {
        return;
    }
    out.push_str("<section id=\"attribution\"><h2>Who costs most</h2><p class=\"muted\">The repositories and clients behind the run's operations: the top of each ranking (operations, time spent, bytes, failures, slowness), heaviest in time first; shares are of the run's operations and bytes. Time is the sum of the operations' latencies, failures included; percentiles are of the successes, within 0.8%.");
    match s.attribution {
        Some(a) if !(a.repositories_complete && a.clients_complete) => {
            let _ = write!(
                out,
                " More names were seen than listed: each ranking kept its {} heaviest while the run went, so a name marked ≥ was counted from when it joined (its figures are lower bounds).",
                a.tracked
            );
        }
        _ => {}
    }
    out.push_str("</p>");
    table(out, "repository", &s.by_repository, s);
    table(out, "client", &s.by_client, s);
    slowest_table(out, "repository", &s.by_repository);
    slowest_table(out, "client", &s.by_client);
    out.push_str("</section>");
}

/// The slowest names by the p90 of their successes (at least 20), slowest first.
fn slowest_table(out: &mut String, what: &str, entries: &[Attributed]) {
    let slow = slowest(entries);
    if slow.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h3>Slowest {what} names</h3><p class=\"muted\">Ranked by the p90 of their successes, among the names tracked with at least {SLOW_MIN_SUCCESSES} successes (a single slow request never tops it).</p><div class=\"scroll\"><table class=\"ops\" id=\"slowest-{what}\"><thead><tr><th>{what}</th><th>p90</th><th>p50</th><th>p99</th><th>count</th><th>errors</th></tr></thead><tbody>"
    );
    for e in slow {
        let mark = if e.exact { "" } else { "≥ " };
        let _ = write!(out, "<tr><td class=\"name\">{mark}{}</td>", escape(&e.name));
        let l = e.latency_ms.as_ref();
        td(out, opt_ms(l, |p| p.p90));
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p99));
        td(out, e.count);
        td(out, e.errors);
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
}

fn share(part: f64, all: f64) -> String {
    if all > 0.0 {
        format!("{:.1}%", part * 100.0 / all)
    } else {
        "-".to_owned()
    }
}

fn table(out: &mut String, what: &str, entries: &[Attributed], s: &Summary) {
    if entries.is_empty() {
        return;
    }
    let all_ops = s.totals.requests as f64;
    let all_bytes = (s.totals.bytes_sent + s.totals.bytes_received) as f64;
    let _ = write!(
        out,
        "<div class=\"scroll\"><table class=\"ops\" id=\"by-{what}\"><thead><tr><th>{what}</th><th>count</th><th>share</th><th>errors</th><th>time</th><th>bytes</th><th>share of bytes</th><th>p50</th><th>p90</th><th>p99</th><th style=\"text-align:left\">top by</th></tr></thead><tbody>"
    );
    for e in entries {
        let mark = if e.exact { "" } else { "≥ " };
        let _ = write!(out, "<tr><td class=\"name\">{mark}{}</td>", escape(&e.name));
        td(out, e.count);
        td(out, share(e.count as f64, all_ops));
        if e.errors > 0 {
            let _ = write!(out, "<td class=\"bad\">{}</td>", e.errors);
        } else {
            td(out, 0);
        }
        td(out, format!("{:.2} s", e.time_s));
        td(out, bytes(e.bytes));
        td(out, share(e.bytes as f64, all_bytes));
        let l = e.latency_ms.as_ref();
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p90));
        td(out, opt_ms(l, |p| p.p99));
        let _ = write!(
            out,
            "<td style=\"text-align:left\">{}</td></tr>",
            escape(&e.ranks())
        );
    }
    out.push_str("</tbody></table></div>");
}
