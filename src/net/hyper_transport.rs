//! The hyper transport (`--http-client hyper`, the default): for `http://` registries a
//! pool of HTTP/1.1 connections of creb-rs's own that each request drives in its own task
//! (`src/net/plain_pool.rs`, framing in `src/net/h1.rs`); for `https://` hyper-util's
//! pooled client with rustls (ring) through hyper-rustls, which negotiates HTTP/2 where the
//! registry offers it. Neither goes through reqwest's layers.
//!
//! Why it exists beside [`super::reqwest_transport`]: reqwest does not expose hyper's limit
//! on a connection's read buffer, which grows with the bodies it carries and stays with the
//! connection while it idles in the pool (about 60 KB each, 15 MB at 256 connections); here
//! it is `read_buffer_max`, and a plain connection gives its buffer back when it idles. A
//! request also skips reqwest's per-request layers (its own header and URL handling,
//! redirect and proxy machinery), which this tool switches off anyway. Behaviour is the
//! same: see [`crate::net`] for the shared rules.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{CONTENT_LENGTH, USER_AGENT};
use http::HeaderValue;
use http_body::Body;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use super::classify::{body_kind, classify_chain, describe_chain, unprocessed_of};
use super::config::{TransportBuildError, TransportConfig, MIN_READ_BUFFER};
use super::deadline::{within_deadlines, Progress, ProgressReader};

use super::links::{alpn_name, origin_key, tls_name, Link, Links, Negotiated};
use super::plain_pool::{plain_response, PlainPool, PlainRequest, PoolSettings};
use super::req_body::{BodyKind, ContentBody, ReqBody};
use super::transport::{
    boxed_in_place, HttpRequest, HttpResponse, PlainHost, PlainLane, RequestBody, Transport,
    TransportError,
};
use crate::metrics::ErrorKind;

type Https = HttpsConnector<HttpConnector>;

/// How long an idle pooled connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// hyper-backed [`Transport`].
#[derive(Debug, Clone)]
pub struct HyperTransport {
    plain: Arc<PlainPool>,
    client: Client<Connector, ReqBody>,
    config: Arc<TransportConfig>,
    user_agent: HeaderValue,
    links: Arc<Links>,
}

/// hyper-rustls's connector, noting each new connection and what it negotiated in
/// [`Links`] (once per connection; requests on it cost nothing here).
#[derive(Debug, Clone)]
struct Connector {
    inner: Https,
    links: Arc<Links>,
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = <Https as tower_service::Service<http::Uri>>::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let links = Arc::clone(&self.links);
        let https = uri.scheme_str() == Some("https");
        let origin = format!(
            "{}://{}:{}",
            uri.scheme_str().unwrap_or("http"),
            uri.host().unwrap_or_default(),
            uri.port_u16().unwrap_or(if https { 443 } else { 80 })
        );
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let stream = connecting.await?;
            let negotiated = match &stream {
                MaybeHttpsStream::Http(_) => Negotiated {
                    http2: false,
                    tls: None,
                    alpn: None,
                },
                MaybeHttpsStream::Https(tls) => {
                    let (_, session) = tls.inner().get_ref();
                    let alpn = session.alpn_protocol().and_then(alpn_name);
                    Negotiated {
                        http2: alpn == Some("h2"),
                        tls: session.protocol_version().map(tls_name),
                        alpn,
                    }
                }
            };
            links.opened(&origin, negotiated);
            Ok(stream)
        })
    }
}

impl HyperTransport {
    pub fn new(config: TransportConfig) -> Result<Self, TransportBuildError> {
        let tls = super::tls::client_config(&config)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let links = Arc::new(Links::default());
        let https = Connector {
            inner: https,
            links: Arc::clone(&links),
        };
        let read_buffer_max = config.read_buffer_max.max(MIN_READ_BUFFER);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .pool_idle_timeout(IDLE_TIMEOUT)
            .http1_max_buf_size(read_buffer_max)
            .build(https);
        let user_agent = HeaderValue::from_str(&config.user_agent)
            .map_err(|e| TransportBuildError::Client(format!("user agent: {e}")))?;
        let plain = Arc::new(PlainPool::new(
            PoolSettings {
                connect_timeout: config.connect_timeout,
                max_idle: config.pool_max_idle_per_host,
                idle_timeout: IDLE_TIMEOUT,
                read_buffer_max,
            },
            Arc::clone(&links),
        ));
        Ok(HyperTransport {
            plain,
            client,
            config: Arc::new(config),
            user_agent,
            links,
        })
    }

    pub fn config(&self) -> &TransportConfig {
        &self.config
    }
}

impl Transport for HyperTransport {
    #[allow(clippy::too_many_lines)]
    fn send<'a>(
        &'a self,
        request: &'a HttpRequest,
    ) -> BoxFuture<'a, Result<HttpResponse, TransportError>> {
        // Made in its heap slot: built on the stack first, all of its 1.2 kB would be
        // copied there for every request.
        boxed_in_place(|| async move {
            let HttpRequest {
                method,
                url,
                headers,
                body,
            } = request;
            let length = body.len();
            // Only a request that carries a length is copied to add it.
            let with_length;
            let headers = if !matches!(body, RequestBody::Empty)
                || matches!(method.as_str(), "PUT" | "POST" | "PATCH")
            {
                let mut h = headers.clone();
                h.insert(CONTENT_LENGTH, HeaderValue::from(length));
                with_length = h;
                &with_length
            } else {
                headers
            };
            // A request naming no `User-Agent` is sent with the transport's: written into
            // the head on plain HTTP, inserted for hyper otherwise.
            let user_agent = (!headers.contains_key(USER_AGENT)).then_some(&self.user_agent);
            // Only a streamed body shares its progress with the connection's task; any other
            // counts as sent at once and is tracked here, without an allocation.
            let (body, shared) = match body {
                RequestBody::Empty => (BodyKind::Empty, None),
                RequestBody::Bytes(b) => (BodyKind::Bytes(Some(b.clone())), None),
                RequestBody::Content { spec, range, tap } => {
                    let progress = Arc::new(Progress::start(true));
                    let reader = spec.reader(range.clone()).tapped(tap.clone());
                    let chunks = ProgressReader::new(reader, Arc::clone(&progress));
                    let body = BodyKind::Content(Box::new(ContentBody {
                        chunks,
                        remaining: length,
                    }));
                    (body, Some(progress))
                }
            };
            let local;
            let progress: &Progress = match &shared {
                Some(p) => p,
                None => {
                    local = Progress::start(false);
                    &local
                }
            };
            let config = &self.config;
            if url.scheme() == "http" {
                // HTTP/1.1 on a connection of our own: the request line carries the path
                // and query only; the pool adds `Host`.
                let req = PlainRequest {
                    method,
                    target: url.target(),
                    headers,
                    user_agent,
                    deadlines: Some((progress, config)),
                };
                let (head, body) = self.plain.send(url.origin(), req, body).await?;
                return Ok(plain_response(head, body, config, progress.end_by(config)));
            }
            // hyper takes its request's parts by value.
            let mut headers = headers.clone();
            if let Some(agent) = user_agent {
                headers.insert(USER_AGENT, agent.clone());
            }
            let mut req = http::Request::new(ReqBody(body));
            *req.method_mut() = method.clone();
            *req.headers_mut() = headers.into_map();
            // Joined once (kept by the request for a retry), copied once into the URI.
            *req.uri_mut() = uri_of(url.as_str())?;
            let send = async { self.client.request(req).await.map_err(|e| classify(&e)) };
            let response = within_deadlines(std::pin::pin!(send), progress, config).await?;
            let (parts, incoming) = response.into_parts();
            Ok(
                HttpResponse::new(parts.status, parts.headers, Box::pin(DataStream(incoming)))
                    .with_version(parts.version)
                    .with_idle_timeout(config.body_idle_timeout)
                    .with_deadline(progress.end_by(config), config.request_deadline),
            )
        })
    }

    fn link(&self, origin: &url::Url) -> Option<Link> {
        self.links.get(&origin_key(origin))
    }

    fn plain_lane(&self) -> Option<PlainLane> {
        Some(PlainLane {
            host: Arc::new(Arc::clone(&self.plain)) as Arc<dyn PlainHost>,
            config: Arc::clone(&self.config),
            user_agent: self.user_agent.clone(),
        })
    }
}

/// `text` as a request URI.
fn uri_of(text: impl Into<String>) -> Result<http::Uri, TransportError> {
    http::Uri::from_maybe_shared(Bytes::from(text.into()))
        .map_err(|e| TransportError::new(ErrorKind::Other, format!("URL not usable for HTTP: {e}")))
}

/// The data frames of a response body (trailers are skipped).
struct DataStream(Incoming);

impl futures_util::Stream for DataStream {
    type Item = Result<Bytes, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let body = &mut self.get_mut().0;
        loop {
            return match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => {
                    let kind = body_kind(&e, ErrorKind::Body);
                    Poll::Ready(Some(Err(TransportError::new(
                        kind,
                        describe_chain(e.to_string(), &e),
                    ))))
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => Poll::Ready(Some(Ok(data))),
                    Err(_trailers) => continue,
                },
            };
        }
    }
}

/// Maps a hyper-util client error to an [`ErrorKind`] by walking its source chain.
fn classify(err: &hyper_util::client::legacy::Error) -> TransportError {
    let kind = if err.is_connect() {
        ErrorKind::Connect
    } else {
        ErrorKind::Other
    };
    let kind = classify_chain(err, kind);
    TransportError::new(kind, describe_chain(err.to_string(), err)).unprocessed(unprocessed_of(err))
}
