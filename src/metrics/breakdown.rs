//! Breakdowns of a run's samples by a key each recorded sample may carry — the endpoint that
//! sent it, the header value that answered it, the repository and client it was for — each
//! with bounded figures per key for the open intervals and for the run: the idea written
//! once (`Breakdown`), the indexed kind endpoints and `--split-by-header` are ([`Keyed`]),
//! and attribution as another instance.

use std::sync::Arc;

use crate::fast_hash::FastHashMap;

use super::attribution::Attribution;
use super::recorder::Recorded;
use super::split::{HeaderSplit, ValueCounters, OTHER};
use super::{Level, Sample, Spans, StatsTable};

/// One way of breaking a run down: what a recorded sample adds to the figures of its key.
pub(crate) trait Breakdown {
    /// Counts `r` (its durations `spans`), which ended in the open interval `index`. A
    /// sample that ended inside `--warmup` (`warmup`) counts in its interval's figures only,
    /// never in the run's.
    fn record(&mut self, r: &Recorded, spans: &Spans, index: u64, warmup: bool);

    /// Interval `index` is left out (`--warmup`): its figures go.
    fn leave_out(&mut self, _index: u64) {}
}

/// The workload operations of one key completed in an interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyCounters {
    pub completed: u64,
    pub ok: u64,
    pub errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl KeyCounters {
    /// Adds `other` in (hosts of one interval merged).
    pub fn add(&mut self, other: &KeyCounters) {
        self.completed += other.completed;
        self.ok += other.ok;
        self.errors += other.errors;
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
    }

    fn count(&mut self, s: &Sample) {
        self.completed += 1;
        if s.outcome.is_ok() {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
        self.bytes_sent += s.bytes_sent;
        self.bytes_received += s.bytes_received;
    }
}

/// A breakdown by a small index taken from each sample (an endpoint's position in the
/// endpoint list, a header value's label): per key a whole-run table and the counters of
/// each open interval. Keys are few (the endpoints given, [`super::split::MAX_VALUES`]
/// values), so both are indexed by the key.
#[derive(Debug)]
pub struct Keyed {
    key: fn(&Recorded) -> Option<usize>,
    run: Vec<StatsTable>,
    open: FastHashMap<u64, Vec<KeyCounters>>,
}

impl Keyed {
    fn new(key: fn(&Recorded) -> Option<usize>) -> Keyed {
        Keyed {
            key,
            run: Vec::new(),
            open: FastHashMap::default(),
        }
    }

    /// By the endpoint whose client recorded the sample (runs over several endpoints).
    pub(crate) fn by_endpoint() -> Keyed {
        Keyed::new(|r| r.endpoint.map(usize::from))
    }

    /// By the `--split-by-header` label the sample's answer gave.
    pub(crate) fn by_label() -> Keyed {
        Keyed::new(|r| r.label.map(usize::from))
    }

    /// Key `key` exists: every interval from now on has a row for it.
    pub(crate) fn add_key(&mut self, key: usize) {
        if self.run.len() <= key {
            self.run.resize_with(key + 1, StatsTable::default);
        }
    }

    /// The whole run per key (after `--warmup`), by key.
    pub fn tables(&self) -> &[StatsTable] {
        &self.run
    }

    /// Interval `index`'s counters, taken out: one per key known.
    pub(crate) fn take(&mut self, index: u64) -> Vec<KeyCounters> {
        let mut counters = self.open.remove(&index).unwrap_or_default();
        if counters.len() < self.run.len() {
            counters.resize(self.run.len(), KeyCounters::default());
        }
        counters
    }
}

impl Breakdown for Keyed {
    fn record(&mut self, r: &Recorded, spans: &Spans, index: u64, warmup: bool) {
        let Some(key) = (self.key)(r) else {
            return;
        };
        self.add_key(key);
        let s = &r.sample;
        if !warmup {
            self.run[key].record_spans(s, spans);
        }
        if s.op.level() == Level::Operation {
            let counters = self.open.entry(index).or_default();
            if counters.len() <= key {
                counters.resize(key + 1, KeyCounters::default());
            }
            counters[key].count(s);
        }
    }

    fn leave_out(&mut self, index: u64) {
        self.open.remove(&index);
    }
}

/// `--split-by-header`: the samples by the value their answer gave the header, with the
/// values' names.
#[derive(Debug)]
pub struct BySplit {
    split: Arc<HeaderSplit>,
    by_label: Keyed,
    /// The names of the labels, copied once per new value, not per sample.
    names: Vec<Arc<str>>,
}

impl BySplit {
    pub(crate) fn new(split: Arc<HeaderSplit>) -> BySplit {
        BySplit {
            split,
            by_label: Keyed::by_label(),
            names: Vec::new(),
        }
    }

    /// The name of label `label`.
    pub(crate) fn name(&mut self, label: u8) -> Option<Arc<str>> {
        let l = usize::from(label);
        if self.names.len() <= l {
            self.names = self.split.names().into_iter().map(Arc::from).collect();
        }
        self.names.get(l).cloned()
    }

    /// The header, and each value that answered any operation with its whole-run table.
    pub fn tables(&self) -> (&str, Vec<(String, &StatsTable)>) {
        let names = self.split.names();
        let tables = (self.by_label.tables().iter().enumerate())
            .filter(|(_, t)| t.cells().next().is_some())
            .filter_map(|(l, t)| Some((names.get(l)?.clone(), t)))
            .collect();
        (self.split.header(), tables)
    }

    /// Interval `index`'s operations of each value that answered any, taken out.
    pub(crate) fn take(&mut self, index: u64) -> Vec<(Arc<str>, ValueCounters)> {
        let counters = self.by_label.open.remove(&index).unwrap_or_default();
        let mut named = Vec::new();
        for (label, c) in counters.iter().enumerate() {
            if c.completed == 0 {
                continue;
            }
            let label = u8::try_from(label).unwrap_or(OTHER);
            if let Some(name) = self.name(label) {
                let bytes = c.bytes_sent + c.bytes_received;
                named.push((
                    name,
                    ValueCounters {
                        completed: c.completed,
                        bytes,
                    },
                ));
            }
        }
        named
    }
}

impl Breakdown for BySplit {
    fn record(&mut self, r: &Recorded, spans: &Spans, index: u64, warmup: bool) {
        self.by_label.record(r, spans, index, warmup);
    }

    fn leave_out(&mut self, index: u64) {
        self.by_label.leave_out(index);
    }
}

/// Attribution keeps no interval figures: the run's, by repository and client, after
/// `--warmup`.
impl Breakdown for Attribution {
    fn record(&mut self, r: &Recorded, spans: &Spans, _index: u64, warmup: bool) {
        if let (Some(who), false) = (&r.who, warmup) {
            Attribution::record_spans(self, who, &r.sample, spans);
        }
    }
}
