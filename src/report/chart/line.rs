//! Line charts: series over a linear x axis or a percentile ("nines") axis, with a linear,
//! count or automatic logarithmic y axis.

use std::fmt::Write as _;

use super::{
    color, escape, header, open_svg, px, text_width, x_labels, Scale, MARKER_LIMIT, WIDTH,
};

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// (x, y) in data units; a non-finite y breaks the line.
    pub points: Vec<(f64, f64)>,
    /// Index into [`super::PALETTE`] (cycled), or [`super::TOTAL`].
    pub color: usize,
    pub dashed: bool,
}

/// How the y axis of a line chart scales.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum YScale {
    /// Linear from zero.
    Linear,
    /// Linear from zero, whole-number ticks (counts).
    Count,
    /// Logarithmic when the positive values span at least this ratio, else linear.
    Auto(f64),
}

/// How the x axis of a line chart scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XScale {
    Linear,
    /// x values are percentile fractions; the axis shows this many nines.
    Nines(u32),
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// `data-chart` name and id prefix; ASCII letters, digits and `-`.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x: XScale,
    pub y: YScale,
    pub series: Vec<Series>,
    /// A line under the title (what was measured, how).
    pub subtitle: String,
    /// Data-unit x values the axis must include besides the points (e.g. the run's span).
    pub x_extent: Vec<f64>,
}

/// The SVG of a line chart.
pub fn line_chart(c: &LineChart) -> String {
    let legend_w = c
        .series
        .iter()
        .map(|s| text_width(&s.name, 12.0))
        .fold(0.0, f64::max)
        .clamp(170.0, 240.0)
        + 40.0;
    let (left, top, bottom) = (72.0, 52.0, 48.0);
    let right = legend_w + 16.0;
    let legend_h = c.series.len() as f64 * 18.0 + 10.0;
    let h = (top + legend_h + bottom).max(380.0);
    let w = WIDTH;
    let (x0, x1, y0, y1) = (left, w - right, h - bottom, top);

    let xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(c.x_extent.iter().copied())
        .collect();
    let ys: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .collect();
    let xscale = match c.x {
        XScale::Linear => Scale::linear(xs.iter().copied(), false, x0, x1),
        XScale::Nines(n) => Scale::nines(n, x0, x1),
    };
    let yscale = match c.y {
        YScale::Linear => Scale::linear(ys.iter().copied(), true, y0, y1),
        YScale::Count => Scale::count(ys.iter().copied(), y0, y1),
        YScale::Auto(ratio) => Scale::auto(&ys, ratio, y0, y1),
    };

    let mut out = String::new();
    open_svg(&mut out, &c.id, &c.title, w, h);
    header(&mut out, 8.0, &c.title, &c.subtitle);
    let id = escape(&c.id);
    let _ = write!(
        out,
        r#"<defs><clipPath id="clip-{id}"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath></defs>"#,
        px(x0 - 4.0),
        px(y1 - 4.0),
        px(x1 - x0 + 8.0),
        px(y0 - y1 + 8.0)
    );

    let frame = Frame { x0, x1, y0, y1, h };
    axes(&mut out, c, &frame, &xscale, &yscale);
    series_lines(&mut out, c, &frame, &xscale, &yscale);
    legend(&mut out, c, x1 + 16.0, top);
    out.push_str("</svg>");
    out
}

/// Where a chart's plot area lies: x from `x0` to `x1`, y from `y0` (bottom) up to `y1`,
/// in an SVG `h` high.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    h: f64,
}

/// One line of the grid, from (x.0, y.0) to (x.1, y.1).
fn grid_line(out: &mut String, x: (f64, f64), y: (f64, f64)) {
    let _ = write!(
        out,
        r#"<line x1="{}" x2="{}" y1="{}" y2="{}"/>"#,
        px(x.0),
        px(x.1),
        px(y.0),
        px(y.1)
    );
}

/// The grid, the ticks and their labels, the axes and their names.
fn axes(out: &mut String, c: &LineChart, f: &Frame, xscale: &Scale, yscale: &Scale) {
    let Frame { x0, x1, y0, y1, h } = *f;
    out.push_str(r##"<g class="axis y" stroke="#e3e3e3" stroke-width="1">"##);
    let yticks = yscale.ticks();
    for (v, _) in &yticks {
        if let Some(y) = yscale.map(*v) {
            grid_line(out, (x0, x1), (y, y));
        }
    }
    let xticks = xscale.ticks();
    for (v, _) in &xticks {
        if let Some(x) = xscale.map(*v) {
            grid_line(out, (x, x), (y0, y1));
        }
    }
    out.push_str("</g>");
    out.push_str(r##"<g class="ticks" font-size="11" fill="#333333">"##);
    for (v, label) in &yticks {
        if let Some(y) = yscale.map(*v) {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                px(x0 - 6.0),
                px(y + 4.0),
                escape(label)
            );
        }
    }
    x_labels(out, &xticks, |v| xscale.map(v), 11.0, 4.0, y0 + 16.0);
    out.push_str("</g>");
    let _ = write!(
        out,
        r##"<g stroke="#333333" stroke-width="1"><line x1="{a}" x2="{a}" y1="{b}" y2="{c}"/><line x1="{a}" x2="{d}" y1="{c}" y2="{c}"/></g>"##,
        a = px(x0),
        b = px(y1),
        c = px(y0),
        d = px(x1)
    );
    let _ = write!(
        out,
        r##"<text class="x-label" x="{}" y="{}" text-anchor="middle" fill="#222222">{}</text>"##,
        px((x0 + x1) / 2.0),
        px(h - 10.0),
        escape(&c.x_label)
    );
    let _ = write!(
        out,
        r##"<text class="y-label" transform="translate(16 {}) rotate(-90)" text-anchor="middle" fill="#222222">{}</text>"##,
        px((y0 + y1) / 2.0),
        escape(&c.y_label)
    );
}

/// A series' SVG path (broken where a value is missing or off the scale) and the points
/// drawn.
fn path_of(s: &Series, xscale: &Scale, yscale: &Scale) -> (String, Vec<(f64, f64)>) {
    let mut d = String::new();
    let mut pen_down = false;
    let mut visible = Vec::new();
    for &(x, y) in &s.points {
        match (
            xscale.map(x),
            y.is_finite().then(|| yscale.map(y)).flatten(),
        ) {
            (Some(px_), Some(py)) => {
                let _ = write!(
                    d,
                    "{}{},{}",
                    if pen_down { "L" } else { "M" },
                    px(px_),
                    px(py)
                );
                pen_down = true;
                visible.push((px_, py));
            }
            _ => pen_down = false,
        }
    }
    (d, visible)
}

/// Each series' line (broken where a value is missing), its markers when few, and "no
/// data" when nothing falls on the chart.
fn series_lines(out: &mut String, c: &LineChart, f: &Frame, xscale: &Scale, yscale: &Scale) {
    let Frame { x0, x1, y0, y1, .. } = *f;
    let id = escape(&c.id);
    let any_points = c.series.iter().any(|s| {
        s.points
            .iter()
            .any(|&(x, y)| xscale.map(x).is_some() && yscale.map(y).is_some() && y.is_finite())
    });
    let _ = write!(
        out,
        r#"<g class="series-lines" clip-path="url(#clip-{id})">"#
    );
    for s in &c.series {
        let (d, visible) = path_of(s, xscale, yscale);
        let dash = if s.dashed {
            r#" stroke-dasharray="7 4""#
        } else {
            ""
        };
        let name = escape(&s.name);
        if !d.is_empty() {
            let _ = write!(
                out,
                r#"<path class="series" data-series="{name}" d="{d}" fill="none" stroke="{}" stroke-width="2" stroke-linejoin="round"{dash}><title>{name}</title></path>"#,
                color(s.color)
            );
        }
        if visible.len() <= MARKER_LIMIT {
            for (x, y) in visible {
                let _ = write!(
                    out,
                    r#"<circle cx="{}" cy="{}" r="3" fill="{}"/>"#,
                    px(x),
                    px(y),
                    color(s.color)
                );
            }
        }
    }
    out.push_str("</g>");
    if !any_points {
        let _ = write!(
            out,
            r##"<text class="no-data" x="{}" y="{}" text-anchor="middle" font-size="14" fill="#777777">no data</text>"##,
            px((x0 + x1) / 2.0),
            px((y0 + y1) / 2.0)
        );
    }
}

/// The legend, right of the plot from `lx`, its first line at `top`.
fn legend(out: &mut String, c: &LineChart, lx: f64, top: f64) {
    out.push_str(r#"<g class="legend">"#);
    for (i, s) in c.series.iter().enumerate() {
        let y = top + 8.0 + i as f64 * 18.0;
        let dash = if s.dashed {
            r#" stroke-dasharray="7 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r##"<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="2.5"{dash}/><text x="{}" y="{}" fill="#222222">{}</text>"##,
            px(lx),
            px(lx + 26.0),
            px(y),
            px(y),
            color(s.color),
            px(lx + 32.0),
            px(y + 4.0),
            escape(&s.name)
        );
    }
    out.push_str("</g>");
}
