//! The capacity search driven over the replay engine: the trace prepared and prewarmed
//! once, then one step after another, each a window of the trace taken up where the last
//! left it (back to its start when it runs out) at the speed the search asks for, measured
//! after a warm-up it does not count, written to `OUT/steps/NN/`, judged; `capacity.json`
//! and the table at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::search::{
    generator_limit, judge_step, Next, ObjectiveVerdict, Outcome, Search, SearchOptions,
};
use crate::replay::{ReplayConfig, Window};
use crate::results::thresholds::Threshold;
use crate::results::RunOutput;
use crate::session::{ExitStatus, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;

/// The file of a capacity search's result, beside its steps.
pub const CAPACITY_JSON: &str = "capacity.json";

/// The folder of the steps' result directories, beside capacity.json.
pub const STEPS_DIR: &str = "steps";

/// Operations a step must measure before its rate is compared with the offered one.
const MIN_OPERATIONS: u64 = 50;

/// What the search is asked.
#[derive(Debug, Clone)]
pub struct CapacityConfig {
    /// Expressions that must hold for a load to be sustained (`--slo`).
    pub objectives: Vec<Threshold>,
    /// The measured length of a step, and the warm-up before it that is not measured.
    pub step: Duration,
    pub warmup: Duration,
    /// No step starts after this long.
    pub max_time: Duration,
    pub search: SearchOptions,
}

/// One step as capacity.json records it.
#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub index: usize,
    /// The trace's speed factor offered.
    pub speed: f64,
    /// Where in the trace the step's window started and how long it was (trace time).
    pub trace_from_s: f64,
    pub trace_length_s: f64,
    /// The measured part of the step's schedule, seconds.
    pub length_s: f64,
    /// Operations per second the window's records asked for, and those completed.
    pub offered_rps: f64,
    pub achieved_rps: f64,
    pub outcome: Outcome,
    pub why: Option<String>,
    pub objectives: Vec<ObjectiveVerdict>,
    /// Every operation's p50 and p99 (ms), and the failures by kind.
    pub percentiles: std::collections::BTreeMap<String, [Option<f64>; 2]>,
    pub errors: std::collections::BTreeMap<String, u64>,
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Capacity {
    /// The speed factor of the trace at the capacity, and the operations per second it
    /// sustained; null when no load passed.
    pub speed: Option<f64>,
    pub requests_per_s: Option<f64>,
    /// The search stopped before it found a load that failed (the ceiling, the generator,
    /// --max-time): the capacity is at least this.
    pub at_least: bool,
}

/// `capacity.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityResult {
    pub objectives: Vec<String>,
    pub step_s: f64,
    pub warmup_s: f64,
    pub trace_span_s: f64,
    pub steps: Vec<StepRecord>,
    pub capacity: Capacity,
    /// The first load at which the registry answered 429.
    pub throttle_onset: Option<Capacity>,
    /// Why the search ended.
    pub ended: String,
}

/// Runs the search: prepares and prewarms the trace, then steps until the search is done,
/// `max_time` has passed or a stop; writes `capacity.json` into the session's directory.
pub async fn capacity(
    cfg: &ReplayConfig,
    cap: &CapacityConfig,
    input: TraceInput,
    session: Session,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let (mut engine, session) = match crate::replay::ready(cfg, input, session, shutdown).await? {
        Ok(ready) => ready,
        Err(status) => return Ok(status),
    };
    let prewarmed = engine.prewarm(&session, shutdown).await?;
    if shutdown.is_cancelled() || prewarmed != ExitStatus::Success {
        session.close().await;
        return Ok(prewarmed.max_with(ExitStatus::Failed));
    }
    if let Some(dir) = &session.output.dir {
        clear_steps(&dir.join(STEPS_DIR))?;
    }
    let span = engine.span();
    let mut search = Search::new(cap.search);
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut cursor = Duration::ZERO;
    let mut failure = None;
    let ended = loop {
        let (speed, length) = match search.next() {
            Next::Step { speed, length } => (speed, length),
            Next::Done { .. } => break "the search converged".to_owned(),
        };
        if shutdown.is_cancelled() {
            break "stopped".to_owned();
        }
        if started.elapsed() >= cap.max_time {
            break "--max-time".to_owned();
        }
        let measured = cap.step.mul_f64(length);
        let trace_len = (cap.warmup + measured)
            .mul_f64(speed)
            .min(span.max(Duration::from_millis(1)));
        if cursor + trace_len > span {
            cursor = Duration::ZERO;
        }
        let window = Window {
            from: cursor,
            length: Some(trace_len),
        };
        cursor += trace_len;
        let dir = session
            .output
            .dir
            .as_ref()
            .map(|d| d.join(STEPS_DIR).join(format!("{:02}", steps.len())));
        // Intervals fine enough that the warm-up left out is the one asked for (whole
        // intervals) and a step has batches for its intervals and its steadiness.
        let interval = (measured / 20).clamp(Duration::from_millis(10), session.output.interval);
        let output = RunOutput {
            dir: dir.clone(),
            warmup: cap.warmup,
            interval,
            live: None,
            ..session.output.clone()
        };
        // A step that cannot be run or written ends the search; what it found so far is
        // still written.
        let measured = engine
            .measure(speed, Some(window), &session, &output, shutdown)
            .await;
        let finished = match measured {
            Ok(finished) => finished,
            Err(e) => {
                failure = Some(format!("{e:#}"));
                break format!("step {} failed: {e:#}", steps.len());
            }
        };
        if let Some(dir) = &dir {
            let written = crate::results::store::write_final(
                dir,
                &finished.summary,
                &finished.aggregator,
                &finished.meta,
            );
            if let Err(e) = written {
                failure = Some(format!("{e:#}"));
                break format!("step {} could not be written: {e:#}", steps.len());
            }
        }
        let mut record = judge(cap, &finished, steps.len(), speed, window);
        if shutdown.is_cancelled() {
            // Cut off by a stop: kept, but no verdict of the registry.
            record.outcome = Outcome::Undecided;
            record.why = Some("cut off by a stop or --max-run-time".into());
            steps.push(record);
            break "stopped".to_owned();
        }
        if !session.quiet() {
            eprintln!("creb-rs: {}", step_line(&record));
        }
        search.record(record.outcome);
        steps.push(record);
    };
    let result = answer(cap, span, steps, &search, ended);
    if let Some(dir) = &session.output.dir {
        write_result(dir, &result)?;
    }
    if session.flags.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else if !session.quiet() {
        print!("{}", render(&result));
    }
    session.close().await;
    if let Some(e) = failure {
        eprintln!("creb-rs: error: {e}");
        return Ok(ExitStatus::Usage);
    }
    Ok(if shutdown.is_cancelled() {
        if shutdown.by_limit() {
            ExitStatus::Success
        } else {
            ExitStatus::Interrupted
        }
    } else {
        ExitStatus::Success
    })
}

/// The record of one finished step.
fn judge(
    cap: &CapacityConfig,
    finished: &crate::session::Finished,
    index: usize,
    speed: f64,
    window: Window,
) -> StepRecord {
    let summary = &finished.summary;
    let (mut outcome, objectives, mut why) =
        judge_step(&cap.objectives, summary, &finished.aggregator.table);
    // Offered: the operations the window's records asked for, over its schedule; achieved:
    // those completed in the measured part, over its length.
    let replayed = summary.trace.as_ref().map_or(0, |t| t.replayed) as f64;
    let schedule = window.length.unwrap_or_default().as_secs_f64() / speed.max(1e-9);
    let offered_rps = replayed / schedule.max(1e-9);
    // The step lasts its window's schedule even when its last operation ends earlier.
    let measured = (schedule - summary.warmup_s.unwrap_or(0.0)).max(1e-9);
    let achieved_rps = summary.totals.requests as f64 / measured;
    if summary.totals.requests == 0 {
        outcome = Outcome::Undecided;
        why = Some("no operation in the step's window of the trace".into());
    } else if outcome == Outcome::Sustained
        && summary.totals.requests >= MIN_OPERATIONS
        && achieved_rps < 0.8 * offered_rps
    {
        // Open model: a step whose registry completed well under what it was offered fell
        // behind, whatever its percentiles say.
        outcome = Outcome::Unsustained;
        why = Some(format!(
            "achieved {achieved_rps:.1} op/s of the {offered_rps:.1} offered"
        ));
    }
    if outcome != Outcome::Sustained {
        if let Some(limit) = generator_limit(summary) {
            // The registry may not be to blame: the load was not offered as meant.
            outcome = Outcome::GeneratorLimited;
            why = Some(limit);
        }
    }
    StepRecord {
        index,
        speed,
        trace_from_s: window.from.as_secs_f64(),
        trace_length_s: window.length.unwrap_or_default().as_secs_f64(),
        length_s: measured,
        offered_rps,
        achieved_rps,
        outcome,
        why,
        objectives,
        percentiles: summary
            .operations
            .iter()
            .map(|(op, s)| {
                let l = s.latency_ms.as_ref();
                (op.clone(), [l.and_then(|l| l.p50), l.and_then(|l| l.p99)])
            })
            .collect(),
        errors: summary.errors.clone(),
    }
}

/// The answer from the steps: the highest speed sustained, its rate; the throttle onset.
fn answer(
    cap: &CapacityConfig,
    span: Duration,
    steps: Vec<StepRecord>,
    search: &Search,
    ended: String,
) -> CapacityResult {
    let (speed, at_least) = match search.next() {
        Next::Done { capacity, at_least } => (capacity, at_least),
        Next::Step { .. } => (search.passed(), true),
    };
    let rate_at = |speed: f64| {
        steps
            .iter()
            .filter(|s| s.speed == speed && s.outcome == Outcome::Sustained)
            .map(|s| s.achieved_rps)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
    };
    let throttle_onset = steps
        .iter()
        .filter(|s| s.errors.get("http_429").copied().unwrap_or(0) > 0)
        .min_by(|a, b| a.speed.total_cmp(&b.speed))
        .map(|s| Capacity {
            speed: Some(s.speed),
            requests_per_s: Some(s.achieved_rps),
            at_least: false,
        });
    CapacityResult {
        objectives: cap.objectives.iter().map(ToString::to_string).collect(),
        step_s: cap.step.as_secs_f64(),
        warmup_s: cap.warmup.as_secs_f64(),
        trace_span_s: span.as_secs_f64(),
        capacity: Capacity {
            speed,
            requests_per_s: speed.and_then(rate_at),
            at_least,
        },
        steps,
        throttle_onset,
        ended,
    }
}

/// The steps of an earlier search in a reused output directory go first (their results
/// removed as a reused result directory's are; other files stay), so that `steps/` holds
/// this search's steps only.
fn clear_steps(steps: &Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(steps) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            crate::results::prepare_result_dir(&path, false)?;
            let _ = std::fs::remove_dir(&path);
        }
    }
    Ok(())
}

fn write_result(dir: &Path, result: &CapacityResult) -> anyhow::Result<()> {
    let path = dir.join(CAPACITY_JSON);
    let text = serde_json::to_string_pretty(result)?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// One step in one line, as it finishes.
fn step_line(s: &StepRecord) -> String {
    format!(
        "step {:>2}: {:>7.3}x  offered {:>8.1} op/s  achieved {:>8.1} op/s  {:?}{}",
        s.index,
        s.speed,
        s.offered_rps,
        s.achieved_rps,
        s.outcome,
        s.why.as_ref().map_or(String::new(), |w| format!(" ({w})"))
    )
}

/// The steps and the answer, as a table.
pub fn render(r: &CapacityResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4} {:>9} {:>12} {:>12} {:<14} why",
        "step", "speed", "offered/s", "achieved/s", "outcome"
    );
    for s in &r.steps {
        let _ = writeln!(
            out,
            "{:>4} {:>8.3}x {:>12.1} {:>12.1} {:<14} {}",
            s.index,
            s.speed,
            s.offered_rps,
            s.achieved_rps,
            format!("{:?}", s.outcome).to_lowercase(),
            s.why.as_deref().unwrap_or("")
        );
    }
    let at_least = if r.capacity.at_least { "at least " } else { "" };
    match (r.capacity.speed, r.capacity.requests_per_s) {
        (Some(speed), rate) => {
            let _ = writeln!(
                out,
                "\ncapacity: {at_least}{speed:.3}x the trace's load{} ({})",
                rate.map_or(String::new(), |r| format!(", {r:.1} operations/s")),
                r.ended
            );
        }
        (None, _) => {
            let _ = writeln!(out, "\ncapacity: no load sustained ({})", r.ended);
        }
    }
    if let Some(t) = &r.throttle_onset {
        let _ = writeln!(
            out,
            "throttled (429) from {:.3}x, {:.1} operations/s",
            t.speed.unwrap_or_default(),
            t.requests_per_s.unwrap_or_default()
        );
    }
    out
}
