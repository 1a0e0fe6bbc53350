//! Stress mode's manifest GETs of plain-HTTP registries on event loops of the run's own
//! (docs/benchmarks.md, "The hot path", steps 46–48): as many loops as the runtime has
//! workers, each a thread with its share of the slots and as many connections to each
//! endpoint in one vector (`mio`: epoll), each answer read, checked and recorded as it
//! arrives and the connection's next request written in the same turn, as a load
//! generator's loops do — without a task, a waker or a timer per GET. The loops take the
//! plan and the dispatcher's state in turn, as stress mode's workers do, so operations
//! start in plan order; over several endpoints each GET goes where the router sends a
//! task's (the endpoint its object is on, the next one up when that one is down), and its
//! success counts toward that endpoint's health and failovers as a task's does.
//!
//! Only a request the client would send as it is goes on it: a manifest GET of a digest the
//! plan knows, with no credentials to add, in the client's own bytes (its target, `Accept`,
//! `User-Agent` and `Host`, written by the plain pool's `h1::write_head`). Everything else
//! is the client's: the plan's other operations run as tasks on the runtime beside the
//! loop, within the same `--concurrency`; and an answer the loop does not take as a plain
//! success — any status but 200, a check that fails, a body it does not read whole, a
//! transport error — is handed to the client with its request's timing ([`Given`]) and,
//! for a body still to come, with its connection (the pool's `adopt`), so that one path
//! decides what every answer means. A success is recorded as the client records one: sent
//! when the request went to the socket, its head and end at the kernel's receive stamps.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll as TaskPoll, Wake};
use std::time::Duration;

use bytes::BytesMut;
use hdrhistogram::Histogram;
use http::{HeaderValue, Method, StatusCode};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use url::Url;

use super::canary::{RuntimeWork, TurnCanary};
use super::dispatch::{cancel_after_grace, reap, Dispatch, Next, OpTask, Wait};
use super::options::{ExecReport, Looped};
use super::task::{run_task, who_of, TaskDone, TaskEnv};
use super::verified::Verified;
use crate::client::{check_manifest_digest, check_manifest_type, Given, RegistryClient};
use crate::digest::Sha256Sum;
use crate::metrics::{
    new_histogram, ErrorKind, Event, HttpStatuses, Op, Outcome, Recorded, Sample, SessionMsg,
    SizeClass, Timing,
};
use crate::net::arrival::{self, Stamp};
use crate::net::h1::{self, Framing};
use crate::net::plain_pool::{connect_failed, connect_timed_out, io_error, MAX_HEAD};
use crate::net::req_headers::ReqHeaders;
use crate::net::transport::{deadline_message, HttpResponse, PlainLane, TransportError};
use crate::plan::{Action, PlanItem, PlannedOp};
use crate::route::health::Choice;

/// The token of the loop's waker: the runtime has news (an item of the plan, a stop, an
/// operation handed to a task ended).
const WAKE: Token = Token(usize::MAX);

/// The largest answer the loop reads itself (head and body): a manifest's, nearly always.
/// A longer one goes to the client with its connection.
const READ_MAX: usize = 64 * 1024;

/// How often the connections' deadlines are looked at: a timeout is told this much late
/// at most.
const SWEEP: Duration = Duration::from_millis(50);

/// What the loops need to speak for the run's endpoints.
pub(super) struct Setup {
    /// Every endpoint of the run, in its order (the router's indices).
    ends: Vec<End>,
    headers: ReqHeaders,
}

/// One endpoint as the loops speak to it: its client's own pool, deadlines and bytes.
struct End {
    client: RegistryClient,
    plain: PlainLane,
    base: Url,
    addrs: Vec<SocketAddr>,
    host: HeaderValue,
    checks: bool,
    /// Runs over several endpoints: a GET's success feeds the endpoint's health, and one
    /// that failed over is counted so, as the client's tasks do.
    routed: bool,
}

/// The loops for this run, when they may take its manifest GETs: stress mode's workers (no
/// `--gather`, `--unpack`), every endpoint `http://` on the hyper transport, no results
/// split by a header. `CREB_STRESS_TASKS=1` keeps every operation on the runtime's tasks
/// (to measure what the loop is worth).
pub(super) async fn setup(d: &Dispatch) -> Option<Setup> {
    if std::env::var_os("CREB_STRESS_TASKS").is_some_and(|v| v == "1") || d.options.gather {
        return None;
    }
    let clients = &d.env.targets.clients;
    let routed = clients.len() > 1;
    let mut ends = Vec::with_capacity(clients.len());
    for client in clients {
        ends.push(end_of(client, routed).await?);
    }
    let mut headers = ReqHeaders::new();
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static(crate::oci::manifest::ACCEPT),
    );
    Some(Setup { ends, headers })
}

/// How the loops speak to `client`'s endpoint, if they may.
async fn end_of(client: &RegistryClient, routed: bool) -> Option<End> {
    let base = client.base().clone();
    if base.scheme() != "http" || client.recorder().split().is_some() {
        return None;
    }
    let plain = client.plain_lane()?;
    let authority = &base[url::Position::BeforeHost..url::Position::AfterPort];
    let host = HeaderValue::from_str(authority).ok()?;
    let port = base.port_or_known_default()?;
    let addrs: Vec<SocketAddr> = match base.host()? {
        url::Host::Ipv4(ip) => vec![(ip, port).into()],
        url::Host::Ipv6(ip) => vec![(ip, port).into()],
        url::Host::Domain(name) => tokio::net::lookup_host((name, port)).await.ok()?.collect(),
    };
    if addrs.is_empty() {
        return None;
    }
    Some(End {
        client: client.clone(),
        plain,
        base,
        addrs,
        host,
        checks: client.options().verify.checks(),
        routed,
    })
}

/// Wakes the loop from the runtime's side.
struct LoopWaker(Waker);

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        let _ = self.0.wake();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.0.wake();
    }
}

/// A manifest GET on one of the loop's connections.
struct Flight {
    op: Box<PlannedOp>,
    /// Whether the router sent it here because the endpoint it belongs to was down.
    failed_over: bool,
    /// When its exchange began (a new connection's connect included), as the client's
    /// `sending` reads it.
    sent: Instant,
    /// When its connection's connect began, while it is under way.
    connecting: Option<Instant>,
    /// When its answer's head arrived, once it has.
    head_at: Option<Instant>,
    /// When the last bytes of its answer arrived.
    last_at: Instant,
    stamped: bool,
}

/// Where a GET taken for the loop goes: endpoint `end`, failed over to or not.
#[derive(Clone, Copy)]
struct Pick {
    end: usize,
    failed_over: bool,
}

/// One of the loop's connections.
#[derive(Default)]
struct Conn {
    /// The endpoint it connects to (an index of [`Setup::ends`]).
    end: usize,
    stream: Option<TcpStream>,
    /// Request bytes the socket has not taken (a connect under way, a full socket).
    unsent: Vec<u8>,
    /// What was read of the answer in flight and not used (an answer that did not come
    /// whole in one read; most are read from the loop's buffer without a copy).
    read: BytesMut,
    flight: Option<Flight>,
}

/// What the loop made of what it read for a connection's GET.
enum Read {
    /// More is to come.
    More,
    /// A 200 with the manifest asked for: its length.
    Manifest(u64),
    /// An answer the loop does not take: made for the client from the connection's bytes
    /// ([`decide`]).
    NotMine,
}

/// What goes to the client with an operation whose answer the loop does not take.
enum Handover {
    /// The transport's error.
    Failed(TransportError),
    /// An answer read whole; the connection stays with the loop when it `keep`s alive.
    Whole { response: HttpResponse, keep: bool },
    /// An answer whose body is still to come, with its connection.
    Rest {
        head: h1::Head,
        read: BytesMut,
        stream: std::net::TcpStream,
    },
}

/// An answer the loop does not take, as [`decide`] finds it.
enum Decided {
    Whole {
        response: HttpResponse,
        keep: bool,
    },
    /// Its body is still to come: the connection goes with it.
    Rest(h1::Head),
}

/// What the loops share: the plan and the dispatcher's state, taken in turn (as stress
/// mode's workers take them), and the count of operations in flight over all loops.
struct Shared {
    taking: Mutex<Taking>,
    /// Operations in flight (on a loop or handed to a task) as the loops last told it.
    busy: AtomicUsize,
    /// The most of them at once.
    most: AtomicUsize,
    /// Wakes every loop: the plan has an item, or a stop came.
    all: std::task::Waker,
    /// The run is stopping: read by the loops at every turn (the token's own flag is
    /// behind a lock every thread of the run takes).
    stop: Arc<AtomicBool>,
    /// Why a loop failed as it ran (its poll): the run stopped for it.
    failure: Mutex<Option<String>>,
    /// The operations the loops hand to the runtime's tasks, counted for its canary.
    runtime: Option<Arc<RuntimeWork>>,
}

impl Shared {
    /// The plan and the dispatcher's state, waited for while another loop takes from them.
    fn lock(&self) -> MutexGuard<'_, Taking> {
        self.taking.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The plan and the dispatcher's state, held by one loop at a time.
struct Taking {
    d: Dispatch,
    plan: mpsc::Receiver<PlanItem>,
}

/// Wakes every loop.
struct AllWaker(Vec<Arc<LoopWaker>>);

impl Wake for AllWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        for w in &self.0 {
            w.wake_by_ref();
        }
    }
}

/// One event loop and what it keeps between turns: its share of the slots, as many
/// connections.
struct Lane<'a> {
    s: &'a Setup,
    shared: &'a Shared,
    env: Arc<TaskEnv>,
    grace: Duration,
    /// This loop's slots: its share of `--concurrency`.
    cap: usize,
    /// What this loop carried out; the dispatcher's own figures are added at the end.
    report: ExecReport,
    /// The operations in flight here as last added to [`Shared::busy`].
    told: usize,
    /// The manifest GETs sent here.
    gets: u64,
    handle: Handle,
    poll: Poll,
    /// `cap` connections for each endpoint, those of endpoint `e` from `e * cap`.
    conns: Vec<Conn>,
    /// Each endpoint's connections without a GET in flight.
    idle: Vec<Vec<usize>>,
    /// Operations handed to the runtime's tasks.
    tasks: JoinSet<TaskDone>,
    in_flight: usize,
    /// Manifest GETs and tasks taken from the plan, started once the plan is let go.
    #[allow(clippy::vec_box)] // the box the planner made goes on to the GET's `Flight`
    taken: Vec<(Box<PlannedOp>, Pick)>,
    launched: Vec<OpTask>,
    /// The request head being written, and its target.
    request: Vec<u8>,
    target: String,
    /// Where answers are read (zeroed once: `recvmsg` takes initialized bytes).
    buffer: Vec<u8>,
    /// The manifests verified here, to verify their repeats by comparison.
    verified: Verified,
    /// The clocks read at the latest conversion of a receive stamp: the monotonic now and
    /// the realtime now (stamps older than it are converted by them).
    clocks: Option<(Instant, Stamp)>,
    /// Whether each endpoint answered here yet (its client is told once).
    answered: Vec<bool>,
    /// Wakes the loop when a task of it ends.
    waker: Arc<LoopWaker>,
    /// Watches this loop's turns for stalls, when the run's are witnessed.
    canary: Option<TurnCanary>,
    /// How long the answers recorded here waited for the turn that read them, µs.
    answer_wait: Histogram<u64>,
    /// The samples of the GETs answered this turn, not sent yet: each goes with the offer
    /// of the next GET taken, in one message, and those left over at the turn's end alone.
    records: VecDeque<Recorded>,
}

/// How many loops a run of `concurrency` slots gets: `CREB_STRESS_LOOPS` if set, else as
/// many as the runtime has workers (`--threads`: one per core, half of them when the
/// registry is on loopback and shares the machine); never more than the slots. On two
/// cores shared with docker-registry a second loop cost 4 µs more per GET and did not
/// move the rate (docs/benchmarks.md, step 47).
fn loops(concurrency: usize, handle: &Handle) -> usize {
    let set = std::env::var("CREB_STRESS_LOOPS").ok();
    let wanted = set
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| handle.metrics().num_workers());
    wanted.clamp(1, concurrency.max(1))
}

/// What stress mode's loops need of the kernel (a poll and a waker each), got before any
/// operation is taken: a run whose loops cannot have them goes on the runtime's tasks.
pub(super) struct Opened {
    polls: Vec<Poll>,
    wakers: Vec<Arc<LoopWaker>>,
}

/// The polls and wakers of the loops a run of `concurrency` slots gets ([`loops`]), when
/// they fit under the open-file limit beside the connections they keep.
pub(super) fn open(concurrency: usize, setup: &Setup, handle: &Handle) -> io::Result<Opened> {
    let count = loops(concurrency.max(1), handle);
    room_for(count, concurrency.max(1) * setup.ends.len())?;
    let polls = (0..count)
        .map(|_| Poll::new())
        .collect::<io::Result<Vec<_>>>()?;
    let wakers = polls
        .iter()
        .map(|p| Ok(Arc::new(LoopWaker(Waker::new(p.registry(), WAKE)?))))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(Opened { polls, wakers })
}

/// Whether `count` loops (a poll and a waker each: two descriptors) fit under the soft
/// open-file limit beside the descriptors open now and the `connections` the loops keep.
/// The limit a run raises for its connections (`commands/limits.rs`) counts a reserve of
/// descriptors, not the loops: a run whose limit leaves no room for them goes on tasks
/// rather than have its connections refused part way.
#[cfg(target_os = "linux")]
fn room_for(count: usize, connections: usize) -> io::Result<()> {
    // Without `/proc` the descriptors open are not known: the loops start, as before.
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Ok(());
    };
    let open = fds.count() as u64;
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let wanted = open + 2 * count as u64 + connections as u64;
    match limit {
        Some(limit) if wanted > limit => Err(io::Error::other(format!(
            "{count} loops and {connections} connections need {wanted} open files, the \
             limit is {limit}"
        ))),
        _ => Ok(()),
    }
}

/// Elsewhere nothing is checked.
#[cfg(not(target_os = "linux"))]
fn room_for(_count: usize, _connections: usize) -> io::Result<()> {
    Ok(())
}

/// A run the loops did not start (a loop's thread could not be had): the plan and the
/// dispatcher given back as they were, no operation taken, and why.
pub(super) struct Unstarted {
    pub(super) d: Dispatch,
    pub(super) plan: mpsc::Receiver<PlanItem>,
    pub(super) error: io::Error,
}

/// Runs the plan's operations as stress mode's workers would, on the loops: the slots
/// shared out among them, each loop on a thread of its own (the first on this one).
/// A loop that fails as it runs (its poll) stops the run as a stop would, and the report
/// says why ([`ExecReport::failure`]).
#[allow(clippy::needless_pass_by_value)] // the thread's own
pub(super) fn run(
    d: Dispatch,
    plan: mpsc::Receiver<PlanItem>,
    handle: Handle,
    setup: Setup,
    opened: Opened,
) -> Result<ExecReport, Box<Unstarted>> {
    let n = d.options.concurrency.max(1);
    let Opened { polls, wakers } = opened;
    let count = polls.len();
    let (env, grace) = (Arc::clone(&d.env), d.options.grace);
    let witness = d.witness.clone();
    let from = witness.as_ref().map(|w| w.from);
    let shared = Shared {
        taking: Mutex::new(Taking { d, plan }),
        busy: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        all: std::task::Waker::from(Arc::new(AllWaker(wakers.clone()))),
        stop: Arc::default(),
        failure: Mutex::new(None),
        runtime: witness.as_ref().map(|w| Arc::clone(&w.runtime)),
    };
    let lanes = polls.into_iter().zip(wakers).enumerate();
    let lanes = lanes.map(|(k, (poll, waker))| {
        let cap = n / count + usize::from(k < n % count);
        Lane::new(
            &setup,
            &shared,
            (Arc::clone(&env), grace),
            (cap, from),
            poll,
            waker,
            &handle,
        )
    });
    // The stop, told to the loops by a flag and a wake-up.
    let token = env.shutdown.token().clone();
    let (stop, all) = (Arc::clone(&shared.stop), shared.all.clone());
    let watch = handle.spawn(async move {
        token.cancelled().await;
        stop.store(true, Ordering::Relaxed);
        all.wake();
    });
    let thread = |k| std::thread::Builder::new().name(format!("creb-loop-{k}"));
    // Once every loop's thread was had, the loops witness the run's stalls: the runtime's
    // canary watches only what they hand it.
    let started = || witness.iter().for_each(|w| w.runtime.loops_started());
    let jobs = lanes.map(|lane| move || lane.run()).collect();
    let reports = run_all(jobs, thread, started);
    watch.abort();
    let taking = shared.taking.into_inner();
    let Taking { d, plan } = taking.unwrap_or_else(PoisonError::into_inner);
    let reports = match reports {
        Ok(reports) => reports,
        Err(error) => return Err(Box::new(Unstarted { d, plan, error })),
    };
    let mut report = with_loops(d.report, reports);
    report.max_in_flight = shared.most.into_inner();
    report.failure = (shared.failure.into_inner()).unwrap_or_else(PoisonError::into_inner);
    Ok(report)
}

/// The dispatcher's `report` with what each of the loops carried out and saw.
fn with_loops(mut report: ExecReport, lanes: Vec<ExecReport>) -> ExecReport {
    let mut looped = Looped {
        loops: lanes.len(),
        manifest_gets: 0,
    };
    for lane in lanes {
        report.replayed += lane.replayed;
        report.folded += lane.folded;
        report.interrupted += lane.interrupted;
        looped.manifest_gets += lane.looped.map_or(0, |l| l.manifest_gets);
        // The loops' histograms have the same bounds: nothing is refused.
        for (seen, all) in [
            (lane.wake_lateness, &mut report.wake_lateness),
            (lane.answer_wait, &mut report.answer_wait),
        ] {
            match (seen, all) {
                (Some(seen), Some(all)) => drop(all.add(&seen)),
                (seen, all) => *all = all.take().or(seen),
            }
        }
    }
    report.looped = Some(looped);
    report
}

/// Runs `jobs` (the loops), the first on this thread and each other on one of its own
/// (made by `thread`): what each returned, in order. None runs unless every thread was
/// had: the error then, nothing run; else `started` is called before they run.
fn run_all<T: Send>(
    mut jobs: Vec<impl FnOnce() -> T + Send>,
    thread: impl Fn(usize) -> std::thread::Builder,
    started: impl FnOnce(),
) -> io::Result<Vec<T>> {
    let first = jobs.remove(0);
    let gate = Gate::default();
    std::thread::scope(|scope| {
        let mut others = Vec::with_capacity(jobs.len());
        let mut failed = None;
        for (k, job) in jobs.into_iter().enumerate() {
            let gate = &gate;
            // The job is dropped unrun when the gate says no.
            match thread(k + 1).spawn_scoped(scope, move || gate.wait().then(job)) {
                Ok(handle) => others.push(handle),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_none() {
            started();
        }
        gate.open(failed.is_none());
        if let Some(e) = failed {
            // The threads made end unrun as the scope closes.
            return Err(e);
        }
        let mut out = vec![first()];
        for other in others {
            match other.join() {
                Ok(done) => out.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(out)
    })
}

/// Holds the loops' threads until every one was had: then they run, or all end unrun.
#[derive(Default)]
struct Gate {
    go: Mutex<Option<bool>>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn open(&self, go: bool) {
        *self.go.lock().unwrap_or_else(PoisonError::into_inner) = Some(go);
        self.opened.notify_all();
    }

    /// Whether to run, once told.
    fn wait(&self) -> bool {
        let go = self.go.lock().unwrap_or_else(PoisonError::into_inner);
        let go = self.opened.wait_while(go, |go| go.is_none());
        go.unwrap_or_else(PoisonError::into_inner).unwrap_or(false)
    }
}

impl<'a> Lane<'a> {
    /// A loop of `cap` slots (and connections), polling with `poll`, woken by `waker`, its
    /// turns watched for stalls `from` then when the run's are witnessed.
    fn new(
        s: &'a Setup,
        shared: &'a Shared,
        (env, grace): (Arc<TaskEnv>, Duration),
        (cap, from): (usize, Option<Instant>),
        poll: Poll,
        waker: Arc<LoopWaker>,
        handle: &Handle,
    ) -> Self {
        Lane {
            s,
            shared,
            env,
            grace,
            cap,
            report: ExecReport::default(),
            told: 0,
            gets: 0,
            handle: handle.clone(),
            poll,
            conns: (0..s.ends.len() * cap)
                .map(|i| Conn {
                    end: i / cap.max(1),
                    ..Conn::default()
                })
                .collect(),
            idle: (0..s.ends.len())
                .map(|e| (e * cap..(e + 1) * cap).rev().collect())
                .collect(),
            tasks: JoinSet::new(),
            in_flight: 0,
            taken: Vec::with_capacity(cap),
            launched: Vec::new(),
            request: Vec::with_capacity(512),
            target: String::with_capacity(128),
            buffer: vec![0; READ_MAX],
            verified: Verified::new(),
            clocks: None,
            answered: vec![false; s.ends.len()],
            waker,
            canary: from.map(|from| TurnCanary::new(from, Instant::now())),
            answer_wait: new_histogram(),
            records: VecDeque::new(),
        }
    }

    /// Sends the samples no offer took along this turn.
    fn send_records(&mut self) {
        while let Some(recorded) = self.records.pop_front() {
            if let Some(unsent) = self.env.recorder.recorded_now(recorded) {
                self.handle.block_on(self.env.recorder.send_unsent(unsent));
            }
        }
    }

    fn run(mut self) -> ExecReport {
        let task_waker = self.shared.all.clone();
        let mut cx = Context::from_waker(&task_waker);
        let mut events = Events::with_capacity(1024);
        let mut plan_open = true;
        let mut stopped_at: Option<Instant> = None;
        let mut swept = Instant::now();
        loop {
            // A stop ends the taking of operations; those in flight get the grace period.
            if stopped_at.is_none() && plan_open {
                plan_open = self.take(&mut cx);
            }
            self.send_records();
            if stopped_at.is_none() && self.shared.stop.load(Ordering::Relaxed) {
                stopped_at = Some(Instant::now());
            }
            let busy = self.busy();
            self.tell(busy);
            if let Some(at) = stopped_at {
                if plan_open {
                    // The first loop to stop drains the plan; the others find it drained.
                    self.drain();
                    plan_open = false;
                }
                if busy == 0 {
                    break;
                }
                if at.elapsed() >= self.grace {
                    self.cancel_in_flight();
                    break;
                }
            } else if !plan_open && busy == 0 {
                break;
            }
            let wait = match &mut self.canary {
                Some(canary) => canary.wait(Instant::now(), SWEEP),
                None => SWEEP,
            };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(&e);
                    break;
                }
            }
            if let Some(canary) = &mut self.canary {
                canary.turn(Instant::now());
            }
            self.clocks = None;
            if !self.tasks.is_empty() {
                self.reap_tasks();
            }
            self.serve(&events);
            if swept.elapsed() >= SWEEP {
                swept = Instant::now();
                self.sweep(swept);
            }
        }
        self.finish()
    }

    /// Writes and reads what the connections are ready for.
    fn serve(&mut self, events: &Events) {
        for event in events {
            if event.token() == WAKE {
                // The tasks that ended were reaped before.
                continue;
            }
            let i = event.token().0;
            if event.is_writable() {
                self.write_more(i);
            }
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                self.read_answer(i);
            }
        }
    }

    /// This loop can no longer wait for its connections (`epoll_wait` failed): the run
    /// stops as a stop would (the other loops and the runtime's tasks get the grace), the
    /// operations in flight here are cancelled, what the plan still holds is counted
    /// interrupted, and the run's report says why.
    fn fail(&mut self, e: &io::Error) {
        let mut failure = (self.shared.failure.lock()).unwrap_or_else(PoisonError::into_inner);
        failure.get_or_insert_with(|| format!("stress mode's event loop failed: {e}"));
        drop(failure);
        self.env.shutdown.cancel();
        self.cancel_in_flight();
        // The loops that go on drain the plan as they stop; this one may be the only one.
        self.drain();
    }

    /// Counts what was planned and not taken as interrupted, and stops the planner.
    fn drain(&self) {
        let mut taking = self.shared.lock();
        let Taking { d, plan } = &mut *taking;
        self.handle.block_on(d.drain(plan));
    }

    /// Operations in flight here: on the loop's connections and handed to tasks.
    fn busy(&self) -> usize {
        self.in_flight + self.tasks.len()
    }

    /// Adds what changed here since last told to the loops' count of operations in flight.
    fn tell(&mut self, busy: usize) {
        if busy > self.told {
            let more = busy - self.told;
            let now = self.shared.busy.fetch_add(more, Ordering::Relaxed) + more;
            self.shared.most.fetch_max(now, Ordering::Relaxed);
        } else if busy < self.told {
            self.shared
                .busy
                .fetch_sub(self.told - busy, Ordering::Relaxed);
        }
        self.told = busy;
    }

    /// Takes operations of the plan while this loop's slots are free and starts them once
    /// the plan is let go: `false` once the plan ended.
    fn take(&mut self, cx: &mut Context<'_>) -> bool {
        let free = self.cap - self.busy();
        if free == 0 {
            return true;
        }
        let mut open = true;
        let mut taking = self.shared.lock();
        let Taking { d, plan } = &mut *taking;
        for _ in 0..free {
            let op = match next(d, plan, cx, &self.handle) {
                None | Some(Next::Stop) => break,
                Some(Next::End) => {
                    open = false;
                    break;
                }
                Some(Next::Run(op)) => op,
            };
            if let Some(pick) = self.pick(&op) {
                offer(d, &op, &self.handle, self.records.pop_front());
                self.taken.push((op, pick));
            } else {
                let (task, unsent) = d.launch(op, None, None);
                if let Some(unsent) = unsent {
                    self.handle.block_on(d.env.recorder.send_unsent(unsent));
                }
                self.launched.push(task);
            }
        }
        drop(taking);
        let mut taken = std::mem::take(&mut self.taken);
        for (op, pick) in taken.drain(..) {
            self.start(op, pick);
        }
        self.taken = taken;
        let mut launched = std::mem::take(&mut self.launched);
        for task in launched.drain(..) {
            self.spawn(task);
        }
        self.launched = launched;
        open
    }

    /// Where `op` goes if on this loop: a manifest GET of a known digest, to the endpoint
    /// the router picks (one that is up), whose client would send it as it is.
    fn pick(&self, op: &PlannedOp) -> Option<Pick> {
        let Action::ManifestGet {
            repo,
            expect: Some(_),
            ..
        } = &op.action
        else {
            return None;
        };
        let Choice::Use {
            endpoint,
            failed_over,
        } = self.env.targets.choose(op)
        else {
            return None;
        };
        let end = self.s.ends.get(endpoint)?;
        end.client.sends_as_is(repo).then_some(Pick {
            end: endpoint,
            failed_over,
        })
    }

    /// Runs `task` on the runtime, the loop woken as it ends.
    fn spawn(&mut self, task: impl Future<Output = TaskDone> + Send + 'static) {
        let waker = Arc::clone(&self.waker);
        let runtime = self.shared.runtime.clone();
        self.tasks.spawn_on(
            async move {
                // The runtime's canary watches while it runs (and if it is cancelled).
                let _on = runtime.as_ref().map(RuntimeWork::begin);
                let done = task.await;
                waker.wake_by_ref();
                done
            },
            &self.handle,
        );
    }

    /// Starts `op`'s GET (its offer made) on an idle connection, connecting it first if it
    /// has none.
    fn start(&mut self, op: Box<PlannedOp>, pick: Pick) {
        let Action::ManifestGet {
            repo, reference, ..
        } = &op.action
        else {
            unreachable!("only manifest GETs go on the loop");
        };
        let end = &self.s.ends[pick.end];
        end.client
            .manifest_target_into(repo, reference, &mut self.target);
        self.gets += 1;
        self.request.clear();
        h1::write_head(
            &mut self.request,
            &Method::GET,
            &self.target,
            &end.host,
            &self.s.headers,
            Some(&end.plain.user_agent),
        );
        self.send(op, pick);
    }

    /// Sends `op`'s request (written in `request`) on an idle connection, opening it first
    /// when it has none.
    fn send(&mut self, op: Box<PlannedOp>, pick: Pick) {
        let idle = &mut self.idle[pick.end];
        let i = idle.pop().expect("a slot is free, so is a connection");
        self.in_flight += 1;
        let sent = Instant::now();
        let mut flight = Flight {
            op,
            failed_over: pick.failed_over,
            sent,
            connecting: None,
            head_at: None,
            last_at: sent,
            stamped: false,
        };
        let connect = if self.conns[i].stream.is_none() {
            flight.connecting = Some(sent);
            Some(self.connect(i))
        } else {
            None
        };
        let conn = &mut self.conns[i];
        conn.flight = Some(flight);
        conn.read.clear();
        conn.unsent.clear();
        match connect {
            Some(Err(e)) => return self.hand_over(i, Handover::Failed(connect_failed(&e))),
            // The request goes out once the connect is made (`write_more`).
            Some(Ok(())) => return conn.unsent.extend_from_slice(&self.request),
            None => {}
        }
        let stream = conn.stream.as_mut().expect("connected");
        match stream.write(&self.request) {
            Ok(n) if n == self.request.len() => return,
            Ok(n) => conn.unsent.extend_from_slice(&self.request[n..]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                conn.unsent.extend_from_slice(&self.request);
            }
            Err(e) => {
                let failed = io_error("sending the request", &e, ErrorKind::ConnectionClosed);
                return self.hand_over(i, Handover::Failed(failed));
            }
        }
        // The rest when the socket has room.
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self.poll.registry().reregister(stream, Token(i), interest) {
            let failed = io_error("sending the request", &e, ErrorKind::Other);
            self.hand_over(i, Handover::Failed(failed));
        }
    }

    /// Opens connection `i` (the connect under way: it is writable once made).
    fn connect(&mut self, i: usize) -> io::Result<()> {
        let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no address");
        for addr in &self.s.ends[self.conns[i].end].addrs {
            match TcpStream::connect(*addr) {
                Ok(mut stream) => {
                    self.poll.registry().register(
                        &mut stream,
                        Token(i),
                        Interest::READABLE | Interest::WRITABLE,
                    )?;
                    self.conns[i].stream = Some(stream);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connection `i` can take bytes: its connect ended (made or failed), or a request's
    /// rest goes out.
    fn write_more(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        let (Some(stream), Some(flight)) = (conn.stream.as_mut(), conn.flight.as_mut()) else {
            return;
        };
        if flight.connecting.is_some() {
            if let Some(e) = stream.take_error().ok().flatten() {
                return self.hand_over(i, Handover::Failed(connect_failed(&e)));
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.hand_over(i, Handover::Failed(connect_failed(&e))),
            }
            flight.connecting = None;
            let _ = stream.set_nodelay(true);
            arrival::enable(stream);
            let end = &self.s.ends[conn.end];
            end.plain.host.opened(&end.base);
        }
        while !conn.unsent.is_empty() {
            match stream.write(&conn.unsent) {
                Ok(n) => {
                    conn.unsent.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let failed = io_error("sending the request", &e, ErrorKind::ConnectionClosed);
                    return self.hand_over(i, Handover::Failed(failed));
                }
            }
        }
        if let Err(e) = self
            .poll
            .registry()
            .reregister(stream, Token(i), Interest::READABLE)
        {
            let failed = io_error("sending the request", &e, ErrorKind::Other);
            self.hand_over(i, Handover::Failed(failed));
        }
    }

    /// Reads what connection `i` has, and acts on its answer once the loop can tell what
    /// it is.
    fn read_answer(&mut self, i: usize) {
        loop {
            let conn = &mut self.conns[i];
            let Some(stream) = conn.stream.as_ref() else {
                return;
            };
            let Some(flight) = conn.flight.as_ref() else {
                return self.idle_readable(i);
            };
            if flight.connecting.is_some() {
                return;
            }
            let head_seen = flight.head_at.is_some();
            let room = READ_MAX - conn.read.len().min(READ_MAX);
            if room == 0 {
                return self.not_mine(i);
            }
            let (n, stamp) = match arrival::recv_stamped(stream, &mut self.buffer[..room]) {
                Ok((0, _)) if head_seen => return self.not_mine(i),
                Ok((0, _)) => {
                    let closed = TransportError::new(
                        ErrorKind::ConnectionClosed,
                        "connection closed before the response head",
                    );
                    return self.hand_over(i, Handover::Failed(closed));
                }
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let doing = ["reading the response head", "reading the response body"];
                    let failed = io_error(doing[usize::from(head_seen)], &e, ErrorKind::Other);
                    return self.hand_over(i, Handover::Failed(failed));
                }
            };
            let at = self.arrival(stamp, i);
            let conn = &mut self.conns[i];
            let flight = conn.flight.as_mut().expect("in flight");
            flight.last_at = at;
            flight.stamped = stamp.is_some();
            let what = if conn.read.is_empty() {
                // Nearly always: the whole answer in this read, judged where it lies.
                let checks = self.s.ends[conn.end].checks;
                let what = judge(&self.buffer[..n], flight, checks, &mut self.verified);
                if !matches!(what, Read::Manifest(_)) {
                    conn.read.extend_from_slice(&self.buffer[..n]);
                }
                what
            } else {
                conn.read.extend_from_slice(&self.buffer[..n]);
                let checks = self.s.ends[conn.end].checks;
                judge(&conn.read, flight, checks, &mut self.verified)
            };
            match what {
                Read::More => {}
                Read::Manifest(len) => return self.recorded(i, len),
                Read::NotMine => return self.not_mine(i),
            }
            if n < room {
                // A short read drained the socket: the next edge brings more.
                return;
            }
        }
    }

    /// Idle connection `i` is readable: anything read, or the end of the stream, means it is
    /// not to be used again.
    fn idle_readable(&mut self, i: usize) {
        let Some(stream) = self.conns[i].stream.as_ref() else {
            return;
        };
        let mut probe = [0u8; 1];
        match arrival::recv_stamped(stream, &mut probe) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            _ => self.close(i),
        }
    }

    /// The instant a read stamped `stamp` (if it was) arrived, held inside connection
    /// `i`'s exchange: the clocks are read once per turn, again only for a stamp later than
    /// their reading.
    fn arrival(&mut self, stamp: Option<Stamp>, i: usize) -> Instant {
        let Some(stamp) = stamp else {
            return Instant::now();
        };
        let sent = self.conns[i]
            .flight
            .as_ref()
            .map_or_else(Instant::now, |f| f.sent);
        let (now, real_now) = match self.clocks {
            Some((now, real_now)) if stamp <= real_now => (now, real_now),
            _ => {
                let clocks = (Instant::now(), arrival::realtime_now());
                self.clocks = Some(clocks);
                clocks
            }
        };
        arrival::arrived_at(Some(stamp), sent, now, real_now)
    }

    /// Connection `i`'s answer is not one the loop takes: once its head is whole, it goes
    /// to the client (whole, or with the connection for the rest of its body).
    fn not_mine(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        match decide(&mut conn.read) {
            Ok(None) if conn.read.len() >= MAX_HEAD => {
                let large = TransportError::new(
                    ErrorKind::TooLarge,
                    format!("response head larger than {MAX_HEAD} bytes"),
                );
                self.hand_over(i, Handover::Failed(large));
            }
            Ok(None) => {
                if conn.stream.is_none() {
                    let closed = TransportError::new(
                        ErrorKind::ConnectionClosed,
                        "connection closed before the response head",
                    );
                    self.hand_over(i, Handover::Failed(closed));
                }
            }
            Ok(Some(Decided::Whole { response, keep })) => {
                self.hand_over(i, Handover::Whole { response, keep });
            }
            Ok(Some(Decided::Rest(head))) => {
                let read = std::mem::take(&mut conn.read);
                let Some(mut stream) = conn.stream.take() else {
                    return;
                };
                let _ = self.poll.registry().deregister(&mut stream);
                let stream = std::net::TcpStream::from(stream);
                self.hand_over(i, Handover::Rest { head, read, stream });
            }
            Err(e) => self.hand_over(i, Handover::Failed(e)),
        }
    }

    /// Connection `i`'s GET got the manifest asked for: its sample recorded as the client
    /// records one, the connection idle again.
    fn recorded(&mut self, i: usize, len: u64) {
        let conn = &mut self.conns[i];
        conn.read.clear();
        let flight = conn.flight.take().expect("in flight");
        let e = conn.end;
        self.in_flight -= 1;
        self.idle[e].push(i);
        let s = self.s;
        if !self.answered[e] {
            self.answered[e] = true;
            s.ends[e].client.answered_plain();
        }
        if s.ends[e].routed {
            self.env.targets.health.observe(e, None);
            if flight.failed_over {
                deliver(&self.handle, self.env.recorder.event(Event::Failover));
            }
        }
        let Flight {
            mut op,
            sent,
            head_at,
            last_at: end,
            stamped,
            ..
        } = flight;
        if let (true, Some((now, _))) = (stamped, self.clocks) {
            // The turn read the clocks for this stamp or a later one: no sooner than it.
            let waited = now.saturating_duration_since(end).as_micros();
            self.answer_wait
                .saturating_record(u64::try_from(waited).unwrap_or(u64::MAX));
        }
        let sample = Sample {
            op: Op::ManifestGet,
            outcome: Outcome::Ok,
            size_class: SizeClass::of(len),
            timing: Timing {
                intended: None,
                ready: None,
                sent,
                first_byte: Some(head_at.unwrap_or(end).min(end)),
                end,
            },
            bytes_sent: 0,
            bytes_received: len,
            http: HttpStatuses::one(Some(200)),
        };
        let member = op.pull_session();
        let who = who_of(&mut op);
        let recorder = s.ends[e].client.recorder();
        self.records
            .push_back(recorder.recorded(sample, None, Some(who), member));
        if let Some(p) = &self.env.progress {
            p.add_done(op.records());
        }
        self.report.replayed += 1;
        self.report.folded += u64::from(op.folded);
    }

    /// Connection `i`'s GET goes to the client with `handover`: as a task on the runtime,
    /// the operation carried out from its answer. The connection stays only with a whole
    /// answer that keeps it alive.
    fn hand_over(&mut self, i: usize, handover: Handover) {
        let now = Instant::now();
        let flight = self.conns[i].flight.take().expect("in flight");
        self.in_flight -= 1;
        if !matches!(handover, Handover::Whole { keep: true, .. }) {
            self.close(i);
        }
        let e = self.conns[i].end;
        self.conns[i].read.clear();
        self.idle[e].push(i);
        let Flight {
            op,
            failed_over,
            sent,
            head_at,
            last_at,
            stamped,
            ..
        } = flight;
        let end = &self.s.ends[e];
        let plain = (
            Arc::clone(&end.plain.host),
            Arc::clone(&end.plain.config),
            end.base.clone(),
        );
        let given = move || -> Box<Given> {
            let (host, config, base) = plain;
            let (result, end) = match handover {
                Handover::Failed(e) => (Err(e), now),
                Handover::Whole { response, .. } => (Ok(response), last_at),
                Handover::Rest { head, read, stream } => {
                    let end_by = sent + config.request_deadline;
                    let result = host.adopt(&base, stream, read, head, &config, end_by);
                    (result, last_at)
                }
            };
            let head_at = match &result {
                Ok(_) => head_at.unwrap_or(end).min(end),
                Err(_) => end,
            };
            Box::new(Given {
                result,
                sent,
                head_at,
                end,
                stamped,
            })
        };
        let choice = Choice::Use {
            endpoint: e,
            failed_over,
        };
        self.run_given(op, choice, sent, given);
    }

    /// Runs `op` as a task with the answer `given` makes, from the endpoint `choice` names
    /// (on the runtime: a connection handed over is registered there).
    fn run_given(
        &mut self,
        op: Box<PlannedOp>,
        choice: Choice,
        started: Instant,
        given: impl FnOnce() -> Box<Given> + Send + 'static,
    ) {
        let env = Arc::clone(&self.env);
        self.spawn(async move {
            let given = given();
            run_task(op, choice, None, started, env, None, None, Some(given)).await
        });
    }

    /// Closes connection `i` (idle): the next GET on it opens another.
    fn close(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        if let Some(mut stream) = conn.stream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        conn.read.clear();
        conn.unsent.clear();
    }

    /// Operations handed to tasks that ended.
    fn reap_tasks(&mut self) {
        while let Some(res) = self.tasks.try_join_next() {
            let lost = reap(&mut self.report, &self.env, res);
            for l in lost {
                let sample = Sample::unanswered(l.op, ErrorKind::Cancelled, l.intended, l.started);
                let record = self.env.targets.clients[l.endpoint]
                    .recorder()
                    .record(sample);
                self.handle.block_on(record);
            }
        }
    }

    /// Connections whose GET is past a deadline: the client is given the timeout.
    fn sweep(&mut self, now: Instant) {
        let s = self.s;
        for i in 0..self.conns.len() {
            let Some(f) = self.conns[i].flight.as_ref() else {
                continue;
            };
            let config = &s.ends[self.conns[i].end].plain.config;
            let end_by = f.sent + config.request_deadline;
            let why = if let Some(since) = f.connecting {
                (now >= since + config.connect_timeout)
                    .then(|| connect_timed_out(config.connect_timeout))
            } else if f.head_at.is_none() {
                let by = f.sent + config.request_timeout;
                let waited = ("no response within", config.request_timeout);
                timed_out(now, end_by < by, end_by.min(by), waited, config)
            } else {
                let by = f.last_at + config.body_idle_timeout;
                let waited = ("no body data for", config.body_idle_timeout);
                timed_out(now, end_by <= by, end_by.min(by), waited, config)
            };
            if let Some(e) = why {
                self.hand_over(i, Handover::Failed(e));
            }
        }
    }

    /// The grace period after a stop ran out: the GETs still in flight are cancelled, and
    /// recorded so, as the workers' are.
    fn cancel_in_flight(&mut self) {
        for i in 0..self.conns.len() {
            let Some(flight) = self.conns[i].flight.take() else {
                continue;
            };
            self.in_flight -= 1;
            self.close(i);
            let sample =
                Sample::unanswered(Op::ManifestGet, ErrorKind::Cancelled, None, flight.sent);
            let recorder = self.s.ends[self.conns[i].end].client.recorder();
            self.handle.block_on(recorder.record(sample));
            self.report.interrupted += flight.op.records();
        }
    }

    /// Ends the loop's run: tasks still running (a stop's grace period is over) are
    /// cancelled and recorded so.
    fn finish(mut self) -> ExecReport {
        self.send_records();
        let mut tasks = std::mem::take(&mut self.tasks);
        let env = Arc::clone(&self.env);
        let mut report = std::mem::take(&mut self.report);
        let cancel = cancel_after_grace(&mut tasks, &env, &mut report, Duration::ZERO);
        self.handle.block_on(cancel);
        report.looped = Some(Looped {
            loops: 1,
            manifest_gets: self.gets,
        });
        report.wake_lateness = self.canary.take().map(TurnCanary::into_histogram);
        report.answer_wait = Some(self.answer_wait);
        report
    }
}

/// The next operation of the plan (`d`'s), taken by a loop: `None` when none is ready (the
/// loops woken by `cx` when one is).
fn next(
    d: &mut Dispatch,
    plan: &mut mpsc::Receiver<PlanItem>,
    cx: &mut Context<'_>,
    handle: &Handle,
) -> Option<Next> {
    loop {
        let wait = match d.next_ready(plan) {
            Ok(next) => return Some(next),
            Err(wait) => wait,
        };
        let item = match wait {
            Wait::Closed(id) => {
                handle.block_on(d.env.recorder.session(SessionMsg::Closed { id }));
                continue;
            }
            Wait::Plan => {
                d.plan_waited = true;
                match plan.poll_recv(cx) {
                    TaskPoll::Pending => return None,
                    TaskPoll::Ready(None) => return Some(Next::End),
                    TaskPoll::Ready(Some(item)) => item,
                }
            }
        };
        match d.take(item) {
            Ok(Some(op)) => return Some(Next::Run(op)),
            Ok(None) | Err(Wait::Plan) => {}
            Err(Wait::Closed(id)) => {
                handle.block_on(d.env.recorder.session(SessionMsg::Closed { id }));
            }
        }
    }
}

/// A manifest GET of the loop starts (in plan order, while the plan is held): counted as a
/// worker's start, its offer sent to the aggregator (with `after`, the sample of a GET
/// answered before it, in the same message), the pull it closes closed.
fn offer(d: &mut Dispatch, op: &PlannedOp, handle: &Handle, after: Option<Recorded>) {
    let started = Instant::now();
    d.worker_started(started);
    let member = op.pull_session();
    if let Some(unsent) = d
        .env
        .recorder
        .offered_now(started, member, op.closes, after)
    {
        handle.block_on(d.env.recorder.send_unsent(unsent));
    }
    d.close_chain(op.closes);
}

/// Sends a message to the aggregator: at once when its channel has room, else waiting for
/// room (as a worker waits).
fn deliver(handle: &Handle, send: impl Future<Output = ()>) {
    let mut send = std::pin::pin!(send);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    if send.as_mut().poll(&mut cx).is_pending() {
        handle.block_on(send);
    }
}

/// The timeout of an exchange at `now`, if it is past `at`: the end of the whole exchange
/// (`ends`: `--request-deadline`'s message) or of what it `waited` for — as the transport's
/// deadlines word them.
fn timed_out(
    now: Instant,
    ends: bool,
    at: Instant,
    waited: (&str, Duration),
    config: &crate::net::TransportConfig,
) -> Option<TransportError> {
    if now < at {
        return None;
    }
    let why = if ends {
        deadline_message(config.request_deadline)
    } else {
        format!("{} {}", waited.0, humantime::format_duration(waited.1))
    };
    Some(TransportError::new(ErrorKind::Timeout, why))
}

/// What `read` (an answer's bytes so far) is for `flight`'s GET: a manifest that checks out
/// as the client checks it (status 200, HTTP/1.1 kept alive, a `Content-Length` the
/// bytes end at, a manifest type, the digest asked for, and with `checks` the
/// `Docker-Content-Digest`), more to read, or anything else. Notes the head's arrival. A
/// body is hashed unless it is a copy `verified` kept of the manifest asked for, and an
/// answer that is the one `verified` kept as accepted for the same GET is not parsed.
fn judge(read: &[u8], flight: &mut Flight, checks: bool, verified: &mut Verified) -> Read {
    if let Some(repeat) = repeated(read, flight, checks, verified) {
        return repeat;
    }
    let mut headers = [httparse::EMPTY_HEADER; 24];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(read) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) if read.len() < READ_MAX => return Read::More,
        _ => return Read::NotMine,
    };
    if flight.head_at.is_none() {
        flight.head_at = Some(flight.last_at);
    }
    if response.code != Some(200) || response.version != Some(1) {
        return Read::NotMine;
    }
    let Some(Plain {
        length,
        content_type,
        digest,
    }) = plain(response.headers)
    else {
        return Read::NotMine;
    };
    let end = head.saturating_add(length);
    if end > READ_MAX || read.len() > end {
        return Read::NotMine;
    }
    if read.len() < end {
        return Read::More;
    }
    let body = &read[head..end];
    let Action::ManifestGet {
        reference, expect, ..
    } = &flight.op.action
    else {
        return Read::NotMine;
    };
    if check_manifest_type(content_type).is_err() {
        return Read::NotMine;
    }
    let sha256 = match expect {
        Some(e) => verified.sum(e, body),
        None => Sha256Sum::of(body),
    };
    if expect.as_ref().is_some_and(|e| *e != sha256) {
        return Read::NotMine;
    }
    if checks && check_manifest_digest(reference, digest, &sha256).is_err() {
        return Read::NotMine;
    }
    if let Some(e) = expect {
        verified.accepted(e, reference.as_str(), checks, read, head);
    }
    Read::Manifest(length as u64)
}

/// `read` judged as the answer accepted last for the same manifest and reference, when it is
/// that answer again byte for byte: without its head parsed (a registry's answers differ
/// once a second, by `Date`).
fn repeated(
    read: &[u8],
    flight: &mut Flight,
    checks: bool,
    verified: &mut Verified,
) -> Option<Read> {
    let Action::ManifestGet {
        reference,
        expect: Some(e),
        ..
    } = &flight.op.action
    else {
        return None;
    };
    let length = verified.repeat(e, reference.as_str(), checks, read)?;
    flight.head_at.get_or_insert(flight.last_at);
    Some(Read::Manifest(length))
}

/// What a plain answer's head says of its body: how long it is, its type and the digest
/// the registry gives it.
struct Plain<'h> {
    length: usize,
    content_type: Option<&'h [u8]>,
    digest: Option<&'h str>,
}

/// `headers` as a plain answer's: one `Content-Length`, no other framing, nothing said of
/// the connection; `None` otherwise.
fn plain<'h>(headers: &[httparse::Header<'h>]) -> Option<Plain<'h>> {
    let (mut length, mut content_type, mut digest) = (None, None, None);
    for h in headers {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            if length.is_some() {
                return None;
            }
            let text = std::str::from_utf8(h.value).ok()?;
            length = Some(text.trim().parse::<usize>().ok()?);
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(h.value);
        } else if name.eq_ignore_ascii_case("docker-content-digest") {
            digest = std::str::from_utf8(h.value).ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("connection")
        {
            return None;
        }
    }
    Some(Plain {
        length: length?,
        content_type,
        digest,
    })
}

/// An answer the loop does not take, from its bytes so far (`read`, its head's first):
/// `None` while its head is not whole. Interim (1xx) answers are skipped, as the pool
/// skips them; a body that came whole with the head goes with it.
fn decide(read: &mut BytesMut) -> Result<Option<Decided>, TransportError> {
    let protocol = |e: h1::H1Error| TransportError::new(ErrorKind::Protocol, e.to_string());
    let head = loop {
        match h1::parse_head(read).map_err(protocol)? {
            None => return Ok(None),
            Some(head)
                if head.status.is_informational()
                    && head.status != StatusCode::SWITCHING_PROTOCOLS => {}
            Some(head) => break head,
        }
    };
    let framing = h1::framing(&Method::GET, &head).map_err(protocol)?;
    let keep = h1::keep_alive(&head, framing);
    let body = match framing {
        Framing::Empty => Some(bytes::Bytes::new()),
        Framing::Length(n) if n <= read.len() as u64 => {
            #[allow(clippy::cast_possible_truncation)] // at most the buffer's length
            Some(read.split_to(n as usize).freeze())
        }
        _ => None,
    };
    Ok(Some(match body {
        Some(body) => {
            let keep = keep && read.is_empty();
            let response =
                HttpResponse::whole(head.status, head.headers, body).with_version(head.version);
            Decided::Whole { response, keep }
        }
        None => Decided::Rest(head),
    }))
}

#[cfg(test)]
mod tests {
    //! What the loop takes as a plain success, and what it hands to the client as what: on
    //! bytes, as a registry would send them (the runs against real registries exercise the
    //! loop end to end: `tests/it`).

    use super::*;

    const MANIFEST: &[u8] =
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#;

    /// A GET in flight of `reference` in `a/b`, expecting `MANIFEST`'s digest.
    fn flight(reference: &str) -> Flight {
        let now = Instant::now();
        Flight {
            op: Box::new(PlannedOp {
                seq: 0,
                offset: Duration::ZERO,
                action: Action::ManifestGet {
                    repo: "a/b".parse().unwrap(),
                    reference: reference.parse().unwrap(),
                    expect: Some(Sha256Sum::of(MANIFEST)),
                },
                folded: 0,
                session: None,
                client: 0,
                client_name: None,
                closes: None,
            }),
            failed_over: false,
            sent: now,
            connecting: None,
            head_at: None,
            last_at: now,
            stamped: false,
        }
    }

    /// An answer with `status`, `headers` (lines) and `body`.
    fn answer(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
        let mut a = format!("HTTP/1.1 {status}\r\n").into_bytes();
        for h in headers {
            a.extend_from_slice(h.as_bytes());
            a.extend_from_slice(b"\r\n");
        }
        a.extend_from_slice(b"\r\n");
        a.extend_from_slice(body);
        a
    }

    fn manifest_answer(extra: &[&str], body: &[u8]) -> Vec<u8> {
        let length = format!("Content-Length: {}", body.len());
        let mut headers = vec![
            "Content-Type: application/vnd.oci.image.manifest.v1+json",
            length.as_str(),
        ];
        headers.extend_from_slice(extra);
        answer("200 OK", &headers, body)
    }

    #[test]
    fn a_whole_manifest_with_its_digest_is_the_loops_and_marks_its_head() {
        // One loop's kept copies throughout: the checks hold for a repeat as for the first.
        let mut v = Verified::new();
        let mut f = flight("t1");
        let read = manifest_answer(&[], MANIFEST);
        assert!(
            matches!(judge(&read, &mut f, true, &mut v), Read::Manifest(n) if n == MANIFEST.len() as u64)
        );
        assert_eq!(f.head_at, Some(f.last_at));
        // By tag, with checks: the registry's `Docker-Content-Digest`, if sent, must name it.
        let digest = Sha256Sum::of(MANIFEST).digest().to_string();
        let header = format!("Docker-Content-Digest: {digest}");
        let read = manifest_answer(&[&header], MANIFEST);
        assert!(matches!(
            judge(&read, &mut flight("t1"), true, &mut v),
            Read::Manifest(_)
        ));
        let wrong = format!("Docker-Content-Digest: {}", Sha256Sum::of(b"x").digest());
        let read = manifest_answer(&[&wrong], MANIFEST);
        assert!(matches!(
            judge(&read, &mut flight("t1"), true, &mut v),
            Read::NotMine
        ));
        // A body of the same length, one byte changed, is not the manifest kept.
        let mut changed = MANIFEST.to_vec();
        changed[3] ^= 1;
        let read_changed = manifest_answer(&[&header], &changed);
        assert!(matches!(
            judge(&read_changed, &mut flight("t1"), true, &mut v),
            Read::NotMine
        ));
        // Without checks the header is not read; by digest the reference is the check.
        assert!(matches!(
            judge(&read, &mut flight("t1"), false, &mut v),
            Read::Manifest(_)
        ));
        assert!(matches!(
            judge(&read, &mut flight(&digest), true, &mut v),
            Read::Manifest(_)
        ));
    }

    #[test]
    fn a_repeated_answer_is_judged_as_the_first_without_its_head_parsed() {
        let mut v = Verified::new();
        let digest = Sha256Sum::of(MANIFEST).digest().to_string();
        let header = format!("Docker-Content-Digest: {digest}");
        let read = manifest_answer(&[&header, "Date: one"], MANIFEST);
        let manifest = |r: Read| matches!(r, Read::Manifest(n) if n == MANIFEST.len() as u64);
        assert!(manifest(judge(&read, &mut flight("t1"), true, &mut v)));
        assert_eq!(v.repeats, 0);
        let mut f = flight("t1");
        assert!(manifest(judge(&read, &mut f, true, &mut v)));
        assert_eq!(v.repeats, 1, "the same bytes again: a repeat");
        assert_eq!(f.head_at, Some(f.last_at));
        // Part of it is not a repeat, and waits for the rest.
        let cut = &read[..read.len() - 1];
        assert!(matches!(
            judge(cut, &mut flight("t1"), true, &mut v),
            Read::More
        ));
        // The same bytes for another reference or other checks are judged anew; so is
        // another `Date`, which then repeats.
        assert!(manifest(judge(&read, &mut flight("t2"), true, &mut v)));
        assert!(manifest(judge(&read, &mut flight("t2"), false, &mut v)));
        assert_eq!(v.repeats, 1);
        let later = manifest_answer(&[&header, "Date: two"], MANIFEST);
        assert!(manifest(judge(&later, &mut flight("t1"), true, &mut v)));
        assert!(manifest(judge(&later, &mut flight("t1"), true, &mut v)));
        assert_eq!(v.repeats, 2);
        // An answer refused is never kept: its repeat is refused again, parsed.
        let wrong = format!("Docker-Content-Digest: {}", Sha256Sum::of(b"x").digest());
        let refused = manifest_answer(&[&wrong, "Date: two"], MANIFEST);
        for _ in 0..2 {
            assert!(matches!(
                judge(&refused, &mut flight("t1"), true, &mut v),
                Read::NotMine
            ));
        }
        assert_eq!(v.repeats, 2);
    }

    #[test]
    fn part_of_an_answer_waits_for_the_rest() {
        let read = manifest_answer(&[], MANIFEST);
        for cut in [5, 40, read.len() - 1] {
            let mut f = flight("t1");
            assert!(
                matches!(
                    judge(&read[..cut], &mut f, true, &mut Verified::new()),
                    Read::More
                ),
                "{cut}"
            );
        }
    }

    #[test]
    fn anything_else_goes_to_the_client() {
        let other = |read: &[u8]| {
            matches!(
                judge(read, &mut flight("t1"), true, &mut Verified::new()),
                Read::NotMine
            )
        };
        // Another body, another type, another status, other framing, HTTP/1.0, a close.
        assert!(other(&manifest_answer(&[], b"{}")));
        let html = answer(
            "200 OK",
            &["Content-Type: text/html", "Content-Length: 2"],
            b"{}",
        );
        assert!(other(&html));
        assert!(other(&answer("404 Not Found", &["Content-Length: 0"], b"")));
        assert!(other(&answer(
            "401 Unauthorized",
            &["Content-Length: 0"],
            b""
        )));
        assert!(other(&answer(
            "307 Temporary Redirect",
            &["Location: /x", "Content-Length: 0"],
            b""
        )));
        let chunked = answer("200 OK", &["Transfer-Encoding: chunked"], b"0\r\n\r\n");
        assert!(other(&chunked));
        assert!(other(&manifest_answer(&["Connection: close"], MANIFEST)));
        let mut old = manifest_answer(&[], MANIFEST);
        old[7] = b'0';
        assert!(other(&old));
        // Bytes past the answer's end answer nothing: not a success.
        let mut past = manifest_answer(&[], MANIFEST);
        past.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        assert!(other(&past));
        assert!(other(b"not http at all\r\n\r\n"));
    }

    #[test]
    fn an_answer_not_taken_is_made_whole_for_the_client_or_goes_with_its_connection() {
        // A 404 whose body came with it: whole, the connection kept.
        let mut read = BytesMut::from(&answer("404 Not Found", &["Content-Length: 2"], b"{}")[..]);
        let Ok(Some(Decided::Whole { response, keep })) = decide(&mut read) else {
            panic!("whole");
        };
        assert_eq!(response.status, StatusCode::NOT_FOUND);
        assert!(keep);
        // An interim answer first is skipped, as the pool skips it; one to close is not kept.
        let mut bytes = answer("100 Continue", &[], b"");
        bytes.extend(answer(
            "500 Internal Server Error",
            &["Content-Length: 0", "Connection: close"],
            b"",
        ));
        let mut read = BytesMut::from(&bytes[..]);
        let Ok(Some(Decided::Whole { response, keep })) = decide(&mut read) else {
            panic!("whole");
        };
        assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!keep);
        // A body still to come goes with the connection, the bytes after the head with it.
        let mut read = BytesMut::from(&answer("200 OK", &["Content-Length: 10"], b"abc")[..]);
        let Ok(Some(Decided::Rest(head))) = decide(&mut read) else {
            panic!("rest");
        };
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(&read[..], b"abc");
        let mut read = BytesMut::from(&answer("200 OK", &["Transfer-Encoding: chunked"], b"")[..]);
        assert!(matches!(decide(&mut read), Ok(Some(Decided::Rest(_)))));
        // A head not whole yet: more to read; not HTTP: a protocol error.
        let mut read = BytesMut::from(&b"HTTP/1.1 404 Not"[..]);
        assert!(matches!(decide(&mut read), Ok(None)));
        let mut read = BytesMut::from(&b"not http at all\r\n\r\n"[..]);
        let Err(e) = decide(&mut read) else {
            panic!("an error");
        };
        assert_eq!(e.kind, ErrorKind::Protocol);
    }

    #[test]
    fn the_loops_run_only_if_every_thread_was_had() {
        let ran = AtomicUsize::new(0);
        let jobs = || {
            (0..4)
                .map(|k| {
                    let ran = &ran;
                    move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                        k
                    }
                })
                .collect::<Vec<_>>()
        };
        let named = |k: usize| std::thread::Builder::new().name(format!("loop-{k}"));
        // Told it started (the runtime's canary stopped) before any job ran.
        let started = AtomicUsize::new(usize::MAX);
        let start = || started.store(ran.load(Ordering::SeqCst), Ordering::SeqCst);
        assert_eq!(run_all(jobs(), named, start).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(ran.swap(0, Ordering::SeqCst), 4);
        assert_eq!(started.swap(usize::MAX, Ordering::SeqCst), 0);
        // The third thread cannot be had (a stack larger than the address space): none
        // of the four runs, the two threads already made included.
        let third_fails = |k: usize| {
            let b = std::thread::Builder::new();
            if k == 2 {
                b.stack_size(1 << 47)
            } else {
                b
            }
        };
        assert!(run_all(jobs(), third_fails, start).is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(started.load(Ordering::SeqCst), usize::MAX, "not started");
    }
}
