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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::Notify;
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

/// Where a run's stalls are witnessed from `from` (where the measured part begins): by the
/// runtime's canary, and once stress mode's event loops carry the run's manifest GETs by
/// each loop of its own turns ([`TurnCanary`]) — the runtime's canary then watches only
/// while the runtime has operations of theirs to carry out ([`RuntimeWork`]). Left idle
/// by the loops, the runtime would otherwise wake a hundred times a second to witness
/// nothing that sends a request, while a loop's own stall went unseen.
#[derive(Debug, Clone)]
pub struct Witness {
    pub from: Instant,
    /// What the loops leave to the runtime.
    pub runtime: Arc<RuntimeWork>,
}

/// What the runtime carries out while stress mode's loops carry a run: the operations they
/// hand to its tasks (other than manifest GETs, and answers a loop does not take). Its
/// canary ticks while any runs, and waits without a timer while none does.
#[derive(Debug, Default)]
pub struct RuntimeWork {
    /// The loops carry the run.
    loops: AtomicBool,
    /// Operations of theirs running on the runtime.
    tasks: AtomicUsize,
    /// Told when the first of them starts.
    started: Notify,
}

impl RuntimeWork {
    /// The loops started: from now on the runtime watches only its own work.
    pub fn loops_started(&self) {
        self.loops.store(true, Ordering::Relaxed);
    }

    /// An operation of the loops runs on the runtime until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> OnRuntime {
        if self.tasks.fetch_add(1, Ordering::AcqRel) == 0 {
            self.started.notify_one();
        }
        OnRuntime(Arc::clone(self))
    }

    /// Whether the runtime has nothing of the run to watch.
    fn idle(&self) -> bool {
        self.loops.load(Ordering::Relaxed) && self.tasks.load(Ordering::Acquire) == 0
    }
}

/// An operation on the runtime ([`RuntimeWork::begin`]); its end when dropped.
#[derive(Debug)]
pub struct OnRuntime(Arc<RuntimeWork>);

impl Drop for OnRuntime {
    fn drop(&mut self) {
        self.0.tasks.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An event loop's canary: the loop asks to be woken [`TICK`] after its last look at least
/// ([`Self::wait`]), and each turn that comes past that records how late it came
/// ([`Self::turn`]). Under load the loop turns far more often than it ticks and a turn runs
/// late only by what held the loop (its own work, or a core not given to it); idle, its
/// poll times out in whole milliseconds, rounded up, and the lateness counts from there, as
/// a timer's would.
#[derive(Debug)]
pub struct TurnCanary {
    /// The next tick.
    due: Instant,
    /// Where this turn's poll times out, when it waits for the tick.
    asked: Option<Instant>,
    hist: Histogram<u64>,
}

impl TurnCanary {
    /// A canary that watches from `from` on (a loop started at `now`).
    pub fn new(from: Instant, now: Instant) -> Self {
        TurnCanary {
            due: from.max(now) + TICK,
            asked: None,
            hist: new_histogram(),
        }
    }

    /// How long the loop may wait for its connections at `now`, at most `most`: until the
    /// tick, in whole milliseconds (the poll's unit), or not at all once it is past.
    pub fn wait(&mut self, now: Instant, most: Duration) -> Duration {
        let left = self.due.saturating_duration_since(now);
        self.asked = None;
        if left >= most {
            return most;
        }
        if left.is_zero() {
            return Duration::ZERO;
        }
        let ms = u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let wait = Duration::from_millis(ms);
        self.asked = Some(now + wait);
        wait
    }

    /// A turn begins at `now`: past the tick, how late is recorded and the next tick is
    /// [`TICK`] on.
    pub fn turn(&mut self, now: Instant) {
        if now < self.due {
            return;
        }
        let from = self.asked.map_or(self.due, |asked| asked.max(self.due));
        let late = now.saturating_duration_since(from).as_micros();
        self.hist
            .saturating_record(u64::try_from(late).unwrap_or(u64::MAX));
        self.due = now + TICK;
        self.asked = None;
    }

    /// What the canary saw.
    pub fn into_histogram(self) -> Histogram<u64> {
        self.hist
    }
}

impl CanaryReport {
    /// The runtime's canary with what stress mode's event loops saw of their own turns
    /// after it stopped.
    pub fn with_loops(mut self, loops: Option<&Histogram<u64>>) -> Self {
        if let Some(loops) = loops {
            // Both come from `new_histogram`: the same bounds, so nothing is refused.
            let _ = self.wake_lateness.add(loops);
        }
        self
    }
}

/// Runs from `from` until `stop` is cancelled. `from` is where the measured part begins:
/// a stall in a warm-up that is left out of every number (a step's start, its connections
/// and its planner's first burst) says nothing of the timings that are kept. While `work`
/// says the runtime is left idle by stress mode's loops, it waits for work, not a tick.
pub fn spawn_canary(
    stop: CancellationToken,
    from: Instant,
    work: Arc<RuntimeWork>,
) -> tokio::task::JoinHandle<CanaryReport> {
    tokio::spawn(async move {
        let mut hist = new_histogram();
        tokio::select! {
            () = stop.cancelled() => return CanaryReport { wake_lateness: hist },
            () = tokio::time::sleep_until(from) => {}
        }
        loop {
            if work.idle() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    () = work.started.notified() => {}
                }
                continue;
            }
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
        let canary = spawn_canary(stop.clone(), Instant::now(), Arc::default());
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
        let canary = spawn_canary(stop.clone(), Instant::now() + TICK * 20, Arc::default());
        tokio::time::sleep(TICK * 30 + TICK / 2).await;
        stop.cancel();
        assert_eq!(canary.await.unwrap().wake_lateness.len(), 10);
        // Stopped before it: nothing seen.
        let stop = CancellationToken::new();
        let canary = spawn_canary(stop.clone(), Instant::now() + TICK * 20, Arc::default());
        tokio::time::sleep(TICK * 5).await;
        stop.cancel();
        assert_eq!(canary.await.unwrap().wake_lateness.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn left_idle_by_the_loops_the_canary_watches_only_the_work_they_hand_over() {
        let stop = CancellationToken::new();
        let work = Arc::new(RuntimeWork::default());
        let canary = spawn_canary(stop.clone(), Instant::now(), Arc::clone(&work));
        // Ten ticks before the loops start, none while they leave the runtime idle.
        tokio::time::sleep(TICK * 10 + TICK / 2).await;
        work.loops_started();
        tokio::time::sleep(TICK * 20).await;
        // Twenty while an operation of theirs runs here, then idle again.
        let on = work.begin();
        tokio::time::sleep(TICK * 20 + TICK / 2).await;
        drop(on);
        tokio::time::sleep(TICK * 20).await;
        stop.cancel();
        let seen = canary.await.unwrap().wake_lateness.len();
        // The tick under way as each phase ends may count in it: 30 to 32.
        assert!((30..=32).contains(&seen), "{seen}");
    }

    #[test]
    fn a_loop_turn_past_its_tick_records_how_late_it_came() {
        let (ms, us) = (Duration::from_millis, Duration::from_micros);
        let t0 = Instant::now();
        // Watching from 20 ms on: the first tick at 30 ms, nothing seen before it.
        let mut c = TurnCanary::new(t0 + ms(20), t0);
        assert_eq!(c.wait(t0, ms(50)), ms(30));
        assert_eq!(
            c.wait(t0, ms(5)),
            ms(5),
            "never longer than the loop's own wait"
        );
        c.turn(t0 + ms(29));
        assert_eq!(c.hist.len(), 0);
        // Idle: the poll waits for the tick in whole milliseconds, rounded up (0.6 ms: 1),
        // and the lateness counts from where it times out.
        assert_eq!(c.wait(t0 + us(29_400), ms(50)), ms(1));
        c.turn(t0 + us(30_500));
        assert_eq!((c.hist.len(), c.hist.count_at(100)), (1, 1));
        // Busy: woken by its connections past the tick (40.5 ms) but before its own
        // timeout (41.0): not late.
        assert_eq!(c.wait(t0 + us(40_000), ms(50)), ms(1));
        c.turn(t0 + us(40_600));
        assert_eq!((c.hist.len(), c.hist.count_at(0)), (2, 1));
        // A stall: the turn before the tick (50.6 ms) ran 7 ms past it; the poll does not
        // wait, and the whole overrun counts.
        assert_eq!(c.wait(t0 + us(57_600), ms(50)), Duration::ZERO);
        c.turn(t0 + us(57_650));
        let h = c.into_histogram();
        assert_eq!(h.len(), 3);
        assert!(h.equivalent(h.max(), 7_050), "{}", h.max());
        // Added to the runtime's canary's sightings.
        let mut runtime = new_histogram();
        runtime.record(40).unwrap();
        let report = CanaryReport {
            wake_lateness: runtime,
        };
        let all = report.with_loops(Some(&h)).wake_lateness;
        assert_eq!((all.len(), all.count_at(40)), (4, 1));
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
