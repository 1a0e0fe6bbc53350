//! Pass 1's builder: the catalog while the trace is read, in maps that take inserts, each
//! stage sealed into the catalog's sorted vectors once read.

use super::*;

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

impl DraftUpload {
    /// A later record of the upload (a PATCH or the closing PUT adds its bytes).
    fn add_member(&mut self, r: &Record) {
        self.members += 1;
        self.unknown |= r.size_unknown;
        match r.method {
            Method::Patch => {
                self.bytes += r.size;
                self.patches += 1;
            }
            Method::Put => self.bytes += r.size,
            _ => {}
        }
    }
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

/// One reading of the trace: the stages it builds, and its session linker and record count
/// (a stage that needs no sessions reads every record as [`Role::Single`]).
struct Reading<'a> {
    stages: &'a [Stage],
    linked: bool,
    linker: SessionLinker,
    records: u64,
}

impl<'a> Reading<'a> {
    fn new(gap_ms: i64, stages: &'a [Stage]) -> Reading<'a> {
        Reading {
            stages,
            linked: stages.iter().any(|s| *s != Stage::Blobs),
            linker: SessionLinker::new(gap_ms),
            records: 0,
        }
    }
}

/// Records up to which the reading that spools the trace builds every table as it goes
/// ([`Eager`]): one reading instead of three more of the spool (some 1,500 instructions a
/// record), for maps of about 12 bytes a record held beside the names' index (a `dal`
/// trace of 1M records: 16.5 MB of live heap at pass 1's peak, against 8.0 MB for the
/// stages, `docs/benchmarks.md`). Past it they are given up and built a stage at a time:
/// pass 1 of a larger trace peaks at what the reading held at the limit (17.2 MB for 1.2M
/// records, 8.5 MB staged alone), under the run's own live heap at that size (about 40 MB
/// at 256 in flight) and, at 10M records, under the stages' peak (69.5 MB).
pub const EAGER_RECORDS: u64 = 1 << 20;

/// The catalog built by the reading that spools the trace, while the trace is small: every
/// table at once, as [`Catalog::build`] does. A trace of more than [`EAGER_RECORDS`]
/// records drops what it built at that point and is left to [`Catalog::build_staged`] over
/// the spool, whose peak is what one stage holds ([`Eager::finish`] does either).
pub struct Eager {
    draft: Option<Draft>,
    reading: Reading<'static>,
    gap_ms: i64,
    content: ContentOptions,
    keep: Keep,
    /// [`EAGER_RECORDS`], or less in tests.
    limit: u64,
}

impl std::fmt::Debug for Eager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eager")
            .field("draft", &self.draft)
            .field("records", &self.reading.records)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Eager {
    pub fn new(gap_ms: i64, content: ContentOptions, keep: Keep) -> Eager {
        Eager {
            draft: Some(Draft::new(gap_ms, content, keep)),
            reading: Reading::new(gap_ms, &STAGES),
            gap_ms,
            content,
            keep,
            limit: EAGER_RECORDS,
        }
    }

    /// [`Eager::new`] giving up past `limit` records.
    #[cfg(test)]
    pub(crate) fn with_limit(
        gap_ms: i64,
        content: ContentOptions,
        keep: Keep,
        limit: u64,
    ) -> Eager {
        Eager {
            limit,
            ..Eager::new(gap_ms, content, keep)
        }
    }

    /// The next item of the trace, as read (the items the spool is given, in its order).
    pub fn learn(&mut self, item: &Item) {
        let Some(draft) = &mut self.draft else {
            return;
        };
        if self.reading.records >= self.limit && matches!(item, Item::Record(_)) {
            self.draft = None;
            self.reading = Reading::new(self.gap_ms, &[]);
            return;
        }
        draft.learn(&mut self.reading, item);
    }

    /// Whether the tables are still being built as the trace is read.
    pub fn building(&self) -> bool {
        self.draft.is_some()
    }

    /// The catalog: the tables built as the trace was read, sealed with `names`, or (for a
    /// trace past [`EAGER_RECORDS`]) built a stage at a time from `items`, the spool.
    pub fn finish<I>(
        self,
        items: impl FnMut() -> Result<I, TraceError>,
        names: Interner,
    ) -> Result<Catalog, TraceError>
    where
        I: Iterator<Item = Result<Item, TraceError>>,
    {
        match self.draft {
            Some(draft) => Ok(draft.seal(names)),
            None => Catalog::build_staged(items, self.gap_ms, self.content, self.keep, names),
        }
    }
}

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
        let mut reading = Reading::new(self.gap_ms, stages);
        for item in items {
            self.learn(&mut reading, &item?);
        }
        Ok(())
    }

    /// One item of `reading`, into the tables of its stages.
    fn learn(&mut self, reading: &mut Reading<'_>, item: &Item) {
        let first = reading.stages.contains(&Stage::Uploads);
        if first {
            self.catalog.items += 1;
        }
        let Item::Record(r) = item else { return };
        if first {
            self.catalog.origin_ms.get_or_insert(r.time_ms);
            self.catalog.end_ms = self.catalog.end_ms.max(r.time_ms);
        }
        let role = if reading.linked {
            reading.linker.role(r)
        } else {
            Role::Single
        };
        reading.records += 1;
        for stage in reading.stages {
            match stage {
                Stage::Uploads => {
                    self.learn_upload(r, &role, &mut reading.linker, reading.records);
                }
                Stage::Manifests => self.learn_manifest(r, &role),
                Stage::Blobs => self.learn_blob(r),
            }
        }
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

    #[allow(clippy::too_many_lines)]
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
        if n.is_multiple_of(4096) {
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
                        u.add_member(r);
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
