//! The floor of a measuring client: a closed loop of GETs of one path over plain HTTP/1.1 on
//! the same runtime creb-rs uses (tokio, one worker), with only what every measured GET
//! needs — a deadline, the response head parsed (`httparse`), the body read into a buffer of
//! its own and checked against the first body's SHA-256, the latency recorded into an HDR
//! histogram — and nothing of a trace, a plan, sessions or breakdowns. Its CPU per request
//! beside creb-rs's on the same registry is what the rest of creb-rs costs
//! (`docs/benchmarks.md`, "The hot path", step 9):
//!
//! ```sh
//! cargo build --release --example floor_client --target x86_64-unknown-linux-musl
//! target/x86_64-unknown-linux-musl/release/examples/floor_client \
//!     http://127.0.0.1:5000 /v2/bench/one/manifests/t1 20000 50
//! ```
//!
//! Arguments: the registry (`http://host:port`, loopback only), the path, the number of
//! GETs, the connections (one task each, one GET in flight on each), and a mode:
//! - `own` (the default): the exchange above, written here; it sends the `Accept` creb-rs
//!   sends with a manifest GET, and any answer but a 200 with a `Content-Length` and the
//!   first body's bytes ends it with an error;
//! - `client`: each GET is creb-rs's `RegistryClient::manifest_read` of the path's manifest
//!   (its request building, transport, connection pool and checks, the first body's digest
//!   expected as a replay expects what its prewarm pushed), its samples discarded;
//! - `transport`: each GET sent by creb-rs's transport (`build_transport`, the plain pool
//!   for `http://`) as a request made once per connection, the body taken whole
//!   (`bytes_limited`) and checked as `own` checks it: the client's transport and pool
//!   without its `RegistryClient` (the exchange, the manifest's checks);
//! - `client+metrics`: the same as `client`, its samples recorded by an aggregator as a
//!   run's are;
//! - `loop`: the exchange of `own` on an event loop written here (`mio`, one thread, as
//!   wrk runs: one `epoll_wait`, then each ready connection's answer read, checked and
//!   recorded and its next request written; deadlines swept every 100 ms) instead of
//!   tokio's scheduler, tasks, wakers and timer wheel.
//!
//! Beside creb-rs's replay of the same GETs they take its cost apart: the exchange, the
//! transport over it, the rest of creb-rs's client over that, its metrics, and the rest
//! (the trace, the plan, the executor); `loop` beside `own` and wrk is what the runtime
//! costs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context};
use creb::client::{ClientOptions, OpCtx, RegistryClient};
use creb::digest::Sha256Sum;
use creb::metrics::{AggregatorBuilder, AggregatorHandle, Recorder};
use creb::oci::{Reference, Repository};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The allocator of the creb-rs binary (`src/main.rs`), so that the two are compared as
/// they are built.
#[cfg(all(
    not(feature = "system-alloc"),
    not(target_env = "msvc"),
    target_pointer_width = "64"
))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The `Accept` of a manifest GET (`creb::oci::manifest::ACCEPT`).
const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v1+prettyjws;q=0.5";
/// The longest response head and body read.
const MAX_RESPONSE: usize = 64 * 1024;
const DEADLINE: Duration = Duration::from_secs(30);

/// What the connections share: GETs left to send, the first body's digest, the latencies.
struct Shared {
    left: AtomicU64,
    digest: OnceLock<[u8; 32]>,
    latency: Mutex<hdrhistogram::Histogram<u64>>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, path, gets, connections, mode) = match args.as_slice() {
        [u, p, g, c] => (u, p, g, c, "own"),
        [u, p, g, c, m] => (u, p, g, c, m.as_str()),
        _ => bail!(
            "usage: floor_client http://HOST:PORT PATH GETS CONNECTIONS [own|transport|client|client+metrics|loop]"
        ),
    };
    let host = url
        .strip_prefix("http://")
        .context("the registry must be http://HOST:PORT")?
        .trim_end_matches('/');
    let addr: SocketAddr = host.parse().context("HOST:PORT must be an IP address")?;
    if !addr.ip().is_loopback() {
        bail!("{addr} is not a loopback address");
    }
    let gets: u64 = gets.parse().context("GETS")?;
    let connections: usize = connections.parse().context("CONNECTIONS")?;
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {host}\r\naccept: {ACCEPT}\r\n\r\n").into_bytes();
    let shared = Arc::new(Shared {
        left: AtomicU64::new(gets),
        digest: OnceLock::new(),
        latency: Mutex::new(histogram()?),
    });
    if mode == "loop" {
        let started = std::time::Instant::now();
        event_loop::run(addr, &request, connections.max(1), &shared)?;
        return report(gets, started, &shared);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut started = std::time::Instant::now();
    runtime.block_on(async {
        let (driver, aggregator) = match mode {
            "own" => (Driver::Own, None),
            "transport" => {
                let transport = creb::net::build_transport(creb::net::TransportConfig::default())?;
                let url = format!("{}{path}", url.trim_end_matches('/')).parse()?;
                (Driver::Transport(transport, url), None)
            }
            "client" => {
                let client = creb_client(url, path, Recorder::discard()).await?;
                (Driver::Client(client), None)
            }
            "client+metrics" => {
                let (recorder, aggregator) = AggregatorBuilder::default().spawn();
                let client = creb_client(url, path, recorder).await?;
                (Driver::Client(client), Some(aggregator))
            }
            other => bail!("mode {other:?}: own, transport, client, client+metrics or loop"),
        };
        started = std::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..connections.max(1) {
            let (shared, request, driver) = (Arc::clone(&shared), request.clone(), driver.clone());
            tasks.spawn(async move {
                match driver {
                    Driver::Own => connection(addr, &request, &shared).await,
                    Driver::Transport(transport, url) => {
                        transport_loop(&*transport, url, &shared).await
                    }
                    Driver::Client(client) => client_loop(&client, &shared).await,
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        drop(driver);
        if let Some(aggregator) = aggregator {
            finish(aggregator).await;
        }
        anyhow::Ok(())
    })?;
    report(gets, started, &shared)
}

/// Prints the run's rate and latencies.
fn report(gets: u64, started: std::time::Instant, shared: &Shared) -> anyhow::Result<()> {
    let secs = started.elapsed().as_secs_f64();
    let latency = shared
        .latency
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?;
    println!(
        "{gets} GETs in {secs:.2} s: {:.0} per second; latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        gets as f64 / secs,
        latency.value_at_quantile(0.5) as f64 / 1000.0,
        latency.value_at_quantile(0.99) as f64 / 1000.0,
        latency.max() as f64 / 1000.0,
    );
    Ok(())
}

/// What a tokio mode's connections run their GETs through.
#[derive(Clone)]
enum Driver {
    /// The exchange written here (`own`).
    Own,
    /// creb-rs's transport, to this URL (`transport`).
    Transport(Arc<dyn creb::net::transport::Transport>, url::Url),
    /// creb-rs's client (`client`, `client+metrics`).
    Client(Arc<Manifest>),
}

/// The manifest a client mode reads: the path's repository and reference.
struct Manifest {
    client: RegistryClient,
    repo: Repository,
    reference: Reference,
    expect: Sha256Sum,
}

/// creb-rs's client of `url` recording into `recorder`, with the manifest `path` names and
/// its digest, learned from a first read (parsed, as a read without a known digest is).
async fn creb_client(url: &str, path: &str, recorder: Recorder) -> anyhow::Result<Arc<Manifest>> {
    let (repo, reference) = path
        .strip_prefix("/v2/")
        .and_then(|p| p.rsplit_once("/manifests/"))
        .context("a client mode reads a manifest: PATH is /v2/REPO/manifests/REFERENCE")?;
    let transport = creb::net::build_transport(creb::net::TransportConfig::default())?;
    let client = RegistryClient::new(transport, url.parse()?, recorder, ClientOptions::default());
    let repo: Repository = repo.parse().map_err(anyhow::Error::msg)?;
    let reference: Reference = reference.parse().map_err(anyhow::Error::msg)?;
    let first = client
        .manifest_read(&repo, &reference, None, OpCtx::default())
        .await?;
    Ok(Arc::new(Manifest {
        client,
        expect: Sha256Sum::of(&first),
        repo,
        reference,
    }))
}

/// Ends the aggregator: everything recorded is counted before the program ends.
async fn finish(aggregator: AggregatorHandle) {
    std::hint::black_box(aggregator.finish().await);
}

/// A client mode's loop: `manifest_read` until no GET is left; its latencies into `shared`.
async fn client_loop(m: &Manifest, shared: &Shared) -> anyhow::Result<()> {
    while shared.take() {
        let start = Instant::now();
        let ctx = OpCtx::default();
        m.client
            .manifest_read(&m.repo, &m.reference, Some(&m.expect), ctx)
            .await?;
        let end = Instant::now();
        shared.record(end - start)?;
    }
    Ok(())
}

impl Shared {
    /// Takes one of the GETs left; `false` when none is.
    fn take(&self) -> bool {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Checks an answer's body against the first one's SHA-256 and records its latency.
    fn answered(&self, body: &[u8], latency: Duration) -> anyhow::Result<()> {
        let digest: [u8; 32] = Sha256::digest(body).into();
        if *self.digest.get_or_init(|| digest) != digest {
            bail!("a body differs from the first");
        }
        self.record(latency)
    }

    /// Records one latency. One histogram for the run, not one per connection: at 256
    /// connections those (188 KB each) cost a run more to make and add up than its GETs'
    /// recording does.
    fn record(&self, latency: Duration) -> anyhow::Result<()> {
        let mut all = self
            .latency
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        all.saturating_record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
        Ok(())
    }
}

/// A histogram of latencies in microseconds, up to an hour.
fn histogram() -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    Ok(hdrhistogram::Histogram::new_with_max(3_600_000_000, 3)?)
}

/// One connection's loop: a GET at a time until none is left; its latencies into `shared`.
async fn connection(addr: SocketAddr, request: &[u8], shared: &Shared) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    while shared.take() {
        let start = Instant::now();
        let body = tokio::time::timeout(DEADLINE, get(&mut stream, request))
            .await
            .context("no answer within the deadline")??;
        let end = Instant::now();
        shared.answered(&body, end - start)?;
    }
    Ok(())
}

/// Sends `request` and reads its answer: the body of a 200 with a `Content-Length`.
async fn get(stream: &mut TcpStream, request: &[u8]) -> anyhow::Result<Vec<u8>> {
    stream.write_all(request).await?;
    let mut buf = vec![0u8; 4096];
    let mut have = 0;
    loop {
        make_room(&mut buf, have)?;
        let n = stream.read(&mut buf[have..]).await?;
        if n == 0 {
            bail!("the connection closed before the answer's end");
        }
        have += n;
        if let Some(body) = whole_answer(&buf[..have])? {
            return Ok(buf[body].to_vec());
        }
    }
}

/// Doubles `buf` when the `have` bytes read fill it, up to [`MAX_RESPONSE`].
fn make_room(buf: &mut Vec<u8>, have: usize) -> anyhow::Result<()> {
    if have == buf.len() {
        if buf.len() >= MAX_RESPONSE {
            bail!("an answer longer than {MAX_RESPONSE} bytes");
        }
        buf.resize(buf.len() * 2, 0);
    }
    Ok(())
}

/// Where the body lies in what was read, once the answer is whole; `None` while it is not.
/// Any answer but a 200 with a `Content-Length` and nothing past its end is an error.
fn whole_answer(read: &[u8]) -> anyhow::Result<Option<std::ops::Range<usize>>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = response.parse(read)? else {
        return Ok(None);
    };
    if response.code != Some(200) {
        bail!("status {:?}", response.code);
    }
    let length: usize = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .context("no Content-Length")
        .and_then(|h| Ok(std::str::from_utf8(h.value)?.trim().parse()?))?;
    if head + length > MAX_RESPONSE {
        bail!("an answer longer than {MAX_RESPONSE} bytes");
    }
    if read.len() > head + length {
        bail!("bytes past the answer's end");
    }
    Ok((read.len() == head + length).then_some(head..read.len()))
}

/// `loop` mode: the exchange of `own`, the same work per GET (a buffer of its own, the
/// head parsed, the body copied out, hashed and compared, the latency recorded), on one
/// thread's `epoll` through `mio` as wrk runs on its own loop: no tasks, wakers or timer
/// wheel; a connection past the deadline is found by a sweep every 100 ms.
mod event_loop {
    use std::io::{ErrorKind, Read, Write};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use anyhow::bail;
    use mio::net::TcpStream;
    use mio::{Events, Interest, Poll, Token};

    use super::{make_room, whole_answer, Shared, DEADLINE};

    /// One connection: its GET in flight, if any, and the answer read so far.
    struct Conn {
        stream: TcpStream,
        buf: Vec<u8>,
        have: usize,
        start: Option<Instant>,
    }

    /// Runs `connections` connections until no GET is left.
    pub(super) fn run(
        addr: SocketAddr,
        request: &[u8],
        connections: usize,
        shared: &Shared,
    ) -> anyhow::Result<()> {
        let mut poll = Poll::new()?;
        let mut events = Events::with_capacity(1024);
        let mut conns = Vec::with_capacity(connections);
        for i in 0..connections {
            let std = std::net::TcpStream::connect(addr)?;
            std.set_nodelay(true)?;
            std.set_nonblocking(true)?;
            let mut stream = TcpStream::from_std(std);
            poll.registry()
                .register(&mut stream, Token(i), Interest::READABLE)?;
            conns.push(Conn {
                stream,
                buf: Vec::new(),
                have: 0,
                start: None,
            });
        }
        let mut in_flight = 0usize;
        for conn in &mut conns {
            if shared.take() {
                send(conn, request)?;
                in_flight += 1;
            }
        }
        let sweep = Duration::from_millis(100);
        let mut swept = Instant::now();
        while in_flight > 0 {
            poll.poll(&mut events, Some(sweep))?;
            for event in &events {
                let conn = &mut conns[event.token().0];
                let Some(start) = conn.start else { continue };
                let Some(body) = read_answer(conn)? else {
                    continue;
                };
                let end = Instant::now();
                shared.answered(&body, end - start)?;
                conn.start = None;
                in_flight -= 1;
                if shared.take() {
                    send(conn, request)?;
                    in_flight += 1;
                }
            }
            let now = Instant::now();
            if now - swept >= sweep {
                swept = now;
                if conns
                    .iter()
                    .any(|c| c.start.is_some_and(|s| now - s > DEADLINE))
                {
                    bail!("no answer within the deadline");
                }
            }
        }
        Ok(())
    }

    /// Writes the request on an idle connection (its send buffer is empty: it is taken
    /// whole or the run ends).
    fn send(conn: &mut Conn, request: &[u8]) -> anyhow::Result<()> {
        conn.start = Some(Instant::now());
        conn.buf = vec![0u8; 4096];
        conn.have = 0;
        let n = conn.stream.write(request)?;
        if n != request.len() {
            bail!(
                "the request was not taken whole ({n} of {} bytes)",
                request.len()
            );
        }
        Ok(())
    }

    /// Reads what has come (until the kernel has no more: the poll is edge-triggered) and
    /// returns the body once the answer is whole: a 200 with a `Content-Length`.
    fn read_answer(conn: &mut Conn) -> anyhow::Result<Option<Vec<u8>>> {
        loop {
            make_room(&mut conn.buf, conn.have)?;
            let n = match conn.stream.read(&mut conn.buf[conn.have..]) {
                Ok(0) => bail!("the connection closed before the answer's end"),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            conn.have += n;
            if let Some(body) = whole_answer(&conn.buf[..conn.have])? {
                return Ok(Some(conn.buf[body].to_vec()));
            }
        }
    }
}

/// `transport` mode's loop: GETs through creb-rs's transport until none is left; its
/// latencies into `shared`.
async fn transport_loop(
    transport: &dyn creb::net::transport::Transport,
    url: url::Url,
    shared: &Shared,
) -> anyhow::Result<()> {
    let mut request = creb::net::transport::HttpRequest::new(http::Method::GET, url);
    request
        .headers
        .insert(http::header::ACCEPT, http::HeaderValue::from_static(ACCEPT));
    while shared.take() {
        let start = Instant::now();
        let response = transport.send(&request).await?;
        if response.status != http::StatusCode::OK {
            bail!("status {}", response.status);
        }
        let body = response.bytes_limited(MAX_RESPONSE).await?;
        let end = Instant::now();
        shared.answered(&body, end - start)?;
    }
    Ok(())
}
