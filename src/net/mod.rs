//! What the real transports share: their settings, the deadlines around one exchange, TLS
//! roots and the mapping of low-level errors to an [`ErrorKind`](crate::metrics::ErrorKind).
//!
//! Two transports implement [`Transport`] over real sockets: [`HyperTransport`] (HTTP/1.1
//! connections of creb-rs's own for `http://`, hyper-util's client for `https://`, with a
//! bounded per-connection read buffer; the default) and
//! [`ReqwestTransport`] (reqwest over the same hyper). `--http-client` picks one; both
//! follow the same rules so results do not depend on the choice: automatic redirects off
//! (the client follows them to time each hop and to keep `Authorization` on its origin), no
//! system proxy (a benchmark measures the path it was pointed at), TLS verification on
//! unless `--insecure`, a connection pool at least as large as the in-flight limit,
//! TCP_NODELAY.
//!
//! Timeouts are enforced here rather than by the HTTP libraries, whose read timeouts also
//! bound the time spent *sending* a body: `request_timeout` runs from the end of the request
//! body to the response headers; `body_idle_timeout` fails an upload whose body stops being
//! consumed and a download whose body stops arriving.

pub(crate) mod arrival;
mod classify;
mod config;
mod deadline;
pub mod gather;
pub(crate) mod h1;
pub mod headers;
pub mod hyper_transport;
pub mod links;
pub(crate) mod plain_pool;
pub mod pushgateway;
mod req_body;
pub mod req_headers;
pub mod req_url;
pub mod reqwest_transport;
pub mod scripted;
pub mod serve;
pub mod tls;
pub mod transport;

use std::sync::Arc;

use url::Url;

pub use config::{
    extra_roots, read_buffer_for, HttpClient, TransportBuildError, TransportConfig, MIN_READ_BUFFER,
};
use hyper_transport::HyperTransport;
use reqwest_transport::ReqwestTransport;
use transport::Transport;

/// Whether `url` names this machine: `localhost` (and its subdomains), 127.0.0.0/8, `::1`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.');
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        None => false,
    }
}

/// The transport `config.client` names.
pub fn build_transport(config: TransportConfig) -> Result<Arc<dyn Transport>, TransportBuildError> {
    Ok(match config.client {
        HttpClient::Hyper => Arc::new(HyperTransport::new(config)?),
        HttpClient::Reqwest => Arc::new(ReqwestTransport::new(config)?),
    })
}
