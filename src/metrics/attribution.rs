//! Attribution: which repositories and which clients the run's operations were for, and
//! what each cost (requests, errors, bytes, time spent, latency percentiles).
//!
//! A trace can name hundreds of thousands of repositories, so nothing here grows with them:
//! each dimension (repository, client) keeps, for each ranking (requests, time spent, bytes,
//! errors), a bounded Space-Saving summary of [`TRACKED`] entries (Metwally, Agrawal and El
//! Abbadi, 2005). A name not tracked replaces the entry of least weight and inherits that
//! weight, so a tracked weight never underestimates the truth and overestimates it by at
//! most the weight it inherited; every name whose share of a ranking's total exceeds
//! 1/[`TRACKED`] is tracked. An entry's own figures (its [`Tally`]) count the operations
//! seen since it was tracked: they are the whole truth ([`Slot::whole`]) when it was tracked
//! from the name's first operation, which holds for every entry until the first
//! replacement. Results list the top [`LISTED`] of each ranking.
//!
//! Percentiles come from each entry's successes in a sparse histogram whose values are cut
//! to two significant digits (within 0.8%), so an entry holds at most a few thousand
//! buckets and usually a few hundred, and replacing an entry clears only what it held.

use std::sync::{Arc, OnceLock};

use hdrhistogram::Histogram;

use super::hist::{Recording, SparseHistogram, HISTOGRAM_SETTINGS};
use super::{Level, Sample};
use crate::fast_hash::FastHashMap;

/// Entries each ranking of a dimension keeps.
pub const TRACKED: usize = 32;
/// Entries the results list per ranking.
pub const LISTED: usize = 10;

/// Whom an operation was for: its repository and the client that made it in the trace (as
/// the trace names it), where known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Who {
    pub repository: Option<Arc<str>>,
    pub client: Option<Arc<str>>,
}

/// A ranking of a dimension's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Criterion {
    Requests,
    Time,
    Bytes,
    Errors,
    /// Slowness: the [`SLOW_QUANTILE`] of an entry's successes, among the entries any
    /// ranking tracks with at least [`SLOW_MIN_SUCCESSES`] of them (no summary of its own:
    /// a percentile does not add up as a Space-Saving weight must).
    Latency,
}

/// The percentile slowness is ranked by, and the successes an entry needs to be ranked
/// (a single slow request never tops it).
pub const SLOW_QUANTILE: f64 = 0.90;
pub const SLOW_MIN_SUCCESSES: u64 = 20;

impl Criterion {
    /// The rankings kept as Space-Saving summaries while the run goes.
    pub const ALL: [Criterion; 4] = [
        Criterion::Requests,
        Criterion::Time,
        Criterion::Bytes,
        Criterion::Errors,
    ];

    /// Every ranking results list: the summaries' and slowness, ranked over what they
    /// track.
    pub const RANKED: [Criterion; 5] = [
        Criterion::Requests,
        Criterion::Time,
        Criterion::Bytes,
        Criterion::Errors,
        Criterion::Latency,
    ];

    /// Its name in results (`top_by`).
    pub fn name(self) -> &'static str {
        match self {
            Criterion::Requests => "requests",
            Criterion::Time => "time",
            Criterion::Bytes => "bytes",
            Criterion::Errors => "errors",
            Criterion::Latency => "latency",
        }
    }

    pub fn from_name(name: &str) -> Option<Criterion> {
        Criterion::RANKED.into_iter().find(|c| c.name() == name)
    }

    /// What one operation adds to this ranking.
    fn weight(self, s: &Seen) -> u64 {
        match self {
            Criterion::Requests => 1,
            Criterion::Time => s.us,
            Criterion::Bytes => s.bytes,
            Criterion::Errors => u64::from(!s.ok),
            Criterion::Latency => 0,
        }
    }

    /// An entry's value in this ranking, from its figures.
    pub fn of(self, t: &Tally) -> u64 {
        match self {
            Criterion::Requests => t.count,
            Criterion::Time => t.time_us,
            Criterion::Bytes => t.bytes,
            Criterion::Errors => t.errors,
            Criterion::Latency => {
                let successes = t.latency.len();
                if successes < SLOW_MIN_SUCCESSES {
                    return 0;
                }
                t.latency.to_dense().value_at_quantile(SLOW_QUANTILE)
            }
        }
    }
}

fn micros(s: &Sample) -> u64 {
    u64::try_from(s.timing.latency().as_micros()).unwrap_or(u64::MAX)
}

/// What a sample brings to the rankings, read from it once (each sample feeds eight of
/// them: four rankings of repositories and four of clients).
#[derive(Debug, Clone, Copy)]
struct Seen {
    us: u64,
    bytes: u64,
    ok: bool,
}

impl Seen {
    fn of(s: &Sample) -> Seen {
        Seen {
            us: micros(s),
            bytes: s.bytes_sent + s.bytes_received,
            ok: s.outcome.is_ok(),
        }
    }
}

/// The layout values are cut to: two significant digits over the standard range.
fn coarse() -> &'static Histogram<u64> {
    static LAYOUT: OnceLock<Histogram<u64>> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let s = HISTOGRAM_SETTINGS;
        Histogram::new_with_bounds(s.lowest_discernible, s.highest_trackable, 2)
            .unwrap_or_else(|e| unreachable!("invalid histogram bounds: {e}"))
    })
}

/// One entry's figures: its operations, failures among them, bytes sent and received, the
/// time they took (latency, failures included), and the latency of its successes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub count: u64,
    pub errors: u64,
    pub bytes: u64,
    pub time_us: u64,
    /// Latency of the successes, µs, cut to two significant digits.
    pub latency: SparseHistogram,
}

impl Tally {
    #[cfg(test)]
    fn add_sample(&mut self, s: &Sample) {
        self.add_seen(Seen::of(s));
    }

    /// Counts one operation.
    fn add_seen(&mut self, s: Seen) {
        self.count += 1;
        self.bytes += s.bytes;
        let us = s.us;
        self.time_us = self.time_us.saturating_add(us);
        if s.ok {
            let layout = coarse();
            self.latency
                .record_us(layout.lowest_equivalent(us.min(layout.high())));
        } else {
            self.errors += 1;
        }
    }

    /// Adds `other` in (hosts merged).
    pub fn add(&mut self, other: &Tally) {
        self.count += other.count;
        self.errors += other.errors;
        self.bytes += other.bytes;
        self.time_us = self.time_us.saturating_add(other.time_us);
        self.latency.add(&other.latency);
    }

    fn clear(&mut self) {
        self.count = 0;
        self.errors = 0;
        self.bytes = 0;
        self.time_us = 0;
        self.latency.clear();
    }
}

/// One tracked entry of a ranking.
#[derive(Debug, Clone)]
pub struct Slot {
    pub name: Arc<str>,
    /// Tracked since the name's first operation: its tally is the whole truth.
    pub whole: bool,
    pub tally: Tally,
}

/// A Space-Saving summary of one ranking.
#[derive(Debug)]
struct TopList {
    criterion: Criterion,
    slots: Vec<Slot>,
    /// Each slot's weight in the ranking (its own plus what it inherited), apart from the
    /// slots: a name not tracked scans them all for the least, a few cache lines instead
    /// of one per slot.
    weights: Vec<u64>,
    /// Some name was replaced: names seen may be missing.
    replaced: bool,
}

impl TopList {
    fn new(criterion: Criterion) -> TopList {
        TopList {
            criterion,
            slots: Vec::with_capacity(TRACKED),
            weights: Vec::with_capacity(TRACKED),
            replaced: false,
        }
    }

    /// Counts an operation of `name`, whose slot here is `at` (if tracked): where it is
    /// now, and the name it took the place of.
    fn record(&mut self, at: Option<usize>, name: &Arc<str>, s: Seen) -> Placed {
        let w = self.criterion.weight(&s);
        if let Some(i) = at {
            self.weights[i] = self.weights[i].saturating_add(w);
            self.slots[i].tally.add_seen(s);
            return Placed::Kept;
        }
        if self.slots.len() < TRACKED {
            let mut tally = Tally::default();
            tally.add_seen(s);
            self.slots.push(Slot {
                name: Arc::clone(name),
                whole: !self.replaced,
                tally,
            });
            self.weights.push(w);
            return Placed::At(self.slots.len() - 1, None);
        }
        // Full: the least entry (the first of equals) gives its place, and its weight, to
        // the new name. Two plain passes over the weights, not one comparing pairs.
        let Some(&min) = self.weights.iter().min() else {
            return Placed::Kept;
        };
        let least = self.weights.iter().position(|&w| w == min).unwrap_or(0);
        let slot = &mut self.slots[least];
        let evicted = std::mem::replace(&mut slot.name, Arc::clone(name));
        self.weights[least] = min.saturating_add(w);
        slot.whole = false;
        slot.tally.clear();
        slot.tally.add_seen(s);
        self.replaced = true;
        Placed::At(least, Some(evicted))
    }

    /// The top `n` entries by weight (heaviest first, then by name), those with nothing of
    /// their own in the ranking left out (a name that took a failing entry's place by a
    /// success inherits its weight, not its failures).
    fn top(&self, n: usize) -> Vec<&Slot> {
        let mut slots: Vec<(u64, &Slot)> = self
            .weights
            .iter()
            .copied()
            .zip(&self.slots)
            .filter(|&(w, s)| w > 0 && self.criterion.of(&s.tally) > 0)
            .collect();
        slots.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
        slots.truncate(n);
        slots.into_iter().map(|(_, s)| s).collect()
    }
}

/// An entry as results list it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub name: Arc<str>,
    pub tally: Tally,
    /// Its figures are the whole truth (else: what was seen since it was tracked).
    pub whole: bool,
    /// The rankings it is in the top [`LISTED`] of.
    pub top_by: Vec<Criterion>,
}

/// Where an operation's name is in a ranking after it was counted.
enum Placed {
    /// In the slot it had.
    Kept,
    /// In slot `.0`, new to the ranking; `.1` is the name whose place it took.
    At(usize, Option<Arc<str>>),
}

/// A name's slot in each ranking ([`Criterion::ALL`] order), [`UNTRACKED`] where it has none.
type Slots = [u8; 4];
const UNTRACKED: u8 = u8::MAX;
const _: () = assert!(TRACKED < UNTRACKED as usize);

/// One dimension (repositories or clients): a summary per ranking, and one index of the
/// names any of them tracks (a name is looked up once per operation, not once per ranking).
#[derive(Debug)]
pub struct Dimension {
    lists: [TopList; 4],
    index: FastHashMap<Arc<str>, Slots>,
}

impl Default for Dimension {
    fn default() -> Dimension {
        Dimension {
            lists: Criterion::ALL.map(TopList::new),
            index: FastHashMap::default(),
        }
    }
}

impl Dimension {
    fn record(&mut self, name: &Arc<str>, s: Seen) {
        let found = self.index.get(name).copied();
        let mut slots = found.unwrap_or([UNTRACKED; 4]);
        for (r, list) in self.lists.iter_mut().enumerate() {
            let at = (slots[r] != UNTRACKED).then_some(usize::from(slots[r]));
            let Placed::At(slot, evicted) = list.record(at, name, s) else {
                continue;
            };
            slots[r] = u8::try_from(slot).unwrap_or(UNTRACKED);
            // The name replaced loses its slot in this ranking, and its index entry with
            // its last slot (the index holds at most the 4 × TRACKED names tracked).
            let Some(evicted) = evicted else { continue };
            if let Some(theirs) = self.index.get_mut(&evicted) {
                theirs[r] = UNTRACKED;
                if theirs.iter().all(|&t| t == UNTRACKED) {
                    self.index.remove(&evicted);
                }
            }
        }
        if found != Some(slots) {
            self.index.insert(Arc::clone(name), slots);
        }
    }

    /// Entries held, over every ranking (at most 4 × [`TRACKED`]).
    pub fn held(&self) -> usize {
        self.lists.iter().map(|l| l.slots.len()).sum()
    }

    /// The union of each ranking's top [`LISTED`], each name once with the most complete
    /// figures any ranking holds for it, heaviest in time spent first.
    pub fn listed(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        for list in &self.lists {
            for slot in list.top(LISTED) {
                let better = |l: &Listed| (slot.whole, slot.tally.count) > (l.whole, l.tally.count);
                match out.iter_mut().find(|l| l.name == slot.name) {
                    Some(l) => {
                        if better(l) {
                            l.tally = slot.tally.clone();
                            l.whole = slot.whole;
                        }
                        l.top_by.push(list.criterion);
                    }
                    None => out.push(Listed {
                        name: Arc::clone(&slot.name),
                        tally: slot.tally.clone(),
                        whole: slot.whole,
                        top_by: vec![list.criterion],
                    }),
                }
            }
        }
        self.slowest(&mut out);
        out.sort_by(|a, b| {
            b.tally
                .time_us
                .cmp(&a.tally.time_us)
                .then_with(|| a.name.cmp(&b.name))
        });
        out
    }

    /// Slowness ranked over every name any ranking tracks (each with its most complete
    /// figures): the top [`LISTED`] by [`SLOW_QUANTILE`] join `out`, marked `latency`.
    fn slowest(&self, out: &mut Vec<Listed>) {
        let mut tracked: Vec<&Slot> = Vec::new();
        for slot in self.lists.iter().flat_map(|l| &l.slots) {
            match tracked.iter_mut().find(|t| t.name == slot.name) {
                Some(t) if (slot.whole, slot.tally.count) > (t.whole, t.tally.count) => *t = slot,
                Some(_) => {}
                None => tracked.push(slot),
            }
        }
        let mut ranked: Vec<(&Slot, u64)> = tracked
            .into_iter()
            .map(|s| (s, Criterion::Latency.of(&s.tally)))
            .filter(|&(_, v)| v > 0)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
        for (slot, _) in ranked.into_iter().take(LISTED) {
            match out.iter_mut().find(|l| l.name == slot.name) {
                Some(l) => l.top_by.push(Criterion::Latency),
                None => out.push(Listed {
                    name: Arc::clone(&slot.name),
                    tally: slot.tally.clone(),
                    whole: slot.whole,
                    top_by: vec![Criterion::Latency],
                }),
            }
        }
    }

    /// Every name seen is listed, with its whole figures: no name was ever replaced, and
    /// the listed union holds every tracked name.
    pub fn complete(&self) -> bool {
        let requests = &self.lists[0];
        !self.lists.iter().any(|l| l.replaced)
            && requests.slots.len() <= LISTED
            && requests.weights.iter().all(|&w| w > 0)
    }
}

/// Both dimensions of a run.
#[derive(Debug, Default)]
pub struct Attribution {
    pub repositories: Dimension,
    pub clients: Dimension,
}

impl Attribution {
    /// Counts a workload operation for whom it was for (an exchange inside an operation,
    /// or a session over several, is not counted: its operations are).
    pub fn record(&mut self, who: &Who, s: &Sample) {
        if s.op.level() != Level::Operation {
            return;
        }
        let seen = Seen::of(s);
        if let Some(r) = &who.repository {
            self.repositories.record(r, seen);
        }
        if let Some(c) = &who.client {
            self.clients.record(c, seen);
        }
    }

    /// Whether any operation was counted.
    pub fn is_empty(&self) -> bool {
        self.repositories.held() == 0 && self.clients.held() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ErrorKind, HttpStatuses, Op, Outcome, SizeClass, Timing};
    use std::time::Duration;
    use tokio::time::Instant;

    fn sample(ms: u64, bytes: u64, ok: bool) -> Sample {
        let sent = Instant::now();
        Sample {
            op: Op::BlobGet,
            outcome: if ok {
                Outcome::Ok
            } else {
                Outcome::Error(ErrorKind::Http(500))
            },
            size_class: SizeClass::of(bytes),
            timing: Timing {
                intended: None,
                ready: None,
                sent,
                first_byte: None,
                end: sent + Duration::from_millis(ms),
            },
            bytes_sent: 0,
            bytes_received: bytes,
            http: HttpStatuses::NONE,
        }
    }

    fn who(repo: &str) -> Who {
        Who {
            repository: Some(Arc::from(repo)),
            client: None,
        }
    }

    /// The dimension's index names exactly the tracked names, each with its slot in every
    /// ranking, however names come and go.
    #[test]
    fn the_index_follows_every_ranking() {
        let mut a = Attribution::default();
        let mut state = 7u64;
        for i in 0..5_000u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            // A few heavy names, many rare ones; some failures, sizes that vary.
            let n = if state >> 60 < 6 {
                state >> 61
            } else {
                state >> 40 & 255
            };
            let ok = (state >> 20) % 7 != 0;
            a.record(
                &who(&format!("r{n}")),
                &sample(1 + i % 13, (state >> 30) % 10_000, ok),
            );
        }
        let d = &a.repositories;
        let mut expected: FastHashMap<Arc<str>, Slots> = FastHashMap::default();
        for (r, list) in d.lists.iter().enumerate() {
            assert_eq!(list.slots.len(), TRACKED);
            for (i, slot) in list.slots.iter().enumerate() {
                expected
                    .entry(Arc::clone(&slot.name))
                    .or_insert([UNTRACKED; 4])[r] = u8::try_from(i).unwrap();
            }
        }
        assert_eq!(d.index, expected);
        assert!(d.lists.iter().all(|l| l.replaced));
    }

    #[test]
    fn few_names_are_listed_whole_and_complete() {
        let mut a = Attribution::default();
        for _ in 0..10 {
            a.record(&who("small"), &sample(2, 1_000, true));
        }
        for _ in 0..3 {
            a.record(&who("large"), &sample(80, 10_000_000, true));
        }
        a.record(&who("broken"), &sample(5, 0, false));
        let listed = a.repositories.listed();
        assert!(a.repositories.complete());
        assert_eq!(listed[0].name.as_ref(), "large", "heaviest in time first");
        assert_eq!(listed[0].tally.count, 3);
        assert_eq!(listed[0].tally.bytes, 30_000_000);
        assert!(listed.iter().all(|l| l.whole));
        let broken = listed.iter().find(|l| &*l.name == "broken").unwrap();
        assert_eq!(broken.tally.errors, 1);
        assert!(broken.top_by.contains(&Criterion::Errors));
        assert!(broken.tally.latency.is_empty(), "failures have no latency");
        let small = listed.iter().find(|l| &*l.name == "small").unwrap();
        assert!(!small.top_by.contains(&Criterion::Errors));
        assert!(a.clients.listed().is_empty());
    }

    #[test]
    fn a_heavy_name_stays_on_top_of_a_hundred_thousand_others() {
        // 100k distinct repositories of one small request each, and one repository of large
        // slow reads every 50 requests: memory stays at the bound, and the heavy one tops
        // the time and bytes rankings with its whole figures.
        let mut a = Attribution::default();
        let heavy = who("heavy");
        let mut heavy_count = 0;
        for i in 0..100_000u64 {
            a.record(&who(&format!("repo-{i}")), &sample(1, 100, true));
            if i % 50 == 0 {
                a.record(&heavy, &sample(40, 5_000_000, true));
                heavy_count += 1;
            }
            assert!(a.repositories.held() <= 4 * TRACKED);
        }
        let listed = a.repositories.listed();
        assert!(listed.len() <= 4 * LISTED);
        assert!(!a.repositories.complete());
        let top = &listed[0];
        assert_eq!(&*top.name, "heavy");
        assert!(top.top_by.contains(&Criterion::Time));
        assert!(top.top_by.contains(&Criterion::Bytes));
        assert!(top.whole, "tracked from its first read: never the least");
        assert_eq!(top.tally.count, heavy_count);
        let held: usize = a
            .repositories
            .lists
            .iter()
            .flat_map(|l| &l.slots)
            .map(|s| s.tally.latency.buckets())
            .sum();
        assert!(held <= 4 * TRACKED * 2, "few buckets each: {held}");
    }

    #[test]
    fn a_name_that_took_a_failing_entrys_place_is_not_listed_for_failures() {
        let mut a = Attribution::default();
        for i in 0..TRACKED {
            a.record(&who(&format!("failing-{i}")), &sample(3, 10, false));
        }
        // Successes of new names replace the failing entries, inheriting their weight.
        for i in 0..TRACKED {
            a.record(&who(&format!("fine-{i}")), &sample(3, 10, true));
        }
        for l in a.repositories.listed() {
            if l.top_by.contains(&Criterion::Errors) {
                assert!(
                    l.tally.errors > 0,
                    "{} listed for failures it did not have",
                    l.name
                );
            }
        }
    }

    #[test]
    fn latency_is_cut_to_two_significant_digits() {
        let mut t = Tally::default();
        t.add_sample(&sample(123, 0, true));
        let (value, _) = t.latency.iter().next().unwrap();
        let exact = 123_000.0;
        assert!((value as f64 - exact).abs() / exact < 0.01, "{value}");
    }

    #[test]
    fn sessions_and_exchanges_are_not_attributed() {
        let mut a = Attribution::default();
        let mut s = sample(5, 10, true);
        s.op = Op::ImagePull;
        a.record(&who("r"), &s);
        s.op = Op::UploadPatch;
        a.record(&who("r"), &s);
        assert!(a.is_empty());
    }
}
