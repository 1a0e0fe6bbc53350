//! `push` as a library call: generate images of unique layers ([`crate::plan::image`]) and
//! push them ([`crate::exec::push`]), measured into a session and published.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::auth::credentials::CredentialInfo;
use crate::client::ClientOptions;
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::push::{push_images, PushWork};
use crate::metrics::live::RunInfoLabels;
use crate::metrics::{Aggregator, ErrorLog, Event};
use crate::progress::Progress;
use crate::results::config::{PushBlock, RunConfig};
use crate::results::store::EndpointLink;
use crate::results::{Meta, MetaInput, RunInfo, Shard, Summary, Warning};
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
}

impl PushConfig {
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
        }))
    }
}

/// What the live metrics' `creb_run_info` say of a push configured as `cfg`.
pub fn labels(cfg: &PushConfig) -> RunInfoLabels {
    RunInfoLabels::new("push", "push", Some(cfg.work.images.seed), 0, 1)
}

/// Pushes the images `cfg` describes into `session`'s results (`watch` the registry's own
/// metrics, when asked), each job stopped by `shutdown` after `grace`.
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
    let connection = cfg
        .registry
        .connect(recorder, options, cfg.concurrency, shutdown)
        .await?;
    let errors = ErrorLog::default();

    let preflight = preflight(&connection, &cfg.registry.display(), shutdown).await;
    let client = connection.client.clone();
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
        push_images(&client, &cfg.work, bounds, env).await;
        line.finish();
    }
    // What a stop cut off (an upload in flight past the grace, the first GET /v2/) is a
    // failure like any other.
    client.record_cut_off().await;
    let duration = start.elapsed();
    drop(client);
    let links = endpoint_links(&[cfg.registry.display()], std::slice::from_ref(&connection));
    let aggregator = aggregator.finish().await;

    let finished = summarize(
        cfg,
        &connection.credentials,
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

/// The push's summary and metadata, ready to publish.
fn summarize(
    cfg: &PushConfig,
    credentials: &CredentialInfo,
    aggregator: Aggregator,
    links: Vec<EndpointLink>,
    ran: Ran,
) -> Finished {
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
    if ran.limited {
        warnings.push(Warning {
            kind: "max_run_time".into(),
            message: "ended at --max-run-time; the images not started were not pushed".into(),
        });
    }
    let summary = Summary::build(
        RunInfo {
            command: "push".into(),
            mode: "push".into(),
            model: "closed".into(),
            concurrency: cfg.concurrency as u64,
            registry: cfg.registry.display(),
            seed: images.seed,
            shard: Shard { index: 0, count: 1 },
            started_at: ran.started_at,
            duration: ran.duration,
            interrupted: ran.interrupted,
            trace: None,
            checks: None,
            warnings,
            config: cfg.config_block(credentials),
        },
        &aggregator,
    );
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
