//! The life of a load run's results, the same for push, pull and replay: a [`Session`]
//! is opened from the output settings before any work (thresholds parsed, the output directory
//! checked, the live metrics started) and finished into an exit status (thresholds judged,
//! the registry's own metrics read a last time, results written and shown, the live side
//! stopped).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;

pub mod connect;
pub mod observe;
mod output;
pub mod status;

use crate::metrics::live::RunInfoLabels;
use crate::metrics::{Aggregator, ErrorLog};
use crate::progress;
pub use crate::progress::{Display as ProgressDisplay, LiveHistogram};
pub use crate::progress::{Progress, ProgressLine};
use crate::report::render_text_with;
use crate::results::store::{workload_difference, write_final, Workload};
use crate::results::thresholds::{parse_all, report, verdicts, Baseline, Threshold};
use crate::results::{prepare_result_dir, Meta, RunOutput, Summary, Warning};
use observe::{Observation, RegistryWatch};
pub use output::OutputOptions;
pub use status::ExitStatus;

/// A finished run, ready to be written and shown.
#[derive(Debug)]
pub struct Finished {
    pub summary: Summary,
    pub aggregator: Aggregator,
    pub meta: Meta,
}

/// How one result is written and shown.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The result directory, if any.
    pub dir: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    pub json: bool,
    /// Print the table (unless quiet or JSON).
    pub table: bool,
    pub quiet: bool,
    /// Judge the `--fail-if` thresholds on this result (the command's own result).
    pub judge: bool,
}

/// One load command's results, from its flags to its exit status.
#[derive(Debug)]
pub struct Session {
    /// The output settings as given.
    pub flags: OutputOptions,
    /// Where and how the run's results go (the aggregator's settings).
    pub output: RunOutput,
    thresholds: Vec<Threshold>,
    /// The run thresholds relative to a baseline compare with (`--baseline`).
    baseline: Option<Baseline>,
    observation: Observation,
}

impl Session {
    /// Opens a session before any work: a bad `--fail-if` expression, an output directory
    /// that cannot be written or a `--metrics-listen` that cannot bind is an error now,
    /// never after a long run. `endpoints` names the registries the live metrics label.
    pub async fn open(
        flags: &OutputOptions,
        labels: RunInfoLabels,
        endpoints: &[String],
        shard: u32,
    ) -> anyhow::Result<Session> {
        let thresholds = parse_all(&flags.fail_if)?;
        if let (Some(out), Some(base)) = (&flags.output_dir, &flags.baseline) {
            if crate::outfile::same_path(out, base) {
                anyhow::bail!(
                    "--output-dir {} is the --baseline it compares with: the run would replace \
                     it; write the run elsewhere (and make it the baseline afterwards if it \
                     passes)",
                    out.display()
                );
            }
        }
        let baseline = open_baseline(flags, &thresholds, &labels)?;
        if let Some(dir) = &flags.output_dir {
            let removed = prepare_result_dir(dir, flags.force)?;
            if !(removed.is_empty() || flags.quiet || flags.json) {
                eprintln!(
                    "creb-rs: {} held an earlier result; its files were removed ({})",
                    dir.display(),
                    removed.join(", ")
                );
            }
        }
        let mut output = RunOutput {
            dir: flags.output_dir.clone(),
            interval: flags.interval,
            record_requests: flags.record_requests,
            live: None,
            split_by: flags.split_by_header.clone(),
            warmup: flags.warmup,
        };
        let observation = observe::start(flags, labels, endpoints, shard, &mut output).await?;
        Ok(Session {
            flags: flags.clone(),
            output,
            thresholds,
            baseline,
            observation,
        })
    }

    /// Whether nothing but the result goes to the terminal (`--quiet` or `--json`).
    pub fn quiet(&self) -> bool {
        self.flags.quiet || self.flags.json
    }

    /// The progress line of a phase (`name`, counting `unit`), on stderr unless the flags
    /// keep the terminal for the result.
    pub fn progress_line(&self, name: &str, unit: &str, progress: &Arc<Progress>) -> ProgressLine {
        let display = progress::wanted(self.flags.quiet, self.flags.json);
        ProgressLine::show(name, unit, Arc::clone(progress), display)
    }

    /// Starts reading the registry's own metrics (`--registry-metrics`), now and every
    /// interval; `None` without the flag.
    pub async fn watch_registry(&self) -> anyhow::Result<Option<RegistryWatch>> {
        RegistryWatch::start(&self.flags).await
    }

    /// How the command's own result is shown: as the flags say, judged.
    pub fn shown(&self) -> Shown {
        Shown {
            dir: self.output.dir.clone(),
            json: self.flags.json,
            table: true,
            quiet: self.flags.quiet,
            judge: true,
        }
    }

    /// Judges `run` (when `shown` says so; every verdict goes into its summary), reads the
    /// registry's metrics a last time, writes `run` (summary.json last) and shows it.
    /// Returns whether a threshold held, having said which on stderr.
    pub async fn publish(
        &self,
        run: &mut Finished,
        watch: Option<RegistryWatch>,
        shown: &Shown,
    ) -> anyhow::Result<bool> {
        run.summary.max_errors = Some(self.flags.max_errors);
        mark_interrupted(&mut run.summary);
        let (judged, other_workload) = self.judge(run, shown);
        if let Some(watch) = watch {
            let quiet = shown.quiet || shown.json;
            watch
                .finish(
                    shown.dir.as_deref(),
                    run.summary.totals.http_requests,
                    quiet,
                )
                .await?;
        }
        if let (Some(e), Some(_)) = (run.aggregator.sink_error(), &shown.dir) {
            run.summary.warnings.push(cut_short(e));
        }
        write_and_show(run, shown)?;
        let slow = report(&judged);
        if let Some(why) = other_workload {
            anyhow::bail!("--baseline: {why}");
        }
        Ok(slow)
    }

    /// Judges `run` by the `--fail-if` thresholds (when `shown` says so), every verdict
    /// into its summary: those relative to a baseline of another workload are not judged
    /// (why, for the caller's exit 2), an undecided one is a `baseline_undecided` warning.
    fn judge(
        &self,
        run: &mut Finished,
        shown: &Shown,
    ) -> (
        Vec<crate::results::summary::ThresholdVerdict>,
        Option<String>,
    ) {
        if !shown.judge {
            return (Vec::new(), None);
        }
        // A baseline of another workload is refused as `compare` refuses it.
        let other_workload = self.baseline.as_ref().and_then(|b| {
            let dir = shown.dir.clone().unwrap_or_default();
            let this = Workload {
                dir: &dir,
                summary: &run.summary,
                dataset_hash: &run.meta.dataset_hash,
            };
            let base = Workload {
                dir: &b.dir,
                summary: &b.summary,
                dataset_hash: &b.dataset_hash,
            };
            workload_difference(base, this, self.flags.force)
        });
        let table = run.aggregator.table();
        run.summary.thresholds = if other_workload.is_some() {
            let own: Vec<Threshold> = self
                .thresholds
                .iter()
                .filter(|t| !t.needs_baseline())
                .cloned()
                .collect();
            verdicts(&own, &run.summary, table, None)
        } else {
            verdicts(
                &self.thresholds,
                &run.summary,
                table,
                self.baseline.as_ref(),
            )
        };
        for v in &run.summary.thresholds {
            if let Some(why) = v.baseline.as_ref().and_then(|b| b.undecided.as_ref()) {
                // Not a failure: said, and a failure only under --strict.
                run.summary.warnings.push(Warning {
                    kind: "baseline_undecided".into(),
                    message: format!("--fail-if '{}' is undecided: {why}", v.expression),
                });
            }
        }
        (run.summary.thresholds.clone(), other_workload)
    }

    /// Ends the live side: the last push, then the endpoint lingers and stops.
    pub async fn close(self) {
        self.observation.finish().await;
    }

    /// Ends a synthetic workload (push, pull): publishes `run`, then either says why the
    /// registry could not be used (`fatal`: exit 2, no table) or gives the run's status.
    pub async fn finish(
        self,
        mut run: Finished,
        watch: Option<RegistryWatch>,
        fatal: Option<String>,
        errors: &ErrorLog,
    ) -> anyhow::Result<ExitStatus> {
        let shown = Shown {
            table: fatal.is_none(),
            ..self.shown()
        };
        if let Some(message) = &fatal {
            // The result says why nothing was measured.
            run.summary.warnings.push(Warning {
                kind: "registry_unusable".into(),
                message: message.clone(),
            });
        }
        let slow = self.publish(&mut run, watch, &shown).await;
        self.close().await;
        let slow = slow?;
        if let Some(message) = fatal {
            eprintln!("creb-rs: error: {message}");
            return Ok(ExitStatus::Usage);
        }
        for message in errors.messages() {
            eprintln!("creb-rs: {message}");
        }
        // An image that failed although every request it made succeeded (an index without
        // the platform asked for) fails the run: no operation count would show it.
        let images_failed: u64 = run.summary.sessions.values().map(|s| s.errors).sum();
        let unexplained = images_failed > 0 && run.summary.totals.errors == 0;
        Ok(exit_status(
            &run.summary,
            slow,
            unexplained || replication_failed(&run.summary),
        ))
    }
}

/// The run `--baseline` names, read before any work: refused when it is not a result
/// directory or a result of another command or workload model; required when a threshold
/// is relative to it.
fn open_baseline(
    flags: &OutputOptions,
    thresholds: &[Threshold],
    labels: &RunInfoLabels,
) -> anyhow::Result<Option<Baseline>> {
    let Some(dir) = &flags.baseline else {
        if let Some(t) = thresholds.iter().find(|t| t.needs_baseline()) {
            anyhow::bail!("--fail-if '{t}' compares with a baseline: give --baseline DIR");
        }
        return Ok(None);
    };
    let set = crate::results::store::load(dir)
        .with_context(|| format!("--baseline {}", dir.display()))?;
    let (command, mode) = (labels.command.as_str(), labels.mode.as_str());
    if set.summary.command != command || set.summary.mode != mode {
        anyhow::bail!(
            "--baseline {}: a {} ({}) result, not one of {command} ({mode}): a baseline must run \
             the same workload",
            dir.display(),
            set.summary.command,
            set.summary.mode
        );
    }
    let aggregator = crate::results::store::aggregator_of(&set.counters, &set.hlog)
        .with_context(|| format!("--baseline {}", dir.display()))?;
    Ok(Some(Baseline {
        summary: set.summary,
        table: aggregator.into_table(),
        dir: set.dir,
        dataset_hash: set.meta.dataset_hash,
    }))
}

/// The exit status of a finished run, one rule for every load command (docs/cli.md):
/// interrupted first, then more failed operations than `--max-errors` tolerates (none by
/// default) or a failed validity check (`strict_failed`), then a threshold that held.
pub fn exit_status(summary: &Summary, slow: bool, strict_failed: bool) -> ExitStatus {
    let max_errors = summary.max_errors.unwrap_or_default();
    // A failure inside the warm-up is a failure too: left out of the numbers, never hidden.
    let (warm_errors, warm_ops) = summary
        .warmup
        .as_ref()
        .map_or((0, 0), |w| (w.errors, w.operations));
    let failed = max_errors.exceeded(
        summary.totals.errors + warm_errors,
        summary.totals.requests + warm_ops,
    );
    if summary.interrupted {
        ExitStatus::Interrupted
    } else if failed || strict_failed {
        ExitStatus::Failed
    } else if slow {
        ExitStatus::ThresholdFailed
    } else {
        ExitStatus::Success
    }
}

/// Whether a replica failed to serve a pushed image (`--replica`): no request of the
/// workload failed, and no `--max-errors` tolerates it.
pub fn replication_failed(summary: &Summary) -> bool {
    let replication = crate::metrics::Op::Replication.name();
    (summary.operations.get(replication)).is_some_and(|o| o.errors > 0)
}

/// Gives an interrupted result (push, pull, a prewarm, a replay stopped at any stage) the
/// documented `interrupted` warning, once.
fn mark_interrupted(summary: &mut Summary) {
    if summary.interrupted && !summary.warnings.iter().any(|w| w.kind == "interrupted") {
        summary.warnings.push(Warning {
            kind: "interrupted".into(),
            message: "stopped by a signal; the numbers cover what ran".into(),
        });
    }
}

/// The warning of a run whose streamed files stopped at `error` (a full disk): which files
/// end before the run did, and why.
fn cut_short(error: &str) -> Warning {
    Warning {
        kind: "results_cut_short".into(),
        message: format!(
            "histograms.hlog and timeline.csv (with endpoints.csv and requests.csv when \
             written) end before the run did: {error}"
        ),
    }
}

/// Writes a finished run into `shown.dir` (if any) and prints it. If the result directory
/// cannot be written, the summary goes to stderr as JSON so nothing is lost, and the error
/// is returned.
fn write_and_show(run: &mut Finished, shown: &Shown) -> anyhow::Result<()> {
    if let Some(dir) = &shown.dir {
        write_dir(run, dir)?;
    }
    if shown.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&run.summary).context("cannot serialise the summary")?
        );
    } else if !shown.quiet && shown.table {
        print!(
            "{}",
            render_text_with(&run.summary, &run.meta.endpoints, &run.meta.hosts)
        );
    }
    Ok(())
}

fn write_dir(run: &mut Finished, dir: &Path) -> anyhow::Result<()> {
    if let Some(e) = run.aggregator.sink_error() {
        eprintln!(
            "creb-rs: warning: writing {} during the run failed: {e}",
            dir.display()
        );
    }
    if let Err(e) = write_final(dir, &run.summary, &run.aggregator, &run.meta) {
        // Nothing is lost: the summary goes to stderr, saying what the directory lacks.
        run.summary.warnings.push(Warning {
            kind: "results_not_written".into(),
            message: format!(
                "{e:#}; the files from that one on (counters.json, meta.json, summary.json, in \
                 this order) are missing or older than this run"
            ),
        });
        if let Ok(json) = serde_json::to_string(&run.summary) {
            eprintln!("{json}");
        }
        return Err(e);
    }
    tracing::info!(dir = %dir.display(), "results written");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_files_cut_short_are_named() {
        let w = cut_short("No space left on device (os error 28)");
        assert_eq!(w.kind, "results_cut_short");
        for name in ["histograms.hlog", "timeline.csv", "No space left"] {
            assert!(w.message.contains(name), "{}", w.message);
        }
    }
}
