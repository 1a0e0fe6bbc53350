//! The bounded driver of the synthetic workloads (push, pull, prewarm): a list of jobs run
//! with at most `concurrency` in flight on the calling task, stopped the way every command
//! stops.
//!
//! On shutdown nothing new starts; jobs in flight get `grace` to finish, then they are
//! dropped (their requests cancelled) and counted, as the replay executor counts its own.
//! The jobs borrow what they use (clients, plans, the error log), so they are polled here
//! rather than spawned: the replay executor ([`super::Executor::run`]) spawns each operation
//! as a task instead, because it paces operations one by one against a schedule and spreads
//! them over every worker, which a closed loop of a few images in flight does not need.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::metrics::ErrorLog;
use crate::progress::Progress;
use crate::shutdown::Shutdown;

/// How a bounded run ends on shutdown.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Jobs in flight at most (at least one).
    pub concurrency: usize,
    /// After a shutdown request, how long jobs in flight may take to finish.
    pub grace: Duration,
}

/// What the jobs of a bounded driver share: the stop, the error log and the progress line.
#[derive(Debug, Clone, Copy)]
pub struct JobEnv<'a> {
    pub shutdown: &'a Shutdown,
    pub errors: &'a ErrorLog,
    pub progress: &'a Progress,
}

/// What a bounded run did with its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Driven<L = ()> {
    /// Jobs that ran to their end.
    pub finished: u64,
    /// The jobs still in flight at the end of a stop's grace period, dropped unfinished (at
    /// most `concurrency` of them): when each started, and its label.
    pub cancelled: Vec<(Instant, L)>,
    /// Jobs never started because of the shutdown.
    pub not_started: u64,
}

impl<L> Default for Driven<L> {
    fn default() -> Self {
        Driven {
            finished: 0,
            cancelled: Vec::new(),
            not_started: 0,
        }
    }
}

/// A job in flight, when it started and its label (boxed, so the wrapper needs no pinning
/// of its own).
struct Timed<L, Fut> {
    started: Instant,
    label: L,
    job: Pin<Box<Fut>>,
}

impl<L: Unpin, Fut: Future> Future for Timed<L, Fut> {
    type Output = Fut::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Fut::Output> {
        self.job.as_mut().poll(cx)
    }
}

/// Runs `run(job)` for every job, at most `bounds.concurrency` at once, handing each result
/// to `done` as it completes. Returns when every job ended, or when a shutdown stopped the
/// run (nothing new starts; in-flight jobs get `bounds.grace`, then are dropped and
/// returned with `label(job)`, so the caller can count them where they belong).
pub async fn drive<J, L, F, Fut, R>(
    jobs: impl IntoIterator<Item = J>,
    bounds: Bounds,
    shutdown: &Shutdown,
    label: impl Fn(&J) -> L,
    mut run: F,
    mut done: impl FnMut(R),
) -> Driven<L>
where
    L: Unpin,
    F: FnMut(J) -> Fut,
    Fut: Future<Output = R>,
{
    let mut jobs = jobs.into_iter();
    let mut in_flight = FuturesUnordered::new();
    let mut report = Driven::default();
    let limit = bounds.concurrency.max(1);
    let cancelled = shutdown.token();
    loop {
        while in_flight.len() < limit && !cancelled.is_cancelled() {
            match jobs.next() {
                Some(job) => in_flight.push(Timed {
                    started: Instant::now(),
                    label: label(&job),
                    job: Box::pin(run(job)),
                }),
                None => break,
            }
        }
        if in_flight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            () = cancelled.cancelled() => break,
            Some(result) = in_flight.next() => {
                report.finished += 1;
                done(result);
            }
        }
    }
    if cancelled.is_cancelled() {
        report.not_started = jobs.count() as u64;
        let deadline = Instant::now() + bounds.grace;
        while !in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, in_flight.next()).await {
                Ok(Some(result)) => {
                    report.finished += 1;
                    done(result);
                }
                Ok(None) => break,
                Err(_) => {
                    report.cancelled = std::mem::take(&mut in_flight)
                        .into_iter()
                        .map(|t| (t.started, t.label))
                        .collect();
                    break;
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    //! On a paused clock: exact grace periods without waiting for them.

    use std::cell::Cell;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn never_more_than_the_bound_in_flight() {
        let running = Cell::new(0usize);
        let most = Cell::new(0usize);
        let mut results = Vec::new();
        let driven = drive(
            0..20u64,
            Bounds {
                concurrency: 3,
                grace: Duration::from_secs(1),
            },
            &Shutdown::new(),
            |_| (),
            |i| {
                let (running, most) = (&running, &most);
                async move {
                    running.set(running.get() + 1);
                    most.set(most.get().max(running.get()));
                    tokio::time::sleep(Duration::from_millis(10 + i % 4)).await;
                    running.set(running.get() - 1);
                    i
                }
            },
            |i| results.push(i),
        )
        .await;
        assert_eq!(most.get(), 3);
        assert_eq!(driven.finished, 20);
        results.sort_unstable();
        assert_eq!(results, (0..20).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_starts_nothing_new_and_drops_what_outlives_the_grace() {
        let shutdown = Shutdown::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.cancel();
        });
        let start = Instant::now();
        let mut finished = 0;
        // Jobs 0 and 1 end within the grace period; 2 and 3 never end on their own.
        let mut driven = drive(
            0..10u64,
            Bounds {
                concurrency: 4,
                grace: Duration::from_secs(2),
            },
            &shutdown,
            |&i| i,
            |i| async move {
                let wait = if i < 2 { 1 } else { 3600 };
                tokio::time::sleep(Duration::from_secs(wait)).await;
            },
            |()| finished += 1,
        )
        .await;
        driven.cancelled.sort_unstable();
        assert_eq!(
            driven,
            Driven {
                finished: 2,
                cancelled: vec![(start, 2), (start, 3)],
                not_started: 6
            }
        );
        assert_eq!(finished, 2);
        assert_eq!(start.elapsed(), Duration::from_millis(2050));
    }
}
