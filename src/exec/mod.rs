//! The executor: planned operations become requests, at the right time, with at most
//! `concurrency` in flight.
//!
//! - **stress (closed model)**: each of `concurrency` slots starts the next operation when
//!   its previous one completes; no intended times — latency is service time at that level.
//! - **delay (open model)**: operation *k* is due at `anchor + offset_k` — an instant computed
//!   from the plan, never from when a timer fired. The dispatcher sleeps until then, waits for
//!   a slot if all are busy (that wait is schedule lag, and it is inside the latency), and
//!   passes the intended instant to the client, which records latency from it, service time
//!   from the send, and the lag between them. With `max_lateness`, an operation that could
//!   not start within that bound is dropped and counted, never silently skipped.
//!
//! One dispatcher owns the schedule; operations run as tasks in a `JoinSet` whose results it
//! reaps as it goes, so nothing grows with the number of operations. A manifest PUT waits for
//! the uploads of its push. On shutdown the dispatcher stops, in-flight operations get a
//! grace period, and whatever was planned but not run is counted as `interrupted`.
//!
//! With several endpoints ([`Targets`]) the dispatcher picks each operation's endpoint by
//! the [`Router`] and the endpoints' [`Health`]: the first candidate that is up, or — with
//! failover off — a failure of kind `endpoint_down` recorded on the endpoint it was meant
//! for, without a request. Each endpoint's client records through its own recorder, so the
//! per-endpoint numbers add up to the totals.

pub mod bounded;
pub mod canary;
mod deps;
pub(crate) mod pacer;
pub mod prewarm;
pub mod pull;
pub mod push;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::deps::Deps;
use crate::client::{BlobSource, ClientError, OpCtx, RegistryClient};
use crate::fast_hash::FastHashMap;
use crate::metrics::ErrorLog;
use crate::metrics::{
    ErrorKind, Event, HttpStatuses, Op, Outcome, Recorder, Sample, SessionMsg, SizeClass, Timing,
};
use crate::oci::Reference;
use crate::plan::{Action, PlanItem, PlannedOp, SessionTag};
use crate::progress::Progress;
use crate::route::health::{probe_until_up, Choice, Health};
use crate::route::{Object, Request, RouteOptions, Router};
use crate::shutdown::Shutdown;

use pacer::Pacer;

/// The two workload models (never mixed in one result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// As fast as possible with `--concurrency` in flight (closed model).
    Stress,
    /// At the trace's timing, scaled by `--speed` (open model).
    Delay,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Stress => "stress",
            Mode::Delay => "delay",
        }
    }

    pub fn model(self) -> &'static str {
        match self {
            Mode::Stress => "closed",
            Mode::Delay => "open",
        }
    }
}

/// How to execute.
#[derive(Debug, Clone, Copy)]
pub struct ExecOptions {
    pub mode: Mode,
    pub concurrency: usize,
    /// Delay mode: drop operations that cannot start within this bound of their intended time.
    pub max_lateness: Option<Duration>,
    /// After a shutdown request, how long in-flight operations may take to finish.
    pub grace: Duration,
    /// Wait for the anchor and, in delay mode, for due times on a timerfd (microseconds)
    /// instead of tokio's timer (whole milliseconds, rounded up). Off under a paused test
    /// clock, which only tokio's timer follows.
    pub precise_timer: bool,
}

/// What the executor did, for the accounting and validity checks.
#[derive(Debug, Clone, Default)]
pub struct ExecReport {
    /// Operations carried out (successful or not).
    pub replayed: u64,
    /// Records folded into carried-out operations.
    pub folded: u64,
    /// Records of operations dropped because they would start later than `max_lateness`.
    pub late: u64,
    /// Records of operations not carried out because of shutdown.
    pub interrupted: u64,
    /// Time the dispatcher waited for a free slot (the in-flight cap was binding).
    pub cap_wait: Duration,
    /// From the anchor to the last completion.
    pub duration: Duration,
    pub max_in_flight: usize,
}

struct TaskDone {
    records: u64,
    folded: u64,
}

struct InFlight {
    op: Op,
    endpoint: usize,
    intended: Option<Instant>,
    started: Instant,
    records: u64,
}

/// The metrics name of an action.
pub fn op_of(action: &Action) -> Op {
    match action {
        Action::Ping => Op::Ping,
        Action::ManifestGet { .. } => Op::ManifestGet,
        Action::ManifestHead { .. } => Op::ManifestHead,
        Action::ManifestPut { .. } => Op::ManifestPut,
        Action::BlobGet { .. } => Op::BlobGet,
        Action::BlobHead { .. } => Op::BlobHead,
        Action::BlobDelete { .. } => Op::BlobDelete,
        Action::BlobUpload { .. } => Op::BlobUpload,
        Action::TagList { .. } => Op::TagList,
    }
}

/// The endpoints a run may use and how it picks one per operation.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // clients hold transports that are not `Debug`
pub struct Targets {
    /// One client (and connection pool) per endpoint, each recording through its own
    /// endpoint recorder when there are several.
    pub clients: Vec<RegistryClient>,
    pub router: Arc<Router>,
    pub health: Arc<Health>,
    /// How often a down endpoint is probed.
    pub probe_interval: Duration,
    /// Clients that do not record, for the probes.
    pub probes: Vec<RegistryClient>,
}

impl Targets {
    /// A single endpoint: every operation goes to it; failures are just failures.
    pub fn single(client: RegistryClient) -> Targets {
        let probe = client.with_recorder(Recorder::discard());
        Targets {
            // Never consulted with one endpoint; one point keeps it cheap.
            router: Arc::new(Router::new(
                &["0"],
                RouteOptions {
                    vnodes: 1,
                    ..RouteOptions::default()
                },
            )),
            clients: vec![client],
            health: Arc::new(Health::disabled(1)),
            probe_interval: Duration::from_secs(1),
            probes: vec![probe],
        }
    }

    /// Where an operation goes.
    fn choose(&self, op: &PlannedOp) -> Choice {
        if self.clients.len() == 1 {
            return Choice::Use {
                endpoint: 0,
                failed_over: false,
            };
        }
        let reference;
        let (object, write) = match &op.action {
            Action::Ping => (Object::None, false),
            Action::ManifestGet { repo, reference: r }
            | Action::ManifestHead { repo, reference: r } => {
                reference = r.to_string();
                (
                    Object::Manifest {
                        repo: repo.as_str(),
                        reference: &reference,
                    },
                    false,
                )
            }
            Action::ManifestPut { repo, tag, .. } => (
                Object::Manifest {
                    repo: repo.as_str(),
                    reference: tag.as_str(),
                },
                true,
            ),
            Action::BlobGet { digest, .. } | Action::BlobHead { digest, .. } => {
                (Object::Blob(digest.as_str()), false)
            }
            // An upload goes where the manifest of its push will (see `Action::BlobUpload`).
            Action::BlobUpload {
                push: Some((repo, tag)),
                ..
            } => (
                Object::Manifest {
                    repo: repo.as_str(),
                    reference: tag.as_str(),
                },
                true,
            ),
            Action::BlobDelete { digest, .. } | Action::BlobUpload { digest, .. } => {
                (Object::Blob(digest.as_str()), true)
            }
            Action::TagList { repo } => (Object::Repository(repo.as_str()), false),
        };
        let candidates = self.router.candidates(&Request {
            seq: op.seq,
            client: op.client,
            object,
            write,
        });
        self.health.choose(&candidates)
    }
}

/// A short name of what an action touches, for error messages.
fn describe(action: &Action) -> String {
    match action {
        Action::Ping => "GET /v2/".into(),
        Action::ManifestGet { repo, reference } | Action::ManifestHead { repo, reference } => {
            format!("{repo}:{reference}")
        }
        Action::ManifestPut { repo, tag, .. } => format!("PUT {repo}:{tag}"),
        Action::BlobGet { repo, digest, .. }
        | Action::BlobHead { repo, digest }
        | Action::BlobDelete { repo, digest }
        | Action::BlobUpload { repo, digest, .. } => format!("{repo}@{digest}"),
        Action::TagList { repo } => format!("{repo} tags"),
    }
}

/// Carries out one operation; returns its bytes, or why it failed.
async fn perform(client: &RegistryClient, action: &Action, ctx: OpCtx) -> Result<u64, ClientError> {
    let result: Result<u64, ClientError> = match action {
        Action::Ping => client.ping(ctx).await.map(|()| 0),
        Action::ManifestGet { repo, reference } => client
            .manifest_get(repo, reference, ctx)
            .await
            .map(|m| m.bytes.len() as u64),
        Action::ManifestHead { repo, reference } => {
            client.manifest_head(repo, reference, ctx).await.map(|_| 0)
        }
        Action::ManifestPut {
            repo,
            tag,
            manifest,
            media_type,
            ..
        } => {
            let manifest = manifest.bytes();
            let len = manifest.len() as u64;
            client
                .manifest_put(
                    repo,
                    &Reference::Tag(tag.clone()),
                    manifest,
                    media_type,
                    ctx,
                )
                .await
                .map(|_| len)
        }
        Action::BlobGet { repo, digest, size } => {
            client.blob_get(repo, digest, Some(*size), ctx).await
        }
        Action::BlobHead { repo, digest } => client.blob_head(repo, digest, ctx).await.map(|_| 0),
        Action::BlobDelete { repo, digest } => {
            client.blob_delete(repo, digest, ctx).await.map(|()| 0)
        }
        Action::BlobUpload {
            repo,
            digest,
            content,
            mode,
            ..
        } => client
            .upload_blob(
                repo,
                digest,
                &BlobSource::Content(*content),
                *mode,
                None,
                ctx,
            )
            .await
            .map(|r| r.bytes_sent),
        Action::TagList { repo } => client
            .tag_list(repo, None, ctx)
            .await
            .map(|t| t.len() as u64),
    };
    result
}

/// What every operation task shares with the dispatcher, behind one `Arc`: a task takes
/// one reference count, not a copy of the endpoint lists.
struct TaskEnv {
    targets: Targets,
    /// Records what belongs to no endpoint (image sessions).
    recorder: Recorder,
    /// Ends the health probes with the run.
    probes_stop: tokio_util::sync::CancellationToken,
    deps: Arc<Deps>,
    shutdown: Shutdown,
    errors: ErrorLog,
    progress: Option<Arc<Progress>>,
}

async fn run_task(
    mut op: PlannedOp,
    choice: Choice,
    intended: Option<Instant>,
    env: Arc<TaskEnv>,
    permit: OwnedSemaphorePermit,
) -> TaskDone {
    let _permit = permit;
    let TaskEnv {
        targets,
        recorder,
        probes_stop,
        deps,
        shutdown,
        errors,
        progress,
    } = &*env;
    let mut push_start: Option<Instant> = None;
    let mut deps_ok = true;
    if let Action::ManifestPut { deps: wanted, .. } = &op.action {
        if !wanted.is_empty() {
            tokio::select! {
                (ok, earliest) = deps.wait_all(wanted) => {
                    deps_ok = ok;
                    push_start = earliest;
                }
                _ = shutdown.token().cancelled() => {}
            }
        }
    }
    if let Action::ManifestPut { manifest, .. } = &mut op.action {
        // Built now, not when planned: queued and waiting PUTs stay small.
        manifest.materialize();
    }
    let start = intended.unwrap_or_else(Instant::now);
    let (bytes, error) = match choice {
        Choice::Use {
            endpoint,
            failed_over,
        } => {
            let client = &targets.clients[endpoint];
            if failed_over {
                recorder.event(Event::Failover).await;
            }
            // The progress line's latency and lag come from the aggregator, which sees this
            // operation's sample.
            let result = perform(client, &op.action, OpCtx { intended }).await;
            let error = result.as_ref().err().map(ClientError::kind);
            if targets.health.observe(endpoint, error) {
                recorder.event(Event::EndpointDown).await;
                tokio::spawn(probe_until_up(
                    Arc::clone(&targets.health),
                    endpoint,
                    targets.probes[endpoint].clone(),
                    recorder.clone(),
                    targets.probe_interval,
                    probes_stop.clone(),
                ));
            }
            match result {
                Ok(bytes) => (bytes, None),
                Err(e) => {
                    errors.note(format!("{}: {e}", describe(&op.action)));
                    if let Some(p) = &progress {
                        p.add_error();
                    }
                    (0, Some(e.kind()))
                }
            }
        }
        Choice::Down { endpoint } => {
            // Not sent: counted as a failure of the endpoint it was meant for.
            let now = Instant::now();
            targets.clients[endpoint]
                .recorder()
                .record(Sample {
                    op: op_of(&op.action),
                    outcome: Outcome::Error(ErrorKind::EndpointDown),
                    size_class: SizeClass::Under1MiB,
                    timing: Timing {
                        intended,
                        sent: now,
                        first_byte: None,
                        end: now,
                    },
                    bytes_sent: 0,
                    bytes_received: 0,
                    http: HttpStatuses::NONE,
                })
                .await;
            if let Some(p) = &progress {
                p.add_error();
            }
            (0, Some(ErrorKind::EndpointDown))
        }
    };
    let end = Instant::now();
    if matches!(op.action, Action::BlobUpload { .. }) {
        deps.complete(op.seq, error.is_none(), start);
    }
    if let Action::ManifestPut {
        deps: wanted,
        manifest,
        ..
    } = &op.action
    {
        if !wanted.is_empty() {
            let manifest = manifest.bytes();
            // The image push: from its first upload's start to the manifest's answer.
            let outcome = match (error, deps_ok) {
                (Some(kind), _) => Outcome::Error(kind),
                (None, false) => Outcome::Error(ErrorKind::Protocol),
                (None, true) => Outcome::Ok,
            };
            recorder
                .record(Sample {
                    op: Op::ImagePush,
                    outcome,
                    size_class: SizeClass::of(manifest.len() as u64),
                    timing: Timing {
                        intended: None,
                        sent: push_start.unwrap_or(start).min(start),
                        first_byte: None,
                        end,
                    },
                    bytes_sent: manifest.len() as u64,
                    bytes_received: 0,
                    http: HttpStatuses::NONE,
                })
                .await;
        }
    }
    if let Some(p) = &progress {
        p.add_done(op.records());
    }
    if let Some(SessionTag::PullHead(id) | SessionTag::PullLayer(id)) = op.session {
        recorder
            .session(SessionMsg::Ended {
                id,
                end,
                error,
                bytes,
            })
            .await;
    }
    TaskDone {
        records: op.records(),
        folded: u64::from(op.folded),
    }
}

/// Runs the plan against one endpoint. `anchor` is the instant offset zero stands for
/// (delay mode).
pub async fn execute(
    plan: mpsc::Receiver<PlanItem>,
    client: RegistryClient,
    options: ExecOptions,
    anchor: Instant,
    shutdown: Shutdown,
    errors: ErrorLog,
    progress: Option<Arc<Progress>>,
) -> ExecReport {
    let recorder = client.recorder().clone();
    execute_on(
        plan,
        Targets::single(client),
        recorder,
        options,
        anchor,
        shutdown,
        errors,
        progress,
    )
    .await
}

/// Runs the plan over `targets`; `recorder` takes what belongs to no endpoint.
#[allow(clippy::too_many_arguments)]
pub async fn execute_on(
    mut plan: mpsc::Receiver<PlanItem>,
    targets: Targets,
    recorder: Recorder,
    options: ExecOptions,
    anchor: Instant,
    shutdown: Shutdown,
    errors: ErrorLog,
    progress: Option<Arc<Progress>>,
) -> ExecReport {
    let permits = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let deps = Arc::new(Deps::default());
    let probes_stop = tokio_util::sync::CancellationToken::new();
    // Probes end with the run, however it ends.
    let _probes = probes_stop.clone().drop_guard();
    let env = Arc::new(TaskEnv {
        targets: targets.clone(),
        recorder: recorder.clone(),
        probes_stop: probes_stop.clone(),
        deps: Arc::clone(&deps),
        shutdown: shutdown.clone(),
        errors: errors.clone(),
        progress: progress.clone(),
    });
    let mut tasks: JoinSet<TaskDone> = JoinSet::new();
    let mut in_flight: FastHashMap<tokio::task::Id, InFlight> = FastHashMap::default();
    let mut report = ExecReport::default();
    let cancelled = shutdown.token().clone();
    pacer::wait_for_anchor(anchor, options.precise_timer, &cancelled).await;
    let mut pacer = Pacer::new(options.mode == Mode::Delay && options.precise_timer);

    let reap = |res: Result<(tokio::task::Id, TaskDone), tokio::task::JoinError>,
                in_flight: &mut FastHashMap<tokio::task::Id, InFlight>,
                report: &mut ExecReport|
     -> Option<InFlight> {
        match res {
            Ok((id, done)) => {
                in_flight.remove(&id);
                report.replayed += 1;
                report.folded += done.folded;
                let _ = done.records;
                None
            }
            Err(e) => in_flight.remove(&e.id()),
        }
    };

    'dispatch: loop {
        while let Some(res) = tasks.try_join_next_with_id() {
            if let Some(lost) = reap(res, &mut in_flight, &mut report) {
                report.interrupted += lost.records;
            }
        }
        let item = tokio::select! {
            biased;
            _ = cancelled.cancelled() => break 'dispatch,
            item = plan.recv() => item,
        };
        let Some(item) = item else {
            break;
        };
        let op = match item {
            PlanItem::CloseSession(id) => {
                recorder.session(SessionMsg::Closed { id }).await;
                continue;
            }
            PlanItem::Op(op) => op,
        };
        let intended = match options.mode {
            Mode::Delay => Some(anchor + op.offset),
            Mode::Stress => None,
        };
        if let Some(due) = intended {
            tokio::select! {
                biased;
                _ = cancelled.cancelled() => {
                    report.interrupted += op.records();
                    break 'dispatch;
                }
                _ = pacer.sleep_until(due) => {}
            }
        }
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let waited = Instant::now();
                let p = tokio::select! {
                    biased;
                    _ = cancelled.cancelled() => {
                        report.interrupted += op.records();
                        break 'dispatch;
                    }
                    p = Arc::clone(&permits).acquire_owned() => p,
                };
                report.cap_wait += waited.elapsed();
                match p {
                    Ok(p) => p,
                    Err(_) => break 'dispatch,
                }
            }
        };
        if let (Some(due), Some(max)) = (intended, options.max_lateness) {
            if Instant::now() > due + max {
                recorder.offered(due).await;
                report.late += op.records();
                drop(permit);
                continue;
            }
        }
        let started = Instant::now();
        recorder.offered(intended.unwrap_or(started)).await;
        if let Some(SessionTag::PullHead(id) | SessionTag::PullLayer(id)) = op.session {
            recorder
                .session(SessionMsg::Started {
                    id,
                    start: intended.unwrap_or(started),
                })
                .await;
        }
        if matches!(op.action, Action::BlobUpload { .. }) {
            deps.register(op.seq);
        }
        let choice = targets.choose(&op);
        let endpoint = match choice {
            Choice::Use { endpoint, .. } | Choice::Down { endpoint } => endpoint,
        };
        let meta = InFlight {
            op: op_of(&op.action),
            endpoint,
            intended,
            started,
            records: op.records(),
        };
        // Boxed: the task's future is a few kilobytes (the whole client call inline), and
        // the runtime would otherwise copy it into the task and again on completion.
        let handle = tasks.spawn(Box::pin(run_task(
            op,
            choice,
            intended,
            Arc::clone(&env),
            permit,
        )));
        in_flight.insert(handle.id(), meta);
        report.max_in_flight = report.max_in_flight.max(in_flight.len());
    }

    if cancelled.is_cancelled() {
        // Nothing more starts: count what was planned but not run, and stop the planner.
        plan.close();
        while let Some(item) = plan.recv().await {
            if let PlanItem::Op(op) = item {
                report.interrupted += op.records();
            }
        }
        let deadline = Instant::now() + options.grace;
        loop {
            let next = tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await;
            match next {
                Ok(Some(res)) => {
                    if let Some(lost) = reap(res, &mut in_flight, &mut report) {
                        report.interrupted += lost.records;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // Grace is over: stop the rest and record them as cancelled.
                    tasks.abort_all();
                    while let Some(res) = tasks.join_next_with_id().await {
                        if let Some(lost) = reap(res, &mut in_flight, &mut report) {
                            report.interrupted += lost.records;
                            targets.clients[lost.endpoint]
                                .recorder()
                                .record(Sample {
                                    op: lost.op,
                                    outcome: Outcome::Error(ErrorKind::Cancelled),
                                    size_class: SizeClass::Under1MiB,
                                    timing: Timing {
                                        intended: lost.intended,
                                        sent: lost.started,
                                        first_byte: None,
                                        end: Instant::now(),
                                    },
                                    bytes_sent: 0,
                                    bytes_received: 0,
                                    http: HttpStatuses::NONE,
                                })
                                .await;
                        }
                    }
                    break;
                }
            }
        }
    } else {
        while let Some(res) = tasks.join_next_with_id().await {
            if let Some(lost) = reap(res, &mut in_flight, &mut report) {
                report.interrupted += lost.records;
            }
        }
    }
    report.duration = Instant::now().saturating_duration_since(anchor);
    report
}

#[cfg(test)]
mod tests {
    //! The executor on a paused clock with a scripted transport: exact timing, no sockets.
    //! A real registry cannot be made to stall at one exact request on demand.

    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::client::ClientOptions;
    use crate::metrics::{spawn_aggregator, Aggregator};
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    const STALL: Duration = Duration::from_millis(500);

    /// 100 HEADs, one every 10 ms (100/s); the 10th request stalls 500 ms, the rest take 1 ms.
    async fn run(mode: Mode, concurrency: usize) -> (Aggregator, ExecReport) {
        let n = Arc::new(AtomicU32::new(0));
        let transport = ScriptedTransport::new(move |_| {
            let i = n.fetch_add(1, Ordering::SeqCst);
            let delay = if i == 9 {
                STALL
            } else {
                Duration::from_millis(1)
            };
            ScriptedResponse::status(200)
                .header("content-length", "0")
                .delay(delay)
        });
        let (recorder, aggregator) = spawn_aggregator();
        let client = RegistryClient::new(
            Arc::new(transport),
            "http://registry.test/".parse().unwrap(),
            recorder,
            ClientOptions::default(),
        );
        let (tx, rx) = mpsc::channel(16);
        let repo: crate::oci::Repository = "a/b".parse().unwrap();
        let digest = crate::digest::Digest::sha256_of(b"x");
        tokio::spawn(async move {
            for seq in 0..100u64 {
                let op = PlannedOp {
                    seq,
                    offset: Duration::from_millis(10 * seq),
                    action: Action::BlobHead {
                        repo: repo.clone(),
                        digest: digest.clone(),
                    },
                    folded: 0,
                    session: None,
                    client: 0,
                };
                let _ = tx.send(PlanItem::Op(op)).await;
            }
        });
        let options = ExecOptions {
            mode,
            concurrency,
            max_lateness: None,
            grace: Duration::from_secs(1),
            precise_timer: false,
        };
        let report = execute(
            rx,
            client,
            options,
            Instant::now(),
            Shutdown::new(),
            ErrorLog::default(),
            None,
        )
        .await;
        (aggregator.finish().await, report)
    }

    fn ms(v: u64) -> f64 {
        v as f64 / 1000.0
    }

    #[tokio::test(start_paused = true)]
    async fn delay_mode_shows_the_backlog_behind_a_stall() {
        let (agg, report) = run(Mode::Delay, 1).await;
        assert_eq!(report.replayed, 100);
        let s = agg.table.op_total(Op::BlobHead).unwrap();
        let latency_p99 = ms(s.latency.value_at_quantile(0.99));
        let service = s.service.as_ref().unwrap();
        let lag = s.schedule_lag.as_ref().unwrap();
        // ~49 requests were due while the stalled one held the only slot.
        assert!(
            latency_p99 > 400.0,
            "response time p99 {latency_p99} ms hides the backlog"
        );
        assert!(
            ms(service.value_at_quantile(0.99)) < 5.0,
            "service p99 must not show it"
        );
        assert!(
            ms(service.max()) >= 499.0,
            "the stall itself is a service time"
        );
        assert!(
            ms(lag.value_at_quantile(0.99)) > 400.0,
            "schedule lag shows the backlog"
        );
        assert!(s.late_starts[2] >= 40, "{:?}", s.late_starts);
        assert!(
            report.cap_wait >= Duration::from_millis(450),
            "{:?}",
            report.cap_wait
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stress_mode_is_a_closed_loop_that_cannot_see_the_backlog() {
        let (agg, report) = run(Mode::Stress, 1).await;
        assert_eq!(report.replayed, 100);
        let s = agg.table.op_total(Op::BlobHead).unwrap();
        // Coordinated omission: one slow sample, the rest at service time.
        assert!(ms(s.latency.value_at_quantile(0.99)) < 5.0);
        assert!(ms(s.latency.max()) >= 499.0);
        assert!(s.schedule_lag.is_none(), "closed model has no schedule");
    }

    #[tokio::test(start_paused = true)]
    async fn more_slots_absorb_the_stall_in_delay_mode() {
        let (agg, _) = run(Mode::Delay, 64).await;
        let s = agg.table.op_total(Op::BlobHead).unwrap();
        assert!(
            ms(s.latency.value_at_quantile(0.98)) < 5.0,
            "only the stalled request is slow"
        );
        assert!(ms(s.schedule_lag.as_ref().unwrap().value_at_quantile(0.99)) < 2.0);
    }

    /// Two endpoints, the second refusing every connection; 60 HEADs alternate between
    /// them (round-robin), one at a time so the failure streak is exact. A real registry
    /// cannot be made to refuse exactly these connections on demand.
    async fn two_endpoints(failover: bool) -> (Aggregator, ExecReport, usize) {
        use crate::net::transport::TransportError;
        use crate::route::RouteKind;

        let (recorder, aggregator) = spawn_aggregator();
        let up =
            ScriptedTransport::new(|_| ScriptedResponse::status(200).header("content-length", "0"));
        let refusing = Arc::new(ScriptedTransport::new(|_| {
            ScriptedResponse::error(TransportError::new(ErrorKind::Connect, "refused"))
        }));
        let transports: [Arc<dyn crate::net::transport::Transport>; 2] =
            [Arc::new(up), Arc::clone(&refusing) as _];
        let clients: Vec<RegistryClient> = transports
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                RegistryClient::new(
                    t,
                    format!("http://node{i}.test/").parse().unwrap(),
                    recorder.for_endpoint(i),
                    ClientOptions::default(),
                )
            })
            .collect();
        let names = ["http://node0.test", "http://node1.test"];
        let targets = Targets {
            probes: clients
                .iter()
                .map(|c| c.with_recorder(Recorder::discard()))
                .collect(),
            clients,
            router: Arc::new(Router::new(
                &names,
                RouteOptions {
                    kind: RouteKind::RoundRobin,
                    ..RouteOptions::default()
                },
            )),
            health: Arc::new(Health::new(2, 3, failover)),
            probe_interval: Duration::from_secs(3600),
        };
        let (tx, rx) = mpsc::channel(100);
        let repo: crate::oci::Repository = "a/b".parse().unwrap();
        for seq in 0..60u64 {
            let op = PlannedOp {
                seq,
                offset: Duration::ZERO,
                action: Action::BlobHead {
                    repo: repo.clone(),
                    digest: crate::digest::Digest::sha256_of(&seq.to_be_bytes()),
                },
                folded: 0,
                session: None,
                client: 0,
            };
            tx.send(PlanItem::Op(op)).await.unwrap();
        }
        drop(tx);
        let options = ExecOptions {
            mode: Mode::Stress,
            concurrency: 1,
            max_lateness: None,
            grace: Duration::from_secs(1),
            precise_timer: false,
        };
        let report = execute_on(
            rx,
            targets,
            recorder,
            options,
            Instant::now(),
            Shutdown::new(),
            ErrorLog::default(),
            None,
        )
        .await;
        (aggregator.finish().await, report, refusing.requests().len())
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_endpoint_goes_down_and_its_share_fails_over() {
        let (agg, report, refused) = two_endpoints(true).await;
        assert_eq!(refused, 3);
        assert_eq!(report.replayed, 60);
        let node0 = agg.endpoints[0].op_total(Op::BlobHead).unwrap();
        let node1 = agg.endpoints[1].op_total(Op::BlobHead).unwrap();
        // Ops 1, 3, 5 were refused; the third marked node 1 down; the other 27 of its ops
        // went to node 0.
        assert_eq!((node1.count, node1.errors), (3, 3));
        assert_eq!(node1.errors_by_kind[&ErrorKind::Connect], 3);
        assert_eq!((node0.count, node0.ok), (57, 57));
        assert_eq!(agg.events[Event::EndpointDown.index()], 1);
        assert_eq!(agg.events[Event::Failover.index()], 27);
        let total = agg.table.op_total(Op::BlobHead).unwrap();
        assert_eq!(total.count, node0.count + node1.count);
    }

    #[tokio::test(start_paused = true)]
    async fn without_failover_a_down_endpoints_share_fails_unsent() {
        let (agg, _, refused) = two_endpoints(false).await;
        let node0 = agg.endpoints[0].op_total(Op::BlobHead).unwrap();
        let node1 = agg.endpoints[1].op_total(Op::BlobHead).unwrap();
        assert_eq!((node0.count, node0.ok), (30, 30));
        assert_eq!((node1.count, node1.errors), (30, 30));
        assert_eq!(node1.errors_by_kind[&ErrorKind::Connect], 3);
        assert_eq!(node1.errors_by_kind[&ErrorKind::EndpointDown], 27);
        assert_eq!(refused, 3, "nothing sent to a down endpoint");
        assert_eq!(agg.events[Event::Failover.index()], 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_counts_what_did_not_run() {
        let transport = ScriptedTransport::new(|_| {
            ScriptedResponse::status(200).delay(Duration::from_secs(3600))
        });
        let (recorder, aggregator) = spawn_aggregator();
        let client = RegistryClient::new(
            Arc::new(transport),
            "http://registry.test/".parse().unwrap(),
            recorder,
            ClientOptions::default(),
        );
        let (tx, rx) = mpsc::channel(1000);
        for seq in 0..10u64 {
            let op = PlannedOp {
                seq,
                offset: Duration::ZERO,
                action: Action::Ping,
                folded: 2,
                session: None,
                client: 0,
            };
            tx.send(PlanItem::Op(op)).await.unwrap();
        }
        drop(tx);
        let shutdown = Shutdown::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.cancel();
        });
        let options = ExecOptions {
            mode: Mode::Stress,
            concurrency: 4,
            max_lateness: None,
            grace: Duration::from_secs(5),
            precise_timer: false,
        };
        let report = execute(
            rx,
            client,
            options,
            Instant::now(),
            shutdown,
            ErrorLog::default(),
            None,
        )
        .await;
        assert_eq!(report.replayed, 0);
        assert_eq!(report.interrupted, 30, "10 ops of 3 records each");
        let agg = aggregator.finish().await;
        assert_eq!(
            agg.table.op_total(Op::Ping).unwrap().errors_by_kind[&ErrorKind::Cancelled],
            4
        );
    }
}
