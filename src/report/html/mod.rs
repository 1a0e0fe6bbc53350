//! The self-contained HTML report of a result directory (`creb-rs report DIR --format
//! html`), and the same charts as standalone SVG files for papers ([`write_charts`]). The
//! charts a result makes are in `figures`, the page's sections in `sections`; this file
//! holds the page itself, its style and the table helpers the sections share.
//!
//! One file, nothing fetched when it is viewed: inline CSS, inline SVG, no script. Every
//! number comes from the result directory as written — `summary.json` for the tables,
//! the exact total histograms rebuilt from `counters.json` + `histograms.hlog` for the
//! percentile spectra, `timeline.csv` and the interval histograms for the time series —
//! so a merged result renders exactly like a single run. Every piece of text from the
//! results (names, messages, the configuration) is escaped.

mod figures;
mod sections;

use std::fmt::Write as _;

use super::chart::escape;
use super::ms;
use crate::metrics::hist::Percentiles;
use crate::results::summary::OpSummary;
use crate::results::ResultSet;

pub use figures::{class_label, figures, write_charts, Figure};
use sections::{
    charts_section, endpoints_section, errors_section, header_section, metadata_section, nav,
    operations_section, registry_metrics_section, run_section, size_class_section,
    thresholds_section, warnings_section,
};

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
    thresholds_section(&mut out, set);
    run_section(&mut out, set);
    operations_section(&mut out, set);
    endpoints_section(&mut out, set);
    registry_metrics_section(&mut out, set);
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
