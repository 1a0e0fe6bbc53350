//! The `--metrics-listen` endpoint: a small HTTP/1.1 server (hyper) that answers
//! `GET /metrics` with the run's live metrics in the OpenMetrics text format, and 404 to
//! anything else. It runs beside the load on the same runtime and stops with the run,
//! after `--metrics-linger` so a last scrape sees the final counts. Under `creb-rs run` one
//! endpoint serves every cell in turn (a [`LiveSlot`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::metrics::live::LiveSlot;

/// The content type of the Prometheus text exposition format (0.0.4), which the
/// OpenMetrics text of `prometheus-client` also satisfies for every Prometheus version.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    slot: Arc<LiveSlot>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (an error names it: in use, not an address of this machine) and serves.
    pub async fn bind(addr: SocketAddr, slot: Arc<LiveSlot>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let served = Arc::clone(&slot);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let metrics = Arc::clone(&served);
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let metrics = Arc::clone(&metrics);
                        async move {
                            let response = if req.uri().path() == "/metrics" {
                                Response::builder()
                                    .header(hyper::header::CONTENT_TYPE, CONTENT_TYPE)
                                    .body(Full::new(Bytes::from(metrics.encode())))
                            } else {
                                Response::builder()
                                    .status(StatusCode::NOT_FOUND)
                                    .body(Full::new(Bytes::from_static(b"see /metrics\n")))
                            };
                            response
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(MetricsServer { slot, addr, task })
    }

    /// What it serves.
    pub fn slot(&self) -> Arc<LiveSlot> {
        Arc::clone(&self.slot)
    }

    /// Where it listens (the port the system chose for `:0`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves the final counts `linger` longer, then stops.
    pub async fn finish(self, linger: Duration) {
        if !linger.is_zero() {
            tokio::time::sleep(linger).await;
        }
        self.task.abort();
    }
}
