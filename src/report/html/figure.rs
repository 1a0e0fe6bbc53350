//! One chart of the report: its stable name, title, how to read it, and its SVG.

/// One chart of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable name: the `data-chart` attribute and the file stem of `write_charts`.
    pub id: &'static str,
    pub title: String,
    /// How to read it (shown under the chart in the HTML).
    pub caption: String,
    pub svg: String,
}
