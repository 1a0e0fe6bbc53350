//! The experiment runner (`creb-rs run`): every cell of an experiment file, in rounds,
//! resumable, with a combined comparison; the cells themselves run through a
//! [`CellDriver`] (the command layer's: a cell becomes the command line a person would
//! type), so the runner knows no flag.
//!
//! Each round runs its cells one after another — experiments in file order, each against
//! its registries in file order, each repetition — in-process, with the run's `Shutdown`.
//! A registry that cannot be used (connection refused, credentials refused) is checked
//! once per round, its cells recorded as `error` with the reason, and the run goes on.
//! After every cell the checkpoint ([`crate::experiment::checkpoint`]) and the comparison
//! ([`crate::report::comparison`]) are rewritten; after every round `--cleanup` deletes
//! what it pushed ([`cleanup`]).
//!
//! Rounds: one by default; `repeat` runs N back to back; `every` starts round *k* at
//! `first start + k·every` (a round that overruns delays the next, missed slots are
//! skipped, never run in a burst) until `until` (from the first start) or `repeat` rounds.
//! A stop ends the running cell cleanly (its result marked interrupted) and writes the
//! checkpoint; a resumed run redoes that cell and goes on.

pub mod cleanup;
pub mod driver;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;

pub use self::driver::{CellDriver, Observers, Pushed};
use crate::client::ClientOptions;
use crate::experiment::cells::{round_cells, Cell, Layout};
use crate::experiment::checkpoint::{
    self, due_slot, CellRecord, CellStatus, Checkpoint, RoundRecord, ScheduleRecord,
};
use crate::experiment::config::ExperimentFile;
use crate::metrics::live::{LiveSlot, SharedLive};
use crate::report::comparison;
use crate::results::prepare_output_dir;
use crate::session::connect::preflight;
use crate::session::status::ExitStatus;
use crate::shutdown::Shutdown;

/// When rounds start, as asked (`--every`, `--until`, `--repeat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Start a round every this long.
    pub every: Option<Duration>,
    /// With `every`: start no round later than this after the first.
    pub until: Option<Duration>,
    /// Run this many rounds.
    pub repeat: Option<u64>,
}

impl Schedule {
    /// The schedule as the checkpoint records it.
    pub fn record(&self) -> ScheduleRecord {
        let monitoring = self.every.is_some() || self.repeat.is_some();
        ScheduleRecord {
            rounds_layout: monitoring,
            every_s: self.every.map(|d| d.as_secs_f64()),
            until_s: self.until.map(|d| d.as_secs_f64()),
            rounds: if monitoring { self.repeat } else { Some(1) },
        }
    }

    /// On resume, the recorded schedule wins; a schedule asked for that contradicts it is
    /// an error.
    pub fn resumed(&self, recorded: ScheduleRecord) -> anyhow::Result<ScheduleRecord> {
        if *self != Schedule::default() && self.record() != recorded {
            anyhow::bail!(
                "this run was started with {}; resume it with the same --every/--until/--repeat, or none",
                recorded
            );
        }
        Ok(recorded)
    }
}

/// What a run is asked to do beyond its file.
#[derive(Debug, Clone, Default)]
pub struct RunSettings {
    /// The experiment file as named (recorded in the checkpoint).
    pub experiment: PathBuf,
    /// Where the results go: a directory per cell, the checkpoint, the comparison.
    pub output_dir: PathBuf,
    /// Continue the run recorded in `output_dir`.
    pub resume: bool,
    pub schedule: Schedule,
    /// After each round, delete what it pushed.
    pub cleanup: bool,
    /// No progress notes on stderr.
    pub quiet: bool,
    /// Where each cell's live metrics are served, in turn.
    pub live: Option<Arc<LiveSlot>>,
    /// Where each cell's live metrics are pushed (where the cell names no place of its own).
    pub metrics_push: Option<url::Url>,
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    /// 0 every cell ok; 1 a cell failed (a check, an operation, or no result), 3 only
    /// `--fail-if` thresholds held; 130 stopped.
    pub status: ExitStatus,
    /// A stop ended it before its schedule did.
    pub interrupted: bool,
    /// The checkpoint as written last.
    pub checkpoint: Checkpoint,
    /// The cells this invocation ran: experiment, registry, round, repetition (1-based).
    pub ran: Vec<(String, String, u64, u32)>,
}

/// Checks every cell (and its traces) before anything runs, so a typo fails in a second
/// rather than hours into a run.
pub fn check<D: CellDriver>(file: &ExperimentFile, driver: &D) -> anyhow::Result<()> {
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
            driver.check(file, &cell).map_err(|m| {
                anyhow::anyhow!(
                    "{origin}:{}: experiment '{}' on registry '{}': {m}",
                    exp.line,
                    exp.spec.name,
                    file.registries[r].name
                )
            })?;
        }
    }
    Ok(())
}

/// Runs the experiment file `file` as `settings` ask, each cell through `driver`, until
/// its schedule ends or `shutdown` stops it. Errors: the output directory or the
/// checkpoint cannot be used (a cell that fails is recorded, never an error).
pub async fn run<D: CellDriver>(
    file: &ExperimentFile,
    settings: &RunSettings,
    driver: &D,
    shutdown: &Shutdown,
) -> anyhow::Result<Outcome> {
    let out = &settings.output_dir;
    prepare_output_dir(out)?;
    let cp = open_checkpoint(settings, file)?;
    let anchor = humantime::parse_rfc3339_weak(&cp.started_at)
        .with_context(|| format!("checkpoint start '{}' is not RFC 3339", cp.started_at))?;
    let mut runner = Runner {
        file,
        driver,
        out: out.clone(),
        layout: Layout {
            rounds: cp.schedule.rounds_layout,
        },
        cp,
        shutdown: shutdown.clone(),
        cleanup: settings.cleanup,
        failures: 0,
        threshold_failures: 0,
        ran: Vec::new(),
        targets: HashMap::new(),
        quiet: settings.quiet,
        live: settings.live.clone(),
        metrics_push: settings.metrics_push.clone(),
    };
    runner.save()?;
    let interrupted = runner.rounds(anchor).await? || shutdown.is_cancelled();
    runner.save()?;
    let status = if interrupted {
        ExitStatus::Interrupted
    } else if runner.failures > 0 && runner.failures == runner.threshold_failures {
        ExitStatus::ThresholdFailed
    } else if runner.failures > 0 {
        ExitStatus::Failed
    } else {
        ExitStatus::Success
    };
    Ok(Outcome {
        status,
        interrupted,
        checkpoint: runner.cp,
        ran: runner.ran,
    })
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// How a cell ended, as recorded.
struct CellEnd {
    status: CellStatus,
    exit: ExitStatus,
    message: Option<String>,
}

impl CellEnd {
    /// A cell with no usable result, and why.
    fn error(message: String) -> CellEnd {
        CellEnd {
            status: CellStatus::Error,
            exit: ExitStatus::Usage,
            message: Some(message),
        }
    }

    /// How a cell that ran with this result ended.
    fn of(result: anyhow::Result<ExitStatus>) -> CellEnd {
        let end = |status, exit, message: &str| CellEnd {
            status,
            exit,
            message: Some(message.to_owned()),
        };
        match result {
            Ok(ExitStatus::Success) => CellEnd {
                status: CellStatus::Ok,
                exit: ExitStatus::Success,
                message: None,
            },
            Ok(ExitStatus::Failed) => end(
                CellStatus::Failed,
                ExitStatus::Failed,
                "an operation failed",
            ),
            Ok(ExitStatus::ThresholdFailed) => end(
                CellStatus::Failed,
                ExitStatus::ThresholdFailed,
                "a --fail-if threshold held",
            ),
            Ok(s @ (ExitStatus::Interrupted | ExitStatus::Terminated)) => end(
                CellStatus::Interrupted,
                s,
                "interrupted; redone by --resume",
            ),
            Ok(ExitStatus::Usage) => {
                CellEnd::error("the registry could not be used (see the error above)".into())
            }
            Err(e) => CellEnd::error(format!("{e:#}")),
        }
    }
}

/// The state of a run in progress.
struct Runner<'a, D> {
    file: &'a ExperimentFile,
    driver: &'a D,
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
    /// Cleanup targets, by (experiment, registry).
    targets: HashMap<(usize, usize), Vec<driver::Target>>,
    /// No progress notes.
    quiet: bool,
    /// What the metrics endpoint serves, each cell's metrics in turn.
    live: Option<Arc<LiveSlot>>,
    metrics_push: Option<url::Url>,
}

enum RoundEnd {
    Finished,
    Interrupted,
}

impl<D: CellDriver> Runner<'_, D> {
    /// Runs the rounds of the schedule from `anchor` (the run's first start): with `every`,
    /// each round at its slot (slots that passed while a round ran are skipped and said so),
    /// until the schedule's rounds are done or `until` has passed. Whether a stop
    /// interrupted them.
    #[allow(clippy::too_many_lines)]
    async fn rounds(&mut self, anchor: SystemTime) -> anyhow::Result<bool> {
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
                if let (Some(first), false) = (skipped, self.quiet) {
                    eprintln!(
                        "creb-rs: the start of rounds {}–{} passed while the previous round ran (or the run was stopped); continuing with round {}",
                        first + 1,
                        next,
                        next + 1
                    );
                }
                if planned > SystemTime::now() {
                    if !self.quiet {
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

    /// A progress note on stderr, unless quiet.
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
        let config = self.driver.registry(reg)?;
        let (recorder, aggregator) = crate::metrics::AggregatorBuilder::default().spawn();
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

    /// Runs one cell in-process, through the driver.
    async fn run_cell(&self, cell: &Cell, dir: &Path) -> CellEnd {
        let observers = Observers {
            live: self.live.as_ref().map(|slot| SharedLive {
                slot: Arc::clone(slot),
                cell: self.layout.cell_dir(self.file, cell).display().to_string(),
            }),
            metrics_push: self.metrics_push.clone(),
        };
        let result = self
            .driver
            .run(self.file, cell, dir, observers, self.shutdown.clone())
            .await;
        CellEnd::of(result)
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
        let all = round_cells(self.file, round);
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
    #[allow(clippy::too_many_lines)]
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

/// The checkpoint of the run in `out`: the earlier one with `--resume` (its schedule as the
/// flags may extend it), a new one when there is none; an earlier run without `--resume`
/// is an error.
fn open_checkpoint(settings: &RunSettings, file: &ExperimentFile) -> anyhow::Result<Checkpoint> {
    let out = &settings.output_dir;
    match Checkpoint::read(out)? {
        Some(cp) if settings.resume => {
            if cp.experiment_hash != file.hash {
                eprintln!(
                    "creb-rs: warning: {} changed since this run started; complete cells are kept as they are",
                    settings.experiment.display()
                );
            }
            let schedule = settings.schedule.resumed(cp.schedule)?;
            Ok(Checkpoint { schedule, ..cp })
        }
        Some(_) => anyhow::bail!(
            "{} holds an earlier run ({}); continue it with --resume, or choose another --output-dir",
            out.display(),
            checkpoint::FILE_NAME
        ),
        None => {
            if settings.resume {
                eprintln!(
                    "creb-rs: nothing to resume in {}; starting the run",
                    out.display()
                );
            }
            Ok(Checkpoint {
                version: checkpoint::VERSION,
                tool_version: env!("CARGO_PKG_VERSION").into(),
                experiment_file: settings.experiment.display().to_string(),
                experiment_hash: file.hash.clone(),
                started_at: now_rfc3339(),
                schedule: settings.schedule.record(),
                rounds: Vec::new(),
                cells: Vec::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::experiment::config::RegistrySpec;

    /// A driver of the test's own: it records what it ran and ends each cell as its
    /// experiment's name says (`ok…`, `slow…` a `--fail-if` threshold held).
    #[derive(Default)]
    struct Script {
        base: String,
        ran: Mutex<Vec<(PathBuf, bool)>>,
    }

    impl CellDriver for Script {
        fn check(&self, _: &ExperimentFile, _: &Cell) -> Result<(), String> {
            Ok(())
        }

        fn registry(
            &self,
            _: &RegistrySpec,
        ) -> Result<crate::session::connect::RegistryConfig, String> {
            let url: url::Url = self.base.parse().map_err(|e| format!("{e}"))?;
            Ok(crate::session::connect::RegistryConfig {
                base: url.clone(),
                endpoints: vec![url],
                transport: crate::net::TransportConfig::default(),
                credentials: crate::auth::credentials::CredentialOptions {
                    anonymous: true,
                    ..Default::default()
                },
                retry: crate::client::retry::RetryPolicy::default(),
            })
        }

        fn pushed(&self, _: &ExperimentFile, _: usize, _: usize) -> Result<Pushed, String> {
            Ok(Pushed::Nothing)
        }

        async fn run(
            &self,
            file: &ExperimentFile,
            cell: &Cell,
            dir: &Path,
            observers: Observers,
            _: Shutdown,
        ) -> anyhow::Result<ExitStatus> {
            self.ran
                .lock()
                .unwrap()
                .push((dir.to_path_buf(), observers.live.is_some()));
            Ok(
                if file.experiments[cell.experiment]
                    .spec
                    .name
                    .starts_with("slow")
                {
                    ExitStatus::ThresholdFailed
                } else {
                    ExitStatus::Success
                },
            )
        }
    }

    /// A registry that answers every request `200` (the runner's check is `GET /v2/`), until
    /// the test ends.
    async fn answering_registry() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_run_is_a_library_call_with_a_driver_of_ones_own() {
        let text = r#"
[[registry]]
name = "local"
url = "http://127.0.0.1:1"

[[experiment]]
name = "ok-push"
kind = "push"
layers = 1
layer_size = "1KiB"

[[experiment]]
name = "slow-pull"
kind = "pull"
repo = "x"
repeat = 2
"#;
        let tmp = tempfile::tempdir().unwrap();
        let file = ExperimentFile::parse(text, &tmp.path().join("x.toml"), tmp.path()).unwrap();
        let driver = Script {
            base: answering_registry().await,
            ..Script::default()
        };
        check(&file, &driver).unwrap();
        let settings = RunSettings {
            experiment: "x.toml".into(),
            output_dir: tmp.path().join("out"),
            live: Some(Arc::new(LiveSlot::default())),
            ..RunSettings::default()
        };
        let outcome = run(&file, &settings, &driver, &Shutdown::new())
            .await
            .unwrap();
        // Only thresholds held: the run's status says so, and every cell is recorded.
        assert_eq!(outcome.status, ExitStatus::ThresholdFailed);
        assert!(!outcome.interrupted);
        let out = tmp.path().join("out");
        let ran = driver.ran.lock().unwrap().clone();
        assert_eq!(
            ran,
            vec![
                (out.join("ok-push/local"), true),
                (out.join("slow-pull/local/rep-1"), true),
                (out.join("slow-pull/local/rep-2"), true),
            ]
        );
        let statuses: Vec<_> = outcome
            .checkpoint
            .cells
            .iter()
            .map(|c| (c.experiment.as_str(), c.rep, c.status))
            .collect();
        assert_eq!(
            statuses,
            [
                ("ok-push", 1, CellStatus::Ok),
                ("slow-pull", 1, CellStatus::Failed),
                ("slow-pull", 2, CellStatus::Failed),
            ]
        );
        assert_eq!(outcome.ran.len(), 3);
        // Written where a resumed run finds it.
        assert!(Checkpoint::read(&out).unwrap().is_some());
    }

    #[test]
    fn a_resumed_run_keeps_the_recorded_schedule() {
        let asked = |every: Option<u64>, repeat: Option<u64>| Schedule {
            every: every.map(Duration::from_secs),
            until: None,
            repeat,
        };
        let recorded = asked(Some(3600), Some(4)).record();
        assert!(recorded.rounds_layout);
        assert_eq!(asked(None, None).resumed(recorded).unwrap(), recorded);
        assert_eq!(
            asked(Some(3600), Some(4)).resumed(recorded).unwrap(),
            recorded
        );
        let e = asked(Some(60), None).resumed(recorded).unwrap_err();
        assert!(e.to_string().contains("--every 1h"), "{e}");
        let single = asked(None, None).record();
        assert_eq!(single.rounds, Some(1));
        assert!(!single.rounds_layout);
    }
}
