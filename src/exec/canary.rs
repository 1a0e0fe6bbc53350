//! Is the generator itself the bottleneck? Two witnesses, as jHiccup and wrk2 do it:
//!
//! - a canary task that asks to sleep [`TICK`] and records how late it wakes: a busy or
//!   stalled runtime shows as late wake-ups, and so would every scheduled request;
//! - the process's CPU time against the wall time and the cores it may use.
//!
//! Timer granularity is ~1 ms, so the canary never claims sub-millisecond accuracy. The tick
//! is 10 ms, not 1: a stall shows as one late wake-up either way, and on a runtime that is
//! otherwise waiting for the registry each tick is a wake-up of its own (at 1 ms, about a
//! tenth of creb-rs's CPU per request at the registry's pace in `perf stat`).

use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::new_histogram;

/// How long the canary asks to sleep each time.
pub const TICK: Duration = Duration::from_millis(10);

/// What the canary saw.
#[derive(Debug, Clone)]
pub struct CanaryReport {
    /// Lateness of [`TICK`] sleeps, µs.
    pub wake_lateness: Histogram<u64>,
}

/// Runs from `from` until `stop` is cancelled. `from` is where the measured part begins:
/// a stall in a warm-up that is left out of every number (a step's start, its connections
/// and its planner's first burst) says nothing of the timings that are kept.
pub fn spawn_canary(
    stop: CancellationToken,
    from: Instant,
) -> tokio::task::JoinHandle<CanaryReport> {
    tokio::spawn(async move {
        let mut hist = new_histogram();
        tokio::select! {
            () = stop.cancelled() => return CanaryReport { wake_lateness: hist },
            () = tokio::time::sleep_until(from) => {}
        }
        loop {
            let before = Instant::now();
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(TICK) => {}
            }
            // A worker's wait before it parks to gather answers (stress mode) is not a
            // stall: what the canary is late by beyond it is.
            let late = Instant::now()
                .saturating_duration_since(before + TICK)
                .saturating_sub(crate::net::gather::window())
                .as_micros();
            hist.saturating_record(u64::try_from(late).unwrap_or(u64::MAX));
        }
        CanaryReport {
            wake_lateness: hist,
        }
    })
}

/// CPU time (user + system) the process has used, from `/proc/self/stat` (Linux, in clock
/// ticks of 1/100 s). `None` where that is not available.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Cores the process may run on.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn canary_measures_wake_ups() {
        let stop = CancellationToken::new();
        let canary = spawn_canary(stop.clone(), Instant::now());
        // Thirty ticks for five samples: a loaded test machine may delay some wake-ups.
        tokio::time::sleep(TICK * 30).await;
        stop.cancel();
        let report = canary.await.unwrap();
        assert!(report.wake_lateness.len() >= 5);
    }

    #[tokio::test(start_paused = true)]
    async fn the_canary_watches_only_from_where_the_measured_part_begins() {
        // From 20 ticks on, stopped after 30 and a half: the ten ticks after the start.
        let stop = CancellationToken::new();
        let canary = spawn_canary(stop.clone(), Instant::now() + TICK * 20);
        tokio::time::sleep(TICK * 30 + TICK / 2).await;
        stop.cancel();
        assert_eq!(canary.await.unwrap().wake_lateness.len(), 10);
        // Stopped before it: nothing seen.
        let stop = CancellationToken::new();
        let canary = spawn_canary(stop.clone(), Instant::now() + TICK * 20);
        tokio::time::sleep(TICK * 5).await;
        stop.cancel();
        assert_eq!(canary.await.unwrap().wake_lateness.len(), 0);
    }

    #[test]
    fn cpu_time_is_readable_on_linux() {
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        if cfg!(target_os = "linux") {
            assert!(process_cpu_time().unwrap() >= Duration::from_millis(10));
        }
    }
}
