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
//! Two generators live here:
//! - [`generate`]: the small, session-level generator behind the bundled sample trace and
//!   the replay tests. Its output for given [`SynthOptions`] is frozen (`tests/fixtures.rs`
//!   checks `fixtures/sample-trace.json` byte for byte), so it is never changed, only added to.
//! - [`ProfileGenerator`]: streaming traces calibrated to the published characterization of
//!   one IBM data center ([`Profile`]); records come out in timestamp order while only the
//!   sessions in flight are held, so a trace of millions of records costs a few megabytes.
//!   Popularity uses precomputed Zipf tables (binary search per draw), object names come
//!   from a keyed bijection of a counter (so no two distinct objects share a name, unlike
//!   random 8-hex names at this scale), and sizes of pooled objects are assigned by their
//!   request weight, so that sizes *per request* follow the target distribution however
//!   skewed the popularity.

use std::io::Write;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

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

/// One record in the IBM field layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RawRecord {
    pub host: String,
    #[serde(rename = "http.request.duration")]
    pub duration: f64,
    #[serde(rename = "http.request.method")]
    pub method: &'static str,
    #[serde(rename = "http.request.remoteaddr")]
    pub remoteaddr: String,
    #[serde(rename = "http.request.uri")]
    pub uri: String,
    #[serde(rename = "http.request.useragent")]
    pub useragent: &'static str,
    #[serde(rename = "http.response.status")]
    pub status: u16,
    #[serde(rename = "http.response.written")]
    pub written: u64,
    pub id: String,
    pub timestamp: String,
    /// Unix ms, for sorting and splitting (not written).
    #[serde(skip)]
    pub time_ms: i64,
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
            useragent: USER_AGENT,
            status,
            written,
            id: format!("{:010x}", self.rng.random::<u64>() & 0xff_ffff_ffff),
            timestamp: format_ms(t_ms),
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

/// Writes records as one JSON array (the IBM layout), streaming.
pub fn write_json_array(w: &mut impl Write, records: &[RawRecord]) -> std::io::Result<()> {
    w.write_all(b"[")?;
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            w.write_all(b",\n")?;
        } else {
            w.write_all(b"\n")?;
        }
        serde_json::to_writer(&mut *w, r)?;
    }
    w.write_all(b"\n]\n")
}

/// Writes records to `path`, gzip-compressed when the name ends in `.gz`.
pub fn write_file(path: &Path, records: &[RawRecord]) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        write_json_array(&mut gz, records)?;
        gz.finish()?.flush()
    } else {
        let mut file = file;
        write_json_array(&mut file, records)?;
        file.flush()
    }
}

/// Writes any sequence of records as one JSON array (the IBM layout), streaming: nothing but
/// the record being written is held.
pub fn write_json_array_iter(
    w: &mut impl Write,
    records: impl IntoIterator<Item = RawRecord>,
) -> std::io::Result<u64> {
    let mut n = 0u64;
    w.write_all(b"[")?;
    for r in records {
        w.write_all(if n == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut *w, &r)?;
        n += 1;
    }
    w.write_all(b"\n]\n")?;
    Ok(n)
}

/// Streams records to `path` as a JSON array, gzip-compressed when the name ends in `.gz`.
/// Returns how many were written.
pub fn write_file_iter(
    path: &Path,
    records: impl IntoIterator<Item = RawRecord>,
) -> std::io::Result<u64> {
    let file = std::io::BufWriter::with_capacity(256 * 1024, std::fs::File::create(path)?);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        let n = write_json_array_iter(&mut gz, records)?;
        gz.finish()?.flush()?;
        Ok(n)
    } else {
        let mut file = file;
        let n = write_json_array_iter(&mut file, records)?;
        file.flush()?;
        Ok(n)
    }
}

// ---------------------------------------------------------------------------------------
// Calibrated profiles

/// A workload calibrated to one registry of the FAST'18 characterization (Anwar et al.,
/// §4; `docs/traces.md` lists the targets and how closely the generator meets them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Dallas production: the largest, mature registry (~93% pulls, least layer skew).
    Dal,
    /// London production: mature, half of the manifests > 10 KB (old schema).
    Lon,
    /// Frankfurt production: mature.
    Fra,
    /// Sydney production: young (~78% pulls), most skewed layer popularity.
    Syd,
    /// Development registry: push-heavy (~70% pulls).
    Dev,
}

impl Profile {
    /// Every profile, in documentation order.
    pub const ALL: [Profile; 5] = [
        Profile::Dal,
        Profile::Lon,
        Profile::Fra,
        Profile::Syd,
        Profile::Dev,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Dal => "dal",
            Profile::Lon => "lon",
            Profile::Fra => "fra",
            Profile::Syd => "syd",
            Profile::Dev => "dev",
        }
    }

    /// The generator's parameters for this profile.
    pub fn params(self) -> ProfileParams {
        let base = ProfileParams {
            requests_per_minute: 250.0,
            diurnal_amplitude: 0.5,
            peak_hour_utc: 14.0,
            pull_share: 0.93,
            ping_share: 0.9,
            pull_head_share: 0.3,
            layer_fetch_share: 0.15,
            layers_per_fetch: 3.0,
            uploads_per_push: 2.0,
            existing_layers_per_push: 1.0,
            patch_share: 0.45,
            layer_top1_share: 0.42,
            layer_reuse: 4.0,
            manifest_top1_share: 0.54,
            manifest_reuse: 8.0,
            client_zipf: 0.7,
            ops_per_client: 40.0,
            layer_sizes: LAYER_SIZES,
            manifest_sizes: MANIFEST_SIZES,
            unknown_tag_share: 0.01,
            error_share: 0.002,
            duplicate_share: 0.002,
        };
        match self {
            Profile::Dal => base,
            Profile::Lon => ProfileParams {
                requests_per_minute: 120.0,
                pull_share: 0.92,
                layer_fetch_share: 0.08,
                layer_top1_share: 0.48,
                manifest_top1_share: 0.6,
                manifest_sizes: MANIFEST_SIZES_LON,
                ..base
            },
            Profile::Fra => ProfileParams {
                requests_per_minute: 80.0,
                pull_share: 0.91,
                layer_fetch_share: 0.2,
                layer_top1_share: 0.5,
                manifest_top1_share: 0.62,
                ..base
            },
            Profile::Syd => ProfileParams {
                requests_per_minute: 30.0,
                pull_share: 0.78,
                pull_head_share: 0.15,
                layer_fetch_share: 0.25,
                uploads_per_push: 1.5,
                existing_layers_per_push: 0.5,
                patch_share: 0.6,
                layer_top1_share: 0.59,
                manifest_top1_share: 0.71,
                ..base
            },
            Profile::Dev => ProfileParams {
                requests_per_minute: 40.0,
                diurnal_amplitude: 0.7,
                pull_share: 0.7,
                pull_head_share: 0.1,
                layer_fetch_share: 0.1,
                uploads_per_push: 1.5,
                existing_layers_per_push: 0.5,
                patch_share: 0.35,
                layer_top1_share: 0.5,
                manifest_top1_share: 0.62,
                ..base
            },
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Layer sizes (request-weighted): piecewise log-linear CDF as (log10 bytes, share below).
/// ~65% < 1 MB, ~80% < 10 MB, 7% > 100 MB, 1% > 500 MB, capped at 2 GiB (FAST'18 Fig. 6).
pub const LAYER_SIZES: &[(f64, f64)] = &[
    (2.0, 0.0),
    (3.0, 0.05),
    (4.0, 0.15),
    (5.0, 0.35),
    (6.0, 0.65),
    (7.0, 0.80),
    (8.0, 0.93),
    (8.7, 0.99),
    (9.332, 1.0),
];

/// Manifest sizes: median ~1 KB, 90% < 40 KB.
pub const MANIFEST_SIZES: &[(f64, f64)] = &[
    (2.6, 0.0),
    (3.0, 0.5),
    (3.5, 0.72),
    (4.0, 0.82),
    (4.6, 0.9),
    (5.3, 1.0),
];

/// London's manifests: mostly the old schema with history, 55% > 10 KB.
pub const MANIFEST_SIZES_LON: &[(f64, f64)] = &[
    (2.6, 0.0),
    (3.0, 0.2),
    (4.0, 0.45),
    (4.3, 0.6),
    (4.7, 0.92),
    (5.3, 1.0),
];

/// What a [`Profile`] generates. Shares are probabilities per image operation (session) or
/// per request as named. Layers and manifests are drawn from Zipf-distributed pools whose
/// sizes scale with the trace (`*_reuse`: expected GETs per pooled object); each pool's
/// exponent is solved for the trace's expected number of draws so that the most requested
/// 1% of the objects *seen* take `*_top1_share` of the GETs, at any trace length.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileParams {
    /// Mean request rate over a day.
    pub requests_per_minute: f64,
    /// The rate swings by this fraction around its mean over a UTC day, peaking at
    /// `peak_hour_utc`.
    pub diurnal_amplitude: f64,
    pub peak_hour_utc: f64,
    /// Share of image operations that are pulls (the rest push).
    pub pull_share: f64,
    /// Share of pulls that start with `GET v2/`.
    pub ping_share: f64,
    /// Share of pulls that `HEAD` the manifest before getting it.
    pub pull_head_share: f64,
    /// Share of pulls whose manifest GET is followed by layer GETs.
    pub layer_fetch_share: f64,
    /// Mean layers fetched by such a pull (at least 1).
    pub layers_per_fetch: f64,
    /// Mean layers uploaded by a push (at least 1).
    pub uploads_per_push: f64,
    /// Mean layers a push finds already present (`HEAD` 200).
    pub existing_layers_per_push: f64,
    /// Share of uploads sending their bytes in a `PATCH` (the rest in the closing `PUT`).
    pub patch_share: f64,
    /// Share of layer GETs that go to the most requested 1% of layers (FAST'18: 42% dal to
    /// 59% syd).
    pub layer_top1_share: f64,
    pub layer_reuse: f64,
    /// The same for manifest GETs (manifests are more skewed than layers).
    pub manifest_top1_share: f64,
    pub manifest_reuse: f64,
    pub client_zipf: f64,
    pub ops_per_client: f64,
    pub layer_sizes: &'static [(f64, f64)],
    pub manifest_sizes: &'static [(f64, f64)],
    /// Share of pulls asking for an unknown tag (manifest GET answered 404).
    pub unknown_tag_share: f64,
    /// Share of layer GETs and manifest PUTs the registry failed (500).
    pub error_share: f64,
    /// Share of records logged twice (same `id`).
    pub duplicate_share: f64,
}

impl ProfileParams {
    /// Expected requests of one image operation, before duplicates.
    pub fn requests_per_operation(&self) -> f64 {
        let pull = self.ping_share
            + self.pull_head_share
            + 1.0
            + self.layer_fetch_share * self.layers_per_fetch;
        let push =
            self.existing_layers_per_push + self.uploads_per_push * (3.0 + self.patch_share) + 1.0;
        self.pull_share * pull + (1.0 - self.pull_share) * push
    }
}

/// How long a synthetic trace is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthLength {
    /// Exactly this many records (duplicates included).
    Requests(u64),
    /// Every record within this long of the start.
    Duration(std::time::Duration),
}

/// What [`ProfileGenerator`] makes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileOptions {
    pub profile: Profile,
    pub length: SynthLength,
    pub seed: u64,
    /// Trace start, Unix ms (default 2017-06-20T00:00:00Z).
    pub start_ms: i64,
    /// Cap on blob sizes: larger draws become this size (the distribution folds at the cap),
    /// so a synthetic trace's prewarm fits a small test registry.
    pub max_object_size: Option<u64>,
}

impl ProfileOptions {
    pub fn new(profile: Profile, length: SynthLength, seed: u64) -> Self {
        ProfileOptions {
            profile,
            length,
            seed,
            start_ms: SynthOptions::default().start_ms,
            max_object_size: None,
        }
    }
}

/// Cumulative Zipf weights over `0..n`: a draw is one uniform number and a binary search.
#[derive(Debug, Clone)]
struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    fn new(n: usize, exponent: f64) -> Self {
        let mut total = 0.0;
        let cdf = (1..=n.max(1))
            .map(|i| {
                total += (i as f64).powf(-exponent);
                total
            })
            .collect();
        ZipfTable { cdf }
    }

    /// The probability of item `i`.
    fn weight(&self, i: usize) -> f64 {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let below = if i == 0 { 0.0 } else { self.cdf[i - 1] };
        (self.cdf[i] - below) / total
    }

    /// A quantile per item such that, weighting items by probability, the quantiles are
    /// spread evenly: items in a keyed random order each take a slice of [0, 1] as wide as
    /// their probability, and their quantile is its middle. Sizes drawn at these quantiles
    /// have the wanted distribution *per request*, within half the largest probability.
    fn weighted_quantiles(&self, key: u32) -> Vec<f64> {
        let n = self.cdf.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_unstable_by_key(|&i| permute32(i, key));
        let mut quantiles = vec![0.0; n];
        let mut below = 0.0;
        for i in order {
            let w = self.weight(i as usize);
            quantiles[i as usize] = (below + w / 2.0).clamp(0.0, 1.0);
            below += w;
        }
        quantiles
    }

    fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> usize {
        let total = self.cdf.last().copied().unwrap_or(1.0);
        let u = rng.random::<f64>() * total;
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// The size at quantile `u` of a piecewise log-linear CDF.
fn size_at(cdf: &[(f64, f64)], u: f64) -> u64 {
    let u = u.clamp(0.0, 1.0);
    let mut log = cdf.first().map_or(0.0, |p| p.0);
    for w in cdf.windows(2) {
        let ((x0, c0), (x1, c1)) = (w[0], w[1]);
        if u <= c1 {
            let f = if c1 > c0 { (u - c0) / (c1 - c0) } else { 0.0 };
            log = x0 + f * (x1 - x0);
            break;
        }
        log = x1;
    }
    (10f64.powf(log).round() as u64).clamp(1, MAX_SYNTH_SIZE)
}

/// The most objects in one pool of a [`ProfileGenerator`].
const MAX_POOL: usize = 1 << 22;

/// The largest object a profile generates: 2 GiB.
pub const MAX_SYNTH_SIZE: u64 = 2 << 30;

/// A keyed bijection of `u32`: distinct counters give distinct names.
fn permute32(x: u32, key: u32) -> u32 {
    let mut v = x.wrapping_add(key);
    v ^= v >> 16;
    v = v.wrapping_mul(0x7feb_352d);
    v ^= v >> 15;
    v = v.wrapping_mul(0x846c_a68b);
    v ^= v >> 16;
    v
}

/// A bijection of `u64` (the splitmix64 finalizer).
fn permute64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Name spaces of generated names.
#[derive(Debug, Clone, Copy)]
enum Ns {
    User = 0,
    Repo,
    Tag,
    Layer,
    Client,
    Upload,
}

/// A record waiting for its time, ordered so that the heap pops the earliest first.
#[derive(Debug)]
struct Pending {
    time_ms: i64,
    seq: u64,
    record: RawRecord,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ms, self.seq) == (other.time_ms, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.time_ms, other.seq).cmp(&(self.time_ms, self.seq))
    }
}

/// Streams a profile's trace in timestamp order. See the module documentation.
///
/// Image operations (sessions) arrive as a Poisson process whose rate follows the time of
/// day; each session's records are queued in a heap and released once no later session can
/// precede them, so memory is the sessions in flight plus the object pools (which scale with
/// distinct objects, a small fraction of the records).
#[derive(Debug)]
pub struct ProfileGenerator {
    params: ProfileParams,
    rng: Xoshiro256PlusPlus,
    keys: [u32; 6],
    limit: Option<u64>,
    end_ms: Option<i64>,
    emitted: u64,
    /// Start of the next session, ms (fractional, so rates are exact).
    clock_ms: f64,
    sessions_done: bool,
    seq: u64,
    pending: std::collections::BinaryHeap<Pending>,
    layers: ZipfTable,
    layer_sizes: Vec<u64>,
    images: ZipfTable,
    image_repo: Vec<u32>,
    manifest_sizes: Vec<u64>,
    repos: ZipfTable,
    repo_names: Vec<String>,
    clients: ZipfTable,
    next_layer: u32,
    next_tag: u32,
    next_upload: u32,
    next_id: u64,
    stats: SynthStats,
    cap_size: u64,
}

/// The expected share of `draws` Zipf(`exponent`) draws over `n` items taken by the most
/// drawn 1% of the items drawn at least once. Exact over the first items, then summed over
/// geometric buckets, so the cost is logarithmic in `n` past a few thousand.
///
/// `repeat` corrects for draws made in groups without repetition (a pull fetches distinct
/// layers; a repeat is drawn again): an item of probability `p` then keeps about
/// `p (1 - repeat p)` of its draws, where `repeat` is half the mean group size minus one.
fn expected_top1_share(n: usize, exponent: f64, draws: f64, repeat: f64) -> f64 {
    const EXACT: usize = 4096;
    // (weight of one item, number of such items), unnormalized.
    let mut groups: Vec<(f64, f64)> = Vec::new();
    let mut i = 1usize;
    while i <= n {
        if i <= EXACT {
            groups.push(((i as f64).powf(-exponent), 1.0));
            i += 1;
        } else {
            let end = (i + i / 50).min(n + 1);
            let mid = ((i * (end - 1)) as f64).sqrt();
            groups.push((mid.powf(-exponent), (end - i) as f64));
            i = end;
        }
    }
    let total: f64 = groups.iter().map(|(w, k)| w * k).sum();
    if total <= 0.0 {
        return 0.0;
    }
    for (w, _) in &mut groups {
        *w *= (1.0 - repeat * *w / total).max(0.0);
    }
    let total: f64 = groups.iter().map(|(w, k)| w * k).sum();
    if total <= 0.0 {
        return 0.0;
    }
    // Items seen: each is seen with probability 1 - (1 - p)^draws.
    let seen: f64 = groups
        .iter()
        .map(|(w, k)| k * -((draws * (-(w / total)).ln_1p()).exp_m1()))
        .sum();
    let mut top = (seen / 100.0).ceil().max(1.0);
    let mut share = 0.0;
    for (w, k) in &groups {
        if top <= 0.0 {
            break;
        }
        let take = k.min(top);
        share += w * take / total;
        top -= take;
    }
    share
}

/// The Zipf exponent for which [`expected_top1_share`] is `target` (bisection; the share
/// grows with the exponent).
fn solve_exponent(n: usize, draws: f64, repeat: f64, target: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 3.0f64);
    for _ in 0..30 {
        let mid = (lo + hi) / 2.0;
        if expected_top1_share(n, mid, draws, repeat) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Creates the generator for `opts`.
pub fn synth_profile(opts: &ProfileOptions) -> ProfileGenerator {
    ProfileGenerator::new(opts)
}

impl ProfileGenerator {
    pub fn new(opts: &ProfileOptions) -> Self {
        let p = opts.profile.params();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(opts.seed);
        let keys = std::array::from_fn(|_| rng.random::<u32>());
        let per_op = p.requests_per_operation() * (1.0 + p.duplicate_share);
        let (limit, end_ms, requests) = match opts.length {
            SynthLength::Requests(n) => (Some(n), None, n as f64),
            SynthLength::Duration(d) => {
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2);
                let requests = p.requests_per_minute * d.as_secs_f64() / 60.0;
                (None, Some(opts.start_ms.saturating_add(ms)), requests)
            }
        };
        let ops = (requests / per_op).max(1.0);
        let pulls = ops * p.pull_share;
        let layer_gets = pulls * p.layer_fetch_share * p.layers_per_fetch;
        // Pools grow with the trace up to 4 M objects each (FAST'18's 75 days: ~1.3 M layers),
        // so even an absurd --duration allocates tens of MB, not gigabytes.
        let cap = |x: f64, lo: usize| (x as usize).clamp(lo, MAX_POOL);
        let n_layers = cap(layer_gets / p.layer_reuse, 50);
        let n_images = cap(pulls / p.manifest_reuse, 20);
        let n_repos = cap(n_images as f64 / 2.0, 10);
        let n_clients = cap(ops / p.ops_per_client, 10);

        let layers = ZipfTable::new(
            n_layers,
            solve_exponent(
                n_layers,
                layer_gets,
                (p.layers_per_fetch - 1.0).max(0.0) / 2.0,
                p.layer_top1_share,
            ),
        );
        let images = ZipfTable::new(
            n_images,
            solve_exponent(n_images, pulls, 0.0, p.manifest_top1_share),
        );
        let cap_size = opts.max_object_size.unwrap_or(u64::MAX).max(1);
        let layer_sizes = layers
            .weighted_quantiles(rng.random())
            .into_iter()
            .map(|u| size_at(p.layer_sizes, u).min(cap_size))
            .collect();
        let manifest_sizes = images
            .weighted_quantiles(rng.random())
            .into_iter()
            .map(|u| size_at(p.manifest_sizes, u))
            .collect();
        let repos = ZipfTable::new(n_repos, 1.0);
        let image_repo = (0..n_images)
            .map(|_| repos.sample(&mut rng) as u32)
            .collect();
        let mut g = ProfileGenerator {
            rng,
            keys,
            limit,
            end_ms,
            emitted: 0,
            clock_ms: opts.start_ms as f64,
            sessions_done: false,
            seq: 0,
            pending: std::collections::BinaryHeap::new(),
            layers,
            layer_sizes,
            images,
            image_repo,
            manifest_sizes,
            repos,
            repo_names: Vec::new(),
            clients: ZipfTable::new(n_clients, p.client_zipf),
            next_layer: n_layers as u32,
            next_tag: n_images as u32,
            next_upload: 0,
            next_id: u64::from(keys[0]) << 32,
            stats: SynthStats::default(),
            cap_size,
            params: p,
        };
        // A few users own several repositories each.
        g.repo_names = (0..n_repos as u32)
            .map(|i| format!("{}/{}", g.name(Ns::User, i / 3), g.name(Ns::Repo, i)))
            .collect();
        g.advance_clock();
        g
    }

    /// What was generated so far.
    pub fn stats(&self) -> &SynthStats {
        &self.stats
    }

    fn name(&self, ns: Ns, i: u32) -> String {
        format!("{:08x}", permute32(i, self.keys[ns as usize]))
    }

    /// Moves the clock to the next session start: exponential gaps at the rate of the
    /// current time of day.
    fn advance_clock(&mut self) {
        let p = &self.params;
        let hour = (self.clock_ms / 3_600_000.0).rem_euclid(24.0);
        let phase = (hour - p.peak_hour_utc) / 24.0 * std::f64::consts::TAU;
        let rpm = p.requests_per_minute * (1.0 + p.diurnal_amplitude * phase.cos()).max(0.05);
        let ops_per_ms = rpm / p.requests_per_operation() / 60_000.0;
        let gap = -(1.0 - self.rng.random::<f64>()).ln() / ops_per_ms;
        self.clock_ms += gap.max(1.0);
        if self.end_ms.is_some_and(|end| self.clock_ms > end as f64) {
            self.sessions_done = true;
        }
    }

    /// 1 + a geometric count with the given mean (≥ 1), capped.
    fn at_least_one(&mut self, mean: f64, cap: u32) -> u32 {
        1 + self.geometric(mean - 1.0, cap - 1)
    }

    /// A geometric count ≥ 0 with the given mean, capped.
    fn geometric(&mut self, mean: f64, cap: u32) -> u32 {
        let q = mean.max(0.0) / (1.0 + mean.max(0.0));
        let mut k = 0;
        while k < cap && self.rng.random::<f64>() < q {
            k += 1;
        }
        k
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random::<f64>() < p
    }

    fn emit(
        &mut self,
        at: &mut i64,
        client: &str,
        method: &'static str,
        uri: String,
        status: u16,
        written: u64,
    ) {
        // Requests of a session follow each other after a client-side pause; the response
        // takes its transfer time at ~100 MB/s.
        *at += self.rng.random_range(3..40);
        let service = 0.001 + written as f64 / 100e6 + self.rng.random::<f64>() * 0.01;
        let record = RawRecord {
            host: format!("{:08x}", self.rng.random::<u32>() % 4),
            duration: (service * 1e6).round() / 1e6,
            method,
            remoteaddr: client.to_owned(),
            uri,
            useragent: USER_AGENT,
            status,
            written,
            id: format!("{:016x}", permute64(self.next_id)),
            timestamp: format_ms(*at),
            time_ms: *at,
        };
        self.next_id += 1;
        let t = *at;
        *at += (service * 1000.0) as i64;
        self.stats.records += 1;
        if status >= 400 && !(method == "HEAD" && status == 404) {
            self.stats.failed += 1;
        }
        if method == "HEAD" && status == 404 {
            self.stats.head_misses += 1;
        }
        if self.chance(self.params.duplicate_share) {
            self.stats.records += 1;
            self.stats.duplicates += 1;
            self.push(t, record.clone());
        }
        self.push(t, record);
    }

    fn push(&mut self, time_ms: i64, record: RawRecord) {
        self.seq += 1;
        self.pending.push(Pending {
            time_ms,
            seq: self.seq,
            record,
        });
    }

    /// Generates one image operation starting at the clock.
    fn session(&mut self) {
        let mut at = self.clock_ms.round() as i64;
        let client = self.clients.sample(&mut self.rng) as u32;
        let client = self.name(Ns::Client, client);
        if self.chance(self.params.pull_share) {
            self.pull(&mut at, &client);
        } else {
            self.push_image(&mut at, &client);
        }
        self.advance_clock();
    }

    fn pull(&mut self, at: &mut i64, client: &str) {
        self.stats.pulls += 1;
        let image = self.images.sample(&mut self.rng);
        let repo = self.repo_names[self.image_repo[image] as usize].clone();
        if self.chance(self.params.ping_share) {
            self.emit(at, client, "GET", "v2/".into(), 200, 2);
        }
        if self.chance(self.params.unknown_tag_share) {
            let tag = self.name(Ns::Tag, self.next_tag);
            self.next_tag = self.next_tag.wrapping_add(1);
            let uri = format!("v2/{repo}/manifests/{tag}");
            self.emit(at, client, "GET", uri, 404, 0);
            return;
        }
        let manifest = format!("v2/{repo}/manifests/{}", self.name(Ns::Tag, image as u32));
        if self.chance(self.params.pull_head_share) {
            self.emit(at, client, "HEAD", manifest.clone(), 200, 0);
        }
        let size = self.manifest_sizes[image];
        self.emit(at, client, "GET", manifest, 200, size);
        if !self.chance(self.params.layer_fetch_share) {
            return;
        }
        let n = self.at_least_one(self.params.layers_per_fetch, 12);
        let mut fetched: Vec<usize> = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let mut layer = self.layers.sample(&mut self.rng);
            for _ in 0..4 {
                if !fetched.contains(&layer) {
                    break;
                }
                layer = self.layers.sample(&mut self.rng);
            }
            if fetched.contains(&layer) {
                continue;
            }
            fetched.push(layer);
            let digest = self.name(Ns::Layer, layer as u32);
            let uri = format!("v2/{repo}/blobs/{digest}");
            if self.chance(self.params.error_share) {
                self.emit(at, client, "GET", uri, 500, 0);
            } else {
                let size = self.layer_sizes[layer];
                self.emit(at, client, "GET", uri, 200, size);
            }
        }
    }

    fn push_image(&mut self, at: &mut i64, client: &str) {
        self.stats.pushes += 1;
        let repo = self.repo_names[self.repos.sample(&mut self.rng)].clone();
        let existing = self.geometric(self.params.existing_layers_per_push, 8);
        for _ in 0..existing {
            let layer = self.layers.sample(&mut self.rng);
            let uri = format!("v2/{repo}/blobs/{}", self.name(Ns::Layer, layer as u32));
            self.emit(at, client, "HEAD", uri, 200, 0);
        }
        let uploads = self.at_least_one(self.params.uploads_per_push, 10);
        for _ in 0..uploads {
            let digest = self.name(Ns::Layer, self.next_layer);
            self.next_layer = self.next_layer.wrapping_add(1);
            let session = self.name(Ns::Upload, self.next_upload);
            self.next_upload = self.next_upload.wrapping_add(1);
            let size =
                size_at(self.params.layer_sizes, self.rng.random::<f64>()).min(self.cap_size);
            self.emit(
                at,
                client,
                "HEAD",
                format!("v2/{repo}/blobs/{digest}"),
                404,
                0,
            );
            self.emit(
                at,
                client,
                "POST",
                format!("v2/{repo}/blobs/uploads/"),
                202,
                0,
            );
            self.stats.uploads += 1;
            let upload = format!("v2/{repo}/blobs/uploads/{session}");
            let closing = if self.chance(self.params.patch_share) {
                self.emit(at, client, "PATCH", upload.clone(), 202, size);
                self.stats.upload_members += 1;
                0
            } else {
                size
            };
            self.emit(at, client, "PUT", upload, 201, closing);
            self.stats.upload_members += 1;
        }
        let tag = self.name(Ns::Tag, self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1);
        let size = size_at(self.params.manifest_sizes, self.rng.random::<f64>());
        let status = if self.chance(self.params.error_share) {
            500
        } else {
            201
        };
        let uri = format!("v2/{repo}/manifests/{tag}");
        self.emit(at, client, "PUT", uri, status, size);
    }
}

impl Iterator for ProfileGenerator {
    type Item = RawRecord;

    fn next(&mut self) -> Option<RawRecord> {
        if self.limit.is_some_and(|n| self.emitted >= n) {
            return None;
        }
        // Every later session starts at or after the clock, and its records after its
        // start: a queued record earlier than the clock can go.
        while !self.sessions_done
            && self
                .pending
                .peek()
                .is_none_or(|p| p.time_ms as f64 >= self.clock_ms)
        {
            self.session();
        }
        let next = self.pending.pop()?;
        if self.end_ms.is_some_and(|end| next.time_ms > end) {
            self.pending.clear();
            self.sessions_done = true;
            return None;
        }
        self.emitted += 1;
        Some(next.record)
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

#[cfg(test)]
mod profile_tests {
    use super::*;

    /// The observed top-1% share of `draws` draws from a solved table.
    fn observed_share(n: usize, draws: usize, target: f64, seed: u64) -> f64 {
        let table = ZipfTable::new(n, solve_exponent(n, draws as f64, 0.0, target));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut counts = vec![0u64; n];
        for _ in 0..draws {
            counts[table.sample(&mut rng)] += 1;
        }
        let mut seen: Vec<u64> = counts.into_iter().filter(|c| *c > 0).collect();
        seen.sort_unstable_by(|a, b| b.cmp(a));
        let top = seen.len().div_ceil(100).max(1);
        seen[..top].iter().sum::<u64>() as f64 / draws as f64
    }

    #[test]
    fn solved_exponents_give_the_target_top_share() {
        for (n, draws, target) in [
            (1300, 5200, 0.42),
            (10_000, 40_000, 0.59),
            (33_000, 130_000, 0.42),
        ] {
            for seed in 0..3 {
                let got = observed_share(n, draws, target, seed);
                assert!((got - target).abs() < 0.03, "{n} {draws}: {got}");
            }
        }
        // Past the exact range the bucketed sum stays close to the exact one.
        let exact = expected_top1_share(4096, 1.0, 20_000.0, 0.0);
        let bucketed = expected_top1_share(40_000, 1.0, 200_000.0, 0.0);
        assert!(exact > 0.3 && bucketed > exact, "{exact} {bucketed}");
    }

    #[test]
    fn weighted_quantiles_spread_requests_evenly() {
        let table = ZipfTable::new(5000, 1.0);
        let q = table.weighted_quantiles(42);
        // The request-weighted share of items below quantile x is x, within the largest
        // weight.
        let max_w = table.weight(0);
        for x in [0.1, 0.5, 0.65, 0.8] {
            let below: f64 = (0..5000)
                .filter(|&i| q[i] < x)
                .map(|i| table.weight(i))
                .sum();
            assert!((below - x).abs() <= max_w, "{x}: {below}");
        }
    }

    #[test]
    fn sizes_follow_the_piecewise_cdf() {
        assert_eq!(size_at(LAYER_SIZES, 0.0), 100);
        assert_eq!(size_at(LAYER_SIZES, 0.65), 1_000_000);
        assert_eq!(size_at(LAYER_SIZES, 0.80), 10_000_000);
        assert_eq!(size_at(LAYER_SIZES, 1.0), MAX_SYNTH_SIZE);
        assert_eq!(size_at(MANIFEST_SIZES, 0.5), 1000);
        assert!(size_at(MANIFEST_SIZES_LON, 0.5) > 10_000);
    }

    #[test]
    fn names_are_distinct() {
        let key = 0xdead_beef;
        let mut seen: Vec<u32> = (0..200_000).map(|i| permute32(i, key)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 200_000);
    }

    #[test]
    fn profile_streams_in_time_order_with_exact_length() {
        let opts = ProfileOptions::new(Profile::Syd, SynthLength::Requests(5000), 3);
        let mut g = ProfileGenerator::new(&opts);
        let records: Vec<RawRecord> = g.by_ref().collect();
        assert_eq!(records.len(), 5000);
        assert!(records.windows(2).all(|w| w[0].time_ms <= w[1].time_ms));
        assert!(g.stats().pulls > 0 && g.stats().pushes > 0 && g.stats().duplicates > 0);
        assert!(records.iter().all(|r| r.written <= MAX_SYNTH_SIZE));
        // Every pooled layer has one size wherever it is fetched.
        let mut sizes = std::collections::HashMap::new();
        for r in records
            .iter()
            .filter(|r| r.method == "GET" && r.uri.contains("/blobs/"))
        {
            let digest = r.uri.rsplit('/').next().unwrap();
            if r.status == 200 {
                assert_eq!(
                    *sizes.entry(digest.to_owned()).or_insert(r.written),
                    r.written
                );
            }
        }
    }
}
