//! `creb-rs replay`: IBM registry traces against a registry.
//!
//! 1. **Catalog** (pass 1, on a blocking thread): the whole trace is read once; objects,
//!    sizes, layers and uploads are learned and every digest is computed in parallel.
//! 2. **Prewarm** (`--phase prewarm|all`): everything the run reads is pushed, measured apart.
//! 3. **Run** (`--phase run|all`): a planner thread streams the trace again into operations
//!    (pass 2) through a bounded channel; the executor carries them out in stress (closed) or
//!    delay (open) mode, while a canary and the CPU clock watch the generator itself. Pass 2
//!    reads the items pass 1 spooled to a temporary file ([`crate::trace::spool`]) instead of
//!    parsing the trace again, unless that file could not be written.
//!
//! The result accounts for every record of this shard:
//! `trace.records = replayed + folded + Σ skipped` (skipped: invalid, duplicate,
//! failed_in_trace, unsupported, late, interrupted).

pub mod prewarm;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use clap::{Args, ValueEnum};

use super::args::{parse_concurrency, parse_count_u64, parse_seed, parse_speed, parse_start_at};
use super::args::{ManifestFormatArg, OutputArgs, RegistryArgs, RouteArgs};
use super::session::{
    config_json, preflight, prepare_output, publish, run_output, thresholds, Connection, Finished,
    RegistryConfig,
};
use super::ExitStatus;
use crate::client::{ClientOptions, RegistryClient};
use crate::content::DEFAULT_SEED;
use crate::exec::canary::{available_cores, process_cpu_time, spawn_canary};
use crate::exec::pacer::wait_for_anchor;
use crate::exec::{execute_on, ExecOptions, ExecReport, Mode, Targets};
use crate::metrics::hist::Percentiles;
use crate::metrics::ErrorLog;
use crate::metrics::{spawn_aggregator, Recorder};
use crate::oci::Repository;
use crate::plan::catalog::{Catalog, ContentOptions};
use crate::plan::ShardBy;
use crate::plan::{Naming, PlanItem, PlanOptions, Planner, RepoMap, ShardSpec, UploadPolicy};
use crate::progress::{self, Progress, ProgressLine};
use crate::results::summary::{Checks, EndpointSummary};
use crate::results::thresholds::{check, Threshold};
use crate::results::{Meta, MetaInput, RunOutput};
use crate::results::{RunInfo, Shard, Summary, TraceCounts, Warning};
use crate::route::health::{Health, Transition};
use crate::route::{RouteOptions, Router};
use crate::shutdown::Shutdown;
use crate::trace::{Interner, ReadOptions, Spool, SpoolWriter, TraceInput, TraceReader};
use crate::units::{parse_duration, ByteSize};

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// Trace files or directories (JSON arrays or JSON lines; plain, .gz or .zst). Records
    /// from several files are merged by timestamp.
    #[arg(value_name = "TRACE", required = true)]
    pub traces: Vec<PathBuf>,

    #[command(flatten)]
    pub registry: RegistryArgs,

    /// stress: as fast as possible with --concurrency in flight (closed model).
    /// delay: at the trace's timing scaled by --speed (open model).
    #[arg(long, value_enum, default_value_t = ModeArg::Stress)]
    pub mode: ModeArg,

    /// Time scaling for delay mode: 2 replays twice as fast, keeping bursts.
    #[arg(long, value_name = "X", default_value = "1", value_parser = parse_speed)]
    pub speed: f64,

    /// Operations in flight at most (in delay mode a cap: waiting for a slot is lag).
    #[arg(long, value_name = "N", default_value = "16", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// prewarm pushes what the run reads; run replays; all does both, reported apart.
    #[arg(long, value_enum, default_value_t = Phase::All)]
    pub phase: Phase,

    /// Seed of the generated content (decimal or 0x-hex); hosts sharing it agree on digests.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_SEED, value_parser = parse_seed)]
    pub seed: u64,

    /// This host's shard I of N (0-based). Shards cover the trace exactly once.
    #[arg(long, value_name = "I/N", default_value = "0/1")]
    pub shard: ShardSpec,

    /// Take the shard index from environment variable VAR, out of N shards — e.g.
    /// `JOB_COMPLETION_INDEX/8` in a Kubernetes Indexed Job.
    #[arg(long, value_name = "VAR/N", conflicts_with = "shard")]
    pub shard_from_env: Option<String>,

    /// How records are assigned to shards.
    #[arg(long, value_enum, default_value_t = ShardByArg::Client)]
    pub shard_by: ShardByArg,

    /// Start the schedule at this wall-clock instant (RFC 3339 or Unix seconds), so that
    /// every host starts together.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<std::time::SystemTime>,

    /// Only the first N records of the merged trace.
    #[arg(long, value_name = "N", value_parser = parse_count_u64, conflicts_with = "limit_duration")]
    pub limit_requests: Option<u64>,

    /// Only the first D of trace time.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub limit_duration: Option<Duration>,

    /// Put every trace repository under this prefix (`bench` → `bench/<user>/<repo>`).
    #[arg(long, value_name = "P", conflicts_with = "repo_map")]
    pub repo_prefix: Option<String>,

    /// `single:NAME` folds all repositories into NAME (tags stay unique).
    #[arg(long, value_name = "MAP")]
    pub repo_map: Option<String>,

    /// How uploads are replayed.
    #[arg(long, value_enum, default_value_t = UploadChoice::Trace)]
    pub upload: UploadChoice,

    /// Chunk size for --upload chunked.
    #[arg(long, value_name = "SIZE", default_value = "5MiB")]
    pub chunk_size: ByteSize,

    /// Manifest flavour of generated images.
    #[arg(long, value_enum, default_value_t = ManifestFormatArg::Oci)]
    pub manifest_format: ManifestFormatArg,

    /// Delay mode: drop (and count) operations that cannot start within D of their time.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub max_lateness: Option<Duration>,

    /// On Ctrl-C, how long in-flight operations may take to finish.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Count and skip malformed records instead of stopping at the first.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Also replay records whose original request failed (4xx/5xx).
    #[arg(long)]
    pub replay_failed: bool,

    /// Requests of a client closer than this belong to one session (pull or push).
    #[arg(long, value_name = "D", default_value = "60s", value_parser = parse_duration)]
    pub session_gap: Duration,

    /// Operations in flight during prewarm (default: --concurrency).
    #[arg(long, value_name = "N", value_parser = parse_concurrency)]
    pub prewarm_concurrency: Option<NonZeroUsize>,

    /// Do not hash downloaded blobs (bodies are still read to the end).
    #[arg(long)]
    pub no_verify: bool,

    /// Exit 1 when a validity warning is raised (generator bottleneck, schedule slipped,
    /// clock skew).
    #[arg(long)]
    pub strict: bool,

    #[command(flatten)]
    pub route: RouteArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// `--mode`: the names of [`Mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// As fast as possible with `--concurrency` in flight (closed model).
    Stress,
    /// At the trace's timing, scaled by `--speed` (open model).
    Delay,
}

impl From<ModeArg> for Mode {
    fn from(a: ModeArg) -> Self {
        match a {
            ModeArg::Stress => Mode::Stress,
            ModeArg::Delay => Mode::Delay,
        }
    }
}

/// `--shard-by`: the names of [`ShardBy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardByArg {
    /// By client (`http.request.remoteaddr`): a client's sessions stay on one host.
    Client,
    /// By record position; an upload's records and a push stay with their first record.
    Record,
}

impl From<ShardByArg> for ShardBy {
    fn from(a: ShardByArg) -> Self {
        match a {
            ShardByArg::Client => ShardBy::Client,
            ShardByArg::Record => ShardBy::Record,
        }
    }
}

/// The phases of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Prewarm, then run, each with its own results.
    All,
    /// Only push what the run will read.
    Prewarm,
    /// Only replay (the registry was prewarmed before).
    Run,
}

/// How blobs are uploaded during a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UploadChoice {
    /// Chunked when the trace shows PATCHes, else monolithic.
    Trace,
    Monolithic,
    /// PATCH chunks of --chunk-size.
    Chunked,
}

/// Several endpoints: routing and failure handling (absent with one endpoint, so a
/// single-registry run's configuration is what it always was).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoutingConfig {
    pub route: RouteOptions,
    pub endpoint_down_after: u32,
    pub probe_interval_s: f64,
    pub failover: bool,
}

/// Validated settings of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayConfig {
    pub registry: RegistryConfig,
    pub traces: Vec<PathBuf>,
    pub mode: Mode,
    pub speed: f64,
    pub concurrency: usize,
    pub prewarm_concurrency: usize,
    pub phase: Phase,
    pub seed: u64,
    #[serde(skip)]
    pub read: ReadOptions,
    pub limit_requests: Option<u64>,
    pub limit_duration_s: Option<f64>,
    pub skip_invalid: bool,
    pub replay_failed: bool,
    pub plan: PlanOptions,
    #[serde(skip)]
    pub content: ContentOptions,
    pub max_lateness_ms: Option<u64>,
    pub grace_s: f64,
    pub start_at: Option<String>,
    #[serde(skip)]
    pub start_at_time: Option<SystemTime>,
    pub verify: bool,
    pub strict: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingConfig>,
}

/// `--shard-from-env VAR/N`: the index from the environment.
pub fn shard_from_env(spec: &str) -> anyhow::Result<ShardSpec> {
    let (var, count) = spec
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--shard-from-env takes VAR/N, not '{spec}'"))?;
    let index = std::env::var(var)
        .map_err(|_| anyhow::anyhow!("--shard-from-env: environment variable {var} is not set"))?;
    format!("{}/{}", index.trim(), count.trim())
        .parse()
        .map_err(|e| anyhow::anyhow!("--shard-from-env {spec}: {e}"))
}

fn repo_map(args: &ReplayArgs) -> anyhow::Result<RepoMap> {
    if let Some(map) = &args.repo_map {
        let name = map
            .strip_prefix("single:")
            .ok_or_else(|| anyhow::anyhow!("--repo-map takes single:NAME, not '{map}'"))?;
        let repository: Repository = name.parse().map_err(anyhow::Error::msg)?;
        return Ok(RepoMap::Single { repository });
    }
    if let Some(prefix) = &args.repo_prefix {
        // A prefix must itself be a valid name.
        prefix
            .trim_matches('/')
            .parse::<Repository>()
            .map_err(|e| anyhow::anyhow!("--repo-prefix: {e}"))?;
    }
    Ok(RepoMap::Keep {
        prefix: args.repo_prefix.clone(),
    })
}

impl TryFrom<&ReplayArgs> for ReplayConfig {
    type Error = anyhow::Error;

    fn try_from(a: &ReplayArgs) -> anyhow::Result<Self> {
        if a.chunk_size.bytes() == 0 {
            anyhow::bail!("--chunk-size must be at least 1 byte");
        }
        let upload = match a.upload {
            UploadChoice::Trace => UploadPolicy::Trace,
            UploadChoice::Monolithic => UploadPolicy::Monolithic,
            UploadChoice::Chunked => UploadPolicy::Chunked {
                chunk_size: a.chunk_size.bytes(),
            },
        };
        let read = ReadOptions {
            skip_invalid: a.skip_invalid,
            replay_failed: a.replay_failed,
            limit_requests: a.limit_requests,
            limit_duration: a.limit_duration,
            ..ReadOptions::default()
        };
        let gap_ms = i64::try_from(a.session_gap.as_millis()).unwrap_or(i64::MAX);
        let registry = RegistryConfig::try_from(&a.registry)?;
        let routing = (registry.endpoints.len() > 1).then(|| RoutingConfig {
            route: RouteOptions {
                kind: a.route.route.into(),
                replicas: a.route.replicas.get(),
                vnodes: a.route.vnodes.get(),
                seed: a.seed,
            },
            endpoint_down_after: a.route.endpoint_down_after,
            probe_interval_s: a.route.probe_interval.as_secs_f64(),
            failover: !a.route.no_failover,
        });
        Ok(ReplayConfig {
            registry,
            routing,
            traces: a.traces.clone(),
            mode: a.mode.into(),
            speed: a.speed,
            concurrency: a.concurrency.get(),
            prewarm_concurrency: a.prewarm_concurrency.unwrap_or(a.concurrency).get(),
            phase: a.phase,
            seed: a.seed,
            read,
            limit_requests: a.limit_requests,
            limit_duration_s: a.limit_duration.map(|d| d.as_secs_f64()),
            skip_invalid: a.skip_invalid,
            replay_failed: a.replay_failed,
            plan: PlanOptions {
                shard: match &a.shard_from_env {
                    Some(spec) => shard_from_env(spec)?,
                    None => a.shard,
                },
                shard_by: a.shard_by.into(),
                speed: a.speed,
                upload,
                repos: repo_map(a)?,
                manifest_format: a.manifest_format.into(),
                session_gap_ms: gap_ms,
            },
            content: ContentOptions {
                seed: a.seed,
                ..ContentOptions::default()
            },
            max_lateness_ms: a.max_lateness.map(|d| d.as_millis() as u64),
            grace_s: a.grace.as_secs_f64(),
            start_at: a
                .start_at
                .map(|t| humantime::format_rfc3339_millis(t).to_string()),
            start_at_time: a.start_at,
            verify: !a.no_verify,
            strict: a.strict,
        })
    }
}

/// Planned operations buffered between the planner and the executor.
const PLAN_QUEUE: usize = 1024;

/// Replays wait for the anchor and for due times on a timerfd (microseconds), not on tokio's
/// millisecond timer.
const PRECISE_TIMER: bool = true;

/// Sends planned items from the planner thread in batches of half the queue: when the queue
/// is full it parks until half of it is free, then fills that half without waiting. A
/// sender parked on each freed slot would be woken once per operation (a futex round trip
/// each) on a queue that is almost always full, the planner being far faster than any
/// registry; polling it with short sleeps would wake the planner a thousand times a second
/// whatever the rate. The executor never waits: half the queue is still queued when the
/// planner wakes.
struct BatchSender<'a> {
    tx: &'a mpsc::Sender<PlanItem>,
    runtime: tokio::runtime::Handle,
    permits: Option<mpsc::PermitIterator<'a, PlanItem>>,
}

impl<'a> BatchSender<'a> {
    fn new(tx: &'a mpsc::Sender<PlanItem>, runtime: tokio::runtime::Handle) -> Self {
        BatchSender {
            tx,
            runtime,
            permits: None,
        }
    }

    /// Sends one item; returns it back when the executor has stopped taking any.
    fn send(&mut self, item: PlanItem) -> Option<PlanItem> {
        loop {
            if let Some(permit) = self.permits.as_mut().and_then(Iterator::next) {
                permit.send(item);
                return None;
            }
            let batch = (self.tx.max_capacity() / 2).max(1);
            match self.runtime.block_on(self.tx.reserve_many(batch)) {
                Ok(permits) => self.permits = Some(permits),
                Err(_) => return Some(item),
            }
        }
    }
}

/// Pass 1 on a blocking thread: the catalog, with every digest computed, and (when a run
/// follows) the items read, spooled for pass 2 in `spool_dir` (the output directory) or the
/// temporary directory.
async fn build_catalog(
    input: TraceInput,
    cfg: &ReplayConfig,
    spool_dir: Option<PathBuf>,
) -> anyhow::Result<(Catalog, Option<Spool>)> {
    let read = cfg.read.clone();
    let gap = cfg.plan.session_gap_ms;
    let content = cfg.content;
    let spool = cfg.phase != Phase::Prewarm;
    tokio::task::spawn_blocking(move || -> anyhow::Result<(Catalog, Option<Spool>)> {
        let mut reader = TraceReader::open(&input, read, Interner::default())?;
        let mut writer = spool
            .then(|| SpoolWriter::in_dir(spool_dir.as_deref(), crate::trace::spool::MAX_SPOOL_BYTES));
        let items = (&mut reader).inspect(|item| {
            if let (Some(w), Ok(item)) = (writer.as_mut(), item) {
                w.push(item);
            }
        });
        let mut catalog = Catalog::build(items, gap, content)?;
        catalog.names = reader.into_names();
        // The second pass shares these names instead of copying them.
        catalog.names.freeze();
        catalog.compute_digests(available_cores());
        let spool = writer.and_then(|w| match w.finish() {
            Ok(spool) => {
                // Both count the items the reader gave before it ended or failed.
                debug_assert_eq!(spool.len(), catalog.items);
                Some(spool)
            }
            Err(why) => {
                tracing::warn!("cannot keep the trace's items for the run ({why}); the run reads the trace again");
                None
            }
        });
        Ok((catalog, spool))
    })
    .await
    .context("the trace reader stopped unexpectedly")?
}

/// What the workload requests: runs compare (and merge) only when this matches. The trace is
/// identified by its files' names and sizes, its record count and span.
fn dataset_json(cfg: &ReplayConfig, input: &TraceInput, catalog: &Catalog) -> serde_json::Value {
    let files: Vec<serde_json::Value> = input
        .files
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": f.file_name().map(|n| n.to_string_lossy().into_owned()),
                "bytes": std::fs::metadata(f).map(|m| m.len()).ok(),
            })
        })
        .collect();
    serde_json::json!({
        "command": "replay",
        "traces": files,
        "records": catalog.items,
        "origin_ms": catalog.origin_ms,
        "end_ms": catalog.end_ms,
        "seed": cfg.seed,
        "limit_requests": cfg.limit_requests,
        "limit_duration_s": cfg.limit_duration_s,
        "skip_invalid": cfg.skip_invalid,
        "replay_failed": cfg.replay_failed,
        "repos": cfg.plan.repos,
        "upload": cfg.plan.upload,
        "manifest_format": cfg.plan.manifest_format,
        "session_gap_ms": cfg.plan.session_gap_ms,
    })
}

/// What the planner thread reports when it ends.
#[derive(Debug, Default)]
struct PlannerEnd {
    counts: crate::plan::PlanCounts,
    /// Records of operations planned but not handed over (the run stopped).
    unsent: u64,
}

fn warn(warnings: &mut Vec<Warning>, kind: &str, message: String) {
    warnings.push(Warning {
        kind: kind.into(),
        message,
    });
}

fn shard_of(spec: ShardSpec) -> Shard {
    Shard {
        index: spec.index,
        count: spec.count,
    }
}

/// Runs `creb-rs replay`.
pub async fn run(args: ReplayArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = ReplayConfig::try_from(&args)?;
    let thresholds = thresholds(&args.output)?;
    prepare_output(&args.output)?;
    let output = run_output(&args.output);
    let input = TraceInput::resolve(&cfg.traces)?;
    let quiet = args.output.quiet || args.output.json;

    let prepared = Instant::now();
    let (catalog, spool) =
        build_catalog(input.clone(), &cfg, args.output.output_dir.clone()).await?;
    let catalog = Arc::new(catalog);
    if !quiet {
        eprintln!(
            "creb-rs: trace: {} records, {:.1}s of trace time, {} blobs ({}) and {} manifests to prewarm; prepared in {:.1}s",
            catalog.items,
            (catalog.end_ms - catalog.origin_ms.unwrap_or(catalog.end_ms)) as f64 / 1000.0,
            catalog.blob_reads.len(),
            crate::units::ByteSize(catalog.prewarm_bytes()),
            catalog.manifests.len(),
            prepared.elapsed().as_secs_f64()
        );
    }

    let dataset = dataset_json(&cfg, &input, &catalog);
    let options = ClientOptions {
        verify: cfg.verify,
        ..ClientOptions::default()
    };
    let (first_recorder, first_aggregator) = spawn_aggregator();
    let names = cfg.registry.endpoint_names();
    let router = Router::new(&names, cfg.routing.map(|r| r.route).unwrap_or_default());
    let pool = cfg.concurrency.max(cfg.prewarm_concurrency);
    let mut connections = Vec::with_capacity(names.len());
    if cfg.routing.is_some() {
        // One client, connection pool and credential cache per endpoint.
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
    for (connection, name) in connections.iter().zip(&names) {
        checked = preflight(connection, name).await;
        if checked.is_err() {
            break;
        }
    }
    drop(first_aggregator.finish().await);
    if let Err(message) = checked {
        eprintln!("creb-rs: error: {message}");
        return Ok(ExitStatus::Usage);
    }
    let connection = &connections[0];
    let errors = ErrorLog::default();
    let mut exit = ExitStatus::Success;

    if cfg.phase != Phase::Run {
        let out = if cfg.phase == Phase::All {
            output.in_subdir("prewarm")
        } else {
            output.clone()
        };
        let started_at = SystemTime::now();
        let start = Instant::now();
        let (recorder, aggregator) = out.start_over(start, started_at, connections.len())?;
        let clients = clients_for(&connections, &recorder);
        let mut naming = Naming::new(cfg.plan.repos.clone());
        let jobs =
            prewarm::PrewarmJobs::plan(&catalog, &router, &mut naming, cfg.plan.manifest_format);
        let progress = Progress::new(jobs.len());
        let line = ProgressLine::show(
            "prewarm",
            "objects",
            Arc::clone(&progress),
            progress::wanted(args.output.quiet, args.output.json),
        );
        let report = prewarm::prewarm(
            &catalog,
            jobs,
            &clients,
            cfg.plan.manifest_format,
            cfg.prewarm_concurrency,
            &shutdown,
            &errors,
            &progress,
        )
        .await;
        line.finish();
        let duration = start.elapsed();
        drop(clients);
        let aggregator = aggregator.finish().await;
        let mut warnings = Vec::new();
        if report.failed > 0 {
            warn(
                &mut warnings,
                "prewarm_incomplete",
                format!(
                    "{} objects could not be prewarmed; reads of them will fail in the run",
                    report.failed
                ),
            );
        }
        let mut summary = Summary::build(
            RunInfo {
                command: "replay".into(),
                mode: "prewarm".into(),
                model: "closed".into(),
                concurrency: cfg.prewarm_concurrency as u64,
                registry: names.join(","),
                seed: cfg.seed,
                shard: shard_of(ShardSpec::ALL),
                started_at,
                duration,
                interrupted: shutdown.is_cancelled(),
                trace: None,
                warnings,
                checks: None,
                config: config_json(&cfg, &connection.credentials),
            },
            &aggregator,
        );
        summary.endpoints = endpoint_summaries(&cfg, &names, &aggregator, duration, None);
        let meta = Meta::new(
            &summary,
            MetaInput {
                config: summary.config.clone(),
                dataset: dataset.clone(),
                anchor: started_at,
                start_at: None,
                actual_start: started_at,
                start_skew_ms: None,
                interval: out.interval,
            },
        );
        let finished = Finished {
            summary,
            aggregator,
            meta,
        };
        // With --phase all the run's results are the ones printed as JSON.
        let shown = OutputArgs {
            json: args.output.json && cfg.phase == Phase::Prewarm,
            quiet: args.output.quiet || (args.output.json && cfg.phase != Phase::Prewarm),
            ..args.output.clone()
        };
        publish(&finished, &shown, out.dir.as_deref(), true)?;
        if !shown.quiet && !shown.json {
            println!(
                "prewarm: {} blobs pushed, {} present; {} manifests pushed, {} present; {} failed\n",
                report.blobs_pushed,
                report.blobs_present,
                report.manifests_pushed,
                report.manifests_present,
                report.failed
            );
        }
        if report.failed > 0 {
            exit = ExitStatus::Failed;
        }
        if cfg.phase == Phase::Prewarm
            && check(&thresholds, &finished.summary, &finished.aggregator.table)
        {
            exit = ExitStatus::Failed;
        }
        if shutdown.is_cancelled() {
            return Ok(ExitStatus::Interrupted);
        }
    }

    if cfg.phase != Phase::Prewarm {
        let context = RunContext {
            cfg: &cfg,
            args: &args,
            output: &output,
            dataset: &dataset,
            thresholds: &thresholds,
            connections: &connections,
            names: &names,
            router: &router,
            shutdown: &shutdown,
            errors: &errors,
        };
        exit = run_phase(context, catalog, input, spool)
            .await?
            .max_with(exit);
    }
    for message in errors.messages() {
        eprintln!("creb-rs: {message}");
    }
    Ok(exit)
}

/// What the run phase needs from the command.
struct RunContext<'a> {
    cfg: &'a ReplayConfig,
    args: &'a ReplayArgs,
    output: &'a RunOutput,
    dataset: &'a serde_json::Value,
    thresholds: &'a [Threshold],
    connections: &'a [Connection],
    names: &'a [String],
    router: &'a Router,
    shutdown: &'a Shutdown,
    errors: &'a ErrorLog,
}

async fn run_phase(
    context: RunContext<'_>,
    catalog: Arc<Catalog>,
    input: TraceInput,
    spool: Option<Spool>,
) -> anyhow::Result<ExitStatus> {
    let RunContext {
        cfg,
        args,
        output,
        dataset,
        thresholds,
        connections,
        names,
        router,
        shutdown,
        errors,
    } = context;
    let connection = &connections[0];

    // Pass 2 on a blocking thread, feeding a bounded channel: enough to cover the planner's
    // hiccups (it plans far faster than any registry serves), small enough that the planned
    // manifests waiting in it stay a few megabytes.
    let (tx, rx) = mpsc::channel::<PlanItem>(PLAN_QUEUE);
    let progress = Progress::new(catalog.items);
    let line = ProgressLine::show(
        cfg.mode.name(),
        "records",
        Arc::clone(&progress),
        progress::wanted(args.output.quiet, args.output.json),
    );
    #[allow(clippy::while_let_on_iterator)]
    let planner = {
        let catalog = Arc::clone(&catalog);
        let progress = Arc::clone(&progress);
        let read = cfg.read.clone();
        let options = cfg.plan.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || -> anyhow::Result<PlannerEnd> {
            // Pass 1's items when they were spooled; else the trace, read again.
            let items: Box<dyn Iterator<Item = _>> = match spool {
                Some(spool) => Box::new(spool.into_items()),
                None => Box::new(TraceReader::open(&input, read, catalog.names.clone())?),
            };
            let mut planner = Planner::new(&catalog, items, options);
            let mut sender = BatchSender::new(&tx, runtime);
            let mut unsent = 0;
            // Progress: the executor adds the records of the operations it completes; the
            // planner adds the records it skips and those of other shards.
            let mut counted = 0u64;
            while let Some(item) = planner.next() {
                let sent = sender.send(item?);
                let counts = planner.counts();
                let settled =
                    planner.items_read() - counts.records + counts.skipped.values().sum::<u64>();
                progress.add_done(settled - counted);
                counted = settled;
                if let Some(item) = sent {
                    if let PlanItem::Op(op) = item {
                        unsent += op.records();
                    }
                    break;
                }
            }
            planner.finish_early();
            Ok(PlannerEnd {
                counts: planner.counts().clone(),
                unsent,
            })
        })
    };

    // The shared start: every host begins its schedule at --start-at.
    let now_wall = SystemTime::now();
    let now = Instant::now();
    let mut warnings = Vec::new();
    let (anchor, anchor_wall) = match cfg.start_at_time {
        Some(t) => match t.duration_since(now_wall) {
            Ok(ahead) => (now + ahead, t),
            Err(behind) => {
                warn(
                    &mut warnings,
                    "start_in_past",
                    format!(
                        "--start-at was {:.3}s in the past; started at once",
                        behind.duration().as_secs_f64()
                    ),
                );
                (now, now_wall)
            }
        },
        None => (now, now_wall),
    };
    // Intervals are aligned to the anchor, the same instant on every host.
    let (recorder, aggregator) = output.start_over(anchor, anchor_wall, connections.len())?;
    let clients = clients_for(connections, &recorder);
    let targets = match cfg.routing {
        None => Targets::single(clients[0].clone()),
        Some(routing) => {
            let mut health =
                Health::new(clients.len(), routing.endpoint_down_after, routing.failover);
            health.set_anchor(anchor, anchor_wall);
            Targets {
                probes: connections
                    .iter()
                    .map(|c| c.client.with_recorder(Recorder::discard()))
                    .collect(),
                clients: clients.clone(),
                router: Arc::new(router.clone()),
                health: Arc::new(health),
                probe_interval: Duration::from_secs_f64(routing.probe_interval_s),
            }
        }
    };
    wait_for_anchor(anchor, PRECISE_TIMER, shutdown.token()).await;
    let started_at = SystemTime::now();
    let start_skew_ms = cfg
        .start_at_time
        .map(|t| match started_at.duration_since(t) {
            Ok(d) => d.as_secs_f64() * 1000.0,
            Err(e) => -e.duration().as_secs_f64() * 1000.0,
        });

    let cpu_before = process_cpu_time();
    let canary_stop = tokio_util::sync::CancellationToken::new();
    let canary = spawn_canary(canary_stop.clone());
    let health = Arc::clone(&targets.health);
    let exec = execute_on(
        rx,
        targets,
        recorder.clone(),
        ExecOptions {
            mode: cfg.mode,
            concurrency: cfg.concurrency,
            max_lateness: cfg.max_lateness_ms.map(Duration::from_millis),
            grace: Duration::from_secs_f64(cfg.grace_s),
            precise_timer: PRECISE_TIMER,
        },
        anchor,
        shutdown.clone(),
        errors.clone(),
        Some(Arc::clone(&progress)),
    )
    .await;
    line.finish();
    canary_stop.cancel();
    let canary = canary.await.ok();
    let cpu = match (cpu_before, process_cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let planner_end = planner.await.context("the planner stopped unexpectedly")?;
    drop(clients);
    drop(recorder);
    let aggregator = aggregator.finish().await;

    let (counts, planner_error) = match planner_end {
        Ok(end) => (Some(end), None),
        Err(e) => (None, Some(e)),
    };
    let trace = counts.as_ref().map(|end| trace_counts(end, &exec));
    // The cores the generator may use: the runtime's workers, at most every core.
    let cores = available_cores().min(tokio::runtime::Handle::current().metrics().num_workers());
    let checks = Checks {
        start_at: cfg.start_at.clone(),
        start_skew_ms,
        canary_wake_ms: canary
            .as_ref()
            .and_then(|c| Percentiles::of(&c.wake_lateness)),
        cpu_seconds: cpu.map(|c| c.as_secs_f64()),
        cpu_share: cpu
            .map(|c| c.as_secs_f64() / (exec.duration.as_secs_f64().max(1e-9) * cores as f64)),
        cores,
        cap_binding_share: exec.cap_wait.as_secs_f64() / exec.duration.as_secs_f64().max(1e-9),
        max_in_flight: exec.max_in_flight,
    };
    validity_warnings(cfg, &checks, &exec, &aggregator, &mut warnings);
    if shutdown.by_signal() {
        warn(
            &mut warnings,
            "interrupted",
            "stopped by a signal; the numbers cover what ran".into(),
        );
    }
    let mut summary = Summary::build(
        RunInfo {
            command: "replay".into(),
            mode: cfg.mode.name().into(),
            model: cfg.mode.model().into(),
            concurrency: cfg.concurrency as u64,
            registry: names.join(","),
            seed: cfg.seed,
            shard: shard_of(cfg.plan.shard),
            started_at,
            duration: exec.duration,
            interrupted: shutdown.is_cancelled(),
            trace,
            warnings,
            checks: Some(checks),
            config: config_json(cfg, &connection.credentials),
        },
        &aggregator,
    );
    summary.endpoints = endpoint_summaries(
        cfg,
        names,
        &aggregator,
        exec.duration,
        Some(health.transitions()),
    );
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: dataset.clone(),
            anchor: anchor_wall,
            start_at: cfg.start_at.clone(),
            actual_start: started_at,
            start_skew_ms,
            interval: output.interval,
        },
    );
    let finished = Finished {
        summary,
        aggregator,
        meta,
    };
    publish(&finished, &args.output, output.dir.as_deref(), true)?;
    let summary = &finished.summary;
    let failed = check(thresholds, summary, &finished.aggregator.table);
    if let Some(e) = planner_error {
        eprintln!("creb-rs: error: {e:#}");
        return Ok(ExitStatus::Usage);
    }
    if summary.totals.errors > 0 && !args.output.quiet {
        eprintln!(
            "creb-rs: {} of {} operations failed (see errors above)",
            summary.totals.errors, summary.totals.requests
        );
    }
    Ok(if summary.interrupted {
        ExitStatus::Interrupted
    } else if failed || (cfg.strict && !summary.warnings.is_empty()) {
        ExitStatus::Failed
    } else {
        ExitStatus::Success
    })
}

/// One client per connection, recording into `recorder` (tagged per endpoint when there
/// are several).
fn clients_for(connections: &[Connection], recorder: &Recorder) -> Vec<RegistryClient> {
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
fn endpoint_summaries(
    cfg: &ReplayConfig,
    names: &[String],
    aggregator: &crate::metrics::Aggregator,
    duration: Duration,
    transitions: Option<Vec<Vec<Transition>>>,
) -> Option<BTreeMap<String, EndpointSummary>> {
    cfg.routing?;
    let mut transitions = transitions.unwrap_or_default();
    transitions.resize_with(names.len(), Vec::new);
    Some(
        names
            .iter()
            .zip(transitions)
            .enumerate()
            .map(|(i, (name, t))| {
                (
                    name.clone(),
                    EndpointSummary::build(i, aggregator.endpoints.get(i), duration, t),
                )
            })
            .collect(),
    )
}

/// The trace block: the planner's accounting settled with what the executor ran.
fn trace_counts(end: &PlannerEnd, exec: &ExecReport) -> TraceCounts {
    let mut skipped: BTreeMap<String, u64> = end
        .counts
        .skipped
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    if exec.late > 0 {
        skipped.insert("late".into(), exec.late);
    }
    let interrupted = exec.interrupted + end.unsent;
    if interrupted > 0 {
        skipped.insert("interrupted".into(), interrupted);
    }
    TraceCounts {
        records: end.counts.records,
        replayed: exec.replayed,
        folded: exec.folded,
        skipped,
    }
}

fn validity_warnings(
    cfg: &ReplayConfig,
    checks: &Checks,
    exec: &ExecReport,
    aggregator: &crate::metrics::Aggregator,
    warnings: &mut Vec<Warning>,
) {
    if let Some(share) = checks.cpu_share {
        if share > 0.9 {
            warn(
                warnings,
                "generator_bottleneck",
                format!(
                    "creb-rs used {:.0}% of {} cores: the numbers may measure the generator; use more hosts (--shard) or fewer in flight",
                    share * 100.0,
                    checks.cores
                ),
            );
        }
    }
    if let Some(wake) = &checks.canary_wake_ms {
        if wake.p99 > 10.0 {
            warn(
                warnings,
                "generator_stalls",
                format!(
                    "the runtime woke up to {:.1} ms late (p99) for a 10 ms sleep: scheduling on this machine is unreliable",
                    wake.p99
                ),
            );
        }
    }
    if cfg.mode == Mode::Delay {
        let mut late = 0u64;
        let mut ops = 0u64;
        for op in aggregator.table.ops() {
            // A manifest PUT waits for its push's uploads: that wait is the session's
            // dependency, not the schedule slipping.
            if op == crate::metrics::Op::ManifestPut {
                continue;
            }
            if let Some(s) = aggregator.table.op_total(op) {
                late += s.late_starts[1];
                if s.schedule_lag.is_some() {
                    ops += s.count;
                }
            }
        }
        if ops > 0 && late * 100 > ops {
            warn(
                warnings,
                "schedule_slipped",
                format!(
                    "{late} of {ops} operations started more than 10 ms late; raise --concurrency or lower --speed to replay the trace's timing"
                ),
            );
        }
        if checks.cap_binding_share > 0.05 {
            warn(
                warnings,
                "concurrency_cap_binding",
                format!(
                    "the in-flight cap of {} was binding {:.0}% of the time: operations waited for a slot",
                    cfg.concurrency,
                    checks.cap_binding_share * 100.0
                ),
            );
        }
        if exec.late > 0 {
            warn(
                warnings,
                "late_dropped",
                format!(
                    "{} trace records were dropped for starting later than --max-lateness",
                    exec.late
                ),
            );
        }
    }
    if let Some(skew) = checks.start_skew_ms {
        if skew.abs() > 50.0 {
            warn(
                warnings,
                "clock_skew",
                format!("started {skew:.1} ms away from --start-at; check the clock (chrony) of this host"),
            );
        }
    }
}
