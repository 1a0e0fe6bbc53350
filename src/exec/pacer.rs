//! Waiting for an operation's due time in delay mode, and for the start of a schedule (the
//! anchor, `--start-at`) in either mode, to the microsecond.
//!
//! tokio's timer counts whole milliseconds: it rounds a deadline up to its next millisecond
//! and parks the runtime for whole milliseconds, so a wait ends anywhere up to a millisecond
//! (and more) after the time asked for. Delay mode times every operation from its due time,
//! so that slack is schedule lag the generator adds. A [`Pacer`] arms a `timerfd` with the
//! due time instead: the runtime's I/O driver wakes when the kernel's high-resolution timer
//! fires, and nothing else changes (no thread of its own, no spinning).

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use timer::Timer;

/// Waits for `anchor`, the instant a schedule starts, or for `cancel`: on a timerfd if
/// `precise` (a host starts within a fraction of a millisecond of a shared `--start-at`),
/// else on tokio's timer. A timerfd is made only when there is something to wait for.
pub(crate) async fn wait_for_anchor(anchor: Instant, precise: bool, cancel: &CancellationToken) {
    if anchor <= Instant::now() {
        return;
    }
    let mut pacer = Pacer::new(precise);
    tokio::select! {
        _ = pacer.sleep_until(anchor) => {}
        _ = cancel.cancelled() => {}
    }
}

/// Waits until due times, as precisely as the platform allows.
#[derive(Debug)]
pub(crate) struct Pacer {
    /// A timerfd; `None`: tokio's timer (a paused test clock, which only tokio's timer
    /// follows, or a platform without timerfd).
    timer: Option<Timer>,
}

impl Pacer {
    /// A pacer on a timerfd if `precise`, else on tokio's timer.
    pub(crate) fn new(precise: bool) -> Pacer {
        let timer = precise.then(Timer::new).and_then(|made| match made {
            Ok(timer) => Some(timer),
            Err(e) => {
                tracing::debug!("no timerfd ({e}): due times wait on tokio's millisecond timer");
                None
            }
        });
        Pacer { timer }
    }

    /// Resolves at `due` or just after, never before. Cancel-safe: a wait dropped before its
    /// end leaves nothing that ends the next one early.
    pub(crate) async fn sleep_until(&mut self, due: Instant) {
        let Some(timer) = &self.timer else {
            return tokio::time::sleep_until(due).await;
        };
        loop {
            let now = Instant::now();
            if now >= due {
                return;
            }
            if let Err(e) = timer.expire_after(due - now).await {
                tracing::debug!("timerfd: {e}; waiting on tokio's timer");
                return tokio::time::sleep_until(due).await;
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod timer {
    use std::time::Duration;

    use rustix::fd::OwnedFd;
    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };
    use tokio::io::unix::AsyncFd;

    /// A timerfd on the monotonic clock, registered with the runtime's reactor.
    #[derive(Debug)]
    pub(super) struct Timer(AsyncFd<OwnedFd>);

    impl Timer {
        pub(super) fn new() -> std::io::Result<Timer> {
            let fd = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // `AsyncFd::new` is deprecated for descriptors its owner could close or swap while
            // registered; an `OwnedFd` that the `AsyncFd` owns can be neither, and the safe
            // constructor keeps this crate free of `unsafe`.
            #[allow(deprecated)]
            let fd = AsyncFd::new(fd)?;
            Ok(Timer(fd))
        }

        /// Arms the timer to expire once, `after` from now, and waits for an expiry. Arming
        /// also clears an expiry a dropped wait left unread; an earlier wait's readiness can
        /// still end this one early, which the caller's clock check absorbs.
        pub(super) async fn expire_after(&self, after: Duration) -> std::io::Result<()> {
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // A zero value would disarm the timer: wait at least a nanosecond.
            let after = after.max(Duration::from_nanos(1));
            let value = Timespec {
                tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(after.subsec_nanos()),
            };
            timerfd_settime(
                self.0.get_ref(),
                TimerfdTimerFlags::empty(),
                &Itimerspec {
                    it_interval: zero,
                    it_value: value,
                },
            )?;
            let mut ready = self.0.readable().await?;
            // Read the expiry count. `WouldBlock` (readiness left from a dropped wait) clears
            // the readiness itself, and the caller waits again; after a read the timer stays
            // unreadable until it is armed and expires again, so clear it here too.
            let mut count = [0u8; 8];
            if let Ok(read) = ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut count)?)) {
                read?;
                ready.clear_ready();
            }
            Ok(())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod timer {
    use std::time::Duration;

    /// No timerfd here: [`super::Pacer`] uses tokio's timer.
    #[derive(Debug)]
    pub(super) enum Timer {}

    impl Timer {
        pub(super) fn new() -> std::io::Result<Timer> {
            Err(std::io::ErrorKind::Unsupported.into())
        }

        pub(super) async fn expire_after(&self, _after: Duration) -> std::io::Result<()> {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_wait_never_ends_before_its_due_time() {
        let mut pacer = Pacer::new(true);
        assert!(pacer.timer.is_some(), "this platform has timerfd");
        let start = Instant::now();
        for step_us in [0u64, 150, 1_000, 1_700, 2_300] {
            let due = Instant::now() + Duration::from_micros(step_us);
            pacer.sleep_until(due).await;
            assert!(
                Instant::now() >= due,
                "woke before a due time {step_us} us ahead"
            );
        }
        // A due time already past returns at once.
        pacer.sleep_until(start).await;
    }

    #[tokio::test]
    async fn an_expiry_left_by_a_dropped_wait_does_not_end_the_next_one_early() {
        let mut pacer = Pacer::new(true);
        // Poll a wait once (the timer is armed), drop it, and let the timer fire unread.
        let first = Instant::now() + Duration::from_micros(200);
        {
            let wait = pacer.sleep_until(first);
            tokio::pin!(wait);
            tokio::select! {
                biased;
                _ = &mut wait => panic!("woke before its due time"),
                _ = std::future::ready(()) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(2));
        assert!(Instant::now() > first);
        // The next wait must last until its own due time, not end on the stale expiry.
        let second = Instant::now() + Duration::from_millis(3);
        pacer.sleep_until(second).await;
        assert!(Instant::now() >= second, "woke on the stale expiry");
    }

    #[tokio::test]
    async fn the_anchor_wait_ends_at_the_anchor_or_on_cancel() {
        let anchor = Instant::now() + Duration::from_millis(2);
        wait_for_anchor(anchor, true, &CancellationToken::new()).await;
        assert!(Instant::now() >= anchor);
        // Cancelled: an anchor 5 s away does not hold the caller (and a broken cancel fails
        // here in 5 s rather than hanging the suite).
        let cancel = CancellationToken::new();
        cancel.cancel();
        let far = Instant::now() + Duration::from_secs(5);
        wait_for_anchor(far, true, &cancel).await;
        assert!(Instant::now() < far);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_timerfd_it_is_tokios_timer() {
        // A paused clock moves only for tokio's timer: the executor's tests run on one.
        let mut pacer = Pacer::new(false);
        let due = Instant::now() + Duration::from_secs(3600);
        pacer.sleep_until(due).await;
        assert!(Instant::now() >= due);
    }
}
