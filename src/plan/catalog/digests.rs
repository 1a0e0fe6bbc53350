//! The digests of the catalog's content: which content is hashed before anything is sent
//! (the rest comes from a digest cache, or is learned while a prewarm sends it), what was
//! computed, cached or learned, and the lookups the run makes.

use super::*;

/// What [`Catalog::compute_digests_with`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DigestStats {
    /// Digests computed (content generated and hashed).
    pub computed: usize,
    /// Digests taken from the cache.
    pub cached: usize,
    /// Entries of the cache computed again to check it (the smallest it holds for the
    /// run; they are not counted in `computed`).
    pub checked: usize,
    /// Bytes generated and hashed.
    pub bytes_hashed: u64,
    /// Threads that hashed.
    pub threads: usize,
    /// Digests left to the prewarm, which computes them from the bytes as it sends them.
    pub deferred: usize,
    /// Digests of content up to [`KEEP_DIGEST_ABOVE`], left to compute when used.
    pub on_use: usize,
    /// Why the cache was found stale, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// A stop ended the hashing before every digest was known (the catalog is then not
    /// usable for a run).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

/// Which content's digests are computed before anything is sent (the rest is taken from a
/// digest cache, or learned by the prewarm as it sends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpFront {
    /// Blobs the run reads and fillers: what prewarm uploads.
    pub reads: bool,
    /// The content of the run's uploads.
    pub uploads: bool,
}

impl UpFront {
    pub const ALL: UpFront = UpFront {
        reads: true,
        uploads: true,
    };
    pub const NONE: UpFront = UpFront {
        reads: false,
        uploads: false,
    };

    fn covers(self, key: ContentKey) -> bool {
        match key {
            ContentKey::Blob(_) | ContentKey::Filler(_) => self.reads,
            ContentKey::Upload(_) => self.uploads,
        }
    }
}

impl Catalog {
    /// Computes the digest of every piece of generated content larger than
    /// [`KEEP_DIGEST_ABOVE`], on `threads` threads (smaller content is hashed when used).
    pub fn compute_digests(&mut self, threads: usize) -> DigestStats {
        self.compute_digests_with(threads, None, &Unwatched, UpFront::ALL)
    }

    /// [`Catalog::compute_digests`], taking what `cache` holds (after checking a sample of
    /// it) and adding what it did not; only the content `up_front` names is hashed now, the
    /// rest is counted as `deferred` (a prewarm learns those digests as it sends the
    /// content, [`Catalog::learn`], then [`Catalog::learn_missing`]). `watch` hears what is
    /// to be hashed, then the bytes of every block hashed (on every thread), and stops the
    /// hashing when it answers `false` (`stopped` is then set).
    pub fn compute_digests_with(
        &mut self,
        threads: usize,
        cache: Option<&mut DigestCache>,
        watch: &dyn HashWatch,
        up_front: UpFront,
    ) -> DigestStats {
        let (stats, digests) = self.hash_contents(threads, cache, watch, up_front);
        let (mut blobs, mut uploads) = (Vec::new(), Vec::new());
        for (key, digest) in digests {
            match key {
                ContentKey::Blob(d) => blobs.push((d, digest)),
                ContentKey::Upload(p) => uploads.push((p, digest)),
                ContentKey::Filler(r) => {
                    self.filler_digests.insert(r, digest);
                }
            }
        }
        self.blob_digests = blobs.into_iter().collect();
        self.upload_digests = uploads.into_iter().collect();
        stats
    }

    /// The digests still unknown after a prewarm sent what it could (content whose upload
    /// failed, the uploads of the run), computed on `threads` threads and kept as learned;
    /// returned too, for the digest cache.
    pub fn learn_missing(
        &self,
        threads: usize,
        watch: &dyn HashWatch,
    ) -> (DigestStats, Vec<(ContentSpec, [u8; 32])>) {
        let (stats, digests) = self.hash_contents(threads, None, watch, UpFront::ALL);
        let specs = digests
            .iter()
            .map(|&(key, sha)| (self.content_of(key), sha))
            .collect();
        if let Ok(mut learned) = self.learned.write() {
            learned.extend(digests);
        }
        (stats, specs)
    }

    /// Keeps the digest of a piece of content, learned while it was sent.
    pub fn learn(&self, key: ContentKey, sha256: [u8; 32]) {
        if let Ok(mut learned) = self.learned.write() {
            learned.insert(key, sha256);
        }
    }

    /// The digest of `key`'s content if it is known (computed, cached or learned).
    pub fn known_digest(&self, key: ContentKey) -> Option<[u8; 32]> {
        let sealed = match key {
            ContentKey::Blob(d) => self.blob_digests.get(&d),
            ContentKey::Upload(p) => self.upload_digests.get(&p),
            ContentKey::Filler(r) => self.filler_digests.get(&r),
        };
        sealed
            .copied()
            .or_else(|| self.learned.read().ok()?.get(&key).copied())
    }

    /// The content `key` names.
    pub fn content_of(&self, key: ContentKey) -> ContentSpec {
        match key {
            ContentKey::Blob(d) => self.blob_content(d),
            ContentKey::Upload(p) => self.upload_content(key_position(p)),
            ContentKey::Filler(r) => self.filler_content(r),
        }
    }

    /// The digests of the content larger than [`KEEP_DIGEST_ABOVE`] that no table holds
    /// yet: from `cache`, or computed when `up_front` names their kind.
    fn hash_contents(
        &self,
        threads: usize,
        mut cache: Option<&mut DigestCache>,
        watch: &dyn HashWatch,
        up_front: UpFront,
    ) -> (DigestStats, Vec<(ContentKey, [u8; 32])>) {
        let mut stats = DigestStats::default();
        let mut jobs: Vec<(ContentKey, ContentSpec)> = Vec::new();
        let mut add = |key: ContentKey, spec: ContentSpec| {
            if spec.size() <= KEEP_DIGEST_ABOVE {
                stats.on_use += 1;
            } else if self.known_digest(key).is_none() {
                jobs.push((key, spec));
            }
        };
        for d in self.blobs.keys() {
            add(ContentKey::Blob(*d), self.blob_content(*d));
        }
        for (head, _) in self.uploads() {
            add(
                ContentKey::Upload(position_key(head)),
                self.upload_content(head),
            );
        }
        for repo in &self.filler_repos {
            add(ContentKey::Filler(*repo), self.filler_content(*repo));
        }
        let mut known: Vec<(ContentKey, [u8; 32])> = Vec::new();
        if let Some(cache) = cache.as_deref_mut() {
            match cache.check(jobs.iter().map(|(_, spec)| spec)) {
                Ok(checked) => stats.checked = checked,
                Err(why) => stats.stale = Some(why),
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
        let before = jobs.len();
        jobs.retain(|(key, _)| up_front.covers(*key));
        stats.deferred = before - jobs.len();
        stats.cached = known.len();
        stats.computed = jobs.len();
        stats.bytes_hashed = jobs.iter().map(|(_, spec)| spec.size()).sum();
        watch.start(stats.computed as u64, stats.bytes_hashed);
        let threads = threads.max(1);
        stats.threads = threads;
        let results = crate::content::hashing::sha256_on_threads(jobs, threads, watch);
        stats.stopped = results.len() < stats.computed;
        let computed = results.into_iter().map(|(key, spec, sha)| {
            if let Some(cache) = cache.as_deref_mut() {
                cache.insert(spec, sha);
            }
            (key, sha)
        });
        let all: Vec<(ContentKey, [u8; 32])> = computed.chain(known).collect();
        (stats, all)
    }

    /// The digest of a trace blob's content (kept, or computed now).
    pub fn blob_digest(&self, digest: Sym) -> Digest {
        Digest::from_sha256(self.blob_sha256(digest))
    }

    /// [`Catalog::blob_digest`] as raw SHA-256 bytes.
    pub fn blob_sha256(&self, digest: Sym) -> [u8; 32] {
        match self.blob_digests.get(&digest) {
            Some(sha) => *sha,
            None => self.digest_now(ContentKey::Blob(digest)),
        }
    }

    pub fn upload_digest(&self, head: Position) -> Digest {
        Digest::from_sha256(match self.upload_digests.get(&position_key(head)) {
            Some(sha) => *sha,
            None => self.digest_now(ContentKey::Upload(position_key(head))),
        })
    }

    /// A digest no sealed table holds: learned, or computed now (small content, or content
    /// whose digest was left to a prewarm that did not send it).
    fn digest_now(&self, key: ContentKey) -> [u8; 32] {
        let spec = self.content_of(key);
        // Only content above the threshold is ever learned: small content, what most
        // lookups of a scaled run are, is hashed without taking the lock.
        if spec.size() <= KEEP_DIGEST_ABOVE {
            return spec.sha256();
        }
        match self.learned.read().ok().and_then(|l| l.get(&key).copied()) {
            Some(sha) => sha,
            None => spec.sha256(),
        }
    }

    pub fn filler_digest(&self, repo: Sym) -> Digest {
        Digest::from_sha256(self.filler_sha256(repo))
    }

    /// [`Catalog::filler_digest`] as raw SHA-256 bytes.
    pub fn filler_sha256(&self, repo: Sym) -> [u8; 32] {
        match self.filler_digests.get(&repo) {
            Some(sha) => *sha,
            None => self.digest_now(ContentKey::Filler(repo)),
        }
    }
}
