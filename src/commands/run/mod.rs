//! `creb-rs run EXPERIMENT.toml`: every experiment of a file against every registry, in
//! rounds, resumable, with a combined comparison.
//!
//! Stages: the file is read and every cell's command line is checked ([`crate::experiment::config`],
//! [`cells`]) before anything is sent; then each round runs its cells one after another —
//! experiments in file order, each against its registries in file order, each repetition —
//! in-process, through the same `push`/`pull`/`replay` code as the commands, with the run's
//! `Shutdown`. A registry that cannot be used (connection refused, credentials refused)
//! is checked once per round, its cells recorded as `error` with the reason, and the run
//! goes on. After every cell the checkpoint ([`checkpoint`]) and the comparison
//! ([`comparison`]) are rewritten; after every round `--cleanup` deletes what it pushed
//! ([`cleanup`]).
//!
//! Layout of `OUT` (default `results/<file stem>` next to the file):
//! `OUT/<experiment>/<registry>/` per cell, with `round-NNNN/` in monitoring mode
//! (`--every`/`--repeat`) and `rep-K/` for experiments with `repeat` > 1;
//! `OUT/.creb-run.json` (checkpoint), `OUT/comparison.csv`, `OUT/comparison.html`.
//!
//! Rounds: one by default; `--repeat N` runs N back to back; `--every D` starts round *k*
//! at `first start + k·D` (a round that overruns delays the next, missed slots are skipped,
//! never run in a burst) until `--until` (from the first start) or `--repeat` rounds.
//! Ctrl-C stops the running cell cleanly (its result marked interrupted), writes the
//! checkpoint and exits 130; `--resume` redoes that cell and goes on.
//!
//! Exit status: 0 every cell ok; 1 a cell failed (a check, an operation, or no result);
//! 2 the file or the flags are wrong; 130 interrupted.

pub mod cells;
pub mod cleanup;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::Args;

use self::cells::Command;
use self::cells::{Cell, Layout};
use crate::client::{ClientOptions, Verify};
use crate::experiment::checkpoint::{
    self, due_slot, CellRecord, CellStatus, Checkpoint, RoundRecord, ScheduleRecord,
};
use crate::experiment::config::{ExperimentFile, Kind};
use crate::metrics::live::LiveSlot;
use crate::metrics::live::SharedLive;
use crate::net::serve::MetricsServer;
use crate::report::comparison;
use crate::results::prepare_output_dir;
use crate::session::connect::{preflight, RegistryConfig};
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

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Checks every cell's command line (and trace paths, and `--fail-if` expressions) before
/// anything runs, so a typo fails in a second rather than hours into a run.
fn validate(file: &ExperimentFile) -> anyhow::Result<()> {
    let origin = file.path.display();
    for (e, exp) in file.experiments.iter().enumerate() {
        for t in exp.spec.traces.iter().flat_map(|t| t.0.iter()) {
            if !t.exists() {
                anyhow::bail!(
                    "{origin}:{}: experiment '{}': trace {} does not exist",
                    exp.line,
                    exp.spec.name,
                    t.display()
                );
            }
        }
        for &r in &exp.registries {
            let cell = Cell {
                experiment: e,
                registry: r,
                round: 0,
                rep: 0,
            };
            let fail = |m: String| {
                anyhow::anyhow!(
                    "{origin}:{}: experiment '{}' on registry '{}': {m}",
                    exp.line,
                    exp.spec.name,
                    file.registries[r].name
                )
            };
            let argv = cells::cell_argv(file, &cell, Path::new("out")).map_err(fail)?;
            let mut command = cells::parse(&argv).map_err(fail)?;
            crate::results::thresholds::parse_all(&command.output_mut().fail_if)
                .map_err(|e| fail(format!("{e:#}")))?;
        }
    }
    Ok(())
}

/// A shell-quoted command line, for `--dry-run`.
fn shell_line(argv: &[String]) -> String {
    let quote = |a: &String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
        {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    std::iter::once("creb-rs".to_owned())
        .chain(argv.iter().map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The schedule the flags ask for.
fn requested_schedule(args: &RunArgs) -> ScheduleRecord {
    let monitoring = args.every.is_some() || args.repeat.is_some();
    ScheduleRecord {
        rounds_layout: monitoring,
        every_s: args.every.map(|d| d.as_secs_f64()),
        until_s: args.until.map(|d| d.as_secs_f64()),
        rounds: if monitoring { args.repeat } else { Some(1) },
    }
}

/// On `--resume`, the recorded schedule wins; flags that contradict it are an error.
fn resumed_schedule(args: &RunArgs, recorded: ScheduleRecord) -> anyhow::Result<ScheduleRecord> {
    let asked = args.every.is_some() || args.until.is_some() || args.repeat.is_some();
    if asked && requested_schedule(args) != recorded {
        anyhow::bail!(
            "this run was started with {}; resume it with the same --every/--until/--repeat, or none",
            recorded
        );
    }
    Ok(recorded)
}

/// How a cell ended, as recorded.
struct CellEnd {
    status: CellStatus,
    exit: ExitStatus,
    message: Option<String>,
}

/// The state of a run in progress.
struct Runner<'a> {
    file: &'a ExperimentFile,
    out: PathBuf,
    layout: Layout,
    cp: Checkpoint,
    shutdown: Shutdown,
    cleanup: bool,
    /// Cells run by this invocation that ended failed or without a result.
    failures: usize,
    /// Those of them that only crossed a `--fail-if` threshold.
    threshold_failures: usize,
    /// Cells run by this invocation.
    ran: Vec<(String, String, u64, u32)>,
    /// Replay and push cleanup targets, by (experiment, registry).
    targets: HashMap<(usize, usize), Vec<cleanup::Target>>,
    /// `--quiet`: no progress notes.
    quiet: bool,
    /// `--metrics-listen`: what the endpoint serves, each cell's metrics in turn.
    live: Option<Arc<LiveSlot>>,
    /// `--metrics-push`.
    metrics_push: Option<url::Url>,
}

enum RoundEnd {
    Finished,
    Interrupted,
}

impl Runner<'_> {
    /// Runs the rounds of the schedule from `anchor` (the run's first start): with
    /// `--every`, each round at its slot (slots that passed while a round ran are skipped
    /// and said so), until `--rounds` or `--until`. Whether a stop interrupted them.
    async fn rounds(&mut self, anchor: SystemTime, quiet: bool) -> anyhow::Result<bool> {
        let schedule = self.cp.schedule;
        // The round to start with: the last recorded one if it is not complete, else the next.
        let mut next = match self.cp.rounds.iter().max_by_key(|r| r.round) {
            Some(last) if !last.complete => last.round - 1,
            Some(last) => last.round,
            None => 0,
        };
        let mut resuming = self
            .cp
            .rounds
            .iter()
            .any(|r| r.round == next + 1 && !r.complete);
        let every = schedule.every_s.map(Duration::from_secs_f64);
        let until = schedule.until_s.map(Duration::from_secs_f64);
        loop {
            if !resuming
                && schedule
                    .rounds
                    .is_some_and(|n| self.cp.finished_rounds() >= n)
            {
                return Ok(false);
            }
            let mut planned = SystemTime::now();
            if let Some(every) = every {
                let mut skipped = None;
                if !resuming {
                    let slot = due_slot(anchor, every, next, SystemTime::now());
                    if slot > next {
                        skipped = Some(next);
                    }
                    next = slot;
                }
                let offset = every.checked_mul(u32::try_from(next).unwrap_or(u32::MAX));
                planned = offset
                    .and_then(|o| anchor.checked_add(o))
                    .unwrap_or(planned);
                if !resuming && until.is_some_and(|until| offset.is_none_or(|o| o > until)) {
                    return Ok(false);
                }
                if let (Some(first), false) = (skipped, quiet) {
                    eprintln!(
                        "creb-rs: the start of rounds {}–{} passed while the previous round ran (or the run was stopped); continuing with round {}",
                        first + 1,
                        next,
                        next + 1
                    );
                }
                if planned > SystemTime::now() {
                    if !quiet {
                        eprintln!(
                            "creb-rs: round {} starts at {}",
                            next + 1,
                            humantime::format_rfc3339_seconds(planned)
                        );
                    }
                    if !sleep_until(planned, &self.shutdown).await {
                        return Ok(true);
                    }
                }
            }
            if let RoundEnd::Interrupted = self.run_round(next, planned).await? {
                return Ok(true);
            }
            resuming = false;
            next += 1;
            if every.is_none() && schedule.rounds.is_none() {
                return Ok(false);
            }
        }
    }

    /// A progress note on stderr, unless `--quiet`.
    fn note(&self, text: std::fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("creb-rs: {text}");
        }
    }

    fn save(&self) -> anyhow::Result<()> {
        self.cp.write(&self.out)?;
        if let Err(e) = comparison::write(self.file, &self.cp, &self.out) {
            eprintln!("creb-rs: warning: cannot write the comparison: {e:#}");
        }
        Ok(())
    }

    /// Resolves credentials and pings the registry: `Err` says why it cannot be used.
    async fn check_registry(&self, index: usize) -> Result<(), String> {
        let reg = &self.file.registries[index];
        if let Some(var) = &reg.password_env {
            if std::env::var(var).map_or(true, |v| v.is_empty()) {
                return Err(format!(
                    "password_env: environment variable {var} is not set"
                ));
            }
        }
        let args = cells::registry_args(reg)?;
        let config = RegistryConfig::try_from(&args).map_err(|e| format!("{e:#}"))?;
        let (recorder, aggregator) = crate::metrics::spawn_aggregator();
        let checked = match config
            .connect(recorder, ClientOptions::default(), 1, &self.shutdown)
            .await
        {
            Ok(connection) => {
                let display = config.display();
                match preflight(&connection, &display, &self.shutdown).await {
                    Ok(()) if self.shutdown.is_cancelled() => Err("interrupted".into()),
                    r => r,
                }
            }
            Err(e) => Err(format!("{e:#}")),
        };
        drop(aggregator.finish().await);
        checked
    }

    /// Runs one cell in-process.
    async fn run_cell(&self, cell: &Cell, dir: &Path) -> CellEnd {
        let error = |message: String| CellEnd {
            status: CellStatus::Error,
            exit: ExitStatus::Usage,
            message: Some(message),
        };
        let argv = match cells::cell_argv(self.file, cell, dir) {
            Ok(a) => a,
            Err(m) => return error(m),
        };
        let mut command = match cells::parse(&argv) {
            Ok(c) => c,
            Err(m) => return error(m),
        };
        {
            let output = command.output_mut();
            output.live = self.live.as_ref().map(|slot| SharedLive {
                slot: Arc::clone(slot),
                cell: self.layout.cell_dir(self.file, cell).display().to_string(),
            });
            if output.metrics_push.is_none() {
                output.metrics_push.clone_from(&self.metrics_push);
            }
        }
        let shutdown = self.shutdown.clone();
        let result = match command {
            Command::Push(a) => crate::commands::push::run(a, shutdown).await,
            Command::Pull(a) => crate::commands::pull::run(a, shutdown).await,
            Command::Replay(a) => crate::commands::replay::run(*a, shutdown).await,
            Command::Capacity(a) => crate::commands::capacity::run(*a, shutdown).await,
        };
        match result {
            Ok(ExitStatus::Success) => CellEnd {
                status: CellStatus::Ok,
                exit: ExitStatus::Success,
                message: None,
            },
            Ok(ExitStatus::Failed) => CellEnd {
                status: CellStatus::Failed,
                exit: ExitStatus::Failed,
                message: Some("an operation failed".into()),
            },
            Ok(ExitStatus::ThresholdFailed) => CellEnd {
                status: CellStatus::Failed,
                exit: ExitStatus::ThresholdFailed,
                message: Some("a --fail-if threshold held".into()),
            },
            Ok(s @ (ExitStatus::Interrupted | ExitStatus::Terminated)) => CellEnd {
                status: CellStatus::Interrupted,
                exit: s,
                message: Some("interrupted; redone by --resume".into()),
            },
            Ok(ExitStatus::Usage) => {
                error("the registry could not be used (see the error above)".into())
            }
            Err(e) => error(format!("{e:#}")),
        }
    }

    /// Runs (or finishes) round `round` (0-based).
    async fn run_round(&mut self, round: u64, planned: SystemTime) -> anyhow::Result<RoundEnd> {
        let label = round + 1;
        match self.cp.round_mut(label) {
            Some(r) => r.finished_at = None,
            None => self.cp.rounds.push(RoundRecord {
                round: label,
                planned_at: rfc3339(planned),
                started_at: now_rfc3339(),
                finished_at: None,
                complete: false,
                cleanup: None,
            }),
        }
        self.save()?;
        let all = cells::round_cells(self.file, round);
        let mut checked: HashMap<usize, Result<(), String>> = HashMap::new();
        for (i, cell) in all.iter().enumerate() {
            let place = (i + 1, all.len());
            if let Some(end) = self.round_cell(cell, label, place, &mut checked).await? {
                return Ok(end);
            }
        }
        if self.cleanup {
            let done = self
                .cp
                .round_mut(label)
                .is_some_and(|r| r.cleanup.is_some());
            if !done {
                let records = self.clean_round(label).await;
                if self.shutdown.is_cancelled() {
                    return Ok(RoundEnd::Interrupted);
                }
                if let Some(r) = self.cp.round_mut(label) {
                    r.cleanup = Some(records);
                }
            }
        }
        let complete = all.iter().all(|cell| {
            let exp = &self.file.experiments[cell.experiment];
            let reg = &self.file.registries[cell.registry];
            self.cp
                .cell(&exp.spec.name, &reg.name, label, cell.rep + 1)
                .is_some_and(|c| checkpoint::is_complete(c, &self.out))
        });
        if let Some(r) = self.cp.round_mut(label) {
            r.finished_at = Some(now_rfc3339());
            r.complete = complete;
        }
        self.save()?;
        Ok(RoundEnd::Finished)
    }

    /// One cell of round `label` (number `place.0` of `place.1`): skipped when it is
    /// complete already, failed unrun when its registry does not answer (checked once a
    /// round, in `checked`), else run and recorded. `Some` when a stop ends the round.
    async fn round_cell(
        &mut self,
        cell: &Cell,
        label: u64,
        place: (usize, usize),
        checked: &mut HashMap<usize, Result<(), String>>,
    ) -> anyhow::Result<Option<RoundEnd>> {
        let exp = &self.file.experiments[cell.experiment];
        let reg = &self.file.registries[cell.registry];
        let previous = self.cp.cell(&exp.spec.name, &reg.name, label, cell.rep + 1);
        if previous.is_some_and(|p| checkpoint::is_complete(p, &self.out)) {
            return Ok(None);
        }
        if self.shutdown.is_cancelled() {
            return Ok(Some(RoundEnd::Interrupted));
        }
        let what = format!(
            "[{}/{}] {} on {}{}{}",
            place.0,
            place.1,
            exp.spec.name,
            reg.name,
            if self.layout.rounds {
                format!(", round {label}")
            } else {
                String::new()
            },
            if exp.spec.repetitions() > 1 {
                format!(", rep {}", cell.rep + 1)
            } else {
                String::new()
            },
        );
        let rel = self.layout.cell_dir(self.file, cell);
        let mut record = CellRecord {
            experiment: exp.spec.name.clone(),
            registry: reg.name.clone(),
            round: label,
            rep: cell.rep + 1,
            dir: rel.clone(),
            status: CellStatus::Running,
            exit_code: None,
            started_at: now_rfc3339(),
            finished_at: None,
            message: None,
            attempts: previous.map_or(0, |p| p.attempts) + 1,
        };
        let check = match checked.get(&cell.registry) {
            Some(c) => c.clone(),
            None => {
                let c = self.check_registry(cell.registry).await;
                checked.insert(cell.registry, c.clone());
                c
            }
        };
        if self.shutdown.is_cancelled() {
            return Ok(Some(RoundEnd::Interrupted));
        }
        self.ran.push((
            record.experiment.clone(),
            record.registry.clone(),
            label,
            record.rep,
        ));
        if let Err(message) = check {
            eprintln!(
                "creb-rs: {what}: skipped: registry '{}': {message}",
                record.registry
            );
            record.status = CellStatus::Error;
            record.exit_code = Some(ExitStatus::Usage.code());
            record.finished_at = Some(now_rfc3339());
            record.message = Some(format!("registry '{}': {message}", record.registry));
            self.failures += 1;
            self.cp.put_cell(record);
            self.save()?;
            return Ok(None);
        }
        let dir = self.out.join(&rel);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear {} to redo the cell", dir.display()))?;
        }
        self.cp.put_cell(record.clone());
        self.save()?;
        self.note(format_args!("{what}: running → {}", dir.display()));
        let end = self.run_cell(cell, &dir).await;
        self.record_cell(record, &end, &dir, &what)?;
        Ok((end.status == CellStatus::Interrupted).then_some(RoundEnd::Interrupted))
    }

    /// Records how a cell ended in the checkpoint, and says it.
    fn record_cell(
        &mut self,
        mut record: CellRecord,
        end: &CellEnd,
        dir: &Path,
        what: &str,
    ) -> anyhow::Result<()> {
        record.status = end.status;
        record.exit_code = Some(end.exit.code());
        record.finished_at = Some(now_rfc3339());
        record.message.clone_from(&end.message);
        let line = match (
            crate::results::read_summary(dir),
            crate::report::comparison::CapacityFacts::read(dir),
        ) {
            (Ok(s), _) => format!(
                "{} operations, {} errors, {:.1} op/s",
                s.totals.requests, s.totals.errors, s.throughput.requests_per_s
            ),
            (_, Some(c)) => c.describe(),
            _ => record.message.clone().unwrap_or_default(),
        };
        self.note(format_args!("{what}: {} ({line})", end.status.name()));
        if matches!(end.status, CellStatus::Failed | CellStatus::Error) {
            self.failures += 1;
            if end.exit == ExitStatus::ThresholdFailed {
                self.threshold_failures += 1;
            }
        }
        self.cp.put_cell(record);
        self.save()
    }

    /// `--cleanup` for every registry of the round.
    async fn clean_round(&mut self, label: u64) -> Vec<checkpoint::CleanupRecord> {
        let mut records = Vec::new();
        for (r, reg) in self.file.registries.iter().enumerate() {
            // Only where this round pushed something: a registry none of whose cells got a
            // result (unreachable, credentials refused) is left alone.
            let pushed = self.cp.cells.iter().any(|c| {
                c.round == label
                    && c.registry == reg.name
                    && matches!(
                        c.status,
                        CellStatus::Ok | CellStatus::Failed | CellStatus::Interrupted
                    )
            });
            if !pushed {
                continue;
            }
            let mut targets = Vec::new();
            for (e, exp) in self.file.experiments.iter().enumerate() {
                if !exp.registries.contains(&r) || exp.spec.kind == Kind::Pull {
                    continue;
                }
                if !self.targets.contains_key(&(e, r)) {
                    match cleanup::targets(self.file, e, r).await {
                        Ok(t) => {
                            self.targets.insert((e, r), t);
                        }
                        Err(err) => {
                            eprintln!("creb-rs: cleanup: experiment '{}': {err:#}", exp.spec.name);
                            continue;
                        }
                    }
                }
                targets.extend(self.targets[&(e, r)].iter().cloned());
            }
            if targets.is_empty() {
                continue;
            }
            let record = match self.cleanup_client(r).await {
                Ok((client, aggregator)) => {
                    let cleaned = cleanup::clean(&client, &targets, &self.shutdown).await;
                    drop(client);
                    // The samples of deletions are not a measurement; they are dropped.
                    drop(aggregator.finish().await);
                    record_of(&reg.name, cleaned)
                }
                Err(message) => checkpoint::CleanupRecord {
                    registry: reg.name.clone(),
                    errors: 1,
                    messages: vec![message],
                    ..Default::default()
                },
            };
            self.note(format_args!(
                "cleanup {}: {} manifests and {} blobs deleted, {} refused, {} not found, {} errors{}",
                reg.name,
                record.manifests_deleted,
                record.blobs_deleted,
                record.refused,
                record.not_found,
                record.errors,
                if record.messages.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", record.messages.join("; "))
                }
            ));
            records.push(record);
        }
        records
    }

    async fn cleanup_client(
        &self,
        index: usize,
    ) -> Result<
        (
            crate::client::RegistryClient,
            crate::metrics::AggregatorHandle,
        ),
        String,
    > {
        let reg = &self.file.registries[index];
        let args = cells::registry_args(reg)?;
        let config = RegistryConfig::try_from(&args).map_err(|e| format!("{e:#}"))?;
        let (recorder, aggregator) = crate::metrics::spawn_aggregator();
        let options = ClientOptions {
            push_scopes: true,
            verify: Verify::None,
            ..ClientOptions::default()
        };
        match config.connect(recorder, options, 4, &self.shutdown).await {
            Ok(connection) => Ok((connection.client, aggregator)),
            Err(e) => {
                drop(aggregator.finish().await);
                Err(format!("{e:#}"))
            }
        }
    }
}

/// Sleeps until `t` on the wall clock (in steps, so a changed clock is noticed); `false`
/// if the run was interrupted.
async fn sleep_until(t: SystemTime, shutdown: &Shutdown) -> bool {
    loop {
        let Ok(left) = t.duration_since(SystemTime::now()) else {
            return true;
        };
        let step = left.min(Duration::from_secs(30));
        tokio::select! {
            _ = tokio::time::sleep(step) => {}
            _ = shutdown.token().cancelled() => return false,
        }
    }
}

/// Runs `creb-rs run`.
pub async fn run(args: RunArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let file = ExperimentFile::load(&args.experiment)?;
    validate(&file)?;
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
    prepare_output_dir(&out)?;
    let cp = open_checkpoint(&args, &file, &out)?;
    let schedule = cp.schedule;
    let anchor = humantime::parse_rfc3339_weak(&cp.started_at)
        .with_context(|| format!("checkpoint start '{}' is not RFC 3339", cp.started_at))?;
    let mut runner = Runner {
        file: &file,
        out: out.clone(),
        layout: Layout {
            rounds: schedule.rounds_layout,
        },
        cp,
        shutdown: shutdown.clone(),
        cleanup: args.cleanup,
        failures: 0,
        threshold_failures: 0,
        ran: Vec::new(),
        targets: HashMap::new(),
        quiet: args.quiet,
        live: None,
        metrics_push: args.metrics_push.clone(),
    };
    runner.save()?;
    let server = match args.metrics_listen {
        Some(addr) => {
            let slot = Arc::new(LiveSlot::default());
            let server = MetricsServer::bind(addr, Arc::clone(&slot))
                .await
                .with_context(|| format!("--metrics-listen {addr}: cannot listen there"))?;
            runner.note(format_args!("metrics at http://{}/metrics", server.addr()));
            runner.live = Some(slot);
            Some(server)
        }
        None => None,
    };
    let interrupted = runner.rounds(anchor, args.quiet).await? || shutdown.is_cancelled();
    runner.save()?;
    if let Some(server) = server {
        server.finish(args.metrics_linger).await;
    }
    let status = if interrupted {
        ExitStatus::Interrupted
    } else if runner.failures > 0 && runner.failures == runner.threshold_failures {
        ExitStatus::ThresholdFailed
    } else if runner.failures > 0 {
        ExitStatus::Failed
    } else {
        ExitStatus::Success
    };
    if !args.quiet {
        show_end(&args, &runner, &out, status, interrupted)?;
    }
    Ok(status)
}

/// `--dry-run`: the plan of the run and every cell's command line of the first round.
fn dry_run(args: &RunArgs, file: &ExperimentFile, out: &Path) -> anyhow::Result<()> {
    let schedule = requested_schedule(args);
    let layout = Layout {
        rounds: schedule.rounds_layout,
    };
    println!(
        "{} experiments, {} registries: {} cells per round ({}); results in {}",
        file.experiments.len(),
        file.registries.len(),
        cells::round_cells(file, 0).len(),
        schedule,
        out.display()
    );
    for cell in cells::round_cells(file, 0) {
        let dir = out.join(layout.cell_dir(file, &cell));
        let argv = cells::cell_argv(file, &cell, &dir).map_err(anyhow::Error::msg)?;
        let exp = &file.experiments[cell.experiment];
        println!(
            "{} on {}{}:\n  {}",
            exp.spec.name,
            file.registries[cell.registry].name,
            if exp.spec.repetitions() > 1 {
                format!(" (rep {})", cell.rep + 1)
            } else {
                String::new()
            },
            shell_line(&argv)
        );
    }
    Ok(())
}

/// The checkpoint of the run in `out`: the earlier one with `--resume` (its schedule as the
/// flags may extend it), a new one when there is none; an earlier run without `--resume`
/// is an error.
fn open_checkpoint(
    args: &RunArgs,
    file: &ExperimentFile,
    out: &Path,
) -> anyhow::Result<Checkpoint> {
    match Checkpoint::read(out)? {
        Some(cp) if args.resume => {
            if cp.experiment_hash != file.hash {
                eprintln!(
                    "creb-rs: warning: {} changed since this run started; complete cells are kept as they are",
                    args.experiment.display()
                );
            }
            let schedule = resumed_schedule(args, cp.schedule)?;
            Ok(Checkpoint { schedule, ..cp })
        }
        Some(_) => anyhow::bail!(
            "{} holds an earlier run ({}); continue it with --resume, or choose another --output-dir",
            out.display(),
            checkpoint::FILE_NAME
        ),
        None => {
            if args.resume {
                eprintln!(
                    "creb-rs: nothing to resume in {}; starting the run",
                    out.display()
                );
            }
            Ok(Checkpoint {
                version: checkpoint::VERSION,
                tool_version: env!("CARGO_PKG_VERSION").into(),
                experiment_file: args.experiment.display().to_string(),
                experiment_hash: file.hash.clone(),
                started_at: now_rfc3339(),
                schedule: requested_schedule(args),
                rounds: Vec::new(),
                cells: Vec::new(),
            })
        }
    }
}

/// The end of a run on the terminal: the checkpoint as JSON, or the table of what ran and
/// how to continue an interrupted run.
fn show_end(
    args: &RunArgs,
    runner: &Runner<'_>,
    out: &Path,
    status: ExitStatus,
    interrupted: bool,
) -> anyhow::Result<()> {
    if args.json {
        let json = serde_json::json!({
            "output_dir": out,
            "exit_code": status.code(),
            "checkpoint": runner.cp,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    if runner.ran.is_empty() && !interrupted {
        println!("nothing left to run in {}", out.display());
    } else {
        print!(
            "{}",
            comparison::ran_text(runner.file, &runner.cp, out, &runner.ran)
        );
    }
    if interrupted {
        eprintln!(
            "creb-rs: interrupted; continue with: creb-rs run {} --output-dir {} --resume",
            args.experiment.display(),
            out.display()
        );
    }
    Ok(())
}

/// A cleanup's counts as the checkpoint keeps them, by registry.
fn record_of(registry: &str, c: cleanup::Cleaned) -> checkpoint::CleanupRecord {
    checkpoint::CleanupRecord {
        registry: registry.to_owned(),
        manifests_deleted: c.manifests_deleted,
        blobs_deleted: c.blobs_deleted,
        refused: c.refused,
        not_found: c.not_found,
        errors: c.errors,
        messages: c.messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_keeps_the_recorded_schedule() {
        let args = |every: Option<u64>, repeat: Option<u64>| RunArgs {
            experiment: "x.toml".into(),
            output_dir: None,
            resume: true,
            every: every.map(Duration::from_secs),
            until: None,
            repeat,
            cleanup: false,
            dry_run: false,
            json: false,
            metrics_listen: None,
            metrics_linger: Duration::ZERO,
            metrics_push: None,
            quiet: false,
            runtime: crate::commands::args::RuntimeArgs { threads: None },
        };
        let recorded = requested_schedule(&args(Some(3600), Some(4)));
        assert!(recorded.rounds_layout);
        assert_eq!(
            resumed_schedule(&args(None, None), recorded).unwrap(),
            recorded
        );
        assert_eq!(
            resumed_schedule(&args(Some(3600), Some(4)), recorded).unwrap(),
            recorded
        );
        let e = resumed_schedule(&args(Some(60), None), recorded).unwrap_err();
        assert!(e.to_string().contains("--every 1h"), "{e}");
        let single = requested_schedule(&args(None, None));
        assert_eq!(single.rounds, Some(1));
        assert!(!single.rounds_layout);
    }

    #[test]
    fn dry_run_lines_are_shell_quoted() {
        let line = shell_line(&[
            "push".into(),
            "--password-cmd".into(),
            "printf %s \"$PW\"".into(),
            "--fail-if".into(),
            "p99(blob_get) > 2s".into(),
        ]);
        assert_eq!(
            line,
            "creb-rs push --password-cmd 'printf %s \"$PW\"' --fail-if 'p99(blob_get) > 2s'"
        );
    }
}
