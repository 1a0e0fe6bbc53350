//! Plain-HTTP/1.1 connections driven by the task that sends on them (`http://` registries
//! with the hyper transport).
//!
//! hyper-util's pooled client runs every connection in a task of its own: a request is
//! handed to that task through a channel and its response and body come back through two
//! more, so each exchange wakes another task several times. Here a connection is a pair
//! of hyper's [`http1::SendRequest`] and [`http1::Connection`], and the operation's own
//! task polls the connection while it waits for the response headers and while it reads
//! the body. When the body has ended the pair goes back to its origin's idle list; a body
//! dropped before its end closes the connection, as HTTP/1 requires.
//!
//! An idle connection the server has closed is found out when it is next taken: driving it
//! reads the end of the stream, it refuses the request unsent, and the request goes out on
//! the next idle connection or a new one. A request that was sent is never sent again here
//! (the client's `--retry` decides that). `https://` registries keep hyper-util's client,
//! which negotiates TLS and HTTP/2.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderValue, Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use url::{Host, Position, Url};

use super::classify::{body_kind, classify_chain, describe_chain};
use super::links::{origin_key, Links, Negotiated};
use super::req_body::ReqBody;
use super::transport::TransportError;
use crate::metrics::ErrorKind;

type Driver = http1::Connection<TokioIo<TcpStream>, ReqBody>;

/// New connections one request may open because the ones before it closed unsent; idle
/// connections found closed are not counted.
const FRESH_TRIES: u32 = 3;

/// Settings of a [`PlainPool`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolSettings {
    pub connect_timeout: Duration,
    /// Idle connections kept per origin.
    pub max_idle: usize,
    /// An idle connection older than this is closed instead of reused.
    pub idle_timeout: Duration,
    /// Largest read buffer of a connection.
    pub read_buffer_max: usize,
}

/// Idle plain-HTTP/1.1 connections by origin.
pub(crate) struct PlainPool {
    settings: PoolSettings,
    /// Connections opened, by origin.
    links: Arc<Links>,
    /// Few origins per run (one per registry endpoint, plus a token realm or storage
    /// redirect target), so a list searched by authority.
    origins: Mutex<Vec<Origin>>,
}

impl std::fmt::Debug for PlainPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainPool")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

struct Origin {
    /// `host[:port]` as the URL writes it (no default port).
    authority: Box<str>,
    host: HeaderValue,
    /// Oldest first; taken from the back.
    idle: VecDeque<(Conn, Instant)>,
}

/// One connection: hyper's sending half and the connection itself, which only makes
/// progress while it is polled.
pub(crate) struct Conn {
    sender: http1::SendRequest<ReqBody>,
    /// `None` once the connection has ended. Boxed: hyper's connection state is most of a
    /// kilobyte, and a connection moves between the pool, the request's future (idle and
    /// in use) and its response body.
    driver: Option<Pin<Box<Driver>>>,
    /// What it ended with, when that was an error.
    failure: Option<hyper::Error>,
}

impl Conn {
    /// Lets the connection do its reading and writing; nothing once it has ended.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(driver) = &mut self.driver {
            if let Poll::Ready(end) = driver.as_mut().poll(cx) {
                self.driver = None;
                self.failure = end.err();
            }
        }
    }

    fn is_open(&self) -> bool {
        self.driver.is_some() && !self.sender.is_closed()
    }
}

/// Why an exchange produced no response.
enum Failed {
    /// The connection closed before taking the request, which comes back unsent.
    /// Boxed: a rare path, and the request is large.
    Unsent(Box<Request<ReqBody>>, hyper::Error),
    Sent(hyper::Error),
}

impl PlainPool {
    pub(crate) fn new(settings: PoolSettings, links: Arc<Links>) -> Self {
        PlainPool {
            settings,
            links,
            origins: Mutex::new(Vec::new()),
        }
    }

    /// Sends `req` to `url`'s origin and resolves when the response headers have arrived;
    /// the returned body keeps driving the connection and gives it back at its end.
    pub(crate) async fn send(
        self: &Arc<Self>,
        url: &Url,
        mut req: Request<ReqBody>,
    ) -> Result<Response<PooledBody>, TransportError> {
        let authority = &url[Position::BeforeHost..Position::AfterPort];
        let (origin, host, mut idle) = self.checkout(authority)?;
        req.headers_mut().insert(HOST, host);
        let mut fresh = 0;
        loop {
            let (mut conn, reused) = match idle.take() {
                Some(conn) => (conn, true),
                None => {
                    fresh += 1;
                    // Boxed: once per connection, and its future is larger than an exchange's.
                    (Box::pin(self.connect(url)).await?, false)
                }
            };
            match exchange(&mut conn, req).await {
                Ok(response) => {
                    let (parts, incoming) = response.into_parts();
                    let body = PooledBody {
                        incoming,
                        conn: Some(conn),
                        origin,
                        pool: Arc::clone(self),
                    };
                    return Ok(Response::from_parts(parts, body));
                }
                Err(Failed::Unsent(unsent, _)) if reused || fresh < FRESH_TRIES => {
                    tracing::debug!(
                        authority,
                        reused,
                        "connection closed before the request; sending it on another"
                    );
                    req = *unsent;
                    idle = self.take(origin);
                }
                Err(Failed::Unsent(_, e) | Failed::Sent(e)) => {
                    return Err(exchange_error(&e, conn.failure.as_ref()))
                }
            }
        }
    }

    /// The index and `Host` header of `authority`'s origin (registered on first use) and
    /// its idle connection to use, if one is open: one lock for all three.
    fn checkout(
        &self,
        authority: &str,
    ) -> Result<(usize, HeaderValue, Option<Conn>), TransportError> {
        let mut stale = Vec::new();
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = origins.iter().position(|o| &*o.authority == authority) {
            let host = origins[i].host.clone();
            let conn = self.pop_idle(&mut origins[i], &mut stale);
            drop(origins);
            // Closing a connection is a system call: not while other requests wait for the lock.
            drop(stale);
            return Ok((i, host, conn));
        }
        let host = HeaderValue::from_str(authority).map_err(|e| {
            TransportError::new(ErrorKind::Other, format!("host not usable in HTTP: {e}"))
        })?;
        origins.push(Origin {
            authority: authority.into(),
            host: host.clone(),
            idle: VecDeque::new(),
        });
        Ok((origins.len() - 1, host, None))
    }

    /// `origin`'s idle connection to use, as [`PlainPool::checkout`] finds it.
    fn take(&self, origin: usize) -> Option<Conn> {
        let mut stale = Vec::new();
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let conn = self.pop_idle(&mut origins[origin], &mut stale);
        drop(origins);
        drop(stale);
        conn
    }

    /// The most recently used idle connection that is still open and not too old; older or
    /// closed ones met on the way go to `stale`, for the caller to close outside the lock.
    fn pop_idle(&self, origin: &mut Origin, stale: &mut Vec<Conn>) -> Option<Conn> {
        while let Some((conn, since)) = origin.idle.pop_back() {
            if since.elapsed() < self.settings.idle_timeout && conn.is_open() {
                tracing::trace!(origin = &*origin.authority, "reusing an idle connection");
                return Some(conn);
            }
            tracing::trace!(
                origin = &*origin.authority,
                "closing a stale idle connection"
            );
            stale.push(conn);
        }
        None
    }

    /// Keeps `conn` for the next request to `origin` if it is open, closing the oldest idle
    /// one past the cap.
    fn give_back(&self, origin: usize, conn: Conn) {
        if !conn.is_open() || self.settings.max_idle == 0 {
            tracing::trace!("connection closed after its response");
            return;
        }
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        let Origin {
            authority, idle, ..
        } = &mut origins[origin];
        let mut evicted = None;
        if idle.len() >= self.settings.max_idle {
            tracing::trace!(
                origin = &**authority,
                "idle connections at their cap: closing the oldest"
            );
            evicted = idle.pop_front();
        }
        tracing::trace!(origin = &**authority, "connection idle in the pool");
        idle.push_back((conn, Instant::now()));
        drop(origins);
        // Closed outside the lock.
        drop(evicted);
    }

    async fn connect(&self, url: &Url) -> Result<Conn, TransportError> {
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = match url.host() {
            Some(Host::Ipv4(ip)) => vec![(ip, port).into()],
            Some(Host::Ipv6(ip)) => vec![(ip, port).into()],
            Some(Host::Domain(name)) => tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| {
                    TransportError::new(
                        ErrorKind::Dns,
                        format!("dns error: failed to lookup address {name}: {e}"),
                    )
                })?
                .collect(),
            None => return Err(TransportError::new(ErrorKind::Other, "URL without a host")),
        };
        let timeout = self.settings.connect_timeout;
        let stream = tokio::time::timeout(timeout, connect_first(&addrs))
            .await
            .map_err(|_| {
                TransportError::new(
                    ErrorKind::Timeout,
                    format!(
                        "tcp connect error: no connection within {}",
                        humantime::format_duration(timeout)
                    ),
                )
            })?
            .map_err(|e| {
                TransportError::new(
                    classify_chain(&e, ErrorKind::Connect),
                    format!("tcp connect error: {e}"),
                )
            })?;
        tracing::debug!(origin = &url[Position::BeforeHost..Position::AfterPort], peer = ?stream.peer_addr().ok(), "connected");
        stream.set_nodelay(true).map_err(|e| {
            TransportError::new(ErrorKind::Connect, format!("tcp connect error: {e}"))
        })?;
        let (sender, driver) = http1::Builder::new()
            .max_buf_size(self.settings.read_buffer_max)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::new(ErrorKind::Connect, e.to_string()))?;
        self.links.opened(
            &origin_key(url),
            Negotiated {
                http2: false,
                tls: None,
                alpn: None,
            },
        );
        Ok(Conn {
            sender,
            driver: Some(Box::pin(driver)),
            failure: None,
        })
    }
}

/// Connects to the first of `addrs` that answers, in order; the last error otherwise.
async fn connect_first(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(
        std::io::ErrorKind::AddrNotAvailable,
        "the host name has no address",
    );
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// One request on `conn`, the connection driven all along: wait until it can take a
/// request, hand it over, wait for the response headers.
async fn exchange(conn: &mut Conn, req: Request<ReqBody>) -> Result<Response<Incoming>, Failed> {
    let ready = poll_fn(|cx| {
        conn.drive(cx);
        conn.sender.poll_ready(cx)
    })
    .await;
    if let Err(e) = ready {
        return Err(Failed::Unsent(Box::new(req), e));
    }
    let mut response = std::pin::pin!(conn.sender.try_send_request(req));
    poll_fn(|cx| {
        conn.drive(cx);
        response.as_mut().poll(cx)
    })
    .await
    .map_err(|mut e| match e.take_message() {
        Some(req) => Failed::Unsent(Box::new(req), e.into_error()),
        None => Failed::Sent(e.into_error()),
    })
}

/// An exchange's error, classified by the connection's own failure when it has one (a
/// reset says more than "connection closed").
fn exchange_error(err: &hyper::Error, failure: Option<&hyper::Error>) -> TransportError {
    let err = failure.unwrap_or(err);
    let kind = classify_chain(err, ErrorKind::Other);
    TransportError::new(kind, describe_chain(err.to_string(), err))
}

/// A response body that drives its connection while it is read and returns the
/// connection to the pool at its end.
pub(crate) struct PooledBody {
    incoming: Incoming,
    /// Until the end of the body.
    conn: Option<Conn>,
    origin: usize,
    pool: Arc<PlainPool>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(self.origin, conn);
        }
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An empty body (HEAD, 204, a zero length) may end unread; anything else cut
        // short leaves the connection mid-message, and dropping it closes it.
        if self.incoming.is_end_stream() {
            self.release();
        } else if self.conn.is_some() {
            tracing::trace!("closing a connection whose response body was not read to its end");
        }
    }
}

impl futures_util::Stream for PooledBody {
    type Item = Result<Bytes, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(conn) = &mut this.conn {
            conn.drive(cx);
        }
        loop {
            return match Pin::new(&mut this.incoming).poll_frame(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(None) => {
                    this.release();
                    Poll::Ready(None)
                }
                Poll::Ready(Some(Err(e))) => {
                    let failure = this.conn.take().and_then(|c| c.failure);
                    let err = failure.as_ref().unwrap_or(&e);
                    let kind = body_kind(err, ErrorKind::Body);
                    Poll::Ready(Some(Err(TransportError::new(
                        kind,
                        describe_chain(err.to_string(), err),
                    ))))
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if this.incoming.is_end_stream() {
                            this.release();
                        }
                        Poll::Ready(Some(Ok(data)))
                    }
                    Err(_trailers) => continue,
                },
            };
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a small HTTP/1.1 server of the test's own, written on raw sockets: it counts
    //! the connections it accepts and can close an idle connection or cut a body short on
    //! demand, which a registry does not do when asked. The pool also carries every
    //! `http://` test against docker-registry (tests/).

    use std::sync::atomic::{AtomicUsize, Ordering};

    use http::{Method, StatusCode};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::net::hyper_transport::HyperTransport;
    use crate::net::transport::{HttpRequest, Transport};
    use crate::net::TransportConfig;

    /// A server answering `GET /bytes/N` with N bytes, `HEAD` with the length only,
    /// `/host` with the request's `Host` header, and `/bytes/N/close` with N bytes on a
    /// connection it closes 20 ms later without saying so.
    struct Server {
        addr: SocketAddr,
        accepted: Arc<AtomicUsize>,
    }

    impl Server {
        async fn start() -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let accepted = Arc::new(AtomicUsize::new(0));
            let count = Arc::clone(&accepted);
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve(stream));
                }
            });
            Server { addr, accepted }
        }

        fn url(&self, path: &str) -> Url {
            Url::parse(&format!("http://{}{path}", self.addr)).unwrap()
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
    }

    async fn serve(mut stream: TcpStream) {
        let mut buf = Vec::new();
        loop {
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                let mut chunk = [0u8; 1024];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8(buf.drain(..head_end).collect()).unwrap();
            let mut words = head.split_whitespace();
            let (method, path) = (words.next().unwrap(), words.next().unwrap());
            let host = head
                .lines()
                .find_map(|l| l.strip_prefix("host: "))
                .unwrap_or("")
                .to_owned();
            let (body, close) = match path.strip_prefix("/bytes/") {
                Some(rest) => {
                    let (n, close) = match rest.strip_suffix("/close") {
                        Some(n) => (n, true),
                        None => (rest, false),
                    };
                    (vec![b'x'; n.parse().unwrap()], close)
                }
                None => (host.into_bytes(), false),
            };
            let mut out = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            if method != "HEAD" {
                out.push_str(std::str::from_utf8(&body).unwrap());
            }
            if stream.write_all(out.as_bytes()).await.is_err() {
                return;
            }
            if close {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
        }
    }

    fn transport(max_idle: usize) -> HyperTransport {
        HyperTransport::new(TransportConfig {
            pool_max_idle_per_host: max_idle,
            ..TransportConfig::default()
        })
        .unwrap()
    }

    async fn get(t: &HyperTransport, method: Method, url: Url) -> (StatusCode, Bytes) {
        let response = t.send(HttpRequest::new(method, url)).await.unwrap();
        let status = response.status;
        (status, response.bytes_limited(1 << 20).await.unwrap())
    }

    #[tokio::test]
    async fn one_connection_carries_requests_one_after_another() {
        let server = Server::start().await;
        let t = transport(8);
        for n in [0, 1, 5000, 70_000] {
            let (status, body) = get(&t, Method::GET, server.url(&format!("/bytes/{n}"))).await;
            assert_eq!((status, body.len()), (StatusCode::OK, n));
        }
        // Empty bodies give the connection back even when nobody reads them.
        for _ in 0..3 {
            let response = t
                .send(HttpRequest::new(Method::HEAD, server.url("/bytes/10")))
                .await
                .unwrap();
            assert_eq!(response.header("content-length"), Some("10"));
        }
        let (_, host) = get(&t, Method::GET, server.url("/host")).await;
        assert_eq!(host, server.addr.to_string().as_bytes());
        assert_eq!(server.accepted(), 1);
    }

    #[tokio::test]
    async fn a_body_left_unread_closes_its_connection() {
        let server = Server::start().await;
        let t = transport(8);
        let response = t
            .send(HttpRequest::new(Method::GET, server.url("/bytes/100000")))
            .await
            .unwrap();
        drop(response);
        let (_, body) = get(&t, Method::GET, server.url("/bytes/3")).await;
        assert_eq!(&body[..], b"xxx");
        assert_eq!(
            server.accepted(),
            2,
            "the half-read connection is not reused"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_the_server_closed_is_replaced_without_an_error() {
        let server = Server::start().await;
        let t = transport(8);
        for round in 1..=3 {
            let (status, _) = get(&t, Method::GET, server.url("/bytes/10/close")).await;
            assert_eq!(status, StatusCode::OK);
            // The server closes its end while the connection idles in the pool.
            tokio::time::sleep(Duration::from_millis(60)).await;
            assert_eq!(server.accepted(), round);
        }
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_wait_per_origin() {
        let server = Server::start().await;
        let t = transport(2);
        let burst = || {
            futures_util::future::join_all(
                (0..5).map(|_| get(&t, Method::GET, server.url("/bytes/10"))),
            )
        };
        burst().await;
        assert_eq!(server.accepted(), 5);
        burst().await;
        assert_eq!(server.accepted(), 8, "two kept, three opened again");
    }

    #[tokio::test]
    async fn connections_idle_past_the_timeout_are_not_reused() {
        let server = Server::start().await;
        let pool = Arc::new(PlainPool::new(
            PoolSettings {
                connect_timeout: Duration::from_secs(5),
                max_idle: 8,
                idle_timeout: Duration::from_millis(50),
                read_buffer_max: crate::net::MIN_READ_BUFFER,
            },
            Arc::default(),
        ));
        let url = server.url("/bytes/4");
        for wait in [0, 0, 100, 0] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let mut req = Request::new(ReqBody::empty());
            *req.uri_mut() = http::Uri::from_static("/bytes/4");
            let response = pool.send(&url, req).await.unwrap();
            let mut body = response.into_body();
            while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
                chunk.unwrap();
            }
        }
        assert_eq!(server.accepted(), 2);
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let t = transport(8);
        let url = Url::parse(&format!("http://127.0.0.1:{port}/v2/")).unwrap();
        let err = t
            .send(HttpRequest::new(Method::GET, url))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Connect, "{err}");
        assert!(err.message.contains("tcp connect error"), "{err}");
    }
}
