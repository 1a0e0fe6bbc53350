//! The FAST'18 §5.3 two-level layer cache, simulated request by request.
//!
//! Only successful blob GETs with a size (`http.response.written` > 0) are requests;
//! manifests are excluded. An object is its digest (the registry stores a blob once whatever
//! repository names it); its size is the size of the request that brought it in.
//!
//! - **Memory tier** (`memory_bytes`) holds objects smaller than `memory_max_object`.
//! - **SSD tier** (`ssd_bytes`) receives what memory evicts, and directly the objects too
//!   large for memory. It is exclusive of memory: an object is in at most one tier.
//! - Both are LRU by bytes ([`Lru`]).
//! - A GET is a **memory hit** (the object becomes most recent), an **SSD hit** (an object
//!   eligible for memory is promoted there, its demotions going to the SSD; a larger one is
//!   refreshed in place), or a **miss** (the object is inserted: into memory if eligible,
//!   else into the SSD; an object larger than its tier is not cached, a *bypass*).
//!
//! Because every access to a memory-eligible object leaves it most recent in memory, whatever
//! the SSD holds, the memory tier's contents and hits are the same with or without an SSD
//! tier: adding the SSD can only add hits. The tests rely on that.
//!
//! **Cold start / steady state**: the cache is *filled* at the first request that makes it
//! drop an object for lack of space (an eviction from the SSD, or from memory when there is
//! no SSD; bypasses do not count). Requests up to and including that one are the cold start;
//! later ones the steady state. A cache that never fills has no steady state.

use std::collections::HashMap;

use serde::Serialize;

use super::lru::Lru;
use crate::trace::{Method, Record, Sym, Target};

/// Sizes of a two-tier cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheConfig {
    pub memory_bytes: u64,
    /// 0 for a memory-only cache.
    pub ssd_bytes: u64,
    /// Objects of this size or larger skip memory.
    pub memory_max_object: u64,
}

/// Where a GET was served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    MemoryHit,
    SsdHit,
    Miss,
}

/// The request a cache simulation takes from a record: a successful blob GET with a size.
pub fn layer_get(r: &Record) -> Option<(Sym, u64)> {
    match r.target {
        Target::Blob { digest, .. }
            if r.method == Method::Get && r.size > 0 && !r.failed_in_trace() =>
        {
            Some((digest, r.size))
        }
        _ => None,
    }
}

/// Request and byte counts of a phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCounts {
    pub requests: u64,
    pub bytes: u64,
    pub memory_hits: u64,
    pub memory_hit_bytes: u64,
    pub ssd_hits: u64,
    pub ssd_hit_bytes: u64,
}

impl HitCounts {
    fn add(&mut self, outcome: Outcome, size: u64) {
        self.requests += 1;
        self.bytes += size;
        match outcome {
            Outcome::MemoryHit => {
                self.memory_hits += 1;
                self.memory_hit_bytes += size;
            }
            Outcome::SsdHit => {
                self.ssd_hits += 1;
                self.ssd_hit_bytes += size;
            }
            Outcome::Miss => {}
        }
    }

    pub fn misses(&self) -> u64 {
        self.requests - self.memory_hits - self.ssd_hits
    }

    /// Hit ratios by requests.
    pub fn hit_ratio(&self) -> Ratios {
        Ratios::of(self.memory_hits, self.ssd_hits, self.requests)
    }

    /// Hit ratios by bytes.
    pub fn byte_hit_ratio(&self) -> Ratios {
        Ratios::of(self.memory_hit_bytes, self.ssd_hit_bytes, self.bytes)
    }
}

/// Shares of a total served by each tier; 0 when the total is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Ratios {
    pub memory: f64,
    pub ssd: f64,
    pub overall: f64,
}

impl Ratios {
    fn of(memory: u64, ssd: u64, total: u64) -> Ratios {
        if total == 0 {
            return Ratios::default();
        }
        let t = total as f64;
        Ratios {
            memory: memory as f64 / t,
            ssd: ssd as f64 / t,
            overall: (memory + ssd) as f64 / t,
        }
    }
}

/// One phase of a run, with its ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhaseReport {
    #[serde(flatten)]
    pub counts: HitCounts,
    pub misses: u64,
    pub hit_ratio: Ratios,
    pub byte_hit_ratio: Ratios,
}

impl From<HitCounts> for PhaseReport {
    fn from(counts: HitCounts) -> Self {
        PhaseReport {
            counts,
            misses: counts.misses(),
            hit_ratio: counts.hit_ratio(),
            byte_hit_ratio: counts.byte_hit_ratio(),
        }
    }
}

/// Movements between and out of the tiers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Movements {
    /// SSD hits moved up to memory.
    pub promotions: u64,
    /// Memory evictions moved down to the SSD.
    pub demotions: u64,
    /// Objects evicted from the SSD.
    pub ssd_evictions: u64,
    /// Objects that left the cache for lack of space (SSD evictions, plus memory evictions
    /// the SSD could not take).
    pub dropped: u64,
    /// Missed objects too large for the tier they belong to, never cached.
    pub bypassed: u64,
}

/// The result of one simulated cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheReport {
    pub config: CacheConfig,
    pub overall: PhaseReport,
    pub cold_start: PhaseReport,
    /// `None` if the cache never filled.
    pub steady_state: Option<PhaseReport>,
    /// 1-based request at which the cache filled.
    pub filled_at_request: Option<u64>,
    pub movements: Movements,
    /// Peak bytes resident per tier.
    pub peak_memory_bytes: u64,
    pub peak_ssd_bytes: u64,
}

/// A two-tier (memory + SSD) LRU cache of layers; see the module documentation.
#[derive(Debug)]
pub struct TwoTierCache {
    config: CacheConfig,
    memory: Lru<Sym>,
    ssd: Lru<Sym>,
    overall: HitCounts,
    cold: HitCounts,
    steady: HitCounts,
    filled_at: Option<u64>,
    moves: Movements,
    peak_memory: u64,
    peak_ssd: u64,
    scratch: Vec<(Sym, u64)>,
}

impl TwoTierCache {
    pub fn new(config: CacheConfig) -> Self {
        TwoTierCache {
            config,
            memory: Lru::new(config.memory_bytes),
            ssd: Lru::new(config.ssd_bytes),
            overall: HitCounts::default(),
            cold: HitCounts::default(),
            steady: HitCounts::default(),
            filled_at: None,
            moves: Movements::default(),
            peak_memory: 0,
            peak_ssd: 0,
            scratch: Vec::new(),
        }
    }

    pub fn config(&self) -> CacheConfig {
        self.config
    }

    fn memory_eligible(&self, size: u64) -> bool {
        size < self.config.memory_max_object && size <= self.config.memory_bytes
    }

    /// Serves one GET of `key` (`size` bytes).
    pub fn get(&mut self, key: Sym, size: u64) -> Outcome {
        let was_filled = self.filled_at.is_some();
        let outcome = if self.memory.touch(&key) {
            Outcome::MemoryHit
        } else if self.ssd.contains(&key) {
            if self.memory_eligible(size) {
                self.ssd.remove(&key);
                self.moves.promotions += 1;
                self.insert_memory(key, size);
            } else {
                self.ssd.touch(&key);
            }
            Outcome::SsdHit
        } else {
            if self.memory_eligible(size) {
                self.insert_memory(key, size);
            } else if !self.insert_ssd(key, size) {
                self.moves.bypassed += 1;
            }
            Outcome::Miss
        };
        self.overall.add(outcome, size);
        if was_filled {
            self.steady.add(outcome, size);
        } else {
            self.cold.add(outcome, size);
        }
        if self.filled_at.is_none() && self.moves.dropped > 0 {
            self.filled_at = Some(self.overall.requests);
        }
        self.peak_memory = self.peak_memory.max(self.memory.used());
        self.peak_ssd = self.peak_ssd.max(self.ssd.used());
        outcome
    }

    fn insert_memory(&mut self, key: Sym, size: u64) {
        let mut evicted = std::mem::take(&mut self.scratch);
        evicted.clear();
        self.memory.insert(key, size, &mut evicted);
        for &(k, s) in &evicted {
            self.moves.demotions += 1;
            if !self.insert_ssd(k, s) {
                self.moves.dropped += 1;
            }
        }
        self.scratch = evicted;
    }

    /// Inserts into the SSD tier; false if it is too large for it.
    fn insert_ssd(&mut self, key: Sym, size: u64) -> bool {
        let mut evicted = Vec::new();
        if !self.ssd.insert(key, size, &mut evicted) {
            return false;
        }
        self.moves.ssd_evictions += evicted.len() as u64;
        self.moves.dropped += evicted.len() as u64;
        true
    }

    /// The numbers so far.
    pub fn report(&self) -> CacheReport {
        CacheReport {
            config: self.config,
            overall: self.overall.into(),
            cold_start: self.cold.into(),
            steady_state: self.filled_at.map(|_| self.steady.into()),
            filled_at_request: self.filled_at,
            movements: self.moves,
            peak_memory_bytes: self.peak_memory,
            peak_ssd_bytes: self.peak_ssd,
        }
    }
}

/// The distinct layers requested: the base of `--sweep` percentages.
#[derive(Debug, Clone, Default)]
pub struct WorkingSet {
    sizes: HashMap<Sym, u64>,
    bytes: u64,
    requests: u64,
    request_bytes: u64,
}

impl WorkingSet {
    /// Counts a layer GET; a layer counts once, at the size of its first GET.
    pub fn add(&mut self, key: Sym, size: u64) {
        self.requests += 1;
        self.request_bytes += size;
        self.sizes.entry(key).or_insert_with(|| {
            self.bytes += size;
            size
        });
    }

    /// Bytes of distinct layers.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn layers(&self) -> u64 {
        self.sizes.len() as u64
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn request_bytes(&self) -> u64 {
        self.request_bytes
    }
}

/// Runs every cache in `configs` over the same records; reports in the same order.
pub fn simulate<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    configs: &[CacheConfig],
) -> Vec<CacheReport> {
    let mut caches: Vec<TwoTierCache> = configs.iter().map(|c| TwoTierCache::new(*c)).collect();
    for r in records {
        if let Some((key, size)) = layer_get(r) {
            for c in &mut caches {
                c.get(key, size);
            }
        }
    }
    caches.iter().map(TwoTierCache::report).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(memory: u64, ssd: u64, max_object: u64) -> CacheConfig {
        CacheConfig {
            memory_bytes: memory,
            ssd_bytes: ssd,
            memory_max_object: max_object,
        }
    }

    #[test]
    fn memory_ssd_and_miss_by_hand() {
        // Memory 10 B, SSD 20 B, memory takes objects < 8 B.
        let mut c = TwoTierCache::new(cfg(10, 20, 8));
        let (a, b, big) = (Sym(1), Sym(2), Sym(3));
        assert_eq!(c.get(a, 6), Outcome::Miss); // mem [a]
        assert_eq!(c.get(a, 6), Outcome::MemoryHit);
        assert_eq!(c.get(b, 6), Outcome::Miss); // mem [b], a demoted to ssd
        assert_eq!(c.report().movements.demotions, 1);
        assert_eq!(c.get(a, 6), Outcome::SsdHit); // a promoted, b demoted
        assert_eq!(c.report().movements.promotions, 1);
        assert_eq!(c.get(big, 9), Outcome::Miss); // too large for memory: ssd [big, b]
        assert_eq!(c.get(big, 9), Outcome::SsdHit); // stays in the ssd
        assert_eq!(c.get(Sym(4), 30), Outcome::Miss); // larger than both: bypass
        let r = c.report();
        assert_eq!(r.movements.bypassed, 1);
        assert_eq!(r.movements.dropped, 0);
        assert_eq!(r.steady_state, None);
        assert_eq!(r.overall.counts.requests, 7);
        assert_eq!(r.overall.counts.memory_hits, 1);
        assert_eq!(r.overall.counts.ssd_hits, 2);
        assert_eq!(r.overall.misses, 4);
        assert!((r.overall.hit_ratio.overall - 3.0 / 7.0).abs() < 1e-12);
        assert_eq!(r.overall.counts.bytes, 6 + 6 + 6 + 6 + 9 + 9 + 30);
        assert_eq!(r.overall.counts.ssd_hit_bytes, 15);
    }

    #[test]
    fn steady_state_starts_after_the_first_drop() {
        // Memory-only, 10 B: the third distinct 5 B object drops the first.
        let mut c = TwoTierCache::new(cfg(10, 0, 100));
        for k in [1, 2, 1, 3, 1, 2] {
            c.get(Sym(k), 5);
        }
        let r = c.report();
        assert_eq!(r.filled_at_request, Some(4));
        assert_eq!(r.cold_start.counts.requests, 4);
        let steady = r.steady_state.unwrap();
        assert_eq!(steady.counts.requests, 2);
        // 1 was hit at request 3 so 2 was dropped at request 4: 1 hits, 2 misses.
        assert_eq!(steady.counts.memory_hits, 1);
        assert_eq!(r.movements.dropped, 2);
    }

    #[test]
    fn the_ssd_only_adds_hits() {
        let keys = [1u32, 2, 3, 4, 1, 2, 5, 6, 1, 3, 7, 2, 8, 1, 4, 9, 2, 3];
        let records: Vec<(Sym, u64)> = keys.iter().map(|&k| (Sym(k), 3 + k as u64 % 4)).collect();
        let mut mem = TwoTierCache::new(cfg(12, 0, 100));
        let mut two = TwoTierCache::new(cfg(12, 60, 100));
        for &(k, s) in &records {
            let a = mem.get(k, s);
            let b = two.get(k, s);
            assert_eq!(a == Outcome::MemoryHit, b == Outcome::MemoryHit);
        }
        assert!(two.report().overall.hit_ratio.overall > mem.report().overall.hit_ratio.overall);
    }

    #[test]
    fn working_set_counts_each_layer_once() {
        let mut w = WorkingSet::default();
        w.add(Sym(1), 10);
        w.add(Sym(2), 5);
        w.add(Sym(1), 12);
        assert_eq!(
            (w.bytes(), w.layers(), w.requests(), w.request_bytes()),
            (15, 2, 3, 27)
        );
    }
}
