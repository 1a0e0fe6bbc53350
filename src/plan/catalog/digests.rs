//! The digests of the catalog's content: which content is hashed before anything is sent
//! (the rest comes from a digest cache, or is learned while a prewarm sends it and added
//! after), what was computed, cached or added, and the lookups the run makes. Only
//! `&mut Catalog` adds a digest: a catalog shared with the run's threads never changes.

use super::*;
use crate::content::hashing::Hashed;

/// A content's key with its SHA-256 and diff digest.
type KeyDigests = (ContentKey, Sums);

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
    /// content, then computes the ones still missing, [`Catalog::missing_digests`], and
    /// the catalog keeps both, [`Catalog::add_digests`]). `watch` hears what is to be
    /// hashed, then the bytes of every block hashed (on every thread), and stops the
    /// hashing when it answers `false` (`stopped` is then set).
    pub fn compute_digests_with(
        &mut self,
        threads: usize,
        cache: Option<&mut DigestCache>,
        watch: &dyn HashWatch,
        up_front: UpFront,
    ) -> DigestStats {
        let (stats, digests) = self.hash_contents(threads, cache, watch, up_front);
        self.add_digests(digests);
        stats
    }

    /// Keeps `digests` (computed, taken from a cache, or learned while the content was
    /// sent) beside those the catalog holds; a digest given again replaces the earlier one.
    pub fn add_digests(&mut self, digests: impl IntoIterator<Item = (ContentKey, Sums)>) {
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
        if !blobs.is_empty() {
            let kept = std::mem::take(&mut self.blob_digests);
            let kept = kept.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>();
            self.blob_digests = kept.into_iter().chain(blobs).collect();
        }
        if !uploads.is_empty() {
            let kept = std::mem::take(&mut self.upload_digests);
            let kept = kept.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>();
            self.upload_digests = kept.into_iter().chain(uploads).collect();
        }
    }

    /// The digests still unknown after a prewarm sent what it could (content whose upload
    /// failed, the uploads of the run), computed on `threads` threads: each with its
    /// content, for the digest cache. The catalog keeps them once they are given to
    /// [`Catalog::add_digests`].
    pub fn missing_digests(
        &self,
        threads: usize,
        watch: &dyn HashWatch,
    ) -> (DigestStats, Vec<Hashed<ContentKey>>) {
        let (stats, digests) = self.hash_contents(threads, None, watch, UpFront::ALL);
        let found = digests
            .into_iter()
            .map(|(key, sums)| (key, self.content_of(key), sums))
            .collect();
        (stats, found)
    }

    /// The digests of `key`'s content if the catalog holds them (computed, cached or added).
    pub fn known_digest(&self, key: ContentKey) -> Option<Sums> {
        match key {
            ContentKey::Blob(d) => self.blob_digests.get(&d),
            ContentKey::Upload(p) => self.upload_digests.get(&p),
            ContentKey::Filler(r) => self.filler_digests.get(&r),
        }
        .copied()
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
    ) -> (DigestStats, Vec<KeyDigests>) {
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
        let mut known: Vec<KeyDigests> = Vec::new();
        if let Some(cache) = cache.as_deref_mut() {
            match cache.check(jobs.iter().map(|(_, spec)| spec)) {
                Ok(checked) => stats.checked = checked,
                Err(why) => stats.stale = Some(why),
            }
            let mut rest = Vec::with_capacity(jobs.len());
            for (key, spec) in jobs {
                match (cache.get(&spec), cache.diff(&spec)) {
                    (Some(blob), Some(diff)) => known.push((key, Sums { blob, diff })),
                    _ => rest.push((key, spec)),
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
        let computed = results.into_iter().map(|(key, spec, sums)| {
            if let Some(cache) = cache.as_deref_mut() {
                cache.insert(spec, sums.blob, sums.diff);
            }
            (key, sums)
        });
        let all: Vec<KeyDigests> = computed.chain(known).collect();
        (stats, all)
    }

    /// The digest of a trace blob's content (kept, or computed now).
    pub fn blob_digest(&self, digest: Sym) -> Digest {
        Digest::from_sha256(self.blob_sha256(digest))
    }

    /// [`Catalog::blob_digest`] as raw SHA-256 bytes.
    pub fn blob_sha256(&self, digest: Sym) -> [u8; 32] {
        self.blob_sums(digest).blob
    }

    /// Both digests of a trace blob's content (kept, or computed now).
    pub fn blob_sums(&self, digest: Sym) -> Sums {
        match self.blob_digests.get(&digest) {
            Some(sums) => *sums,
            None => self.digest_now(ContentKey::Blob(digest)),
        }
    }

    pub fn upload_digest(&self, head: Position) -> Digest {
        self.upload_sums(head).blob_digest()
    }

    /// Both digests of an upload's content (kept, or computed now).
    pub fn upload_sums(&self, head: Position) -> Sums {
        match self.upload_digests.get(&position_key(head)) {
            Some(sums) => *sums,
            None => self.digest_now(ContentKey::Upload(position_key(head))),
        }
    }

    /// Digests no table holds, computed now: small content, or content whose digests were
    /// left to a prewarm that did not send it.
    fn digest_now(&self, key: ContentKey) -> Sums {
        self.content_of(key).sums()
    }

    pub fn filler_digest(&self, repo: Sym) -> Digest {
        Digest::from_sha256(self.filler_sha256(repo))
    }

    /// [`Catalog::filler_digest`] as raw SHA-256 bytes.
    pub fn filler_sha256(&self, repo: Sym) -> [u8; 32] {
        self.filler_sums(repo).blob
    }

    /// Both digests of a repository's filler layer (kept, or computed now).
    pub fn filler_sums(&self, repo: Sym) -> Sums {
        match self.filler_digests.get(&repo) {
            Some(sums) => *sums,
            None => self.digest_now(ContentKey::Filler(repo)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::synth::{generate, SynthOptions};
    use crate::trace::write::write_file;
    use crate::trace::{ReadOptions, TraceInput, TraceReader};

    /// A generated trace's catalog, as a prewarm alone builds it, no digest computed yet.
    fn catalog() -> Catalog {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let synth = SynthOptions {
            sessions: 60,
            layer_size: (8 << 10, 256 << 10),
            ..SynthOptions::default()
        };
        write_file(&path, &generate(&synth).0).unwrap();
        let input = TraceInput::resolve(&[path]).unwrap();
        let mut reader =
            TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap();
        Catalog::build(
            &mut reader,
            60_000,
            ContentOptions::default(),
            Keep::Prewarm,
        )
        .unwrap()
        .seal(reader.into_names())
    }

    #[test]
    fn deferred_digests_are_found_missing_then_kept_once_added() {
        let mut catalog = catalog();
        let stats = catalog.compute_digests_with(2, None, &Unwatched, UpFront::NONE);
        assert_eq!(stats.computed, 0);
        assert!(stats.deferred > 10, "{stats:?}");
        let (found_stats, found) = catalog.missing_digests(2, &Unwatched);
        assert_eq!(found_stats.computed, stats.deferred);
        assert_eq!(found.len(), stats.deferred);
        for (key, spec, sums) in &found {
            assert_eq!(
                catalog.known_digest(*key),
                None,
                "{key:?} held before it was added"
            );
            assert_eq!(*sums, spec.sums(), "{key:?}");
            assert_eq!(catalog.content_of(*key), *spec);
        }
        // Half of them as a prewarm learns them while sending, the rest after.
        let (learned, after) = found.split_at(found.len() / 2);
        catalog.add_digests(learned.iter().map(|(key, _, sums)| (*key, *sums)));
        assert_eq!(catalog.missing_digests(2, &Unwatched).1.len(), after.len());
        catalog.add_digests(after.iter().map(|(key, _, sums)| (*key, *sums)));
        for (key, _, sums) in &found {
            assert_eq!(catalog.known_digest(*key), Some(*sums), "{key:?}");
            if let ContentKey::Blob(d) = key {
                assert_eq!(catalog.blob_sums(*d), *sums);
            }
        }
        assert!(catalog.missing_digests(2, &Unwatched).1.is_empty());
    }
}
