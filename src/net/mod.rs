//! What the real transports share: their settings, the deadlines around one exchange, TLS
//! roots and the mapping of low-level errors to an [`ErrorKind`].
//!
//! Two transports implement [`Transport`] over real sockets: [`HyperTransport`] (hyper
//! driven directly, with a bounded per-connection read buffer; the default) and
//! [`ReqwestTransport`] (reqwest over the same hyper). `--http-client` picks one; both
//! follow the same rules so results do not depend on the choice: automatic redirects off
//! (the client follows them to time each hop and to keep `Authorization` on its origin), no
//! system proxy (a benchmark measures the path it was pointed at), TLS verification on
//! unless `--insecure`, a connection pool at least as large as the in-flight limit,
//! TCP_NODELAY.
//!
//! Timeouts are enforced here rather than by the HTTP libraries, whose read timeouts also
//! bound the time spent *sending* a body: `request_timeout` runs from the end of the request
//! body to the response headers; `body_idle_timeout` fails an upload whose body stops being
//! consumed and a download whose body stops arriving.

pub mod hyper_transport;
pub mod links;
mod plain_pool;
pub mod pushgateway;
pub mod reqwest_transport;
pub mod scripted;
pub mod serve;
pub mod tls;
pub mod transport;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use url::Url;

use crate::content::ContentReader;
use crate::metrics::ErrorKind;
use hyper_transport::HyperTransport;
use reqwest_transport::ReqwestTransport;
use transport::{Transport, TransportError, Unprocessed};

/// Which HTTP client library carries the requests (`--http-client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpClient {
    /// hyper directly: `http://` on connections each request drives in its own task,
    /// `https://` through hyper-util's client; bounded read buffers, less work per request.
    #[default]
    Hyper,
    /// reqwest (on the same hyper): the widely used client, for comparison.
    Reqwest,
}

/// Whether `url` names this machine: `localhost` (and its subdomains), 127.0.0.0/8, `::1`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.');
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        None => false,
    }
}

/// hyper's smallest allowed read-buffer limit.
pub const MIN_READ_BUFFER: usize = 8 * 1024;

/// Network settings of a run; recorded in the result metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TransportConfig {
    pub client: HttpClient,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub body_idle_timeout: Duration,
    /// Skip TLS certificate verification (`--insecure`).
    pub insecure: bool,
    /// Extra PEM root certificates (`--ca-cert`).
    #[serde(skip)]
    pub extra_roots_pem: Vec<Vec<u8>>,
    pub pool_max_idle_per_host: usize,
    /// Largest read buffer of one HTTP/1 connection (hyper transport). Bodies stream through
    /// it in chunks of at most this size; it bounds the memory of idle pooled connections.
    pub read_buffer_max: usize,
    pub user_agent: String,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            client: HttpClient::default(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            body_idle_timeout: Duration::from_secs(30),
            insecure: false,
            extra_roots_pem: Vec::new(),
            pool_max_idle_per_host: 64,
            read_buffer_max: 16 * 1024,
            user_agent: concat!("creb-rs/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransportBuildError {
    #[error("cannot read CA certificate: {0}")]
    Certificate(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// The transport `config.client` names.
pub fn build_transport(config: TransportConfig) -> Result<Arc<dyn Transport>, TransportBuildError> {
    Ok(match config.client {
        HttpClient::Hyper => Arc::new(HyperTransport::new(config)?),
        HttpClient::Reqwest => Arc::new(ReqwestTransport::new(config)?),
    })
}

/// The certificates of every `--ca-cert` bundle, in DER.
pub fn extra_roots(
    config: &TransportConfig,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TransportBuildError> {
    use rustls::pki_types::pem::PemObject;
    let mut out = Vec::new();
    for pem in &config.extra_roots_pem {
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| TransportBuildError::Certificate(e.to_string()))?;
        if certs.is_empty() {
            return Err(TransportBuildError::Certificate(
                "no PEM certificate found".into(),
            ));
        }
        out.extend(certs);
    }
    Ok(out)
}

/// Progress of a streamed request body, shared between the body and the deadline watch.
#[derive(Debug)]
pub(crate) struct Progress {
    base: Instant,
    /// Nanoseconds after `base` of the last chunk handed to the connection.
    last_ns: AtomicU64,
    /// Nanoseconds after `base` at which the body was complete; 0 while it is not.
    done_ns: AtomicU64,
}

impl Progress {
    /// Progress of a request sent now; `streamed` bodies report their chunks, any other
    /// body counts as sent at once.
    pub(crate) fn start(streamed: bool) -> Self {
        Progress {
            base: Instant::now(),
            last_ns: AtomicU64::new(1),
            done_ns: AtomicU64::new(if streamed { 0 } else { 1 }),
        }
    }

    fn stamp(&self) -> u64 {
        // At least 1 so that 0 keeps meaning "not done".
        (Instant::now().duration_since(self.base).as_nanos() as u64).max(1)
    }

    fn deadline(&self, config: &TransportConfig) -> (Instant, bool) {
        let done = self.done_ns.load(Ordering::Relaxed);
        if done != 0 {
            (
                self.base + Duration::from_nanos(done) + config.request_timeout,
                true,
            )
        } else {
            let last = self.last_ns.load(Ordering::Relaxed);
            (
                self.base + Duration::from_nanos(last) + config.body_idle_timeout,
                false,
            )
        }
    }
}

/// Generated content as body chunks, stamping `progress` as each one is handed over.
pub(crate) struct ProgressReader {
    reader: std::iter::Peekable<ContentReader>,
    progress: Arc<Progress>,
}

impl ProgressReader {
    pub(crate) fn new(reader: ContentReader, progress: Arc<Progress>) -> Self {
        ProgressReader {
            reader: reader.peekable(),
            progress,
        }
    }
}

impl std::fmt::Debug for ProgressReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReader").finish_non_exhaustive()
    }
}

impl Iterator for ProgressReader {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let next = self.reader.next();
        let now = self.progress.stamp();
        self.progress.last_ns.store(now, Ordering::Relaxed);
        if self.reader.peek().is_none() {
            self.progress.done_ns.store(now, Ordering::Relaxed);
        }
        next
    }
}

/// Awaits `send` (request out, response headers in) under the run's deadlines: the body
/// must keep moving while it is sent, and the headers must come within `request_timeout`
/// of the body's end.
pub(crate) async fn within_deadlines<T, F>(
    send: F,
    progress: &Progress,
    config: &TransportConfig,
) -> Result<T, TransportError>
where
    F: Future<Output = Result<T, TransportError>>,
{
    tokio::pin!(send);
    loop {
        let (deadline, _) = progress.deadline(config);
        tokio::select! {
            r = &mut send => return r,
            _ = tokio::time::sleep_until(deadline) => {
                // Progress may have moved the deadline while we slept.
                let (deadline, body_done) = progress.deadline(config);
                if Instant::now() >= deadline {
                    let what = if body_done {
                        format!("no response within {}", humantime::format_duration(config.request_timeout))
                    } else {
                        format!("request body not consumed for {}", humantime::format_duration(config.body_idle_timeout))
                    };
                    return Err(TransportError::new(ErrorKind::Timeout, what));
                }
            }
        }
    }
}

/// Refines `kind` by what the error chain below `err` says: refused or reset connections,
/// timeouts, early ends, TLS and DNS failures.
pub(crate) fn classify_chain(
    err: &(dyn std::error::Error + 'static),
    mut kind: ErrorKind,
) -> ErrorKind {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            match io.kind() {
                Io::ConnectionRefused
                | Io::AddrNotAvailable
                | Io::HostUnreachable
                | Io::NetworkUnreachable => kind = ErrorKind::Connect,
                Io::ConnectionReset | Io::ConnectionAborted => kind = ErrorKind::Reset,
                Io::BrokenPipe => kind = ErrorKind::ConnectionClosed,
                Io::TimedOut => kind = ErrorKind::Timeout,
                Io::UnexpectedEof => kind = ErrorKind::ShortBody,
                _ => {}
            }
        }
        if is_rustls(e) {
            kind = ErrorKind::Tls;
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                kind = ErrorKind::ConnectionClosed;
            }
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let closed_under_us = h2.is_go_away()
                || h2
                    .get_io()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if closed_under_us {
                kind = ErrorKind::ConnectionClosed;
            } else if h2.is_reset() {
                kind = ErrorKind::Reset;
            }
        }
        let text = e.to_string();
        if text.contains("dns error") || text.contains("failed to lookup address") {
            kind = ErrorKind::Dns;
        }
        source = e.source();
    }
    kind
}

/// A body-read error's kind: a connection that closes before the announced length is a
/// short body.
pub(crate) fn body_kind(err: &(dyn std::error::Error + 'static), kind: ErrorKind) -> ErrorKind {
    let kind = classify_chain(err, kind);
    if !matches!(
        kind,
        ErrorKind::Reset | ErrorKind::ConnectionClosed | ErrorKind::Other | ErrorKind::Body
    ) {
        return kind;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
            || e.to_string()
                .contains("end of file before message length reached")
        {
            return ErrorKind::ShortBody;
        }
        source = e.source();
    }
    kind
}

/// Whether the server provably never processed the request that failed with `err`: an
/// HTTP/2 stream above the last stream id of the server's GOAWAY, or one it refused
/// (RFC 9113 §8.7). Such a request can go out again on another connection.
pub(crate) fn unprocessed_of(err: &(dyn std::error::Error + 'static)) -> Option<Unprocessed> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.is_remote() && h2.is_go_away() {
                return Some(Unprocessed::GoAway);
            }
            if h2.is_remote() && h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return Some(Unprocessed::RefusedStream);
            }
        }
        source = e.source();
    }
    None
}

/// The error chain below (and including) `top` as one line, each distinct message once; a
/// refused certificate or a server that does not speak TLS is said plainly first, with
/// what to do.
pub(crate) fn describe_chain(top: String, err: &(dyn std::error::Error + 'static)) -> String {
    let detail = chain_text(top, err);
    match rustls_error(err).and_then(tls::advice) {
        Some(advice) => format!("{advice} ({detail})"),
        None => detail,
    }
}

fn chain_text(top: String, err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![top];
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

/// Whether `e` is a rustls error, possibly inside `io::Error`s: a refused certificate comes
/// as io(Other, io(InvalidData, rustls)), and `io::Error::source()` skips the wrapped error
/// itself, so walking the source chain alone calls it `connect`.
fn is_rustls(e: &(dyn std::error::Error + 'static)) -> bool {
    rustls_inside(e).is_some()
}

fn rustls_inside<'e>(mut e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    loop {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        e = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())?;
    }
}

/// The rustls error anywhere in `err`'s chain.
fn rustls_error<'e>(err: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(r) = rustls_inside(e) {
            return Some(r);
        }
        source = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_inside_nested_io_errors_is_tls() {
        // How hyper-util hands over a failed handshake (tests/tls.rs sees it for real).
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        let outer = std::io::Error::other(inner);
        assert!(is_rustls(&outer));
        assert!(!is_rustls(&std::io::Error::other("refused")));
        assert_eq!(classify_chain(&outer, ErrorKind::Other), ErrorKind::Tls);
    }

    #[test]
    fn io_errors_map_to_their_kinds() {
        let cases = [
            (std::io::ErrorKind::ConnectionRefused, ErrorKind::Connect),
            (std::io::ErrorKind::ConnectionReset, ErrorKind::Reset),
            (std::io::ErrorKind::BrokenPipe, ErrorKind::ConnectionClosed),
            (std::io::ErrorKind::TimedOut, ErrorKind::Timeout),
            (std::io::ErrorKind::UnexpectedEof, ErrorKind::ShortBody),
            (std::io::ErrorKind::PermissionDenied, ErrorKind::Other),
        ];
        for (io, want) in cases {
            let e = std::io::Error::new(io, "x");
            assert_eq!(classify_chain(&e, ErrorKind::Other), want, "{io:?}");
        }
        let dns = std::io::Error::other("dns error: failed to lookup address information");
        assert_eq!(classify_chain(&dns, ErrorKind::Connect), ErrorKind::Dns);
    }

    #[test]
    fn a_body_cut_short_is_a_short_body() {
        let e = std::io::Error::other("end of file before message length reached");
        assert_eq!(body_kind(&e, ErrorKind::Body), ErrorKind::ShortBody);
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "x");
        assert_eq!(body_kind(&refused, ErrorKind::Body), ErrorKind::Connect);
    }

    #[test]
    fn ca_bundles_without_certificates_are_refused() {
        let config = TransportConfig {
            extra_roots_pem: vec![b"not a certificate".to_vec()],
            ..TransportConfig::default()
        };
        assert!(matches!(
            extra_roots(&config),
            Err(TransportBuildError::Certificate(_))
        ));
    }
}
