//! `--unpack` in a pull: each layer's body, tapped as it downloads, goes to its unpacker on a
//! bounded pool; one image's layers are applied in order, as a runtime applies them, while
//! later layers still download; each is checked against the config's diff_id. Samples:
//! `layer_unpack` per layer, `image_ready` per image (from the pull's start to its last
//! layer applied).
//!
//! Memory stays bounded: between a download and its unpacker wait at most [`QUEUE`] chunks
//! (each at most a connection's read buffer). An unpacker slower than the download, or one
//! still waiting for its turn (an earlier layer of its image, a free worker), fills its
//! queue, and the download then waits: back-pressure on the pull, never unbounded
//! buffering. The wait is the pull's (its `blob_get` lasts longer), the unpack time is
//! `image_ready`'s; the request loop itself never unpacks (the pool is blocking threads).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::{Buf, Bytes};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use super::bounded::JobEnv;
use crate::client::{ClientError, OpCtx, RegistryClient};
use crate::metrics::{ErrorKind, Op, Outcome, Sample};
use crate::oci::manifest::Descriptor;
use crate::oci::Repository;
use crate::unpack::{self, Layer, LayerCompression, Limits, Target};

/// Chunks that may wait between a layer's download and its unpacker.
pub const QUEUE: usize = 16;

/// `replay --unpack`: layers per unpack worker that may wait, read, for their unpack.
pub const BACKLOG_PER_WORKER: usize = 16;

/// The largest image config read for its diff_ids.
const CONFIG_LIMIT: usize = 4 << 20;

/// How a pull unpacks its images.
#[derive(Debug, Clone)]
pub struct UnpackWork {
    /// Apply the layers under `dir/<image>/`; `None`: read every entry and discard it.
    pub dir: Option<PathBuf>,
    /// Leave what was applied (`--keep-unpacked`); else it is removed once the image is
    /// ready.
    pub keep: bool,
    pub limits: Limits,
    /// Layers unpacked at once across all images: the pool's threads.
    pub workers: usize,
}

impl UnpackWork {
    /// The results' record of it.
    pub fn block(&self) -> crate::results::config::UnpackBlock {
        crate::results::config::UnpackBlock {
            dir: self.dir.clone(),
            keep_unpacked: self.keep,
            workers: self.workers,
            bound_ratio: self.limits.ratio,
            bound_floor: self.limits.floor,
        }
    }
}

/// The unpack workers of a pull, shared by its images.
#[derive(Debug)]
pub struct Pool {
    workers: Semaphore,
    /// Images started, to name their directories apart.
    images: std::sync::atomic::AtomicU64,
}

impl Pool {
    pub fn new(work: &UnpackWork) -> Pool {
        Pool {
            workers: Semaphore::new(work.workers.max(1)),
            images: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A number no other image of this pool has, for its directory.
    pub(super) fn next_image(&self) -> u64 {
        self.images
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// What an image's unpacking came to.
#[derive(Debug, Default)]
pub(super) struct Unpacked {
    /// Bytes of the blobs downloaded.
    pub received: u64,
    /// Bytes of the layers' tars.
    pub uncompressed: u64,
    /// The first failure: a download's, else an unpack's.
    pub failed: Option<ErrorKind>,
    /// When the last blob's last byte arrived: where `image_pull` ends.
    pub downloaded: Option<Instant>,
}

/// A layer's body as its unpacker reads it, from the chunks `chunks` yields: a download's
/// (until its sender is dropped), or its content generated again (`replay --unpack`).
pub(super) struct ChunkReader<I> {
    pub chunks: I,
    pub current: Bytes,
}

impl<I: Iterator<Item = std::io::Result<Bytes>>> Read for ChunkReader<I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.next() {
                Some(chunk) => self.current = chunk?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

/// The directory an image is applied under: its name made safe, and a number apart.
pub(super) fn image_dir(root: &Path, name: &str, n: u64) -> PathBuf {
    let safe: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .collect();
    root.join(format!("{safe}-{n}"))
}

/// The diff_ids of an image config's `rootfs`, read from its blob (tapped, bounded).
async fn diff_ids(
    client: &RegistryClient,
    repo: &Repository,
    config: &Descriptor,
) -> Result<(u64, Vec<String>), ClientError> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
    let read = async move {
        let ctx = OpCtx::for_repository(repo);
        client
            .blob_get_tapped(repo, &config.digest, Some(config.size), &tx, ctx)
            .await
    };
    let collect = async {
        let mut body = Vec::new();
        while let Some(chunk) = rx.recv().await {
            if body.len() + chunk.len() <= CONFIG_LIMIT {
                body.extend_from_slice(&chunk);
            }
        }
        body
    };
    let (read, body) = tokio::join!(read, collect);
    let received = read?;
    #[derive(serde::Deserialize)]
    struct Config {
        rootfs: RootFs,
    }
    #[derive(serde::Deserialize)]
    struct RootFs {
        diff_ids: Vec<String>,
    }
    let parsed: Config = serde_json::from_slice(&body).map_err(|e| ClientError::Unexpected {
        kind: ErrorKind::LayerInvalid,
        message: format!(
            "{repo}@{}: the config has no rootfs.diff_ids: {e}",
            config.digest
        ),
    })?;
    Ok((received, parsed.rootfs.diff_ids))
}

/// What an image's layers share: where they come from, the download slots and unpack
/// workers they take, how they are unpacked.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    pub client: &'a RegistryClient,
    pub repo: &'a Repository,
    pub downloads: &'a Semaphore,
    pub pool: &'a Pool,
    pub work: &'a UnpackWork,
}

/// One layer of an image: what it is checked against, where it is applied, and its place
/// in the image's order (`turn`: the layer before it is done; `done`: this one is).
struct LayerJob<'a> {
    d: &'a Descriptor,
    diff_id: Option<String>,
    target: Option<Arc<Mutex<Target>>>,
    turn: oneshot::Receiver<()>,
    done: oneshot::Sender<()>,
}

/// How one layer came out.
struct LayerDone {
    /// Bytes of the blob received.
    received: u64,
    /// Bytes of its tar.
    tar: u64,
    /// Its failure: the download's, else the unpack's, with what to tell the user.
    failed: Option<(ErrorKind, String)>,
    /// When its download ended.
    at: Instant,
}

/// One layer's unpack as a blocking thread of the pool runs it.
pub(super) struct Blocking {
    /// `None`: the media type is no layer's (the unpack fails as `layer_invalid`).
    pub compression: Option<LayerCompression>,
    /// The compressed size, which the decompression bound scales with.
    pub size: u64,
    pub diff_id: Option<String>,
    pub target: Option<Arc<Mutex<Target>>>,
    pub limits: Limits,
}

/// The unpack's start and result, or `None` when the pool closed.
pub(super) type Ran = Option<(
    Instant,
    Result<Result<unpack::Unpacked, unpack::UnpackError>, tokio::task::JoinError>,
)>;

impl Blocking {
    /// Unpacks `body` once a worker of `pool` is free, on a blocking thread (the request
    /// loop never unpacks).
    pub(super) async fn run<R: Read + Send + 'static>(self, pool: &Pool, body: R) -> Ran {
        let Ok(_worker) = pool.workers.acquire().await else {
            return None;
        };
        let start = Instant::now();
        let applied = tokio::task::spawn_blocking(move || {
            let Some(compression) = self.compression else {
                return Err(unpack::UnpackError::NotTar("not a layer media type".into()));
            };
            let layer = Layer {
                compression,
                size: self.size,
                diff_id: self.diff_id.as_deref(),
            };
            let mut guard =
                (self.target.as_ref()).map(|t| t.lock().unwrap_or_else(|e| e.into_inner()));
            unpack::unpack(body, layer, guard.as_deref_mut(), self.limits)
        })
        .await;
        Some((start, applied))
    }
}

/// One layer: its download tapped into its unpacker, which starts when the layer before it
/// was applied and a worker is free; records its `layer_unpack`.
#[allow(clippy::too_many_lines)]
async fn layer(s: Shared<'_>, job: LayerJob<'_>) -> LayerDone {
    let LayerJob {
        d,
        diff_id,
        target,
        turn,
        done,
    } = job;
    let (tx, mut rx) = mpsc::channel::<Bytes>(QUEUE);
    let download = async move {
        let Ok(_permit) = s.downloads.acquire().await else {
            return (Err(ClientError::Cancelled), Instant::now());
        };
        let expected = (d.size > 0).then_some(d.size);
        let ctx = OpCtx::for_repository(s.repo);
        let r = (s.client)
            .blob_get_tapped(s.repo, &d.digest, expected, &tx, ctx)
            .await;
        drop(tx);
        (r, Instant::now())
    };
    let job = Blocking {
        compression: LayerCompression::of_media_type(&d.media_type),
        size: d.size,
        diff_id,
        target,
        limits: s.work.limits,
    };
    let unpacked = async {
        // The layer before this one is applied first (or failed).
        let _ = turn.await;
        // A worker is taken once the body flows, never while the download still waits for
        // its own turn to download: a worker held by a layer that cannot download while
        // the downloads wait for workers would stop the pull.
        let first = rx.recv().await.unwrap_or_default();
        let chunks = std::iter::from_fn(move || rx.blocking_recv().map(Ok));
        let body = ChunkReader {
            chunks,
            current: first,
        };
        job.run(s.pool, body).await
    };
    let ((downloaded, at), unpacked) = tokio::join!(download, unpacked);
    let _ = done.send(());
    let mut out = LayerDone {
        received: 0,
        tar: 0,
        failed: None,
        at,
    };
    let what = format!("{}@{}", s.repo, d.digest);
    match (downloaded, unpacked) {
        // The download's failure is the layer's: its unpacker only saw a cut body.
        (Err(e), _) => out.failed = Some((e.kind(), format!("{what}: {e}"))),
        (Ok(n), None) => {
            out.received = n;
            out.failed = Some((ErrorKind::Cancelled, format!("{what}: cancelled")));
        }
        (Ok(n), Some((start, applied))) => {
            out.received = n;
            let outcome = match applied {
                Ok(Ok(u)) => {
                    out.tar = u.uncompressed;
                    Outcome::Ok
                }
                Ok(Err(e)) => {
                    out.failed = Some((e.kind(), format!("{what}: unpack: {e}")));
                    Outcome::Error(e.kind())
                }
                Err(e) => {
                    out.failed = Some((ErrorKind::Other, format!("{what}: unpack: {e}")));
                    Outcome::Error(ErrorKind::Other)
                }
            };
            let sample = Sample::session(Op::LayerUnpack, outcome, start, 0, out.tar);
            s.client.recorder().record(sample).await;
        }
    }
    out
}

/// Pulls image `name`'s config and layers with every layer unpacked in order.
#[allow(clippy::too_many_lines)]
pub(super) async fn pull_unpacking(
    shared: Shared<'_>,
    name: &str,
    config: Option<&Descriptor>,
    layers: &[Descriptor],
    env: JobEnv<'_>,
) -> Unpacked {
    let Shared {
        client,
        repo,
        pool,
        work,
        ..
    } = shared;
    let mut out = Unpacked::default();
    let ids = match config {
        Some(c) => match diff_ids(client, repo, c).await {
            Ok((n, ids)) => {
                out.received += n;
                ids
            }
            Err(e) => {
                env.errors.note(format!("{repo}@{}: config: {e}", c.digest));
                out.failed = Some(e.kind());
                return out;
            }
        },
        None => Vec::new(),
    };
    if config.is_some() && ids.len() != layers.len() {
        env.errors.note(format!(
            "{name}: the config lists {} diff_ids for {} layers",
            ids.len(),
            layers.len()
        ));
        out.failed = Some(ErrorKind::DiffIdMismatch);
        return out;
    }
    let dir = (work.dir.as_ref()).map(|root| image_dir(root, name, pool.next_image()));
    // Removed when the image is done, or when a stop drops its pull mid-way.
    let _written = Written {
        dir: dir.clone().filter(|_| !work.keep),
    };
    let target = match dir.as_deref().map(Target::new).transpose() {
        Ok(t) => t.map(|t| Arc::new(Mutex::new(t))),
        Err(e) => {
            env.errors.note(format!("{name}: --unpack-dir: {e}"));
            out.failed = Some(ErrorKind::Other);
            return out;
        }
    };
    // Each layer's unpacker waits for the one before it.
    let (first, mut turn) = oneshot::channel();
    let _ = first.send(());
    let mut jobs = Vec::new();
    for (i, d) in layers.iter().enumerate() {
        let (done, next) = oneshot::channel();
        let job = LayerJob {
            d,
            diff_id: ids.get(i).cloned(),
            target: target.clone(),
            turn,
            done,
        };
        jobs.push(layer(shared, job));
        turn = next;
    }
    for done in futures_util::future::join_all(jobs).await {
        out.received += done.received;
        out.uncompressed += done.tar;
        out.downloaded = out.downloaded.max(Some(done.at));
        if let Some((kind, message)) = done.failed {
            if kind != ErrorKind::Cancelled {
                env.errors.note(message);
            }
            out.failed = out.failed.or(Some(kind));
        }
    }
    out
}

/// What an image wrote under `--unpack-dir`, removed when it goes out of scope: after the
/// image is ready, or when a stop's grace ran out and its pull was dropped (an unpacker
/// still writing then fails on the missing directory and stops).
pub(super) struct Written {
    pub(super) dir: Option<PathBuf>,
}

impl Drop for Written {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            if let Err(e) = unpack::remove_unpacked(dir) {
                tracing::warn!("{}: removing what was unpacked: {e}", dir.display());
            }
        }
    }
}
