//! What a load run shows of itself while it runs, and of the registry beside its
//! results: the live metrics (`--metrics-listen`, or the endpoint of `creb-rs run`),
//! pushes to a Pushgateway (`--metrics-push`), and the registry's own Prometheus metrics
//! (`--registry-metrics`) read at the start, every `--registry-metrics-every` and at the
//! end, what they grew by written to `registry-metrics.json`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use url::Url;

use super::OutputOptions;
use crate::metrics::exposition::{self, Series};
use crate::metrics::live::{LiveMetrics, LiveSlot, RunInfoLabels};
use crate::net::pushgateway::{group_url, Pusher};
use crate::net::serve::MetricsServer;
use crate::net::TransportConfig;
use crate::results::registry_metrics::{
    intervals, mean, point, RegistryMetricsRecord, RegistryPoint, REGISTRY_METRICS_JSON,
};
use crate::results::{Live, RunOutput};

/// The live side of one run: its own endpoint (if it serves one) and its pushes.
#[derive(Debug, Default)]
pub struct Observation {
    server: Option<MetricsServer>,
    pusher: Option<Pusher>,
    linger: Duration,
    quiet: bool,
}

fn tls() -> anyhow::Result<rustls::ClientConfig> {
    // The trust rules of the registry connections: system roots, verification on.
    crate::net::tls::client_config(&TransportConfig::default()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Starts what `output` asks for a run described by `info` against `endpoints`, and sets
/// `run` to feed it: an endpoint of its own (`--metrics-listen`; a bind failure is an error
/// before anything is sent), the endpoint of `creb-rs run` (the slot it hands its cells)
/// and pushes (`--metrics-push`).
pub async fn start(
    output: &OutputOptions,
    mut info: RunInfoLabels,
    endpoints: &[String],
    shard: u32,
    run: &mut RunOutput,
) -> anyhow::Result<Observation> {
    let quiet = output.quiet || output.json;
    let mut observation = Observation {
        linger: output.metrics_linger,
        quiet,
        ..Observation::default()
    };
    if output.metrics_listen.is_none() && output.metrics_push.is_none() && output.live.is_none() {
        return Ok(observation);
    }
    if let Some(live) = &output.live {
        info.cell.clone_from(&live.cell);
    }
    let metrics = Arc::new(LiveMetrics::new(info, endpoints));
    let slot = match &output.live {
        Some(live) => {
            live.slot.install(Arc::clone(&metrics));
            Arc::clone(&live.slot)
        }
        None => Arc::new(LiveSlot::with(Arc::clone(&metrics))),
    };
    if let Some(addr) = output.metrics_listen {
        let server = MetricsServer::bind(addr, Arc::clone(&slot))
            .await
            .with_context(|| format!("--metrics-listen {addr}: cannot listen there"))?;
        if !quiet {
            eprintln!("creb-rs: metrics at http://{}/metrics", server.addr());
        }
        observation.server = Some(server);
    }
    if let Some(base) = &output.metrics_push {
        let url = group_url(base, shard).map_err(|e| anyhow::anyhow!("--metrics-push {e}"))?;
        observation.pusher = Some(
            Pusher::start(url, slot, output.interval, tls()?, quiet)
                .map_err(|e| anyhow::anyhow!("--metrics-push: {e}"))?,
        );
    }
    run.live = Some(Live(metrics));
    Ok(observation)
}

impl Observation {
    /// After the run (its aggregator finished, so the counts are final): the last push,
    /// then the endpoint serves `--metrics-linger` longer and stops.
    pub async fn finish(self) {
        if let Some(pusher) = self.pusher {
            if let Err(e) = pusher.finish().await {
                eprintln!("creb-rs: warning: --metrics-push: {e}");
            } else if !self.quiet {
                eprintln!("creb-rs: metrics pushed");
            }
        }
        if let Some(server) = self.server {
            server.finish(self.linger).await;
        }
    }
}

/// The most of a registry's metrics page read: far more than any registry exposes.
const SCRAPE_LIMIT: usize = 32 << 20;

async fn scrape(client: &reqwest::Client, url: &Url) -> Result<Series, String> {
    let mut response = client
        .get(url.clone())
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > SCRAPE_LIMIT {
            return Err(format!("a metrics page larger than {SCRAPE_LIMIT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(exposition::parse(&String::from_utf8_lossy(&body)))
}

/// One endpoint being watched.
#[derive(Debug)]
struct Watched {
    url: Url,
    before: Result<Series, String>,
    points: Arc<Mutex<Vec<RegistryPoint>>>,
}

/// The registry's own metrics endpoints (`--registry-metrics`) during a run.
#[derive(Debug)]
pub struct RegistryWatch {
    client: reqwest::Client,
    start: Instant,
    watched: Vec<Watched>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RegistryWatch {
    /// Scrapes every `--registry-metrics` endpoint now (the run's start) and then every
    /// `--registry-metrics-every`. `None` without any.
    pub async fn start(output: &OutputOptions) -> anyhow::Result<Option<RegistryWatch>> {
        if output.registry_metrics.is_empty() {
            return Ok(None);
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .tls_backend_preconfigured(tls()?)
            .build()
            .context("cannot build the client of --registry-metrics")?;
        let start = Instant::now();
        let mut watched = Vec::new();
        for url in &output.registry_metrics {
            let before = scrape(&client, url).await;
            if let Err(e) = &before {
                eprintln!(
                    "creb-rs: warning: --registry-metrics {}: {e}",
                    crate::oci::redacted(url)
                );
            }
            let first = before.as_ref().map(|s| point(s, 0.0)).ok();
            watched.push(Watched {
                url: url.clone(),
                before,
                points: Arc::new(Mutex::new(first.into_iter().collect())),
            });
        }
        let targets: Vec<(Url, Arc<Mutex<Vec<RegistryPoint>>>)> = watched
            .iter()
            .map(|w| (w.url.clone(), Arc::clone(&w.points)))
            .collect();
        let every = output.registry_metrics_every;
        let task_client = client.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(start + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let at_s = start.elapsed().as_secs_f64();
                for (url, points) in &targets {
                    if let Ok(series) = scrape(&task_client, url).await {
                        if let Ok(mut p) = points.lock() {
                            p.push(point(&series, at_s));
                        }
                    }
                }
            }
        });
        Ok(Some(RegistryWatch {
            client,
            start,
            watched,
            task: Some(task),
        }))
    }

    /// Scrapes them a last time, writes `registry-metrics.json` into `dir` and says, unless
    /// `quiet`, how the registry's request count compares with creb-rs's `http_requests`.
    pub async fn finish(
        mut self,
        dir: Option<&Path>,
        http_requests: u64,
        quiet: bool,
    ) -> anyhow::Result<()> {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let at_s = self.start.elapsed().as_secs_f64();
        let mut records = Vec::new();
        for w in std::mem::take(&mut self.watched) {
            let after = scrape(&self.client, &w.url).await;
            let mut points = w.points.lock().map(|p| p.clone()).unwrap_or_default();
            if let Ok(a) = &after {
                points.push(point(a, at_s));
            }
            let (delta, error) = match (w.before, after) {
                (Ok(b), Ok(a)) => (exposition::delta(&b, &a), None),
                (Err(e), _) | (_, Err(e)) => (Series::new(), Some(e)),
            };
            // Both `None` when the endpoint could not be read (`delta` is then empty).
            let registry_requests = exposition::requests(&delta);
            let registry_mean_duration_s =
                exposition::duration(&delta).and_then(|(s, c)| mean(Some(s), Some(c)));
            let url = crate::oci::redacted(&w.url);
            if !quiet {
                match (&error, registry_requests) {
                    (Some(e), _) => eprintln!("creb-rs: warning: --registry-metrics {url}: {e}"),
                    (None, Some(n)) => eprintln!(
                        "creb-rs: registry metrics {url}: the registry counted {n} requests; creb-rs made {http_requests}"
                    ),
                    (None, None) => eprintln!(
                        "creb-rs: registry metrics {url}: {} series changed, none a request count this version knows",
                        delta.len()
                    ),
                }
            }
            records.push(RegistryMetricsRecord {
                url,
                registry_requests,
                creb_http_requests: http_requests,
                registry_mean_duration_s,
                error,
                intervals: intervals(&points),
                delta,
            });
        }
        if let Some(dir) = dir {
            let json =
                serde_json::to_vec_pretty(&records).context("cannot serialise registry metrics")?;
            crate::results::write_atomic(dir, REGISTRY_METRICS_JSON, &json)?;
        }
        Ok(())
    }
}

impl Drop for RegistryWatch {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
