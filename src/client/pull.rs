//! Reads: the version check, blob and manifest GETs and HEADs. A GET reads its body to the
//! end and (unless verification is off) checks it against the digest before it counts.

use std::sync::OnceLock;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};

use super::{content_length, status_error, ClientError, Exchange, FetchedManifest, HeadInfo};
use super::{Given, Meter, OpCtx, RegistryClient, Verify, MANIFEST_LIMIT};
use crate::auth::AccessScope;
use crate::content::{ContentCheck, ContentSpec};
use crate::digest::{Digest, Hasher, Sha256Sum};
use crate::metrics::{ErrorKind, Event, Op};
use crate::net::headers::{text, Headers};
use crate::net::transport::{HttpRequest, HttpResponse};
use crate::oci::headers::truncate;
use crate::oci::manifest::{ParsedManifest, ACCEPT as MANIFEST_ACCEPT};
use crate::oci::reference::{Reference, Repository};

/// Where a tapped read hands each chunk of a body ([`RegistryClient::blob_get_tapped`]).
pub type Tap = tokio::sync::mpsc::Sender<bytes::Bytes>;

impl RegistryClient {
    /// `GET /v2/`: the API version check every client starts with.
    pub async fn ping(&self, ctx: OpCtx) -> Result<(), ClientError> {
        let mut m = self.meter(Op::Ping, ctx);
        let r = async {
            let request = HttpRequest::new(Method::GET, self.url(&["/v2/"]));
            let ex = self
                .exchange(request, &AccessScope::registry(), false)
                .await?;
            m.exchanged(&ex);
            if ex.response.status != StatusCode::OK {
                return Err(status_error(ex).await);
            }
            m.bytes_received = ex.response.drain().await?;
            Ok(())
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// Reads a body to its end, checking it when verification is on: compared with
    /// `content` (the bytes creb-rs generated for it) when given and `compare` is on, else
    /// hashed. With an `expected` size, a body that runs past it is cut off at its first
    /// extra byte (`size_mismatch`): no server can stream more than it promised. With a
    /// `tap`, each chunk is also handed on once checked.
    async fn read_verified(
        &self,
        mut response: HttpResponse,
        digest: &Digest,
        expected: Option<u64>,
        content: Option<&ContentSpec>,
        m: &mut Meter<'_>,
        mut tap: Option<&Tap>,
    ) -> Result<u64, ClientError> {
        let options = &self.inner.options;
        let mut compare = content
            .filter(|_| options.verify == Verify::Compare)
            .map(|c| ContentCheck::new(*c));
        let verify = options.verify.checks() && compare.is_none() && digest.verifiable();
        let mut hasher = verify.then(Hasher::new);
        let mut n = 0u64;
        let limit = expected.unwrap_or(u64::MAX);
        while let Some(chunk) = response.chunk().await? {
            n += chunk.len() as u64;
            if n > limit {
                m.bytes_received += n;
                return Err(ClientError::SizeMismatch {
                    expected: limit,
                    actual: n,
                });
            }
            if let Some(h) = hasher.as_mut() {
                h.update(&chunk);
            }
            if let Some(c) = compare.as_mut() {
                if let Err(at) = c.check(&chunk) {
                    m.bytes_received += n;
                    return Err(ClientError::DigestMismatch {
                        expected: digest.to_string(),
                        actual: format!("other bytes (the body differs from byte {at} on)"),
                    });
                }
            }
            // Waits while the reader of the tap is behind: its back-pressure on the read.
            // A reader that stopped (it failed) gets nothing more; the body is still read.
            if let Some(t) = tap {
                if t.send(chunk).await.is_err() {
                    tap = None;
                }
            }
        }
        m.bytes_received += n;
        if let Some(expected) = expected.filter(|&e| e != n) {
            return Err(ClientError::SizeMismatch {
                expected,
                actual: n,
            });
        }
        if let Some(c) = compare.filter(|c| !c.complete()) {
            return Err(ClientError::SizeMismatch {
                expected: c.checked() + 1,
                actual: n,
            });
        }
        if let Some(h) = hasher {
            let actual = h.finish_sum();
            if !actual.matches(digest.as_str()) {
                return Err(ClientError::DigestMismatch {
                    expected: digest.to_string(),
                    actual: actual.digest().to_string(),
                });
            }
        }
        Ok(n)
    }

    /// `GET /v2/<repo>/blobs/<digest>`: follows redirects, reads the whole body and (unless
    /// verification is off) checks it against the digest. Returns the bytes read.
    pub async fn blob_get(
        &self,
        repo: &Repository,
        digest: &Digest,
        expected_size: Option<u64>,
        ctx: OpCtx,
    ) -> Result<u64, ClientError> {
        self.get_blob(repo, digest, expected_size, None, None, ctx)
            .await
    }

    /// [`Self::blob_get`] whose body also goes to `tap`, chunk by chunk as each is read and
    /// checked (a layer's unpacker: `--unpack`). A full `tap` holds the read back; the
    /// verdict on the body is still the read's own.
    pub async fn blob_get_tapped(
        &self,
        repo: &Repository,
        digest: &Digest,
        expected_size: Option<u64>,
        tap: &Tap,
        ctx: OpCtx,
    ) -> Result<u64, ClientError> {
        self.get_blob(repo, digest, expected_size, None, Some(tap), ctx)
            .await
    }

    /// [`Self::blob_get`] of a blob whose content creb-rs generated (`content`, whose digest
    /// is `digest`): the body is compared with that content as it arrives (`--verify
    /// compare`), or hashed (`sha256`).
    pub async fn blob_get_generated(
        &self,
        repo: &Repository,
        digest: &Digest,
        content: &ContentSpec,
        ctx: OpCtx,
    ) -> Result<u64, ClientError> {
        self.get_blob(repo, digest, Some(content.size()), Some(content), None, ctx)
            .await
    }

    async fn get_blob(
        &self,
        repo: &Repository,
        digest: &Digest,
        expected_size: Option<u64>,
        content: Option<&ContentSpec>,
        tap: Option<&Tap>,
        ctx: OpCtx,
    ) -> Result<u64, ClientError> {
        let mut m = self.meter(Op::BlobGet, ctx);
        m.size_hint = expected_size.unwrap_or(0);
        let r = async {
            let request = HttpRequest::new(Method::GET, self.blob_url(repo, digest));
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            let storage = ex.storage_sent.map(|sent| (sent, ex.headers_at));
            if ex.response.status != StatusCode::OK {
                return Err(status_error(ex).await);
            }
            let received = m.bytes_received;
            let read = self
                .read_verified(ex.response, digest, expected_size, content, &mut m, tap)
                .await;
            if let Some((sent, headers_at)) = storage {
                let outcome = match &read {
                    Ok(_) => crate::metrics::Outcome::Ok,
                    Err(e) => crate::metrics::Outcome::Error(e.kind()),
                };
                let bytes = m.bytes_received - received;
                self.storage_hop(sent, headers_at, outcome, bytes).await;
            }
            read
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// `HEAD /v2/<repo>/blobs/<digest>`: `Some` if it exists, `None` on 404 (the normal
    /// answer of an existence check, recorded as a success).
    pub async fn blob_head(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<Option<HeadInfo>, ClientError> {
        let mut m = self.meter(Op::BlobHead, ctx);
        let r = async {
            let request = HttpRequest::new(Method::HEAD, self.blob_url(repo, digest));
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            self.head_result(ex).await
        }
        .await;
        self.finish(&mut m, r).await
    }

    async fn head_result(&self, ex: Exchange) -> Result<Option<HeadInfo>, ClientError> {
        match ex.response.status {
            StatusCode::OK => {
                let info = HeadInfo {
                    size: content_length(&ex.response),
                    digest: ex
                        .response
                        .header("docker-content-digest")
                        .and_then(|d| d.trim().parse().ok()),
                    media_type: ex.response.header(CONTENT_TYPE.as_str()).map(str::to_owned),
                };
                let _ = ex.response.drain().await;
                Ok(Some(info))
            }
            StatusCode::NOT_FOUND => {
                self.inner.recorder.event(Event::HeadMiss).await;
                let _ = ex.response.drain().await;
                Ok(None)
            }
            _ => Err(status_error(ex).await),
        }
    }

    fn manifest_request(
        &self,
        method: Method,
        repo: &Repository,
        reference: &Reference,
    ) -> HttpRequest {
        let mut request = HttpRequest::new(method, self.manifest_url(repo, reference));
        request
            .headers
            .insert(ACCEPT, HeaderValue::from_static(MANIFEST_ACCEPT));
        request
    }

    /// `GET /v2/<repo>/manifests/<reference>` with every manifest type in `Accept`, parsed.
    pub async fn manifest_get(
        &self,
        repo: &Repository,
        reference: &Reference,
        ctx: OpCtx,
    ) -> Result<FetchedManifest, ClientError> {
        let mut m = self.meter(Op::ManifestGet, ctx);
        let r = async {
            let got = self
                .receive_manifest(repo, reference, None, &mut m, None)
                .await?;
            let parsed = got.parse()?;
            Ok(FetchedManifest {
                bytes: got.bytes,
                content_type: got.headers.value(CONTENT_TYPE),
                sha256: got.sha256,
                parsed,
            })
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// A manifest GET that only checks what came back (a replay's read, a replica's look),
    /// returning the body. With `expect` (a manifest whose digest is known in advance: one
    /// its prewarm or push sent) any other answer is a `digest_mismatch`, whatever the
    /// registry says its digest is, and a body with that digest is the manifest creb-rs
    /// built, so it is not parsed again; without, the body must parse as a manifest.
    pub async fn manifest_read(
        &self,
        repo: &Repository,
        reference: &Reference,
        expect: Option<&Sha256Sum>,
        ctx: OpCtx,
    ) -> Result<Bytes, ClientError> {
        self.manifest_read_given(repo, reference, expect, ctx, None)
            .await
    }

    /// [`Self::manifest_read`] whose request stress mode's event loop sent and had
    /// answered already (`given`), as this client would have sent it.
    pub(crate) async fn manifest_read_given(
        &self,
        repo: &Repository,
        reference: &Reference,
        expect: Option<&Sha256Sum>,
        ctx: OpCtx,
        given: Option<Box<Given>>,
    ) -> Result<Bytes, ClientError> {
        let mut m = self.meter(Op::ManifestGet, ctx);
        let r = async {
            let got = self
                .receive_manifest(repo, reference, expect, &mut m, given)
                .await?;
            if expect.is_none() {
                got.parse()?;
            }
            Ok(got.bytes)
        }
        .await;
        self.finish(&mut m, r).await
    }

    /// A manifest GET's answer, read and checked up to its parse: status, type, size, the
    /// digest asked for (`expect`, or the one a by-digest reference names).
    async fn receive_manifest(
        &self,
        repo: &Repository,
        reference: &Reference,
        expect: Option<&Sha256Sum>,
        m: &mut Meter<'_>,
        given: Option<Box<Given>>,
    ) -> Result<ReceivedManifest, ClientError> {
        let request = self.manifest_request(Method::GET, repo, reference);
        let scope = self.read_scope(repo);
        let mut ex = self.exchange_given(request, &scope, true, given).await?;
        m.exchanged(&ex);
        if ex.response.status != StatusCode::OK {
            return Err(status_error(ex).await);
        }
        // Kept as received, the body read apart from them.
        let headers = std::mem::take(&mut ex.response.headers);
        check_manifest_type(headers.get(CONTENT_TYPE))?;
        let bytes = ex.response.bytes_limited(MANIFEST_LIMIT).await?;
        m.bytes_received = bytes.len() as u64;
        let sha256 = Sha256Sum::of(&bytes);
        if let Some(expected) = expect.filter(|e| **e != sha256) {
            return Err(ClientError::DigestMismatch {
                expected: expected.digest().to_string(),
                actual: sha256.digest().to_string(),
            });
        }
        if self.inner.options.verify.checks() {
            let returned = headers.get_str("docker-content-digest");
            check_manifest_digest(reference, returned, &sha256)?;
        }
        Ok(ReceivedManifest {
            bytes,
            headers,
            sha256,
        })
    }

    /// `HEAD /v2/<repo>/manifests/<reference>`: `None` on 404.
    pub async fn manifest_head(
        &self,
        repo: &Repository,
        reference: &Reference,
        ctx: OpCtx,
    ) -> Result<Option<HeadInfo>, ClientError> {
        let mut m = self.meter(Op::ManifestHead, ctx);
        let r = async {
            let request = self.manifest_request(Method::HEAD, repo, reference);
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            self.head_result(ex).await
        }
        .await;
        self.finish(&mut m, r).await
    }
}

/// A manifest GET's body as [`RegistryClient::receive_manifest`] checked it.
struct ReceivedManifest {
    bytes: Bytes,
    /// The answer's headers.
    headers: Headers,
    sha256: Sha256Sum,
}

impl ReceivedManifest {
    /// The body as a manifest of its `Content-Type`; one that does not parse is
    /// `not_a_manifest`.
    fn parse(&self) -> Result<ParsedManifest, ClientError> {
        let media_type = self.headers.get_str(CONTENT_TYPE);
        ParsedManifest::parse(&self.bytes, media_type).map_err(|e| ClientError::Unexpected {
            kind: ErrorKind::NotAManifest,
            message: format!("the answer is not a manifest: {e}"),
        })
    }
}

/// A manifest answer's `Content-Type` must be a manifest type the request accepted (or
/// absent, or plain JSON, which old registries send): an HTML page from a login portal or
/// a proxy is `not_a_manifest`, never a success.
pub(crate) fn check_manifest_type(content_type: Option<&[u8]>) -> Result<(), ClientError> {
    let Some(value) = content_type else {
        return Ok(());
    };
    // Compared as bytes: anything not among the types (text or not) is refused.
    let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
    let media_type = value[..end].trim_ascii();
    let accepted = accepted_types()
        .iter()
        .any(|t| t.as_bytes().eq_ignore_ascii_case(media_type));
    if accepted {
        return Ok(());
    }
    Err(ClientError::Unexpected {
        kind: ErrorKind::NotAManifest,
        message: format!(
            "the answer is {}, not a manifest type it was asked for",
            truncate(text(value).unwrap_or(""))
        ),
    })
}

/// The media types a manifest answer may have: those `Accept` names, and plain JSON.
fn accepted_types() -> &'static [&'static str] {
    static TYPES: OnceLock<Vec<&'static str>> = OnceLock::new();
    TYPES.get_or_init(|| {
        MANIFEST_ACCEPT
            .split(',')
            .map(|t| t.split(';').next().unwrap_or("").trim())
            .chain(["application/json"])
            .collect()
    })
}

/// The manifest received must be the one asked for: by digest, its bytes hash to it
/// (`digest_mismatch`); by tag, to the `Docker-Content-Digest` the registry sent with it
/// (`digest_header_mismatch`). A digest of another algorithm cannot be checked here.
pub(crate) fn check_manifest_digest(
    reference: &Reference,
    returned: Option<&str>,
    sha256: &Sha256Sum,
) -> Result<(), ClientError> {
    let (expected, by_digest) = match reference {
        Reference::Digest(d) => (Some(d.as_str()), true),
        Reference::Tag(_) => (returned, false),
    };
    let Some(expected) = expected.map(str::trim) else {
        return Ok(());
    };
    // Compared as text first; parsed only to tell a mismatch from a digest that cannot be
    // checked (another algorithm, or not a digest at all).
    if sha256.matches(expected) || !expected.parse::<Digest>().is_ok_and(|d| d.verifiable()) {
        return Ok(());
    }
    let actual = sha256.digest().to_string();
    if by_digest {
        return Err(ClientError::DigestMismatch {
            expected: expected.to_owned(),
            actual,
        });
    }
    Err(ClientError::Unexpected {
        kind: ErrorKind::DigestHeaderMismatch,
        message: format!(
            "Docker-Content-Digest {} is not the digest of the manifest received ({actual})",
            truncate(expected)
        ),
    })
}

#[cfg(test)]
mod tests {
    //! Bodies a real registry does not send on demand (short, or lying about their digest),
    //! on the scripted transport.

    use super::super::test_support::{client, repo};
    use super::*;
    use crate::metrics::ErrorKind;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    #[tokio::test]
    async fn a_short_body_is_a_size_mismatch() {
        let t = ScriptedTransport::new(|_| ScriptedResponse::status(200).body("abc"));
        let (c, _h) = client(t);
        let err = c
            .blob_get(
                &repo(),
                &Digest::sha256_of(b"abc"),
                Some(4),
                OpCtx::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SizeMismatch);
    }

    /// A registry that lies about a manifest's digest is a real registry's bug, not a case
    /// it produces on demand.
    #[tokio::test]
    async fn a_manifest_is_checked_against_the_digest_it_was_asked_or_answered_with() {
        let body = r#"{"schemaVersion":2,"layers":[]}"#;
        let own = Digest::sha256_of(body.as_bytes());
        let other = Digest::sha256_of(b"something else");
        let tag: Reference = Reference::Tag("t".parse().unwrap());
        let cases: [(Reference, Option<String>, bool); 7] = [
            (tag.clone(), Some(own.to_string()), true),
            (tag.clone(), Some(format!(" {own} ")), true),
            (tag.clone(), Some(other.to_string()), false),
            // Not checkable: another algorithm, or not a digest at all.
            (tag.clone(), Some("sha512:abcd".into()), true),
            (tag.clone(), Some("garbage".into()), true),
            (
                Reference::Digest(own.clone()),
                Some(other.to_string()),
                true,
            ),
            (Reference::Digest(other.clone()), None, false),
        ];
        for (reference, header, ok) in cases {
            let answer = header.clone();
            let t = ScriptedTransport::new(move |_| {
                let r = ScriptedResponse::status(200)
                    .header("content-type", "application/vnd.oci.image.manifest.v1+json");
                match &answer {
                    Some(h) => r.header("docker-content-digest", h),
                    None => r,
                }
                .body(body)
            });
            let (c, _h) = client(t);
            let result = c.manifest_get(&repo(), &reference, OpCtx::default()).await;
            match result {
                Ok(m) => {
                    assert!(ok, "{reference} {header:?} was accepted");
                    assert_eq!(m.digest(), own);
                    assert_eq!(
                        m.media_type(),
                        Some("application/vnd.oci.image.manifest.v1+json")
                    );
                }
                Err(e) => {
                    assert!(!ok, "{reference} {header:?}: {e}");
                    let kind = match reference {
                        Reference::Digest(_) => ErrorKind::DigestMismatch,
                        Reference::Tag(_) => ErrorKind::DigestHeaderMismatch,
                    };
                    assert_eq!(e.kind(), kind);
                }
            }
        }
    }

    /// A read whose digest is known checks the bytes against it and does not parse them
    /// again (the replay's manifest GETs); without one, the body must be a manifest. A body
    /// that is valid JSON but no manifest is something a real registry does not serve on
    /// demand.
    #[tokio::test]
    async fn a_manifest_read_is_parsed_only_when_its_digest_is_not_known() {
        let body = r#"{"not":"a manifest"}"#;
        let t = ScriptedTransport::new(move |_| {
            ScriptedResponse::status(200)
                .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                .body(body)
        });
        let (c, _h) = client(t);
        let repo = repo();
        let tag: Reference = Reference::Tag("t".parse().unwrap());
        let known = Sha256Sum::of(body.as_bytes());
        let read = c.manifest_read(&repo, &tag, Some(&known), OpCtx::default());
        assert_eq!(read.await.unwrap(), body.as_bytes());
        let other = Sha256Sum::of(b"another manifest");
        let read = c.manifest_read(&repo, &tag, Some(&other), OpCtx::default());
        assert_eq!(read.await.unwrap_err().kind(), ErrorKind::DigestMismatch);
        let read = c.manifest_read(&repo, &tag, None, OpCtx::default());
        assert_eq!(read.await.unwrap_err().kind(), ErrorKind::NotAManifest);
        let get = c.manifest_get(&repo, &tag, OpCtx::default());
        assert_eq!(get.await.unwrap_err().kind(), ErrorKind::NotAManifest);
    }
}
