//! Pass 1 over the trace: everything the plan needs to know ahead of time.
//!
//! - the **objects the run reads** (blob and manifest GET/HEAD records that succeeded in the
//!   trace), per repository: prewarm pushes exactly these;
//! - each blob's **size** (the largest `written` of its successful GETs);
//! - each **manifest's layers** (the blob GETs of the pulls that follow its GETs);
//! - each **upload's facts** (bytes and chunks from its PATCH/PUT records, the digest a HEAD
//!   404 named), keyed by its head record;
//! - the **digests** of all generated content, computed in parallel once.
//!
//! The catalog is built from the whole trace, not a shard, so every host derives the same
//! objects, contents and digests. Its size grows with distinct objects and uploads, never
//! with the number of records. Built, it keeps its facts in sorted vectors
//! ([`SortedMap`]): exactly the entries, read by binary search for the rest of the run.

use std::collections::{BTreeSet, HashMap};

use super::digest_cache::DigestCache;
use super::linker::{Position, PushedLayer, Role, SessionLinker};
use super::sorted_map::SortedMap;
use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::fast_hash::FastHashMap;
use crate::trace::{Interner, Item, Method, Record, Sym, Target, TraceError};

/// What the trace says about one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadFacts {
    /// Bytes sent by its PATCH and PUT records.
    pub bytes: u64,
    /// PATCH records (chunks).
    pub patches: u32,
    /// Records folded into the upload besides its head.
    pub members: u32,
    /// The blob digest a preceding HEAD 404 named, if any.
    pub digest: Option<Sym>,
    /// Identity inputs: the head record's repository, client and time.
    pub repo: Option<Sym>,
    pub client: Option<Sym>,
    pub time_ms: i64,
    /// SHA-256 of the content it sends, once computed ([`Catalog::compute_digests`]).
    pub sha256: Option<[u8; 32]>,
    /// The manifest PUT whose push it belongs to, if one closed it: routing keeps an
    /// upload with its manifest, whose node must hold every blob it references.
    pub push: Option<Position>,
}

/// A blob the run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFacts {
    /// Largest `written` of its successful GETs (0 if only HEADs: size unknown).
    pub size: u64,
    /// SHA-256 of its generated content, once computed ([`Catalog::compute_digests`]).
    pub sha256: Option<[u8; 32]>,
}

/// A manifest the run reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManifestFacts {
    /// Largest `written` of its successful GETs (0 if only HEADs).
    pub size: u64,
    /// Blobs pulled after it, in first-seen order.
    pub layers: Vec<Sym>,
}

/// A manifest PUT the run replays: what its generated manifest is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushFacts {
    pub repo: Sym,
    pub reference: Sym,
    pub client: Option<Sym>,
    pub time_ms: i64,
    pub number: u64,
    /// The manifest size the trace recorded.
    pub size: u64,
    pub layers: Vec<PushedLayer>,
}

/// How the sizes of generated blobs relate to the trace's (`--size-scale`,
/// `--max-object-size`): every size the trace records is multiplied by the scale, rounded
/// up (never to 0), then capped. Integer arithmetic, so every host computes the same sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SizeScale {
    /// The scale in parts per billion (1,000,000,000: sizes as recorded).
    pub ppb: u64,
    /// The largest size, after scaling.
    pub max: Option<u64>,
}

impl SizeScale {
    /// Sizes as the trace records them.
    pub const ONE: SizeScale = SizeScale {
        ppb: 1_000_000_000,
        max: None,
    };

    /// A scale `factor` (0 < factor ≤ 1) and a cap.
    pub fn new(factor: f64, max: Option<u64>) -> Result<SizeScale, String> {
        if !(factor > 0.0 && factor <= 1.0) {
            return Err(format!("the size scale must be in (0, 1], not {factor}"));
        }
        let ppb = (factor * 1e9).round() as u64;
        if ppb == 0 {
            return Err(format!("the size scale {factor} is below one billionth"));
        }
        if max == Some(0) {
            return Err("the largest object size must be at least 1 byte".into());
        }
        Ok(SizeScale { ppb, max })
    }

    /// True when sizes are the trace's.
    pub fn is_identity(&self) -> bool {
        *self == SizeScale::ONE
    }

    /// The scale as a number.
    pub fn factor(&self) -> f64 {
        self.ppb as f64 / 1e9
    }

    /// A recorded size, scaled and capped (0 stays 0).
    pub fn apply(&self, size: u64) -> u64 {
        if size == 0 {
            return 0;
        }
        let scaled = (u128::from(size) * u128::from(self.ppb)).div_ceil(1_000_000_000);
        let scaled = u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
        self.max.map_or(scaled, |m| scaled.min(m))
    }
}

impl Default for SizeScale {
    fn default() -> Self {
        SizeScale::ONE
    }
}

/// Settings that change what content is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentOptions {
    pub seed: u64,
    /// Size of a blob the trace only HEADs (its size is unknown).
    pub unknown_blob_size: u64,
    /// Size of the small layer given to manifests that reference no blob of the trace.
    pub filler_size: u64,
    /// Recorded blob and upload sizes, scaled.
    pub sizes: SizeScale,
}

impl Default for ContentOptions {
    fn default() -> Self {
        ContentOptions {
            seed: crate::content::DEFAULT_SEED,
            unknown_blob_size: 4096,
            filler_size: 512,
            sizes: SizeScale::ONE,
        }
    }
}

/// What [`Catalog::compute_digests_with`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DigestStats {
    /// Digests computed (content generated and hashed).
    pub computed: usize,
    /// Digests taken from the cache.
    pub cached: usize,
    /// Bytes generated and hashed.
    pub bytes_hashed: u64,
    /// Threads that hashed.
    pub threads: usize,
    /// Why the cache was found stale, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
}

/// Layers per manifest remembered at most.
const MAX_MANIFEST_LAYERS: usize = 128;

/// The result of pass 1.
#[derive(Debug, Default)]
pub struct Catalog {
    pub names: Interner,
    /// Time of the first record (the replay's origin), Unix ms.
    pub origin_ms: Option<i64>,
    /// Time of the last record, Unix ms.
    pub end_ms: i64,
    /// Items the trace holds (valid or not), after limits.
    pub items: u64,
    /// Every blob read, by trace digest: its size and content digest.
    pub blobs: SortedMap<Sym, BlobFacts>,
    /// (repository, trace digest) of every blob read, sorted: prewarm pushes these.
    pub blob_reads: Box<[(Sym, Sym)]>,
    /// (repository, reference) of every manifest read.
    pub manifests: SortedMap<(Sym, Sym), ManifestFacts>,
    /// Every upload, by the position of its head record.
    pub uploads: SortedMap<Position, UploadFacts>,
    /// Repositories that get a filler layer: a manifest PUT with no layer seen, or a
    /// manifest read that references no pulled blob.
    pub filler_repos: BTreeSet<Sym>,
    /// Every manifest PUT of the trace, by position: prewarm pushes their config blobs.
    pub pushes: SortedMap<Position, PushFacts>,
    /// SHA-256 of each repository's filler layer.
    pub filler_digests: HashMap<Sym, [u8; 32]>,
    content: ContentOptions,
}

/// The catalog while pass 1 reads the trace: maps that take inserts, sealed into the
/// catalog's sorted vectors at the end.
#[derive(Default)]
struct Draft {
    blob_sizes: FastHashMap<Sym, u64>,
    blob_reads: BTreeSet<(Sym, Sym)>,
    manifests: FastHashMap<(Sym, Sym), ManifestFacts>,
    uploads: FastHashMap<Position, UploadFacts>,
    filler_repos: BTreeSet<Sym>,
    pushes: Vec<(Position, PushFacts)>,
}

impl Catalog {
    /// Reads the whole trace once. `gap_ms` is the session gap of the linker.
    pub fn build<I>(items: I, gap_ms: i64, content: ContentOptions) -> Result<Catalog, TraceError>
    where
        I: Iterator<Item = Result<Item, TraceError>>,
    {
        let mut catalog = Catalog {
            content,
            ..Catalog::default()
        };
        let mut draft = Draft::default();
        let mut linker = SessionLinker::new(gap_ms);
        for item in items {
            let item = item?;
            catalog.items += 1;
            if let Item::Record(record) = item {
                catalog.origin_ms.get_or_insert(record.time_ms);
                catalog.end_ms = catalog.end_ms.max(record.time_ms);
                let role = linker.role(&record);
                draft.learn(&record, &role, &mut linker);
            }
        }
        let Draft {
            blob_sizes,
            blob_reads,
            manifests,
            uploads,
            mut filler_repos,
            pushes,
        } = draft;
        catalog.blobs = blob_reads
            .iter()
            .map(|(_, digest)| {
                let size = blob_sizes.get(digest).copied().unwrap_or(0);
                (*digest, BlobFacts { size, sha256: None })
            })
            .collect();
        drop(blob_sizes);
        catalog.blob_reads = blob_reads.into_iter().collect();
        catalog.manifests = manifests
            .into_iter()
            .map(|(key, mut facts)| {
                if facts.layers.is_empty() {
                    filler_repos.insert(key.0);
                }
                facts.layers.shrink_to_fit();
                (key, facts)
            })
            .collect();
        let mut uploads = uploads;
        for (position, push) in &pushes {
            for layer in &push.layers {
                if let PushedLayer::Upload(head) = layer {
                    if let Some(u) = uploads.get_mut(head) {
                        u.push = Some(*position);
                    }
                }
            }
        }
        catalog.uploads = uploads.into_iter().collect();
        catalog.filler_repos = filler_repos;
        catalog.pushes = pushes.into_iter().collect();
        Ok(catalog)
    }
}

impl Draft {
    fn learn(&mut self, r: &Record, role: &Role, linker: &mut SessionLinker) {
        let pos = (r.file, r.number);
        let ok = r.status > 0 && r.status < 400;
        match role {
            Role::UploadHead => {
                let chunk = matches!(r.method, Method::Patch | Method::Put);
                self.uploads.insert(
                    pos,
                    UploadFacts {
                        bytes: if chunk { r.size } else { 0 },
                        patches: u32::from(r.method == Method::Patch),
                        members: 0,
                        digest: linker.take_upload_digest(pos),
                        repo: r.target.repo(),
                        client: r.client,
                        time_ms: r.time_ms,
                        sha256: None,
                        push: None,
                    },
                );
            }
            Role::UploadMember(head) => {
                if let Some(f) = self.uploads.get_mut(head) {
                    f.members += 1;
                    match r.method {
                        Method::Patch => {
                            f.bytes += r.size;
                            f.patches += 1;
                        }
                        Method::Put => f.bytes += r.size,
                        _ => {}
                    }
                }
            }
            Role::ManifestPush(layers) => {
                if let Target::Manifest { repo, reference } = r.target {
                    if layers.is_empty() {
                        self.filler_repos.insert(repo);
                    }
                    self.pushes.push((
                        pos,
                        PushFacts {
                            repo,
                            reference,
                            client: r.client,
                            time_ms: r.time_ms,
                            number: r.number,
                            size: r.size,
                            layers: layers.clone(),
                        },
                    ));
                }
            }
            _ => {}
        }
        match (r.method, r.target) {
            (Method::Get | Method::Head, Target::Blob { repo, digest }) if ok => {
                self.blob_reads.insert((repo, digest));
                if r.method == Method::Get {
                    let size = self.blob_sizes.entry(digest).or_insert(0);
                    *size = (*size).max(r.size);
                    if let Role::PullLayer { reference, .. } = role {
                        let m = self.manifests.entry((repo, *reference)).or_default();
                        if m.layers.len() < MAX_MANIFEST_LAYERS && !m.layers.contains(&digest) {
                            m.layers.push(digest);
                        }
                    }
                }
            }
            (Method::Get | Method::Head, Target::Manifest { repo, reference }) if ok => {
                let m = self.manifests.entry((repo, reference)).or_default();
                if r.method == Method::Get {
                    m.size = m.size.max(r.size);
                }
            }
            _ => {}
        }
    }
}

impl Catalog {
    pub fn content_options(&self) -> ContentOptions {
        self.content
    }

    /// A trace blob's recorded size (scaled), or the size given to blobs of unknown size.
    fn known_blob_size(&self, digest: Sym) -> u64 {
        self.blobs
            .get(&digest)
            .map(|b| self.content.sizes.apply(b.size))
            .filter(|s| *s > 0)
            .unwrap_or(self.content.unknown_blob_size)
    }

    /// The content of a blob of the trace.
    pub fn blob_content(&self, digest: Sym) -> ContentSpec {
        let name = self.names.resolve(digest);
        let size = self.known_blob_size(digest);
        ContentSpec::new(
            self.content.seed,
            format!("trace/blob/{name}").as_bytes(),
            size,
        )
    }

    /// The content an upload sends: unique to the upload (never content the registry
    /// already holds), of the size its records show.
    pub fn upload_content(&self, head: Position) -> ContentSpec {
        let facts = self.uploads.get(&head).copied().unwrap_or_default();
        let size = if facts.bytes > 0 {
            self.content.sizes.apply(facts.bytes)
        } else {
            facts
                .digest
                .map_or(self.content.unknown_blob_size, |d| self.known_blob_size(d))
        };
        let client = facts.client.map_or("", |c| self.names.resolve(c));
        let repo = facts.repo.map_or("", |r| self.names.resolve(r));
        let identity = format!("trace/upload/{client}/{repo}/{}/{}", facts.time_ms, head.1);
        ContentSpec::new(self.content.seed, identity.as_bytes(), size)
    }

    /// The filler layer of a repository.
    pub fn filler_content(&self, repo: Sym) -> ContentSpec {
        let identity = format!("trace/filler/{}", self.names.resolve(repo));
        ContentSpec::new(
            self.content.seed,
            identity.as_bytes(),
            self.content.filler_size,
        )
    }

    /// Computes the digest of every piece of generated content, on `threads` threads.
    pub fn compute_digests(&mut self, threads: usize) -> DigestStats {
        self.compute_digests_with(threads, None)
    }

    /// [`Catalog::compute_digests`], taking what `cache` holds (after checking a sample of
    /// it) and adding what it did not.
    pub fn compute_digests_with(
        &mut self,
        threads: usize,
        mut cache: Option<&mut DigestCache>,
    ) -> DigestStats {
        enum Key {
            Blob(Sym),
            Upload(Position),
            Filler(Sym),
        }
        let mut jobs: Vec<(Key, ContentSpec)> = Vec::new();
        for d in self.blobs.keys() {
            jobs.push((Key::Blob(*d), self.blob_content(*d)));
        }
        for head in self.uploads.keys() {
            jobs.push((Key::Upload(*head), self.upload_content(*head)));
        }
        for repo in &self.filler_repos {
            jobs.push((Key::Filler(*repo), self.filler_content(*repo)));
        }
        let mut stats = DigestStats::default();
        let mut known: Vec<(Key, [u8; 32])> = Vec::new();
        if let Some(cache) = cache.as_deref_mut() {
            if let Err(why) = cache.check(jobs.iter().map(|(_, spec)| spec)) {
                stats.stale = Some(why);
            }
            let mut rest = Vec::with_capacity(jobs.len());
            for (key, spec) in jobs {
                match cache.get(&spec) {
                    Some(sha) => known.push((key, sha)),
                    None => rest.push((key, spec)),
                }
            }
            jobs = rest;
        }
        stats.cached = known.len();
        stats.computed = jobs.len();
        stats.bytes_hashed = jobs.iter().map(|(_, spec)| spec.size()).sum();
        // Largest first, so the threads finish together.
        jobs.sort_by_key(|(_, spec)| std::cmp::Reverse(spec.size()));
        let threads = threads.max(1);
        stats.threads = threads;
        let mut buckets: Vec<Vec<(Key, ContentSpec)>> = (0..threads).map(|_| Vec::new()).collect();
        let mut loads = vec![0u64; threads];
        for job in jobs {
            let lightest = (0..threads).min_by_key(|i| loads[*i]).unwrap_or(0);
            loads[lightest] += job.1.size();
            buckets[lightest].push(job);
        }
        let results: Vec<Vec<(Key, ContentSpec, [u8; 32])>> = std::thread::scope(|scope| {
            let handles: Vec<_> = buckets
                .into_iter()
                .filter(|bucket| !bucket.is_empty())
                .map(|bucket| {
                    scope.spawn(move || {
                        bucket
                            .into_iter()
                            .map(|(k, spec)| {
                                let sha = spec.sha256();
                                (k, spec, sha)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let computed = results.into_iter().flatten().map(|(key, spec, sha)| {
            if let Some(cache) = cache.as_deref_mut() {
                cache.insert(spec, sha);
            }
            (key, sha)
        });
        let all: Vec<(Key, [u8; 32])> = computed.chain(known).collect();
        for (key, digest) in all {
            match key {
                Key::Blob(d) => {
                    if let Some(blob) = self.blobs.get_mut(&d) {
                        blob.sha256 = Some(digest);
                    }
                }
                Key::Upload(p) => {
                    if let Some(upload) = self.uploads.get_mut(&p) {
                        upload.sha256 = Some(digest);
                    }
                }
                Key::Filler(r) => {
                    self.filler_digests.insert(r, digest);
                }
            }
        }
        stats
    }

    /// The digest of a trace blob's content (computing it if it was not precomputed).
    pub fn blob_digest(&self, digest: Sym) -> Digest {
        Digest::from_sha256(self.blob_sha256(digest))
    }

    /// [`Catalog::blob_digest`] as raw SHA-256 bytes.
    pub fn blob_sha256(&self, digest: Sym) -> [u8; 32] {
        self.blobs
            .get(&digest)
            .and_then(|b| b.sha256)
            .unwrap_or_else(|| self.blob_content(digest).sha256())
    }

    pub fn upload_digest(&self, head: Position) -> Digest {
        Digest::from_sha256(
            self.uploads
                .get(&head)
                .and_then(|u| u.sha256)
                .unwrap_or_else(|| self.upload_content(head).sha256()),
        )
    }

    pub fn filler_digest(&self, repo: Sym) -> Digest {
        Digest::from_sha256(self.filler_sha256(repo))
    }

    /// [`Catalog::filler_digest`] as raw SHA-256 bytes.
    pub fn filler_sha256(&self, repo: Sym) -> [u8; 32] {
        self.filler_digests
            .get(&repo)
            .copied()
            .unwrap_or_else(|| self.filler_content(repo).sha256())
    }

    /// Total bytes of content prewarm pushes (blobs only), for progress and reports.
    pub fn prewarm_bytes(&self) -> u64 {
        self.blob_reads
            .iter()
            .map(|(_, d)| self.blob_content(*d).size())
            .sum()
    }
}
