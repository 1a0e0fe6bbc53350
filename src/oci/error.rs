//! Errors of the OCI client: what the registry said (parsed from its error body) and what
//! went wrong below or around it. Every error maps to one [`ErrorKind`] for counting.

use std::fmt;

use serde::Deserialize;

use super::transport::TransportError;
use crate::auth::AuthError;
use crate::metrics::ErrorKind;

/// One entry of a registry error body `{"errors":[{"code","message","detail"}]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryErrorEntry {
    /// `BLOB_UNKNOWN`, `MANIFEST_INVALID`, `UNAUTHORIZED`, `TOOMANYREQUESTS`, ...
    pub code: String,
    pub message: String,
}

#[derive(Deserialize)]
struct Body {
    #[serde(default)]
    errors: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// Parses an error body leniently: JSON per the spec, otherwise the first line of text
/// (proxies and some registries answer 4xx/5xx in plain text or HTML).
pub fn parse_error_body(body: &[u8]) -> Vec<RegistryErrorEntry> {
    if let Ok(parsed) = serde_json::from_slice::<Body>(body) {
        return parsed
            .errors
            .into_iter()
            .map(|e| RegistryErrorEntry {
                code: e.code,
                message: e.message,
            })
            .collect();
    }
    let text = String::from_utf8_lossy(body);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        Some(line) => vec![RegistryErrorEntry {
            code: String::new(),
            message: line.chars().take(200).collect(),
        }],
        None => Vec::new(),
    }
}

/// Why a client operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Transport(TransportError),
    #[error("registry answered {status}{}", describe_entries(.errors))]
    Status {
        status: u16,
        errors: Vec<RegistryErrorEntry>,
        /// Seconds from `Retry-After`, on 429 and 503.
        retry_after: Option<u64>,
    },
    #[error("content does not match its digest: expected {expected}, got {actual}")]
    DigestMismatch { expected: String, actual: String },
    #[error("expected {expected} bytes, got {actual}")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("{0}")]
    Auth(#[from] AuthError),
    #[error("cancelled by shutdown")]
    Cancelled,
}

fn describe_entries(errors: &[RegistryErrorEntry]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = errors
        .iter()
        .map(|e| match (e.code.is_empty(), e.message.is_empty()) {
            (false, false) => format!("{}: {}", e.code, e.message),
            (false, true) => e.code.clone(),
            _ => e.message.clone(),
        })
        .collect();
    format!(" ({})", parts.join("; "))
}

impl ClientError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Transport(t) => t.kind,
            ClientError::Status { status, .. } => ErrorKind::Http(*status),
            ClientError::DigestMismatch { .. } => ErrorKind::DigestMismatch,
            ClientError::SizeMismatch { .. } => ErrorKind::SizeMismatch,
            ClientError::Protocol(_) => ErrorKind::Protocol,
            ClientError::Auth(_) => ErrorKind::Auth,
            ClientError::Cancelled => ErrorKind::Cancelled,
        }
    }

    /// The registry's error codes, if it sent any.
    pub fn codes(&self) -> Vec<&str> {
        match self {
            ClientError::Status { errors, .. } => errors
                .iter()
                .map(|e| e.code.as_str())
                .filter(|c| !c.is_empty())
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl From<TransportError> for ClientError {
    fn from(e: TransportError) -> Self {
        ClientError::Transport(e)
    }
}

/// An error with the operation it happened in, for messages.
#[derive(Debug, Clone)]
pub struct OpError {
    pub what: String,
    pub error: ClientError,
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.error)
    }
}

impl std::error::Error for OpError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_error_body() {
        let body = br#"{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry","detail":"sha256:00"}]}"#;
        let e = parse_error_body(body);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].code, "BLOB_UNKNOWN");
        let err = ClientError::Status {
            status: 404,
            errors: e,
            retry_after: None,
        };
        assert_eq!(err.kind(), ErrorKind::Http(404));
        assert_eq!(err.codes(), vec!["BLOB_UNKNOWN"]);
        assert_eq!(
            err.to_string(),
            "registry answered 404 (BLOB_UNKNOWN: blob unknown to registry)"
        );
    }

    #[test]
    fn lenient_bodies() {
        assert!(parse_error_body(b"").is_empty());
        let e = parse_error_body(b"\n<html>502 Bad Gateway</html>\n");
        assert_eq!(e[0].message, "<html>502 Bad Gateway</html>");
        assert_eq!(e[0].code, "");
        // JSON without an errors array is treated as empty, not as an error.
        assert!(parse_error_body(br#"{"detail":"x"}"#).is_empty());
    }
}
