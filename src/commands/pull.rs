//! `creb-rs pull`: fetch manifests, then every blob they reference, read to the end and
//! verified against its digest (unless `--no-verify`), with at most `--concurrency` blob
//! downloads in flight across all images. An `image_pull` session sample runs from the
//! manifest request to the last blob's last byte.
//!
//! Distributed pull (`--from`): manifests come from the first `--registry`, each blob from
//! the endpoint the `--route` rule names (by layer position, seed-free random, or digest on
//! the ring), so one image's layers download from several registries at once; the session
//! runs until the last of them. `summary.json` then has per-endpoint numbers.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::{stream, StreamExt};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use clap::Args;
use url::Url;

use super::args::{parse_concurrency, parse_count_u64, parse_url};
use super::args::{OutputArgs, RegistryArgs, RouteKindArg, RuntimeArgs};
use super::session::{
    config_json, endpoint_links, finish, preflight, prepare_output, run_output, thresholds,
    Finished, RegistryConfig,
};
use super::ExitStatus;
use crate::client::{ClientError, ClientOptions, OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::metrics::live::RunInfoLabels;
use crate::metrics::ErrorLog;
use crate::metrics::{ErrorKind, HttpStatuses, Op, Outcome, Sample, SizeClass, Timing};
use crate::oci::manifest::ParsedManifest;
use crate::oci::{Reference, Repository};
use crate::progress::{Progress, ProgressLine};
use crate::results::summary::EndpointSummary;
use crate::results::{Meta, MetaInput, RunInfo, Shard, Summary};
use crate::route::{Object, Request, RouteKind, RouteOptions, Router};
use crate::shutdown::Shutdown;

/// `pull --help` ends with these.
pub const EXAMPLES: &str = "\
Examples:
  # pull (and verify) what `push --images 10` pushed, 8 blobs in flight
  creb-rs pull --registry http://127.0.0.1:5000 --repo bench/app --images 10 --concurrency 8
  # every tag of a repository, with credentials from the docker config, as JSON
  creb-rs pull --registry https://registry.example --repo team/app --all-tags --json";

#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Repository to pull from.
    #[arg(help_heading = "Workload", long, value_name = "NAME")]
    pub repo: Repository,

    /// Tag (or digest) to pull; with --images N > 1, TAG-0 … TAG-(N-1) as `push` names them.
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "REF",
        default_value = "latest",
        conflicts_with = "all_tags"
    )]
    pub tag: String,

    /// How many images to pull (see --tag).
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "1", value_parser = parse_count_u64)]
    pub images: u64,

    /// Pull every tag of the repository (listed with the paginated tags API).
    #[arg(help_heading = "Workload", long)]
    pub all_tags: bool,

    /// With --all-tags: tags asked per page of the tag list (`n`).
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "N", default_value = "100", requires = "all_tags",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub tag_page_size: u32,

    /// Blob downloads in flight at once.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "4", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// Do not hash downloaded blobs (bodies are still read to the end).
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub no_verify: bool,

    /// Also list each image's referrers (OCI 1.1: signatures, SBOMs, what `push --attach`
    /// adds) and fetch their manifests. A registry without the referrers API is counted
    /// (event `referrers_unsupported`), not failed.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub referrers: bool,

    /// Distributed pull: also fetch blobs from this registry (repeatable or
    /// comma-separated), which must hold the same images. Manifests come from the first
    /// `--registry`; each blob from the endpoint `--route` picks, all in parallel.
    #[arg(help_heading = "Workload", long = "from", value_name = "URL", value_parser = parse_url, value_delimiter = ',')]
    pub from: Vec<Url>,

    /// Distributed pull: which endpoint serves each blob: `round-robin` (by layer
    /// position), `random`, `digest` (consistent hashing of the blob digest).
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "RULE",
        default_value = "round-robin"
    )]
    pub route: RouteKindArg,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Which images to pull.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PullTargets {
    /// These references.
    References(Vec<String>),
    /// Every tag the registry lists, asked `page_size` at a time.
    AllTags { page_size: u32 },
}

/// Validated settings of a pull.
#[derive(Debug, Clone, Serialize)]
pub struct PullConfig {
    pub registry: RegistryConfig,
    pub repo: Repository,
    pub targets: PullTargets,
    pub concurrency: usize,
    pub verify: bool,
    /// List and fetch each image's referrers (`--referrers`).
    pub referrers: bool,
    /// Several endpoints: how blobs are spread over them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteKind>,
}

impl TryFrom<&PullArgs> for PullConfig {
    type Error = anyhow::Error;

    fn try_from(a: &PullArgs) -> anyhow::Result<Self> {
        if a.images == 0 {
            anyhow::bail!("--images must be at least 1");
        }
        let targets = if a.all_tags {
            PullTargets::AllTags {
                page_size: a.tag_page_size,
            }
        } else {
            let refs: Vec<String> = if a.images == 1 {
                vec![a.tag.clone()]
            } else {
                (0..a.images).map(|i| format!("{}-{i}", a.tag)).collect()
            };
            for r in &refs {
                r.parse::<Reference>().map_err(anyhow::Error::msg)?;
            }
            PullTargets::References(refs)
        };
        let mut registry = RegistryConfig::try_from(&a.registry)?;
        for url in &a.from {
            if registry.endpoints.contains(url) {
                anyhow::bail!("--from {url} is already an endpoint");
            }
            registry.endpoints.push(url.clone());
        }
        let route = (registry.endpoints.len() > 1).then_some(a.route.into());
        Ok(PullConfig {
            registry,
            route,
            repo: a.repo.clone(),
            targets,
            concurrency: a.concurrency.get(),
            verify: !a.no_verify,
            referrers: a.referrers,
        })
    }
}

/// Resolves a reference to an image manifest (through an index if needed): the manifest
/// and its digest.
async fn fetch_image_manifest(
    client: &RegistryClient,
    repo: &Repository,
    reference: &Reference,
) -> Result<(ParsedManifest, Digest), ClientError> {
    let fetched = client
        .manifest_get(repo, reference, OpCtx::default())
        .await?;
    let parsed = ParsedManifest::parse(&fetched.bytes, fetched.media_type())
        .map_err(ClientError::Protocol)?;
    if let Some(entry) = parsed.pick_platform() {
        let inner = Reference::Digest(entry.digest.clone());
        let fetched = client.manifest_get(repo, &inner, OpCtx::default()).await?;
        let parsed = ParsedManifest::parse(&fetched.bytes, fetched.media_type())
            .map_err(ClientError::Protocol)?;
        return Ok((parsed, fetched.digest()));
    }
    Ok((parsed, fetched.digest()))
}

/// Lists the referrers of the image manifest `subject` and fetches each one's manifest
/// (verified against its digest). Failures are counted in their own operations.
async fn pull_referrers(
    client: &RegistryClient,
    repo: &Repository,
    subject: &Digest,
    errors: &ErrorLog,
) {
    match client.referrers(repo, subject, OpCtx::default()).await {
        Ok(Some(found)) => {
            for d in found {
                let reference = Reference::Digest(d.digest.clone());
                if let Err(e) = client
                    .manifest_get(repo, &reference, OpCtx::default())
                    .await
                {
                    errors.note(format!("{repo}@{}: referrer: {e}", d.digest));
                }
            }
        }
        Ok(None) => {}
        Err(e) => errors.note(format!("{repo}@{subject}: referrers: {e}")),
    }
}

/// The clients of a pull (one per endpoint) and how blobs are spread over them.
struct Sources {
    clients: Vec<RegistryClient>,
    router: Router,
}

impl Sources {
    /// The client for layer `position` of an image.
    fn blob(&self, position: usize, digest: &Digest) -> &RegistryClient {
        if self.clients.len() == 1 {
            return &self.clients[0];
        }
        let i = self.router.candidates(&Request {
            seq: position as u64,
            client: 0,
            object: Object::Blob(digest.as_str()),
            write: false,
        })[0];
        &self.clients[i]
    }
}

#[allow(clippy::too_many_arguments)]
async fn pull_image(
    sources: &Sources,
    repo: &Repository,
    reference: &Reference,
    referrers: bool,
    permits: &Semaphore,
    shutdown: &Shutdown,
    errors: &ErrorLog,
    progress: &Progress,
) {
    if shutdown.is_cancelled() {
        return;
    }
    let start = Instant::now();
    let mut received = 0u64;
    let client = &sources.clients[0];
    let mut subject = None;
    let outcome = match fetch_image_manifest(client, repo, reference).await {
        Err(e) => {
            errors.note(format!("{repo}:{reference}: manifest: {e}"));
            Outcome::Error(e.kind())
        }
        Ok((manifest, digest)) => {
            subject = Some(digest);
            let blobs = manifest.blobs();
            let downloads = blobs.iter().enumerate().map(|(i, d)| async move {
                let client = sources.blob(i, &d.digest);
                let Ok(_permit) = permits.acquire().await else {
                    return Err(ClientError::Cancelled);
                };
                if shutdown.is_cancelled() {
                    return Err(ClientError::Cancelled);
                }
                let expected = (d.size > 0).then_some(d.size);
                client
                    .blob_get(repo, &d.digest, expected, OpCtx::default())
                    .await
                    .map_err(|e| {
                        errors.note(format!("{repo}@{}: {e}", d.digest));
                        e
                    })
            });
            let results = futures_util::future::join_all(downloads).await;
            received = results.iter().filter_map(|r| r.as_ref().ok()).sum();
            match results.iter().find_map(|r| r.as_ref().err()) {
                Some(e) => Outcome::Error(e.kind()),
                None => Outcome::Ok,
            }
        }
    };
    if outcome == Outcome::Error(ErrorKind::Cancelled) {
        return;
    }
    if let (true, Some(subject)) = (referrers, &subject) {
        pull_referrers(client, repo, subject, errors).await;
    }
    progress.add_done(1);
    if !outcome.is_ok() {
        progress.add_error();
    }
    client
        .recorder()
        .record(Sample {
            op: Op::ImagePull,
            outcome,
            size_class: SizeClass::of(received),
            timing: Timing {
                intended: None,
                sent: start,
                first_byte: None,
                end: Instant::now(),
            },
            bytes_sent: 0,
            bytes_received: received,
            http: HttpStatuses::NONE,
        })
        .await;
}

/// Runs `creb-rs pull`.
pub async fn run(args: PullArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PullConfig::try_from(&args)?;
    let thresholds = thresholds(&args.output)?;
    prepare_output(&args.output)?;
    let mut output = run_output(&args.output);
    let observation = super::observe::start(
        &args.output,
        RunInfoLabels::new("pull", "pull", None, 0, 1),
        &cfg.registry,
        0,
        &mut output,
    )
    .await?;
    let registry_watch = super::observe::RegistryWatch::start(&args.output).await?;
    let started_at = SystemTime::now();
    let start = Instant::now();
    let endpoints = if cfg.route.is_some() {
        cfg.registry.endpoint_names().len()
    } else {
        1
    };
    let (recorder, aggregator) = output.start_over(start, started_at, endpoints)?;
    let options = ClientOptions {
        verify: cfg.verify,
        ..ClientOptions::default()
    };
    let names = cfg.registry.endpoint_names();
    let mut connections = Vec::with_capacity(names.len());
    if cfg.route.is_some() {
        for i in 0..names.len() {
            let connection = cfg
                .registry
                .for_endpoint(i)
                .connect(recorder.for_endpoint(i), options.clone(), cfg.concurrency)
                .await?;
            connections.push(connection);
        }
    } else {
        connections.push(
            cfg.registry
                .connect(recorder, options, cfg.concurrency)
                .await?,
        );
    }
    let router = Router::new(
        &names,
        RouteOptions {
            kind: cfg.route.unwrap_or_default(),
            ..RouteOptions::default()
        },
    );
    let errors = ErrorLog::default();

    let mut fatal: Option<String> = None;
    let mut checked = Ok(());
    for (connection, name) in connections.iter().zip(&names) {
        checked = preflight(connection, name).await;
        if checked.is_err() {
            break;
        }
    }
    let sources = Sources {
        clients: connections.iter().map(|c| c.client.clone()).collect(),
        router,
    };
    let client = &sources.clients[0];
    match checked {
        Err(message) => fatal = Some(message),
        Ok(()) => {
            let references: Result<Vec<String>, ClientError> = match &cfg.targets {
                PullTargets::References(r) => Ok(r.clone()),
                PullTargets::AllTags { page_size } => {
                    client
                        .tag_list(&cfg.repo, Some(*page_size), OpCtx::default())
                        .await
                }
            };
            match references {
                Err(e) => fatal = Some(format!("cannot list the tags of {}: {e}", cfg.repo)),
                Ok(references) => {
                    let permits = Arc::new(Semaphore::new(cfg.concurrency));
                    let parsed: Vec<Reference> =
                        references.iter().filter_map(|r| r.parse().ok()).collect();
                    let progress = Progress::new(parsed.len() as u64);
                    let line = ProgressLine::show(
                        "pull",
                        "images",
                        Arc::clone(&progress),
                        crate::progress::wanted(args.output.quiet, args.output.json),
                    );
                    stream::iter(parsed)
                        .map(|reference| {
                            let (sources, cfg, permits, shutdown, errors, progress) =
                                (&sources, &cfg, &permits, &shutdown, &errors, &progress);
                            async move {
                                pull_image(
                                    sources,
                                    &cfg.repo,
                                    &reference,
                                    cfg.referrers,
                                    permits,
                                    shutdown,
                                    errors,
                                    progress,
                                )
                                .await
                            }
                        })
                        .buffer_unordered(cfg.concurrency)
                        .collect::<Vec<()>>()
                        .await;
                    line.finish();
                }
            }
        }
    }
    let duration = start.elapsed();
    drop(sources);
    let connection = &connections[0];
    let aggregator = aggregator.finish().await;
    let mut summary = Summary::build(
        RunInfo {
            command: "pull".into(),
            mode: "pull".into(),
            model: "closed".into(),
            concurrency: cfg.concurrency as u64,
            registry: names.join(","),
            seed: 0,
            shard: Shard { index: 0, count: 1 },
            started_at,
            duration,
            interrupted: shutdown.is_cancelled(),
            trace: None,
            checks: None,
            warnings: Vec::new(),
            config: config_json(&cfg, &connection.credentials),
        },
        &aggregator,
    );
    if cfg.route.is_some() {
        summary.endpoints = Some(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    (
                        name.clone(),
                        EndpointSummary::build(
                            i,
                            aggregator.endpoints.get(i),
                            duration,
                            Vec::new(),
                        ),
                    )
                })
                .collect(),
        );
    }
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: serde_json::json!({
                "command": "pull",
                "repo": cfg.repo,
                "targets": cfg.targets,
                "verify": cfg.verify,
            }),
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval: output.interval,
        },
    );
    let mut meta = meta;
    meta.endpoints = endpoint_links(
        &names
            .iter()
            .cloned()
            .zip(connections.iter().map(|c| &c.client))
            .collect::<Vec<_>>(),
    );
    let run = Finished {
        summary,
        aggregator,
        meta,
    };
    if let Some(watch) = registry_watch {
        watch
            .finish(
                output.dir.as_deref(),
                run.summary.totals.http_requests,
                args.output.quiet || args.output.json,
            )
            .await?;
    }
    let status = finish(run, &args.output, &thresholds, fatal, &errors);
    observation.finish().await;
    status
}
