//! The single owner of every measurement of a run.
//!
//! Workers send messages through a bounded channel ([`super::recorder`]); one aggregator, on
//! its own thread ([`super::spawn`]; file writes never stall the async runtime), records
//! them. Time is cut into intervals aligned to the run's anchor (the shared start): interval
//! *k* covers `[anchor + k·I, anchor + (k+1)·I)`, and a sample belongs to the interval in
//! which it *ended*. Intervals are kept open one interval longer than their end (stragglers
//! still in the channel find their place), then flushed to the [`IntervalSink`] — the result
//! directory's interval log and timeline — and added into the run's totals. The totals are
//! therefore exactly the sum of the intervals, and a crash loses at most the open intervals.
//! What the samples are broken down by (endpoint, header value, repository and client) is
//! in [`super::breakdown`]; results read it all through the methods of [`Aggregator`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attribution::Attribution;
use super::breakdown::{Breakdown, BySplit, KeyCounters, Keyed};
use super::interval::{
    start_of, AggregatorConfig, Due, Interval, IntervalCounters, IntervalSink, Open, OpenIntervals,
    Scheduled, WarmupCounts,
};
use super::live::LiveMetrics;
use super::recorder::{Msg, Offer, Recorded, SessionMsg};
use super::sessions::Sessions;
use super::split::HeaderSplit;
use super::uncertainty::Batches;
use super::{Event, Level, Outcome, Sample, Spans, StatsTable};
use crate::progress::Progress;

/// Owns all measurements of a run. Lives on one thread; see [`super::AggregatorBuilder`].
#[derive(Debug)]
pub struct Aggregator {
    /// The live metrics (`--metrics-listen`), fed from every sample recorded here.
    live: Option<Arc<LiveMetrics>>,
    /// The progress line, whose latency and lag come from the same samples.
    progress: Option<Arc<Progress>>,
    /// The whole run: the sum of every interval.
    table: StatsTable,
    events: [u64; Event::COUNT],
    /// Number of intervals flushed.
    intervals: u64,
    /// The flushed intervals in consecutive batches: what the percentiles' intervals read.
    batches: Batches,
    /// The first sink failure, if writing the result directory failed mid-run.
    sink_error: Option<String>,
    /// Operations the schedule made due in the intervals counted (after `--warmup`).
    offered_counted: u64,
    /// Workload operations scheduled after `--warmup`, by how they ended.
    scheduled: Scheduled,
    /// Workload operations that ended inside `--warmup`.
    in_warmup: WarmupCounts,
    /// Per endpoint (runs over several; the index as in the endpoint list).
    endpoints: Keyed,
    /// `--split-by-header`: per value of the header.
    split: Option<BySplit>,
    /// Which repositories and clients the operations were for (after `--warmup`).
    attribution: Attribution,
    sessions: Sessions,
    open: OpenIntervals,
    offered_total: u64,
    completed_total: u64,
    config: Option<AggregatorConfig>,
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator {
            live: None,
            progress: None,
            table: StatsTable::default(),
            events: [0; Event::COUNT],
            intervals: 0,
            batches: Batches::default(),
            sink_error: None,
            offered_counted: 0,
            scheduled: Scheduled::default(),
            in_warmup: WarmupCounts::default(),
            endpoints: Keyed::by_endpoint(),
            split: None,
            attribution: Attribution::default(),
            sessions: Sessions::default(),
            open: OpenIntervals::default(),
            offered_total: 0,
            completed_total: 0,
            config: None,
        }
    }
}

/// What results read (the run's figures), then how the aggregator is made, fed and run.
impl Aggregator {
    /// The whole run: the sum of every interval counted.
    pub fn table(&self) -> &StatsTable {
        &self.table
    }

    /// The whole run's table, taken.
    pub fn into_table(self) -> StatsTable {
        self.table
    }

    /// How many times `event` happened.
    pub fn event(&self, event: Event) -> u64 {
        self.events[event.index()]
    }

    /// Non-zero event counters by name.
    pub fn event_counts(&self) -> BTreeMap<String, u64> {
        Event::ALL
            .iter()
            .filter(|e| self.events[e.index()] > 0)
            .map(|e| (e.name().to_owned(), self.events[e.index()]))
            .collect()
    }

    /// Number of intervals flushed.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// The flushed intervals in consecutive batches: what the percentiles' intervals read.
    pub fn batches(&self) -> &Batches {
        &self.batches
    }

    /// The first failure to write the result directory, if any.
    pub fn sink_error(&self) -> Option<&str> {
        self.sink_error.as_deref()
    }

    /// Operations the schedule made due in the intervals counted (after `--warmup`): the
    /// offered load of what the numbers cover (0 for a closed model and stored results).
    pub fn offered_counted(&self) -> u64 {
        self.offered_counted
    }

    /// Workload operations scheduled after `--warmup` (due then, or sent then without a
    /// schedule), by how they ended: what the measured window was offered and served,
    /// whenever each completed (a warm-up's backlog ending later is not counted).
    pub fn scheduled(&self) -> Scheduled {
        self.scheduled
    }

    /// Workload operations that ended inside `--warmup`: left out of every number, but
    /// counted here so that no failure hides in it.
    pub fn in_warmup(&self) -> &WarmupCounts {
        &self.in_warmup
    }

    /// Endpoint `index`'s whole run (runs over several endpoints).
    pub fn endpoint(&self, index: usize) -> Option<&StatsTable> {
        self.endpoints.tables().get(index)
    }

    /// The names of `--split-by-header`'s values with their tables, and the header (`None`
    /// without it).
    pub fn split_tables(&self) -> Option<(&str, Vec<(String, &StatsTable)>)> {
        self.split.as_ref().map(BySplit::tables)
    }

    /// Which repositories and clients the operations were for.
    pub fn attribution(&self) -> &Attribution {
        &self.attribution
    }

    /// An aggregator of a run cut into intervals as `config` says.
    pub fn new(config: AggregatorConfig) -> Self {
        let mut aggregator = Aggregator {
            config: Some(config),
            ..Aggregator::default()
        };
        aggregator.batches.interval = config.interval;
        aggregator
    }

    /// An aggregator holding stored results (a merge or a report): the run's table, its
    /// event counters and intervals, and their batches.
    pub fn from_parts(
        table: StatsTable,
        events: [u64; Event::COUNT],
        intervals: u64,
        batches: Batches,
    ) -> Self {
        Aggregator {
            table,
            events,
            intervals,
            batches,
            ..Aggregator::default()
        }
    }

    /// Stored results whose batches are `interval` long (a merge of runs).
    pub fn with_batch_interval(mut self, interval: Duration) -> Self {
        self.batches.interval = interval;
        self
    }

    /// What the samples also feed (the thread that starts the aggregator sets them).
    pub(super) fn feed(
        &mut self,
        live: Option<Arc<LiveMetrics>>,
        progress: Option<Arc<Progress>>,
        split: Option<Arc<HeaderSplit>>,
    ) {
        self.live = live;
        self.progress = progress;
        self.split = split.map(BySplit::new);
    }

    fn config(&self) -> AggregatorConfig {
        self.config.unwrap_or_default()
    }

    /// The intervals `--warmup` leaves out: those that start before it ends.
    pub fn warmup_intervals(&self) -> u64 {
        self.config().warmup_intervals()
    }

    /// How long the left-out warm-up lasts (whole intervals).
    pub fn warmup(&self) -> Duration {
        self.config().left_out()
    }

    /// Whether a sample that ended at `at` falls in the warm-up.
    fn in_warmup_at(&self, at: Instant) -> bool {
        // Per sample: nothing to compute without --warmup.
        self.config.is_some_and(|c| !c.warmup.is_zero())
            && self.index_of(at) < self.warmup_intervals()
    }

    /// Whether interval `index` is in the warm-up ([`Aggregator::in_warmup_at`] of a time
    /// whose interval is known).
    fn in_warmup_interval(&self, index: u64) -> bool {
        self.config.is_some_and(|c| !c.warmup.is_zero()) && index < self.warmup_intervals()
    }

    fn index_of(&self, at: Instant) -> u64 {
        let c = self.config();
        let since = at.saturating_duration_since(c.anchor).as_nanos();
        let interval = c.interval.as_nanos().max(1);
        // Both fit 64 bits for a run shorter than five centuries: a 64-bit division, not
        // a call to divide in 128 (twice per sample).
        match (u64::try_from(since), u64::try_from(interval)) {
            (Ok(since), Ok(interval)) => since / interval,
            _ => (since / interval) as u64,
        }
    }

    /// Records a sample into its interval.
    pub fn record(&mut self, s: &Sample) {
        self.record_from(s, &Spans::of(&s.timing), None, self.index_of(s.timing.end));
    }

    /// Records a sample (its durations `spans`) recorded through endpoint `endpoint`'s
    /// client (if any) that ended in interval `index`.
    fn record_from(&mut self, s: &Sample, spans: &Spans, endpoint: Option<u16>, index: u64) {
        if s.op.level() == Level::Operation {
            self.completed_total += 1;
            if self.in_warmup_interval(index) {
                self.in_warmup.operations += 1;
                if let Outcome::Error(kind) = s.outcome {
                    self.in_warmup.errors += 1;
                    *self.in_warmup.errors_by_kind.entry(kind).or_default() += 1;
                }
            }
            if !self.in_warmup_at(s.timing.intended.unwrap_or(s.timing.sent)) {
                match s.outcome.is_ok() {
                    true => self.scheduled.ok += 1,
                    false => self.scheduled.failed += 1,
                }
            }
        }
        if let Some(live) = &self.live {
            live.observe(s, spans, endpoint);
            live.set_in_flight(self.offered_total.saturating_sub(self.completed_total));
        }
        if let (Some(progress), Level::Operation, true) =
            (&self.progress, s.op.level(), s.outcome.is_ok())
        {
            progress.observe(spans.latency_us, spans.lag_us);
        }
        let slot = self.open.slot(index);
        slot.1.record_spans(s, spans);
        if s.op.level() == Level::Operation {
            slot.2.completed += 1;
        }
    }

    /// Session progress; a finished image pull is a sample like any other, in requests.csv
    /// too.
    fn session(&mut self, m: SessionMsg, sink: &mut Option<Box<dyn IntervalSink>>) {
        if let Some((pull, ready)) = self.sessions.handle(m) {
            self.recorded(Recorded::plain(pull), sink);
            if let Some(ready) = ready {
                self.recorded(Recorded::plain(ready), sink);
            }
        }
    }

    /// A sample: into its breakdowns, requests.csv (if recorded) and its interval.
    fn recorded(&mut self, r: Recorded, sink: &mut Option<Box<dyn IntervalSink>>) {
        let s = &r.sample;
        // The interval the sample ended in, and the one it is put in (a straggler's interval
        // may be written already).
        let ended = self.index_of(s.timing.end);
        let warmup = self.in_warmup_interval(ended);
        let index = ended.max(self.open.flushed_upto());
        // Its durations, once for every figure it counts in.
        let spans = Spans::of(&s.timing);
        self.endpoints.record(&r, &spans, index, warmup);
        Breakdown::record(&mut self.attribution, &r, &spans, index, warmup);
        if let Some(split) = &mut self.split {
            split.record(&r, &spans, index, warmup);
            let name = r.label.filter(|_| self.live.is_some());
            if let (Some(name), Some(live)) = (name.and_then(|l| split.name(l)), &self.live) {
                live.observe_split(s, &spans, name);
            }
        }
        if let Some(sink) = sink.as_mut().filter(|k| k.records_requests() && !warmup) {
            let offset = s.timing.end.saturating_duration_since(self.config().anchor);
            if let Err(e) = sink.request(offset, s, r.who.as_ref()) {
                self.sink_error.get_or_insert(e.to_string());
            }
        }
        self.record_from(s, &spans, r.endpoint, ended);
    }

    pub(crate) fn handle(&mut self, msg: Msg, sink: &mut Option<Box<dyn IntervalSink>>) -> bool {
        match msg {
            Msg::Endpoint(e) => self.endpoints.add_key(usize::from(e)),
            Msg::Sample(w) => {
                let r = Recorded::from(w);
                let ended = r.ended();
                let then = r.then;
                self.recorded(r, sink);
                if let Some(m) = ended {
                    self.session(m, sink);
                }
                if let Some(offer) = then {
                    self.offered(offer, sink);
                }
            }
            Msg::Event(e) => self.events[e.index()] += 1,
            Msg::Session(m) => self.session(m, sink),
            Msg::Offered(offer) => self.offered(offer, sink),
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

    /// An operation offered: counted in its interval and in flight, started as a member of
    /// its session, and the session it closes closed.
    fn offered(&mut self, offer: Offer, sink: &mut Option<Box<dyn IntervalSink>>) {
        let Offer {
            at,
            session,
            closes,
        } = offer;
        self.offered_total += 1;
        if let Some(live) = &self.live {
            live.set_in_flight(self.offered_total.saturating_sub(self.completed_total));
        }
        let index = self.index_of(at);
        self.open.slot(index).2.offered += 1;
        if let Some(id) = session {
            // A member's start never finishes its session: nothing to record.
            let _ = self.sessions.handle(SessionMsg::Started { id, start: at });
        }
        if let Some(id) = closes {
            self.session(SessionMsg::Closed { id }, sink);
        }
    }

    /// Flushes every open interval with an index below `limit`, in order, and the ones
    /// between them that saw nothing.
    fn flush_before(&mut self, limit: u64, sink: &mut Option<Box<dyn IntervalSink>>) {
        while let Some(due) = self.open.next_before(limit) {
            match due {
                Due::Idle(index) => self.flush_idle(index, sink),
                Due::Open(open) => self.flush(open, sink),
            }
        }
    }

    /// Interval `index`, which saw nothing: written (or left out in the warm-up).
    fn flush_idle(&mut self, index: u64, sink: &mut Option<Box<dyn IntervalSink>>) {
        // Left out (--warmup): neither written nor counted; an empty batch interval, as a
        // merge of the files sees it.
        self.batches.end_interval();
        if index < self.warmup_intervals() {
            return;
        }
        let c = self.config();
        let interval = Interval {
            index,
            start: start_of(c, index),
            length: c.interval,
            table: self.open.idle(),
            counters: IntervalCounters::default(),
            endpoints: &vec![KeyCounters::default(); self.endpoints.tables().len()],
            splits: &[],
        };
        Self::write(&interval, &mut self.intervals, &mut self.sink_error, sink);
    }

    /// An open interval whose time is up: counted and written (or left out in the warm-up).
    fn flush(&mut self, open: Open, sink: &mut Option<Box<dyn IntervalSink>>) {
        let (index, table, mut counters) = open;
        counters.in_flight = self.offered_total.saturating_sub(self.completed_total);
        if index < self.warmup_intervals() {
            // Left out (--warmup): neither written nor counted; an empty batch interval,
            // as a merge of the files sees it.
            self.batches.end_interval();
            self.endpoints.leave_out(index);
            if let Some(split) = &mut self.split {
                split.leave_out(index);
            }
        } else {
            self.offered_counted += counters.offered;
            table.add_to(&mut self.table);
            self.batches.add_sparse_table(&table);
            self.batches.end_interval();
            let endpoints = self.endpoints.take(index);
            let splits = self.split.as_mut().map_or(Vec::new(), |s| s.take(index));
            let c = self.config();
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
        }
        self.open.recycle(table);
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
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::metrics::{ErrorKind, HttpStatuses, Op, SizeClass, Stats, Timing};

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
        assert!(
            progress.latency.take_quantile(0.99).is_none(),
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
                assert!(agg.handle(Msg::Sample(Recorded::plain(s).into()), &mut sink));
                expected.entry(u64::from(k)).or_default().record(&s);
            }
            // The tick of the end of interval k: k-1 stays open for stragglers, whose
            // samples still land in their own interval.
            if k >= 1 {
                let straggler = sample(Op::Ping, anchor + (k - 1) * second, 10, true);
                assert!(agg.handle(Msg::Sample(Recorded::plain(straggler).into()), &mut sink));
                expected
                    .entry(u64::from(k - 1))
                    .or_default()
                    .record(&straggler);
            }
            assert!(agg.handle(Msg::Tick(anchor + (k + 1) * second), &mut sink));
        }
        // Nothing in intervals 6 and 7; one sample in 8.
        let last = sample(Op::BlobGet, anchor + 8 * second + second / 2, 1_000, true);
        assert!(agg.handle(Msg::Sample(Recorded::plain(last).into()), &mut sink));
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
