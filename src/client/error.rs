//! Errors of the registry client: what the registry said (parsed from its error body) and
//! what went wrong below or around it. Every error maps to one [`ErrorKind`] for counting.

use std::fmt;

use crate::auth::AuthError;
use crate::metrics::ErrorKind;
use crate::net::transport::TransportError;
use crate::oci::error::RegistryErrorEntry;

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
    /// An answer that is not what the operation asked for (`not_a_manifest`, `not_json`,
    /// `digest_header_mismatch`): never counted as a success.
    #[error("{message}")]
    Unexpected { kind: ErrorKind, message: String },
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
            ClientError::Unexpected { kind, .. } => *kind,
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
    use crate::oci::error::parse_error_body;

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
}
