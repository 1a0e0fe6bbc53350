//! `registry-metrics.json`: what a registry's own Prometheus endpoint (`--registry-metrics`)
//! counted during a run, beside creb-rs's own count, for the report.

use serde::{Deserialize, Serialize};

use crate::metrics::exposition::{self, Series};

/// The file in a result directory.
pub const REGISTRY_METRICS_JSON: &str = "registry-metrics.json";

/// What one scrape of a registry's endpoint said, reduced to the headline counters.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct RegistryPoint {
    /// Seconds since the run started.
    pub at_s: f64,
    /// The registry's request count, cumulative.
    pub requests: Option<f64>,
    /// The registry's request duration histogram: sum (seconds) and count, cumulative.
    pub duration_sum_s: Option<f64>,
    pub duration_count: Option<f64>,
}

/// One registry endpoint's part of `registry-metrics.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RegistryMetricsRecord {
    pub url: String,
    /// The registry's count of HTTP requests during the run, when it exports one.
    pub registry_requests: Option<f64>,
    /// creb-rs's count of the HTTP exchanges it made, for comparison.
    pub creb_http_requests: u64,
    /// The registry's mean request duration during the run (its own histogram), seconds.
    pub registry_mean_duration_s: Option<f64>,
    /// Why the endpoint could not be read, if it could not.
    pub error: Option<String>,
    /// What the registry's counters grew by in each interval between scrapes.
    pub intervals: Vec<RegistryInterval>,
    /// Every cumulative series that changed, by how much.
    pub delta: Series,
}

/// What the registry counted between two scrapes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RegistryInterval {
    /// The interval, seconds since the run started.
    pub from_s: f64,
    pub to_s: f64,
    pub requests: Option<f64>,
    pub mean_duration_s: Option<f64>,
}

pub fn point(series: &Series, at_s: f64) -> RegistryPoint {
    let (duration_sum_s, duration_count) = match exposition::duration(series) {
        Some((sum, count)) => (Some(sum), Some(count)),
        None => (None, None),
    };
    RegistryPoint {
        at_s,
        requests: exposition::requests(series),
        duration_sum_s,
        duration_count,
    }
}

fn grew(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(exposition::growth(before.unwrap_or(0.0), after?))
}

pub fn mean(sum: Option<f64>, count: Option<f64>) -> Option<f64> {
    match (sum, count) {
        (Some(s), Some(c)) if c > 0.0 => Some(s / c),
        _ => None,
    }
}

/// The intervals between successive points.
pub fn intervals(points: &[RegistryPoint]) -> Vec<RegistryInterval> {
    points
        .windows(2)
        .map(|w| RegistryInterval {
            from_s: w[0].at_s,
            to_s: w[1].at_s,
            requests: grew(w[0].requests, w[1].requests),
            mean_duration_s: mean(
                grew(w[0].duration_sum_s, w[1].duration_sum_s),
                grew(w[0].duration_count, w[1].duration_count),
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_what_the_counters_grew_by_between_scrapes() {
        let p = |at_s, requests, sum, count| RegistryPoint {
            at_s,
            requests: Some(requests),
            duration_sum_s: Some(sum),
            duration_count: Some(count),
        };
        let points = [
            p(0.0, 10.0, 1.0, 10.0),
            p(10.0, 30.0, 3.0, 30.0),
            // A restart: counting from 0 again.
            p(20.0, 5.0, 1.0, 5.0),
        ];
        assert_eq!(
            intervals(&points),
            vec![
                RegistryInterval {
                    from_s: 0.0,
                    to_s: 10.0,
                    requests: Some(20.0),
                    mean_duration_s: Some(0.1),
                },
                RegistryInterval {
                    from_s: 10.0,
                    to_s: 20.0,
                    requests: Some(5.0),
                    mean_duration_s: Some(0.2),
                },
            ]
        );
    }
}
