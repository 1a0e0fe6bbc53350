//! Synthetic traces calibrated to the published characterization of one IBM data center
//! (FAST'18 §4): a streaming generator whose request mix, popularity skew, sizes and
//! session shapes land on each profile's targets (`docs/traces.md` lists them and how
//! closely they are met).

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use super::{format_ms, SynthOptions, SynthStats, USER_AGENT};
use crate::fast_hash::{splitmix64, GOLDEN_GAMMA};
use crate::trace::write::RawRecord;

/// A workload calibrated to one registry of the FAST'18 characterization (Anwar et al.,
/// §4; `docs/traces.md` lists the targets and how closely the generator meets them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
    #[allow(clippy::too_many_lines)]
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
    splitmix64(x.wrapping_add(GOLDEN_GAMMA))
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

impl ProfileGenerator {
    #[allow(clippy::too_many_lines)]
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
            useragent: std::borrow::Cow::Borrowed(USER_AGENT),
            status,
            written,
            id: format!("{:016x}", permute64(self.next_id)),
            timestamp: format_ms(*at),
            size_unknown: false,
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
