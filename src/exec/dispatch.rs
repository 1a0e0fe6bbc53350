//! The dispatcher's state and steps, shared by the executor's two ways of running a plan
//! (`executor.rs`: a task per operation, or stress mode's workers) and by stress mode's
//! event loop (`lane.rs`): the next operation taken from the plan, its offer sent and its
//! task made, finished tasks reaped, and what a stop leaves cancelled and recorded.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::options::{ExecOptions, ExecReport, Mode};
use super::pacer::Pacer;
use super::session_unpack::Chains;
use super::task::{run_task, InFlight, TaskDone, TaskEnv};
use crate::metrics::recorder::Unsent;
use crate::metrics::{ErrorKind, Sample, SessionMsg};
use crate::net::transport::boxed_in_place;
use crate::plan::{Action, PlanItem, PlannedOp, SessionTag};

/// What the dispatcher does next: nearly always an operation, in the box the planner made.
pub(super) enum Next {
    Run(Box<PlannedOp>),
    /// The plan is over.
    End,
    /// A stop: nothing more starts.
    Stop,
}

/// What the dispatcher waits for when the next operation cannot be taken at once.
pub(super) enum Wait {
    /// The plan has no item ready.
    Plan,
    /// The close of pull `.0` found the aggregator's channel full.
    Closed(u64),
}

/// The dispatcher's state while the plan runs: the dispatcher's own in delay mode, the
/// workers' in turn (behind a lock, with the plan) in stress mode.
pub(super) struct Dispatch {
    pub(super) env: Arc<TaskEnv>,
    pub(super) options: ExecOptions,
    pub(super) anchor: Instant,
    /// The in-flight slots of delay mode's tasks; none for stress mode's workers, which are
    /// the slots themselves.
    pub(super) permits: Option<Arc<Semaphore>>,
    pub(super) report: ExecReport,
    pub(super) pacer: Pacer,
    /// The order of each open pull's layers, with `--unpack`.
    pub(super) chains: Chains,
    /// The stop, waited for beside every wait of the dispatcher: one future for the whole
    /// run, registered with the token once rather than at every operation.
    pub(super) stopped: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The last operation started and whether the plan was waited for since (stress mode's
    /// workers): the next one taken at once waited for a worker since that start.
    pub(super) last_start: Instant,
    pub(super) plan_waited: bool,
    /// Where the run's stalls are witnessed (stress mode's loops take it over).
    pub(super) witness: Option<super::canary::Witness>,
}

/// An operation's task, made but not yet started.
pub(super) type OpTask = Pin<Box<dyn std::future::Future<Output = TaskDone> + Send>>;

impl Dispatch {
    /// The next operation of the plan (closing the pull sessions the planner closes on the
    /// way), the plan's end, or a stop.
    pub(super) async fn next(&mut self, plan: &mut mpsc::Receiver<PlanItem>) -> Next {
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
    pub(super) fn next_ready(&mut self, plan: &mut mpsc::Receiver<PlanItem>) -> Result<Next, Wait> {
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
    pub(super) async fn next_after(
        &mut self,
        plan: &mut mpsc::Receiver<PlanItem>,
        mut wait: Wait,
    ) -> Next {
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
    pub(super) fn take(&mut self, item: PlanItem) -> Result<Option<Box<PlannedOp>>, Wait> {
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
    pub(super) async fn start(&mut self, op: Box<PlannedOp>) -> Option<OpTask> {
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
    pub(super) fn launch(
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
        let member = op.pull_session();
        let unsent = self.env.recorder.offered_now(at, member, op.closes, None);
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
        let task =
            boxed_in_place(|| run_task(op, choice, intended, started, env, permit, layer, None));
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
    pub(super) fn close_chain(&mut self, closes: Option<u64>) {
        if let Some(id) = closes {
            self.chains.close(id);
        }
    }

    /// A worker's operation starts: taken at once, it waited for a worker since the last
    /// start, as the dispatcher waits for a slot (the cap binding, as a closed loop's does).
    pub(super) fn worker_started(&mut self, started: Instant) {
        if !self.plan_waited {
            self.report.cap_wait += started.saturating_duration_since(self.last_start);
        }
        (self.last_start, self.plan_waited) = (started, false);
    }

    /// Waits until `intended` (if any) and for a free slot: a task's permit, or `Some(None)`
    /// for a worker, the slot itself. The time spent waiting for the slot is counted as the
    /// cap binding. `None` on a stop.
    pub(super) async fn slot(
        &mut self,
        intended: Option<Instant>,
    ) -> Option<Option<OwnedSemaphorePermit>> {
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
    pub(super) async fn drain(&mut self, plan: &mut mpsc::Receiver<PlanItem>) {
        plan.close();
        while let Some(item) = plan.recv().await {
            if let PlanItem::Op(op) = item {
                self.report.interrupted += op.records();
            }
        }
    }
}

/// Settles one finished task: its operations counted as run; a task that did not end
/// (cancelled, or a panic) left its operation behind, counted as interrupted and returned
/// (with any other such) to be recorded.
pub(super) fn reap(
    report: &mut ExecReport,
    env: &TaskEnv,
    res: Result<TaskDone, JoinError>,
) -> Vec<InFlight> {
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
pub(super) async fn wait_for_end_or_stop(
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
pub(super) async fn cancel_after_grace(
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
