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
//! with the number of records.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::linker::{Position, PushedLayer, Role, SessionLinker};
use crate::content::ContentSpec;
use crate::oci::Digest;
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

/// Settings that change what content is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentOptions {
    pub seed: u64,
    /// Size of a blob the trace only HEADs (its size is unknown).
    pub unknown_blob_size: u64,
    /// Size of the small layer given to manifests that reference no blob of the trace.
    pub filler_size: u64,
}

impl Default for ContentOptions {
    fn default() -> Self {
        ContentOptions {
            seed: crate::cli::DEFAULT_SEED,
            unknown_blob_size: 4096,
            filler_size: 512,
        }
    }
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
    pub blob_sizes: HashMap<Sym, u64>,
    /// (repository, trace digest) of every blob read: prewarm pushes these.
    pub blob_reads: BTreeSet<(Sym, Sym)>,
    /// (repository, reference) of every manifest read.
    pub manifests: BTreeMap<(Sym, Sym), ManifestFacts>,
    pub uploads: HashMap<Position, UploadFacts>,
    /// Repositories whose pushes need a filler layer (a manifest PUT with no layer seen).
    pub filler_repos: BTreeSet<Sym>,
    /// Every manifest PUT of the trace, by position: prewarm pushes their config blobs.
    pub pushes: BTreeMap<Position, PushFacts>,
    /// SHA-256 of blob content by trace digest, and of uploads by head position (32 raw
    /// bytes each: a catalog of a long trace holds hundreds of thousands).
    pub blob_digests: HashMap<Sym, [u8; 32]>,
    pub upload_digests: HashMap<Position, [u8; 32]>,
    pub filler_digests: HashMap<Sym, [u8; 32]>,
    content: ContentOptions,
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
        let mut linker = SessionLinker::new(gap_ms);
        for item in items {
            let item = item?;
            catalog.items += 1;
            if let Item::Record(record) = item {
                catalog.origin_ms.get_or_insert(record.time_ms);
                catalog.end_ms = catalog.end_ms.max(record.time_ms);
                let role = linker.role(&record);
                catalog.learn(&record, &role, &mut linker);
            }
        }
        Ok(catalog)
    }

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
                    self.pushes.insert(
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
                    );
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

    pub fn content_options(&self) -> ContentOptions {
        self.content
    }

    /// The content of a blob of the trace.
    pub fn blob_content(&self, digest: Sym) -> ContentSpec {
        let name = self.names.resolve(digest);
        let size = self
            .blob_sizes
            .get(&digest)
            .copied()
            .filter(|s| *s > 0)
            .unwrap_or(self.content.unknown_blob_size);
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
            facts.bytes
        } else {
            facts
                .digest
                .and_then(|d| self.blob_sizes.get(&d).copied())
                .filter(|s| *s > 0)
                .unwrap_or(self.content.unknown_blob_size)
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

    /// Every repository whose manifests reference no pulled blob, or whose pushes have no
    /// layer: they get a filler layer.
    pub fn needs_filler(&self, repo: Sym) -> bool {
        self.filler_repos.contains(&repo)
            || self
                .manifests
                .iter()
                .any(|((r, _), m)| *r == repo && m.layers.is_empty())
    }

    /// Computes the digest of every piece of generated content, on `threads` threads.
    pub fn compute_digests(&mut self, threads: usize) {
        enum Key {
            Blob(Sym),
            Upload(Position),
            Filler(Sym),
        }
        let mut jobs: Vec<(Key, ContentSpec)> = Vec::new();
        let blobs: BTreeSet<Sym> = self.blob_reads.iter().map(|(_, d)| *d).collect();
        for d in blobs {
            jobs.push((Key::Blob(d), self.blob_content(d)));
        }
        let mut heads: Vec<Position> = self.uploads.keys().copied().collect();
        heads.sort_unstable();
        for head in heads {
            jobs.push((Key::Upload(head), self.upload_content(head)));
        }
        let mut filler_repos: BTreeSet<Sym> = self.filler_repos.clone();
        for ((repo, _), m) in &self.manifests {
            if m.layers.is_empty() {
                filler_repos.insert(*repo);
            }
        }
        for repo in filler_repos {
            jobs.push((Key::Filler(repo), self.filler_content(repo)));
        }
        // Largest first, so the threads finish together.
        jobs.sort_by_key(|(_, spec)| std::cmp::Reverse(spec.size()));
        let threads = threads.max(1);
        let mut buckets: Vec<Vec<(Key, ContentSpec)>> = (0..threads).map(|_| Vec::new()).collect();
        let mut loads = vec![0u64; threads];
        for job in jobs {
            let lightest = (0..threads).min_by_key(|i| loads[*i]).unwrap_or(0);
            loads[lightest] += job.1.size();
            buckets[lightest].push(job);
        }
        let results: Vec<Vec<(Key, [u8; 32])>> = std::thread::scope(|scope| {
            let handles: Vec<_> = buckets
                .into_iter()
                .map(|bucket| {
                    scope.spawn(move || {
                        bucket
                            .into_iter()
                            .map(|(k, spec)| (k, spec.sha256()))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for (key, digest) in results.into_iter().flatten() {
            match key {
                Key::Blob(d) => {
                    self.blob_digests.insert(d, digest);
                }
                Key::Upload(p) => {
                    self.upload_digests.insert(p, digest);
                }
                Key::Filler(r) => {
                    self.filler_digests.insert(r, digest);
                }
            }
        }
    }

    /// The digest of a trace blob's content (computing it if it was not precomputed).
    pub fn blob_digest(&self, digest: Sym) -> Digest {
        Digest::from_sha256(
            self.blob_digests
                .get(&digest)
                .copied()
                .unwrap_or_else(|| self.blob_content(digest).sha256()),
        )
    }

    pub fn upload_digest(&self, head: Position) -> Digest {
        Digest::from_sha256(
            self.upload_digests
                .get(&head)
                .copied()
                .unwrap_or_else(|| self.upload_content(head).sha256()),
        )
    }

    pub fn filler_digest(&self, repo: Sym) -> Digest {
        Digest::from_sha256(
            self.filler_digests
                .get(&repo)
                .copied()
                .unwrap_or_else(|| self.filler_content(repo).sha256()),
        )
    }

    /// Total bytes of content prewarm pushes (blobs only), for progress and reports.
    pub fn prewarm_bytes(&self) -> u64 {
        self.blob_reads
            .iter()
            .map(|(_, d)| self.blob_content(*d).size())
            .sum()
    }
}
