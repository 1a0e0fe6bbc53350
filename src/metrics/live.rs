//! The live view of a run for Prometheus and Grafana (`--metrics-listen`): counters and
//! histograms in the OpenMetrics text format, fed by the aggregator from the same samples
//! as the HDR histograms (which stay the exact record), never by the requests themselves.
//! Label values come from closed sets (operations, outcomes, status classes, directions, the
//! run's endpoints, the bounded values of `--split-by-header`), so the number of series is
//! bounded.
//!
//! The contract dashboards and alerts rely on (docs/metrics.md):
//! `creb_operations_total{operation,outcome,endpoint}`,
//! `creb_http_requests_total{operation,status,endpoint}`, `creb_bytes_total{direction}`,
//! `creb_in_flight`, `creb_schedule_lag_seconds`, `creb_response_seconds{operation,endpoint}`,
//! `creb_service_seconds{operation,endpoint}`, `creb_run_info{command,mode,seed,shard,cell}`,
//! and with `--split-by-header`, `creb_header_operations_total{operation,outcome,header_value}`
//! and `creb_header_response_seconds{operation,header_value}` (at most 18 values).

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{Op, Outcome, Sample, Spans};

/// Upper bounds of the latency buckets, seconds: 1 ms to 2 min, about three per decade.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 90.0,
    120.0,
];

/// Every metric name the endpoint serves (the Grafana dashboard's test checks against it).
pub const METRIC_NAMES: [&str; 10] = [
    "creb_operations_total",
    "creb_http_requests_total",
    "creb_bytes_total",
    "creb_in_flight",
    "creb_schedule_lag_seconds",
    "creb_response_seconds",
    "creb_service_seconds",
    "creb_header_operations_total",
    "creb_header_response_seconds",
    "creb_run_info",
];

/// Every label name the endpoint's series carry (`le` is the histograms' bucket bound).
pub const LABEL_NAMES: [&str; 12] = [
    "operation",
    "outcome",
    "endpoint",
    "status",
    "direction",
    "le",
    "command",
    "mode",
    "seed",
    "shard",
    "cell",
    "header_value",
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

/// An endpoint as a label value: its `host:port`, shared (no copy per sample); also a
/// `--split-by-header` value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EndpointLabel(Arc<str>);

impl EncodeLabelValue for EndpointLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        encoder.write_str(&self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpOutcome {
    operation: &'static str,
    outcome: OutcomeLabel,
    endpoint: EndpointLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpStatus {
    operation: &'static str,
    status: &'static str,
    endpoint: EndpointLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpLabel {
    operation: &'static str,
    endpoint: EndpointLabel,
}

/// An operation and the value its answer gave `--split-by-header`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpHeaderValue {
    operation: &'static str,
    header_value: EndpointLabel,
}

/// [`OpHeaderValue`] with the outcome.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OpOutcomeHeaderValue {
    operation: &'static str,
    outcome: OutcomeLabel,
    header_value: EndpointLabel,
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
    /// Under `creb-rs run`: the cell (`experiment/registry`, with its round and repetition
    /// when there are several); empty otherwise.
    pub cell: String,
}

impl RunInfoLabels {
    /// A run of `command` in `mode` with `seed` (`-` without one), shard `index` of `count`;
    /// the cell is set by `creb-rs run`.
    pub fn new(command: &str, mode: &str, seed: Option<u64>, index: u32, count: u32) -> Self {
        RunInfoLabels {
            command: command.to_owned(),
            mode: mode.to_owned(),
            seed: seed.map_or_else(|| "-".to_owned(), |s| s.to_string()),
            shard: format!("{index}/{count}"),
            cell: String::new(),
        }
    }
}

/// What an endpoint serves: the metrics of the run going on (under `creb-rs run`, of its
/// current cell; each cell starts from zero, as a restarted process would), or nothing yet.
#[derive(Debug, Default)]
pub struct LiveSlot(std::sync::RwLock<Option<Arc<LiveMetrics>>>);

impl LiveSlot {
    /// A slot serving `metrics`.
    pub fn with(metrics: Arc<LiveMetrics>) -> LiveSlot {
        LiveSlot(std::sync::RwLock::new(Some(metrics)))
    }

    /// Serves `metrics` from now on.
    pub fn install(&self, metrics: Arc<LiveMetrics>) {
        if let Ok(mut current) = self.0.write() {
            *current = Some(metrics);
        }
    }

    /// The OpenMetrics text of what it serves (only the end marker before the first run).
    pub fn encode(&self) -> String {
        match self.0.read().ok().and_then(|m| m.clone()) {
            Some(m) => m.encode(),
            None => "# EOF\n".to_string(),
        }
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metrics of one run.
#[derive(Debug)]
pub struct LiveMetrics {
    registry: Mutex<Registry>,
    operations: Family<OpOutcome, Counter>,
    http_requests: Family<OpStatus, Counter>,
    bytes: Family<Direction, Counter>,
    in_flight: Gauge,
    lag: Histogram,
    response: Family<OpLabel, Histogram, fn() -> Histogram>,
    service: Family<OpLabel, Histogram, fn() -> Histogram>,
    /// `--split-by-header`: operations and latency by the header's value.
    header_operations: Family<OpOutcomeHeaderValue, Counter>,
    header_response: Family<OpHeaderValue, Histogram, fn() -> Histogram>,
    /// The `endpoint` label of each endpoint, by index.
    endpoints: Vec<EndpointLabel>,
    /// The `endpoint` label of samples not sent through one endpoint's client (image
    /// sessions, token fetches) in runs over several: empty, which Prometheus reads as absent.
    no_endpoint: EndpointLabel,
}

impl LiveMetrics {
    /// The metrics of a run described by `info` against `endpoints` (their `host:port`,
    /// in the order of the run's endpoint list).
    #[allow(clippy::too_many_lines)]
    pub fn new(info: RunInfoLabels, endpoints: &[String]) -> LiveMetrics {
        let mut registry = Registry::default();
        let operations = Family::<OpOutcome, Counter>::default();
        let http_requests = Family::<OpStatus, Counter>::default();
        let bytes = Family::<Direction, Counter>::default();
        let in_flight = Gauge::default();
        let lag = latency_histogram();
        let response = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let service = Family::<OpLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let header_operations = Family::<OpOutcomeHeaderValue, Counter>::default();
        let header_response =
            Family::<OpHeaderValue, Histogram, fn() -> Histogram>::new_with_constructor(
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
            "HTTP exchanges made, by operation and status class of the answer (none: no answer)",
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
            "creb_header_operations",
            "Operations finished, by operation, outcome and the value of the --split-by-header header in their answer",
            header_operations.clone(),
        );
        registry.register(
            "creb_header_response_seconds",
            "Latency of successful operations by the value of the --split-by-header header in their answer",
            header_response.clone(),
        );
        registry.register(
            "creb_run_info",
            "The run: command, mode, seed, shard, and its cell under creb-rs run",
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
            header_operations,
            header_response,
            endpoints: endpoints
                .iter()
                .map(|e| EndpointLabel(Arc::from(e.as_str())))
                .collect(),
            no_endpoint: EndpointLabel(Arc::from("")),
        }
    }

    fn endpoint(&self, index: Option<u16>) -> &EndpointLabel {
        match (index, self.endpoints.as_slice()) {
            (Some(i), names) => names.get(usize::from(i)).unwrap_or(&self.no_endpoint),
            (None, [only]) => only,
            (None, _) => &self.no_endpoint,
        }
    }

    /// Counts a finished sample (operations and image sessions alike) whose durations are
    /// `spans`, recorded through the client of endpoint `endpoint` (`None`: not through one
    /// endpoint's client).
    pub fn observe(&self, s: &Sample, spans: &Spans, endpoint: Option<u16>) {
        let operation = s.op.name();
        let endpoint = self.endpoint(endpoint);
        let outcome = OutcomeLabel(match s.outcome {
            Outcome::Ok => None,
            Outcome::Error(kind) => Some(kind),
        });
        self.operations
            .get_or_create(&OpOutcome {
                operation,
                outcome,
                endpoint: endpoint.clone(),
            })
            .inc();
        // As summary.json counts them: a request-level sample (an upload's POST, a redirect
        // hop) is already among the exchanges of its operation; a token fetch is not.
        let exchanges = match s.op.level() {
            super::Level::Operation => s.http,
            super::Level::Request if s.op == Op::TokenFetch => s.http,
            _ => super::HttpStatuses::NONE,
        };
        for (status, n) in exchanges.classes() {
            self.http_requests
                .get_or_create(&OpStatus {
                    operation,
                    status,
                    endpoint: endpoint.clone(),
                })
                .inc_by(u64::from(n));
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
        if let Some(lag) = spans.lag_us {
            self.lag.observe(seconds(lag));
        }
        if s.outcome.is_ok() {
            let labels = OpLabel {
                operation,
                endpoint: endpoint.clone(),
            };
            self.response
                .get_or_create(&labels)
                .observe(seconds(spans.latency_us));
            if s.timing.intended.is_some() {
                self.service
                    .get_or_create(&labels)
                    .observe(seconds(spans.service_us));
            }
        }
    }

    /// Counts a finished sample under the value `value` its answer gave `--split-by-header`
    /// (bounded: [`crate::metrics::split::MAX_VALUES`] values and two more labels).
    pub fn observe_split(&self, s: &Sample, spans: &Spans, value: Arc<str>) {
        let operation = s.op.name();
        let value = EndpointLabel(value);
        let outcome = OutcomeLabel(match s.outcome {
            Outcome::Ok => None,
            Outcome::Error(kind) => Some(kind),
        });
        self.header_operations
            .get_or_create(&OpOutcomeHeaderValue {
                operation,
                outcome,
                header_value: value.clone(),
            })
            .inc();
        if s.outcome.is_ok() {
            self.header_response
                .get_or_create(&OpHeaderValue {
                    operation,
                    header_value: value,
                })
                .observe(seconds(spans.latency_us));
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

/// The live metrics of `creb-rs run`, which its cells feed in turn.
#[derive(Debug, Clone)]
pub struct SharedLive {
    pub slot: std::sync::Arc<LiveSlot>,
    /// The cell running (`creb_run_info`'s `cell` label).
    pub cell: String,
}

/// Microseconds as the seconds the exposition's histograms take.
fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ErrorKind, HttpStatuses, SizeClass, Timing};
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
                ready: None,
                sent: now - Duration::from_millis(20),
                first_byte: None,
                end: now,
            },
            bytes_sent: 5,
            bytes_received: 10,
            http: HttpStatuses::one(Some(if outcome.is_ok() { 200 } else { 404 })),
        }
    }

    #[test]
    fn samples_become_the_documented_series() {
        let m = LiveMetrics::new(
            RunInfoLabels::new("replay", "delay", Some(1), 0, 1),
            &["127.0.0.1:5000".to_string()],
        );
        let get = sample(Op::BlobGet, Outcome::Ok, true);
        m.observe(&get, &Spans::of(&get.timing), None);
        m.observe(&get, &Spans::of(&get.timing), Some(0));
        let missing = sample(Op::BlobGet, Outcome::Error(ErrorKind::Http(404)), true);
        m.observe(&missing, &Spans::of(&missing.timing), None);
        m.observe_split(&get, &Spans::of(&get.timing), Arc::from("HIT"));
        m.set_in_flight(3);
        let text = m.encode();
        for line in [
            r#"creb_header_operations_total{operation="blob_get",outcome="ok",header_value="HIT"} 1"#,
            r#"creb_header_response_seconds_count{operation="blob_get",header_value="HIT"} 1"#,
            r#"creb_operations_total{operation="blob_get",outcome="ok",endpoint="127.0.0.1:5000"} 2"#,
            r#"creb_operations_total{operation="blob_get",outcome="http_404",endpoint="127.0.0.1:5000"} 1"#,
            r#"creb_http_requests_total{operation="blob_get",status="2xx",endpoint="127.0.0.1:5000"} 2"#,
            r#"creb_http_requests_total{operation="blob_get",status="4xx",endpoint="127.0.0.1:5000"} 1"#,
            r#"creb_bytes_total{direction="received"} 30"#,
            "creb_in_flight 3",
            r#"creb_response_seconds_count{operation="blob_get",endpoint="127.0.0.1:5000"} 2"#,
            r#"creb_service_seconds_bucket{le="0.025",operation="blob_get",endpoint="127.0.0.1:5000"} 2"#,
            "creb_schedule_lag_seconds_count 3",
            r#"creb_run_info{command="replay",mode="delay",seed="1",shard="0/1",cell=""} 1"#,
        ] {
            assert!(text.contains(line), "'{line}' not in:\n{text}");
        }
        for name in METRIC_NAMES {
            assert!(text.contains(name), "{name}");
        }
        // Every label served is one LABEL_NAMES lists (the dashboard's test relies on it).
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((_, labels)) = line.split_once('{') else {
                continue;
            };
            for pair in labels.split('}').next().unwrap().split("\",") {
                let name = pair.split('=').next().unwrap();
                assert!(LABEL_NAMES.contains(&name), "{name} in {line}");
            }
        }
    }

    #[test]
    fn several_endpoints_are_labelled_by_name_and_the_rest_left_unlabelled() {
        let m = LiveMetrics::new(
            RunInfoLabels::new("replay", "stress", Some(1), 0, 1),
            &["a:5000".to_string(), "b:5000".to_string()],
        );
        for (s, endpoint) in [
            (sample(Op::BlobGet, Outcome::Ok, false), Some(1)),
            (sample(Op::ImagePull, Outcome::Ok, false), None),
        ] {
            m.observe(&s, &Spans::of(&s.timing), endpoint);
        }
        let text = m.encode();
        for line in [
            r#"creb_operations_total{operation="blob_get",outcome="ok",endpoint="b:5000"} 1"#,
            r#"creb_operations_total{operation="image_pull",outcome="ok",endpoint=""} 1"#,
        ] {
            assert!(text.contains(line), "'{line}' not in:\n{text}");
        }
        assert!(!text.contains("a:5000"), "{text}");
    }
}
