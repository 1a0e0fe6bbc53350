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

use super::linker::{mounted, Position, PushedLayer, Role, SessionLinker};
use super::sorted_map::SortedMap;
use crate::content::digest_cache::DigestCache;
use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::fast_hash::FastHashMap;
use crate::trace::{Interner, Item, Method, Record, Sym, Target, TraceError};

/// A record's position packed into one word: the file in the top 24 bits, the record
/// number (1-based per file) in the low 40. A catalog key costs 8 bytes instead of 16.
pub fn position_key(pos: Position) -> u64 {
    (u64::from(pos.0) << 40) | (pos.1 & ((1 << 40) - 1))
}

fn key_position(key: u64) -> Position {
    ((key >> 40) as u32, key & ((1 << 40) - 1))
}

/// A 64-bit identity for generated content, from the trace facts that make it unique
/// (SHA-256, truncated): what a catalog keeps instead of the facts themselves.
fn identity_of(text: std::fmt::Arguments) -> u64 {
    use sha2::Digest as _;
    let out = sha2::Sha256::digest(text.to_string().as_bytes());
    u64::from_le_bytes(out[..8].try_into().unwrap_or_default())
}

/// The identity of a manifest PUT's config: its record's client, repository, reference,
/// time and number. Pass 1 keeps it for prewarm; pass 2 computes it from the record.
pub fn push_identity(client: &str, repo: &str, reference: &str, time_ms: i64, number: u64) -> u64 {
    identity_of(format_args!(
        "{client}/{repo}/{reference}/{time_ms}/{number}"
    ))
}

/// What a sealed catalog keeps besides what the run needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// Everything prewarm pushes: every (repository, blob) read, every push's layers.
    #[default]
    Prewarm,
    /// What the run needs: the reads counted and sampled, each push's manifest name (the
    /// planner rebuilds a pushed manifest from its record).
    Run,
}

/// Blob reads a [`Keep::Run`] catalog samples (spread over the sorted list).
const READ_SAMPLE: usize = 64;

/// Content up to this size has its digest computed when it is used rather than kept: the
/// content is generated and hashed again in about a microsecond, where keeping the digest
/// costs 40 bytes for every such object of the trace (tens of MB at IBM scale, where
/// `--size-scale` makes most content this small).
pub const KEEP_DIGEST_ABOVE: u64 = 4096;

/// What the trace says about one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadFacts {
    /// Bytes sent by its PATCH and PUT records; if none, the recorded size of the blob a
    /// preceding HEAD 404 named (0: unknown).
    pub bytes: u64,
    /// Identity of its content: the head record's client, repository, time and number.
    pub identity: u64,
    /// PATCH records (chunks).
    pub patches: u32,
    /// Records folded into the upload besides its head.
    pub members: u32,
    /// The manifest PUT whose push it belongs to, if one closed it (an index in push
    /// order, [`Catalog::pushed_manifest`]): routing keeps an upload with its manifest,
    /// whose node must hold every blob it references.
    push: u32,
}

/// No push (`UploadFacts::push`).
const NO_PUSH: u32 = u32::MAX;

impl UploadFacts {
    /// The index of the push it belongs to ([`Catalog::pushed_manifest`]).
    pub fn push(&self) -> Option<usize> {
        (self.push != NO_PUSH).then_some(self.push as usize)
    }
}

/// A blob the run reads: the largest `written` of its successful GETs (0 if only HEADs:
/// size unknown), as two 32-bit halves, so that an entry keyed by a symbol takes 12
/// bytes instead of 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFacts {
    size: [u32; 2],
}

impl BlobFacts {
    pub fn new(size: u64) -> BlobFacts {
        BlobFacts {
            size: [size as u32, (size >> 32) as u32],
        }
    }

    /// The recorded size.
    pub fn size(&self) -> u64 {
        u64::from(self.size[0]) | (u64::from(self.size[1]) << 32)
    }
}

/// A run of entries in one of the catalog's shared lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    first: u32,
    len: u32,
}

impl Span {
    fn of<T>(list: &[T], span: Span) -> &[T] {
        let first = span.first as usize;
        list.get(first..first + span.len as usize)
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `items` to `list`, returning where they are.
    fn append<T>(list: &mut Vec<T>, items: impl IntoIterator<Item = T>) -> Span {
        let first = list.len();
        list.extend(items);
        Span {
            first: u32::try_from(first).unwrap_or(u32::MAX),
            len: u32::try_from(list.len() - first).unwrap_or(0),
        }
    }
}

/// A manifest the run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ManifestFacts {
    /// Largest `written` of its successful GETs (0 if only HEADs), at most 4 GiB − 1 (a
    /// manifest is kilobytes; 32 bits keep the entry at 20 bytes).
    pub size: u32,
    /// Blobs pulled after it, in first-seen order ([`Catalog::manifest_layers`]).
    pub layers: Span,
}

/// A manifest PUT the run replays: what its generated manifest is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushFacts {
    pub repo: Sym,
    pub reference: Sym,
    /// Identity of its config: the record's client, repository, reference, time, number.
    pub identity: u64,
    /// The manifest size the trace recorded.
    pub size: u64,
    /// Its layers ([`Catalog::push_layers`]).
    pub layers: Span,
}

/// A [`PushedLayer`] in one word: an upload's packed position, or a blob's symbol with the
/// top bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedLayer(u64);

const EXISTING: u64 = 1 << 63;

impl PackedLayer {
    fn pack(layer: &PushedLayer) -> PackedLayer {
        match layer {
            PushedLayer::Upload(head) => PackedLayer(position_key(*head)),
            PushedLayer::Existing(d) => PackedLayer(EXISTING | u64::from(d.0)),
        }
    }

    fn unpack(self) -> PushedLayer {
        match self.0 & EXISTING {
            0 => PushedLayer::Upload(key_position(self.0)),
            _ => PushedLayer::Existing(Sym(self.0 as u32)),
        }
    }
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

pub use crate::content::hashing::{HashWatch, Unwatched};

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

/// Layers per manifest remembered at most.
const MAX_MANIFEST_LAYERS: usize = 128;

/// A piece of generated content of the catalog, by what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentKey {
    /// A blob the run reads.
    Blob(Sym),
    /// The content of an upload, by the packed position of its head ([`position_key`]).
    Upload(u64),
    /// A repository's filler layer.
    Filler(Sym),
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
    blob_digests: SortedMap<Sym, [u8; 32]>,
    upload_digests: SortedMap<u64, [u8; 32]>,
    filler_digests: HashMap<Sym, [u8; 32]>,
    /// Digests learned after the catalog was sealed: while a prewarm sent the content
    /// ([`Catalog::learn`]), or computed after it ([`Catalog::learn_missing`]).
    learned: std::sync::RwLock<HashMap<ContentKey, [u8; 32]>>,
    keep: Keep,
    content: ContentOptions,
    /// Uploads the trace gives no size for.
    pub unsized_uploads: UnsizedUploads,
}

/// Uploads the trace gives no size for (no bytes recorded, or marked `creb.size_unknown` by
/// `trace import`), and how they are sized instead.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UnsizedUploads {
    pub count: u64,
    /// Sized as the blob a HEAD 404 named for them, which the trace reads.
    pub from_reads: u64,
}

/// A manifest read while pass 1 runs: its layers in a vector of their own until sealed.
#[derive(Default)]
struct DraftManifest {
    size: u64,
    layers: Vec<Sym>,
}

/// "No symbol" in the draft's packed fields.
const NO_SYM: u32 = u32::MAX;

fn pack_sym(sym: Option<Sym>) -> u32 {
    sym.map_or(NO_SYM, |s| s.0)
}

/// An upload while pass 1 runs: its facts, and what its identity and size are made of
/// until the names are known.
struct DraftUpload {
    key: u64,
    time_ms: i64,
    bytes: u64,
    patches: u32,
    members: u32,
    client: u32,
    repo: u32,
    /// The digest a HEAD 404 named for it.
    named: u32,
    /// A record of it was marked `creb.size_unknown` by the import.
    unknown: bool,
}

/// A push while pass 1 runs (its `facts.identity` holds the record's time until sealed).
struct DraftPush {
    key: u64,
    facts: PushFacts,
    client: u32,
}

/// The tables of pass 1, built by one reading of the trace each ([`Catalog::build_staged`])
/// or all in one ([`Catalog::build`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Uploads and pushes (the session linker's).
    Uploads,
    /// Manifests read and their layers (the linker's pulls).
    Manifests,
    /// Blobs read: sizes and (repository, blob) pairs.
    Blobs,
}

const STAGES: [Stage; 3] = [Stage::Uploads, Stage::Manifests, Stage::Blobs];

/// The catalog while pass 1 reads the trace: maps that take inserts, each stage's sealed
/// into the catalog's sorted vectors once read ([`Draft::seal`]).
#[derive(Default)]
pub struct Draft {
    keep: Keep,
    gap_ms: i64,
    /// Uploads in trace order.
    uploads: Vec<DraftUpload>,
    /// Uploads whose members may still come: packed head position → index in `uploads`
    /// and the time of its latest record. Bounded as the linker's open uploads are.
    open_uploads: FastHashMap<u64, (u32, i64)>,
    pushes: Vec<DraftPush>,
    push_layers: Vec<PackedLayer>,
    manifests: FastHashMap<(Sym, Sym), DraftManifest>,
    blob_sizes: FastHashMap<Sym, u64>,
    blob_reads: BTreeSet<(Sym, Sym)>,
    filler_repos: BTreeSet<Sym>,
    /// Sealed uploads that sent no bytes, and the digest a HEAD 404 named for each: they
    /// take its size once the blobs are sealed.
    named: Vec<(u64, Sym)>,
    /// What is sealed so far.
    catalog: Catalog,
}

impl std::fmt::Debug for Draft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draft")
            .field("items", &self.catalog.items)
            .field("blobs", &self.blob_sizes.len())
            .field("manifests", &self.manifests.len())
            .field("uploads", &self.uploads.len())
            .field("pushes", &self.pushes.len())
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// Reads the whole trace once (`gap_ms` is the session gap of the linker), building
    /// every table at once; the draft is sealed with the names the reader interned:
    /// `Catalog::build(reader.by_ref(), …)?.seal(reader.into_names())`.
    pub fn build<I>(
        items: I,
        gap_ms: i64,
        content: ContentOptions,
        keep: Keep,
    ) -> Result<Draft, TraceError>
    where
        I: Iterator<Item = Result<Item, TraceError>>,
    {
        let mut draft = Draft::new(gap_ms, content, keep);
        draft.read(items, &STAGES)?;
        Ok(draft)
    }

    /// The same catalog as [`Catalog::build`], from items that can be read again (the
    /// spool of a trace already read, whose names are `names`): one reading per stage,
    /// each stage's maps sealed before the next is read, so pass 1 never holds more than
    /// one stage's maps beside what is sealed. At 10M records that is less than half the
    /// peak of one reading (`docs/benchmarks.md`), for two more readings of the spool.
    pub fn build_staged<I>(
        mut items: impl FnMut() -> Result<I, TraceError>,
        gap_ms: i64,
        content: ContentOptions,
        keep: Keep,
        names: Interner,
    ) -> Result<Catalog, TraceError>
    where
        I: Iterator<Item = Result<Item, TraceError>>,
    {
        let mut draft = Draft::new(gap_ms, content, keep);
        for stage in STAGES {
            draft.read(items()?, &[stage])?;
            draft.seal_stage(stage, &names);
        }
        Ok(draft.finish(names))
    }
}

impl Draft {
    fn new(gap_ms: i64, content: ContentOptions, keep: Keep) -> Draft {
        Draft {
            keep,
            gap_ms,
            catalog: Catalog {
                content,
                keep,
                ..Catalog::default()
            },
            ..Draft::default()
        }
    }

    /// Reads the trace once, building the tables of `stages`; the first reading counts
    /// the items and the trace's span.
    fn read<I>(&mut self, items: I, stages: &[Stage]) -> Result<(), TraceError>
    where
        I: Iterator<Item = Result<Item, TraceError>>,
    {
        let first = stages.contains(&Stage::Uploads);
        let linked = stages.iter().any(|s| *s != Stage::Blobs);
        let mut linker = SessionLinker::new(self.gap_ms);
        let mut records = 0u64;
        for item in items {
            let item = item?;
            if first {
                self.catalog.items += 1;
            }
            let Item::Record(r) = item else { continue };
            if first {
                self.catalog.origin_ms.get_or_insert(r.time_ms);
                self.catalog.end_ms = self.catalog.end_ms.max(r.time_ms);
            }
            let role = if linked {
                linker.role(&r)
            } else {
                Role::Single
            };
            records += 1;
            for stage in stages {
                match stage {
                    Stage::Uploads => self.learn_upload(&r, &role, &mut linker, records),
                    Stage::Manifests => self.learn_manifest(&r, &role),
                    Stage::Blobs => self.learn_blob(&r),
                }
            }
        }
        Ok(())
    }

    /// The catalog: every fact in sorted vectors, identities computed from `names`.
    pub fn seal(mut self, names: Interner) -> Catalog {
        for stage in STAGES {
            self.seal_stage(stage, &names);
        }
        self.finish(names)
    }

    fn seal_stage(&mut self, stage: Stage, names: &Interner) {
        match stage {
            Stage::Uploads => self.seal_uploads(names),
            Stage::Manifests => self.seal_manifests(),
            Stage::Blobs => self.seal_blobs(),
        }
    }

    fn seal_uploads(&mut self, names: &Interner) {
        self.open_uploads = FastHashMap::default();
        let name = |sym: u32| match sym {
            NO_SYM => std::borrow::Cow::Borrowed(""),
            s => names.resolve(Sym(s)),
        };
        let drafts = std::mem::take(&mut self.pushes);
        let mut pushes: SortedMap<u64, PushFacts> = SortedMap::from_unique(
            drafts
                .into_iter()
                .map(
                    |DraftPush {
                         key,
                         mut facts,
                         client,
                     }| {
                        facts.identity = push_identity(
                            &name(client),
                            &names.resolve(facts.repo),
                            &names.resolve(facts.reference),
                            facts.identity as i64,
                            key_position(key).1,
                        );
                        (key, facts)
                    },
                )
                .collect(),
        );
        let drafts = std::mem::take(&mut self.uploads);
        let named = &mut self.named;
        let mut unsized_count = 0;
        let mut uploads: SortedMap<u64, UploadFacts> = SortedMap::from_unique(
            drafts
                .into_iter()
                .map(|u| {
                    if u.bytes == 0 && u.named != NO_SYM {
                        named.push((u.key, Sym(u.named)));
                    }
                    if u.bytes == 0 || u.unknown {
                        unsized_count += 1;
                    }
                    let facts = UploadFacts {
                        bytes: u.bytes,
                        identity: upload_identity(
                            &name(u.client),
                            &name(u.repo),
                            u.time_ms,
                            key_position(u.key).1,
                        ),
                        patches: u.patches,
                        members: u.members,
                        push: NO_PUSH,
                    };
                    (u.key, facts)
                })
                .collect(),
        );
        let push_layers = std::mem::take(&mut self.push_layers);
        for (i, (_, push)) in pushes.iter().enumerate() {
            for layer in Span::of(&push_layers, push.layers) {
                if let PushedLayer::Upload(head) = layer.unpack() {
                    if let Some(u) = uploads.get_mut(&position_key(head)) {
                        u.push = i as u32;
                    }
                }
            }
        }
        let catalog = &mut self.catalog;
        catalog.unsized_uploads.count = unsized_count;
        catalog.pushed = pushes.values().map(|p| (p.repo, p.reference)).collect();
        catalog.uploads = uploads;
        match self.keep {
            Keep::Prewarm => catalog.push_layers = push_layers.into_boxed_slice(),
            Keep::Run => pushes = SortedMap::default(),
        }
        catalog.pushes = pushes;
    }

    fn seal_manifests(&mut self) {
        let mut layers = Vec::new();
        let filler_repos = &mut self.filler_repos;
        let drafts = std::mem::take(&mut self.manifests);
        self.catalog.manifests = SortedMap::from_unique(
            drafts
                .into_iter()
                .map(|(key, m)| {
                    if m.layers.is_empty() {
                        filler_repos.insert(key.0);
                    }
                    let facts = ManifestFacts {
                        size: u32::try_from(m.size).unwrap_or(u32::MAX),
                        layers: Span::append(&mut layers, m.layers),
                    };
                    (key, facts)
                })
                .collect(),
        );
        self.catalog.manifest_layers = layers.into_boxed_slice();
    }

    fn seal_blobs(&mut self) {
        let catalog = &mut self.catalog;
        // Every blob read has an entry (0 if only HEADs read it): one per blob, not per read.
        let blob_sizes = std::mem::take(&mut self.blob_sizes);
        catalog.blobs = SortedMap::from_unique(
            blob_sizes
                .into_iter()
                .map(|(digest, size)| (digest, BlobFacts::new(size)))
                .collect(),
        );
        let reads = std::mem::take(&mut self.blob_reads);
        catalog.blob_read_count = reads.len();
        catalog.blob_read_bytes = reads
            .iter()
            .map(|(_, d)| catalog.known_blob_size(*d))
            .fold(0, u64::saturating_add);
        catalog.blob_reads = match self.keep {
            Keep::Prewarm => reads.into_iter().collect(),
            Keep::Run => {
                let step = catalog.blob_read_count.div_ceil(READ_SAMPLE).max(1);
                reads.into_iter().step_by(step).collect()
            }
        };
    }

    /// The sealed catalog, with its names.
    fn finish(mut self, names: Interner) -> Catalog {
        let mut catalog = std::mem::take(&mut self.catalog);
        // An upload that sent no bytes takes the size of the blob a HEAD 404 named.
        for (key, digest) in std::mem::take(&mut self.named) {
            let size = catalog.blobs.get(&digest).map_or(0, |b| b.size());
            if let Some(u) = catalog.uploads.get_mut(&key) {
                u.bytes = size;
                catalog.unsized_uploads.from_reads += u64::from(size > 0);
            }
        }
        catalog.filler_repos = std::mem::take(&mut self.filler_repos);
        catalog.names = names;
        catalog
    }

    fn learn_upload(&mut self, r: &Record, role: &Role, linker: &mut SessionLinker, n: u64) {
        let pos = (r.file, r.number);
        if n % 4096 == 0 {
            // Uploads idle for a session gap get no more members (the linker forgets them).
            let gap = self.gap_ms;
            self.open_uploads
                .retain(|_, (_, last)| r.time_ms - *last <= gap);
        }
        match role {
            Role::UploadHead => {
                let chunk = matches!(r.method, Method::Patch | Method::Put);
                let key = position_key(pos);
                let index = u32::try_from(self.uploads.len()).unwrap_or(u32::MAX);
                self.open_uploads.insert(key, (index, r.time_ms));
                self.uploads.push(DraftUpload {
                    key,
                    time_ms: r.time_ms,
                    bytes: if chunk { r.size } else { 0 },
                    patches: u32::from(r.method == Method::Patch),
                    members: 0,
                    client: pack_sym(r.client),
                    repo: pack_sym(r.target.repo()),
                    named: pack_sym(linker.take_upload_digest(pos)),
                    unknown: r.size_unknown,
                });
            }
            Role::UploadMember(head) => {
                if let Some((index, last)) = self.open_uploads.get_mut(&position_key(*head)) {
                    *last = r.time_ms;
                    if let Some(u) = self.uploads.get_mut(*index as usize) {
                        u.members += 1;
                        u.unknown |= r.size_unknown;
                        match r.method {
                            Method::Patch => {
                                u.bytes += r.size;
                                u.patches += 1;
                            }
                            Method::Put => u.bytes += r.size,
                            _ => {}
                        }
                    }
                }
            }
            Role::ManifestPush(layers) => {
                if let Target::Manifest { repo, reference } = r.target {
                    if layers.is_empty() {
                        self.filler_repos.insert(repo);
                    }
                    let layers =
                        Span::append(&mut self.push_layers, layers.iter().map(PackedLayer::pack));
                    self.pushes.push(DraftPush {
                        key: position_key(pos),
                        facts: PushFacts {
                            repo,
                            reference,
                            identity: r.time_ms as u64,
                            size: r.size,
                            layers,
                        },
                        client: pack_sym(r.client),
                    });
                }
            }
            _ => {}
        }
    }

    fn learn_manifest(&mut self, r: &Record, role: &Role) {
        if !(r.status > 0 && r.status < 400) {
            return;
        }
        match (r.method, r.target, role) {
            (Method::Get, Target::Blob { repo, digest }, Role::PullLayer { reference, .. }) => {
                let m = self.manifests.entry((repo, *reference)).or_default();
                if m.layers.len() < MAX_MANIFEST_LAYERS && !m.layers.contains(&digest) {
                    m.layers.push(digest);
                }
            }
            // A DELETE removes a manifest prewarm pushed (its digest, a reference the run
            // never pushes, is known only to prewarm).
            (
                Method::Get | Method::Head | Method::Delete,
                Target::Manifest { repo, reference },
                _,
            ) => {
                let m = self.manifests.entry((repo, reference)).or_default();
                if r.method == Method::Get {
                    m.size = m.size.max(r.size);
                }
            }
            _ => {}
        }
    }

    fn learn_blob(&mut self, r: &Record) {
        if !(r.status > 0 && r.status < 400) {
            return;
        }
        match (r.method, r.target) {
            (Method::Get | Method::Head, Target::Blob { repo, digest }) => {
                self.blob_reads.insert((repo, digest));
                let size = self.blob_sizes.entry(digest).or_insert(0);
                if r.method == Method::Get {
                    *size = (*size).max(r.size);
                }
            }
            // A mount reads the blob from its source (the import gives the blob's size
            // where it learned it).
            (Method::Post, Target::Mount { digest, from, .. }) if mounted(r) => {
                self.blob_reads.insert((from, digest));
                let size = self.blob_sizes.entry(digest).or_insert(0);
                *size = (*size).max(r.size);
            }
            _ => {}
        }
    }
}

/// The identity of an upload's content: its head record's client, repository, time and
/// number.
pub fn upload_identity(client: &str, repo: &str, time_ms: i64, number: u64) -> u64 {
    identity_of(format_args!("{client}/{repo}/{time_ms}/{number}"))
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
        ContentSpec::new(
            self.content.seed,
            format!("trace/blob/{name}").as_bytes(),
            size,
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
                    * 40,
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
