//! The command layer: one module per subcommand, each owning its flags (clap derive; the
//! doc comments are the `--help` text), their validation into the typed settings of the
//! layers below, and its `run` function; the flag groups several commands share
//! ([`args`]), and their conversion into the settings below (the registry set-up and result
//! publishing every load command shares are [`crate::session`]'s); and this file, the
//! dispatcher: parse, run on the runtime, exit status.
//!
//! Exit statuses (documented in README and `docs/cli.md`, [`ExitStatus`]): 0 completed;
//! 1 completed but an operation failed (more than `--max-errors`) or a `--strict` check;
//! 2 usage, configuration or I/O error; 3 a `--fail-if` threshold held; 130 interrupted by
//! SIGINT, 143 by SIGTERM (results still written).
//!
//! Nothing below this layer imports clap, a command, or this module.

pub mod args;
pub mod capacity;
pub mod compare;
pub mod cost;
pub mod limits;
pub mod merge;
pub mod pull;
pub mod push;
pub mod registry;
pub mod replay;
pub mod report;
pub mod run;
pub mod shell;
pub mod simulate;
pub mod trace;

use clap::{CommandFactory, Parser, Subcommand};
use url::Url;

pub use crate::session::ExitStatus;
use crate::shutdown::Shutdown;

/// Container registry benchmark: trace replay and synthetic push/pull against any OCI
/// Distribution registry, with latency you can trust.
#[derive(Debug, Parser)]
#[command(
    name = "creb-rs",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = EXIT_STATUSES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace).
    ///
    /// `RUST_LOG` (e.g. `RUST_LOG=creb=debug`) overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, hide_short_help = true)]
    pub verbose: u8,

    /// Print nothing on success.
    ///
    /// No table on stdout, no progress or notes on stderr. Errors still go to stderr, results
    /// still go to --output-dir, and the exit status tells.
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Colour on stderr: auto, always, never.
    ///
    /// `auto` colours a terminal, unless NO_COLOR is set. Results and tables never carry
    /// colour.
    #[arg(long, value_enum, value_name = "WHEN", global = true, hide_short_help = true, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,
}

/// The exit statuses, the same for every command (`--help`, the manual page, docs/cli.md).
pub const EXIT_STATUSES: &str = "\
Exit status (every command):
  0    completed
  1    completed, but an operation failed (more than --max-errors, 0 by default), an image
       failed though its requests did not (pull --platform absent from an index), or a
       validity check failed with --strict
  2    usage, configuration or I/O error (nothing was measured, or the registry was unusable)
  3    completed, but a --fail-if threshold held
  130  interrupted by Ctrl-C (SIGINT); results written and marked interrupted
  143  terminated (SIGTERM); results written and marked interrupted";

const MERGE_EXAMPLES: &str = "\
Examples:
  # the shards of a multi-host replay into one result (exact: histograms add)
  creb-rs merge out/shard-0 out/shard-1 out/shard-2 out/shard-3 --output-dir out/merged";

const REPORT_EXAMPLES: &str = "\
Examples:
  # the tables again, or one self-contained HTML file with the charts
  creb-rs report out/merged
  creb-rs report out/merged --format html -o report.html";

const COMPARE_EXAMPLES: &str = "\
Examples:
  # two runs of the same workload: side by side with relative deltas
  creb-rs compare results/before results/after
  # three repetitions a side: medians, spread, and which deltas are within the noise
  creb-rs compare before-1,before-2,before-3 after-1,after-2,after-3";

const TRACE_EXAMPLES: &str = "\
Examples:
  creb-rs trace stats trace.json.gz               # characterize like FAST'18
  creb-rs trace validate traces/                    # every broken record, by file and line
  creb-rs trace sample trace.json --method typical-day --target-requests 100k -o day.json
  creb-rs trace synth --profile dal --requests 1M -o dal-1m.json.gz
  # your registry's own traffic, anonymized, ready to replay (docs/traces.md)
  creb-rs trace import --format distribution registry.log.gz -o mine.json.gz";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  creb-rs simulate cache trace.json --memory 2GiB --ssd-factor 10
  creb-rs simulate cache trace.json --sweep 1%,2%,5%,10%
  creb-rs simulate prefetch trace.json";

const COST_EXAMPLES: &str = "\
Examples:
  # what a measured run would cost per month on ECR, scaled to 200 TiB of egress
  creb-rs cost out/merged --provider ecr --scale-to 200TiB
  # what a trace's traffic costs on Google Artifact Registry
  creb-rs cost trace.json --provider gcr";

const RUN_EXAMPLES: &str = "\
Examples:
  creb-rs run bench.toml --dry-run     # check the file, print every cell's command line
  creb-rs run bench.toml --repeat 5    # five rounds back to back, comparison.html at the end
  creb-rs run bench.toml --every 6h --until 30d --resume";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  creb-rs completions bash > ~/.local/share/bash-completion/completions/creb-rs
  creb-rs completions zsh > ~/.zfunc/_creb-rs";

const MAN_EXAMPLES: &str = "\
Examples:
  creb-rs man | man -l -
  creb-rs man --dir ~/.local/share/man/man1";

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorArg {
    Auto,
    Always,
    Never,
}

impl ColorArg {
    /// Whether stderr gets colour: `auto` asks whether it is a terminal and whether the
    /// `NO_COLOR` convention (<https://no-color.org>) is in force.
    pub fn enabled(self) -> bool {
        use std::io::IsTerminal;
        match self {
            ColorArg::Always => true,
            ColorArg::Never => false,
            ColorArg::Auto => {
                std::io::stderr().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

impl Cli {
    /// The command, with the global flags given to it (`--quiet` anywhere on the line).
    pub fn into_command(self) -> Command {
        let mut command = self.command;
        let quiet = self.quiet;
        match &mut command {
            Command::Push(a) => a.output.quiet |= quiet,
            Command::Pull(a) => a.output.quiet |= quiet,
            Command::Replay(a) => a.output.quiet |= quiet,
            Command::Capacity(a) => a.replay.output.quiet |= quiet,
            Command::Merge(a) => a.quiet |= quiet,
            Command::Report(a) => a.quiet |= quiet,
            Command::Compare(a) => a.quiet |= quiet,
            Command::Trace(a) => a.quiet |= quiet,
            Command::Simulate(a) => a.quiet |= quiet,
            Command::Cost(a) => a.quiet |= quiet,
            Command::Run(a) => a.quiet |= quiet,
            Command::Completions(_) | Command::Man(_) => {}
        }
        command
    }

    /// The runtime's worker threads: `--threads`, else half the `cores` (at least one) when
    /// every endpoint the command names is on loopback, else `None` (tokio's default, one
    /// per core).
    pub fn worker_threads(&self, cores: usize) -> Option<usize> {
        if let Some(threads) = self.command.threads() {
            return Some(usize::from(threads));
        }
        let endpoints = self.command.endpoints();
        (!endpoints.is_empty() && endpoints.iter().all(|u| crate::net::is_loopback(u)))
            .then_some((cores / 2).max(1))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Push generated images (unique, deterministic layers) and time every request.
    #[command(after_help = push::SHORT_EXAMPLES, after_long_help = push::EXAMPLES)]
    Push(push::PushArgs),
    /// Pull images: manifest, then every blob read to the end and verified.
    #[command(after_help = pull::EXAMPLES)]
    Pull(pull::PullArgs),
    /// Replay IBM registry traces: prewarm the registry, then replay in stress (closed) or
    /// delay (open, trace timing) mode.
    #[command(
        after_help = replay::SHORT_EXAMPLES,
        after_long_help = replay::EXAMPLES,
        // In -h by its example (--unpack) or in --help (--replica), not in the list:
        // replay's list fills the 40 lines.
        mut_arg("unpack", |a| a.hide_short_help(true)),
        mut_arg("replica", |a| a.hide_short_help(true))
    )]
    Replay(Box<replay::ReplayArgs>),
    /// Find the load a registry sustains under objectives (--slo): an open-model search over
    /// a trace's load, step by step, in delay mode; capacity.json and the curve.
    #[command(
        after_help = capacity::SHORT_EXAMPLES,
        after_long_help = capacity::EXAMPLES,
        // Always delay mode, prewarm then steps, judged by --slo: a replay's flags for these
        // are not capacity's (refused when given, see `capacity::run`). --fail-if gates the
        // answer.
        mut_arg("mode", |a| a.hide(true)),
        mut_arg("phase", |a| a.hide(true)),
        mut_arg("fail_if", |a| a
            .help("Exit 3 when EXPR holds for the answer (repeatable): 'capacity < 500/s' \
                   (operations per second) or 'capacity < 4x' (the trace's speed factor)")
            .long_help(None)
            .hide_short_help(true)),
        mut_arg("unpack", |a| a.hide_short_help(true)),
        mut_arg("replica", |a| a.hide_short_help(true))
    )]
    Capacity(Box<capacity::CapacityArgs>),
    /// Merge the result directories of many hosts exactly (histograms add; nothing averages).
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(merge::MergeArgs),
    /// Re-render a result directory as text, JSON, CSV or a self-contained HTML report.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(report::ReportArgs),
    /// Compare two result directories side by side.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(compare::CompareArgs),
    /// Traces: stats, sample, synth, validate, and import (access logs into a trace).
    #[command(after_help = TRACE_EXAMPLES)]
    Trace(trace::TraceArgs),
    /// Offline simulations over traces: cache (a two-level layer cache), prefetch.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(simulate::SimulateArgs),
    /// Storage and egress cost of a measured run or a trace, from a pricing table.
    #[command(after_help = COST_EXAMPLES)]
    Cost(cost::CostArgs),
    /// Run the experiments of a TOML file against its registries, in rounds (--every,
    /// --repeat), resumable (--resume), with a combined comparison (CSV and HTML).
    #[command(after_help = RUN_EXAMPLES)]
    Run(run::RunArgs),
    /// Print the shell completion script for bash, zsh, fish or powershell.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(shell::CompletionsArgs),
    /// Print the manual page (roff), or write one per command into a directory.
    #[command(after_help = MAN_EXAMPLES)]
    Man(shell::ManArgs),
}

impl Command {
    /// The registry endpoints the command line names (none for commands that send nothing,
    /// and for `run`, whose registries are in its file).
    pub fn endpoints(&self) -> Vec<&Url> {
        match self {
            Command::Push(a) => a.registry.registry.iter().collect(),
            Command::Pull(a) => a.registry.registry.iter().chain(&a.from).collect(),
            Command::Replay(a) => a.registry.registry.iter().collect(),
            Command::Capacity(a) => a.replay.registry.registry.iter().collect(),
            _ => Vec::new(),
        }
    }

    /// `--threads` of the commands that send requests.
    pub fn threads(&self) -> Option<u16> {
        match self {
            Command::Push(a) => a.runtime.threads,
            Command::Pull(a) => a.runtime.threads,
            Command::Replay(a) => a.runtime.threads,
            Command::Capacity(a) => a.replay.runtime.threads,
            Command::Run(a) => a.runtime.threads,
            _ => None,
        }
    }
}

/// Runs a parsed command line. Errors are printed on stderr here, with their causes.
pub async fn run(cli: Cli) -> ExitStatus {
    run_with(cli, Shutdown::new()).await
}

/// Runs a command as a task on the runtime's workers. A future driven by `block_on` lives
/// outside the scheduler, on the caller's thread: each wake-up from a worker (each finished
/// request of a replay, a push or a pull) would cross threads through a futex.
async fn on_worker<F>(command: F) -> anyhow::Result<ExitStatus>
where
    F: std::future::Future<Output = anyhow::Result<ExitStatus>> + Send + 'static,
{
    match tokio::spawn(command).await {
        Ok(result) => result,
        Err(e) => Err(anyhow::anyhow!("the run stopped unexpectedly: {e}")),
    }
}

/// The command line parsed, or the process ended with clap's message (exit 2; 0 for
/// `--help` and `--version`). A flag that belongs to other commands is said to be theirs,
/// instead of clap's guess at a similar spelling (`push --verify` is pull's and replay's,
/// not a misspelt `--version`).
pub fn parse_or_exit() -> Cli {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => with_owners(e, &argv).exit(),
    }
}

/// `e`, for an unknown flag that other subcommands take, with a tip naming them in place of
/// clap's nearest spelling.
fn with_owners(mut e: clap::Error, argv: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let Some(long) = arg
        .strip_prefix("--")
        .map(|a| a.split('=').next().unwrap_or(a).to_owned())
    else {
        return e;
    };
    let words: Vec<String> = argv
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let mut owners = Vec::new();
    let mut used = None;
    let root = Cli::command();
    let mut stack: Vec<(String, &clap::Command)> = root
        .get_subcommands()
        .map(|c| (c.get_name().to_owned(), c))
        .collect();
    while let Some((path, command)) = stack.pop() {
        let names: Vec<&str> = path.split(' ').collect();
        // The deepest subcommand the command line names (`trace import` over `trace`).
        let named = names.iter().all(|n| words.iter().any(|w| w == n));
        if named && path.len() > used.as_ref().map_or(0, String::len) {
            used = Some(path.clone());
        }
        if command
            .get_arguments()
            .any(|a| a.get_long() == Some(long.as_str()))
        {
            owners.push(format!("`{path}`"));
        }
        for sub in command.get_subcommands() {
            stack.push((format!("{path} {}", sub.get_name()), sub));
        }
    }
    if owners.is_empty() {
        return e;
    }
    owners.sort();
    if let Some(usage) = used.as_deref().and_then(usage_of) {
        // Clap's usage line carried its guess; this one the command's own.
        e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
    }
    let tip = clap::builder::StyledStr::from(owners_tip(&long, &owners, used.as_deref()));
    e.remove(ContextKind::SuggestedArg);
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip]));
    e
}

/// The tip for `--long`, a flag of the commands `owners` (quoted), given on the command line
/// of `used`.
fn owners_tip(long: &str, owners: &[String], used: Option<&str>) -> String {
    match used {
        // The command's own flag, given before the command's name.
        Some(u) if owners.contains(&format!("`{u}`")) => {
            format!("'--{long}' is a flag of `{u}`: give it after `{u}`")
        }
        Some(u) => format!(
            "'--{long}' is a flag of {}, not of `{u}`",
            owners.join(", ")
        ),
        None => format!("'--{long}' is a flag of {}", owners.join(", ")),
    }
}

/// The usage line of the subcommand `path` (`trace import`).
fn usage_of(path: &str) -> Option<clap::builder::StyledStr> {
    let mut command = Cli::command().bin_name("creb-rs");
    command.build();
    let mut at = &mut command;
    for name in path.split(' ') {
        at = at.find_subcommand_mut(name)?;
    }
    Some(at.render_usage())
}

/// The whole process for parsed flags: diagnostics to stderr (`-v`, `RUST_LOG`), the async
/// runtime, Ctrl-C wired to a two-stage shutdown, the command; the exit code. The binary's
/// `main` (and the heap-counting example) are this and nothing else.
pub fn main_with(cli: Cli) -> u8 {
    quiet_on_closed_stdout();
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(cli.color.enabled())
        .init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if let Some(threads) = cli.worker_threads(cores) {
        builder.worker_threads(threads);
    }
    // Stress mode with --gather may have a worker wait a moment before it parks (net::gather).
    builder.on_thread_park(crate::net::gather::before_park);
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("creb-rs: error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    let status = runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        run_with(cli, shutdown).await
    });
    status.code()
}

/// Whether `e` is a write to a stdout nobody reads any more (EPIPE).
fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A command whose stdout is closed under it (`creb-rs trace stats | head -1`) ends quietly
/// with status 0, as other command-line tools do: `print!` panics on EPIPE, and this hook
/// turns that panic into the quiet end (results on disk are written before the output).
fn quiet_on_closed_stdout() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.contains("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        previous(info);
    }));
}

/// Like [`run()`], with a caller-owned shutdown (the binary passes one wired to signals).
pub async fn run_with(cli: Cli, shutdown: Shutdown) -> ExitStatus {
    let stopped = shutdown.clone();
    let result = match cli.into_command() {
        Command::Push(args) => on_worker(push::run(args, shutdown)).await,
        Command::Pull(args) => on_worker(pull::run(args, shutdown)).await,
        Command::Replay(args) => on_worker(replay::run(*args, shutdown)).await,
        Command::Capacity(args) => on_worker(capacity::run(*args, shutdown)).await,
        Command::Merge(args) => merge::run(args).await,
        Command::Report(args) => report::run(args).await,
        Command::Compare(args) => compare::run(args).await,
        Command::Trace(args) => trace::stoppable(args, shutdown).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Cost(args) => cost::run(args).await,
        Command::Run(args) => on_worker(run::run(args, shutdown)).await,
        Command::Completions(args) => shell::completions(&args, Cli::command()),
        Command::Man(args) => shell::man(&args, Cli::command()),
    };
    match result {
        Ok(ExitStatus::Interrupted) if stopped.by_sigterm() => ExitStatus::Terminated,
        Ok(status) => status,
        // Whoever read stdout stopped reading (`creb-rs man | head`): not an error.
        Err(e) if closed_stdout(&e) => ExitStatus::Success,
        Err(e) => {
            eprintln!("creb-rs: error: {e:#}");
            ExitStatus::Usage
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The command lines of a help screen's examples: continuation lines joined, comments
    /// and redirections dropped, single quotes honoured.
    fn example_lines(text: &str) -> Vec<Vec<String>> {
        let joined = text.replace("\\\n", " ");
        joined
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("creb-rs "))
            .map(|line| {
                let line = line.split(" #").next().unwrap_or(line);
                let line = line.split(['>', '|']).next().unwrap_or(line);
                let mut words = Vec::new();
                let mut word = String::new();
                let mut quoted = false;
                for c in line.chars() {
                    match c {
                        '\'' => quoted = !quoted,
                        ' ' if !quoted => {
                            if !word.is_empty() {
                                words.push(std::mem::take(&mut word));
                            }
                        }
                        c => word.push(c),
                    }
                }
                if !word.is_empty() {
                    words.push(word);
                }
                words
            })
            .collect()
    }

    /// Every example in every help screen parses: a renamed flag cannot leave one stale.
    #[test]
    fn every_help_example_parses() {
        let cmd = Cli::command();
        let mut seen = 0;
        for sub in cmd.get_subcommands() {
            let Some(text) = sub.get_after_help() else {
                continue;
            };
            for words in example_lines(&text.to_string()) {
                seen += 1;
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("`{}` in `{} --help`: {e}", words.join(" "), sub.get_name());
                }
            }
        }
        assert!(seen >= 20, "{seen} examples");
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            assert!(
                sub.get_after_help().is_some(),
                "`{}` has no examples",
                sub.get_name()
            );
        }
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
                    "pull",
                    "--threads",
                    "3",
                    "--registry",
                    "http://127.0.0.1:1",
                    "--repo",
                    "x/y",
                ],
                8,
                Some(3),
            ),
            (&["run", "x.toml", "--threads", "2"], 8, Some(2)),
        ];
        for (args, cores, want) in cases {
            assert_eq!(workers(args, *cores), *want, "{args:?} on {cores} cores");
        }
        // Commands that send nothing do not offer it.
        assert!(Cli::try_parse_from([
            "creb-rs",
            "merge",
            "a",
            "--output-dir",
            "c",
            "--threads",
            "2"
        ])
        .is_err());
        assert!(Cli::try_parse_from(["creb-rs", "--threads", "2", "pull"]).is_err());
    }
}
