//! A registry that misbehaves on purpose, on raw TCP: what a real registry, proxy or portal
//! does now and then (a body that never ends, an HTML page for a manifest, a stall), which
//! no real registry does on demand. Each connection carries one exchange and is closed.
//!
//! The server answers by the request's method and path, through the test's own function.
//! Every connection thread heeds the server's stop, so a dropped server leaves no thread
//! writing or waiting.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server does with a request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A whole answer: status, headers, body (Content-Length set).
    Whole {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Status 200 and a chunked body that never ends.
    Endless { headers: Vec<(String, String)> },
    /// A Content-Length of `promised`, `sent` bytes of it, then silence.
    ShortThenStall { promised: u64, sent: usize },
    /// Headers, then one byte of the body every `every`, for ever.
    Trickle {
        headers: Vec<(String, String)>,
        every: Duration,
    },
    /// Nothing at all: the connection is accepted and left silent.
    Silent,
}

impl Answer {
    /// A 200 with a JSON body and `content_type`.
    pub fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Answer {
        Answer::Whole {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// A status with no body.
    pub fn status(status: u16) -> Answer {
        Answer::Whole {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The same answer with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        match &mut self {
            Answer::Whole { headers, .. }
            | Answer::Endless { headers }
            | Answer::Trickle { headers, .. } => headers.push((name.into(), value.into())),
            Answer::ShortThenStall { .. } | Answer::Silent => {}
        }
        self
    }
}

/// The misbehaving registry: `http://127.0.0.1:PORT`.
pub struct Misbehaving {
    pub url: String,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
}

impl Misbehaving {
    /// Starts the server; `answer` decides each request's answer.
    pub fn start(answer: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> Misbehaving {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let answer = Arc::new(answer);
        let (s, n) = (Arc::clone(&stop), Arc::clone(&requests));
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (s, answer) = (Arc::clone(&s), Arc::clone(&answer));
                        n.fetch_add(1, Ordering::Relaxed);
                        std::thread::spawn(move || serve(stream, &*answer, &s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Misbehaving {
            url,
            stop,
            requests,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Misbehaving {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut length = 0usize;
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.to_ascii_lowercase(), value.trim().to_owned());
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    // The request body, if any, read and dropped.
    let mut body = vec![0u8; length.min(64 << 20)];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
    })
}

fn head(status: u16, headers: &[(String, String)]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.into_bytes()
}

fn serve(mut stream: TcpStream, answer: &dyn Fn(&Request) -> Answer, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let Some(request) = read_request(&stream) else {
        return;
    };
    let wait = |d: Duration| {
        std::thread::sleep(d);
        !stop.load(Ordering::Relaxed)
    };
    match answer(&request) {
        Answer::Whole {
            status,
            headers,
            body,
        } => {
            let mut out = head(status, &headers);
            // A HEAD may claim any length: a Content-Length among the headers stands.
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            {
                out.extend_from_slice(format!("Content-Length: {}", body.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            if request.method != "HEAD" {
                out.extend_from_slice(&body);
            }
            let _ = stream.write_all(&out);
        }
        Answer::Endless { headers } => {
            let mut out = head(200, &headers);
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            if stream.write_all(&out).is_err() {
                return;
            }
            let chunk = [b'x'; 4096];
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
            while !stop.load(Ordering::Relaxed) {
                if stream.write_all(&framed).is_err() {
                    return;
                }
            }
        }
        Answer::ShortThenStall { promised, sent } => {
            let mut out = head(200, &[]);
            out.extend_from_slice(format!("Content-Length: {promised}\r\n\r\n").as_bytes());
            out.extend(std::iter::repeat_n(b'y', sent));
            if stream.write_all(&out).is_err() {
                return;
            }
            while wait(Duration::from_millis(50)) {}
        }
        Answer::Trickle { headers, every } => {
            let mut out = head(200, &headers);
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            if stream.write_all(&out).is_err() {
                return;
            }
            while wait(every) {
                if stream.write_all(b"1\r\nz\r\n").is_err() {
                    return;
                }
            }
        }
        Answer::Silent => while wait(Duration::from_millis(50)) {},
    }
}
