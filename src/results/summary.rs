//! `summary.json`: the versioned result contract (see `docs/results.md` and the committed
//! JSON Schema in `schema/summary.schema.json`). Scripts and CI thresholds read it, so field
//! names never change meaning; `schema_version` bumps on any breaking change.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::attribution::{Attributed, AttributionInfo};
use crate::metrics::hist::Percentiles;
use crate::metrics::{Aggregator, Level, Op, Stats, HISTOGRAM_SETTINGS};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Tool {
    pub fn current() -> Self {
        Tool {
            name: "creb-rs".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// How a trace's records were accounted for: `records = replayed + folded + Σ skipped`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TraceCounts {
    pub records: u64,
    pub replayed: u64,
    pub folded: u64,
    pub skipped: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Totals {
    /// Workload operations (not the sub-requests inside them).
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Every HTTP exchange, including upload sub-requests, redirect hops and token fetches.
    pub http_requests: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub bytes_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSummary {
    pub count: u64,
    pub ok: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency_ms: Option<Percentiles>,
}

/// One operation's numbers. Latencies are of successes only; failures have their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSummary {
    pub count: u64,
    pub ok: u64,
    pub errors: u64,
    /// `bytes_sent + bytes_received`.
    pub bytes: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub requests_per_s: f64,
    pub bytes_per_s: f64,
    /// Intended (or sent) start → end of body, successes only.
    pub latency_ms: Option<Percentiles>,
    /// Send → response headers, successes only.
    pub ttfb_ms: Option<Percentiles>,
    /// Delay mode: send → end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ms: Option<Percentiles>,
    /// Delay mode: intended start → send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_lag_ms: Option<Percentiles>,
    /// Delay mode: starts later than 1 ms, 10 ms, 100 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_starts: Option<LateStarts>,
    /// Failures: start → failure known. Timeouts are censored at the timeout.
    pub error_latency_ms: Option<Percentiles>,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub size_classes: BTreeMap<String, ClassSummary>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateStarts {
    pub over_1ms: u64,
    pub over_10ms: u64,
    pub over_100ms: u64,
}

/// What ended inside `--warmup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmupSummary {
    pub operations: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
}

/// Facts about how well the run kept its schedule and whether the generator held up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    /// The shared start (`--start-at`), RFC 3339.
    pub start_at: Option<String>,
    /// Actual start minus the shared start, ms (clock skew and start-up delay).
    pub start_skew_ms: Option<f64>,
    /// How late a 10 ms sleep woke up during the run (the canary), ms.
    pub canary_wake_ms: Option<Percentiles>,
    /// Process CPU (user + system) during the run, s.
    pub cpu_seconds: Option<f64>,
    /// `cpu_seconds` over (duration × cores).
    pub cpu_share: Option<f64>,
    pub cores: usize,
    /// Share of the run during which the in-flight cap kept an operation waiting.
    pub cap_binding_share: f64,
    pub max_in_flight: usize,
    /// Stress mode with `--gather`: answers gathered per wake-up of the runtime's workers;
    /// absent when the run did not allow it (delay mode, stress mode without `--gather`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gathered: Option<Gathered>,
    /// Stress mode: the event loops that carried manifest GETs (docs/measurement.md);
    /// absent when every operation ran as a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_loops: Option<EventLoops>,
}

/// The event loops of a stress-mode run and the manifest GETs sent on them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLoops {
    pub loops: usize,
    pub manifest_gets: u64,
    /// How long the answers the loops recorded waited to be read, ms: from each one's
    /// arrival (the kernel's receive stamp) to the loop's turn that read it. Not in any
    /// latency; the next request on that connection goes that much later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_wait_ms: Option<Percentiles>,
}

/// What gathering answers per wake-up did in a stress-mode run (docs/measurement.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gathered {
    /// The window's bound, as a share of the mean service time.
    pub share_of_service_time: f64,
    /// The widest window the run used, ms (0: none, the answers came too fast).
    pub widest_window_ms: f64,
    /// An answer timed without the kernel's stamp turned gathering off for the rest of
    /// the run.
    pub turned_off: bool,
}

/// A typed note about the validity of a result, with advice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramInfo {
    pub unit: String,
    pub lowest_discernible: u64,
    pub highest_trackable: u64,
    pub significant_digits: u8,
}

impl HistogramInfo {
    pub fn current() -> Self {
        let s = HISTOGRAM_SETTINGS;
        HistogramInfo {
            unit: s.unit.into(),
            lowest_discernible: s.lowest_discernible,
            highest_trackable: s.highest_trackable,
            significant_digits: s.significant_digits,
        }
    }
}

/// The whole `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub tool: Tool,
    /// `push`, `pull`, `replay`, `merge`.
    pub command: String,
    /// `push`, `pull`, `stress`, `delay`.
    pub mode: String,
    /// `open` or `closed`.
    pub model: String,
    /// In-flight limit (the multiprogramming level of a closed model).
    pub concurrency: u64,
    pub registry: String,
    pub seed: u64,
    pub shard: Shard,
    /// Wall-clock start, RFC 3339 (for people; durations use the monotonic clock).
    pub started_at: String,
    /// Monotonic duration of the measured phase.
    pub duration_s: f64,
    /// `--warmup`: the seconds at the start left out of every number but the trace
    /// accounting and the events (`duration_s` covers the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_s: Option<f64>,
    /// `--warmup`: the workload operations that ended inside it, left out of every number
    /// but counted here, failures by kind (they count toward `--max-errors` too: a warm-up
    /// never hides a failure). Absent without a warm-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<WarmupSummary>,
    pub interrupted: bool,
    pub trace: Option<TraceCounts>,
    pub totals: Totals,
    pub throughput: Throughput,
    pub operations: BTreeMap<String, OpSummary>,
    /// Groups of operations (image pull, image push): intended start → last completion.
    pub sessions: BTreeMap<String, OpSummary>,
    pub errors: BTreeMap<String, u64>,
    pub events: BTreeMap<String, u64>,
    pub warnings: Vec<Warning>,
    /// Replay: schedule and generator health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Checks>,
    pub histograms: HistogramInfo,
    /// The resolved configuration of the run (no secrets).
    pub config: serde_json::Value,
    /// Runs over several endpoints: each endpoint's numbers, keyed by its URL. Every
    /// operation is counted on exactly the endpoint that carried it (or, failing as
    /// `endpoint_down`, the one it was meant for), so the counts add up to the totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<BTreeMap<String, EndpointSummary>>,
    /// Every `--fail-if` and how it came out, in the order given (absent without any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdVerdict>,
    /// `--max-errors`: the failed operations the run tolerated before exiting 1 (absent in
    /// results of commands that do not send requests, and in older ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_errors: Option<MaxErrors>,
    /// `--split-by-header`: every operation also counted by the value its answer gave the
    /// header (absent without the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_by_header: Option<HeaderSplitSummary>,
    /// Whether the run was steady: its warm-up, and what drifted or stalled
    /// (docs/measurement.md). Absent from results of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<crate::metrics::steady::SteadyState>,
    /// The repositories that cost most: the top of each ranking (requests, time spent,
    /// bytes, errors), heaviest in time first (empty where none was named).
    #[serde(default)]
    pub by_repository: Vec<Attributed>,
    /// The same for the trace's clients.
    #[serde(default)]
    pub by_client: Vec<Attributed>,
    /// How the two lists were made and whether they are complete (absent when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<AttributionInfo>,
}

/// `--split-by-header NAME`: each operation's counts and latency by the header's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeaderSplitSummary {
    /// The header, lower case.
    pub header: String,
    /// Value → operation → its numbers. `(none)`: answers without the header; `(other)`:
    /// values after the first 16 distinct ones.
    pub values: BTreeMap<String, BTreeMap<String, ClassSummary>>,
    /// What a cache saved, when the header is a cache's status (a value says `HIT` or
    /// `MISS`): per operation, and over the workload's operations (`all`), the share of
    /// operations and of bytes its hits answered (`metrics::split::is_hit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hit_ratio: BTreeMap<String, HitRatio>,
}

/// The share of an operation's answers that came from a cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HitRatio {
    /// Operations answered (every value, `(none)` included), and those that were hits.
    pub count: u64,
    pub hits: u64,
    /// `hits / count`.
    pub requests: f64,
    /// Bytes of the hits over the bytes of all.
    pub bytes: f64,
}

impl HitRatio {
    fn of(values: &BTreeMap<String, BTreeMap<String, ClassSummary>>, op: Option<&str>) -> HitRatio {
        let (mut count, mut hits, mut bytes, mut hit_bytes) = (0, 0, 0, 0);
        for (value, ops) in values {
            let hit = crate::metrics::split::is_hit(value);
            let counted = |name: &str| match op {
                Some(o) => o == name,
                // Over all: the workload's operations (not the exchanges inside them).
                None => crate::metrics::Op::from_name(name)
                    .is_some_and(|o| o.level() == crate::metrics::Level::Operation),
            };
            for (_, c) in ops.iter().filter(|(name, _)| counted(name)) {
                count += c.count;
                bytes += c.bytes;
                if hit {
                    hits += c.count;
                    hit_bytes += c.bytes;
                }
            }
        }
        let share = |part: u64, all: u64| {
            if all == 0 {
                0.0
            } else {
                (part as f64 / all as f64 * 1e4).round() / 1e4
            }
        };
        HitRatio {
            count,
            hits,
            requests: share(hits, count),
            bytes: share(hit_bytes, bytes),
        }
    }
}

/// The hit ratios of a split whose header is a cache's status; empty for another header.
fn hit_ratios(
    values: &BTreeMap<String, BTreeMap<String, ClassSummary>>,
) -> BTreeMap<String, HitRatio> {
    let cache_status = values
        .keys()
        .any(|v| crate::metrics::split::is_hit(v) || v.to_ascii_uppercase().contains("MISS"));
    if !cache_status {
        return BTreeMap::new();
    }
    let ops: std::collections::BTreeSet<&str> = values
        .values()
        .flat_map(|ops| ops.keys())
        .map(String::as_str)
        .collect();
    let mut out: BTreeMap<String, HitRatio> = ops
        .into_iter()
        .map(|op| (op.to_owned(), HitRatio::of(values, Some(op))))
        .collect();
    out.insert("all".to_owned(), HitRatio::of(values, None));
    out
}

impl HeaderSplitSummary {
    /// The split an aggregator holds, if the run had one.
    pub fn of(aggregator: &Aggregator) -> Option<HeaderSplitSummary> {
        let (header, tables) = aggregator.split_tables()?;
        Some(HeaderSplitSummary::from_tables(header, tables))
    }

    /// The split of `header` whose values have these tables (a run's, or merged ones).
    pub fn from_tables(
        header: &str,
        tables: Vec<(String, &crate::metrics::StatsTable)>,
    ) -> HeaderSplitSummary {
        let values = tables
            .into_iter()
            .map(|(value, table)| {
                let ops = table
                    .ops()
                    .into_iter()
                    .filter_map(|op| Some((op.name().to_owned(), table.op_total(op)?)))
                    .map(|(name, s)| (name, class_summary(&s)))
                    .collect();
                (value, ops)
            })
            .collect();
        HeaderSplitSummary {
            header: header.to_owned(),
            hit_ratio: hit_ratios(&values),
            values,
        }
    }
}

/// Sets the confidence interval beside every percentile of every operation's latencies,
/// from the run's batches and the operation's histograms (all size classes).
fn with_intervals(operations: &mut BTreeMap<String, OpSummary>, aggregator: &Aggregator) {
    use crate::metrics::uncertainty::{Metric, QUANTILES};
    for op in aggregator.table().ops() {
        let (Some(summary), Some(stats)) = (
            operations.get_mut(op.name()),
            aggregator.table().op_total(op),
        ) else {
            continue;
        };
        let fields = [
            (Metric::Latency, &mut summary.latency_ms),
            (Metric::Ttfb, &mut summary.ttfb_ms),
            (Metric::Service, &mut summary.service_ms),
            (Metric::ScheduleLag, &mut summary.schedule_lag_ms),
            (Metric::ErrorLatency, &mut summary.error_latency_ms),
        ];
        for (metric, field) in fields {
            let (Some(p), Some(h)) = (field.as_mut(), metric.of(&stats)) else {
                continue;
            };
            let batches = aggregator.batches();
            p.set_intervals(QUANTILES.map(|q| batches.interval(op, metric, q, h)));
        }
    }
}

fn class_summary(s: &Stats) -> ClassSummary {
    ClassSummary {
        count: s.count,
        ok: s.ok,
        errors: s.errors,
        bytes: s.bytes_sent + s.bytes_received,
        latency_ms: Percentiles::of(&s.latency),
    }
}

/// One endpoint of a run over several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointSummary {
    /// Position in the `--registry` list.
    pub index: usize,
    /// Workload operations carried by this endpoint, as in `totals`.
    pub totals: Totals,
    /// Same shape as the run's `operations`.
    pub operations: BTreeMap<String, OpSummary>,
    /// Failed workload operations by kind.
    pub errors: BTreeMap<String, u64>,
    /// Down/up changes, in order.
    pub transitions: Vec<crate::route::health::Transition>,
}

impl EndpointSummary {
    /// The numbers of endpoint `index` from its table (see `Aggregator::endpoints`).
    pub fn build(
        index: usize,
        table: Option<&crate::metrics::StatsTable>,
        duration: Duration,
        transitions: Vec<crate::route::health::Transition>,
    ) -> EndpointSummary {
        let TableSummary {
            totals,
            operations,
            errors,
            ..
        } = table
            .map(|t| summarize_table(t, duration))
            .unwrap_or_default();
        EndpointSummary {
            index,
            totals,
            operations,
            errors,
            transitions,
        }
    }

    /// The operation this endpoint carried most among those with latencies: the one whose
    /// percentiles stand for the endpoint (percentiles never mix operations).
    pub fn busiest_op(&self) -> Option<(&str, &OpSummary)> {
        self.operations
            .iter()
            .filter(|(_, o)| o.latency_ms.is_some())
            .max_by_key(|(_, o)| o.count)
            .map(|(name, o)| (name.as_str(), o))
    }

    /// The `endpoints` block of a run over the endpoints `names`, in order: each one's
    /// numbers from the aggregator, with its down/up changes when the run tracked health.
    pub fn of_each(
        names: &[String],
        aggregator: &Aggregator,
        duration: Duration,
        mut transitions: Vec<Vec<crate::route::health::Transition>>,
    ) -> BTreeMap<String, EndpointSummary> {
        transitions.resize_with(names.len(), Vec::new);
        names
            .iter()
            .zip(transitions)
            .enumerate()
            .map(|(i, (name, t))| {
                let summary = EndpointSummary::build(i, aggregator.endpoint(i), duration, t);
                (name.clone(), summary)
            })
            .collect()
    }
}

/// What a table adds up to: workload totals, per-operation and per-session summaries, and
/// failed workload operations by kind. Shared by the run's summary and each endpoint's.
#[derive(Default)]
struct TableSummary {
    totals: Totals,
    operations: BTreeMap<String, OpSummary>,
    sessions: BTreeMap<String, OpSummary>,
    errors: BTreeMap<String, u64>,
}

fn summarize_table(table: &crate::metrics::StatsTable, duration: Duration) -> TableSummary {
    let mut out = TableSummary::default();
    for op in table.ops() {
        let Some(stats) = table.op_total(op) else {
            continue;
        };
        let classes = table
            .classes_of(op)
            .map(|(c, s)| (c.name().to_owned(), s))
            .collect();
        let summary = op_summary(&stats, classes, duration);
        let totals = &mut out.totals;
        match op.level() {
            Level::Operation => {
                totals.requests += stats.count;
                totals.ok += stats.ok;
                totals.errors += stats.errors;
                totals.bytes_sent += stats.bytes_sent;
                totals.bytes_received += stats.bytes_received;
                totals.http_requests += stats.http_requests;
                for (kind, n) in &stats.errors_by_kind {
                    *out.errors.entry(kind.key()).or_default() += n;
                }
                out.operations.insert(op.name().to_owned(), summary);
            }
            Level::Request => {
                if op == Op::TokenFetch {
                    totals.http_requests += stats.http_requests;
                }
                out.operations.insert(op.name().to_owned(), summary);
            }
            Level::Session => {
                out.sessions.insert(op.name().to_owned(), summary);
            }
        }
    }
    out
}

/// Facts about a run that the measurements do not carry.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub command: String,
    pub mode: String,
    pub model: String,
    pub concurrency: u64,
    pub registry: String,
    pub seed: u64,
    pub shard: Shard,
    pub started_at: SystemTime,
    pub duration: Duration,
    pub interrupted: bool,
    pub trace: Option<TraceCounts>,
    pub warnings: Vec<Warning>,
    pub checks: Option<Checks>,
    pub config: super::config::RunConfig,
}

fn per_second(n: u64, duration: Duration) -> f64 {
    let secs = duration.as_secs_f64();
    if secs > 0.0 {
        ((n as f64 / secs) * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

fn op_summary(stats: &Stats, classes: Vec<(String, &Stats)>, duration: Duration) -> OpSummary {
    let late = stats.schedule_lag.as_ref().map(|_| LateStarts {
        over_1ms: stats.late_starts[0],
        over_10ms: stats.late_starts[1],
        over_100ms: stats.late_starts[2],
    });
    OpSummary {
        count: stats.count,
        ok: stats.ok,
        errors: stats.errors,
        bytes: stats.bytes_sent + stats.bytes_received,
        bytes_sent: stats.bytes_sent,
        bytes_received: stats.bytes_received,
        requests_per_s: per_second(stats.count, duration),
        bytes_per_s: per_second(stats.bytes_sent + stats.bytes_received, duration),
        latency_ms: Percentiles::of(&stats.latency),
        ttfb_ms: stats.ttfb.as_ref().and_then(Percentiles::of),
        service_ms: stats.service.as_ref().and_then(Percentiles::of),
        schedule_lag_ms: stats.schedule_lag.as_ref().and_then(Percentiles::of),
        late_starts: late,
        error_latency_ms: stats.error_latency.as_ref().and_then(Percentiles::of),
        errors_by_kind: stats
            .errors_by_kind
            .iter()
            .map(|(k, v)| (k.key(), *v))
            .collect(),
        size_classes: classes
            .into_iter()
            .map(|(name, s)| (name, class_summary(s)))
            .collect(),
    }
}

impl Summary {
    /// Builds the summary of a finished (or interrupted) run.
    #[allow(clippy::too_many_lines)]
    pub fn build(info: RunInfo, aggregator: &Aggregator) -> Summary {
        // `--warmup`: what it left out is not in the numbers, nor in the time they cover.
        let warmup = aggregator.warmup();
        let measured = info.duration.saturating_sub(warmup);
        let TableSummary {
            totals,
            mut operations,
            sessions,
            errors,
        } = summarize_table(
            aggregator.table(),
            info.duration.saturating_sub(aggregator.warmup()),
        );
        with_intervals(&mut operations, aggregator);
        let steady = crate::metrics::steady::judge(aggregator.batches(), info.model == "closed");
        let mut warnings = info.warnings;
        if steady.steady == Some(false) {
            let moved: Vec<String> = steady.drift.iter().map(|d| d.describe()).collect();
            warnings.push(Warning {
                kind: "unsteady".into(),
                message: format!(
                    "the run was not steady: {}; its percentiles mix what changed (judge a \
                     steady stretch: --warmup, or a longer or shorter run)",
                    moved.join("; ")
                ),
            });
        }
        let throughput = Throughput {
            requests_per_s: per_second(totals.requests, measured),
            bytes_per_s: per_second(totals.bytes_sent + totals.bytes_received, measured),
        };
        let (by_repository, by_client, attribution) = super::attribution::of(aggregator);
        Summary {
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            command: info.command,
            mode: info.mode,
            model: info.model,
            concurrency: info.concurrency,
            registry: info.registry,
            seed: info.seed,
            shard: info.shard,
            started_at: humantime::format_rfc3339_millis(info.started_at).to_string(),
            duration_s: (measured.as_secs_f64() * 1e6).round() / 1e6,
            warmup_s: (!warmup.is_zero()).then_some(warmup.as_secs_f64()),
            warmup: (!warmup.is_zero()).then(|| {
                let w = aggregator.in_warmup();
                WarmupSummary {
                    operations: w.operations,
                    errors: w.errors,
                    errors_by_kind: w
                        .errors_by_kind
                        .iter()
                        .map(|(k, n)| (k.key(), *n))
                        .collect(),
                }
            }),
            interrupted: info.interrupted,
            trace: info.trace,
            totals,
            throughput,
            operations,
            sessions,
            errors,
            events: aggregator.event_counts(),
            warnings,
            checks: info.checks,
            histograms: HistogramInfo::current(),
            config: info.config.to_value(),
            endpoints: None,
            thresholds: Vec::new(),
            max_errors: None,
            split_by_header: HeaderSplitSummary::of(aggregator),
            steady_state: Some(steady),
            by_repository,
            by_client,
            attribution,
        }
    }

    /// The model as people read it: `stress (closed, in-flight=8)`, `delay (open)`.
    pub fn model_label(&self) -> String {
        match self.model.as_str() {
            "closed" => format!("{} (closed, in-flight={})", self.mode, self.concurrency),
            other => format!("{} ({other})", self.mode),
        }
    }
}
/// The verdict of one `--fail-if`, as `summary.json` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdVerdict {
    /// The expression as given.
    pub expression: String,
    /// What was measured (ms for latencies, a share for error rates), absent when nothing
    /// was.
    pub value: Option<f64>,
    /// The measured value with its unit, for people.
    pub measured: Option<String>,
    /// `held` (the run fails), `clear`, `no_data` (not checked), or `undecided` (relative
    /// to a baseline, a percentile neither run can tell from noise: not a failure unless
    /// `--strict`).
    pub verdict: String,
    /// A threshold relative to a baseline run (`--baseline`): what the baseline measured,
    /// the limit it gave, and both runs' intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineVerdict>,
}

/// The baseline side of a threshold's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineVerdict {
    /// The same metric in the baseline run.
    pub value: Option<f64>,
    /// The baseline's value times the factor.
    pub limit: Option<f64>,
    /// This run's 95% interval of the figure, where it has one.
    pub interval: Option<[f64; 2]>,
    /// The baseline's.
    pub baseline_interval: Option<[f64; 2]>,
    /// Why the verdict is `undecided` (a percentile without an interval in either run),
    /// and what would decide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undecided: Option<String>,
}

impl ThresholdVerdict {
    pub fn held(&self) -> bool {
        self.verdict == "held"
    }
}
/// `--max-errors`: how many failed operations a run tolerates before it exits 1, as a
/// count (`5`) or a share of its operations (`1%`). The default, 0, tolerates none.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum MaxErrors {
    Count(u64),
    /// A share of the run's operations, in percent (0–100).
    Percent(f64),
}

impl Default for MaxErrors {
    fn default() -> Self {
        MaxErrors::Count(0)
    }
}

impl std::str::FromStr for MaxErrors {
    type Err = String;

    fn from_str(s: &str) -> Result<MaxErrors, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let share: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a share (e.g. 1%)"))?;
            if !(0.0..=100.0).contains(&share) {
                return Err(format!("'{s}' is not between 0% and 100%"));
            }
            return Ok(MaxErrors::Percent(share));
        }
        crate::units::parse_count(s)
            .map(MaxErrors::Count)
            .map_err(|_| format!("'{s}' is neither a count (5) nor a share (1%)"))
    }
}

impl std::fmt::Display for MaxErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxErrors::Count(n) => write!(f, "{n}"),
            MaxErrors::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl From<MaxErrors> for String {
    fn from(m: MaxErrors) -> String {
        m.to_string()
    }
}

impl TryFrom<String> for MaxErrors {
    type Error = String;

    fn try_from(s: String) -> Result<MaxErrors, String> {
        s.parse()
    }
}

impl MaxErrors {
    /// Whether `errors` failed operations of `operations` are more than tolerated.
    pub fn exceeded(self, errors: u64, operations: u64) -> bool {
        match self {
            MaxErrors::Count(n) => errors > n,
            MaxErrors::Percent(p) => errors as f64 * 100.0 > p * operations as f64,
        }
    }
}
