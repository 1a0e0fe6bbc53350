//! Pushed layers, reconstructed from the upload records of a trace.
//!
//! A docker push of a layer is `HEAD blobs/<digest>` (404), `POST blobs/uploads/`, one or
//! more `PATCH blobs/uploads/<session>` and a closing `PUT blobs/uploads/<session>`. The
//! session id says nothing about the digest, so the digest is *inferred*: each (client,
//! repository) keeps a queue of the digests its HEADs found missing, and a new upload session
//! of that client in that repository takes the oldest. Docker uploads a few layers in
//! parallel, so the pairing can be wrong when sessions start out of HEAD order; the size is
//! always right (the sum of the session's PATCH bytes plus the closing PUT's). A `PUT
//! blobs/<digest>` (not a docker pattern, but cheap to accept) is a pushed layer with a
//! known digest. A `HEAD blobs/<digest>` answered 200 is a layer the push reuses.
//!
//! Invariants: memory is bounded by the uploads open and the HEAD misses of the last
//! [`STALE_MS`] of trace time; older state is swept every [`SWEEP_EVERY`] records.

use std::collections::{HashMap, VecDeque};

use crate::trace::{Method, Record, SessionId, Sym, Target};

/// Upload state idle this long (trace time) is dropped.
pub const STALE_MS: i64 = 60 * 60 * 1000;
/// Records between sweeps of stale state.
pub const SWEEP_EVERY: u64 = 1 << 16;

/// A layer whose upload completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushedLayer {
    pub repo: Sym,
    pub client: Option<Sym>,
    /// The digest, when a HEAD miss named it (see the module documentation).
    pub digest: Option<Sym>,
    /// The upload session (stands in for the digest when none is known).
    pub session: Option<SessionId>,
    pub size: u64,
    pub time_ms: i64,
}

/// What a record says about pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushEvent {
    /// A layer upload completed.
    Uploaded(PushedLayer),
    /// A push found this layer already stored (`HEAD` 200) and reuses it.
    Reused {
        repo: Sym,
        client: Option<Sym>,
        digest: Sym,
        time_ms: i64,
    },
}

#[derive(Debug, Clone)]
struct Session {
    digest: Option<Sym>,
    bytes: u64,
    last_ms: i64,
}

/// Digests a (client, repository) found missing, oldest first, with the time of the HEAD.
type MissingDigests = HashMap<(Option<Sym>, Sym), VecDeque<(Sym, i64)>>;

/// Follows upload sessions through a trace; see the module documentation.
#[derive(Debug, Default)]
pub struct UploadTracker {
    missing: MissingDigests,
    sessions: HashMap<SessionId, Session>,
    seen: u64,
    latest_ms: i64,
}

impl UploadTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Uploads open (for tests).
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Feeds one (valid, not failed) record; returns what it completes.
    pub fn observe(&mut self, r: &Record) -> Option<PushEvent> {
        self.seen += 1;
        self.latest_ms = self.latest_ms.max(r.time_ms);
        if self.seen.is_multiple_of(SWEEP_EVERY) {
            self.sweep();
        }
        match (r.method, r.target) {
            (Method::Head, Target::Blob { repo, digest }) => {
                if r.status == 404 {
                    self.missing
                        .entry((r.client, repo))
                        .or_default()
                        .push_back((digest, r.time_ms));
                    None
                } else if (200..300).contains(&r.status) || r.status == 0 {
                    Some(PushEvent::Reused {
                        repo,
                        client: r.client,
                        digest,
                        time_ms: r.time_ms,
                    })
                } else {
                    None
                }
            }
            (Method::Put, Target::Blob { repo, digest }) => {
                Some(PushEvent::Uploaded(PushedLayer {
                    repo,
                    client: r.client,
                    digest: Some(digest),
                    session: None,
                    size: r.size,
                    time_ms: r.time_ms,
                }))
            }
            (Method::Patch | Method::Put, Target::Upload { repo, session }) => {
                self.upload_record(r, repo, session)
            }
            (Method::Delete, Target::Upload { session, .. }) => {
                self.sessions.remove(&session);
                None
            }
            _ => None,
        }
    }

    /// A PATCH or the closing PUT of an upload session: the PUT completes the layer (named
    /// by the HEAD 404 its client made last in the repository, when there was one).
    fn upload_record(&mut self, r: &Record, repo: Sym, session: SessionId) -> Option<PushEvent> {
        let s = match self.sessions.get_mut(&session) {
            Some(s) => s,
            None => {
                let digest = self
                    .missing
                    .get_mut(&(r.client, repo))
                    .and_then(|q| q.pop_front())
                    .map(|(d, _)| d);
                self.sessions.entry(session).or_insert(Session {
                    digest,
                    bytes: 0,
                    last_ms: r.time_ms,
                })
            }
        };
        s.bytes = s.bytes.saturating_add(r.size);
        s.last_ms = r.time_ms;
        if r.method == Method::Patch {
            return None;
        }
        let s = self.sessions.remove(&session)?;
        Some(PushEvent::Uploaded(PushedLayer {
            repo,
            client: r.client,
            digest: s.digest,
            session: Some(session),
            size: s.bytes,
            time_ms: r.time_ms,
        }))
    }

    fn sweep(&mut self) {
        let cutoff = self.latest_ms.saturating_sub(STALE_MS);
        self.sessions.retain(|_, s| s.last_ms >= cutoff);
        self.missing.retain(|_, q| {
            while q.front().is_some_and(|(_, t)| *t < cutoff) {
                q.pop_front();
            }
            !q.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::parse_uri;
    use crate::trace::Interner;

    fn record(
        names: &mut Interner,
        t: i64,
        client: &str,
        method: Method,
        uri: &str,
        status: u16,
        size: u64,
    ) -> Record {
        Record {
            file: 0,
            number: t as u64,
            time_ms: t,
            method,
            target: parse_uri(uri, names),
            client: Some(names.intern(client)),
            size,
            status,
            duration_us: 0,
            id: None,
            size_unknown: false,
        }
    }

    #[test]
    fn uploads_become_layers_with_inferred_digests() {
        let mut n = Interner::default();
        let mut up = UploadTracker::new();
        let script = [
            (0, "c", Method::Head, "v2/u/r/blobs/d1", 404, 0),
            (1, "c", Method::Head, "v2/u/r/blobs/d2", 404, 0),
            (2, "c", Method::Post, "v2/u/r/blobs/uploads/", 202, 0),
            (3, "c", Method::Patch, "v2/u/r/blobs/uploads/s1", 202, 100),
            (4, "c", Method::Patch, "v2/u/r/blobs/uploads/s1", 202, 50),
            (5, "c", Method::Put, "v2/u/r/blobs/uploads/s1", 201, 0),
            // A monolithic upload: the bytes come with the closing PUT.
            (6, "c", Method::Put, "v2/u/r/blobs/uploads/s2", 201, 70),
            // Another client's upload with no HEAD before it: no digest.
            (7, "x", Method::Put, "v2/u/r/blobs/uploads/s3", 201, 9),
            (8, "c", Method::Head, "v2/u/r/blobs/base", 200, 0),
            (9, "c", Method::Patch, "v2/u/r/blobs/uploads/s4", 202, 5),
            (10, "c", Method::Delete, "v2/u/r/blobs/uploads/s4", 204, 0),
        ];
        let mut events = Vec::new();
        for (t, client, method, uri, status, size) in script {
            let r = record(&mut n, t, client, method, uri, status, size);
            events.extend(up.observe(&r));
        }
        let digest = |e: &PushEvent| match e {
            PushEvent::Uploaded(l) => (l.digest.map(|d| n.resolve(d).into_owned()), l.size),
            PushEvent::Reused { digest, .. } => (Some(n.resolve(*digest).into_owned()), 0),
        };
        let got: Vec<_> = events.iter().map(digest).collect();
        assert_eq!(
            got,
            vec![
                (Some("d1".to_owned()), 150),
                (Some("d2".to_owned()), 70),
                (None, 9),
                (Some("base".to_owned()), 0),
            ]
        );
        assert!(matches!(events[3], PushEvent::Reused { .. }));
        assert_eq!(up.open_sessions(), 0);
    }
}
