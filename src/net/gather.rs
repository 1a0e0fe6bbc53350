//! Answers gathered per wake-up in stress mode with `--gather` (off by default: the clumps
//! of requests it sends change what a registry does, docs/measurement.md): a runtime
//! worker with nothing ready waits a short window before it parks, so that the wake-up
//! that follows finds several answers ready and runs the code and state of each layer once
//! for all of them, while they are in cache (docs/benchmarks.md, "The hot path", step 25:
//! a quarter of the CPU per GET at a slow registry's pace; none when creb-rs is the limit,
//! step 37).
//!
//! Two rules keep creb-rs's own numbers what they were (what the registry does differs,
//! which is why gathering is not the default):
//! - an answer is timed from when the kernel received it (`net::arrival`), so the
//!   window is in no latency; the first answer timed without a stamp (a TLS or reqwest
//!   transport) turns gathering off for the rest of the run;
//! - the window is think time added to each cycle of the closed loop, so it is held to
//!   [`SHARE`] of the mean service time of the answers so far, at most [`MAX_WINDOW`], and
//!   none below [`MIN_WINDOW`] (where a sleep costs more than it saves).
//!   The arithmetic mean is the one the rate follows: each worker takes the plan's next
//!   operation, whatever its kind, so a closed loop of N workers runs at N over the mean
//!   cycle, the window's wait included.
//!
//! A worker that has just read part of a long body parks without waiting: a body in
//! flight is not an answer to gather, and the wait would stall its transfer. Delay mode
//! never gathers: its schedule and its lag come first.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The window's share of the mean service time (1/25).
pub const SHARE_DIVISOR: u64 = 25;
/// [`SHARE_DIVISOR`] as a fraction, as summary.json records it (`checks.gathered`).
pub const SHARE: f64 = 1.0 / SHARE_DIVISOR as f64;
/// The longest window.
pub const MAX_WINDOW: Duration = Duration::from_millis(10);
/// No window shorter than this: a sleep's own cost and the timer's slack are larger than
/// what it saves.
pub const MIN_WINDOW: Duration = Duration::from_micros(500);

/// How many answers the mean takes to follow a change (an exponential mean over about
/// this many).
const MEAN_OVER: u64 = 64;

/// A run allows gathering (stress mode).
static ALLOWED: AtomicBool = AtomicBool::new(false);
/// An answer was timed without a stamp: no gathering for the rest of the run.
static OFF: AtomicBool = AtomicBool::new(false);
/// The mean service time of the stamped answers so far, µs (0: none yet).
static MEAN_US: AtomicU64 = AtomicU64::new(0);
/// The window a worker waits before it parks, µs (0: none).
static WINDOW_US: AtomicU64 = AtomicU64::new(0);
/// The longest window used in the run, µs.
static WIDEST_US: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread read part of a long body since it last parked.
    static STREAMING: Cell<bool> = const { Cell::new(false) };
}

/// The runtime's hook before a worker parks (`on_thread_park`): waits the window, if any.
pub fn before_park() {
    if let Some(window) = wait_before_park() {
        std::thread::sleep(window);
    }
}

/// How long this worker waits before it parks: the window, unless it is none or the
/// worker read part of a long body since it last parked. A body in flight is not an
/// answer to gather: the socket's buffer fills within the window and holds the sender
/// back, which would take the wait off the transfer's rate (docs/benchmarks.md, "The hot
/// path", step 27).
fn wait_before_park() -> Option<Duration> {
    let streaming = STREAMING.with(|s| s.replace(false));
    let window = WINDOW_US.load(Ordering::Relaxed);
    (window > 0 && !streaming).then(|| Duration::from_micros(window))
}

/// Notes that this thread has just read part of a long body (a read of at least 16 KiB,
/// or inside a body longer than that): its next park does not wait.
pub(crate) fn streaming() {
    STREAMING.with(|s| s.set(true));
}

/// Whether this thread read part of a long body since it last parked.
#[cfg(test)]
pub(crate) fn is_streaming() -> bool {
    STREAMING.with(Cell::get)
}

/// The window now.
pub fn window() -> Duration {
    Duration::from_micros(WINDOW_US.load(Ordering::Relaxed))
}

/// Allows gathering until the guard is dropped (a stress-mode run), from no window.
pub fn allow() -> Allowed {
    MEAN_US.store(0, Ordering::Relaxed);
    WINDOW_US.store(0, Ordering::Relaxed);
    WIDEST_US.store(0, Ordering::Relaxed);
    OFF.store(false, Ordering::Relaxed);
    ALLOWED.store(true, Ordering::Relaxed);
    Allowed(())
}

/// Gathering allowed while it lives.
#[derive(Debug)]
pub struct Allowed(());

impl Allowed {
    /// What the run did: the widest window it used, and whether an answer without a stamp
    /// turned gathering off.
    pub fn used(&self) -> Used {
        Used {
            widest: Duration::from_micros(WIDEST_US.load(Ordering::Relaxed)),
            turned_off: OFF.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Allowed {
    fn drop(&mut self) {
        ALLOWED.store(false, Ordering::Relaxed);
        WINDOW_US.store(0, Ordering::Relaxed);
    }
}

/// What a run's gathering did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub widest: Duration,
    pub turned_off: bool,
}

/// An answer's service time, and whether it was timed from a stamp.
pub fn observe(service: Duration, stamped: bool) {
    if !ALLOWED.load(Ordering::Relaxed) || OFF.load(Ordering::Relaxed) {
        return;
    }
    if !stamped {
        OFF.store(true, Ordering::Relaxed);
        WINDOW_US.store(0, Ordering::Relaxed);
        return;
    }
    let x = u64::try_from(service.as_micros()).unwrap_or(u64::MAX);
    let mean = match MEAN_US.load(Ordering::Relaxed) {
        0 => x.max(1),
        m => (m - m / MEAN_OVER).saturating_add(x / MEAN_OVER).max(1),
    };
    MEAN_US.store(mean, Ordering::Relaxed);
    let window = window_for(mean);
    if window != WINDOW_US.load(Ordering::Relaxed) {
        WINDOW_US.store(window, Ordering::Relaxed);
        WIDEST_US.fetch_max(window, Ordering::Relaxed);
    }
}

/// The window, µs, for a mean service time of `mean_us`.
fn window_for(mean_us: u64) -> u64 {
    let w = mean_us / SHARE_DIVISOR;
    let (min, max) = (MIN_WINDOW.as_micros() as u64, MAX_WINDOW.as_micros() as u64);
    if w < min {
        0
    } else {
        w.min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_a_twenty_fifth_of_the_mean_between_its_bounds() {
        assert_eq!(window_for(10_000), 0, "0.4 ms: below the shortest window");
        assert_eq!(window_for(12_500), 500);
        assert_eq!(window_for(100_000), 4_000);
        assert_eq!(window_for(250_000), 10_000);
        assert_eq!(window_for(2_000_000), 10_000, "at most 10 ms");
    }

    // The only test of this process that allows gathering (the executor's tests do not).
    #[test]
    fn a_run_gathers_by_its_mean_until_an_answer_comes_without_a_stamp() {
        let ms = Duration::from_millis;
        observe(ms(200), true);
        assert_eq!(window(), Duration::ZERO, "no run allows it: nothing moves");
        let allowed = allow();
        observe(ms(10), true);
        assert_eq!(
            window(),
            Duration::ZERO,
            "a twenty-fifth of 10 ms: too short to wait"
        );
        for _ in 0..2_000 {
            observe(ms(200), true);
        }
        let w = window();
        assert!(
            w > ms(7) && w <= ms(8),
            "about 8 ms for a mean of 200 ms: {w:?}"
        );
        assert_eq!(wait_before_park(), Some(w));
        streaming();
        assert_eq!(wait_before_park(), None, "a body in flight: no wait");
        assert_eq!(wait_before_park(), Some(w), "until the next park");
        observe(ms(200), false);
        assert_eq!(window(), Duration::ZERO);
        observe(ms(200), true);
        assert_eq!(window(), Duration::ZERO, "off for the rest of the run");
        let used = allowed.used();
        assert!(used.turned_off);
        assert!(used.widest > ms(7) && used.widest <= ms(8), "{used:?}");
        drop(allowed);
        let again = allow();
        observe(ms(200), true);
        assert_eq!(
            window(),
            ms(8),
            "a new run starts from its own first answer"
        );
        drop(again);
        assert_eq!(window(), Duration::ZERO, "no window once the run is over");
    }
}
