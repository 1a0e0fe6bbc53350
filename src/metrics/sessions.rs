//! Image sessions whose members are separate operations (an image pull in a trace replay):
//! the aggregator turns a closed session whose members all ended into one `image_pull`
//! sample, from the earliest member start to the last end, and, when a member's layer was
//! unpacked (`replay --unpack`), one `image_ready` sample to the last layer applied.

use tokio::time::Instant;

use crate::fast_hash::FastHashMap;

use super::recorder::{Applied, SessionMsg};
use super::{ErrorKind, HttpStatuses, Op, Outcome, Sample, SizeClass, Timing};

/// A session with members still running, or not closed yet.
#[derive(Debug)]
struct OpenSession {
    start: Instant,
    end: Instant,
    pending: u32,
    error: Option<ErrorKind>,
    bytes: u64,
    closed: bool,
    /// The layers unpacked so far: the last one applied, the first failure, the tars'
    /// bytes.
    ready: Option<Applied>,
}

/// The sessions not finished yet, by id.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    open: FastHashMap<u64, OpenSession>,
}

/// A finished session's samples: its `image_pull`, and its `image_ready` when a layer of it
/// was unpacked.
pub(super) type Finished = (Sample, Option<Sample>);

impl Sessions {
    /// Tracks a session; returns its samples when it has just finished. One lookup of the
    /// session per message (the map holds a session per client of the trace).
    pub(super) fn handle(&mut self, msg: SessionMsg) -> Option<Finished> {
        let (id, s) = match msg {
            SessionMsg::Started { id, start } => {
                let s = self.open.entry(id).or_insert(OpenSession {
                    start,
                    end: start,
                    pending: 0,
                    error: None,
                    bytes: 0,
                    closed: false,
                    ready: None,
                });
                s.start = s.start.min(start);
                s.pending += 1;
                // A member that starts never finishes its session.
                return None;
            }
            SessionMsg::Ended {
                id,
                end,
                error,
                bytes,
                applied,
            } => {
                let s = self.open.get_mut(&id)?;
                s.pending = s.pending.saturating_sub(1);
                s.end = s.end.max(end);
                s.bytes += bytes;
                if s.error.is_none() {
                    s.error = error;
                }
                if let Some(a) = applied {
                    let r = s.ready.get_or_insert(Applied {
                        at: a.at,
                        error: None,
                        uncompressed: 0,
                    });
                    r.at = r.at.max(a.at);
                    r.error = r.error.or(a.error);
                    r.uncompressed += a.uncompressed;
                }
                (id, s)
            }
            SessionMsg::Closed { id } => {
                let s = self.open.get_mut(&id)?;
                s.closed = true;
                (id, s)
            }
        };
        if !(s.closed && s.pending == 0) {
            return None;
        }
        self.open.remove(&id).map(finished)
    }
}

/// The samples of session `s`, which has just finished.
fn finished(s: OpenSession) -> Finished {
    let sample = |op, error: Option<ErrorKind>, end, bytes| Sample {
        op,
        outcome: error.map_or(Outcome::Ok, Outcome::Error),
        size_class: SizeClass::of(bytes),
        timing: Timing {
            intended: None,
            ready: None,
            sent: s.start,
            first_byte: None,
            end,
        },
        bytes_sent: 0,
        bytes_received: bytes,
        http: HttpStatuses::NONE,
    };
    // Ready once every member's request ended and every layer was applied; failed by
    // the first failure of either.
    let ready = s.ready.map(|r| {
        let error = s.error.or(r.error);
        sample(Op::ImageReady, error, r.at.max(s.end), r.uncompressed)
    });
    (sample(Op::ImagePull, s.error, s.end, s.bytes), ready)
}
