//! HTTP/1.1 framing for the plain pool's own exchange: a request head written from its
//! parts, a response head parsed, how the response's body is framed and a chunked body
//! decoded. No I/O here: the connection feeds bytes in and takes bytes out.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Method, StatusCode, Version};

use super::headers::{named, text, Headers, Span};
use super::req_headers::ReqHeaders;

/// Most header lines a response head may have.
pub(crate) const MAX_HEADERS: usize = 100;

/// Why bytes from the server are not an HTTP/1.1 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum H1Error {
    /// The head does not parse (`httparse`'s reason).
    Head(String),
    /// `Content-Length` is not a number, or two of them differ.
    Length(String),
    /// A `Transfer-Encoding` other than chunked last.
    Encoding(String),
    /// A chunk's size line or its end is not as HTTP/1.1 writes it.
    Chunk(String),
}

impl std::fmt::Display for H1Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H1Error::Head(e) => write!(f, "invalid response head: {e}"),
            H1Error::Length(e) => write!(f, "invalid content-length: {e}"),
            H1Error::Encoding(e) => write!(f, "unsupported transfer-encoding: {e}"),
            H1Error::Chunk(e) => write!(f, "invalid chunked body: {e}"),
        }
    }
}

impl std::error::Error for H1Error {}

/// Writes the head of a request into `out`: the request line with `target` (path and
/// query), `Host`, the `headers` as given, `User-Agent` when `user_agent` gives one (the
/// transport's own, for a request that names none), then the blank line.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    host: &HeaderValue,
    headers: &ReqHeaders,
    user_agent: Option<&HeaderValue>,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == http::header::HOST {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(agent) = user_agent {
        out.extend_from_slice(b"user-agent: ");
        out.extend_from_slice(agent.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A response head.
#[derive(Debug)]
pub(crate) struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: Headers,
}

/// Header lines a head is first parsed with: a registry's answer has about ten. A head
/// with more is parsed again with room for [`MAX_HEADERS`].
const USUAL_HEADERS: usize = 24;

/// Parses a response head at the start of `buf`, taking its bytes off `buf`; `Ok(None)`
/// while the head is not complete. Header values share the head's bytes.
pub(crate) fn parse_head(buf: &mut BytesMut) -> Result<Option<Head>, H1Error> {
    if buf.is_empty() {
        return Ok(None);
    }
    parse_head_with::<USUAL_HEADERS>(buf)
        .or_else(|| parse_head_with::<MAX_HEADERS>(buf))
        .unwrap_or_else(|| Err(H1Error::Head(httparse::Error::TooManyHeaders.to_string())))
}

/// [`parse_head`] with room for `N` header lines (the arrays are on the stack and set up on
/// every call: sized for the usual head, not the largest); `None` when the head has more.
fn parse_head_with<const N: usize>(buf: &mut BytesMut) -> Option<Result<Option<Head>, H1Error>> {
    let mut lines = [httparse::EMPTY_HEADER; N];
    let mut response = httparse::Response::new(&mut lines);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Some(Ok(None)),
        Err(httparse::Error::TooManyHeaders) => return None,
        Err(e) => return Some(Err(H1Error::Head(e.to_string()))),
    };
    let (code, http10) = (response.code.unwrap_or(0), response.version == Some(0));
    // Offsets, not the lines: they borrow `buf`, whose head is split off below. `httparse`
    // has checked each name is a token and each value holds only what HTTP allows.
    let base = buf.as_ptr() as usize;
    let offset = |p: *const u8| u32::try_from(p as usize - base).unwrap_or(u32::MAX);
    let lines: Vec<Span> = response
        .headers
        .iter()
        .map(|h| {
            let (name, value) = (offset(h.name.as_ptr()), offset(h.value.as_ptr()));
            // Both ends within a head of `len` bytes (no head is 4 GiB: reads are bounded).
            let end =
                |start: u32, n: usize| start.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            [
                name,
                end(name, h.name.len()),
                value,
                end(value, h.value.len()),
            ]
        })
        .collect();
    Some(head_at(code, http10, lines, buf, len))
}

/// The head parsed from the first `len` bytes of `buf` (status `code`, HTTP/1.0 or 1.1, its
/// header lines at `lines`), taken off `buf`.
fn head_at(
    code: u16,
    http10: bool,
    lines: Vec<Span>,
    buf: &mut BytesMut,
    len: usize,
) -> Result<Option<Head>, H1Error> {
    let status = StatusCode::from_u16(code).map_err(|e| H1Error::Head(e.to_string()))?;
    let version = if http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let head = buf.split_to(len).freeze();
    if lines
        .iter()
        .any(|s| s[1] as usize > len || s[3] as usize > len)
    {
        return Err(H1Error::Head("a header line outside the head".to_owned()));
    }
    Ok(Some(Head {
        status,
        version,
        headers: Headers::lines(head, lines),
    }))
}

/// How a response's body is delimited (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: an answer to HEAD, a 1xx, 204 or 304.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// The framing of the body of `head`, an answer to `method`.
pub(crate) fn framing(method: &Method, head: &Head) -> Result<Framing, H1Error> {
    let status = head.status;
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Empty);
    }
    // One pass over the lines: the last transfer coding named (of those that are text) and
    // every length given, which must agree; a transfer coding decides over any length.
    let mut coded = false;
    let mut last_coding = "";
    let mut length: Result<Option<u64>, &[u8]> = Ok(None);
    head.headers.each_raw(|name, value| {
        if named(name, TRANSFER_ENCODING.as_str()) {
            coded = true;
            let codings = text(value).into_iter().flat_map(|v| v.split(','));
            if let Some(last) = codings.map(str::trim).rfind(|c| !c.is_empty()) {
                last_coding = last;
            }
        } else if named(name, CONTENT_LENGTH.as_str()) {
            for part in value.split(|&b| b == b',') {
                length = match (length, digits(part.trim_ascii())) {
                    (Ok(None), Some(n)) => Ok(Some(n)),
                    (Ok(Some(l)), Some(n)) if l == n => Ok(Some(n)),
                    (Err(e), _) => Err(e),
                    _ => Err(value),
                };
            }
        }
    });
    if coded {
        return if last_coding.eq_ignore_ascii_case("chunked") {
            Ok(Framing::Chunked)
        } else {
            Err(H1Error::Encoding(last_coding.to_owned()))
        };
    }
    match length {
        Ok(length) => Ok(length.map_or(Framing::Close, Framing::Length)),
        Err(value) => Err(H1Error::Length(String::from_utf8_lossy(value).into_owned())),
    }
}

/// A decimal number of ASCII digits only (no sign, no space), if it fits.
fn digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return None;
    }
    b.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .flatten()
    })
}

/// Whether the connection may carry another request after this response.
pub(crate) fn keep_alive(head: &Head, framing: Framing) -> bool {
    if framing == Framing::Close {
        return false;
    }
    let (mut close, mut keep) = (false, false);
    head.headers.each_raw(|name, value| {
        if named(name, CONNECTION.as_str()) {
            for token in text(value).into_iter().flat_map(|v| v.split(',')) {
                let token = token.trim();
                close |= token.eq_ignore_ascii_case("close");
                keep |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    });
    match head.version {
        Version::HTTP_10 => keep && !close,
        _ => !close,
    }
}

/// Largest piece of a chunk's data handed on at once (each costs the reading task a unit
/// of its cooperative budget: `src/net/plain_pool.rs`).
pub(crate) const MAX_PIECE: usize = 64 * 1024;

/// Longest chunk-size line (size, extensions) accepted.
const MAX_CHUNK_LINE: usize = 4096;

/// Where a chunked body's decoding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a size line.
    Size,
    /// This many bytes of data left in the chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk, up to the blank line.
    Trailer,
    /// The body has ended.
    Done,
}

/// What [`ChunkedDecoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    Data(Bytes),
    /// More bytes are needed.
    More,
    /// The body has ended; the bytes after it are the next response's.
    End,
}

/// Decodes a chunked body from the connection's read buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ChunkedDecoder {
    state: Chunk,
}

impl ChunkedDecoder {
    pub(crate) fn new() -> Self {
        ChunkedDecoder { state: Chunk::Size }
    }

    /// The next piece of the body from `buf` (taking the bytes it used off `buf`).
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, H1Error> {
        loop {
            match self.state {
                Chunk::Done => return Ok(Decoded::End),
                Chunk::Size => {
                    let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Decoded::More);
                    };
                    let size = chunk_size(&line)?;
                    self.state = if size == 0 {
                        Chunk::Trailer
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let n = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(buf.len())
                        .min(MAX_PIECE);
                    let data = buf.split_to(n).freeze();
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                Chunk::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(H1Error::Chunk("no CRLF after a chunk's data".into()));
                    }
                    buf.advance(2);
                    self.state = Chunk::Size;
                }
                Chunk::Trailer => {
                    let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Decoded::More);
                    };
                    if line.is_empty() {
                        self.state = Chunk::Done;
                    }
                }
            }
        }
    }
}

/// A line (without its CRLF) taken off `buf`; `None` while it is not complete.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, H1Error> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let line = buf.split_to(end + 1).freeze();
            let line = line.slice(..end);
            let line = match line.last() {
                Some(b'\r') => line.slice(..end - 1),
                _ => line,
            };
            Ok(Some(line))
        }
        None if buf.len() > max => Err(H1Error::Chunk("a line too long".into())),
        None => Ok(None),
    }
}

/// The size of a chunk from its size line (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<u64, H1Error> {
    let digits = line.split(|&b| b == b';').next().unwrap_or(b"");
    let digits = digits.trim_ascii();
    if digits.is_empty() || digits.len() > 16 {
        return Err(H1Error::Chunk(format!(
            "size line {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    let text = std::str::from_utf8(digits).map_err(|e| H1Error::Chunk(e.to_string()))?;
    u64::from_str_radix(text, 16)
        .map_err(|_| H1Error::Chunk(format!("size line {:?}", String::from_utf8_lossy(line))))
}

#[cfg(test)]
mod tests {
    //! Framing cases a real registry does not produce on demand (a bad length, a broken
    //! chunk, a head split anywhere); the exchange itself is tested against registries.

    use super::*;

    fn head_of(text: &str) -> Head {
        let mut buf = BytesMut::from(text.as_bytes());
        parse_head(&mut buf).unwrap().unwrap()
    }

    #[test]
    fn a_request_head_is_written_as_http_1_1() {
        let mut headers = ReqHeaders::new();
        headers.insert(http::header::ACCEPT, HeaderValue::from_static("a/b"));
        headers.insert(http::header::HOST, HeaderValue::from_static("ignored"));
        let mut out = Vec::new();
        let host = HeaderValue::from_static("127.0.0.1:5000");
        write_head(
            &mut out,
            &Method::GET,
            "/v2/a/manifests/t",
            &host,
            &headers,
            None,
        );
        assert_eq!(
            out,
            b"GET /v2/a/manifests/t HTTP/1.1\r\nhost: 127.0.0.1:5000\r\naccept: a/b\r\n\r\n"
        );
        out.clear();
        let agent = HeaderValue::from_static("creb-rs/1");
        write_head(&mut out, &Method::HEAD, "", &host, &headers, Some(&agent));
        assert_eq!(
            out,
            b"HEAD / HTTP/1.1\r\nhost: 127.0.0.1:5000\r\naccept: a/b\r\nuser-agent: creb-rs/1\r\n\r\n"
        );
    }

    #[test]
    fn heads_with_more_lines_than_usual_parse_up_to_the_limit() {
        let head = |lines: usize| {
            let mut text = String::from("HTTP/1.1 200 OK\r\n");
            for i in 0..lines {
                text.push_str(&format!("X-H{i}: {i}\r\n"));
            }
            text + "\r\n"
        };
        let many = head_of(&head(USUAL_HEADERS + 6));
        assert_eq!(many.headers.len(), USUAL_HEADERS + 6);
        assert_eq!(many.headers.get_str("x-h29"), Some("29"));
        let mut buf = BytesMut::from(head(MAX_HEADERS + 1).as_bytes());
        let err = parse_head(&mut buf).unwrap_err();
        assert!(err.to_string().contains("too many headers"), "{err}");
        assert!(parse_head(&mut BytesMut::new()).unwrap().is_none());
    }

    #[test]
    fn header_names_are_found_in_any_case_and_kept_as_sent() {
        let head = head_of(
            "HTTP/1.1 200 OK\r\nDOCKER-Content-Digest: sha256:ab\r\n\
             docker-distribution-api-version: registry/2.0\r\nX-Content-Type-Options: nosniff\r\n\
             Docker-Upload-UUID: u1\r\nDocker-Content-Digests: other\r\nX-Content-Type: t\r\n\r\n",
        );
        let names: Vec<&str> = head.headers.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "DOCKER-Content-Digest",
                "docker-distribution-api-version",
                "X-Content-Type-Options",
                "Docker-Upload-UUID",
                "Docker-Content-Digests",
                "X-Content-Type"
            ]
        );
        assert_eq!(
            head.headers.get_str("docker-content-digest"),
            Some("sha256:ab")
        );
        assert_eq!(head.headers.get_str("docker-upload-uuid"), Some("u1"));
        assert_eq!(
            head.headers.get_str("docker-content-digests"),
            Some("other")
        );
        assert_eq!(head.headers.get_str("docker-content-diges"), None);
        assert_eq!(head.headers.get_str("x-content-type"), Some("t"));
    }

    #[test]
    fn a_head_split_anywhere_parses_once_whole() {
        let text = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b\r\n\r\nabc";
        for cut in 0..text.len() {
            let mut buf = BytesMut::from(&text.as_bytes()[..cut]);
            let partial = parse_head(&mut buf).unwrap();
            if cut < text.len() - 3 {
                assert!(partial.is_none(), "cut at {cut}");
            }
        }
        let mut buf = BytesMut::from(text.as_bytes());
        let head = parse_head(&mut buf).unwrap().unwrap();
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(head.headers.get_str("x-a"), Some("b"));
        assert_eq!(&buf[..], b"abc");
        assert_eq!(framing(&Method::GET, &head), Ok(Framing::Length(3)));
        assert!(keep_alive(&head, Framing::Length(3)));
    }

    #[test]
    fn garbage_is_not_a_head() {
        let mut buf = BytesMut::from(&b"<html>\r\n\r\n"[..]);
        assert!(matches!(parse_head(&mut buf), Err(H1Error::Head(_))));
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases: [(&str, Method, Result<Framing, ()>); 13] = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                Method::GET,
                Ok(Framing::Chunked),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                Method::GET,
                Err(()),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
                Method::GET,
                Err(()),
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 18446744073709551615\r\n\r\n",
                Method::GET,
                Ok(Framing::Length(u64::MAX)),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
                Method::HEAD,
                Ok(Framing::Empty),
            ),
            (
                "HTTP/1.1 204 No Content\r\n\r\n",
                Method::GET,
                Ok(Framing::Empty),
            ),
            (
                "HTTP/1.1 304 Not Modified\r\n\r\n",
                Method::GET,
                Ok(Framing::Empty),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n",
                Method::GET,
                Ok(Framing::Chunked),
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                Method::GET,
                Err(()),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
                Method::GET,
                Ok(Framing::Length(5)),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                Method::GET,
                Err(()),
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                Method::GET,
                Err(()),
            ),
            ("HTTP/1.1 200 OK\r\n\r\n", Method::GET, Ok(Framing::Close)),
        ];
        for (text, method, want) in cases {
            let got = framing(&method, &head_of(text)).map_err(|_| ());
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn keep_alive_as_each_version_says() {
        let h11 = head_of("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(keep_alive(&h11, Framing::Length(0)));
        let close = head_of("HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\n");
        assert!(!keep_alive(&close, Framing::Length(0)));
        let h10 = head_of("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(!keep_alive(&h10, Framing::Length(0)));
        let h10ka = head_of("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(keep_alive(&h10ka, Framing::Length(0)));
        assert!(!keep_alive(&h11, Framing::Close));
    }

    /// Feeds `wire` to a decoder `step` bytes at a time; the body, or the first error.
    fn decode_all(wire: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), H1Error> {
        let mut decoder = ChunkedDecoder::new();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match decoder.decode(&mut buf)? {
                Decoded::Data(d) => body.extend_from_slice(&d),
                Decoded::End => return Ok((body, buf.to_vec())),
                Decoded::More => {
                    if fed == wire.len() {
                        return Err(H1Error::Chunk("ended early".into()));
                    }
                    let n = step.min(wire.len() - fed);
                    buf.extend_from_slice(&wire[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn a_chunked_body_decodes_whatever_the_reads() {
        let wire =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64, 1024] {
            let (body, rest) = decode_all(wire, step).unwrap();
            assert_eq!(body, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            // What follows the body stays for the next response (as far as it was read).
            assert!(b"NEXT".starts_with(&rest[..]), "step {step}: {rest:?}");
        }
    }

    #[test]
    fn a_broken_chunked_body_is_an_error() {
        for wire in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"\r\n",
            b"11111111111111111\r\n",
        ] {
            assert!(
                matches!(decode_all(wire, 4), Err(H1Error::Chunk(_))),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let endless = vec![b'1'; MAX_CHUNK_LINE + 2];
        assert!(decode_all(&endless, 4096).is_err());
    }
}
