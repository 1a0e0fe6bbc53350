//! The seam between the OCI client and the network: one HTTP exchange at a time.
//!
//! [`Transport::send`] resolves when the response *headers* have arrived; the body is then
//! pulled chunk by chunk through [`HttpResponse::chunk`], so the client times the first
//! byte and the end of the body separately and hashes as it reads. Request bodies are
//! descriptions ([`RequestBody`]), not bytes: generated content is produced while it is sent
//! and can be produced again for a retry. Redirects are never followed here; the client
//! does it, to time each hop and to keep credentials on their origin.
//!
//! Implementations: [`super::hyper_transport::HyperTransport`] and
//! [`super::reqwest_transport::ReqwestTransport`] for real traffic (`--http-client`, see
//! [`crate::net`]) and [`super::scripted::ScriptedTransport`] for deterministic tests without
//! sockets.

use std::fmt;
use std::ops::Range;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use http::{Method, StatusCode, Version};
use tokio::time::Instant;
use url::Url;

pub use super::headers::Headers;
pub use super::req_headers::ReqHeaders;
pub use super::req_url::ReqUrl;

use crate::content::ContentSpec;
use crate::metrics::ErrorKind;

/// The future `make` returns, made in a heap slot allocated first: only what it holds
/// before its first poll (its arguments, a few hundred bytes) is written there, where
/// `Box::pin` of a future built on the stack copies all of its size over (an operation's
/// task is a few kilobytes, the largest state it may reach; a transport's exchange over a
/// kilobyte).
pub(crate) fn boxed_in_place<F: std::future::Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// What to send as a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestBody {
    Empty,
    Bytes(Bytes),
    /// A range of generated content, produced while it is sent; `tap` hears each chunk
    /// (the content's digest, computed as it is sent).
    Content {
        spec: ContentSpec,
        range: Range<u64>,
        tap: Option<std::sync::Arc<crate::content::SendHash>>,
    },
}

impl RequestBody {
    pub fn len(&self) -> u64 {
        match self {
            RequestBody::Empty => 0,
            RequestBody::Bytes(b) => b.len() as u64,
            RequestBody::Content { range, .. } => range.end - range.start,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One HTTP request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: Method,
    pub url: ReqUrl,
    pub headers: ReqHeaders,
    pub body: RequestBody,
}

impl HttpRequest {
    pub fn new(method: Method, url: impl Into<ReqUrl>) -> Self {
        HttpRequest {
            method,
            url: url.into(),
            headers: ReqHeaders::new(),
            body: RequestBody::Empty,
        }
    }
}

/// A failure below HTTP: no usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct TransportError {
    pub kind: ErrorKind,
    /// Human-readable detail. Never contains credentials or full URLs with queries.
    pub message: String,
    /// Set when the server provably never processed the request, so it can go out again.
    pub unprocessed: Option<Unprocessed>,
}

/// How a server said it never processed a request (RFC 9113 §8.7): such a request is safe
/// to send again on another connection, whatever its method and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprocessed {
    /// HTTP/2: the request's stream was above the last stream id of the server's GOAWAY.
    GoAway,
    /// HTTP/2: the server reset the request's stream with `REFUSED_STREAM`.
    RefusedStream,
}

impl TransportError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        TransportError {
            kind,
            message: message.into(),
            unprocessed: None,
        }
    }

    /// The same error, counted as `kind`.
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same error, marked as one the server never processed.
    pub fn unprocessed(mut self, how: Option<Unprocessed>) -> Self {
        self.unprocessed = how;
        self
    }
}

/// The body of a response as a stream of chunks.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, TransportError>> + Send>>;

/// A response body: read on demand, or all of it at hand.
enum Body {
    /// Arrived with the head (a small answer read in the head's read; `None` once taken,
    /// or for an empty body): nothing to wait for, no stream or timer to make.
    Whole(Option<Bytes>),
    Stream(BodyStream),
}

/// A response whose headers have arrived; the body is read on demand.
pub struct HttpResponse {
    pub status: StatusCode,
    pub headers: Headers,
    /// The HTTP version the response came in (HTTP/1.1 unless the transport says).
    pub version: Version,
    body: Body,
    idle_timeout: Option<Duration>,
    /// When the whole exchange must be over (`--request-deadline`), body included.
    end_by: Option<(Instant, Duration)>,
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .field("headers", &self.headers.len())
            .finish_non_exhaustive()
    }
}

impl HttpResponse {
    pub fn new(status: StatusCode, headers: impl Into<Headers>, body: BodyStream) -> Self {
        HttpResponse {
            status,
            headers: headers.into(),
            version: Version::HTTP_11,
            body: Body::Stream(body),
            idle_timeout: None,
            end_by: None,
        }
    }

    /// A response whose whole body arrived with its head (empty: no body).
    pub fn whole(status: StatusCode, headers: impl Into<Headers>, body: Bytes) -> Self {
        HttpResponse {
            status,
            headers: headers.into(),
            version: Version::HTTP_11,
            body: Body::Whole((!body.is_empty()).then_some(body)),
            idle_timeout: None,
            end_by: None,
        }
    }

    /// The response as it came in `version`.
    pub fn with_version(mut self, version: Version) -> Self {
        self.version = version;
        self
    }

    /// Fails a body read that makes no progress for `timeout`.
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Fails a body read still going at `at`, the end of the exchange `deadline` after its
    /// start (`--request-deadline`), however the bytes trickle.
    pub fn with_deadline(mut self, at: Instant, deadline: Duration) -> Self {
        self.end_by = Some((at, deadline));
        self
    }

    /// The next chunk of the body, or `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, TransportError> {
        let body = match &mut self.body {
            Body::Whole(whole) => return Ok(whole.take()),
            Body::Stream(stream) => stream,
        };
        // A chunk the body has ready (a small body read with its head, the rest of a
        // buffer) is taken without reading the clock or making a timer: a timeout polls its
        // future before its timer, so a ready chunk is never timed out anyway. Only a body
        // that has to wait is timed.
        let ready = std::future::poll_fn(|cx| {
            Poll::Ready(match body.as_mut().poll_next(cx) {
                Poll::Ready(next) => Some(next),
                Poll::Pending => None,
            })
        })
        .await;
        if let Some(next) = ready {
            return next.transpose();
        }
        let idle = self.idle_timeout.map(|t| Instant::now() + t);
        let (at, deadline) = match (idle, self.end_by) {
            (None, None) => return body.next().await.transpose(),
            (Some(i), Some((end, d))) if end <= i => (end, Some(d)),
            (Some(i), _) => (i, None),
            (None, Some((end, d))) => (end, Some(d)),
        };
        match tokio::time::timeout_at(at, body.next()).await {
            Ok(next) => next.transpose(),
            Err(_) => {
                let why = match (deadline, self.idle_timeout) {
                    (Some(d), _) => deadline_message(d),
                    (None, Some(t)) => {
                        format!("no body data for {}", humantime::format_duration(t))
                    }
                    (None, None) => "no body data".to_owned(),
                };
                Err(TransportError::new(ErrorKind::Timeout, why))
            }
        }
    }

    /// Reads the whole body, failing once it exceeds `limit` bytes.
    pub async fn bytes_limited(mut self, limit: usize) -> Result<Bytes, TransportError> {
        if let Body::Whole(whole) = &mut self.body {
            let whole = whole.take().unwrap_or_default();
            if whole.len() > limit {
                return Err(too_large(limit));
            }
            return Ok(whole);
        }
        let mut first: Option<Bytes> = None;
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            let total = first.as_ref().map_or(0, |b| b.len()) + buf.len() + chunk.len();
            if total > limit {
                return Err(too_large(limit));
            }
            match first.take() {
                None if buf.is_empty() => first = Some(chunk),
                None => buf.extend_from_slice(&chunk),
                Some(f) => {
                    buf.extend_from_slice(&f);
                    buf.extend_from_slice(&chunk);
                }
            }
        }
        Ok(first.unwrap_or_else(|| Bytes::from(buf)))
    }

    /// Reads and discards the rest of the body so the connection can be reused; returns
    /// the bytes read. A body longer than [`DRAIN_LIMIT`] (an answer that should be
    /// small: a HEAD's, a redirect's, an error's) is abandoned with its connection, a
    /// `too_large` error.
    pub async fn drain(mut self) -> Result<u64, TransportError> {
        let mut n = 0u64;
        while let Some(chunk) = self.chunk().await? {
            n += chunk.len() as u64;
            if n > DRAIN_LIMIT {
                return Err(TransportError::new(
                    ErrorKind::TooLarge,
                    format!("a body that should be small ran past {DRAIN_LIMIT} bytes"),
                ));
            }
        }
        Ok(n)
    }

    /// A header as a string, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get_str(name)
    }
}

/// A body past `limit` bytes, refused.
fn too_large(limit: usize) -> TransportError {
    TransportError::new(
        ErrorKind::TooLarge,
        format!("response body larger than {limit} bytes"),
    )
}

/// Why an exchange that outlived `--request-deadline` failed.
pub(crate) fn deadline_message(deadline: Duration) -> String {
    format!(
        "the exchange did not end within {} (--request-deadline)",
        humantime::format_duration(deadline)
    )
}

/// The most of an answer [`HttpResponse::drain`] reads: bodies it discards are small (a
/// registry's `GET /v2/`, HEAD, redirect and error answers).
pub const DRAIN_LIMIT: u64 = 1 << 20;

/// Sends one HTTP request and resolves when its response headers arrive.
pub trait Transport: Send + Sync + fmt::Debug {
    /// Borrowed: an exchange keeps its request for a retry or a redirect, and an attempt
    /// that adds nothing to it is sent as it is, not copied.
    fn send<'a>(
        &'a self,
        request: &'a HttpRequest,
    ) -> BoxFuture<'a, Result<HttpResponse, TransportError>>;

    /// What the transport knows of its connections to `origin` (`scheme://host:port`):
    /// how many it opened and what they negotiated. `None` when it does not track them.
    fn link(&self, origin: &Url) -> Option<super::links::Link> {
        let _ = origin;
        None
    }

    /// How stress mode's event loop may speak plain HTTP/1.1 for this transport: `None`
    /// unless the transport's own `http://` requests are written and read by creb-rs (the
    /// hyper transport's plain pool), whose framing, deadlines and connections the loop
    /// shares.
    fn plain_lane(&self) -> Option<PlainLane> {
        None
    }
}

/// What stress mode's event loop (`src/exec/lane.rs`) shares with a transport whose
/// `http://` requests go through its plain pool: the pool (to hand a connection over with
/// an answer the loop does not read to its end, and to count the loop's connections), the
/// deadlines, and the `User-Agent` its requests carry.
pub struct PlainLane {
    pub(crate) host: std::sync::Arc<dyn PlainHost>,
    pub(crate) config: std::sync::Arc<super::config::TransportConfig>,
    pub(crate) user_agent: http::HeaderValue,
}

impl fmt::Debug for PlainLane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainLane").finish_non_exhaustive()
    }
}

/// The plain pool as stress mode's event loop sees it.
pub(crate) trait PlainHost: Send + Sync {
    /// Counts a connection to `origin` the loop opened, as the pool counts its own.
    fn opened(&self, origin: &Url);

    /// Takes over a connection of the loop with the answer it was reading (`head` read,
    /// `read` what came after it), whose body is read from it as the pool reads its own
    /// answers' (under `config`'s deadlines, the exchange over by `end_by`). Must run on
    /// the runtime: the socket is registered with its driver.
    fn adopt(
        &self,
        origin: &Url,
        stream: std::net::TcpStream,
        read: bytes::BytesMut,
        head: super::h1::Head,
        config: &super::config::TransportConfig,
        end_by: Instant,
    ) -> Result<HttpResponse, TransportError>;
}

/// An empty body stream, for responses without content.
pub fn empty_body() -> BodyStream {
    Box::pin(futures_util::stream::empty())
}

/// A body stream of fixed chunks.
pub fn body_from_chunks(chunks: Vec<Bytes>) -> BodyStream {
    Box::pin(futures_util::stream::iter(chunks.into_iter().map(Ok)))
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;

    #[tokio::test]
    async fn bytes_limited_joins_and_limits() {
        let resp = HttpResponse::new(
            StatusCode::OK,
            HeaderMap::new(),
            body_from_chunks(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]),
        );
        assert_eq!(&resp.bytes_limited(10).await.unwrap()[..], b"abcd");
        let resp = HttpResponse::new(
            StatusCode::OK,
            HeaderMap::new(),
            body_from_chunks(vec![Bytes::from_static(b"abcdef")]),
        );
        assert_eq!(
            resp.bytes_limited(3).await.unwrap_err().kind,
            ErrorKind::TooLarge
        );
    }

    /// A body that came with its head is taken once, whole, and limited as a streamed one.
    #[tokio::test]
    async fn a_whole_body_is_taken_once_and_limited() {
        let body = Bytes::from_static(b"abcdef");
        let mut resp = HttpResponse::whole(StatusCode::OK, HeaderMap::new(), body.clone());
        assert_eq!(resp.chunk().await.unwrap(), Some(body.clone()));
        assert_eq!(resp.chunk().await.unwrap(), None);
        let resp = HttpResponse::whole(StatusCode::OK, HeaderMap::new(), body.clone());
        assert_eq!(resp.bytes_limited(6).await.unwrap(), body);
        let resp = HttpResponse::whole(StatusCode::OK, HeaderMap::new(), body);
        let err = resp.bytes_limited(5).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::TooLarge);
        let empty = HttpResponse::whole(StatusCode::NO_CONTENT, HeaderMap::new(), Bytes::new());
        assert_eq!(empty.drain().await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_body_times_out() {
        let stalled: BodyStream = Box::pin(futures_util::stream::pending());
        let mut resp = HttpResponse::new(StatusCode::OK, HeaderMap::new(), stalled)
            .with_idle_timeout(Duration::from_secs(5));
        let err = resp.chunk().await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
    }

    /// A chunk the body has ready is taken at once, one it waits for within the idle
    /// timeout arrives, and a body that stops after it times out from its last chunk.
    #[tokio::test(start_paused = true)]
    async fn ready_chunks_are_taken_and_a_waiting_body_is_timed() {
        let steps = futures_util::stream::unfold(0u8, |step| async move {
            match step {
                0 => Some((Ok(Bytes::from_static(b"ab")), 1)),
                1 => {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    Some((Ok(Bytes::from_static(b"cd")), 2))
                }
                _ => futures_util::future::pending().await,
            }
        });
        let start = Instant::now();
        let mut resp = HttpResponse::new(StatusCode::OK, HeaderMap::new(), Box::pin(steps))
            .with_idle_timeout(Duration::from_secs(5))
            .with_deadline(start + Duration::from_secs(60), Duration::from_secs(60));
        assert_eq!(&resp.chunk().await.unwrap().unwrap()[..], b"ab");
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(&resp.chunk().await.unwrap().unwrap()[..], b"cd");
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        let err = resp.chunk().await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Timeout);
        assert_eq!(start.elapsed(), Duration::from_secs(8));
    }
}
