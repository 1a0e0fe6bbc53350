//! Two-stage Ctrl-C (and SIGTERM): the first signal cancels the run's token, so no new work
//! starts, in-flight requests finish within a grace period, and a valid result marked
//! `interrupted` is written (exit 130, or 143 for SIGTERM); a second signal exits at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Cancellation shared by every part of a run.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    by_signal: Arc<AtomicBool>,
    by_term: Arc<AtomicBool>,
    by_limit: Arc<AtomicBool>,
}

impl Shutdown {
    /// A shutdown that only code (tests, limits) triggers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Listens for SIGINT and SIGTERM in the background.
    pub fn listen_for_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut count = 0u32;
            loop {
                let signal = wait_for_signal().await;
                count += 1;
                if count == 1 {
                    eprintln!(
                        "creb-rs: {signal}: stopping; in-flight requests finish and results are written (press Ctrl-C again to exit now)"
                    );
                    this.by_signal.store(true, Ordering::SeqCst);
                    this.by_term.store(signal == "terminate", Ordering::SeqCst);
                    this.token.cancel();
                } else {
                    eprintln!("creb-rs: {signal} again: exiting now");
                    std::process::exit(if signal == "terminate" { 143 } else { 130 });
                }
            }
        });
    }

    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Whether a signal (not a limit or an error) stopped the run.
    pub fn by_signal(&self) -> bool {
        self.by_signal.load(Ordering::SeqCst)
    }

    /// Whether that signal was SIGTERM (exit 143 rather than 130).
    pub fn by_sigterm(&self) -> bool {
        self.by_term.load(Ordering::SeqCst)
    }

    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Runs `work` until it ends or the stop comes (a signal, `--max-run-time`), whichever
    /// is first; `None` when the stop came first (`work` is dropped: its requests are
    /// abandoned, its child processes killed). A stage that waits on anything outside the
    /// process (a registry, a token server, a credential helper) waits through this, so a
    /// stop is honoured at every stage.
    pub async fn race<F: std::future::Future>(&self, work: F) -> Option<F::Output> {
        if self.token.is_cancelled() {
            return None;
        }
        tokio::select! {
            biased;
            () = self.token.cancelled() => None,
            out = work => Some(out),
        }
    }

    /// Ends the run after `limit` (`--max-run-time`) the way a stop does (nothing new
    /// starts, in-flight work gets its grace, results are written), but as the run's
    /// planned end: not an interruption.
    pub fn limit_run_time(&self, limit: std::time::Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(limit) => {
                    if !this.token.is_cancelled() {
                        this.by_limit.store(true, Ordering::SeqCst);
                        this.token.cancel();
                    }
                }
                () = this.token.cancelled() => {}
            }
        });
    }

    /// Whether `--max-run-time` ended the run.
    pub fn by_limit(&self) -> bool {
        self.by_limit.load(Ordering::SeqCst)
    }

    /// Whether the run was interrupted: stopped, and not by its `--max-run-time`.
    pub fn interrupted(&self) -> bool {
        self.token.is_cancelled() && !self.by_limit()
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "interrupt";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupt",
        _ = term.recv() => "terminate",
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "interrupt"
}
