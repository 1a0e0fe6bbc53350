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
    let mut repos = g.initial_repos();
    let mut t = opts.start_ms;
    for _ in 0..opts.sessions {
        let gap = -opts.mean_gap_ms * (1.0 - g.rng.random::<f64>()).ln();
        t += gap.round() as i64 + 1;
        let client = clients[g.zipf(clients.len() as u32) as usize].clone();
        let r = g.zipf(repos.len() as u32) as usize;
        let mut session = Session { client, at: t };
        if g.rng.random::<f64>() < opts.pull_share {
            g.stats.pulls += 1;
            g.pull(&mut session, &repos[r]);
        } else {
            g.stats.pushes += 1;
            g.push(&mut session, &mut repos[r]);
        }
    }
    g.out.sort_by_key(|r| r.time_ms);
    (g.out, g.stats)
}

/// One client's session: its requests a few milliseconds apart from its start.
struct Session {
    client: String,
    at: i64,
}

impl Gen {
    /// The time of the session's next request.
    fn step(&mut self, session: &mut Session) -> i64 {
        session.at += self.rng.random_range(1..40);
        session.at
    }

    /// A layer count within `layers_per_image`.
    fn layer_count(&mut self) -> u32 {
        let (lo, hi) = self.opts.layers_per_image;
        self.rng.random_range(lo.max(1)..=hi.max(lo.max(1)))
    }

    /// The repositories and the images each holds before the trace starts.
    fn initial_repos(&mut self) -> Vec<Repo> {
        let mut repos: Vec<Repo> = Vec::new();
        for _ in 0..self.opts.repos.max(1) {
            let name = format!("{}/{}", self.hex8(), self.hex8());
            let mut images = Vec::new();
            for _ in 0..self.opts.initial_images.max(1) {
                let n = self.layer_count();
                let layers = (0..n).map(|_| (self.hex8(), self.layer_size())).collect();
                let tag = self.hex8();
                let manifest_size = self.rng.random_range(400..3000);
                images.push(Image {
                    tag,
                    manifest_size,
                    layers,
                });
            }
            repos.push(Repo { name, images });
        }
        repos
    }

    /// A pull of an image of `repo`: the version check, its manifest (an unknown tag,
    /// answered 404, now and then), and for some pulls its layers.
    fn pull(&mut self, session: &mut Session, repo: &Repo) {
        let client = session.client.clone();
        let ts = self.step(session);
        self.emit(ts, &client, "GET", "v2/".into(), 200, 2);
        if self.rng.random::<f64>() < self.opts.failed_share {
            // An unknown tag: the original answered 404.
            let tag = self.hex8();
            let ts = self.step(session);
            let uri = format!("v2/{}/manifests/{tag}", repo.name);
            self.emit(ts, &client, "GET", uri, 404, 0);
            return;
        }
        let image = &repo.images[self.zipf(repo.images.len() as u32) as usize];
        let ts = self.step(session);
        let uri = format!("v2/{}/manifests/{}", repo.name, image.tag);
        self.emit(ts, &client, "GET", uri, 200, image.manifest_size);
        if self.rng.random::<f64>() < self.opts.layer_fetch_share {
            for (digest, size) in &image.layers {
                let ts = self.step(session);
                let leading = if self.rng.random::<bool>() { "/" } else { "" };
                let uri = format!("{leading}v2/{}/blobs/{digest}", repo.name);
                self.emit(ts, &client, "GET", uri, 200, *size);
            }
        }
    }

    /// A push of a new image into `repo`: the shared base layer found, each new layer
    /// uploaded (HEAD 404, POST, PATCHes, PUT), then its manifest (failed now and then).
    fn push(&mut self, session: &mut Session, repo: &mut Repo) {
        let client = session.client.clone();
        let name = repo.name.clone();
        let n = self.layer_count();
        let mut layers = Vec::new();
        // A shared base layer already in the repository: HEAD 200, not uploaded.
        if let Some(base) = repo.images.first().and_then(|i| i.layers.first()).cloned() {
            let ts = self.step(session);
            let uri = format!("v2/{name}/blobs/{}", base.0);
            self.emit(ts, &client, "HEAD", uri, 200, 0);
            layers.push(base);
        }
        for _ in 0..n {
            layers.push(self.upload(session, &name));
        }
        let tag = self.hex8();
        let manifest_size = self.rng.random_range(400..3000);
        let ts = self.step(session);
        let uri = format!("v2/{name}/manifests/{tag}");
        if self.rng.random::<f64>() < self.opts.failed_share {
            // The registry failed the manifest PUT.
            self.emit(ts, &client, "PUT", uri, 500, manifest_size);
        } else {
            self.emit(ts, &client, "PUT", uri, 201, manifest_size);
            repo.images.push(Image {
                tag,
                manifest_size,
                layers,
            });
        }
    }

    /// One new layer's upload into repository `name`: its digest and size.
    fn upload(&mut self, session: &mut Session, name: &str) -> (String, u64) {
        let client = session.client.clone();
        let digest = self.hex8();
        let size = self.layer_size();
        let upload = self.hex8();
        let ts = self.step(session);
        let uri = format!("v2/{name}/blobs/{digest}");
        self.emit(ts, &client, "HEAD", uri, 404, 0);
        self.stats.head_misses += 1;
        let ts = self.step(session);
        self.emit(
            ts,
            &client,
            "POST",
            format!("v2/{name}/blobs/uploads/"),
            202,
            0,
        );
        self.stats.uploads += 1;
        let chunk = self.opts.chunk.max(1);
        let mut sent = 0;
        while sent < size {
            let len = chunk.min(size - sent);
            let ts = self.step(session);
            let uri = format!("v2/{name}/blobs/uploads/{upload}");
            self.emit(ts, &client, "PATCH", uri, 202, len);
            self.stats.upload_members += 1;
            sent += len;
        }
        let ts = self.step(session);
        let uri = format!("v2/{name}/blobs/uploads/{upload}");
        self.emit(ts, &client, "PUT", uri, 201, 0);
        self.stats.upload_members += 1;
        (digest, size)
    }
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
