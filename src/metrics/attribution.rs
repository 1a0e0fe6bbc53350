//! Attribution: which repositories and which clients the run's operations were for, and
//! what each cost (requests, errors, bytes, time spent, latency percentiles).
//!
//! A trace can name hundreds of thousands of repositories, so nothing here grows with them:
//! each dimension (repository, client) keeps, for each ranking (requests, time spent, bytes,
//! errors), a bounded Space-Saving summary of [`TRACKED`] entries (Metwally, Agrawal and El
//! Abbadi, 2005). A name not tracked replaces the entry of least weight and inherits that
//! weight (in the rankings its operation weighs in: a success adds nothing to the failures'
//! and leaves that ranking as it is), so a tracked weight never underestimates the truth
//! and overestimates it by at most the weight it inherited; every name whose share of a
//! ranking's total exceeds 1/[`TRACKED`] is tracked. A tracked name's own figures (its [`Tally`]) are kept once,
//! however many rankings track it, and count its operations since one of them began to:
//! they are the whole truth ([`Slot::whole`]) when that was the name's first operation,
//! which holds for every name until some name loses its last place. Results list the top
//! [`LISTED`] of each ranking.
//!
//! Percentiles come from each entry's successes in a sparse histogram whose values are cut
//! to two significant digits (within 0.8%), so an entry holds at most a few thousand
//! buckets and usually a few hundred, and replacing an entry clears only what it held.

use std::hash::BuildHasher as _;
use std::sync::{Arc, OnceLock};

use hashbrown::HashTable;
use hdrhistogram::Histogram;

use super::hist::{Recording, SparseHistogram, HISTOGRAM_SETTINGS};
use super::{Level, Sample, Spans};
use crate::fast_hash::FastState;

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

/// What a sample brings to the rankings, read from it once (each sample feeds eight of
/// them: four rankings of repositories and four of clients).
#[derive(Debug, Clone, Copy)]
struct Seen {
    us: u64,
    bytes: u64,
    ok: bool,
}

impl Seen {
    fn of(s: &Sample, spans: &Spans) -> Seen {
        Seen {
            us: spans.latency_us,
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
        self.add_seen(Seen::of(s, &Spans::of(&s.timing)));
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

/// A name some ranking tracks, with its figures since then: one per name, shared by every
/// ranking that tracks it (each operation is counted once, not once per ranking).
#[derive(Debug, Clone)]
pub struct Slot {
    pub name: Arc<str>,
    /// The name's hash in the dimension's index.
    hash: u64,
    /// Tracked since the name's first operation: its tally is the whole truth.
    pub whole: bool,
    pub tally: Tally,
    /// Its place in each ranking ([`Criterion::ALL`] order), [`UNTRACKED`] where it has
    /// none; a slot with no place is free.
    places: Places,
}

impl Slot {
    fn in_use(&self) -> bool {
        self.places != [UNTRACKED; 4]
    }
}

/// A slot's place in each ranking.
type Places = [u8; 4];
const UNTRACKED: u8 = u8::MAX;
// A dimension holds at most 4 × TRACKED slots in use and one being placed, each an index
// below UNTRACKED.
const _: () = assert!(4 * TRACKED < UNTRACKED as usize);

/// A Space-Saving summary of one ranking: the slots it tracks and each one's weight, as a
/// binary min-heap by weight (the least at the root). A name not tracked takes the root's
/// place and sinks, and a tracked name's weight grows by sinking it: a few steps down a heap
/// of [`TRACKED`] entries, where every new name scanned all the weights for the least twice.
/// Operations of many names record a third faster (`cargo bench --bench histograms --
/// attribution`, docs/benchmarks.md, "The hot path", step 52).
#[derive(Debug)]
struct TopList {
    criterion: Criterion,
    /// The dimension's slots it tracks, in heap order.
    slots: Vec<u8>,
    /// Each tracked slot's weight in the ranking (its own plus what it inherited), beside
    /// `slots`: the heap's comparisons read only these, a few cache lines.
    weights: Vec<u64>,
}

impl TopList {
    fn new(criterion: Criterion) -> TopList {
        TopList {
            criterion,
            slots: Vec::with_capacity(TRACKED),
            weights: Vec::with_capacity(TRACKED),
        }
    }

    /// Gives slot `slot` a place with weight `w`: a free place, or the least entry's (the
    /// root's), whose weight it inherits; every slot that moves is told its place in `all`
    /// (ranking `r`). The slot whose place it took, which has none left in this ranking.
    fn place(&mut self, slot: u8, w: u64, all: &mut [Slot], r: usize) -> Option<u8> {
        if self.slots.len() < TRACKED {
            self.slots.push(slot);
            self.weights.push(w);
            self.rise(self.slots.len() - 1, all, r);
            return None;
        }
        let evicted = std::mem::replace(&mut self.slots[0], slot);
        self.weights[0] = self.weights[0].saturating_add(w);
        all[usize::from(evicted)].places[r] = UNTRACKED;
        all[usize::from(slot)].places[r] = 0;
        self.sink(0, all, r);
        Some(evicted)
    }

    /// Adds `w` to the weight of the entry at `place`.
    fn add(&mut self, place: u8, w: u64, all: &mut [Slot], r: usize) {
        let i = usize::from(place);
        self.weights[i] = self.weights[i].saturating_add(w);
        self.sink(i, all, r);
    }

    /// Moves the entry at `i` down while a child weighs less (its weight grew); where it
    /// stays, its place is already known.
    fn sink(&mut self, start: usize, all: &mut [Slot], r: usize) {
        let n = self.weights.len();
        let mut i = start;
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.weights[right] < self.weights[left] {
                right
            } else {
                left
            };
            if self.weights[child] >= self.weights[i] {
                break;
            }
            self.swap(i, child, all, r);
            i = child;
        }
        if i != start {
            all[usize::from(self.slots[i])].places[r] = index_u8(i);
        }
    }

    /// Moves the entry at `i` up while its parent weighs more (it was just added).
    fn rise(&mut self, mut i: usize, all: &mut [Slot], r: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.weights[parent] <= self.weights[i] {
                break;
            }
            self.swap(i, parent, all, r);
            i = parent;
        }
        all[usize::from(self.slots[i])].places[r] = index_u8(i);
    }

    /// Swaps the entries at `i` and `j`; the one now at `i` is told its place.
    fn swap(&mut self, i: usize, j: usize, all: &mut [Slot], r: usize) {
        self.weights.swap(i, j);
        self.slots.swap(i, j);
        all[usize::from(self.slots[i])].places[r] = index_u8(i);
    }

    /// The top `n` tracked slots by weight (heaviest first, then by name), those with
    /// nothing of their own in the ranking left out (a name that took a failing entry's
    /// place by a success inherits its weight, not its failures).
    fn top<'a>(&self, all: &'a [Slot], n: usize) -> Vec<(u8, &'a Slot)> {
        let mut ranked: Vec<(u64, u8, &Slot)> = self
            .weights
            .iter()
            .zip(&self.slots)
            .map(|(&w, &i)| (w, i, &all[usize::from(i)]))
            .filter(|&(w, _, s)| w > 0 && self.criterion.of(&s.tally) > 0)
            .collect();
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.name.cmp(&b.2.name)));
        ranked.truncate(n);
        ranked.into_iter().map(|(_, i, s)| (i, s)).collect()
    }
}

fn index_u8(i: usize) -> u8 {
    u8::try_from(i).unwrap_or_else(|_| unreachable!("{i} slots: more than the bound"))
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

/// One dimension (repositories or clients): a summary per ranking over one set of slots,
/// one per name any of them tracks, and the index of those names (a name is looked up once
/// per operation, and counted once, whatever the rankings tracking it).
#[derive(Debug)]
pub struct Dimension {
    lists: [TopList; 4],
    slots: Vec<Slot>,
    /// Slots that no ranking tracks any more, to be used again.
    free: Vec<u8>,
    /// The slots in use by their names' hashes (each slot keeps its name and hash: a name
    /// is hashed once per operation, and a slot given up leaves the index by its number).
    index: HashTable<u8>,
    hasher: FastState,
    /// Some name lost its last place: names seen may be missing, and a name tracked anew
    /// may have been seen before.
    forgot: bool,
}

impl Default for Dimension {
    fn default() -> Dimension {
        Dimension {
            lists: Criterion::ALL.map(TopList::new),
            slots: Vec::new(),
            free: Vec::new(),
            index: HashTable::new(),
            hasher: FastState::default(),
            forgot: false,
        }
    }
}

impl Dimension {
    /// Counts an operation of `name`. A ranking the operation adds nothing to (a success,
    /// to the failures; a read of no bytes, to the bytes) leaves the name where it is: in
    /// a Space-Saving summary an arrival of weight 0 changes no count, and placing it would
    /// only push out an entry for the same weight.
    fn record(&mut self, name: &Arc<str>, s: Seen) {
        let hash = self.hasher.hash_one(&**name);
        let slots = &self.slots;
        let found = self.index.find(hash, |&at| {
            let slot = &slots[usize::from(at)];
            Arc::ptr_eq(&slot.name, name) || *slot.name == **name
        });
        let at = match found {
            Some(&at) => {
                let slot = &mut self.slots[usize::from(at)];
                slot.tally.add_seen(s);
                let places = slot.places;
                for (r, &place) in places.iter().enumerate() {
                    let w = self.lists[r].criterion.weight(&s);
                    if w == 0 {
                        continue;
                    }
                    if place == UNTRACKED {
                        self.place(at, r, w);
                    } else {
                        self.lists[r].add(place, w, &mut self.slots, r);
                    }
                }
                return;
            }
            None => self.new_slot(name, hash),
        };
        self.slots[usize::from(at)].tally.add_seen(s);
        for r in 0..self.lists.len() {
            let w = self.lists[r].criterion.weight(&s);
            if w > 0 {
                self.place(at, r, w);
            }
        }
        // Every operation weighs 1 in the requests' ranking: the name has a place.
        debug_assert!(self.slots[usize::from(at)].in_use());
        let slots = &self.slots;
        self.index
            .insert_unique(hash, at, |&i| slots[usize::from(i)].hash);
    }

    /// A slot for `name` (of hash `hash`), tracked by no ranking yet: a free one, or a new
    /// one.
    fn new_slot(&mut self, name: &Arc<str>, hash: u64) -> u8 {
        let whole = !self.forgot;
        if let Some(at) = self.free.pop() {
            let slot = &mut self.slots[usize::from(at)];
            slot.name = Arc::clone(name);
            slot.hash = hash;
            slot.whole = whole;
            slot.tally.clear();
            return at;
        }
        // Room for the most slots there can be, at once: no growth past the bound.
        self.slots
            .reserve_exact((4 * TRACKED + 1).saturating_sub(self.slots.len()));
        self.slots.push(Slot {
            name: Arc::clone(name),
            hash,
            whole,
            tally: Tally::default(),
            places: [UNTRACKED; 4],
        });
        index_u8(self.slots.len() - 1)
    }

    /// Places slot `at` in ranking `r` with weight `w`; the slot whose place it took loses
    /// it, and is freed (with its index entry) if that was its last.
    fn place(&mut self, at: u8, r: usize, w: u64) {
        let Some(evicted) = self.lists[r].place(at, w, &mut self.slots, r) else {
            return;
        };
        let slot = &self.slots[usize::from(evicted)];
        if !slot.in_use() {
            if let Ok(entry) = self.index.find_entry(slot.hash, |&i| i == evicted) {
                entry.remove();
            }
            self.free.push(evicted);
            self.forgot = true;
        }
    }

    /// The slot of `name`, if it is tracked.
    #[cfg(test)]
    fn slot_of(&self, name: &str) -> Option<u8> {
        let slots = &self.slots;
        self.index
            .find(self.hasher.hash_one(name), |&at| {
                *slots[usize::from(at)].name == *name
            })
            .copied()
    }

    /// Names tracked (at most 4 × [`TRACKED`]).
    pub fn held(&self) -> usize {
        self.index.len()
    }

    /// The union of each ranking's top [`LISTED`], each name once, heaviest in time spent
    /// first.
    pub fn listed(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        let mut listed_at: Vec<Option<usize>> = vec![None; self.slots.len()];
        let mut list = |at: u8, slot: &Slot, criterion: Criterion| {
            let at = usize::from(at);
            match listed_at[at] {
                Some(i) => out[i].top_by.push(criterion),
                None => {
                    listed_at[at] = Some(out.len());
                    out.push(Listed {
                        name: Arc::clone(&slot.name),
                        tally: slot.tally.clone(),
                        whole: slot.whole,
                        top_by: vec![criterion],
                    });
                }
            }
        };
        for ranking in &self.lists {
            for (at, slot) in ranking.top(&self.slots, LISTED) {
                list(at, slot, ranking.criterion);
            }
        }
        for (at, slot) in self.slowest() {
            list(at, slot, Criterion::Latency);
        }
        out.sort_by(|a, b| {
            b.tally
                .time_us
                .cmp(&a.tally.time_us)
                .then_with(|| a.name.cmp(&b.name))
        });
        out
    }

    /// Slowness ranked over every name any ranking tracks: the top [`LISTED`] by
    /// [`SLOW_QUANTILE`].
    fn slowest(&self) -> Vec<(u8, &Slot)> {
        let mut ranked: Vec<(u8, &Slot, u64)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.in_use())
            .map(|(i, s)| (index_u8(i), s, Criterion::Latency.of(&s.tally)))
            .filter(|&(_, _, v)| v > 0)
            .collect();
        ranked.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.name.cmp(&b.1.name)));
        ranked
            .into_iter()
            .take(LISTED)
            .map(|(i, s, _)| (i, s))
            .collect()
    }

    /// Every name seen is listed, with its whole figures: no name was ever replaced, and
    /// the listed union holds every tracked name.
    pub fn complete(&self) -> bool {
        let requests = &self.lists[0];
        !self.forgot && requests.slots.len() <= LISTED && requests.weights.iter().all(|&w| w > 0)
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
        self.record_spans(who, s, &Spans::of(&s.timing));
    }

    /// [`Self::record`] of a sample whose durations are `spans`.
    pub fn record_spans(&mut self, who: &Who, s: &Sample, spans: &Spans) {
        if s.op.level() != Level::Operation {
            return;
        }
        let seen = Seen::of(s, spans);
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
    use crate::fast_hash::FastHashMap;
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

    /// The dimension's index names exactly the slots in use, each slot's places are where
    /// the rankings hold it, and every operation is counted once in its name's tally,
    /// however names come and go.
    #[test]
    fn the_index_follows_every_ranking() {
        let mut a = Attribution::default();
        let mut state = 7u64;
        let mut counts: FastHashMap<String, u64> = FastHashMap::default();
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
            let ok = !(state >> 20).is_multiple_of(7);
            let name = format!("r{n}");
            a.record(&who(&name), &sample(1 + i % 13, (state >> 30) % 10_000, ok));
            *counts.entry(name).or_default() += 1;
        }
        let d = &a.repositories;
        let mut places: FastHashMap<u8, Places> = FastHashMap::default();
        for (r, list) in d.lists.iter().enumerate() {
            assert_eq!(list.slots.len(), TRACKED);
            // A min-heap: no entry weighs less than its parent, so the root is the least.
            for i in 1..list.weights.len() {
                assert!(
                    list.weights[(i - 1) / 2] <= list.weights[i],
                    "ranking {r}, {i}"
                );
            }
            for (i, &at) in list.slots.iter().enumerate() {
                places.entry(at).or_insert([UNTRACKED; 4])[r] = u8::try_from(i).unwrap();
            }
        }
        let mut indexed: Vec<u8> = d.index.iter().copied().collect();
        indexed.sort_unstable();
        let mut placed: Vec<u8> = places.keys().copied().collect();
        placed.sort_unstable();
        assert_eq!(indexed, placed);
        for &at in &indexed {
            assert_eq!(d.slot_of(&d.slots[usize::from(at)].name), Some(at));
        }
        for (i, slot) in d.slots.iter().enumerate() {
            let at = u8::try_from(i).unwrap();
            assert_eq!(
                slot.places,
                places.get(&at).copied().unwrap_or([UNTRACKED; 4])
            );
            assert_eq!(slot.in_use(), !d.free.contains(&at), "slot {i}");
            if slot.in_use() {
                // Never more than the name's own operations; all of them if whole.
                let all = counts[&*slot.name];
                assert!(slot.tally.count <= all);
                if slot.whole {
                    assert_eq!(slot.tally.count, all, "{}", slot.name);
                }
            }
        }
        assert!(d.slots.len() <= 4 * TRACKED + 1);
        assert!(d.forgot);
        // The heavy names (three eighths of the operations over three of them) stay
        // tracked, whole.
        for heavy in ["r0", "r1", "r2"] {
            let slot = &d.slots[usize::from(d.slot_of(heavy).unwrap())];
            assert!(slot.whole, "{heavy}");
            assert_eq!(slot.tally.count, counts[heavy]);
        }
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
            .slots
            .iter()
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
    fn an_operation_of_no_weight_in_a_ranking_leaves_that_ranking_alone() {
        let mut a = Attribution::default();
        a.record(&who("failing"), &sample(3, 10, false));
        // A thousand other names, each a success of no bytes.
        for i in 0..1_000 {
            a.record(&who(&format!("fine-{i}")), &sample(3, 0, true));
        }
        let d = &a.repositories;
        let list = |c: Criterion| d.lists.iter().find(|l| l.criterion == c).unwrap();
        let names = |c: Criterion| -> Vec<&str> {
            list(c)
                .slots
                .iter()
                .map(|&at| &*d.slots[usize::from(at)].name)
                .collect()
        };
        // Failures and bytes are ranked over the one name that had any, with its own
        // weight only (nothing inherited from entries pushed out for no weight).
        assert_eq!(names(Criterion::Errors), ["failing"]);
        assert_eq!(names(Criterion::Bytes), ["failing"]);
        assert_eq!(list(Criterion::Errors).weights, [1]);
        assert_eq!(list(Criterion::Bytes).weights, [10]);
        assert_eq!(list(Criterion::Requests).slots.len(), TRACKED);
        let failing = d.slot_of("failing").unwrap();
        assert!(d.slots[usize::from(failing)].whole);
        assert!(d.held() <= 2 * TRACKED);
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
