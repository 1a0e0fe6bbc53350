//! A fault-injecting HTTP/1.1 proxy on loopback, in front of a real registry.
//!
//! Every request is forwarded to the upstream on a fresh connection (`Connection: close`,
//! `Host` kept, so the registry's `Location`s point back at the proxy); the response is read
//! whole, then a [`Fault`] is applied to it when the request matches the proxy's filter
//! (by default: blob GETs). Faults act on the wire as broken servers do: late answers,
//! bodies that stop arriving, connections reset with a TCP RST, bodies shorter than their
//! `Content-Length`, flipped bytes. No real registry does these on demand, so this proxy
//! stands in for a broken server; everything behind it is a real docker-registry.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does to a matching exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward unchanged.
    None,
    /// Wait this long before sending the response.
    Delay(Duration),
    /// Send the head and half of the body, then send nothing more (the connection stays
    /// open until the client gives up).
    StallMidBody,
    /// Close the connection with the request still unread, which makes the kernel answer
    /// with a TCP RST instead of a FIN.
    Reset,
    /// Send the head (announcing the full `Content-Length`) and half of the body, then close
    /// cleanly.
    Truncate,
    /// Flip the bits of one byte in the middle of the body.
    CorruptByte,
    /// Serve matching exchanges as one server would, one at a time, each taking exactly this
    /// long: an exchange is answered this long after the later of its arrival and the
    /// previous one's answer (forwarded meanwhile, then held until its time). The timeline
    /// is kept exact whatever the proxy's threads' wake-ups, so the capacity is 1 / this by
    /// construction, and the queue is first come, first served.
    Serial(Duration),
}

type Filter = dyn Fn(&str, &str) -> bool + Send + Sync;

/// The proxy; runs on its own threads until the process ends.
pub struct FaultProxy {
    pub addr: SocketAddr,
    pub url: String,
    fault: Arc<Mutex<Fault>>,
    filter: Arc<Mutex<Arc<Filter>>>,
    connections: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    faulted: Arc<AtomicU64>,
}

/// The default filter: GETs of blobs.
pub fn blob_gets(method: &str, path: &str) -> bool {
    method == "GET" && path.contains("/blobs/sha256:")
}

impl FaultProxy {
    /// A proxy in front of `127.0.0.1:upstream_port` applying `fault` to blob GETs.
    pub fn start(upstream_port: u16, fault: Fault) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let proxy = FaultProxy {
            addr,
            url: format!("http://{addr}"),
            fault: Arc::new(Mutex::new(fault)),
            filter: Arc::new(Mutex::new(Arc::new(blob_gets))),
            connections: Arc::new(AtomicU64::new(0)),
            requests: Arc::new(AtomicU64::new(0)),
            faulted: Arc::new(AtomicU64::new(0)),
        };
        let (fault, filter) = (Arc::clone(&proxy.fault), Arc::clone(&proxy.filter));
        let (connections, requests, faulted) = (
            Arc::clone(&proxy.connections),
            Arc::clone(&proxy.requests),
            Arc::clone(&proxy.faulted),
        );
        let serial = Arc::new(Mutex::new(None));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                connections.fetch_add(1, Ordering::Relaxed);
                let ctx = Ctx {
                    upstream: upstream_port,
                    fault: Arc::clone(&fault),
                    filter: Arc::clone(&filter),
                    requests: Arc::clone(&requests),
                    faulted: Arc::clone(&faulted),
                    serial: Arc::clone(&serial),
                };
                std::thread::spawn(move || {
                    let _ = serve(client, &ctx);
                });
            }
        });
        proxy
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Which requests (method, path) the fault applies to.
    pub fn set_filter(&self, filter: impl Fn(&str, &str) -> bool + Send + Sync + 'static) {
        *self.filter.lock().unwrap() = Arc::new(filter);
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Exchanges a fault was applied to so far.
    pub fn faulted(&self) -> u64 {
        self.faulted.load(Ordering::Relaxed)
    }
}

struct Ctx {
    upstream: u16,
    fault: Arc<Mutex<Fault>>,
    filter: Arc<Mutex<Arc<Filter>>>,
    requests: Arc<AtomicU64>,
    faulted: Arc<AtomicU64>,
    /// When a `Fault::Serial` server answers its last exchange queued so far.
    serial: Arc<Mutex<Option<std::time::Instant>>>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Waits until a whole request head is buffered and returns it without consuming it
/// (`None` when the client closed).
fn peek_head(stream: &TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.peek(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = find(&buf[..n], b"\r\n\r\n") {
            return Ok(Some(buf[..i + 4].to_vec()));
        }
        if n == buf.len() {
            return Err(std::io::Error::other("request head too large"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn serve(mut client: TcpStream, ctx: &Ctx) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(120)))?;
    loop {
        let Some(head) = peek_head(&client)? else {
            return Ok(());
        };
        ctx.requests.fetch_add(1, Ordering::Relaxed);
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut parts = text.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let filter = Arc::clone(&ctx.filter.lock().unwrap());
        let fault = if filter(&method, &path) {
            *ctx.fault.lock().unwrap()
        } else {
            Fault::None
        };
        if fault != Fault::None {
            ctx.faulted.fetch_add(1, Ordering::Relaxed);
        }
        if fault == Fault::Reset {
            // The head is still unread in the socket's receive buffer: closing now makes
            // the kernel send RST.
            drop(client);
            return Ok(());
        }
        let mut consumed = vec![0u8; head.len()];
        client.read_exact(&mut consumed)?;
        assert!(
            header(&text, "transfer-encoding").is_none(),
            "the fault proxy expects Content-Length request bodies"
        );
        let length: usize = header(&text, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        client.read_exact(&mut body)?;

        // A serial server's answer is due a service time after the later of this arrival
        // and the answer queued before it.
        let due = match fault {
            Fault::Serial(d) => {
                let arrived = std::time::Instant::now();
                let mut last = ctx.serial.lock().unwrap_or_else(|e| e.into_inner());
                let due = last.map_or(arrived, |l| l.max(arrived)) + d;
                *last = Some(due);
                Some(due)
            }
            _ => None,
        };
        // Forward with `Connection: close` and read the whole answer.
        let mut request = String::new();
        for (i, line) in text.trim_end_matches("\r\n").split("\r\n").enumerate() {
            if i > 0 && line.to_ascii_lowercase().starts_with("connection:") {
                continue;
            }
            request.push_str(line);
            request.push_str("\r\n");
        }
        request.push_str("Connection: close\r\n\r\n");
        let mut upstream = TcpStream::connect(("127.0.0.1", ctx.upstream))?;
        upstream.write_all(request.as_bytes())?;
        upstream.write_all(&body)?;
        let mut response = Vec::new();
        upstream.read_to_end(&mut response)?;
        let split = find(&response, b"\r\n\r\n").map_or(response.len(), |i| i + 4);
        let (response_head, response_body) = response.split_at(split);
        let half = response_body.len() / 2;

        match fault {
            Fault::None | Fault::Reset => client.write_all(&response)?,
            Fault::Delay(d) => {
                std::thread::sleep(d);
                client.write_all(&response)?;
            }
            Fault::Serial(_) => {
                if let Some(due) = due {
                    std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
                }
                client.write_all(&response)?;
            }
            Fault::CorruptByte => {
                let mut body = response_body.to_vec();
                if let Some(b) = body.get_mut(half) {
                    *b ^= 0xff;
                }
                client.write_all(response_head)?;
                client.write_all(&body)?;
            }
            Fault::Truncate => {
                client.write_all(response_head)?;
                client.write_all(&response_body[..half])?;
                client.flush()?;
                let _ = client.shutdown(Shutdown::Write);
                // Wait for the client to close its side, so no unread byte turns our close
                // into a reset.
                let mut sink = [0u8; 1024];
                while matches!(client.read(&mut sink), Ok(n) if n > 0) {}
                return Ok(());
            }
            Fault::StallMidBody => {
                client.write_all(response_head)?;
                client.write_all(&response_body[..half])?;
                client.flush()?;
                // Hold the connection until the client gives up on it.
                let mut sink = [0u8; 1024];
                while matches!(client.read(&mut sink), Ok(n) if n > 0) {}
                return Ok(());
            }
        }
    }
}
