//! Plain SVG charts, written by hand: line charts (with linear, logarithmic or "nines"
//! percentile axes, in `line`) and horizontal bar charts with one panel per metric (in
//! `bar`), rasterized to PNG by `raster`. This file holds what they share: escaping,
//! number formats, scales and the SVG frame.
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

mod bar;
mod line;
mod raster;

use std::fmt::Write as _;

pub use bar::{bar_chart, BarChart, Panel};
pub use line::{line_chart, LineChart, Series, XScale, YScale};
pub use raster::Rasterizer;

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

/// The labels of an x axis at `y`, centred on their ticks (`at` gives a tick's position,
/// `None` off the axis); a label that would overlap the one before it (within `gap`) is left
/// out.
fn x_labels(
    out: &mut String,
    ticks: &[(f64, String)],
    at: impl Fn(f64) -> Option<f64>,
    size: f64,
    gap: f64,
    y: f64,
) {
    let mut last_right = f64::NEG_INFINITY;
    for (v, label) in ticks {
        let Some(x) = at(*v) else { continue };
        let half = text_width(label, size) / 2.0;
        if x - half < last_right + gap {
            continue;
        }
        last_right = x + half;
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            px(y),
            escape(label)
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
                    ranges: Vec::new(),
                },
                Panel {
                    title: "p99".into(),
                    values: vec![None, Some(3.5)],
                    log_ratio: 20.0,
                    color: 1,
                    integer: false,
                    ranges: Vec::new(),
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
                    ranges: Vec::new(),
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
