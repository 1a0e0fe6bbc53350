//! Plain-HTTP/1.1 connections of creb-rs's own (`http://` registries with the hyper
//! transport): the operation's task writes its request on the socket and reads the answer
//! itself, with the framing of `src/net/h1.rs`.
//!
//! hyper's client runs a connection behind a queue of requests (a block of 32 request
//! slots per connection), a fixed 8 KiB write buffer and a read buffer of 8 KiB or more:
//! 26 KB per connection before any request, and a hand-off through channels for each.
//! Here a connection is its socket, a request head buffer used only when the socket does
//! not take a request at once (requests are written in the thread's scratch buffer, which
//! stays in cache), and a read buffer that starts at 4 KiB, doubles while reads fill it
//! (up to `read_buffer_max`) and is given back when the connection goes idle: a connection
//! waiting for its answer holds none, and takes one of the thread's spares when the
//! answer's first bytes arrive. When a response's body has ended the connection goes back
//! to its origin's idle list; a body dropped before its end closes it, as HTTP/1 requires.
//!
//! An idle connection the server has closed is found out when it is next taken (a read
//! that does not block finds the end of the stream), and the request goes out on the next
//! idle connection or a new one. A request that was sent is never sent again here (the
//! client's `--retry` decides that). `https://` registries keep hyper-util's client, which
//! negotiates TLS and HTTP/2.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use url::{Host, Position, Url};

use super::classify::{classify_chain, describe_chain};
use super::config::TransportConfig;
use super::deadline::{within_deadlines, within_deadlines_on, Progress};
use super::h1::{self, ChunkedDecoder, Decoded, Framing, Head, MAX_PIECE};
use super::links::{origin_key, Links, Negotiated};
use super::req_body::BodyKind;
use super::req_headers::ReqHeaders;
use super::transport::{HttpResponse, PlainHost, TransportError};
use super::{arrival, gather};
use crate::metrics::ErrorKind;

/// A connection's first read buffer: a response head and a small manifest in one read.
const INITIAL_READ: usize = 4096;

/// Read buffers a thread keeps from connections gone idle, for the next connections whose
/// answers it reads (a buffer of `INITIAL_READ` bytes each at most: 256 KiB).
const SPARE_MAX: usize = 64;

/// How many of the most recently kept buffers a connection looks through for one to read
/// into: the answers read into a buffer (the head's bytes, the body's pieces) share it until
/// they are dropped, and the most recent buffer none shares any more is refilled in place,
/// from its start, while it is still in the cache.
const SPARE_PROBES: usize = 8;

/// Largest request head kept for the next request on a connection.
const HEAD_KEPT: usize = 4096;

/// Largest response head read (larger is `too_large`).
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// Request bodies up to this size go out in the same write as their head.
const SMALL_BODY: usize = 16 * 1024;

/// The largest scratch buffer a thread keeps (a head with the largest small body fits).
const SCRATCH_KEPT: usize = 32 * 1024;

thread_local! {
    /// Where requests with no body or a small one are written before they go on the socket
    /// ([`Conn::try_write_from_scratch`]).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A request as the pool writes it: its method, its target (the URL's path and query) and
/// its headers, borrowed from the caller (`Host` is the pool's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlainRequest<'a> {
    pub method: &'a Method,
    pub target: &'a str,
    pub headers: &'a ReqHeaders,
    /// Sent as `User-Agent` after `headers` (which then name none).
    pub user_agent: Option<&'a HeaderValue>,
    /// The deadlines the request is sent and answered under, if any.
    pub deadlines: Option<(&'a Progress, &'a TransportConfig)>,
}

/// Settings of a [`PlainPool`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolSettings {
    pub connect_timeout: Duration,
    /// Idle connections kept per origin.
    pub max_idle: usize,
    /// An idle connection older than this is closed instead of reused.
    pub idle_timeout: Duration,
    /// Largest read of a connection.
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

thread_local! {
    /// Read buffers of the connections this thread gave back, oldest first. A connection
    /// takes one when its answer's first bytes arrive, not when its request goes out: at
    /// 256 requests in flight a buffer taken at the request would sit through the 255
    /// answers read before its own and be out of the cache when it is filled; taken at the
    /// read it was used a few answers before.
    static SPARES: std::cell::RefCell<VecDeque<BytesMut>> =
        const { std::cell::RefCell::new(VecDeque::new()) };
}

/// The most recently kept of this thread's spare read buffers that no answer shares any
/// more (among the last `SPARE_PROBES`), ready to be filled from its start.
fn take_spare() -> Option<BytesMut> {
    SPARES.with_borrow_mut(|spare| {
        let n = spare.len();
        let free = (n.saturating_sub(SPARE_PROBES)..n)
            .rev()
            .find(|&i| spare[i].try_reclaim(INITIAL_READ))?;
        spare.remove(free)
    })
}

/// Keeps `buffer` for the next connection this thread reads for, dropping the oldest kept
/// past `SPARE_MAX`.
fn keep_spare(buffer: BytesMut) {
    let dropped = SPARES.with_borrow_mut(|spare| {
        let dropped = (spare.len() >= SPARE_MAX)
            .then(|| spare.pop_front())
            .flatten();
        spare.push_back(buffer);
        dropped
    });
    drop(dropped);
}

struct Origin {
    /// `host[:port]` as the URL writes it (no default port).
    authority: Box<str>,
    host: HeaderValue,
    /// Oldest first; taken from the back.
    idle: VecDeque<(Box<Conn>, Instant)>,
}

/// One connection: its socket and buffers.
pub(crate) struct Conn {
    stream: TcpStream,
    /// Bytes read and not used yet.
    read: BytesMut,
    /// The next read's size: doubles while reads fill it, up to `read_max`.
    next_read: usize,
    /// Whether `read` was made larger than `INITIAL_READ` (then it is not kept as a spare:
    /// a large body's or a long head's buffer is given back).
    grown: bool,
    read_max: usize,
    /// The head of the request being written: all of it for a request with a large body,
    /// else what the socket did not take of the scratch buffer's request.
    head: Vec<u8>,
    /// The deadline watch of the connection's requests, reset for each
    /// ([`within_deadlines_on`]); made at the first. Between requests it keeps the waker of
    /// the last task that waited on it, and with it that finished task's header (its
    /// future, boxed, is freed as it ends): a few hundred bytes per idle connection.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the kernel stamps what the socket receives (then reads are `recvmsg`).
    stamped: bool,
}

impl Conn {
    fn new(stream: TcpStream, read_max: usize) -> Box<Conn> {
        let stamped = arrival::enable(&stream);
        Box::new(Conn {
            stream,
            read: BytesMut::new(),
            next_read: INITIAL_READ,
            grown: false,
            read_max: read_max.max(INITIAL_READ),
            head: Vec::new(),
            timer: None,
            stamped,
        })
    }

    /// Reads what the socket has into `read`: `Ok(0)` at the end of the stream. `left`:
    /// what the answer being read still has to bring, when its framing says. A read that
    /// may bring an answer's last bytes is stamped and its arrival noted for the task
    /// ([`arrival::note`]); a read inside a long body is held one byte short of its end and
    /// read as tokio reads, into the buffer as it is (a stamped read copies or zeroes its
    /// room: a cost per byte that only the read ending the body is worth).
    fn poll_fill(&mut self, cx: &mut Context<'_>, left: Option<u64>) -> Poll<io::Result<usize>> {
        // An answer's first read (the reads' size not grown yet): a large body's later
        // reads have buffers of their own, as they grow.
        if self.read.capacity() == 0 && self.next_read == INITIAL_READ {
            if let Some(buffer) = take_spare() {
                self.read = buffer;
            }
        }
        if self.read.capacity() - self.read.len() < self.next_read / 2 {
            self.read.reserve(self.next_read);
            self.grown |= self.read.capacity() > INITIAL_READ;
        }
        let inside = left.filter(|&l| l > arrival::SCRATCH as u64);
        if self.stamped && inside.is_none() {
            return self.poll_fill_stamped(cx);
        }
        // Tokio's own read: one that leaves part of the space it was given empty has drained
        // the socket, and clears its readiness then, so the next read (the probe when the
        // connection is taken again, the next answer's first) waits for the runtime instead
        // of asking the kernel for a `WouldBlock` (one `recvfrom` per GET fewer).
        let stream = Pin::new(&mut self.stream);
        let n = match inside {
            Some(l) if self.stamped => {
                let short = usize::try_from(l - 1).unwrap_or(usize::MAX);
                ready!(tokio_util::io::poll_read_buf(
                    stream,
                    cx,
                    &mut (&mut self.read).limit(short)
                ))?
            }
            _ => ready!(tokio_util::io::poll_read_buf(stream, cx, &mut self.read))?,
        };
        arrival::note(None);
        if inside.is_some() || n >= arrival::SCRATCH {
            gather::streaming();
        }
        self.adapt(n);
        Poll::Ready(Ok(n))
    }

    /// [`Self::poll_fill`] by `recvmsg`, with the kernel's stamp of the read
    /// ([`arrival::recv_into`]), into at most the next read's size. A read that leaves
    /// part of its room empty has drained the socket and clears its readiness, as tokio's
    /// own read does.
    fn poll_fill_stamped(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            let room = (self.read.capacity() - self.read.len()).min(self.next_read);
            let (stream, read) = (&self.stream, &mut self.read);
            let mut got = None;
            let tried = stream.try_io(tokio::io::Interest::READABLE, || {
                let (n, stamp) = arrival::recv_into(stream, read, room)?;
                got = Some((n, stamp));
                // A short read: reported as `WouldBlock` so that tokio clears the
                // readiness; the bytes are kept in `got`.
                if n > 0 && n < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            });
            if let Some((n, stamp)) = got {
                arrival::note(stamp);
                if n >= arrival::SCRATCH {
                    gather::streaming();
                }
                self.adapt(n);
                return Poll::Ready(Ok(n));
            }
            match tried {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
                Ok(()) => unreachable!("a read that succeeded is kept"),
            }
        }
    }

    /// The next read's size after a read of `n` bytes: twice as large when it filled the
    /// space it had, half when it used less than a quarter.
    fn adapt(&mut self, n: usize) {
        if n >= self.next_read {
            self.next_read = (self.next_read * 2).min(self.read_max);
        } else if n < self.next_read / 4 {
            self.next_read = (self.next_read / 2).max(INITIAL_READ);
        }
    }

    /// Whether the server closed the connection (or sent something unasked) while it sat
    /// idle: a read that does not block finds out.
    fn closed_while_idle(&mut self) -> bool {
        let mut probe = [0u8; 1];
        !matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Gives back what a large body grew before the connection idles, and its read buffer
    /// when it holds nothing: a small one for the thread's spares, to be used by the next
    /// connection that reads.
    fn shrink(&mut self) -> Option<BytesMut> {
        let spare = if self.read.is_empty() {
            let buffer = std::mem::take(&mut self.read);
            (!std::mem::take(&mut self.grown) && buffer.capacity() > 0).then_some(buffer)
        } else {
            None
        };
        self.next_read = INITIAL_READ;
        if self.head.capacity() > HEAD_KEPT {
            self.head = Vec::new();
        }
        spare
    }

    /// Writes the request: its head (with the body when small), then the body.
    async fn write_request(
        &mut self,
        req: &PlainRequest<'_>,
        host: &HeaderValue,
        body: BodyKind,
    ) -> io::Result<()> {
        let small = match &body {
            BodyKind::Empty | BodyKind::Bytes(None) => Some(&[][..]),
            BodyKind::Bytes(Some(bytes)) if bytes.len() <= SMALL_BODY => Some(&bytes[..]),
            BodyKind::Bytes(Some(_)) | BodyKind::Content(_) => None,
        };
        if let Some(small) = small {
            if self.try_write_from_scratch(req, host, small)? {
                return Ok(());
            }
            // `head` holds what the socket did not take.
            return self.stream.write_all(&self.head).await;
        }
        self.head.clear();
        h1::write_head(
            &mut self.head,
            req.method,
            req.target,
            host,
            req.headers,
            req.user_agent,
        );
        self.stream.write_all(&self.head).await?;
        match body {
            BodyKind::Bytes(Some(bytes)) => self.stream.write_all(&bytes).await,
            BodyKind::Content(mut content) => {
                for chunk in content.chunks.by_ref() {
                    self.stream.write_all(&chunk).await?;
                }
                Ok(())
            }
            BodyKind::Empty | BodyKind::Bytes(None) => Ok(()),
        }
    }

    /// Writes a request with no body or a small one, in one piece, from the thread's
    /// scratch buffer: it stays in cache from one request to the next, where the
    /// connection's own buffer, last written one request of this connection ago (hundreds
    /// of other requests on a busy run), is cold. Whatever the socket does not take at once
    /// goes to the connection's `head`, for the caller to write; true when it took all.
    fn try_write_from_scratch(
        &mut self,
        req: &PlainRequest<'_>,
        host: &HeaderValue,
        small: &[u8],
    ) -> io::Result<bool> {
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.clear();
            h1::write_head(
                scratch,
                req.method,
                req.target,
                host,
                req.headers,
                req.user_agent,
            );
            scratch.extend_from_slice(small);
            // Without write readiness known (a new connection, a full socket) nothing is
            // written, and the caller waits as it would for any write.
            let sent = match self.stream.try_write(scratch) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => return Err(e),
            };
            let all = sent == scratch.len();
            if !all {
                self.head.clear();
                self.head.extend_from_slice(&scratch[sent..]);
            }
            if scratch.capacity() > SCRATCH_KEPT {
                *scratch = Vec::new();
            }
            Ok(all)
        })
    }

    /// Reads the response head, skipping interim (1xx) answers.
    async fn read_head(&mut self) -> Result<Head, TransportError> {
        loop {
            match h1::parse_head(&mut self.read) {
                Ok(Some(head))
                    if head.status.is_informational()
                        && head.status != StatusCode::SWITCHING_PROTOCOLS => {}
                Ok(Some(head)) => return Ok(head),
                Ok(None) => {
                    if self.read.len() >= MAX_HEAD {
                        return Err(TransportError::new(
                            ErrorKind::TooLarge,
                            format!("response head larger than {MAX_HEAD} bytes"),
                        ));
                    }
                    match poll_fn(|cx| self.poll_fill(cx, None)).await {
                        Ok(0) => {
                            return Err(TransportError::new(
                                ErrorKind::ConnectionClosed,
                                "connection closed before the response head",
                            ))
                        }
                        Ok(_) => {}
                        Err(e) => {
                            return Err(io_error("reading the response head", &e, ErrorKind::Other))
                        }
                    }
                }
                Err(e) => return Err(TransportError::new(ErrorKind::Protocol, e.to_string())),
            }
        }
    }
}

/// An I/O error met while `doing` something, as a transport error: `kind` unless the error
/// says more.
pub(crate) fn io_error(doing: &str, err: &io::Error, kind: ErrorKind) -> TransportError {
    TransportError::new(
        classify_chain(err, kind),
        describe_chain(format!("{doing}: {err}"), err),
    )
}

impl PlainPool {
    pub(crate) fn new(settings: PoolSettings, links: Arc<Links>) -> Self {
        PlainPool {
            settings,
            links,
            origins: Mutex::new(Vec::new()),
        }
    }

    /// Sends `req` to `url`'s origin (its path and query the request's target) and resolves
    /// when the response head has arrived, with the body whole when it came with the head;
    /// else the returned body reads the rest from the connection and gives it back at its
    /// end.
    pub(crate) async fn send(
        self: &Arc<Self>,
        url: &Url,
        req: PlainRequest<'_>,
        body: BodyKind,
    ) -> Result<(Head, PlainBody), TransportError> {
        let authority = &url[Position::BeforeHost..Position::AfterPort];
        let (origin, host, idle) = self.checkout(authority)?;
        let mut conn = match (idle, req.deadlines) {
            (Some(conn), _) => conn,
            // Boxed: once per connection, and its future is larger than an exchange's.
            (None, Some((progress, config))) => {
                let connect = std::pin::pin!(Box::pin(self.connect(url)));
                within_deadlines(connect, progress, config).await?
            }
            (None, None) => Box::pin(self.connect(url)).await?,
        };
        let mut timer = conn.timer.take();
        let exchange = async {
            if let Err(e) = conn.write_request(&req, &host, body).await {
                return Err(io_error(
                    "sending the request",
                    &e,
                    ErrorKind::ConnectionClosed,
                ));
            }
            conn.read_head().await
        };
        let head = match req.deadlines {
            Some((progress, config)) => {
                let timer = timer.get_or_insert_with(|| {
                    Box::pin(tokio::time::sleep_until(progress.deadline_at(config)))
                });
                within_deadlines_on(std::pin::pin!(exchange), progress, config, timer.as_mut())
                    .await?
            }
            None => exchange.await?,
        };
        conn.timer = timer;
        let body = self.body_of(origin, conn, req.method, &head)?;
        Ok((head, body))
    }

    /// The body `head` announces, on `conn`: whole when it came with the head (a
    /// manifest's, an error's, none at all), and the connection goes back at once with no
    /// stream to poll through; else to be read from the connection.
    fn body_of(
        self: &Arc<Self>,
        origin: usize,
        mut conn: Box<Conn>,
        method: &Method,
        head: &Head,
    ) -> Result<PlainBody, TransportError> {
        let framing = h1::framing(method, head)
            .map_err(|e| TransportError::new(ErrorKind::Protocol, e.to_string()))?;
        let keep = h1::keep_alive(head, framing);
        let state = match framing {
            Framing::Empty => Body::Ended,
            Framing::Length(n) => Body::Length(n),
            Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
            Framing::Close => Body::UntilClose,
        };
        let whole = match state {
            Body::Ended => Some(Bytes::new()),
            Body::Length(n) if n <= conn.read.len() as u64 => {
                #[allow(clippy::cast_possible_truncation)] // at most the buffer's length
                Some(conn.read.split_to(n as usize).freeze())
            }
            _ => None,
        };
        if let Some(whole) = whole {
            self.settle(origin, conn, keep);
            return Ok(PlainBody::Whole(whole));
        }
        Ok(PlainBody::Pooled(PooledBody {
            state,
            conn: Some(conn),
            keep,
            origin,
            pool: Arc::clone(self),
        }))
    }

    /// Gives `conn` back to `origin`'s idle list at its answer's end, when it `keep`s alive
    /// and holds nothing past the answer (bytes past it answer nothing: it is closed).
    fn settle(&self, origin: usize, conn: Box<Conn>, keep: bool) {
        if keep && conn.read.is_empty() {
            self.give_back(origin, conn);
        }
    }

    /// The index of `authority`'s origin, registered on first use.
    fn origin_index(&self, authority: &str) -> Result<usize, TransportError> {
        let mut origins = self.origins.lock().unwrap_or_else(|e| e.into_inner());
        match origins.iter().position(|o| &*o.authority == authority) {
            Some(i) => Ok(i),
            None => register_origin(&mut origins, authority),
        }
    }

    /// The index and `Host` header of `authority`'s origin (registered on first use) and
    /// its idle connection to use, if one is open: one lock for both.
    fn checkout(
        &self,
        authority: &str,
    ) -> Result<(usize, HeaderValue, Option<Box<Conn>>), TransportError> {
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
        let i = register_origin(&mut origins, authority)?;
        Ok((i, origins[i].host.clone(), None))
    }

    /// This thread's spare buffers: how many, and how many are refilled in place (none is
    /// shared with an answer still held).
    #[cfg(test)]
    pub(super) fn spares() -> (usize, usize) {
        SPARES.with_borrow_mut(|spare| {
            let reclaimed = spare
                .iter_mut()
                .map(|b| b.try_reclaim(INITIAL_READ))
                .filter(|&r| r)
                .count();
            (spare.len(), reclaimed)
        })
    }

    /// The most recently used idle connection that is still open and not too old; older or
    /// closed ones met on the way go to `stale`, for the caller to close outside the lock.
    // The connections stay boxed: they move between the pool, requests and bodies.
    #[allow(clippy::vec_box)]
    fn pop_idle(&self, origin: &mut Origin, stale: &mut Vec<Box<Conn>>) -> Option<Box<Conn>> {
        while let Some((mut conn, since)) = origin.idle.pop_back() {
            if since.elapsed() < self.settings.idle_timeout && !conn.closed_while_idle() {
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

    /// Keeps `conn` for the next request to `origin`, closing the oldest idle one past the
    /// cap.
    fn give_back(&self, origin: usize, mut conn: Box<Conn>) {
        if let Some(buffer) = conn.shrink() {
            keep_spare(buffer);
        }
        if self.settings.max_idle == 0 {
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
        // Closed and freed outside the lock.
        drop(evicted);
    }

    async fn connect(&self, url: &Url) -> Result<Box<Conn>, TransportError> {
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
            .map_err(|_| connect_timed_out(timeout))?
            .map_err(|e| connect_failed(&e))?;
        tracing::debug!(origin = &url[Position::BeforeHost..Position::AfterPort], peer = ?stream.peer_addr().ok(), "connected");
        stream.set_nodelay(true).map_err(|e| {
            TransportError::new(ErrorKind::Connect, format!("tcp connect error: {e}"))
        })?;
        self.links.opened(
            &origin_key(url),
            Negotiated {
                http2: false,
                tls: None,
                alpn: None,
            },
        );
        Ok(Conn::new(stream, self.settings.read_buffer_max))
    }
}

/// Adds `authority`'s origin (not among `origins` yet), without connections: its index.
fn register_origin(origins: &mut Vec<Origin>, authority: &str) -> Result<usize, TransportError> {
    let host = HeaderValue::from_str(authority).map_err(|e| {
        TransportError::new(ErrorKind::Other, format!("host not usable in HTTP: {e}"))
    })?;
    origins.push(Origin {
        authority: authority.into(),
        host,
        idle: VecDeque::new(),
    });
    Ok(origins.len() - 1)
}

/// A connection not made within `timeout`, as a transport error.
pub(crate) fn connect_timed_out(timeout: Duration) -> TransportError {
    TransportError::new(
        ErrorKind::Timeout,
        format!(
            "tcp connect error: no connection within {}",
            humantime::format_duration(timeout)
        ),
    )
}

/// A connection refused (or otherwise not made), as a transport error.
pub(crate) fn connect_failed(e: &io::Error) -> TransportError {
    TransportError::new(
        classify_chain(e, ErrorKind::Connect),
        format!("tcp connect error: {e}"),
    )
}

impl PlainHost for Arc<PlainPool> {
    fn opened(&self, origin: &Url) {
        self.links.opened(
            &origin_key(origin),
            Negotiated {
                http2: false,
                tls: None,
                alpn: None,
            },
        );
    }

    fn adopt(
        &self,
        origin: &Url,
        stream: std::net::TcpStream,
        read: BytesMut,
        head: Head,
        config: &TransportConfig,
        end_by: Instant,
    ) -> Result<HttpResponse, TransportError> {
        let stream = TcpStream::from_std(stream)
            .map_err(|e| io_error("taking over a connection", &e, ErrorKind::Other))?;
        let mut conn = Conn::new(stream, self.settings.read_buffer_max);
        conn.read = read;
        let authority = &origin[Position::BeforeHost..Position::AfterPort];
        let origin = self.origin_index(authority)?;
        let body = self.body_of(origin, conn, &Method::GET, &head)?;
        Ok(plain_response(head, body, config, end_by))
    }
}

/// The response of a plain-HTTP exchange: its head, and its body as the pool hands it over
/// (a body still to read under `config`'s deadlines, the exchange over by `end_by`).
pub(crate) fn plain_response(
    head: Head,
    body: PlainBody,
    config: &TransportConfig,
    end_by: Instant,
) -> HttpResponse {
    let response = match body {
        PlainBody::Whole(whole) => HttpResponse::whole(head.status, head.headers, whole),
        PlainBody::Pooled(body) => HttpResponse::new(head.status, head.headers, Box::pin(body))
            .with_idle_timeout(config.body_idle_timeout)
            .with_deadline(end_by, config.request_deadline),
    };
    response.with_version(head.version)
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

/// Where a response body's reading is.
#[derive(Debug, PartialEq, Eq)]
enum Body {
    /// This many bytes still to come.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the server closes the connection.
    UntilClose,
    /// Read to its end.
    Ended,
}

/// A response body as [`PlainPool::send`] hands it over.
pub(crate) enum PlainBody {
    /// All of it, read with the head; its connection is back in the pool.
    Whole(Bytes),
    /// The rest to read from the connection.
    Pooled(PooledBody),
}

/// A response body read from its connection, which goes back to the pool at the body's
/// end.
pub(crate) struct PooledBody {
    state: Body,
    /// Until the end of the body.
    conn: Option<Box<Conn>>,
    /// Whether the connection may carry another request after this body.
    keep: bool,
    origin: usize,
    pool: Arc<PlainPool>,
}

impl PooledBody {
    fn release(&mut self) {
        self.state = Body::Ended;
        if let Some(conn) = self.conn.take() {
            self.pool.settle(self.origin, conn, self.keep);
        }
    }

    /// The next piece of the body, or `None` at its end. Each piece (at most `MAX_PIECE`)
    /// takes a unit of the task's cooperative budget, so a body that keeps arriving faster
    /// than it is checked hands the thread back every few megabytes, and the answers
    /// of the other requests in flight are read meanwhile.
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, TransportError>> {
        if self.conn.is_none() {
            return Poll::Ready(Ok(None));
        }
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        loop {
            if let Some(got) = self.buffered_piece() {
                if matches!(got, Ok(Some(_))) {
                    coop.made_progress();
                }
                return Poll::Ready(got);
            }
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(Ok(None));
            };
            // A body of known length has none of its bytes buffered here.
            let left = match self.state {
                Body::Length(left) => Some(left),
                _ => None,
            };
            match ready!(conn.poll_fill(cx, left)) {
                Ok(0) => return Poll::Ready(self.at_end_of_stream()),
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    return Poll::Ready(Err(io_error("reading the body", &e, ErrorKind::Body)));
                }
            }
        }
    }

    /// What the bytes already read give: a piece, the body's end or an error; `None` when
    /// more must be read.
    fn buffered_piece(&mut self) -> Option<Result<Option<Bytes>, TransportError>> {
        let conn = self.conn.as_mut()?;
        let mut done = false;
        let piece = match &mut self.state {
            Body::Ended => return Some(Ok(None)),
            Body::Length(left) => {
                if conn.read.is_empty() {
                    return None;
                }
                let n = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(conn.read.len())
                    .min(MAX_PIECE);
                *left -= n as u64;
                done = *left == 0;
                conn.read.split_to(n).freeze()
            }
            Body::Chunked(decoder) => match decoder.decode(&mut conn.read) {
                Ok(Decoded::Data(data)) => data,
                Ok(Decoded::More) => return None,
                Ok(Decoded::End) => {
                    self.release();
                    return Some(Ok(None));
                }
                Err(e) => {
                    self.conn = None;
                    return Some(Err(TransportError::new(ErrorKind::Body, e.to_string())));
                }
            },
            Body::UntilClose => {
                if conn.read.is_empty() {
                    return None;
                }
                let n = conn.read.len().min(MAX_PIECE);
                conn.read.split_to(n).freeze()
            }
        };
        if done {
            self.release();
        }
        Some(Ok(Some(piece)))
    }

    /// The connection's end of stream: the body's end when it was delimited by it, else a
    /// short body.
    fn at_end_of_stream(&mut self) -> Result<Option<Bytes>, TransportError> {
        let ended = self.state == Body::UntilClose;
        self.state = Body::Ended;
        self.conn = None;
        if ended {
            return Ok(None);
        }
        Err(TransportError::new(
            ErrorKind::ShortBody,
            "connection closed before the body's end",
        ))
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body cut short leaves the connection mid-message: dropping it closes it.
        if self.conn.is_some() && self.state != Body::Ended {
            tracing::trace!("closing a connection whose response body was not read to its end");
        }
    }
}

impl futures_util::Stream for PooledBody {
    type Item = Result<Bytes, TransportError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match ready!(self.get_mut().poll_piece(cx)) {
            Ok(Some(data)) => Poll::Ready(Some(Ok(data))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
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
    /// `/host` with the request's `Host` header, `/agent` with its `User-Agent` lines (joined
    /// by `|`), `/bytes/N/close` with N bytes on a connection it closes 20 ms later
    /// without saying so, and `/extra` with its `Host` and two bytes past the answer's end.
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
                // Never answered (a minute, the test's bound).
                None if path == "/hang" => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    return;
                }
                None if path == "/agent" => {
                    let agents: Vec<&str> = head
                        .lines()
                        .filter_map(|l| l.split_once(':'))
                        .filter(|(name, _)| name.eq_ignore_ascii_case("user-agent"))
                        .map(|(_, value)| value.trim())
                        .collect();
                    (agents.join("|").into_bytes(), false)
                }
                None => (host.into_bytes(), false),
            };
            let mut out = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            if method != "HEAD" {
                out.push_str(std::str::from_utf8(&body).unwrap());
            }
            if path == "/extra" {
                out.push_str("zz");
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
        let response = t.send(&HttpRequest::new(method, url)).await.unwrap();
        let status = response.status;
        (status, response.bytes_limited(1 << 20).await.unwrap())
    }

    /// A server on a thread of its own that answers one request with `body` `delay` after
    /// it has read it, and keeps the connection until the client closes it.
    fn answer_later(
        delay: Duration,
        body: &'static [u8],
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).unwrap();
                assert!(n > 0, "the request ended early");
                request.extend_from_slice(&buf[..n]);
            }
            std::thread::sleep(delay);
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            stream.write_all(&[head.as_bytes(), body].concat()).unwrap();
            let _ = stream.read(&mut buf);
        });
        (addr, server)
    }

    #[tokio::test]
    async fn an_answer_read_late_is_timed_from_when_it_arrived() {
        // Stamping on before the answer comes (and kept on while the pair is held).
        let _stamping = arrival::stamping_pair().await;
        // A body read with its head, and one longer than a stamped read's scratch (read in
        // reads without a stamp up to its last bytes).
        let long: &'static [u8] = Box::leak(vec![b'x'; 40 << 10].into_boxed_slice());
        for body in [&b"hello"[..], long] {
            let (addr, server) = answer_later(Duration::from_millis(20), body);
            let url = Url::parse(&format!("http://{addr}/v2/")).unwrap();
            let t = transport(8);
            // In a task: the reads are noted for the task that made them.
            tokio::spawn(async move {
                let sent = Instant::now();
                let request = HttpRequest::new(Method::GET, url);
                let mut send = t.send(&request);
                assert!(
                    tokio::time::timeout(Duration::from_millis(1), &mut send)
                        .await
                        .is_err(),
                    "the answer comes 20 ms after the request"
                );
                // The worker is busy elsewhere while the answer arrives.
                std::thread::sleep(Duration::from_millis(150));
                let response = send.await.unwrap();
                let (head_at, stamped) = arrival::last_arrival(sent);
                assert!(stamped, "a plain connection's reads are stamped");
                let read = response.bytes_limited(1 << 20).await.unwrap();
                assert_eq!(&read[..], body);
                assert_eq!(
                    gather::is_streaming(),
                    body.len() > arrival::SCRATCH,
                    "a long body's reads hold off the next park's wait"
                );
                let (end, stamped) = arrival::last_arrival(sent);
                assert!(stamped, "the read that ended the body is stamped");
                let read_at = sent.elapsed();
                assert!(read_at >= Duration::from_millis(150), "{read_at:?}");
                for at in [head_at, end] {
                    let after = at - sent;
                    assert!(
                        after >= Duration::from_millis(15) && after < Duration::from_millis(100),
                        "timed {after:?} after the request, read {read_at:?} after it"
                    );
                }
            })
            .await
            .unwrap();
            server.join().unwrap();
        }
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
                .send(&HttpRequest::new(Method::HEAD, server.url("/bytes/10")))
                .await
                .unwrap();
            assert_eq!(response.header("content-length"), Some("10"));
        }
        let (_, host) = get(&t, Method::GET, server.url("/host")).await;
        assert_eq!(host, server.addr.to_string().as_bytes());
        assert_eq!(server.accepted(), 1);
    }

    #[tokio::test]
    async fn a_request_goes_with_the_transports_user_agent_or_its_own_once() {
        let server = Server::start().await;
        let t = transport(8);
        let (_, agents) = get(&t, Method::GET, server.url("/agent")).await;
        assert_eq!(agents, t.config().user_agent.as_bytes());
        let mut own = HttpRequest::new(Method::GET, server.url("/agent"));
        own.headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static("other/2"),
        );
        let response = t.send(&own).await.unwrap();
        assert_eq!(
            response.bytes_limited(1 << 20).await.unwrap(),
            &b"other/2"[..]
        );
    }

    #[tokio::test]
    async fn a_body_left_unread_closes_its_connection() {
        let server = Server::start().await;
        let t = transport(8);
        let response = t
            .send(&HttpRequest::new(Method::GET, server.url("/bytes/100000")))
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
    async fn a_connection_that_brings_bytes_past_its_answer_is_not_reused() {
        let server = Server::start().await;
        let t = transport(8);
        let (_, host) = get(&t, Method::GET, server.url("/extra")).await;
        assert_eq!(host, server.addr.to_string().as_bytes());
        let (_, body) = get(&t, Method::GET, server.url("/bytes/3")).await;
        assert_eq!(&body[..], b"xxx");
        assert_eq!(server.accepted(), 2, "bytes that answer nothing close it");
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
    async fn answers_kept_while_later_ones_are_read_into_spare_buffers_stay_as_they_were() {
        let server = Server::start().await;
        let t = transport(8);
        let mut kept = Vec::new();
        for n in 100..140 {
            let (status, body) = get(&t, Method::GET, server.url(&format!("/bytes/{n}"))).await;
            assert_eq!(status, StatusCode::OK);
            kept.push((n, body));
        }
        for (n, body) in kept {
            assert_eq!(body, vec![b'x'; n], "answer {n} is what was read");
        }
        assert_eq!(server.accepted(), 1);
    }

    #[tokio::test]
    async fn a_read_buffer_no_answer_shares_is_refilled_in_place() {
        let server = Server::start().await;
        let t = transport(8);
        // Each answer dropped before the next is read: one buffer serves them all.
        for _ in 0..3 * SPARE_PROBES {
            let (status, body) = get(&t, Method::GET, server.url("/bytes/700")).await;
            assert_eq!((status, body.len()), (StatusCode::OK, 700));
        }
        assert_eq!(PlainPool::spares(), (1, 1));
        // Answers still held keep their buffers from being read into: each later answer
        // takes a buffer of its own, and all are kept once given back.
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(get(&t, Method::GET, server.url("/bytes/700")).await.1);
        }
        assert_eq!(PlainPool::spares(), (3, 0), "every kept buffer is shared");
        drop(held);
        assert_eq!(PlainPool::spares(), (3, 3));
        // A body read past `INITIAL_READ` grows its buffer, which is not kept.
        let (_, body) = get(&t, Method::GET, server.url("/bytes/70000")).await;
        assert_eq!(body.len(), 70000);
        assert_eq!(PlainPool::spares().0, 2);
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
    async fn a_reused_connection_times_out_a_request_on_its_own_timer_too() {
        let server = Server::start().await;
        let t = HyperTransport::new(TransportConfig {
            request_timeout: Duration::from_millis(300),
            ..TransportConfig::default()
        })
        .unwrap();
        // Answered requests on one connection, its timer reset for each.
        for _ in 0..3 {
            let (status, _) = get(&t, Method::GET, server.url("/bytes/4")).await;
            assert_eq!(status, StatusCode::OK);
        }
        let started = Instant::now();
        let err = t
            .send(&HttpRequest::new(Method::GET, server.url("/hang")))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind, ErrorKind::Timeout, "{err}");
        assert!(err.message.contains("no response within"), "{err}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(server.accepted(), 1, "sent on the connection already open");
        // That connection is gone; the next request opens another and is answered.
        let (status, _) = get(&t, Method::GET, server.url("/bytes/4")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(server.accepted(), 2);
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
            let headers = ReqHeaders::new();
            let req = PlainRequest {
                method: &Method::GET,
                target: "/bytes/4",
                headers: &headers,
                user_agent: None,
                deadlines: None,
            };
            let (_, body) = pool.send(&url, req, BodyKind::Empty).await.unwrap();
            // Four bytes come in the head's read: the connection is back at once.
            let PlainBody::Whole(whole) = body else {
                panic!("a body read with its head is handed over whole");
            };
            assert_eq!(whole.len(), 4);
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
            .send(&HttpRequest::new(Method::GET, url))
            .await
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Connect, "{err}");
        assert!(err.message.contains("tcp connect error"), "{err}");
    }

    #[tokio::test]
    async fn a_request_the_socket_cannot_take_at_once_goes_out_whole_once_it_can() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut peer, _) = listener.accept().await.unwrap();
        let mut conn = Conn::new(stream, INITIAL_READ);
        // The peer reads nothing yet: fill the socket until it takes no more.
        let filler = vec![b'x'; 64 * 1024];
        let mut filled = 0;
        loop {
            match conn.stream.try_write(&filler) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let headers = ReqHeaders::new();
        let host = HeaderValue::from_static("registry.test");
        let req = PlainRequest {
            method: &Method::PUT,
            target: "/v2/r/manifests/t",
            headers: &headers,
            user_agent: None,
            deadlines: None,
        };
        let body = Bytes::from_static(b"{\"schemaVersion\":2}");
        let mut expected = Vec::new();
        h1::write_head(&mut expected, req.method, req.target, &host, &headers, None);
        expected.extend_from_slice(&body);
        let reading = {
            let mut write =
                std::pin::pin!(conn.write_request(&req, &host, BodyKind::Bytes(Some(body))));
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let first = std::future::Future::poll(write.as_mut(), &mut cx);
            assert!(first.is_pending(), "the socket is full");
            let reading = tokio::spawn(async move {
                let mut all = Vec::new();
                peer.read_to_end(&mut all).await.unwrap();
                all
            });
            write.await.unwrap();
            reading
        };
        drop(conn);
        let all = reading.await.unwrap();
        assert_eq!(all.len(), filled + expected.len());
        assert!(all[..filled].iter().all(|&b| b == b'x'));
        assert_eq!(
            &all[filled..],
            &expected[..],
            "the request whole, after what was queued"
        );
    }
}
