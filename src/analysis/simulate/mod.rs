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
use crate::units::{format_duration, grouped, ByteSize};

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

fn pct(r: f64) -> String {
    format!("{:.1}%", r * 100.0)
}

fn trace_line(t: &TraceInfo) -> String {
    let skipped: u64 = t.skipped.values().sum();
    format!(
        "{} file(s), {} records ({} skipped), spanning {}",
        t.files,
        grouped(t.records),
        grouped(skipped),
        format_duration(Duration::from_secs_f64(t.span_s.max(0.0)))
    )
}

/// One row of the cache simulation's table.
fn cache_row(s: &mut String, c: [String; 10]) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:>7}  {:>10}  {:>10}  {:>8}  {:>8}  {:>8}  {:>8}  {:>9}  {:>8}  {:>10}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
    );
}

/// The human summary of a cache simulation.
#[allow(clippy::too_many_lines)]
pub fn cache_text(out: &CacheOutput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "simulate cache: {}", trace_line(&out.trace));
    let _ = writeln!(
        s,
        "layer GETs: {} ({}); working set: {} layers, {}",
        grouped(out.layer_requests),
        ByteSize(out.layer_request_bytes),
        grouped(out.working_set_layers),
        ByteSize(out.working_set_bytes)
    );
    let _ = writeln!(
        s,
        "memory takes layers < {}; SSD = {} x memory; steady state = after the cache first drops a layer",
        ByteSize(out.memory_max_object),
        out.ssd_factor
    );
    let _ = writeln!(s);
    cache_row(
        &mut s,
        [
            "memory%",
            "memory",
            "ssd",
            "mem-only",
            "two-tier",
            "from mem",
            "from ssd",
            "byte hit",
            "steady",
            "filled at",
        ]
        .map(str::to_owned),
    );
    for p in &out.points {
        let t = &p.two_tier;
        cache_row(
            &mut s,
            [
                format!("{:.1}%", p.percent_of_working_set),
                ByteSize(t.config.memory_bytes).to_string(),
                ByteSize(t.config.ssd_bytes).to_string(),
                pct(p.memory_only.overall.hit_ratio.overall),
                pct(t.overall.hit_ratio.overall),
                pct(t.overall.hit_ratio.memory),
                pct(t.overall.hit_ratio.ssd),
                pct(t.overall.byte_hit_ratio.overall),
                t.steady_state
                    .as_ref()
                    .map_or("-".to_owned(), |r| pct(r.hit_ratio.overall)),
                t.filled_at_request.map_or("never".to_owned(), grouped),
            ],
        );
    }
    if let [p] = out.points.as_slice() {
        let m = &p.two_tier.movements;
        let _ = writeln!(
            s,
            "\npromotions {}, demotions {}, SSD evictions {}, dropped {}, bypassed {}; peak memory {}, peak SSD {}",
            grouped(m.promotions),
            grouped(m.demotions),
            grouped(m.ssd_evictions),
            grouped(m.dropped),
            grouped(m.bypassed),
            ByteSize(p.two_tier.peak_memory_bytes),
            ByteSize(p.two_tier.peak_ssd_bytes)
        );
    }
    s
}

/// The human summary of a prefetch simulation.
pub fn prefetch_text(out: &PrefetchOutput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "simulate prefetch: {}", trace_line(&out.trace));
    if let Some(r) = out.results.first() {
        let _ = writeln!(
            s,
            "layer GETs {} ({}), manifest GETs {}, manifest PUTs {}, pushed layers {}",
            grouped(r.layer_gets),
            ByteSize(r.layer_get_bytes),
            grouped(r.manifest_gets),
            grouped(r.manifest_puts),
            grouped(r.pushed_layers)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>7}  {:>7}  {:>9}  {:>8}  {:>14}  {:>10}  {:>11}  {:>11}  {:>8}",
        "lookup",
        "cache",
        "hit ratio",
        "byte hit",
        "prefetch ratio",
        "prefetched",
        "bytes",
        "peak cache",
        "triggers"
    );
    for r in &out.results {
        let _ = writeln!(
            s,
            "{:>7}  {:>7}  {:>9}  {:>8}  {:>14}  {:>10}  {:>11}  {:>11}  {:>8}",
            humantime::format_duration(Duration::from_secs(r.lookup_retention_s)).to_string(),
            humantime::format_duration(Duration::from_secs(r.cache_retention_s)).to_string(),
            pct(r.hit_ratio),
            pct(r.byte_hit_ratio),
            pct(r.prefetch_ratio),
            grouped(r.prefetched),
            ByteSize(r.prefetched_bytes).to_string(),
            ByteSize(r.peak_cache_bytes).to_string(),
            grouped(r.triggers),
        );
    }
    s
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
