//! What the stages of a replay share: the settings, the session its results belong to,
//! the connections to every endpoint and the identity of the workload; and the helpers
//! every phase uses to reach and report on the endpoints.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::catalog::Preparation;
use super::config::ReplayConfig;
use crate::client::{ClientOptions, RegistryClient};
use crate::metrics::{Aggregator, AggregatorBuilder, ErrorLog, Recorder};
use crate::plan::ShardSpec;
use crate::results::summary::EndpointSummary;
use crate::results::{Meta, MetaInput, RunInfo, Summary, Warning};
use crate::results::{RunOutput, Shard};
use crate::route::health::Transition;
use crate::route::Router;
use crate::session::connect::endpoint_links;
use crate::session::connect::{preflight, Connection};
use crate::session::status::ExitStatus;
use crate::session::{Finished, Session};
use crate::shutdown::Shutdown;

/// What the phases share: the settings, where results go, the connections, and the
/// identity of the workload.
pub(super) struct Context<'a> {
    pub(super) cfg: &'a ReplayConfig,
    pub(super) session: &'a Session,
    /// Where this phase's results go (the session's, or a measured run's own).
    pub(super) output: &'a RunOutput,
    pub(super) dataset: &'a serde_json::Value,
    pub(super) connections: &'a [Connection],
    pub(super) names: &'a [String],
    pub(super) router: &'a Router,
    pub(super) shutdown: &'a Shutdown,
    pub(super) errors: &'a ErrorLog,
    /// How pass 1 spent its time (meta.json `preparation`).
    pub(super) preparation: &'a Preparation,
}

/// The trace as pass 1 left it for the runs.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) catalog: std::sync::Arc<crate::plan::catalog::Catalog>,
    /// Pass 1's items, read again by every run (the trace itself when absent).
    pub(super) spool: Option<crate::trace::Spool>,
    pub(super) dataset: serde_json::Value,
    /// How pass 1 (and the prewarm's hashing) spent their time (meta.json `preparation`).
    pub(super) preparation: Preparation,
}

/// Connects to every endpoint (one client, connection pool and credential cache each when
/// there are several) and checks each with `GET /v2/`: the connections, and the one line
/// that says why an endpoint cannot be used.
pub(super) async fn connect(
    cfg: &ReplayConfig,
    names: &[String],
    stop: &Shutdown,
) -> anyhow::Result<(Vec<Connection>, Result<(), String>)> {
    let options = ClientOptions::verifying(cfg.verify);
    let (first_recorder, first_aggregator) = AggregatorBuilder::default().spawn();
    let pool = cfg.concurrency.max(cfg.prewarm_concurrency);
    let mut connections = Vec::with_capacity(names.len());
    if cfg.routing.is_some() {
        for i in 0..names.len() {
            let endpoint = cfg.registry.for_endpoint(i);
            connections.push(
                endpoint
                    .connect(first_recorder.clone(), options.clone(), pool, stop)
                    .await?,
            );
        }
    } else {
        connections.push(
            cfg.registry
                .connect(first_recorder, options, pool, stop)
                .await?,
        );
    }
    let mut checked = Ok(());
    for (connection, name) in connections.iter().zip(names) {
        checked = preflight(connection, name, stop).await;
        if checked.is_err() {
            break;
        }
    }
    drop(first_aggregator.finish().await);
    Ok((connections, checked))
}

/// One client per connection, recording into `recorder` (tagged per endpoint when there
/// are several, or when other endpoints, `apart`, are counted too).
pub(super) fn clients_for(
    connections: &[Connection],
    recorder: &Recorder,
    apart: bool,
) -> Vec<RegistryClient> {
    if connections.len() == 1 && !apart {
        return vec![connections[0].client_for(recorder.clone())];
    }
    connections
        .iter()
        .enumerate()
        .map(|(i, c)| c.client_for(recorder.for_endpoint(i)))
        .collect()
}

/// The `endpoints` block of a run over several endpoints.
pub(super) fn endpoint_summaries(
    cfg: &ReplayConfig,
    names: &[String],
    aggregator: &Aggregator,
    duration: Duration,
    transitions: Option<Vec<Vec<Transition>>>,
) -> Option<BTreeMap<String, EndpointSummary>> {
    if cfg.routing.is_none() && cfg.replicas.is_none() {
        return None;
    }
    let transitions = transitions.unwrap_or_default();
    Some(EndpointSummary::of_each(
        names,
        aggregator,
        duration,
        transitions,
    ))
}

pub(super) fn shard_of(spec: ShardSpec) -> Shard {
    Shard {
        index: spec.index,
        count: spec.count,
    }
}

/// A replay that ends before its workload: the registry unusable, or a stop while the trace
/// was prepared. Its result is written all the same: no operation, the reason in its
/// warnings, marked interrupted when a stop ended it.
pub(super) struct Unrun<'a> {
    cfg: &'a ReplayConfig,
    names: &'a [String],
    connections: &'a [Connection],
    started_at: SystemTime,
}

impl<'a> Unrun<'a> {
    pub(super) fn new(
        cfg: &'a ReplayConfig,
        names: &'a [String],
        connections: &'a [Connection],
        started_at: SystemTime,
    ) -> Unrun<'a> {
        Unrun {
            cfg,
            names,
            connections,
            started_at,
        }
    }

    /// Writes the empty result and ends the command: exit 2 with `fatal` (why the registry
    /// cannot be used), else the stop's status.
    pub(super) async fn end(
        self,
        session: Session,
        stop: &Shutdown,
        fatal: Option<String>,
    ) -> anyhow::Result<ExitStatus> {
        let cfg = self.cfg;
        let start = Instant::now();
        let (recorder, aggregator) = session.output.start(start, self.started_at)?;
        drop(recorder);
        let aggregator = aggregator.finish().await;
        let summary = Summary::build(
            RunInfo {
                command: "replay".into(),
                mode: cfg.mode.name().into(),
                model: cfg.mode.model().into(),
                concurrency: cfg.concurrency as u64,
                registry: self.names.join(","),
                seed: cfg.seed,
                shard: shard_of(cfg.plan.shard),
                started_at: self.started_at,
                duration: self.started_at.elapsed().unwrap_or_default(),
                interrupted: stop.interrupted(),
                trace: None,
                warnings: stop
                    .by_limit()
                    .then(|| Warning {
                        kind: "max_run_time".into(),
                        message: "ended at --max-run-time before the run started: nothing of \
                                  the trace was replayed"
                            .into(),
                    })
                    .into_iter()
                    .collect(),
                checks: None,
                config: cfg.config_block(&self.connections[0].credentials),
            },
            &aggregator,
        );
        let mut meta = Meta::new(
            &summary,
            MetaInput {
                config: summary.config.clone(),
                dataset: serde_json::json!({ "command": "replay", "seed": cfg.seed }),
                anchor: self.started_at,
                start_at: cfg.start_at.clone(),
                actual_start: self.started_at,
                start_skew_ms: None,
                interval: session.output.interval,
            },
        );
        meta.endpoints = endpoint_links(self.names, self.connections);
        let run = Finished {
            summary,
            aggregator,
            meta,
        };
        session.finish(run, None, fatal, &ErrorLog::default()).await
    }
}
