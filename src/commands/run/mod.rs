//! `creb-rs run EXPERIMENT.toml`: every experiment of a file against every registry, in
//! rounds, resumable, with a combined comparison.
//!
//! The command's part is flags and wiring: the rounds, the checkpoint and the cleanup are
//! the runner's ([`crate::runner`]); a cell becomes the command line a person would type
//! ([`cells`]) and runs in-process through the same `push`/`pull`/`replay`/`capacity` code
//! as the commands ([`driver`]).
//!
//! Layout of `OUT` (default `results/<file stem>` next to the file):
//! `OUT/<experiment>/<registry>/` per cell, with `round-NNNN/` in monitoring mode
//! (`--every`/`--repeat`) and `rep-K/` for experiments with `repeat` > 1;
//! `OUT/.creb-run.json` (checkpoint), `OUT/comparison.csv`, `OUT/comparison.html`.
//!
//! Ctrl-C stops the running cell cleanly (its result marked interrupted), writes the
//! checkpoint and exits 130; `--resume` redoes that cell and goes on.
//!
//! Exit status: 0 every cell ok; 1 a cell failed (a check, an operation, or no result);
//! 2 the file or the flags are wrong; 130 interrupted.

pub mod cells;
pub mod driver;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use self::driver::Commands;
use crate::experiment::cells::{round_cells, Layout};
use crate::experiment::config::ExperimentFile;
use crate::metrics::live::LiveSlot;
use crate::net::serve::MetricsServer;
use crate::report::{comparison, run};
use crate::runner::{Outcome, RunSettings, Schedule};
use crate::session::status::ExitStatus;
use crate::shutdown::Shutdown;
use crate::units::parse_duration;

fn parse_rounds(s: &str) -> Result<u64, String> {
    match crate::units::parse_count(s)? {
        0 => Err(format!("'{s}' must be at least 1")),
        n => Ok(n),
    }
}

/// `creb-rs run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The experiment file (TOML): `[[registry]]` and `[[experiment]]` tables
    /// (docs/experiments.md).
    #[arg(value_name = "EXPERIMENT.toml")]
    pub experiment: PathBuf,

    /// Where the results go: one result directory per cell, the checkpoint,
    /// comparison.csv and comparison.html. Default: `results/<file stem>` next to the file.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Continue the run in the output directory: complete cells are kept, unfinished and
    /// failed-to-start ones are redone. Starts afresh when there is nothing to resume.
    #[arg(long)]
    pub resume: bool,

    /// Monitoring mode: start a round every D (e.g. 6h), each round's results kept apart.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub every: Option<Duration>,

    /// With --every: start no round later than D after the first (e.g. 60d).
    #[arg(hide_short_help = true, long, value_name = "D", value_parser = parse_duration, requires = "every")]
    pub until: Option<Duration>,

    /// Run N rounds (back to back, or --every D apart).
    #[arg(long, value_name = "N", value_parser = parse_rounds)]
    pub repeat: Option<u64>,

    /// After each round, delete what it pushed (manifests, then blobs) where the registry
    /// allows it, so repeated experiments do not grow storage.
    #[arg(long)]
    pub cleanup: bool,

    /// Check the file and print the cells and their command lines; send nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Print the run's cells as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Serve the live metrics of the cell running at http://ADDR/metrics for the whole run
    /// (each cell counts from zero; `creb_run_info{cell}` names it; docs/metrics.md).
    #[arg(hide_short_help = true, long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// With --metrics-listen: keep serving this long after the last cell.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "0s", value_parser = parse_duration, requires = "metrics_listen")]
    pub metrics_linger: Duration,

    /// Push each cell's live metrics to this Prometheus Pushgateway at the end of every
    /// interval and of the cell.
    #[arg(hide_short_help = true, long, value_name = "URL")]
    pub metrics_push: Option<url::Url>,

    /// `--quiet` (a global flag).
    #[arg(skip)]
    pub quiet: bool,

    #[command(flatten)]
    pub runtime: crate::commands::args::RuntimeArgs,
}

/// The schedule the flags ask for.
fn schedule(args: &RunArgs) -> Schedule {
    Schedule {
        every: args.every,
        until: args.until,
        repeat: args.repeat,
    }
}

/// Runs `creb-rs run`.
pub async fn run(args: RunArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let file = ExperimentFile::load(&args.experiment)?;
    crate::runner::check(&file, &Commands)?;
    let out = match &args.output_dir {
        Some(d) => d.clone(),
        None => {
            let stem = args
                .experiment
                .file_stem()
                .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
            file.base_dir.join("results").join(stem)
        }
    };
    if args.dry_run {
        if !args.quiet {
            dry_run(&args, &file, &out)?;
        }
        return Ok(ExitStatus::Success);
    }
    let mut settings = RunSettings {
        experiment: args.experiment.clone(),
        output_dir: out.clone(),
        resume: args.resume,
        schedule: schedule(&args),
        cleanup: args.cleanup,
        quiet: args.quiet,
        live: None,
        metrics_push: args.metrics_push.clone(),
    };
    let server = match args.metrics_listen {
        Some(addr) => {
            let slot = Arc::new(LiveSlot::default());
            let server = MetricsServer::bind(addr, Arc::clone(&slot))
                .await
                .with_context(|| format!("--metrics-listen {addr}: cannot listen there"))?;
            if !args.quiet {
                eprintln!("creb-rs: metrics at http://{}/metrics", server.addr());
            }
            settings.live = Some(slot);
            Some(server)
        }
        None => None,
    };
    let outcome = crate::runner::run(&file, &settings, &Commands, &shutdown).await?;
    if let Some(server) = server {
        server.finish(args.metrics_linger).await;
    }
    if !args.quiet {
        show_end(&args, &file, &outcome, &out)?;
    }
    Ok(outcome.status)
}

/// `--dry-run`: the plan of the run and every cell's command line of the first round.
fn dry_run(args: &RunArgs, file: &ExperimentFile, out: &Path) -> anyhow::Result<()> {
    let schedule = schedule(args).record();
    let layout = Layout {
        rounds: schedule.rounds_layout,
    };
    let mut cells = Vec::new();
    for cell in round_cells(file, 0) {
        let dir = out.join(layout.cell_dir(file, &cell));
        let argv = cells::cell_argv(file, &cell, &dir).map_err(anyhow::Error::msg)?;
        cells.push((cell, argv));
    }
    let schedule = schedule.to_string();
    print!("{}", run::dry_run_text(file, &schedule, out, &cells));
    Ok(())
}

/// The end of a run on the terminal: the checkpoint as JSON, or the table of what ran and
/// how to continue an interrupted run.
fn show_end(
    args: &RunArgs,
    file: &ExperimentFile,
    outcome: &Outcome,
    out: &Path,
) -> anyhow::Result<()> {
    if args.json {
        let end = run::RunEnd {
            checkpoint: &outcome.checkpoint,
            exit_code: outcome.status.code(),
            output_dir: out,
        };
        println!("{}", serde_json::to_string_pretty(&end)?);
        return Ok(());
    }
    if outcome.ran.is_empty() && !outcome.interrupted {
        println!("nothing left to run in {}", out.display());
    } else {
        print!(
            "{}",
            comparison::ran_text(file, &outcome.checkpoint, out, &outcome.ran)
        );
    }
    if outcome.interrupted {
        eprintln!(
            "creb-rs: interrupted; continue with: creb-rs run {} --output-dir {} --resume",
            args.experiment.display(),
            out.display()
        );
    }
    Ok(())
}
