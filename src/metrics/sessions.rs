//! Image sessions whose members are separate operations (an image pull in a trace replay):
//! the aggregator turns a closed session whose members all ended into one `image_pull`
//! sample, from the earliest member start to the last end.

use tokio::time::Instant;

use crate::fast_hash::FastHashMap;

use super::recorder::SessionMsg;
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
}

/// The sessions not finished yet, by id.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    open: FastHashMap<u64, OpenSession>,
}

impl Sessions {
    /// Tracks a session; returns its `image_pull` sample when it has just finished.
    pub(super) fn handle(&mut self, msg: SessionMsg) -> Option<Sample> {
        let id = match msg {
            SessionMsg::Started { id, start } => {
                let s = self.open.entry(id).or_insert(OpenSession {
                    start,
                    end: start,
                    pending: 0,
                    error: None,
                    bytes: 0,
                    closed: false,
                });
                s.start = s.start.min(start);
                s.pending += 1;
                id
            }
            SessionMsg::Ended {
                id,
                end,
                error,
                bytes,
            } => {
                if let Some(s) = self.open.get_mut(&id) {
                    s.pending = s.pending.saturating_sub(1);
                    s.end = s.end.max(end);
                    s.bytes += bytes;
                    if s.error.is_none() {
                        s.error = error;
                    }
                }
                id
            }
            SessionMsg::Closed { id } => {
                if let Some(s) = self.open.get_mut(&id) {
                    s.closed = true;
                }
                id
            }
        };
        let finished = self
            .open
            .get(&id)
            .is_some_and(|s| s.closed && s.pending == 0);
        if !finished {
            return None;
        }
        self.open.remove(&id).map(|s| Sample {
            op: Op::ImagePull,
            outcome: s.error.map_or(Outcome::Ok, Outcome::Error),
            size_class: SizeClass::of(s.bytes),
            timing: Timing {
                intended: None,
                ready: None,
                sent: s.start,
                first_byte: None,
                end: s.end,
            },
            bytes_sent: 0,
            bytes_received: s.bytes,
            http: HttpStatuses::NONE,
        })
    }
}
