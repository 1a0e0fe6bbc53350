//! The dispatcher: it owns the schedule, takes planned operations from the bounded channel
//! in order, waits for each one's due time (delay mode) and for a free slot, and starts it
//! as a task; it reaps finished tasks as it goes, so nothing grows with the number of
//! operations. In stress mode (a closed loop) `--concurrency` workers take the operations
//! instead, each the next one as its last ends, with no task made per operation. On a
//! stop it counts what was planned but not run, gives the operations in flight the grace
//! period, then cancels and records the rest.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::deps::Deps;
use super::options::{ExecOptions, ExecReport, Mode};
use super::pacer::{self, Pacer};
use super::replicate::Replicas;
use super::session_unpack::{Chains, Unpacking};
use super::targets::Targets;
use super::task::{run_task, InFlight, TaskDone, TaskEnv};
use super::unpack::UnpackWork;
#[cfg(test)]
use crate::client::RegistryClient;
use crate::metrics::recorder::Unsent;
use crate::metrics::{ErrorKind, ErrorLog, Recorder, Sample, SessionMsg};
use crate::net::transport::boxed_in_place;
use crate::plan::{Action, PlanItem, PlannedOp, SessionTag};
use crate::progress::Progress;
use crate::shutdown::Shutdown;

/// A plan's run over its targets.
#[allow(missing_debug_implementations)] // clients hold transports that are not `Debug`
pub struct Executor {
    pub targets: Targets,
    /// Records what belongs to no endpoint (image sessions).
    pub recorder: Recorder,
    pub options: ExecOptions,
    /// The instant offset zero stands for (delay mode).
    pub anchor: Instant,
    pub shutdown: Shutdown,
    pub errors: ErrorLog,
    pub progress: Option<Arc<Progress>>,
    /// `replay --unpack`: the layers of the plan's pull sessions unpacked.
    pub unpack: Option<UnpackWork>,
    /// `replay --replica`: the replicas watched for each image the plan pushes.
    pub replicas: Option<Arc<Replicas>>,
}

/// What the dispatcher does next: nearly always an operation, in the box the planner made.
enum Next {
    Run(Box<PlannedOp>),
    /// The plan is over.
    End,
    /// A stop: nothing more starts.
    Stop,
}

/// What the dispatcher waits for when the next operation cannot be taken at once.
enum Wait {
    /// The plan has no item ready.
    Plan,
    /// The close of pull `.0` found the aggregator's channel full.
    Closed(u64),
}

/// The dispatcher's state while the plan runs: the dispatcher's own in delay mode, the
/// workers' in turn (behind a lock, with the plan) in stress mode.
struct Dispatch {
    env: Arc<TaskEnv>,
    options: ExecOptions,
    anchor: Instant,
    /// The in-flight slots of delay mode's tasks; none for stress mode's workers, which are
    /// the slots themselves.
    permits: Option<Arc<Semaphore>>,
    report: ExecReport,
    pacer: Pacer,
    /// The order of each open pull's layers, with `--unpack`.
    chains: Chains,
    /// The stop, waited for beside every wait of the dispatcher: one future for the whole
    /// run, registered with the token once rather than at every operation.
    stopped: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The last operation started and whether the plan was waited for since (stress mode's
    /// workers): the next one taken at once waited for a worker since that start.
    last_start: Instant,
    plan_waited: bool,
}

/// An operation's task, made but not yet started.
type OpTask = Pin<Box<dyn std::future::Future<Output = TaskDone> + Send>>;

/// What stress mode's workers share: the dispatcher's state and the plan, taken in turn.
struct Taking {
    dispatch: Dispatch,
    plan: mpsc::Receiver<PlanItem>,
}

/// The operations stress mode's workers finished: counted as each ends, so a worker
/// cancelled after the grace period loses none of those it carried out before.
#[derive(Default)]
struct Finished {
    replayed: AtomicU64,
    folded: AtomicU64,
    /// Workers carrying out an operation now.
    running: AtomicUsize,
}

impl Executor {
    /// An executor of one endpoint: every operation goes to `client` (the unit tests).
    #[cfg(test)]
    pub fn single(client: RegistryClient, options: ExecOptions, shutdown: Shutdown) -> Executor {
        Executor {
            recorder: client.recorder().clone(),
            targets: Targets::single(client),
            options,
            anchor: Instant::now(),
            shutdown,
            errors: ErrorLog::default(),
            progress: None,
            unpack: None,
            replicas: None,
        }
    }

    /// Runs the plan: operations start as the mode and the in-flight cap allow, until the
    /// plan ends or a stop.
    pub async fn run(self, plan: mpsc::Receiver<PlanItem>) -> ExecReport {
        let probes_stop = tokio_util::sync::CancellationToken::new();
        // Probes end with the run, however it ends.
        let _probes = probes_stop.clone().drop_guard();
        let cancelled = self.shutdown.token().clone();
        let (precise, anchor) = (self.options.precise_timer, self.anchor);
        pacer::wait_for_anchor(anchor, precise, &cancelled).await;
        // A layer waiting for its turn to be unpacked gives its slot back (`--unpack`): a
        // worker cannot, so those runs start a task per operation in either mode.
        let workers = self.options.mode == Mode::Stress && self.unpack.is_none();
        let now = Instant::now();
        let dispatch = Dispatch {
            permits: (!workers).then(|| Arc::new(Semaphore::new(self.options.concurrency.max(1)))),
            options: self.options,
            anchor,
            report: ExecReport::default(),
            pacer: Pacer::new(self.options.mode == Mode::Delay && precise),
            chains: Chains::default(),
            stopped: Box::pin(cancelled.clone().cancelled_owned()),
            last_start: now,
            plan_waited: false,
            env: Arc::new(TaskEnv {
                targets: self.targets,
                recorder: self.recorder,
                probes_stop,
                deps: Arc::new(Deps::default()),
                shutdown: self.shutdown,
                errors: self.errors,
                progress: self.progress,
                unpacking: self.unpack.map(Unpacking::new),
                replicas: self.replicas,
                lost: std::sync::Mutex::default(),
            }),
        };
        let mut report = if workers {
            dispatch.run_workers(plan).await
        } else {
            dispatch.run_tasks(plan).await
        };
        report.duration = Instant::now().saturating_duration_since(anchor);
        report
    }
}

impl Dispatch {
    /// Delay mode (and `--unpack`): each operation started as a task of its own when due
    /// and a slot is free, finished tasks reaped as the dispatcher goes.
    async fn run_tasks(mut self, mut plan: mpsc::Receiver<PlanItem>) -> ExecReport {
        let mut tasks = JoinSet::new();
        loop {
            while let Some(res) = tasks.try_join_next() {
                reap(&mut self.report, &self.env, res);
            }
            match self.next(&mut plan).await {
                Next::Run(op) => {
                    if let Some(task) = self.start(op).await {
                        tasks.spawn(task);
                    }
                }
                Next::End | Next::Stop => break,
            }
        }
        let env = Arc::clone(&self.env);
        if wait_for_end_or_stop(&mut tasks, &env, &mut self.report).await {
            self.drain(&mut plan).await;
            cancel_after_grace(&mut tasks, &env, &mut self.report, self.options.grace).await;
        }
        self.report
    }

    /// Stress mode (a closed loop): `--concurrency` workers, each taking the next operation
    /// as its last one ends and carrying it out itself. The operations start in plan order
    /// as they would from the dispatcher (the workers take the plan in turn), without a
    /// task, a hand-over and a wake-up of the dispatcher per operation.
    async fn run_workers(self, plan: mpsc::Receiver<PlanItem>) -> ExecReport {
        let env = Arc::clone(&self.env);
        let grace = self.options.grace;
        let gathering = self.options.gather.then(crate::net::gather::allow);
        let finished = Arc::new(Finished::default());
        let taking = Arc::new(tokio::sync::Mutex::new(Taking {
            dispatch: self,
            plan,
        }));
        let mut tasks = JoinSet::new();
        for _ in 0..taking.lock().await.dispatch.options.concurrency.max(1) {
            tasks.spawn(work(Arc::clone(&taking), Arc::clone(&finished)));
        }
        // Reaped here (a worker's panic: the operation it held is interrupted), added to
        // the dispatcher's figures at the end.
        let mut reaped = ExecReport::default();
        if wait_for_end_or_stop(&mut tasks, &env, &mut reaped).await {
            // Held only while the plan is drained: a worker ending an operation in the
            // grace period takes the lock to learn of the stop.
            let mut taking = taking.lock().await;
            let Taking { dispatch, plan } = &mut *taking;
            dispatch.drain(plan).await;
            drop(taking);
            cancel_after_grace(&mut tasks, &env, &mut reaped, grace).await;
        }
        let mut report = std::mem::take(&mut taking.lock().await.dispatch.report);
        report.replayed += finished.replayed.load(Ordering::Relaxed);
        report.folded += finished.folded.load(Ordering::Relaxed);
        report.interrupted += reaped.interrupted;
        report.gathered = gathering.as_ref().map(crate::net::gather::Allowed::used);
        report
    }

    /// The next operation of the plan (closing the pull sessions the planner closes on the
    /// way), the plan's end, or a stop.
    async fn next(&mut self, plan: &mut mpsc::Receiver<PlanItem>) -> Next {
        match self.next_ready(plan) {
            Ok(next) => next,
            Err(wait) => self.next_after(plan, wait).await,
        }
    }

    /// [`Self::next`] without waiting, or what it has to wait for. The planner is ahead
    /// nearly always: an item waiting is taken at once, the stop read as a flag. Not an
    /// `async fn`: the operation goes from the channel to its task on the stack, where a
    /// future would hold it in its state on the way (a write of four cold cache lines
    /// per copy, at each of its steps).
    fn next_ready(&mut self, plan: &mut mpsc::Receiver<PlanItem>) -> Result<Next, Wait> {
        loop {
            if self.env.shutdown.token().is_cancelled() {
                return Ok(Next::Stop);
            }
            let item = match plan.try_recv() {
                Ok(item) => item,
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(Next::End),
                Err(mpsc::error::TryRecvError::Empty) => return Err(Wait::Plan),
            };
            if let Some(op) = self.take(item)? {
                return Ok(Next::Run(op));
            }
        }
    }

    /// [`Self::next`] once [`Self::next_ready`] found it has to wait: an empty plan is
    /// waited on beside the stop, a message for a full channel sent.
    async fn next_after(&mut self, plan: &mut mpsc::Receiver<PlanItem>, mut wait: Wait) -> Next {
        loop {
            match wait {
                Wait::Closed(id) => {
                    let closed = SessionMsg::Closed { id };
                    self.env.recorder.session(closed).await;
                }
                Wait::Plan => {
                    self.plan_waited = true;
                    let item = tokio::select! {
                        biased;
                        () = &mut self.stopped => return Next::Stop,
                        item = plan.recv() => item,
                    };
                    let Some(item) = item else {
                        return Next::End;
                    };
                    match self.take(item) {
                        Ok(Some(op)) => return Next::Run(op),
                        Ok(None) => {}
                        Err(more) => {
                            wait = more;
                            continue;
                        }
                    }
                }
            }
            match self.next_ready(plan) {
                Ok(next) => return next,
                Err(more) => wait = more,
            }
        }
    }

    /// An item of the plan: an operation to run, or (`None`) a pull the planner closed on
    /// the way, whose unpack order ends and whose close goes to the aggregator.
    fn take(&mut self, item: PlanItem) -> Result<Option<Box<PlannedOp>>, Wait> {
        match item {
            PlanItem::Op(op) => Ok(Some(op)),
            PlanItem::CloseSession(id) => {
                self.close_chain(Some(id));
                if self.env.recorder.session_now(SessionMsg::Closed { id }) {
                    Ok(None)
                } else {
                    Err(Wait::Closed(id))
                }
            }
        }
    }

    /// Waits for `op`'s due time (delay mode) and a free slot, then makes its task (`None`
    /// when it does not run): an operation later than `max_lateness` is dropped and
    /// counted, and a stop while waiting counts it as interrupted.
    async fn start(&mut self, op: Box<PlannedOp>) -> Option<OpTask> {
        let intended = match self.options.mode {
            Mode::Delay => Some(self.anchor + op.offset),
            Mode::Stress => None,
        };
        let Some(permit) = self.slot(intended).await else {
            self.report.interrupted += op.records();
            return None;
        };
        if let (Some(due), Some(max)) = (intended, self.options.max_lateness) {
            if Instant::now() > due + max {
                self.env.recorder.offered(due, None, op.closes).await;
                self.close_chain(op.closes);
                self.report.late += op.records();
                return None;
            }
        }
        let (task, unsent) = self.launch(op, intended, permit);
        if let Some(unsent) = unsent {
            self.env.recorder.send_unsent(unsent).await;
        }
        Some(task)
    }

    /// Starts `op` now (its due time and slot, if any, waited for): its offer sent to the
    /// aggregator, its task made. A full channel gives the offer back, to be sent before
    /// the task runs (whose sample comes after it). Not an `async fn`, for the reason
    /// [`Self::next_ready`] gives.
    fn launch(
        &mut self,
        op: Box<PlannedOp>,
        intended: Option<Instant>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> (OpTask, Option<Unsent>) {
        let started = Instant::now();
        if self.permits.is_none() {
            self.worker_started(started);
        }
        let at = intended.unwrap_or(started);
        let member = match op.session {
            Some(SessionTag::PullHead(id) | SessionTag::PullLayer(id)) => Some(id),
            None => None,
        };
        let unsent = self.env.recorder.offered_now(at, member, op.closes);
        if matches!(
            op.action,
            Action::BlobUpload { .. } | Action::BlobMount { .. }
        ) {
            self.env.deps.register(op.seq);
        }
        let choice = self.env.targets.choose(&op);
        // A layer of a pull takes its place in the pull's order now, in plan order.
        let layer = match (&self.env.unpacking, op.session, &op.action) {
            (
                Some(u),
                Some(SessionTag::PullLayer(id)),
                Action::BlobGet {
                    repo,
                    diff_id: Some(_),
                    ..
                },
            ) => Some(self.chains.slot(id, repo, u)),
            _ => None,
        };
        self.close_chain(op.closes);
        // Boxed: the task's future is a few kilobytes (the whole client call inline), and
        // the runtime would otherwise copy it into the task and again on completion.
        let env = Arc::clone(&self.env);
        let task = boxed_in_place(|| run_task(op, choice, intended, started, env, permit, layer));
        // Requests in flight are the slots held, never the tasks not yet reaped: a task
        // gives its slot back as it ends, before the executor collects it (the workers
        // count their own).
        if let Some(permits) = &self.permits {
            let held = self.options.concurrency.max(1) - permits.available_permits();
            self.report.max_in_flight = self.report.max_in_flight.max(held);
        }
        (task, unsent)
    }

    /// Pull `closes` gains no further member: its layers' unpack order ends there (its
    /// session's end goes to the aggregator with the message of the operation that closed
    /// it, or as one of its own).
    fn close_chain(&mut self, closes: Option<u64>) {
        if let Some(id) = closes {
            self.chains.close(id);
        }
    }

    /// A worker's operation starts: taken at once, it waited for a worker since the last
    /// start, as the dispatcher waits for a slot (the cap binding, as a closed loop's does).
    fn worker_started(&mut self, started: Instant) {
        if !self.plan_waited {
            self.report.cap_wait += started.saturating_duration_since(self.last_start);
        }
        (self.last_start, self.plan_waited) = (started, false);
    }

    /// Waits until `intended` (if any) and for a free slot: a task's permit, or `Some(None)`
    /// for a worker, the slot itself. The time spent waiting for the slot is counted as the
    /// cap binding. `None` on a stop.
    async fn slot(&mut self, intended: Option<Instant>) -> Option<Option<OwnedSemaphorePermit>> {
        if let Some(due) = intended {
            tokio::select! {
                biased;
                () = &mut self.stopped => return None,
                _ = self.pacer.sleep_until(due) => {}
            }
        }
        let Some(permits) = &self.permits else {
            return Some(None);
        };
        if let Ok(permit) = Arc::clone(permits).try_acquire_owned() {
            return Some(Some(permit));
        }
        let waited = Instant::now();
        let permit = tokio::select! {
            biased;
            () = &mut self.stopped => return None,
            p = Arc::clone(permits).acquire_owned() => p,
        };
        self.report.cap_wait += waited.elapsed();
        permit.ok().map(Some)
    }

    /// After a stop: what was planned but not run is counted, and the planner stopped.
    async fn drain(&mut self, plan: &mut mpsc::Receiver<PlanItem>) {
        plan.close();
        while let Some(item) = plan.recv().await {
            if let PlanItem::Op(op) = item {
                self.report.interrupted += op.records();
            }
        }
    }
}

/// One of stress mode's workers: takes the next operation (the plan and the dispatcher's
/// state in turn with the other workers), carries it out, and again, until the plan ends
/// or a stop.
async fn work(taking: Arc<tokio::sync::Mutex<Taking>>, finished: Arc<Finished>) -> TaskDone {
    loop {
        let task = {
            let mut taking = taking.lock().await;
            let Taking { dispatch, plan } = &mut *taking;
            // The operation goes from the plan to its task without a wait in between (a
            // stress-mode worker has no due time and is the slot), so it is never held in
            // this future's state: only a plan that has nothing ready is waited for.
            let next = match dispatch.next_ready(plan) {
                Ok(next) => next,
                Err(wait) => dispatch.next_after(plan, wait).await,
            };
            let Next::Run(op) = next else {
                break;
            };
            let (task, unsent) = dispatch.launch(op, None, None);
            let running = finished.running.fetch_add(1, Ordering::Relaxed) + 1;
            dispatch.report.max_in_flight = dispatch.report.max_in_flight.max(running);
            if let Some(unsent) = unsent {
                dispatch.env.recorder.send_unsent(unsent).await;
            }
            task
        };
        let done = task.await;
        finished.running.fetch_sub(1, Ordering::Relaxed);
        finished.replayed.fetch_add(done.ops, Ordering::Relaxed);
        finished.folded.fetch_add(done.folded, Ordering::Relaxed);
    }
    TaskDone { ops: 0, folded: 0 }
}

/// Settles one finished task: its operations counted as run; a task that did not end
/// (cancelled, or a panic) left its operation behind, counted as interrupted and returned
/// (with any other such) to be recorded.
fn reap(report: &mut ExecReport, env: &TaskEnv, res: Result<TaskDone, JoinError>) -> Vec<InFlight> {
    match res {
        Ok(done) => {
            report.replayed += done.ops;
            report.folded += done.folded;
            Vec::new()
        }
        Err(_) => {
            let lost = std::mem::take(
                &mut *env
                    .lost
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            report.interrupted += lost.iter().map(|l| l.records).sum::<u64>();
            lost
        }
    }
}

/// The plan is over (or stopped): waits for the tasks in flight to end, or for a stop, also
/// one that comes while they are awaited. `true` on a stop.
async fn wait_for_end_or_stop(
    tasks: &mut JoinSet<TaskDone>,
    env: &TaskEnv,
    report: &mut ExecReport,
) -> bool {
    let cancelled = env.shutdown.token();
    while !cancelled.is_cancelled() {
        let next = tokio::select! {
            biased;
            () = cancelled.cancelled() => break,
            next = tasks.join_next() => next,
        };
        match next {
            Some(res) => {
                reap(report, env, res);
            }
            None => break,
        }
    }
    cancelled.is_cancelled()
}

/// After a stop: the tasks in flight get the grace period; the rest are cancelled and
/// recorded so.
async fn cancel_after_grace(
    tasks: &mut JoinSet<TaskDone>,
    env: &TaskEnv,
    report: &mut ExecReport,
    grace: std::time::Duration,
) {
    let deadline = Instant::now() + grace;
    loop {
        match tokio::time::timeout_at(deadline, tasks.join_next()).await {
            Ok(Some(res)) => {
                reap(report, env, res);
            }
            Ok(None) => return,
            Err(_) => break,
        }
    }
    // Grace is over: stop the rest and record them as cancelled.
    tasks.abort_all();
    while let Some(res) = tasks.join_next().await {
        for lost in reap(report, env, res) {
            let sample =
                Sample::unanswered(lost.op, ErrorKind::Cancelled, lost.intended, lost.started);
            let client = &env.targets.clients[lost.endpoint];
            client.recorder().record(sample).await;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The executor on a paused clock with a scripted transport: exact timing, no sockets.
    //! A real registry cannot be made to stall at one exact request on demand.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::client::ClientOptions;
    use crate::metrics::{Aggregator, AggregatorBuilder};
    use crate::metrics::{Event, Op};
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};
    use crate::route::health::{Choice, Health};
    use crate::route::{RouteOptions, Router};

    const STALL: Duration = Duration::from_millis(500);

    /// A client of a scripted registry, recording into `recorder`.
    fn scripted_client(
        transport: Arc<dyn crate::net::transport::Transport>,
        recorder: Recorder,
    ) -> RegistryClient {
        RegistryClient::new(
            transport,
            "http://registry.test/".parse().unwrap(),
            recorder,
            ClientOptions::default(),
        )
    }

    /// A run's options: `mode` over `concurrency` slots, no bound on lateness, `grace` after
    /// a stop.
    fn run_options(mode: Mode, concurrency: usize, grace: Duration) -> ExecOptions {
        ExecOptions {
            mode,
            concurrency,
            max_lateness: None,
            grace,
            precise_timer: false,
            gather: false,
        }
    }

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
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = scripted_client(Arc::new(transport), recorder);
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
                    client_name: None,
                    closes: None,
                };
                let _ = tx.send(PlanItem::Op(Box::new(op))).await;
            }
        });
        let options = run_options(mode, concurrency, Duration::from_secs(1));
        let report = Executor::single(client, options, Shutdown::new())
            .run(rx)
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
        let s = agg.table().op_total(Op::BlobHead).unwrap();
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
        // One slot: never two in flight, though a finished task may wait to be reaped.
        assert_eq!(report.max_in_flight, 1);
        let s = agg.table().op_total(Op::BlobHead).unwrap();
        // Coordinated omission: one slow sample, the rest at service time.
        assert!(ms(s.latency.value_at_quantile(0.99)) < 5.0);
        assert!(ms(s.latency.max()) >= 499.0);
        assert!(s.schedule_lag.is_none(), "closed model has no schedule");
    }

    #[tokio::test(start_paused = true)]
    async fn more_slots_absorb_the_stall_in_delay_mode() {
        let (agg, _) = run(Mode::Delay, 64).await;
        let s = agg.table().op_total(Op::BlobHead).unwrap();
        assert!(
            ms(s.latency.value_at_quantile(0.98)) < 5.0,
            "only the stalled request is slow"
        );
        assert!(ms(s.schedule_lag.as_ref().unwrap().value_at_quantile(0.99)) < 2.0);
    }

    /// One client's two pulls: the manifest GET of the second, due 10 ms after the first's
    /// (answered in 50 ms, one slot), closes the first as it starts.
    async fn two_pulls(mode: Mode, max_lateness: Option<Duration>) -> (Aggregator, ExecReport) {
        let transport = ScriptedTransport::new(|_| {
            ScriptedResponse::status(200)
                .header("content-length", "0")
                .delay(Duration::from_millis(50))
        });
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = scripted_client(Arc::new(transport), recorder);
        let (tx, rx) = mpsc::channel(4);
        for (seq, closes) in [(0, None), (1, Some(0))] {
            let op = PlannedOp {
                offset: Duration::from_millis(10 * seq),
                session: Some(SessionTag::PullHead(seq)),
                closes,
                ..blob_head(seq)
            };
            tx.send(PlanItem::Op(Box::new(op))).await.unwrap();
        }
        drop(tx);
        let options = ExecOptions {
            max_lateness,
            ..run_options(mode, 1, Duration::from_secs(1))
        };
        let report = Executor::single(client, options, Shutdown::new())
            .run(rx)
            .await;
        (aggregator.finish().await, report)
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_closes_the_pull_it_names_as_it_starts_or_is_dropped() {
        // The first pull is recorded once closed; the second, never closed, is not.
        for (mode, max_lateness, late) in [
            (Mode::Stress, None, 0),
            (Mode::Delay, None, 0),
            (Mode::Delay, Some(Duration::from_millis(5)), 1),
        ] {
            let (agg, report) = two_pulls(mode, max_lateness).await;
            assert_eq!(report.late, late, "{mode:?}");
            let pulls = agg.table().op_total(Op::ImagePull);
            assert_eq!(pulls.map(|p| p.count), Some(1), "{mode:?} {max_lateness:?}");
        }
    }

    /// A HEAD of a blob of its own (the digest of `seq`) in `a/b`, due at once.
    fn blob_head(seq: u64) -> PlannedOp {
        PlannedOp {
            seq,
            offset: Duration::ZERO,
            action: Action::BlobHead {
                repo: "a/b".parse().unwrap(),
                digest: crate::digest::Digest::sha256_of(&seq.to_be_bytes()),
            },
            folded: 0,
            session: None,
            client: 0,
            client_name: None,
            closes: None,
        }
    }

    /// Two endpoints, the second refusing every connection; 60 HEADs alternate between
    /// them (round-robin), one at a time so the failure streak is exact. A real registry
    /// cannot be made to refuse exactly these connections on demand.
    async fn two_endpoints(failover: bool) -> (Aggregator, ExecReport, usize) {
        use crate::net::transport::TransportError;
        use crate::route::RouteKind;

        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
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
        for seq in 0..60u64 {
            tx.send(PlanItem::Op(Box::new(blob_head(seq))))
                .await
                .unwrap();
        }
        drop(tx);
        let options = run_options(Mode::Stress, 1, Duration::from_secs(1));
        let report = Executor {
            targets,
            recorder,
            options,
            anchor: Instant::now(),
            shutdown: Shutdown::new(),
            errors: ErrorLog::default(),
            progress: None,
            unpack: None,
            replicas: None,
        }
        .run(rx)
        .await;
        (aggregator.finish().await, report, refusing.requests().len())
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_endpoint_goes_down_and_its_share_fails_over() {
        let (agg, report, refused) = two_endpoints(true).await;
        assert_eq!(refused, 3);
        assert_eq!(report.replayed, 60);
        let node0 = agg.endpoint(0).unwrap().op_total(Op::BlobHead).unwrap();
        let node1 = agg.endpoint(1).unwrap().op_total(Op::BlobHead).unwrap();
        // Ops 1, 3, 5 were refused; the third marked node 1 down; the other 27 of its ops
        // went to node 0.
        assert_eq!((node1.count, node1.errors), (3, 3));
        assert_eq!(node1.errors_by_kind[&ErrorKind::Connect], 3);
        assert_eq!((node0.count, node0.ok), (57, 57));
        assert_eq!(agg.event(Event::EndpointDown), 1);
        assert_eq!(agg.event(Event::Failover), 27);
        let total = agg.table().op_total(Op::BlobHead).unwrap();
        assert_eq!(total.count, node0.count + node1.count);
    }

    #[tokio::test(start_paused = true)]
    async fn without_failover_a_down_endpoints_share_fails_unsent() {
        let (agg, _, refused) = two_endpoints(false).await;
        let node0 = agg.endpoint(0).unwrap().op_total(Op::BlobHead).unwrap();
        let node1 = agg.endpoint(1).unwrap().op_total(Op::BlobHead).unwrap();
        assert_eq!((node0.count, node0.ok), (30, 30));
        assert_eq!((node1.count, node1.errors), (30, 30));
        assert_eq!(node1.errors_by_kind[&ErrorKind::Connect], 3);
        assert_eq!(node1.errors_by_kind[&ErrorKind::EndpointDown], 27);
        assert_eq!(refused, 3, "nothing sent to a down endpoint");
        assert_eq!(agg.event(Event::Failover), 0);
    }

    /// Replays `ops` pings, each folding `folded` records, against a registry that never
    /// answers, with a stop 1 s in: what the executor reported, its cancelled pings, and
    /// how long it took.
    async fn stopped_while_hung(
        ops: u64,
        folded: u32,
        grace: Duration,
    ) -> (ExecReport, u64, Duration) {
        let transport = ScriptedTransport::new(|_| {
            ScriptedResponse::status(200).delay(Duration::from_secs(3600))
        });
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = scripted_client(Arc::new(transport), recorder);
        let (tx, rx) = mpsc::channel(1000);
        for seq in 0..ops {
            let op = PlannedOp {
                seq,
                offset: Duration::ZERO,
                action: Action::Ping,
                folded,
                session: None,
                client: 0,
                client_name: None,
                closes: None,
            };
            tx.send(PlanItem::Op(Box::new(op))).await.unwrap();
        }
        drop(tx);
        let shutdown = Shutdown::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.cancel();
        });
        let options = run_options(Mode::Stress, 4, grace);
        let started = Instant::now();
        let report = Executor::single(client, options, shutdown).run(rx).await;
        let took = started.elapsed();
        let agg = aggregator.finish().await;
        let cancelled =
            agg.table().op_total(Op::Ping).unwrap().errors_by_kind[&ErrorKind::Cancelled];
        (report, cancelled, took)
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_counts_what_did_not_run() {
        let (report, cancelled, _) = stopped_while_hung(10, 2, Duration::from_secs(5)).await;
        assert_eq!(report.replayed, 0);
        assert_eq!(report.interrupted, 30, "10 ops of 3 records each");
        assert_eq!(cancelled, 4, "the four in flight");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_after_the_plan_ended_still_ends_within_grace() {
        // The last operations never get an answer; the plan is over before the stop comes.
        let (report, cancelled, took) = stopped_while_hung(2, 0, Duration::from_secs(2)).await;
        assert_eq!(took, Duration::from_secs(3), "stop at 1 s, grace 2 s");
        assert_eq!(report.interrupted, 2);
        assert_eq!(cancelled, 2);
    }

    /// Stress mode's workers against a transport whose every answer takes `service`: `ops`
    /// HEADs of distinct blobs, planned at once or one every `planned_every`, a stop at
    /// `stop_at` if any. What the executor reported, the digests in the order they were
    /// sent, and how long the run took.
    async fn workers_run(
        ops: u64,
        concurrency: usize,
        service: Duration,
        planned_every: Option<Duration>,
        stop_at: Option<Duration>,
    ) -> (ExecReport, Vec<String>, Duration) {
        let transport = Arc::new(ScriptedTransport::new(move |_| {
            ScriptedResponse::status(200)
                .header("content-length", "0")
                .delay(service)
        }));
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = scripted_client(Arc::clone(&transport) as _, recorder);
        let (tx, rx) = mpsc::channel(1000);
        tokio::spawn(async move {
            for seq in 0..ops {
                if let Some(every) = planned_every {
                    tokio::time::sleep(every).await;
                }
                let _ = tx.send(PlanItem::Op(Box::new(blob_head(seq)))).await;
            }
        });
        let shutdown = Shutdown::new();
        if let Some(at) = stop_at {
            let stop = shutdown.clone();
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                stop.cancel();
            });
        }
        let options = run_options(Mode::Stress, concurrency, Duration::from_secs(10));
        let started = Instant::now();
        let report = Executor::single(client, options, shutdown).run(rx).await;
        let took = started.elapsed();
        aggregator.finish().await;
        let sent = transport
            .requests()
            .iter()
            .map(|r| r.url.path().rsplit('/').next().unwrap().to_owned())
            .collect();
        (report, sent, took)
    }

    #[tokio::test(start_paused = true)]
    async fn stress_mode_workers_send_in_plan_order_and_keep_every_slot_busy() {
        let (report, sent, took) = workers_run(40, 4, Duration::from_millis(10), None, None).await;
        assert_eq!(report.replayed, 40);
        let planned: Vec<String> = (0..40u64)
            .map(|seq| crate::digest::Digest::sha256_of(&seq.to_be_bytes()).to_string())
            .collect();
        assert_eq!(sent, planned, "sent in the plan's order");
        assert_eq!(report.max_in_flight, 4);
        // 40 answers of 10 ms, four at a time, the plan always ahead: the cap binds all along.
        assert_eq!(took, Duration::from_millis(100));
        assert!(
            report.cap_wait >= Duration::from_millis(90),
            "{:?}",
            report.cap_wait
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stress_mode_workers_waiting_for_the_plan_are_not_held_by_the_cap() {
        // One operation planned every 20 ms, answered in 1 ms: the workers wait for the plan.
        let every = Some(Duration::from_millis(20));
        let (report, sent, _) = workers_run(20, 4, Duration::from_millis(1), every, None).await;
        assert_eq!((report.replayed, sent.len()), (20, 20));
        assert_eq!(report.max_in_flight, 1);
        assert!(
            report.cap_wait < Duration::from_millis(5),
            "{:?}",
            report.cap_wait
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_stress_mode_once_its_operations_in_flight_end() {
        // Four answers due at 2 s, a stop at 1 s, 10 s of grace: the run ends at 2 s.
        let (report, sent, took) = workers_run(
            10,
            4,
            Duration::from_secs(2),
            None,
            Some(Duration::from_secs(1)),
        )
        .await;
        assert_eq!(took, Duration::from_secs(2));
        assert_eq!(sent.len(), 4);
        assert_eq!((report.replayed, report.interrupted), (4, 6));
    }

    /// A task that ends leaves nothing behind; one dropped, even before it ever ran,
    /// leaves its operation for the dispatcher to count and record.
    #[tokio::test]
    async fn only_a_task_dropped_before_its_end_leaves_its_operation_behind() {
        let transport = ScriptedTransport::new(|_| ScriptedResponse::status(200));
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = scripted_client(Arc::new(transport), recorder.clone());
        let env = Arc::new(TaskEnv {
            targets: Targets::single(client),
            recorder,
            probes_stop: tokio_util::sync::CancellationToken::new(),
            deps: Arc::default(),
            shutdown: Shutdown::new(),
            errors: ErrorLog::default(),
            progress: None,
            unpacking: None,
            replicas: None,
            lost: std::sync::Mutex::default(),
        });
        let permits = Arc::new(Semaphore::new(2));
        let task = |seq| {
            let op = PlannedOp {
                seq,
                offset: Duration::ZERO,
                action: Action::Ping,
                folded: 2,
                session: None,
                client: 0,
                client_name: None,
                closes: None,
            };
            let choice = Choice::Use {
                endpoint: 0,
                failed_over: false,
            };
            let permit = Arc::clone(&permits).try_acquire_owned().unwrap();
            let env = Arc::clone(&env);
            let op = Box::new(op);
            boxed_in_place(|| run_task(op, choice, None, Instant::now(), env, Some(permit), None))
        };
        assert_eq!(task(0).await.folded, 2);
        assert!(env.lost.lock().unwrap().is_empty());
        drop(task(1));
        let lost = std::mem::take(&mut *env.lost.lock().unwrap());
        assert_eq!(lost.len(), 1);
        assert_eq!((lost[0].op, lost[0].records), (Op::Ping, 3));
        assert_eq!(permits.available_permits(), 2, "both slots given back");
        drop(env);
        aggregator.finish().await;
    }
}
