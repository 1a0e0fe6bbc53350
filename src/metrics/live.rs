//! The live view of a run for Prometheus and Grafana (`--metrics-listen`): counters and
//! histograms in the OpenMetrics text format, fed by the aggregator from the same samples
//! as the HDR histograms (which stay the exact record), never by the requests themselves.
//! Label values come from closed sets (operations, outcomes, directions), so the number of
//! series is bounded.
//!
//! The contract dashboards and alerts rely on (docs/metrics.md):
//! `creb_operations_total{operation,outcome}`, `creb_http_requests_total{operation}`,
//! `creb_bytes_total{direction}`, `creb_in_flight`, `creb_schedule_lag_seconds`,
//! `creb_response_seconds{operation}`, `creb_service_seconds{operation}`,
//! `creb_run_info{command,mode,seed,shard}`.

use std::sync::Mutex;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{Op, Outcome, Sample};

/// Upper bounds of the latency buckets, seconds: 1 ms to 2 min, about three per decade.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 90.0,
    120.0,
];

/// Every metric name the endpoint serves (the Grafana dashboard's test checks against it).
pub const METRIC_NAMES: [&str; 8] = [
    "creb_operations_total",
    "creb_http_requests_total",
    "creb_bytes_total",
    "creb_in_flight",
    "creb_schedule_lag_seconds",
    "creb_response_seconds",
    "creb_service_seconds",
    "creb_run_info",
];

/// An outcome as a label value: `ok` or the error kind's key (`http_404`, `timeout`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct OutcomeLabel(Option<super::ErrorKind>);

impl EncodeLabelValue for OutcomeLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        match self.0 {
            None => encoder.write_str("ok"),
            Some(kind) => encoder.write_str(&kind.key()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpOutcome {
    operation: &'static str,
    outcome: OutcomeLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpLabel {
    operation: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Direction {
    direction: &'static str,
}

/// What `creb_run_info` says about the run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RunInfoLabels {
    pub command: String,
    pub mode: String,
    pub seed: String,
    pub shard: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metrics of one run.
#[derive(Debug)]
pub struct LiveMetrics {
    registry: Mutex<Registry>,
    operations: Family<OpOutcome, Counter>,
    http_requests: Family<OpLabel, Counter>,
    bytes: Family<Direction, Counter>,
    in_flight: Gauge,
    lag: Histogram,
    response: Family<OpLabel, Histogram, fn() -> Histogram>,
    service: Family<OpLabel, Histogram, fn() -> Histogram>,
}

impl LiveMetrics {
    pub fn new(info: RunInfoLabels) -> LiveMetrics {
        let mut registry = Registry::default();
        let operations = Family::<OpOutcome, Counter>::default();
        let http_requests = Family::<OpLabel, Counter>::default();
        let bytes = Family::<Direction, Counter>::default();
        let in_flight = Gauge::default();
        let lag = latency_histogram();
        let response = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let service = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let run_info = Family::<RunInfoLabels, Gauge>::default();
        run_info.get_or_create(&info).set(1);
        registry.register(
            "creb_operations",
            "Operations finished, by operation and outcome (ok or the error kind)",
            operations.clone(),
        );
        registry.register(
            "creb_http_requests",
            "HTTP exchanges made, by operation",
            http_requests.clone(),
        );
        registry.register(
            "creb_bytes",
            "Bytes sent and received (bodies)",
            bytes.clone(),
        );
        registry.register(
            "creb_in_flight",
            "Operations offered (due or dispatched) and not yet finished",
            in_flight.clone(),
        );
        registry.register(
            "creb_schedule_lag_seconds",
            "How late operations started against their schedule (delay mode)",
            lag.clone(),
        );
        registry.register(
            "creb_response_seconds",
            "Latency of successful operations: from the intended start in delay mode, else from sending",
            response.clone(),
        );
        registry.register(
            "creb_service_seconds",
            "Service time of successful operations with a schedule: from sending to the end",
            service.clone(),
        );
        registry.register(
            "creb_run_info",
            "The run: command, mode, seed, shard",
            run_info,
        );
        LiveMetrics {
            registry: Mutex::new(registry),
            operations,
            http_requests,
            bytes,
            in_flight,
            lag,
            response,
            service,
        }
    }

    /// Counts a finished sample (operations and image sessions alike).
    pub fn observe(&self, s: &Sample) {
        let operation = s.op.name();
        let outcome = OutcomeLabel(match s.outcome {
            Outcome::Ok => None,
            Outcome::Error(kind) => Some(kind),
        });
        self.operations
            .get_or_create(&OpOutcome { operation, outcome })
            .inc();
        if s.http_requests > 0 {
            self.http_requests
                .get_or_create(&OpLabel { operation })
                .inc_by(u64::from(s.http_requests));
        }
        if s.op.level() == super::Level::Operation {
            self.bytes
                .get_or_create(&Direction { direction: "sent" })
                .inc_by(s.bytes_sent);
            self.bytes
                .get_or_create(&Direction {
                    direction: "received",
                })
                .inc_by(s.bytes_received);
        }
        let t = &s.timing;
        if let Some(intended) = t.intended {
            self.lag
                .observe(t.sent.saturating_duration_since(intended).as_secs_f64());
        }
        if s.outcome.is_ok() {
            let from = t.intended.unwrap_or(t.sent);
            self.response
                .get_or_create(&OpLabel { operation })
                .observe(t.end.saturating_duration_since(from).as_secs_f64());
            if t.intended.is_some() {
                self.service
                    .get_or_create(&OpLabel { operation })
                    .observe(t.end.saturating_duration_since(t.sent).as_secs_f64());
            }
        }
    }

    /// Operations offered and not finished.
    pub fn set_in_flight(&self, n: u64) {
        self.in_flight.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        }
        out
    }
}

/// An operation name as a label, for tests.
pub fn operation_label(op: Op) -> &'static str {
    op.name()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ErrorKind, SizeClass, Timing};
    use std::time::Duration;
    use tokio::time::Instant;

    fn sample(op: Op, outcome: Outcome, intended: bool) -> Sample {
        let now = Instant::now();
        Sample {
            op,
            outcome,
            size_class: SizeClass::of(10),
            timing: Timing {
                intended: intended.then(|| now - Duration::from_millis(30)),
                sent: now - Duration::from_millis(20),
                first_byte: None,
                end: now,
            },
            bytes_sent: 5,
            bytes_received: 10,
            http_requests: 1,
        }
    }

    #[test]
    fn samples_become_the_documented_series() {
        let m = LiveMetrics::new(RunInfoLabels {
            command: "replay".into(),
            mode: "delay".into(),
            seed: "1".into(),
            shard: "0/1".into(),
        });
        m.observe(&sample(Op::BlobGet, Outcome::Ok, true));
        m.observe(&sample(Op::BlobGet, Outcome::Ok, true));
        m.observe(&sample(
            Op::BlobGet,
            Outcome::Error(ErrorKind::Http(404)),
            true,
        ));
        m.set_in_flight(3);
        let text = m.encode();
        for line in [
            r#"creb_operations_total{operation="blob_get",outcome="ok"} 2"#,
            r#"creb_operations_total{operation="blob_get",outcome="http_404"} 1"#,
            r#"creb_http_requests_total{operation="blob_get"} 3"#,
            r#"creb_bytes_total{direction="received"} 30"#,
            "creb_in_flight 3",
            r#"creb_response_seconds_count{operation="blob_get"} 2"#,
            r#"creb_service_seconds_bucket{le="0.025",operation="blob_get"} 2"#,
            "creb_schedule_lag_seconds_count 3",
            r#"creb_run_info{command="replay",mode="delay",seed="1",shard="0/1"} 1"#,
        ] {
            assert!(text.contains(line), "'{line}' not in:\n{text}");
        }
        for name in METRIC_NAMES {
            assert!(text.contains(name), "{name}");
        }
    }
}
