//! Completion of uploads (and mounts) that a later manifest PUT may wait for.
//!
//! Uploads register when dispatched and complete when done; a manifest PUT waits for the
//! ones of its push. Completed entries are kept for a bounded number of uploads: an entry
//! that is gone was completed long ago (or never dispatched, which the PUT's own answer will
//! show), so waiting on it returns at once. Only uploads take the lock, never the hot path of
//! reads.
//!
//! Memory is flat in trace length: an entry is a few dozen bytes (no allocation of its
//! own: one [`Notify`] serves every waiter, and a waiter woken for another upload looks
//! again), and at most [`KEEP_COMPLETED`] completed entries stay. A manifest PUT is planned
//! right after the uploads of its push, so its uploads are among the last few thousand.

use crate::fast_hash::FastHashMap;
use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Completed entries kept for late waiters.
pub const KEEP_COMPLETED: usize = 4096;

#[derive(Debug, Default)]
struct State {
    /// Upload → `None` while in flight, then (succeeded, start).
    entries: FastHashMap<u64, Option<(bool, Instant)>>,
    /// Completed uploads, oldest first (the eviction order).
    completed: VecDeque<u64>,
}

#[derive(Debug, Default)]
pub struct Deps {
    state: Mutex<State>,
    /// Woken on every completion.
    completions: Notify,
}

enum Look {
    Gone,
    Done(bool, Instant),
    Pending,
}

impl Deps {
    pub fn register(&self, seq: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.entries.insert(seq, None);
        }
    }

    /// Marks `seq` done (`ok`, started at `start`) and wakes the waiters.
    pub fn complete(&self, seq: u64, ok: bool, start: Instant) {
        {
            let Ok(mut s) = self.state.lock() else {
                return;
            };
            let Some(e) = s.entries.get_mut(&seq) else {
                return;
            };
            *e = Some((ok, start));
            s.completed.push_back(seq);
            while s.completed.len() > KEEP_COMPLETED {
                if let Some(old) = s.completed.pop_front() {
                    s.entries.remove(&old);
                }
            }
        }
        self.completions.notify_waiters();
    }

    fn look(&self, seq: u64) -> Look {
        let Ok(s) = self.state.lock() else {
            return Look::Gone;
        };
        match s.entries.get(&seq) {
            None => Look::Gone,
            Some(Some((ok, start))) => Look::Done(*ok, *start),
            Some(None) => Look::Pending,
        }
    }

    /// Entries held (in flight and completed).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.state.lock().map_or(0, |s| s.entries.len())
    }

    /// Waits for every upload in `seqs`; returns whether all succeeded and the earliest
    /// start among them.
    pub async fn wait_all(&self, seqs: &[u64]) -> (bool, Option<Instant>) {
        let mut all_ok = true;
        let mut earliest: Option<Instant> = None;
        for &seq in seqs {
            loop {
                let notified = self.completions.notified();
                tokio::pin!(notified);
                // Registered before looking: a completion after the look still wakes us.
                notified.as_mut().enable();
                match self.look(seq) {
                    Look::Gone => break,
                    Look::Done(ok, start) => {
                        all_ok &= ok;
                        earliest = Some(earliest.map_or(start, |e: Instant| e.min(start)));
                        break;
                    }
                    Look::Pending => notified.await,
                }
            }
        }
        (all_ok, earliest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
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

    #[tokio::test]
    async fn completed_entries_are_bounded() {
        let deps = Deps::default();
        let t0 = Instant::now();
        let n = 3 * KEEP_COMPLETED as u64;
        for seq in 0..n {
            deps.register(seq);
            deps.complete(seq, seq % 2 == 0, t0);
        }
        assert_eq!(deps.held(), KEEP_COMPLETED);
        // The newest are still known (a failure stays a failure); the oldest are gone.
        assert_eq!(deps.wait_all(&[n - 1]).await, (false, Some(t0)));
        assert_eq!(deps.wait_all(&[n - 2]).await, (true, Some(t0)));
        assert_eq!(deps.wait_all(&[0]).await, (true, None));
        // In-flight entries are never evicted.
        deps.register(n);
        for seq in n + 1..n + 1 + KEEP_COMPLETED as u64 * 2 {
            deps.register(seq);
            deps.complete(seq, true, t0);
        }
        let deps = Arc::new(deps);
        let d = Arc::clone(&deps);
        let waiter = tokio::spawn(async move { d.wait_all(&[n]).await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        deps.complete(n, true, t0);
        assert_eq!(waiter.await.unwrap(), (true, Some(t0)));
    }
}
