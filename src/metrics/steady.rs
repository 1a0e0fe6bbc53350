//! Whether a run was steady: from the run's batches of consecutive intervals, a warm-up at
//! its start (the truncation point that minimizes the standard error of what remains, the
//! MSER rule), a drift through the rest (the first and last thirds apart by more than 30%,
//! and the difference beyond their noise), and stalls (a batch with next to no throughput,
//! or a median latency many times the run's). `docs/measurement.md` states the rules.

use serde::{Deserialize, Serialize};

use super::uncertainty::{welch, Batches, Metric};
use super::{Level, Op};

/// Batches below which a run is too short to call steady or not.
pub const MIN_BATCHES: usize = 6;

/// A change between the first and the last third this large, beyond the noise, is drift.
pub const DRIFT: f64 = 0.3;

/// The false-alarm rate of the whole verdict; each of its figures is tested at this rate
/// divided by their number (Bonferroni), so that watching more operations does not raise
/// more false alarms.
const ALPHA: f64 = 0.05;

/// A batch with less than this share of the throughput of the run's upper quartile of
/// batches has stalled.
const STALLED_SHARE: f64 = 0.1;

/// A batch whose median latency is this many times the run's lower quartile of batches' has
/// stalled.
const STALLED_LATENCY: f64 = 5.0;

/// Samples a batch needs before its median latency is judged, and operations the run's
/// upper quartile batch needs before throughput is: fewer say more about chance than about
/// the registry (a tenth of ten is one operation).
const MIN_SAMPLES: u64 = 20;
const MIN_THROUGHPUT: f64 = 10.0;

/// A stall lasts at least two batches and half a second: a pause shorter than that (a
/// garbage collection, a scheduling hiccup) is the noise percentiles already carry.
const MIN_STALL_S: f64 = 0.5;

/// The steady-state verdict of a run (summary.json `steady_state`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// `true` steady, `false` not (see `drift`), `null` too short to tell.
    pub steady: Option<bool>,
    /// Batches judged, and the seconds each spans.
    pub batches: usize,
    pub batch_s: f64,
    /// A warm-up transient found at the start, in seconds (0: none).
    pub warmup_s: f64,
    /// What moved: one line per figure.
    pub drift: Vec<Drift>,
}

/// One figure that moved through the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// `blob_get p50`, `throughput`.
    pub figure: String,
    /// `drift` (first third to last third) or `stall` (a stretch of batches).
    pub kind: String,
    /// The figure at the start and at the end (first and last third), or the run's median
    /// outside the stall and the stalled batches' for a stall; ms for latencies, operations/s
    /// for throughput.
    pub from: f64,
    pub to: f64,
    /// For a stall: when it began, seconds into the run, and how long it lasted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_s: Option<f64>,
}

impl Drift {
    /// The figure's change as people read it.
    pub fn describe(&self) -> String {
        let unit = if self.figure == "throughput" {
            " op/s"
        } else {
            " ms"
        };
        match (self.at_s, self.length_s) {
            (Some(at), Some(len)) => format!(
                "{} stalled for {len:.1}s from {at:.1}s into the run ({:.1}{unit} against {:.1}{unit} over the run)",
                self.figure, self.to, self.from
            ),
            _ => {
                let change = (self.to / self.from - 1.0) * 100.0;
                let verb = if change >= 0.0 { "rose" } else { "fell" };
                format!(
                    "{} {verb} {:.0}% from the first to the last third of the run ({:.1} → {:.1}{unit})",
                    self.figure,
                    change.abs(),
                    self.from,
                    self.to
                )
            }
        }
    }
}

/// The median of `v` (sorted in place); `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The `q` quantile of `v` (nearest rank; a copy sorted); `None` when empty.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let last = v.len().checked_sub(1)?;
    v.get((last as f64 * q).round() as usize).copied()
}

/// The MSER truncation point of `x`: the number of leading values whose removal minimizes
/// the standard error of the mean of the rest, searched over the first third (beyond it, a
/// run that keeps drifting would be cut rather than called unsteady).
pub fn mser(x: &[f64]) -> usize {
    let n = x.len();
    if n < MIN_BATCHES {
        return 0;
    }
    let mut best = (f64::INFINITY, 0);
    for d in 0..=n / 3 {
        let rest = &x[d..];
        let m = rest.iter().sum::<f64>() / rest.len() as f64;
        let ss: f64 = rest.iter().map(|v| (v - m).powi(2)).sum();
        let score = ss / (rest.len() as f64).powi(2);
        if score < best.0 - 1e-12 {
            best = (score, d);
        }
    }
    best.1
}

/// The drift of one figure through `x` (after its warm-up): the medians of the first and
/// last thirds, when they are more than [`DRIFT`] apart and Welch's test calls the
/// difference real at `alpha`.
fn drift_of(figure: &str, x: &[f64], alpha: f64) -> Option<Drift> {
    let third = x.len() / 3;
    if third < 2 {
        return None;
    }
    let (first, last) = (&x[..third], &x[x.len() - third..]);
    let from = median(&mut first.to_vec())?;
    let to = median(&mut last.to_vec())?;
    if from <= 0.0 || (to / from - 1.0).abs() <= DRIFT {
        return None;
    }
    let real = welch(first, last).is_some_and(|w| w.p_value < alpha);
    real.then(|| Drift {
        figure: figure.to_owned(),
        kind: "drift".into(),
        from,
        to,
        at_s: None,
        length_s: None,
    })
}

/// The longest stretch of consecutive batches for which `stalled` holds, (start, length),
/// if it is long enough to be a stall (see [`MIN_STALL_S`]).
fn stall(x: &[f64], batch_s: f64, stalled: impl Fn(f64) -> bool) -> Option<(usize, usize)> {
    longest(x, stalled).filter(|&(_, len)| len >= 2 && len as f64 * batch_s >= MIN_STALL_S)
}

/// The longest stretch of consecutive batches for which `stalled` holds: (start, length).
fn longest(x: &[f64], stalled: impl Fn(f64) -> bool) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut start = None;
    for (i, v) in x
        .iter()
        .enumerate()
        .chain(std::iter::once((x.len(), &f64::NAN)))
    {
        match (start, i < x.len() && stalled(*v)) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                if best.is_none_or(|(_, l)| i - s > l) {
                    best = Some((s, i - s));
                }
                start = None;
            }
            _ => {}
        }
    }
    best
}

/// Judges a run from its `batches`, each `batch_s` long; `closed` says whether throughput is
/// the generator's to keep (a closed loop) rather than the trace's (an open model, whose
/// offered rate changes by itself).
#[allow(clippy::too_many_lines)]
pub fn judge(batches: &Batches, closed: bool) -> SteadyState {
    let batch_s = batches.batch_s();
    // The last batch is left out: a workload winding down (its last operations draining)
    // is not a registry slowing down.
    let all = batches.completed();
    let judged = all.len().saturating_sub(1);
    // Batches before the first operation completed (a --warmup left out, a --start-at
    // still ahead) are not part of the run's course.
    let lead = all[..judged].iter().take_while(|&&c| c == 0).count();
    let completed: Vec<f64> = all[lead..judged]
        .iter()
        .map(|&c| c as f64 / batch_s.max(1e-9))
        .collect();
    let mut state = SteadyState {
        steady: None,
        batches: completed.len(),
        batch_s,
        warmup_s: 0.0,
        drift: Vec::new(),
    };
    if completed.len() < MIN_BATCHES {
        return state;
    }
    // The figures watched: every workload operation's median latency, batch by batch, where
    // every batch estimates it; and throughput.
    let mut series: Vec<(String, Vec<f64>)> = Vec::new();
    for op in Op::ALL.iter().filter(|o| o.level() == Level::Operation) {
        let course = batches.course(*op, Metric::Latency, 0.5, MIN_SAMPLES);
        let course = &course[lead.min(course.len())..judged.min(course.len())];
        if course.len() == completed.len() && course.iter().all(Option::is_some) {
            let ms = course.iter().flatten().map(|us| us / 1000.0).collect();
            series.push((format!("{} p50", op.name()), ms));
        }
    }
    // What a batch does where the run ran: the upper quartile of their throughput, the lower
    // quartile of a figure's latency. A stall is measured against it, not against the
    // median, which is the stall's own when the stall takes over half the run (a registry
    // stopped for most of a short run).
    let running = quantile(&completed, 0.75).unwrap_or(0.0);
    // Throughput is judged in a closed loop only, and only when a batch holds enough
    // operations for a share of them to mean something.
    let throughput = closed && running * batch_s >= MIN_THROUGHPUT;
    // Stalls first, over the whole run: a stretch from the very first batch is a warm-up,
    // not a stall. A stall is reported against the run's median outside it.
    let mut stalls: Vec<Drift> = Vec::new();
    let mut found = |figure: &str, x: &[f64], stalled: &dyn Fn(f64) -> bool| {
        if let Some((at, len)) = stall(x, batch_s, stalled).filter(|&(at, _)| at > 0) {
            let mut outside: Vec<f64> = x[..at].iter().chain(&x[at + len..]).copied().collect();
            stalls.push(Drift {
                figure: figure.to_owned(),
                kind: "stall".into(),
                from: median(&mut outside).unwrap_or(0.0),
                to: median(&mut x[at..at + len].to_vec()).unwrap_or(0.0),
                at_s: Some((lead + at) as f64 * batch_s),
                length_s: Some(len as f64 * batch_s),
            });
        }
    };
    for (figure, x) in &series {
        let running = quantile(x, 0.25).unwrap_or(0.0);
        found(figure, x, &|v| v > STALLED_LATENCY * running);
    }
    if throughput {
        found("throughput", &completed, &|v| v < STALLED_SHARE * running);
    }
    // The warm-up: the latest MSER point of the figures, never into a stall.
    let first_stall = stalls
        .iter()
        .filter_map(|d| d.at_s)
        .map(|at| (at / batch_s).round() as usize - lead)
        .min()
        .unwrap_or(usize::MAX);
    let warmup = series
        .iter()
        .map(|(_, x)| mser(x))
        .chain(throughput.then(|| mser(&completed)))
        .max()
        .unwrap_or(0)
        .min(first_stall);
    state.warmup_s = warmup as f64 * batch_s;
    // Drift through what follows the warm-up.
    let alpha = ALPHA / (series.len() + usize::from(throughput)).max(1) as f64;
    for (figure, x) in &series {
        state.drift.extend(drift_of(figure, &x[warmup..], alpha));
    }
    if throughput {
        state
            .drift
            .extend(drift_of("throughput", &completed[warmup..], alpha));
    }
    state.drift.extend(stalls);
    state.steady = Some(state.drift.is_empty());
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of `per_batch` blob GETs at latencies (µs) from `latency(i)`, batch by batch.
    fn batches(n: usize, per_batch: u64, latency: impl Fn(usize) -> u64) -> Batches {
        let mut b = Batches::default();
        for i in 0..n {
            let us = latency(i);
            let count = if us == 0 { 0 } else { per_batch };
            if count > 0 {
                b.add(Op::BlobGet, Metric::Latency, [(us, count)].into_iter());
                b.add_completed(count);
            }
            b.end_interval();
        }
        // The last batch, left out as the run's wind-down.
        b.add(Op::BlobGet, Metric::Latency, [(10_000, 1)].into_iter());
        b.add_completed(1);
        b.end_interval();
        b
    }

    #[test]
    fn a_steady_run_says_so() {
        let b = batches(20, 100, |i| 10_000 + (i as u64 % 3) * 300);
        let s = judge(&b, true);
        assert_eq!(s.steady, Some(true), "{s:?}");
        assert_eq!(s.warmup_s, 0.0);
    }

    #[test]
    fn a_run_that_keeps_slowing_drifts_and_says_how_much() {
        let b = batches(20, 100, |i| {
            10_000 + i as u64 * 1_000 + (i as u64 % 2) * 200
        });
        let s = judge(&b, true);
        assert_eq!(s.steady, Some(false), "{s:?}");
        let d = s.drift.iter().find(|d| d.kind == "drift").unwrap();
        assert_eq!(d.figure, "blob_get p50");
        assert!(d.to > d.from * 1.25, "{d:?}");
        assert!(d.describe().contains("rose"), "{}", d.describe());
    }

    #[test]
    fn a_stopped_registry_is_a_stall() {
        // Three seconds without an answer in the middle of a closed loop.
        let b = batches(20, 100, |i| if (8..11).contains(&i) { 0 } else { 10_000 });
        let s = judge(&b, true);
        assert_eq!(s.steady, Some(false), "{s:?}");
        let d = s.drift.iter().find(|d| d.kind == "stall").unwrap();
        assert_eq!((d.at_s, d.length_s), (Some(8.0), Some(3.0)), "{d:?}");
        assert!(
            d.describe().contains("stalled for 3.0s"),
            "{}",
            d.describe()
        );
    }

    #[test]
    fn a_registry_stopped_for_most_of_a_run_is_still_a_stall() {
        // Nine batches of fifteen without an answer: the median batch is the stall's.
        let b = batches(15, 100, |i| if (3..12).contains(&i) { 0 } else { 10_000 });
        let s = judge(&b, true);
        assert_eq!(s.steady, Some(false), "{s:?}");
        let d = s.drift.iter().find(|d| d.kind == "stall").unwrap();
        assert_eq!((d.at_s, d.length_s), (Some(3.0), Some(9.0)), "{d:?}");
        // Against the run outside it: 100 operations a second where it ran, none inside.
        assert_eq!((d.from, d.to), (100.0, 0.0), "{d:?}");
    }

    #[test]
    fn a_warm_up_is_found_and_left_out() {
        // Slow for four seconds (a cold cache), then steady.
        let b = batches(20, 100, |i| {
            if i < 4 {
                60_000
            } else {
                10_000 + (i as u64 % 3) * 200
            }
        });
        let s = judge(&b, true);
        assert_eq!(s.warmup_s, 4.0, "{s:?}");
        assert_eq!(s.steady, Some(true), "{s:?}");
    }

    #[test]
    fn a_short_run_cannot_tell() {
        let b = batches(4, 100, |_| 10_000);
        assert_eq!(judge(&b, true).steady, None);
    }
}
