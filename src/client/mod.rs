//! The registry client: every OCI Distribution operation creb-rs performs, each timed and
//! recorded as it happens. This file holds the client itself (options, the per-operation
//! meter, and `RegistryClient::exchange`: credentials, retries and redirects); the
//! operations are grouped by what they do: reads in `pull`, upload sessions, mounts and
//! manifest PUTs in `upload`, tag listing and deletes in `manage`.
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

use std::borrow::Cow;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{AUTHORIZATION, LOCATION};
use http::{HeaderValue, Method, StatusCode};
use tokio::time::Instant;
use url::Url;

pub mod error;
mod manage;
mod pull;
pub(crate) use pull::{check_manifest_digest, check_manifest_type};
pub mod retry;
mod upload;

pub use error::{ClientError, OpError};
pub use pull::Tap;
pub use upload::{MountOutcome, UploadMode, UploadReport};

use crate::auth::challenge::challenges_of;
use crate::auth::{AccessScope, Anonymous, Authenticator, Ready};
use crate::content::{ContentSpec, SendHash};
use crate::digest::{Digest, Sha256Sum};
use crate::metrics::attribution::Who;
use crate::metrics::{
    ErrorKind, Event, HttpStatuses, Op, Outcome, Recorder, Sample, SizeClass, Timing,
};
use crate::net::headers::Headers;
use crate::net::links::Link;
use crate::net::transport::{
    HttpRequest, HttpResponse, ReqUrl, RequestBody, Transport, TransportError, Unprocessed,
};
use crate::net::{arrival, gather};
use crate::oci::error::{parse_error_body, RegistryErrorEntry};
use crate::oci::headers::{parse_retry_after, resolve_location, truncate};
use crate::oci::manifest::ParsedManifest;
use crate::oci::reference::{Reference, Repository};
use retry::RetryPolicy;

/// Manifests larger than this are refused (distribution's own limit is 4 MiB).
pub const MANIFEST_LIMIT: usize = 4 * 1024 * 1024;
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// Times one request goes out again because the server provably never processed it (an
/// HTTP/2 GOAWAY or REFUSED_STREAM); past this the failure stands.
const MAX_UNPROCESSED_RESENDS: u32 = 5;

/// Behaviour switches of the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// How every downloaded blob and manifest is checked against its digest.
    pub verify: Verify,
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
            verify: Verify::Compare,
            max_redirects: 5,
            push_scopes: false,
            retry: RetryPolicy::default(),
        }
    }
}

impl ClientOptions {
    /// The defaults, checking downloads as `verify` says.
    pub fn verifying(verify: Verify) -> ClientOptions {
        ClientOptions {
            verify,
            ..ClientOptions::default()
        }
    }
}

/// How a downloaded body is checked (`--verify`); one of three, so no pair of switches can
/// say something meaningless. Written into results by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// A blob whose generated content the caller names
    /// ([`RegistryClient::blob_get_generated`]) is compared with that content, regenerated in
    /// step with the body (memory speed); other content is hashed.
    #[default]
    Compare,
    /// Every body is hashed with SHA-256 and compared with its digest.
    Sha256,
    /// Nothing is compared: bodies are still read to the end and their sizes checked.
    None,
}

impl Verify {
    /// Whether bodies are checked against their digests at all.
    pub fn checks(self) -> bool {
        self != Verify::None
    }

    /// The name results and `--verify` use.
    pub fn name(self) -> &'static str {
        match self {
            Verify::Compare => "compare",
            Verify::Sha256 => "sha256",
            Verify::None => "none",
        }
    }
}

/// The first attempt of an operation's exchange, sent and answered by stress mode's event
/// loop (`src/exec/lane.rs`) exactly as the client would have sent it, handed to the client
/// to act on: an answer the loop does not take as a plain success (any status but 200,
/// a body it does not read, a check that fails), or the transport error it met.
#[allow(missing_debug_implementations)] // a response body is not `Debug`
pub(crate) struct Given {
    pub(crate) result: Result<HttpResponse, TransportError>,
    /// When the request was handed to the socket.
    pub(crate) sent: Instant,
    /// When the answer's head arrived (for an error: when it was known).
    pub(crate) head_at: Instant,
    /// When what the loop read of the answer arrived: the exchange's end unless the
    /// client reads more (a body handed over with its connection) or sends again.
    pub(crate) end: Instant,
    /// Whether `head_at` and `end` come from the kernel's receive stamps.
    pub(crate) stamped: bool,
}

impl Given {
    /// The attempt as an exchange takes it: when it was sent, its result, when its head
    /// arrived; the end of what was read is noted as the task's last arrival.
    fn taken(self: Box<Self>) -> Sent {
        let Given {
            result,
            sent,
            head_at,
            end,
            stamped,
        } = *self;
        arrival::note_at(end, stamped);
        (sent, result, head_at)
    }
}

/// An attempt sent: when, the transport's result, and when the answer's head arrived.
type Sent = (Instant, Result<HttpResponse, TransportError>, Instant);

/// Per-operation context from the caller.
#[derive(Debug, Clone, Default)]
pub struct OpCtx {
    /// When the plan wanted this operation to start (delay mode); `None` in closed loops.
    pub intended: Option<Instant>,
    /// When it could start, if it waited for other operations first (a manifest PUT for
    /// its uploads): its schedule lag runs from here.
    pub ready: Option<Instant>,
    /// Whom the operation is for (its repository and the trace's client): its sample is
    /// attributed to them.
    pub who: Option<Who>,
    /// The image pull session (a trace replay's) the operation is a member of: its sample
    /// also ends it as a member ([`crate::metrics::SessionMsg::Ended`]), one message where
    /// there were two.
    pub session: Option<u64>,
}

impl OpCtx {
    /// An operation on `repo`, attributed to it, with no intended start.
    pub fn for_repository(repo: &Repository) -> OpCtx {
        OpCtx {
            who: Some(Who {
                repository: Some(repo.shared()),
                client: None,
            }),
            ..OpCtx::default()
        }
    }
}

/// Where a blob's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobSource {
    /// Generated content, produced while it is sent.
    Content(ContentSpec),
    /// Small bytes held in memory (configs, manifests).
    Bytes(Bytes),
    /// Generated content whose digest is computed as it is sent
    /// ([`RegistryClient::upload_hashing`]).
    Hashing(Arc<SendHash>),
}

impl BlobSource {
    pub fn size(&self) -> u64 {
        match self {
            BlobSource::Content(spec) => spec.size(),
            BlobSource::Bytes(b) => b.len() as u64,
            BlobSource::Hashing(tap) => tap.spec().size(),
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
                tap: None,
            },
            BlobSource::Hashing(tap) => RequestBody::Content {
                spec: *tap.spec(),
                range: start..start + len,
                tap: Some(Arc::clone(tap)),
            },
            BlobSource::Bytes(b) => {
                RequestBody::Bytes(b.slice(start as usize..(start + len) as usize))
            }
        }
    }
}

/// A fetched manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedManifest {
    pub bytes: Bytes,
    content_type: Option<HeaderValue>,
    sha256: Sha256Sum,
    /// The manifest, parsed (a body that does not parse is `not_a_manifest`).
    pub parsed: ParsedManifest,
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
    /// The label its `--split-by-header` value gets, if the run splits by one.
    label: Option<u8>,
    /// After a redirect to another origin (blob storage): when the request to it was sent,
    /// so its hop is timed apart from the registry's ([`RegistryClient::storage_hop`]).
    storage_sent: Option<Instant>,
    /// When the last request that was not an auth failure was sent.
    sent: Instant,
    headers_at: Instant,
    requests: HttpStatuses,
}

/// Operations of one client cut off before they were recorded: their future dropped (a
/// stop's grace ran out, a stage raced the stop), counted by operation. A command that
/// drops work reads them back ([`RegistryClient::record_cut_off`]) so that a cut-off
/// operation is a counted failure. One relaxed add when an operation is dropped unfinished;
/// nothing for one that is recorded.
#[derive(Debug, Default)]
struct CutOff([std::sync::atomic::AtomicU32; Op::COUNT]);

/// Measures one operation and records it once; dropped unrecorded, it counts itself as cut
/// off.
struct Meter<'c> {
    op: Op,
    /// Where it counts itself if dropped before it is recorded (its client's counts, borrowed:
    /// no reference count moves per operation); `None` once recorded.
    cut_off: Option<&'c CutOff>,
    timing: Timing,
    bytes_sent: u64,
    bytes_received: u64,
    requests: HttpStatuses,
    size_hint: u64,
    sent_set: bool,
    /// The `--split-by-header` label of the latest answer.
    label: Option<u8>,
    who: Option<Who>,
    session: Option<u64>,
}

/// The instant an exchange is sent: now, and what the task read before is forgotten (an
/// exchange is timed by its own reads only).
fn sending() -> Instant {
    arrival::forget();
    Instant::now()
}

/// When the head of an exchange sent at `sent` arrived: the stamp of the read that brought
/// it, when the socket has them ([`arrival`]); else, or for a failed exchange, now.
fn head_arrival<T, E>(result: &Result<T, E>, sent: Instant) -> Instant {
    if result.is_ok() {
        arrival::last_arrival(sent).0
    } else {
        Instant::now()
    }
}

/// Whether an operation that ended with `outcome` ended with an answer read to its end: a
/// success, an error status, or an answer whose content was wrong. Timed out, reset,
/// cancelled and other failed operations end when they were given up, not at a read.
fn answered(outcome: Outcome) -> bool {
    match outcome.error() {
        None => true,
        Some(kind) => matches!(
            kind,
            ErrorKind::Http(_)
                | ErrorKind::DigestMismatch
                | ErrorKind::SizeMismatch
                | ErrorKind::DigestHeaderMismatch
                | ErrorKind::NotAManifest
                | ErrorKind::NotJson
                | ErrorKind::Protocol
        ),
    }
}

impl<'c> Meter<'c> {
    fn new(op: Op, ctx: OpCtx, cut_off: &'c CutOff) -> Self {
        Meter {
            op,
            cut_off: Some(cut_off),
            timing: Timing {
                ready: ctx.ready,
                ..Timing::start(ctx.intended)
            },
            bytes_sent: 0,
            bytes_received: 0,
            requests: HttpStatuses::NONE,
            size_hint: 0,
            sent_set: false,
            label: None,
            who: ctx.who,
            session: ctx.session,
        }
    }

    fn exchanged(&mut self, ex: &Exchange) {
        if !self.sent_set {
            self.timing.sent = ex.sent;
            self.sent_set = true;
        }
        self.timing.first_byte = Some(ex.headers_at);
        self.requests.add(ex.requests);
        self.label = ex.label.or(self.label);
    }

    /// Its sample, once: the meter no longer counts itself as cut off.
    fn sample(&mut self, outcome: Outcome) -> Sample {
        self.cut_off = None;
        let mut timing = self.timing;
        // An operation that ended with an answer ends when the answer's last bytes arrived
        // (its last read's stamp, when the socket has them); any other, now.
        timing.end = if self.sent_set && answered(outcome) {
            let (end, stamped) = arrival::last_arrival(timing.sent);
            gather::observe(end.saturating_duration_since(timing.sent), stamped);
            // A head and an end from two reads are placed by two readings of the clocks
            // (one read's, by one): never an end before the head.
            timing.first_byte.map_or(end, |head| end.max(head))
        } else {
            Instant::now()
        };
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
            http: self.requests,
        }
    }
}

struct Inner {
    transport: Arc<dyn Transport>,
    /// Shared with the requests made on it.
    base: Arc<Url>,
    recorder: Recorder,
    auth: Arc<dyn Authenticator>,
    options: ClientOptions,
    /// The HTTP version of the registry's latest answer (shared by every copy of the
    /// client; one relaxed store per response).
    version: Arc<AtomicU8>,
    /// Operations dropped before they were recorded.
    cut_off: CutOff,
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

impl Drop for Meter<'_> {
    fn drop(&mut self) {
        if let Some(cut_off) = &self.cut_off {
            cut_off.0[self.op.index()].fetch_add(1, Ordering::Relaxed);
        }
    }
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
                base: Arc::new(base),
                recorder,
                auth,
                options,
                version: Arc::new(AtomicU8::new(0)),
                cut_off: CutOff::default(),
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
                base: Arc::clone(&self.inner.base),
                recorder,
                auth: Arc::clone(&self.inner.auth),
                options: self.inner.options.clone(),
                version: Arc::clone(&self.inner.version),
                cut_off: CutOff::default(),
            }),
        }
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// The token service the registry named in a challenge, if any (for messages).
    pub fn token_service(&self) -> Option<String> {
        self.inner.auth.token_service()
    }

    pub fn recorder(&self) -> &Recorder {
        &self.inner.recorder
    }

    /// How this client reaches its registry: the HTTP version of the registry's latest
    /// answer, and what the transport knows of its connections (TLS, ALPN, how many).
    pub fn link(&self) -> Link {
        let mut link = self
            .inner
            .transport
            .link(&self.inner.base)
            .unwrap_or_default();
        let answered = match self.inner.version.load(Ordering::Relaxed) {
            1 => Some("HTTP/1.0"),
            2 => Some("HTTP/1.1"),
            3 => Some("HTTP/2"),
            _ => None,
        };
        if let Some(v) = answered {
            link.http = Some(v.to_owned());
        }
        link
    }

    /// Whether this client sends a read of `repo` as it is, with nothing to add: no
    /// credentials known or to be fetched for it (stress mode's event loop sends only such
    /// requests for it, [`Given`]).
    pub(crate) fn sends_as_is(&self, repo: &Repository) -> bool {
        matches!(
            self.inner.auth.ready(&self.read_scope(repo)),
            Ready::Nothing
        )
    }

    /// Writes the request target (path) of a manifest's GET, as this client sends it, into
    /// `out` (cleared first): stress mode's loop keeps one buffer for every GET, so a path
    /// the URL parser keeps as written (every registry name and reference) costs no
    /// allocation.
    pub(crate) fn manifest_target_into(
        &self,
        repo: &Repository,
        reference: &Reference,
        out: &mut String,
    ) {
        out.clear();
        for part in ["/v2/", repo.as_str(), "/manifests/", reference.as_str()] {
            out.push_str(part);
        }
        if !crate::net::req_url::is_plain_path(out) {
            let joined = self.manifest_url(repo, reference);
            out.clear();
            out.push_str(joined.target());
        }
    }

    /// How stress mode's event loop may speak for this client's transport, if it may.
    pub(crate) fn plain_lane(&self) -> Option<crate::net::transport::PlainLane> {
        self.inner.transport.plain_lane()
    }

    /// The registry answered a request of stress mode's event loop in HTTP/1.1 (what
    /// [`Self::link`] reports).
    pub(crate) fn answered_plain(&self) {
        self.note_version(http::Version::HTTP_11);
    }

    /// The scope of a read: `pull`, or `pull,push` for a pushing client.
    fn read_scope(&self, repo: &Repository) -> AccessScope {
        if self.inner.options.push_scopes {
            AccessScope::push(repo)
        } else {
            AccessScope::pull(repo)
        }
    }

    /// The registry's whole URL for the path made of `parts` (one that is changed before it
    /// is sent: a query added).
    fn url(&self, parts: &[&str]) -> Url {
        self.target(parts).into_url()
    }

    /// The registry's URL for the path made of `parts`, as a request's: the path built in
    /// one string, joined to the base only where a whole URL is asked for (a request's URL
    /// is made for every operation, and the plain-HTTP path sends the path as it is).
    fn target(&self, parts: &[&str]) -> ReqUrl {
        let mut path = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            path.push_str(part);
        }
        ReqUrl::joined(&self.inner.base, path)
    }

    fn blob_url(&self, repo: &Repository, digest: &Digest) -> ReqUrl {
        self.target(&["/v2/", repo.as_str(), "/blobs/", digest.as_str()])
    }

    fn manifest_url(&self, repo: &Repository, reference: &Reference) -> ReqUrl {
        self.target(&["/v2/", repo.as_str(), "/manifests/", reference.as_str()])
    }

    fn uploads_url(&self, repo: &Repository) -> Url {
        self.url(&["/v2/", repo.as_str(), "/blobs/uploads/"])
    }

    /// The storage's hop of a redirected read, apart from the registry's (`redirect`): a
    /// `storage_get` from sending to the storage to the end of its body, `bytes` long.
    async fn storage_hop(&self, sent: Instant, headers_at: Instant, outcome: Outcome, bytes: u64) {
        let sample = Sample {
            op: Op::StorageGet,
            outcome,
            size_class: SizeClass::of(bytes),
            timing: Timing {
                intended: None,
                ready: None,
                sent,
                first_byte: Some(headers_at),
                end: if answered(outcome) {
                    arrival::last_arrival(sent).0
                } else {
                    Instant::now()
                },
            },
            bytes_sent: 0,
            bytes_received: bytes,
            http: HttpStatuses::NONE,
        };
        self.inner.recorder.record(sample).await;
    }

    /// A meter for `op`, counted as cut off if it is dropped unrecorded.
    fn meter(&self, op: Op, ctx: OpCtx) -> Meter<'_> {
        Meter::new(op, ctx, &self.inner.cut_off)
    }

    /// Records every operation cut off since the last call (dropped before it was recorded)
    /// as a failure of kind `cancelled`, so that it counts in the totals and the errors;
    /// returns how many there were. Called by a command once its work was dropped.
    pub async fn record_cut_off(&self) -> u64 {
        let mut total = 0;
        for &op in Op::ALL {
            let n = self.inner.cut_off.0[op.index()].swap(0, Ordering::Relaxed);
            for _ in 0..n {
                let now = Instant::now();
                let sample = Sample::unanswered(op, ErrorKind::Cancelled, None, now);
                self.inner.recorder.record(sample).await;
            }
            total += u64::from(n);
        }
        total
    }

    async fn record(&self, meter: &mut Meter<'_>, outcome: Outcome) {
        let sample = meter.sample(outcome);
        self.inner
            .recorder
            .record_member(sample, meter.label, meter.who.take(), meter.session.take())
            .await;
    }

    async fn finish<T>(
        &self,
        meter: &mut Meter<'_>,
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
    ///
    /// A function returning an `async move` block rather than an `async fn`: an `async fn`
    /// keeps its arguments twice in its future (as passed and as locals), and this future
    /// sits inside every operation's.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    fn exchange<'a>(
        &'a self,
        request: HttpRequest,
        scope: &'a AccessScope,
        follow_redirects: bool,
    ) -> impl std::future::Future<Output = Result<Exchange, ClientError>> + 'a {
        self.exchange_given(request, scope, follow_redirects, None)
    }

    /// [`Self::exchange`] whose first attempt was sent and answered already (`given`: by
    /// stress mode's event loop, as this client would have sent it), acted on from its
    /// answer as if the transport had returned it.
    #[allow(clippy::manual_async_fn)] // on purpose: see `exchange`
    fn exchange_given<'a>(
        &'a self,
        request: HttpRequest,
        scope: &'a AccessScope,
        follow_redirects: bool,
        mut given: Option<Box<Given>>,
    ) -> impl std::future::Future<Output = Result<Exchange, ClientError>> + 'a {
        async move {
            let follow = follow_redirects && matches!(request.method, Method::GET | Method::HEAD);
            let retryable = self.inner.options.retry.enabled() && repeatable(&request);
            let mut state = Attempts::default();
            loop {
                let url = state.redirected.as_ref().unwrap_or(&request.url);
                // By the origin alone: a registry request's URL is not joined for it, and one
                // built on the registry's base holds that very base.
                let origin = url.origin();
                let on_origin = std::ptr::eq(origin, &*self.inner.base)
                    || same_origin(origin, &self.inner.base);
                let (sent, result, headers_at) = match given.take() {
                    Some(given) => given.taken(),
                    None => self.attempt(&request, url, on_origin, scope).await?,
                };
                let sent_for_op = *state.first_sent.get_or_insert(sent);
                state
                    .requests
                    .note(result.as_ref().ok().map(|r| r.status.as_u16()));
                let again = retryable || result.as_ref().is_err_and(|e| e.unprocessed.is_some());
                let result = if again {
                    match Box::pin(self.settle(result, &mut state, retryable)).await {
                        Some(result) => result,
                        None => continue,
                    }
                } else {
                    result
                };
                let response = result?;
                if on_origin {
                    self.note_version(response.version);
                }
                let hop = Hop {
                    sent,
                    headers_at,
                    on_origin,
                    follow,
                };
                // An answer to act on is a rare path, boxed as `settle`'s.
                let response = if may_act_on(response.status) {
                    let answer = self.after_answer(response, &request.url, &mut state, scope, hop);
                    match Box::pin(answer).await? {
                        Some(response) => response,
                        None => continue,
                    }
                } else {
                    response
                };
                let label = self.label_of(&response);
                let storage_sent = (state.redirects > 0 && !on_origin).then_some(sent);
                return Ok(Exchange {
                    response,
                    label,
                    storage_sent,
                    sent: sent_for_op,
                    headers_at,
                    requests: state.requests,
                });
            }
        }
    }

    /// The `--split-by` label of an answer, if results are split.
    fn label_of(&self, response: &HttpResponse) -> Option<u8> {
        let split = self.inner.recorder.split()?;
        Some(split.label(response.headers.get(split.header())))
    }

    /// One attempt of `request` to `url` sent: when, the transport's result, and when its
    /// head arrived. An `async move` block for the reason `exchange` gives.
    #[allow(clippy::manual_async_fn)] // on purpose: see `exchange`
    fn attempt<'a>(
        &'a self,
        request: &'a HttpRequest,
        url: &'a ReqUrl,
        on_origin: bool,
        scope: &'a AccessScope,
    ) -> impl std::future::Future<Output = Result<Sent, ClientError>> + 'a {
        async move {
            let attempt = match self.prepare(request, url, on_origin, scope) {
                (attempt, false) => attempt,
                (attempt, true) => self.authorized(attempt, scope).await?,
            };
            let sent = sending();
            let result = self.inner.transport.send(&attempt).await;
            let headers_at = head_arrival(&result, sent);
            Ok((sent, result, headers_at))
        }
    }

    /// What an attempt's `result` becomes when it may be sent again (the server never
    /// processed it; or a `--retry`): `None` to send it again, else the result to act on.
    /// Called boxed, on those paths only: the exchange's future sits in every operation's
    /// task, sized by its largest state.
    async fn settle(
        &self,
        result: Result<HttpResponse, TransportError>,
        state: &mut Attempts,
        retryable: bool,
    ) -> Option<Result<HttpResponse, TransportError>> {
        let unprocessed = result.as_ref().err().and_then(|e| e.unprocessed);
        if unprocessed.is_some() && self.resend_unprocessed(unprocessed, state).await {
            return None;
        }
        if retryable {
            return self.retry(result, state).await;
        }
        Some(result)
    }

    /// The HTTP version the registry's origin answered in (what the result says was used).
    fn note_version(&self, version: http::Version) {
        let v = match version {
            http::Version::HTTP_10 => 1,
            http::Version::HTTP_2 => 3,
            _ => 2,
        };
        self.inner.version.store(v, Ordering::Relaxed);
    }

    /// One attempt of `request` to `url`: its headers without any `Authorization` of its
    /// own, and the authenticator's credentials when `url` is the registry's origin; `true`
    /// beside it when those are still to be fetched ([`Authenticator::authorize`]). An
    /// attempt that changes nothing of the request (its own URL, no credentials to add and
    /// none of its own to drop) is the request itself, borrowed.
    fn prepare<'r>(
        &self,
        request: &'r HttpRequest,
        url: &ReqUrl,
        on_origin: bool,
        scope: &AccessScope,
    ) -> (Cow<'r, HttpRequest>, bool) {
        let ready = if on_origin {
            self.inner.auth.ready(scope)
        } else {
            Ready::Nothing
        };
        if matches!(ready, Ready::Nothing)
            && std::ptr::eq(url, &request.url)
            && !request.headers.contains_key(&AUTHORIZATION)
        {
            return (Cow::Borrowed(request), false);
        }
        // The request's own lines, held inline: a copy without an allocation.
        let mut headers = request.headers.clone();
        headers.remove(&AUTHORIZATION);
        let mut attempt = HttpRequest {
            method: request.method.clone(),
            url: url.clone(),
            headers,
            body: request.body.clone(),
        };
        match ready {
            Ready::Nothing => {}
            Ready::Header(h) => {
                attempt.headers.insert(AUTHORIZATION, h);
            }
            Ready::Later => return (Cow::Owned(attempt), true),
        }
        (Cow::Owned(attempt), false)
    }

    /// `attempt` with the credentials still to be fetched (a token): a rare path, boxed with
    /// the attempt, as is every wait the exchange's future need not hold inline.
    fn authorized<'a>(
        &'a self,
        attempt: Cow<'a, HttpRequest>,
        scope: &'a AccessScope,
    ) -> futures_util::future::BoxFuture<'a, Result<Cow<'a, HttpRequest>, ClientError>> {
        Box::pin(async move {
            let mut attempt = attempt.into_owned();
            self.inner.auth.authorize(&mut attempt, scope).await?;
            Ok(Cow::Owned(attempt))
        })
    }

    /// Whether a request that never reached the registry (HTTP/2 GOAWAY or REFUSED_STREAM)
    /// is sent again: not an error, not a `--retry`, and at most a few times.
    async fn resend_unprocessed(&self, how: Option<Unprocessed>, state: &mut Attempts) -> bool {
        let Some(how) = how else {
            return false;
        };
        if state.unprocessed_resends >= MAX_UNPROCESSED_RESENDS {
            return false;
        }
        state.unprocessed_resends += 1;
        let cause = match how {
            Unprocessed::GoAway => Event::H2GoAway,
            Unprocessed::RefusedStream => Event::H2RefusedStream,
        };
        self.inner.recorder.event(cause).await;
        self.inner.recorder.event(Event::UnprocessedRetry).await;
        true
    }

    /// `--retry`: when the failure or status is one the policy covers and retries are left,
    /// waits (backoff with jitter, or the answer's `Retry-After`) and returns `None` to send
    /// again; otherwise the result as it was.
    async fn retry(
        &self,
        result: Result<HttpResponse, TransportError>,
        state: &mut Attempts,
    ) -> Option<Result<HttpResponse, TransportError>> {
        let policy = &self.inner.options.retry;
        if state.retries >= policy.max_retries {
            return Some(result);
        }
        let (kind, retry_after) = match &result {
            Err(e) => (Some(e.kind), None),
            Ok(r) if r.status.is_server_error() || r.status == StatusCode::TOO_MANY_REQUESTS => (
                Some(ErrorKind::Http(r.status.as_u16())),
                r.header("retry-after").and_then(parse_retry_after),
            ),
            Ok(_) => (None, None),
        };
        if !kind.is_some_and(|k| policy.covers(k)) {
            return Some(result);
        }
        state.retries += 1;
        self.inner.recorder.event(Event::Retry).await;
        if let Ok(response) = result {
            let _ = response.drain().await;
        }
        // Jitter from the clock's sub-second digits: enough to spread retries.
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.5, |d| f64::from(d.subsec_nanos() % 1_000_000) / 1e6);
        tokio::time::sleep(policy.wait(state.retries, retry_after, jitter)).await;
        None
    }

    /// What an answer means for the exchange: the answer to return, or `None` to send again
    /// (after a 401 whose challenge the authenticator can meet, a refused presigned URL,
    /// or a redirect, whose hop is recorded apart).
    async fn after_answer(
        &self,
        response: HttpResponse,
        request_url: &ReqUrl,
        state: &mut Attempts,
        scope: &AccessScope,
        hop: Hop,
    ) -> Result<Option<HttpResponse>, ClientError> {
        let status = response.status;
        if status == StatusCode::UNAUTHORIZED && hop.on_origin && !state.auth_retried {
            state.auth_retried = true;
            if self.inner.auth.challenged(&response.headers, scope).await? {
                self.inner.recorder.event(Event::AuthRetry).await;
                let _ = response.drain().await;
                // The refused round trip and the token fetch are not registry latency.
                state.first_sent = None;
                return Ok(None);
            }
        }
        if state.redirects > 0
            && !hop.on_origin
            && status == StatusCode::FORBIDDEN
            && !state.storage_retried
        {
            // Likely an expired presigned URL: ask the registry again, once.
            state.storage_retried = true;
            self.inner.recorder.event(Event::StorageRetry).await;
            let _ = response.drain().await;
            state.redirected = None;
            state.redirects = 0;
            return Ok(None);
        }
        if hop.follow && is_redirect(status) && state.redirects < self.inner.options.max_redirects {
            let url = state.redirected.as_ref().unwrap_or(request_url);
            let target = self.follow(response, url, &hop).await?;
            state.redirects += 1;
            state.redirected = Some(ReqUrl::from(target));
            return Ok(None);
        }
        Ok(Some(response))
    }

    /// Records a redirect's hop (its own sample) and returns where it points.
    async fn follow(
        &self,
        response: HttpResponse,
        url: &Url,
        hop: &Hop,
    ) -> Result<Url, ClientError> {
        let status = response.status;
        let location = response
            .header(LOCATION.as_str())
            .map(str::to_owned)
            .ok_or_else(|| ClientError::Protocol(format!("{status} redirect without Location")))?;
        let target = resolve_location(url, &location).map_err(ClientError::Protocol)?;
        let drained = response.drain().await.unwrap_or(0);
        let sample = Sample {
            op: Op::Redirect,
            outcome: Outcome::Ok,
            size_class: SizeClass::Under1MiB,
            timing: Timing {
                intended: None,
                ready: None,
                sent: hop.sent,
                first_byte: Some(hop.headers_at),
                // The end of its answer's body, as it arrived.
                end: arrival::last_arrival(hop.sent).0,
            },
            bytes_sent: 0,
            bytes_received: drained,
            http: HttpStatuses::one(Some(status.as_u16())),
        };
        self.inner.recorder.record(sample).await;
        if !same_origin(&target, &self.inner.base) {
            self.inner.recorder.event(Event::RedirectCrossOrigin).await;
        }
        Ok(target)
    }
}

/// Where an exchange stands between its attempts.
#[derive(Debug, Default)]
struct Attempts {
    retries: u32,
    /// `None`: the request's own URL (not copied unless a redirect replaces it).
    redirected: Option<ReqUrl>,
    requests: HttpStatuses,
    auth_retried: bool,
    storage_retried: bool,
    redirects: u8,
    first_sent: Option<Instant>,
    unprocessed_resends: u32,
}

/// One attempt's answer as the exchange sees it.
#[derive(Debug, Clone, Copy)]
struct Hop {
    sent: Instant,
    headers_at: Instant,
    /// The attempt went to the registry's own origin.
    on_origin: bool,
    /// Redirects are followed (GET and HEAD).
    follow: bool,
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

/// Whether [`RegistryClient::after_answer`] may act on an answer of `status` (a challenge,
/// a refused storage URL, a redirect); any other answer is the exchange's as it came.
fn may_act_on(status: StatusCode) -> bool {
    matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) || is_redirect(status)
}

/// Turns a non-success response into a typed error, reading (a bounded amount of) its body.
/// Boxed: a rare path, and a future of its own size in every operation's task otherwise.
fn status_error(ex: Exchange) -> futures_util::future::BoxFuture<'static, ClientError> {
    Box::pin(read_status_error(ex))
}

async fn read_status_error(ex: Exchange) -> ClientError {
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
    headers: Headers,
}

impl Step {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get_str(name)
    }

    fn location(&self, request_url: &Url) -> Result<Option<Url>, ClientError> {
        self.header(LOCATION.as_str())
            .map(|l| resolve_location(request_url, l).map_err(ClientError::Protocol))
            .transpose()
    }
}

fn check_returned_digest(headers: &Headers, expected: &Digest) -> Result<(), ClientError> {
    if let Some(returned) = headers.get_str("docker-content-digest") {
        if returned.trim() != expected.as_str() {
            return Err(ClientError::DigestMismatch {
                expected: expected.to_string(),
                actual: truncate(returned),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    //! The scripted client the operation tests share.

    use std::sync::Arc;

    use super::*;
    use crate::metrics::{AggregatorBuilder, AggregatorHandle};
    use crate::net::scripted::ScriptedTransport;

    /// A client of `http://registry.test/` over `transport`, recording into a fresh
    /// aggregator.
    pub(crate) fn client(transport: ScriptedTransport) -> (RegistryClient, AggregatorHandle) {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        let c = RegistryClient::new(
            Arc::new(transport),
            "http://registry.test/".parse().unwrap(),
            recorder,
            ClientOptions::default(),
        );
        (c, handle)
    }

    pub(crate) fn repo() -> Repository {
        "a/b".parse().unwrap()
    }
}

#[cfg(test)]
mod tests {
    //! Protocol cases a real registry cannot be made to produce on demand (a 429, a
    //! throttling storm), on the scripted transport. Everything a real registry does is
    //! tested against one in `tests/`.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::test_support::{client, repo};
    use super::*;
    use crate::metrics::AggregatorBuilder;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    /// An attempt is the request itself only when it changes nothing of it: a request that
    /// carries an `Authorization` of its own is sent without it (a caller's credentials
    /// never go out beside the authenticator's), its other lines as they are.
    #[tokio::test]
    async fn an_authorization_of_the_request_s_own_is_never_sent() {
        let t = ScriptedTransport::new(|_| ScriptedResponse::status(200));
        let (c, handle) = client(t.clone());
        let scope = AccessScope::pull(&repo());
        for own in [false, true] {
            let mut request = HttpRequest::new(Method::GET, c.url(&["/v2/a/b/tags/list"]));
            request
                .headers
                .insert(http::header::ACCEPT, HeaderValue::from_static("a/b"));
            if own {
                request
                    .headers
                    .insert(AUTHORIZATION, HeaderValue::from_static("Basic c2VjcmV0"));
            }
            let ex = c.exchange(request, &scope, true).await.unwrap();
            assert_eq!(ex.response.status, StatusCode::OK);
        }
        let seen = t.requests();
        assert_eq!(seen.len(), 2);
        for r in &seen {
            assert!(r.headers.get(AUTHORIZATION).is_none(), "{:?}", r.headers);
            assert_eq!(r.headers.get(http::header::ACCEPT).unwrap(), "a/b");
        }
        drop(c);
        handle.finish().await;
    }

    /// Stress mode's loop writes a manifest GET's target into one buffer: the same path
    /// the client's own GET sends, for a tag and a digest, whatever the buffer held.
    #[tokio::test]
    async fn a_manifest_target_written_into_a_buffer_is_the_client_s_own() {
        let (c, handle) = client(ScriptedTransport::new(|_| ScriptedResponse::status(200)));
        let digest = Digest::sha256_of(b"m");
        let mut out = String::from("left over from the last GET, longer than the next");
        for reference in ["v1.2-rc_3".parse().unwrap(), Reference::Digest(digest)] {
            c.manifest_target_into(&repo(), &reference, &mut out);
            assert_eq!(out, c.manifest_url(&repo(), &reference).target());
        }
        assert!(out.starts_with("/v2/a/b/manifests/sha256:"), "{out}");
        drop(c);
        handle.finish().await;
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
        let stats = agg.table().op_total(Op::BlobGet).unwrap();
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
        use super::retry::parse_retry_on;
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
        let (recorder, handle) = AggregatorBuilder::default().spawn();
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
        assert_eq!(agg.event(Event::Retry), 2);
        let get = agg.table().op_total(Op::BlobGet).unwrap();
        assert_eq!((get.ok, get.http_requests), (1, 3));
    }

    /// HTTP/2 connection rotation on demand (nginx does it at `keepalive_requests`, but not
    /// at a chosen request): a request refused by a GOAWAY, or with REFUSED_STREAM, goes out
    /// again, counted as an event, even a PATCH; a connection closed under a request the
    /// server had taken is an error of its own kind, never sent again.
    #[tokio::test]
    async fn requests_a_server_never_processed_go_out_again_and_others_do_not() {
        use crate::net::transport::{TransportError, Unprocessed};
        let calls = Arc::new(AtomicU32::new(0));
        let c2 = Arc::clone(&calls);
        let t = ScriptedTransport::new(move |r| {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            let closed = |how| {
                ScriptedResponse::error(
                    TransportError::new(ErrorKind::ConnectionClosed, "GOAWAY").unprocessed(how),
                )
            };
            match (r.method.as_str(), n) {
                ("GET", 0) => closed(Some(Unprocessed::GoAway)),
                ("GET", 1) => closed(Some(Unprocessed::RefusedStream)),
                ("GET", _) => ScriptedResponse::status(200).body("abc"),
                ("POST", _) => {
                    ScriptedResponse::status(202).header("location", "/v2/a/b/blobs/uploads/u")
                }
                ("PATCH", 4) => closed(Some(Unprocessed::GoAway)),
                ("PATCH", _) => ScriptedResponse::status(202)
                    .header("location", "/v2/a/b/blobs/uploads/u")
                    .header("range", "0-9"),
                ("PUT", _) => closed(None),
                _ => ScriptedResponse::status(500),
            }
        });
        let (c, handle) = client(t.clone());
        let n = c
            .blob_get(&repo(), &Digest::sha256_of(b"abc"), None, OpCtx::default())
            .await
            .unwrap();
        assert_eq!(n, 3);
        let spec = ContentSpec::new(1, b"q", 10);
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
        assert_eq!(err.kind(), ErrorKind::ConnectionClosed);
        let methods: Vec<String> = t.requests().iter().map(|r| r.method.to_string()).collect();
        assert_eq!(
            methods,
            ["GET", "GET", "GET", "POST", "PATCH", "PATCH", "PUT"]
        );
        drop(c);
        let agg = handle.finish().await;
        assert_eq!(agg.event(Event::H2GoAway), 2);
        assert_eq!(agg.event(Event::H2RefusedStream), 1);
        assert_eq!(agg.event(Event::UnprocessedRetry), 3);
        let get = agg.table().op_total(Op::BlobGet).unwrap();
        assert_eq!((get.ok, get.errors, get.http_requests), (1, 0, 3));
        let put = agg.table().op_total(Op::UploadPut).unwrap();
        assert_eq!(put.errors_by_kind[&ErrorKind::ConnectionClosed], 1);
    }

    #[tokio::test]
    async fn urls_are_the_base_with_the_api_path() {
        for base in [
            "http://registry.test/",
            "https://[::1]:5443/",
            "http://127.0.0.1:5000/",
            "http://registry.test/mirror/?x=1#top",
        ] {
            let (recorder, _h) = AggregatorBuilder::default().spawn();
            let t = ScriptedTransport::new(|_| ScriptedResponse::status(200));
            let c = RegistryClient::new(
                Arc::new(t),
                base.parse().unwrap(),
                recorder,
                ClientOptions::default(),
            );
            let digest = Digest::sha256_of(b"x");
            let reference = Reference::Tag("v1.0".parse().unwrap());
            // The base joined with the absolute path: its scheme and authority only.
            let expect = |path: &str| base.parse::<Url>().unwrap().join(path).unwrap();
            let repo: Repository = "library/a-b_c.d".parse().unwrap();
            assert_eq!(
                *c.blob_url(&repo, &digest),
                expect(&format!("/v2/library/a-b_c.d/blobs/{digest}"))
            );
            assert_eq!(
                *c.manifest_url(&repo, &reference),
                expect("/v2/library/a-b_c.d/manifests/v1.0")
            );
            // Sent as the path, whatever the base's own path.
            let target = c.manifest_url(&repo, &reference);
            assert_eq!(target.target(), "/v2/library/a-b_c.d/manifests/v1.0");
            assert_eq!(
                target.origin().as_str(),
                base.parse::<Url>().unwrap().as_str()
            );
            assert_eq!(
                c.uploads_url(&repo),
                expect("/v2/library/a-b_c.d/blobs/uploads/")
            );
            assert_eq!(c.url(&["/v2/"]), expect("/v2/"));
        }
    }
}
