//! The offline registry-design experiments of FAST'18 (Anwar et al.,
//! §5.3 and §5.4) replayed over IBM-format traces, without a registry.
//!
//! - [`cache`]: a two-level (memory + SSD) LRU cache of layers; hit ratios per tier and
//!   overall, by requests and bytes, cold start vs steady state, and sweeps over cache sizes
//!   expressed as a share of the trace's *working set* (the bytes of the distinct layers its
//!   successful GETs fetch, each counted once).
//! - [`prefetch`]: prefetching a repository's recently pushed layers when its manifest is
//!   pulled, with lookup-table and cache retentions applied in trace time.
//! - [`lru`]: the O(1) byte-bounded LRU both cache tiers use; [`push`]: pushed layers
//!   reconstructed from upload records.
//!
//! Traces are streamed once per pass (a sweep's working set needs a first pass); every
//! simulated configuration consumes the same pass, so a sweep costs one read, not one per
//! point. Memory is proportional to the distinct layers (and, for prefetching, to what the
//! retentions keep), never to the trace length. The models are documented precisely in each
//! submodule and in `docs/analysis.md`.

pub mod cache;
pub mod lru;
pub mod prefetch;
pub mod push;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::trace::{Interner, Item, ReadOptions, Record, TraceInput, TraceReader};

pub use cache::{CacheConfig, CacheReport, TwoTierCache, WorkingSet};
pub use prefetch::{PrefetchConfig, PrefetchReport, PrefetchSim};

/// The thresholds FAST'18 used for both retentions.
pub const PAPER_RETENTIONS: [Duration; 3] = [
    Duration::from_secs(3600),
    Duration::from_secs(12 * 3600),
    Duration::from_secs(24 * 3600),
];

/// What was read from the trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceInfo {
    pub files: usize,
    /// Valid records read (after dropping duplicates and failed originals).
    pub records: u64,
    /// Records not used, by reason (`duplicate`, `failed_in_trace`, `invalid`).
    pub skipped: BTreeMap<String, u64>,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// `last - first`, seconds.
    pub span_s: f64,
}

/// Streams the records of `paths` (merged by time, duplicates and failed originals skipped)
/// into `f`.
pub(crate) fn for_each_record(
    paths: &[PathBuf],
    skip_invalid: bool,
    mut f: impl FnMut(&Record),
) -> anyhow::Result<TraceInfo> {
    let input = TraceInput::resolve(paths)?;
    let options = ReadOptions {
        skip_invalid,
        ..ReadOptions::default()
    };
    let reader = TraceReader::open(&input, options, Interner::default())?;
    let mut info = TraceInfo {
        files: input.files.len(),
        ..TraceInfo::default()
    };
    for item in reader {
        match item.context("cannot read the trace")? {
            Item::Record(r) => {
                info.records += 1;
                info.first_ms = Some(info.first_ms.map_or(r.time_ms, |t| t.min(r.time_ms)));
                info.last_ms = Some(info.last_ms.map_or(r.time_ms, |t| t.max(r.time_ms)));
                f(&r);
            }
            Item::Skipped { reason, .. } => {
                *info.skipped.entry(reason.as_str().to_owned()).or_default() += 1;
            }
        }
    }
    if let (Some(a), Some(b)) = (info.first_ms, info.last_ms) {
        info.span_s = (b - a) as f64 / 1000.0;
    }
    Ok(info)
}

/// One point of a cache simulation: the two-tier cache and the same memory alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CachePoint {
    /// Memory size as a percentage of the working set.
    pub percent_of_working_set: f64,
    pub two_tier: CacheReport,
    pub memory_only: CacheReport,
}

/// The output of `simulate cache`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheOutput {
    pub simulation: &'static str,
    pub trace: TraceInfo,
    /// The base of percentages: bytes of the distinct layers fetched by successful GETs.
    pub working_set_bytes: u64,
    pub working_set_layers: u64,
    pub layer_requests: u64,
    pub layer_request_bytes: u64,
    pub ssd_factor: f64,
    pub memory_max_object: u64,
    pub points: Vec<CachePoint>,
}

/// Cache configurations for memory sizes: for each, the two-tier cache then memory only.
pub fn cache_configs(
    memories: &[u64],
    ssd_factor: f64,
    memory_max_object: u64,
) -> Vec<CacheConfig> {
    let mut out = Vec::with_capacity(memories.len() * 2);
    for &m in memories {
        let ssd = (m as f64 * ssd_factor).round();
        let ssd = if ssd >= u64::MAX as f64 {
            u64::MAX
        } else {
            ssd as u64
        };
        out.push(CacheConfig {
            memory_bytes: m,
            ssd_bytes: ssd,
            memory_max_object,
        });
        out.push(CacheConfig {
            memory_bytes: m,
            ssd_bytes: 0,
            memory_max_object,
        });
    }
    out
}

/// Memory size for a percentage of a working set (at least 1 byte).
pub fn memory_for_percent(working_set: u64, percent: f64) -> u64 {
    let m = (working_set as f64 * percent / 100.0).round();
    if m >= u64::MAX as f64 {
        u64::MAX
    } else {
        (m as u64).max(1)
    }
}

/// Runs `simulate cache` on files: a fixed memory size, or a sweep (two passes).
pub fn simulate_cache_files(
    paths: &[PathBuf],
    memory: Option<u64>,
    sweep: &[f64],
    ssd_factor: f64,
    memory_max_object: u64,
    skip_invalid: bool,
) -> anyhow::Result<CacheOutput> {
    let mut ws = WorkingSet::default();
    let memories: Vec<u64> = match memory {
        Some(m) => vec![m],
        None => {
            for_each_record(paths, skip_invalid, |r| {
                if let Some((k, s)) = cache::layer_get(r) {
                    ws.add(k, s);
                }
            })?;
            if ws.bytes() == 0 {
                anyhow::bail!("the trace has no successful layer GETs: nothing to sweep over");
            }
            sweep
                .iter()
                .map(|p| memory_for_percent(ws.bytes(), *p))
                .collect()
        }
    };
    let configs = cache_configs(&memories, ssd_factor, memory_max_object);
    let mut caches: Vec<TwoTierCache> = configs.iter().map(|c| TwoTierCache::new(*c)).collect();
    let count_ws = memory.is_some();
    let trace = for_each_record(paths, skip_invalid, |r| {
        if let Some((k, s)) = cache::layer_get(r) {
            if count_ws {
                ws.add(k, s);
            }
            for c in &mut caches {
                c.get(k, s);
            }
        }
    })?;
    let reports: Vec<CacheReport> = caches.iter().map(TwoTierCache::report).collect();
    let points = reports
        .chunks(2)
        .map(|pair| CachePoint {
            percent_of_working_set: percent(pair[0].config.memory_bytes, ws.bytes()),
            two_tier: pair[0].clone(),
            memory_only: pair[1].clone(),
        })
        .collect();
    Ok(CacheOutput {
        simulation: "cache",
        trace,
        working_set_bytes: ws.bytes(),
        working_set_layers: ws.layers(),
        layer_requests: ws.requests(),
        layer_request_bytes: ws.request_bytes(),
        ssd_factor,
        memory_max_object,
        points,
    })
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The output of `simulate prefetch`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefetchOutput {
    pub simulation: &'static str,
    pub trace: TraceInfo,
    pub results: Vec<PrefetchReport>,
}

/// Runs `simulate prefetch` on files for every configuration, in one pass.
pub fn simulate_prefetch_files(
    paths: &[PathBuf],
    configs: &[PrefetchConfig],
    skip_invalid: bool,
) -> anyhow::Result<PrefetchOutput> {
    let mut source = prefetch::EventSource::new();
    let mut sims: Vec<PrefetchSim> = configs.iter().map(|c| PrefetchSim::new(*c)).collect();
    let trace = for_each_record(paths, skip_invalid, |r| {
        if let Some(e) = source.event(r) {
            for s in &mut sims {
                s.apply(e);
            }
        }
    })?;
    Ok(PrefetchOutput {
        simulation: "prefetch",
        trace,
        results: sims.into_iter().map(PrefetchSim::finish).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_from_percentages() {
        assert_eq!(memory_for_percent(1000, 2.0), 20);
        assert_eq!(memory_for_percent(10, 0.001), 1);
        let c = cache_configs(&[100], 10.0, 50);
        assert_eq!((c[0].ssd_bytes, c[1].ssd_bytes), (1000, 0));
    }
}
