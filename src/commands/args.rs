//! The flag groups several commands share (registry and TLS, credentials, output and
//! thresholds, routing over endpoints), their value parsers, and the command line's names
//! for choices the layers below define (`--http-client`, `--manifest-format`, `--route`).
//! Doc comments here are the `--help` text.
//!
//! The flag names are a contract (`docs/cli.md`): scripts in CI and across hosts use them.
//! Values are parsed into types at this layer (sizes, durations, names); cross-field rules
//! that clap cannot express are checked when the flags become a validated configuration
//! (`TryFrom` in each command's module).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use url::Url;

use crate::content::layer::{Compression, LayerForm, DEFAULT_RATIO};
use crate::net::HttpClient;
use crate::oci::manifest::ManifestFormat;
use crate::results::thresholds::MaxErrors;
use crate::route::RouteKind;
use crate::units::{parse_count, parse_duration, ByteSize};

/// The parser of URL flags. clap quotes the value it refuses, so this one refuses in words
/// of its own: a password in the value is shown as `redacted`, never as given. A registry
/// URL (`--registry`, `--from`) is normalised to its base and must not carry credentials;
/// another URL (`--metrics-push`, `--registry-metrics`) may, and is shown redacted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UrlParser {
    /// A registry's URL: `https://` when no scheme is given, the API's base.
    pub(crate) registry: bool,
}

/// [`UrlParser`] for a registry.
pub(crate) const REGISTRY_URL: UrlParser = UrlParser { registry: true };

/// [`UrlParser`] for any other endpoint.
pub(crate) const ANY_URL: UrlParser = UrlParser { registry: false };

impl UrlParser {
    fn parse_text(self, s: &str) -> Result<Url, String> {
        let with_scheme = if s.contains("://") || !self.registry {
            s.to_owned()
        } else {
            format!("https://{s}")
        };
        let url = Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
        if self.registry {
            crate::oci::registry_base(&url)
        } else {
            Ok(url)
        }
    }
}

impl clap::builder::TypedValueParser for UrlParser {
    type Value = Url;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Url, clap::Error> {
        let name = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "URL".to_owned(), |l| format!("--{l}"));
        let fail = |why: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for {name}: {why}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| fail("not UTF-8".to_owned()))?;
        self.parse_text(text).map_err(|why| {
            let shown = crate::oci::redact_userinfo(text);
            fail(format!("'{shown}': {}", crate::oci::redact_userinfo(&why)))
        })
    }
}

pub(crate) fn parse_count_u64(s: &str) -> Result<u64, String> {
    parse_count(s)
}

pub(crate) fn parse_concurrency(s: &str) -> Result<NonZeroUsize, String> {
    let n = parse_count(s)?;
    usize::try_from(n)
        .ok()
        .and_then(NonZeroUsize::new)
        .ok_or_else(|| format!("'{s}' must be a whole number of at least 1"))
}

pub(crate) fn parse_seed(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|e| format!("'{s}': {e}")),
        None => t.parse().map_err(|e| format!("'{s}': {e}")),
    }
}

pub(crate) fn parse_speed(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    // A millionth to a million times the trace's pace: beyond, a step or a gap between
    // records is no longer a duration a clock can hold.
    if (1e-6..=1e6).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "'{s}' must be a speed factor from 0.000001 to 1000000 (1 is the trace's pace)"
        ))
    }
}

/// `--size-scale F`: 0 < F ≤ 1.
pub(crate) fn parse_size_scale(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    crate::plan::catalog::SizeScale::new(v, None).map(|_| v)
}

/// A wall-clock instant: RFC 3339 (`2026-11-21T10:00:00Z`) or Unix seconds (`1795600000.5`).
pub(crate) fn parse_start_at(s: &str) -> Result<std::time::SystemTime, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(std::time::UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(t)
        .map_err(|e| format!("'{s}' is not RFC 3339 or Unix seconds ({e})"))
}

/// Where the registry is and how to reach it.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Registry & TLS")]
pub struct RegistryArgs {
    /// Registry URL: `http://host:port` or `https://host`.
    ///
    /// `http://` speaks plain HTTP, `https://` (the default when no scheme is given) speaks
    /// TLS. `replay` takes several endpoints of one distributed
    /// registry (repeat the flag or separate them with commas), all with the same
    /// credentials and TLS settings; `--route` picks one per operation.
    #[arg(
        long,
        value_name = "URL",
        value_parser = REGISTRY_URL,
        env = "CREB_REGISTRY",
        value_delimiter = ',',
        required = true
    )]
    pub registry: Vec<Url>,

    /// Skip TLS certificate verification (for registries with self-signed certificates).
    #[arg(hide_short_help = true, long)]
    pub insecure: bool,

    /// HTTP client library: `hyper` (bounded per-connection buffers, less CPU per request)
    /// or `reqwest`. Both follow the same rules (no automatic redirects, no proxy, the same
    /// timeouts and error classes), so results compare across them.
    #[arg(hide_short_help = true, long, value_enum, value_name = "CLIENT", default_value_t = HttpClientArg::Hyper)]
    pub http_client: HttpClientArg,

    /// Largest read buffer of one HTTP/1 connection (hyper client; at least 8KiB). Bodies
    /// are read through it; a larger buffer costs fewer reads per GiB, a smaller one less
    /// memory per pooled connection. Default: 4MiB shared by the operations in flight,
    /// between 16KiB (256 or more) and 256KiB (16 or fewer).
    #[arg(hide_short_help = true, long, value_name = "SIZE")]
    pub http1_read_buffer: Option<ByteSize>,

    /// Trust the PEM certificates in FILE in addition to the system roots (repeatable).
    #[arg(hide_short_help = true, long, value_name = "FILE")]
    pub ca_cert: Vec<PathBuf>,

    /// Give up on connecting after this long.
    #[arg(hide_short_help = true, long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Give up waiting for response headers this long after the request was sent.
    #[arg(hide_short_help = true, long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Give up on a body (upload or download) that makes no progress for this long.
    #[arg(hide_short_help = true, long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub body_idle_timeout: Duration,

    /// The longest one HTTP exchange may take, from sending the request to the last byte of
    /// the answer, however slowly its bytes trickle in (a `timeout` after that).
    #[arg(hide_short_help = true, long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub request_deadline: Duration,

    /// Retry failed requests of these classes: 429, 5xx, timeout, connection.
    ///
    /// A comma-separated list. Off by default: a benchmark reports failures rather than hiding them; every retry is
    /// counted (events.retry). PATCHes and the PUT that closes an upload are never retried.
    #[arg(hide_short_help = true, long, value_name = "LIST", value_parser = crate::client::retry::parse_retry_on)]
    pub retry: Option<std::collections::BTreeSet<crate::client::retry::RetryOn>>,

    /// Retries per request at most (with --retry).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "N",
        default_value = "3",
        requires = "retry"
    )]
    pub max_retries: u32,

    /// First wait between retries; doubles each time, with jitter. A 429's Retry-After wins.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "100ms", value_parser = parse_duration, requires = "retry")]
    pub backoff: Duration,

    /// The longest wait before a retry, a registry's Retry-After included (a longer one is
    /// cut to this).
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "30s", value_parser = parse_duration, requires = "retry")]
    pub max_backoff: Duration,

    #[command(flatten)]
    pub auth: AuthArgs,
}

/// The async runtime of the commands that send requests.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Runtime")]
pub struct RuntimeArgs {
    /// Worker threads of the async runtime that sends the requests, and as many event loops
    /// for a stress-mode replay's manifest GETs. Default: one per core the process may use;
    /// half of them (at least one) when every registry endpoint is on loopback, since the
    /// registry under test then shares the machine.
    #[arg(hide_short_help = true, long, env = "CREB_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

/// How a load command stops: every command the same way (docs/cli.md, "Stopping").
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Stopping")]
pub struct StopArgs {
    /// On Ctrl-C or SIGTERM, how long in-flight operations may take to finish.
    ///
    /// Nothing new starts after the first signal; what is still in flight after D is
    /// cancelled and counted, and the results are written. A second signal exits at once.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// End the run after D of wall-clock time, as a stop does: nothing new starts, what is
    /// in flight gets --grace, the results are written (not marked interrupted).
    ///
    /// It bounds how long the command runs, whatever the registry does; replay's
    /// --limit-duration instead selects the first D of the trace's records.
    #[arg(hide_short_help = true, long, value_name = "D", value_parser = parse_duration)]
    pub max_run_time: Option<Duration>,
}

impl StopArgs {
    /// Arms `--max-run-time` on `shutdown`, from now.
    pub fn arm(&self, shutdown: &crate::shutdown::Shutdown) {
        if let Some(limit) = self.max_run_time {
            shutdown.limit_run_time(limit);
        }
    }
}

/// Credentials. Without any of these, the docker config is consulted, then anonymous.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Authentication")]
pub struct AuthArgs {
    /// User name (Basic auth, or Basic at the token server).
    ///
    /// The password comes from --password-stdin, --password-cmd, or the CREB_PASSWORD environment variable; it is
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

    /// Run CMD with `sh -c` once and use what it prints as the password.
    ///
    /// E.g. `aws ecr get-login-password`.
    #[arg(
        hide_short_help = true,
        long,
        value_name = "CMD",
        requires = "username"
    )]
    pub password_cmd: Option<String>,

    /// Docker config directory holding config.json (default: $DOCKER_CONFIG or ~/.docker).
    #[arg(hide_short_help = true, long, value_name = "DIR")]
    pub docker_config: Option<PathBuf>,

    /// Use no credentials, even if the docker config has some.
    #[arg(hide_short_help = true, long, conflicts_with_all = ["username", "password_stdin", "password_cmd", "docker_config"])]
    pub anonymous: bool,

    /// Limit for --password-cmd and docker credential helpers.
    #[arg(hide_short_help = true, long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub credential_timeout: Duration,
}

/// Where results go.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Output & thresholds")]
pub struct OutputArgs {
    /// Write the result directory (summary.json, ...) here.
    ///
    /// Created if missing; checked for writability before the run starts. An earlier result
    /// there is replaced whole (its files removed first, other files left alone).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Replace files that have a result's names in --output-dir though creb-rs did not
    /// write them (refused without it).
    #[arg(hide_short_help = true, long, requires = "output_dir")]
    pub force: bool,

    /// Print the summary JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,

    /// Exit 3 when EXPR holds for the finished run (repeatable), e.g. 'p99(blob_get) > 2s'.
    ///
    /// More: 'error_rate > 1%', 'rps < 100', 'p99(manifest_get).lag > 10ms',
    /// 'errors(http_429) > 0'. A latency without a unit is in milliseconds (in
    /// 'p99(blob_get) > 2' the limit is 2 ms); a rate is a share from 0% to 100%. Every
    /// verdict is in summary.json (`thresholds`).
    #[arg(long, value_name = "EXPR")]
    pub fail_if: Vec<String>,

    /// A result directory of the same workload that --fail-if compares with: e.g.
    /// 'p99(blob_get) > baseline * 1.10', which holds only beyond both runs' 95% intervals.
    #[arg(hide_short_help = true, long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,

    /// Failed operations tolerated before the exit status is 1: a count (5) or a share of
    /// the operations (1%); 0 by default. Recorded in summary.json (`max_errors`). In a
    /// capacity search, the failures a step may have and still be sustained (1% by default).
    #[arg(hide_short_help = true, long, value_name = "N|P%")]
    pub max_errors: Option<MaxErrors>,

    /// Length of the intervals of histograms.hlog and timeline.csv.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,

    /// Leave out of every number the intervals that start in the first D of the run (a
    /// warm-up the steady-state check reports; docs/measurement.md). Rates are over the rest.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "0s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Serve the run's live metrics for Prometheus at http://ADDR/metrics while it goes
    /// (e.g. 127.0.0.1:9464; docs/metrics.md lists them).
    #[arg(hide_short_help = true, long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// With --metrics-listen: keep serving this long after the run, so that a last scrape
    /// sees the final counts.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "0s", value_parser = parse_duration, requires = "metrics_listen")]
    pub metrics_linger: Duration,

    /// The registry's own Prometheus endpoint (repeatable), read before, during and after.
    ///
    /// What its counters grew by goes to registry-metrics.json, its request count and mean
    /// duration set beside creb-rs's (docs/metrics.md).
    #[arg(hide_short_help = true, long, value_name = "URL", value_parser = ANY_URL)]
    pub registry_metrics: Vec<Url>,

    /// With --registry-metrics: read the registry's endpoints this often during the run too
    /// (their per-interval counts go to registry-metrics.json).
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "10s", value_parser = parse_interval, requires = "registry_metrics")]
    pub registry_metrics_every: Duration,

    /// Push the live metrics to this Prometheus Pushgateway at the end of every interval
    /// and of the run (group job="creb-rs", shard=N unless the URL names one).
    #[arg(hide_short_help = true, long, value_name = "URL", value_parser = ANY_URL)]
    pub metrics_push: Option<Url>,

    /// Under `creb-rs run`: the endpoint the cells feed in turn.
    #[arg(skip)]
    pub live: Option<crate::metrics::live::SharedLive>,

    /// Also write requests.csv: one row per request, streamed (large for long runs).
    #[arg(hide_short_help = true, long, requires = "output_dir")]
    pub record_requests: bool,

    /// Count and time every operation also by the value its answer gave this response
    /// header (e.g. `X-Cache-Status`, `X-Cache`, `CF-Cache-Status`, `X-Served-By`): per
    /// operation and value in summary.json, the reports and the live metrics. At most 16
    /// distinct values; later ones are counted as `(other)`, no header as `(none)`.
    #[arg(hide_short_help = true, long, value_name = "NAME", value_parser = parse_header_name)]
    pub split_by_header: Option<http::HeaderName>,
}

impl From<&OutputArgs> for crate::session::OutputOptions {
    fn from(a: &OutputArgs) -> Self {
        crate::session::OutputOptions {
            output_dir: a.output_dir.clone(),
            force: a.force,
            json: a.json,
            quiet: a.quiet,
            fail_if: a.fail_if.clone(),
            baseline: a.baseline.clone(),
            max_errors: a.max_errors.unwrap_or_default(),
            interval: a.interval,
            warmup: a.warmup,
            metrics_listen: a.metrics_listen,
            metrics_linger: a.metrics_linger,
            registry_metrics: a.registry_metrics.clone(),
            registry_metrics_every: a.registry_metrics_every,
            metrics_push: a.metrics_push.clone(),
            live: a.live.clone(),
            record_requests: a.record_requests,
            split_by_header: a.split_by_header.clone(),
        }
    }
}

fn parse_header_name(s: &str) -> Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(s.trim().as_bytes())
        .map_err(|_| format!("'{s}' is not a header name"))
}

pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("'{s}' is shorter than the 10 ms minimum"));
    }
    Ok(d)
}

/// Several endpoints: which one carries each operation, and what happens when one fails.
/// Without effect with a single `--registry`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Several endpoints")]
pub struct RouteArgs {
    /// How operations are spread over the endpoints.
    ///
    /// `round-robin`, `random` (from the seed), `client` (a trace client sticks to one node), `digest` (consistent hashing
    /// of the blob digest or manifest repo:reference; prewarm places objects the same way).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "RULE",
        default_value = "round-robin"
    )]
    pub route: RouteKindArg,

    /// `--route digest`: a read goes to one of the first R distinct ring successors of its
    /// object (prewarm writes to all R), a write to the first.
    #[arg(hide_short_help = true, long, value_name = "R", default_value = "1", value_parser = parse_concurrency)]
    pub replicas: NonZeroUsize,

    /// Virtual nodes per endpoint on the consistent-hash ring.
    #[arg(hide_short_help = true, long, value_name = "N", default_value = "4096", value_parser = parse_concurrency)]
    pub vnodes: NonZeroUsize,

    /// Mark an endpoint down after this many consecutive connection failures.
    #[arg(hide_short_help = true, long, value_name = "N", default_value = "5", value_parser = clap::value_parser!(u32).range(1..))]
    pub endpoint_down_after: u32,

    /// Probe a down endpoint with `GET /v2/` this often; it is up again when it answers.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "1s", value_parser = parse_duration)]
    pub probe_interval: Duration,

    /// While an endpoint is down, send its share to the next ring successor (the default).
    #[arg(hide_short_help = true, long, overrides_with = "no_failover")]
    pub failover: bool,

    /// While an endpoint is down, count its share as failed (`endpoint_down`) instead.
    #[arg(hide_short_help = true, long, overrides_with = "failover")]
    pub no_failover: bool,
}

/// `--http-client`: the names of [`HttpClient`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HttpClientArg {
    /// hyper directly: `http://` on connections each request drives in its own task,
    /// `https://` through hyper-util's client; bounded read buffers, less work per request.
    Hyper,
    /// reqwest (on the same hyper): the widely used client, for comparison.
    Reqwest,
}

impl From<HttpClientArg> for HttpClient {
    fn from(a: HttpClientArg) -> Self {
        match a {
            HttpClientArg::Hyper => HttpClient::Hyper,
            HttpClientArg::Reqwest => HttpClient::Reqwest,
        }
    }
}

/// `--manifest-format`: the names of [`ManifestFormat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestFormatArg {
    /// OCI image manifest (accepted by every current registry).
    Oci,
    /// Docker image manifest v2 schema 2.
    Docker,
}

impl From<ManifestFormatArg> for ManifestFormat {
    fn from(a: ManifestFormatArg) -> Self {
        match a {
            ManifestFormatArg::Oci => ManifestFormat::Oci,
            ManifestFormatArg::Docker => ManifestFormat::Docker,
        }
    }
}

/// How generated layers are made (`--compression`, `--compress-ratio`): one group for
/// every command that generates layers.
#[derive(Debug, Clone, Args)]
pub struct LayerArgs {
    /// Layer compression: gzip, zstd, none.
    ///
    /// Each generated layer is a tar of a file tree, compressed so (docs/images.md).
    #[arg(help_heading = "Workload", long, value_enum, value_name = "KIND", default_value_t = CompressionArg::Gzip, hide_possible_values = true)]
    pub compression: CompressionArg,

    /// Compressed ÷ uncompressed size of generated layers: a layer of S bytes unpacks to
    /// S/R bytes of tar (default 0.35, what gzip makes of a Debian system's files).
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "R", value_parser = parse_ratio)]
    pub compress_ratio: Option<f64>,
}

impl LayerArgs {
    /// The layers' form; zstd with the docker manifest format is refused (docker has no
    /// zstd layer type).
    pub fn form(&self, format: ManifestFormat) -> anyhow::Result<LayerForm> {
        let compression = Compression::from(self.compression);
        if compression == Compression::Zstd && format == ManifestFormat::Docker {
            anyhow::bail!(
                "--compression zstd needs --manifest-format oci: the docker format has no zstd layer type"
            );
        }
        LayerForm::new(compression, self.compress_ratio.unwrap_or(DEFAULT_RATIO))
            .map_err(|e| anyhow::anyhow!("--compress-ratio: {e}"))
    }
}

/// `--compress-ratio`: a number in 0.01..=1.
fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number (compressed ÷ uncompressed, e.g. 0.35)"))?;
    if !(0.01..=1.0).contains(&r) {
        return Err(format!(
            "{s} is outside 0.01..1 (compressed ÷ uncompressed, e.g. 0.35)"
        ));
    }
    Ok(r)
}

/// `--compression`: the names of [`Compression`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    Gzip,
    Zstd,
    None,
}

impl From<CompressionArg> for Compression {
    fn from(a: CompressionArg) -> Self {
        match a {
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Zstd => Compression::Zstd,
            CompressionArg::None => Compression::None,
        }
    }
}

/// `--route`: the names of [`RouteKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RouteKindArg {
    /// Operation k goes to endpoint k mod N.
    RoundRobin,
    /// A pseudo-random endpoint per operation, drawn from the seed.
    Random,
    /// By trace client: a client sticks to one node (consistent hashing).
    Client,
    /// By object: consistent hashing of the blob digest or manifest `repo:reference`.
    Digest,
}

impl From<RouteKindArg> for RouteKind {
    fn from(a: RouteKindArg) -> Self {
        match a {
            RouteKindArg::RoundRobin => RouteKind::RoundRobin,
            RouteKindArg::Random => RouteKind::Random,
            RouteKindArg::Client => RouteKind::Client,
            RouteKindArg::Digest => RouteKind::Digest,
        }
    }
}

/// `--verify`: how a downloaded blob is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyArg {
    /// Content creb-rs generated is compared with the same bytes generated in step with the
    /// body (memory speed); other content is hashed.
    Compare,
    /// Every body is hashed with SHA-256 and compared with its digest.
    Sha256,
    /// Nothing is compared: bodies are still read to the end and their sizes checked.
    None,
}

/// `--replica` and how replicas are watched: one group for push and replay.
#[derive(Args, Debug, Clone)]
pub struct ReplicaArgs {
    /// Watch this replica (repeatable): the time until it serves each push.
    ///
    /// After each image push is answered, the replica is asked for the manifest by digest
    /// (the same content) and then every blob it references (HEAD 200); the time from the
    /// push's answer to the last of them is the image's `replication` at that replica, in
    /// `operations` and the replica's `endpoints` entry. Its credentials: the Docker
    /// config's for its host, else the registry's; its TLS settings: the registry's. The
    /// watch's requests are not the workload's: they are counted as the events
    /// `replica_request` and `replica_request_failed` (docs/replication.md).
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "URL",
        value_parser = REGISTRY_URL
    )]
    pub replica: Vec<Url>,

    /// With --replica: between two looks at a replica for an image (doubled after each
    /// 429, up to 32 times).
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "D",
        default_value = "100ms",
        value_parser = parse_duration,
        requires = "replica"
    )]
    pub replica_poll: Duration,

    /// With --replica: how long a replica may take to serve an image before it counts as
    /// `replication_timeout`.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "D",
        default_value = "5m",
        value_parser = parse_duration,
        requires = "replica"
    )]
    pub replica_timeout: Duration,

    /// With --replica: images watched at once at most; an image pushed while that many are
    /// watched is not (the event `replica_watch_skipped`, and a warning).
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "N",
        default_value = "1000",
        value_parser = parse_concurrency,
        requires = "replica"
    )]
    pub replica_max_watches: NonZeroUsize,
}

impl ReplicaArgs {
    /// The replicas asked for, and how to watch them; `None` without `--replica`.
    pub fn spec(&self) -> anyhow::Result<Option<crate::exec::replicate::ReplicaSpec>> {
        if self.replica.is_empty() {
            return Ok(None);
        }
        if self.replica_poll.is_zero() {
            anyhow::bail!("--replica-poll must be longer than 0");
        }
        for (i, url) in self.replica.iter().enumerate() {
            if self.replica[..i].contains(url) {
                anyhow::bail!("--replica {url} is given twice");
            }
        }
        Ok(Some(crate::exec::replicate::ReplicaSpec {
            urls: self.replica.clone(),
            work: crate::exec::replicate::ReplicaWork {
                poll: self.replica_poll,
                timeout: self.replica_timeout,
                max_watches: self.replica_max_watches.get(),
            },
        }))
    }
}

/// `--unpack` and its directory: one group for pull and replay.
#[derive(Args, Debug, Clone, Default)]
pub struct UnpackArgs {
    /// Unpack each image as a runtime does (`layer_unpack`, `image_ready`).
    ///
    /// Every layer decompressed, its tar walked and its diff_id checked, layers applied in
    /// order: `image_ready` is the time until the image could run. Without --unpack-dir nothing is written: every entry is read and discarded. Layers
    /// are unpacked on as many threads as there are cores. A pull unpacks a layer while it
    /// downloads (a layer waiting for its turn holds its download back); a replay unpacks
    /// each layer of the trace's image pulls once its read ended and was verified, as a
    /// runtime unpacks from its content store, so no request's latency holds an unpack
    /// (docs/unpack.md).
    #[arg(help_heading = "Workload", long)]
    pub unpack: bool,

    /// With --unpack: write the files under `DIR/<image>/`, removed when the image is ready
    /// unless --keep-unpacked.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "DIR",
        requires = "unpack"
    )]
    pub unpack_dir: Option<std::path::PathBuf>,

    /// With --unpack-dir: leave the unpacked files.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        requires = "unpack_dir"
    )]
    pub keep_unpacked: bool,
}

impl UnpackArgs {
    /// What `--unpack` asks for, if it was given: on as many threads as there are cores.
    pub fn work(&self) -> Option<crate::exec::unpack::UnpackWork> {
        self.unpack.then(|| crate::exec::unpack::UnpackWork {
            dir: self.unpack_dir.clone(),
            keep: self.keep_unpacked,
            limits: crate::unpack::Limits::default(),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }
}

/// `--verify` and the older `--no-verify`: one group for pull and replay, whose defaults
/// differ (a replay reads content it generated, a pull images it did not).
#[derive(Args, Debug, Clone, Default)]
pub struct VerifyArgs {
    /// How a blob read is checked: compare, sha256 or none.
    ///
    /// `compare`, replay's default: the body against the content creb-rs generated for it,
    /// regenerated in step (memory speed); pick it for load, where creb-rs's own CPU must
    /// stay far below the registry's (content creb-rs did not generate is hashed). `sha256`,
    /// pull's default: hashed and compared with its digest, as a client would; pick it to
    /// check a registry end to end. `none`: read to the end, its size checked; pick it only
    /// to find creb-rs's own ceiling. `compare` and `sha256` catch a flipped byte, a short
    /// or long body and another blob's body; `none` only wrong sizes.
    #[arg(
        help_heading = "Workload",
        long,
        value_enum,
        value_name = "MODE",
        hide_possible_values = true
    )]
    pub verify: Option<VerifyArg>,

    /// The same as `--verify none`.
    #[arg(
        help_heading = "Workload",
        hide = true,
        long,
        conflicts_with = "verify"
    )]
    pub no_verify: bool,
}

impl VerifyArgs {
    /// The mode asked for: `--verify`'s, `none` with `--no-verify`, or else `default`.
    pub fn mode(&self, default: VerifyArg) -> VerifyArg {
        if self.no_verify {
            VerifyArg::None
        } else {
            self.verify.unwrap_or(default)
        }
    }
}

impl From<VerifyArg> for crate::client::Verify {
    fn from(a: VerifyArg) -> Self {
        match a {
            VerifyArg::Compare => crate::client::Verify::Compare,
            VerifyArg::Sha256 => crate::client::Verify::Sha256,
            VerifyArg::None => crate::client::Verify::None,
        }
    }
}
