//! `creb-rs trace ...`: offline commands on IBM-format traces — characterize (`stats`), cut
//! down (`sample`), generate calibrated synthetic ones (`synth`) and check (`validate`).
//!
//! Owns the flags of those commands (clap derive; the doc comments are the help), their
//! validation into typed settings, and [`run`], which does the (blocking, file-bound) work on
//! tokio's blocking pool. The work itself lives in [`crate::analysis::trace`] so other code
//! can call it without the CLI, and in [`crate::trace::synth::ProfileGenerator`] for `synth`.
//!
//! Outputs: reports on stdout (`stats` tables or JSON, `validate`'s one-line OK), what was
//! done and problems on stderr. Exit statuses: 0 done (`validate`: the trace is valid);
//! 2 usage, configuration or I/O error, and `validate` finding a problem.
//! `docs/traces.md` documents the commands with real output.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};

use super::args::parse_seed;
use crate::analysis::trace::import::{
    import, sized_objects, Anonymizer, ImportOptions, LearnedSizes, LogFormat,
};
use crate::analysis::trace::{
    compute_stats, sample_records, validate_trace, Records, SampleMethod, StatsOptions,
};
use crate::plan::catalog::SizeScale;
use crate::plan::footprint::Footprint;
use crate::report::analysis::import::render as render_import;
use crate::report::analysis::trace_files::{
    problems_line, valid_line, Sampled, Synthesized, Validated,
};
use crate::report::analysis::trace_stats::render_text;
use crate::session::status::ExitStatus;
use crate::shutdown::Shutdown;
use crate::trace::synth::{format_ms, Profile, ProfileGenerator, ProfileOptions, SynthLength};
use crate::trace::write::write_file_iter;
use crate::trace::TraceInput;
use crate::units::{grouped, parse_count, parse_duration};

/// Offline commands on IBM registry traces (FAST'18 format).
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Characterize a trace like FAST'18: request mix, pull/push ratio, sizes, rates,
    /// popularity, manifest→layer sessions, concurrency, inter-arrival times.
    Stats(StatsArgs),
    /// Cut a smaller trace out of a larger one (same format, records copied verbatim).
    Sample(SampleArgs),
    /// Generate a synthetic trace calibrated to one IBM data center's characterization.
    Synth(SynthArgs),
    /// Check every record; name the file, record number and field of each problem.
    Validate(ValidateArgs),
    /// Turn a registry's access logs (distribution JSON, nginx) into a trace in the IBM
    /// format, names anonymized, for `replay`, `trace stats`, `simulate` and `cost`.
    Import(ImportArgs),
}

/// `trace stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Trace files or directories (JSON array or JSON lines; plain, gzip or zstd).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,

    /// Print JSON (stable field names) instead of tables.
    #[arg(long)]
    pub json: bool,

    /// Entries in each popularity list.
    #[arg(long, value_name = "N", default_value = "10", value_parser = parse_top)]
    pub top: usize,

    /// A manifest GET counts as followed by a layer GET from the same client and
    /// repository within this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub session_window: Duration,

    /// Also say what a replay of the trace needs: the registry storage its prewarm and
    /// uploads take and the bytes its run moves, at --size-scale and --max-object-size.
    #[arg(long)]
    pub capacity: bool,

    /// With --capacity: sizes multiplied by F (0 < F ≤ 1), as `replay --size-scale`.
    #[arg(long, value_name = "F", value_parser = super::args::parse_size_scale, requires = "capacity")]
    pub size_scale: Option<f64>,

    /// With --capacity: sizes capped at SIZE, as `replay --max-object-size`.
    #[arg(long, value_name = "SIZE", requires = "capacity")]
    pub max_object_size: Option<crate::units::ByteSize>,
}

/// How `trace sample` chooses records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SampleMethodArg {
    /// The first --requests records.
    FirstN,
    /// The records within --duration of the first.
    FirstDuration,
    /// The records from --from (inclusive) to --to (exclusive).
    Window,
    /// Every record of a --fraction of the clients, chosen by hashing with --seed.
    Clients,
    /// Every record of a --fraction of the repositories, chosen by hashing with --seed.
    Repos,
    /// CReB W1: a UTC day whose requests, ingress and egress are each within 10% of the
    /// daily mean; with --target-requests, that many records from its middle.
    TypicalDay,
    /// CReB W2: the first --window whose per-minute request rate has p5 and p95 within 50%
    /// of its median.
    StableWindow,
}

/// `trace sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Trace files or directories.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,

    /// Where to write the sample (a JSON array; gzip if the name ends in `.gz`).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,

    /// Replace an existing file at the output path, a trace included: creb-rs replaces no
    /// trace without it (a trace cannot be made again; an empty file can go). One of
    /// the inputs is never replaced.
    #[arg(long)]
    pub force: bool,

    /// How to choose records.
    #[arg(long, value_enum)]
    pub method: SampleMethodArg,

    /// Of what --method selects, write only the reads (GET and HEAD): a trace a read-only
    /// registry (a pull-through cache) replays whole. first-n counts reads.
    #[arg(long)]
    pub reads_only: bool,

    /// first-n: how many records.
    #[arg(long, value_name = "N", value_parser = parse_count,
          required_if_eq("method", "first-n"))]
    pub requests: Option<u64>,

    /// first-duration: how long after the first record.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          required_if_eq("method", "first-duration"))]
    pub duration: Option<Duration>,

    /// window: the first instant kept, RFC 3339 (`2017-06-20T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = parse_time,
          required_if_eq("method", "window"))]
    pub from: Option<i64>,

    /// window: the first instant no longer kept, RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = parse_time,
          required_if_eq("method", "window"))]
    pub to: Option<i64>,

    /// clients, repos: the share kept, in (0, 1].
    #[arg(long, value_name = "F", value_parser = parse_fraction,
          required_if_eq_any([("method", "clients"), ("method", "repos")]))]
    pub fraction: Option<f64>,

    /// clients, repos: the hash seed (decimal or 0x hex).
    #[arg(long, value_name = "SEED", value_parser = parse_seed)]
    pub seed: Option<u64>,

    /// typical-day: keep only this many records from the middle of the day.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub target_requests: Option<u64>,

    /// stable-window: the window length, rounded up to whole minutes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          required_if_eq("method", "stable-window"))]
    pub window: Option<Duration>,

    /// Print what was written as JSON on stdout instead of a line on stderr.
    #[arg(long)]
    pub json: bool,
}

impl TryFrom<&SampleArgs> for SampleMethod {
    type Error = anyhow::Error;

    /// The method with its parameters; a flag that the method does not use is an error
    /// rather than silently ignored.
    fn try_from(a: &SampleArgs) -> anyhow::Result<SampleMethod> {
        use SampleMethodArg as M;
        let used: &[(&str, bool, &[M])] = &[
            ("--requests", a.requests.is_some(), &[M::FirstN]),
            ("--duration", a.duration.is_some(), &[M::FirstDuration]),
            ("--from", a.from.is_some(), &[M::Window]),
            ("--to", a.to.is_some(), &[M::Window]),
            ("--fraction", a.fraction.is_some(), &[M::Clients, M::Repos]),
            ("--seed", a.seed.is_some(), &[M::Clients, M::Repos]),
            (
                "--target-requests",
                a.target_requests.is_some(),
                &[M::TypicalDay],
            ),
            ("--window", a.window.is_some(), &[M::StableWindow]),
        ];
        for (flag, given, methods) in used {
            if *given && !methods.contains(&a.method) {
                let names: Vec<String> = methods
                    .iter()
                    .filter_map(|m| m.to_possible_value().map(|v| v.get_name().to_owned()))
                    .collect();
                anyhow::bail!("{flag} applies to --method {} only", names.join(" or "));
            }
        }
        let missing = |flag: &str| anyhow::anyhow!("--method needs {flag}");
        let seed = a.seed.unwrap_or(crate::content::DEFAULT_SEED);
        Ok(match a.method {
            M::FirstN => SampleMethod::FirstN {
                requests: a.requests.ok_or_else(|| missing("--requests"))?,
            },
            M::FirstDuration => SampleMethod::FirstDuration {
                duration: a.duration.ok_or_else(|| missing("--duration"))?,
            },
            M::Window => SampleMethod::Window {
                from_ms: a.from.ok_or_else(|| missing("--from"))?,
                to_ms: a.to.ok_or_else(|| missing("--to"))?,
            },
            M::Clients => SampleMethod::Clients {
                fraction: a.fraction.ok_or_else(|| missing("--fraction"))?,
                seed,
            },
            M::Repos => SampleMethod::Repos {
                fraction: a.fraction.ok_or_else(|| missing("--fraction"))?,
                seed,
            },
            M::TypicalDay => SampleMethod::TypicalDay {
                target_requests: a.target_requests,
            },
            M::StableWindow => SampleMethod::StableWindow {
                window: a.window.ok_or_else(|| missing("--window"))?,
            },
        })
    }
}

/// `trace synth`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("length").required(true).args(["requests", "duration"])))]
pub struct SynthArgs {
    /// Where to write the trace (a JSON array; gzip if the name ends in `.gz`).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,

    /// Replace an existing file at the output path, a trace included: creb-rs replaces no
    /// trace without it (a trace cannot be made again; an empty file can go). One of
    /// the inputs is never replaced.
    #[arg(long)]
    pub force: bool,

    /// Generate exactly this many records (`1M` works).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub requests: Option<u64>,

    /// Generate every record within this long of the start (the rate follows the time of
    /// day, so spans of hours show the diurnal swing).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Which registry's characterization to follow.
    #[arg(long, value_enum, default_value_t = ProfileArg::Dal)]
    pub profile: ProfileArg,

    /// Random seed (decimal or 0x hex): the same seed gives the same trace.
    #[arg(long, value_name = "SEED", default_value = "1", value_parser = parse_seed)]
    pub seed: u64,

    /// Trace start, RFC 3339.
    #[arg(long, value_name = "TIME", default_value = "2017-06-20T00:00:00Z", value_parser = parse_time)]
    pub start: i64,

    /// Cap every blob at SIZE (larger draws become SIZE), so that replaying the trace
    /// fits a small test registry.
    #[arg(long, value_name = "SIZE")]
    pub max_object_size: Option<crate::units::ByteSize>,

    /// Print what was written as JSON on stdout instead of a line on stderr.
    #[arg(long)]
    pub json: bool,
}

/// `--profile`: the names of [`Profile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// Dallas production: the largest, mature registry (~93% pulls, least layer skew).
    Dal,
    /// London production: mature, half of the manifests > 10 KB (old schema).
    Lon,
    /// Frankfurt production: mature.
    Fra,
    /// Sydney production: young (~78% pulls), most skewed layer popularity.
    Syd,
    /// Development registry: push-heavy (~70% pulls).
    Dev,
}

impl From<ProfileArg> for Profile {
    fn from(a: ProfileArg) -> Self {
        match a {
            ProfileArg::Dal => Profile::Dal,
            ProfileArg::Lon => Profile::Lon,
            ProfileArg::Fra => Profile::Fra,
            ProfileArg::Syd => Profile::Syd,
            ProfileArg::Dev => Profile::Dev,
        }
    }
}

/// `trace validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Trace files or directories.
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,

    /// Report every invalid record instead of stopping at the first problem.
    #[arg(long)]
    pub all: bool,

    /// Print the verdict as JSON on stdout (problems included) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `trace import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Log files, in time order (plain, .gz or .zst).
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,

    /// The log layout: `distribution` (`log.formatter: json`), `nginx` (`combined`, then
    /// `$request_time $upstream_response_time $msec $content_length`), `nginx-json`, `zot`.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: LogFormatArg,

    /// Where to write the trace (a JSON array; gzip if the name ends in `.gz`).
    #[arg(short, long, value_name = "FILE")]
    pub out: PathBuf,

    /// Replace an existing file at the output path, a trace included: creb-rs replaces no
    /// trace without it (a trace cannot be made again; an empty file can go). One of
    /// the inputs is never replaced.
    #[arg(long)]
    pub force: bool,

    /// The anonymization key (its bytes, at least 16): the same key gives the same names,
    /// so traces imported on several days line up. Default: a random key, never written.
    #[arg(long, value_name = "FILE", conflicts_with = "no_anonymize")]
    pub anonymize_key_file: Option<PathBuf>,

    /// Keep repository names, tags, digests and client addresses (for replaying one's own
    /// registry privately).
    #[arg(long)]
    pub no_anonymize: bool,

    /// Print what was imported, skipped and why, and the time span (always on stderr in
    /// one line otherwise).
    #[arg(long)]
    pub stats: bool,

    /// Fail (exit 1) when a line is not of the format, after writing what was read.
    #[arg(long)]
    pub strict: bool,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Ask the registry the logs came from for the size of every uploaded and mounted blob
    /// (a HEAD each, before names are anonymized): access logs do not give a request's
    /// size, so without it (or `$content_length` in an nginx log, or distribution's upload
    /// state) an upload's size is unknown.
    #[arg(long, value_name = "URL", value_parser = super::args::REGISTRY_URL)]
    pub sizes_from: Option<url::Url>,

    /// With --sizes-from: HEADs in flight at most.
    #[arg(hide_short_help = true, long, value_name = "N", default_value = "8", requires = "sizes_from",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sizes_concurrency: u16,

    /// With --sizes-from: skip TLS certificate verification.
    #[arg(hide_short_help = true, long, requires = "sizes_from")]
    pub insecure: bool,

    /// With --sizes-from: trust the PEM certificates in FILE too (repeatable).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "FILE",
        requires = "sizes_from"
    )]
    pub ca_cert: Vec<PathBuf>,

    #[command(flatten)]
    pub auth: super::args::AuthArgs,
}

/// `--format` of `trace import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    Distribution,
    Nginx,
    NginxJson,
    Zot,
}

impl From<LogFormatArg> for LogFormat {
    fn from(a: LogFormatArg) -> Self {
        match a {
            LogFormatArg::Distribution => LogFormat::Distribution,
            LogFormatArg::Nginx => LogFormat::Nginx,
            LogFormatArg::NginxJson => LogFormat::NginxJson,
            LogFormatArg::Zot => LogFormat::Zot,
        }
    }
}

/// `--sizes-from`: the sizes of the logs' uploaded and mounted blobs, asked of the registry,
/// and how many could not be learned (HEADs that failed, sizes not believed). `None` when a
/// stop came first, at any stage.
async fn learn_sizes(
    a: &ImportArgs,
    url: url::Url,
    quiet: bool,
    shutdown: &Shutdown,
) -> anyhow::Result<Option<(LearnedSizes, u64)>> {
    let (logs, format) = (a.logs.clone(), LogFormat::from(a.format));
    let reading = tokio::task::spawn_blocking(move || sized_objects(&logs, format));
    let Some(objects) = shutdown.race(reading).await else {
        return Ok(None);
    };
    let objects = objects.context("reading the logs stopped unexpectedly")??;
    let mut config = super::registry::reading(url, a.insecure, &a.ca_cert, &a.auth)?;
    // Its own User-Agent, so that an import of this very log later leaves these HEADs out.
    config.transport.user_agent = crate::analysis::trace::import::sizing_user_agent();
    let concurrency = usize::from(a.sizes_concurrency);
    let connection = config
        .connect(
            crate::metrics::Recorder::discard(),
            crate::client::ClientOptions::default(),
            concurrency,
            shutdown,
        )
        .await?;
    // GET /v2/ first, as pull and replay do: the client learns the registry's scheme, so
    // every HEAD carries credentials from the start instead of meeting the challenge at once.
    crate::session::connect::preflight(&connection, &config.display(), shutdown)
        .await
        .map_err(anyhow::Error::msg)?;
    if shutdown.is_cancelled() {
        return Ok(None);
    }
    let asked = objects.len();
    let found =
        crate::exec::sizes::head_sizes(&connection.client, objects, concurrency, shutdown).await;
    if !quiet {
        eprintln!(
            "creb-rs: trace import: {} of {asked} uploaded or mounted blobs sized by {} ({} not there, {} failed, {} beyond {} and not believed)",
            found.sizes.len(),
            config.display(),
            found.missing,
            found.failed + found.invalid,
            found.absurd,
            crate::trace::record::MAX_OBJECT_SIZE_TEXT,
        );
    }
    let not_sized = found.failed + found.absurd;
    Ok((!shutdown.is_cancelled()).then_some((LearnedSizes(found.sizes), not_sized)))
}

/// The anonymizer `trace import` was asked for: none, keyed by a file, or a random key.
fn anonymizer(a: &ImportArgs) -> anyhow::Result<Anonymizer> {
    if a.no_anonymize {
        return Ok(Anonymizer::off());
    }
    let Some(path) = &a.anonymize_key_file else {
        return Anonymizer::random().context("cannot draw a random anonymization key");
    };
    let key = std::fs::read(path)
        .with_context(|| format!("cannot read the key file {}", path.display()))?;
    if key.len() < 16 {
        anyhow::bail!(
            "{}: a key of {} bytes is too short (at least 16; e.g. head -c 32 /dev/urandom > key)",
            path.display(),
            key.len()
        );
    }
    Ok(Anonymizer::keyed(&key))
}

fn run_import(a: &ImportArgs, out: Out, learned: LearnedSizes) -> anyhow::Result<ExitStatus> {
    check_out(&a.out, &a.inputs(), a.force)?;
    let anonymizer = anonymizer(a)?;
    let opts = ImportOptions {
        format: a.format.into(),
        anonymizer,
        learned,
    };
    let report = import(&a.logs, &a.out, &opts)?;
    if a.json {
        out.json(&report)?;
    } else if a.stats {
        out.text(&render_import(&report));
    } else {
        out.note(&format!(
            "trace import: {} requests from {} lines into {} ({} skipped, {} malformed)",
            report.imported,
            report.lines,
            report.out,
            report.skipped.values().sum::<u64>(),
            report.malformed
        ));
    }
    for p in report.problems.iter().filter(|_| !a.json && !a.stats) {
        out.note(&format!("{}:{}: {}", p.file, p.line, p.why));
    }
    if report.imported == 0 {
        anyhow::bail!(
            "no request of the registry API in {} line(s) of {}: is --format {} right?",
            report.lines,
            report.files.join(", "),
            a.format
                .to_possible_value()
                .map_or(String::new(), |v| v.get_name().to_owned())
        );
    }
    if a.strict && report.malformed > 0 {
        eprintln!(
            "creb-rs: --strict: {} line(s) are not {} log lines (the first: {}:{})",
            report.malformed,
            a.format
                .to_possible_value()
                .map_or(String::new(), |v| v.get_name().to_owned()),
            report.problems[0].file,
            report.problems[0].line
        );
        return Ok(ExitStatus::Failed);
    }
    Ok(ExitStatus::Success)
}

fn parse_top(s: &str) -> Result<usize, String> {
    parse_count(s).and_then(|n| usize::try_from(n).map_err(|_| format!("'{s}' is too large")))
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must be in (0, 1]"))
    }
}

/// RFC 3339 → Unix ms.
fn parse_time(s: &str) -> Result<i64, String> {
    crate::trace::record::parse_timestamp(s)
        .ok_or_else(|| format!("'{s}' is not an RFC 3339 time (2017-06-20T10:00:00Z)"))
}

/// Runs a `trace` command; the file work happens on the blocking pool.
pub async fn run(args: TraceArgs) -> anyhow::Result<ExitStatus> {
    stoppable(args, Shutdown::new()).await
}

/// [`run`], stopped by `shutdown` (the one `--sizes-from` heeds while it asks).
pub(crate) async fn stoppable(args: TraceArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let quiet = args.quiet;
    if let TraceCommand::Import(a) = &args.command {
        if let Some(url) = a.sizes_from.clone() {
            // Before the registry is asked: a refused output is known at once.
            check_out(&a.out, &a.inputs(), a.force)?;
            let Some((learned, not_sized)) = learn_sizes(a, url, quiet, &shutdown).await? else {
                eprintln!("creb-rs: trace import: stopped while asking for sizes; nothing written");
                return Ok(ExitStatus::Interrupted);
            };
            let TraceCommand::Import(a) = args.command else {
                unreachable!("matched above")
            };
            let status =
                tokio::task::spawn_blocking(move || run_import(&a, Out { quiet }, learned))
                    .await
                    .context("the trace command stopped unexpectedly")??;
            if not_sized > 0 && status == ExitStatus::Success {
                // The trace is written, their uploads marked size unknown; the run says so.
                eprintln!(
                    "creb-rs: trace import: {not_sized} blob(s) could not be sized (failed HEADs \
                     or sizes not believed); exit 1"
                );
                return Ok(ExitStatus::Failed);
            }
            return Ok(status);
        }
    }
    tokio::task::spawn_blocking(move || run_blocking_with(args.command, quiet))
        .await
        .context("the trace command stopped unexpectedly")?
}

fn resolve(paths: &[PathBuf]) -> anyhow::Result<TraceInput> {
    Ok(TraceInput::resolve(paths)?)
}

/// The same command, on the calling thread.
pub fn run_blocking(command: TraceCommand) -> anyhow::Result<ExitStatus> {
    run_blocking_with(command, false)
}

/// [`run_blocking`], printing nothing on success when `quiet`.
pub fn run_blocking_with(command: TraceCommand, quiet: bool) -> anyhow::Result<ExitStatus> {
    let out = Out { quiet };
    match command {
        TraceCommand::Stats(a) => run_stats(&a, out),
        TraceCommand::Sample(a) => run_sample(&a, out),
        TraceCommand::Synth(a) => run_synth(&a, out),
        TraceCommand::Validate(a) => run_validate(&a, out),
        TraceCommand::Import(a) => run_import(&a, out, LearnedSizes::default()),
    }
}

/// Where a trace command's report goes: nothing with `--quiet`; with `--json` one JSON
/// document on stdout; else text on stdout and notes on stderr.
#[derive(Debug, Clone, Copy)]
struct Out {
    quiet: bool,
}

impl Out {
    fn json(self, value: &impl serde::Serialize) -> anyhow::Result<()> {
        if !self.quiet {
            println!("{}", serde_json::to_string_pretty(value)?);
        }
        Ok(())
    }

    fn text(self, text: &str) {
        if !self.quiet {
            print!("{text}");
        }
    }

    fn note(self, text: &str) {
        if !self.quiet {
            eprintln!("{text}");
        }
    }
}

fn run_stats(a: &StatsArgs, out: Out) -> anyhow::Result<ExitStatus> {
    let input = resolve(&a.traces)?;
    let opts = StatsOptions {
        top: a.top,
        session_window: a.session_window,
        ..StatsOptions::default()
    };
    let started = Instant::now();
    let stats = compute_stats(&input, &opts)?;
    if stats.records == 0 {
        anyhow::bail!("{} holds no trace record", input.describe());
    }
    let footprint = if a.capacity {
        let sizes = SizeScale::new(a.size_scale.unwrap_or(1.0), a.max_object_size.map(|b| b.0))
            .map_err(|e| anyhow::anyhow!("--size-scale/--max-object-size: {e}"))?;
        Some(Footprint::of(&input, sizes)?)
    } else {
        None
    };
    if a.json {
        let mut value = serde_json::to_value(&stats)?;
        if let Some(c) = &footprint {
            // Its key in the JSON is the flag's name.
            value["capacity"] = serde_json::to_value(c)?;
        }
        out.json(&value)?;
    } else {
        let mut text = render_text(&stats);
        if let Some(c) = &footprint {
            text.push('\n');
            text.push_str(&crate::report::analysis::footprint::render(c));
        }
        out.text(&text);
        out.note(&format!(
            "trace stats: {} records in {:.2}s",
            grouped(stats.records),
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(ExitStatus::Success)
}

/// Refuses to write the trace `out` over one of `inputs` (it would be truncated before it
/// is read) or over any existing file, a trace included (unless `force`).
fn check_out(out: &Path, inputs: &[PathBuf], force: bool) -> anyhow::Result<()> {
    crate::outfile::check(out, "--out", crate::outfile::Kind::Trace, inputs, force)
}

impl ImportArgs {
    /// What `trace import` reads: the logs and the key.
    fn inputs(&self) -> Vec<PathBuf> {
        self.logs
            .iter()
            .chain(&self.anonymize_key_file)
            .cloned()
            .collect()
    }
}

fn run_sample(a: &SampleArgs, out: Out) -> anyhow::Result<ExitStatus> {
    let method = SampleMethod::try_from(a)?;
    let input = resolve(&a.traces)?;
    check_out(&a.out, &input.files, a.force)?;
    let records = if a.reads_only {
        Records::Reads
    } else {
        Records::All
    };
    let report = sample_records(&input, &method, &a.out, records)?;
    if report.written == 0 && report.read == 0 && report.invalid > 0 {
        // Nothing valid to sample: an empty trace would only fail later, far from here.
        let _ = std::fs::remove_file(&a.out);
        anyhow::bail!(
            "every one of the {} records read is invalid, so nothing was sampled and no trace \
             written; `creb-rs trace validate` names each broken record by file and line",
            grouped(report.invalid)
        );
    }
    if a.json {
        out.json(&Sampled::of(&report, method.name(), &a.out))?;
        return Ok(ExitStatus::Success);
    }
    let range = match (report.first_ms, report.last_ms) {
        (Some(f), Some(l)) => format!(" ({} .. {})", format_ms(f), format_ms(l)),
        _ => String::new(),
    };
    out.note(&format!(
        "trace sample ({}): {}\n  wrote {} records{range} to {}{}",
        method.name(),
        report.selection,
        grouped(report.written),
        a.out.display(),
        if report.invalid > 0 {
            format!("; skipped {} invalid records", report.invalid)
        } else {
            String::new()
        }
    ));
    Ok(ExitStatus::Success)
}

fn run_synth(a: &SynthArgs, out: Out) -> anyhow::Result<ExitStatus> {
    let length = match (a.requests, a.duration) {
        (Some(n), None) => SynthLength::Requests(n),
        (None, Some(d)) => SynthLength::Duration(d),
        _ => anyhow::bail!("give either --requests or --duration"),
    };
    let opts = ProfileOptions {
        start_ms: a.start,
        max_object_size: a.max_object_size.map(|s| s.bytes()),
        ..ProfileOptions::new(a.profile.into(), length, a.seed)
    };
    check_out(&a.out, &[], a.force)?;
    let started = Instant::now();
    let mut generator = ProfileGenerator::new(&opts);
    let mut first = None;
    let mut last = None;
    let records = std::iter::from_fn(|| {
        let r = generator.next()?;
        first.get_or_insert(r.time_ms);
        last = Some(r.time_ms);
        Some(r)
    });
    let written = write_file_iter(&a.out, records)
        .with_context(|| format!("{}: cannot write", a.out.display()))?;
    let s = generator.stats();
    if a.json {
        let profile = (Profile::from(a.profile), a.seed);
        out.json(&Synthesized::of(s, profile, &a.out, written, (first, last)))?;
        return Ok(ExitStatus::Success);
    }
    out.note(&format!(
        "trace synth ({} profile, seed {}): wrote {} records{} to {} in {:.2}s \
         ({} pulls, {} pushes, {} duplicates, {} failed in the original)",
        Profile::from(a.profile),
        a.seed,
        grouped(written),
        match (first, last) {
            (Some(f), Some(l)) => format!(" ({} .. {})", format_ms(f), format_ms(l)),
            _ => String::new(),
        },
        a.out.display(),
        started.elapsed().as_secs_f64(),
        grouped(s.pulls),
        grouped(s.pushes),
        grouped(s.duplicates),
        grouped(s.failed),
    ));
    Ok(ExitStatus::Success)
}

fn run_validate(a: &ValidateArgs, out: Out) -> anyhow::Result<ExitStatus> {
    let input = resolve(&a.traces)?;
    let v = validate_trace(&input, a.all);
    if a.json {
        out.json(&Validated::of(&v))?;
        return Ok(if v.is_ok() {
            ExitStatus::Success
        } else {
            ExitStatus::Usage
        });
    }
    if !v.is_ok() {
        for problem in &v.problems {
            eprintln!("{problem}");
        }
        eprintln!("{}", problems_line(&v, a.all));
        return Ok(ExitStatus::Usage);
    }
    out.text(&valid_line(&v));
    Ok(ExitStatus::Success)
}
