//! How the aggregator cuts a run into intervals, and what it hands the result directory
//! for each finished one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attribution::Who;
use super::breakdown::KeyCounters;
use super::split::ValueCounters;
use super::{ErrorKind, Sample, SparseHistogram, StatsTable};

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

/// Offset of interval `index`'s start from the anchor.
pub(super) fn start_of(c: AggregatorConfig, index: u64) -> Duration {
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
    pub endpoints: &'a [KeyCounters],
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

impl AggregatorConfig {
    /// The intervals `--warmup` leaves out: those that start before it ends.
    pub fn warmup_intervals(&self) -> u64 {
        self.warmup
            .as_nanos()
            .div_ceil(self.interval.as_nanos().max(1)) as u64
    }

    /// How long the left-out warm-up lasts (whole intervals).
    pub fn left_out(&self) -> Duration {
        self.interval * self.warmup_intervals() as u32
    }

    /// When the measured part begins: the anchor plus the left-out intervals.
    pub fn measured_from(&self) -> Instant {
        self.anchor + self.left_out()
    }
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

/// An open interval: its index, its values (sparse: it sees few distinct ones) and counters.
pub(super) type Open = (u64, StatsTable<SparseHistogram>, IntervalCounters);

/// What is flushed next: an interval that saw nothing, or an open one.
pub(super) enum Due {
    Idle(u64),
    Open(Open),
}

/// The open intervals in index order, the tables they recycle, and how far flushing got.
#[derive(Debug, Default)]
pub(super) struct OpenIntervals {
    open: VecDeque<Open>,
    spare: Vec<StatsTable<SparseHistogram>>,
    /// The table of intervals that saw nothing.
    idle: StatsTable<SparseHistogram>,
    /// Every interval before this one is flushed.
    flushed_upto: u64,
}

impl OpenIntervals {
    /// The first interval still open to samples: a late one goes there.
    pub(super) fn flushed_upto(&self) -> u64 {
        self.flushed_upto
    }

    /// The open interval for `index` (late samples go to the oldest open one).
    pub(super) fn slot(&mut self, index: u64) -> &mut Open {
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

    /// The next interval to flush of those before the first open one at or after `limit`,
    /// in order: the intervals in between that saw nothing too, so the timeline has no
    /// holes.
    pub(super) fn next_before(&mut self, limit: u64) -> Option<Due> {
        let index = self
            .open
            .front()
            .map(|(i, _, _)| *i)
            .filter(|i| *i < limit)?;
        if self.flushed_upto < index {
            self.flushed_upto += 1;
            return Some(Due::Idle(self.flushed_upto - 1));
        }
        self.flushed_upto = index + 1;
        self.open.pop_front().map(Due::Open)
    }

    /// The table of an interval that saw nothing.
    pub(super) fn idle(&self) -> &StatsTable<SparseHistogram> {
        &self.idle
    }

    /// A flushed interval's table, for a later one.
    pub(super) fn recycle(&mut self, mut table: StatsTable<SparseHistogram>) {
        table.reset();
        self.spare.push(table);
    }
}
