//! `pull` as a library call: fetch manifests, then every blob they reference, read to the
//! end and verified (`exec::pull`), measured into a session and published. Over
//! several endpoints (`--from`), manifests come from the first and each blob from the one
//! the route names; the summary then has per-endpoint numbers.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::auth::credentials::CredentialInfo;
use crate::client::{ClientOptions, Verify};
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::pull::{pull_images, references, PullTargets, PullWork, Sources};
use crate::metrics::live::RunInfoLabels;
use crate::metrics::{Aggregator, ErrorLog, Recorder};
use crate::oci::manifest::Platform;
use crate::oci::Repository;
use crate::progress::Progress;
use crate::results::config::{PullBlock, PullTargetsBlock, RunConfig};
use crate::results::summary::EndpointSummary;
use crate::results::{Meta, MetaInput, RunInfo, Summary, Warning};
use crate::route::{RouteKind, RouteOptions, Router};
use crate::session::connect::{endpoint_links, preflight, Connection, RegistryConfig};
use crate::session::observe::RegistryWatch;
use crate::session::status::ExitStatus;
use crate::session::{Finished, Session};
use crate::shutdown::Shutdown;

/// Validated settings of a pull.
#[derive(Debug, Clone)]
pub struct PullConfig {
    pub registry: RegistryConfig,
    pub repo: Repository,
    pub targets: PullTargets,
    pub concurrency: usize,
    pub verify: Verify,
    /// List and fetch each image's referrers (`--referrers`).
    pub referrers: bool,
    /// The platform picked from an index (`--platform`).
    pub platform: Option<Platform>,
    /// Several endpoints: how blobs are spread over them.
    pub route: Option<RouteKind>,
    /// `--unpack`: each image's layers unpacked as a runtime does.
    pub unpack: Option<crate::exec::unpack::UnpackWork>,
}

impl PullConfig {
    /// What the pull fetches, as the results record it.
    pub fn targets_block(&self) -> PullTargetsBlock {
        match &self.targets {
            PullTargets::References(refs) => PullTargetsBlock::References(refs.clone()),
            PullTargets::AllTags { page_size } => PullTargetsBlock::AllTags {
                page_size: *page_size,
            },
        }
    }

    /// The results' `config` block of this pull, its credentials from `credentials`.
    pub fn config_block(&self, credentials: &CredentialInfo) -> RunConfig {
        RunConfig::Pull(Box::new(PullBlock {
            registry: self.registry.block(),
            credentials: credentials.clone(),
            repo: self.repo.clone(),
            targets: self.targets_block(),
            concurrency: self.concurrency,
            verify: self.verify,
            referrers: self.referrers,
            platform: self.platform.as_ref().map(Platform::to_string),
            route: self.route,
            unpack: self
                .unpack
                .as_ref()
                .map(crate::exec::unpack::UnpackWork::block),
        }))
    }
}

/// What the live metrics' `creb_run_info` say of a pull.
pub fn labels() -> RunInfoLabels {
    RunInfoLabels::new("pull", "pull", None, 0, 1)
}

/// Pulls what `cfg` names into `session`'s results (`watch` the registry's own metrics,
/// when asked), each job stopped by `shutdown` after `grace`.
#[allow(clippy::too_many_lines)]
pub async fn run(
    cfg: &PullConfig,
    session: Session,
    watch: Option<RegistryWatch>,
    grace: Duration,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let names = cfg.registry.endpoint_names();
    let started_at = SystemTime::now();
    let start = Instant::now();
    let endpoints = if cfg.route.is_some() { names.len() } else { 1 };
    let (recorder, aggregator) = session.output.start_over(start, started_at, endpoints)?;
    let connections = connect(cfg, &recorder, shutdown).await?;
    let errors = ErrorLog::default();

    let mut fatal: Option<String> = None;
    for (connection, name) in connections.iter().zip(&names) {
        if let Err(message) = preflight(connection, name, shutdown).await {
            fatal = Some(message);
            break;
        }
    }
    let sources = Sources {
        clients: connections.iter().map(|c| c.client.clone()).collect(),
        router: Router::new(
            &names,
            RouteOptions {
                kind: cfg.route.unwrap_or_default(),
                ..RouteOptions::default()
            },
        ),
    };
    let work = PullWork {
        repo: cfg.repo.clone(),
        referrers: cfg.referrers,
        platform: cfg.platform.clone(),
        unpack: cfg.unpack.clone(),
    };
    let listed = match fatal {
        None => {
            shutdown
                .race(references(&sources, &cfg.repo, &cfg.targets))
                .await
        }
        Some(_) => None,
    };
    if let Some(listed) = listed {
        match listed {
            Err(message) => fatal = Some(message),
            Ok(references) => {
                let progress = Progress::new(references.len() as u64);
                let line = session.progress_line("pull", "images", &progress);
                let bounds = Bounds {
                    concurrency: cfg.concurrency,
                    grace,
                };
                let env = JobEnv {
                    shutdown,
                    errors: &errors,
                    progress: &progress,
                };
                pull_images(&sources, &work, references, bounds, env).await;
                line.finish();
            }
        }
    }
    // What a stop cut off (a download in flight past the grace, the tag listing, the first
    // GET /v2/) is a failure like any other.
    for client in &sources.clients {
        client.record_cut_off().await;
    }
    let duration = start.elapsed();
    drop(sources);
    let aggregator = aggregator.finish().await;
    let ran = Ran {
        aggregator,
        started_at,
        duration,
        interrupted: shutdown.interrupted(),
        limited: shutdown.by_limit(),
    };
    let run = summarize(cfg, &names, &connections, ran, session.output.interval);
    session.finish(run, watch, fatal, &errors).await
}

/// One connection per endpoint when blobs are routed over several, else one.
async fn connect(
    cfg: &PullConfig,
    recorder: &Recorder,
    stop: &Shutdown,
) -> anyhow::Result<Vec<Connection>> {
    let options = ClientOptions::verifying(cfg.verify);
    if cfg.route.is_none() {
        let connection = cfg
            .registry
            .connect(recorder.clone(), options, cfg.concurrency, stop)
            .await?;
        return Ok(vec![connection]);
    }
    let mut connections = Vec::with_capacity(cfg.registry.endpoints.len());
    for i in 0..cfg.registry.endpoints.len() {
        let connection = cfg
            .registry
            .for_endpoint(i)
            .connect(
                recorder.for_endpoint(i),
                options.clone(),
                cfg.concurrency,
                stop,
            )
            .await?;
        connections.push(connection);
    }
    Ok(connections)
}

/// What a pull measured, before it is summarized.
struct Ran {
    aggregator: Aggregator,
    started_at: SystemTime,
    duration: Duration,
    interrupted: bool,
    /// `--max-run-time` ended it.
    limited: bool,
}

/// What the pull was and how it ran, for its summary.
fn run_info(cfg: &PullConfig, names: &[String], connection: &Connection, ran: &Ran) -> RunInfo {
    let mut warnings = Vec::new();
    if ran.limited {
        warnings.push(Warning {
            kind: "max_run_time".into(),
            message: "ended at --max-run-time; the images not started were not pulled".into(),
        });
    }
    let pull = super::ClosedLoop {
        command: "pull",
        concurrency: cfg.concurrency,
        registry: names.join(","),
        seed: 0,
    };
    let ran_for = (ran.started_at, ran.duration, ran.interrupted);
    pull.run_info(ran_for, warnings, cfg.config_block(&connection.credentials))
}

/// The pull's summary (per endpoint too, when blobs were routed over several) and metadata.
fn summarize(
    cfg: &PullConfig,
    names: &[String],
    connections: &[Connection],
    ran: Ran,
    interval: Duration,
) -> Finished {
    let info = run_info(cfg, names, &connections[0], &ran);
    let Ran {
        aggregator,
        started_at,
        duration,
        ..
    } = ran;
    let mut summary = Summary::build(info, &aggregator);
    if cfg.route.is_some() {
        summary.endpoints = Some(EndpointSummary::of_each(
            names,
            &aggregator,
            duration,
            Vec::new(),
        ));
    }
    let mut meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: serde_json::json!({
                "command": "pull",
                "repo": cfg.repo,
                "targets": cfg.targets_block(),
                "verify": cfg.verify,
            }),
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval,
        },
    );
    meta.endpoints = endpoint_links(names, connections);
    Finished {
        summary,
        aggregator,
        meta,
    }
}
