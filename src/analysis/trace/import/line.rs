//! One access-log line as every format's parser gives it: a request of the registry API,
//! a line that is not one (with why), or a line that is not of the format; what an HTTP
//! request line is (a TLS handshake or an HTTP/2 preface sent to a plain port is not one);
//! and the Go duration syntax the Go registries log.

/// One request as a log line gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRequest {
    /// When the response completed, Unix ms.
    pub end_ms: f64,
    pub duration_s: f64,
    pub method: String,
    pub uri: String,
    pub remote: String,
    pub useragent: String,
    pub status: u16,
    pub written: u64,
    /// The request body's size, where the log gives it (nginx `$content_length`).
    pub body: Option<u64>,
    pub host: String,
    pub id: Option<String>,
    /// The time is known to the second only (nginx `$time_local`).
    pub second_resolution: bool,
}

/// What a line is.
#[derive(Debug)]
pub enum Parsed {
    Request(LogRequest),
    /// Not a request of the registry API; the reason is counted.
    Ignored(&'static str),
    /// Not a line of the format.
    Malformed(String),
}

/// Why a request line that is not HTTP/1 is skipped.
pub const NOT_HTTP: &str = "not_http";

/// Whether `method` is an HTTP method token (`GET`, `PROPFIND`): what a server logs from a
/// request line it could parse. Bytes of a TLS handshake are not.
pub fn is_method(method: &str) -> bool {
    !method.is_empty()
        && method
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}

/// `GET /v2/x HTTP/1.1` → method and target; `None` when the line is not an HTTP request
/// line: what a client probing TLS on a plain port (nginx logs the ClientHello's
/// bytes as `\x16\x03…`), an HTTP/2 preface (`PRI * HTTP/2.0`), a port scan or binary
/// leaves in a log.
pub fn request_line(request: &str) -> Option<(String, String)> {
    let mut parts = request.split(' ');
    let (method, target, protocol) = (parts.next()?, parts.next()?, parts.next());
    // nginx logs requests of HTTP/2 and 3 connections with their version too.
    let http = protocol.is_none_or(|p| p.starts_with("HTTP/"));
    let target_ok = target.starts_with('/')
        || target.starts_with("http://")
        || target.starts_with("https://")
        || (target == "*" && method == "OPTIONS");
    (parts.next().is_none() && is_method(method) && target_ok && http)
        .then(|| (method.to_owned(), target.to_owned()))
}

/// A Go duration (`1.04028ms`, `2.5s`, `1m2.3s`, `850µs`) in seconds.
pub fn parse_go_duration(s: &str) -> Option<f64> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(0.0);
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let (unit, scale) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("μs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))?;
        total += value * scale;
        rest = &rest[unit.len()..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_an_http1_request_line() {
        assert_eq!(
            request_line("GET /v2/ HTTP/1.1"),
            Some(("GET".into(), "/v2/".into()))
        );
        assert!(request_line("HEAD /v2/a/blobs/sha256:00 HTTP/1.0").is_some());
        assert!(
            request_line("GET /v2/").is_some(),
            "HTTP/0.9 has no protocol"
        );
        assert!(request_line("OPTIONS * HTTP/1.1").is_some());
        assert!(
            request_line("GET /v2/ HTTP/2.0").is_some(),
            "a request on an h2 connection"
        );
        // What a TLS probe, an HTTP/2 preface, a scanner and binary leave in nginx's log.
        for junk in [
            r"\x16\x03\x01\x05\xD4\x01\x00\x05\xD0\x03\x033\x0E\x87j",
            r"\x16\x03\x01 \x05\xD4\x01",
            "PRI * HTTP/2.0",
            "HELLO",
            "\u{0}\u{1}\u{2}garbage",
            "",
            "-",
            "GET /v2/ HTTP/1.1 extra",
            "get /v2/ HTTP/1.1",
        ] {
            assert_eq!(request_line(junk), None, "{junk:?}");
        }
    }
}
