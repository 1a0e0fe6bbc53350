//! `trace sample`: a smaller trace cut from a larger one, in the same IBM format.
//!
//! Owns the sampling methods ([`SampleMethod`]), the pure choices behind the two CReB
//! methods ([`pick_typical_day`], [`find_stable_window`]) and the copying pass
//! ([`sample`]).
//!
//! Invariants: the output holds the selected records' original text byte for byte (every
//! field, from the reader's detailed view), in the merged timestamp order of the input, as one JSON array
//! (gzip when the output name ends in `.gz`), written as it is read. Every valid record is
//! eligible — requests that failed in the original and log duplicates included, since a
//! sample should look like its source; invalid records are dropped and counted. Selection
//! is deterministic: hash-based methods hash the anonymized name with the seed (FNV-1a +
//! splitmix64), so a client or repository is always kept or dropped whole, and the same
//! seed keeps the same ones in any trace. Two-pass methods (`typical-day`,
//! `stable-window`) read the input once to choose and once to copy; their first pass holds
//! one counter per UTC day or minute of the trace's span.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fast_hash::{fnv1a_parts, splitmix64};
use crate::trace::synth::format_ms;
use crate::trace::write::ArrayWriter;
use crate::trace::{
    Interner, Item, Method, ReadOptions, Record, Sym, TraceError, TraceInput, TraceReader,
};
use crate::units::{grouped, ByteSize};

const DAY_MS: i64 = 86_400_000;
const MINUTE_MS: i64 = 60_000;
/// The longest span `stable-window` counts minutes over (one counter each): 20 years.
const MAX_MINUTES: usize = 20 * 366 * 24 * 60;

/// How records are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleMethod {
    /// The first `requests` records.
    FirstN { requests: u64 },
    /// Records at most `duration` after the first.
    FirstDuration { duration: Duration },
    /// Records with `from_ms <= time < to_ms`.
    Window { from_ms: i64, to_ms: i64 },
    /// Every record of a hash-chosen `fraction` of the clients.
    Clients { fraction: f64, seed: u64 },
    /// Every record of a hash-chosen `fraction` of the repositories (records naming no
    /// repository, such as `GET v2/`, are dropped).
    Repos { fraction: f64, seed: u64 },
    /// CReB W1: a UTC day whose requests, ingress and egress are each within 10% of the
    /// daily mean; optionally only the `target_requests` records in its middle.
    TypicalDay { target_requests: Option<u64> },
    /// CReB W2: the first window of whole minutes whose per-minute request count has its
    /// 5th and 95th percentiles within 50% of its median.
    StableWindow { window: Duration },
}

impl SampleMethod {
    pub fn name(&self) -> &'static str {
        match self {
            SampleMethod::FirstN { .. } => "first-n",
            SampleMethod::FirstDuration { .. } => "first-duration",
            SampleMethod::Window { .. } => "window",
            SampleMethod::Clients { .. } => "clients",
            SampleMethod::Repos { .. } => "repos",
            SampleMethod::TypicalDay { .. } => "typical-day",
            SampleMethod::StableWindow { .. } => "stable-window",
        }
    }
}

/// Why a sample could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The cause is part of the message, shown once in a chain of causes.
    #[error("{}: cannot write: {cause}", path.display())]
    Output {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The method's parameters or the trace do not allow a selection.
    #[error("{0}")]
    NoSelection(String),
}

/// What [`sample`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleReport {
    /// Valid records looked at in the copying pass (it stops early when it can).
    pub read: u64,
    pub written: u64,
    /// Invalid records seen and dropped.
    pub invalid: u64,
    /// Times of the first and last record written.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// What was selected, for people.
    pub selection: String,
}

/// One UTC day's traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DayTotals {
    pub requests: u64,
    /// Bytes of PUT and PATCH requests.
    pub ingress: u64,
    /// Bytes of GET requests.
    pub egress: u64,
}

/// The day [`pick_typical_day`] chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypicalDay {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub totals: DayTotals,
    /// Relative deviation of requests, ingress and egress from the daily mean.
    pub deviation: [f64; 3],
}

/// The reading options of every sampling pass: keep failed originals and duplicates (a
/// sample keeps what the trace holds), count invalid records instead of failing.
fn read_options() -> ReadOptions {
    ReadOptions {
        skip_invalid: true,
        replay_failed: true,
        dedup_window: Duration::ZERO,
        ..ReadOptions::default()
    }
}

fn deviation(value: u64, mean: f64) -> f64 {
    if mean > 0.0 {
        (value as f64 - mean).abs() / mean
    } else if value == 0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// Chooses, among the days with traffic, those whose requests, ingress and egress are each
/// within `tolerance` (0.1 for CReB) of the mean over those days, and returns the one with
/// the smallest largest deviation (the earliest on ties).
pub fn pick_typical_day(
    days: &BTreeMap<i64, DayTotals>,
    tolerance: f64,
) -> Result<TypicalDay, String> {
    if days.is_empty() {
        return Err("the trace has no records".into());
    }
    let n = days.len() as f64;
    let mean = |f: fn(&DayTotals) -> u64| days.values().map(|d| f(d) as f64).sum::<f64>() / n;
    let means = [
        mean(|d| d.requests),
        mean(|d| d.ingress),
        mean(|d| d.egress),
    ];
    let mut best: Option<(f64, TypicalDay)> = None;
    for (&day, totals) in days {
        let values = [totals.requests, totals.ingress, totals.egress];
        let deviation: [f64; 3] = std::array::from_fn(|i| deviation(values[i], means[i]));
        let worst = deviation.iter().copied().fold(0.0, f64::max);
        if best.as_ref().is_none_or(|(w, _)| worst < *w) {
            best = Some((
                worst,
                TypicalDay {
                    day,
                    totals: *totals,
                    deviation,
                },
            ));
        }
    }
    let Some((worst, day)) = best else {
        return Err("the trace has no records".into());
    };
    if worst <= tolerance {
        return Ok(day);
    }
    Err(format!(
        "no day of the {} in the trace has requests, ingress and egress all within {:.0}% of \
         the daily mean ({:.0} requests, {} in, {} out); the closest, {}, is off by {}",
        days.len(),
        tolerance * 100.0,
        means[0],
        ByteSize(means[1] as u64),
        ByteSize(means[2] as u64),
        day_name(day.day),
        describe_deviation(&day.deviation),
    ))
}

fn describe_deviation(d: &[f64; 3]) -> String {
    format!(
        "{:.1}% requests, {:.1}% ingress, {:.1}% egress",
        d[0] * 100.0,
        d[1] * 100.0,
        d[2] * 100.0
    )
}

/// `2017-06-21`.
fn day_name(day: i64) -> String {
    let ts = format_ms(day.saturating_mul(DAY_MS));
    ts.get(..10).unwrap_or(&ts).to_owned()
}

/// The value at percentile `p` (0..=1) of sorted `values`, nearest rank.
fn nearest_rank(sorted: &[u32], p: f64) -> u32 {
    let n = sorted.len();
    if n == 0 {
        return 0;
    }
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// The percentiles a stable window is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowShape {
    pub p5: u32,
    pub median: u32,
    pub p95: u32,
}

impl WindowShape {
    fn of(sorted: &[u32]) -> Self {
        WindowShape {
            p5: nearest_rank(sorted, 0.05),
            median: nearest_rank(sorted, 0.5),
            p95: nearest_rank(sorted, 0.95),
        }
    }

    /// How far p5 and p95 stray from the median, relatively (infinite for an idle median).
    fn spread(&self) -> f64 {
        if self.median == 0 {
            return f64::INFINITY;
        }
        let m = f64::from(self.median);
        (1.0 - f64::from(self.p5) / m).max(f64::from(self.p95) / m - 1.0)
    }
}

/// The first `window`-minute slice of `per_minute` (requests in each consecutive minute)
/// whose p5 and p95 are within 50% of its median (nearest-rank percentiles; an idle median
/// never qualifies). Returns its first minute's index and its shape. Sliding keeps a sorted
/// copy of the window, so the cost is O(minutes × window) memory moves at worst.
pub fn find_stable_window(
    per_minute: &[u32],
    window: usize,
) -> Result<(usize, WindowShape), String> {
    let window = window.max(1);
    if per_minute.len() < window {
        return Err(format!(
            "the trace spans {} minutes, less than the {window}-minute window",
            per_minute.len()
        ));
    }
    let mut sorted: Vec<u32> = per_minute[..window].to_vec();
    sorted.sort_unstable();
    let mut closest: Option<(f64, usize, WindowShape)> = None;
    for start in 0..=per_minute.len() - window {
        if start > 0 {
            let gone = per_minute[start - 1];
            if let Ok(i) = sorted.binary_search(&gone) {
                sorted.remove(i);
            }
            let new = per_minute[start + window - 1];
            let at = sorted.partition_point(|&v| v < new);
            sorted.insert(at, new);
        }
        let shape = WindowShape::of(&sorted);
        let spread = shape.spread();
        if spread <= 0.5 {
            return Ok((start, shape));
        }
        if closest.as_ref().is_none_or(|(s, _, _)| spread < *s) {
            closest = Some((spread, start, shape));
        }
    }
    Err(match closest {
        Some((spread, start, shape)) if spread.is_finite() => format!(
            "no {window}-minute window has p5 and p95 of its per-minute requests within 50% of \
             the median; the closest starts at minute {start} of the trace (p5 {}, median {}, \
             p95 {})",
            shape.p5, shape.median, shape.p95
        ),
        _ => format!("no {window}-minute window has a busy median minute"),
    })
}

/// Per-day totals (first pass of `typical-day`).
fn day_totals(input: &TraceInput) -> Result<BTreeMap<i64, DayTotals>, TraceError> {
    let mut days: BTreeMap<i64, DayTotals> = BTreeMap::new();
    for item in TraceReader::open(input, read_options(), Interner::default())? {
        if let Item::Record(r) = item? {
            let d = days.entry(r.time_ms.div_euclid(DAY_MS)).or_default();
            d.requests += 1;
            match r.method {
                Method::Put | Method::Patch => d.ingress = d.ingress.saturating_add(r.size),
                Method::Get => d.egress = d.egress.saturating_add(r.size),
                _ => {}
            }
        }
    }
    Ok(days)
}

/// Requests per minute from the first record's minute (first pass of `stable-window`).
fn minute_counts(input: &TraceInput) -> Result<(i64, Vec<u32>), SampleError> {
    let mut base = None;
    let mut counts: Vec<u32> = Vec::new();
    for item in TraceReader::open(input, read_options(), Interner::default())? {
        if let Item::Record(r) = item? {
            let minute = r.time_ms.div_euclid(MINUTE_MS);
            let base = *base.get_or_insert(minute);
            // A record earlier than the first (out of order) counts in the first minute.
            let i = usize::try_from(minute.saturating_sub(base)).unwrap_or(0);
            if i >= MAX_MINUTES {
                return Err(SampleError::NoSelection(format!(
                    "the trace spans more than {} days; cut it down with --method window first",
                    MAX_MINUTES / 1440
                )));
            }
            if counts.len() <= i {
                counts.resize(i + 1, 0);
            }
            counts[i] = counts[i].saturating_add(1);
        }
    }
    Ok((base.unwrap_or(0), counts))
}

/// Hash-based membership: stable across traces for a given seed and name.
fn chosen(seed: u64, name: &str, fraction: f64) -> bool {
    let h = splitmix64(fnv1a_parts(&[&seed.to_le_bytes(), name.as_bytes()]));
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

/// The copying pass's rule.
#[derive(Debug)]
enum Rule {
    FirstN(u64),
    FirstDuration(Duration),
    /// `from <= t < to`, then skip `skip` of those and keep at most `take`.
    Range {
        from: i64,
        to: i64,
        skip: u64,
        take: Option<u64>,
    },
    Hash {
        clients: bool,
        fraction: f64,
        seed: u64,
    },
}

enum Decision {
    Keep,
    Drop,
    /// Keep nothing more: the pass can end.
    Stop,
}

/// Which records of a selection are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Records {
    /// Every record the method selects.
    #[default]
    All,
    /// Only reads (GET and HEAD): a trace that a read-only registry, such as a pull-through
    /// cache, can replay whole. A method that counts records (`first-n`) counts reads.
    Reads,
}

/// Samples `input` into `out` by `method`. See the module documentation.
pub fn sample(
    input: &TraceInput,
    method: &SampleMethod,
    out: &Path,
) -> Result<SampleReport, SampleError> {
    sample_records(input, method, out, Records::All)
}

/// What `method` keeps, as a rule over the records, and the words that say so (the trace is
/// read first for a typical day or a stable window).
fn rule_of(input: &TraceInput, method: &SampleMethod) -> Result<(Rule, String), SampleError> {
    Ok(match *method {
        SampleMethod::FirstN { requests } => (
            Rule::FirstN(requests),
            format!("the first {} records", grouped(requests)),
        ),
        SampleMethod::FirstDuration { duration } => (
            Rule::FirstDuration(duration),
            format!(
                "the records within {} of the first",
                humantime::format_duration(duration)
            ),
        ),
        SampleMethod::Window { from_ms, to_ms } => {
            if to_ms <= from_ms {
                return Err(SampleError::NoSelection(
                    "--to must be later than --from".into(),
                ));
            }
            (
                Rule::Range {
                    from: from_ms,
                    to: to_ms,
                    skip: 0,
                    take: None,
                },
                format!(
                    "the records from {} to {}",
                    format_ms(from_ms),
                    format_ms(to_ms)
                ),
            )
        }
        SampleMethod::Clients { fraction, seed } | SampleMethod::Repos { fraction, seed } => {
            let clients = matches!(method, SampleMethod::Clients { .. });
            (
                Rule::Hash {
                    clients,
                    fraction,
                    seed,
                },
                format!(
                    "every record of a {:.1}% hash sample of the {} (seed {seed})",
                    fraction * 100.0,
                    if clients { "clients" } else { "repositories" }
                ),
            )
        }
        SampleMethod::TypicalDay { target_requests } => typical_day(input, target_requests)?,
        SampleMethod::StableWindow { window } => stable_window(input, window)?,
    })
}

/// CReB W1's rule: the typical day (its middle `target_requests` records, when asked).
fn typical_day(
    input: &TraceInput,
    target_requests: Option<u64>,
) -> Result<(Rule, String), SampleError> {
    let days = day_totals(input)?;
    let typical = pick_typical_day(&days, 0.10).map_err(SampleError::NoSelection)?;
    let from = typical.day * DAY_MS;
    let count = typical.totals.requests;
    let mut text = format!(
        "the typical day {} ({} requests, {} in, {} out; off the daily mean of {} \
         day{} by {})",
        day_name(typical.day),
        grouped(count),
        ByteSize(typical.totals.ingress),
        ByteSize(typical.totals.egress),
        days.len(),
        if days.len() == 1 { "" } else { "s" },
        describe_deviation(&typical.deviation),
    );
    let (skip, take) = match target_requests {
        Some(n) if n < count => {
            text.push_str(&format!(": the {} records in its middle", grouped(n)));
            ((count - n) / 2, Some(n))
        }
        _ => (0, None),
    };
    Ok((
        Rule::Range {
            from,
            to: from + DAY_MS,
            skip,
            take,
        },
        text,
    ))
}

/// CReB W2's rule: the first `window` whose per-minute rate is stable.
fn stable_window(input: &TraceInput, window: Duration) -> Result<(Rule, String), SampleError> {
    let minutes = usize::try_from(window.as_secs().div_ceil(60))
        .unwrap_or(usize::MAX)
        .max(1);
    let (base, counts) = minute_counts(input)?;
    let (start, shape) = find_stable_window(&counts, minutes).map_err(SampleError::NoSelection)?;
    let from = (base + start as i64) * MINUTE_MS;
    let to = from + minutes as i64 * MINUTE_MS;
    Ok((
        Rule::Range {
            from,
            to,
            skip: 0,
            take: None,
        },
        format!(
            "the first stable {minutes}-minute window, {} to {} (requests per minute: \
             p5 {}, median {}, p95 {})",
            format_ms(from),
            format_ms(to),
            shape.p5,
            shape.median,
            shape.p95
        ),
    ))
}

/// [`sample`], writing only the `records` asked for of what `method` selects.
pub fn sample_records(
    input: &TraceInput,
    method: &SampleMethod,
    out: &Path,
    records: Records,
) -> Result<SampleReport, SampleError> {
    let (rule, mut selection) = rule_of(input, method)?;
    let report = copy(input, rule, out, records)?;
    if records == Records::Reads {
        selection.push_str(", reads (GET, HEAD) only");
    }
    if !report.selection.is_empty() {
        selection = format!("{selection}: {}", report.selection);
    }
    if report.written == 0 {
        selection.push_str(" (nothing matched)");
    }
    Ok(SampleReport {
        selection,
        ..report
    })
}

/// What a rule keeps track of while the records go by: the first record's time, the
/// records seen inside a range, and which names a hash sample keeps.
struct Selector {
    rule: Rule,
    first_ms: Option<i64>,
    in_range: u64,
    membership: HashMap<Sym, bool>,
}

impl Selector {
    /// What becomes of record `r`, `written` records kept so far (`names` resolves its
    /// client and repository).
    fn decide(&mut self, r: &Record, written: u64, names: &Interner) -> Decision {
        let t = r.time_ms;
        let first = *self.first_ms.get_or_insert(t);
        match &self.rule {
            Rule::FirstN(n) => {
                if written >= *n {
                    Decision::Stop
                } else {
                    Decision::Keep
                }
            }
            Rule::FirstDuration(d) => {
                let since = Duration::from_millis(t.saturating_sub(first).max(0) as u64);
                if since > *d {
                    Decision::Stop
                } else {
                    Decision::Keep
                }
            }
            Rule::Range {
                from,
                to,
                skip,
                take,
            } => {
                if t >= *to || take.is_some_and(|n| written >= n) {
                    Decision::Stop
                } else if t < *from {
                    Decision::Drop
                } else {
                    self.in_range += 1;
                    if self.in_range > *skip {
                        Decision::Keep
                    } else {
                        Decision::Drop
                    }
                }
            }
            Rule::Hash {
                clients,
                fraction,
                seed,
            } => {
                let key = if *clients { r.client } else { r.target.repo() };
                match key {
                    None => Decision::Drop,
                    Some(sym) => {
                        let keep = *self
                            .membership
                            .entry(sym)
                            .or_insert_with(|| chosen(*seed, &names.resolve(sym), *fraction));
                        if keep {
                            Decision::Keep
                        } else {
                            Decision::Drop
                        }
                    }
                }
            }
        }
    }
}

/// The copying pass: the reader's detailed view gives every item with its text; the kept
/// ones are written.
fn copy(
    input: &TraceInput,
    rule: Rule,
    out: &Path,
    records: Records,
) -> Result<SampleReport, SampleError> {
    let output = |source| SampleError::Output {
        path: out.to_path_buf(),
        cause: source,
    };
    let options = ReadOptions {
        keep_text: true,
        ..read_options()
    };
    let mut reader = TraceReader::open(input, options, Interner::default())?;
    let mut writer = ArrayWriter::create(out).map_err(output)?;
    let mut report = SampleReport {
        read: 0,
        written: 0,
        invalid: 0,
        first_ms: None,
        last_ms: None,
        selection: String::new(),
    };
    let mut selector = Selector {
        rule,
        first_ms: None,
        in_range: 0,
        membership: HashMap::new(),
    };
    while let Some(detailed) = reader.next_detailed() {
        let detailed = detailed?;
        let Item::Record(r) = detailed.item else {
            report.invalid += 1;
            continue;
        };
        report.read += 1;
        if records == Records::Reads && !matches!(r.method, Method::Get | Method::Head) {
            continue;
        }
        let t = r.time_ms;
        let decision = selector.decide(&r, report.written, reader.names());
        match decision {
            Decision::Stop => break,
            Decision::Drop => {}
            Decision::Keep => {
                let text = detailed.text.unwrap_or_default();
                writer.write(&text).map_err(output)?;
                report.written += 1;
                report.first_ms.get_or_insert(t);
                report.last_ms = Some(t);
            }
        }
    }
    writer.finish().map_err(output)?;
    if let Rule::Hash { clients, .. } = selector.rule {
        let membership = &selector.membership;
        let kept = membership.values().filter(|k| **k).count();
        report.selection = format!(
            "{} of {} {} seen",
            grouped(kept as u64),
            grouped(membership.len() as u64),
            if clients { "clients" } else { "repositories" }
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(requests: u64, ingress: u64, egress: u64) -> DayTotals {
        DayTotals {
            requests,
            ingress,
            egress,
        }
    }

    #[test]
    fn typical_day_is_the_closest_within_ten_percent() {
        let days: BTreeMap<i64, DayTotals> = [
            (1, day(50, 100, 1000)),
            (2, day(100, 100, 1000)),
            (3, day(150, 100, 1000)),
            (4, day(100, 110, 1050)),
        ]
        .into_iter()
        .collect();
        // Mean: 100 requests, 102.5 in, 1012.5 out. Day 2 is off by at most 2.4%, day 4 by 7.3%.
        let t = pick_typical_day(&days, 0.1).unwrap();
        assert_eq!(t.day, 2);
        assert!(t.deviation.iter().all(|d| *d < 0.025), "{t:?}");
        let e = pick_typical_day(&days, 0.01).unwrap_err();
        assert!(
            e.contains("no day of the 4") && e.contains("1970-01-03"),
            "{e}"
        );
        assert!(pick_typical_day(&BTreeMap::new(), 0.1).is_err());
    }

    #[test]
    fn stable_window_skips_the_bursty_start() {
        // 30 bursty minutes (1, 40, 1, 40, ...), then 90 steady ones at 20.
        let counts: Vec<u32> = (0..30)
            .map(|i| if i % 2 == 0 { 1 } else { 40 })
            .chain(std::iter::repeat_n(20, 90))
            .collect();
        // A 60-minute window may hold two of the bursty 1s (p5 is its 3rd smallest value)
        // and three 40s (p95 is its 57th): it first qualifies at minute 25.
        let (start, shape) = find_stable_window(&counts, 60).unwrap();
        assert_eq!(start, 25);
        assert_eq!(
            shape,
            WindowShape {
                p5: 20,
                median: 20,
                p95: 20
            }
        );
        let bursty: Vec<u32> = (0..180).map(|i| if i % 2 == 0 { 1 } else { 40 }).collect();
        let e = find_stable_window(&bursty, 60).unwrap_err();
        assert!(e.contains("no 60-minute window"), "{e}");
        assert!(find_stable_window(&[5; 10], 60)
            .unwrap_err()
            .contains("spans 10 minutes"));
        assert!(find_stable_window(&[0; 100], 60)
            .unwrap_err()
            .contains("busy median"));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.05), 5);
        assert_eq!(nearest_rank(&v, 0.5), 50);
        assert_eq!(nearest_rank(&v, 0.95), 95);
        assert_eq!(nearest_rank(&[7], 0.05), 7);
        assert_eq!(nearest_rank(&[], 0.5), 0);
    }

    #[test]
    fn hash_membership_is_stable_and_near_the_fraction() {
        let names: Vec<String> = (0..10_000).map(|i| format!("{i:08x}")).collect();
        let kept = names.iter().filter(|n| chosen(7, n, 0.25)).count();
        assert!((2300..2700).contains(&kept), "{kept}");
        assert_eq!(
            names.iter().filter(|n| chosen(7, n, 0.25)).count(),
            kept,
            "deterministic"
        );
        let other = names.iter().filter(|n| chosen(8, n, 0.25)).count();
        assert_ne!(
            names.iter().map(|n| chosen(7, n, 0.25)).collect::<Vec<_>>(),
            names.iter().map(|n| chosen(8, n, 0.25)).collect::<Vec<_>>()
        );
        assert!((2300..2700).contains(&other));
        assert!(names.iter().all(|n| chosen(1, n, 1.0)));
        assert!(!names.iter().any(|n| chosen(1, n, 0.0)));
    }
}
