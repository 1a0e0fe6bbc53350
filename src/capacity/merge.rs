//! `creb-rs merge` of capacity ladders: the hosts' steps merged exactly, step by step (each
//! by [`crate::merge::merge_into`]: histograms add, nothing averages), every merged step
//! judged again against the ladder's objectives on its merged histograms, and the knee
//! found from the merged steps. A search cannot be merged: each host chose its loads from
//! its own steps.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use super::run::{judge, knee, result_of, Head, Rules, StepAt};
use crate::metrics::Scheduled;
use crate::replay::Window;
use crate::results::capacity::{CapacityResult, Kind, Outcome, StepRecord};
use crate::results::store::{aggregator_of, load};
use crate::results::thresholds::MaxErrors;
use crate::results::thresholds::{parse_all, Threshold};
use crate::results::STEPS_DIR;

/// Whether `dir` holds a capacity search or ladder (its `capacity.json`).
pub fn is_capacity(dir: &Path) -> bool {
    CapacityResult::is_in(dir)
}

/// One host's capacity.json.
struct Host {
    dir: PathBuf,
    result: CapacityResult,
}

impl Host {
    fn read(dir: &Path) -> anyhow::Result<Host> {
        Ok(Host {
            dir: dir.to_owned(),
            result: CapacityResult::read(dir)?,
        })
    }

    fn steps(&self) -> &[StepRecord] {
        &self.result.steps
    }
}

/// What hosts running the same ladder share, field by field, as written.
fn head(r: &CapacityResult) -> [(&'static str, String); 4] {
    [
        ("objectives", format!("{:?}", r.objectives)),
        ("step_s", format!("{:?}", r.step_s)),
        ("warmup_s", format!("{:?}", r.warmup_s)),
        ("trace_span_s", format!("{:?}", r.trace_span_s)),
    ]
}

/// The hosts ran the same ladder (a ladder each, the same objectives, steps, warm-up,
/// trace and speeds): how many steps every one of them ran.
fn same_ladder(hosts: &[Host]) -> anyhow::Result<usize> {
    let Some(first) = hosts.first() else {
        bail!("nothing to merge");
    };
    for h in hosts {
        if h.result.kind != Kind::Ladder {
            bail!(
                "{} is a capacity search: each host chose its loads from its own steps, so \
                 searches do not merge; run the same --ladder on every host",
                h.dir.display()
            );
        }
        for ((field, ours), (_, theirs)) in head(&first.result).into_iter().zip(head(&h.result)) {
            if ours != theirs {
                bail!(
                    "{} and {} are not the same ladder: their {field} differ ({ours} against \
                     {theirs})",
                    first.dir.display(),
                    h.dir.display(),
                );
            }
        }
    }
    let speeds = |h: &Host| -> Vec<f64> { h.steps().iter().map(|s| s.speed).collect() };
    let count = hosts.iter().map(|h| h.steps().len()).min().unwrap_or(0);
    for h in hosts {
        if speeds(h)[..count] != speeds(first)[..count] {
            bail!(
                "{} and {} ran different ladders",
                first.dir.display(),
                h.dir.display()
            );
        }
    }
    if hosts.iter().any(|h| h.steps().len() != count) {
        eprintln!(
            "creb-rs: warning: the hosts ran different numbers of steps; the first {count}, \
             which every host ran, are merged"
        );
    }
    Ok(count)
}

/// One step of the merged ladder.
struct MergedStep {
    index: usize,
    max_errors: MaxErrors,
    warmup_s: f64,
    partial: bool,
    force: bool,
}

impl MergedStep {
    /// Where the step stood in the ladder, from the first host's record, with the hosts'
    /// offered and scheduled operations added.
    fn at(&self, hosts: &[Host]) -> StepAt {
        let (index, warmup_s) = (self.index, self.warmup_s);
        let first = &hosts[0];
        let step = &first.steps()[index];
        let seconds = |s: f64| Duration::from_secs_f64(s.max(0.0));
        let speed = step.speed;
        // The step's own warm-up: the ladder's, or its share of a step cut to the trace.
        let schedule = step.trace_length_s / speed.max(1e-9);
        let step_warmup = step.length_s.map_or(warmup_s, |measured| {
            (schedule - measured).clamp(0.0, warmup_s)
        });
        StepAt {
            index,
            speed,
            window: Window {
                from: seconds(step.trace_from_s),
                length: Some(seconds(step.trace_length_s)),
            },
            warmup_s: step_warmup,
            // The hosts' due operations, back from their rates over the same length.
            offered: Some(
                hosts
                    .iter()
                    .map(|h| {
                        let s = &h.steps()[index];
                        let due = s.offered_rps * s.length_s.unwrap_or(0.0);
                        due.round() as u64
                    })
                    .sum(),
            ),
            // The hosts' operations of the measured part, by outcome (none recorded by an
            // older ladder: the merged totals then stand for them).
            scheduled: hosts
                .iter()
                .map(|h| {
                    let s = &h.steps()[index];
                    Some(Scheduled {
                        ok: s.operations_ok?,
                        failed: s.operations_failed?,
                    })
                })
                .try_fold(Scheduled::default(), |sum, host| {
                    host.map(|h| Scheduled {
                        ok: sum.ok + h.ok,
                        failed: sum.failed + h.failed,
                    })
                }),
        }
    }

    /// Merges the hosts' results of this step into `out/steps/NN/` and judges the merged
    /// step against `thresholds`.
    fn judge(
        &self,
        hosts: &[Host],
        out: &Path,
        thresholds: &[Threshold],
    ) -> anyhow::Result<StepRecord> {
        let index = self.index;
        let name = format!("{index:02}");
        let parts: Vec<PathBuf> = hosts
            .iter()
            .map(|h| h.dir.join(STEPS_DIR).join(&name))
            .collect();
        let merged_dir = out.join(STEPS_DIR).join(&name);
        std::fs::create_dir_all(&merged_dir)
            .with_context(|| format!("cannot create {}", merged_dir.display()))?;
        let (summary, _) = crate::merge::merge_into(&parts, &merged_dir, self.partial, self.force)
            .with_context(|| format!("step {index}"))?;
        let set = load(&merged_dir)?;
        let aggregator = aggregator_of(&set.counters, &set.hlog)?;
        let at = self.at(hosts);
        let rules = Rules {
            objectives: thresholds,
            max_errors: self.max_errors,
        };
        let mut record = judge(rules, &summary, aggregator.table(), at);
        // Whether a host's generator kept up is that host's to say (a merged result has no
        // generator of its own).
        let held_back = hosts
            .iter()
            .map(|h| &h.steps()[index])
            .find(|s| s.outcome == Outcome::GeneratorLimited);
        if let (Some(s), false) = (held_back, record.outcome == Outcome::Sustained) {
            record.outcome = Outcome::GeneratorLimited;
            record.why.clone_from(&s.why);
        }
        Ok(record)
    }
}

/// Merges the ladders in `dirs` into `out`: `out/steps/NN/` each a merged result
/// directory, `out/capacity.json` the merged ladder with its knee.
pub fn merge_ladders(
    dirs: &[PathBuf],
    out: &Path,
    partial: bool,
    force: bool,
) -> anyhow::Result<CapacityResult> {
    let hosts: Vec<Host> = dirs
        .iter()
        .map(|d| Host::read(d))
        .collect::<anyhow::Result<_>>()?;
    let count = same_ladder(&hosts)?;
    // One result per directory: an earlier result there (a run's, a merge's, a ladder's)
    // goes first, as for every command that writes one — never one of the ladders merged.
    if let Some(d) = dirs.iter().find(|d| crate::outfile::same_path(d, out)) {
        anyhow::bail!(
            "--output-dir {}: {} is one of the ladders being merged; write the merge elsewhere",
            out.display(),
            d.display()
        );
    }
    crate::results::prepare_result_dir(out, force)?;
    let first = &hosts[0];
    let objectives = first.result.objectives.clone();
    let thresholds = parse_all(&objectives).map_err(|e| {
        anyhow::anyhow!(
            "{}: objective '{}': {}",
            first.dir.display(),
            e.text,
            e.reason
        )
    })?;
    let warmup_s = first.result.warmup_s;
    let max_errors: MaxErrors = first
        .result
        .max_errors
        .parse()
        .map_err(|e| anyhow::anyhow!("{}: max_errors: {e}", first.dir.display()))?;
    let mut steps = Vec::new();
    for index in 0..count {
        let merged = MergedStep {
            index,
            max_errors,
            warmup_s,
            partial,
            force,
        };
        steps.push(merged.judge(&hosts, out, &thresholds)?);
    }
    let (speed, at_least, ended) = knee(&steps);
    let head = Head {
        kind: Kind::Ladder,
        objectives,
        max_errors: max_errors.to_string(),
        step_s: first.result.step_s,
        warmup_s,
        trace_span_s: first.result.trace_span_s,
    };
    let result = result_of(head, steps, (speed, at_least), ended, &[]);
    result.write(out)?;
    Ok(result)
}
