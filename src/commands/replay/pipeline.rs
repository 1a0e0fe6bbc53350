//! The run phase of a replay: a planner thread streams pass 2 (the spooled items, or the
//! trace read again) into planned operations through a bounded channel; the executor
//! carries them out from the shared anchor in stress or delay mode, while a canary and the
//! process CPU clock watch the generator; the result is summarized, checked and published.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::config::ReplayConfig;
use super::context::{clients_for, endpoint_summaries, shard_of, Context};
use super::validity::{unsized_uploads_warning, validity_warnings, warn};
use crate::client::RegistryClient;
use crate::commands::args::OutputArgs;
use crate::commands::connect::{config_json, endpoint_links};
use crate::commands::session::{exit_status, Finished};
use crate::commands::status::ExitStatus;
use crate::exec::canary::{available_cores, process_cpu_time, spawn_canary, CanaryReport};
use crate::exec::pacer::wait_for_anchor;
use crate::exec::{ExecOptions, ExecReport, Executor, Targets};
use crate::metrics::hist::Percentiles;
use crate::metrics::Recorder;
use crate::plan::catalog::Catalog;
use crate::plan::{PlanItem, Planner};
use crate::progress::Progress;
use crate::results::summary::Checks;
use crate::results::{Meta, MetaInput, RunInfo, Summary, TraceCounts, Warning};
use crate::route::health::Health;
use crate::trace::{Spool, TraceInput, TraceReader};

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

/// What the planner thread reports when it ends.
#[derive(Debug, Default)]
struct PlannerEnd {
    counts: crate::plan::PlanCounts,
    /// Records of operations planned but not handed over (the run stopped).
    unsent: u64,
}

/// What the run measured, before it is summarized.
struct Ran {
    exec: ExecReport,
    aggregator: crate::metrics::Aggregator,
    planner: anyhow::Result<PlannerEnd>,
    health: Arc<Health>,
    /// When the schedule started, on the wall clock, and how far from `--start-at`.
    started_at: SystemTime,
    start_skew_ms: Option<f64>,
    anchor_wall: SystemTime,
    checks: Checks,
    warnings: Vec<Warning>,
}

/// The run phase: pass 2 planned on a blocking thread, executed on the runtime, measured,
/// checked and published.
pub(super) async fn run_phase(
    context: &Context<'_>,
    catalog: Arc<Catalog>,
    input: TraceInput,
    spool: Option<Spool>,
    prewarm_gaps: Option<String>,
) -> anyhow::Result<ExitStatus> {
    let session = context.session;
    // The registry's own counters before the run (before the anchor is set, so a slow
    // endpoint cannot make the run start late).
    let registry_watch = session.watch_registry().await?;
    let mut ran = execute(context, catalog, input, spool).await?;
    if let Some(message) = prewarm_gaps {
        warn(&mut ran.warnings, "prewarm_missing", message);
    }
    if context.shutdown.by_signal() {
        warn(
            &mut ran.warnings,
            "interrupted",
            "stopped by a signal; the numbers cover what ran".into(),
        );
    }
    if context.shutdown.by_limit() {
        warn(
            &mut ran.warnings,
            "max_run_time",
            "ended at --max-run-time; the numbers cover what ran, the rest of the trace is \
             counted as interrupted"
                .into(),
        );
    }
    let planner = std::mem::replace(&mut ran.planner, Ok(PlannerEnd::default()));
    let mut finished = summarize(context, ran, planner.as_ref().ok());
    let slow = session
        .publish(&mut finished, registry_watch, &session.shown())
        .await?;
    if let Err(e) = planner {
        eprintln!("creb-rs: error: {e:#}");
        return Ok(ExitStatus::Usage);
    }
    judge(context.cfg, &context.args.output, &finished.summary, slow)
}

/// Plans pass 2 on a blocking thread and executes it from the shared anchor, while a
/// canary and the process CPU clock watch the generator.
async fn execute(
    context: &Context<'_>,
    catalog: Arc<Catalog>,
    input: TraceInput,
    spool: Option<Spool>,
) -> anyhow::Result<Ran> {
    let &Context {
        cfg,
        session,
        connections,
        shutdown,
        errors,
        ..
    } = context;
    // Pass 2 on a blocking thread, feeding a bounded channel: enough to cover the planner's
    // hiccups (it plans far faster than any registry serves), small enough that the planned
    // manifests waiting in it stay a few megabytes.
    let (tx, rx) = mpsc::channel::<PlanItem>(PLAN_QUEUE);
    let progress = Progress::new(catalog.items);
    let line = session.progress_line(cfg.mode.name(), "records", &progress);
    let planner = spawn_planner(cfg, &catalog, input, spool, tx, &progress);
    // The shared start: every host begins its schedule at --start-at.
    let mut warnings = Vec::new();
    let (anchor, anchor_wall) = anchor_of(cfg, &mut warnings);
    progress.starts_at(anchor);
    // Intervals are aligned to the anchor, the same instant on every host.
    let (recorder, aggregator) = session.output.start_watched(
        anchor,
        anchor_wall,
        connections.len(),
        Some(Arc::clone(&progress)),
    )?;
    let clients = clients_for(connections, &recorder);
    let targets = targets_for(context, &clients, anchor, anchor_wall);
    wait_for_anchor(anchor, PRECISE_TIMER, shutdown.token()).await;
    let started_at = SystemTime::now();
    let start_skew_ms = cfg.start_at_time.map(|t| signed_ms(started_at, t));

    let cpu_before = process_cpu_time();
    let canary_stop = tokio_util::sync::CancellationToken::new();
    let canary = spawn_canary(canary_stop.clone());
    let health = Arc::clone(&targets.health);
    let executor = Executor {
        targets,
        recorder: recorder.clone(),
        options: ExecOptions {
            mode: cfg.mode,
            concurrency: cfg.concurrency,
            max_lateness: cfg.max_lateness_ms.map(Duration::from_millis),
            grace: Duration::from_secs_f64(cfg.grace_s),
            precise_timer: PRECISE_TIMER,
        },
        anchor,
        shutdown: shutdown.clone(),
        errors: errors.clone(),
        progress: Some(Arc::clone(&progress)),
    };
    let exec = executor.run(rx).await;
    line.finish();
    canary_stop.cancel();
    let canary = canary.await.ok();
    let cpu = match (cpu_before, process_cpu_time()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let planner = planner.await.context("the planner stopped unexpectedly")?;
    drop(clients);
    drop(recorder);
    let aggregator = aggregator.finish().await;
    let checks = checks_of(cfg, start_skew_ms, canary.as_ref(), cpu, &exec);
    validity_warnings(cfg, &checks, &exec, &aggregator, &mut warnings);
    unsized_uploads_warning(&catalog, &mut warnings);
    Ok(Ran {
        exec,
        aggregator,
        planner,
        health,
        started_at,
        start_skew_ms,
        anchor_wall,
        checks,
        warnings,
    })
}

/// What the run's validity checks read: the start's skew, how late the canary woke, the
/// CPU the generator used, and how often the in-flight cap was binding.
fn checks_of(
    cfg: &ReplayConfig,
    start_skew_ms: Option<f64>,
    canary: Option<&CanaryReport>,
    cpu: Option<Duration>,
    exec: &ExecReport,
) -> Checks {
    // The cores the generator may use: the runtime's workers, at most every core.
    let cores = available_cores().min(tokio::runtime::Handle::current().metrics().num_workers());
    let seconds = exec.duration.as_secs_f64().max(1e-9);
    Checks {
        start_at: cfg.start_at.clone(),
        start_skew_ms,
        canary_wake_ms: canary.and_then(|c| Percentiles::of(&c.wake_lateness)),
        cpu_seconds: cpu.map(|c| c.as_secs_f64()),
        cpu_share: cpu.map(|c| c.as_secs_f64() / (seconds * cores as f64)),
        cores,
        cap_binding_share: exec.cap_wait.as_secs_f64() / seconds,
        max_in_flight: exec.max_in_flight,
    }
}

/// `at` minus `reference` in milliseconds, negative when `at` is earlier.
fn signed_ms(at: SystemTime, reference: SystemTime) -> f64 {
    match at.duration_since(reference) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}

/// The run's summary and metadata, ready to publish.
fn summarize(context: &Context<'_>, ran: Ran, planner: Option<&PlannerEnd>) -> Finished {
    let &Context {
        cfg,
        session,
        dataset,
        connections,
        names,
        shutdown,
        ..
    } = context;
    let trace = planner.map(|end| trace_counts(end, &ran.exec));
    let mut summary = Summary::build(
        RunInfo {
            command: "replay".into(),
            mode: cfg.mode.name().into(),
            model: cfg.mode.model().into(),
            concurrency: cfg.concurrency as u64,
            registry: names.join(","),
            seed: cfg.seed,
            shard: shard_of(cfg.plan.shard),
            started_at: ran.started_at,
            duration: ran.exec.duration,
            interrupted: shutdown.interrupted(),
            trace,
            warnings: ran.warnings,
            checks: Some(ran.checks),
            config: config_json(cfg, &connections[0].credentials),
        },
        &ran.aggregator,
    );
    summary.endpoints = endpoint_summaries(
        cfg,
        names,
        &ran.aggregator,
        ran.exec.duration,
        Some(ran.health.transitions()),
    );
    let mut meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: dataset.clone(),
            anchor: ran.anchor_wall,
            start_at: cfg.start_at.clone(),
            actual_start: ran.started_at,
            start_skew_ms: ran.start_skew_ms,
            interval: session.output.interval,
        },
    );
    meta.preparation = Some(context.preparation.clone());
    meta.endpoints = endpoint_links(names, connections);
    Finished {
        summary,
        aggregator: ran.aggregator,
        meta,
    }
}

/// The exit status of a published run, having said on stderr what the user should know: a
/// run that sent nothing is a usage error (unless the partition left this shard empty).
fn judge(
    cfg: &ReplayConfig,
    output: &OutputArgs,
    summary: &Summary,
    slow: bool,
) -> anyhow::Result<ExitStatus> {
    if summary.totals.errors > 0 && !output.quiet {
        eprintln!(
            "creb-rs: {} of {} operations failed (see errors above)",
            summary.totals.errors, summary.totals.requests
        );
    }
    if summary.totals.requests == 0 && !summary.interrupted && cfg.plan.shard.count > 1 {
        // The trace has work, but none of it is this shard's: the partition's doing, not a
        // mistake of this host's; its empty result still merges.
        if !output.quiet {
            eprintln!(
                "creb-rs: warning: shard {}/{} got none of the trace's records (they all belong \
                 to other shards); fewer shards, or --shard-by record, spread a small trace",
                cfg.plan.shard.index, cfg.plan.shard.count
            );
        }
    } else if summary.totals.requests == 0 && !summary.interrupted {
        // Nothing measured is not a result, even if every record was accounted for.
        eprintln!(
            "creb-rs: error: the run sent no request{}; check --shard, --limit-requests, \
             --limit-duration and the trace's records (creb-rs trace stats)",
            nothing_replayed(summary)
        );
        return Ok(ExitStatus::Usage);
    }
    let strict_failed = cfg.strict
        && summary
            .warnings
            .iter()
            .any(|w| !super::validity::CHOSEN.contains(&w.kind.as_str()));
    Ok(exit_status(summary, slow, strict_failed))
}

/// Why a run replayed nothing: its records and what skipped them.
fn nothing_replayed(summary: &Summary) -> String {
    summary.trace.as_ref().map_or(String::new(), |t| {
        let skipped: Vec<String> = t
            .skipped
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        format!(
            ": of {} trace records none was replayed{}",
            t.records,
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" (skipped: {})", skipped.join(", "))
            }
        )
    })
}

/// Pass 2 on a blocking thread: the spooled items of pass 1 (or the trace, read again)
/// planned into operations and sent to the executor in batches. The progress line counts
/// the records the planner settles itself (skipped, other shards); the executor adds those
/// of the operations it completes.
fn spawn_planner(
    cfg: &ReplayConfig,
    catalog: &Arc<Catalog>,
    input: TraceInput,
    spool: Option<Spool>,
    tx: mpsc::Sender<PlanItem>,
    progress: &Arc<Progress>,
) -> tokio::task::JoinHandle<anyhow::Result<PlannerEnd>> {
    let catalog = Arc::clone(catalog);
    let progress = Arc::clone(progress);
    let read = cfg.read.clone();
    let options = cfg.plan.clone();
    let runtime = tokio::runtime::Handle::current();
    #[allow(clippy::while_let_on_iterator)]
    tokio::task::spawn_blocking(move || -> anyhow::Result<PlannerEnd> {
        let items: Box<dyn Iterator<Item = _>> = match spool {
            Some(spool) => Box::new(spool.into_items()),
            None => Box::new(TraceReader::open(&input, read, catalog.names.clone())?),
        };
        let mut planner = Planner::new(&catalog, items, options);
        let mut sender = BatchSender::new(&tx, runtime);
        let mut unsent = 0;
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
}

/// The instant the schedule starts, on the monotonic clock and the wall clock:
/// `--start-at`, or now (with a warning when `--start-at` has passed already).
fn anchor_of(cfg: &ReplayConfig, warnings: &mut Vec<Warning>) -> (Instant, SystemTime) {
    let now_wall = SystemTime::now();
    let now = Instant::now();
    match cfg.start_at_time {
        Some(t) => match t.duration_since(now_wall) {
            Ok(ahead) => (now + ahead, t),
            Err(behind) => {
                warn(
                    warnings,
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
    }
}

/// Where operations go: the one client, or every endpoint's with the router, their health
/// (counted from the anchor) and probes that record nothing.
fn targets_for(
    context: &Context<'_>,
    clients: &[RegistryClient],
    anchor: Instant,
    anchor_wall: SystemTime,
) -> Targets {
    let Some(routing) = context.cfg.routing else {
        return Targets::single(clients[0].clone());
    };
    let mut health = Health::new(clients.len(), routing.endpoint_down_after, routing.failover);
    health.set_anchor(anchor, anchor_wall);
    Targets {
        probes: context
            .connections
            .iter()
            .map(|c| c.client.with_recorder(Recorder::discard()))
            .collect(),
        clients: clients.to_vec(),
        router: Arc::new(context.router.clone()),
        health: Arc::new(health),
        probe_interval: Duration::from_secs_f64(routing.probe_interval_s),
    }
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
