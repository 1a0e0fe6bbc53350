//! Groups a client's requests into the sessions a docker client makes, from the trace alone.
//!
//! Per (client, repository), requests closer than the session gap belong together:
//! - **uploads**: a `POST …/blobs/uploads/` opens an upload; the `PATCH`es and the closing
//!   `PUT` to `…/blobs/uploads/<id>` that follow belong to the oldest open upload (or the one
//!   already bound to `<id>`). The POST is the upload's *head*; the rest are *members*, carried
//!   out inside the head's operation (counted as `folded`). A PATCH or PUT without a POST
//!   (the trace was cut) becomes a head itself. A `HEAD …/blobs/<d>` answered 404 just before
//!   names the digest the upload pushes.
//! - **mounts**: a `POST …/blobs/uploads/?mount=<d>&from=<r>` answered 201 puts blob `<d>`
//!   in the push without an upload; answered 202, it opens an upload as a plain POST does.
//! - **pushes**: the uploads (and blobs found present by HEAD or mounted) of a session are
//!   the layers of the manifest PUT that ends it.
//! - **pulls**: blob GETs after a manifest GET are the layers of that manifest.
//!
//! The linker is deterministic and sees every record of the trace (all shards), so the
//! catalog pass and the planning pass, on every host, agree on every role. Its state is
//! bounded by the clients active within one session gap.

use std::collections::VecDeque;

use crate::fast_hash::FastHashMap;
use crate::trace::{Method, Record, SessionId, Sym, Target};

/// Where a record stands: (file, record number). Unique within a trace input.
pub type Position = (u32, u64);

/// A layer of a pushed manifest, as the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushedLayer {
    /// Uploaded in the session by the upload whose head is at this position.
    Upload(Position),
    /// Found present by a HEAD (or uploaded earlier): a blob of the trace.
    Existing(Sym),
}

/// What a record is within its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// An operation of its own.
    Single,
    /// Opens an upload (its operation carries the members).
    UploadHead,
    /// Part of the upload whose head is at this position.
    UploadMember(Position),
    /// A manifest PUT closing a push session with these layers (empty: none seen).
    ManifestPush(Vec<PushedLayer>),
    /// A blob GET that belongs to the pull of the manifest GET at `head`, of `reference`.
    PullLayer { head: Position, reference: Sym },
    /// A manifest GET that starts a pull; `ends`: the pull of the same client and
    /// repository it follows, which no blob GET can join any more (the ones after this GET
    /// are this pull's), so it is over now rather than a session gap later.
    PullHead { ends: Option<Position> },
}

#[derive(Debug)]
struct OpenUpload {
    head: Position,
    session: Option<SessionId>,
    last_ms: i64,
}

#[derive(Debug, Default)]
struct ClientRepo {
    last_ms: i64,
    uploads: VecDeque<OpenUpload>,
    /// HEAD-404 digests not yet claimed by an upload.
    missing: VecDeque<Sym>,
    /// Layers of the push in progress.
    pushed: Vec<PushedLayer>,
    /// The manifest GET whose pull is in progress, and its (repository, reference).
    pull: Option<(Position, Sym)>,
}

/// Most layers remembered per push session (a bound on memory for odd traces).
const MAX_SESSION_LAYERS: usize = 256;

/// The linker. Feed records in trace order with [`SessionLinker::role`].
#[derive(Debug)]
pub struct SessionLinker {
    gap_ms: i64,
    state: FastHashMap<(Sym, Sym), ClientRepo>,
    /// The latest upload head and the digest a preceding HEAD 404 named for it. One slot:
    /// the caller takes it right after that head's [`SessionLinker::role`], or never (a
    /// second pass, which has the digest from its catalog); either way nothing piles up.
    upload_digest: Option<(Position, Sym)>,
    seen: u64,
}

impl SessionLinker {
    pub fn new(gap_ms: i64) -> Self {
        SessionLinker {
            gap_ms: gap_ms.max(1),
            state: FastHashMap::default(),
            upload_digest: None,
            seen: 0,
        }
    }

    /// Entries kept between records: client sessions within the gap.
    pub fn held_entries(&self) -> usize {
        self.state.len()
    }

    /// The digest a HEAD 404 named for the upload at `head` (the latest head), if any.
    /// Taken once: the caller records it with the upload.
    pub fn take_upload_digest(&mut self, head: Position) -> Option<Sym> {
        match self.upload_digest {
            Some((at, digest)) if at == head => {
                self.upload_digest = None;
                Some(digest)
            }
            _ => None,
        }
    }

    fn evict(&mut self, now_ms: i64) {
        // Cheap amortised sweep: every 4096 records, drop sessions idle for a gap.
        self.seen += 1;
        if !self.seen.is_multiple_of(4096) {
            return;
        }
        let gap = self.gap_ms;
        self.state.retain(|_, s| now_ms - s.last_ms <= gap);
    }

    /// The role of `record` (the next record of the trace) in its session.
    #[allow(clippy::too_many_lines)]
    pub fn role(&mut self, record: &Record) -> Role {
        self.evict(record.time_ms);
        let (Some(client), Some(repo)) = (record.client, record.target.repo()) else {
            return Role::Single;
        };
        let gap = self.gap_ms;
        let now = record.time_ms;
        let pos = (record.file, record.number);
        let s = self.state.entry((client, repo)).or_default();
        if now - s.last_ms > gap {
            // A new session: forget what the previous one left open.
            *s = ClientRepo::default();
        }
        s.last_ms = now;
        s.uploads.retain(|u| now - u.last_ms <= gap);

        match (record.method, record.target) {
            (Method::Post, Target::Mount { digest, .. }) if mounted(record) => {
                // The blob is the push's without an upload; the HEAD that missed it named it.
                if let Some(i) = s.missing.iter().position(|d| *d == digest) {
                    s.missing.remove(i);
                }
                push_layer(s, PushedLayer::Existing(digest));
                Role::Single
            }
            (Method::Post, Target::UploadStart { .. } | Target::Mount { .. }) => {
                s.uploads.push_back(OpenUpload {
                    head: pos,
                    session: None,
                    last_ms: now,
                });
                if let Some(d) = s.missing.pop_front() {
                    self.upload_digest = Some((pos, d));
                }
                push_layer(s, PushedLayer::Upload(pos));
                Role::UploadHead
            }
            (method, Target::Upload { session, .. }) => {
                let found = s
                    .uploads
                    .iter()
                    .position(|u| u.session == Some(session))
                    .or_else(|| s.uploads.iter().position(|u| u.session.is_none()));
                match found {
                    Some(i) => {
                        let upload = &mut s.uploads[i];
                        upload.session = Some(session);
                        upload.last_ms = now;
                        let head = upload.head;
                        if method == Method::Put || method == Method::Delete {
                            s.uploads.remove(i);
                        }
                        Role::UploadMember(head)
                    }
                    None if matches!(method, Method::Patch | Method::Put) => {
                        // The trace starts mid-upload: this record opens it.
                        if method == Method::Patch {
                            s.uploads.push_back(OpenUpload {
                                head: pos,
                                session: Some(session),
                                last_ms: now,
                            });
                        }
                        if let Some(d) = s.missing.pop_front() {
                            self.upload_digest = Some((pos, d));
                        }
                        push_layer(s, PushedLayer::Upload(pos));
                        Role::UploadHead
                    }
                    None => Role::Single,
                }
            }
            (Method::Head, Target::Blob { digest, .. }) => {
                if record.status == 404 {
                    s.missing.push_back(digest);
                    if s.missing.len() > MAX_SESSION_LAYERS {
                        s.missing.pop_front();
                    }
                } else if record.status < 400 {
                    push_layer(s, PushedLayer::Existing(digest));
                }
                Role::Single
            }
            (Method::Put, Target::Manifest { .. }) => {
                let layers = std::mem::take(&mut s.pushed);
                s.missing.clear();
                Role::ManifestPush(layers)
            }
            (Method::Get, Target::Manifest { reference, .. }) => {
                let ends = s.pull.replace((pos, reference)).map(|(head, _)| head);
                Role::PullHead { ends }
            }
            (Method::Get, Target::Blob { .. }) => match s.pull {
                Some((head, reference)) => Role::PullLayer { head, reference },
                None => Role::Single,
            },
            _ => Role::Single,
        }
    }
}

/// A mount the registry made (201), not one it turned into an upload session (202).
pub fn mounted(record: &Record) -> bool {
    matches!(record.target, Target::Mount { .. })
        && (200..300).contains(&record.status)
        && record.status != 202
}

fn push_layer(s: &mut ClientRepo, layer: PushedLayer) {
    if s.pushed.len() < MAX_SESSION_LAYERS && !s.pushed.contains(&layer) {
        s.pushed.push(layer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::{parse_uri, Interner};

    #[derive(Default)]
    struct T {
        names: Interner,
        n: u64,
    }

    /// The roles a linker with a minute's gap gives `recs`, in order.
    fn roles_of(recs: &[Record]) -> Vec<Role> {
        let mut l = SessionLinker::new(60_000);
        recs.iter().map(|r| l.role(r)).collect()
    }

    impl T {
        fn rec(
            &mut self,
            t_ms: i64,
            client: &str,
            method: Method,
            uri: &str,
            status: u16,
        ) -> Record {
            self.n += 1;
            Record {
                file: 0,
                number: self.n,
                time_ms: t_ms,
                method,
                target: parse_uri(uri, &mut self.names),
                client: Some(self.names.intern(client)),
                size: 100,
                status,
                duration_us: 0,
                id: None,
                size_unknown: false,
            }
        }
    }

    #[test]
    fn a_docker_push_links_uploads_to_their_manifest() {
        let mut t = T {
            names: Interner::default(),
            n: 0,
        };
        let mut l = SessionLinker::new(60_000);
        let recs = [
            t.rec(0, "c", Method::Head, "v2/u/r/blobs/d1", 404),
            t.rec(1, "c", Method::Head, "v2/u/r/blobs/d2", 200),
            t.rec(2, "c", Method::Post, "v2/u/r/blobs/uploads/", 202),
            t.rec(3, "c", Method::Patch, "v2/u/r/blobs/uploads/s1", 202),
            t.rec(4, "c", Method::Put, "v2/u/r/blobs/uploads/s1", 201),
            t.rec(5, "c", Method::Put, "v2/u/r/manifests/latest", 201),
        ];
        let roles: Vec<Role> = recs.iter().map(|r| l.role(r)).collect();
        assert_eq!(roles[0], Role::Single);
        assert_eq!(roles[2], Role::UploadHead);
        assert_eq!(roles[3], Role::UploadMember((0, 3)));
        assert_eq!(roles[4], Role::UploadMember((0, 3)));
        let d2 = t.names.get("d2").unwrap();
        assert_eq!(
            roles[5],
            Role::ManifestPush(vec![PushedLayer::Existing(d2), PushedLayer::Upload((0, 3))])
        );
        assert_eq!(l.take_upload_digest((0, 3)), t.names.get("d1"));
        assert_eq!(l.take_upload_digest((0, 3)), None);
    }

    #[test]
    fn a_mount_is_a_layer_without_an_upload_and_a_refused_one_opens_an_upload() {
        let mut t = T {
            names: Interner::default(),
            n: 0,
        };
        let mut l = SessionLinker::new(60_000);
        let recs = [
            t.rec(0, "c", Method::Head, "v2/u/r/blobs/d1", 404),
            t.rec(1, "c", Method::Head, "v2/u/r/blobs/d2", 404),
            t.rec(
                2,
                "c",
                Method::Post,
                "v2/u/r/blobs/uploads/?mount=d1&from=u/s",
                201,
            ),
            t.rec(
                3,
                "c",
                Method::Post,
                "v2/u/r/blobs/uploads/?mount=d2&from=u/s",
                202,
            ),
            t.rec(4, "c", Method::Patch, "v2/u/r/blobs/uploads/s1", 202),
            t.rec(5, "c", Method::Put, "v2/u/r/blobs/uploads/s1", 201),
            t.rec(6, "c", Method::Put, "v2/u/r/manifests/latest", 201),
        ];
        let roles: Vec<Role> = recs.iter().map(|r| l.role(r)).collect();
        assert_eq!(roles[2], Role::Single);
        assert_eq!(roles[3], Role::UploadHead);
        assert_eq!(
            l.take_upload_digest((0, 4)),
            t.names.get("d2"),
            "the mounted d1 is not the digest of the upload"
        );
        assert_eq!(roles[4], Role::UploadMember((0, 4)));
        let d1 = t.names.get("d1").unwrap();
        assert_eq!(
            roles[6],
            Role::ManifestPush(vec![PushedLayer::Existing(d1), PushedLayer::Upload((0, 4))])
        );
    }

    #[test]
    fn interleaved_uploads_of_one_client_and_other_clients_stay_apart() {
        let mut t = T {
            names: Interner::default(),
            n: 0,
        };
        let mut l = SessionLinker::new(60_000);
        let recs = [
            t.rec(0, "a", Method::Post, "v2/u/r/blobs/uploads/", 202),
            t.rec(1, "a", Method::Post, "v2/u/r/blobs/uploads/", 202),
            t.rec(2, "b", Method::Post, "v2/u/r/blobs/uploads/", 202),
            t.rec(3, "a", Method::Patch, "v2/u/r/blobs/uploads/x", 202),
            t.rec(4, "a", Method::Patch, "v2/u/r/blobs/uploads/y", 202),
            t.rec(5, "a", Method::Put, "v2/u/r/blobs/uploads/y", 201),
            t.rec(6, "b", Method::Put, "v2/u/r/blobs/uploads/z", 201),
            t.rec(7, "a", Method::Put, "v2/u/r/blobs/uploads/x", 201),
        ];
        let roles: Vec<Role> = recs.iter().map(|r| l.role(r)).collect();
        assert_eq!(roles[3], Role::UploadMember((0, 1)));
        assert_eq!(roles[4], Role::UploadMember((0, 2)));
        assert_eq!(roles[5], Role::UploadMember((0, 2)));
        assert_eq!(roles[6], Role::UploadMember((0, 3)));
        assert_eq!(roles[7], Role::UploadMember((0, 1)));
    }

    #[test]
    fn pulls_and_gaps() {
        let mut t = T::default();
        let recs = [
            t.rec(0, "c", Method::Get, "v2/u/r/manifests/v1", 200),
            t.rec(10, "c", Method::Get, "v2/u/r/blobs/l1", 200),
            t.rec(20, "c", Method::Get, "v2/u/other/blobs/l2", 200),
            t.rec(200_000, "c", Method::Get, "v2/u/r/blobs/l3", 200),
            t.rec(200_001, "c", Method::Patch, "v2/u/r/blobs/uploads/s", 202),
        ];
        let roles = roles_of(&recs);
        assert_eq!(roles[0], Role::PullHead { ends: None });
        let v1 = t.names.get("v1").unwrap();
        assert_eq!(
            roles[1],
            Role::PullLayer {
                head: (0, 1),
                reference: v1
            }
        );
        assert_eq!(roles[2], Role::Single, "another repository");
        assert_eq!(roles[3], Role::Single, "after the session gap");
        assert_eq!(
            roles[4],
            Role::UploadHead,
            "a PATCH without its POST opens the upload"
        );
    }

    #[test]
    fn a_pull_of_the_same_client_and_repository_ends_the_one_before() {
        let mut t = T::default();
        let recs = [
            t.rec(0, "c", Method::Get, "v2/u/r/manifests/v1", 200),
            t.rec(5, "d", Method::Get, "v2/u/r/manifests/v1", 200),
            t.rec(10, "c", Method::Get, "v2/u/other/manifests/v1", 200),
            t.rec(20, "c", Method::Get, "v2/u/r/manifests/v2", 200),
            t.rec(30, "c", Method::Get, "v2/u/r/blobs/l1", 200),
            t.rec(200_000, "c", Method::Get, "v2/u/r/manifests/v3", 200),
        ];
        let roles = roles_of(&recs);
        assert_eq!(roles[0], Role::PullHead { ends: None });
        assert_eq!(roles[1], Role::PullHead { ends: None }, "another client");
        assert_eq!(
            roles[2],
            Role::PullHead { ends: None },
            "another repository"
        );
        assert_eq!(
            roles[3],
            Role::PullHead { ends: Some((0, 1)) },
            "the same client and repository: the first pull is over"
        );
        let v2 = t.names.get("v2").unwrap();
        assert_eq!(
            roles[4],
            Role::PullLayer {
                head: (0, 4),
                reference: v2
            }
        );
        assert_eq!(
            roles[5],
            Role::PullHead { ends: None },
            "after the session gap: the sweep closed the one before"
        );
    }
}
