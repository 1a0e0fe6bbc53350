//! Exit statuses (documented in README and `docs/cli.md`) and the library's entry point.
//!
//! 0 completed; 1 completed but a check failed (an operation failed in push/pull, a
//! `--fail-if` threshold held); 2 usage, configuration or I/O error; 130 interrupted by
//! SIGINT, 143 by SIGTERM (results still written).

use crate::cli::{Cli, Command};
use crate::shutdown::Shutdown;
use crate::workload;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Success,
    Failed,
    Usage,
    Interrupted,
    Terminated,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Interrupted => 130,
            ExitStatus::Terminated => 143,
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

/// The whole process for parsed flags: diagnostics to stderr (`-v`, `RUST_LOG`), the async
/// runtime, Ctrl-C wired to a two-stage shutdown, the command; the exit code. The binary's
/// `main` (and the heap-counting example) are this and nothing else.
pub fn main_with(cli: Cli) -> u8 {
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
        .init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if let Some(threads) = cli.worker_threads(cores) {
        builder.worker_threads(threads);
    }
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

/// Like [`run`], with a caller-owned shutdown (the binary passes one wired to signals).
pub async fn run_with(cli: Cli, shutdown: Shutdown) -> ExitStatus {
    let stopped = shutdown.clone();
    let result = match cli.command {
        Command::Push(args) => on_worker(workload::push::run(args, shutdown)).await,
        Command::Pull(args) => on_worker(workload::pull::run(args, shutdown)).await,
        Command::Replay(args) => on_worker(crate::replay::run(args, shutdown)).await,
        Command::Merge(args) => crate::merge::run(args).await,
        Command::Report(args) => crate::report::run(args).await,
        Command::Compare(args) => crate::compare::run(args).await,
        Command::Trace(args) => crate::analysis::trace_cmd::run(args).await,
        Command::Simulate(args) => crate::analysis::simulate::run(args).await,
        Command::Cost(args) => crate::analysis::cost::run(args).await,
        Command::Run(args) => on_worker(crate::experiment::run(args, shutdown)).await,
    };
    match result {
        Ok(ExitStatus::Interrupted) if stopped.by_sigterm() => ExitStatus::Terminated,
        Ok(status) => status,
        Err(e) => {
            eprintln!("creb-rs: error: {e:#}");
            ExitStatus::Usage
        }
    }
}
