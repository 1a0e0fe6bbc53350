//! Completion of uploads that a later manifest PUT may wait for.
//!
//! Uploads register when dispatched and complete when done; a manifest PUT waits for the
//! ones of its push. Completed entries are kept for a bounded number of uploads: an entry
//! that is gone was completed long ago (or never dispatched, which the PUT's own answer will
//! show), so waiting on it returns at once. Only uploads take the lock, never the hot path of
//! reads.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Completed entries kept for late waiters.
const KEEP_COMPLETED: usize = 65_536;

#[derive(Debug)]
struct Entry {
    done: Option<(bool, Instant)>,
    notify: Arc<Notify>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<u64, Entry>,
    completed: VecDeque<u64>,
}

#[derive(Debug, Default)]
pub struct Deps {
    state: Mutex<State>,
}

enum Look {
    Gone,
    Done(bool, Instant),
    Pending(Arc<Notify>),
}

impl Deps {
    pub fn register(&self, seq: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.entries.insert(
                seq,
                Entry {
                    done: None,
                    notify: Arc::new(Notify::new()),
                },
            );
        }
    }

    /// Marks `seq` done (`ok`, started at `start`) and wakes its waiters.
    pub fn complete(&self, seq: u64, ok: bool, start: Instant) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        if let Some(e) = s.entries.get_mut(&seq) {
            e.done = Some((ok, start));
            e.notify.notify_waiters();
            s.completed.push_back(seq);
        }
        while s.completed.len() > KEEP_COMPLETED {
            if let Some(old) = s.completed.pop_front() {
                s.entries.remove(&old);
            }
        }
    }

    fn look(&self, seq: u64) -> Look {
        let Ok(s) = self.state.lock() else {
            return Look::Gone;
        };
        match s.entries.get(&seq) {
            None => Look::Gone,
            Some(Entry {
                done: Some((ok, start)),
                ..
            }) => Look::Done(*ok, *start),
            Some(e) => Look::Pending(Arc::clone(&e.notify)),
        }
    }

    /// Waits for every upload in `seqs`; returns whether all succeeded and the earliest
    /// start among them.
    pub async fn wait_all(&self, seqs: &[u64]) -> (bool, Option<Instant>) {
        let mut all_ok = true;
        let mut earliest: Option<Instant> = None;
        for &seq in seqs {
            loop {
                let notify = match self.look(seq) {
                    Look::Gone => break,
                    Look::Done(ok, start) => {
                        all_ok &= ok;
                        earliest = Some(earliest.map_or(start, |e: Instant| e.min(start)));
                        break;
                    }
                    Look::Pending(n) => n,
                };
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Completed between the look and the registration?
                if let Look::Done(..) | Look::Gone = self.look(seq) {
                    continue;
                }
                notified.await;
            }
        }
        (all_ok, earliest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waits_for_pending_and_passes_gone() {
        let deps = Arc::new(Deps::default());
        deps.register(1);
        deps.register(2);
        let t0 = Instant::now();
        deps.complete(1, true, t0);
        let d = Arc::clone(&deps);
        let waiter = tokio::spawn(async move { d.wait_all(&[1, 2, 99]).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "2 is still pending");
        deps.complete(2, false, t0 + Duration::from_millis(5));
        let (ok, earliest) = waiter.await.unwrap();
        assert!(!ok);
        assert_eq!(earliest, Some(t0));
    }
}
