//! `trace stats`: the FAST'18 characterization of a trace, computed in one streaming pass.
//!
//! Owns [`TraceStats`] (the report, whose JSON field names are a contract), its computation
//! ([`compute_stats`]); its text is `report::analysis::trace_stats`.
//!
//! Memory: constant in the number of records except for what grows with *distinct objects*
//! — per-layer, per-manifest, per-repository and per-client request counts (exact, for the
//! popularity ranking) and the reader's name interner. Objects are far fewer than records
//! (FAST'18: 38 M requests over some 1.3 M layers), so this is the one deliberate exception.
//! Everything else is bounded: HDR histograms (3 significant digits) for sizes, per-minute
//! rates, per-minute active clients and inter-arrival times; one minute of active clients;
//! the manifest GETs of one session window.
//!
//! What counts: every valid record the reader returns, including requests that failed in
//! the original (they are also counted in `skipped.failed_in_trace`, the records a replay
//! would skip by default). Duplicates (same log `id` within the dedup window) and invalid
//! records are counted in `skipped` and nothing else. Sizes, layer and manifest popularity
//! and sessions use only successful requests (status 2xx, or no status at all); request
//! counts per method, kind, status, repository and client use all.
//!
//! Minutes are UTC wall-clock minutes from the first record's to the last's, empty minutes
//! included. A record that arrives out of order (beyond the reader's reorder window) is
//! counted in the current minute.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::trace::synth::format_ms;
use crate::trace::{
    Interner, Item, Kind, Method, ReadOptions, Record, SkipReason, Sym, Target, TraceError,
    TraceInput, TraceReader,
};

/// How [`compute_stats`] reads and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsOptions {
    /// Entries in each top-N popularity list.
    pub top: usize,
    /// A manifest GET counts as followed by a layer GET when one comes from the same client
    /// and repository within this long after it (FAST'18 used 1 minute).
    pub session_window: Duration,
    /// Duplicate detection window (log `id`s), as in [`ReadOptions::dedup_window`].
    pub dedup_window: Duration,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            top: 10,
            session_window: Duration::from_secs(60),
            dedup_window: ReadOptions::default().dedup_window,
        }
    }
}

/// The characterization of a trace. Field names are stable (scripts read the JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Input files read.
    pub files: usize,
    /// Records analyzed (valid, not duplicates; failed originals included).
    pub records: u64,
    /// Time of the earliest and latest record, RFC 3339 UTC with milliseconds.
    pub first: Option<String>,
    pub last: Option<String>,
    /// Seconds from the earliest to the latest record.
    pub span_s: f64,
    /// Records per HTTP method (`GET`, `HEAD`, ...).
    pub by_method: BTreeMap<String, u64>,
    /// Records per object kind: `manifest`, `blob`, `upload`, `other`.
    pub by_kind: BTreeMap<String, u64>,
    pub by_status: StatusCounts,
    /// Image-level operations and request ratios.
    pub operations: Operations,
    /// Sizes (`http.response.written`) of successful requests, by method then kind.
    pub sizes: BTreeMap<String, BTreeMap<String, SizeStats>>,
    /// Requests per UTC minute.
    pub rate_per_minute: RateStats,
    pub popularity: Popularity,
    /// Manifest GET → layer GET correlation within client sessions.
    pub sessions: SessionStats,
    /// Distinct clients active per UTC minute.
    pub concurrency: Quantiles,
    /// Time between consecutive records, ms.
    pub interarrival_ms: Quantiles,
    pub skipped: Skipped,
    /// Records the reader returned earlier than one before them (disorder it could not fix).
    pub out_of_order: u64,
}

/// Records per status class (`2xx`, ..., `none` when absent) and per exact code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    pub classes: BTreeMap<String, u64>,
    pub codes: BTreeMap<String, u64>,
}

/// Pulls and pushes (image-level: a manifest GET is a pull, a manifest PUT a push, whatever
/// the status) and the request mix. Ratios are `null` when their denominator is zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Operations {
    /// Manifest GETs.
    pub pulls: u64,
    /// Manifest PUTs.
    pub pushes: u64,
    /// pulls / (pulls + pushes).
    pub pull_ratio: Option<f64>,
    /// Blob GETs.
    pub layer_gets: u64,
    /// Upload-closing PUTs (one per pushed layer).
    pub layer_puts: u64,
    /// Manifest GETs per blob GET.
    pub manifest_per_layer_get: Option<f64>,
    /// Manifest PUTs per upload PUT.
    pub manifest_per_layer_put: Option<f64>,
    /// All PUTs per PATCH (FAST'18: 1.9–5.8).
    pub put_patch_ratio: Option<f64>,
    /// Share of requests that are GET, and HEAD.
    pub get_share: Option<f64>,
    pub head_share: Option<f64>,
}

/// Quantiles of a distribution (nearest HDR bucket, 3 significant digits). All zero when
/// `count` is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub count: u64,
    pub mean: f64,
    pub min: u64,
    pub p5: u64,
    pub p10: u64,
    pub p25: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>) -> Quantiles {
        if h.is_empty() {
            return Quantiles::default();
        }
        let q = |p: f64| h.value_at_quantile(p);
        Quantiles {
            count: h.len(),
            mean: h.mean(),
            min: h.min(),
            p5: q(0.05),
            p10: q(0.10),
            p25: q(0.25),
            p50: q(0.50),
            p75: q(0.75),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            max: h.max(),
        }
    }

    /// The same figures held to the exact smallest and largest value: no quantile reported
    /// beyond what was seen (a bucket's edge lies up to 0.1% past it).
    fn within(self, min: u64, max: u64) -> Quantiles {
        if self.count == 0 {
            return self;
        }
        let clamp = |v: u64| v.clamp(min, max);
        Quantiles {
            min,
            p5: clamp(self.p5),
            p10: clamp(self.p10),
            p25: clamp(self.p25),
            p50: clamp(self.p50),
            p75: clamp(self.p75),
            p90: clamp(self.p90),
            p95: clamp(self.p95),
            p99: clamp(self.p99),
            max,
            ..self
        }
    }
}

/// Size quantiles in bytes, the total, and the shares below 1 MB and 10 MB (decimal, as
/// FAST'18 reports them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeStats {
    #[serde(flatten)]
    pub quantiles: Quantiles,
    pub bytes: u64,
    pub share_below_1mb: f64,
    pub share_below_10mb: f64,
}

/// Requests per minute over every minute of the span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RateStats {
    #[serde(flatten)]
    pub quantiles: Quantiles,
    /// Share of minutes with at least 100 requests (FAST'18: dal 80%).
    pub share_minutes_at_least_100: f64,
}

/// Popularity rankings. Layers and manifests count successful GETs; repositories and
/// clients count every request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Popularity {
    pub layers: Ranking,
    pub manifests: Ranking,
    pub repositories: Ranking,
    pub clients: Ranking,
}

/// One popularity ranking.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    pub requests: u64,
    pub distinct: u64,
    /// Share of `requests` that go to the most requested 1% of the distinct objects (at
    /// least one object).
    pub top_1pct_share: Option<f64>,
    /// The most requested, most first (ties by name). Manifests are `repo:reference`.
    pub top: Vec<Ranked>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranked {
    pub name: String,
    pub count: u64,
}

/// Manifest GET → layer GET correlation (FAST'18 §4.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionStats {
    pub window_s: f64,
    /// Successful manifest GETs with a client.
    pub manifest_gets: u64,
    /// Of those, followed by at least one successful layer GET from the same client and
    /// repository within the window.
    pub followed: u64,
    /// Not followed (including those whose window the trace's end cut short).
    pub not_followed: u64,
    pub not_followed_share: Option<f64>,
    /// Manifest GETs without a client, left out.
    pub unattributed: u64,
}

/// Records not analyzed, and the failed originals that are (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub invalid: u64,
    pub duplicate: u64,
    /// Counted in `records` and everywhere else; a replay skips these by default.
    pub failed_in_trace: u64,
}

/// The sizes of one method and kind: their histogram, total, and exact smallest and
/// largest.
type SizeTally = (Histogram<u64>, u64, u64, u64);

/// Bounds of every histogram here: 1 .. 16 TiB (sizes), 3 significant digits.
fn histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 1 << 44, 3) {
        Ok(h) => h,
        // Constant, valid bounds.
        Err(e) => unreachable!("invalid histogram bounds: {e}"),
    }
}

/// `a / b`, none when `b` is 0.
pub(crate) fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Whether the original request succeeded (2xx, or no status recorded).
fn succeeded(r: &Record) -> bool {
    r.status == 0 || (200..300).contains(&r.status)
}

/// Everything accumulated during the pass.
struct Acc {
    opts: StatsOptions,
    records: u64,
    first_ms: Option<i64>,
    last_ms: Option<i64>,
    by_method: BTreeMap<Method, u64>,
    by_kind: BTreeMap<Kind, u64>,
    by_status: BTreeMap<u16, u64>,
    pulls: u64,
    pushes: u64,
    layer_gets: u64,
    layer_puts: u64,
    /// Per method and kind: the sizes' histogram, their total, and the exact smallest and
    /// largest (a histogram's bucket edges lie up to 0.1% beyond them).
    sizes: BTreeMap<(Method, Kind), SizeTally>,
    minute: Option<i64>,
    minute_requests: u64,
    minute_clients: HashSet<Sym>,
    rate: Histogram<u64>,
    concurrency: Histogram<u64>,
    previous_ms: Option<i64>,
    interarrival: Histogram<u64>,
    layers: HashMap<Sym, u64>,
    manifests: HashMap<(Sym, Sym), u64>,
    repositories: HashMap<Sym, u64>,
    clients: HashMap<Sym, u64>,
    pending: HashMap<(Sym, Sym), VecDeque<i64>>,
    last_sweep_ms: i64,
    sessions: SessionStats,
    skipped: Skipped,
}

impl Acc {
    fn new(opts: StatsOptions) -> Self {
        Acc {
            sessions: SessionStats {
                window_s: opts.session_window.as_secs_f64(),
                ..SessionStats::default()
            },
            opts,
            records: 0,
            first_ms: None,
            last_ms: None,
            by_method: BTreeMap::new(),
            by_kind: BTreeMap::new(),
            by_status: BTreeMap::new(),
            pulls: 0,
            pushes: 0,
            layer_gets: 0,
            layer_puts: 0,
            sizes: BTreeMap::new(),
            minute: None,
            minute_requests: 0,
            minute_clients: HashSet::new(),
            rate: histogram(),
            concurrency: histogram(),
            previous_ms: None,
            interarrival: histogram(),
            layers: HashMap::new(),
            manifests: HashMap::new(),
            repositories: HashMap::new(),
            clients: HashMap::new(),
            pending: HashMap::new(),
            last_sweep_ms: i64::MIN,
            skipped: Skipped::default(),
        }
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.opts.session_window.as_millis()).unwrap_or(i64::MAX)
    }

    fn add(&mut self, r: &Record) {
        let t = r.time_ms;
        self.records += 1;
        self.first_ms = Some(self.first_ms.map_or(t, |f| f.min(t)));
        self.last_ms = Some(self.last_ms.map_or(t, |l| l.max(t)));
        *self.by_method.entry(r.method).or_default() += 1;
        *self.by_kind.entry(r.target.kind()).or_default() += 1;
        *self.by_status.entry(r.status).or_default() += 1;
        if r.failed_in_trace() {
            self.skipped.failed_in_trace += 1;
        }
        match (r.method, r.target) {
            (Method::Get, Target::Manifest { .. }) => self.pulls += 1,
            (Method::Put, Target::Manifest { .. }) => self.pushes += 1,
            (Method::Get, Target::Blob { .. }) => self.layer_gets += 1,
            (Method::Put, Target::Upload { .. }) => self.layer_puts += 1,
            _ => {}
        }
        let ok = succeeded(r);
        if ok && matches!(r.method, Method::Get | Method::Put | Method::Patch) {
            let (h, bytes, min, max) = self
                .sizes
                .entry((r.method, r.target.kind()))
                .or_insert_with(|| (histogram(), 0, u64::MAX, 0));
            h.saturating_record(r.size);
            *bytes = bytes.saturating_add(r.size);
            *min = (*min).min(r.size);
            *max = (*max).max(r.size);
        }
        self.count_minute(r);
        if let Some(prev) = self.previous_ms {
            self.interarrival
                .saturating_record(t.saturating_sub(prev).max(0) as u64);
        }
        self.previous_ms = Some(t);
        if let Some(repo) = r.target.repo() {
            *self.repositories.entry(repo).or_default() += 1;
        }
        if let Some(client) = r.client {
            *self.clients.entry(client).or_default() += 1;
        }
        if ok && r.method == Method::Get {
            match r.target {
                Target::Blob { digest, .. } => *self.layers.entry(digest).or_default() += 1,
                Target::Manifest { repo, reference } => {
                    *self.manifests.entry((repo, reference)).or_default() += 1
                }
                _ => {}
            }
            self.session(r);
        }
    }

    /// Per-minute request counts and active clients; empty minutes count as zeros.
    fn count_minute(&mut self, r: &Record) {
        let minute = r.time_ms.div_euclid(60_000);
        match self.minute {
            None => self.minute = Some(minute),
            Some(current) if minute > current => {
                self.flush_minute();
                let empty = (minute - current - 1) as u64;
                if empty > 0 {
                    let _ = self.rate.record_n(0, empty);
                    let _ = self.concurrency.record_n(0, empty);
                }
                self.minute = Some(minute);
            }
            Some(_) => {}
        }
        self.minute_requests += 1;
        if let Some(c) = r.client {
            self.minute_clients.insert(c);
        }
    }

    fn flush_minute(&mut self) {
        self.rate.saturating_record(self.minute_requests);
        self.concurrency
            .saturating_record(self.minute_clients.len() as u64);
        self.minute_requests = 0;
        self.minute_clients.clear();
    }

    /// Manifest GET → layer GET bookkeeping for a successful GET.
    fn session(&mut self, r: &Record) {
        let window = self.window_ms();
        let t = r.time_ms;
        if t.saturating_sub(self.last_sweep_ms) >= window {
            self.sweep(Some(t));
            self.last_sweep_ms = t;
        }
        let (Some(client), Some(repo)) = (r.client, r.target.repo()) else {
            if matches!(r.target, Target::Manifest { .. }) {
                self.sessions.unattributed += 1;
            }
            return;
        };
        match r.target {
            Target::Manifest { .. } => {
                self.sessions.manifest_gets += 1;
                self.pending.entry((client, repo)).or_default().push_back(t);
            }
            Target::Blob { .. } => {
                if let Some(waiting) = self.pending.remove(&(client, repo)) {
                    for tm in waiting {
                        if t.saturating_sub(tm) <= window {
                            self.sessions.followed += 1;
                        } else {
                            self.sessions.not_followed += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Counts manifest GETs whose window has passed at `now` (all of them at the end) as
    /// not followed.
    fn sweep(&mut self, now: Option<i64>) {
        let window = self.window_ms();
        let mut expired = 0;
        self.pending.retain(|_, waiting| {
            while let Some(&tm) = waiting.front() {
                if now.is_some_and(|now| now.saturating_sub(tm) <= window) {
                    break;
                }
                waiting.pop_front();
                expired += 1;
            }
            !waiting.is_empty()
        });
        self.sessions.not_followed += expired;
    }

    #[allow(clippy::too_many_lines)]
    fn finish(mut self, files: usize, names: &Interner, out_of_order: u64) -> TraceStats {
        if self.minute.is_some() {
            self.flush_minute();
        }
        self.sweep(None);
        let top = self.opts.top;
        let method_count = |m: Method| self.by_method.get(&m).copied().unwrap_or(0);
        let puts = method_count(Method::Put);
        let operations = Operations {
            pulls: self.pulls,
            pushes: self.pushes,
            pull_ratio: ratio(self.pulls, self.pulls + self.pushes),
            layer_gets: self.layer_gets,
            layer_puts: self.layer_puts,
            manifest_per_layer_get: ratio(self.pulls, self.layer_gets),
            manifest_per_layer_put: ratio(self.pushes, self.layer_puts),
            put_patch_ratio: ratio(puts, method_count(Method::Patch)),
            get_share: ratio(method_count(Method::Get), self.records),
            head_share: ratio(method_count(Method::Head), self.records),
        };
        let mut sizes: BTreeMap<String, BTreeMap<String, SizeStats>> = BTreeMap::new();
        for ((method, kind), (h, bytes, min, max)) in &self.sizes {
            let below = |v: u64| {
                if h.is_empty() {
                    0.0
                } else {
                    h.count_between(0, v) as f64 / h.len() as f64
                }
            };
            sizes.entry(method.as_str().to_owned()).or_default().insert(
                kind.as_str().to_owned(),
                SizeStats {
                    quantiles: Quantiles::of(h).within(*min, *max),
                    bytes: *bytes,
                    share_below_1mb: below(999_999),
                    share_below_10mb: below(9_999_999),
                },
            );
        }
        let rate = RateStats {
            quantiles: Quantiles::of(&self.rate),
            share_minutes_at_least_100: if self.rate.is_empty() {
                0.0
            } else {
                self.rate.count_between(100, u64::MAX) as f64 / self.rate.len() as f64
            },
        };
        let mut sessions = self.sessions.clone();
        sessions.not_followed_share = ratio(sessions.not_followed, sessions.manifest_gets);
        let popularity = Popularity {
            layers: rank(&self.layers, top, |d| names.resolve(*d).into_owned()),
            manifests: rank(&self.manifests, top, |(repo, reference)| {
                format!("{}:{}", names.resolve(*repo), names.resolve(*reference))
            }),
            repositories: rank(&self.repositories, top, |r| names.resolve(*r).into_owned()),
            clients: rank(&self.clients, top, |c| names.resolve(*c).into_owned()),
        };
        let mut by_status = StatusCounts::default();
        for (code, n) in &self.by_status {
            let class = match code {
                0 => "none".to_owned(),
                c => format!("{}xx", c / 100),
            };
            *by_status.classes.entry(class).or_default() += n;
            by_status.codes.insert(code.to_string(), *n);
        }
        TraceStats {
            files,
            records: self.records,
            first: self.first_ms.map(format_ms),
            last: self.last_ms.map(format_ms),
            span_s: match (self.first_ms, self.last_ms) {
                (Some(f), Some(l)) => l.saturating_sub(f) as f64 / 1000.0,
                _ => 0.0,
            },
            by_method: self
                .by_method
                .iter()
                .map(|(m, n)| (m.as_str().to_owned(), *n))
                .collect(),
            by_kind: self
                .by_kind
                .iter()
                .map(|(k, n)| (k.as_str().to_owned(), *n))
                .collect(),
            by_status,
            operations,
            sizes,
            rate_per_minute: rate,
            popularity,
            sessions,
            concurrency: Quantiles::of(&self.concurrency),
            interarrival_ms: Quantiles::of(&self.interarrival),
            skipped: self.skipped,
            out_of_order,
        }
    }
}

/// Ranks `counts`: the top `top` by count (ties by name) and the top-1% share.
fn rank<K>(counts: &HashMap<K, u64>, top: usize, name: impl Fn(&K) -> String) -> Ranking {
    let requests: u64 = counts.values().sum();
    let mut all: Vec<u64> = counts.values().copied().collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    let one_pct = all.len().div_ceil(100).max(1);
    let top_1pct_share = ratio(all.iter().take(one_pct).sum(), requests);
    // Only the entries that can make the list are named and sorted.
    let threshold = all.get(top.saturating_sub(1)).copied().unwrap_or(0);
    let mut best: Vec<Ranked> = counts
        .iter()
        .filter(|(_, n)| **n >= threshold && top > 0)
        .map(|(k, n)| Ranked {
            name: name(k),
            count: *n,
        })
        .collect();
    best.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    best.truncate(top);
    Ranking {
        requests,
        distinct: counts.len() as u64,
        top_1pct_share,
        top: best,
    }
}

/// Reads the whole trace once and characterizes it. Invalid records are counted, not
/// fatal; malformed JSON and unreadable files are.
pub fn compute_stats(input: &TraceInput, opts: &StatsOptions) -> Result<TraceStats, TraceError> {
    let read = ReadOptions {
        skip_invalid: true,
        replay_failed: true,
        dedup_window: opts.dedup_window,
        ..ReadOptions::default()
    };
    let mut reader = TraceReader::open(input, read, Interner::default())?;
    let mut acc = Acc::new(opts.clone());
    for item in reader.by_ref() {
        match item? {
            Item::Record(r) => acc.add(&r),
            Item::Skipped {
                reason: SkipReason::Invalid,
                ..
            } => acc.skipped.invalid += 1,
            Item::Skipped {
                reason: SkipReason::Duplicate,
                ..
            } => acc.skipped.duplicate += 1,
            // Not produced with `replay_failed`; counted anyway for completeness.
            Item::Skipped {
                reason: SkipReason::FailedInTrace,
                ..
            } => acc.skipped.failed_in_trace += 1,
        }
    }
    let out_of_order = reader.stats().out_of_order;
    Ok(acc.finish(input.files.len(), reader.names(), out_of_order))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_ties_by_name_and_top_share() {
        let counts: HashMap<&str, u64> = [
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("z", 1),
            ("warm", 100),
            ("hot", 100),
            ("x", 50),
        ]
        .into_iter()
        .collect();
        let r = rank(&counts, 2, |k| k.to_string());
        assert_eq!((r.distinct, r.requests), (7, 254));
        let names: Vec<_> = r.top.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["hot", "warm"], "ties by name");
        // 7 distinct: the top 1% is one object.
        assert_eq!(r.top_1pct_share, Some(100.0 / 254.0));
        let none = rank(&HashMap::<u8, u64>::new(), 3, |_| String::new());
        assert_eq!((none.top_1pct_share, none.top.len()), (None, 0));
    }

    #[test]
    fn no_size_is_reported_beyond_the_largest_seen() {
        let mut h = histogram();
        for v in [1_000, 123_457, 5_432_109] {
            h.saturating_record(v);
        }
        // The histogram's own maximum is its bucket's edge, above the value recorded.
        assert!(h.max() > 5_432_109);
        let q = Quantiles::of(&h).within(1_000, 5_432_109);
        assert_eq!((q.min, q.max), (1_000, 5_432_109));
        assert!(q.p99 <= 5_432_109 && q.p5 >= 1_000, "{q:?}");
    }
}
