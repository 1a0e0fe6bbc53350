//! The settings of the real transports (`--http-client`, timeouts, TLS roots, the read
//! buffer limit), recorded in the result metadata, and why a transport could not be built.

use std::time::Duration;

/// Which HTTP client library carries the requests (`--http-client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpClient {
    /// hyper directly: `http://` on connections each request drives in its own task,
    /// `https://` through hyper-util's client; bounded read buffers, less work per request.
    #[default]
    Hyper,
    /// reqwest (on the same hyper): the widely used client, for comparison.
    Reqwest,
}

/// hyper's smallest allowed read-buffer limit.
pub const MIN_READ_BUFFER: usize = 8 * 1024;

/// Network settings of a run; recorded in the result metadata.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TransportConfig {
    pub client: HttpClient,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub body_idle_timeout: Duration,
    /// The longest one exchange may take, from sending its request to the last byte of its
    /// answer, however its bytes trickle (`--request-deadline`).
    pub request_deadline: Duration,
    /// Skip TLS certificate verification (`--insecure`).
    pub insecure: bool,
    /// Extra PEM root certificates (`--ca-cert`).
    #[serde(skip)]
    pub extra_roots_pem: Vec<Vec<u8>>,
    pub pool_max_idle_per_host: usize,
    /// Largest read buffer of one HTTP/1 connection (hyper transport). Bodies stream through
    /// it in chunks of at most this size; it bounds the memory of idle pooled connections.
    /// 0: sized by the operations in flight ([`read_buffer_for`]).
    pub read_buffer_max: usize,
    pub user_agent: String,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            client: HttpClient::default(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            body_idle_timeout: Duration::from_secs(30),
            request_deadline: Duration::from_secs(600),
            insecure: false,
            extra_roots_pem: Vec::new(),
            pool_max_idle_per_host: 64,
            read_buffer_max: 16 * 1024,
            user_agent: concat!("creb-rs/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// The read buffers of all connections together, when `--http1-read-buffer` is not given.
pub const READ_BUFFERS_BUDGET: usize = 4 << 20;

/// Largest read buffer [`read_buffer_for`] gives a connection.
pub const READ_BUFFER_CEILING: usize = 256 << 10;

/// The read buffer of each of `in_flight` connections when the user did not choose one: the
/// budget shared by them, between 16 KiB (256 in flight or more: the memory of a large
/// replay stays what it was) and 256 KiB (16 or fewer: a large blob is read in a quarter
/// of the system calls and copies of 16 KiB reads, half the CPU per GiB received).
pub fn read_buffer_for(in_flight: usize) -> usize {
    (READ_BUFFERS_BUDGET / in_flight.max(1)).clamp(16 << 10, READ_BUFFER_CEILING)
}

#[derive(Debug, thiserror::Error)]
pub enum TransportBuildError {
    #[error("cannot read CA certificate: {0}")]
    Certificate(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// The certificates of every `--ca-cert` bundle, in DER.
pub fn extra_roots(
    config: &TransportConfig,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TransportBuildError> {
    use rustls::pki_types::pem::PemObject;
    let mut out = Vec::new();
    for pem in &config.extra_roots_pem {
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| TransportBuildError::Certificate(e.to_string()))?;
        if certs.is_empty() {
            return Err(TransportBuildError::Certificate(
                "no PEM certificate found".into(),
            ));
        }
        out.extend(certs);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_bundles_without_certificates_are_refused() {
        let config = TransportConfig {
            extra_roots_pem: vec![b"not a certificate".to_vec()],
            ..TransportConfig::default()
        };
        assert!(matches!(
            extra_roots(&config),
            Err(TransportBuildError::Certificate(_))
        ));
    }
}
