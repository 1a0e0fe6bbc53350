//! Plain SVG charts, written by hand: line charts (with linear, logarithmic or "nines"
//! percentile axes) and horizontal bar charts with one panel per metric.
//!
//! Every chart is a standalone `<svg>` element that needs nothing else — no CSS, no
//! script, no web fonts — so the same text is inlined into the HTML report and written to
//! `DIR/*.svg` for papers (and rasterized to PNG). Styling is presentation attributes only,
//! because SVG renderers outside browsers support those best. The root carries
//! `class="chart"` and `data-chart="<id>"` so tests and scripts find a chart by name.
//!
//! Invariants: all text is escaped; non-finite values are gaps, never coordinates (a `NaN`
//! y breaks a line in two); an empty chart still renders its frame with a "no data" note;
//! a zero-width domain is widened, so nothing divides by zero.

use std::fmt::Write as _;

/// Colour-blind-safe colours (Okabe–Ito, then Tableau), cycled by series style index.
pub const PALETTE: [&str; 10] = [
    "#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#7f7f7f", "#b8860b",
    "#8c564b", "#17becf",
];

const FONT: &str = "DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif";
const WIDTH: f64 = 820.0;
const MARKER_LIMIT: usize = 40;

/// Escapes text for HTML/SVG content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// Approximate rendered width of `s` at `size` px (sans-serif averages ~0.6 em per char).
fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// A "nice" step (1, 2 or 5 × 10^k) near `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let exp = raw.log10().floor();
    let base = 10f64.powf(exp);
    let f = raw / base;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * base
}

/// A number with at most `decimals` decimals, thousands as `k`, `M`, `G`, `T` beyond 10⁴.
pub fn fmt_num(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    if a != 0.0 && a < 1e-4 && decimals > 4 {
        return format!("{v:.0e}");
    }
    let (scaled, suffix) = if a >= 1e12 {
        (v / 1e12, "T")
    } else if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let decimals = if suffix.is_empty() {
        decimals.min(6)
    } else {
        // Keep three significant digits after scaling.
        if scaled.abs() >= 100.0 {
            0
        } else if scaled.abs() >= 10.0 {
            1
        } else {
            2
        }
    };
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') && !suffix.is_empty() {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s.remove(0);
    }
    s + suffix
}

/// A value with three significant digits (bar labels, tooltips).
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    };
    fmt_num(v, decimals)
}

/// How a scale maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleKind {
    Linear,
    Log,
    /// Percentiles as fractions `q` in [0, 1), spread by `log10(1 / (1 - q))` so that 90%,
    /// 99%, 99.9% and 99.99% are equally far apart (the HdrHistogram percentile spectrum).
    Nines,
}

/// A mapping from a data domain to a pixel range, with its tick marks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub kind: ScaleKind,
    /// The domain, in transformed units (log10 of values for `Log`, nines for `Nines`).
    lo: f64,
    hi: f64,
    step: f64,
    r0: f64,
    r1: f64,
}

fn finite_range(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

impl Scale {
    /// A linear scale over `values` (non-finite ones ignored), widened to nice ticks;
    /// with `zero` the domain includes 0.
    pub fn linear(values: impl IntoIterator<Item = f64>, zero: bool, r0: f64, r1: f64) -> Scale {
        let (mut lo, mut hi) = finite_range(values).unwrap_or((0.0, 1.0));
        if zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(lo.abs()).max(1e-300) {
            if lo == 0.0 {
                hi = 1.0;
            } else {
                let pad = lo.abs() * 0.5;
                if zero && lo > 0.0 {
                    lo = 0.0;
                    hi += pad;
                } else if zero && hi < 0.0 {
                    hi = 0.0;
                    lo -= pad;
                } else {
                    lo -= pad;
                    hi += pad;
                }
            }
        }
        let step = nice_step((hi - lo) / 5.0);
        let nlo = (lo / step).floor() * step;
        let nhi = (hi / step).ceil() * step;
        Scale {
            kind: ScaleKind::Linear,
            lo: nlo,
            hi: if nhi > nlo { nhi } else { nlo + step },
            step,
            r0,
            r1,
        }
    }

    /// A linear scale from zero with whole-number ticks (at least 0 to 1).
    pub fn count(values: impl IntoIterator<Item = f64>, r0: f64, r1: f64) -> Scale {
        let mut s = Scale::linear(values, true, r0, r1);
        if s.step < 1.0 {
            s.step = 1.0;
            s.lo = s.lo.floor();
            s.hi = s.hi.ceil().max(s.lo + 1.0);
        }
        s
    }

    /// A log10 scale over the positive `values`, padded by 5% of its span on each side and
    /// at least one decade wide.
    pub fn log(values: impl IntoIterator<Item = f64>, r0: f64, r1: f64) -> Scale {
        let (lo, hi) = finite_range(values.into_iter().filter(|v| *v > 0.0)).unwrap_or((1.0, 10.0));
        // Beyond 300 decades nothing is readable anyway; keep the tick loop bounded.
        let (mut lo, mut hi) = (lo.log10().max(-300.0), hi.log10().min(300.0));
        if hi - lo < 1.0 {
            let mid = (lo + hi) / 2.0;
            lo = mid - 0.5;
            hi = mid + 0.5;
        }
        let pad = (hi - lo) * 0.05;
        Scale {
            kind: ScaleKind::Log,
            lo: lo - pad,
            hi: hi + pad,
            step: 1.0,
            r0,
            r1,
        }
    }

    /// Log when the positive values span at least `ratio`, linear from zero otherwise.
    pub fn auto(values: &[f64], ratio: f64, r0: f64, r1: f64) -> Scale {
        let positive = finite_range(values.iter().copied().filter(|v| *v > 0.0));
        match positive {
            Some((lo, hi)) if hi / lo >= ratio => Scale::log(values.iter().copied(), r0, r1),
            _ => Scale::linear(values.iter().copied(), true, r0, r1),
        }
    }

    /// Percentiles from 0% to `1 - 10^-nines` (4 nines: 99.99%).
    pub fn nines(nines: u32, r0: f64, r1: f64) -> Scale {
        Scale {
            kind: ScaleKind::Nines,
            lo: 0.0,
            hi: f64::from(nines.max(1)),
            step: 1.0,
            r0,
            r1,
        }
    }

    /// The transformed value, or `None` where the scale cannot show it.
    fn transform(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        match self.kind {
            ScaleKind::Linear => Some(v),
            ScaleKind::Log => (v > 0.0).then(|| v.log10()),
            ScaleKind::Nines => (v < 1.0).then(|| -(1.0 - v.max(0.0)).log10()),
        }
    }

    /// Maps a value to pixels. Values off a log scale's domain are clamped to its edge.
    pub fn map(&self, v: f64) -> Option<f64> {
        let t = match (self.kind, self.transform(v)) {
            (ScaleKind::Log, None) if v.is_finite() => self.lo,
            (_, t) => t?,
        };
        let span = self.hi - self.lo;
        let f = if span > 0.0 {
            (t - self.lo) / span
        } else {
            0.0
        };
        Some(self.r0 + f * (self.r1 - self.r0))
    }

    /// The domain's ends in data units.
    pub fn domain(&self) -> (f64, f64) {
        match self.kind {
            ScaleKind::Linear => (self.lo, self.hi),
            ScaleKind::Log => (10f64.powf(self.lo), 10f64.powf(self.hi)),
            ScaleKind::Nines => (0.0, 1.0 - 10f64.powf(-self.hi)),
        }
    }

    /// Tick positions (data units) and labels.
    pub fn ticks(&self) -> Vec<(f64, String)> {
        match self.kind {
            ScaleKind::Linear => {
                let decimals = if self.step >= 1.0 {
                    0
                } else {
                    (-self.step.log10().floor()) as usize
                };
                let n = ((self.hi - self.lo) / self.step).round().clamp(0.0, 100.0) as i64;
                (0..=n)
                    .map(|i| {
                        let v = self.lo + i as f64 * self.step;
                        (v, fmt_num(v, decimals))
                    })
                    .collect()
            }
            ScaleKind::Log => {
                let decades = self.hi - self.lo;
                let mults: &[f64] = if decades <= 3.5 {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let every = ((decades / 8.0).floor() as i64 + 1).max(1);
                let mut ticks = Vec::new();
                let first = self.lo.floor() as i64;
                for e in first..=self.hi.ceil() as i64 {
                    // Every `every`-th decade, counted from 10^0 so that 1 is a tick.
                    if e.rem_euclid(every) != 0 {
                        continue;
                    }
                    for m in mults {
                        let v = m * 10f64.powi(e as i32);
                        let t = v.log10();
                        if t >= self.lo - 1e-9 && t <= self.hi + 1e-9 {
                            let decimals = if e < 0 { (-e) as usize } else { 0 };
                            ticks.push((v, fmt_num(v, decimals)));
                        }
                    }
                }
                ticks
            }
            ScaleKind::Nines => {
                let mut ticks = vec![(0.0, "0%".to_owned()), (0.5, "50%".to_owned())];
                for n in 1..=self.hi.round() as i32 {
                    let q = 1.0 - 10f64.powi(-n);
                    let pct = q * 100.0;
                    let decimals = (n - 2).max(0) as usize;
                    ticks.push((q, format!("{pct:.decimals$}%")));
                }
                ticks
            }
        }
    }
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// (x, y) in data units; a non-finite y breaks the line.
    pub points: Vec<(f64, f64)>,
    /// Index into [`PALETTE`] (cycled), or [`TOTAL`].
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

/// The colour index of totals ("all operations"): near-black.
pub const TOTAL: usize = usize::MAX;

fn color(i: usize) -> &'static str {
    if i == TOTAL {
        "#222222"
    } else {
        PALETTE[i % PALETTE.len()]
    }
}

fn open_svg(out: &mut String, id: &str, title: &str, w: f64, h: f64) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{id}" id="chart-{id}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-labelledby="chart-{id}-title" font-family="{FONT}" font-size="12"><title id="chart-{id}-title">{title}</title><rect width="{w}" height="{h}" fill="#ffffff"/>"##,
        id = escape(id),
        title = escape(title),
        w = w,
        h = h,
    );
}

fn header(out: &mut String, x: f64, title: &str, subtitle: &str) {
    let _ = write!(
        out,
        r##"<text x="{x}" y="20" font-size="15" font-weight="bold" fill="#222222">{}</text>"##,
        escape(title)
    );
    if !subtitle.is_empty() {
        let _ = write!(
            out,
            r##"<text x="{x}" y="37" font-size="11" fill="#555555">{}</text>"##,
            escape(subtitle)
        );
    }
}

fn px(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
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

    // Grid and ticks.
    out.push_str(r##"<g class="axis y" stroke="#e3e3e3" stroke-width="1">"##);
    let yticks = yscale.ticks();
    for (v, _) in &yticks {
        if let Some(y) = yscale.map(*v) {
            let _ = write!(
                out,
                r#"<line x1="{}" x2="{}" y1="{}" y2="{}"/>"#,
                px(x0),
                px(x1),
                px(y),
                px(y)
            );
        }
    }
    let xticks = xscale.ticks();
    for (v, _) in &xticks {
        if let Some(x) = xscale.map(*v) {
            let _ = write!(
                out,
                r#"<line x1="{}" x2="{}" y1="{}" y2="{}"/>"#,
                px(x),
                px(x),
                px(y0),
                px(y1)
            );
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
    let mut last_right = f64::NEG_INFINITY;
    for (v, label) in &xticks {
        if let Some(x) = xscale.map(*v) {
            // Skip labels that would overlap the previous one.
            let half = text_width(label, 11.0) / 2.0;
            if x - half < last_right + 4.0 {
                continue;
            }
            last_right = x + half;
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                px(x),
                px(y0 + 16.0),
                escape(label)
            );
        }
    }
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

    // Lines.
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

    // Legend.
    let lx = x1 + 16.0;
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
    out.push_str("</g></svg>");
    out
}

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
        let px0 = label_w + p as f64 * (panel_w + gap);
        // Room for the value label after the longest bar.
        let px1 = px0 + panel_w - 48.0;
        let vals: Vec<f64> = panel.values.iter().flatten().copied().collect();
        let scale = match Scale::auto(&vals, panel.log_ratio, px0, px1) {
            s if panel.integer && s.kind == ScaleKind::Linear => Scale::count(vals, px0, px1),
            s => s,
        };
        let value_label = |v: f64| {
            if panel.integer {
                fmt_num(v.round(), 0)
            } else {
                fmt_value(v)
            }
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
        let mut last_right = f64::NEG_INFINITY;
        for (v, label) in &ticks {
            if let Some(x) = scale.map(*v) {
                let half = text_width(label, 10.0) / 2.0;
                if x - half < last_right + 3.0 {
                    continue;
                }
                last_right = x + half;
                let _ = write!(
                    out,
                    r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                    px(x),
                    px(top - 8.0),
                    escape(label)
                );
            }
        }
        out.push_str("</g>");
        let base = if log {
            px0
        } else {
            scale.map(0.0).unwrap_or(px0)
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
            let _ = write!(
                out,
                r##"<rect class="bar" x="{}" y="{}" width="{}" height="14" fill="{}"><title>{}: {}</title></rect><text x="{}" y="{}" font-size="11" fill="#222222">{}</text>"##,
                px(bx),
                px(y),
                px(bw),
                color(panel.color),
                escape(&c.rows[i]),
                escape(&value_label(v)),
                px(bx + bw + 4.0),
                px(y + 11.0),
                escape(&value_label(v))
            );
        }
        out.push_str("</g>");
        let _ = write!(
            out,
            r##"<line x1="{b}" x2="{b}" y1="{}" y2="{}" stroke="#333333"/>"##,
            px(top - 4.0),
            px(y_end),
            b = px(base)
        );
    }
    out.push_str("</svg>");
    out
}

/// Renders chart SVGs to PNG (pure Rust: usvg parses, tiny-skia paints), with the
/// system's fonts. Without any font installed, PNGs have no text; the SVGs are unaffected.
pub struct Rasterizer {
    options: resvg::usvg::Options<'static>,
}

impl std::fmt::Debug for Rasterizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rasterizer")
            .field("fonts", &self.options.fontdb.len())
            .finish()
    }
}

/// Families tried, in order, for the charts' text.
const RASTER_FAMILIES: [&str; 6] = [
    "DejaVu Sans",
    "Liberation Sans",
    "Noto Sans",
    "Arial",
    "Helvetica",
    "FreeSans",
];

impl Rasterizer {
    /// Loads the system fonts (once; reuse the rasterizer for many charts).
    pub fn new() -> Rasterizer {
        let mut options = resvg::usvg::Options::default();
        let db = options.fontdb_mut();
        db.load_system_fonts();
        let family = RASTER_FAMILIES
            .iter()
            .find(|name| {
                db.faces()
                    .any(|f| f.families.iter().any(|(n, _)| n.as_str() == **name))
            })
            .map(|s| (*s).to_owned())
            .or_else(|| {
                db.faces()
                    .find_map(|f| f.families.first().map(|(n, _)| n.clone()))
            });
        if let Some(family) = family {
            // Generic families resolve to a font that exists here, never to nothing.
            db.set_sans_serif_family(family.clone());
            db.set_serif_family(family.clone());
            options.font_family = family;
        }
        Rasterizer { options }
    }

    /// Whether any font was found (text renders).
    pub fn has_fonts(&self) -> bool {
        !self.options.fontdb.is_empty()
    }

    /// The PNG of `svg`, `scale` times its size.
    pub fn png(&self, svg: &str, scale: f32) -> anyhow::Result<Vec<u8>> {
        use resvg::tiny_skia::{Pixmap, Transform};
        let tree = resvg::usvg::Tree::from_str(svg, &self.options)
            .map_err(|e| anyhow::anyhow!("invalid chart SVG: {e}"))?;
        let size = tree.size().to_int_size().scale_by(scale).ok_or_else(|| {
            anyhow::anyhow!(
                "chart of {}×{} cannot be scaled",
                tree.size().width(),
                tree.size().height()
            )
        })?;
        let mut pixmap = Pixmap::new(size.width(), size.height())
            .ok_or_else(|| anyhow::anyhow!("chart of {size:?} is too large to rasterize"))?;
        pixmap.fill(resvg::tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            Transform::from_scale(scale, scale),
            &mut pixmap.as_mut(),
        );
        pixmap
            .encode_png()
            .map_err(|e| anyhow::anyhow!("cannot encode PNG: {e}"))
    }
}

impl Default for Rasterizer {
    fn default() -> Self {
        Rasterizer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape("a\u{0}b"), "ab");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn linear_scale_has_nice_ticks_and_maps_ends() {
        let s = Scale::linear([3.0, 97.0], true, 0.0, 100.0);
        assert_eq!(s.domain(), (0.0, 100.0));
        let labels: Vec<String> = s.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0", "20", "40", "60", "80", "100"]);
        assert_eq!(s.map(0.0), Some(0.0));
        assert_eq!(s.map(50.0), Some(50.0));
        assert_eq!(s.map(f64::NAN), None);
        // Inverted pixel range (y axes grow upwards).
        let y = Scale::linear([0.0, 10.0], true, 300.0, 100.0);
        assert_eq!(y.map(10.0), Some(100.0));
    }

    #[test]
    fn zero_and_empty_ranges_are_widened() {
        let s = Scale::linear([0.0, 0.0], true, 0.0, 10.0);
        assert_eq!(s.domain(), (0.0, 1.0));
        let s = Scale::linear(std::iter::empty(), true, 0.0, 10.0);
        assert_eq!(s.domain(), (0.0, 1.0));
        let s = Scale::linear([5.0], false, 0.0, 10.0);
        let (lo, hi) = s.domain();
        assert!(lo < 5.0 && hi > 5.0, "{lo} {hi}");
        assert!(s.map(5.0).unwrap().is_finite());
        let s = Scale::linear([-3.0, -3.0], true, 0.0, 10.0);
        assert_eq!(s.domain(), (-3.0, 0.0));
    }

    #[test]
    fn huge_ranges_stay_bounded_and_readable() {
        let s = Scale::linear([0.0, 3.7e15], true, 0.0, 100.0);
        let ticks = s.ticks();
        assert!(ticks.len() <= 12, "{ticks:?}");
        assert_eq!(ticks.last().unwrap().1, "4000T");
        let s = Scale::log([1e-3, 1e12], 0.0, 100.0);
        let ticks = s.ticks();
        assert!(ticks.len() <= 16, "{ticks:?}");
        assert_eq!(ticks[0].1, "0.001");
        assert!(ticks.iter().any(|t| t.1 == "1T"), "{ticks:?}");
        assert!(ticks.iter().any(|t| t.1 == "1"), "{ticks:?}");
        let s = Scale::log([f64::MIN_POSITIVE, f64::MAX], 0.0, 100.0);
        assert!(s.ticks().len() < 40);
        assert!(s.map(1.0).unwrap().is_finite());
    }

    #[test]
    fn log_scale_clamps_non_positive_values_to_its_floor() {
        let s = Scale::log([2.0, 300.0], 0.0, 300.0);
        let (lo, hi) = s.domain();
        assert!(
            lo < 2.0 && lo > 1.0 && hi > 300.0 && hi < 500.0,
            "{lo} {hi}"
        );
        assert_eq!(s.map(0.0), Some(0.0));
        assert_eq!(s.map(-5.0), Some(0.0));
        let a = s.map(10.0).unwrap();
        let b = s.map(100.0).unwrap();
        let c = s.map(1000.0).unwrap();
        assert!((b - a - (c - b)).abs() < 1e-9, "decades are equally wide");
        let labels: Vec<String> = s.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["2", "5", "10", "20", "50", "100", "200"]);
        let wide = Scale::log([0.5, 40_000.0], 0.0, 1.0);
        let labels: Vec<String> = wide.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["1", "10", "100", "1000", "10k"]);
        // A single value still spans a decade around it.
        let one = Scale::log([7.0], 0.0, 1.0);
        assert!(one.domain().0 < 7.0 && one.domain().1 > 7.0);
        assert!(!one.ticks().is_empty());
    }

    #[test]
    fn count_scale_ticks_are_whole_numbers() {
        let labels: Vec<String> = Scale::count([0.0, 0.0], 0.0, 1.0)
            .ticks()
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(labels, ["0", "1"]);
        let labels: Vec<String> = Scale::count([0.0, 3.0], 0.0, 1.0)
            .ticks()
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(labels, ["0", "1", "2", "3"]);
    }

    #[test]
    fn auto_scale_picks_log_for_wide_spreads() {
        assert_eq!(
            Scale::auto(&[1.0, 5.0], 20.0, 0.0, 1.0).kind,
            ScaleKind::Linear
        );
        assert_eq!(
            Scale::auto(&[0.5, 500.0], 20.0, 0.0, 1.0).kind,
            ScaleKind::Log
        );
        assert_eq!(Scale::auto(&[], 20.0, 0.0, 1.0).kind, ScaleKind::Linear);
    }

    #[test]
    fn nines_axis_spaces_each_nine_equally() {
        let s = Scale::nines(4, 0.0, 400.0);
        assert_eq!(s.map(0.0), Some(0.0));
        assert!((s.map(0.9).unwrap() - 100.0).abs() < 1e-9);
        assert!((s.map(0.99).unwrap() - 200.0).abs() < 1e-9);
        assert!((s.map(0.9999).unwrap() - 400.0).abs() < 1e-6);
        assert_eq!(s.map(1.0), None);
        let labels: Vec<String> = s.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0%", "50%", "90%", "99%", "99.9%", "99.99%"]);
    }

    #[test]
    fn numbers_format_compactly() {
        assert_eq!(fmt_num(0.0, 0), "0");
        assert_eq!(fmt_num(-0.0001, 2), "0.00");
        assert_eq!(fmt_num(12_500.0, 0), "12.5k");
        assert_eq!(fmt_num(2_000_000.0, 0), "2M");
        assert_eq!(fmt_value(0.1234), "0.123");
        assert_eq!(fmt_value(1234.0), "1234");
        assert_eq!(fmt_value(f64::INFINITY), "–");
    }

    fn chart(series: Vec<Series>) -> LineChart {
        LineChart {
            id: "t".into(),
            title: "T <&>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x: XScale::Linear,
            y: YScale::Auto(20.0),
            series,
            subtitle: String::new(),
            x_extent: vec![],
        }
    }

    #[test]
    fn empty_chart_says_no_data() {
        let svg = line_chart(&chart(vec![]));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains(r#"data-chart="t""#));
        assert!(svg.contains("no data"));
        assert!(svg.contains("T &lt;&amp;&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let bars = bar_chart(&BarChart {
            id: "b".into(),
            title: "b".into(),
            subtitle: String::new(),
            rows: vec![],
            groups: vec![],
            panels: vec![],
        });
        assert!(bars.contains("no data") && bars.ends_with("</svg>"));
    }

    #[test]
    fn single_points_get_markers_and_gaps_break_lines() {
        let svg = line_chart(&chart(vec![Series {
            name: "one".into(),
            points: vec![(0.5, 3.0)],
            color: 0,
            dashed: false,
        }]));
        assert!(svg.contains("<circle"), "{svg}");
        assert!(!svg.contains("no data"));
        assert!(!svg.contains("NaN"));
        let svg = line_chart(&chart(vec![Series {
            name: "gap\"py".into(),
            points: vec![
                (0.0, 1.0),
                (1.0, 2.0),
                (2.0, f64::NAN),
                (3.0, 2.0),
                (4.0, 1.0),
            ],
            color: 1,
            dashed: true,
        }]));
        let path = svg.split("<path").nth(1).unwrap();
        let d = path
            .split("d=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert!(svg.contains(r#"data-series="gap&quot;py""#));
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn bars_have_titles_values_and_skip_missing() {
        let svg = bar_chart(&BarChart {
            id: "sizes".into(),
            title: "sizes".into(),
            subtitle: String::new(),
            rows: vec!["a<b".into(), "c".into()],
            groups: vec![0, 1],
            panels: vec![
                Panel {
                    title: "count".into(),
                    values: vec![Some(10.0), Some(2000.0)],
                    log_ratio: 1e9,
                    color: 0,
                    integer: true,
                },
                Panel {
                    title: "p99".into(),
                    values: vec![None, Some(3.5)],
                    log_ratio: 20.0,
                    color: 1,
                    integer: false,
                },
            ],
        });
        assert_eq!(svg.matches(r#"class="bar""#).count(), 3);
        assert!(svg.contains("a&lt;b"));
        assert!(svg.contains(">2000<") && svg.contains(">3.50<"));
    }

    #[test]
    fn every_chart_kind_is_valid_svg_and_rasterizes() {
        let r = Rasterizer::new();
        let mut line = chart(vec![Series {
            name: "a & b".into(),
            points: (0..100).map(|i| (f64::from(i), f64::from(i * i))).collect(),
            color: 2,
            dashed: false,
        }]);
        line.x = XScale::Linear;
        for svg in [
            line_chart(&line),
            line_chart(&chart(vec![])),
            bar_chart(&BarChart {
                id: "b".into(),
                title: "bars".into(),
                subtitle: "s".into(),
                rows: vec!["x".into()],
                groups: vec![0],
                panels: vec![Panel {
                    title: "p".into(),
                    values: vec![Some(1.0)],
                    log_ratio: 10.0,
                    color: 0,
                    integer: true,
                }],
            }),
        ] {
            let png = r.png(&svg, 1.0).unwrap();
            assert_eq!(&png[1..4], b"PNG");
            assert!(png.len() > 1000);
        }
        assert!(r.png("<svg", 1.0).is_err());
    }
}
