//! Synthetic IBM-format traces: deterministic from a seed, shaped like docker clients.
//!
//! Sessions arrive at random (exponential gaps); each is a client pulling an image
//! (`GET v2/`, manifest GET, then — for some — its layer GETs) or pushing a new version
//! (per layer `HEAD` 404, `POST`, `PATCH`es, closing `PUT`; `HEAD` 200 for shared layers;
//! then the manifest `PUT`). Some requests failed in the original (a 404 for an unknown tag,
//! a 500), some are logged twice (same `id`), as log shipping does. Popularity of clients and
//! repositories is skewed (a few take most requests). [`SynthStats`] says exactly what was
//! generated, so tests can reconcile a replay's accounting to the record.
//!
//! Names are anonymized like the real traces: 8 hex characters for users, repositories,
//! tags, digests, clients and upload ids.
//!
//! Two generators:
//! - [`generate`] (here): the small, session-level generator behind the bundled sample trace and
//!   the replay tests. Its output for given [`SynthOptions`] is frozen (`tests/it/fixtures.rs`
//!   checks `fixtures/sample-trace.json` byte for byte), so it is never changed, only added to.
//! - [`ProfileGenerator`] (in `profile`): streaming traces calibrated to the published characterization of
//!   one IBM data center ([`Profile`]); records come out in timestamp order while only the
//!   sessions in flight are held, so a trace of millions of records costs a few megabytes.
//!   Popularity uses precomputed Zipf tables (binary search per draw), object names come
//!   from a keyed bijection of a counter (so no two distinct objects share a name, unlike
//!   random 8-hex names at this scale), and sizes of pooled objects are assigned by their
//!   request weight, so that sizes *per request* follow the target distribution however
//!   skewed the popularity.

mod profile;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

pub use profile::{Profile, ProfileGenerator, ProfileOptions, ProfileParams, SynthLength};

use super::write::RawRecord;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthOptions {
    pub seed: u64,
    /// Trace start, Unix ms.
    pub start_ms: i64,
    /// Sessions to generate.
    pub sessions: u32,
    /// Mean time between session starts, ms.
    pub mean_gap_ms: f64,
    pub clients: u32,
    pub repos: u32,
    /// Images each repository holds before the trace starts (pulled but never pushed).
    pub initial_images: u32,
    /// Share of sessions that pull (the rest push).
    pub pull_share: f64,
    /// Share of pulls that also fetch layers (the rest already have them).
    pub layer_fetch_share: f64,
    pub layers_per_image: (u32, u32),
    /// Layer sizes are log-uniform in this range, bytes.
    pub layer_size: (u64, u64),
    /// Upload chunk size: a layer of n bytes is n / chunk (rounded up) PATCHes.
    pub chunk: u64,
    /// Share of records logged twice.
    pub duplicate_share: f64,
    /// Share of pulls that ask for an unknown tag (404) and of requests that failed (500).
    pub failed_share: f64,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            seed: 1,
            start_ms: 1_497_916_800_000, // 2017-06-20T00:00:00Z, within the published traces
            sessions: 100,
            mean_gap_ms: 500.0,
            clients: 20,
            repos: 8,
            initial_images: 2,
            pull_share: 0.85,
            layer_fetch_share: 0.4,
            layers_per_image: (1, 4),
            layer_size: (512, 256 * 1024),
            chunk: 128 * 1024,
            duplicate_share: 0.01,
            failed_share: 0.02,
        }
    }
}

/// Exactly what a generated trace holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SynthStats {
    /// Records including duplicates.
    pub records: u64,
    pub duplicates: u64,
    /// Records whose original request failed (and would be skipped as `failed_in_trace`).
    pub failed: u64,
    /// Upload records carried out inside an upload operation (PATCH and closing PUT).
    pub upload_members: u64,
    /// Upload operations (one per POST).
    pub uploads: u64,
    /// HEAD requests answered 404 (existence checks, replayed).
    pub head_misses: u64,
    pub pulls: u64,
    pub pushes: u64,
}

const USER_AGENT: &str =
    "docker/17.06.0-ce go/go1.8.3 git-commit/02c1d87 kernel/4.4.0 os/linux arch/amd64";

#[derive(Debug, Clone)]
struct Image {
    tag: String,
    manifest_size: u64,
    layers: Vec<(String, u64)>,
}

#[derive(Debug, Clone)]
struct Repo {
    name: String,
    images: Vec<Image>,
}

struct Gen {
    rng: Xoshiro256PlusPlus,
    out: Vec<RawRecord>,
    stats: SynthStats,
    opts: SynthOptions,
}

impl Gen {
    fn hex8(&mut self) -> String {
        format!("{:08x}", self.rng.random::<u32>())
    }

    /// A skewed pick in 0..n (about 1/(i+1) popularity).
    fn zipf(&mut self, n: u32) -> u32 {
        let n = n.max(1);
        let h: f64 = (1..=n).map(|i| 1.0 / i as f64).sum();
        let mut x = self.rng.random::<f64>() * h;
        for i in 0..n {
            x -= 1.0 / (i + 1) as f64;
            if x <= 0.0 {
                return i;
            }
        }
        n - 1
    }

    fn layer_size(&mut self) -> u64 {
        let (lo, hi) = self.opts.layer_size;
        let (lo, hi) = ((lo.max(1)) as f64, (hi.max(lo.max(1))) as f64);
        let v = (lo.ln() + self.rng.random::<f64>() * (hi.ln() - lo.ln())).exp();
        v.round() as u64
    }

    fn emit(
        &mut self,
        t_ms: i64,
        client: &str,
        method: &'static str,
        uri: String,
        status: u16,
        written: u64,
    ) {
        let duration = 0.001 + written as f64 / 200e6 + self.rng.random::<f64>() * 0.01;
        let record = RawRecord {
            host: format!("{:08x}", self.rng.random::<u32>() % 4),
            duration: (duration * 1e6).round() / 1e6,
            method,
            remoteaddr: client.to_owned(),
            uri,
            useragent: std::borrow::Cow::Borrowed(USER_AGENT),
            status,
            written,
            id: format!("{:010x}", self.rng.random::<u64>() & 0xff_ffff_ffff),
            timestamp: format_ms(t_ms),
            size_unknown: false,
            time_ms: t_ms,
        };
        let failed = status >= 400 && !(method == "HEAD" && status == 404);
        self.stats.records += 1;
        if failed {
            self.stats.failed += 1;
        }
        if self.rng.random::<f64>() < self.opts.duplicate_share {
            // Log shipping sent it twice: same id, same content.
            self.out.push(record.clone());
            self.stats.records += 1;
            self.stats.duplicates += 1;
        }
        self.out.push(record);
    }
}

/// `2017-06-20T00:01:37.113Z`.
pub fn format_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Generates a trace: records in timestamp order, and what they hold.
pub fn generate(opts: &SynthOptions) -> (Vec<RawRecord>, SynthStats) {
    let mut g = Gen {
        rng: Xoshiro256PlusPlus::seed_from_u64(opts.seed),
        out: Vec::new(),
        stats: SynthStats::default(),
        opts: opts.clone(),
    };
    let clients: Vec<String> = (0..opts.clients.max(1)).map(|_| g.hex8()).collect();
    let mut repos: Vec<Repo> = Vec::new();
    for _ in 0..opts.repos.max(1) {
        let name = format!("{}/{}", g.hex8(), g.hex8());
        let mut images = Vec::new();
        for _ in 0..opts.initial_images.max(1) {
            let n = g.rng.random_range(
                opts.layers_per_image.0.max(1)
                    ..=opts.layers_per_image.1.max(opts.layers_per_image.0.max(1)),
            );
            let layers = (0..n).map(|_| (g.hex8(), g.layer_size())).collect();
            let tag = g.hex8();
            let manifest_size = g.rng.random_range(400..3000);
            images.push(Image {
                tag,
                manifest_size,
                layers,
            });
        }
        repos.push(Repo { name, images });
    }

    let mut t = opts.start_ms;
    for _ in 0..opts.sessions {
        let gap = -opts.mean_gap_ms * (1.0 - g.rng.random::<f64>()).ln();
        t += gap.round() as i64 + 1;
        let client = clients[g.zipf(clients.len() as u32) as usize].clone();
        let r = g.zipf(repos.len() as u32) as usize;
        let mut at = t;
        let mut step = |g: &mut Gen| {
            at += g.rng.random_range(1..40);
            at
        };
        if g.rng.random::<f64>() < opts.pull_share {
            g.stats.pulls += 1;
            let repo = repos[r].clone();
            let ts = step(&mut g);
            g.emit(ts, &client, "GET", "v2/".into(), 200, 2);
            if g.rng.random::<f64>() < opts.failed_share {
                // An unknown tag: the original answered 404.
                let tag = g.hex8();
                let ts = step(&mut g);
                g.emit(
                    ts,
                    &client,
                    "GET",
                    format!("v2/{}/manifests/{tag}", repo.name),
                    404,
                    0,
                );
                continue;
            }
            let image = repo.images[g.zipf(repo.images.len() as u32) as usize].clone();
            let ts = step(&mut g);
            g.emit(
                ts,
                &client,
                "GET",
                format!("v2/{}/manifests/{}", repo.name, image.tag),
                200,
                image.manifest_size,
            );
            if g.rng.random::<f64>() < opts.layer_fetch_share {
                for (digest, size) in &image.layers {
                    let ts = step(&mut g);
                    let leading = if g.rng.random::<bool>() { "/" } else { "" };
                    g.emit(
                        ts,
                        &client,
                        "GET",
                        format!("{leading}v2/{}/blobs/{digest}", repo.name),
                        200,
                        *size,
                    );
                }
            }
        } else {
            g.stats.pushes += 1;
            let name = repos[r].name.clone();
            let n = g.rng.random_range(
                opts.layers_per_image.0.max(1)
                    ..=opts.layers_per_image.1.max(opts.layers_per_image.0.max(1)),
            );
            let mut layers = Vec::new();
            // A shared base layer already in the repository: HEAD 200, not uploaded.
            if let Some(base) = repos[r]
                .images
                .first()
                .and_then(|i| i.layers.first())
                .cloned()
            {
                let ts = step(&mut g);
                g.emit(
                    ts,
                    &client,
                    "HEAD",
                    format!("v2/{name}/blobs/{}", base.0),
                    200,
                    0,
                );
                layers.push(base);
            }
            for _ in 0..n {
                let digest = g.hex8();
                let size = g.layer_size();
                let session = g.hex8();
                let ts = step(&mut g);
                g.emit(
                    ts,
                    &client,
                    "HEAD",
                    format!("v2/{name}/blobs/{digest}"),
                    404,
                    0,
                );
                g.stats.head_misses += 1;
                let ts = step(&mut g);
                g.emit(
                    ts,
                    &client,
                    "POST",
                    format!("v2/{name}/blobs/uploads/"),
                    202,
                    0,
                );
                g.stats.uploads += 1;
                let chunk = opts.chunk.max(1);
                let mut sent = 0;
                while sent < size {
                    let len = chunk.min(size - sent);
                    let ts = step(&mut g);
                    g.emit(
                        ts,
                        &client,
                        "PATCH",
                        format!("v2/{name}/blobs/uploads/{session}"),
                        202,
                        len,
                    );
                    g.stats.upload_members += 1;
                    sent += len;
                }
                let ts = step(&mut g);
                g.emit(
                    ts,
                    &client,
                    "PUT",
                    format!("v2/{name}/blobs/uploads/{session}"),
                    201,
                    0,
                );
                g.stats.upload_members += 1;
                layers.push((digest, size));
            }
            let tag = g.hex8();
            let manifest_size = g.rng.random_range(400..3000);
            let ts = step(&mut g);
            if g.rng.random::<f64>() < opts.failed_share {
                // The registry failed the manifest PUT.
                g.emit(
                    ts,
                    &client,
                    "PUT",
                    format!("v2/{name}/manifests/{tag}"),
                    500,
                    manifest_size,
                );
            } else {
                g.emit(
                    ts,
                    &client,
                    "PUT",
                    format!("v2/{name}/manifests/{tag}"),
                    201,
                    manifest_size,
                );
                repos[r].images.push(Image {
                    tag,
                    manifest_size,
                    layers,
                });
            }
        }
    }
    g.out.sort_by_key(|r| r.time_ms);
    (g.out, g.stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_sorted_and_counted() {
        let opts = SynthOptions {
            sessions: 200,
            ..SynthOptions::default()
        };
        let (a, stats) = generate(&opts);
        let (b, _) = generate(&opts);
        assert_eq!(a, b);
        assert_eq!(a.len() as u64, stats.records);
        assert!(a.windows(2).all(|w| w[0].time_ms <= w[1].time_ms));
        assert!(stats.pulls > 0 && stats.pushes > 0 && stats.uploads > 0);
        let patches = a.iter().filter(|r| r.method == "PATCH").count() as u64;
        let puts = a
            .iter()
            .filter(|r| r.method == "PUT" && r.uri.contains("uploads"))
            .count() as u64;
        // Duplicated records appear twice in the output but once in the stats.
        assert!(patches + puts >= stats.upload_members);
        assert_eq!(a[0].timestamp.len(), "2017-06-20T00:00:00.000Z".len());
    }
}
