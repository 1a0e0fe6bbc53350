//! Progress while a run goes: phase, done/total, rate, errors, live p99 and schedule lag,
//! ETA (weighted by bytes where the work is bytes, as a prewarm's is).
//!
//! Work updates atomic counters and two fixed arrays of atomic buckets (no lock, no I/O,
//! nothing that grows on the hot path). On a terminal a task redraws one line four times a
//! second on stderr; without one (CI logs, `nohup`) it prints a plain line every 10 s
//! (`CREB_PROGRESS_INTERVAL`), so a long run is never silent. Nothing with `--quiet` or
//! `--json`.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::units::{format_duration, ByteSize};

/// Buckets of [`LiveHistogram`]: two per power of two of microseconds, up to ~2^39 µs.
const BUCKETS: usize = 80;

/// What one object's round trip weighs in a byte-weighted share: the bytes a transfer moves
/// in the time of a request's fixed cost, roughly, on a fast link.
pub const OBJECT_BYTES: u64 = 256 * 1024;

/// A coarse latency histogram for the progress line: each sample is one atomic add into a
/// bucket of half a power of two (so a percentile is within about 40%), and the reader
/// takes and clears the counts of the window since it last looked.
#[derive(Debug)]
pub struct LiveHistogram {
    buckets: [AtomicU64; BUCKETS],
}

impl Default for LiveHistogram {
    fn default() -> Self {
        LiveHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl LiveHistogram {
    fn bucket(us: u64) -> usize {
        if us < 2 {
            return us as usize;
        }
        let msb = 63 - us.leading_zeros() as usize;
        let half = ((us >> (msb - 1)) & 1) as usize;
        (msb * 2 + half).min(BUCKETS - 1)
    }

    /// The largest value a bucket holds, in microseconds.
    fn upper(bucket: usize) -> u64 {
        if bucket < 2 {
            return bucket as u64;
        }
        let (msb, half) = (bucket / 2, bucket % 2);
        let base = 1u64 << msb;
        if half == 0 {
            base + base / 2 - 1
        } else {
            2 * base - 1
        }
    }

    pub fn record(&self, d: Duration) {
        self.record_us(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn record_us(&self, us: u64) {
        self.buckets[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `q` quantile (0..1) of the samples since the last call, which are cleared;
    /// `None` without samples.
    pub fn take_quantile(&self, q: f64) -> Option<Duration> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.swap(0, Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Duration::from_micros(Self::upper(i)));
            }
        }
        None
    }
}

/// Counters shared with the work.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
    /// Bytes the work moves in all, when it is known (prewarm); 0 when not.
    pub bytes_total: AtomicU64,
    pub bytes_done: AtomicU64,
    /// Latency of the operations that succeeded (from the intended start in delay mode).
    pub latency: LiveHistogram,
    /// How late operations started against their schedule (delay mode).
    pub lag: LiveHistogram,
    /// When the work starts, if it waits for a shared start (`--start-at`): until then the
    /// line counts down to it instead of showing a share and an ETA.
    starts: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Progress {
    pub fn new(total: u64) -> Arc<Self> {
        let p = Progress::default();
        p.total.store(total, Ordering::Relaxed);
        Arc::new(p)
    }

    /// Work of an unknown number of items (a trace being read): the line counts them, with
    /// no share and no ETA.
    pub fn unbounded() -> Arc<Self> {
        Progress::new(0)
    }

    /// Work of `total` items moving `bytes` in all: the ETA follows the bytes.
    pub fn with_bytes(total: u64, bytes: u64) -> Arc<Self> {
        let p = Progress::new(total);
        p.bytes_total.store(bytes, Ordering::Relaxed);
        p
    }

    /// The work starts at `at`: the line counts down until then.
    pub fn starts_at(&self, at: tokio::time::Instant) {
        if let Ok(mut s) = self.starts.lock() {
            *s = Some(at);
        }
    }

    /// How long the work has run, seen from a line shown since `shown`: from its start when
    /// it waited for one.
    fn running_for(&self, shown: tokio::time::Instant) -> Duration {
        let from = self
            .starts
            .lock()
            .ok()
            .and_then(|s| *s)
            .map_or(shown, |at| at.max(shown));
        tokio::time::Instant::now().saturating_duration_since(from)
    }

    /// What is left before the work starts, while it waits for its start.
    fn waiting(&self) -> Option<Duration> {
        let at = (*self.starts.lock().ok()?)?;
        let now = tokio::time::Instant::now();
        (now < at).then(|| at - now)
    }

    /// More work than first counted (a later stage, planned when the first ends).
    pub fn add_total(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_done(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_bytes(&self, n: u64) {
        self.bytes_done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_done(&self, n: u64) {
        self.done.store(n, Ordering::Relaxed);
    }

    /// A finished operation that succeeded: its latency, and its schedule lag if it had a
    /// schedule.
    /// A success's latency and schedule lag, µs.
    pub fn observe(&self, latency_us: u64, lag_us: Option<u64>) {
        self.latency.record_us(latency_us);
        if let Some(lag) = lag_us {
            self.lag.record_us(lag);
        }
    }

    /// The share done (by bytes when they are known, each object counted as
    /// [`OBJECT_BYTES`] more) and the time left at the rate so far.
    fn share_and_eta(&self, elapsed: Duration) -> (f64, Option<Duration>) {
        let (objects_done, objects) = (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        );
        let (done, total) = match self.bytes_total.load(Ordering::Relaxed) {
            0 => (objects_done, objects),
            // Each object also costs a round trip, worth OBJECT_BYTES of transfer: many
            // small objects (scaled sizes, manifests after the blobs) still take time.
            // Saturating: however large the sizes, the share never wraps to a false 100%.
            bytes => (
                self.bytes_done
                    .load(Ordering::Relaxed)
                    .min(bytes)
                    .saturating_add(objects_done.min(objects).saturating_mul(OBJECT_BYTES)),
                bytes.saturating_add(objects.saturating_mul(OBJECT_BYTES)),
            ),
        };
        if total == 0 {
            return (1.0, None);
        }
        let share = (done as f64 / total as f64).min(1.0);
        let eta = (share > 0.0 && share < 1.0)
            .then(|| elapsed.mul_f64((1.0 - share) / share))
            .filter(|eta| *eta < Duration::from_secs(100 * 24 * 3600));
        (share, eta)
    }

    /// What the line shows after `elapsed`, taking the latency window.
    fn status(&self, elapsed: Duration) -> Status {
        let (share, eta) = self.share_and_eta(elapsed);
        Status {
            share,
            eta,
            done: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            rate: self.done.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64().max(1e-3),
            p99: self.latency.take_quantile(0.99),
            lag_p99: self.lag.take_quantile(0.99),
        }
    }
}

/// One reading of the counters.
#[derive(Debug)]
struct Status {
    share: f64,
    eta: Option<Duration>,
    done: u64,
    total: u64,
    errors: u64,
    bytes_done: u64,
    rate: f64,
    p99: Option<Duration>,
    lag_p99: Option<Duration>,
}

impl Status {
    /// The live figures: rate, errors, p99 and lag of the last window, bytes.
    fn figures(&self) -> String {
        let mut out = format!("{:.0}/s  {} errors", self.rate, self.errors);
        if let Some(p99) = self.p99 {
            out.push_str(&format!("  p99≈{}", format_duration(p99)));
        }
        if let Some(lag) = self.lag_p99 {
            out.push_str(&format!("  lag p99≈{}", format_duration(lag)));
        }
        if self.bytes_done > 0 {
            out.push_str(&format!("  {}", ByteSize(self.bytes_done)));
        }
        out
    }

    fn eta(&self) -> String {
        self.eta.map_or("-".into(), format_duration)
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// Not at all (`--quiet`, `--json`).
    Off,
    /// A line redrawn in place on a terminal.
    Terminal,
    /// A plain line every so often, for logs.
    Lines(Duration),
}

/// How progress may be shown: on the terminal, as lines every 10 s (or
/// `CREB_PROGRESS_INTERVAL`) when stderr is not one, or not with `quiet` or `json`.
pub fn wanted(quiet: bool, json: bool) -> Display {
    if quiet || json {
        Display::Off
    } else if std::io::stderr().is_terminal() {
        Display::Terminal
    } else {
        let every = std::env::var("CREB_PROGRESS_INTERVAL")
            .ok()
            .and_then(|v| crate::units::parse_duration(&v).ok())
            .filter(|d| *d >= Duration::from_millis(100))
            .unwrap_or(Duration::from_secs(10));
        Display::Lines(every)
    }
}

/// The drawing task; the line disappears when this is finished or dropped.
#[derive(Debug)]
pub struct ProgressLine {
    task: Option<tokio::task::JoinHandle<()>>,
    bar: Option<ProgressBar>,
}

impl ProgressLine {
    /// Shows `progress` under `phase` (e.g. "prewarm", "stress") as `display` says.
    pub fn show(
        phase: &str,
        unit: &str,
        progress: Arc<Progress>,
        display: Display,
    ) -> ProgressLine {
        match display {
            Display::Off => ProgressLine {
                task: None,
                bar: None,
            },
            Display::Terminal => Self::terminal(phase, unit, progress),
            Display::Lines(every) => Self::lines(phase, unit, progress, every),
        }
    }

    fn terminal(phase: &str, unit: &str, progress: Arc<Progress>) -> ProgressLine {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
        let unit = unit.to_owned();
        let style = move |unbounded: bool| {
            let template = if unbounded {
                format!("{{prefix:>8}} {{pos}} {unit}  {{msg}}")
            } else {
                format!("{{prefix:>8}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{msg}}")
            };
            ProgressStyle::with_template(&template)
                .ok()
                .map(|s| s.progress_chars("=> "))
        };
        bar.set_prefix(phase.to_owned());
        let drawn = bar.clone();
        let task = tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut figures = String::new();
            // The style follows whether the total is known yet (a trace being read is not,
            // its digests are once it is read).
            let mut styled: Option<bool> = None;
            for n in 0u64.. {
                tick.tick().await;
                let total = progress.total.load(Ordering::Relaxed);
                let unbounded = total == 0 && progress.bytes_total.load(Ordering::Relaxed) == 0;
                if styled != Some(unbounded) {
                    if let Some(s) = style(unbounded) {
                        drawn.set_style(s);
                    }
                    styled = Some(unbounded);
                }
                if !unbounded {
                    drawn.set_length(total);
                }
                drawn.set_position(progress.done.load(Ordering::Relaxed));
                if let Some(left) = progress.waiting() {
                    drawn.set_message(format!("starts in {}", format_duration(left)));
                    continue;
                }
                // The latency window is a second long; the counters move every tick.
                if n % 4 == 0 {
                    let status = progress.status(progress.running_for(start));
                    figures = if unbounded {
                        status.figures()
                    } else {
                        format!("{}  ETA {}", status.figures(), status.eta())
                    };
                }
                drawn.set_message(figures.clone());
            }
        });
        ProgressLine {
            task: Some(task),
            bar: Some(bar),
        }
    }

    fn lines(phase: &str, unit: &str, progress: Arc<Progress>, every: Duration) -> ProgressLine {
        let (phase, unit) = (phase.to_owned(), unit.to_owned());
        let task = tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut tick = tokio::time::interval_at(start + every, every);
            loop {
                tick.tick().await;
                if let Some(left) = progress.waiting() {
                    eprintln!("creb-rs: {phase} starts in {}", format_duration(left));
                    continue;
                }
                let status = progress.status(progress.running_for(start));
                if status.total == 0 && progress.bytes_total.load(Ordering::Relaxed) == 0 {
                    eprintln!(
                        "creb-rs: {phase} {} {unit}  {}",
                        status.done,
                        status.figures()
                    );
                    continue;
                }
                eprintln!(
                    "creb-rs: {phase} {:.1}%  {}/{} {unit}  {}  ETA {}",
                    status.share * 100.0,
                    status.done,
                    status.total,
                    status.figures(),
                    status.eta()
                );
            }
        });
        ProgressLine {
            task: Some(task),
            bar: None,
        }
    }

    /// Removes the line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counters_and_a_disabled_line() {
        let p = Progress::new(10);
        p.add_done(3);
        p.add_error();
        assert_eq!(p.done.load(Ordering::Relaxed), 3);
        let line = ProgressLine::show("test", "ops", Arc::clone(&p), Display::Off);
        assert!(line.task.is_none(), "nothing drawn when disabled");
        line.finish();
    }

    #[test]
    fn live_percentiles_are_within_a_bucket_and_the_window_clears() {
        let h = LiveHistogram::default();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let p99 = h.take_quantile(0.99).unwrap();
        // The 99th of 1..=100 ms is 99 ms; its bucket (98,304..131,071 µs) reports its top.
        assert!(
            p99 >= Duration::from_millis(99) && p99 < Duration::from_millis(140),
            "{p99:?}"
        );
        assert_eq!(h.take_quantile(0.99), None, "taken windows start empty");
        for us in [0u64, 1, 2, 3, 5, 1 << 20, u64::MAX] {
            let b = LiveHistogram::bucket(us);
            assert!(b < BUCKETS);
            if b < BUCKETS - 1 {
                assert!(LiveHistogram::upper(b) >= us, "{us} in bucket {b}");
            }
        }
    }

    #[test]
    fn the_eta_follows_bytes_when_they_are_known() {
        // 1 of 4 objects done, but it was the big one: 90% of the bytes.
        const MIB: u64 = 1 << 20;
        let p = Progress::with_bytes(4, 1000 * MIB);
        p.add_done(1);
        p.add_bytes(900 * MIB);
        let (share, eta) = p.share_and_eta(Duration::from_secs(9));
        assert!((share - 0.9).abs() < 0.001, "{share}");
        assert!(eta.unwrap().abs_diff(Duration::from_secs(1)) < Duration::from_millis(20));
        // Tiny objects (scaled sizes): all bytes sent is not done while objects remain.
        let p = Progress::with_bytes(1000, 1000);
        p.add_done(500);
        p.add_bytes(1000);
        let (share, _) = p.share_and_eta(Duration::from_secs(9));
        assert!((share - 0.5).abs() < 0.01, "{share}");
        // Sizes near the top of u64 (claims no one should believe): nothing done is 0%.
        let p = Progress::with_bytes(4, u64::MAX - 1);
        let (share, _) = p.share_and_eta(Duration::from_secs(9));
        assert!(share < 0.001, "{share}");
        // Without bytes, objects count.
        let p = Progress::new(4);
        p.add_done(1);
        let (share, eta) = p.share_and_eta(Duration::from_secs(9));
        assert!((share - 0.25).abs() < 1e-9);
        assert_eq!(eta, Some(Duration::from_secs(27)));
    }
}
