//! The OCI Distribution client: every registry operation creb-rs performs, each timed and
//! recorded as it happens.
//!
//! Where a blob GET is timed: [`RegistryClient::blob_get`] takes `sent` when the first
//! request goes to the transport (after credentials are attached), `first_byte` when the
//! final hop's headers arrive, and `end` after the last body byte was read and hashed.
//! Redirect hops are recorded as their own `redirect` samples and are part of the
//! operation's time. A 401 answered by a successful retry restarts `sent` (the token fetch
//! is recorded as `token_fetch`, never inside registry latency).
//!
//! Every public operation records exactly one sample for itself (plus one per sub-request
//! of an upload session) whether it succeeds or fails, then returns the typed result for
//! the caller's control flow.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio::time::Instant;
use url::Url;

use super::digest::{Digest, Hasher, Sha256Sum};
use super::error::{parse_error_body, ClientError, RegistryErrorEntry};
use super::headers::{
    content_range, parse_link_next, parse_retry_after, parse_upload_range, resolve_location,
    truncate, with_query_param,
};
use super::manifest::ACCEPT as MANIFEST_ACCEPT;
use super::reference::{Reference, Repository};
use super::retry::RetryPolicy;
use super::transport::{HttpRequest, HttpResponse, RequestBody, Transport};
use crate::auth::challenge::challenges_of;
use crate::auth::{AccessScope, Anonymous, Authenticator, Ready};
use crate::content::ContentSpec;
use crate::metrics::{ErrorKind, Event, Op, Outcome, Recorder, Sample, SizeClass, Timing};

/// Manifests larger than this are refused (distribution's own limit is 4 MiB).
pub const MANIFEST_LIMIT: usize = 4 * 1024 * 1024;
const ERROR_BODY_LIMIT: usize = 64 * 1024;
const MAX_UPLOAD_RESUMES: u32 = 3;

/// Behaviour switches of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Hash every downloaded blob and manifest and compare with its digest.
    pub verify: bool,
    /// Redirect hops followed per request.
    pub max_redirects: u8,
    /// Ask for `pull,push` even for reads: a push HEADs before it uploads, and one token
    /// per repository beats two.
    pub push_scopes: bool,
    /// Retries (off unless asked for).
    pub retry: RetryPolicy,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            verify: true,
            max_redirects: 5,
            push_scopes: false,
            retry: RetryPolicy::default(),
        }
    }
}

/// Per-operation context from the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpCtx {
    /// When the plan wanted this operation to start (delay mode); `None` in closed loops.
    pub intended: Option<Instant>,
}

/// Where a blob's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobSource {
    /// Generated content, produced while it is sent.
    Content(ContentSpec),
    /// Small bytes held in memory (configs, manifests).
    Bytes(Bytes),
}

impl BlobSource {
    pub fn size(&self) -> u64 {
        match self {
            BlobSource::Content(spec) => spec.size(),
            BlobSource::Bytes(b) => b.len() as u64,
        }
    }

    fn body(&self, start: u64, len: u64) -> RequestBody {
        if len == 0 {
            return RequestBody::Empty;
        }
        match self {
            BlobSource::Content(spec) => RequestBody::Content {
                spec: *spec,
                range: start..start + len,
            },
            BlobSource::Bytes(b) => {
                RequestBody::Bytes(b.slice(start as usize..(start + len) as usize))
            }
        }
    }
}

/// How a blob is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum UploadMode {
    /// POST, then PUT with the whole body.
    Monolithic,
    /// POST, PATCH per chunk, then an empty PUT.
    Chunked { chunk_size: u64 },
    /// POST with `?digest=` and the body; falls back to a PUT when the registry answers 202.
    SinglePost,
}

/// What an upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadReport {
    pub bytes_sent: u64,
    pub requests: u32,
    /// The registry ignored a single-request upload and the blob was sent again.
    pub single_post_fallback: bool,
    /// PATCH requests sent.
    pub patches: u32,
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

/// A fetched manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedManifest {
    pub bytes: Bytes,
    content_type: Option<HeaderValue>,
    sha256: Sha256Sum,
}

impl FetchedManifest {
    /// The response's `Content-Type`.
    pub fn media_type(&self) -> Option<&str> {
        self.content_type.as_ref().and_then(|v| v.to_str().ok())
    }

    /// The digest of the bytes received.
    pub fn digest(&self) -> Digest {
        self.sha256.digest()
    }
}

/// Facts from a HEAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadInfo {
    pub size: Option<u64>,
    pub digest: Option<Digest>,
    pub media_type: Option<String>,
}

/// A response after credentials and redirects.
struct Exchange {
    response: HttpResponse,
    /// When the last request that was not an auth failure was sent.
    sent: Instant,
    headers_at: Instant,
    requests: u32,
}

/// Measures one operation and records it once.
struct Meter {
    op: Op,
    timing: Timing,
    bytes_sent: u64,
    bytes_received: u64,
    requests: u32,
    size_hint: u64,
    sent_set: bool,
}

impl Meter {
    fn new(op: Op, ctx: OpCtx) -> Self {
        Meter {
            op,
            timing: Timing::start(ctx.intended),
            bytes_sent: 0,
            bytes_received: 0,
            requests: 0,
            size_hint: 0,
            sent_set: false,
        }
    }

    fn exchanged(&mut self, ex: &Exchange) {
        if !self.sent_set {
            self.timing.sent = ex.sent;
            self.sent_set = true;
        }
        self.timing.first_byte = Some(ex.headers_at);
        self.requests += ex.requests;
    }

    fn sample(&self, outcome: Outcome) -> Sample {
        let mut timing = self.timing;
        timing.end = Instant::now();
        if !self.sent_set {
            // Failed before anything was sent (credentials): time from the start.
            timing.first_byte = None;
        }
        let size = self.size_hint.max(self.bytes_sent).max(self.bytes_received);
        Sample {
            op: self.op,
            outcome,
            size_class: SizeClass::of(size),
            timing,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            http_requests: self.requests,
        }
    }
}

struct Inner {
    transport: Arc<dyn Transport>,
    base: Url,
    recorder: Recorder,
    auth: Arc<dyn Authenticator>,
    options: ClientOptions,
}

/// A client for one registry. Cheap to clone.
#[derive(Clone)]
pub struct RegistryClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.inner.base.as_str())
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Normalises a registry URL: keeps scheme, host and port; drops any path, so `/v2/` is
/// always appended to the root.
pub fn registry_base(url: &Url) -> Result<Url, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "registry URL '{url}' must start with http:// or https://"
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("registry URL '{url}' has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "registry URL must not contain credentials; use --username and --password-stdin".into(),
        );
    }
    let mut base = url.clone();
    base.set_path("/");
    base.set_query(None);
    base.set_fragment(None);
    Ok(base)
}

impl RegistryClient {
    pub fn new(
        transport: Arc<dyn Transport>,
        base: Url,
        recorder: Recorder,
        options: ClientOptions,
    ) -> Self {
        Self::with_auth(transport, base, recorder, options, Arc::new(Anonymous))
    }

    pub fn with_auth(
        transport: Arc<dyn Transport>,
        base: Url,
        recorder: Recorder,
        options: ClientOptions,
        auth: Arc<dyn Authenticator>,
    ) -> Self {
        RegistryClient {
            inner: Arc::new(Inner {
                transport,
                base,
                recorder,
                auth,
                options,
            }),
        }
    }

    pub fn base(&self) -> &Url {
        &self.inner.base
    }

    /// The same registry, transport and credentials, recording into `recorder`.
    pub fn with_recorder(&self, recorder: Recorder) -> RegistryClient {
        RegistryClient {
            inner: Arc::new(Inner {
                transport: Arc::clone(&self.inner.transport),
                base: self.inner.base.clone(),
                recorder,
                auth: Arc::clone(&self.inner.auth),
                options: self.inner.options.clone(),
            }),
        }
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    pub fn recorder(&self) -> &Recorder {
        &self.inner.recorder
    }

    /// The scope of a read: `pull`, or `pull,push` for a pushing client.
    fn read_scope(&self, repo: &Repository) -> AccessScope {
        if self.inner.options.push_scopes {
            AccessScope::push(repo)
        } else {
            AccessScope::pull(repo)
        }
    }

    /// The registry's URL for the path made of `parts` (a request's URL is made for every
    /// operation): the path is built in one string and resolved against the base, which
    /// copies the base's scheme and host instead of parsing them again.
    fn url(&self, parts: &[&str]) -> Url {
        let mut path = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            path.push_str(part);
        }
        // An absolute path always resolves against an http(s) base; set_path is the same
        // URL by another road, should a name ever fail to.
        self.inner.base.join(&path).unwrap_or_else(|_| {
            let mut url = self.inner.base.clone();
            url.set_path(&path);
            url
        })
    }

    fn blob_url(&self, repo: &Repository, digest: &Digest) -> Url {
        self.url(&["/v2/", repo.as_str(), "/blobs/", digest.as_str()])
    }

    fn manifest_url(&self, repo: &Repository, reference: &Reference) -> Url {
        self.url(&["/v2/", repo.as_str(), "/manifests/", reference.as_str()])
    }

    fn uploads_url(&self, repo: &Repository) -> Url {
        self.url(&["/v2/", repo.as_str(), "/blobs/uploads/"])
    }

    async fn record(&self, meter: &Meter, outcome: Outcome) {
        self.inner.recorder.record(meter.sample(outcome)).await;
    }

    async fn finish<T>(
        &self,
        meter: &Meter,
        result: Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::Error(e.kind()),
        };
        self.record(meter, outcome).await;
        result
    }

    /// Sends a request with credentials, one retry after a 401, and (for GET/HEAD)
    /// redirects followed by hand. Each attempt is rebuilt from `request` and the current
    /// URL, so credentials only ever come from the authenticator and only for the
    /// registry's own origin.
    async fn exchange(
        &self,
        request: HttpRequest,
        scope: &AccessScope,
        follow_redirects: bool,
    ) -> Result<Exchange, ClientError> {
        let follow = follow_redirects && matches!(request.method, Method::GET | Method::HEAD);
        let retryable = self.inner.options.retry.enabled() && repeatable(&request);
        let mut retries = 0u32;
        // `None`: the request's own URL (not copied unless a redirect replaces it).
        let mut redirected: Option<Url> = None;
        let mut requests = 0u32;
        let mut auth_retried = false;
        let mut storage_retried = false;
        let mut redirects = 0u8;
        let mut first_sent: Option<Instant> = None;
        loop {
            let url = redirected.as_ref().unwrap_or(&request.url);
            let on_origin = same_origin(url, &self.inner.base);
            // Room for what is added below and by the transport (credentials, length, user
            // agent, host), so no header insert reallocates.
            let mut headers = HeaderMap::with_capacity(request.headers.len() + 4);
            for (name, value) in &request.headers {
                if name != AUTHORIZATION {
                    headers.append(name, value.clone());
                }
            }
            let mut attempt = HttpRequest {
                method: request.method.clone(),
                url: url.clone(),
                headers,
                body: request.body.clone(),
            };
            if on_origin {
                match self.inner.auth.ready(scope) {
                    Ready::Nothing => {}
                    Ready::Header(h) => {
                        attempt.headers.insert(AUTHORIZATION, h);
                    }
                    Ready::Later => self.inner.auth.authorize(&mut attempt, scope).await?,
                }
            }
            let sent = Instant::now();
            let sent_for_op = *first_sent.get_or_insert(sent);
            let result = self.inner.transport.send(attempt).await;
            let headers_at = Instant::now();
            requests += 1;
            if retryable && retries < self.inner.options.retry.max_retries {
                let (kind, retry_after) = match &result {
                    Err(e) => (Some(e.kind), None),
                    Ok(r)
                        if r.status.is_server_error()
                            || r.status == StatusCode::TOO_MANY_REQUESTS =>
                    {
                        (
                            Some(ErrorKind::Http(r.status.as_u16())),
                            r.header("retry-after").and_then(parse_retry_after),
                        )
                    }
                    Ok(_) => (None, None),
                };
                if kind.is_some_and(|k| self.inner.options.retry.covers(k)) {
                    retries += 1;
                    self.inner.recorder.event(Event::Retry).await;
                    if let Ok(response) = result {
                        let _ = response.drain().await;
                    }
                    // Jitter from the clock's sub-second digits: enough to spread retries.
                    let jitter = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0.5, |d| f64::from(d.subsec_nanos() % 1_000_000) / 1e6);
                    let wait = self.inner.options.retry.wait(retries, retry_after, jitter);
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            let response = result?;
            let status = response.status;

            if status == StatusCode::UNAUTHORIZED && on_origin && !auth_retried {
                auth_retried = true;
                if self.inner.auth.challenged(&response.headers, scope).await? {
                    self.inner.recorder.event(Event::AuthRetry).await;
                    let _ = response.drain().await;
                    // The refused round trip and the token fetch are not registry latency.
                    first_sent = None;
                    continue;
                }
            }

            if redirects > 0 && !on_origin && status == StatusCode::FORBIDDEN && !storage_retried {
                // Likely an expired presigned URL: ask the registry again, once.
                storage_retried = true;
                self.inner.recorder.event(Event::StorageRetry).await;
                let _ = response.drain().await;
                redirected = None;
                redirects = 0;
                continue;
            }

            if follow && is_redirect(status) && redirects < self.inner.options.max_redirects {
                let location = response
                    .header(LOCATION.as_str())
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        ClientError::Protocol(format!("{status} redirect without Location"))
                    })?;
                let target = resolve_location(url, &location).map_err(ClientError::Protocol)?;
                let drained = response.drain().await.unwrap_or(0);
                let hop = Sample {
                    op: Op::Redirect,
                    outcome: Outcome::Ok,
                    size_class: SizeClass::Under1MiB,
                    timing: Timing {
                        intended: None,
                        sent,
                        first_byte: Some(headers_at),
                        end: Instant::now(),
                    },
                    bytes_sent: 0,
                    bytes_received: drained,
                    http_requests: 1,
                };
                self.inner.recorder.record(hop).await;
                if !same_origin(&target, &self.inner.base) {
                    self.inner.recorder.event(Event::RedirectCrossOrigin).await;
                }
                redirects += 1;
                redirected = Some(target);
                continue;
            }

            return Ok(Exchange {
                response,
                sent: sent_for_op,
                headers_at,
                requests,
            });
        }
    }
}

/// Whether a request can be sent again after a failure without changing its meaning: not a
/// PATCH, and not the PUT that closes an upload (the registry's state is unknown after a
/// failure; uploads recover through their own offset logic).
fn repeatable(request: &HttpRequest) -> bool {
    match request.method {
        Method::GET | Method::HEAD | Method::DELETE => true,
        Method::POST => request.body.is_empty(),
        Method::PUT => request.url.path().contains("/manifests/"),
        _ => false,
    }
}

fn content_length(response: &HttpResponse) -> Option<u64> {
    response
        .header("content-length")
        .and_then(|v| v.trim().parse().ok())
}

fn octet_stream() -> HeaderValue {
    HeaderValue::from_static("application/octet-stream")
}

/// Turns a non-success response into a typed error, reading (a bounded amount of) its body.
async fn status_error(ex: Exchange) -> ClientError {
    let status = ex.response.status.as_u16();
    let retry_after = ex
        .response
        .header("retry-after")
        .and_then(parse_retry_after);
    // A refused token says why in its challenge (`error="insufficient_scope"`): keep it.
    let mut errors: Vec<RegistryErrorEntry> = if matches!(status, 401 | 403) {
        challenges_of(&ex.response.headers)
            .into_iter()
            .filter_map(|c| {
                let code = c.param("error")?.to_owned();
                let message = c
                    .param("error_description")
                    .or_else(|| c.param("scope"))
                    .unwrap_or_default()
                    .to_owned();
                Some(RegistryErrorEntry { code, message })
            })
            .collect()
    } else {
        Vec::new()
    };
    let body = ex
        .response
        .bytes_limited(ERROR_BODY_LIMIT)
        .await
        .unwrap_or_default();
    errors.extend(parse_error_body(&body));
    ClientError::Status {
        status,
        errors,
        retry_after,
    }
}

/// Status and headers of an upload step whose body was drained.
struct Step {
    status: StatusCode,
    headers: HeaderMap,
}

impl Step {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn location(&self, request_url: &Url) -> Result<Option<Url>, ClientError> {
        self.header(LOCATION.as_str())
            .map(|l| resolve_location(request_url, l).map_err(ClientError::Protocol))
            .transpose()
    }
}

fn check_returned_digest(headers: &HeaderMap, expected: &Digest) -> Result<(), ClientError> {
    if let Some(returned) = headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
    {
        if returned.trim() != expected.as_str() {
            return Err(ClientError::DigestMismatch {
                expected: expected.to_string(),
                actual: truncate(returned),
            });
        }
    }
    Ok(())
}

impl RegistryClient {
    /// `GET /v2/`: the API version check every client starts with.
    pub async fn ping(&self, ctx: OpCtx) -> Result<(), ClientError> {
        let mut m = Meter::new(Op::Ping, ctx);
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
        self.finish(&m, r).await
    }

    /// Reads a body to its end, hashing it when verification is on.
    async fn read_verified(
        &self,
        mut response: HttpResponse,
        digest: &Digest,
        m: &mut Meter,
    ) -> Result<u64, ClientError> {
        let verify = self.inner.options.verify && digest.verifiable();
        let mut hasher = verify.then(Hasher::new);
        let mut n = 0u64;
        while let Some(chunk) = response.chunk().await? {
            n += chunk.len() as u64;
            if let Some(h) = hasher.as_mut() {
                h.update(&chunk);
            }
        }
        m.bytes_received += n;
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
        let mut m = Meter::new(Op::BlobGet, ctx);
        m.size_hint = expected_size.unwrap_or(0);
        let r = async {
            let request = HttpRequest::new(Method::GET, self.blob_url(repo, digest));
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            if ex.response.status != StatusCode::OK {
                return Err(status_error(ex).await);
            }
            let n = self.read_verified(ex.response, digest, &mut m).await?;
            match expected_size {
                Some(expected) if expected != n => Err(ClientError::SizeMismatch {
                    expected,
                    actual: n,
                }),
                _ => Ok(n),
            }
        }
        .await;
        self.finish(&m, r).await
    }

    /// `HEAD /v2/<repo>/blobs/<digest>`: `Some` if it exists, `None` on 404 (the normal
    /// answer of an existence check, recorded as a success).
    pub async fn blob_head(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<Option<HeadInfo>, ClientError> {
        let mut m = Meter::new(Op::BlobHead, ctx);
        let r = async {
            let request = HttpRequest::new(Method::HEAD, self.blob_url(repo, digest));
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            self.head_result(ex).await
        }
        .await;
        self.finish(&m, r).await
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

    /// `GET /v2/<repo>/manifests/<reference>` with every manifest type in `Accept`.
    pub async fn manifest_get(
        &self,
        repo: &Repository,
        reference: &Reference,
        ctx: OpCtx,
    ) -> Result<FetchedManifest, ClientError> {
        let mut m = Meter::new(Op::ManifestGet, ctx);
        let r = async {
            let request = self.manifest_request(Method::GET, repo, reference);
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            if ex.response.status != StatusCode::OK {
                return Err(status_error(ex).await);
            }
            // Kept as received: a header value shares the response's buffer.
            let content_type = ex.response.headers.get(CONTENT_TYPE).cloned();
            let returned = ex.response.headers.get("docker-content-digest").cloned();
            let bytes = ex.response.bytes_limited(MANIFEST_LIMIT).await?;
            m.bytes_received = bytes.len() as u64;
            let sha256 = Sha256Sum::of(&bytes);
            if self.inner.options.verify {
                let expected = match reference {
                    Reference::Digest(d) => Some(d.as_str()),
                    Reference::Tag(_) => returned.as_ref().and_then(|v| v.to_str().ok()),
                };
                if let Some(expected) = expected.map(str::trim) {
                    // Compared as text first; parsed only to tell a mismatch from a digest
                    // that cannot be checked (another algorithm, or not a digest at all).
                    if !sha256.matches(expected)
                        && expected.parse::<Digest>().is_ok_and(|d| d.verifiable())
                    {
                        return Err(ClientError::DigestMismatch {
                            expected: expected.to_owned(),
                            actual: sha256.digest().to_string(),
                        });
                    }
                }
            }
            Ok(FetchedManifest {
                bytes,
                content_type,
                sha256,
            })
        }
        .await;
        self.finish(&m, r).await
    }

    /// `HEAD /v2/<repo>/manifests/<reference>`: `None` on 404.
    pub async fn manifest_head(
        &self,
        repo: &Repository,
        reference: &Reference,
        ctx: OpCtx,
    ) -> Result<Option<HeadInfo>, ClientError> {
        let mut m = Meter::new(Op::ManifestHead, ctx);
        let r = async {
            let request = self.manifest_request(Method::HEAD, repo, reference);
            let ex = self.exchange(request, &self.read_scope(repo), true).await?;
            m.exchanged(&ex);
            self.head_result(ex).await
        }
        .await;
        self.finish(&m, r).await
    }

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
        let mut m = Meter::new(Op::ManifestPut, ctx);
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
        self.finish(&m, r).await
    }

    /// `GET /v2/<repo>/tags/list`, following `Link: rel="next"` pages (each page is one
    /// `tag_list` sample). `page_size` sets `n`.
    pub async fn tag_list(
        &self,
        repo: &Repository,
        page_size: Option<u32>,
        ctx: OpCtx,
    ) -> Result<Vec<String>, ClientError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        const MAX_PAGES: usize = 100_000;
        let mut url = self.url(&["/v2/", repo.as_str(), "/tags/list"]);
        if let Some(n) = page_size {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut tags = Vec::new();
        for _ in 0..MAX_PAGES {
            let mut m = Meter::new(Op::TagList, ctx);
            let r = async {
                let request = HttpRequest::new(Method::GET, url.clone());
                let ex = self.exchange(request, &self.read_scope(repo), true).await?;
                m.exchanged(&ex);
                if ex.response.status != StatusCode::OK {
                    return Err(status_error(ex).await);
                }
                let next = ex
                    .response
                    .header("link")
                    .and_then(|l| parse_link_next(l, &url));
                let body = ex.response.bytes_limited(MANIFEST_LIMIT).await?;
                m.bytes_received = body.len() as u64;
                let page: Page = serde_json::from_slice(&body).map_err(|e| {
                    ClientError::Protocol(format!("tag list is not valid JSON: {e}"))
                })?;
                Ok((page.tags.unwrap_or_default(), next))
            }
            .await;
            let (page, next) = self.finish(&m, r).await?;
            tags.extend(page);
            match next {
                Some(n) => url = n,
                None => return Ok(tags),
            }
        }
        Err(ClientError::Protocol(format!(
            "tag list did not end after {MAX_PAGES} pages"
        )))
    }

    /// `DELETE /v2/<repo>/manifests/<digest>`.
    pub async fn manifest_delete(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let url = self.manifest_url(repo, &Reference::Digest(digest.clone()));
        self.delete(Op::ManifestDelete, repo, url, ctx).await
    }

    /// `DELETE /v2/<repo>/blobs/<digest>`.
    pub async fn blob_delete(
        &self,
        repo: &Repository,
        digest: &Digest,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let url = self.blob_url(repo, digest);
        self.delete(Op::BlobDelete, repo, url, ctx).await
    }

    async fn delete(
        &self,
        op: Op,
        repo: &Repository,
        url: Url,
        ctx: OpCtx,
    ) -> Result<(), ClientError> {
        let mut m = Meter::new(op, ctx);
        let r = async {
            let request = HttpRequest::new(Method::DELETE, url);
            let mut scope = AccessScope::push(repo);
            scope.push = true;
            let ex = self.exchange(request, &scope, false).await?;
            m.exchanged(&ex);
            if !matches!(ex.response.status.as_u16(), 200 | 202 | 204) {
                return Err(status_error(ex).await);
            }
            let _ = ex.response.drain().await;
            Ok(())
        }
        .await;
        self.finish(&m, r).await
    }

    /// One request of an upload session, recorded as its own `op` sample and counted into
    /// the session's meter. The response body is drained.
    async fn step(
        &self,
        op: Op,
        request: HttpRequest,
        scope: &AccessScope,
        expected: &[u16],
        session: &mut Meter,
    ) -> Result<Step, ClientError> {
        let mut m = Meter::new(op, OpCtx::default());
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
        self.finish(&m, r).await
    }

    /// POST to open an upload session: the session URL and the registry's minimum chunk.
    async fn start_session(
        &self,
        repo: &Repository,
        scope: &AccessScope,
        session: &mut Meter,
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
        session: &mut Meter,
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
        session: &mut Meter,
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
                request.headers.insert("content-range", v);
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
        session: &mut Meter,
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
        let mut m = Meter::new(Op::BlobUpload, ctx);
        m.size_hint = source.size();
        let scope = AccessScope::push(repo);
        let mut report = UploadReport {
            bytes_sent: 0,
            requests: 0,
            single_post_fallback: false,
            patches: 0,
        };
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
        report.requests = m.requests;
        self.finish(&m, r).await.map(|()| report)
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
        let mut m = Meter::new(Op::BlobMount, ctx);
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
                self.record(&m, Outcome::Ok).await;
                Ok(outcome)
            }
            Err(e @ ClientError::Status { .. }) => {
                self.record(&m, Outcome::Error(e.kind())).await;
                self.inner.recorder.event(Event::MountFallback).await;
                Ok(MountOutcome::Refused)
            }
            Err(e) => {
                self.record(&m, Outcome::Error(e.kind())).await;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Protocol cases a real registry cannot be made to produce on demand (a 416, a Range
    //! that lost bytes, paginated tags on distribution 2.8, a 429), on the scripted
    //! transport. Everything a real registry does is tested against one in `tests/`.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::metrics::{spawn_aggregator, ErrorKind};
    use crate::oci::scripted::{ScriptedResponse, ScriptedTransport};

    fn client(transport: ScriptedTransport) -> (RegistryClient, crate::metrics::AggregatorHandle) {
        let (recorder, handle) = spawn_aggregator();
        let c = RegistryClient::new(
            Arc::new(transport),
            "http://registry.test/".parse().unwrap(),
            recorder,
            ClientOptions::default(),
        );
        (c, handle)
    }

    fn repo() -> Repository {
        "a/b".parse().unwrap()
    }

    #[tokio::test]
    async fn tag_list_follows_link_pages() {
        let t = ScriptedTransport::new(|r| match r.url.query() {
            Some("n=2") => ScriptedResponse::status(200)
                .header("link", r#"</v2/a/b/tags/list?n=2&last=b>; rel="next""#)
                .body(r#"{"name":"a/b","tags":["a","b"]}"#),
            Some("n=2&last=b") => ScriptedResponse::status(200)
                .header(
                    "link",
                    r#"<http://registry.test/v2/a/b/tags/list?n=2&last=d>; rel="next""#,
                )
                .body(r#"{"name":"a/b","tags":["c","d"]}"#),
            _ => ScriptedResponse::status(200).body(r#"{"name":"a/b","tags":["e"]}"#),
        });
        let (c, handle) = client(t.clone());
        let tags = c
            .tag_list(&repo(), Some(2), OpCtx::default())
            .await
            .unwrap();
        assert_eq!(tags, ["a", "b", "c", "d", "e"]);
        drop(c);
        assert_eq!(
            handle
                .finish()
                .await
                .table
                .op_total(Op::TagList)
                .unwrap()
                .ok,
            3
        );
    }

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
        assert_eq!(agg.events[Event::UploadResume.index()], 1);
        assert_eq!(agg.table.op_total(Op::UploadPatch).unwrap().errors, 1);
        assert_eq!(agg.table.op_total(Op::BlobUpload).unwrap().ok, 1);
    }

    #[tokio::test]
    async fn chunked_upload_resends_what_the_registry_did_not_keep() {
        let t = ScriptedTransport::new(|r| match r.method.as_str() {
            "POST" => ScriptedResponse::status(202)
                .header("location", "http://registry.test/v2/a/b/blobs/uploads/u")
                .header("oci-chunk-min-length", "5"),
            // The registry only keeps the first 3 bytes of the first chunk.
            "PATCH" if r.headers["content-range"] == "0-4" => ScriptedResponse::status(202)
                .header("location", "/v2/a/b/blobs/uploads/u")
                .header("range", "bytes=0-2"),
            "PATCH" => {
                let range = r.headers["content-range"].to_str().unwrap().to_owned();
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

    #[tokio::test]
    async fn throttling_is_its_own_error_class_with_retry_after() {
        let t = ScriptedTransport::new(|_| {
            ScriptedResponse::status(429)
                .header("retry-after", "7")
                .body(r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}"#)
        });
        let (c, handle) = client(t);
        let d = Digest::sha256_of(b"z");
        let err = c
            .blob_get(&repo(), &d, None, OpCtx::default())
            .await
            .unwrap_err();
        match &err {
            ClientError::Status {
                status,
                retry_after,
                ..
            } => {
                assert_eq!((*status, *retry_after), (429, Some(7)));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(err.codes(), ["TOOMANYREQUESTS"]);
        drop(c);
        let agg = handle.finish().await;
        let stats = agg.table.op_total(Op::BlobGet).unwrap();
        assert_eq!(stats.errors_by_kind[&ErrorKind::Http(429)], 1);
        assert!(
            stats.latency.is_empty(),
            "errors never enter success latency"
        );
    }

    /// A throttling storm on demand (a real registry will not): retries are opt-in, honour
    /// Retry-After, are counted, and never repeat a PATCH.
    #[tokio::test(start_paused = true)]
    async fn retries_are_opt_in_counted_and_only_for_repeatable_requests() {
        use crate::oci::retry::{parse_retry_on, RetryPolicy};
        let calls = Arc::new(AtomicU32::new(0));
        let c2 = Arc::clone(&calls);
        let t = ScriptedTransport::new(move |r| {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            match r.method.as_str() {
                "GET" if n < 2 => ScriptedResponse::status(429).header("retry-after", "2"),
                "GET" => ScriptedResponse::status(200).body("abc"),
                "POST" => {
                    ScriptedResponse::status(202).header("location", "/v2/a/b/blobs/uploads/u")
                }
                _ => ScriptedResponse::status(503),
            }
        });
        let (recorder, handle) = spawn_aggregator();
        let options = ClientOptions {
            retry: RetryPolicy {
                on: parse_retry_on("429,5xx").unwrap(),
                max_retries: 3,
                ..RetryPolicy::default()
            },
            ..ClientOptions::default()
        };
        let c = RegistryClient::new(
            Arc::new(t.clone()),
            "http://registry.test/".parse().unwrap(),
            recorder,
            options,
        );
        let started = Instant::now();
        let n = c
            .blob_get(&repo(), &Digest::sha256_of(b"abc"), None, OpCtx::default())
            .await
            .unwrap();
        assert_eq!(n, 3);
        assert!(
            started.elapsed() >= std::time::Duration::from_secs(4),
            "Retry-After honoured twice"
        );
        let spec = ContentSpec::new(1, b"p", 10);
        let err = c
            .upload_blob(
                &repo(),
                &spec.digest(),
                &BlobSource::Content(spec),
                UploadMode::Chunked { chunk_size: 10 },
                None,
                OpCtx::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(503));
        let patches = t.requests().iter().filter(|r| r.method == "PATCH").count();
        assert_eq!(patches, 1, "a PATCH is never sent twice");
        drop(c);
        let agg = handle.finish().await;
        assert_eq!(agg.events[Event::Retry.index()], 2);
        let get = agg.table.op_total(Op::BlobGet).unwrap();
        assert_eq!((get.ok, get.http_requests), (1, 3));
    }

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
        let body = r#"{"schemaVersion":2}"#;
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
                    assert_eq!(e.kind(), ErrorKind::DigestMismatch);
                }
            }
        }
    }

    #[tokio::test]
    async fn urls_are_the_base_with_the_api_path() {
        for base in [
            "http://registry.test/",
            "https://[::1]:5443/",
            "http://127.0.0.1:5000/",
        ] {
            let (recorder, _h) = spawn_aggregator();
            let t = ScriptedTransport::new(|_| ScriptedResponse::status(200));
            let c = RegistryClient::new(
                Arc::new(t),
                base.parse().unwrap(),
                recorder,
                ClientOptions::default(),
            );
            let digest = Digest::sha256_of(b"x");
            let reference = Reference::Tag("v1.0".parse().unwrap());
            let expect = |path: &str| {
                let mut u: Url = base.parse().unwrap();
                u.set_path(path);
                u
            };
            let repo: Repository = "library/a-b_c.d".parse().unwrap();
            assert_eq!(
                c.blob_url(&repo, &digest),
                expect(&format!("/v2/library/a-b_c.d/blobs/{digest}"))
            );
            assert_eq!(
                c.manifest_url(&repo, &reference),
                expect("/v2/library/a-b_c.d/manifests/v1.0")
            );
            assert_eq!(
                c.uploads_url(&repo),
                expect("/v2/library/a-b_c.d/blobs/uploads/")
            );
            assert_eq!(c.url(&["/v2/"]), expect("/v2/"));
        }
    }

    #[tokio::test]
    async fn registry_base_is_normalised_and_refuses_credentials() {
        let b = registry_base(&"https://r.example:8443/some/path?x=1".parse().unwrap()).unwrap();
        assert_eq!(b.as_str(), "https://r.example:8443/");
        assert!(registry_base(&"https://u:p@r.example/".parse().unwrap()).is_err());
        assert!(registry_base(&"ftp://r.example/".parse().unwrap()).is_err());
    }
}
