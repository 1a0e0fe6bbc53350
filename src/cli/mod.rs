//! Raw command-line flags (clap derive). Doc comments here are the `--help` text.
//!
//! The flag names are a contract (`docs/cli.md`): scripts in CI and across hosts use them.
//! Values are parsed into types at this layer (sizes, durations, names); cross-field rules
//! that clap cannot express are checked when the flags become a validated configuration
//! (`TryFrom` in each workload module).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use url::Url;

use crate::exec::Mode;
use crate::oci::manifest::ManifestFormat;
use crate::oci::{Repository, Tag};
use crate::plan::{ShardBy, ShardSpec};
use crate::units::{parse_count, parse_duration, ByteSize};

/// Container registry benchmark: trace replay and synthetic push/pull against any OCI
/// Distribution registry, with latency you can trust.
#[derive(Debug, Parser)]
#[command(
    name = "creb-rs",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace). `RUST_LOG` also works.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Worker threads of the async runtime that sends the requests. Default: one per core
    /// the process may use; half of them (at least one) when every registry endpoint is on
    /// loopback, since the registry under test then shares the machine.
    #[arg(long, global = true, env = "CREB_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

impl Cli {
    /// The runtime's worker threads: `--threads`, else half the `cores` (at least one) when
    /// every endpoint the command names is on loopback, else `None` (tokio's default, one
    /// per core).
    pub fn worker_threads(&self, cores: usize) -> Option<usize> {
        if let Some(threads) = self.threads {
            return Some(usize::from(threads));
        }
        let endpoints = self.command.endpoints();
        (!endpoints.is_empty() && endpoints.iter().all(|u| is_loopback(u)))
            .then_some((cores / 2).max(1))
    }
}

/// Whether `url` names this machine: `localhost` (and its subdomains), 127.0.0.0/8, `::1`.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.');
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        None => false,
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Push generated images (unique, deterministic layers) and time every request.
    Push(PushArgs),
    /// Pull images: manifest, then every blob read to the end and verified.
    Pull(PullArgs),
    /// Replay IBM registry traces: prewarm the registry, then replay in stress (closed) or
    /// delay (open, trace timing) mode.
    Replay(ReplayArgs),
    /// Merge the result directories of many hosts exactly (histograms add; nothing averages).
    Merge(crate::merge::MergeArgs),
    /// Re-render a result directory as text, JSON, CSV or a self-contained HTML report.
    Report(crate::report::ReportArgs),
    /// Compare two result directories side by side.
    Compare(crate::compare::CompareArgs),
    /// Trace analysis: stats, sampling, synthetic traces, validation.
    Trace(crate::analysis::trace_cmd::TraceArgs),
    /// Offline simulations over traces: a two-level layer cache, prefetching after pushes.
    Simulate(crate::analysis::simulate::SimulateArgs),
    /// Storage and egress cost of a measured run or a trace, from a pricing table.
    Cost(crate::analysis::cost::CostArgs),
    /// Run the experiments of a TOML file against its registries, in rounds (--every,
    /// --repeat), resumable (--resume), with a combined comparison (CSV and HTML).
    Run(crate::experiment::RunArgs),
}

impl Command {
    /// The registry endpoints the command line names (none for commands that send nothing,
    /// and for `run`, whose registries are in its file).
    pub fn endpoints(&self) -> Vec<&Url> {
        match self {
            Command::Push(a) => a.registry.registry.iter().collect(),
            Command::Pull(a) => a.registry.registry.iter().chain(&a.from).collect(),
            Command::Replay(a) => a.registry.registry.iter().collect(),
            _ => Vec::new(),
        }
    }
}

fn parse_url(s: &str) -> Result<Url, String> {
    let with_scheme = if s.contains("://") {
        s.to_owned()
    } else {
        format!("https://{s}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| format!("'{s}' is not a URL: {e}"))?;
    crate::oci::registry_base(&url)
}

fn parse_count_u64(s: &str) -> Result<u64, String> {
    parse_count(s)
}

fn parse_concurrency(s: &str) -> Result<NonZeroUsize, String> {
    let n = parse_count(s)?;
    usize::try_from(n)
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or_else(|| format!("'{s}' must be a whole number of at least 1"))
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|e| format!("'{s}': {e}")),
        None => t.parse().map_err(|e| format!("'{s}': {e}")),
    }
}

fn parse_speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be a positive number"))
    }
}

/// A wall-clock instant: RFC 3339 (`2026-11-21T10:00:00Z`) or Unix seconds (`1795600000.5`).
fn parse_start_at(s: &str) -> Result<std::time::SystemTime, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(t)
        .map_err(|e| format!("'{s}' is not RFC 3339 or Unix seconds ({e})"))
}

/// The phases of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UploadChoice {
    /// Chunked when the trace shows PATCHes, else monolithic.
    Trace,
    Monolithic,
    /// PATCH chunks of --chunk-size.
    Chunked,
}

/// The seed used when none is given; printed with every result so runs can be repeated.
pub const DEFAULT_SEED: u64 = 1;

/// Where the registry is and how to reach it.
#[derive(Debug, Clone, Args)]
pub struct RegistryArgs {
    /// Registry URL: `http://host:port` speaks plain HTTP, `https://` (the default when no
    /// scheme is given) speaks TLS. `replay` takes several endpoints of one distributed
    /// registry (repeat the flag or separate them with commas), all with the same
    /// credentials and TLS settings; `--route` picks one per operation.
    #[arg(
        long,
        value_name = "URL",
        value_parser = parse_url,
        env = "CREB_REGISTRY",
        value_delimiter = ',',
        required = true
    )]
    pub registry: Vec<Url>,

    /// Skip TLS certificate verification (for registries with self-signed certificates).
    #[arg(long)]
    pub insecure: bool,

    /// HTTP client library: `hyper` (bounded per-connection buffers, less CPU per request)
    /// or `reqwest`. Both follow the same rules (no automatic redirects, no proxy, the same
    /// timeouts and error classes), so results compare across them.
    #[arg(long, value_enum, value_name = "CLIENT", default_value_t = crate::oci::net::HttpClient::Hyper)]
    pub http_client: crate::oci::net::HttpClient,

    /// Largest read buffer of one HTTP/1 connection (hyper client; at least 8KiB). Bodies
    /// are read through it; a larger buffer costs fewer reads per GiB, a smaller one less
    /// memory per pooled connection.
    #[arg(long, value_name = "SIZE", default_value = "16KiB")]
    pub http1_read_buffer: ByteSize,

    /// Trust the PEM certificates in FILE in addition to the system roots (repeatable).
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Vec<PathBuf>,

    /// Give up on connecting after this long.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Give up waiting for response headers this long after the request was sent.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Give up on a body (upload or download) that makes no progress for this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub body_idle_timeout: Duration,

    /// Retry failed requests of these classes: 429, 5xx, timeout, connection (comma-separated).
    /// Off by default: a benchmark reports failures rather than hiding them; every retry is
    /// counted (events.retry). PATCHes and the PUT that closes an upload are never retried.
    #[arg(long, value_name = "LIST", value_parser = crate::oci::retry::parse_retry_on)]
    pub retry: Option<std::collections::BTreeSet<crate::oci::retry::RetryOn>>,

    /// Retries per request at most (with --retry).
    #[arg(long, value_name = "N", default_value = "3", requires = "retry")]
    pub max_retries: u32,

    /// First wait between retries; doubles each time, with jitter. A 429's Retry-After wins.
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = parse_duration, requires = "retry")]
    pub backoff: Duration,

    #[command(flatten)]
    pub auth: AuthArgs,
}

/// Credentials. Without any of these, the docker config is consulted, then anonymous.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Authentication")]
pub struct AuthArgs {
    /// User name (Basic auth, or Basic at the token server). The password comes from
    /// --password-stdin, --password-cmd, or the CREB_PASSWORD environment variable; it is
    /// never taken as an argument, where `ps` would show it.
    #[arg(
        long,
        value_name = "USER",
        env = "CREB_USERNAME",
        hide_env_values = true
    )]
    pub username: Option<String>,

    /// Read the password (or token) from standard input.
    #[arg(long, requires = "username", conflicts_with = "password_cmd")]
    pub password_stdin: bool,

    /// Run CMD with `sh -c` once and use what it prints as the password, e.g.
    /// `aws ecr get-login-password`.
    #[arg(long, value_name = "CMD", requires = "username")]
    pub password_cmd: Option<String>,

    /// Docker config directory holding config.json (default: $DOCKER_CONFIG or ~/.docker).
    #[arg(long, value_name = "DIR")]
    pub docker_config: Option<PathBuf>,

    /// Use no credentials, even if the docker config has some.
    #[arg(long, conflicts_with_all = ["username", "password_stdin", "password_cmd", "docker_config"])]
    pub anonymous: bool,

    /// Limit for --password-cmd and docker credential helpers.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub credential_timeout: Duration,
}

/// Where results go.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Write the result directory (summary.json, ...) here. Created if missing; checked for
    /// writability before the run starts.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Print the summary JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Print nothing on stdout (results still go to --output-dir).
    #[arg(long, short, conflicts_with = "json")]
    pub quiet: bool,

    /// Exit 1 when EXPR holds for the finished run (repeatable), e.g. 'p99(blob_get) > 2s',
    /// 'error_rate > 1%', 'rps < 100', 'p99(manifest_get).lag > 10ms'.
    #[arg(long, value_name = "EXPR")]
    pub fail_if: Vec<String>,

    /// Length of the intervals of histograms.hlog and timeline.csv.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,

    /// Also write requests.csv: one row per request, streamed (large for long runs).
    #[arg(long, requires = "output_dir")]
    pub record_requests: bool,
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("'{s}' is shorter than the 10 ms minimum"));
    }
    Ok(d)
}

#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Repository to push to, e.g. `bench/app`.
    #[arg(long, value_name = "NAME")]
    pub repo: Repository,

    /// Tag of the image; with --images N > 1 the images are tagged TAG-0 … TAG-(N-1).
    #[arg(long, value_name = "TAG", default_value = "latest")]
    pub tag: Tag,

    /// How many images to push.
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count_u64)]
    pub images: u64,

    /// Layers per image.
    #[arg(long, value_name = "N", value_parser = parse_count_u64)]
    pub layers: u64,

    /// Size of each layer (`512`, `4KiB`, `10MiB`, `1GiB`).
    #[arg(long, value_name = "SIZE")]
    pub layer_size: ByteSize,

    /// Upload in PATCH chunks of this size (POST, PATCH…, PUT).
    #[arg(long, value_name = "SIZE", conflicts_with_all = ["monolithic", "single_post"])]
    pub chunk_size: Option<ByteSize>,

    /// Upload each blob with one PUT after the POST (the default).
    #[arg(long, conflicts_with = "single_post")]
    pub monolithic: bool,

    /// Upload each blob in the POST itself (`?digest=`); when the registry answers 202 (as
    /// distribution does) the blob is sent again with a PUT, and counted.
    #[arg(long)]
    pub single_post: bool,

    /// Mount each blob from this repository first (cross-repository mount), uploading when
    /// the registry declines. Layers are generated as the ones pushed to that repository.
    #[arg(long, value_name = "NAME")]
    pub mount_from: Option<Repository>,

    /// Blob uploads in flight at once.
    #[arg(long, value_name = "N", default_value = "4", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// Manifest flavour: OCI image manifest or Docker schema 2.
    #[arg(long, value_enum, default_value_t = ManifestFormat::Oci)]
    pub manifest_format: ManifestFormat,

    /// Seed of the generated content (decimal or 0x-hex). Same seed, repository and tag
    /// give the same bytes and digests on every host.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_SEED, value_parser = parse_seed)]
    pub seed: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Repository to pull from.
    #[arg(long, value_name = "NAME")]
    pub repo: Repository,

    /// Tag (or digest) to pull; with --images N > 1, TAG-0 … TAG-(N-1) as `push` names them.
    #[arg(
        long,
        value_name = "REF",
        default_value = "latest",
        conflicts_with = "all_tags"
    )]
    pub tag: String,

    /// How many images to pull (see --tag).
    #[arg(long, value_name = "N", default_value = "1", value_parser = parse_count_u64)]
    pub images: u64,

    /// Pull every tag of the repository (listed with the paginated tags API).
    #[arg(long)]
    pub all_tags: bool,

    /// Blob downloads in flight at once.
    #[arg(long, value_name = "N", default_value = "4", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// Do not hash downloaded blobs (bodies are still read to the end).
    #[arg(long)]
    pub no_verify: bool,

    /// Distributed pull: also fetch blobs from this registry (repeatable or
    /// comma-separated), which must hold the same images. Manifests come from the first
    /// `--registry`; each blob from the endpoint `--route` picks, all in parallel.
    #[arg(long = "from", value_name = "URL", value_parser = parse_url, value_delimiter = ',')]
    pub from: Vec<Url>,

    /// Distributed pull: which endpoint serves each blob: `round-robin` (by layer
    /// position), `random`, `digest` (consistent hashing of the blob digest).
    #[arg(long, value_name = "RULE", default_value = "round-robin")]
    pub route: crate::route::RouteKind,

    #[command(flatten)]
    pub output: OutputArgs,
}

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
    #[arg(long, value_enum, default_value_t = Mode::Stress)]
    pub mode: Mode,

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
    #[arg(long, value_enum, default_value_t = ShardBy::Client)]
    pub shard_by: ShardBy,

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
    #[arg(long, value_enum, default_value_t = ManifestFormat::Oci)]
    pub manifest_format: ManifestFormat,

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

/// Several endpoints: which one carries each operation, and what happens when one fails.
/// Without effect with a single `--registry`.
#[derive(Debug, Clone, clap::Args)]
pub struct RouteArgs {
    /// How operations are spread over the endpoints: `round-robin`, `random` (from the
    /// seed), `client` (a trace client sticks to one node), `digest` (consistent hashing
    /// of the blob digest or manifest repo:reference; prewarm places objects the same way).
    #[arg(long, value_name = "RULE", default_value = "round-robin")]
    pub route: crate::route::RouteKind,

    /// `--route digest`: a read goes to one of the first R distinct ring successors of its
    /// object (prewarm writes to all R), a write to the first.
    #[arg(long, value_name = "R", default_value = "1", value_parser = parse_concurrency)]
    pub replicas: NonZeroUsize,

    /// Virtual nodes per endpoint on the consistent-hash ring.
    #[arg(long, value_name = "N", default_value = "4096", value_parser = parse_concurrency)]
    pub vnodes: NonZeroUsize,

    /// Mark an endpoint down after this many consecutive connection failures.
    #[arg(long, value_name = "N", default_value = "5", value_parser = clap::value_parser!(u32).range(1..))]
    pub endpoint_down_after: u32,

    /// Probe a down endpoint with `GET /v2/` this often; it is up again when it answers.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration)]
    pub probe_interval: Duration,

    /// While an endpoint is down, send its share to the next ring successor (the default).
    #[arg(long, overrides_with = "no_failover")]
    pub failover: bool,

    /// While an endpoint is down, count its share as failed (`endpoint_down`) instead.
    #[arg(long, overrides_with = "failover")]
    pub no_failover: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn push_flags_parse_into_types() {
        let cli = Cli::try_parse_from([
            "creb-rs",
            "push",
            "--registry",
            "http://127.0.0.1:5000/ignored/path",
            "--repo",
            "x/y",
            "--layers",
            "4",
            "--layer-size",
            "1MiB",
            "--chunk-size",
            "256KiB",
            "--concurrency",
            "8",
        ])
        .unwrap();
        let Command::Push(p) = cli.command else {
            panic!("not push")
        };
        assert_eq!(p.registry.registry[0].as_str(), "http://127.0.0.1:5000/");
        assert_eq!(p.layer_size.bytes(), 1 << 20);
        assert_eq!(p.chunk_size.unwrap().bytes(), 256 << 10);
        assert_eq!(p.concurrency.get(), 8);
        assert_eq!(p.seed, DEFAULT_SEED);
        assert_eq!(p.registry.http_client, crate::oci::net::HttpClient::Hyper);
        assert_eq!(p.registry.http1_read_buffer.bytes(), 16 << 10);
    }

    #[test]
    fn worker_threads_leave_half_the_cores_to_a_registry_on_loopback() {
        let workers = |args: &[&str], cores| {
            let mut argv = vec!["creb-rs"];
            argv.extend(args);
            Cli::try_parse_from(argv).unwrap().worker_threads(cores)
        };
        let pull = |registry: &'static str| ["pull", "--registry", registry, "--repo", "x/y"];
        let cases: &[(&[&str], usize, Option<usize>)] = &[
            (&pull("http://127.0.0.1:5000"), 2, Some(1)),
            (&pull("http://127.8.0.3:5000"), 8, Some(4)),
            (&pull("http://[::1]:5000"), 3, Some(1)),
            (&pull("http://localhost:5000"), 1, Some(1)),
            (&pull("http://Registry.LOCALHOST.:5000"), 4, Some(2)),
            // A remote registry: tokio's default, one worker per core.
            (&pull("http://10.0.0.1:5000"), 8, None),
            (&pull("https://registry.example"), 8, None),
            (&pull("http://localhost.example:5000"), 8, None),
            // Every endpoint counts, `--from` too.
            (
                &[
                    "replay",
                    "t.json",
                    "--registry",
                    "http://127.0.0.1:1,http://10.0.0.2:1",
                ],
                8,
                None,
            ),
            (
                &[
                    "pull",
                    "--registry",
                    "http://127.0.0.1:1",
                    "--repo",
                    "x/y",
                    "--from",
                    "http://10.0.0.2:1",
                ],
                8,
                None,
            ),
            (
                &[
                    "replay",
                    "t.json",
                    "--registry",
                    "http://127.0.0.1:1,http://127.0.0.2:1",
                ],
                8,
                Some(4),
            ),
            // Commands that send nothing, and an explicit --threads, which always wins.
            (&["merge", "a", "b", "--output-dir", "c"], 8, None),
            (
                &[
                    "--threads",
                    "3",
                    "pull",
                    "--registry",
                    "http://127.0.0.1:1",
                    "--repo",
                    "x/y",
                ],
                8,
                Some(3),
            ),
            (
                &["--threads", "2", "merge", "a", "b", "--output-dir", "c"],
                8,
                Some(2),
            ),
        ];
        for (args, cores, want) in cases {
            assert_eq!(workers(args, *cores), *want, "{args:?} on {cores} cores");
        }
    }

    #[test]
    fn transport_settings_reach_the_transport_config() {
        let cli = Cli::try_parse_from([
            "creb-rs",
            "pull",
            "--registry",
            "http://127.0.0.1:5000",
            "--repo",
            "x/y",
            "--http-client",
            "reqwest",
            "--http1-read-buffer",
            "1KiB",
        ])
        .unwrap();
        let Command::Pull(p) = cli.command else {
            panic!("not pull")
        };
        let config = crate::workload::RegistryConfig::try_from(&p.registry).unwrap();
        assert_eq!(
            config.transport.client,
            crate::oci::net::HttpClient::Reqwest
        );
        // Below hyper's minimum: raised to it rather than refused.
        assert_eq!(
            config.transport.read_buffer_max,
            crate::oci::net::MIN_READ_BUFFER
        );
    }

    #[test]
    fn conflicting_upload_modes_are_refused() {
        let err = Cli::try_parse_from([
            "creb-rs",
            "push",
            "--registry",
            "http://h",
            "--repo",
            "x",
            "--layers",
            "1",
            "--layer-size",
            "1",
            "--chunk-size",
            "1",
            "--single-post",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            vec![
                "creb-rs",
                "push",
                "--registry",
                "ftp://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "UPPER",
                "--layers",
                "1",
                "--layer-size",
                "1",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1XB",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1",
                "--concurrency",
                "0",
            ],
        ] {
            assert!(Cli::try_parse_from(&args).is_err(), "{args:?}");
        }
    }
}
