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

use super::catalog::keep_frames;
use super::config::{ReplayConfig, Window};
use super::context::{clients_for, endpoint_summaries, shard_of, Context, Prepared};
use super::validity::{raw_layers_warning, unsized_uploads_warning, validity_warnings, warn};
use crate::client::RegistryClient;
use crate::exec::canary::{
    available_cores, process_cpu_time, spawn_canary, CanaryReport, RuntimeWork, Witness,
};
use crate::exec::pacer::wait_for_anchor;
use crate::exec::{ExecOptions, ExecReport, Executor, Targets};
use crate::metrics::hist::Percentiles;
use crate::metrics::{AggregatorConfig, Op, Recorder};
use crate::plan::catalog::Catalog;
use crate::plan::{PlanItem, Planner};
use crate::progress::Progress;
use crate::results::summary::{Checks, EventLoops, Gathered};
use crate::results::{Meta, MetaInput, RunInfo, Summary, TraceCounts, Warning};
use crate::route::health::Health;
use crate::session::connect::endpoint_links;
use crate::session::status::ExitStatus;
use crate::session::OutputOptions;
use crate::session::{exit_status, Finished};
use crate::trace::spool::SpoolItems;
use crate::trace::{Item, TraceError, TraceInput, TraceReader};

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
    /// `--replica`: how each replica was reached.
    replica_connections: Vec<crate::session::connect::Connection>,
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
    prepared: &Prepared,
    input: &TraceInput,
    prewarm_gaps: Option<String>,
) -> anyhow::Result<ExitStatus> {
    let session = context.session;
    // The registry's own counters before the run (before the anchor is set, so a slow
    // endpoint cannot make the run start late).
    let registry_watch = session.watch_registry().await?;
    let mut ran = execute(context, prepared, input).await?;
    keep_frames(context.cfg.digest_cache.as_ref()).await;
    if let Some(message) = prewarm_gaps {
        warn(&mut ran.warnings, "prewarm_missing", message);
    }
    let planner = std::mem::replace(&mut ran.planner, Ok(PlannerEnd::default()));
    let failure = ran.exec.failure.clone();
    let mut finished = summarize(context, ran, planner.as_ref().ok());
    let slow = session
        .publish(&mut finished, registry_watch, &session.shown())
        .await?;
    if let Err(e) = planner {
        eprintln!("creb-rs: error: {e:#}");
        return Ok(ExitStatus::Usage);
    }
    if let Some(failure) = failure {
        eprintln!("creb-rs: error: {failure} (the results cover what ran)");
        return Ok(ExitStatus::Usage);
    }
    judge(context.cfg, &session.flags, &finished.summary, slow)
}

/// One run measured and summarized, not published: the replay engine's library call.
pub(super) async fn measure(
    context: &Context<'_>,
    prepared: &Prepared,
    input: &TraceInput,
) -> anyhow::Result<Finished> {
    let mut ran = execute(context, prepared, input).await?;
    keep_frames(context.cfg.digest_cache.as_ref()).await;
    let planner = std::mem::replace(&mut ran.planner, Ok(PlannerEnd::default()));
    let end = planner?;
    Ok(summarize(context, ran, Some(&end)))
}

/// The warnings of how the run ended: by a signal, or at `--max-run-time`.
fn stop_warnings(context: &Context<'_>, warnings: &mut Vec<Warning>) {
    if context.shutdown.by_signal() {
        warn(
            warnings,
            "interrupted",
            "stopped by a signal; the numbers cover what ran".into(),
        );
    }
    if context.shutdown.by_limit() {
        warn(
            warnings,
            "max_run_time",
            "ended at --max-run-time; the numbers cover what ran, the rest of the trace is \
             counted as interrupted"
                .into(),
        );
    }
}

/// Plans pass 2 on a blocking thread and executes it from the shared anchor, while a
/// canary and the process CPU clock watch the generator.
#[allow(clippy::too_many_lines)]
async fn execute(
    context: &Context<'_>,
    prepared: &Prepared,
    input: &TraceInput,
) -> anyhow::Result<Ran> {
    let &Context {
        cfg,
        session,
        output,
        connections,
        shutdown,
        errors,
        ..
    } = context;
    let catalog = &prepared.catalog;
    let items = match &prepared.spool {
        Some(spool) => Items::Spool(spool.items()?),
        None => Items::Trace(input.clone()),
    };
    // Pass 2 on a blocking thread, feeding a bounded channel: enough to cover the planner's
    // hiccups (it plans far faster than any registry serves), small enough that the planned
    // manifests waiting in it stay a few megabytes.
    let (tx, rx) = mpsc::channel::<PlanItem>(PLAN_QUEUE);
    let progress = Progress::new(catalog.items);
    let line = session.progress_line(cfg.mode.name(), "records", &progress);
    let planner = spawn_planner(cfg, catalog, items, tx, &progress);
    // The shared start: every host begins its schedule at --start-at.
    let mut warnings = Vec::new();
    let (anchor, anchor_wall) = anchor_of(cfg, &mut warnings);
    progress.starts_at(anchor);
    // Intervals are aligned to the anchor, the same instant on every host.
    let (recorder, aggregator) = output.start_watched(
        anchor,
        anchor_wall,
        connections.len(),
        Some(Arc::clone(&progress)),
    )?;
    // With replicas, the registry's endpoints are counted apart from theirs.
    let apart = cfg.replicas.is_some();
    let clients = clients_for(connections, &recorder, apart);
    let (replicas, replica_connections) = match &cfg.replicas {
        Some(spec) => {
            let first = connections.len();
            let (r, c) = (cfg.registry)
                .connect_replicas(spec, &connections[0], &recorder, first, errors, shutdown)
                .await?;
            (Some(Arc::new(r)), c)
        }
        None => (None, Vec::new()),
    };
    let targets = targets_for(context, &clients, anchor, anchor_wall);
    wait_for_anchor(anchor, PRECISE_TIMER, shutdown.token()).await;
    let started_at = SystemTime::now();
    let start_skew_ms = cfg.start_at_time.map(|t| signed_ms(started_at, t));

    let cpu_before = process_cpu_time();
    let canary_stop = tokio_util::sync::CancellationToken::new();
    // The canary watches what is measured: a stall in the left-out warm-up moves no kept
    // timing.
    let measured_from = AggregatorConfig {
        interval: output.interval,
        anchor,
        warmup: output.warmup,
    }
    .measured_from();
    let runtime_work = Arc::new(RuntimeWork::default());
    let canary = spawn_canary(
        canary_stop.clone(),
        measured_from,
        Arc::clone(&runtime_work),
    );
    let witness = Witness {
        from: measured_from,
        runtime: runtime_work,
    };
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
            gather: cfg.mode == crate::replay::Mode::Stress && cfg.gather,
        },
        anchor,
        shutdown: shutdown.clone(),
        errors: errors.clone(),
        progress: Some(Arc::clone(&progress)),
        unpack: cfg.unpack.clone(),
        replicas: replicas.clone(),
        witness: Some(witness),
    };
    let exec = executor.run(rx).await;
    line.finish();
    if let Some(replicas) = &replicas {
        // The watches of the last pushes end (the schedule is over), or a stop ends them
        // within the grace.
        let grace = Duration::from_secs_f64(cfg.grace_s);
        replicas.finish(shutdown.token(), grace).await;
    }
    drop(replicas);
    canary_stop.cancel();
    let canary = (canary.await.ok()).map(|c| c.with_loops(exec.wake_lateness.as_ref()));
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
    unsized_uploads_warning(catalog, &mut warnings);
    raw_layers_warning(catalog, &mut warnings);
    stop_warnings(context, &mut warnings);
    if let Some(failure) = &exec.failure {
        let message = format!("{failure}; the run stopped there, the numbers cover what ran");
        warn(&mut warnings, "event_loop_failed", message);
        if context.shutdown.interrupted() && !context.shutdown.by_signal() {
            // Marked interrupted as a stop is, but no signal stopped it.
            let message = "stopped by the event loop's failure; the numbers cover what ran";
            warn(&mut warnings, "interrupted", message.into());
        }
    }
    Ok(Ran {
        exec,
        aggregator,
        planner,
        health,
        replica_connections,
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
    // The cores the generator may use: the runtime's workers and stress mode's event loops
    // (threads of their own), at most every core.
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    let loops = exec.looped.map_or(0, |l| l.loops);
    let cores = available_cores().min(workers + loops);
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
        gathered: exec.gathered.map(|g| Gathered {
            share_of_service_time: crate::net::gather::SHARE,
            widest_window_ms: g.widest.as_secs_f64() * 1000.0,
            turned_off: g.turned_off,
        }),
        event_loops: exec.looped.map(|l| EventLoops {
            loops: l.loops,
            manifest_gets: l.manifest_gets,
            answer_wait_ms: exec.answer_wait.as_ref().and_then(Percentiles::of),
        }),
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
            config: cfg.config_block(&connections[0].credentials),
        },
        &ran.aggregator,
    );
    // The replicas are endpoints of the run after the registry's.
    let mut all = names.to_vec();
    all.extend(cfg.replicas.iter().flat_map(|r| r.names()));
    summary.endpoints = endpoint_summaries(
        cfg,
        &all,
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
            interval: context.output.interval,
        },
    );
    meta.preparation = Some(super::prewarm::preparation_json(context.preparation));
    meta.endpoints = endpoint_links(names, connections);
    if let Some(spec) = &cfg.replicas {
        (meta.endpoints).extend(endpoint_links(&spec.names(), &ran.replica_connections));
    }
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
    output: &OutputOptions,
    summary: &Summary,
    slow: bool,
) -> anyhow::Result<ExitStatus> {
    if summary.totals.errors > 0 && !output.quiet {
        eprintln!(
            "creb-rs: {} of {} operations failed (see errors above)",
            summary.totals.errors, summary.totals.requests
        );
    }
    let warm = summary.warmup.as_ref().filter(|w| w.operations > 0);
    if let (Some(w), Some(s)) = (warm, summary.warmup_s) {
        if w.errors > 0 && !output.quiet {
            eprintln!(
                "creb-rs: {} of the {} operations inside --warmup {s}s failed (left out of the \
                 numbers, counted in summary.json's warmup and toward --max-errors)",
                w.errors, w.operations
            );
        }
        if summary.totals.requests == 0 && !summary.interrupted {
            eprintln!(
                "creb-rs: error: every operation of the run ({}, {} failed) ended inside \
                 --warmup {s}s, so none is measured: give a shorter --warmup, or a longer run \
                 (--limit-duration, or a lower --speed)",
                w.operations, w.errors
            );
            return Ok(ExitStatus::Usage);
        }
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
    // A layer that did not unpack (--unpack) is no request --max-errors could tolerate:
    // the image it belongs to could not run.
    let unpack_failed =
        (summary.sessions.get(Op::LayerUnpack.name())).is_some_and(|s| s.errors > 0);
    let failed = unpack_failed || crate::session::replication_failed(summary);
    Ok(exit_status(summary, slow, strict_failed || failed))
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
    items: Items,
    tx: mpsc::Sender<PlanItem>,
    progress: &Arc<Progress>,
) -> tokio::task::JoinHandle<anyhow::Result<PlannerEnd>> {
    let catalog = Arc::clone(catalog);
    let progress = Arc::clone(progress);
    let read = cfg.read.clone();
    let options = cfg.plan.clone();
    let window = cfg.window;
    let runtime = tokio::runtime::Handle::current();
    #[allow(clippy::while_let_on_iterator)]
    tokio::task::spawn_blocking(move || -> anyhow::Result<PlannerEnd> {
        let items: Box<dyn Iterator<Item = _>> = match items {
            Items::Spool(items) => Box::new(items),
            Items::Trace(input) => {
                Box::new(TraceReader::open(&input, read, catalog.names.clone())?)
            }
        };
        // A window: only its records, their schedule starting at its start.
        let (items, shift) = match window {
            Some(w) => {
                let origin = catalog.origin_ms.unwrap_or(0);
                let items: Box<dyn Iterator<Item = _>> = Box::new(Windowed::new(items, w, origin));
                (items, w.from.div_f64(options.speed.max(1e-9)))
            }
            None => (items, Duration::ZERO),
        };
        let mut planner = Planner::new(&catalog, items, options);
        let mut sender = BatchSender::new(&tx, runtime);
        let mut unsent = 0;
        let mut counted = 0u64;
        while let Some(item) = planner.next() {
            let mut item = item?;
            if let PlanItem::Op(op) = &mut item {
                op.offset = op.offset.saturating_sub(shift);
            }
            let sent = sender.send(item);
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

/// What pass 2 reads: pass 1's spool, or the trace again.
enum Items {
    Spool(SpoolItems),
    Trace(TraceInput),
}

/// The items of a [`Window`] of the trace: those before it are passed over, the stream ends
/// at the first record after it (the reader yields records in time order). A skipped item
/// without a time belongs where the stream is.
struct Windowed<I> {
    items: I,
    window: Window,
    origin_ms: i64,
    inside: bool,
    done: bool,
}

impl<I> Windowed<I> {
    fn new(items: I, window: Window, origin_ms: i64) -> Windowed<I> {
        Windowed {
            items,
            window,
            origin_ms,
            inside: window.from.is_zero(),
            done: false,
        }
    }
}

impl<I: Iterator<Item = Result<Item, TraceError>>> Iterator for Windowed<I> {
    type Item = Result<Item, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let item = match self.items.next()? {
                Ok(item) => item,
                Err(e) => return Some(Err(e)),
            };
            let time = match &item {
                Item::Record(r) => Some(r.time_ms),
                Item::Skipped { time_ms, .. } => *time_ms,
            };
            if let Some(t) = time {
                let at = t - self.origin_ms;
                if self.window.past(at) {
                    self.done = true;
                    return None;
                }
                self.inside = self.window.holds(at);
            }
            if self.inside {
                return Some(Ok(item));
            }
        }
        None
    }
}
