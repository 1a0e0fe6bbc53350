//! A progress line on the terminal: phase, done/total, rate, errors, ETA.
//!
//! Work updates three atomic counters (no lock, no I/O on the hot path); a task redraws the
//! line four times a second on stderr. Nothing is drawn when stderr is not a terminal, or
//! with `--quiet` or `--json`, so logs and pipes stay clean.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counters shared with the work.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: AtomicU64,
    pub done: AtomicU64,
    pub errors: AtomicU64,
}

impl Progress {
    pub fn new(total: u64) -> Arc<Self> {
        let p = Progress::default();
        p.total.store(total, Ordering::Relaxed);
        Arc::new(p)
    }

    pub fn add_done(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_done(&self, n: u64) {
        self.done.store(n, Ordering::Relaxed);
    }
}

/// The drawing task; the line disappears when this is finished or dropped.
#[derive(Debug)]
pub struct ProgressLine {
    task: Option<tokio::task::JoinHandle<()>>,
    bar: Option<ProgressBar>,
}

/// Whether a progress line may be drawn.
pub fn wanted(quiet: bool, json: bool) -> bool {
    !quiet && !json && std::io::stderr().is_terminal()
}

impl ProgressLine {
    /// Shows `progress` under `phase` (e.g. "prewarm", "stress") if `enabled`.
    pub fn show(phase: &str, unit: &str, progress: Arc<Progress>, enabled: bool) -> ProgressLine {
        if !enabled {
            return ProgressLine {
                task: None,
                bar: None,
            };
        }
        let bar = ProgressBar::with_draw_target(
            Some(progress.total.load(Ordering::Relaxed)),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        let template =
            format!("{{prefix:>8}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{msg}}  ETA {{eta}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(phase.to_owned());
        let drawn = bar.clone();
        let task = tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                let done = progress.done.load(Ordering::Relaxed);
                drawn.set_length(progress.total.load(Ordering::Relaxed));
                drawn.set_position(done);
                let errors = progress.errors.load(Ordering::Relaxed);
                let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-3);
                drawn.set_message(format!("{rate:.0}/s  {errors} errors"));
            }
        });
        ProgressLine {
            task: Some(task),
            bar: Some(bar),
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
        let line = ProgressLine::show("test", "ops", Arc::clone(&p), false);
        assert!(line.task.is_none(), "nothing drawn when disabled");
        line.finish();
    }
}
