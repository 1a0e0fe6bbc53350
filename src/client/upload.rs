//! Writes: blob upload sessions (monolithic, chunked, single POST) with every request
//! recorded on its own and the session as a whole, cross-repository mounts, and manifest
//! PUTs. Chunks are always sent in order, from the offset the registry confirms.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Method, StatusCode};
use url::Url;

use super::{check_returned_digest, octet_stream, status_error, BlobSource, ClientError};
use super::{Meter, OpCtx, RegistryClient, Step};
use crate::auth::AccessScope;
use crate::content::{ContentSpec, SendHash};
use crate::digest::{Digest, Sha256Sum};
use crate::metrics::{Event, Op, Outcome};
use crate::net::transport::{HttpRequest, RequestBody};
use crate::oci::headers::{content_range, parse_upload_range, resolve_location, with_query_param};
use crate::oci::reference::{Reference, Repository};

/// Times a session may go back to the registry's offset before it gives up.
const MAX_UPLOAD_RESUMES: u32 = 3;

pub use crate::oci::UploadMode;

/// What an upload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadReport {
    pub bytes_sent: u64,
    pub requests: u32,
    /// The registry ignored a single-request upload and the blob was sent again.
    pub single_post_fallback: bool,
    /// PATCH requests sent.
    pub patches: u32,
    /// The SHA-256 of a generated layer's uncompressed tar (its `diff_id`), learned while
    /// it was sent.
    pub diff: Option<[u8; 32]>,
}

/// The result of a mount attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountOutcome {
    /// The blob now exists in the target repository.
    Mounted,
    /// The registry opened a normal upload session instead.
    Session(Url),
    /// The mount was refused (401/403 or similar); upload from scratch.
    Refused,
}

impl RegistryClient {
    /// `PUT /v2/<repo>/manifests/<reference>` with `Content-Type` = the manifest's type.
    /// Returns the manifest digest.
    pub async fn manifest_put(
        &self,
        repo: &Repository,
        reference: &Reference,
        manifest: Bytes,
        media_type: &str,
        ctx: OpCtx,
    ) -> Result<Digest, ClientError> {
        let mut m = self.meter(Op::ManifestPut, ctx);
        m.size_hint = manifest.len() as u64;
        let r = async {
            let digest = Digest::sha256_of(&manifest);
            let mut request = HttpRequest::new(Method::PUT, self.manifest_url(repo, reference));
            let content_type = HeaderValue::from_str(media_type)
                .map_err(|_| ClientError::Protocol(format!("bad media type '{media_type}'")))?;
            request.headers.insert(CONTENT_TYPE, content_type);
            let len = manifest.len() as u64;
            request.body = RequestBody::Bytes(manifest);
            let ex = self
                .exchange(request, &AccessScope::push(repo), false)
                .await?;
            m.exchanged(&ex);
            m.bytes_sent = len;
            if ex.response.status != StatusCode::CREATED {
                return Err(status_error(ex).await);
            }
            check_returned_digest(&ex.response.headers, &digest)?;
            let _ = ex.response.drain().await;
            Ok(digest)
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// One request of an upload session, recorded as its own `op` sample and counted into
    /// the session's meter. The response body is drained.
    async fn step(
        &self,
        op: Op,
        request: HttpRequest,
        scope: &AccessScope,
        expected: &[u16],
        session: &mut Meter<'_>,
    ) -> Result<Step, ClientError> {
        let mut m = self.meter(op, OpCtx::default());
        let body_len = request.body.len();
        m.size_hint = body_len;
        let r = async {
            let mut ex = self.exchange(request, scope, false).await?;
            m.exchanged(&ex);
            session.exchanged(&ex);
            m.bytes_sent = body_len;
            session.bytes_sent += body_len;
            if !expected.contains(&ex.response.status.as_u16()) {
                return Err(status_error(ex).await);
            }
            let headers = std::mem::take(&mut ex.response.headers);
            let status = ex.response.status;
            m.bytes_received = ex.response.drain().await?;
            Ok(Step { status, headers })
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// POST to open an upload session: the session URL and the registry's minimum chunk.
    async fn start_session(
        &self,
        repo: &Repository,
        scope: &AccessScope,
        session: &mut Meter<'_>,
    ) -> Result<(Url, Option<u64>), ClientError> {
        let url = self.uploads_url(repo);
        let request = HttpRequest::new(Method::POST, url.clone());
        let step = self
            .step(Op::UploadPost, request, scope, &[202], session)
            .await?;
        let location = step.location(&url)?.ok_or_else(|| {
            ClientError::Protocol("upload POST answered 202 without Location".into())
        })?;
        let min_chunk = step
            .header("oci-chunk-min-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        Ok((location, min_chunk))
    }

    /// `GET <location>`: how many bytes the registry holds for a session.
    async fn upload_status(
        &self,
        location: &Url,
        scope: &AccessScope,
        session: &mut Meter<'_>,
    ) -> Result<(Url, u64), ClientError> {
        let request = HttpRequest::new(Method::GET, location.clone());
        let step = self
            .step(Op::UploadStatus, request, scope, &[204, 200], session)
            .await?;
        let next = step.location(location)?.unwrap_or_else(|| location.clone());
        let offset = match step.header("range") {
            // "0-0" on a queried session reads as empty (see `parse_upload_range`).
            Some(r) => match parse_upload_range(r).map_err(ClientError::Protocol)? {
                0 => 0,
                end => end + 1,
            },
            None => 0,
        };
        Ok((next, offset))
    }

    /// PATCHes `source` in chunks, in order, taking the Location of each response and
    /// resuming from the registry's offset when it holds fewer bytes than were sent.
    async fn patch_chunks(
        &self,
        scope: &AccessScope,
        mut location: Url,
        source: &BlobSource,
        chunk_size: u64,
        session: &mut Meter<'_>,
        report: &mut UploadReport,
    ) -> Result<Url, ClientError> {
        let size = source.size();
        let mut offset = 0u64;
        let mut resumes = 0u32;
        while offset < size {
            let len = chunk_size.min(size - offset);
            let mut request = HttpRequest::new(Method::PATCH, location.clone());
            request.headers.insert(CONTENT_TYPE, octet_stream());
            if let Ok(v) = HeaderValue::from_str(&content_range(offset, len)) {
                request.headers.insert(http::header::CONTENT_RANGE, v);
            }
            request.body = source.body(offset, len);
            let result = self
                .step(Op::UploadPatch, request, scope, &[202, 201, 204], session)
                .await;
            match result {
                Ok(step) => {
                    report.patches += 1;
                    if let Some(next) = step.location(&location)? {
                        location = next;
                    }
                    let sent_end = offset + len;
                    let confirmed = match step.header("range") {
                        Some(r) => parse_upload_range(r).map_err(ClientError::Protocol)? + 1,
                        None => sent_end,
                    };
                    if confirmed > sent_end {
                        return Err(ClientError::Protocol(format!(
                            "registry claims {confirmed} bytes after {sent_end} were sent"
                        )));
                    }
                    if confirmed < sent_end {
                        resumes += 1;
                        if resumes > MAX_UPLOAD_RESUMES {
                            return Err(ClientError::Protocol(format!(
                                "registry keeps losing upload bytes (holds {confirmed} of {sent_end})"
                            )));
                        }
                        self.inner.recorder.event(Event::UploadResume).await;
                    }
                    offset = confirmed;
                }
                Err(ClientError::Status { status: 416, .. }) if resumes < MAX_UPLOAD_RESUMES => {
                    // The registry disagrees about the offset: ask it, then continue there.
                    resumes += 1;
                    self.inner.recorder.event(Event::UploadResume).await;
                    let (next, held) = self.upload_status(&location, scope, session).await?;
                    location = next;
                    offset = held.min(size);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(location)
    }

    /// The closing PUT `<location>?digest=` with the rest of the body (possibly empty).
    async fn put_final(
        &self,
        location: &Url,
        digest: &Digest,
        body: RequestBody,
        scope: &AccessScope,
        session: &mut Meter<'_>,
    ) -> Result<(), ClientError> {
        let url = with_query_param(location, "digest", digest.as_str());
        let mut request = HttpRequest::new(Method::PUT, url);
        request.headers.insert(CONTENT_TYPE, octet_stream());
        request.body = body;
        let step = self
            .step(Op::UploadPut, request, scope, &[201], session)
            .await?;
        check_returned_digest(&step.headers, digest)
    }

    /// Uploads one blob as a whole session (`blob_upload`), each request also recorded as
    /// `upload_post` / `upload_patch` / `upload_put`. With `session`, continues an upload
    /// the registry already opened (a mount answered 202) instead of POSTing.
    pub async fn upload_blob(
        &self,
        repo: &Repository,
        digest: &Digest,
        source: &BlobSource,
        mode: UploadMode,
        session: Option<Url>,
        ctx: OpCtx,
    ) -> Result<UploadReport, ClientError> {
        let mut m = self.meter(Op::BlobUpload, ctx);
        m.size_hint = source.size();
        let scope = AccessScope::push(repo);
        let mut report = UploadReport::default();
        let size = source.size();
        let r = async {
            match (mode, session) {
                (UploadMode::SinglePost, None) => {
                    let url = with_query_param(&self.uploads_url(repo), "digest", digest.as_str());
                    let mut request = HttpRequest::new(Method::POST, url.clone());
                    request.headers.insert(CONTENT_TYPE, octet_stream());
                    request.body = source.body(0, size);
                    let step = self
                        .step(Op::UploadPost, request, &scope, &[201, 202], &mut m)
                        .await?;
                    if step.status == StatusCode::CREATED {
                        return check_returned_digest(&step.headers, digest);
                    }
                    // 202: the registry ignored the body and opened a session; send again.
                    report.single_post_fallback = true;
                    self.inner.recorder.event(Event::SinglePostFallback).await;
                    let location = step.location(&url)?.ok_or_else(|| {
                        ClientError::Protocol("upload POST answered 202 without Location".into())
                    })?;
                    self.put_final(&location, digest, source.body(0, size), &scope, &mut m)
                        .await
                }
                (UploadMode::Monolithic | UploadMode::SinglePost, session) => {
                    let location = match session {
                        Some(l) => l,
                        None => self.start_session(repo, &scope, &mut m).await?.0,
                    };
                    self.put_final(&location, digest, source.body(0, size), &scope, &mut m)
                        .await
                }
                (UploadMode::Chunked { chunk_size }, session) => {
                    let (location, min_chunk) = match session {
                        Some(l) => (l, None),
                        None => self.start_session(repo, &scope, &mut m).await?,
                    };
                    let chunk = chunk_size.max(min_chunk.unwrap_or(1)).max(1);
                    let location = self
                        .patch_chunks(&scope, location, source, chunk, &mut m, &mut report)
                        .await?;
                    self.put_final(&location, digest, RequestBody::Empty, &scope, &mut m)
                        .await
                }
            }
        }
        .await;
        report.bytes_sent = m.bytes_sent;
        report.requests = m.requests.total();
        self.finish(&mut m, r).await.map(|()| report)
    }

    /// Uploads generated content whose digest is not known yet, computing it from the bytes
    /// as they are sent: POST, PATCHes of `chunk_size` bytes (`None`: one with the whole
    /// content), each hashed as it is generated ([`SendHash`]), then the closing PUT with
    /// the digest (`blob_upload`, each request recorded too). No byte is generated twice
    /// unless the registry asks for it again.
    pub async fn upload_hashing(
        &self,
        repo: &Repository,
        spec: ContentSpec,
        chunk_size: Option<u64>,
        ctx: OpCtx,
    ) -> Result<(Sha256Sum, UploadReport), ClientError> {
        let mut m = self.meter(Op::BlobUpload, ctx);
        m.size_hint = spec.size();
        let scope = AccessScope::push(repo);
        let mut report = UploadReport::default();
        let tap = SendHash::new(spec);
        let source = BlobSource::Hashing(Arc::clone(&tap));
        let r = async {
            let (location, _) = self.start_session(repo, &scope, &mut m).await?;
            let chunk = chunk_size.unwrap_or(spec.size()).max(1);
            let location = self
                .patch_chunks(&scope, location, &source, chunk, &mut m, &mut report)
                .await?;
            let sha = Sha256Sum(tap.finish());
            report.diff = Some(tap.finish_diff());
            self.put_final(&location, &sha.digest(), RequestBody::Empty, &scope, &mut m)
                .await?;
            Ok(sha)
        }
        .await;
        report.bytes_sent = m.bytes_sent;
        report.requests = m.requests.total();
        self.finish(&mut m, r).await.map(|digest| (digest, report))
    }

    /// `POST /v2/<repo>/blobs/uploads/?mount=<digest>&from=<from>`.
    ///
    /// A 201 mounted the blob; a 202 opened a plain upload session (continue it with
    /// [`Self::upload_blob`]); a refusal (401/403/404...) is recorded as a failed
    /// `blob_mount` and reported as [`MountOutcome::Refused`] so the caller uploads instead.
    pub async fn mount_blob(
        &self,
        repo: &Repository,
        digest: &Digest,
        from: &Repository,
        ctx: OpCtx,
    ) -> Result<MountOutcome, ClientError> {
        let mut m = self.meter(Op::BlobMount, ctx);
        let scope = AccessScope::mount(repo, from);
        let r = async {
            let mut url = self.uploads_url(repo);
            url.query_pairs_mut()
                .append_pair("mount", digest.as_str())
                .append_pair("from", from.as_str());
            let request = HttpRequest::new(Method::POST, url.clone());
            let ex = self.exchange(request, &scope, false).await?;
            m.exchanged(&ex);
            match ex.response.status.as_u16() {
                201 => {
                    check_returned_digest(&ex.response.headers, digest)?;
                    let _ = ex.response.drain().await;
                    Ok(MountOutcome::Mounted)
                }
                202 => {
                    let location = ex
                        .response
                        .header(LOCATION.as_str())
                        .map(|l| resolve_location(&url, l).map_err(ClientError::Protocol))
                        .transpose()?
                        .ok_or_else(|| {
                            ClientError::Protocol("mount answered 202 without Location".into())
                        })?;
                    let _ = ex.response.drain().await;
                    Ok(MountOutcome::Session(location))
                }
                _ => Err(status_error(ex).await),
            }
        }
        .await;
        match r {
            Ok(outcome) => {
                if !matches!(outcome, MountOutcome::Mounted) {
                    self.inner.recorder.event(Event::MountFallback).await;
                }
                self.record(&mut m, Outcome::Ok).await;
                Ok(outcome)
            }
            Err(e @ ClientError::Status { .. }) => {
                self.record(&mut m, Outcome::Error(e.kind())).await;
                self.inner.recorder.event(Event::MountFallback).await;
                Ok(MountOutcome::Refused)
            }
            Err(e) => {
                self.record(&mut m, Outcome::Error(e.kind())).await;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Protocol cases a real registry cannot be made to produce on demand (a 416, a Range
    //! that lost bytes), on the scripted transport.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::super::test_support::{client, repo};
    use super::*;
    use crate::content::ContentSpec;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    /// A registry that loses the second chunk once (416), then reports the offset it holds.
    #[tokio::test]
    async fn chunked_upload_resumes_from_the_registry_offset_after_416() {
        let refused = Arc::new(AtomicU32::new(0));
        let r2 = Arc::clone(&refused);
        let t = ScriptedTransport::new(move |r| {
            let range = r
                .headers
                .get("content-range")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            match r.method.as_str() {
                "POST" => {
                    ScriptedResponse::status(202).header("location", "/v2/a/b/blobs/uploads/u?s=0")
                }
                "PATCH" if range == "4-7" && r2.fetch_add(1, Ordering::SeqCst) == 0 => {
                    ScriptedResponse::status(416)
                }
                "PATCH" => {
                    let end: u64 = range.split('-').nth(1).unwrap().parse().unwrap();
                    ScriptedResponse::status(202)
                        .header(
                            "location",
                            &format!("/v2/a/b/blobs/uploads/u?s={}", end + 1),
                        )
                        .header("range", &format!("0-{end}"))
                }
                "GET" => ScriptedResponse::status(204)
                    .header("location", "/v2/a/b/blobs/uploads/u?s=4")
                    .header("range", "0-3"),
                "PUT" => ScriptedResponse::status(201),
                _ => ScriptedResponse::status(500),
            }
        });
        let (c, handle) = client(t.clone());
        let spec = ContentSpec::new(1, b"x", 10);
        let report = c
            .upload_blob(
                &repo(),
                &spec.digest(),
                &BlobSource::Content(spec),
                UploadMode::Chunked { chunk_size: 4 },
                None,
                OpCtx::default(),
            )
            .await
            .unwrap();
        assert_eq!(report.patches, 3);
        let ranges: Vec<String> = t
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH")
            .map(|r| r.headers["content-range"].to_str().unwrap().to_owned())
            .collect();
        assert_eq!(ranges, ["0-3", "4-7", "4-7", "8-9"], "never out of order");
        let put = t
            .requests()
            .into_iter()
            .find(|r| r.method == "PUT")
            .unwrap();
        assert!(
            put.url.as_str().contains("s=10"),
            "latest Location used: {}",
            put.url
        );
        assert!(
            put.url.as_str().contains("&digest=sha256%3A"),
            "{}",
            put.url
        );
        drop(c);
        let agg = handle.finish().await;
        assert_eq!(agg.event(Event::UploadResume), 1);
        assert_eq!(agg.table().op_total(Op::UploadPatch).unwrap().errors, 1);
        assert_eq!(agg.table().op_total(Op::BlobUpload).unwrap().ok, 1);
    }

    #[tokio::test]
    async fn chunked_upload_resends_what_the_registry_did_not_keep() {
        let t = ScriptedTransport::new(|r| match r.method.as_str() {
            "POST" => ScriptedResponse::status(202)
                .header("location", "http://registry.test/v2/a/b/blobs/uploads/u")
                .header("oci-chunk-min-length", "5"),
            // The registry only keeps the first 3 bytes of the first chunk.
            "PATCH" if r.headers.get("content-range").unwrap() == "0-4" => {
                ScriptedResponse::status(202)
                    .header("location", "/v2/a/b/blobs/uploads/u")
                    .header("range", "bytes=0-2")
            }
            "PATCH" => {
                let range = r
                    .headers
                    .get("content-range")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                ScriptedResponse::status(202)
                    .header("location", "/v2/a/b/blobs/uploads/u")
                    .header("range", &format!("0-{}", range.split('-').nth(1).unwrap()))
            }
            _ => ScriptedResponse::status(201),
        });
        let (c, _handle) = client(t.clone());
        let spec = ContentSpec::new(1, b"y", 9);
        c.upload_blob(
            &repo(),
            &spec.digest(),
            &BlobSource::Content(spec),
            UploadMode::Chunked { chunk_size: 2 },
            None,
            OpCtx::default(),
        )
        .await
        .unwrap();
        let ranges: Vec<String> = t
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH")
            .map(|r| r.headers["content-range"].to_str().unwrap().to_owned())
            .collect();
        // Chunk size raised to the registry's minimum of 5; resumed at byte 3.
        assert_eq!(ranges, ["0-4", "3-7", "8-8"]);
    }
}
