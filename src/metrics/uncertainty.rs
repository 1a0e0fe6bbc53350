//! How sure a run's percentiles are, and whether the run was steady. The run's intervals are
//! grouped into consecutive batches, per operation and latency metric; a percentile's
//! confidence interval comes from the spread of its batch estimates (sectioning), never
//! narrower than the order-statistic interval of all its samples; the steady-state verdict
//! compares the first and last batches' medians and rates. `docs/measurement.md` says what
//! these methods assume and when they do not hold.

use std::collections::BTreeMap;

use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Normal, StudentsT};

pub use super::hist::estimable;
use super::hist::{SparseHistogram, HISTOGRAM_SETTINGS};
use super::{Op, Stats, StatsTable};

/// The confidence of every reported interval.
pub const CONFIDENCE: f64 = 0.95;

/// Batches below which a run's correlation cannot be judged: no interval then.
pub const MIN_BATCHES: usize = 5;

/// Batches kept at most; when they are all closed, neighbours merge and each batch spans
/// twice as many intervals (memory stays bounded whatever the run's length).
const MAX_BATCHES: usize = 32;

/// The percentiles every latency has, as fractions.
pub const QUANTILES: [f64; 4] = [0.50, 0.90, 0.99, 0.999];

/// Which latency of an operation a series of batches holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    Latency,
    Ttfb,
    Service,
    ScheduleLag,
    ErrorLatency,
}

impl Metric {
    pub const ALL: [Metric; 5] = [
        Metric::Latency,
        Metric::Ttfb,
        Metric::Service,
        Metric::ScheduleLag,
        Metric::ErrorLatency,
    ];

    /// The histogram of this metric in `stats`, if it has one.
    pub fn of<H>(self, stats: &Stats<H>) -> Option<&H> {
        match self {
            Metric::Latency => Some(&stats.latency),
            Metric::Ttfb => stats.ttfb.as_ref(),
            Metric::Service => stats.service.as_ref(),
            Metric::ScheduleLag => stats.schedule_lag.as_ref(),
            Metric::ErrorLatency => stats.error_latency.as_ref(),
        }
    }
}

/// A batch's histogram: two significant digits (1%) are far finer than the spread between
/// batches they measure, and keep a batch at a few kilobytes.
fn batch_histogram() -> Histogram<u32> {
    let s = HISTOGRAM_SETTINGS;
    Histogram::new_with_bounds(s.lowest_discernible, s.highest_trackable, 2)
        .unwrap_or_else(|_| unreachable!("the standard bounds are valid"))
}

/// A closed batch: its histogram in HdrHistogram's V2 encoding (the counts as variable-length
/// integers, runs of empty buckets as one; the encoding `histograms.hlog` holds), and how
/// many values it holds. A run keeps up to [`MAX_BATCHES`] of these per operation and
/// metric; as a dense histogram each would take 13 KB whatever it holds (7 MB of them at
/// the peak of a 1M-record replay), encoded a few bytes per bucket that saw a value. Read
/// through [`Closed::dense`], which gives back the same histogram exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Closed {
    encoded: Box<[u8]>,
    len: u64,
}

impl Closed {
    fn of(h: &Histogram<u32>) -> Closed {
        let mut encoded = Vec::new();
        // Writing into memory cannot fail; an empty encoding reads back as an empty batch.
        let _ = V2Serializer::new().serialize(h, &mut encoded);
        Closed {
            encoded: encoded.into_boxed_slice(),
            len: h.len(),
        }
    }

    /// The batch as the histogram it was closed from.
    fn dense(&self) -> Histogram<u32> {
        Deserializer::new()
            .deserialize(&mut &self.encoded[..])
            .unwrap_or_else(|_| batch_histogram())
    }

    /// Two neighbouring batches as one (counts saturating, as the dense histogram's do).
    fn merge(&self, other: &Closed) -> Closed {
        let mut h = self.dense();
        for v in other.dense().iter_recorded() {
            h.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
        Closed::of(&h)
    }
}

/// One (operation, metric): its closed batches (by position, `None` where it saw nothing)
/// and the open one (dense, reused batch after batch).
#[derive(Debug, Clone, Default)]
struct Series {
    closed: Vec<Option<Closed>>,
    open: Option<Histogram<u32>>,
}

impl Series {
    fn add(&mut self, values: impl Iterator<Item = (u64, u64)>) {
        let h = self.open.get_or_insert_with(batch_histogram);
        for (value, count) in values {
            h.saturating_record_n(
                value.min(HISTOGRAM_SETTINGS.highest_trackable),
                count as u32,
            );
        }
    }

    /// Closes the open batch (`None` when it saw nothing); its histogram is kept for the
    /// next.
    fn close(&mut self) {
        let closed = match &mut self.open {
            Some(h) if !h.is_empty() => {
                let closed = Closed::of(h);
                h.reset();
                Some(closed)
            }
            _ => None,
        };
        self.closed.push(closed);
    }

    /// The closed batches that saw anything, as histograms.
    fn dense(&self) -> impl Iterator<Item = Histogram<u32>> + '_ {
        self.closed.iter().flatten().map(Closed::dense)
    }
}

/// A run's intervals grouped into consecutive batches of equal length, per operation and
/// metric, with the operations completed per batch: what intervals and the steady-state
/// verdict read. Fed an interval at a time, in order (idle intervals too), by the
/// aggregator while measuring and by `merge` and `report` from `histograms.hlog`, so every
/// one computes the same intervals from the same data.
#[derive(Debug, Clone)]
pub struct Batches {
    /// The length of one interval.
    pub interval: std::time::Duration,
    /// Intervals per batch.
    per_batch: u64,
    open_intervals: u64,
    closed: usize,
    series: BTreeMap<(Op, Metric), Series>,
    /// Operations completed (successes and failures) per closed batch, and in the open one.
    completed: Vec<u64>,
    open_completed: u64,
}

impl Default for Batches {
    fn default() -> Self {
        Batches {
            interval: std::time::Duration::from_secs(1),
            per_batch: 1,
            open_intervals: 0,
            closed: 0,
            series: BTreeMap::new(),
            completed: Vec::new(),
            open_completed: 0,
        }
    }
}

impl Batches {
    /// Adds one interval's samples of `op`'s `metric`, as (value, count) pairs.
    pub fn add(&mut self, op: Op, metric: Metric, values: impl Iterator<Item = (u64, u64)>) {
        let closed = self.closed;
        let series = self.series.entry((op, metric)).or_insert_with(|| Series {
            closed: vec![None; closed],
            open: None,
        });
        series.add(values);
    }

    /// Adds operations completed in the open interval.
    pub fn add_completed(&mut self, n: u64) {
        self.open_completed += n;
    }

    /// Adds every cell of an interval's table (its operations, every metric).
    pub fn add_sparse_table(&mut self, table: &StatsTable<SparseHistogram>) {
        for ((op, _), stats) in table.cells() {
            if op.level() == super::Level::Operation {
                self.add_completed(stats.count);
            }
            for metric in Metric::ALL {
                if let Some(h) = metric.of(stats).filter(|h| !h.is_empty()) {
                    self.add(*op, metric, h.iter());
                }
            }
        }
    }

    /// Ends the open interval; closes the batch when it has its length.
    pub fn end_interval(&mut self) {
        self.open_intervals += 1;
        if self.open_intervals < self.per_batch {
            return;
        }
        for series in self.series.values_mut() {
            series.close();
        }
        self.completed
            .push(std::mem::take(&mut self.open_completed));
        self.open_intervals = 0;
        self.closed += 1;
        if self.closed == MAX_BATCHES {
            self.halve();
        }
    }

    /// Neighbouring batches merged: half as many, each twice as long.
    fn halve(&mut self) {
        for series in self.series.values_mut() {
            let pairs = std::mem::take(&mut series.closed);
            let mut it = pairs.into_iter();
            while let (Some(a), b) = (it.next(), it.next()) {
                let merged = match (a, b.flatten()) {
                    (Some(a), Some(b)) => Some(a.merge(&b)),
                    (a, b) => a.or(b),
                };
                series.closed.push(merged);
            }
        }
        self.completed = self.completed.chunks(2).map(|c| c.iter().sum()).collect();
        self.closed /= 2;
        self.per_batch *= 2;
    }

    /// Closed batches, and the intervals each spans.
    pub fn shape(&self) -> (usize, u64) {
        (self.closed, self.per_batch)
    }

    /// The seconds one batch spans.
    pub fn batch_s(&self) -> f64 {
        self.interval.as_secs_f64() * self.per_batch as f64
    }

    /// The `q` quantile of `op`'s `metric` in every closed batch that estimates it, µs.
    pub fn estimates(&self, op: Op, metric: Metric, q: f64) -> Vec<f64> {
        let Some(series) = self.series.get(&(op, metric)) else {
            return Vec::new();
        };
        series
            .closed
            .iter()
            .flatten()
            .filter(|c| estimable(c.len, q))
            .map(|c| c.dense().value_at_quantile(q) as f64)
            .collect()
    }

    /// Operations completed in each closed batch.
    pub fn completed(&self) -> &[u64] {
        &self.completed
    }

    /// The `q` quantile of `op`'s `metric` per closed batch (`None` where a batch has fewer
    /// than `min` samples or does not estimate it), µs: the run's course, for the
    /// steady-state verdict.
    pub fn course(&self, op: Op, metric: Metric, q: f64, min: u64) -> Vec<Option<f64>> {
        let Some(series) = self.series.get(&(op, metric)) else {
            return Vec::new();
        };
        series
            .closed
            .iter()
            .map(|c| {
                c.as_ref()
                    .filter(|c| c.len >= min && estimable(c.len, q))
                    .map(|c| c.dense().value_at_quantile(q) as f64)
            })
            .collect()
    }

    /// The confidence interval of `op`'s `metric` at `q`, µs, given the run's histogram of
    /// it: see [`interval`].
    pub fn interval(
        &self,
        op: Op,
        metric: Metric,
        q: f64,
        all: &Histogram<u64>,
    ) -> Option<[f64; 2]> {
        let series = self.series.get(&(op, metric))?;
        interval(all, series.dense().collect(), q)
    }
}

/// Lag-1 autocorrelation of a series: as estimated, and corrected for the downward bias of
/// that estimate in a short series (by about (1 + 4ρ) / n, Kendall's approximation).
fn lag1(x: &[f64]) -> (f64, f64) {
    let n = x.len();
    if n < 3 {
        return (0.0, 0.0);
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let var: f64 = x.iter().map(|v| (v - mean).powi(2)).sum();
    if var <= 0.0 {
        return (0.0, 0.0);
    }
    let cov: f64 = x.windows(2).map(|w| (w[0] - mean) * (w[1] - mean)).sum();
    let rho = cov / var;
    (rho, rho + (1.0 + 4.0 * rho.max(0.0)) / n as f64)
}

/// Correlation between neighbouring batches above which they merge.
const NEIGHBOURS_CORRELATED: f64 = 0.2;

/// The share of each batch's samples at or below `value`, batches merged pairwise while
/// neighbours are still correlated and at least twice [`MIN_BATCHES`] remain; and the
/// lag-1 autocorrelation left between the final batches (0 when none).
fn decorrelated(mut batches: Vec<Histogram<u32>>, value: u64) -> (Vec<f64>, f64) {
    loop {
        let shares: Vec<f64> = batches
            .iter()
            .map(|h| h.count_between(0, value) as f64 / h.len() as f64)
            .collect();
        let (rho, corrected) = lag1(&shares);
        if corrected <= NEIGHBOURS_CORRELATED || batches.len() < 2 * MIN_BATCHES {
            return (shares, rho.max(0.0));
        }
        let mut merged = Vec::with_capacity(batches.len() / 2);
        let mut it = batches.into_iter();
        while let (Some(mut a), Some(b)) = (it.next(), it.next()) {
            // Same settings: adding cannot fail.
            let _ = a.add(&b);
            merged.push(a);
        }
        batches = merged;
    }
}

/// The `CONFIDENCE` interval of the `q` quantile of `all` (µs), from the consecutive
/// `batches` of the same samples.
///
/// Batch means of the indicator, inverted: the share of samples at or below the run's
/// estimate is a plain mean, whose standard error the batches give (t(b−1) · s / √b, s²
/// inflated by (1 + ρ) / (1 − ρ) for what correlation is left between neighbouring batches);
/// the interval is the run's quantiles at q ∓ that error. It holds for correlated samples
/// as long as the batches are long enough to be nearly independent of each other; it is
/// widened, where narrower, to the order-statistic interval (the ranks n·q ± z·√(n·q·(1−q)),
/// exact for independent samples). `None` when it cannot be established: too few samples
/// for the estimate, an upper bound beyond the largest sample, or fewer than
/// [`MIN_BATCHES`] batches.
pub fn interval(all: &Histogram<u64>, batches: Vec<Histogram<u32>>, q: f64) -> Option<[f64; 2]> {
    let n = all.len();
    if !estimable(n, q) || batches.len() < MIN_BATCHES {
        return None;
    }
    let (lo_rank, hi_rank) = order_ranks(n, q)?;
    let nf = n as f64;
    let at = |share: f64| all.value_at_quantile(share.clamp(0.0, 1.0)) as f64;
    let estimate = all.value_at_quantile(q);
    // The tail's floor (below) asks the median's and the p90's intervals of the same batches.
    let inner_batches = (q > 0.5).then(|| batches.clone());
    let (shares, rho) = decorrelated(batches, all.highest_equivalent(estimate));
    let b = shares.len() as f64;
    if shares.len() < MIN_BATCHES {
        return None;
    }
    let mean = shares.iter().sum::<f64>() / b;
    let rho = rho.clamp(0.0, 0.9);
    let var = shares.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (b - 1.0) * (1.0 + rho)
        / (1.0 - rho);
    let half = t_quantile(b - 1.0) * var.sqrt() / b.sqrt();
    if q + half > 1.0 - 1.0 / nf {
        // The upper bound would be the largest sample or beyond: not established.
        return None;
    }
    let mut low = at(q - half).min(at(lo_rank as f64 / nf)).max(0.0);
    let mut high = at(q + half).max(at(hi_rank as f64 / nf));
    if let Some(inner_batches) = inner_batches {
        // A slow stretch slows every request of it: the run's level of log latency is
        // uncertain for the whole distribution, and so is its spread. A tail percentile
        // moves with the level at least as much as the median does, and beyond the p90 with
        // the spread as the normal score grows: its interval, relative to its value, is
        // never narrower than the median's, nor than the p90's times z(q) / z(0.9). The
        // batches of a run that saw few slow stretches underestimate both (they cannot show
        // what did not happen), which the tail's own interval alone does not survive.
        let relative = |p: f64| -> Option<(f64, f64)> {
            let [l, h] = interval(all, inner_batches.clone(), p)?;
            let v = all.value_at_quantile(p).max(1) as f64;
            Some(((v / l.max(1.0)).ln(), (h / v).ln()))
        };
        let mut down = 0.0f64;
        let mut up = 0.0f64;
        if let Some((d, u)) = relative(0.5) {
            (down, up) = (d, u);
        }
        if q > 0.9 {
            if let Some((d, u)) = relative(0.9) {
                let k = z_score(q) / z_score(0.9);
                down = down.max(d * k);
                up = up.max(u * k);
            }
        }
        let value = estimate as f64;
        low = low.min(value * (-down).exp());
        high = high.max(value * up.exp());
    }
    Some([low, high])
}

/// Welch's two-sample t-test of the means of `a` and `b` (unequal variances): the
/// difference b − a, its `CONFIDENCE` interval, and the two-sided p-value. `None` with
/// fewer than two values on either side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    pub difference: f64,
    pub interval: [f64; 2],
    pub p_value: f64,
    /// The smallest difference the test would call real four times in five (80% power)
    /// at its 5% false-alarm rate, given the spread of these runs: (t₀.₉₇₅ + t₀.₈₀) · se,
    /// with Welch's degrees of freedom.
    pub detectable: f64,
}

/// The power a detectable difference is stated at.
pub const POWER: f64 = 0.80;

/// See [`Welch`].
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    let moments = |x: &[f64]| {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (n, mean, var)
    };
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (na, ma, va) = moments(a);
    let (nb, mb, vb) = moments(b);
    let (sa, sb) = (va / na, vb / nb);
    let se = (sa + sb).sqrt();
    let difference = mb - ma;
    if se <= 0.0 {
        // No spread on either side: any difference is certain, none is none.
        let p_value = if difference == 0.0 { 1.0 } else { 0.0 };
        return Some(Welch {
            difference,
            interval: [difference, difference],
            p_value,
            detectable: 0.0,
        });
    }
    let df = (sa + sb).powi(2) / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let t = StudentsT::new(0.0, 1.0, df.max(1.0)).ok()?;
    let half = t_quantile(df) * se;
    let p_value = 2.0 * (1.0 - t.cdf((difference / se).abs()));
    Some(Welch {
        difference,
        interval: [difference - half, difference + half],
        p_value,
        detectable: half + t.inverse_cdf(POWER) * se,
    })
}

/// The two-sided `CONFIDENCE` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile(df: f64) -> f64 {
    let upper = 1.0 - (1.0 - CONFIDENCE) / 2.0;
    StudentsT::new(0.0, 1.0, df.max(1.0))
        .map(|t| t.inverse_cdf(upper))
        .unwrap_or(1.96)
}

/// The standard normal quantile of `q`.
fn z_score(q: f64) -> f64 {
    Normal::new(0.0, 1.0).map_or(0.0, |d| d.inverse_cdf(q))
}

/// Whether `beyond` of `n` independent samples past a limit are too many to be chance when
/// at most a `share` of the population lies past it: the chance of that many or more,
/// P(Binomial(n, share) ≥ beyond), under the one-sided (1 − `CONFIDENCE`) / 2 — the side of
/// a two-sided `CONFIDENCE` interval. One sample past a p99's limit in 20 is not (18% by
/// chance), two are (1.7%).
pub fn too_many_to_be_chance(n: u64, beyond: u64, share: f64) -> bool {
    if beyond == 0 || beyond > n {
        return false;
    }
    let Ok(b) = Binomial::new(share.clamp(0.0, 1.0), n) else {
        return true;
    };
    b.sf(beyond - 1) < (1.0 - CONFIDENCE) / 2.0
}

/// The ranks (1-based) that bound the `q` quantile of `n` independent samples with
/// `CONFIDENCE`, by the normal approximation of the binomial; `None` when the upper one is
/// the largest sample or beyond (the tail cannot be established).
fn order_ranks(n: u64, q: f64) -> Option<(u64, u64)> {
    let z = Normal::new(0.0, 1.0)
        .map(|d| d.inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0))
        .unwrap_or(1.96);
    let nf = n as f64;
    let spread = z * (nf * q * (1.0 - q)).sqrt();
    let lo = (nf * q - spread).floor().max(1.0) as u64;
    let hi = (nf * q + spread).ceil() as u64 + 1;
    (hi < n).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn samples_past_a_limit_are_chance_until_they_are_too_many() {
        // A p99's limit: 1% may lie past it. One in 20 is chance (18%), two are not (1.7%).
        assert!(!too_many_to_be_chance(20, 0, 0.01));
        assert!(!too_many_to_be_chance(20, 1, 0.01));
        assert!(too_many_to_be_chance(20, 2, 0.01));
        // 40 samples: two past it happen 6% of the time, three 0.8%.
        assert!(!too_many_to_be_chance(40, 2, 0.01));
        assert!(too_many_to_be_chance(40, 3, 0.01));
        // Many samples: 1.3% past in 100 000 is far beyond chance, 1.01% is not.
        assert!(too_many_to_be_chance(100_000, 1_300, 0.01));
        assert!(!too_many_to_be_chance(100_000, 1_010, 0.01));
        // A median's: half may lie on the wrong side.
        assert!(!too_many_to_be_chance(20, 14, 0.5));
        assert!(too_many_to_be_chance(20, 16, 0.5));
    }

    /// A standard normal draw (Box–Muller).
    fn normal(rng: &mut Xoshiro256PlusPlus) -> f64 {
        let u1: f64 = rng.random::<f64>().max(1e-300);
        let u2: f64 = rng.random();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// The standard normal quantile.
    fn z(q: f64) -> f64 {
        Normal::new(0.0, 1.0).unwrap().inverse_cdf(q)
    }

    /// A simulated run: `intervals` intervals of `per_interval` latencies (µs), lognormal
    /// around 10 ms. `phi` > 0 makes them bursty: every interval shares a slowness that
    /// follows an AR(1) process from interval to interval (a slow second slows many
    /// requests). Returns the run's histogram, its batches and the true quantile function.
    fn simulate(
        rng: &mut Xoshiro256PlusPlus,
        intervals: usize,
        per_interval: usize,
        phi: f64,
    ) -> (Histogram<u64>, Batches, impl Fn(f64) -> f64) {
        let (mu, sigma_e, sigma_x) = (10_000f64.ln(), 0.5, 0.3);
        // The marginal of log latency: N(mu, sigma_e² + sigma_x² / (1 − phi²)).
        let stationary = if phi > 0.0 {
            sigma_x / (1.0 - phi * phi).sqrt()
        } else {
            0.0
        };
        let total = (sigma_e * sigma_e + stationary * stationary).sqrt();
        let mut all = super::super::hist::new_histogram();
        let mut batches = Batches::default();
        let mut x = stationary * normal(rng);
        for _ in 0..intervals {
            let mut interval = SparseHistogram::default();
            for _ in 0..per_interval {
                let v = (mu + x + sigma_e * normal(rng)).exp() as u64;
                all.saturating_record(v);
                super::super::hist::Recording::record_us(&mut interval, v);
            }
            batches.add(Op::BlobGet, Metric::Latency, interval.iter());
            batches.end_interval();
            if phi > 0.0 {
                x = phi * x + sigma_x * normal(rng);
            }
        }
        (all, batches, move |q| (mu + total * z(q)).exp())
    }

    /// The share of `runs` simulated runs whose interval covers the true quantile, and the
    /// median width relative to the quantile.
    fn coverage(seed: u64, phi: f64, q: f64, runs: usize) -> (f64, f64, usize) {
        // Two minutes of 1 s intervals at 200 operations a second.
        let (intervals, per_interval) = (120, 200);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (mut covered, mut counted) = (0, 0);
        let mut widths = Vec::new();
        for _ in 0..runs {
            let (all, batches, truth) = simulate(&mut rng, intervals, per_interval, phi);
            let Some([lo, hi]) = batches.interval(Op::BlobGet, Metric::Latency, q, &all) else {
                continue;
            };
            counted += 1;
            let t = truth(q);
            if lo <= t && t <= hi {
                covered += 1;
            }
            widths.push((hi - lo) / t);
        }
        widths.sort_by(f64::total_cmp);
        let median = widths.get(widths.len() / 2).copied().unwrap_or(f64::NAN);
        (covered as f64 / counted.max(1) as f64, median, counted)
    }

    #[test]
    fn intervals_cover_the_true_percentile_of_independent_samples() {
        for (q, widest) in [(0.5, 0.05), (0.9, 0.08), (0.99, 0.2)] {
            let (share, width, counted) = coverage(7, 0.0, q, 200);
            assert_eq!(counted, 200, "q {q}: every run has an interval");
            assert!(share >= 0.90, "q {q}: covered in {share} of the runs");
            assert!(width < widest, "q {q}: median width {width} of the value");
            eprintln!("independent q {q}: covered {share}, median width {width:.3}");
        }
    }

    #[test]
    fn intervals_cover_the_true_percentile_of_bursty_correlated_samples() {
        // Strongly correlated from second to second: the order-statistic interval alone
        // covers the true p50 in well under half of the runs; sectioning must not.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let (mut order_only, mut runs) = (0, 0);
        for _ in 0..100 {
            let (all, _, truth) = simulate(&mut rng, 120, 200, 0.8);
            let (lo, hi) = order_ranks(all.len(), 0.5).unwrap();
            let n = all.len() as f64;
            let t = truth(0.5);
            let (a, b) = (
                all.value_at_quantile(lo as f64 / n) as f64,
                all.value_at_quantile(hi as f64 / n) as f64,
            );
            runs += 1;
            if a <= t && t <= b {
                order_only += 1;
            }
        }
        assert!(
            order_only * 2 < runs,
            "{order_only} of {runs}: the test data is not bursty"
        );
        // The run's slowness itself is uncertain: over 120 strongly correlated seconds its
        // mean has a standard error of about 0.14 in log latency, so an honest 95% interval
        // spans about 0.55 of the value; absurd would be several times that. The p99 moves
        // with the slowness and with its spread (2.3 normal scores out): its honest interval
        // spans about the value itself. Its exceedances come in a few slow stretches, so a
        // run that saw few of them cannot show its own uncertainty in its tail; the p99's
        // interval is at least the p90's, scaled out (see `interval`); without that floor,
        // 78% of these runs' intervals covered it.
        for (q, widest, established) in [(0.5, 0.8, 190), (0.9, 0.8, 140), (0.99, 1.3, 70)] {
            let (share, width, counted) = coverage(11, 0.8, q, 200);
            // A run whose slow stretches put the upper bound past its largest samples has
            // none (not established), never a made-up one; the p99 of two such minutes
            // often cannot be bounded.
            assert!(
                counted >= established,
                "q {q}: {counted} of 200 runs have an interval"
            );
            // At least ~90%: the data has about 20 independent stretches in two minutes.
            assert!(share >= 0.88, "q {q}: covered in {share} of the runs");
            assert!(width < widest, "q {q}: median width {width} of the value");
            eprintln!("bursty q {q}: covered {share} of {counted}, median width {width:.3}");
        }
    }

    #[test]
    fn too_few_samples_or_batches_give_no_interval() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        // 300 samples: a p99.9 is not estimable, a p99 has no upper rank.
        let (all, batches, _) = simulate(&mut rng, 30, 10, 0.0);
        assert!(!estimable(all.len(), 0.999));
        assert_eq!(
            batches.interval(Op::BlobGet, Metric::Latency, 0.999, &all),
            None
        );
        assert_eq!(
            batches.interval(Op::BlobGet, Metric::Latency, 0.99, &all),
            None
        );
        assert!(batches
            .interval(Op::BlobGet, Metric::Latency, 0.5, &all)
            .is_some());
        // Four intervals: too few batches to judge the run's correlation.
        let (all, batches, _) = simulate(&mut rng, 4, 1000, 0.0);
        assert_eq!(
            batches.interval(Op::BlobGet, Metric::Latency, 0.5, &all),
            None
        );
    }

    #[test]
    fn batches_stay_bounded_and_equal_whatever_the_run_length() {
        let mut batches = Batches::default();
        for i in 0..1000u64 {
            batches.add(Op::BlobGet, Metric::Latency, [(1000 + i, 1)].into_iter());
            batches.add_completed(1);
            batches.end_interval();
        }
        let (closed, per_batch) = batches.shape();
        assert!((MAX_BATCHES / 2..MAX_BATCHES).contains(&closed), "{closed}");
        assert_eq!(per_batch, 32);
        assert!(batches.completed().iter().all(|&c| c == 32));
        assert_eq!(
            batches.estimates(Op::BlobGet, Metric::Latency, 0.5).len(),
            closed
        );
    }

    #[test]
    fn a_closed_batch_reads_back_as_its_histogram_and_merges_as_histograms_add() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(31);
        let mut draw = |n: usize, scale: f64| {
            let mut h = batch_histogram();
            for _ in 0..n {
                let v = (scale * (normal(&mut rng) * 1.5).exp()) as u64;
                h.saturating_record(v.clamp(1, HISTOGRAM_SETTINGS.highest_trackable));
            }
            // The largest value a batch can hold, and a count past the others.
            h.saturating_record_n(HISTOGRAM_SETTINGS.highest_trackable, 3);
            h
        };
        let (a, b) = (draw(5_000, 800.0), draw(3_000, 20_000.0));
        let (ca, cb) = (Closed::of(&a), Closed::of(&b));
        assert_eq!(ca.dense(), a);
        assert_eq!(ca.len, a.len());
        // Far smaller than the dense histogram's counts (13 KB), even spread this wide.
        let dense_bytes = a.distinct_values() * 4;
        assert!(dense_bytes > 13_000, "{dense_bytes}");
        assert!(ca.encoded.len() * 4 < dense_bytes, "{}", ca.encoded.len());
        let mut sum = a.clone();
        sum.add(&b).unwrap();
        assert_eq!(ca.merge(&cb).dense(), sum);
        assert_eq!(cb.merge(&ca).dense(), sum);
        assert_eq!(ca.merge(&Closed::of(&batch_histogram())).dense(), a);
        // A series closes an empty batch as none, and reuses its open histogram.
        let mut series = Series::default();
        series.add([(1_000, 2)].into_iter());
        series.close();
        series.close();
        assert_eq!(series.closed.len(), 2);
        assert_eq!(series.closed[0].as_ref().map(|c| c.len), Some(2));
        assert_eq!(series.closed[1], None);
        assert!(series.open.as_ref().is_some_and(|h| h.is_empty()));
    }

    #[test]
    fn welch_tells_a_shift_from_noise_at_its_stated_rate() {
        // Textbook case: means 20.0 and 22.0, equal spread.
        let a = [19.0, 20.0, 21.0, 20.0, 20.0];
        let b = [21.0, 22.0, 23.0, 22.0, 22.0];
        let w = welch(&a, &b).unwrap();
        assert!((w.difference - 2.0).abs() < 1e-9);
        assert!(w.p_value < 0.01 && w.interval[0] > 0.0, "{w:?}");
        assert!(welch(&a, &a).unwrap().p_value > 0.99);
        assert_eq!(welch(&a[..1], &b), None);
        // Same distribution on both sides: about 5% of the pairs called different.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(17);
        let mut alarms = 0;
        for _ in 0..2_000 {
            let x: Vec<f64> = (0..3).map(|_| normal(&mut rng)).collect();
            let y: Vec<f64> = (0..3).map(|_| normal(&mut rng)).collect();
            if welch(&x, &y).unwrap().p_value < 0.05 {
                alarms += 1;
            }
        }
        assert!(
            (40..=130).contains(&alarms),
            "{alarms} false alarms of 2,000"
        );
    }

    #[test]
    fn a_shift_of_the_detectable_size_is_found_four_times_in_five() {
        // Runs of spread 1 (standard normal), 4 a side: the detectable shift from their
        // spread, applied to fresh runs, is called real about 80% of the time.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(23);
        let mut found = 0;
        let trials = 2_000;
        for _ in 0..trials {
            let x: Vec<f64> = (0..4).map(|_| normal(&mut rng)).collect();
            let y: Vec<f64> = (0..4).map(|_| normal(&mut rng)).collect();
            // The detectable size of runs with the distribution's own spread.
            let shift = welch(&[-1.0, 1.0, -1.0, 1.0], &[-1.0, 1.0, -1.0, 1.0])
                .unwrap()
                .detectable
                * (3.0f64 / 4.0).sqrt();
            let y: Vec<f64> = y.iter().map(|v| v + shift).collect();
            if welch(&x, &y).unwrap().p_value < 0.05 {
                found += 1;
            }
        }
        assert!(
            (1_400..=1_800).contains(&found),
            "{found} of {trials} shifts found"
        );
        // More runs detect less.
        let spread = [-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0];
        let eight = welch(&spread, &spread).unwrap().detectable;
        let four = welch(&spread[..4], &spread[..4]).unwrap().detectable;
        assert!(eight < four, "{eight} {four}");
    }

    #[test]
    fn student_t_and_the_order_ranks_are_the_textbook_ones() {
        assert!((t_quantile(7.0) - 2.3646).abs() < 1e-3);
        assert!((t_quantile(30.0) - 2.0423).abs() < 1e-3);
        // n = 1,000, p99: about the 4th to the 16th largest sample.
        let (lo, hi) = order_ranks(1000, 0.99).unwrap();
        assert!(
            (983..=987).contains(&lo) && (996..=998).contains(&hi),
            "{lo} {hi}"
        );
        assert_eq!(order_ranks(100, 0.99), None);
    }
}
