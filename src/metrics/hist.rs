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

/// Latency percentiles in milliseconds, the shape used throughout results.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

fn ms(us: u64) -> f64 {
    (us as f64 / 1000.0 * 1000.0).round() / 1000.0
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        Some(Percentiles {
            mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        })
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
    fn percentiles_in_ms() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::of(&h).unwrap();
        assert!((p.p50 - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() < 1.5, "{p:?}");
        assert!((p.max - 1000.0).abs() < 1.0, "{p:?}");
        assert!(Percentiles::of(&new_histogram()).is_none());
    }
}
