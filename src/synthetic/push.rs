//! `push` as a library call: generate images of unique layers ([`crate::plan::image`]) and
//! push them (`exec::push`), measured into a session and published.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::auth::credentials::CredentialInfo;
use crate::client::ClientOptions;
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::push::{push_images, PushWork};
use crate::exec::replicate::ReplicaSpec;
use crate::metrics::live::RunInfoLabels;
use crate::metrics::{Aggregator, ErrorLog, Event};
use crate::progress::Progress;
use crate::results::config::{PushBlock, RunConfig};
use crate::results::store::EndpointLink;
use crate::results::summary::EndpointSummary;
use crate::results::{Meta, MetaInput, Summary, Warning};
use crate::session::connect::{endpoint_links, preflight, RegistryConfig};
use crate::session::observe::RegistryWatch;
use crate::session::status::ExitStatus;
use crate::session::{Finished, Session};
use crate::shutdown::Shutdown;

/// Validated settings of a push.
#[derive(Debug, Clone)]
pub struct PushConfig {
    pub registry: RegistryConfig,
    pub work: PushWork,
    pub concurrency: usize,
    /// `--replica`: the replicas watched for each pushed image.
    pub replicas: Option<ReplicaSpec>,
}

impl PushConfig {
    /// The registry, then each replica, as the results name them (replicas are endpoints
    /// of the run: their `replication` is counted for them).
    pub fn endpoint_names(&self) -> Vec<String> {
        let mut names = self.registry.endpoint_names();
        names.extend(self.replicas.iter().flat_map(ReplicaSpec::names));
        names
    }

    /// The results' `config` block of this push, its credentials from `credentials`.
    pub fn config_block(&self, credentials: &CredentialInfo) -> RunConfig {
        let images = &self.work.images;
        RunConfig::Push(Box::new(PushBlock {
            registry: self.registry.block(),
            credentials: credentials.clone(),
            repo: images.repo.clone(),
            tag: images.tag.clone(),
            images: images.images,
            layers: images.layers,
            layer_size: images.layer_size,
            mount_from: images.mount_from.clone(),
            manifest_format: images.manifest_format,
            layer_form: images.layer_form,
            raw_layers: if images.raw_layers() {
                images.images * images.layers
            } else {
                0
            },
            platforms: images.platforms.iter().map(|p| p.to_string()).collect(),
            seed: images.seed,
            upload: self.work.upload,
            hash: self.work.hash.name(),
            attach: self.work.attach,
            concurrency: self.concurrency,
            replica: self.replicas.as_ref().map(ReplicaSpec::block),
        }))
    }
}

/// What the live metrics' `creb_run_info` say of a push configured as `cfg`.
pub fn labels(cfg: &PushConfig) -> RunInfoLabels {
    RunInfoLabels::new("push", "push", Some(cfg.work.images.seed), 0, 1)
}

/// Pushes the images `cfg` describes into `session`'s results (`watch` the registry's own
/// metrics, when asked), each job stopped by `shutdown` after `grace`.
#[allow(clippy::too_many_lines)]
pub async fn run(
    cfg: &PushConfig,
    session: Session,
    watch: Option<RegistryWatch>,
    grace: Duration,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let images = &cfg.work.images;
    let started_at = SystemTime::now();
    let start = Instant::now();
    let (recorder, aggregator) = session.output.start(start, started_at)?;
    let options = ClientOptions {
        push_scopes: true,
        ..ClientOptions::default()
    };
    let errors = ErrorLog::default();
    // With replicas, every endpoint's numbers are kept apart: the registry is endpoint 0.
    let primary = match cfg.replicas {
        Some(_) => recorder.for_endpoint(0),
        None => recorder.clone(),
    };
    let connection = cfg
        .registry
        .connect(primary.clone(), options, cfg.concurrency, shutdown)
        .await?;
    let mut connections = vec![connection];
    let replicas = match &cfg.replicas {
        Some(spec) => {
            let (replicas, more) = (cfg.registry)
                .connect_replicas(spec, &connections[0], &recorder, 1, &errors, shutdown)
                .await?;
            connections.extend(more);
            Some(replicas)
        }
        None => None,
    };
    let connection = &connections[0];

    let preflight = preflight(connection, &cfg.registry.display(), shutdown).await;
    let client = connection.client_for(primary);
    if preflight.is_ok() {
        let progress = Progress::new(images.images);
        let line = session.progress_line("push", "images", &progress);
        let bounds = Bounds {
            concurrency: cfg.concurrency,
            grace,
        };
        let env = JobEnv {
            shutdown,
            errors: &errors,
            progress: &progress,
        };
        push_images(&client, &cfg.work, bounds, env, replicas.as_ref()).await;
        line.finish();
    }
    // The push's duration: the watch of its last images may go on after it.
    let duration = start.elapsed();
    if let Some(replicas) = &replicas {
        // The last images' watches end, or a stop ends them within the grace.
        replicas.finish(shutdown.token(), grace).await;
    }
    // What a stop cut off (an upload in flight past the grace, the first GET /v2/) is a
    // failure like any other.
    client.record_cut_off().await;
    drop(client);
    drop(replicas);
    let links = endpoint_links(&cfg.endpoint_names(), &connections);
    let aggregator = aggregator.finish().await;

    let finished = summarize(
        cfg,
        &connections[0].credentials,
        aggregator,
        links,
        Ran {
            started_at,
            duration,
            interrupted: shutdown.interrupted(),
            limited: shutdown.by_limit(),
            interval: session.output.interval,
        },
    );
    session
        .finish(finished, watch, preflight.err(), &errors)
        .await
}

/// What a push measured, before it is summarized.
struct Ran {
    started_at: SystemTime,
    duration: Duration,
    interrupted: bool,
    /// `--max-run-time` ended it.
    limited: bool,
    interval: Duration,
}

/// What changes what the push's numbers mean: blobs that were there already, layers that
/// are not tars, replicas not watched, an end at --max-run-time.
fn warnings(cfg: &PushConfig, aggregator: &Aggregator, ran: &Ran) -> Vec<Warning> {
    let images = &cfg.work.images;
    let mut warnings = Vec::new();
    let existed = aggregator.event(Event::BlobExists);
    if existed > 0 {
        warnings.push(Warning {
            kind: "blobs_existed".into(),
            message: format!(
                "{existed} blobs were already in the registry and were not uploaded; use another --seed for fresh content"
            ),
        });
    }
    if images.raw_layers() {
        warnings.push(Warning {
            kind: "raw_layers".into(),
            message: format!(
                "--layer-size {} is below the smallest {} layer ({} bytes): every layer is plain bytes, not a tar clients can unpack",
                images.layer_size,
                images.layer_form.compression,
                images.layer_form.min_size()
            ),
        });
    }
    crate::exec::replicate::warnings(aggregator, &mut warnings);
    if ran.limited {
        warnings.push(Warning {
            kind: "max_run_time".into(),
            message: "ended at --max-run-time; the images not started were not pushed".into(),
        });
    }
    warnings
}

/// The push's summary and metadata, ready to publish.
fn summarize(
    cfg: &PushConfig,
    credentials: &CredentialInfo,
    aggregator: Aggregator,
    links: Vec<EndpointLink>,
    ran: Ran,
) -> Finished {
    let images = &cfg.work.images;
    let warnings = warnings(cfg, &aggregator, &ran);
    let push = super::ClosedLoop {
        command: "push",
        concurrency: cfg.concurrency,
        registry: cfg.registry.display(),
        seed: images.seed,
    };
    let ran_for = (ran.started_at, ran.duration, ran.interrupted);
    let info = push.run_info(ran_for, warnings, cfg.config_block(credentials));
    let mut summary = Summary::build(info, &aggregator);
    if cfg.replicas.is_some() {
        let names = cfg.endpoint_names();
        let each = EndpointSummary::of_each(&names, &aggregator, ran.duration, Vec::new());
        summary.endpoints = Some(each);
    }
    let mut meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: dataset_json(&cfg.work),
            anchor: ran.started_at,
            start_at: None,
            actual_start: ran.started_at,
            start_skew_ms: None,
            interval: ran.interval,
        },
    );
    meta.endpoints = links;
    Finished {
        summary,
        aggregator,
        meta,
    }
}

/// What a push generated, for meta.json (the identity of its dataset).
fn dataset_json(work: &PushWork) -> serde_json::Value {
    let images = &work.images;
    let mut d = serde_json::json!({
        "command": "push",
        "repo": images.repo,
        "tag": images.tag,
        "images": images.images,
        "layers": images.layers,
        "layer_size": images.layer_size,
        "mount_from": images.mount_from,
        "manifest_format": images.manifest_format,
        "layer_form": images.layer_form,
        "platforms": images.platforms.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "seed": images.seed,
    });
    if work.attach > 0 {
        d["attach"] = work.attach.into();
    }
    d
}
