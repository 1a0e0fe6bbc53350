//! A transport that answers from a script instead of a socket, for deterministic tests of
//! everything above the network (the client's protocol handling, the executor's timing on a
//! paused clock). Real-registry tests cover what a real server does; this covers what a real
//! server cannot be made to do on demand (a 416, a stall at an exact instant, a 429 storm).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::transport::{
    body_from_chunks, HttpRequest, HttpResponse, RequestBody, Transport, TransportError,
};

/// What the script answers to one request.
#[derive(Debug, Clone)]
pub struct ScriptedResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Time before the headers are returned (on the tokio clock, so paused tests see it).
    pub delay: Duration,
    /// Fail instead of answering.
    pub error: Option<TransportError>,
}

impl ScriptedResponse {
    pub fn status(status: u16) -> Self {
        ScriptedResponse {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
            error: None,
        }
    }

    pub fn error(error: TransportError) -> Self {
        let mut r = Self::status(599);
        r.error = Some(error);
        r
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            self.headers.append(n, v);
        }
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A request as the script saw it, with its body materialised.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: http::Method,
    pub url: url::Url,
    pub headers: HeaderMap,
    pub body_len: u64,
}

type Handler = dyn Fn(&HttpRequest) -> ScriptedResponse + Send + Sync;

/// A [`Transport`] driven by a closure; it keeps a log of every request it saw.
#[derive(Clone)]
pub struct ScriptedTransport {
    handler: Arc<Handler>,
    log: Arc<Mutex<Vec<SeenRequest>>>,
}

impl fmt::Debug for ScriptedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedTransport").finish_non_exhaustive()
    }
}

impl ScriptedTransport {
    pub fn new(handler: impl Fn(&HttpRequest) -> ScriptedResponse + Send + Sync + 'static) -> Self {
        ScriptedTransport {
            handler: Arc::new(handler),
            log: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Every request seen so far, in order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Transport for ScriptedTransport {
    fn send<'a>(
        &'a self,
        request: &'a HttpRequest,
    ) -> BoxFuture<'a, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let response = (self.handler)(request);
            let body_len = match &request.body {
                RequestBody::Content { spec, range, tap } => {
                    // Produce the bytes like a real send would, so content bugs surface.
                    spec.reader(range.clone())
                        .tapped(tap.clone())
                        .map(|c| c.len() as u64)
                        .sum()
                }
                other => other.len(),
            };
            if let Ok(mut log) = self.log.lock() {
                log.push(SeenRequest {
                    method: request.method.clone(),
                    url: url::Url::clone(&request.url),
                    headers: request.headers.clone().into_map(),
                    body_len,
                });
            }
            if !response.delay.is_zero() {
                tokio::time::sleep(response.delay).await;
            }
            if let Some(err) = response.error {
                return Err(err);
            }
            let mut headers = response.headers;
            if !response.body.is_empty() && !headers.contains_key(http::header::CONTENT_LENGTH) {
                headers.insert(
                    http::header::CONTENT_LENGTH,
                    HeaderValue::from(response.body.len() as u64),
                );
            }
            let chunks = if response.body.is_empty() {
                Vec::new()
            } else {
                vec![response.body]
            };
            Ok(HttpResponse::new(
                response.status,
                headers,
                body_from_chunks(chunks),
            ))
        })
    }
}
