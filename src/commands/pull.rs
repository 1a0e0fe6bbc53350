//! `creb-rs pull`: fetch manifests, then every blob they reference, read to the end and
//! verified against its digest (unless `--verify none`). This file holds the flags, their
//! validation into [`PullConfig`] and the wiring; [`crate::exec::pull`] drives the pull.
//!
//! Distributed pull (`--from`): manifests come from the first `--registry`, each blob from
//! the endpoint the `--route` rule names (by layer position, seed-free random, or digest on
//! the ring). `summary.json` then has per-endpoint numbers.

use std::num::NonZeroUsize;
use std::time::SystemTime;

use clap::Args;
use tokio::time::Instant;
use url::Url;

use super::args::{parse_concurrency, parse_count_u64, REGISTRY_URL};
use super::args::{OutputArgs, RegistryArgs, RouteKindArg, RuntimeArgs, StopArgs, VerifyArg};
use crate::auth::credentials::CredentialInfo;
use crate::client::{ClientOptions, Verify};
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::pull::{pull_images, references, PullTargets, PullWork, Sources};
use crate::metrics::live::RunInfoLabels;
use crate::metrics::{Aggregator, ErrorLog, Recorder};
use crate::oci::{Reference, Repository};
use crate::progress::Progress;
use crate::results::config::{PullBlock, PullTargetsBlock, RunConfig};
use crate::results::summary::EndpointSummary;
use crate::results::{Meta, MetaInput, RunInfo, Shard, Summary, Warning};
use crate::route::{RouteKind, RouteOptions, Router};
use crate::session::connect::{endpoint_links, preflight, Connection, RegistryConfig};
use crate::session::status::ExitStatus;
use crate::session::{Finished, Session};
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

    /// How a blob read is checked: sha256 or none.
    ///
    /// `sha256`: hashed and compared with its digest; pick it to check a registry end to
    /// end. `none`: read to the end, its size checked; pick it only to find creb-rs's own
    /// ceiling. `compare`, replay's default, hashes here too: a pull reads images whose
    /// content it did not generate.
    #[arg(help_heading = "Workload", long, value_enum, value_name = "MODE", default_value_t = VerifyArg::Sha256, hide_possible_values = true)]
    pub verify: VerifyArg,

    /// The same as `--verify none`.
    #[arg(
        help_heading = "Workload",
        hide = true,
        long,
        conflicts_with = "verify"
    )]
    pub no_verify: bool,

    /// Also list each image's referrers (OCI 1.1: signatures, SBOMs, what `push --attach`
    /// adds) and fetch their manifests. A registry without the referrers API is counted
    /// (event `referrers_unsupported`), not failed.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub referrers: bool,

    /// Distributed pull: also fetch blobs from this registry (repeatable or
    /// comma-separated), which must hold the same images. Manifests come from the first
    /// `--registry`; each blob from the endpoint `--route` picks, all in parallel.
    #[arg(hide_short_help = true, help_heading = "Workload", long = "from", value_name = "URL", value_parser = REGISTRY_URL, value_delimiter = ',')]
    pub from: Vec<Url>,

    /// Distributed pull: which endpoint serves each blob: `round-robin` (by layer
    /// position), `random`, `digest` (consistent hashing of the blob digest).
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "RULE",
        default_value = "round-robin"
    )]
    pub route: RouteKindArg,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

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
    /// Several endpoints: how blobs are spread over them.
    pub route: Option<RouteKind>,
}

impl PullConfig {
    /// What the pull fetches, as the results record it.
    fn targets_block(&self) -> PullTargetsBlock {
        match &self.targets {
            PullTargets::References(refs) => PullTargetsBlock::References(refs.clone()),
            PullTargets::AllTags { page_size } => PullTargetsBlock::AllTags {
                page_size: *page_size,
            },
        }
    }

    /// The results' `config` block of this pull, its credentials from `credentials`.
    fn config_block(&self, credentials: &CredentialInfo) -> RunConfig {
        RunConfig::Pull(Box::new(PullBlock {
            registry: self.registry.block(),
            credentials: credentials.clone(),
            repo: self.repo.clone(),
            targets: self.targets_block(),
            concurrency: self.concurrency,
            verify: self.verify,
            referrers: self.referrers,
            route: self.route,
        }))
    }
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
            verify: a.verify.or_none(a.no_verify).into(),
            referrers: a.referrers,
        })
    }
}

/// Runs `creb-rs pull`.
pub async fn run(args: PullArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PullConfig::try_from(&args)?;
    let quiet = args.output.quiet || args.output.json;
    let endpoints = if cfg.route.is_some() {
        cfg.registry.endpoints.len()
    } else {
        1
    };
    super::limits::prepare(cfg.concurrency, endpoints, "--concurrency", quiet)?;
    let labels = RunInfoLabels::new("pull", "pull", None, 0, 1);
    let names = cfg.registry.endpoint_names();
    let session = Session::open(&(&args.output).into(), labels, &names, 0).await?;
    let watch = session.watch_registry().await?;
    args.stop.arm(&shutdown);
    let started_at = SystemTime::now();
    let start = Instant::now();
    let endpoints = if cfg.route.is_some() { names.len() } else { 1 };
    let (recorder, aggregator) = session.output.start_over(start, started_at, endpoints)?;
    let connections = connect(&cfg, &recorder, &shutdown).await?;
    let errors = ErrorLog::default();

    let mut fatal: Option<String> = None;
    for (connection, name) in connections.iter().zip(&names) {
        if let Err(message) = preflight(connection, name, &shutdown).await {
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
                    grace: args.stop.grace,
                };
                let env = JobEnv {
                    shutdown: &shutdown,
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
    let run = summarize(&cfg, &names, &connections, ran, session.output.interval);
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
    duration: std::time::Duration,
    interrupted: bool,
    /// `--max-run-time` ended it.
    limited: bool,
}

/// The pull's summary (per endpoint too, when blobs were routed over several) and metadata.
fn summarize(
    cfg: &PullConfig,
    names: &[String],
    connections: &[Connection],
    ran: Ran,
    interval: std::time::Duration,
) -> Finished {
    let Ran {
        aggregator,
        started_at,
        duration,
        interrupted,
        limited,
    } = ran;
    let mut warnings = Vec::new();
    if limited {
        warnings.push(Warning {
            kind: "max_run_time".into(),
            message: "ended at --max-run-time; the images not started were not pulled".into(),
        });
    }
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
            interrupted,
            trace: None,
            checks: None,
            warnings,
            config: cfg.config_block(&connections[0].credentials),
        },
        &aggregator,
    );
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
