//! What the stages of a replay share: the settings, the session its results belong to,
//! the connections to every endpoint and the identity of the workload; and the helpers
//! every phase uses to reach and report on the endpoints.

use std::collections::BTreeMap;
use std::time::Duration;

use super::config::{ReplayArgs, ReplayConfig};
use crate::client::{ClientOptions, RegistryClient};
use crate::commands::connect::{preflight, Connection};
use crate::commands::session::Session;
use crate::metrics::{spawn_aggregator, Aggregator, ErrorLog, Recorder};
use crate::plan::ShardSpec;
use crate::results::summary::EndpointSummary;
use crate::results::Shard;
use crate::route::health::Transition;
use crate::route::Router;
use crate::shutdown::Shutdown;

/// What the phases share: the settings, where results go, the connections, and the
/// identity of the workload.
pub(super) struct Context<'a> {
    pub(super) cfg: &'a ReplayConfig,
    pub(super) args: &'a ReplayArgs,
    pub(super) session: &'a Session,
    pub(super) dataset: &'a serde_json::Value,
    pub(super) connections: &'a [Connection],
    pub(super) names: &'a [String],
    pub(super) router: &'a Router,
    pub(super) shutdown: &'a Shutdown,
    pub(super) errors: &'a ErrorLog,
    /// How pass 1 spent its time (meta.json `preparation`).
    pub(super) preparation: &'a serde_json::Value,
}

/// Connects to every endpoint (one client, connection pool and credential cache each when
/// there are several) and checks each with `GET /v2/`. The inner error is the one line that
/// says why an endpoint cannot be used.
pub(super) async fn connect(
    cfg: &ReplayConfig,
    names: &[String],
) -> anyhow::Result<Result<Vec<Connection>, String>> {
    let options = ClientOptions {
        verify: cfg.verify,
        ..ClientOptions::default()
    };
    let (first_recorder, first_aggregator) = spawn_aggregator();
    let pool = cfg.concurrency.max(cfg.prewarm_concurrency);
    let mut connections = Vec::with_capacity(names.len());
    if cfg.routing.is_some() {
        for i in 0..names.len() {
            let endpoint = cfg.registry.for_endpoint(i);
            connections.push(
                endpoint
                    .connect(first_recorder.clone(), options.clone(), pool)
                    .await?,
            );
        }
    } else {
        connections.push(cfg.registry.connect(first_recorder, options, pool).await?);
    }
    let mut checked = Ok(());
    for (connection, name) in connections.iter().zip(names) {
        checked = preflight(connection, name).await;
        if checked.is_err() {
            break;
        }
    }
    drop(first_aggregator.finish().await);
    Ok(checked.map(|()| connections))
}

/// One client per connection, recording into `recorder` (tagged per endpoint when there
/// are several).
pub(super) fn clients_for(connections: &[Connection], recorder: &Recorder) -> Vec<RegistryClient> {
    if connections.len() == 1 {
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
    cfg.routing?;
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
