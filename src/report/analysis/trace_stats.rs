//! `trace stats` as people read it: one section per aspect of a trace's characterization
//! (requests, sizes, rates, popularity), tables aligned, rendered from [`TraceStats`].

use std::fmt::Write as _;

use crate::analysis::trace::stats::{ratio, Quantiles, TraceStats};
use crate::units::{grouped, ByteSize};

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{:.1}%", x * 100.0))
}

fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.decimals$}"))
}

/// `93784.5` s → `1d 2h 3m 4.5s`.
fn span(secs: f64) -> String {
    let total = secs.max(0.0);
    let whole = total as u64;
    let (d, h, m) = (whole / 86_400, whole / 3600 % 24, whole / 60 % 60);
    let s = total - (whole - whole % 60) as f64;
    let mut out = String::new();
    for (v, unit) in [(d, "d"), (h, "h"), (m, "m")] {
        if v > 0 || !out.is_empty() {
            let _ = write!(out, "{v}{unit} ");
        }
    }
    let _ = write!(out, "{s:.1}s");
    out
}

/// Lays out rows under a header (left out when all blank): the first column left-aligned,
/// the others right-aligned.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::from("  ");
        for (i, cell) in cells.take(cols).enumerate() {
            let pad = width[i].saturating_sub(cell.chars().count());
            if i == 0 {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            } else {
                text.push_str("  ");
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    if header.iter().any(|h| !h.is_empty()) {
        line(&mut out, &mut header.iter().copied());
    }
    for row in rows {
        line(&mut out, &mut row.iter().map(String::as_str));
    }
    out
}

fn counted_rows<'a>(
    counts: impl IntoIterator<Item = (&'a String, &'a u64)>,
    total: u64,
) -> Vec<Vec<String>> {
    counts
        .into_iter()
        .map(|(name, n)| vec![name.clone(), grouped(*n), pct(ratio(*n, total))])
        .collect()
}

/// The report for people: one section per aspect, tables aligned.
pub fn render_text(s: &TraceStats) -> String {
    let mut out = String::new();
    let files = if s.files == 1 { "file" } else { "files" };
    let _ = writeln!(
        out,
        "Trace: {} records in {} {files}, {} to {} ({})",
        grouped(s.records),
        s.files,
        s.first.as_deref().unwrap_or("-"),
        s.last.as_deref().unwrap_or("-"),
        span(s.span_s),
    );
    let _ = writeln!(
        out,
        "Skipped: {} invalid, {} duplicate; {} failed in the original (included below){}",
        grouped(s.skipped.invalid),
        grouped(s.skipped.duplicate),
        grouped(s.skipped.failed_in_trace),
        if s.out_of_order > 0 {
            format!("; {} out of order", grouped(s.out_of_order))
        } else {
            String::new()
        },
    );
    requests_text(s, &mut out);
    sizes_text(s, &mut out);
    rate_text(s, &mut out);
    popularity_text(s, &mut out);
    let ss = &s.sessions;
    let _ = writeln!(
        out,
        "\nManifest GET -> layer GET (same client and repository within {}s)",
        ss.window_s
    );
    let _ = writeln!(
        out,
        "  {} manifest GETs: {} followed by a layer GET, {} not followed ({}){}",
        grouped(ss.manifest_gets),
        grouped(ss.followed),
        grouped(ss.not_followed),
        pct(ss.not_followed_share),
        if ss.unattributed > 0 {
            format!("; {} without a client", grouped(ss.unattributed))
        } else {
            String::new()
        }
    );
    out
}

/// The requests by method, kind and status, and the image operations they make.
fn requests_text(s: &TraceStats, out: &mut String) {
    out.push_str("\nRequests\n");
    out.push_str(&table(
        &["method", "count", "share"],
        &counted_rows(&s.by_method, s.records),
    ));
    out.push_str(&table(
        &["kind", "count", "share"],
        &counted_rows(&s.by_kind, s.records),
    ));
    let mut status_rows = Vec::new();
    for (class, n) in &s.by_status.classes {
        status_rows.push(vec![class.clone(), grouped(*n), pct(ratio(*n, s.records))]);
        let prefix = class.trim_end_matches("xx");
        for (code, m) in &s.by_status.codes {
            let in_class = if class == "none" {
                code == "0"
            } else {
                code.len() == 3 && code.starts_with(prefix)
            };
            if in_class && class != "none" {
                status_rows.push(vec![
                    format!("  {code}"),
                    grouped(*m),
                    pct(ratio(*m, s.records)),
                ]);
            }
        }
    }
    out.push_str(&table(&["status", "count", "share"], &status_rows));

    let o = &s.operations;
    out.push_str("\nImage operations\n");
    let ops_rows = vec![
        vec!["pulls (manifest GETs)".into(), grouped(o.pulls)],
        vec!["pushes (manifest PUTs)".into(), grouped(o.pushes)],
        vec!["pull ratio".into(), num(o.pull_ratio, 3)],
        vec!["layer GETs".into(), grouped(o.layer_gets)],
        vec![
            "manifest GETs per layer GET".into(),
            num(o.manifest_per_layer_get, 3),
        ],
        vec!["layer PUTs (upload ends)".into(), grouped(o.layer_puts)],
        vec![
            "manifest PUTs per layer PUT".into(),
            num(o.manifest_per_layer_put, 3),
        ],
        vec!["PUTs per PATCH".into(), num(o.put_patch_ratio, 2)],
        vec!["GET share of requests".into(), pct(o.get_share)],
        vec!["HEAD share of requests".into(), pct(o.head_share)],
    ];
    out.push_str(&table(&["", ""], &ops_rows));
}

/// The sizes of successful requests, by method and kind.
fn sizes_text(s: &TraceStats, out: &mut String) {
    out.push_str("\nSizes of successful requests\n");
    let mut size_rows = Vec::new();
    for (method, kinds) in &s.sizes {
        for (kind, z) in kinds {
            let q = &z.quantiles;
            let b = |v: u64| ByteSize(v).to_string();
            size_rows.push(vec![
                format!("{method} {kind}"),
                grouped(q.count),
                b(q.p10),
                b(q.p25),
                b(q.p50),
                b(q.p75),
                b(q.p90),
                b(q.p99),
                b(q.max),
                pct(Some(z.share_below_1mb)),
                pct(Some(z.share_below_10mb)),
            ]);
        }
    }
    out.push_str(&table(
        &[
            "request", "count", "p10", "p25", "p50", "p75", "p90", "p99", "max", "<1MB", "<10MB",
        ],
        &size_rows,
    ));
}

/// The rate, the clients active and the gaps between requests, per minute.
fn rate_text(s: &TraceStats, out: &mut String) {
    out.push_str("\nRate, concurrency and inter-arrival (per UTC minute)\n");
    let qrow = |label: &str, q: &Quantiles| {
        vec![
            label.to_owned(),
            format!("{:.1}", q.mean),
            grouped(q.p5),
            grouped(q.p25),
            grouped(q.p50),
            grouped(q.p75),
            grouped(q.p95),
            grouped(q.p99),
            grouped(q.max),
        ]
    };
    out.push_str(&table(
        &["", "mean", "p5", "p25", "p50", "p75", "p95", "p99", "max"],
        &[
            qrow("requests per minute", &s.rate_per_minute.quantiles),
            qrow("active clients per minute", &s.concurrency),
            qrow("inter-arrival (ms)", &s.interarrival_ms),
        ],
    ));
    let _ = writeln!(
        out,
        "  minutes with >= 100 requests: {} of {}",
        pct(Some(s.rate_per_minute.share_minutes_at_least_100)),
        grouped(s.rate_per_minute.quantiles.count)
    );
}

/// What the most requested layers, manifests, repositories and clients take.
fn popularity_text(s: &TraceStats, out: &mut String) {
    out.push_str("\nPopularity\n");
    let p = &s.popularity;
    for (what, unit, r) in [
        ("layers", "successful GETs", &p.layers),
        ("manifests", "successful GETs", &p.manifests),
        ("repositories", "requests", &p.repositories),
        ("clients", "requests", &p.clients),
    ] {
        let _ = writeln!(
            out,
            "  {what}: {} {unit} to {} distinct; the top 1% take {}",
            grouped(r.requests),
            grouped(r.distinct),
            pct(r.top_1pct_share)
        );
        let rows: Vec<Vec<String>> = r
            .top
            .iter()
            .enumerate()
            .map(|(i, e)| {
                vec![
                    format!("  {}", i + 1),
                    grouped(e.count),
                    pct(ratio(e.count, r.requests)),
                    e.name.clone(),
                ]
            })
            .collect();
        out.push_str(&table(&["", "", "", ""], &rows));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_days_hours_and_minutes() {
        assert_eq!(span(4.25), "4.2s");
        assert_eq!(span(93_784.5), "1d 2h 3m 4.5s");
        assert_eq!(span(3600.0), "1h 0m 0.0s");
    }

    #[test]
    fn table_aligns() {
        let t = table(
            &["k", "n"],
            &[
                vec!["GET".into(), "1,000".into()],
                vec!["HEAD".into(), "7".into()],
            ],
        );
        assert_eq!(t, "  k         n\n  GET   1,000\n  HEAD      7\n");
    }
}
