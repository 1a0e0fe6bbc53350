//! Recording measurements: one [`Sample`] per finished exchange, sent over a bounded channel
//! to a single [`Aggregator`] that owns every histogram (no locks on the hot path) and cuts
//! the run into intervals (see [`aggregator`]).
//!
//! Clock: all instants are `tokio::time::Instant` (monotonic; tests can pause it). For an
//! operation with an intended start (delay mode), *latency* runs from the intended start to
//! the end of the body, *service time* from the send to the end, *schedule lag* from the
//! intended start to the send. Without an intended start (stress mode, push, pull) latency
//! is the service time. The end is always after the whole body was read (and verified).
//!
//! Memory: per (operation, size class) one [`Stats`] for the run whose dense histograms are
//! allocated on first use, and sparse ones for the open intervals that hold only the buckets
//! they saw; nothing grows with the number of requests.

pub mod aggregator;
pub mod attribution;
pub mod breakdown;
mod error_log;
pub mod exposition;
pub mod hist;
pub mod interval;
pub mod live;
pub mod op;
pub mod recorder;
mod sessions;
pub mod spawn;
pub mod split;
pub mod steady;
pub mod uncertainty;

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

pub use aggregator::Aggregator;
pub use breakdown::KeyCounters;
pub use error_log::ErrorLog;
pub use hist::{new_histogram, HistogramSettings, Recording, SparseHistogram, HISTOGRAM_SETTINGS};
pub use interval::{
    AggregatorConfig, Interval, IntervalCounters, IntervalSink, Scheduled, WarmupCounts,
};
pub use op::{ErrorKind, Event, Level, Op, SizeClass};
pub(crate) use recorder::Recorded;
pub use recorder::{Applied, Recorder, SessionMsg};
pub use spawn::{AggregatorBuilder, AggregatorHandle};

/// Success or the kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error(ErrorKind),
}

impl Outcome {
    pub fn is_ok(self) -> bool {
        matches!(self, Outcome::Ok)
    }

    /// The failure's kind, `None` for a success.
    pub fn error(self) -> Option<ErrorKind> {
        match self {
            Outcome::Ok => None,
            Outcome::Error(kind) => Some(kind),
        }
    }
}

/// The instants of one exchange or operation, on the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the plan wanted it to start (delay mode only).
    pub intended: Option<Instant>,
    /// When it could start, if later than `intended`: a manifest PUT's uploads ended then
    /// (its session's dependency). Schedule lag runs from here; latency from `intended`.
    pub ready: Option<Instant>,
    /// When the first request of it was handed to the transport.
    pub sent: Instant,
    /// When the response headers of the (last) exchange arrived.
    pub first_byte: Option<Instant>,
    /// When the whole response body was read, or the failure was known.
    pub end: Instant,
}

impl Timing {
    pub fn start(intended: Option<Instant>) -> Self {
        let now = Instant::now();
        Timing {
            intended,
            ready: None,
            sent: now,
            first_byte: None,
            end: now,
        }
    }

    pub fn finish(mut self) -> Self {
        self.end = Instant::now();
        self
    }

    /// Intended start (if any) to end: the headline number.
    pub fn latency(&self) -> Duration {
        self.end
            .saturating_duration_since(self.intended.unwrap_or(self.sent))
    }

    pub fn service(&self) -> Duration {
        self.end.saturating_duration_since(self.sent)
    }

    /// From when it could start (its intended instant, or its dependencies' end if later)
    /// to when it was sent: the schedule slipping, never the wait for its own session.
    pub fn schedule_lag(&self) -> Option<Duration> {
        self.intended.map(|i| {
            let from = self.ready.map_or(i, |r| r.max(i));
            self.sent.saturating_duration_since(from)
        })
    }

    pub fn ttfb(&self) -> Option<Duration> {
        self.first_byte
            .map(|f| f.saturating_duration_since(self.sent))
    }
}

/// A sample's durations, µs, taken from its instants once for every figure it goes into
/// (a sample counts in its interval, its endpoint's, its split's, its attribution's and the
/// live metrics').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spans {
    /// [`Timing::latency`].
    pub latency_us: u64,
    /// [`Timing::service`]: the latency itself when nothing was intended.
    pub service_us: u64,
    /// [`Timing::schedule_lag`].
    pub lag_us: Option<u64>,
    /// [`Timing::ttfb`].
    pub ttfb_us: Option<u64>,
}

impl Spans {
    // Inlined into each caller: a stress sample's spans are two subtractions, less than
    // the call.
    #[inline]
    pub fn of(t: &Timing) -> Spans {
        let latency_us = micros(t.latency());
        Spans {
            latency_us,
            service_us: match t.intended {
                Some(_) => micros(t.service()),
                None => latency_us,
            },
            lag_us: t.schedule_lag().map(micros),
            ttfb_us: t.ttfb().map(micros),
        }
    }
}

/// One finished exchange or operation. Plain data, no heap.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub op: Op,
    pub outcome: Outcome,
    pub size_class: SizeClass,
    pub timing: Timing,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// HTTP exchanges this sample stands for (an upload session counts all of its requests),
    /// by the status class of their answers.
    pub http: HttpStatuses,
}

impl Sample {
    /// A session over several requests (an image push or pull), from `sent` to now; its
    /// requests are counted in their own samples, so it carries no HTTP exchange.
    pub fn session(
        op: Op,
        outcome: Outcome,
        sent: Instant,
        bytes_sent: u64,
        bytes_received: u64,
    ) -> Sample {
        Sample {
            op,
            outcome,
            size_class: SizeClass::of(bytes_sent.max(bytes_received)),
            timing: Timing {
                intended: None,
                ready: None,
                sent,
                first_byte: None,
                end: Instant::now(),
            },
            bytes_sent,
            bytes_received,
            http: HttpStatuses::NONE,
        }
    }

    /// An operation that ended without an answer of its own: not sent (its endpoint was
    /// down), or cancelled when a stop's grace period ran out. Timed from `sent` to now.
    pub fn unanswered(op: Op, kind: ErrorKind, intended: Option<Instant>, sent: Instant) -> Sample {
        Sample {
            op,
            outcome: Outcome::Error(kind),
            size_class: SizeClass::Under1MiB,
            timing: Timing {
                intended,
                ready: None,
                sent,
                first_byte: None,
                end: Instant::now(),
            },
            bytes_sent: 0,
            bytes_received: 0,
            http: HttpStatuses::NONE,
        }
    }
}

/// HTTP exchanges by the status class of their answers: `1xx` … `5xx`, or none (no answer:
/// a transport error). Plain data, so a [`Sample`] stays `Copy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStatuses([u16; 6]);

impl HttpStatuses {
    /// No exchange.
    pub const NONE: HttpStatuses = HttpStatuses([0; 6]);
    /// The label of each class, by index.
    pub const CLASSES: [&'static str; 6] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx"];

    /// One exchange answered with `status` (`None`: no answer).
    pub fn one(status: Option<u16>) -> HttpStatuses {
        let mut s = HttpStatuses::NONE;
        s.note(status);
        s
    }

    /// Counts one more exchange answered with `status` (`None`: no answer).
    pub fn note(&mut self, status: Option<u16>) {
        let class = status.map_or(0, |code| usize::from((code / 100).clamp(1, 5)));
        self.0[class] = self.0[class].saturating_add(1);
    }

    /// Adds the exchanges of `other`.
    pub fn add(&mut self, other: HttpStatuses) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    /// All exchanges.
    pub fn total(&self) -> u32 {
        self.0.iter().map(|&n| u32::from(n)).sum()
    }

    /// The classes seen, with their counts.
    pub fn classes(&self) -> impl Iterator<Item = (&'static str, u16)> + '_ {
        Self::CLASSES
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(label, n)| (*label, n))
    }
}

/// Counters and histograms for one (operation, size class) over some period. Totals use
/// dense HdrHistograms; open intervals use [`SparseHistogram`]s (`Stats<SparseHistogram>`).
#[derive(Debug, Clone)]
pub struct Stats<H = Histogram<u64>> {
    /// What adds by plain sums: counts, bytes, failures by kind, late starts.
    pub counts: Counts<ErrorKind>,
    /// Successes: intended (or sent) → end, µs.
    pub latency: H,
    /// Successes with an intended start: sent → end, µs.
    pub service: Option<H>,
    /// Every operation with an intended start: intended → sent, µs.
    pub schedule_lag: Option<H>,
    /// Successes: sent → response headers, µs.
    pub ttfb: Option<H>,
    /// Failures: intended (or sent) → failure known, µs. Timeouts are censored here.
    pub error_latency: Option<H>,
}

impl<H> std::ops::Deref for Stats<H> {
    type Target = Counts<ErrorKind>;

    fn deref(&self) -> &Counts<ErrorKind> {
        &self.counts
    }
}

impl<H> std::ops::DerefMut for Stats<H> {
    fn deref_mut(&mut self) -> &mut Counts<ErrorKind> {
        &mut self.counts
    }
}

/// What adds by plain sums in one (operation, size class) cell: the one rule by which the
/// counts of intervals, hosts and endpoints add up. `K` names a failure kind: an
/// [`ErrorKind`] while measuring, its name (`ErrorKind::key`) in `counters.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts<K: Ord> {
    pub count: u64,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<K, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub http_requests: u64,
    /// Starts later than 1 ms, 10 ms and 100 ms after their intended instant.
    pub late_starts: [u64; 3],
}

impl<K: Ord> Default for Counts<K> {
    fn default() -> Self {
        Counts {
            count: 0,
            ok: 0,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            bytes_sent: 0,
            bytes_received: 0,
            http_requests: 0,
            late_starts: [0; 3],
        }
    }
}

impl<K: Ord + Clone> Counts<K> {
    /// Adds `other` in.
    pub fn add(&mut self, other: &Counts<K>) {
        self.count += other.count;
        self.ok += other.ok;
        self.errors += other.errors;
        for (k, v) in &other.errors_by_kind {
            *self.errors_by_kind.entry(k.clone()).or_default() += v;
        }
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.http_requests += other.http_requests;
        for i in 0..3 {
            self.late_starts[i] += other.late_starts[i];
        }
    }

    /// The same counts with every failure kind renamed by `f` (kinds that `f` maps to one
    /// name add up).
    pub fn map_kinds<J: Ord>(&self, mut f: impl FnMut(&K) -> Option<J>) -> Counts<J> {
        let mut errors_by_kind = BTreeMap::new();
        for (k, v) in &self.errors_by_kind {
            if let Some(j) = f(k) {
                *errors_by_kind.entry(j).or_default() += v;
            }
        }
        Counts {
            count: self.count,
            ok: self.ok,
            errors: self.errors,
            errors_by_kind,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            http_requests: self.http_requests,
            late_starts: self.late_starts,
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn record_into<H: Recording>(slot: &mut Option<H>, value: u64) {
    slot.get_or_insert_with(H::empty).record_us(value);
}

fn add_into(slot: &mut Option<Histogram<u64>>, other: &Option<Histogram<u64>>) {
    if let Some(o) = other {
        match slot {
            Some(h) => hist::add_exact(h, o),
            None => *slot = Some(o.clone()),
        }
    }
}

impl<H: Recording> Default for Stats<H> {
    fn default() -> Self {
        Stats {
            counts: Counts::default(),
            latency: H::empty(),
            service: None,
            schedule_lag: None,
            ttfb: None,
            error_latency: None,
        }
    }
}

impl<H: Recording> Stats<H> {
    pub fn record(&mut self, s: &Sample) {
        self.record_spans(s, &Spans::of(&s.timing));
    }

    /// Records `s`, whose durations are `spans`.
    pub fn record_spans(&mut self, s: &Sample, spans: &Spans) {
        self.count += 1;
        self.bytes_sent += s.bytes_sent;
        self.bytes_received += s.bytes_received;
        self.http_requests += u64::from(s.http.total());
        if let Some(lag_us) = spans.lag_us {
            record_into(&mut self.schedule_lag, lag_us);
            for (i, bound) in [1_000, 10_000, 100_000].into_iter().enumerate() {
                if lag_us > bound {
                    self.late_starts[i] += 1;
                }
            }
        }
        let latency = spans.latency_us;
        match s.outcome {
            Outcome::Ok => {
                self.ok += 1;
                self.latency.record_us(latency);
                if s.timing.intended.is_some() {
                    record_into(&mut self.service, spans.service_us);
                }
                if let Some(t) = spans.ttfb_us {
                    record_into(&mut self.ttfb, t);
                }
            }
            Outcome::Error(kind) => {
                self.errors += 1;
                *self.errors_by_kind.entry(kind).or_default() += 1;
                record_into(&mut self.error_latency, latency);
            }
        }
    }

    /// Zeroes everything, keeping the histograms' memory for reuse.
    pub fn reset(&mut self) {
        // The map keeps its allocation; the rest are plain numbers.
        let mut errors_by_kind = std::mem::take(&mut self.counts.errors_by_kind);
        errors_by_kind.clear();
        self.counts = Counts {
            errors_by_kind,
            ..Counts::default()
        };
        self.latency.clear();
        for h in [
            &mut self.service,
            &mut self.schedule_lag,
            &mut self.ttfb,
            &mut self.error_latency,
        ]
        .into_iter()
        .flatten()
        {
            h.clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

fn add_sparse_into(slot: &mut Option<Histogram<u64>>, other: &Option<SparseHistogram>) {
    if let Some(o) = other {
        o.add_to(slot.get_or_insert_with(new_histogram));
    }
}

impl Stats<SparseHistogram> {
    /// Adds everything into the dense `into`, exactly.
    pub fn add_to(&self, into: &mut Stats) {
        into.add_counters(self);
        self.latency.add_to(&mut into.latency);
        add_sparse_into(&mut into.service, &self.service);
        add_sparse_into(&mut into.schedule_lag, &self.schedule_lag);
        add_sparse_into(&mut into.ttfb, &self.ttfb);
        add_sparse_into(&mut into.error_latency, &self.error_latency);
    }
}

impl Stats {
    fn add_counters<H>(&mut self, other: &Stats<H>) {
        self.counts.add(&other.counts);
    }

    /// Adds `other` exactly (histogram counts add; nothing is averaged).
    pub fn add(&mut self, other: &Stats) {
        self.add_counters(other);
        hist::add_exact(&mut self.latency, &other.latency);
        add_into(&mut self.service, &other.service);
        add_into(&mut self.schedule_lag, &other.schedule_lag);
        add_into(&mut self.ttfb, &other.ttfb);
        add_into(&mut self.error_latency, &other.error_latency);
    }
}

/// Cells a [`StatsTable`] can have: every operation in every size class.
const CELLS: usize = Op::ALL.len() * SizeClass::COUNT;

// A cell's place is kept in a byte (plus one, 0 for none).
const _: () = assert!(CELLS < u8::MAX as usize);

/// Where (`op`, `class`)'s cell is in [`StatsTable::at`]: operations in their order, each
/// with its size classes in theirs, the order of the pairs themselves.
fn cell_key(op: Op, class: SizeClass) -> usize {
    op as usize * SizeClass::COUNT + class as usize
}

/// Stats for every (operation, size class) that occurred.
///
/// A cell is found with one array load, as every sample's is in every table it counts in
/// (its interval's, its endpoint's, its split's), and the cells are walked in (operation,
/// size class) order.
#[derive(Debug, Clone)]
pub struct StatsTable<H = Histogram<u64>> {
    /// For each (operation, size class), in the order of [`cell_key`], where its cell is in
    /// `cells`, plus one; 0 where it has none.
    at: [u8; CELLS],
    /// The cells, in the order they were made.
    cells: Vec<((Op, SizeClass), Stats<H>)>,
}

impl<H> Default for StatsTable<H> {
    fn default() -> Self {
        StatsTable {
            at: [0; CELLS],
            cells: Vec::new(),
        }
    }
}

impl<H> StatsTable<H> {
    /// The cell of (`op`, `class`), made empty if it has none.
    fn entry(&mut self, op: Op, class: SizeClass) -> &mut Stats<H>
    where
        Stats<H>: Default,
    {
        let key = cell_key(op, class);
        let at = match self.at[key] {
            0 => {
                self.cells.push(((op, class), Stats::default()));
                // At most CELLS cells, so the place fits its byte (asserted above).
                self.at[key] = self.cells.len() as u8;
                self.cells.len() - 1
            }
            n => usize::from(n) - 1,
        };
        &mut self.cells[at].1
    }

    /// Every cell, empty or not, in (operation, size class) order.
    fn all_cells(&self) -> impl Iterator<Item = (&(Op, SizeClass), &Stats<H>)> {
        self.at.iter().filter(|&&at| at != 0).map(|&at| {
            let (key, stats) = &self.cells[usize::from(at) - 1];
            (key, stats)
        })
    }
}

impl<H: Recording> StatsTable<H> {
    pub fn record(&mut self, s: &Sample) {
        self.record_spans(s, &Spans::of(&s.timing));
    }

    /// Records `s`, whose durations are `spans`.
    pub fn record_spans(&mut self, s: &Sample, spans: &Spans) {
        self.entry(s.op, s.size_class).record_spans(s, spans);
    }

    /// Zeroes every cell, keeping memory for the next interval.
    pub fn reset(&mut self) {
        for (_, stats) in &mut self.cells {
            stats.reset();
        }
    }

    /// Cells that saw at least one sample, in (operation, size class) order.
    pub fn cells(&self) -> impl Iterator<Item = (&(Op, SizeClass), &Stats<H>)> {
        self.all_cells().filter(|(_, s)| !s.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        self.cells.iter().all(|(_, s)| s.is_empty())
    }
}

impl StatsTable<SparseHistogram> {
    /// Adds every cell into the dense `into`, exactly.
    pub fn add_to(&self, into: &mut StatsTable) {
        for (key, stats) in self.cells() {
            stats.add_to(into.entry(key.0, key.1));
        }
    }
}

impl StatsTable {
    pub fn add(&mut self, other: &StatsTable) {
        for (key, stats) in other.cells() {
            self.entry(key.0, key.1).add(stats);
        }
    }

    pub fn insert(&mut self, op: Op, class: SizeClass, stats: Stats) {
        *self.entry(op, class) = stats;
    }

    /// All size classes of one operation added together.
    pub fn op_total(&self, op: Op) -> Option<Stats> {
        let mut found: Option<Stats> = None;
        for ((o, _), stats) in self.cells() {
            if *o == op {
                match &mut found {
                    Some(f) => f.add(stats),
                    None => found = Some(stats.clone()),
                }
            }
        }
        found
    }

    pub fn ops(&self) -> Vec<Op> {
        let mut ops: Vec<Op> = self.cells().map(|((o, _), _)| *o).collect();
        ops.dedup();
        ops
    }

    pub fn classes_of(&self, op: Op) -> impl Iterator<Item = (SizeClass, &Stats)> {
        self.cells()
            .filter(move |((o, _), _)| *o == op)
            .map(|((_, c), s)| (*c, s))
    }

    /// A cell, to fill in from stored results.
    pub fn cell_mut(&mut self, op: Op, class: SizeClass) -> &mut Stats {
        self.entry(op, class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(op: Op, outcome: Outcome, intended_ago_ms: Option<u64>, service_ms: u64) -> Sample {
        let end = Instant::now();
        let sent = end - Duration::from_millis(service_ms);
        Sample {
            op,
            outcome,
            size_class: SizeClass::Under1MiB,
            timing: Timing {
                intended: intended_ago_ms.map(|ms| sent - Duration::from_millis(ms)),
                ready: None,
                sent,
                first_byte: Some(sent + Duration::from_millis(1)),
                end,
            },
            bytes_sent: 0,
            bytes_received: 100,
            http: HttpStatuses::one(Some(200)),
        }
    }

    #[test]
    fn errors_never_enter_success_latency() {
        let mut stats: Stats = Stats::default();
        stats.record(&sample(Op::BlobGet, Outcome::Ok, None, 10));
        stats.record(&sample(
            Op::BlobGet,
            Outcome::Error(ErrorKind::Timeout),
            None,
            5000,
        ));
        assert_eq!(stats.count, 2);
        assert_eq!(stats.ok, 1);
        assert_eq!(stats.latency.len(), 1);
        assert!(stats.latency.max() < 11_000);
        assert_eq!(stats.error_latency.as_ref().unwrap().len(), 1);
        assert_eq!(stats.errors_by_kind[&ErrorKind::Timeout], 1);
    }

    #[test]
    fn delay_mode_splits_latency_service_and_lag() {
        let mut stats: Stats = Stats::default();
        stats.record(&sample(Op::BlobGet, Outcome::Ok, Some(50), 10));
        let lat = stats.latency.max();
        let svc = stats.service.as_ref().unwrap().max();
        let lag = stats.schedule_lag.as_ref().unwrap().max();
        assert!((59_000..=61_000).contains(&lat), "{lat}");
        assert!((9_900..=10_100).contains(&svc), "{svc}");
        assert!((49_900..=50_100).contains(&lag), "{lag}");
        assert_eq!(stats.late_starts, [1, 1, 0]);
    }

    #[test]
    fn a_samples_spans_are_its_timings_durations() {
        // Delay mode: due 50 ms ago, ready 4 ms before it was sent, first byte after 3 ms.
        let mut put = sample(Op::ManifestPut, Outcome::Ok, Some(50), 10);
        put.timing.ready = Some(put.timing.sent - Duration::from_millis(4));
        put.timing.first_byte = Some(put.timing.sent + Duration::from_millis(3));
        // Stress mode: nothing intended, so the service time is the latency.
        let get = sample(Op::BlobGet, Outcome::Ok, None, 7);
        for t in [put.timing, get.timing] {
            let spans = Spans::of(&t);
            assert_eq!(spans.latency_us, micros(t.latency()));
            assert_eq!(spans.service_us, micros(t.service()));
            assert_eq!(spans.lag_us, t.schedule_lag().map(micros));
            assert_eq!(spans.ttfb_us, t.ttfb().map(micros));
        }
        // Recorded with its spans or without, a sample makes the same figures.
        let (mut a, mut b): (Stats, Stats) = (Stats::default(), Stats::default());
        a.record(&put);
        b.record_spans(&put, &Spans::of(&put.timing));
        assert_eq!(a.counts, b.counts);
        assert_eq!(a.latency, b.latency);
        assert_eq!(a.service, b.service);
        assert_eq!(a.schedule_lag, b.schedule_lag);
        assert_eq!(a.ttfb, b.ttfb);
    }

    #[test]
    fn a_wait_for_dependencies_is_latency_not_schedule_lag() {
        // A manifest PUT due 50 ms ago whose uploads ended 4 ms before it was sent.
        let mut put = sample(Op::ManifestPut, Outcome::Ok, Some(50), 10);
        put.timing.ready = Some(put.timing.sent - Duration::from_millis(4));
        let mut stats: Stats = Stats::default();
        stats.record(&put);
        let lat = stats.latency.max();
        let lag = stats.schedule_lag.as_ref().unwrap().max();
        assert!(
            (59_000..=61_000).contains(&lat),
            "from the intended instant: {lat}"
        );
        assert!(
            (3_900..=4_100).contains(&lag),
            "from when it could start: {lag}"
        );
        assert_eq!(stats.late_starts, [1, 0, 0], "late by the one rule");
        // Ready before its intended instant: the lag runs from the intended one.
        put.timing.ready = Some(put.timing.sent - Duration::from_millis(80));
        assert_eq!(put.timing.schedule_lag(), Some(Duration::from_millis(50)));
    }

    #[test]
    fn add_is_exact() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        let mut both = Stats::default();
        for i in 0..50 {
            let s = sample(Op::ManifestGet, Outcome::Ok, Some(i), i * 3);
            if i % 2 == 0 {
                a.record(&s)
            } else {
                b.record(&s)
            }
            both.record(&s);
        }
        a.add(&b);
        assert_eq!(a.latency, both.latency);
        assert_eq!(a.service, both.service);
        assert_eq!(a.count, both.count);
    }

    #[test]
    fn a_table_walks_its_cells_in_operation_then_size_class_order() {
        // Every cell, recorded in a shuffled order (a deterministic walk through all of
        // them), with as many samples as its place in the order, plus one.
        let keys: Vec<(Op, SizeClass)> = Op::ALL
            .iter()
            .flat_map(|&op| SizeClass::ALL.map(|class| (op, class)))
            .collect();
        assert_eq!(keys.len(), CELLS);
        let mut table: StatsTable<SparseHistogram> = StatsTable::default();
        for i in 0..CELLS {
            // 37 is coprime with the 115 cells: every cell once.
            let at = i * 37 % CELLS;
            let (op, class) = keys[at];
            for _ in 0..=at {
                let mut s = sample(op, Outcome::Ok, None, 1);
                s.size_class = class;
                table.record(&s);
            }
        }
        let walked: Vec<((Op, SizeClass), u64)> =
            table.cells().map(|(key, s)| (*key, s.count)).collect();
        let expected: Vec<((Op, SizeClass), u64)> =
            (0..CELLS).map(|at| (keys[at], at as u64 + 1)).collect();
        assert_eq!(walked, expected);
        // Emptied cells are kept for reuse but no longer walked; a filled one is again.
        table.reset();
        assert!(table.is_empty());
        assert_eq!(table.cells().count(), 0);
        table.record(&sample(Op::Referrers, Outcome::Ok, None, 1));
        let walked: Vec<(Op, SizeClass)> = table.cells().map(|(key, _)| *key).collect();
        assert_eq!(walked, [(Op::Referrers, SizeClass::Under1MiB)]);
        // Into a dense table: the same cells in the same order.
        let mut dense = StatsTable::default();
        table.add_to(&mut dense);
        dense.insert(Op::Ping, SizeClass::Over1GiB, Stats::default());
        dense.cell_mut(Op::Ping, SizeClass::Under1MiB).count = 3;
        let walked: Vec<(Op, SizeClass)> = dense.cells().map(|(key, _)| *key).collect();
        assert_eq!(
            walked,
            [
                (Op::Ping, SizeClass::Under1MiB),
                (Op::Referrers, SizeClass::Under1MiB)
            ]
        );
    }

    #[tokio::test]
    async fn sessions_end_when_closed_and_every_member_ended() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        for (id, start) in [(1, 0), (1, 5), (2, 0)] {
            recorder
                .session(SessionMsg::Started {
                    id,
                    start: at(start),
                })
                .await;
        }
        recorder
            .session(SessionMsg::Ended {
                id: 1,
                end: at(20),
                error: None,
                bytes: 10,
                applied: None,
            })
            .await;
        recorder.session(SessionMsg::Closed { id: 1 }).await;
        recorder.session(SessionMsg::Closed { id: 2 }).await;
        recorder
            .session(SessionMsg::Ended {
                id: 1,
                end: at(50),
                error: Some(ErrorKind::Timeout),
                bytes: 5,
                applied: None,
            })
            .await;
        let agg = handle.finish().await;
        let pulls = agg.table().op_total(Op::ImagePull).unwrap();
        assert_eq!(
            (pulls.count, pulls.errors, pulls.bytes_received),
            (1, 1, 15)
        );
        let lat = pulls.error_latency.unwrap().max();
        assert!((49_000..=51_000).contains(&lat), "{lat}");
    }

    /// A member's sample that names its session ends it as a member: at the sample's end,
    /// failed as it failed, its bytes counted only if it succeeded.
    #[tokio::test]
    async fn a_member_s_own_sample_ends_it_in_its_session() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let first = sample(Op::ManifestGet, Outcome::Ok, None, 5);
        let start = first.timing.sent - Duration::from_millis(1);
        recorder.offered(start, Some(7), None).await;
        recorder.offered(start, Some(7), None).await;
        recorder.record_member(first, None, None, Some(7)).await;
        recorder.session(SessionMsg::Closed { id: 7 }).await;
        let mut failed = sample(Op::BlobGet, Outcome::Error(ErrorKind::Timeout), None, 30);
        failed.bytes_received = 40;
        failed.timing.end = first.timing.end + Duration::from_millis(30);
        recorder.record_member(failed, None, None, Some(7)).await;
        let agg = handle.finish().await;
        let table = agg.table();
        let pulls = table.op_total(Op::ImagePull).unwrap();
        assert_eq!(
            (pulls.count, pulls.errors, pulls.bytes_received),
            (1, 1, 100),
            "one pull, failed, the partial body not counted"
        );
        let lat = pulls.error_latency.unwrap().max();
        assert!(
            (35_500..=36_500).contains(&lat),
            "from the start to the last end: {lat}"
        );
        assert_eq!(table.op_total(Op::ManifestGet).unwrap().count, 1);
        assert_eq!(table.op_total(Op::BlobGet).unwrap().errors, 1);
    }

    /// An operation's offer that names a session it closes closes it: the closed pull is
    /// recorded (its members ended), the pull the operation starts stays open.
    #[tokio::test]
    async fn an_offer_closes_the_session_it_names() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let first = sample(Op::ManifestGet, Outcome::Ok, None, 5);
        let start = first.timing.sent;
        recorder.offered(start, Some(1), None).await;
        recorder.record_member(first, None, None, Some(1)).await;
        let later = first.timing.end + Duration::from_millis(10);
        // Pull 2 starts and closes pull 1 in one message.
        recorder.offered(later, Some(2), Some(1)).await;
        let agg = handle.finish().await;
        let pulls = agg.table().op_total(Op::ImagePull).unwrap();
        assert_eq!((pulls.count, pulls.errors), (1, 0), "pull 1 only");
        let lat = pulls.latency.max();
        assert!((4_500..=5_500).contains(&lat), "pull 1's own span: {lat}");
        assert_eq!(agg.table().op_total(Op::ManifestGet).unwrap().count, 1);
    }

    /// A sample that carries the offer of the operation started after it (stress mode's
    /// loops) counts as the two messages would: the sample first, ending its member, then
    /// the offer, starting pull 2 and closing pull 1.
    #[tokio::test]
    async fn a_sample_with_the_next_offer_counts_as_both() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let first = sample(Op::ManifestGet, Outcome::Ok, None, 5);
        recorder.offered(first.timing.sent, Some(1), None).await;
        let later = first.timing.end + Duration::from_millis(10);
        let recorded = recorder.recorded(first, None, None, Some(1));
        assert!(recorder
            .offered_now(later, Some(2), Some(1), Some(recorded))
            .is_none());
        let second = Sample {
            timing: Timing {
                sent: later,
                first_byte: None,
                end: later + Duration::from_millis(3),
                ..first.timing
            },
            ..first
        };
        let recorded = recorder.recorded(second, None, None, Some(2));
        assert!(recorder.recorded_now(recorded).is_none());
        recorder.session(SessionMsg::Closed { id: 2 }).await;
        let agg = handle.finish().await;
        assert_eq!(agg.offered_counted(), 2);
        let table = agg.table();
        assert_eq!(table.op_total(Op::ManifestGet).unwrap().count, 2);
        let pulls = table.op_total(Op::ImagePull).unwrap();
        assert_eq!(
            (pulls.count, pulls.errors),
            (2, 0),
            "both pulls, each closed"
        );
        let lat = pulls.latency.max();
        assert!((4_500..=5_500).contains(&lat), "pull 1's own span: {lat}");
    }

    /// A session whose layers were unpacked is ready at its last layer applied (after its
    /// last byte), failed by an unpack's failure, its bytes the tars'; a session with no
    /// layer unpacked has no `image_ready`.
    #[tokio::test]
    async fn a_session_with_layers_applied_is_ready_at_the_last() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let applied = |ms, error, uncompressed| Applied {
            at: at(ms),
            error,
            uncompressed,
        };
        for (id, members) in [(1, 3), (2, 2), (3, 1)] {
            for _ in 0..members {
                let start = at(0);
                recorder.session(SessionMsg::Started { id, start }).await;
            }
        }
        let ends = [
            (1, 5, None),
            (1, 20, Some(applied(70, None, 300))),
            (1, 30, Some(applied(45, None, 200))),
            (2, 10, Some(applied(15, Some(ErrorKind::DiffIdMismatch), 0))),
            (2, 12, None),
            (3, 8, None),
        ];
        for (id, end, applied) in ends {
            let ended = SessionMsg::Ended {
                id,
                end: at(end),
                error: None,
                bytes: 100,
                applied,
            };
            recorder.session(ended).await;
        }
        for id in 1..=3 {
            recorder.session(SessionMsg::Closed { id }).await;
        }
        let agg = handle.finish().await;
        let pulls = agg.table().op_total(Op::ImagePull).unwrap();
        assert_eq!((pulls.count, pulls.errors), (3, 0));
        let ready = agg.table().op_total(Op::ImageReady).unwrap();
        assert_eq!(
            (ready.count, ready.errors, ready.bytes_received),
            (2, 1, 500)
        );
        let ok = ready.latency.max();
        assert!((69_000..=71_000).contains(&ok), "{ok}");
        let failed = ready.error_latency.as_ref().unwrap().max();
        assert!((14_000..=16_000).contains(&failed), "{failed}");
    }

    #[tokio::test]
    async fn aggregator_counts_everything_sent_before_finish() {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        for _ in 0..1000 {
            recorder
                .record(sample(Op::BlobHead, Outcome::Ok, None, 1))
                .await;
        }
        let agg = handle.finish().await;
        assert_eq!(agg.table().op_total(Op::BlobHead).unwrap().count, 1000);
    }
}
