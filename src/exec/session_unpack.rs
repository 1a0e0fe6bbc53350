//! `replay --unpack`: the layers a trace's image pulls read, unpacked as a runtime unpacks
//! from its content store: a layer once its read ended and was verified, the layers of one
//! pull in the order the pull read them, on a pool sized to the cores. The bytes unpacked
//! are the layer's content generated again, which the read just proved the body equal to
//! (what a runtime reads back from its content store), so a read's latency never holds any
//! unpacking: that time is `layer_unpack`'s and the session's `image_ready`'s.
//!
//! Bounded: at most [`BACKLOG_PER_WORKER`] layers per worker wait to be unpacked. A read
//! that ends when they are all taken keeps its in-flight slot until one is unpacked (the
//! event `unpack_behind`): in stress mode the load slows down, in delay mode the schedule
//! lag and the in-flight cap's warnings show it; nothing is buffered without bound.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::unpack::{
    image_dir, Blocking, ChunkReader, Pool, UnpackWork, Written, BACKLOG_PER_WORKER,
};
use crate::content::{ContentSpec, Form};
use crate::digest::{Digest, Sha256Sum};
use crate::fast_hash::FastHashMap;
use crate::metrics::{Applied, ErrorKind, ErrorLog, Event, Op, Outcome, Recorder, Sample};
use crate::oci::Repository;
use crate::unpack::{LayerCompression, Target};

/// What every layer read of a replay with `--unpack` shares.
#[derive(Debug)]
pub(super) struct Unpacking {
    work: UnpackWork,
    pool: Pool,
    /// Layers read and not yet unpacked.
    backlog: Arc<Semaphore>,
}

impl Unpacking {
    pub(super) fn new(work: UnpackWork) -> Unpacking {
        let pool = Pool::new(&work);
        let backlog = Arc::new(Semaphore::new(work.workers.max(1) * BACKLOG_PER_WORKER));
        Unpacking {
            work,
            pool,
            backlog,
        }
    }
}

/// What the layers of one pull share: where they are applied (`--unpack-dir`), removed
/// when the last of them is done with it (unless `--keep-unpacked`).
struct Image {
    /// The directory's, or why it could not be made.
    target: Result<Option<Arc<Mutex<Target>>>, String>,
    _written: Written,
}

/// The order of one pull's layers: the turn the next layer waits for.
struct Chain {
    turn: oneshot::Receiver<()>,
    image: Arc<Image>,
}

/// The pulls whose layers are being unpacked, kept by the dispatcher, which starts
/// operations in plan order: a layer's place in its pull is the order the pull read it.
#[derive(Default)]
pub(super) struct Chains {
    open: FastHashMap<u64, Chain>,
}

/// One layer's place in its pull.
pub(super) struct LayerSlot {
    /// Sent (or dropped) when the layer before it is done.
    turn: oneshot::Receiver<()>,
    /// Dropped when this one is done.
    _done: oneshot::Sender<()>,
    image: Arc<Image>,
}

impl Chains {
    /// The next layer of pull `id` (of `repo`), which starts its chain if it is its first.
    pub(super) fn slot(&mut self, id: u64, repo: &Repository, u: &Unpacking) -> LayerSlot {
        let chain = self.open.entry(id).or_insert_with(|| {
            let (first, turn) = oneshot::channel();
            let _ = first.send(());
            let dir = (u.work.dir.as_ref())
                .map(|root| image_dir(root, &repo.to_string(), u.pool.next_image()));
            let target = dir
                .as_deref()
                .map(Target::new)
                .transpose()
                .map(|t| t.map(|t| Arc::new(Mutex::new(t))))
                .map_err(|e| {
                    let at = dir.as_deref().unwrap_or(std::path::Path::new(""));
                    format!("--unpack-dir: {}: {e}", at.display())
                });
            let written = Written {
                dir: dir.filter(|_| !u.work.keep),
            };
            Chain {
                turn,
                image: Arc::new(Image {
                    target,
                    _written: written,
                }),
            }
        });
        let (done, next) = oneshot::channel();
        LayerSlot {
            turn: std::mem::replace(&mut chain.turn, next),
            _done: done,
            image: Arc::clone(&chain.image),
        }
    }

    /// No further layer of pull `id` will come.
    pub(super) fn close(&mut self, id: u64) {
        self.open.remove(&id);
    }
}

/// A layer read that ended: what to unpack and what its read came to.
pub(super) struct ReadLayer<'a> {
    pub content: &'a ContentSpec,
    pub diff_id: Option<Sha256Sum>,
    /// `repo@digest`, for messages.
    pub what: String,
    /// The read's failure, if it failed.
    pub failed: Option<ErrorKind>,
    pub end: Instant,
}

/// Tells the blocking thread reading a layer to stop when its task is dropped (a stop's
/// grace ran out).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Unpacks a layer whose read ended, in its turn: gives the read's in-flight `slot` back
/// once the layer has a place in the backlog, records its `layer_unpack`, and returns what
/// its pull session hears.
#[allow(clippy::too_many_lines)]
pub(super) async fn apply(
    u: &Unpacking,
    layer: LayerSlot,
    read: ReadLayer<'_>,
    slot: Option<OwnedSemaphorePermit>,
    recorder: &Recorder,
    errors: &ErrorLog,
) -> Applied {
    if let Some(kind) = read.failed {
        // Nothing to unpack: the pull could not be ready.
        return Applied {
            at: read.end,
            error: Some(kind),
            uncompressed: 0,
        };
    }
    let waiting = match Arc::clone(&u.backlog).try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            recorder.event(Event::UnpackBehind).await;
            let Ok(p) = Arc::clone(&u.backlog).acquire_owned().await else {
                return failed(read.end, ErrorKind::Cancelled);
            };
            p
        }
    };
    drop(slot);
    let _ = layer.turn.await;
    let target = match &layer.image.target {
        Ok(t) => t.clone(),
        Err(message) => {
            // The layer could not be applied: its unpack failed at once.
            errors.note(format!("{}: {message}", read.what));
            let sample = Sample::session(
                Op::LayerUnpack,
                Outcome::Error(ErrorKind::Other),
                Instant::now(),
                0,
                0,
            );
            let at = sample.timing.end;
            recorder.record(sample).await;
            return failed(at, ErrorKind::Other);
        }
    };
    let compression = match read.content.form() {
        Form::Layer(form) => Some(LayerCompression::from(form.compression)),
        Form::Raw => None,
    };
    let job = Blocking {
        compression,
        size: read.content.size(),
        diff_id: read.diff_id.map(|d| Digest::from_sha256(d.0).to_string()),
        target,
        limits: u.work.limits,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(Arc::clone(&stop));
    // Generated again chunk by chunk, until the task is dropped.
    let mut generated = read.content.reader(0..read.content.size());
    let chunks = std::iter::from_fn(move || {
        if stop.load(Ordering::Relaxed) {
            return Some(Err(std::io::Error::other("stopped")));
        }
        generated.next().map(Ok)
    });
    let body = ChunkReader {
        chunks,
        current: Bytes::new(),
    };
    let ran = job.run(&u.pool, body).await;
    drop(waiting);
    let Some((start, applied)) = ran else {
        return failed(Instant::now(), ErrorKind::Cancelled);
    };
    let (outcome, uncompressed) = match applied {
        Ok(Ok(unpacked)) => (Outcome::Ok, unpacked.uncompressed),
        Ok(Err(e)) => {
            errors.note(format!("{}: unpack: {e}", read.what));
            (Outcome::Error(e.kind()), 0)
        }
        Err(e) => {
            errors.note(format!("{}: unpack: {e}", read.what));
            (Outcome::Error(ErrorKind::Other), 0)
        }
    };
    let sample = Sample::session(Op::LayerUnpack, outcome, start, 0, uncompressed);
    let at = sample.timing.end;
    recorder.record(sample).await;
    Applied {
        at,
        error: match outcome {
            Outcome::Ok => None,
            Outcome::Error(kind) => Some(kind),
        },
        uncompressed,
    }
}

fn failed(at: Instant, kind: ErrorKind) -> Applied {
    Applied {
        at,
        error: Some(kind),
        uncompressed: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unpacking() -> Unpacking {
        Unpacking::new(UnpackWork {
            dir: None,
            keep: false,
            limits: crate::unpack::Limits::default(),
            workers: 1,
        })
    }

    /// A pull's layers take turns in the order the dispatcher met them; another pull's first
    /// layer waits for nothing; a closed pull's chain is gone.
    #[test]
    fn layers_of_a_pull_take_turns_in_plan_order() {
        use tokio::sync::oneshot::error::TryRecvError;
        let u = unpacking();
        let repo: Repository = "a/b".parse().unwrap();
        let mut chains = Chains::default();
        let mut first = chains.slot(1, &repo, &u);
        let mut second = chains.slot(1, &repo, &u);
        let mut other = chains.slot(2, &repo, &u);
        assert_eq!(first.turn.try_recv(), Ok(()));
        assert_eq!(other.turn.try_recv(), Ok(()));
        assert_eq!(second.turn.try_recv(), Err(TryRecvError::Empty));
        drop(first);
        assert_eq!(second.turn.try_recv(), Err(TryRecvError::Closed));
        chains.close(1);
        chains.close(2);
        assert!(chains.open.is_empty());
        let mut again = chains.slot(1, &repo, &u);
        assert_eq!(again.turn.try_recv(), Ok(()));
    }
}
