//! The deadlines around one exchange, enforced here rather than by the HTTP libraries:
//! a streamed request body must keep moving, and the response headers must come within
//! `request_timeout` of the body's end.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::config::TransportConfig;
use super::transport::{deadline_message, TransportError};
use crate::content::ContentReader;
use crate::metrics::ErrorKind;

/// Progress of a streamed request body, shared between the body and the deadline watch.
#[derive(Debug)]
pub(crate) struct Progress {
    base: Instant,
    /// Nanoseconds after `base` of the last chunk handed to the connection.
    last_ns: AtomicU64,
    /// Nanoseconds after `base` at which the body was complete; 0 while it is not.
    done_ns: AtomicU64,
}

impl Progress {
    /// Progress of a request sent now; `streamed` bodies report their chunks, any other
    /// body counts as sent at once.
    pub(crate) fn start(streamed: bool) -> Self {
        Progress {
            base: Instant::now(),
            last_ns: AtomicU64::new(1),
            done_ns: AtomicU64::new(if streamed { 0 } else { 1 }),
        }
    }

    fn stamp(&self) -> u64 {
        // At least 1 so that 0 keeps meaning "not done".
        (Instant::now().duration_since(self.base).as_nanos() as u64).max(1)
    }

    /// When the whole exchange must be over (`--request-deadline`): body read included.
    pub(crate) fn end_by(&self, config: &TransportConfig) -> Instant {
        self.base + config.request_deadline
    }

    /// The instant the send now waits for.
    pub(crate) fn deadline_at(&self, config: &TransportConfig) -> Instant {
        self.deadline(config).0
    }

    fn deadline(&self, config: &TransportConfig) -> (Instant, Wait) {
        let done = self.done_ns.load(Ordering::Relaxed);
        let (at, wait) = if done != 0 {
            let at = self.base + Duration::from_nanos(done) + config.request_timeout;
            (at, Wait::Response)
        } else {
            let last = self.last_ns.load(Ordering::Relaxed);
            let at = self.base + Duration::from_nanos(last) + config.body_idle_timeout;
            (at, Wait::Body)
        };
        let end = self.end_by(config);
        if end < at {
            (end, Wait::Deadline)
        } else {
            (at, wait)
        }
    }
}

/// Which deadline a send waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The request body to be taken.
    Body,
    /// The answer's headers after the body.
    Response,
    /// The end of the whole exchange.
    Deadline,
}

/// Generated content as body chunks, stamping `progress` as each one is handed over.
pub(crate) struct ProgressReader {
    reader: std::iter::Peekable<ContentReader>,
    progress: Arc<Progress>,
}

impl ProgressReader {
    pub(crate) fn new(reader: ContentReader, progress: Arc<Progress>) -> Self {
        ProgressReader {
            reader: reader.peekable(),
            progress,
        }
    }
}

impl std::fmt::Debug for ProgressReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReader").finish_non_exhaustive()
    }
}

impl Iterator for ProgressReader {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let next = self.reader.next();
        let now = self.progress.stamp();
        self.progress.last_ns.store(now, Ordering::Relaxed);
        if self.reader.peek().is_none() {
            self.progress.done_ns.store(now, Ordering::Relaxed);
        }
        next
    }
}

/// Awaits `send` (request out, response headers in) under the run's deadlines: the body
/// must keep moving while it is sent, the headers must come within `request_timeout` of the
/// body's end, and all of it within `request_deadline` of the start. `send` is pinned by
/// the caller: moved in, it would sit in this future's state twice (as the argument and
/// pinned), and the request's whole exchange with it.
pub(crate) async fn within_deadlines<T, F>(
    send: Pin<&mut F>,
    progress: &Progress,
    config: &TransportConfig,
) -> Result<T, TransportError>
where
    F: Future<Output = Result<T, TransportError>>,
{
    let timer = std::pin::pin!(tokio::time::sleep_until(progress.deadline_at(config)));
    within_deadlines_on(send, progress, config, timer).await
}

/// [`within_deadlines`] on a timer of the caller's: a connection's own, reset for each of
/// its requests. A later deadline only moves the timer's registered instant (one atomic
/// operation), where a timer made per request is registered with the runtime's timer
/// wheel and taken out of it again, under its lock, every time.
pub(crate) async fn within_deadlines_on<T, F>(
    mut send: Pin<&mut F>,
    progress: &Progress,
    config: &TransportConfig,
    mut timer: Pin<&mut tokio::time::Sleep>,
) -> Result<T, TransportError>
where
    F: Future<Output = Result<T, TransportError>>,
{
    loop {
        let (deadline, _) = progress.deadline(config);
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        tokio::select! {
            // The answer first: no coin tossed per poll, and one that came counts.
            biased;
            r = &mut send => return r,
            () = &mut timer => {
                // Progress may have moved the deadline while we slept.
                let (deadline, wait) = progress.deadline(config);
                if Instant::now() >= deadline {
                    let what = match wait {
                        Wait::Response => format!("no response within {}", humantime::format_duration(config.request_timeout)),
                        Wait::Body => format!("request body not consumed for {}", humantime::format_duration(config.body_idle_timeout)),
                        Wait::Deadline => deadline_message(config.request_deadline),
                    };
                    return Err(TransportError::new(ErrorKind::Timeout, what));
                }
            }
        }
    }
}
