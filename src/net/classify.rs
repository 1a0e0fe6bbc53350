//! Low-level errors (io, hyper, rustls, DNS) mapped to an [`ErrorKind`], described in one
//! line, and told apart when a request was never processed (safe to send again).

use super::tls;
use super::transport::Unprocessed;
use crate::metrics::ErrorKind;

/// Refines `kind` by what the error chain below `err` says: refused or reset connections,
/// timeouts, early ends, TLS and DNS failures.
pub(crate) fn classify_chain(
    err: &(dyn std::error::Error + 'static),
    mut kind: ErrorKind,
) -> ErrorKind {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            match io.kind() {
                Io::ConnectionRefused
                | Io::AddrNotAvailable
                | Io::HostUnreachable
                | Io::NetworkUnreachable => kind = ErrorKind::Connect,
                Io::ConnectionReset | Io::ConnectionAborted => kind = ErrorKind::Reset,
                Io::BrokenPipe => kind = ErrorKind::ConnectionClosed,
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
                kind = ErrorKind::ConnectionClosed;
            }
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let closed_under_us = h2.is_go_away()
                || h2
                    .get_io()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if closed_under_us {
                kind = ErrorKind::ConnectionClosed;
            } else if h2.is_reset() {
                kind = ErrorKind::Reset;
            }
        }
        let text = e.to_string();
        if text.contains("dns error") || text.contains("failed to lookup address") {
            kind = ErrorKind::Dns;
        }
        source = e.source();
    }
    kind
}

/// A body-read error's kind: a connection that closes before the announced length is a
/// short body.
pub(crate) fn body_kind(err: &(dyn std::error::Error + 'static), kind: ErrorKind) -> ErrorKind {
    let kind = classify_chain(err, kind);
    if !matches!(
        kind,
        ErrorKind::Reset | ErrorKind::ConnectionClosed | ErrorKind::Other | ErrorKind::Body
    ) {
        return kind;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
            || e.to_string()
                .contains("end of file before message length reached")
        {
            return ErrorKind::ShortBody;
        }
        source = e.source();
    }
    kind
}

/// Whether the server provably never processed the request that failed with `err`: an
/// HTTP/2 stream above the last stream id of the server's GOAWAY, or one it refused
/// (RFC 9113 §8.7). Such a request can go out again on another connection.
pub(crate) fn unprocessed_of(err: &(dyn std::error::Error + 'static)) -> Option<Unprocessed> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.is_remote() && h2.is_go_away() {
                return Some(Unprocessed::GoAway);
            }
            if h2.is_remote() && h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return Some(Unprocessed::RefusedStream);
            }
        }
        source = e.source();
    }
    None
}

/// The error chain below (and including) `top` as one line, each distinct message once; a
/// refused certificate or a server that does not speak TLS is said plainly first, with
/// what to do.
pub(crate) fn describe_chain(top: String, err: &(dyn std::error::Error + 'static)) -> String {
    let detail = chain_text(top, err);
    match rustls_error(err).and_then(tls::advice) {
        Some(advice) => format!("{advice} ({detail})"),
        None => detail,
    }
}

fn chain_text(top: String, err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![top];
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

/// Whether `e` is a rustls error, possibly inside `io::Error`s: a refused certificate comes
/// as io(Other, io(InvalidData, rustls)), and `io::Error::source()` skips the wrapped error
/// itself, so walking the source chain alone calls it `connect`.
fn is_rustls(e: &(dyn std::error::Error + 'static)) -> bool {
    rustls_inside(e).is_some()
}

fn rustls_inside<'e>(mut e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    loop {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        e = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())?;
    }
}

/// The rustls error anywhere in `err`'s chain.
fn rustls_error<'e>(err: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(r) = rustls_inside(e) {
            return Some(r);
        }
        source = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_certificate_inside_nested_io_errors_is_tls() {
        // How hyper-util hands over a failed handshake (tests/it/tls.rs sees it for real).
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        let outer = std::io::Error::other(inner);
        assert!(is_rustls(&outer));
        assert!(!is_rustls(&std::io::Error::other("refused")));
        assert_eq!(classify_chain(&outer, ErrorKind::Other), ErrorKind::Tls);
    }

    #[test]
    fn io_errors_map_to_their_kinds() {
        let cases = [
            (std::io::ErrorKind::ConnectionRefused, ErrorKind::Connect),
            (std::io::ErrorKind::ConnectionReset, ErrorKind::Reset),
            (std::io::ErrorKind::BrokenPipe, ErrorKind::ConnectionClosed),
            (std::io::ErrorKind::TimedOut, ErrorKind::Timeout),
            (std::io::ErrorKind::UnexpectedEof, ErrorKind::ShortBody),
            (std::io::ErrorKind::PermissionDenied, ErrorKind::Other),
        ];
        for (io, want) in cases {
            let e = std::io::Error::new(io, "x");
            assert_eq!(classify_chain(&e, ErrorKind::Other), want, "{io:?}");
        }
        let dns = std::io::Error::other("dns error: failed to lookup address information");
        assert_eq!(classify_chain(&dns, ErrorKind::Connect), ErrorKind::Dns);
    }

    #[test]
    fn a_body_cut_short_is_a_short_body() {
        let e = std::io::Error::other("end of file before message length reached");
        assert_eq!(body_kind(&e, ErrorKind::Body), ErrorKind::ShortBody);
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "x");
        assert_eq!(body_kind(&refused, ErrorKind::Body), ErrorKind::Connect);
    }
}
