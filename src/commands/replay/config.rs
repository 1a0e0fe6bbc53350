//! The flags of `replay` and their validation into [`ReplayConfig`], the settings every
//! stage of a replay reads.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::commands::args::{
    parse_concurrency, parse_count_u64, parse_seed, parse_size_scale, parse_speed, parse_start_at,
};
use crate::commands::args::{
    LayerArgs, ManifestFormatArg, OutputArgs, RegistryArgs, ReplicaArgs, RouteArgs, RuntimeArgs,
    StopArgs, UnpackArgs, VerifyArg, VerifyArgs,
};
use crate::content::DEFAULT_SEED;
use crate::exec::Mode;
use crate::oci::Repository;
use crate::plan::catalog::{ContentOptions, SizeScale};
use crate::plan::{PlanOptions, RepoMap, ShardBy, ShardSpec, UploadPolicy};
use crate::replay::{CacheFile, ReplayConfig, RoutingConfig};
use crate::route::RouteOptions;
use crate::session::connect::RegistryConfig;
use crate::trace::ReadOptions;
use crate::units::{parse_duration, ByteSize};

/// `replay -h` ends with these.
pub const SHORT_EXAMPLES: &str = "\
Examples (more with --help):
  creb-rs replay fixtures/sample-trace.json --registry http://127.0.0.1:5000 --output-dir out
  creb-rs replay trace.json --registry http://127.0.0.1:5000 --mode delay --speed 4 --unpack";

/// `replay --help` ends with these.
pub const EXAMPLES: &str = "\
Examples:
  # prewarm, then replay as fast as 16 operations in flight allow (stress, closed model)
  creb-rs replay fixtures/sample-trace.json --registry http://127.0.0.1:5000 --output-dir out
  # the trace's own timing, 4x faster (delay, open model), failing CI when p99 is slow
  creb-rs replay trace.json --registry http://127.0.0.1:5000 --mode delay --speed 4 \\
    --fail-if 'p99(blob_get) > 500ms'
  # prewarm once, then run shard 0 of 4 (every host: the same --seed and --start-at)
  creb-rs replay trace.json --registry http://127.0.0.1:5000 --phase prewarm --seed 7
  creb-rs replay trace.json --registry http://127.0.0.1:5000 --phase run --seed 7 \\
    --shard 0/4 --start-at 2026-01-01T12:00:00Z --output-dir out/shard-0";

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// Trace files or directories (JSON or JSON lines; plain, .gz or .zst).
    ///
    /// Records from several files are merged by timestamp.
    #[arg(help_heading = "Arguments", value_name = "TRACE", required = true)]
    pub traces: Vec<PathBuf>,

    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Operations in flight at most.
    ///
    /// In delay mode a cap: waiting for a slot is schedule lag.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "16", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// prewarm, run, or all (both, reported apart).
    ///
    /// prewarm pushes what the run reads; run replays; all does both, reported apart.
    #[arg(help_heading = "Workload", long, value_enum, default_value_t = PhaseArg::All, hide_possible_values = true)]
    pub phase: PhaseArg,

    /// Seed of the generated content (decimal or 0x-hex); hosts sharing it agree on digests.
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "S", default_value_t = DEFAULT_SEED, value_parser = parse_seed)]
    pub seed: u64,

    /// Only the first N records of the merged trace.
    #[arg(hide_short_help = true, help_heading = "Workload", long, value_name = "N", value_parser = parse_count_u64, conflicts_with = "limit_duration")]
    pub limit_requests: Option<u64>,

    /// Multiply every blob and upload size of the trace by F (0 < F ≤ 1).
    ///
    /// So an IBM-scale trace fits a test rig: counts, timing and the object graph stay.
    /// Recorded and warned about: MiB/s and byte-dependent latencies are then not the
    /// trace's (docs/replay.md says when that is fair).
    #[arg(hide_short_help = true, help_heading = "Workload", long, value_name = "F", value_parser = parse_size_scale)]
    pub size_scale: Option<f64>,

    /// Cap every blob and upload size at SIZE (after --size-scale).
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "SIZE"
    )]
    pub max_object_size: Option<ByteSize>,

    /// Keep the digests of the generated content in FILE, to reuse in the run phase and on
    /// other hosts (checked on load; rewritten when it grew). Default: one file per dataset
    /// in creb-rs's cache directory ($CREB_CACHE_DIR, else $XDG_CACHE_HOME/creb-rs, else
    /// ~/.cache/creb-rs), so a prewarm repeated on the same dataset sends no blob the
    /// registry holds and a run after its prewarm computes no digest.
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "FILE"
    )]
    pub digest_cache: Option<PathBuf>,

    /// Keep no digest cache: every digest is computed again (or learned while sending), and
    /// a repeated prewarm sends again what it cannot ask about.
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        conflicts_with = "digest_cache"
    )]
    pub no_digest_cache: bool,

    /// Read the trace and compute its digests (filling --digest-cache), say what the
    /// replay would need, and stop: nothing is sent.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub dry_run: bool,

    /// Refuse to prewarm more bytes than DIR (the registry's storage, when it is on this
    /// machine) has free.
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "DIR"
    )]
    pub check_space: Option<PathBuf>,

    /// Put every trace repository under this prefix (`bench` → `bench/<user>/<repo>`).
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "P",
        conflicts_with = "repo_map"
    )]
    pub repo_prefix: Option<String>,

    /// `single:NAME` folds all repositories into NAME (tags stay unique).
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "MAP"
    )]
    pub repo_map: Option<String>,

    /// How uploads are replayed.
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_enum, default_value_t = UploadChoice::Trace)]
    pub upload: UploadChoice,

    /// Chunk size for --upload chunked.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "SIZE",
        default_value = "5MiB"
    )]
    pub chunk_size: ByteSize,

    /// Manifest flavour of generated images.
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_enum, default_value_t = ManifestFormatArg::Oci)]
    pub manifest_format: ManifestFormatArg,

    #[command(flatten)]
    pub layer: LayerArgs,

    /// Count and skip malformed records instead of stopping at the first.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub skip_invalid: bool,

    /// Also replay records whose original request failed (4xx/5xx).
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub replay_failed: bool,

    /// Requests of a client closer than this belong to one session (pull or push).
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "D", default_value = "60s", value_parser = parse_duration)]
    pub session_gap: Duration,

    /// Operations in flight during prewarm (default: --concurrency).
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "N", value_parser = parse_concurrency)]
    pub prewarm_concurrency: Option<NonZeroUsize>,

    #[command(flatten)]
    pub verify: VerifyArgs,

    #[command(flatten)]
    pub unpack: UnpackArgs,

    #[command(flatten)]
    pub replica: ReplicaArgs,

    /// stress (closed model, as fast as it goes) or delay (open model, the trace's timing).
    ///
    /// stress: as fast as possible (closed model); delay: at the trace's timing (open model).
    /// stress keeps --concurrency operations in flight; delay starts each at its trace time
    /// scaled by --speed and measures latency from then.
    #[arg(help_heading = "Timing", long, value_enum, default_value_t = ModeArg::Stress)]
    pub mode: ModeArg,

    /// Delay mode's time scaling: 2 replays twice as fast.
    ///
    /// Bursts are kept: every gap between records is divided by X.
    #[arg(help_heading = "Timing", long, value_name = "X", default_value = "1", value_parser = parse_speed)]
    pub speed: f64,

    /// Start the schedule at this wall-clock instant (RFC 3339 or Unix seconds).
    ///
    /// Every host given the same instant starts together.
    #[arg(hide_short_help = true, help_heading = "Timing", long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<std::time::SystemTime>,

    /// Only the records of the first D of trace time.
    ///
    /// It selects records; how long the replay takes depends on --speed and the registry.
    /// To bound the wall-clock time of the run itself, use --max-run-time.
    #[arg(hide_short_help = true, help_heading = "Timing", long, value_name = "D", value_parser = parse_duration)]
    pub limit_duration: Option<Duration>,

    /// Delay mode: drop (and count) operations that cannot start within D of their time.
    #[arg(hide_short_help = true, help_heading = "Timing", long, value_name = "D", value_parser = parse_duration)]
    pub max_lateness: Option<Duration>,

    /// Stress mode: a worker with nothing to do waits up to a twenty-fifth of the mean
    /// service time (at most 10 ms) before it parks, to gather answers per wake-up.
    ///
    /// A quarter to a third less CPU per request at a slow registry's pace, none when
    /// creb-rs is the limit (answers are ready at every wake-up then), and the next
    /// requests go out in clumps, which a registry works on differently: docker-registry at
    /// 50 in flight collects garbage as beside 40 clients. Answers are timed from their
    /// arrival either way (docs/measurement.md).
    #[arg(
        hide_short_help = true,
        help_heading = "Timing",
        long,
        conflicts_with = "no_gather"
    )]
    pub gather: bool,

    /// Stress mode: each answer is handled as it arrives (the default; see --gather).
    #[arg(hide_short_help = true, help_heading = "Timing", long)]
    pub no_gather: bool,

    /// This host's shard I of N (0-based). Shards cover the trace exactly once.
    #[arg(
        hide_short_help = true,
        help_heading = "Several hosts",
        long,
        value_name = "I/N",
        default_value = "0/1"
    )]
    pub shard: ShardSpec,

    /// Take the shard index from environment variable VAR, out of N shards (a number or a
    /// variable) — `JOB_COMPLETION_INDEX/8` in a Kubernetes Indexed Job,
    /// `SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT` in a Slurm job array.
    #[arg(
        hide_short_help = true,
        help_heading = "Several hosts",
        long,
        value_name = "VAR/N",
        conflicts_with = "shard"
    )]
    pub shard_from_env: Option<String>,

    /// How records are assigned to shards.
    #[arg(hide_short_help = true, help_heading = "Several hosts", long, value_enum, default_value_t = ShardByArg::Client)]
    pub shard_by: ShardByArg,

    #[command(flatten)]
    pub route: RouteArgs,

    /// Exit 1 when a validity warning is raised (generator bottleneck, schedule slipped,
    /// clock skew).
    #[arg(hide_short_help = true, help_heading = "Output & thresholds", long)]
    pub strict: bool,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
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

use crate::exec::Phase;

/// `--phase`: the phases of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    /// Prewarm, then run, each with its own results.
    All,
    /// Only push what the run will read.
    Prewarm,
    /// Only replay (the registry was prewarmed before).
    Run,
}

impl From<PhaseArg> for Phase {
    fn from(a: PhaseArg) -> Self {
        match a {
            PhaseArg::All => Phase::All,
            PhaseArg::Prewarm => Phase::Prewarm,
            PhaseArg::Run => Phase::Run,
        }
    }
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

/// `--digest-cache`, or the dataset's default cache (none with `--no-digest-cache`, or when
/// no cache directory can be had).
fn digest_cache(a: &ReplayArgs) -> Option<CacheFile> {
    use crate::replay::default_cache;
    if a.digest_cache.is_some() || a.no_digest_cache {
        return a
            .digest_cache
            .clone()
            .map(|path| CacheFile { path, named: true });
    }
    let dir = default_cache::directory(|name| std::env::var_os(name))?;
    // The files the trace's paths name (a directory: every file below it); a trace that
    // cannot be read gets no cache here, and its error from the replay.
    let input = crate::trace::TraceInput::resolve(&a.traces).ok()?;
    let file = default_cache::file_of(&dir, &input.files, a.seed)?;
    match default_cache::prepare(&file) {
        Ok(()) => Some(CacheFile {
            path: file,
            named: false,
        }),
        Err(why) => {
            // Said once, as the run is set up: digests are then computed as without a cache.
            if !(a.output.quiet || a.output.json) {
                eprintln!(
                    "creb-rs: warning: the digest cache directory cannot be used ({why}): this \
                     run keeps no digest cache, so a repeated prewarm hashes again; set \
                     CREB_CACHE_DIR to a writable directory, or pass --no-digest-cache"
                );
            }
            None
        }
    }
}

/// `--shard-from-env VAR/N`: the index from the environment; N is a number or the name of
/// a variable holding it (`SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT`).
pub fn shard_from_env(spec: &str) -> anyhow::Result<ShardSpec> {
    let (var, count) = spec
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--shard-from-env takes VAR/N, not '{spec}'"))?;
    let read = |name: &str| {
        std::env::var(name.trim()).map_err(|_| {
            anyhow::anyhow!("--shard-from-env: environment variable {name} is not set")
        })
    };
    let index = read(var)?;
    let count = match count.trim() {
        n if n.starts_with(|c: char| c.is_ascii_digit()) => n.to_owned(),
        name => read(name)?,
    };
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
        ReplayConfig::in_mode(a, a.mode.into())
    }
}

impl ReplayConfig {
    /// The replay the flags describe, in `mode` whatever `--mode` says (a capacity search's
    /// steps are an open model always).
    #[allow(clippy::too_many_lines)]
    pub fn in_mode(a: &ReplayArgs, mode: Mode) -> anyhow::Result<Self> {
        if a.chunk_size.bytes() == 0 {
            anyhow::bail!("--chunk-size must be at least 1 byte");
        }
        if a.gather && mode != Mode::Stress {
            anyhow::bail!(
                "--gather gathers answers per wake-up in stress mode (--mode stress); this run \
                 is in delay mode, which handles every answer as it arrives"
            );
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
        let sizes = SizeScale::new(a.size_scale.unwrap_or(1.0), a.max_object_size.map(|b| b.0))
            .map_err(|e| anyhow::anyhow!("--size-scale/--max-object-size: {e}"))?;
        let verify = a.verify.mode(VerifyArg::Compare);
        if a.unpack.unpack && verify == VerifyArg::None {
            anyhow::bail!(
                "--unpack unpacks each layer as its read proved it to be (generated again, as a \
                 runtime reads its content store back): --verify none proves nothing; use \
                 --verify compare or sha256"
            );
        }
        if a.unpack.unpack && matches!(a.phase, PhaseArg::Prewarm) {
            anyhow::bail!("--unpack unpacks the images the run pulls; --phase prewarm pulls none");
        }
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
            mode,
            speed: a.speed,
            concurrency: a.concurrency.get(),
            prewarm_concurrency: a.prewarm_concurrency.unwrap_or(a.concurrency).get(),
            phase: a.phase.into(),
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
                sizes,
                layer_form: a.layer.form(a.manifest_format.into())?,
                ..ContentOptions::default()
            },
            sizes,
            digest_cache: digest_cache(a),
            check_space: a.check_space.clone(),
            max_lateness_ms: a.max_lateness.map(|d| d.as_millis() as u64),
            grace_s: a.stop.grace.as_secs_f64(),
            start_at: a
                .start_at
                .map(|t| humantime::format_rfc3339_millis(t).to_string()),
            start_at_time: a.start_at,
            verify: verify.into(),
            strict: a.strict,
            window: None,
            unpack: a.unpack.work(),
            replicas: a.replica.spec()?,
            gather: a.gather,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn config_of(extra: &[&str]) -> ReplayConfig {
        let mut argv = vec![
            "creb-rs",
            "replay",
            "t.json",
            "--registry",
            "http://127.0.0.1:5000",
        ];
        argv.extend(extra);
        let cli = crate::commands::Cli::try_parse_from(argv).unwrap();
        let crate::commands::Command::Replay(args) = cli.command else {
            panic!("not replay")
        };
        ReplayConfig::try_from(&*args).unwrap()
    }

    #[test]
    fn answers_are_gathered_only_with_gather() {
        assert!(!config_of(&["--mode", "stress"]).gather);
        assert!(config_of(&["--mode", "stress", "--gather"]).gather);
        assert!(!config_of(&["--mode", "stress", "--no-gather"]).gather);
        let both = [
            "creb-rs",
            "replay",
            "t.json",
            "--registry",
            "http://127.0.0.1:5000",
            "--gather",
        ];
        let err =
            crate::commands::Cli::try_parse_from(both.iter().chain(&["--no-gather"])).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        // Asked for where nothing gathers, it is a usage error, not a flag silently ignored.
        let argv = [
            "creb-rs",
            "replay",
            "t.json",
            "--registry",
            "http://127.0.0.1:5000",
        ];
        let delay = ["--mode", "delay", "--gather"];
        let cli = crate::commands::Cli::try_parse_from(argv.iter().chain(&delay)).unwrap();
        let crate::commands::Command::Replay(args) = cli.command else {
            panic!("not replay")
        };
        let err = ReplayConfig::try_from(&*args).unwrap_err().to_string();
        assert!(
            err.contains("--gather") && err.contains("stress mode"),
            "{err}"
        );
    }
}
