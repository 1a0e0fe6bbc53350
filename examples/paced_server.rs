//! A registry's pace without the registry: an HTTP/1.1 server on loopback that answers every
//! GET of one manifest path with one manifest (a file, its type and digest) `DELAY_MS` after
//! the request, after writing over `WORK_KIB` KiB of memory of its own `PASSES` times. With a
//! delay and no work, a generator at 256 in flight gets about docker-registry's GETs a second,
//! each answer alone at its wake-up, on cores otherwise idle; with work and no delay, the
//! server's CPU per GET sets the pace and evicts what the generator ran on the same core from
//! the caches, as docker-registry's half megabyte allocated per GET does — and the size of
//! the area written says from which level (docs/benchmarks.md, "The hot path", step 44).
//! Neither a garbage collector nor a disk is in the way. `scripts/bench-floor` starts it with
//! `PACED=` and `EVICT=`:
//!
//! ```sh
//! cargo build --release --example paced_server --target x86_64-unknown-linux-musl
//! target/x86_64-unknown-linux-musl/release/examples/paced_server 127.0.0.1:5001 \
//!     /v2/bench/one/manifests/t1 manifest.json application/vnd.oci.image.manifest.v1+json \
//!     sha256:... 200 0 0
//! ```
//!
//! Arguments: the address to listen on (loopback only), the manifest's path, the body's
//! file, its `Content-Type`, its `Docker-Content-Digest`, `DELAY_MS`, `WORK_KIB`, `PASSES`,
//! and the threads (default 2, one per core of the 2-core machine the benchmarks run on). A
//! HEAD of the path is answered at once with the GET's head, a GET of `/v2/` (the API's check)
//! with `{}`, anything else with a 404. A request head larger than 16 KiB, or one announcing a
//! body, closes its connection.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The largest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// Bytes between two writes of the work: one per 64-byte line.
const LINE: usize = 64;

/// What every connection answers with, and how it paces its GETs.
struct Server {
    /// `<path> ` as a request line goes on after its method.
    target: Vec<u8>,
    /// The manifest's whole answer, head and body.
    ok: Vec<u8>,
    /// Where `ok`'s body starts: a HEAD's answer is what comes before.
    ok_head: usize,
    /// The answer to `GET /v2/`.
    base: Vec<u8>,
    not_found: Vec<u8>,
    delay: Duration,
    work: usize,
    passes: usize,
}

/// The accept queue's length asked for (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: u32 = 4096;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, path, file, media_type, digest, delay, work_kib, passes, threads) =
        match args.as_slice() {
            [a, p, f, m, d, l, w, n] => (a, p, f, m, d, l, w, n, "2"),
            [a, p, f, m, d, l, w, n, t] => (a, p, f, m, d, l, w, n, t.as_str()),
            _ => bail!(
                "usage: paced_server ADDR PATH BODY_FILE CONTENT_TYPE DIGEST DELAY_MS WORK_KIB \
                 PASSES [THREADS]"
            ),
        };
    let addr: SocketAddr = addr.parse().context("ADDR must be IP:PORT")?;
    if !addr.ip().is_loopback() {
        bail!("{addr} is not a loopback address");
    }
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        bail!("PATH {path:?} must start with / and hold no space");
    }
    let body = std::fs::read(file).with_context(|| format!("reading {file}"))?;
    let mut ok = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {media_type}\r\ndocker-content-digest: {digest}\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    let ok_head = ok.len();
    ok.extend_from_slice(&body);
    let server = Arc::new(Server {
        target: format!("{path} ").into_bytes(),
        ok,
        ok_head,
        base: b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
            .to_vec(),
        not_found: b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec(),
        delay: Duration::from_millis(delay.parse().context("DELAY_MS")?),
        work: work_kib.parse::<usize>().context("WORK_KIB")? * 1024,
        passes: passes.parse().context("PASSES")?,
    });
    let threads: usize = threads.parse().context("THREADS")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async {
        // The queue of connections not yet accepted as long as Go's servers keep it (the
        // system's limit, `net.core.somaxconn`), not tokio's `SOMAXCONN` (128 in a musl
        // build): a generator connecting 256 at once otherwise finds it full and waits a
        // second for its SYN to be sent again.
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(BACKLOG)?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let server = Arc::clone(&server);
            tokio::spawn(async move {
                // A connection's error ends that connection only.
                let _ = serve(stream, &server).await;
            });
        }
    })
}

/// Answers the requests of one connection, one after another, until it closes.
async fn serve(mut stream: TcpStream, server: &Server) -> anyhow::Result<()> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut have = 0;
    loop {
        let end = loop {
            if let Some(i) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if have == buf.len() {
                bail!("a request head larger than {MAX_HEAD} bytes");
            }
            let n = stream.read(&mut buf[have..]).await?;
            if n == 0 {
                return Ok(());
            }
            have += n;
        };
        let head = &buf[..end];
        let announces_body = head.split(|&b| b == b'\n').any(|line| {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            name.eq_ignore_ascii_case(b"content-length")
                || name.eq_ignore_ascii_case(b"transfer-encoding")
        });
        if announces_body {
            bail!("a request with a body");
        }
        let of_manifest = |method: &[u8]| {
            head.strip_prefix(method)
                .is_some_and(|rest| rest.starts_with(&server.target))
        };
        let answer = if of_manifest(b"GET ") {
            evict(server.work, server.passes);
            if !server.delay.is_zero() {
                tokio::time::sleep(server.delay).await;
            }
            &server.ok[..]
        } else if of_manifest(b"HEAD ") {
            &server.ok[..server.ok_head]
        } else if head.starts_with(b"GET /v2/ ") {
            &server.base[..]
        } else {
            &server.not_found[..]
        };
        stream.write_all(answer).await?;
        buf.copy_within(end..have, 0);
        have -= end;
    }
}

thread_local! {
    static WORK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes one byte in each 64-byte line of `bytes` bytes of this thread's work area,
/// `passes` times: the first pass pushes what a generator ran on the same core out of the
/// caches up to the area's size, the others give the GET its CPU time. It runs on the
/// runtime's worker, as a registry's handler does its work on the thread serving the request.
fn evict(bytes: usize, passes: usize) {
    if bytes == 0 || passes == 0 {
        return;
    }
    WORK.with_borrow_mut(|work| {
        if work.len() != bytes {
            *work = vec![0u8; bytes];
        }
        for _ in 0..passes {
            for i in (0..work.len()).step_by(LINE) {
                work[i] = work[i].wrapping_add(1);
            }
            black_box(&work);
        }
    });
}
