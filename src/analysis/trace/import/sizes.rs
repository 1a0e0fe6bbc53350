//! The sizes of imported uploads and mounts. Access logs give a response's bytes, not a
//! request's, so an upload's size comes from what else the log holds, in this order:
//! - the registry, asked (`--sizes-from`: a HEAD of each uploaded or mounted digest, made
//!   before the import by the command layer, given here as [`LearnedSizes`]);
//! - the request bodies, where the log has them (nginx `$content_length`): each PATCH and
//!   the closing PUT carry their own bytes;
//! - distribution's upload state: the `_state` query its clients send back holds the
//!   offset the upload had reached, so the closing PUT of a chunked upload tells its size.
//!
//! As in the IBM traces, an upload's bytes are the `http.response.written` of its PATCHes
//! and closing PUT; a mount's record carries its blob's size. An upload whose size stays
//! unknown is marked `creb.size_unknown` on its closing PUT and counted.

use std::collections::HashMap;

use base64::Engine as _;
use serde::Serialize;

use super::line::LogRequest;
use crate::fast_hash::{fnv1a, FastHashMap};
use crate::trace::record::mount_query;
use crate::trace::write::RawRecord;

/// Upload sessions followed at once, at most: older ones are forgotten (their closing PUT,
/// if it ever comes, then has only what its own line says).
const OPEN_KEPT: u64 = 65_536;

/// Blob sizes the registry the logs came from gave, by digest (`sha256:…`).
#[derive(Debug, Clone, Default)]
pub struct LearnedSizes(pub HashMap<String, u64>);

/// How the uploads and mounts of an import were sized.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SizeReport {
    /// Uploads completed (a closing PUT answered 2xx).
    pub uploads: u64,
    /// Of them, sized by the registry (`--sizes-from`), by the request bodies the log
    /// gives, by distribution's upload state; and not at all (`creb.size_unknown`).
    pub from_registry: u64,
    pub from_bodies: u64,
    pub from_upload_state: u64,
    pub unknown: u64,
    /// Mounts the registry made (201), and those whose blob size is not known.
    pub mounts: u64,
    pub mounts_unsized: u64,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    /// Bytes the session's PATCHes carried, as far as the log says.
    attributed: u64,
    /// A PATCH whose body size the log does not give.
    unknown: bool,
    seq: u64,
}

/// Follows upload sessions through an import, sizing their records.
#[derive(Debug, Default)]
pub struct UploadSizes {
    open: FastHashMap<u64, Open>,
    seq: u64,
    pub report: SizeReport,
}

/// What the path of an upload URI names: the repository, the session id (empty for a
/// POST that starts one) and the query.
fn upload_parts(uri: &str) -> Option<(&str, &str, &str)> {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let i = path.rfind("/blobs/uploads")?;
    let repo = path[..i].trim_start_matches('/').trim_start_matches("v2/");
    let session = path[i + "/blobs/uploads".len()..].trim_matches('/');
    Some((repo, session, query))
}

/// A query parameter's raw value.
fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The digest of a closing PUT (`?digest=sha256%3A…`), decoded.
pub fn put_digest(query: &str) -> Option<String> {
    param(query, "digest").map(|d| d.replace("%3A", ":").replace("%3a", ":"))
}

/// The offset distribution's `_state` token records: base64url of an HMAC and the JSON
/// `{"Name":…,"UUID":…,"Offset":N,…}` (the HMAC keeps clients from changing it, not from
/// reading it).
pub fn state_offset(query: &str) -> Option<u64> {
    let token = param(query, "_state")?;
    let token = token
        .replace("%3D", "=")
        .replace("%3d", "=")
        .replace("%2B", "+")
        .replace("%2F", "/");
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine.decode(token.trim_end_matches('=')).ok()?;
    let key = b"\"Offset\":";
    let at = bytes.windows(key.len()).position(|w| w == key)? + key.len();
    let digits: String = bytes[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| b as char)
        .collect();
    digits.parse().ok()
}

/// The uploaded and mounted blobs of a log line, as `--sizes-from` asks for them:
/// (repository, digest) of a closing PUT or a mount, names as logged.
pub fn sized_object(r: &LogRequest) -> Option<(String, String)> {
    let (repo, session, query) = upload_parts(&r.uri)?;
    if !(200..300).contains(&r.status) {
        return None;
    }
    match (r.method.as_str(), session.is_empty()) {
        ("PUT", false) => Some((repo.to_owned(), put_digest(query)?)),
        ("POST", true) if r.status == 201 => {
            mount_query(&format!("?{query}")).map(|(digest, _)| (repo.to_owned(), digest))
        }
        _ => None,
    }
}

impl UploadSizes {
    /// Sizes `record` (made from `r`) if it is part of an upload or a mount.
    #[allow(clippy::too_many_lines)]
    pub fn apply(&mut self, r: &LogRequest, record: &mut RawRecord, learned: &LearnedSizes) {
        let Some((repo, session, query)) = upload_parts(&r.uri) else {
            return;
        };
        let key = fnv1a(format!("{repo}/{session}").as_bytes());
        self.seq += 1;
        let ok = (200..300).contains(&r.status);
        match (r.method.as_str(), session.is_empty()) {
            ("POST", true) if r.status == 201 => {
                let Some((digest, _)) = mount_query(&format!("?{query}")) else {
                    return;
                };
                self.report.mounts += 1;
                match learned.0.get(&digest) {
                    Some(&size) => record.written = size,
                    None => {
                        record.written = 0;
                        record.size_unknown = true;
                        self.report.mounts_unsized += 1;
                    }
                }
            }
            ("PATCH", false) => {
                record.written = r.body.unwrap_or(0);
                let seq = self.seq;
                let open = self.open.entry(key).or_insert(Open {
                    attributed: 0,
                    unknown: false,
                    seq,
                });
                open.attributed += r.body.unwrap_or(0);
                open.unknown |= r.body.is_none();
                open.seq = seq;
                if self.open.len() as u64 > OPEN_KEPT {
                    let oldest = self.seq.saturating_sub(OPEN_KEPT);
                    self.open.retain(|_, o| o.seq >= oldest);
                }
            }
            ("PUT", false) => {
                let open = self.open.remove(&key);
                let attributed = open.map_or(0, |o| o.attributed);
                // What the upload held before this PUT: the state's offset, or the PATCHes'
                // bodies if the log gave every one (none at all: a monolithic PUT).
                let before = state_offset(query)
                    .or((!open.is_some_and(|o| o.unknown)).then_some(attributed));
                let learned = put_digest(query).and_then(|d| learned.0.get(&d).copied());
                let (total, source) = match (learned, before, r.body) {
                    (Some(size), _, _) => (Some(size), Source::Registry),
                    (None, Some(b), Some(body)) => (Some(b + body), Source::Bodies),
                    // A PUT closing a chunked upload sends no bytes of its own.
                    (None, Some(b), None) if b > 0 => (
                        Some(b),
                        if state_offset(query).is_some() {
                            Source::State
                        } else {
                            Source::Bodies
                        },
                    ),
                    _ => (None, Source::Unknown),
                };
                match total {
                    Some(t) => record.written = t.saturating_sub(attributed),
                    None => {
                        record.written = r.body.unwrap_or(0);
                        record.size_unknown = true;
                    }
                }
                if ok {
                    self.report.uploads += 1;
                    *match source {
                        Source::Registry => &mut self.report.from_registry,
                        Source::Bodies => &mut self.report.from_bodies,
                        Source::State => &mut self.report.from_upload_state,
                        Source::Unknown => &mut self.report.unknown,
                    } += 1;
                }
            }
            ("DELETE", false) => {
                self.open.remove(&key);
            }
            _ => {}
        }
    }
}

enum Source {
    Registry,
    Bodies,
    State,
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str, status: u16, body: Option<u64>) -> LogRequest {
        LogRequest {
            end_ms: 0.0,
            duration_s: 0.0,
            method: method.into(),
            uri: uri.into(),
            remote: String::new(),
            useragent: String::new(),
            status,
            written: 0,
            body,
            host: String::new(),
            id: None,
            second_resolution: false,
        }
    }

    fn record() -> RawRecord {
        RawRecord {
            host: String::new(),
            duration: 0.0,
            method: "PUT",
            remoteaddr: String::new(),
            uri: String::new(),
            useragent: "".into(),
            status: 201,
            written: 0,
            id: String::new(),
            timestamp: String::new(),
            size_unknown: false,
            time_ms: 0,
        }
    }

    /// A `_state` token as docker-registry 2.8 wrote it for crane's upload of 600979 bytes.
    const STATE: &str = "OvAybsHdGe9zK6vDFFFYxgzRDNQkpms2YRqC6BOi3SJ7Ik5hbWUiOiJhcHAvb25lIiwiVVVJRCI6IjExYzRlMGNkLWVhZGEtNDFjNi1iM2Y3LTIyNjA5NmY3NzNjNCIsIk9mZnNldCI6NjAwOTc5LCJTdGFydGVkQXQiOiIyMDI2LTExLTI2VDAxOjQzOjM5WiJ9";

    #[test]
    fn the_upload_state_tells_the_offset() {
        assert_eq!(
            state_offset(&format!("_state={STATE}&digest=sha256%3Aab")),
            Some(600_979)
        );
        assert_eq!(state_offset("digest=sha256%3Aab"), None);
        assert_eq!(state_offset("_state=!!!"), None);
        assert_eq!(
            put_digest("_state=x&digest=sha256%3Aab").as_deref(),
            Some("sha256:ab")
        );
    }

    #[test]
    fn each_source_sizes_the_closing_put_and_unknown_is_marked() {
        let learned = LearnedSizes(HashMap::from([("sha256:aa".to_owned(), 5000)]));
        let mut s = UploadSizes::default();
        let mut patch = record();
        // Bodies in the log: the PATCH carries its bytes, the empty PUT none.
        s.apply(
            &request("PATCH", "/v2/a/b/blobs/uploads/u1?_state=x", 202, Some(600)),
            &mut patch,
            &learned,
        );
        assert_eq!(patch.written, 600);
        let mut put = record();
        s.apply(
            &request(
                "PUT",
                "/v2/a/b/blobs/uploads/u1?digest=sha256%3Abb",
                201,
                Some(0),
            ),
            &mut put,
            &learned,
        );
        assert_eq!((put.written, put.size_unknown), (0, false));
        // The registry knows better than a partial log: the PUT gets the rest.
        s.apply(
            &request("PATCH", "/v2/a/b/blobs/uploads/u2", 202, Some(1000)),
            &mut record(),
            &learned,
        );
        let mut put = record();
        s.apply(
            &request(
                "PUT",
                "/v2/a/b/blobs/uploads/u2?digest=sha256%3Aaa",
                201,
                None,
            ),
            &mut put,
            &learned,
        );
        assert_eq!(put.written, 4000);
        // distribution's log: no bodies, the state's offset.
        s.apply(
            &request("PATCH", "/v2/a/b/blobs/uploads/u3", 202, None),
            &mut record(),
            &learned,
        );
        let mut put = record();
        let uri = format!("/v2/a/b/blobs/uploads/u3?_state={STATE}&digest=sha256%3Acc");
        s.apply(&request("PUT", &uri, 201, None), &mut put, &learned);
        assert_eq!((put.written, put.size_unknown), (600_979, false));
        // A monolithic PUT whose body the log does not give.
        let mut put = record();
        s.apply(
            &request(
                "PUT",
                "/v2/a/b/blobs/uploads/u4?digest=sha256%3Add",
                201,
                None,
            ),
            &mut put,
            &learned,
        );
        assert_eq!((put.written, put.size_unknown), (0, true));
        // Mounts: sized when learned.
        let mut mount = record();
        s.apply(
            &request(
                "POST",
                "/v2/c/d/blobs/uploads/?mount=sha256%3Aaa&from=a%2Fb",
                201,
                None,
            ),
            &mut mount,
            &learned,
        );
        assert_eq!(mount.written, 5000);
        let mut mount = record();
        s.apply(
            &request(
                "POST",
                "/v2/c/d/blobs/uploads/?mount=sha256%3Aee&from=a%2Fb",
                201,
                None,
            ),
            &mut mount,
            &learned,
        );
        assert!(mount.size_unknown);
        assert_eq!(
            s.report,
            SizeReport {
                uploads: 4,
                from_registry: 1,
                from_bodies: 1,
                from_upload_state: 1,
                unknown: 1,
                mounts: 2,
                mounts_unsized: 1,
            }
        );
        assert!(s.open.is_empty(), "closed sessions are forgotten");
    }
}
