//! One planned operation carried out (a task of its own in delay mode, in turn on one of
//! stress mode's workers): a manifest PUT first waits for the uploads of its push; the
//! operation goes to the endpoint the dispatcher chose (or, that endpoint being down, fails
//! unsent as `endpoint_down`); its outcome feeds the endpoint's health, the progress line
//! and the error log; a push's manifest PUT records the `image_push` session, a pull's
//! operations the pull session.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::deps::Deps;
use super::replicate::{Pushed, Replicas};
use super::session_unpack::{self, LayerSlot, ReadLayer, Unpacking};
use super::targets::Targets;
use crate::client::{BlobSource, ClientError, Given, OpCtx, RegistryClient};
use crate::metrics::attribution::Who;
use crate::metrics::{ErrorKind, ErrorLog, Event, Op, Outcome, Recorder, Sample, SessionMsg};
use crate::oci::Reference;
use crate::plan::{Action, PlannedOp};
use crate::progress::Progress;
use crate::route::health::{probe_until_up, Choice};
use crate::shutdown::Shutdown;

/// What every operation task shares with the dispatcher, behind one `Arc`: a task takes
/// one reference count, not a copy of the endpoint lists.
pub(super) struct TaskEnv {
    pub(super) targets: Targets,
    /// Records what belongs to no endpoint (image sessions).
    pub(super) recorder: Recorder,
    /// Ends the health probes with the run.
    pub(super) probes_stop: tokio_util::sync::CancellationToken,
    pub(super) deps: Arc<Deps>,
    pub(super) shutdown: Shutdown,
    pub(super) errors: ErrorLog,
    pub(super) progress: Option<Arc<Progress>>,
    /// `replay --unpack`: what the layers of pull sessions are unpacked with.
    pub(super) unpacking: Option<Unpacking>,
    /// `replay --replica`: the replicas watched for each image pushed.
    pub(super) replicas: Option<Arc<Replicas>>,
    /// Operations whose task was dropped before it ended ([`InFlight`]).
    pub(super) lost: std::sync::Mutex<Vec<InFlight>>,
}

/// What a finished task tells the dispatcher.
pub(super) struct TaskDone {
    /// Operations carried out: one for an operation's task, none for a stress-mode worker
    /// (which counts each as it ends).
    pub(super) ops: u64,
    pub(super) folded: u64,
}

/// An operation in flight, as the dispatcher records it should its task not end (cancelled
/// after the grace period, or a panic).
pub(super) struct InFlight {
    pub(super) op: Op,
    pub(super) endpoint: usize,
    pub(super) intended: Option<Instant>,
    pub(super) started: Instant,
    pub(super) records: u64,
}

/// Held by a task from when it is made (not its first poll), with the task's environment:
/// dropped before the task ends (its future dropped, whether it ran or not), it leaves the
/// operation in `TaskEnv::lost` for the dispatcher. The task's own state, so the dispatcher
/// keeps no table of the tasks in flight.
struct Unfinished {
    op: Option<InFlight>,
    env: Arc<TaskEnv>,
}

impl Unfinished {
    /// The task ended: nothing is left behind.
    fn finished(&mut self) {
        self.op = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            self.env
                .lost
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(op);
        }
    }
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
        Action::BlobMount { .. } => Op::BlobMount,
        Action::ManifestDelete { .. } => Op::ManifestDelete,
    }
}

/// A short name of what an action touches, for error messages.
fn describe(action: &Action) -> String {
    match action {
        Action::Ping => "GET /v2/".into(),
        Action::ManifestGet {
            repo, reference, ..
        }
        | Action::ManifestHead { repo, reference } => {
            format!("{repo}:{reference}")
        }
        Action::ManifestPut { repo, tag, .. } => format!("PUT {repo}:{tag}"),
        Action::BlobGet { repo, digest, .. }
        | Action::BlobHead { repo, digest }
        | Action::BlobDelete { repo, digest }
        | Action::BlobUpload { repo, digest, .. }
        | Action::ManifestDelete { repo, digest } => format!("{repo}@{digest}"),
        Action::BlobMount { repo, from, digest } => format!("{repo}@{digest} from {from}"),
        Action::TagList { repo } => format!("{repo} tags"),
    }
}

/// Carries out one operation; returns its bytes, or why it failed.
/// `given`: the answer stress mode's event loop had for a manifest GET's first request.
async fn perform(
    client: &RegistryClient,
    action: &Action,
    ctx: OpCtx,
    given: Option<Box<Given>>,
) -> Result<u64, ClientError> {
    match action {
        Action::Ping => client.ping(ctx).await.map(|()| 0),
        Action::ManifestGet {
            repo,
            reference,
            expect,
        } => client
            .manifest_read_given(repo, reference, expect.as_ref(), ctx, given)
            .await
            .map(|bytes| bytes.len() as u64),
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
            let (reference, manifest) = (Reference::Tag(tag.clone()), manifest.bytes());
            let len = manifest.len() as u64;
            let put = client.manifest_put(repo, &reference, manifest, media_type, ctx);
            put.await.map(|_| len)
        }
        Action::BlobGet {
            repo,
            digest,
            content,
            ..
        } => client.blob_get_generated(repo, digest, content, ctx).await,
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
        } => {
            let source = BlobSource::Content(*content);
            // Boxed: an upload's future is twice any other operation's, and the task of
            // every operation would otherwise be that large.
            let upload = Box::pin(client.upload_blob(repo, digest, &source, *mode, None, ctx));
            upload.await.map(|r| r.bytes_sent)
        }
        // Boxed: the largest of the reads' futures (its pages), and the rarest of them.
        Action::TagList { repo } => Box::pin(client.tag_list(repo, None, ctx))
            .await
            .map(|t| t.len() as u64),
        // A registry that does not mount answers with an upload session (202): counted as
        // the mount_fallback event the client records, the blob is not uploaded.
        Action::BlobMount { repo, from, digest } => {
            client.mount_blob(repo, digest, from, ctx).await.map(|_| 0)
        }
        Action::ManifestDelete { repo, digest } => {
            client.manifest_delete(repo, digest, ctx).await.map(|()| 0)
        }
    }
}

/// How the uploads a manifest PUT waited for went.
struct Push {
    /// Every upload of the push succeeded.
    ok: bool,
    /// When the first of them started.
    start: Option<Instant>,
}

/// Carries out `op` on the endpoint `choice` names, holding `permit` (its in-flight slot;
/// none on a stress-mode worker, which is the slot) until it is done; a layer of a pull
/// with its place in the pull (`layer`, `--unpack`) is then unpacked, its slot given back
/// once it waits for that. `given`: a manifest GET's first request, sent and answered by
/// stress mode's event loop, whose answer the client acts on.
///
/// An `async move` block, not an `async fn`, which would hold its arguments twice (as
/// passed and as locals) in the task of every operation.
#[allow(
    clippy::too_many_lines,
    clippy::manual_async_fn,
    clippy::too_many_arguments
)]
pub(super) fn run_task(
    mut op: Box<PlannedOp>,
    choice: Choice,
    intended: Option<Instant>,
    started: Instant,
    env: Arc<TaskEnv>,
    permit: Option<OwnedSemaphorePermit>,
    layer: Option<LayerSlot>,
    given: Option<Box<Given>>,
) -> impl std::future::Future<Output = TaskDone> + Send {
    let (Choice::Use { endpoint, .. } | Choice::Down { endpoint }) = choice;
    let mut unfinished = Unfinished {
        op: Some(InFlight {
            op: op_of(&op.action),
            endpoint,
            intended,
            started,
            records: op.records(),
        }),
        env,
    };
    async move {
        let env = &unfinished.env;
        let push = wait_for_uploads(&op, env).await;
        // A manifest PUT could start only once its uploads ended: its schedule lag runs from
        // then (its latency still from the intended instant).
        let ready = push.is_some().then(Instant::now);
        if let Action::ManifestPut { manifest, .. } = &mut op.action {
            // Built now, not when planned: queued and waiting PUTs stay small.
            manifest.materialize();
        }
        let is_upload = matches!(
            op.action,
            Action::BlobUpload { .. } | Action::BlobMount { .. }
        );
        // The operation's start and end as this task sees them are read from the clock
        // only for what uses them (an upload's start for the push waiting on it, a push's
        // sample, a replica's watch, a layer's unpack, a member its sample does not end): a
        // plain GET's sample has its own, and each is a clock read per operation.
        let start = intended.or_else(|| (is_upload || push.is_some()).then(Instant::now));
        let member = op.pull_session();
        // A sent member whose layer is not unpacked is ended by its own sample; otherwise (not
        // sent, or ended only once its layer is applied) by a message of its own, below.
        let ended_by_sample = match (&choice, &layer) {
            (Choice::Use { .. }, None) => member,
            _ => None,
        };
        let (bytes, error) = match choice {
            Choice::Use {
                endpoint,
                failed_over,
            } => {
                let ctx = OpCtx {
                    intended,
                    ready,
                    who: Some(who_of(&mut op)),
                    session: ended_by_sample,
                };
                send(&op, endpoint, failed_over, ctx, env, given).await
            }
            Choice::Down { endpoint } => {
                // Not sent: counted as a failure of the endpoint it was meant for.
                let now = Instant::now();
                let sample =
                    Sample::unanswered(op_of(&op.action), ErrorKind::EndpointDown, intended, now);
                env.targets.clients[endpoint]
                    .recorder()
                    .record(sample)
                    .await;
                if let Some(p) = &env.progress {
                    p.add_error();
                }
                (0, Some(ErrorKind::EndpointDown))
            }
        };
        let watched = env.replicas.is_some() && matches!(op.action, Action::ManifestPut { .. });
        let ends_member = member.is_some() && ended_by_sample.is_none();
        let end = (push.is_some() || watched || layer.is_some() || ends_member).then(Instant::now);
        if is_upload {
            env.deps.complete(op.seq, error.is_none(), or_now(start));
        }
        if let Some(push) = push {
            record_push(&op, &push, error, or_now(start), or_now(end), &env.recorder).await;
        }
        if let (Some(replicas), None) = (&env.replicas, error) {
            if let Some(pushed) = pushed_image(&op.action, or_now(end)) {
                replicas.watch(pushed).await;
            }
        }
        if let Some(p) = &env.progress {
            p.add_done(op.records());
        }
        let applied = match (layer, &env.unpacking, &op.action) {
            (
                Some(layer),
                Some(u),
                Action::BlobGet {
                    repo,
                    digest,
                    content,
                    diff_id,
                },
            ) => {
                let read = ReadLayer {
                    content,
                    diff_id: *diff_id,
                    what: format!("{repo}@{digest}"),
                    failed: error,
                    end: or_now(end),
                };
                let (recorder, errors) = (&env.recorder, &env.errors);
                Some(session_unpack::apply(u, layer, read, permit, recorder, errors).await)
            }
            _ => {
                drop(permit);
                None
            }
        };
        if let (Some(id), None) = (member, ended_by_sample) {
            let ended = SessionMsg::Ended {
                id,
                end: or_now(end),
                error,
                bytes,
                applied,
            };
            env.recorder.session(ended).await;
        }
        unfinished.finished();
        TaskDone {
            ops: 1,
            folded: u64::from(op.folded),
        }
    }
}

/// `at` as read, or the clock now: the reads above foresee each use, so this reads it only
/// for a use they missed.
fn or_now(at: Option<Instant>) -> Instant {
    at.unwrap_or_else(Instant::now)
}

/// Whom `op`'s figures are attributed to: its repository and the trace's client. The
/// client's name is taken, not shared: nothing else reads it, and each count moved on a name
/// shared across threads is a cache line taken from another core.
pub(super) fn who_of(op: &mut PlannedOp) -> Who {
    let repository = match &op.action {
        Action::Ping => None,
        Action::ManifestGet { repo, .. }
        | Action::ManifestHead { repo, .. }
        | Action::ManifestPut { repo, .. }
        | Action::BlobGet { repo, .. }
        | Action::BlobHead { repo, .. }
        | Action::BlobDelete { repo, .. }
        | Action::BlobUpload { repo, .. }
        | Action::TagList { repo }
        | Action::BlobMount { repo, .. }
        | Action::ManifestDelete { repo, .. } => Some(repo.shared()),
    };
    Who {
        repository,
        client: op.client_name.take(),
    }
}

/// A manifest PUT of a push waits for the uploads of its push (or for the stop): how they
/// went. `None` for every other operation.
async fn wait_for_uploads(op: &PlannedOp, env: &TaskEnv) -> Option<Push> {
    let Action::ManifestPut { deps: wanted, .. } = &op.action else {
        return None;
    };
    if wanted.is_empty() {
        return None;
    }
    let mut push = Push {
        ok: true,
        start: None,
    };
    tokio::select! {
        (ok, earliest) = env.deps.wait_all(wanted) => {
            push = Push { ok, start: earliest };
        }
        _ = env.shutdown.token().cancelled() => {}
    }
    Some(push)
}

/// Sends `op` to `endpoint` and watches the endpoint's health: its bytes, or the kind of
/// its failure.
async fn send(
    op: &PlannedOp,
    endpoint: usize,
    failed_over: bool,
    ctx: OpCtx,
    env: &TaskEnv,
    given: Option<Box<Given>>,
) -> (u64, Option<ErrorKind>) {
    let targets = &env.targets;
    let client = &targets.clients[endpoint];
    if failed_over {
        env.recorder.event(Event::Failover).await;
    }
    // The progress line's latency and lag come from the aggregator, which sees this
    // operation's sample.
    let result = perform(client, &op.action, ctx, given).await;
    let error = result.as_ref().err().map(ClientError::kind);
    if targets.health.observe(endpoint, error) {
        env.recorder.event(Event::EndpointDown).await;
        tokio::spawn(probe_until_up(
            Arc::clone(&targets.health),
            endpoint,
            targets.probes[endpoint].clone(),
            env.recorder.clone(),
            targets.probe_interval,
            env.probes_stop.clone(),
        ));
    }
    match result {
        Ok(bytes) => (bytes, None),
        Err(e) => {
            env.errors.note(format!("{}: {e}", describe(&op.action)));
            if let Some(p) = &env.progress {
                p.add_error();
            }
            (0, Some(e.kind()))
        }
    }
}

/// The image push a manifest PUT ends: from its first upload's start to the manifest's
/// answer.
async fn record_push(
    op: &PlannedOp,
    push: &Push,
    error: Option<ErrorKind>,
    start: Instant,
    end: Instant,
    recorder: &Recorder,
) {
    let Action::ManifestPut { manifest, .. } = &op.action else {
        return;
    };
    let outcome = match (error, push.ok) {
        (Some(kind), _) => Outcome::Error(kind),
        (None, false) => Outcome::Error(ErrorKind::Protocol),
        (None, true) => Outcome::Ok,
    };
    let len = manifest.bytes().len() as u64;
    let mut sample = Sample::session(
        Op::ImagePush,
        outcome,
        push.start.unwrap_or(start).min(start),
        len,
        0,
    );
    sample.timing.end = end;
    recorder.record(sample).await;
}

/// What a replica must serve of the image a manifest PUT answered at `at` put in: the
/// manifest by digest, then what it references (`None` for other operations).
fn pushed_image(action: &Action, at: Instant) -> Option<Pushed> {
    let Action::ManifestPut { repo, manifest, .. } = action else {
        return None;
    };
    let bytes = manifest.bytes();
    let mut pushed = Pushed {
        repo: repo.clone(),
        manifests: vec![crate::digest::Digest::sha256_of(&bytes)],
        blobs: Vec::new(),
        bytes: bytes.len() as u64,
        at,
    };
    let parsed = crate::oci::manifest::ParsedManifest::parse(&bytes, None).ok()?;
    match parsed {
        crate::oci::manifest::ParsedManifest::Image { config, layers } => {
            for d in config.into_iter().chain(layers) {
                pushed.bytes += d.size;
                pushed.blobs.push(d.digest);
            }
        }
        crate::oci::manifest::ParsedManifest::Index { manifests } => {
            pushed
                .manifests
                .extend(manifests.into_iter().map(|d| d.digest));
        }
    }
    Some(pushed)
}
