//! Pass 2 of the plan: the trace's items streamed again and turned into this shard's
//! operations, sessions linked, uploads folded, every record accounted for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::catalog::push_identity;
use super::catalog::Catalog;
use super::linker::{mounted, Position, PushedLayer, Role, SessionLinker};
use super::manifests::{recipe_over, ManifestBody};
use super::set_cache::SetCache;
use super::{
    Action, Naming, PlanCounts, PlanItem, PlanOptions, PlannedOp, SessionTag, ShardBy, UploadPolicy,
};
use crate::digest::{Digest, Sha256Sum};
use crate::fast_hash::{fnv1a, FastHashMap};
use crate::oci::Reference;
use crate::oci::UploadMode;
use crate::trace::{Item, Method, Record, Sym, Target, TraceError};

fn position_key(pos: Position) -> u64 {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&pos.0.to_le_bytes());
    bytes[4..].copy_from_slice(&pos.1.to_le_bytes());
    fnv1a(&bytes)
}

#[derive(Debug)]
struct OpenPull {
    id: u64,
    last_ms: i64,
}

/// Pass 2: the trace's items, streamed again, as this shard's operations.
#[derive(Debug)]
pub struct Planner<'c, I> {
    catalog: &'c Catalog,
    items: I,
    options: PlanOptions,
    naming: Naming,
    linker: SessionLinker,
    seq: u64,
    counts: PlanCounts,
    /// Upload heads of open pushes → their op sequence numbers and trace times.
    upload_seq: FastHashMap<Position, (u64, i64)>,
    /// Mounts no manifest PUT has claimed yet: (repository, blob) → their op's sequence
    /// number and time. A push's manifest waits for its mounts as for its uploads.
    mount_seq: FastHashMap<(Sym, Sym), (u64, i64)>,
    /// Open image pulls by head position.
    pulls: FastHashMap<Position, OpenPull>,
    closing: VecDeque<u64>,
    /// Members still to come of uploads already planned (their records are in the op).
    pending_members: FastHashMap<Position, u32>,
    last_sweep_ms: i64,
    items_read: u64,
    done: bool,
    /// The manifests the run pushes (sorted): a read of one of them may find the run's own.
    pushed: Vec<(Sym, Sym)>,
    /// The digests of the manifests prewarm pushed, as reads need them (a bounded cache,
    /// keyed by repository and reference).
    expected: SetCache<[u8; 32]>,
    /// Each trace client's hash and shared name, made once per client rather than once per
    /// operation (a bounded cache, as [`Naming`]'s).
    clients: FastHashMap<Sym, (u64, Arc<str>)>,
}

/// Clients whose hash and name the planner keeps at most: a map of 2^16 buckets is full at
/// seven eighths of them, and one more entry would double it.
const CLIENTS_KEPT: usize = (1 << 16) / 8 * 7;
/// Digests of prewarmed manifests the planner keeps at most (2.6 MB; one not kept costs the
/// manifest made again and hashed, about 100 µs at a trace's recorded sizes).
const EXPECTED_KEPT: usize = 1 << 16;

impl<'c, I> Planner<'c, I>
where
    I: Iterator<Item = Result<Item, TraceError>>,
{
    pub fn new(catalog: &'c Catalog, items: I, options: PlanOptions) -> Self {
        Planner {
            catalog,
            items,
            naming: Naming::new(options.repos.clone()),
            linker: SessionLinker::new(options.session_gap_ms),
            options,
            seq: 0,
            counts: PlanCounts::default(),
            upload_seq: FastHashMap::default(),
            mount_seq: FastHashMap::default(),
            pulls: FastHashMap::default(),
            closing: VecDeque::new(),
            pending_members: FastHashMap::default(),
            last_sweep_ms: i64::MIN,
            items_read: 0,
            done: false,
            pushed: {
                let mut pushed = catalog.pushed_manifests().to_vec();
                pushed.sort_unstable();
                pushed.dedup();
                pushed
            },
            expected: SetCache::new(catalog.manifests.len().min(EXPECTED_KEPT)),
            clients: FastHashMap::default(),
        }
    }

    /// The digest a read of the manifest `repo:reference` (trace names) must find: that of
    /// the manifest prewarm pushed, unless the run pushes that tag itself (then either may
    /// be there, or another host's) or the catalog does not know it.
    fn expected_manifest(&mut self, repo: Sym, reference: Sym) -> Option<Sha256Sum> {
        let key = (repo, reference);
        if self.pushed.binary_search(&key).is_ok() || !self.catalog.manifests.contains_key(&key) {
            return None;
        }
        self.counts.expected_reads += 1;
        let cache_key = u64::from(repo.0) << 32 | u64::from(reference.0);
        if let Some(sha) = self.expected.get(cache_key) {
            return Some(Sha256Sum(sha));
        }
        self.counts.expected_made += 1;
        let format = self.options.manifest_format;
        let (_, _, manifest) =
            super::prewarm::read_manifest_bytes(self.catalog, format, repo, reference);
        let sha = Sha256Sum::of(&manifest);
        self.expected.insert(cache_key, sha.0);
        Some(sha)
    }

    pub fn counts(&self) -> &PlanCounts {
        &self.counts
    }

    /// Entries the planner keeps between records (open pulls and uploads, sessions within
    /// the gap): bounded by what is open at one point of the trace, not by how much of it
    /// has passed. The naming cache is left out; it is bounded by a constant.
    pub fn held_entries(&self) -> usize {
        self.upload_seq.len()
            + self.mount_seq.len()
            + self.pulls.len()
            + self.closing.len()
            + self.pending_members.len()
            + self.linker.held_entries()
    }

    /// Items of the trace read so far (every shard's), for progress.
    pub fn items_read(&self) -> u64 {
        self.items_read
    }

    /// Settles the accounting when planning stops before the trace ends: the members of
    /// uploads already planned are records of those operations, read or not.
    pub fn finish_early(&mut self) {
        let outstanding: u64 = self
            .pending_members
            .drain()
            .map(|(_, n)| u64::from(n))
            .sum();
        self.counts.records += outstanding;
    }

    fn skip(&mut self, reason: &'static str) {
        *self.counts.skipped.entry(reason).or_default() += 1;
    }

    fn offset(&self, time_ms: i64) -> Duration {
        let origin = self.catalog.origin_ms.unwrap_or(time_ms);
        let trace_us = ((time_ms - origin).max(0) as f64) * 1000.0;
        Duration::from_micros((trace_us / self.options.speed.max(1e-9)) as u64)
    }

    fn shard_key(&self, record: &Record, role: &Role) -> u64 {
        match self.options.shard_by {
            ShardBy::Client => match record.client {
                Some(c) => fnv1a(self.catalog.names.resolve(c).as_bytes()),
                None => position_key((record.file, record.number)),
            },
            ShardBy::Record => {
                let head = match role {
                    Role::UploadMember(head) => *head,
                    Role::PullLayer { head, .. } => *head,
                    Role::ManifestPush(layers) => layers
                        .iter()
                        .find_map(|l| match l {
                            PushedLayer::Upload(p) => Some(*p),
                            PushedLayer::Existing(_) => None,
                        })
                        .unwrap_or((record.file, record.number)),
                    _ => (record.file, record.number),
                };
                position_key(head)
            }
        }
    }

    fn skipped_key(&self, file: u32, number: u64, client: Option<Sym>) -> u64 {
        match (self.options.shard_by, client) {
            (ShardBy::Client, Some(c)) => fnv1a(self.catalog.names.resolve(c).as_bytes()),
            _ => position_key((file, number)),
        }
    }

    fn op(
        &mut self,
        record: &Record,
        action: Action,
        folded: u32,
        session: Option<SessionTag>,
    ) -> Box<PlannedOp> {
        let (client, client_name) = match record.client {
            Some(c) => {
                let (hash, name) = self.client(c);
                (hash, Some(name))
            }
            None => (0, None),
        };
        // Boxed as it is made: it goes to the executor's thread through a channel of
        // pointers, and each move on the way is a word rather than the whole operation.
        let op = Box::new(PlannedOp {
            seq: self.seq,
            offset: self.offset(record.time_ms),
            action,
            folded,
            session,
            client,
            client_name,
            closes: None,
        });
        self.seq += 1;
        self.counts.ops += 1;
        self.counts.folded += u64::from(folded);
        op
    }

    /// Trace client `c`'s hash (the key of `--route client`) and its name, shared.
    fn client(&mut self, c: Sym) -> (u64, Arc<str>) {
        if let Some((hash, name)) = self.clients.get(&c) {
            return (*hash, Arc::clone(name));
        }
        let name = self.catalog.names.resolve(c);
        let entry = (fnv1a(name.as_bytes()), Arc::<str>::from(name.as_ref()));
        if self.clients.len() >= CLIENTS_KEPT {
            self.clients.clear();
        }
        self.clients.insert(c, entry.clone());
        entry
    }

    /// Closes pulls idle for a session gap (checked at most once per trace second).
    fn sweep_pulls(&mut self, now_ms: i64) {
        if now_ms.saturating_sub(self.last_sweep_ms) < 1000 {
            return;
        }
        self.last_sweep_ms = now_ms;
        let gap = self.options.session_gap_ms;
        let mut stale: Vec<(Position, u64)> = self
            .pulls
            .iter()
            .filter(|(_, p)| now_ms - p.last_ms > gap)
            .map(|(pos, p)| (*pos, p.id))
            .collect();
        stale.sort_unstable();
        for (pos, id) in stale {
            self.pulls.remove(&pos);
            self.closing.push_back(id);
        }
        // Uploads no manifest PUT claimed within a gap never will be.
        self.upload_seq.retain(|_, (_, t)| now_ms - *t <= gap);
        self.mount_seq.retain(|_, (_, t)| now_ms - *t <= gap);
    }

    /// Plans one record of this shard: an operation, or a fold, or a skip.
    #[allow(clippy::too_many_lines)]
    fn plan(&mut self, record: &Record, role: Role) -> Option<Box<PlannedOp>> {
        let pos = (record.file, record.number);
        let format = self.options.manifest_format;
        let catalog = self.catalog;
        match (record.method, record.target, role) {
            (_, _, Role::UploadMember(head)) => {
                // Carried out inside its head's upload; counted with that operation.
                if let Some(n) = self.pending_members.get_mut(&head) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.pending_members.remove(&head);
                    }
                }
                None
            }
            (
                _,
                Target::UploadStart { repo }
                | Target::Upload { repo, .. }
                | Target::Mount { repo, .. },
                Role::UploadHead,
            ) => {
                let (patches, members, push) = catalog
                    .upload(pos)
                    .map_or((0, 0, None), |f| (f.patches, f.members, f.push()));
                let content = catalog.upload_content(pos);
                let mode = match self.options.upload {
                    UploadPolicy::Monolithic => UploadMode::Monolithic,
                    UploadPolicy::Chunked { chunk_size } => UploadMode::Chunked { chunk_size },
                    UploadPolicy::Trace if patches > 0 => UploadMode::Chunked {
                        chunk_size: content.size().div_ceil(u64::from(patches)).max(1),
                    },
                    UploadPolicy::Trace => UploadMode::Monolithic,
                };
                let push =
                    push.and_then(|p| catalog.pushed_manifest(p))
                        .map(|(repo, reference)| {
                            (
                                self.naming.repo(catalog, repo),
                                self.naming.tag(catalog, repo, reference),
                            )
                        });
                let action = Action::BlobUpload {
                    repo: self.naming.repo(catalog, repo),
                    digest: catalog.upload_digest(pos),
                    content,
                    mode,
                    push,
                };
                let op = self.op(record, action, members, None);
                self.upload_seq.insert(pos, (op.seq, record.time_ms));
                if members > 0 {
                    self.pending_members.insert(pos, members);
                }
                Some(op)
            }
            (Method::Get, Target::Ping, _) => Some(self.op(record, Action::Ping, 0, None)),
            (Method::Get, Target::TagList { repo }, _) => {
                let repo = self.naming.repo(catalog, repo);
                Some(self.op(record, Action::TagList { repo }, 0, None))
            }
            (Method::Get | Method::Head, Target::Manifest { repo, reference }, role) => {
                let (trace_repo, trace_reference) = (repo, reference);
                let tag = self.naming.tag(catalog, repo, reference);
                let repo = self.naming.repo(catalog, repo);
                let reference = Reference::Tag(tag);
                if record.method == Method::Head {
                    return Some(self.op(
                        record,
                        Action::ManifestHead { repo, reference },
                        0,
                        None,
                    ));
                }
                let session =
                    matches!(role, Role::PullHead { .. }).then_some(SessionTag::PullHead(self.seq));
                if let Role::PullHead { ends: Some(head) } = role {
                    // The client's pull of this repository before this one can have no
                    // member after it: closed now, where the sweep would close it a
                    // session gap later (its image_pull then recorded in an interval long
                    // after its end, and every such pull held until then).
                    if let Some(p) = self.pulls.remove(&head) {
                        self.closing.push_back(p.id);
                    }
                }
                if let Some(SessionTag::PullHead(id)) = session {
                    self.pulls.insert(
                        pos,
                        OpenPull {
                            id,
                            last_ms: record.time_ms,
                        },
                    );
                }
                let expect = self.expected_manifest(trace_repo, trace_reference);
                let get = Action::ManifestGet {
                    repo,
                    reference,
                    expect,
                };
                Some(self.op(record, get, 0, session))
            }
            (Method::Put, Target::Manifest { repo, reference }, Role::ManifestPush(layers)) => {
                let mut deps = Vec::new();
                for layer in &layers {
                    let dep = match layer {
                        PushedLayer::Upload(head) => self.upload_seq.remove(head),
                        PushedLayer::Existing(blob) => self.mount_seq.remove(&(repo, *blob)),
                    };
                    deps.extend(dep.map(|(seq, _)| seq));
                }
                // From the record and its session, as pass 1 made the facts prewarm pushes
                // the config of (the run's catalog need not keep them).
                let name = |s: Option<Sym>| s.map(|s| catalog.names.resolve(s)).unwrap_or_default();
                let identity = push_identity(
                    &name(record.client),
                    &name(Some(repo)),
                    &name(Some(reference)),
                    record.time_ms,
                    record.number,
                );
                let recipe = recipe_over(
                    catalog,
                    repo,
                    identity,
                    record.size,
                    layers.iter().copied(),
                    format,
                );
                let tag = self.naming.tag(catalog, repo, reference);
                let repo = self.naming.repo(catalog, repo);
                let action = Action::ManifestPut {
                    repo,
                    tag,
                    manifest: ManifestBody::Recipe(Box::new(recipe)),
                    media_type: format.manifest_type(),
                    deps,
                };
                Some(self.op(record, action, 0, None))
            }
            (Method::Get, Target::Blob { repo, digest }, role) => {
                let session = match role {
                    Role::PullLayer { head, .. } => self.pulls.get_mut(&head).map(|p| {
                        p.last_ms = record.time_ms;
                        SessionTag::PullLayer(p.id)
                    }),
                    _ => None,
                };
                let content = catalog.blob_content(digest);
                let sums = catalog.blob_sums(digest);
                let action = Action::BlobGet {
                    repo: self.naming.repo(catalog, repo),
                    digest: Digest::from_sha256(sums.blob),
                    diff_id: content.is_layer().then_some(Sha256Sum(sums.diff)),
                    content,
                };
                Some(self.op(record, action, 0, session))
            }
            (Method::Head, Target::Blob { repo, digest }, _) => {
                let action = Action::BlobHead {
                    repo: self.naming.repo(catalog, repo),
                    digest: catalog.blob_digest(digest),
                };
                Some(self.op(record, action, 0, None))
            }
            (Method::Post, Target::Mount { repo, digest, from }, Role::Single)
                if mounted(record) =>
            {
                let action = Action::BlobMount {
                    repo: self.naming.repo(catalog, repo),
                    from: self.naming.repo(catalog, from),
                    digest: catalog.blob_digest(digest),
                };
                let op = self.op(record, action, 0, None);
                self.mount_seq
                    .insert((repo, digest), (op.seq, record.time_ms));
                Some(op)
            }
            (Method::Delete, Target::Manifest { repo, reference }, _) => {
                let Some(sha) = self.expected_manifest(repo, reference) else {
                    // A manifest the run pushes itself, deleted by tag: not known when
                    // planned.
                    self.skip("unsupported");
                    return None;
                };
                let action = Action::ManifestDelete {
                    repo: self.naming.repo(catalog, repo),
                    digest: Digest::from_sha256(sha.0),
                };
                Some(self.op(record, action, 0, None))
            }
            (Method::Delete, Target::Blob { repo, digest }, _) => {
                let action = Action::BlobDelete {
                    repo: self.naming.repo(catalog, repo),
                    digest: catalog.blob_digest(digest),
                };
                Some(self.op(record, action, 0, None))
            }
            _ => {
                self.skip("unsupported");
                None
            }
        }
    }
}

impl<I> Iterator for Planner<'_, I>
where
    I: Iterator<Item = Result<Item, TraceError>>,
{
    type Item = Result<PlanItem, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(id) = self.closing.pop_front() {
                return Some(Ok(PlanItem::CloseSession(id)));
            }
            if self.done {
                return None;
            }
            let item = match self.items.next() {
                Some(Ok(item)) => {
                    self.items_read += 1;
                    item
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.done = true;
                    let mut open: Vec<u64> = self.pulls.drain().map(|(_, p)| p.id).collect();
                    open.sort_unstable();
                    self.closing.extend(open);
                    continue;
                }
            };
            match item {
                Item::Skipped {
                    reason,
                    file,
                    number,
                    client,
                    ..
                } => {
                    if self
                        .options
                        .shard
                        .owns(self.skipped_key(file, number, client))
                    {
                        self.counts.records += 1;
                        self.skip(reason.as_str());
                    }
                }
                Item::Record(record) => {
                    self.sweep_pulls(record.time_ms);
                    let role = self.linker.role(&record);
                    if !self.options.shard.owns(self.shard_key(&record, &role)) {
                        continue;
                    }
                    self.counts.records += 1;
                    if let Some(mut op) = self.plan(&record, role) {
                        // The first pull closed while planning this record (the one its
                        // pull head ends, or one the session gap ended) goes with it; any
                        // other follows as an item of its own.
                        op.closes = self.closing.pop_front();
                        return Some(Ok(PlanItem::Op(op)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The plan is pure: tables over generated traces, no clock, no socket.

    use super::super::catalog;
    use super::super::{RepoMap, ShardSpec};
    use super::*;
    use crate::oci::manifest::ManifestFormat;
    use crate::trace::record::{parse_uri, Interner};
    use crate::trace::synth::{generate, SynthOptions};
    use crate::trace::write::write_file;
    use crate::trace::{ReadOptions, Spool, SpoolWriter, TraceInput, TraceReader};

    #[test]
    fn the_clients_kept_never_double_their_table() {
        // The rule `client` follows: cleared when full, then filled.
        let mut cache: FastHashMap<Sym, (u64, Arc<str>)> = FastHashMap::default();
        let name: Arc<str> = Arc::from("client");
        let mut most = 0;
        for i in 0..200_000u32 {
            if cache.len() >= CLIENTS_KEPT {
                cache.clear();
            }
            cache.insert(Sym(i), (u64::from(i), Arc::clone(&name)));
            most = most.max(cache.capacity());
        }
        assert_eq!(most, CLIENTS_KEPT, "the table's room at its largest");
    }

    fn options(shard: ShardSpec, shard_by: ShardBy) -> PlanOptions {
        PlanOptions {
            shard,
            shard_by,
            speed: 1.0,
            upload: UploadPolicy::Trace,
            repos: RepoMap::Keep { prefix: None },
            manifest_format: ManifestFormat::Oci,
            session_gap_ms: 60_000,
        }
    }

    /// A generated trace written to a file (in the returned directory), its catalog, and
    /// the items pass 1 spooled, as `replay` builds them.
    fn catalog_of(
        synth: &SynthOptions,
        seed: u64,
    ) -> (tempfile::TempDir, TraceInput, Catalog, Spool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        write_file(&path, &generate(synth).0).unwrap();
        catalog_in(dir, seed)
    }

    /// [`catalog_of`] for the trace already at `t.json` in `dir`.
    fn catalog_in(
        dir: tempfile::TempDir,
        seed: u64,
    ) -> (tempfile::TempDir, TraceInput, Catalog, Spool) {
        let input = TraceInput::resolve(&[dir.path().join("t.json")]).unwrap();
        let mut reader =
            TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap();
        let content = catalog::ContentOptions {
            seed,
            ..catalog::ContentOptions::default()
        };
        // As a run alone builds it past `EAGER_RECORDS` records: the trace spooled, then the
        // stages over the spool (the catalog built as it is spooled is compared with it).
        let mut spool = SpoolWriter::new();
        for item in &mut reader {
            spool.push(&item.unwrap());
        }
        let mut names = reader.into_names();
        names.drop_index();
        let spool = spool.finish().unwrap();
        let mut cat =
            Catalog::build_staged(|| spool.items(), 60_000, content, catalog::Keep::Run, names)
                .unwrap();
        cat.compute_digests(2);
        assert_eq!(spool.len(), cat.items);
        (dir, input, cat, spool)
    }

    /// Catalog and every plan item of a generated trace, read back from a file.
    fn plan_of(
        synth: &SynthOptions,
        seed: u64,
        plan: PlanOptions,
    ) -> (Catalog, Vec<PlanItem>, PlanCounts) {
        let (_dir, input, cat, _) = catalog_of(synth, seed);
        let reader = TraceReader::open(&input, ReadOptions::default(), cat.names.clone()).unwrap();
        let mut planner = Planner::new(&cat, reader, plan);
        let items: Vec<PlanItem> = planner.by_ref().map(Result::unwrap).collect();
        let counts = planner.counts().clone();
        (cat, items, counts)
    }

    #[test]
    fn a_prewarmed_manifest_s_digest_is_made_once_while_the_cache_holds_them_all() {
        let plan = options(ShardSpec::ALL, ShardBy::Client);
        let (cat, items, counts) = plan_of(&SynthOptions::default(), 5, plan);
        let checked: Vec<(String, Sha256Sum)> = ops(&items)
            .into_iter()
            .filter_map(|op| match &op.action {
                Action::ManifestGet {
                    repo,
                    reference,
                    expect: Some(sha),
                } => Some((format!("{repo:?}:{reference:?}"), *sha)),
                _ => None,
            })
            .collect();
        let distinct: std::collections::BTreeMap<&str, Sha256Sum> = checked
            .iter()
            .map(|(name, sha)| (name.as_str(), *sha))
            .collect();
        assert!(
            distinct.len() > 1 && checked.len() > distinct.len(),
            "{counts:?}"
        );
        // Every read counted; each manifest's digest made once, the cache holding them all.
        assert!(cat.manifests.len() <= EXPECTED_KEPT);
        assert!(counts.expected_reads >= checked.len() as u64, "{counts:?}");
        assert!(counts.expected_made >= distinct.len() as u64, "{counts:?}");
        assert!(
            counts.expected_made <= cat.manifests.len() as u64,
            "{counts:?}"
        );
        assert!(counts.expected_made < counts.expected_reads, "{counts:?}");
        // A read carries the digest of its manifest, whichever read made it.
        for (name, sha) in &checked {
            assert_eq!(distinct[name.as_str()], *sha, "{name}");
        }
    }

    #[test]
    fn a_plan_item_crosses_to_the_executor_as_a_pointer() {
        // Each step from the planner to an operation's task moves the item: the box's
        // pointer and a tag, not the operation (over 200 bytes).
        assert!(std::mem::size_of::<PlanItem>() <= 16);
        assert!(std::mem::size_of::<PlannedOp>() > 128);
    }

    fn ops(items: &[PlanItem]) -> Vec<&PlannedOp> {
        items
            .iter()
            .filter_map(|i| match i {
                PlanItem::Op(op) => Some(&**op),
                PlanItem::CloseSession(_) => None,
            })
            .collect()
    }

    /// The plan of a trace of 1 KiB GETs, each `(ms, client, uri)` (an empty client: the
    /// record names none), within its first second.
    fn plan_gets(records: &[(u32, &str, &str)]) -> Vec<PlanItem> {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = records
            .iter()
            .enumerate()
            .map(|(i, (ms, client, uri))| {
                let client = if client.is_empty() {
                    String::new()
                } else {
                    format!(r#""http.request.remoteaddr": "{client}", "#)
                };
                format!(
                    r#"{{"http.request.method": "GET", "http.request.uri": "{uri}", {client}"http.response.status": 200, "http.response.written": 1024, "http.request.duration": 0.001, "id": "{i:010x}", "timestamp": "2017-06-20T00:00:00.{ms:03}Z"}}"#
                )
            })
            .collect();
        std::fs::write(dir.path().join("t.json"), lines.join("\n")).unwrap();
        let (_dir, input, cat, _) = catalog_in(dir, 0);
        let reader = TraceReader::open(&input, ReadOptions::default(), cat.names.clone()).unwrap();
        let plan = options(ShardSpec::ALL, ShardBy::Client);
        Planner::new(&cat, reader, plan)
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn every_operation_names_its_client_by_hash_and_shared_name() {
        // The hash is `--route client`'s key and the name attribution's; a client's
        // operations share one name, made once; a record without a client has neither.
        let items = plan_gets(&[
            (0, "10.0.0.1", "v2/u/r/manifests/v1"),
            (10, "10.0.0.2", "v2/u/r/manifests/v1"),
            (20, "10.0.0.1", "v2/u/s/manifests/v1"),
            (30, "", "v2/u/t/manifests/v1"),
        ]);
        let ops = ops(&items);
        assert_eq!(ops.len(), 4, "{items:?}");
        for (op, name) in ops.iter().zip(["10.0.0.1", "10.0.0.2", "10.0.0.1"]) {
            assert_eq!(op.client, fnv1a(name.as_bytes()));
            assert_eq!(op.client_name.as_deref(), Some(name));
        }
        let (first, third) = (&ops[0].client_name, &ops[2].client_name);
        assert!(Arc::ptr_eq(
            first.as_ref().unwrap(),
            third.as_ref().unwrap()
        ));
        assert_eq!((ops[3].client, ops[3].client_name.as_deref()), (0, None));
    }

    #[test]
    fn a_pull_is_closed_when_its_client_pulls_the_repository_again() {
        // Client c pulls u/r twice (a layer after each manifest), client d once; the gap is
        // a minute and the trace lasts a second. c's first pull can have no member after
        // c's second manifest GET: it is closed right after that GET is planned, not at the
        // end of the trace with the others.
        let items = plan_gets(&[
            (0, "c", "v2/u/r/manifests/v1"),
            (10, "c", "v2/u/r/blobs/sha256:aa"),
            (20, "d", "v2/u/r/manifests/v1"),
            (500, "c", "v2/u/r/manifests/v1"),
            (510, "c", "v2/u/r/blobs/sha256:bb"),
        ]);
        let shape: Vec<String> = items
            .iter()
            .map(|i| match i {
                PlanItem::Op(op) => {
                    let what = match op.session {
                        Some(SessionTag::PullHead(id)) => format!("head {id}"),
                        Some(SessionTag::PullLayer(id)) => format!("layer {id}"),
                        _ => "other".into(),
                    };
                    match op.closes {
                        Some(id) => format!("{what} closes {id}"),
                        None => what,
                    }
                }
                PlanItem::CloseSession(id) => format!("close {id}"),
            })
            .collect();
        // c's second manifest GET carries the close of its first pull; the pulls left
        // open at the end are closed by items of their own.
        assert_eq!(
            shape,
            [
                "head 0",
                "layer 0",
                "head 2",
                "head 3 closes 0",
                "layer 3",
                "close 2",
                "close 3"
            ],
            "{items:?}"
        );
    }

    #[test]
    fn planning_from_the_spool_is_planning_from_the_trace() {
        // The replay's pass 2 plans from the items pass 1 spooled; it must be the plan
        // that reading the trace again gives, skipped records (duplicates, failed
        // originals) and all.
        let synth = SynthOptions {
            sessions: 300,
            duplicate_share: 0.05,
            failed_share: 0.05,
            ..SynthOptions::default()
        };
        let (_dir, input, cat, spool) = catalog_of(&synth, 0);

        let plan = options(ShardSpec::ALL, ShardBy::Client);
        let mut from_spool = Planner::new(&cat, spool.into_items(), plan.clone());
        let spooled: Vec<PlanItem> = from_spool.by_ref().map(Result::unwrap).collect();
        let reader = TraceReader::open(&input, ReadOptions::default(), cat.names.clone()).unwrap();
        let mut from_trace = Planner::new(&cat, reader, plan);
        let read: Vec<PlanItem> = from_trace.by_ref().map(Result::unwrap).collect();

        assert!(ops(&read).len() > 300, "{} operations", ops(&read).len());
        let counts = from_trace.counts();
        assert!(counts.skipped.get("duplicate").is_some_and(|&n| n > 0));
        assert!(counts
            .skipped
            .get("failed_in_trace")
            .is_some_and(|&n| n > 0));
        assert_eq!(from_spool.counts(), counts);
        assert!(spooled == read, "the spooled plan differs");
    }

    #[test]
    fn what_the_planner_keeps_stays_bounded_through_a_long_trace() {
        // A stationary push-heavy trace (uploads after HEAD 404s, chunked uploads, pulls)
        // of 2,000 sessions, ~120 of them within one session gap at any time: the state
        // kept between records must level off, not grow with the records read. (It grew
        // with every upload while the linker kept every HEAD-404 digest until taken, and
        // pass 2 never took them.)
        let synth = SynthOptions {
            sessions: 2000,
            clients: 200,
            repos: 400,
            pull_share: 0.4,
            failed_share: 0.0,
            ..SynthOptions::default()
        };
        let (_dir, input, cat, _) = catalog_of(&synth, 7);
        let reader = TraceReader::open(&input, ReadOptions::default(), cat.names.clone()).unwrap();
        let mut planner = Planner::new(&cat, reader, options(ShardSpec::ALL, ShardBy::Client));
        let mut held = Vec::new();
        let mut uploads = 0;
        while let Some(item) = planner.next() {
            if let PlanItem::Op(op) = item.unwrap() {
                uploads += u64::from(matches!(op.action, Action::BlobUpload { .. }));
            }
            if planner.items_read().is_multiple_of(500) {
                held.push(planner.held_entries());
            }
        }
        assert!(uploads > 1000, "a push-heavy trace: {uploads} uploads");
        let quarter = held.len() / 4;
        let early = *held[quarter..2 * quarter].iter().max().unwrap();
        let late = *held[3 * quarter..].iter().max().unwrap();
        assert!(
            late <= early + early / 2,
            "held entries grew from {early} to {late}: {held:?}"
        );
    }

    #[test]
    fn a_manifest_put_stays_a_put_where_the_trace_also_gets_it() {
        // Regression for the original replayer's bug B1 (PUTs relabelled as GETs).
        let synth = SynthOptions {
            sessions: 150,
            pull_share: 0.6,
            failed_share: 0.0,
            ..SynthOptions::default()
        };
        let (records, _) = generate(&synth);
        let put_uris: Vec<&str> = records
            .iter()
            .filter(|r| r.method == "PUT" && r.uri.contains("/manifests/"))
            .map(|r| r.uri.as_str())
            .collect();
        let both = put_uris
            .iter()
            .filter(|u| records.iter().any(|r| r.method == "GET" && r.uri == **u))
            .count();
        assert!(both > 0, "the trace must both PUT and GET a manifest");
        let (_, items, _) = plan_of(&synth, 1, options(ShardSpec::ALL, ShardBy::Client));
        let puts = ops(&items)
            .iter()
            .filter(|op| matches!(op.action, Action::ManifestPut { .. }))
            .count();
        assert_eq!(puts, put_uris.len());
    }

    #[test]
    fn shards_cover_every_record_exactly_once() {
        let synth = SynthOptions {
            sessions: 200,
            duplicate_share: 0.05,
            failed_share: 0.05,
            ..SynthOptions::default()
        };
        let (_, whole, whole_counts) = plan_of(&synth, 1, options(ShardSpec::ALL, ShardBy::Client));
        let whole_ops = ops(&whole).len() as u64;
        for by in [ShardBy::Client, ShardBy::Record] {
            for n in 1..=4u32 {
                let mut records = 0;
                let mut op_count = 0;
                let mut folded = 0;
                let mut skipped = 0;
                for i in 0..n {
                    let (_, items, counts) =
                        plan_of(&synth, 1, options(ShardSpec { index: i, count: n }, by));
                    assert_eq!(
                        counts.records,
                        counts.ops + counts.folded + counts.skipped.values().sum::<u64>(),
                        "shard {i}/{n} by {by:?}"
                    );
                    assert_eq!(ops(&items).len() as u64, counts.ops);
                    records += counts.records;
                    op_count += counts.ops;
                    folded += counts.folded;
                    skipped += counts.skipped.values().sum::<u64>();
                }
                assert_eq!(records, whole_counts.records, "{n} shards by {by:?}");
                assert_eq!(op_count, whole_ops);
                assert_eq!(folded, whole_counts.folded);
                assert_eq!(skipped, whole_counts.skipped.values().sum::<u64>());
            }
        }
    }

    #[test]
    fn the_catalog_built_as_the_trace_is_spooled_plans_what_the_staged_one_does() {
        let synth = SynthOptions::default();
        let (_dir, input, staged, spool) = catalog_of(&synth, 3);
        let plan = |cat: &Catalog| -> (Vec<PlanItem>, PlanCounts) {
            let mut planner = Planner::new(
                cat,
                spool.items().unwrap(),
                options(ShardSpec::ALL, ShardBy::Client),
            );
            let items: Vec<PlanItem> = planner.by_ref().map(Result::unwrap).collect();
            (items, planner.counts().clone())
        };
        let (staged_items, staged_counts) = plan(&staged);
        assert!(staged_items.len() > 100, "{}", staged_items.len());
        let records = staged_counts.records;
        // Built all the way through the reading, and given up half way (then staged).
        for (limit, building) in [(u64::MAX, true), (records / 2, false)] {
            let mut reader =
                TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap();
            let content = catalog::ContentOptions {
                seed: 3,
                ..catalog::ContentOptions::default()
            };
            let mut eager = catalog::Eager::with_limit(60_000, content, catalog::Keep::Run, limit);
            let mut again = SpoolWriter::new();
            for item in &mut reader {
                let item = item.unwrap();
                eager.learn(&item);
                again.push(&item);
            }
            assert_eq!(eager.building(), building, "limit {limit}");
            let mut names = reader.into_names();
            names.drop_index();
            let again = again.finish().unwrap();
            let mut cat = eager.finish(|| again.items(), names).unwrap();
            cat.compute_digests(2);
            assert_eq!(
                (cat.items, cat.origin_ms, cat.end_ms),
                (staged.items, staged.origin_ms, staged.end_ms)
            );
            assert!(cat.uploads().eq(staged.uploads()));
            assert_eq!(cat.blobs, staged.blobs);
            assert_eq!(cat.filler_repos, staged.filler_repos);
            assert_eq!(cat.blob_reads(), staged.blob_reads());
            assert_eq!(cat.prewarm_bytes(), staged.prewarm_bytes());
            let (items, counts) = plan(&cat);
            assert_eq!(counts, staged_counts, "limit {limit}");
            assert!(items == staged_items, "limit {limit}: the plans differ");
        }
    }

    #[test]
    fn a_run_alone_builds_the_same_catalog_in_stages_keeping_less_and_pushes_what_prewarm_prepared()
    {
        let synth = SynthOptions::default();
        let (_dir, input, run_catalog, _) = catalog_of(&synth, 3);
        assert_eq!(run_catalog.keeps(), catalog::Keep::Run);
        // The catalog prewarm uses, from the same trace.
        let mut reader =
            TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap();
        let content = catalog::ContentOptions {
            seed: 3,
            ..catalog::ContentOptions::default()
        };
        let mut full = Catalog::build(&mut reader, 60_000, content, catalog::Keep::Prewarm)
            .unwrap()
            .seal(reader.into_names());
        // One reading building every table, or one per stage: the same facts.
        assert_eq!(
            (run_catalog.items, run_catalog.origin_ms),
            (full.items, full.origin_ms)
        );
        assert!(run_catalog.uploads().eq(full.uploads()));
        assert!(run_catalog.uploads().any(|(_, u)| u.push().is_some()));
        assert_eq!(run_catalog.blobs, full.blobs);
        assert_eq!(run_catalog.filler_repos, full.filler_repos);
        assert_eq!(run_catalog.manifests.len(), full.manifests.len());
        for ((key, a), (_, b)) in run_catalog.manifests.iter().zip(full.manifests.iter()) {
            assert_eq!(a.size, b.size, "{key:?}");
            assert_eq!(
                run_catalog.manifest_layers(a),
                full.manifest_layers(b),
                "{key:?}"
            );
        }
        assert_eq!(run_catalog.blob_read_count(), full.blob_reads().len());
        assert_eq!(run_catalog.prewarm_bytes(), full.prewarm_bytes());
        assert_eq!(run_catalog.pushed_manifests(), full.pushed_manifests());
        assert!(run_catalog.blob_reads().len() <= 64 && run_catalog.pushes().len() == 0);
        let configs: std::collections::BTreeSet<String> = full
            .pushes()
            .map(|(_, facts)| {
                let built = super::super::push_manifest(&full, facts, ManifestFormat::Oci);
                built.config.digest.to_string()
            })
            .collect();
        assert!(configs.len() > 10, "{}", configs.len());
        let configs_planned = |catalog: &Catalog| -> std::collections::BTreeSet<String> {
            let reader =
                TraceReader::open(&input, ReadOptions::default(), catalog.names.clone()).unwrap();
            Planner::new(catalog, reader, options(ShardSpec::ALL, ShardBy::Client))
                .filter_map(|item| match item.unwrap() {
                    PlanItem::Op(op) => match op.action {
                        Action::ManifestPut {
                            manifest: ManifestBody::Recipe(r),
                            ..
                        } => Some(r.build().config.digest.to_string()),
                        _ => None,
                    },
                    PlanItem::CloseSession(_) => None,
                })
                .collect()
        };
        assert_eq!(configs_planned(&run_catalog), configs);
        // `--phase all` between its phases: the prewarm's catalog keeps what a run's does.
        full.keep_run_only();
        assert_eq!(full.keeps(), catalog::Keep::Run);
        assert_eq!(full.blob_reads(), run_catalog.blob_reads());
        assert_eq!(full.pushes().len(), 0);
        assert_eq!(configs_planned(&full), configs);
    }

    #[test]
    fn same_seed_same_digests_other_seed_other_digests() {
        let synth = SynthOptions::default();
        let digests = |seed| {
            let (cat, items, _) = plan_of(&synth, seed, options(ShardSpec::ALL, ShardBy::Client));
            let mut d: Vec<String> = cat
                .blobs
                .keys()
                .map(|b| hex::encode(cat.blob_sha256(*b)))
                .collect();
            d.sort();
            (d, items)
        };
        let (a, items_a) = digests(7);
        let (b, items_b) = digests(7);
        let (c, _) = digests(8);
        assert_eq!(a, b);
        assert_eq!(
            items_a, items_b,
            "the whole plan is a pure function of its inputs"
        );
        assert!(!a.is_empty());
        assert!(a.iter().all(|d| !c.contains(d)));
    }

    #[test]
    fn offsets_follow_trace_time_scaled_by_speed() {
        let synth = SynthOptions {
            sessions: 30,
            ..SynthOptions::default()
        };
        let mut plan = options(ShardSpec::ALL, ShardBy::Client);
        plan.speed = 4.0;
        let (_, fast, _) = plan_of(&synth, 1, plan);
        let (_, slow, _) = plan_of(&synth, 1, options(ShardSpec::ALL, ShardBy::Client));
        let (fast, slow) = (ops(&fast), ops(&slow));
        assert_eq!(fast.first().unwrap().offset, Duration::ZERO);
        for (f, s) in fast.iter().zip(&slow) {
            let expect = s.offset.as_micros() / 4;
            assert!(
                f.offset.as_micros().abs_diff(expect) <= 1,
                "{:?} vs {:?}",
                f.offset,
                s.offset
            );
        }
        assert!(slow.windows(2).all(|w| w[0].offset <= w[1].offset));
    }

    #[test]
    fn uploads_fold_their_chunks_and_choose_chunked_when_the_trace_did() {
        let synth = SynthOptions {
            sessions: 60,
            pull_share: 0.0,
            failed_share: 0.0,
            duplicate_share: 0.0,
            layer_size: (200_000, 300_000),
            chunk: 64 * 1024,
            ..SynthOptions::default()
        };
        let (_, stats) = generate(&synth);
        let (_, items, counts) = plan_of(&synth, 1, options(ShardSpec::ALL, ShardBy::Client));
        assert_eq!(counts.folded, stats.upload_members);
        for op in ops(&items) {
            if let Action::BlobUpload { mode, content, .. } = &op.action {
                let UploadMode::Chunked { chunk_size } = mode else {
                    panic!("the trace shows PATCHes: {mode:?}")
                };
                let patches = content.size().div_ceil(*chunk_size);
                assert!(
                    (4..=5).contains(&patches),
                    "{patches} chunks for {} bytes",
                    content.size()
                );
                assert!(op.folded >= 4);
            }
        }
    }

    #[test]
    fn names_map_to_valid_registry_names() {
        let mut names = Interner::default();
        let repo = match parse_uri("v2/Weird_Name/x/manifests/t", &mut names) {
            Target::Manifest { repo, .. } => repo,
            other => panic!("{other:?}"),
        };
        let reference = names.intern("not a tag!");
        let mut catalog = Catalog::default();
        catalog.names = names;
        let mut keep = Naming::new(RepoMap::Keep {
            prefix: Some("bench".into()),
        });
        assert_eq!(keep.repo(&catalog, repo).as_str(), "bench/weird_name/x");
        assert!(keep
            .tag(&catalog, repo, reference)
            .as_str()
            .starts_with('t'));
        let mut single = Naming::new(RepoMap::Single {
            repository: "all/in/one".parse().unwrap(),
        });
        assert_eq!(single.repo(&catalog, repo).as_str(), "all/in/one");
    }
}
