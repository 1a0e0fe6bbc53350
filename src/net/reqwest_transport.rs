//! The reqwest transport (`--http-client reqwest`): reqwest on hyper, rustls with the ring
//! provider. Settings, deadlines and error kinds are shared with the hyper transport
//! ([`crate::net`]).

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::header::CONTENT_LENGTH;
use http::HeaderValue;

use super::classify::{body_kind, classify_chain, describe_chain, unprocessed_of};
use super::config::{TransportBuildError, TransportConfig};
use super::deadline::{within_deadlines, Progress, ProgressReader};
use super::transport::{HttpRequest, HttpResponse, RequestBody, Transport, TransportError};
use crate::metrics::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

/// reqwest-backed [`Transport`].
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    config: Arc<TransportConfig>,
}

impl ReqwestTransport {
    pub fn new(config: TransportConfig) -> Result<Self, TransportBuildError> {
        // reqwest is built without a default crypto provider; ring is ours. Installing twice
        // (several clients in one process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut tls = super::tls::client_config(&config)?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(config.connect_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .user_agent(config.user_agent.clone())
            // The same trust rules as the hyper transport (`--ca-cert`, `--insecure`).
            .tls_backend_preconfigured(tls);
        let client = builder
            .build()
            .map_err(|e| TransportBuildError::Client(e.without_url().to_string()))?;
        Ok(ReqwestTransport {
            client,
            config: Arc::new(config),
        })
    }

    pub fn config(&self) -> &TransportConfig {
        &self.config
    }
}

fn body_of(request: &mut HttpRequest, progress: &Arc<Progress>) -> Option<reqwest::Body> {
    match std::mem::replace(&mut request.body, RequestBody::Empty) {
        RequestBody::Empty => None,
        RequestBody::Bytes(b) => Some(reqwest::Body::from(b)),
        RequestBody::Content { spec, range, tap } => {
            let reader = ProgressReader::new(spec.reader(range).tapped(tap), Arc::clone(progress));
            let stream = futures_util::stream::iter(reader.map(Ok::<Bytes, std::io::Error>));
            Some(reqwest::Body::wrap_stream(stream))
        }
    }
}

impl Transport for ReqwestTransport {
    fn send<'a>(
        &'a self,
        request: &'a HttpRequest,
    ) -> BoxFuture<'a, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            // reqwest takes its request's parts by value.
            let mut request = request.clone();
            let progress = Arc::new(Progress::start(matches!(
                request.body,
                RequestBody::Content { .. }
            )));
            let length = request.body.len();
            let has_body = !matches!(request.body, RequestBody::Empty);
            let body = body_of(&mut request, &progress);
            let mut headers = std::mem::take(&mut request.headers);
            if has_body || matches!(request.method.as_str(), "PUT" | "POST" | "PATCH") {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
            }
            let mut builder = self
                .client
                .request(request.method, request.url.into_url())
                .headers(headers.into_map());
            if let Some(body) = body {
                builder = builder.body(body);
            }
            let config = &self.config;
            let send = async { builder.send().await.map_err(|e| classify(&e)) };
            let mut response = within_deadlines(std::pin::pin!(send), &progress, config).await?;
            let status = response.status();
            let version = response.version();
            let headers = std::mem::take(response.headers_mut());
            let body = response
                .bytes_stream()
                .map(|r| r.map_err(|e| classify_body(&e)));
            Ok(HttpResponse::new(status, headers, Box::pin(body))
                .with_version(version)
                .with_idle_timeout(config.body_idle_timeout)
                .with_deadline(progress.end_by(config), config.request_deadline))
        })
    }
}

/// Maps a reqwest error to an [`ErrorKind`] by walking its source chain.
pub fn classify(err: &reqwest::Error) -> TransportError {
    let message = describe(err);
    if err.is_timeout() {
        return TransportError::new(ErrorKind::Timeout, message);
    }
    let kind = if err.is_connect() {
        ErrorKind::Connect
    } else if err.is_body() || err.is_decode() {
        ErrorKind::Body
    } else {
        ErrorKind::Other
    };
    TransportError::new(kind, message)
        .with_kind(classify_chain(err, kind))
        .unprocessed(unprocessed_of(err))
}

/// Like [`classify`], for errors while reading a response body.
fn classify_body(err: &reqwest::Error) -> TransportError {
    let t = classify(err);
    let kind = body_kind(err, t.kind);
    t.with_kind(kind)
}

/// The error chain as one line, without URLs (presigned URLs carry signatures).
fn describe(err: &reqwest::Error) -> String {
    // `without_url` needs ownership; cut the URL from the kind-level text instead.
    let s = err.to_string();
    let top = match s.find(" for url (") {
        Some(i) => s[..i].to_owned(),
        None => s,
    };
    describe_chain(top, err)
}
