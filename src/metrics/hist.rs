//! The one HdrHistogram configuration every histogram of creb-rs uses.
//!
//! Values are microseconds from 1 µs to 1 hour with 3 significant digits and `u64` counts.
//! A single configuration makes every histogram addable to every other (merging hosts,
//! intervals, size classes) without loss; merge refuses results written with another one.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Parameters of a histogram, recorded in results so merges can check them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSettings {
    /// Unit of recorded values.
    pub unit: &'static str,
    pub lowest_discernible: u64,
    pub highest_trackable: u64,
    pub significant_digits: u8,
}

pub const HISTOGRAM_SETTINGS: HistogramSettings = HistogramSettings {
    unit: "us",
    lowest_discernible: 1,
    highest_trackable: 3_600_000_000,
    significant_digits: 3,
};

/// A new empty histogram with [`HISTOGRAM_SETTINGS`].
pub fn new_histogram() -> Histogram<u64> {
    let s = HISTOGRAM_SETTINGS;
    match Histogram::new_with_bounds(
        s.lowest_discernible,
        s.highest_trackable,
        s.significant_digits,
    ) {
        Ok(h) => h,
        // The constants above are valid bounds; this cannot happen.
        Err(e) => unreachable!("invalid histogram settings: {e}"),
    }
}

/// Whether `h` was built with the standard settings.
pub fn has_standard_settings(h: &Histogram<u64>) -> bool {
    let s = HISTOGRAM_SETTINGS;
    h.low() == s.lowest_discernible
        && h.high() == s.highest_trackable
        && h.sigfig() == s.significant_digits
}

/// Adds `other` into `into` exactly. Both have the standard settings (every histogram here
/// does), so no value can fall outside the range; values of a foreign histogram that would
/// are clamped to the highest trackable value rather than lost.
pub fn add_exact(into: &mut Histogram<u64>, other: &Histogram<u64>) {
    if into.add(other).is_err() {
        for v in other.iter_recorded() {
            let value = v.value_iterated_to().min(into.high());
            let _ = into.record_n(value, v.count_at_value());
        }
    }
}

/// What [`crate::metrics::Stats`] needs of a histogram: the dense HdrHistogram for totals,
/// [`SparseHistogram`] for the short-lived tables of open intervals.
pub trait Recording: std::fmt::Debug + Clone {
    fn empty() -> Self;
    /// Records a value in microseconds, clamped into the standard range.
    fn record_us(&mut self, value: u64);
    /// Forgets every value, keeping memory for reuse.
    fn clear(&mut self);
    fn is_empty(&self) -> bool;
    /// The values as a dense histogram: itself, or materialized into `scratch` (made on
    /// first use and reused, so one dense histogram serves any number of sparse ones).
    fn dense<'a>(&'a self, scratch: &'a mut Option<Histogram<u64>>) -> &'a Histogram<u64>;
}

impl Recording for Histogram<u64> {
    fn empty() -> Self {
        new_histogram()
    }

    fn record_us(&mut self, value: u64) {
        self.saturating_record(value);
    }

    fn clear(&mut self) {
        self.reset();
    }

    fn is_empty(&self) -> bool {
        Histogram::is_empty(self)
    }

    fn dense<'a>(&'a self, _scratch: &'a mut Option<Histogram<u64>>) -> &'a Histogram<u64> {
        self
    }
}

/// A histogram with the standard settings that stores only the buckets it saw.
///
/// A dense histogram with the standard settings holds about 23,500 counters (188 KB) however
/// few values it saw. An interval sees a few hundred distinct buckets per operation, so the
/// open intervals keep their values here and add them into dense histograms when they close.
/// Adding is exact: a value is kept as the lowest value of its bucket, which lands in the
/// same bucket of any histogram with the standard settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparseHistogram {
    counts: crate::fast_hash::FastHashMap<u64, u64>,
    len: u64,
}

/// Distinct buckets a cleared sparse histogram keeps room for; more is given back.
const SPARSE_KEPT_CAPACITY: usize = 4096;

/// The bucket layout of the standard settings, to map values to their buckets.
fn layout() -> &'static Histogram<u64> {
    static LAYOUT: std::sync::OnceLock<Histogram<u64>> = std::sync::OnceLock::new();
    LAYOUT.get_or_init(new_histogram)
}

/// For each bucket index of the standard settings, the value a [`SparseHistogram`] keeps
/// that bucket's count under: read once from the crate's own layout, mapped as
/// [`SparseHistogram::add_dense`] maps the buckets it walks.
fn bucket_values() -> &'static [u64] {
    static VALUES: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    VALUES.get_or_init(|| {
        let layout = layout();
        layout
            .iter_all()
            .map(|v| layout.lowest_equivalent(v.value_iterated_to().min(layout.high())))
            .collect()
    })
}

/// One LEB128 number of a V2 histogram encoding (at most nine bytes, the ninth taken
/// whole), and the bytes it took; `None` if `bytes` ends inside it.
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..8 {
        let byte = *bytes.get(i)?;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    Some((value | u64::from(*bytes.get(8)?) << 56, 9))
}

impl SparseHistogram {
    /// Adds every value into `into` (a histogram with the standard settings).
    pub fn add_to(&self, into: &mut Histogram<u64>) {
        for (&value, &count) in &self.counts {
            into.saturating_record_n(value, count);
        }
    }

    /// The values as (lowest value of the bucket, count) pairs, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts.iter().map(|(&v, &c)| (v, c))
    }

    /// Distinct buckets held.
    pub fn buckets(&self) -> usize {
        self.counts.len()
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds every value of `other`, exactly.
    pub fn add(&mut self, other: &SparseHistogram) {
        for (&value, &count) in &other.counts {
            *self.counts.entry(value).or_default() += count;
        }
        self.len += other.len;
    }

    /// Adds every value of a dense histogram with the standard settings, exactly (each
    /// bucket is kept by its lowest value, which any standard histogram puts back in it).
    pub fn add_dense(&mut self, other: &Histogram<u64>) {
        let layout = layout();
        for v in other.iter_recorded() {
            let value = v.value_iterated_to().min(layout.high());
            *self
                .counts
                .entry(layout.lowest_equivalent(value))
                .or_default() += v.count_at_value();
            self.len += v.count_at_value();
        }
    }

    /// Adds the counts of a V2-encoded histogram with the standard settings, exactly: its
    /// `payload`, the counts by bucket index as zig-zag LEB128 numbers, a run of empty
    /// buckets as one negative number. hdrhistogram's deserializer would make a dense
    /// histogram of it first (188 KB zeroed) and [`SparseHistogram::add_dense`] walk every
    /// bucket of that: reading an interval log was mostly those two (docs/benchmarks.md, "The
    /// hot path", step 55). The header (settings, lengths) is the caller's to check.
    pub fn add_encoded(&mut self, payload: &[u8]) -> Result<(), String> {
        let values = bucket_values();
        let mut index = 0usize;
        let mut rest = payload;
        while !rest.is_empty() {
            let (raw, used) = read_varint(rest).ok_or("its counts end inside a number")?;
            rest = &rest[used..];
            // Zig-zag: the low bit is the sign.
            let n = (raw >> 1) as i64 ^ -((raw & 1) as i64);
            if n < 0 {
                index = usize::try_from(n.unsigned_abs())
                    .ok()
                    .and_then(|run| index.checked_add(run))
                    .ok_or("a run of empty buckets past any histogram's end")?;
                continue;
            }
            if n > 0 {
                let count = n as u64;
                let value = *values
                    .get(index)
                    .ok_or_else(|| format!("a count past the last bucket (index {index})"))?;
                // Every bucket's count is at most the total: checked once, here.
                self.len = self.len.checked_add(count).ok_or("its counts overflow")?;
                *self.counts.entry(value).or_default() += count;
            }
            index = index.saturating_add(1);
        }
        Ok(())
    }

    /// The same values in a dense histogram with the standard settings.
    pub fn to_dense(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        self.add_to(&mut h);
        h
    }
}

impl Recording for SparseHistogram {
    fn empty() -> Self {
        SparseHistogram::default()
    }

    fn dense<'a>(&'a self, scratch: &'a mut Option<Histogram<u64>>) -> &'a Histogram<u64> {
        let h = scratch.get_or_insert_with(new_histogram);
        h.reset();
        self.add_to(h);
        h
    }

    fn record_us(&mut self, value: u64) {
        let layout = layout();
        let value = value.min(layout.high());
        *self
            .counts
            .entry(layout.lowest_equivalent(value))
            .or_default() += 1;
        self.len += 1;
    }

    fn clear(&mut self) {
        self.counts.clear();
        self.counts.shrink_to(SPARSE_KEPT_CAPACITY);
        self.len = 0;
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Latency percentiles in milliseconds, the shape used throughout results; beside each its
/// 95% confidence interval (`null` where it cannot be established; the intervals come
/// from the run's batches, `metrics::uncertainty`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Percentiles {
    pub mean: f64,
    /// `None` (null) where fewer than one sample is expected beyond it: the maximum in
    /// disguise ([`estimable`]).
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: f64,
    #[serde(default)]
    pub p50_ci: Option<[f64; 2]>,
    #[serde(default)]
    pub p90_ci: Option<[f64; 2]>,
    #[serde(default)]
    pub p99_ci: Option<[f64; 2]>,
    #[serde(default)]
    pub p999_ci: Option<[f64; 2]>,
}

fn ms(us: u64) -> f64 {
    (us as f64 / 1000.0 * 1000.0).round() / 1000.0
}

/// Whether `n` samples estimate the `q` quantile: at least one sample is expected beyond it
/// (a p99.9 of 300 samples would be the maximum in disguise).
pub fn estimable(n: u64, q: f64) -> bool {
    n as f64 * (1.0 - q) >= 1.0 - 1e-9
}

/// The `q` quantile of `h` in ms, where its samples estimate it.
fn quantile(h: &Histogram<u64>, q: f64) -> Option<f64> {
    estimable(h.len(), q).then(|| ms(h.value_at_quantile(q)))
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        Some(Percentiles {
            mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
            p50: quantile(h, 0.50),
            p90: quantile(h, 0.90),
            p99: quantile(h, 0.99),
            p999: quantile(h, 0.999),
            max: ms(h.max()),
            ..Percentiles::default()
        })
    }

    /// The intervals of the four percentiles (p50, p90, p99, p99.9), µs, set in
    /// milliseconds.
    pub fn set_intervals(&mut self, intervals: [Option<[f64; 2]>; 4]) {
        let to_ms = |ci: Option<[f64; 2]>| ci.map(|[lo, hi]| [ms(lo as u64), ms(hi.ceil() as u64)]);
        self.p50_ci = to_ms(intervals[0]);
        self.p90_ci = to_ms(intervals[1]);
        self.p99_ci = to_ms(intervals[2]);
        self.p999_ci = to_ms(intervals[3]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_cover_an_hour_in_microseconds() {
        let mut h = new_histogram();
        assert!(has_standard_settings(&h));
        h.record(3_600_000_000).unwrap();
        assert!(h.record(3_600_000_000 * 3).is_err());
        h.saturating_record(u64::MAX);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn dense_to_sparse_and_back_is_exact() {
        let mut dense = new_histogram();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            dense.saturating_record(x % 50_000_000);
        }
        let mut sparse = SparseHistogram::default();
        sparse.add_dense(&dense);
        assert_eq!(sparse.len(), dense.len());
        assert_eq!(sparse.to_dense(), dense);
        let mut twice = sparse.clone();
        twice.add(&sparse);
        let mut doubled = dense.clone();
        add_exact(&mut doubled, &dense);
        assert_eq!(twice.to_dense(), doubled);
    }

    /// Encodes `n` as LEB128 the way V2 encodings do (nine bytes at most).
    fn leb128(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while out.len() < 8 && n >= 0x80 {
            out.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out
    }

    #[test]
    fn encoded_counts_add_as_the_decoded_histogram_does() {
        use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
        assert_eq!(bucket_values().len(), layout().distinct_values());
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for (n, modulus, ends) in [
            (0, 1, false),
            (0, 1, true),
            (3, 2_000, false),
            (5_000, 50_000_000, true),
            (20_000, u64::MAX, true),
        ] {
            let mut dense = new_histogram();
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                dense.saturating_record(x % modulus);
            }
            if ends {
                // The first bucket, the last, and past it (clamped into the last).
                dense.saturating_record_n(0, 3);
                dense.saturating_record(HISTOGRAM_SETTINGS.highest_trackable);
                dense.saturating_record(u64::MAX);
            }
            let mut bytes = Vec::new();
            V2Serializer::new().serialize(&dense, &mut bytes).unwrap();
            let payload = u32::from_be_bytes(bytes[4..8].try_into().unwrap()) as usize;
            let mut encoded = SparseHistogram::default();
            encoded.add_encoded(&bytes[40..40 + payload]).unwrap();
            let back: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
            let mut walked = SparseHistogram::default();
            walked.add_dense(&back);
            assert_eq!(encoded, walked, "{n} values below {modulus}");
            assert_eq!(encoded.to_dense(), dense);
        }
    }

    #[test]
    fn encoded_counts_out_of_bounds_are_errors() {
        let mut h = SparseHistogram::default();
        let err = h.add_encoded(&[0x81]).unwrap_err();
        assert!(err.contains("inside a number"), "{err}");
        // A run of empty buckets as long as the layout, then a count of 1 (zig-zag 2).
        let skip = -(bucket_values().len() as i64);
        let mut bytes = leb128(((skip << 1) ^ (skip >> 63)) as u64);
        bytes.push(2);
        let err = h.add_encoded(&bytes).unwrap_err();
        assert!(err.contains("past the last bucket"), "{err}");
        // Three counts of i64::MAX: their total overflows.
        let max = leb128((i64::MAX as u64) << 1);
        let err = h.add_encoded(&max.repeat(3)).unwrap_err();
        assert!(err.contains("overflow"), "{err}");
        assert_eq!(h.len(), 2 * i64::MAX as u64, "the counts before it stay");
    }

    #[test]
    fn sparse_histograms_add_exactly() {
        let mut sparse = SparseHistogram::empty();
        let mut dense = new_histogram();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Mostly milliseconds, a few huge values and zeroes at the edges.
            let v = match i % 100 {
                0 => 0,
                1 => u64::MAX,
                _ => rng % 5_000_000,
            };
            sparse.record_us(v);
            dense.saturating_record(v);
        }
        let mut added = new_histogram();
        sparse.add_to(&mut added);
        assert_eq!(added.len(), dense.len());
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                added.value_at_quantile(q),
                dense.value_at_quantile(q),
                "q {q}"
            );
        }
        assert_eq!(added.max(), dense.max());
        assert_eq!(added.min(), dense.min());
        assert_eq!(added.mean(), dense.mean());
        assert!(sparse.buckets() < 8_000, "{} buckets", sparse.buckets());
        sparse.clear();
        assert!(sparse.is_empty());
        let mut none = new_histogram();
        sparse.add_to(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn percentiles_in_ms() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::of(&h).unwrap();
        assert!((p.p50.unwrap() - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99.unwrap() - 990.0).abs() < 1.5, "{p:?}");
        assert!((p.max - 1000.0).abs() < 1.0, "{p:?}");
        // 1,000 samples: one expected beyond the p99.9, which is not the maximum.
        assert!(p.p999.unwrap() < p.max, "{p:?}");
        assert!(Percentiles::of(&new_histogram()).is_none());
    }

    #[test]
    fn a_percentile_without_a_sample_beyond_it_is_not_shown() {
        let mut h = new_histogram();
        for v in 1..=300u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::of(&h).unwrap();
        // A p99.9 of 300 samples would be the maximum in disguise.
        assert_eq!(p.p999, None, "{p:?}");
        assert!(p.p99.is_some() && p.p90.is_some() && p.p50.is_some());
        h.reset();
        h.record(7_000).unwrap();
        let one = Percentiles::of(&h).unwrap();
        assert_eq!(one.p50, None, "{one:?}");
        assert!((one.max - 7.0).abs() < 0.01, "{one:?}");
    }
}
