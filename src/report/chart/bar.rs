//! Horizontal bar charts: one row per label, one panel per metric, each panel with its own
//! scale.

use std::fmt::Write as _;

use super::{
    color, escape, fmt_num, fmt_value, header, open_svg, px, text_width, x_labels, Scale,
    ScaleKind, WIDTH,
};

/// One metric of a [`BarChart`]: a panel with its own scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    /// One value per row; `None` draws nothing (e.g. no successes, so no latency).
    pub values: Vec<Option<f64>>,
    /// Logarithmic when the positive values span at least this ratio.
    pub log_ratio: f64,
    pub color: usize,
    /// Whole numbers (counts): integer ticks and labels.
    pub integer: bool,
    /// Per row, the range (min, max) the value is the median of, drawn as a whisker over
    /// the bar (repetitions of one measurement); empty for none.
    pub ranges: Vec<Option<(f64, f64)>>,
}

/// Horizontal bars: one row per label, one panel per metric, side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub id: String,
    pub title: String,
    pub subtitle: String,
    pub rows: Vec<String>,
    /// Rows with the same group share a background band (alternating).
    pub groups: Vec<usize>,
    pub panels: Vec<Panel>,
}

/// The SVG of a bar chart.
pub fn bar_chart(c: &BarChart) -> String {
    let w = WIDTH;
    let label_w = c
        .rows
        .iter()
        .map(|r| text_width(r, 12.0))
        .fold(0.0, f64::max)
        .clamp(60.0, 300.0)
        + 16.0;
    let (top, row_h, bottom) = (88.0, 22.0, 16.0);
    let rows = c.rows.len().max(1) as f64;
    let h = top + rows * row_h + bottom;
    let panels = c.panels.len().max(1) as f64;
    let gap = 24.0;
    let panel_w = ((w - label_w - 8.0 - gap * (panels - 1.0)) / panels).max(40.0);

    let mut out = String::new();
    open_svg(&mut out, &c.id, &c.title, w, h);
    header(&mut out, 8.0, &c.title, &c.subtitle);
    // Group bands.
    for (i, g) in c.groups.iter().enumerate().take(c.rows.len()) {
        if g % 2 == 1 {
            let _ = write!(
                out,
                r##"<rect x="0" y="{}" width="{w}" height="{row_h}" fill="#f3f5f8"/>"##,
                px(top + i as f64 * row_h)
            );
        }
    }
    out.push_str(r##"<g class="rows" fill="#222222">"##);
    for (i, r) in c.rows.iter().enumerate() {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            px(label_w - 8.0),
            px(top + i as f64 * row_h + 15.0),
            escape(r)
        );
    }
    out.push_str("</g>");
    if c.rows.is_empty() {
        let _ = write!(
            out,
            r##"<text class="no-data" x="{}" y="{}" text-anchor="middle" font-size="14" fill="#777777">no data</text>"##,
            px(w / 2.0),
            px(top + 15.0)
        );
    }
    for (p, panel) in c.panels.iter().enumerate() {
        let x0 = label_w + p as f64 * (panel_w + gap);
        let place = Place {
            x0,
            // Room for the value label after the longest bar.
            x1: x0 + panel_w - 48.0,
            top,
            row_h,
            rows,
        };
        draw_panel(&mut out, c, panel, &place);
    }
    out.push_str("</svg>");
    out
}

/// Where a panel lies: from `x0` to `x1` (room left after it for a value's label), its
/// rows from `top` down, `row_h` each, `rows` of them.
struct Place {
    x0: f64,
    x1: f64,
    top: f64,
    row_h: f64,
    rows: f64,
}

/// One panel: its title, its scale's grid and ticks, a bar per row, and its base line.
fn draw_panel(out: &mut String, c: &BarChart, panel: &Panel, at: &Place) {
    let (px0, px1, top, row_h, rows) = (at.x0, at.x1, at.top, at.row_h, at.rows);
    let vals: Vec<f64> = panel
        .values
        .iter()
        .flatten()
        .copied()
        .chain(panel.ranges.iter().flatten().map(|r| r.1))
        .collect();
    let scale = match Scale::auto(&vals, panel.log_ratio, px0, px1) {
        s if panel.integer && s.kind == ScaleKind::Linear => Scale::count(vals, px0, px1),
        s => s,
    };
    let log = scale.kind == ScaleKind::Log;
    let title = if log {
        format!("{} (log scale)", panel.title)
    } else {
        panel.title.clone()
    };
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-weight="bold" fill="#222222">{}</text>"##,
        px(px0),
        px(top - 30.0),
        escape(&title)
    );
    let y_end = top + rows * row_h;
    out.push_str(r##"<g class="axis" stroke="#e3e3e3">"##);
    let ticks = scale.ticks();
    for (v, _) in &ticks {
        if let Some(x) = scale.map(*v) {
            let _ = write!(
                out,
                r#"<line x1="{}" x2="{}" y1="{}" y2="{}"/>"#,
                px(x),
                px(x),
                px(top - 4.0),
                px(y_end)
            );
        }
    }
    out.push_str("</g>");
    out.push_str(r##"<g class="ticks" font-size="10" fill="#555555">"##);
    x_labels(out, &ticks, |v| scale.map(v), 10.0, 3.0, top - 8.0);
    out.push_str("</g>");
    let base = if log {
        px0
    } else {
        scale.map(0.0).unwrap_or(px0)
    };
    draw_bars(out, c, panel, &scale, base, at);
    let _ = write!(
        out,
        r##"<line x1="{b}" x2="{b}" y1="{}" y2="{}" stroke="#333333"/>"##,
        px(top - 4.0),
        px(y_end),
        b = px(base)
    );
}

/// The whisker of a bar at `y` whose range is `lo`–`hi`, and where it ends on the right;
/// `None` when the range is off the scale.
fn whisker_of(scale: &Scale, (lo, hi): (f64, f64), y: f64) -> Option<(String, f64)> {
    let (x0, x1) = (scale.map(lo)?, scale.map(hi)?);
    let path = format!(
        r##"<path class="whisker" d="M{a} {m}H{b}M{a} {t}V{u}M{b} {t}V{u}" stroke="#222222" fill="none"/>"##,
        a = px(x0),
        b = px(x1),
        m = px(y + 7.0),
        t = px(y + 3.0),
        u = px(y + 11.0)
    );
    Some((path, x1))
}

/// A panel's bars from `base`, each with its value (and its range's whisker), or "–" where
/// a row has no value.
fn draw_bars(out: &mut String, c: &BarChart, panel: &Panel, scale: &Scale, base: f64, at: &Place) {
    let (top, row_h) = (at.top, at.row_h);
    let range_of = |i: usize| panel.ranges.get(i).copied().flatten();
    let value_label = |v: f64| {
        if panel.integer {
            fmt_num(v.round(), 0)
        } else {
            fmt_value(v)
        }
    };
    let _ = write!(
        out,
        r#"<g class="bars" data-panel="{}">"#,
        escape(&panel.title)
    );
    for (i, v) in panel.values.iter().enumerate().take(c.rows.len()) {
        let y = top + i as f64 * row_h + 4.0;
        let Some(v) = v.filter(|v| v.is_finite()) else {
            // No value (e.g. no successes, so no latency): say so rather than draw 0.
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" font-size="11" fill="#777777">–</text>"##,
                px(base + 4.0),
                px(y + 11.0)
            );
            continue;
        };
        let Some(x) = scale.map(v) else { continue };
        let (bx, bw) = if x >= base {
            (base, x - base)
        } else {
            (x, base - x)
        };
        let mut label_x = bx + bw + 4.0;
        let mut tip = value_label(v);
        let mut whisker = String::new();
        if let Some((lo, hi)) = range_of(i) {
            if let Some((path, x1)) = whisker_of(scale, (lo, hi), y) {
                whisker = path;
                label_x = label_x.max(x1 + 4.0);
                tip = format!("median {tip}, {}–{}", value_label(lo), value_label(hi));
            }
        }
        let _ = write!(
            out,
            r##"<rect class="bar" x="{}" y="{}" width="{}" height="14" fill="{}"><title>{}: {}</title></rect><text x="{}" y="{}" font-size="11" fill="#222222">{}</text>"##,
            px(bx),
            px(y),
            px(bw),
            color(panel.color),
            escape(&c.rows[i]),
            escape(&tip),
            px(label_x),
            px(y + 11.0),
            escape(&value_label(v))
        );
        out.push_str(&whisker);
    }
    out.push_str("</g>");
}
