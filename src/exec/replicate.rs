//! `--replica`: after an image push completes at the primary (its manifest PUT answered),
//! every replica is watched until it serves the image: the manifest by digest with the same
//! content, then every blob it references answering HEAD 200. One `replication` sample per
//! replica and image, from the primary's answer to the replica serving all of it, counted
//! for the replica's endpoint; `replication_timeout` after `--replica-timeout`,
//! `replica_mismatch` for other content under the digest.
//!
//! The watch runs beside the workload and never holds it up: a push hands its image over
//! and goes on. Its state is bounded: at most `max_watches` images are watched at once; an
//! image pushed while they all are is not watched (the event `replica_watch_skipped`). Its
//! requests are not the workload's: they go through clients that record nothing and are
//! counted as the events `replica_request` and `replica_request_failed`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{ClientError, OpCtx, RegistryClient};
use crate::digest::{Digest, Sha256Sum};
use crate::metrics::{ErrorKind, ErrorLog, Event, Op, Outcome, Recorder, Sample};
use crate::oci::{Reference, Repository};

/// How replicas are watched.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaWork {
    /// Between two looks at a replica (`--replica-poll`); doubled after each 429, up to
    /// `MAX_BACKOFF` (32) times.
    pub poll: Duration,
    /// How long a replica may take (`--replica-timeout`).
    pub timeout: Duration,
    /// Images watched at once at most (`--replica-max-watches`).
    pub max_watches: usize,
}

/// The replicas of a run (`--replica`) and how they are watched.
#[derive(Debug, Clone)]
pub struct ReplicaSpec {
    pub urls: Vec<url::Url>,
    pub work: ReplicaWork,
}

impl ReplicaSpec {
    /// Each replica as the results name it: scheme, host and port.
    pub fn names(&self) -> Vec<String> {
        (self.urls.iter())
            .map(|u| u.as_str().trim_end_matches('/').to_owned())
            .collect()
    }

    /// The results' record of it.
    pub fn block(&self) -> crate::results::config::ReplicaBlock {
        crate::results::config::ReplicaBlock {
            replicas: self.names(),
            poll_s: self.work.poll.as_secs_f64(),
            timeout_s: self.work.timeout.as_secs_f64(),
            max_watches: self.work.max_watches,
        }
    }
}

/// The most a 429 stretches the polling interval by.
pub const MAX_BACKOFF: u32 = 32;

/// What a replica must serve of a pushed image.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub repo: Repository,
    /// The manifest the push tagged (an image's, or an index's), then the manifests an
    /// index refers to: each by digest.
    pub manifests: Vec<Digest>,
    /// Every blob the image references (configs and layers).
    pub blobs: Vec<Digest>,
    /// Bytes of the image (its blobs and manifests): the sample's size.
    pub bytes: u64,
    /// When the primary answered the push's manifest PUT.
    pub at: Instant,
}

/// One replica: its client (recording nothing) and where its `replication` samples go.
#[derive(Debug, Clone)]
pub struct Replica {
    pub name: String,
    pub client: RegistryClient,
    /// The run's recorder for this replica's endpoint.
    pub recorder: Recorder,
}

/// The replicas of a run and the watches in progress.
#[derive(Debug)]
pub struct Replicas {
    replicas: Arc<[Replica]>,
    work: ReplicaWork,
    /// The run's recorder, for events.
    events: Recorder,
    errors: ErrorLog,
    watching: Arc<Semaphore>,
    tasks: Mutex<JoinSet<()>>,
    /// Ends every watch (a stop's grace ran out): each records itself as cancelled.
    stop: CancellationToken,
}

impl Replicas {
    pub fn new(
        replicas: Vec<Replica>,
        work: ReplicaWork,
        events: Recorder,
        errors: ErrorLog,
    ) -> Replicas {
        Replicas {
            replicas: replicas.into(),
            watching: Arc::new(Semaphore::new(work.max_watches.max(1))),
            work,
            events,
            errors,
            tasks: Mutex::new(JoinSet::new()),
            stop: CancellationToken::new(),
        }
    }

    /// Starts watching every replica for `pushed`, unless `max_watches` images are watched
    /// already (then it is counted, not watched). Never waits.
    pub async fn watch(&self, pushed: Pushed) {
        let Ok(slot) = Arc::clone(&self.watching).try_acquire_owned() else {
            self.events.event(Event::ReplicaWatchSkipped).await;
            return;
        };
        let pushed = Arc::new(pushed);
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        // Reap the watches that ended: the set holds only those in progress.
        while tasks.try_join_next().is_some() {}
        let slot = Arc::new(slot);
        for i in 0..self.replicas.len() {
            let watch = Watch {
                replicas: Arc::clone(&self.replicas),
                index: i,
                pushed: Arc::clone(&pushed),
                work: self.work,
                events: self.events.clone(),
                errors: self.errors.clone(),
                stop: self.stop.clone(),
                _slot: Arc::clone(&slot),
            };
            tasks.spawn(watch.run());
        }
    }

    /// Waits for every watch to end; once `stop` is cancelled, for `grace` more, then ends
    /// the rest (each recorded as `cancelled`).
    pub async fn finish(&self, stop: &CancellationToken, grace: Duration) {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let all = async { while tasks.join_next().await.is_some() {} };
        tokio::pin!(all);
        tokio::select! {
            () = &mut all => return,
            () = stop.cancelled() => {}
        }
        if tokio::time::timeout(grace, &mut all).await.is_err() {
            self.stop.cancel();
            all.await;
        }
    }
}

/// The warnings of a run that watched replicas: images it could not watch.
pub fn warnings(
    aggregator: &crate::metrics::Aggregator,
    warnings: &mut Vec<crate::results::Warning>,
) {
    let skipped = aggregator.event(Event::ReplicaWatchSkipped);
    if skipped > 0 {
        warnings.push(crate::results::Warning {
            kind: "replica_watch_skipped".into(),
            message: format!(
                "{skipped} pushed images were not watched at the replicas: \
                 --replica-max-watches images were watched already; replication covers the others"
            ),
        });
    }
}

/// One replica watched for one pushed image.
struct Watch {
    replicas: Arc<[Replica]>,
    index: usize,
    pushed: Arc<Pushed>,
    work: ReplicaWork,
    events: Recorder,
    errors: ErrorLog,
    stop: CancellationToken,
    /// Holds the image's place among the watches until every replica's watch ended.
    _slot: Arc<tokio::sync::OwnedSemaphorePermit>,
}

/// What one look at a replica found.
enum Look {
    /// Everything is served.
    Served,
    /// Not all of it yet: look again.
    NotYet,
    /// The replica failed to answer (down, refusing, 5xx): look again.
    Failed(String),
    /// A 429: look again later than usual.
    Slower,
    /// Other content under the manifest's digest.
    Mismatch(String),
}

impl Watch {
    async fn run(self) {
        let replica = &self.replicas[self.index];
        let p = &*self.pushed;
        let deadline = p.at + self.work.timeout;
        let mut manifests: Vec<&Digest> = p.manifests.iter().collect();
        let mut blobs: Vec<&Digest> = p.blobs.iter().collect();
        let mut backoff = 1u32;
        let mut failure = None;
        let outcome = loop {
            match self.look(replica, &mut manifests, &mut blobs).await {
                Look::Served => break Outcome::Ok,
                Look::Failed(message) => {
                    failure = Some(message);
                    backoff = 1;
                }
                Look::Mismatch(message) => {
                    self.errors
                        .note(format!("--replica {}: {}: {message}", replica.name, p.repo));
                    break Outcome::Error(ErrorKind::ReplicaMismatch);
                }
                Look::Slower => backoff = (backoff * 2).min(MAX_BACKOFF),
                Look::NotYet => {
                    failure = None;
                    backoff = 1;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let last = failure.map(|f| format!(" (its last answer: {f})"));
                self.errors.note(format!(
                    "--replica {}: {}@{} not served within --replica-timeout {:?}{}",
                    replica.name,
                    p.repo,
                    p.manifests[0],
                    self.work.timeout,
                    last.unwrap_or_default()
                ));
                break Outcome::Error(ErrorKind::ReplicationTimeout);
            }
            let next = (now + self.work.poll * backoff).min(deadline);
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = self.stop.cancelled() => break Outcome::Error(ErrorKind::Cancelled),
            }
        };
        let sample = Sample::session(Op::Replication, outcome, p.at, 0, p.bytes);
        replica.recorder.record(sample).await;
    }

    /// Looks at what the replica does not serve yet: the manifests in order, then the blobs;
    /// what it serves is taken off the lists. Stops at the first thing not there.
    async fn look(
        &self,
        replica: &Replica,
        manifests: &mut Vec<&Digest>,
        blobs: &mut Vec<&Digest>,
    ) -> Look {
        let repo = &self.pushed.repo;
        let ctx = || OpCtx::for_repository(repo);
        while let Some(&digest) = manifests.first() {
            self.events.event(Event::ReplicaRequest).await;
            let expect = Sha256Sum::from_digest(digest);
            let reference = Reference::Digest(digest.clone());
            let got = (replica.client)
                .manifest_read(repo, &reference, expect.as_ref(), ctx())
                .await;
            match got {
                Ok(_) => {
                    manifests.remove(0);
                }
                Err(ClientError::DigestMismatch { actual, .. }) => {
                    return Look::Mismatch(format!("{digest} answered with {actual}"));
                }
                Err(e) => return self.not_yet(e).await,
            }
        }
        while let Some(&digest) = blobs.first() {
            self.events.event(Event::ReplicaRequest).await;
            match replica.client.blob_head(repo, digest, ctx()).await {
                Ok(Some(_)) => {
                    blobs.remove(0);
                }
                Ok(None) => return Look::NotYet,
                Err(e) => return self.not_yet(e).await,
            }
        }
        Look::Served
    }

    /// A look that failed: a 404 is "not yet", a 429 "slower"; anything else is counted
    /// as a failed request and looked at again.
    async fn not_yet(&self, e: ClientError) -> Look {
        match e.kind() {
            ErrorKind::Http(404) => Look::NotYet,
            ErrorKind::Http(429) => Look::Slower,
            _ => {
                self.events.event(Event::ReplicaRequestFailed).await;
                Look::Failed(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The watch on a paused clock against a scripted replica: a 429 storm on demand is what
    //! no real registry gives.

    use super::*;
    use crate::client::ClientOptions;
    use crate::metrics::AggregatorBuilder;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    /// Three 429s stretch the interval to 200, 400 and 800 ms; then the manifest and the
    /// blob are served, and the image's replication ends there.
    #[tokio::test(start_paused = true)]
    async fn a_429_storm_doubles_the_interval_until_the_replica_serves() {
        let manifest = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":2},"layers":[]}"#;
        let digest = Digest::sha256_of(manifest);
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        let transport = ScriptedTransport::new(move |req| {
            let mut seen = seen.lock().unwrap();
            seen.push(Instant::now());
            if req.url.path().contains("/manifests/") && seen.len() <= 3 {
                return ScriptedResponse::status(429).header("content-length", "0");
            }
            if req.url.path().contains("/manifests/") {
                return ScriptedResponse::status(200)
                    .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                    .header("content-length", &manifest.len().to_string())
                    .body(&manifest[..]);
            }
            ScriptedResponse::status(200).header("content-length", "2")
        });
        let (recorder, aggregator) = AggregatorBuilder::default().spawn();
        let client = RegistryClient::new(
            Arc::new(transport),
            "http://replica.test/".parse().unwrap(),
            Recorder::discard(),
            ClientOptions::default(),
        );
        let replica = Replica {
            name: "http://replica.test".into(),
            client,
            recorder: recorder.clone(),
        };
        let work = ReplicaWork {
            poll: Duration::from_millis(100),
            timeout: Duration::from_secs(60),
            max_watches: 4,
        };
        let replicas = Replicas::new(vec![replica], work, recorder.clone(), ErrorLog::default());
        let start = Instant::now();
        replicas
            .watch(Pushed {
                repo: "a/b".parse().unwrap(),
                manifests: vec![digest],
                blobs: vec![Digest::sha256_of(b"{}")],
                bytes: 100,
                at: start,
            })
            .await;
        replicas
            .finish(&CancellationToken::new(), Duration::ZERO)
            .await;
        drop(replicas);
        drop(recorder);
        let at: Vec<u128> = (asked.lock().unwrap().iter())
            .map(|t| t.duration_since(start).as_millis())
            .collect();
        assert_eq!(at, [0, 200, 600, 1400, 1400], "{at:?}");
        let agg = aggregator.finish().await;
        let r = agg.table().op_total(Op::Replication).unwrap();
        assert_eq!((r.count, r.errors), (1, 0));
        let lat = r.latency.max();
        assert!((1_390_000..=1_410_000).contains(&lat), "{lat}");
    }
}
