//! The real transport: reqwest on hyper, rustls with the ring provider.
//!
//! Configuration choices and why: automatic redirects off (the client follows them to time
//! each hop and to keep `Authorization` on its origin); system proxy off (a benchmark must
//! measure the path it was pointed at); TLS verification on unless `--insecure`; a connection
//! pool at least as large as the in-flight limit so stress mode does not reconnect.
//!
//! Timeouts are enforced here rather than with reqwest's, whose read timeout also bounds the
//! time spent *sending* a body: `request_timeout` runs from the end of the request body to the
//! response headers; `body_idle_timeout` fails an upload whose body stops being consumed and
//! a download whose body stops arriving.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::header::CONTENT_LENGTH;
use http::HeaderValue;
use tokio::time::Instant;

use super::transport::{HttpRequest, HttpResponse, RequestBody, Transport, TransportError};
use crate::metrics::ErrorKind;

/// Network settings of a run; recorded in the result metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TransportConfig {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub body_idle_timeout: Duration,
    /// Skip TLS certificate verification (`--insecure`).
    pub insecure: bool,
    /// Extra PEM root certificates (`--ca-cert`).
    #[serde(skip)]
    pub extra_roots_pem: Vec<Vec<u8>>,
    pub pool_max_idle_per_host: usize,
    pub user_agent: String,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            body_idle_timeout: Duration::from_secs(30),
            insecure: false,
            extra_roots_pem: Vec::new(),
            pool_max_idle_per_host: 64,
            user_agent: concat!("creb-rs/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// reqwest-backed [`Transport`].
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    config: Arc<TransportConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum TransportBuildError {
    #[error("cannot read CA certificate: {0}")]
    Certificate(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

impl ReqwestTransport {
    pub fn new(config: TransportConfig) -> Result<Self, TransportBuildError> {
        // reqwest is built without a default crypto provider; ring is ours. Installing twice
        // (several clients in one process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(config.connect_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .user_agent(config.user_agent.clone())
            .tls_danger_accept_invalid_certs(config.insecure);
        for pem in &config.extra_roots_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| TransportBuildError::Certificate(e.to_string()))?;
            if certs.is_empty() {
                return Err(TransportBuildError::Certificate(
                    "no PEM certificate found".into(),
                ));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| TransportBuildError::Client(e.without_url().to_string()))?;
        Ok(ReqwestTransport {
            client,
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &TransportConfig {
        &self.config
    }
}

/// Progress of a streamed request body, shared with the watchdog.
#[derive(Debug)]
struct Progress {
    base: Instant,
    /// Nanoseconds after `base` of the last chunk handed to the connection.
    last_ns: AtomicU64,
    /// Nanoseconds after `base` at which the body was complete; 0 while it is not.
    done_ns: AtomicU64,
}

impl Progress {
    fn stamp(&self) -> u64 {
        // At least 1 so that 0 keeps meaning "not done".
        (Instant::now().duration_since(self.base).as_nanos() as u64).max(1)
    }
}

fn body_of(request: &mut HttpRequest, progress: &Arc<Progress>) -> Option<reqwest::Body> {
    match std::mem::replace(&mut request.body, RequestBody::Empty) {
        RequestBody::Empty => None,
        RequestBody::Bytes(b) => Some(reqwest::Body::from(b)),
        RequestBody::Content { spec, range } => {
            let reader = spec.reader(range);
            let progress = Arc::clone(progress);
            let mut reader = reader.peekable();
            let stream = futures_util::stream::poll_fn(move |_| {
                let next = reader.next();
                let now = progress.stamp();
                progress.last_ns.store(now, Ordering::Relaxed);
                if reader.peek().is_none() {
                    progress.done_ns.store(now, Ordering::Relaxed);
                }
                std::task::Poll::Ready(next.map(Ok::<Bytes, std::io::Error>))
            });
            Some(reqwest::Body::wrap_stream(stream))
        }
    }
}

impl Transport for ReqwestTransport {
    fn send(
        &self,
        mut request: HttpRequest,
    ) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let base = Instant::now();
            let progress = Arc::new(Progress {
                base,
                last_ns: AtomicU64::new(1),
                done_ns: AtomicU64::new(0),
            });
            let streamed = matches!(request.body, RequestBody::Content { .. });
            if !streamed {
                progress.done_ns.store(1, Ordering::Relaxed);
            }
            let length = request.body.len();
            let has_body = !matches!(request.body, RequestBody::Empty);
            let body = body_of(&mut request, &progress);
            let mut headers = std::mem::take(&mut request.headers);
            if has_body || matches!(request.method.as_str(), "PUT" | "POST" | "PATCH") {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
            }
            let mut builder = self
                .client
                .request(request.method, request.url)
                .headers(headers);
            if let Some(body) = body {
                builder = builder.body(body);
            }
            let send = builder.send();
            tokio::pin!(send);
            let config = &self.config;
            let response = loop {
                let done = progress.done_ns.load(Ordering::Relaxed);
                let deadline = if done != 0 {
                    base + Duration::from_nanos(done) + config.request_timeout
                } else {
                    base + Duration::from_nanos(progress.last_ns.load(Ordering::Relaxed))
                        + config.body_idle_timeout
                };
                tokio::select! {
                    r = &mut send => break r.map_err(|e| classify(&e)),
                    _ = tokio::time::sleep_until(deadline) => {
                        // Progress may have moved the deadline while we slept.
                        let done_now = progress.done_ns.load(Ordering::Relaxed);
                        let last_now = progress.last_ns.load(Ordering::Relaxed);
                        let expired = if done_now != 0 {
                            Instant::now() >= base + Duration::from_nanos(done_now) + config.request_timeout
                        } else {
                            Instant::now() >= base + Duration::from_nanos(last_now) + config.body_idle_timeout
                        };
                        if expired {
                            let what = if done_now != 0 {
                                format!("no response within {}", humantime::format_duration(config.request_timeout))
                            } else {
                                format!("request body not consumed for {}", humantime::format_duration(config.body_idle_timeout))
                            };
                            break Err(TransportError::new(ErrorKind::Timeout, what));
                        }
                    }
                }
            }?;
            let mut response = response;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let body = response
                .bytes_stream()
                .map(|r| r.map_err(|e| classify_body(&e)));
            Ok(HttpResponse::new(status, headers, Box::pin(body))
                .with_idle_timeout(config.body_idle_timeout))
        })
    }
}

/// Maps a reqwest error to an [`ErrorKind`] by walking its source chain.
pub fn classify(err: &reqwest::Error) -> TransportError {
    let message = describe(err);
    if err.is_timeout() {
        return TransportError::new(ErrorKind::Timeout, message);
    }
    let mut kind = if err.is_connect() {
        ErrorKind::Connect
    } else if err.is_body() || err.is_decode() {
        ErrorKind::Body
    } else {
        ErrorKind::Other
    };
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            match io.kind() {
                Io::ConnectionRefused
                | Io::AddrNotAvailable
                | Io::HostUnreachable
                | Io::NetworkUnreachable => kind = ErrorKind::Connect,
                Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe => {
                    kind = ErrorKind::Reset
                }
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
                kind = ErrorKind::Reset;
            }
        }
        let text = e.to_string();
        if text.contains("dns error") || text.contains("failed to lookup address") {
            kind = ErrorKind::Dns;
        }
        source = e.source();
    }
    TransportError::new(kind, message)
}

/// Whether `e` is a rustls error, possibly inside `io::Error`s: a refused certificate comes
/// as io(Other, io(InvalidData, rustls)), and `io::Error::source()` skips the wrapped error
/// itself, so walking the source chain alone calls it `connect`.
fn is_rustls(mut e: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if e.is::<rustls::Error>() {
            return true;
        }
        match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => e = inner,
            None => return false,
        }
    }
}

/// Like [`classify`], for errors while reading a response body: a connection that closes
/// before the announced length is a short body.
fn classify_body(err: &reqwest::Error) -> TransportError {
    let mut t = classify(err);
    if matches!(
        t.kind,
        ErrorKind::Reset | ErrorKind::Other | ErrorKind::Body
    ) {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(e) = source {
            if let Some(h) = e.downcast_ref::<hyper::Error>() {
                if h.is_incomplete_message() {
                    t.kind = ErrorKind::ShortBody;
                }
            }
            if e.to_string()
                .contains("end of file before message length reached")
            {
                t.kind = ErrorKind::ShortBody;
            }
            source = e.source();
        }
    }
    t
}

/// The error chain as one line, without URLs (presigned URLs carry signatures).
fn describe(err: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    let top = {
        // `without_url` needs ownership; format the kind-level text ourselves instead.
        let s = err.to_string();
        match s.find(" for url (") {
            Some(i) => s[..i].to_owned(),
            None => s,
        }
    };
    parts.push(top);
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
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
    }
}
