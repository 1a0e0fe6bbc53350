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

mod attribution;
mod cache_figures;
mod figure;
mod figures;
mod sections;
mod table;

use super::page;
use crate::results::ResultSet;

pub use figures::{class_label, figures, write_charts, Figure};
use sections::{
    charts_section, endpoints_section, errors_section, header_section, header_split_section,
    metadata_section, nav, operations_section, registry_metrics_section, run_section,
    size_class_section, thresholds_section, warnings_section,
};

/// Renders the HTML report of a result directory.
pub fn render(set: &ResultSet) -> anyhow::Result<String> {
    let figs = figures(set)?;
    let s = &set.summary;
    let mut out = String::with_capacity(256 * 1024);
    let title = format!("creb-rs {} {} — {}", s.command, s.model_label(), s.registry);
    page::begin(&mut out, &title);
    header_section(&mut out, set);
    nav(
        &mut out,
        set,
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
    header_split_section(&mut out, set);
    attribution::attribution_section(&mut out, s);
    registry_metrics_section(&mut out, set);
    errors_section(&mut out, set);
    charts_section(&mut out, &figs);
    size_class_section(&mut out, set, &figs);
    metadata_section(&mut out, set)?;
    out.push_str("</main>");
    page::end(&mut out, &format!("from {}", set.dir.display()));
    Ok(out)
}
