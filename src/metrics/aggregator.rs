//! The single owner of every measurement of a run.
//!
//! Workers send `Msg`s through a bounded channel; one aggregator, on its own blocking
//! thread (so file writes never stall the async runtime), records them. Time is cut into
//! intervals aligned to the run's anchor (the shared start): interval *k* covers
//! `[anchor + k·I, anchor + (k+1)·I)`, and a sample belongs to the interval in which it
//! *ended*. Intervals are kept open one interval longer than their end (stragglers still in
//! the channel find their place), then flushed to the [`IntervalSink`] — the result
//! directory's interval log and timeline — and added into the run's totals. The totals are
//! therefore exactly the sum of the intervals, and a crash loses at most the open intervals.

use crate::fast_hash::FastHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::attribution::{Attribution, Who};
use super::split::{HeaderSplit, ValueCounters};
use super::{
    ErrorKind, Event, HttpStatuses, Level, Op, Outcome, Sample, SizeClass, SparseHistogram,
    StatsTable, Timing,
};

/// What flows to the aggregator.
#[derive(Debug, Clone)]
pub(crate) enum Msg {
    Sample(Recorded),
    /// Endpoint `.0` exists (sent when its recorder is made, before any of its samples), so
    /// every interval has a row for it.
    Endpoint(u16),
    Event(Event),
    Session(SessionMsg),
    /// An operation was due (delay mode: its intended instant) or dispatched (stress).
    Offered(Instant),
    /// The interval clock ticked at this instant (taken on the async side, the clock the
    /// samples use).
    Tick(Instant),
    /// Flush everything and stop.
    Stop,
}

/// A sample as recorded: through which endpoint's client (runs over several endpoints), the
/// `--split-by-header` label its answer gave ([`super::split::HeaderSplit::label`]), and
/// whom its operation was for (attribution).
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub sample: Sample,
    pub endpoint: Option<u16>,
    pub label: Option<u8>,
    pub who: Option<Who>,
}

impl Recorded {
    fn plain(sample: Sample) -> Recorded {
        Recorded {
            sample,
            endpoint: None,
            label: None,
            who: None,
        }
    }
}

/// Progress of an image session whose members are separate operations (an image pull in
/// a trace replay). The aggregator turns a closed session whose members all ended into one
/// `image_pull` sample, from the earliest member start to the last end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMsg {
    /// A member of session `id` starts; `start` is its intended (or actual) start.
    Started { id: u64, start: Instant },
    /// A member ended.
    Ended {
        id: u64,
        end: Instant,
        error: Option<ErrorKind>,
        bytes: u64,
    },
    /// No further member will start.
    Closed { id: u64 },
}

#[derive(Debug)]
struct OpenSession {
    start: Instant,
    end: Instant,
    pending: u32,
    error: Option<ErrorKind>,
    bytes: u64,
    closed: bool,
}

/// A cheap, cloneable handle that sends measurements to the aggregator.
#[derive(Debug, Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    /// Runs over several endpoints: the endpoint whose client records here.
    endpoint: Option<u16>,
    /// `--split-by-header`: the header whose value labels each sample.
    split: Option<Arc<HeaderSplit>>,
}

impl Recorder {
    /// Sends a sample; waits only if the aggregator is a full channel behind.
    pub async fn record(&self, sample: Sample) {
        self.record_as(sample, None, None).await;
    }

    /// A sample with the label its answer gave `--split-by-header` (ignored without one)
    /// and whom its operation was for.
    pub async fn record_as(&self, sample: Sample, label: Option<u8>, who: Option<Who>) {
        let recorded = Recorded {
            sample,
            endpoint: self.endpoint,
            label: label.filter(|_| self.split.is_some()),
            who,
        };
        // The aggregator outlives every worker; a send error can only happen after it
        // finished, when nothing is reported any more.
        let _ = self.tx.send(Msg::Sample(recorded)).await;
    }

    /// `--split-by-header`: the header whose value labels the samples, if any.
    pub fn split(&self) -> Option<&HeaderSplit> {
        self.split.as_deref()
    }

    /// The same aggregator, with every sample also counted for endpoint `index`
    /// ([`Aggregator::endpoints`]).
    pub fn for_endpoint(&self, index: usize) -> Recorder {
        let endpoint = u16::try_from(index).unwrap_or(u16::MAX);
        // Made before the run starts, when the channel is empty: a full channel (never at
        // that point) only costs the endpoint its rows in intervals before its first sample.
        let _ = self.tx.try_send(Msg::Endpoint(endpoint));
        Recorder {
            tx: self.tx.clone(),
            endpoint: Some(endpoint),
            split: self.split.clone(),
        }
    }

    /// A recorder whose measurements go nowhere (health probes, which are not workload).
    pub fn discard() -> Recorder {
        let (tx, _) = mpsc::channel(1);
        Recorder {
            tx,
            endpoint: None,
            split: None,
        }
    }

    /// Counts an event.
    pub async fn event(&self, event: Event) {
        let _ = self.tx.send(Msg::Event(event)).await;
    }

    /// Reports session progress.
    pub async fn session(&self, msg: SessionMsg) {
        let _ = self.tx.send(Msg::Session(msg)).await;
    }

    /// An operation was due at `at` (the offered load of the timeline).
    pub async fn offered(&self, at: Instant) {
        let _ = self.tx.send(Msg::Offered(at)).await;
    }
}

/// Counters of one interval besides the per-operation statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntervalCounters {
    /// Operations due (or dispatched) in the interval.
    pub offered: u64,
    /// Workload operations that completed in the interval.
    pub completed: u64,
    /// Operations offered but not completed by the interval's flush.
    pub in_flight: u64,
}

/// Workload operations that ended inside the warm-up: how many, and their failures by
/// kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WarmupCounts {
    pub operations: u64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<ErrorKind, u64>,
}

/// Workload operations scheduled in the measured part of a run, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scheduled {
    pub ok: u64,
    pub failed: u64,
}

/// One endpoint's workload operations completed in an interval (runs over several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    pub completed: u64,
    pub ok: u64,
    pub errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl EndpointCounters {
    /// Adds `other` in (hosts of one interval merged).
    pub fn add(&mut self, other: &EndpointCounters) {
        self.completed += other.completed;
        self.ok += other.ok;
        self.errors += other.errors;
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
    }
}

/// Offset of interval `index`'s start from the anchor.
fn start_of(c: AggregatorConfig, index: u64) -> Duration {
    c.interval * u32::try_from(index).unwrap_or(u32::MAX)
}

/// One finished interval, as handed to the sink.
#[derive(Debug)]
pub struct Interval<'a> {
    pub index: u64,
    /// Offset of the interval's start from the anchor.
    pub start: Duration,
    pub length: Duration,
    /// The interval's values, sparse (an interval sees few distinct values); sinks make
    /// one series at a time dense where they need to.
    pub table: &'a StatsTable<SparseHistogram>,
    pub counters: IntervalCounters,
    /// Per endpoint (index as in the endpoint list); empty with a single endpoint.
    pub endpoints: &'a [EndpointCounters],
    /// `--split-by-header`: the workload operations of each header value that answered
    /// any in the interval (empty without the flag).
    pub splits: &'a [(Arc<str>, ValueCounters)],
}

/// Where finished intervals go (the result directory's interval log and timeline).
pub trait IntervalSink: Send {
    fn interval(&mut self, interval: &Interval<'_>) -> std::io::Result<()>;
    /// Every interval was written; make it durable.
    fn finish(&mut self) -> std::io::Result<()>;
    /// A request finished (only called when requests are recorded).
    fn request(
        &mut self,
        _offset: Duration,
        _sample: &Sample,
        _who: Option<&Who>,
    ) -> std::io::Result<()> {
        Ok(())
    }
    /// Whether [`IntervalSink::request`] wants every sample.
    fn records_requests(&self) -> bool {
        false
    }
}

/// How the aggregator cuts time.
#[derive(Debug, Clone, Copy)]
pub struct AggregatorConfig {
    pub interval: Duration,
    /// Interval 0 starts here (the shared start of a run).
    pub anchor: Instant,
    /// `--warmup`: the intervals that start within this long after the anchor are left out
    /// of every result (totals, breakdowns, files); the live metrics still see them.
    pub warmup: Duration,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig {
            interval: Duration::from_secs(1),
            anchor: Instant::now(),
            warmup: Duration::ZERO,
        }
    }
}

/// Owns all measurements of a run. Lives on one thread; see [`spawn_aggregator`].
#[derive(Debug, Default)]
pub struct Aggregator {
    /// The live metrics (`--metrics-listen`), fed from every sample recorded here.
    pub live: Option<std::sync::Arc<super::live::LiveMetrics>>,
    /// The progress line, whose latency and lag come from the same samples.
    pub(crate) progress: Option<std::sync::Arc<crate::progress::Progress>>,
    /// The whole run: the sum of every interval.
    pub table: StatsTable,
    pub events: [u64; Event::COUNT],
    /// Number of intervals flushed.
    pub intervals: u64,
    /// The flushed intervals in consecutive batches: what the percentiles' intervals read.
    pub batches: super::uncertainty::Batches,
    /// The first sink failure, if writing the result directory failed mid-run.
    pub sink_error: Option<String>,
    /// Operations the schedule made due in the intervals counted (after `--warmup`): the
    /// offered load of what the numbers cover (0 for a closed model and stored results).
    pub offered_counted: u64,
    /// Workload operations scheduled after `--warmup` (due then, or sent then without a
    /// schedule), by how they ended: what the measured window was offered and served,
    /// whenever each completed (a warm-up's backlog ending later is not counted).
    pub scheduled: Scheduled,
    /// Workload operations that ended inside `--warmup`: left out of every number, but
    /// counted here so that no failure hides in it.
    pub in_warmup: WarmupCounts,
    /// Runs over several endpoints: the whole run per endpoint (index as in the endpoint
    /// list). Every sample recorded through an endpoint's recorder is in exactly one.
    pub endpoints: Vec<StatsTable>,
    /// `--split-by-header`: the header and the names of its values, by label.
    pub split: Option<Arc<HeaderSplit>>,
    /// The whole run per label of `split` (index: the label). Every sample an answer
    /// labelled is in exactly one.
    pub splits: Vec<StatsTable>,
    /// Which repositories and clients the operations were for (after `--warmup`).
    pub attribution: Attribution,
    /// The names of `split`'s labels as the live metrics label them (copied once per new
    /// value, not per sample).
    split_names: Vec<Arc<str>>,
    /// Per-endpoint counters of the open intervals, by interval index.
    endpoint_open: FastHashMap<u64, Vec<EndpointCounters>>,
    /// `--split-by-header`: per-label counters of the open intervals, by interval index.
    split_open: FastHashMap<u64, Vec<ValueCounters>>,
    sessions: FastHashMap<u64, OpenSession>,
    /// Open intervals, sparse: they see few distinct values.
    open: VecDeque<(u64, StatsTable<SparseHistogram>, IntervalCounters)>,
    spare: Vec<StatsTable<SparseHistogram>>,
    /// The table of intervals that saw nothing.
    idle: StatsTable<SparseHistogram>,
    flushed_upto: u64,
    offered_total: u64,
    completed_total: u64,
    config: Option<AggregatorConfig>,
}

impl Aggregator {
    pub fn new(config: AggregatorConfig) -> Self {
        let mut aggregator = Aggregator {
            config: Some(config),
            ..Aggregator::default()
        };
        aggregator.batches.interval = config.interval;
        aggregator
    }

    /// An aggregator holding stored results (a merge or a report).
    pub fn from_parts(table: StatsTable, events: [u64; Event::COUNT], intervals: u64) -> Self {
        Aggregator {
            table,
            events,
            intervals,
            ..Aggregator::default()
        }
    }

    fn config(&self) -> AggregatorConfig {
        self.config.unwrap_or_default()
    }

    /// The intervals `--warmup` leaves out: those that start before it ends.
    pub fn warmup_intervals(&self) -> u64 {
        let c = self.config();
        c.warmup.as_nanos().div_ceil(c.interval.as_nanos().max(1)) as u64
    }

    /// How long the left-out warm-up lasts (whole intervals).
    pub fn warmup(&self) -> Duration {
        self.config().interval * self.warmup_intervals() as u32
    }

    /// Whether a sample that ended at `at` falls in the warm-up.
    fn in_warmup(&self, at: Instant) -> bool {
        // Per sample: nothing to compute without --warmup.
        self.config.is_some_and(|c| !c.warmup.is_zero())
            && self.index_of(at) < self.warmup_intervals()
    }

    fn index_of(&self, at: Instant) -> u64 {
        let c = self.config();
        let since = at.saturating_duration_since(c.anchor);
        (since.as_nanos() / c.interval.as_nanos().max(1)) as u64
    }

    /// The open interval for `index` (late samples go to the oldest open one).
    fn slot(&mut self, index: u64) -> &mut (u64, StatsTable<SparseHistogram>, IntervalCounters) {
        let index = index.max(self.flushed_upto);
        let pos = match self.open.iter().position(|(i, _, _)| *i >= index) {
            Some(p) if self.open[p].0 == index => p,
            found => {
                let table = self.spare.pop().unwrap_or_default();
                let at = found.unwrap_or(self.open.len());
                self.open
                    .insert(at, (index, table, IntervalCounters::default()));
                at
            }
        };
        &mut self.open[pos]
    }

    /// Records a sample into its interval.
    pub fn record(&mut self, s: &Sample) {
        self.record_from(s, None);
    }

    /// Records a sample recorded through endpoint `endpoint`'s client (if any).
    fn record_from(&mut self, s: &Sample, endpoint: Option<u16>) {
        let index = self.index_of(s.timing.end);
        if s.op.level() == Level::Operation {
            self.completed_total += 1;
            if self.in_warmup(s.timing.end) {
                self.in_warmup.operations += 1;
                if let crate::metrics::Outcome::Error(kind) = s.outcome {
                    self.in_warmup.errors += 1;
                    *self.in_warmup.errors_by_kind.entry(kind).or_default() += 1;
                }
            }
            if !self.in_warmup(s.timing.intended.unwrap_or(s.timing.sent)) {
                match s.outcome.is_ok() {
                    true => self.scheduled.ok += 1,
                    false => self.scheduled.failed += 1,
                }
            }
        }
        if let Some(live) = &self.live {
            live.observe(s, endpoint);
            live.set_in_flight(self.offered_total.saturating_sub(self.completed_total));
        }
        if let (Some(progress), Level::Operation, true) =
            (&self.progress, s.op.level(), s.outcome.is_ok())
        {
            progress.observe(s.timing.latency(), s.timing.schedule_lag());
        }
        let slot = self.slot(index);
        slot.1.record(s);
        if s.op.level() == Level::Operation {
            slot.2.completed += 1;
        }
    }

    /// A sample: into its endpoint's and its label's tables, its attribution, requests.csv
    /// (if recorded) and its interval.
    fn recorded(&mut self, r: Recorded, sink: &mut Option<Box<dyn IntervalSink>>) {
        let s = &r.sample;
        let warmup = self.in_warmup(s.timing.end);
        if let Some(label) = r.label {
            let l = usize::from(label);
            if self.splits.len() <= l {
                self.splits.resize_with(l + 1, StatsTable::default);
            }
            if !warmup {
                self.splits[l].record(s);
            }
            if s.op.level() == Level::Operation {
                let index = self.index_of(s.timing.end).max(self.flushed_upto);
                let counters = self.split_open.entry(index).or_default();
                if counters.len() <= l {
                    counters.resize(l + 1, ValueCounters::default());
                }
                counters[l].add(&ValueCounters {
                    completed: 1,
                    bytes: s.bytes_sent + s.bytes_received,
                });
            }
            if self.live.is_some() {
                if let (Some(name), Some(live)) = (self.split_name(label), &self.live) {
                    live.observe_split(s, name);
                }
            }
        }
        if let Some(endpoint) = r.endpoint {
            self.endpoint_sample(usize::from(endpoint), s, warmup);
        }
        if let (Some(who), false) = (&r.who, warmup) {
            self.attribution.record(who, s);
        }
        if let Some(sink) = sink.as_mut().filter(|k| k.records_requests() && !warmup) {
            let offset = s.timing.end.saturating_duration_since(self.config().anchor);
            if let Err(e) = sink.request(offset, s, r.who.as_ref()) {
                self.sink_error.get_or_insert(e.to_string());
            }
        }
        self.record_from(s, r.endpoint);
    }

    /// A sample sent to endpoint `e`: its whole-run table and interval counters.
    fn endpoint_sample(&mut self, e: usize, s: &Sample, warmup: bool) {
        if self.endpoints.len() <= e {
            self.endpoints.resize_with(e + 1, StatsTable::default);
        }
        if !warmup {
            self.endpoints[e].record(s);
        }
        if s.op.level() == Level::Operation {
            // The interval `record` puts the sample in.
            let index = self.index_of(s.timing.end).max(self.flushed_upto);
            let counters = self.endpoint_open.entry(index).or_default();
            if counters.len() <= e {
                counters.resize(e + 1, EndpointCounters::default());
            }
            let c = &mut counters[e];
            c.completed += 1;
            if s.outcome.is_ok() {
                c.ok += 1;
            } else {
                c.errors += 1;
            }
            c.bytes_sent += s.bytes_sent;
            c.bytes_received += s.bytes_received;
        }
    }

    pub(crate) fn handle(&mut self, msg: Msg, sink: &mut Option<Box<dyn IntervalSink>>) -> bool {
        match msg {
            Msg::Endpoint(e) => {
                let e = usize::from(e);
                if self.endpoints.len() <= e {
                    self.endpoints.resize_with(e + 1, StatsTable::default);
                }
            }
            Msg::Sample(r) => self.recorded(r, sink),
            Msg::Event(e) => self.events[e.index()] += 1,
            Msg::Session(m) => {
                // A finished image pull is a sample like any other, in requests.csv too.
                if let Some(sample) = self.session(m) {
                    self.recorded(Recorded::plain(sample), sink);
                }
            }
            Msg::Offered(at) => {
                self.offered_total += 1;
                if let Some(live) = &self.live {
                    live.set_in_flight(self.offered_total.saturating_sub(self.completed_total));
                }
                let index = self.index_of(at);
                self.slot(index).2.offered += 1;
            }
            Msg::Tick(now) => {
                // Keep the current and the previous interval open for stragglers.
                let now = self.index_of(now);
                self.flush_before(now.saturating_sub(1), sink);
            }
            Msg::Stop => {
                self.flush_before(u64::MAX, sink);
                if let Some(sink) = sink.as_mut() {
                    if let Err(e) = sink.finish() {
                        self.sink_error.get_or_insert(e.to_string());
                    }
                }
                return false;
            }
        }
        true
    }

    /// The name of `split`'s label `label`.
    fn split_name(&mut self, label: u8) -> Option<Arc<str>> {
        let l = usize::from(label);
        if self.split_names.len() <= l {
            let split = self.split.as_ref()?;
            self.split_names = split.names().into_iter().map(Arc::from).collect();
        }
        self.split_names.get(l).cloned()
    }

    /// The names of `split`'s labels, by label, with their tables: what the results say
    /// of `--split-by-header` (`None` without it).
    pub fn split_tables(&self) -> Option<(&str, Vec<(String, &StatsTable)>)> {
        let split = self.split.as_ref()?;
        let names = split.names();
        let tables = self
            .splits
            .iter()
            .enumerate()
            .filter(|(_, t)| t.cells().next().is_some())
            .filter_map(|(l, t)| Some((names.get(l)?.clone(), t)))
            .collect();
        Some((split.header(), tables))
    }

    /// Flushes every open interval with an index below `limit`, in order. Intervals in
    /// between that saw nothing are written too, so the timeline has no holes.
    fn flush_before(&mut self, limit: u64, sink: &mut Option<Box<dyn IntervalSink>>) {
        let c = self.config();
        while let Some((index, _, _)) = self.open.front() {
            if *index >= limit {
                break;
            }
            let index = *index;
            // Intervals before this one that saw nothing.
            let idle = vec![EndpointCounters::default(); self.endpoints.len()];
            let warmup = self.warmup_intervals();
            while self.flushed_upto < index {
                if self.flushed_upto < warmup {
                    // Left out (--warmup): neither written nor counted; an empty batch
                    // interval, as a merge of the files sees it.
                    self.batches.end_interval();
                    self.flushed_upto += 1;
                    continue;
                }
                let interval = Interval {
                    index: self.flushed_upto,
                    start: start_of(c, self.flushed_upto),
                    length: c.interval,
                    table: &self.idle,
                    counters: IntervalCounters::default(),
                    endpoints: &idle,
                    splits: &[],
                };
                Self::write(&interval, &mut self.intervals, &mut self.sink_error, sink);
                self.batches.end_interval();
                self.flushed_upto += 1;
            }
            let Some((index, mut table, mut counters)) = self.open.pop_front() else {
                break;
            };
            counters.in_flight = self.offered_total.saturating_sub(self.completed_total);
            if index < warmup {
                // Left out (--warmup): neither written nor counted; an empty batch
                // interval, as a merge of the files sees it.
                self.batches.end_interval();
                self.endpoint_open.remove(&index);
                self.split_open.remove(&index);
                table.reset();
                self.spare.push(table);
                self.flushed_upto = index + 1;
                continue;
            }
            self.offered_counted += counters.offered;
            table.add_to(&mut self.table);
            self.batches.add_sparse_table(&table);
            self.batches.end_interval();
            let mut endpoints = self.endpoint_open.remove(&index).unwrap_or_default();
            if endpoints.len() < self.endpoints.len() {
                endpoints.resize(self.endpoints.len(), EndpointCounters::default());
            }
            let splits = self.split_counters(index);
            let interval = Interval {
                index,
                start: start_of(c, index),
                length: c.interval,
                table: &table,
                counters,
                endpoints: &endpoints,
                splits: &splits,
            };
            Self::write(&interval, &mut self.intervals, &mut self.sink_error, sink);
            table.reset();
            self.spare.push(table);
            self.flushed_upto = index + 1;
        }
    }

    /// The named per-value counters of interval `index`, taken out of the open ones.
    fn split_counters(&mut self, index: u64) -> Vec<(Arc<str>, ValueCounters)> {
        let Some(counters) = self.split_open.remove(&index) else {
            return Vec::new();
        };
        let mut named = Vec::new();
        for (label, c) in counters.iter().enumerate() {
            if c.completed == 0 {
                continue;
            }
            let label = u8::try_from(label).unwrap_or(super::split::OTHER);
            if let Some(name) = self.split_name(label) {
                named.push((name, *c));
            }
        }
        named
    }

    /// Hands a finished interval to the sink; counts it whether or not there is one.
    fn write(
        interval: &Interval<'_>,
        intervals: &mut u64,
        sink_error: &mut Option<String>,
        sink: &mut Option<Box<dyn IntervalSink>>,
    ) {
        *intervals += 1;
        if let Some(sink) = sink.as_mut() {
            if let Err(e) = sink.interval(interval) {
                sink_error.get_or_insert(e.to_string());
            }
        }
    }

    /// Tracks a session; returns its `image_pull` sample when it has just finished.
    fn session(&mut self, msg: SessionMsg) -> Option<Sample> {
        let id = match msg {
            SessionMsg::Started { id, start } => {
                let s = self.sessions.entry(id).or_insert(OpenSession {
                    start,
                    end: start,
                    pending: 0,
                    error: None,
                    bytes: 0,
                    closed: false,
                });
                s.start = s.start.min(start);
                s.pending += 1;
                id
            }
            SessionMsg::Ended {
                id,
                end,
                error,
                bytes,
            } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.pending = s.pending.saturating_sub(1);
                    s.end = s.end.max(end);
                    s.bytes += bytes;
                    if s.error.is_none() {
                        s.error = error;
                    }
                }
                id
            }
            SessionMsg::Closed { id } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.closed = true;
                }
                id
            }
        };
        let finished = self
            .sessions
            .get(&id)
            .is_some_and(|s| s.closed && s.pending == 0);
        if !finished {
            return None;
        }
        self.sessions.remove(&id).map(|s| Sample {
            op: Op::ImagePull,
            outcome: s.error.map_or(Outcome::Ok, Outcome::Error),
            size_class: SizeClass::of(s.bytes),
            timing: Timing {
                intended: None,
                ready: None,
                sent: s.start,
                first_byte: None,
                end: s.end,
            },
            bytes_sent: 0,
            bytes_received: s.bytes,
            http: HttpStatuses::NONE,
        })
    }

    /// Non-zero event counters by name.
    pub fn event_counts(&self) -> BTreeMap<String, u64> {
        Event::ALL
            .iter()
            .filter(|e| self.events[e.index()] > 0)
            .map(|e| (e.name().to_owned(), self.events[e.index()]))
            .collect()
    }
}

/// The running aggregator and the way to stop it.
#[derive(Debug)]
pub struct AggregatorHandle {
    tx: mpsc::Sender<Msg>,
    done: tokio::sync::oneshot::Receiver<Aggregator>,
    ticker: tokio::task::JoinHandle<()>,
}

impl AggregatorHandle {
    /// Stops the aggregator after every sample already sent, flushes all intervals to the
    /// sink, and returns it.
    pub async fn finish(self) -> Aggregator {
        self.ticker.abort();
        let _ = self.tx.send(Msg::Stop).await;
        // If the thread died (its panic was already reported), there is nothing to return.
        self.done.await.unwrap_or_default()
    }
}

/// The longest the aggregator thread sleeps after draining messages under load.
const DRAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The shortest.
const DRAIN_PAUSE_MIN: std::time::Duration = std::time::Duration::from_millis(1);

/// How many messages the aggregator lets wait while it sleeps: a quarter of the channel.
const DRAIN_TARGET: usize = CHANNEL_CAPACITY / 4;

/// The pause after draining `drained` messages that arrived during a pause of `last`: the
/// time [`DRAIN_TARGET`] messages take to arrive at that rate, within
/// [`DRAIN_PAUSE_MIN`]..=[`DRAIN_PAUSE`].
fn drain_pause(drained: usize, last: std::time::Duration) -> std::time::Duration {
    let per_message = last / u32::try_from(drained.max(1)).unwrap_or(u32::MAX);
    (per_message * DRAIN_TARGET as u32).clamp(DRAIN_PAUSE_MIN, DRAIN_PAUSE)
}

/// Capacity of the sample channel: far more than any run keeps in flight.
const CHANNEL_CAPACITY: usize = 16 * 1024;

/// Starts an aggregator with one-second intervals from now and no sink.
pub fn spawn_aggregator() -> (Recorder, AggregatorHandle) {
    spawn_aggregator_with(AggregatorConfig::default(), None)
}

/// Starts an aggregator writing finished intervals to `sink`.
pub fn spawn_aggregator_with(
    config: AggregatorConfig,
    sink: Option<Box<dyn IntervalSink>>,
) -> (Recorder, AggregatorHandle) {
    spawn_aggregator_live(config, sink, None)
}

/// [`spawn_aggregator_with`], also feeding `live` (the `--metrics-listen` endpoint).
pub fn spawn_aggregator_live(
    config: AggregatorConfig,
    sink: Option<Box<dyn IntervalSink>>,
    live: Option<std::sync::Arc<super::live::LiveMetrics>>,
) -> (Recorder, AggregatorHandle) {
    spawn_aggregator_watched(config, sink, live, None, None)
}

/// [`spawn_aggregator_live`], also feeding the latency and lag of the progress line, so it
/// shows what the metrics and the results hold, and splitting the samples by a response
/// header (`--split-by-header`) when `split` names one.
pub(crate) fn spawn_aggregator_watched(
    config: AggregatorConfig,
    sink: Option<Box<dyn IntervalSink>>,
    live: Option<std::sync::Arc<super::live::LiveMetrics>>,
    progress: Option<std::sync::Arc<crate::progress::Progress>>,
    split: Option<Arc<HeaderSplit>>,
) -> (Recorder, AggregatorHandle) {
    let recorder_split = split.clone();
    let (tx, mut rx) = mpsc::channel::<Msg>(CHANNEL_CAPACITY);
    let (done_tx, done) = tokio::sync::oneshot::channel();
    // A plain thread, not `spawn_blocking`: it lives for the whole run, and under a paused
    // test clock a blocking task would stop the clock from advancing.
    let spawned = std::thread::Builder::new()
        .name("creb-aggregator".into())
        .spawn(move || {
            let mut aggregator = Aggregator::new(config);
            aggregator.live = live;
            aggregator.progress = progress;
            aggregator.split = split;
            let mut sink = sink;
            // Under load, drain what arrived and sleep: parked on the channel, the thread
            // would be woken (a futex round trip) for every message. It sleeps up to 20 ms,
            // less when a quarter of the channel would fill sooner at the rate of the last
            // pause (below 200k messages a second it wakes 50 times a second; an operation
            // sends a few). Idle, it parks until the next message. Timing is taken where
            // samples are made, so this changes only when they are counted, never what is
            // counted; intervals are flushed a tick after they end, so a late count still
            // lands in its own interval.
            let mut pause = DRAIN_PAUSE;
            'run: loop {
                let mut drained = 0usize;
                loop {
                    match rx.try_recv() {
                        Ok(msg) => {
                            drained += 1;
                            if !aggregator.handle(msg, &mut sink) {
                                break 'run;
                            }
                        }
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => break 'run,
                    }
                }
                if drained > 0 {
                    pause = drain_pause(drained, pause);
                    std::thread::sleep(pause);
                    continue;
                }
                pause = DRAIN_PAUSE;
                match rx.blocking_recv() {
                    Some(msg) => {
                        if !aggregator.handle(msg, &mut sink) {
                            break;
                        }
                    }
                    None => break,
                }
            }
            let _ = done_tx.send(aggregator);
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start the aggregator thread: {e}");
    }
    let tick_tx = tx.clone();
    let ticker = tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(config.anchor + config.interval, config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticks.tick().await;
            if tick_tx.send(Msg::Tick(Instant::now())).await.is_err() {
                break;
            }
        }
    });
    (
        Recorder {
            tx: tx.clone(),
            endpoint: None,
            split: recorder_split,
        },
        AggregatorHandle { tx, done, ticker },
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::metrics::Stats;

    type Written = Arc<Mutex<Vec<(u64, StatsTable, IntervalCounters)>>>;

    struct Capture(Written);

    impl IntervalSink for Capture {
        fn interval(&mut self, interval: &Interval<'_>) -> std::io::Result<()> {
            let mut copy = StatsTable::default();
            interval.table.add_to(&mut copy);
            self.0
                .lock()
                .unwrap()
                .push((interval.index, copy, interval.counters));
            Ok(())
        }

        fn finish(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn sample(op: Op, end: Instant, service_us: u64, ok: bool) -> Sample {
        let sent = end - Duration::from_micros(service_us);
        Sample {
            op,
            outcome: if ok {
                Outcome::Ok
            } else {
                Outcome::Error(ErrorKind::Timeout)
            },
            size_class: SizeClass::of(service_us * 100),
            timing: Timing {
                intended: None,
                ready: None,
                sent,
                first_byte: Some(sent + Duration::from_micros(service_us / 2)),
                end,
            },
            bytes_sent: 0,
            bytes_received: service_us,
            http: HttpStatuses::one(Some(200)),
        }
    }

    #[test]
    fn the_progress_line_takes_its_latency_from_the_samples() {
        let progress = crate::progress::Progress::new(3);
        let mut aggregator = Aggregator::new(AggregatorConfig::default());
        aggregator.progress = Some(std::sync::Arc::clone(&progress));
        let now = Instant::now();
        let mut late = sample(Op::BlobGet, now, 20_000, true);
        // Due 30 ms before it was sent: 50 ms from the intended start, 30 ms of lag.
        late.timing.intended = Some(late.timing.sent - Duration::from_millis(30));
        aggregator.record(&late);
        aggregator.record(&sample(Op::BlobGet, now, 1_000, false));
        aggregator.record(&sample(Op::UploadPatch, now, 1_000, true));
        let p99 = progress.latency.take_quantile(0.99).unwrap();
        assert!(
            p99 >= Duration::from_millis(50) && p99 < Duration::from_millis(80),
            "{p99:?}"
        );
        assert_eq!(
            progress.latency.take_quantile(0.99),
            None,
            "one sample, taken"
        );
        let lag = progress.lag.take_quantile(0.99).unwrap();
        assert!(
            lag >= Duration::from_millis(30) && lag < Duration::from_millis(48),
            "{lag:?}"
        );
    }

    fn assert_same(a: &Stats, b: &Stats, what: &str) {
        assert_eq!(
            (a.count, a.ok, a.errors),
            (b.count, b.ok, b.errors),
            "{what}"
        );
        assert_eq!(a.bytes_received, b.bytes_received, "{what}");
        assert_eq!(a.latency.len(), b.latency.len(), "{what}");
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(
                a.latency.value_at_quantile(q),
                b.latency.value_at_quantile(q),
                "{what} q{q}"
            );
        }
        let len = |s: &Stats| s.ttfb.as_ref().map_or(0, |h| h.len());
        assert_eq!(len(a), len(b), "{what} ttfb");
        let errs = |s: &Stats| s.error_latency.as_ref().map_or(0, |h| h.len());
        assert_eq!(errs(a), errs(b), "{what} errors");
    }

    #[test]
    fn the_drain_pause_lets_a_quarter_of_the_channel_fill() {
        let ms = std::time::Duration::from_millis;
        // 250k messages a second: 4,096 arrive in 16.4 ms.
        let p = drain_pause(5_000, ms(20));
        assert!(p > ms(16) && p < ms(17), "{p:?}");
        // 1M a second, from a full channel: 5 ms, then 4.1 ms (4,096 at 1M a second).
        let p = drain_pause(16_384, ms(20));
        assert!(p > ms(4) && p <= ms(5), "{p:?}");
        let p = drain_pause(4_000, ms(4));
        assert!(p > ms(4) && p < ms(5), "{p:?}");
        // Slow: the longest pause; very fast: the shortest.
        assert_eq!(drain_pause(10, ms(20)), DRAIN_PAUSE);
        assert_eq!(drain_pause(16_384, ms(1)), DRAIN_PAUSE_MIN);
    }

    #[test]
    fn intervals_hold_their_samples_and_add_up_to_the_totals_exactly() {
        let anchor = Instant::now();
        let second = Duration::from_secs(1);
        let written: Written = Arc::default();
        let mut sink: Option<Box<dyn IntervalSink>> = Some(Box::new(Capture(written.clone())));
        let mut agg = Aggregator::new(AggregatorConfig {
            interval: second,
            anchor,
            warmup: Duration::ZERO,
        });
        // What each interval should hold, recorded densely on the side.
        let mut expected: BTreeMap<u64, StatsTable> = BTreeMap::new();
        let mut rng = 7u64;
        let ops = [Op::BlobGet, Op::ManifestGet, Op::BlobUpload];
        for k in 0..6u32 {
            for i in 0..500u64 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let service = 50 + (rng >> 33) % 2_000_000;
                let end = anchor + k * second + Duration::from_micros((rng >> 20) % 999_999);
                let s = sample(ops[(i % 3) as usize], end, service, i % 17 != 0);
                assert!(agg.handle(Msg::Sample(Recorded::plain(s)), &mut sink));
                expected.entry(u64::from(k)).or_default().record(&s);
            }
            // The tick of the end of interval k: k-1 stays open for stragglers, whose
            // samples still land in their own interval.
            if k >= 1 {
                let straggler = sample(Op::Ping, anchor + (k - 1) * second, 10, true);
                assert!(agg.handle(Msg::Sample(Recorded::plain(straggler)), &mut sink));
                expected
                    .entry(u64::from(k - 1))
                    .or_default()
                    .record(&straggler);
            }
            assert!(agg.handle(Msg::Tick(anchor + (k + 1) * second), &mut sink));
        }
        // Nothing in intervals 6 and 7; one sample in 8.
        let last = sample(Op::BlobGet, anchor + 8 * second + second / 2, 1_000, true);
        assert!(agg.handle(Msg::Sample(Recorded::plain(last)), &mut sink));
        expected.entry(8).or_default().record(&last);
        assert!(!agg.handle(Msg::Stop, &mut sink));

        let written = written.lock().unwrap();
        let indices: Vec<u64> = written.iter().map(|(i, _, _)| *i).collect();
        assert_eq!(indices, (0..=8).collect::<Vec<_>>(), "no holes, in order");
        assert_eq!(agg.intervals, 9);
        let mut sum = StatsTable::default();
        for (index, table, _) in written.iter() {
            sum.add(table);
            let empty = StatsTable::default();
            let want = expected.get(index).unwrap_or(&empty);
            assert_eq!(
                table.cells().count(),
                want.cells().count(),
                "interval {index}"
            );
            for (key, stats) in want.cells() {
                let got = table.cells().find(|(k, _)| *k == key).unwrap().1;
                assert_same(got, stats, &format!("interval {index} {key:?}"));
            }
        }
        assert_eq!(sum.cells().count(), agg.table.cells().count());
        for (key, stats) in agg.table.cells() {
            let got = sum.cells().find(|(k, _)| *k == key).unwrap().1;
            assert_same(got, stats, &format!("total {key:?}"));
        }
        // The run's totals are dense histograms with the standard settings (mergeable).
        let (_, any) = agg.table.cells().next().unwrap();
        assert!(crate::metrics::hist::has_standard_settings(&any.latency));
    }
}
