//! Attribution in the results: `summary.json`'s `by_repository` and `by_client` (the top
//! entries of each ranking, `metrics::attribution`), `attribution` (how complete they are),
//! and `attribution.hlog`, each listed entry's latency histogram, which lets `merge` add
//! entries of several hosts exactly.
//!
//! A merged entry is exact when every host either listed it exactly or listed every name it
//! saw (`*_complete`): then no host can hide a share of it. Otherwise its figures are what
//! the hosts that listed it saw (`exact: false`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::hlog::IntervalHistograms;
use crate::metrics::attribution::{Criterion, Dimension, Tally, LISTED, TRACKED};
use crate::metrics::hist::Percentiles;
use crate::metrics::{Aggregator, SparseHistogram};

/// The file of the listed entries' latency histograms.
pub const ATTRIBUTION_HLOG: &str = "attribution.hlog";

/// One repository or client in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attributed {
    /// As the trace (or the command) names it.
    pub name: String,
    /// Workload operations (`totals.requests` counts the same way).
    pub count: u64,
    /// Failed operations among them.
    pub errors: u64,
    /// Bytes sent and received.
    pub bytes: u64,
    /// The time its operations took, failures included (the sum of their latencies).
    pub time_s: f64,
    /// Latency of its successes, within 0.8% (two significant digits); null without any.
    pub latency_ms: Option<Percentiles>,
    /// The figures are the whole truth; false: they count what was seen after it entered a
    /// bounded list, a lower bound.
    pub exact: bool,
    /// The rankings it is in the top of: `requests`, `time`, `bytes`, `errors`, and
    /// `latency` (the slowest by the p90 of their successes, among the names tracked with
    /// at least 20 successes).
    pub top_by: Vec<String>,
}

impl Attributed {
    /// The rankings it is listed by, as people read them: an entry counted only from when
    /// it joined a bounded list (`exact: false`) is said to be tracked by them, never to
    /// hold a rank its lower-bound figures cannot establish.
    pub fn ranks(&self) -> String {
        let by = self.top_by.join(", ");
        if self.exact {
            by
        } else {
            format!("tracked by {by} (counted from when it joined: rank not established)")
        }
    }

    /// The p90 of its successes (ms), where it is ranked by slowness.
    pub fn slowness(&self) -> Option<f64> {
        self.top_by
            .iter()
            .any(|b| b == "latency")
            .then(|| self.latency_ms.as_ref().and_then(|l| l.p90))
            .flatten()
    }
}

/// The entries ranked by slowness, slowest first.
pub fn slowest(entries: &[Attributed]) -> Vec<&Attributed> {
    let mut slow: Vec<&Attributed> = entries.iter().filter(|e| e.slowness().is_some()).collect();
    slow.sort_by(|a, b| {
        b.slowness()
            .unwrap_or(0.0)
            .total_cmp(&a.slowness().unwrap_or(0.0))
            .then_with(|| a.name.cmp(&b.name))
    });
    slow
}

/// How the lists were made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributionInfo {
    /// Entries listed per ranking.
    pub listed: usize,
    /// Entries each ranking kept while the run went (its bound).
    pub tracked: usize,
    /// Every repository seen is listed, exactly.
    pub repositories_complete: bool,
    /// Every client seen is listed, exactly.
    pub clients_complete: bool,
}

/// The dimensions as results name them, for `attribution.hlog`'s tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Repository,
    Client,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Repository => "repository",
            Kind::Client => "client",
        }
    }

    /// The `attribution.hlog` tag of entry `name`: its bytes in hex (a tag may not hold
    /// every character a name can).
    pub fn tag(self, name: &str) -> String {
        format!("{}/{}", self.name(), hex::encode(name))
    }
}

fn entry(name: &str, t: &Tally, exact: bool, top_by: &[Criterion]) -> Attributed {
    Attributed {
        name: name.to_owned(),
        count: t.count,
        errors: t.errors,
        bytes: t.bytes,
        // Microseconds kept whole: a merge adds them back exactly.
        time_s: t.time_us as f64 / 1e6,
        latency_ms: (!t.latency.is_empty())
            .then(|| Percentiles::of(&t.latency.to_dense()))
            .flatten(),
        exact,
        top_by: top_by.iter().map(|c| c.name().to_owned()).collect(),
    }
}

fn listed(d: &Dimension) -> Vec<Attributed> {
    d.listed()
        .iter()
        .map(|l| entry(&l.name, &l.tally, l.whole, &l.top_by))
        .collect()
}

/// A run's lists and how complete they are.
pub fn of(aggregator: &Aggregator) -> (Vec<Attributed>, Vec<Attributed>, Option<AttributionInfo>) {
    let a = aggregator.attribution();
    if a.is_empty() {
        return (Vec::new(), Vec::new(), None);
    }
    let info = AttributionInfo {
        listed: LISTED,
        tracked: TRACKED,
        repositories_complete: a.repositories.complete(),
        clients_complete: a.clients.complete(),
    };
    (listed(&a.repositories), listed(&a.clients), Some(info))
}

/// Each listed entry's latency histogram, tagged for `attribution.hlog` (a run's).
pub fn histograms(aggregator: &Aggregator) -> IntervalHistograms {
    let a = aggregator.attribution();
    let mut tagged = IntervalHistograms::new();
    for (kind, d) in [
        (Kind::Repository, &a.repositories),
        (Kind::Client, &a.clients),
    ] {
        for l in d.listed() {
            tagged.insert(kind.tag(&l.name), l.tally.latency.clone());
        }
    }
    tagged
}

/// One host's list of a dimension, as a merge reads it.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub entries: &'a [Attributed],
    /// The host listed every name it saw, exactly.
    pub complete: bool,
    /// Its `attribution.hlog`, if it wrote one.
    pub histograms: Option<&'a IntervalHistograms>,
}

/// Several hosts' lists of one dimension merged: the entries, whether the merged list is
/// complete, and the merged entries' histograms (tagged for `attribution.hlog`).
pub fn merge(parts: &[Part<'_>], kind: Kind) -> (Vec<Attributed>, bool, IntervalHistograms) {
    struct Sum {
        tally: Tally,
        exact: bool,
    }
    let mut sums: BTreeMap<&str, Sum> = BTreeMap::new();
    for e in parts.iter().flat_map(|p| p.entries) {
        sums.entry(&e.name).or_insert(Sum {
            tally: Tally::default(),
            exact: true,
        });
    }
    for p in parts {
        let mine: BTreeMap<&str, &Attributed> =
            p.entries.iter().map(|e| (e.name.as_str(), e)).collect();
        for (name, sum) in &mut sums {
            let Some(e) = mine.get(name) else {
                sum.exact &= p.complete;
                continue;
            };
            let latency = p.histograms.and_then(|h| h.get(&kind.tag(name)));
            sum.exact &= e.exact && (latency.is_some() || e.latency_ms.is_none());
            sum.tally.add(&Tally {
                count: e.count,
                errors: e.errors,
                bytes: e.bytes,
                time_us: (e.time_s * 1e6).round() as u64,
                latency: latency.cloned().unwrap_or_else(SparseHistogram::default),
            });
        }
    }
    let mut top_by: BTreeMap<&str, Vec<Criterion>> = BTreeMap::new();
    for c in Criterion::RANKED {
        let mut ranked: Vec<(&str, u64)> = sums
            .iter()
            .map(|(n, s)| (*n, c.of(&s.tally)))
            .filter(|&(_, v)| v > 0)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        for (name, _) in ranked.into_iter().take(LISTED) {
            top_by.entry(name).or_default().push(c);
        }
    }
    let complete = parts.iter().all(|p| p.complete) && top_by.len() == sums.len();
    let mut histograms = IntervalHistograms::new();
    let mut entries: Vec<Attributed> = top_by
        .iter()
        .map(|(name, by)| {
            let s = &sums[name];
            histograms.insert(kind.tag(name), s.tally.latency.clone());
            entry(name, &s.tally, s.exact, by)
        })
        .collect();
    entries.sort_by(|a, b| {
        b.time_s
            .total_cmp(&a.time_s)
            .then_with(|| a.name.cmp(&b.name))
    });
    (entries, complete, histograms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed_entry(name: &str, count: u64, exact: bool) -> Attributed {
        Attributed {
            name: name.to_owned(),
            count,
            errors: 0,
            bytes: count * 10,
            time_s: count as f64 * 0.01,
            latency_ms: None,
            exact,
            top_by: vec!["requests".to_owned()],
        }
    }

    #[test]
    fn an_approximate_entry_never_claims_a_rank() {
        assert_eq!(listed_entry("x", 148, true).ranks(), "requests");
        let approximate = listed_entry("y", 9, false).ranks();
        assert!(
            approximate.starts_with("tracked by requests"),
            "{approximate}"
        );
        assert!(
            approximate.contains("rank not established"),
            "{approximate}"
        );
    }

    #[test]
    fn merged_entries_are_exact_only_where_no_host_can_hide_a_share() {
        let a = [listed_entry("x", 3, true), listed_entry("y", 1, true)];
        let b = [listed_entry("x", 2, true)];
        let part = |entries: &'static [Attributed], complete| Part {
            entries,
            complete,
            histograms: None,
        };
        let a: &'static [Attributed] = Box::leak(Box::new(a));
        let b: &'static [Attributed] = Box::leak(Box::new(b));
        let (merged, complete, _) = merge(&[part(a, true), part(b, true)], Kind::Repository);
        assert!(complete);
        let x = merged.iter().find(|e| e.name == "x").unwrap();
        assert_eq!((x.count, x.bytes, x.exact), (5, 50, true));
        let y = merged.iter().find(|e| e.name == "y").unwrap();
        assert!(y.exact, "host b saw every name, and no y");
        let (merged, complete, _) = merge(&[part(a, true), part(b, false)], Kind::Repository);
        assert!(!complete);
        let y = merged.iter().find(|e| e.name == "y").unwrap();
        assert!(!y.exact, "host b may have seen y without listing it");
        assert!(merged.iter().find(|e| e.name == "x").unwrap().exact);
    }
}
