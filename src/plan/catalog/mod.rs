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

mod build;
mod digests;
mod facts;

pub use crate::content::hashing::{HashWatch, Unwatched};
pub use build::{Draft, Eager, EAGER_RECORDS};
pub use digests::{DigestStats, UpFront};
pub use facts::{
    position_key, push_identity, upload_identity, BlobFacts, ContentKey, ContentOptions, Keep,
    ManifestFacts, PushFacts, SizeScale, Span, UnsizedUploads, UploadFacts, KEEP_DIGEST_ABOVE,
};

use std::collections::{BTreeSet, HashMap};

use super::linker::{mounted, Position, PushedLayer, Role, SessionLinker};
use super::sorted_map::SortedMap;
use crate::content::digest_cache::DigestCache;
use crate::content::{ContentSpec, Sums};
use crate::digest::Digest;
use crate::fast_hash::FastHashMap;
use crate::trace::{Interner, Item, Method, Record, Sym, Target, TraceError};
use facts::{key_position, PackedLayer, MAX_MANIFEST_LAYERS, NO_PUSH, READ_SAMPLE};

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
    /// Every blob read, by trace digest: its size.
    pub blobs: SortedMap<Sym, BlobFacts>,
    /// (repository, trace digest) of every blob read, sorted: prewarm pushes these
    /// ([`Keep::Prewarm`]; a spread sample with [`Keep::Run`]).
    blob_reads: Box<[(Sym, Sym)]>,
    /// How many there are, and their content's bytes.
    blob_read_count: usize,
    blob_read_bytes: u64,
    /// (repository, reference) of every manifest read.
    pub manifests: SortedMap<(Sym, Sym), ManifestFacts>,
    /// The layers of every manifest read, back to back ([`Catalog::manifest_layers`]).
    manifest_layers: Box<[Sym]>,
    /// Every upload, by the packed position of its head record ([`position_key`]).
    uploads: SortedMap<u64, UploadFacts>,
    /// Repositories that get a filler layer: a manifest PUT with no layer seen, or a
    /// manifest read that references no pulled blob.
    pub filler_repos: BTreeSet<Sym>,
    /// Every manifest PUT of the trace, by packed position: prewarm pushes their configs
    /// ([`Keep::Prewarm`]; empty with [`Keep::Run`]).
    pushes: SortedMap<u64, PushFacts>,
    /// The layers of every push, back to back ([`Catalog::push_layers`]).
    push_layers: Box<[PackedLayer]>,
    /// (repository, reference) of every manifest PUT, in position order.
    pushed: Box<[(Sym, Sym)]>,
    /// SHA-256 of the content larger than [`KEEP_DIGEST_ABOVE`], once computed.
    blob_digests: SortedMap<Sym, Sums>,
    upload_digests: SortedMap<u64, Sums>,
    filler_digests: HashMap<Sym, Sums>,
    keep: Keep,
    content: ContentOptions,
    /// Uploads the trace gives no size for.
    pub unsized_uploads: UnsizedUploads,
}

impl Catalog {
    pub fn content_options(&self) -> ContentOptions {
        self.content
    }

    /// The upload whose head record is at `head`.
    pub fn upload(&self, head: Position) -> Option<&UploadFacts> {
        self.uploads.get(&position_key(head))
    }

    /// Every upload, by its head's position.
    pub fn uploads(&self) -> impl ExactSizeIterator<Item = (Position, &UploadFacts)> + '_ {
        self.uploads.iter().map(|(k, u)| (key_position(*k), u))
    }

    /// The manifest PUT at `position`, and its index in [`Catalog::pushes`].
    pub fn push(&self, position: Position) -> Option<&PushFacts> {
        self.pushes.get(&position_key(position))
    }

    /// The (repository, reference) of the push at `index` ([`UploadFacts::push`]).
    pub fn pushed_manifest(&self, index: usize) -> Option<(Sym, Sym)> {
        self.pushed.get(index).copied()
    }

    /// The (repository, reference) of every manifest PUT, in position order.
    pub fn pushed_manifests(&self) -> &[(Sym, Sym)] {
        &self.pushed
    }

    /// Every manifest PUT, by position, with what its manifest is made of
    /// ([`Keep::Prewarm`]; none with [`Keep::Run`]).
    pub fn pushes(&self) -> impl ExactSizeIterator<Item = (Position, &PushFacts)> + '_ {
        self.pushes.iter().map(|(k, p)| (key_position(*k), p))
    }

    /// Drops what only a prewarm reads (every push's layers, every blob read but a spread
    /// sample), leaving what a [`Keep::Run`] catalog holds: `--phase all` calls it between
    /// its phases, so its run is as small as `--phase run`'s.
    pub fn keep_run_only(&mut self) {
        if self.keep == Keep::Run {
            return;
        }
        self.pushes = SortedMap::default();
        self.push_layers = Box::default();
        let step = self.blob_read_count.div_ceil(READ_SAMPLE).max(1);
        self.blob_reads = self.blob_reads.iter().copied().step_by(step).collect();
        self.keep = Keep::Run;
    }

    /// What the catalog kept.
    pub fn keeps(&self) -> Keep {
        self.keep
    }

    /// Every (repository, trace digest) blob read, sorted: what prewarm pushes
    /// ([`Keep::Prewarm`]; a sample spread over them with [`Keep::Run`]).
    pub fn blob_reads(&self) -> &[(Sym, Sym)] {
        &self.blob_reads
    }

    /// Whether the run reads blob `digest` in `repo` (a binary search of the sorted reads).
    pub fn reads_blob(&self, repo: Sym, digest: Sym) -> bool {
        self.blob_reads.binary_search(&(repo, digest)).is_ok()
    }

    /// How many (repository, blob) reads prewarm pushes.
    pub fn blob_read_count(&self) -> usize {
        self.blob_read_count
    }

    /// The layers of a push, as the trace shows them.
    pub fn push_layers(&self, push: &PushFacts) -> impl ExactSizeIterator<Item = PushedLayer> + '_ {
        Span::of(&self.push_layers, push.layers)
            .iter()
            .map(|l| l.unpack())
    }

    /// The blobs pulled after a manifest read.
    pub fn manifest_layers(&self, manifest: &ManifestFacts) -> &[Sym] {
        Span::of(&self.manifest_layers, manifest.layers)
    }

    /// A trace blob's recorded size (scaled), or the size given to blobs of unknown size.
    fn known_blob_size(&self, digest: Sym) -> u64 {
        known_blob_size(&self.blobs, &self.content, digest)
    }

    /// The content of a blob of the trace.
    pub fn blob_content(&self, digest: Sym) -> ContentSpec {
        let name = self.names.resolve(digest);
        let size = self.known_blob_size(digest);
        ContentSpec::layer(
            self.content.seed,
            format!("trace/blob/{name}").as_bytes(),
            size,
            self.content.layer_form,
        )
    }

    /// The content an upload sends: unique to the upload (never content the registry
    /// already holds), of the size its records show.
    pub fn upload_content(&self, head: Position) -> ContentSpec {
        let facts = self.upload(head);
        let (bytes, identity) = facts.map_or((0, 0), |f| (f.bytes, f.identity));
        let size = match bytes {
            0 => self.content.unknown_blob_size,
            b => self.content.sizes.apply(b),
        };
        let identity = format!("trace/upload/{identity:016x}");
        ContentSpec::layer(
            self.content.seed,
            identity.as_bytes(),
            size,
            self.content.layer_form,
        )
    }

    /// The filler layer of a repository.
    pub fn filler_content(&self, repo: Sym) -> ContentSpec {
        let identity = format!("trace/filler/{}", self.names.resolve(repo));
        ContentSpec::layer(
            self.content.seed,
            identity.as_bytes(),
            self.content.filler_size,
            self.content.layer_form,
        )
    }

    /// Blobs and uploads smaller than the smallest layer of their form: generated as plain
    /// bytes, not tars (`raw_layers`).
    pub fn raw_layers(&self) -> u64 {
        let min = self.content.layer_form.min_size();
        let blobs = self
            .blobs
            .keys()
            .filter(|d| self.known_blob_size(**d) < min)
            .count();
        let uploads = self
            .uploads()
            .filter(|(head, _)| self.upload_content(*head).size() < min)
            .count();
        (blobs + uploads) as u64
    }

    /// Total bytes of content prewarm pushes (blobs only), for progress and reports.
    pub fn prewarm_bytes(&self) -> u64 {
        self.blob_read_bytes
    }

    /// Bytes the catalog holds, by part (names, blobs, reads, manifests, uploads, pushes,
    /// kept digests), for the memory figures.
    pub fn heap_parts(&self) -> Vec<(&'static str, usize)> {
        use std::mem::size_of;
        vec![
            ("names", self.names.heap_bytes()),
            ("blobs", self.blobs.len() * size_of::<(Sym, BlobFacts)>()),
            (
                "blob reads",
                self.blob_reads.len() * size_of::<(Sym, Sym)>(),
            ),
            (
                "manifests",
                self.manifests.len() * size_of::<((Sym, Sym), ManifestFacts)>()
                    + self.manifest_layers.len() * size_of::<Sym>(),
            ),
            (
                "uploads",
                self.uploads.len() * size_of::<(u64, UploadFacts)>(),
            ),
            (
                "pushes",
                self.pushes.len() * size_of::<(u64, PushFacts)>()
                    + self.push_layers.len() * size_of::<PackedLayer>()
                    + self.pushed.len() * size_of::<(Sym, Sym)>(),
            ),
            (
                "kept digests",
                (self.blob_digests.len() + self.upload_digests.len() + self.filler_digests.len())
                    * (8 + size_of::<Sums>()),
            ),
        ]
    }
}

/// A trace blob's recorded size (scaled), or the size given to blobs of unknown size.
fn known_blob_size(
    blobs: &SortedMap<Sym, BlobFacts>,
    content: &ContentOptions,
    digest: Sym,
) -> u64 {
    blobs
        .get(&digest)
        .map(|b| content.sizes.apply(b.size()))
        .filter(|s| *s > 0)
        .unwrap_or(content.unknown_blob_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_facts_come_back_as_they_were() {
        for size in [0, 1, u64::from(u32::MAX), 1 << 32, (5 << 40) | 7, u64::MAX] {
            assert_eq!(BlobFacts::new(size).size(), size);
        }
        assert_eq!(std::mem::size_of::<(Sym, BlobFacts)>(), 12);
        for pos in [(0, 1), (3, 1 << 39), ((1 << 24) - 1, (1 << 40) - 1)] {
            assert_eq!(key_position(position_key(pos)), pos);
        }
        for layer in [
            PushedLayer::Upload((7, 123_456)),
            PushedLayer::Existing(Sym(u32::MAX)),
            PushedLayer::Existing(Sym(0)),
        ] {
            assert_eq!(PackedLayer::pack(&layer).unpack(), layer);
        }
    }
}
