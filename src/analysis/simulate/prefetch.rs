//! The FAST'18 §5.4 layer prefetching idea, simulated in trace time.
//!
//! Observation behind it: most manifest GETs are not followed by layer GETs (the client has
//! the layers), but a manifest GET shortly after a *push* to the repository usually is (other
//! clients fetch the new image). So the registry remembers recent pushes and, when such a
//! repository's manifest is pulled, loads the layers the pull is about to ask for into a
//! cache in front of its backend.
//!
//! The model, exactly:
//! - **Lookup table**, repository → known layers (key, size, last seen). A layer becomes
//!   known when a push uploads it ([`PushEvent::Uploaded`]) or reuses it (`HEAD` 200, if its
//!   size is known from an earlier transfer), and when a layer GET fetches it from a
//!   repository with push activity (a layer or manifest push) within `lookup_retention`
//!   ("recent pulls"). A manifest PUT marks the repository *pushed* at that time, by that
//!   client. A layer is forgotten once unseen for `lookup_retention`; a repository once it
//!   has had no push activity for that long.
//! - **Trigger**: a successful manifest GET of repository R, at time t, by a client other
//!   than R's last pusher, when R was pushed within `lookup_retention` before t.
//! - **Prefetch**: every layer of R seen within `lookup_retention` goes into the prefetch
//!   cache, where it stays until `cache_retention` after its (latest) prefetch. Prefetching a
//!   resident layer only extends its stay. The cache is unbounded: its peak size is the
//!   memory the scheme needs.
//! - **Hit**: a successful layer GET whose layer is in the prefetch cache. Layers are matched
//!   by digest; a pushed layer whose digest could not be inferred (see
//!   [`super::push`]) is matched by (repository, exact size).
//! - **Prefetch ratio**: of the layers prefetched (each insertion counts once; extensions do
//!   not), the share requested at least once before they left the cache (or by the end of
//!   the trace).
//!
//! Expiry is applied for real, by trace time (the latest timestamp seen, so a slightly
//! out-of-order record cannot move the clock back): before each event, everything whose
//! retention ended strictly before it is gone.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use serde::Serialize;

use super::cache::layer_get;
use super::push::{PushEvent, UploadTracker};
use crate::trace::{Method, Record, Sym, Target};

/// Retention thresholds of one prefetch simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchConfig {
    pub lookup_retention: Duration,
    pub cache_retention: Duration,
}

/// How a layer is recognized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKey {
    Digest(Sym),
    /// A pushed layer whose digest is unknown: its repository and exact size.
    Sized {
        repo: Sym,
        size: u64,
    },
}

/// What the prefetch simulation takes from a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefetchEvent {
    LayerPushed {
        repo: Sym,
        key: LayerKey,
        size: u64,
        time_ms: i64,
    },
    ManifestPushed {
        repo: Sym,
        client: Option<Sym>,
        time_ms: i64,
    },
    ManifestPulled {
        repo: Sym,
        client: Option<Sym>,
        time_ms: i64,
    },
    LayerPulled {
        repo: Sym,
        digest: Sym,
        size: u64,
        time_ms: i64,
    },
}

/// Turns records into [`PrefetchEvent`]s: follows uploads and remembers layer sizes.
#[derive(Debug, Default)]
pub struct EventSource {
    uploads: UploadTracker,
    sizes: HashMap<Sym, u64>,
}

impl EventSource {
    pub fn new() -> Self {
        Self::default()
    }

    /// The event a (valid, not failed) record makes, if any.
    pub fn event(&mut self, r: &Record) -> Option<PrefetchEvent> {
        if r.failed_in_trace() {
            return None;
        }
        if let Some((digest, size)) = layer_get(r) {
            self.sizes.insert(digest, size);
            let repo = r.target.repo()?;
            return Some(PrefetchEvent::LayerPulled {
                repo,
                digest,
                size,
                time_ms: r.time_ms,
            });
        }
        if let Target::Manifest { repo, .. } = r.target {
            return match r.method {
                Method::Put => Some(PrefetchEvent::ManifestPushed {
                    repo,
                    client: r.client,
                    time_ms: r.time_ms,
                }),
                Method::Get => Some(PrefetchEvent::ManifestPulled {
                    repo,
                    client: r.client,
                    time_ms: r.time_ms,
                }),
                _ => None,
            };
        }
        let pushed = self.uploads.observe(r)?;
        self.pushed(pushed)
    }

    /// The event of a layer an upload or a push of a known blob put in a repository.
    fn pushed(&mut self, pushed: PushEvent) -> Option<PrefetchEvent> {
        match pushed {
            PushEvent::Uploaded(layer) if layer.size > 0 => {
                let key = match layer.digest {
                    Some(d) => {
                        self.sizes.insert(d, layer.size);
                        LayerKey::Digest(d)
                    }
                    None => LayerKey::Sized {
                        repo: layer.repo,
                        size: layer.size,
                    },
                };
                Some(PrefetchEvent::LayerPushed {
                    repo: layer.repo,
                    key,
                    size: layer.size,
                    time_ms: layer.time_ms,
                })
            }
            PushEvent::Reused {
                repo,
                digest,
                time_ms,
                ..
            } => {
                let size = *self.sizes.get(&digest)?;
                Some(PrefetchEvent::LayerPushed {
                    repo,
                    key: LayerKey::Digest(digest),
                    size,
                    time_ms,
                })
            }
            PushEvent::Uploaded(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Known {
    size: u64,
    seen_ms: i64,
}

#[derive(Debug, Default)]
struct RepoEntry {
    pushed_ms: Option<i64>,
    pusher: Option<Sym>,
    /// The latest layer or manifest push.
    push_activity_ms: i64,
    layers: HashMap<LayerKey, Known>,
}

#[derive(Debug, Clone, Copy)]
struct Cached {
    size: u64,
    expires_ms: i64,
    requested: bool,
}

/// The result of one prefetch simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefetchReport {
    pub lookup_retention_s: u64,
    pub cache_retention_s: u64,
    /// Successful layer GETs with a size.
    pub layer_gets: u64,
    pub layer_get_bytes: u64,
    /// Layer GETs served from the prefetch cache.
    pub hits: u64,
    pub hit_bytes: u64,
    /// `hits / layer_gets`.
    pub hit_ratio: f64,
    /// `hit_bytes / layer_get_bytes`.
    pub byte_hit_ratio: f64,
    pub manifest_gets: u64,
    pub manifest_puts: u64,
    pub pushed_layers: u64,
    /// Manifest GETs that triggered a prefetch.
    pub triggers: u64,
    /// Layers put into the prefetch cache (not counting extensions of resident ones).
    pub prefetched: u64,
    pub prefetched_bytes: u64,
    /// Prefetches of layers already resident (their stay was extended).
    pub extended: u64,
    /// Prefetched layers requested at least once while resident.
    pub useful: u64,
    pub useful_bytes: u64,
    /// `useful / prefetched`.
    pub prefetch_ratio: f64,
    /// Bytes prefetched and never requested.
    pub wasted_bytes: u64,
    /// The memory the prefetch cache needs: its peak resident bytes and layers.
    pub peak_cache_bytes: u64,
    pub peak_cache_layers: u64,
}

/// One prefetch simulation; see the module documentation.
#[derive(Debug)]
pub struct PrefetchSim {
    lookup_ms: i64,
    cache_ms: i64,
    config: PrefetchConfig,
    now: i64,
    table: HashMap<Sym, RepoEntry>,
    table_queue: VecDeque<(i64, Sym)>,
    cache: HashMap<LayerKey, Cached>,
    cache_queue: VecDeque<(i64, LayerKey)>,
    resident: u64,
    r: PrefetchReport,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl PrefetchSim {
    pub fn new(config: PrefetchConfig) -> Self {
        PrefetchSim {
            lookup_ms: millis(config.lookup_retention),
            cache_ms: millis(config.cache_retention),
            config,
            now: i64::MIN,
            table: HashMap::new(),
            table_queue: VecDeque::new(),
            cache: HashMap::new(),
            cache_queue: VecDeque::new(),
            resident: 0,
            r: PrefetchReport {
                lookup_retention_s: config.lookup_retention.as_secs(),
                cache_retention_s: config.cache_retention.as_secs(),
                layer_gets: 0,
                layer_get_bytes: 0,
                hits: 0,
                hit_bytes: 0,
                hit_ratio: 0.0,
                byte_hit_ratio: 0.0,
                manifest_gets: 0,
                manifest_puts: 0,
                pushed_layers: 0,
                triggers: 0,
                prefetched: 0,
                prefetched_bytes: 0,
                extended: 0,
                useful: 0,
                useful_bytes: 0,
                prefetch_ratio: 0.0,
                wasted_bytes: 0,
                peak_cache_bytes: 0,
                peak_cache_layers: 0,
            },
        }
    }

    pub fn config(&self) -> PrefetchConfig {
        self.config
    }

    /// Bytes in the prefetch cache now.
    pub fn resident_bytes(&self) -> u64 {
        self.resident
    }

    /// Applies one event.
    #[allow(clippy::too_many_lines)]
    pub fn apply(&mut self, event: PrefetchEvent) {
        let t = match event {
            PrefetchEvent::LayerPushed { time_ms, .. }
            | PrefetchEvent::ManifestPushed { time_ms, .. }
            | PrefetchEvent::ManifestPulled { time_ms, .. }
            | PrefetchEvent::LayerPulled { time_ms, .. } => time_ms,
        };
        self.advance(t);
        let now = self.now;
        match event {
            PrefetchEvent::LayerPushed {
                repo, key, size, ..
            } => {
                self.r.pushed_layers += 1;
                let e = self.entry(repo);
                e.layers.insert(key, Known { size, seen_ms: now });
            }
            PrefetchEvent::ManifestPushed { repo, client, .. } => {
                self.r.manifest_puts += 1;
                let e = self.entry(repo);
                e.pushed_ms = Some(now);
                e.pusher = client;
            }
            PrefetchEvent::LayerPulled {
                repo, digest, size, ..
            } => {
                self.r.layer_gets += 1;
                self.r.layer_get_bytes += size;
                let sized = LayerKey::Sized { repo, size };
                let hit = match self.cache.get_mut(&LayerKey::Digest(digest)) {
                    Some(c) => Some(c),
                    None => self.cache.get_mut(&sized),
                };
                if let Some(c) = hit {
                    if !c.requested {
                        c.requested = true;
                        self.r.useful += 1;
                        self.r.useful_bytes += c.size;
                    }
                    self.r.hits += 1;
                    self.r.hit_bytes += size;
                }
                let lookup_ms = self.lookup_ms;
                let entry = self.table.get_mut(&repo);
                if let Some(e) =
                    entry.filter(|e| now.saturating_sub(e.push_activity_ms) <= lookup_ms)
                {
                    // A pull names the digest of a layer a push could only size.
                    e.layers.remove(&sized);
                    e.layers
                        .insert(LayerKey::Digest(digest), Known { size, seen_ms: now });
                }
            }
            PrefetchEvent::ManifestPulled { repo, client, .. } => {
                self.r.manifest_gets += 1;
                let lookup_ms = self.lookup_ms;
                let Some(e) = self.table.get_mut(&repo) else {
                    return;
                };
                let recent = e
                    .pushed_ms
                    .is_some_and(|p| now.saturating_sub(p) <= lookup_ms);
                let by_pusher = client.is_some() && client == e.pusher;
                if !recent || by_pusher {
                    return;
                }
                e.layers
                    .retain(|_, k| now.saturating_sub(k.seen_ms) <= lookup_ms);
                let layers: Vec<(LayerKey, u64)> =
                    e.layers.iter().map(|(k, v)| (*k, v.size)).collect();
                self.r.triggers += 1;
                for (key, size) in layers {
                    self.prefetch(key, size);
                }
            }
        }
    }

    /// Feeds the events of `records` (through one [`EventSource`]) and reports.
    pub fn run<'a>(
        config: PrefetchConfig,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> PrefetchReport {
        let mut source = EventSource::new();
        let mut sim = PrefetchSim::new(config);
        for r in records {
            if let Some(e) = source.event(r) {
                sim.apply(e);
            }
        }
        sim.finish()
    }

    /// Ends the trace: layers still resident count as useful or wasted as they stand.
    pub fn finish(mut self) -> PrefetchReport {
        for c in self.cache.values() {
            if !c.requested {
                self.r.wasted_bytes += c.size;
            }
        }
        self.r.hit_ratio = ratio(self.r.hits, self.r.layer_gets);
        self.r.byte_hit_ratio = ratio(self.r.hit_bytes, self.r.layer_get_bytes);
        self.r.prefetch_ratio = ratio(self.r.useful, self.r.prefetched);
        self.r
    }

    fn entry(&mut self, repo: Sym) -> &mut RepoEntry {
        let now = self.now;
        let deadline = now.saturating_add(self.lookup_ms);
        let queue = &mut self.table_queue;
        let e = self.table.entry(repo).or_insert_with(|| {
            queue.push_back((deadline, repo));
            RepoEntry::default()
        });
        e.push_activity_ms = now;
        e
    }

    fn prefetch(&mut self, key: LayerKey, size: u64) {
        if size == 0 {
            return;
        }
        let expires_ms = self.now.saturating_add(self.cache_ms);
        match self.cache.get_mut(&key) {
            Some(c) => {
                c.expires_ms = expires_ms;
                self.r.extended += 1;
            }
            None => {
                self.cache.insert(
                    key,
                    Cached {
                        size,
                        expires_ms,
                        requested: false,
                    },
                );
                self.resident += size;
                self.r.prefetched += 1;
                self.r.prefetched_bytes += size;
                self.r.peak_cache_bytes = self.r.peak_cache_bytes.max(self.resident);
                self.r.peak_cache_layers = self.r.peak_cache_layers.max(self.cache.len() as u64);
            }
        }
        self.cache_queue.push_back((expires_ms, key));
    }

    /// Moves the clock to `t` (never back) and drops what expired before it.
    fn advance(&mut self, t: i64) {
        self.now = self.now.max(t);
        let now = self.now;
        // Deadlines are pushed as `now + retention` with a clock that never goes back, so
        // the queue is in deadline order; an entry whose deadline moved since is skipped.
        while let Some(&(deadline, key)) = self.cache_queue.front() {
            if deadline >= now {
                break;
            }
            self.cache_queue.pop_front();
            if let Some(c) = self.cache.get(&key) {
                if c.expires_ms == deadline {
                    self.resident -= c.size;
                    if !c.requested {
                        self.r.wasted_bytes += c.size;
                    }
                    self.cache.remove(&key);
                }
            }
        }
        while let Some(&(deadline, repo)) = self.table_queue.front() {
            if deadline >= now {
                break;
            }
            self.table_queue.pop_front();
            let Some(e) = self.table.get(&repo) else {
                continue;
            };
            let until = e.push_activity_ms.saturating_add(self.lookup_ms);
            if until < now {
                self.table.remove(&repo);
            } else {
                self.table_queue.push_back((until, repo));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn sim(lookup_h: u64, cache_h: u64) -> PrefetchSim {
        PrefetchSim::new(PrefetchConfig {
            lookup_retention: Duration::from_secs(lookup_h * 3600),
            cache_retention: Duration::from_secs(cache_h * 3600),
        })
    }

    fn pushed(repo: u32, digest: u32, size: u64, t: i64) -> PrefetchEvent {
        PrefetchEvent::LayerPushed {
            repo: Sym(repo),
            key: LayerKey::Digest(Sym(digest)),
            size,
            time_ms: t,
        }
    }

    fn manifest_put(repo: u32, client: u32, t: i64) -> PrefetchEvent {
        PrefetchEvent::ManifestPushed {
            repo: Sym(repo),
            client: Some(Sym(client)),
            time_ms: t,
        }
    }

    fn manifest_get(repo: u32, client: u32, t: i64) -> PrefetchEvent {
        PrefetchEvent::ManifestPulled {
            repo: Sym(repo),
            client: Some(Sym(client)),
            time_ms: t,
        }
    }

    fn layer_get(repo: u32, digest: u32, size: u64, t: i64) -> PrefetchEvent {
        PrefetchEvent::LayerPulled {
            repo: Sym(repo),
            digest: Sym(digest),
            size,
            time_ms: t,
        }
    }

    #[test]
    fn a_pull_after_a_push_hits_the_prefetched_layers() {
        let mut s = sim(1, 1);
        s.apply(pushed(1, 10, 100, 0));
        s.apply(pushed(1, 11, 50, 1));
        s.apply(manifest_put(1, 7, 2));
        // The pusher pulling its own image does not trigger.
        s.apply(manifest_get(1, 7, 3));
        assert_eq!(s.resident_bytes(), 0);
        s.apply(manifest_get(1, 8, 10));
        assert_eq!(s.resident_bytes(), 150);
        s.apply(layer_get(1, 10, 100, 11));
        s.apply(layer_get(1, 12, 30, 12)); // not pushed: a miss
        let r = s.finish();
        assert_eq!((r.triggers, r.prefetched, r.prefetched_bytes), (1, 2, 150));
        assert_eq!((r.hits, r.layer_gets, r.hit_bytes), (1, 2, 100));
        assert_eq!((r.useful, r.wasted_bytes), (1, 50));
        assert!((r.prefetch_ratio - 0.5).abs() < 1e-12);
        assert_eq!(r.peak_cache_bytes, 150);
    }

    #[test]
    fn retentions_expire_by_trace_time() {
        let mut s = sim(1, 1);
        s.apply(pushed(1, 10, 100, 0));
        s.apply(manifest_put(1, 7, 0));
        // Exactly at the lookup retention: still recent.
        s.apply(manifest_get(1, 8, H));
        assert_eq!(s.resident_bytes(), 100);
        // The cache keeps it until one retention after the prefetch, then drops it.
        s.apply(layer_get(1, 99, 1, 2 * H));
        assert_eq!(s.resident_bytes(), 100);
        s.apply(layer_get(1, 10, 100, 2 * H + 1));
        assert_eq!(s.resident_bytes(), 0);
        // The push is too old now: no trigger.
        s.apply(manifest_get(1, 9, 2 * H + 2));
        let r = s.finish();
        assert_eq!((r.triggers, r.hits, r.useful), (1, 0, 0));
        assert_eq!(r.wasted_bytes, 100);
    }

    #[test]
    fn longer_retentions_hit_later_pulls() {
        let events = [
            pushed(1, 10, 100, 0),
            manifest_put(1, 7, 0),
            manifest_get(1, 8, 2 * H),
            layer_get(1, 10, 100, 5 * H),
        ];
        let mut short = sim(1, 1);
        let mut long = sim(12, 12);
        for e in events {
            short.apply(e);
            long.apply(e);
        }
        assert_eq!(short.finish().hits, 0);
        assert_eq!(long.finish().hits, 1);
    }

    #[test]
    fn pulled_layers_join_a_pushed_repository_and_unknown_digests_match_by_size() {
        let mut s = sim(1, 1);
        s.apply(PrefetchEvent::LayerPushed {
            repo: Sym(1),
            key: LayerKey::Sized {
                repo: Sym(1),
                size: 77,
            },
            size: 77,
            time_ms: 0,
        });
        s.apply(manifest_put(1, 7, 1));
        s.apply(manifest_get(1, 8, 2));
        // Digest 20 was uploaded without a known digest: matched by (repo, size).
        s.apply(layer_get(1, 20, 77, 3));
        // A base layer the first puller fetches joins the table ...
        s.apply(layer_get(1, 21, 500, 4));
        // ... so the next puller gets both prefetched.
        s.apply(manifest_get(1, 9, 5));
        s.apply(layer_get(1, 21, 500, 6));
        let r = s.finish();
        assert_eq!(r.hits, 2);
        assert_eq!(r.triggers, 2);
        // 77 B (sized) then 77 B again under its digest, and 500 B.
        assert_eq!(r.prefetched, 3);
    }
}
