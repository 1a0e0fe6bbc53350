//! Starting the aggregator: its thread, which drains the channel in batches, the clock that
//! ticks its intervals, and the handle that stops it.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::aggregator::Aggregator;
use super::interval::{AggregatorConfig, IntervalSink};
use super::live::LiveMetrics;
use super::recorder::{Msg, Recorder};
use super::split::HeaderSplit;
use crate::progress::Progress;

/// The running aggregator and the way to stop it.
#[derive(Debug)]
pub struct AggregatorHandle {
    tx: mpsc::Sender<Msg>,
    done: tokio::sync::oneshot::Receiver<Aggregator>,
    ticker: tokio::task::JoinHandle<()>,
    /// The aggregator's thread, woken from its pause by the stop.
    thread: Option<std::thread::Thread>,
}

impl AggregatorHandle {
    /// Stops the aggregator after every sample already sent, flushes all intervals to the
    /// sink, and returns it.
    pub async fn finish(self) -> Aggregator {
        self.ticker.abort();
        let _ = self.tx.send(Msg::Stop).await;
        // Not a pause's length later: the run's end waits for the last flush.
        if let Some(thread) = &self.thread {
            thread.unpark();
        }
        // If the thread died (its panic was already reported), there is nothing to return.
        self.done.await.unwrap_or_default()
    }
}

/// The longest the aggregator thread sleeps after draining messages under load. Each wake-up
/// finds its tables cold (the registry and the workers ran meanwhile), so a longer pause at
/// a modest rate costs less per message: at 900 GETs a second on two cores shared with
/// docker-registry, the thread spent 7.0 µs per GET with 20 ms, 4.4 with 100 and 3.9 with
/// 250 (docs/benchmarks.md, step 16). A message's interval is its own whatever the pause
/// (the clock's ticks come through the same channel, in order); what waits is the live
/// figures and the progress line, a tenth of a second at most.
const DRAIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Messages taken off the channel at a time while draining.
const DRAIN_BATCH: usize = 256;

/// The shortest.
const DRAIN_PAUSE_MIN: std::time::Duration = std::time::Duration::from_millis(1);

/// How many messages the aggregator lets wait while it sleeps: a quarter of the channel.
const DRAIN_TARGET: usize = CHANNEL_CAPACITY / 4;

/// The pause after draining `drained` messages that arrived during a pause of `last`: the
/// time [`DRAIN_TARGET`] messages take to arrive at that rate, within
/// [`DRAIN_PAUSE_MIN`]..=[`DRAIN_PAUSE`].
fn drain_pause(drained: usize, last: std::time::Duration) -> std::time::Duration {
    let per_message = last / u32::try_from(drained.max(1)).unwrap_or(u32::MAX);
    (per_message * DRAIN_TARGET as u32).clamp(DRAIN_PAUSE_MIN, DRAIN_PAUSE)
}

/// Capacity of the sample channel: far more than any run keeps in flight.
const CHANNEL_CAPACITY: usize = 16 * 1024;

/// How an aggregator is started: its intervals, and what else it feeds. One builder for
/// every run; a test takes the defaults (one-second intervals from now, nothing fed).
#[derive(Default)]
pub struct AggregatorBuilder {
    config: AggregatorConfig,
    sink: Option<Box<dyn IntervalSink>>,
    live: Option<Arc<LiveMetrics>>,
    progress: Option<Arc<Progress>>,
    split: Option<Arc<HeaderSplit>>,
}

impl std::fmt::Debug for AggregatorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregatorBuilder")
            .field("config", &self.config)
            .field("sink", &self.sink.is_some())
            .field("split", &self.split)
            .finish_non_exhaustive()
    }
}

impl AggregatorBuilder {
    /// How time is cut.
    pub fn config(mut self, config: AggregatorConfig) -> Self {
        self.config = config;
        self
    }

    /// Finished intervals (and requests, if it records them) go to `sink`.
    pub fn sink(mut self, sink: Option<Box<dyn IntervalSink>>) -> Self {
        self.sink = sink;
        self
    }

    /// Every sample also feeds `live` (the `--metrics-listen` endpoint).
    pub fn live(mut self, live: Option<Arc<LiveMetrics>>) -> Self {
        self.live = live;
        self
    }

    /// The progress line takes its latency and lag from the same samples, so it shows what
    /// the metrics and the results hold.
    pub(crate) fn progress(mut self, progress: Option<Arc<Progress>>) -> Self {
        self.progress = progress;
        self
    }

    /// `--split-by-header`: the samples are also broken down by that header's value.
    pub fn split(mut self, split: Option<Arc<HeaderSplit>>) -> Self {
        self.split = split;
        self
    }

    /// Starts the aggregator on its own thread, and its interval clock.
    pub fn spawn(self) -> (Recorder, AggregatorHandle) {
        let AggregatorBuilder {
            config,
            sink,
            live,
            progress,
            split,
        } = self;
        let recorder_split = split.clone();
        let (tx, mut rx) = mpsc::channel::<Msg>(CHANNEL_CAPACITY);
        let (done_tx, done) = tokio::sync::oneshot::channel();
        // A plain thread, not `spawn_blocking`: it lives for the whole run, and under a paused
        // test clock a blocking task would stop the clock from advancing.
        let spawned = std::thread::Builder::new()
            .name("creb-aggregator".into())
            .spawn(move || {
                let mut aggregator = Aggregator::new(config);
                aggregator.feed(live, progress, split);
                let mut sink = sink;
                run(&mut aggregator, &mut rx, &mut sink);
                let _ = done_tx.send(aggregator);
            });
        let thread = match spawned {
            Ok(handle) => Some(handle.thread().clone()),
            Err(e) => {
                tracing::error!("cannot start the aggregator thread: {e}");
                None
            }
        };
        let tick_tx = tx.clone();
        let ticker = tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(config.anchor + config.interval, config.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticks.tick().await;
                if tick_tx.send(Msg::Tick(Instant::now())).await.is_err() {
                    break;
                }
            }
        });
        (
            Recorder::new(tx.clone(), recorder_split),
            AggregatorHandle {
                tx,
                done,
                ticker,
                thread,
            },
        )
    }
}

/// The aggregator's thread until its channel closes or it is told to stop: every message
/// handled, and `sink` written.
fn run(
    aggregator: &mut Aggregator,
    rx: &mut mpsc::Receiver<Msg>,
    sink: &mut Option<Box<dyn IntervalSink>>,
) {
    // Under load, drain what arrived and sleep: parked on the channel, the thread
    // would be woken (a futex round trip) for every message. It sleeps up to 100 ms,
    // less when a quarter of the channel would fill sooner at the rate of the last
    // pause (below 41k messages a second it wakes 10 times a second; an operation
    // sends a few), and the stop wakes it at once. Idle, it parks until the next
    // message. Timing is taken where samples are made, so this changes only when they
    // are counted, never what is counted; intervals are flushed a tick after they end,
    // so a late count still lands in its own interval.
    //
    // What arrived is taken in batches: the channel gives its senders their room back once
    // per batch (a lock of its semaphore), not once per message.
    let mut pause = DRAIN_PAUSE;
    let mut batch = Vec::with_capacity(DRAIN_BATCH);
    // Polled without a runtime: an empty channel is `Pending`, and nothing waits on the
    // waker (the thread sleeps, or parks in `blocking_recv` below, which sets its own).
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    'run: loop {
        let mut drained = 0usize;
        loop {
            match rx.poll_recv_many(&mut cx, &mut batch, DRAIN_BATCH) {
                std::task::Poll::Pending => break,
                std::task::Poll::Ready(0) => break 'run,
                std::task::Poll::Ready(n) => drained += n,
            }
            for msg in batch.drain(..) {
                if !aggregator.handle(msg, sink) {
                    break 'run;
                }
            }
        }
        if drained > 0 {
            pause = drain_pause(drained, pause);
            // Woken early by the stop ([`AggregatorHandle::finish`]), or spuriously: then
            // it drains sooner, which changes nothing but the batch.
            std::thread::park_timeout(pause);
            continue;
        }
        pause = DRAIN_PAUSE;
        match rx.blocking_recv() {
            Some(msg) => {
                if !aggregator.handle(msg, sink) {
                    break;
                }
            }
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_pause_lets_a_quarter_of_the_channel_fill() {
        let ms = std::time::Duration::from_millis;
        // 250k messages a second: 4,096 arrive in 16.4 ms.
        let p = drain_pause(5_000, ms(20));
        assert!(p > ms(16) && p < ms(17), "{p:?}");
        // 10k a second: the longest pause, 100 ms (1,000 messages), not 410.
        assert_eq!(drain_pause(1_000, ms(100)), ms(100));
        // 1M a second, from a full channel: 5 ms, then 4.1 ms (4,096 at 1M a second).
        let p = drain_pause(16_384, ms(20));
        assert!(p > ms(4) && p <= ms(5), "{p:?}");
        let p = drain_pause(4_000, ms(4));
        assert!(p > ms(4) && p < ms(5), "{p:?}");
        // Slow: the longest pause; very fast: the shortest.
        assert_eq!(drain_pause(10, ms(20)), DRAIN_PAUSE);
        assert_eq!(drain_pause(16_384, ms(1)), DRAIN_PAUSE_MIN);
    }
}
