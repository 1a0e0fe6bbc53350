//! The dispatcher: it owns the schedule, takes planned operations from the bounded channel
//! in order, waits for each one's due time (delay mode) and for a free slot, and starts it
//! as a task; it reaps finished tasks as it goes, so nothing grows with the number of
//! operations. In stress mode (a closed loop) `--concurrency` workers take the operations
//! instead, each the next one as its last ends, with no task made per operation. On a
//! stop it counts what was planned but not run, gives the operations in flight the grace
//! period, then cancels and records the rest.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::canary::Witness;
use super::deps::Deps;
use super::dispatch::{cancel_after_grace, reap, wait_for_end_or_stop, Dispatch, Next};
use super::options::{ExecOptions, ExecReport, Mode};
use super::pacer::{self, Pacer};
use super::replicate::Replicas;
use super::session_unpack::{Chains, Unpacking};
use super::targets::Targets;
use super::task::{TaskDone, TaskEnv};
use super::unpack::UnpackWork;
#[cfg(test)]
use crate::client::RegistryClient;
use crate::metrics::{ErrorLog, Recorder};
use crate::plan::PlanItem;
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
    /// Where the run's stalls are witnessed, when they are: stress mode's event loops take
    /// it over from the runtime's canary.
    pub witness: Option<Witness>,
}

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
            witness: None,
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
            witness: self.witness,
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
        let (this, plan) = match self.on_loops(plan).await {
            Ok(report) => return report,
            Err(back) => back,
        };
        this.run_worker_tasks(plan).await
    }

    /// The run on stress mode's event loops (`lane.rs`), when it may go there and they
    /// start; else the dispatcher and the plan back, untouched, for the workers.
    async fn on_loops(
        self,
        plan: mpsc::Receiver<PlanItem>,
    ) -> Result<ExecReport, (Self, mpsc::Receiver<PlanItem>)> {
        let Some(setup) = super::lane::setup(&self).await else {
            return Err((self, plan));
        };
        let handle = tokio::runtime::Handle::current();
        let opened = match super::lane::open(self.options.concurrency, &setup, &handle) {
            Ok(opened) => opened,
            Err(e) => {
                not_started(&e);
                return Err((self, plan));
            }
        };
        let lane = tokio::task::spawn_blocking(move || {
            super::lane::run(self, plan, handle, setup, opened)
        });
        match lane.await {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(unstarted)) => {
                let super::lane::Unstarted { d, plan, error } = *unstarted;
                not_started(&error);
                Err((d, plan))
            }
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Stress mode on the runtime's tasks: one worker per slot.
    async fn run_worker_tasks(self, plan: mpsc::Receiver<PlanItem>) -> ExecReport {
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
}

/// Says why stress mode's event loops did not start (the run goes on tasks instead).
fn not_started(e: &std::io::Error) {
    tracing::warn!("stress mode's event loops could not start ({e}): the run goes on tasks");
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

#[cfg(test)]
mod tests {
    //! The executor on a paused clock with a scripted transport: exact timing, no sockets.
    //! A real registry cannot be made to stall at one exact request on demand.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::super::task::run_task;
    use crate::metrics::ErrorKind;
    use crate::net::transport::boxed_in_place;
    use crate::plan::{Action, PlannedOp, SessionTag};

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
            witness: None,
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
            boxed_in_place(|| {
                run_task(
                    op,
                    choice,
                    None,
                    Instant::now(),
                    env,
                    Some(permit),
                    None,
                    None,
                )
            })
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
