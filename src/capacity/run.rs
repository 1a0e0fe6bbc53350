//! The capacity search driven over the replay engine: the trace prepared and prewarmed
//! once, then one step after another, each a window of the trace taken up where the last
//! left it (back to its start when it runs out) at the speed the search asks for, measured
//! after a warm-up it does not count, written to `OUT/steps/NN/`, judged; `capacity.json`
//! and the table at the end.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use super::gate::Gate;
use super::search::{blame, judge_step, Blame, Next, Outcome, Search, SearchOptions};
use crate::exec::Phase;
use crate::metrics::{Scheduled, StatsTable};
use crate::replay::{ReplayConfig, Window};
use crate::report::capacity::{render, step_line};
use crate::results::capacity::{Capacity, CapacityResult, Kind, LimitedBy, StepRecord};
use crate::results::thresholds::{MaxErrors, Threshold};
use crate::results::STEPS_DIR;
use crate::results::{RunOutput, Summary};
use crate::session::{ExitStatus, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;

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
    /// The failures a step may have before it is not sustained (`--max-errors`).
    pub max_errors: MaxErrors,
    /// `--fail-if` on the answer (`capacity < 500/s`).
    pub gates: Vec<Gate>,
    /// A fixed ladder of loads instead of the search (`--ladder`): every step run, in
    /// order, each one slot after the last from the shared `--start-at`, so that hosts
    /// running one shard each can be merged step by step.
    pub ladder: Option<Vec<f64>>,
}

impl CapacityConfig {
    /// What each step is judged by.
    pub fn rules(&self) -> Rules<'_> {
        Rules {
            objectives: &self.objectives,
            max_errors: self.max_errors,
        }
    }

    /// The time from one ladder step's start to the next: its warm-up, its measured length
    /// and a pause for its last operations to end (a quarter of the step, 2 s at least).
    pub fn slot(&self) -> Duration {
        self.warmup + self.step + (self.step / 4).max(Duration::from_secs(2))
    }
}

/// Runs the search: prepares and prewarms the trace, then steps until the search is done,
/// `max_time` has passed or a stop; writes `capacity.json` into the session's directory.
#[allow(clippy::too_many_lines)]
pub async fn capacity(
    cfg: &ReplayConfig,
    cap: &CapacityConfig,
    input: TraceInput,
    session: Session,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let (mut engine, session) = match crate::replay::ready(cfg, input, session, shutdown).await? {
        Ok(ready) => ready,
        Err(status) => return Ok(status),
    };
    let pace = Pace {
        records: engine.records(),
        span: engine.span(),
    };
    if let Err(e) = pace.check(cap) {
        // Refused before any load: no step of it could judge anything.
        session.close().await;
        eprintln!("creb-rs: error: {e}");
        return Ok(ExitStatus::Usage);
    }
    if !session.quiet() {
        eprintln!("creb-rs: {}", pace.describe(cap));
    }
    if cfg.phase == Phase::Run {
        // Prewarmed before (by `replay --phase prewarm`, or a host of its own): a sample of
        // what the steps read is checked to be there.
        match engine.check_prewarm(&session, shutdown).await {
            Ok(Some(gaps)) if !session.quiet() => eprintln!("creb-rs: warning: {gaps}"),
            Ok(_) => {}
            Err(message) => return engine.unrun(session, shutdown, Some(message)).await,
        }
    } else {
        let prewarmed = engine.prewarm(&session, shutdown).await?;
        if shutdown.is_cancelled() || prewarmed != ExitStatus::Success {
            session.close().await;
            return Ok(prewarmed.max_with(ExitStatus::Failed));
        }
    }
    if let Some(dir) = &session.output.dir {
        clear_steps(&dir.join(STEPS_DIR))?;
    }
    let span = engine.span();
    // --max-time counts from the first step: a long prewarm never leaves no step.
    let started = Instant::now();
    let mut search = Search::new(cap.search);
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut stepper = Stepper {
        engine: &engine,
        cfg,
        cap,
        session: &session,
        shutdown,
        span,
        cursor: Duration::ZERO,
    };
    let mut failure = None;
    let ended = loop {
        let next = match &cap.ladder {
            Some(ladder) => match ladder.get(steps.len()) {
                Some(&speed) => Next::Step { speed, length: 1.0 },
                None => break End::LadderRan,
            },
            None => search.next(),
        };
        let (speed, length) = match next {
            Next::Step { speed, length } => (speed, length),
            Next::Done { .. } => match steps.last() {
                Some(last) if last.outcome == Outcome::GeneratorLimited => {
                    break End::held_back(last)
                }
                _ => break End::Converged,
            },
        };
        if shutdown.is_cancelled() {
            break End::Stopped;
        }
        if started.elapsed() >= cap.max_time {
            break End::MaxTime;
        }
        // A step that cannot be run or written ends the search; what it found so far is
        // still written.
        let mut record = match stepper.step(steps.len(), speed, length).await {
            Ok(record) => record,
            Err(e) => {
                let e = format!("step {} {e}", steps.len());
                failure = Some(e.clone());
                break End::Failed(e);
            }
        };
        if shutdown.is_cancelled() {
            // Cut off by a stop: kept, but no verdict of the registry.
            record.outcome = Outcome::Undecided;
            record.why = Some("cut off by a stop or --max-run-time".into());
            steps.push(record);
            break End::Stopped;
        }
        if !session.quiet() {
            eprintln!("creb-rs: {}", step_line(&record));
        }
        if stopped_answering(&record) {
            let e = format!(
                "the registry stopped answering at step {} ({:.3}x): all {} operations failed \
                 without an answer ({}); what was found before it is kept",
                record.index,
                record.speed,
                record.operations_failed.unwrap_or(0),
                record.errors.keys().cloned().collect::<Vec<_>>().join(", ")
            );
            steps.push(record);
            failure = Some(e.clone());
            break End::Failed(e);
        }
        if cap.ladder.is_none() {
            search.record(record.outcome);
        }
        steps.push(record);
    };
    let result = answer(cap, span, steps, &search, ended);
    finish(cap, session, shutdown, &result, failure).await
}

/// Operations a step should measure for a p99 to be judged beyond its uncertainty (its
/// 95% interval needs a few hundred samples around the 99th).
const JUDGED_OPERATIONS: f64 = 500.0;

/// The trace's pace: its records over its span, what a step holds at a speed.
#[derive(Debug, Clone, Copy)]
struct Pace {
    records: u64,
    span: Duration,
}

impl Pace {
    /// Records per second of the trace at 1×.
    fn rate(&self) -> f64 {
        self.records as f64 / self.span.as_secs_f64().max(1e-3)
    }

    /// Records a step (warm-up and measured part) holds at `speed`.
    fn per_step(&self, cap: &CapacityConfig, speed: f64) -> f64 {
        self.rate() * (cap.warmup + cap.step).as_secs_f64() * speed
    }

    /// Refuses loads whose step would hold no record of the trace.
    fn check(&self, cap: &CapacityConfig) -> Result<(), String> {
        let speeds = match &cap.ladder {
            Some(ladder) => ladder.clone(),
            None => vec![cap.search.start],
        };
        let flag = if cap.ladder.is_some() {
            "--ladder"
        } else {
            "--speed"
        };
        match speeds.iter().find(|s| self.per_step(cap, **s) < 1.0) {
            Some(speed) => Err(format!(
                "{flag} {speed}: the trace holds {} records over {:.1} s ({:.3} a second), so a \
                 step of {:.1} s at {speed}x would hold no record; give a higher speed (about \
                 {}x for {} operations a step)",
                self.records,
                self.span.as_secs_f64(),
                self.rate(),
                (cap.warmup + cap.step).as_secs_f64(),
                self.suggested(cap),
                JUDGED_OPERATIONS
            )),
            None => Ok(()),
        }
    }

    /// The lowest power of two at which a step measures enough operations to judge a p99.
    fn suggested(&self, cap: &CapacityConfig) -> f64 {
        let measured = self.rate() * cap.step.as_secs_f64();
        let wanted = JUDGED_OPERATIONS / measured.max(1e-9);
        2f64.powi(wanted.log2().ceil().clamp(-20.0, 20.0) as i32)
    }

    /// The trace's mean rate and what the first step measures at its speed, with a start
    /// that measures enough when it is too few.
    fn describe(&self, cap: &CapacityConfig) -> String {
        let start = cap.ladder.as_ref().map_or(cap.search.start, |l| l[0]);
        let measured = self.rate() * cap.step.as_secs_f64() * start;
        let mut text = format!(
            "the trace offers {:.2} records/s at 1x ({} over {:.1} s); a {:.1} s step at {start}x \
             measures about {measured:.0}",
            self.rate(),
            self.records,
            self.span.as_secs_f64(),
            cap.step.as_secs_f64()
        );
        if measured < JUDGED_OPERATIONS {
            let _ = write!(
                text,
                ", too few to judge a p99 beyond its uncertainty: start at --speed {} (about {:.0} \
                 a step) or give a longer --step",
                self.suggested(cap),
                measured / start * self.suggested(cap)
            );
        }
        text
    }
}

/// Writes and shows the answer, closes the session; the exit status: 2 for a step that
/// failed, 130/143 for a stop, 3 for a gate that held.
async fn finish(
    cap: &CapacityConfig,
    session: Session,
    shutdown: &Shutdown,
    result: &CapacityResult,
    failure: Option<String>,
) -> anyhow::Result<ExitStatus> {
    if let Some(dir) = &session.output.dir {
        result.write(dir)?;
    }
    if session.flags.json {
        println!("{}", serde_json::to_string_pretty(result)?);
    } else if !session.quiet() {
        print!("{}", render(result));
    }
    session.close().await;
    if let Some(e) = failure {
        eprintln!("creb-rs: error: {e}");
        return Ok(ExitStatus::Usage);
    }
    if shutdown.is_cancelled() && !shutdown.by_limit() {
        return Ok(ExitStatus::Interrupted);
    }
    Ok(gates_status(cap, result))
}

/// Runs the steps over one prepared engine: where each step's window of the trace lies
/// (taken up where the last left it, back to the start when the rest is too short), when it
/// starts, where its result goes, and its record.
struct Stepper<'a> {
    engine: &'a crate::replay::Engine,
    cfg: &'a ReplayConfig,
    cap: &'a CapacityConfig,
    session: &'a Session,
    shutdown: &'a Shutdown,
    span: Duration,
    /// Where in the trace the next step's window starts.
    cursor: Duration,
}

impl Stepper<'_> {
    /// The window of step `index` at `speed`, `length` times the step long: cut to the
    /// trace's span when it would need more (said once per step).
    fn window(&mut self, index: usize, speed: f64, measured: Duration) -> Window {
        let span = self.span;
        let wanted = (self.cap.warmup + measured).mul_f64(speed);
        let trace_len = wanted.min(span.max(Duration::from_millis(1)));
        if trace_len < wanted && !self.session.quiet() {
            eprintln!(
                "creb-rs: warning: step {index} needs {:.1} s of the trace at {speed:.3}x; it \
                 spans {:.1} s, so the step is cut to {:.2} s, its warm-up in proportion (its \
                 length_s): a longer trace, or a shorter --step",
                wanted.as_secs_f64(),
                span.as_secs_f64(),
                trace_len.as_secs_f64() / speed
            );
        }
        if self.cursor + trace_len > span {
            self.cursor = Duration::ZERO;
        }
        let window = Window {
            from: self.cursor,
            length: Some(trace_len),
        };
        self.cursor += trace_len;
        window
    }

    /// Where step `index` writes its results (`OUT/steps/NN`), with its warm-up, and
    /// intervals fine enough that the warm-up left out is the one asked for (whole
    /// intervals) and a step of `measured` has batches for its intervals and its steadiness.
    fn output(&self, index: usize, warmup: Duration, measured: Duration) -> RunOutput {
        let run = &self.session.output;
        RunOutput {
            dir: run
                .dir
                .as_ref()
                .map(|d| d.join(STEPS_DIR).join(format!("{index:02}"))),
            warmup,
            interval: (measured / 20).clamp(Duration::from_millis(10), run.interval),
            live: None,
            ..run.clone()
        }
    }

    /// Runs step `index` and writes its result directory: its record, or what failed
    /// ("failed: …", "could not be written: …").
    async fn step(&mut self, index: usize, speed: f64, length: f64) -> Result<StepRecord, String> {
        let (cap, session) = (self.cap, self.session);
        let wanted = cap.step.mul_f64(length);
        let window = self.window(index, speed, wanted);
        // A step cut to the trace's span keeps its warm-up's share of it: a warm-up as long
        // as the whole cut step would leave nothing measured.
        let schedule = window.length.unwrap_or_default().div_f64(speed.max(1e-9));
        let warmup = cap
            .warmup
            .mul_f64((schedule.as_secs_f64() / (cap.warmup + wanted).as_secs_f64()).min(1.0));
        let output = self.output(index, warmup, schedule.saturating_sub(warmup));
        let dir = output.dir.clone();
        // A ladder's step k starts k slots after the shared start; a search's first step at
        // it, the others as soon as the last ended.
        let start_at = match (&cap.ladder, self.cfg.start_at_time) {
            (Some(_), Some(t)) => Some(t + cap.slot() * index as u32),
            (None, Some(t)) if index == 0 => Some(t),
            _ => None,
        };
        let finished = self
            .engine
            .measure(
                speed,
                Some(window),
                start_at,
                session,
                &output,
                self.shutdown,
            )
            .await
            .map_err(|e| format!("failed: {e:#}"))?;
        if let Some(dir) = &dir {
            crate::results::store::write_final(
                dir,
                &finished.summary,
                &finished.aggregator,
                &finished.meta,
            )
            .map_err(|e| format!("could not be written: {e:#}"))?;
        }
        let at = StepAt {
            index,
            speed,
            window,
            warmup_s: finished.summary.warmup_s.unwrap_or(0.0),
            offered: Some(finished.aggregator.offered_counted()),
            scheduled: Some(finished.aggregator.scheduled()),
        };
        Ok(judge(
            cap.rules(),
            &finished.summary,
            finished.aggregator.table(),
            at,
        ))
    }
}

/// Exit 3 when a `--fail-if` gate holds, each said on stderr.
fn gates_status(cap: &CapacityConfig, result: &CapacityResult) -> ExitStatus {
    let mut status = ExitStatus::Success;
    for (gate, verdict) in cap.gates.iter().zip(&result.thresholds) {
        if verdict.verdict == "held" {
            status = ExitStatus::ThresholdFailed;
            let bound = if verdict.at_least {
                format!(" (a lower bound: the search ended by {})", result.ended)
            } else {
                String::new()
            };
            eprintln!(
                "creb-rs: --fail-if '{gate}' holds: capacity {}{bound}",
                gate.show(verdict.value)
            );
        }
    }
    status
}

/// Where a step sits: its place, its load, its window of the trace, its warm-up (seconds,
/// as the aggregator left it out).
#[derive(Debug, Clone, Copy)]
pub struct StepAt {
    pub index: usize,
    pub speed: f64,
    pub window: Window,
    pub warmup_s: f64,
    /// Operations the schedule made due after the warm-up, when known (the aggregator
    /// counts them; a merge adds the hosts'): the offered rate of the measured part.
    pub offered: Option<u64>,
    /// Those operations by how they ended (a merge adds the hosts'); else the summary's
    /// totals stand for them.
    pub scheduled: Option<Scheduled>,
}

/// What a step is judged by: the objectives, and the failures it may have before it is
/// not sustained whatever they say (`--max-errors`, 1% by default for a search).
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub objectives: &'a [Threshold],
    pub max_errors: MaxErrors,
}

/// The record of one finished step, from its summary and exact histograms: the objectives'
/// verdicts, the offered and achieved rates, the outcome and why.
#[allow(clippy::too_many_lines)]
pub fn judge(rules: Rules<'_>, summary: &Summary, table: &StatsTable, at: StepAt) -> StepRecord {
    let StepAt {
        index,
        speed,
        window,
        warmup_s: warmup,
        offered,
        scheduled,
    } = at;
    let (mut outcome, objectives, mut why) = judge_step(rules.objectives, summary, table);
    // Offered: the operations the schedule made due in the measured part, over its length
    // (else the window's records over its whole schedule); achieved: those of them that
    // succeeded, over the time until the later of the schedule's end and the last
    // operation's (a backlog drained after the schedule is the registry's time too, so an
    // overloaded step's rate is what it served). Failures are never load served, and an
    // operation due in the warm-up never counts, whenever it ended: achieved ≤ offered.
    let schedule = window.length.unwrap_or_default().as_secs_f64() / speed.max(1e-9);
    let measured = (schedule - warmup).max(1e-9);
    let offered_rps = match offered {
        Some(due) => due as f64 / measured,
        None => {
            let replayed = summary.trace.as_ref().map_or(0, |t| t.replayed) as f64;
            replayed / schedule.max(1e-9)
        }
    };
    let done = scheduled.unwrap_or(Scheduled {
        ok: summary.totals.ok,
        failed: summary.totals.errors,
    });
    let served = measured.max(summary.duration_s - warmup);
    let achieved_rps = done.ok as f64 / served;
    let operations = done.ok + done.failed;
    let too_many_errors = rules.max_errors.exceeded(done.failed, operations);
    if operations == 0 {
        outcome = Outcome::Undecided;
        why = Some("no operation in the step's window of the trace".into());
    } else if too_many_errors {
        // Failures are never capacity: whatever the objectives say, a step that failed
        // more than the bound was not sustained.
        outcome = Outcome::Unsustained;
        why = Some(format!(
            "{} of {operations} operations failed ({:.1}%, more than --max-errors {}): \
             failures are not load served",
            done.failed,
            done.failed as f64 * 100.0 / operations as f64,
            rules.max_errors
        ));
    } else if outcome == Outcome::Sustained
        && operations >= MIN_OPERATIONS
        && achieved_rps < 0.8 * offered_rps
    {
        // Open model: a step whose registry completed well under what it was offered fell
        // behind, whatever its percentiles say.
        outcome = Outcome::Unsustained;
        why = Some(format!(
            "achieved {achieved_rps:.1} op/s of the {offered_rps:.1} offered"
        ));
    }
    if outcome == Outcome::Unsustained {
        match blame(
            summary,
            table,
            rules.objectives,
            offered_rps,
            too_many_errors,
        ) {
            Blame::Generator(limit) => {
                // The registry is not to blame: the load was not offered as meant.
                outcome = Outcome::GeneratorLimited;
                why = Some(limit);
            }
            Blame::Registry(Some(note)) => {
                why = Some(match why {
                    Some(w) => format!("{w}; {note}"),
                    None => note,
                });
            }
            Blame::Registry(None) => {}
        }
    }
    StepRecord {
        index,
        speed,
        trace_from_s: window.from.as_secs_f64(),
        trace_length_s: window.length.unwrap_or_default().as_secs_f64(),
        length_s: Some(measured),
        offered_rps,
        achieved_rps,
        operations_ok: Some(done.ok),
        operations_failed: Some(done.failed),
        outcome,
        why,
        objectives,
        percentiles: summary
            .operations
            .iter()
            .chain(&summary.sessions)
            .map(|(op, s)| {
                let l = s.latency_ms.as_ref();
                (op.clone(), [l.and_then(|l| l.p50), l.and_then(|l| l.p99)])
            })
            .collect(),
        percentiles_ci: summary
            .operations
            .iter()
            .chain(&summary.sessions)
            .map(|(op, s)| {
                let l = s.latency_ms.as_ref();
                (
                    op.clone(),
                    [l.and_then(|l| l.p50_ci), l.and_then(|l| l.p99_ci)],
                )
            })
            .collect(),
        rates: summary
            .operations
            .iter()
            .chain(&summary.sessions)
            .map(|(op, s)| (op.clone(), s.ok as f64 / served))
            .collect(),
        errors: summary.errors.clone(),
    }
}

/// Whether a step shows a registry that stopped answering: nothing succeeded and every
/// failure is one of no answer at all (no connection, no response): the search cannot
/// learn anything more from it, so it ends (exit 2), what it found kept.
pub fn stopped_answering(record: &StepRecord) -> bool {
    const NO_ANSWER: [&str; 6] = [
        "dns",
        "connect",
        "reset",
        "connection_closed",
        "timeout",
        "endpoint_down",
    ];
    record.operations_ok == Some(0)
        && record.operations_failed.is_some_and(|failed| failed > 0)
        && record
            .errors
            .keys()
            .all(|k| NO_ANSWER.contains(&k.as_str()))
}

/// The answer from the steps: the search's (the highest speed sustained and confirmed) or
/// the ladder's knee; its rate, the load above it that failed, the throttle onset, the
/// gates.
fn answer(
    cap: &CapacityConfig,
    span: Duration,
    steps: Vec<StepRecord>,
    search: &Search,
    ended: End,
) -> CapacityResult {
    let (found, ended) = match (&cap.ladder, search.next()) {
        (Some(_), _) if ended == End::LadderRan => {
            let (speed, at_least, ended) = knee(&steps);
            ((speed, at_least), ended)
        }
        (Some(_), _) => ((knee(&steps).0, true), ended),
        (None, Next::Done { capacity, at_least }) => ((capacity, at_least), ended),
        (None, Next::Step { .. }) => ((search.passed(), true), ended),
    };
    let head = Head {
        kind: if cap.ladder.is_some() {
            Kind::Ladder
        } else {
            Kind::Search
        },
        objectives: cap.objectives.iter().map(ToString::to_string).collect(),
        max_errors: cap.max_errors.to_string(),
        step_s: cap.step.as_secs_f64(),
        warmup_s: cap.warmup.as_secs_f64(),
        trace_span_s: span.as_secs_f64(),
    };
    result_of(head, steps, found, ended, &cap.gates)
}

/// Why a search or a ladder ended: `ended` in capacity.json, in words, and what bounds the
/// answer (`limited_by`).
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// The search found its answer (or found none).
    Converged,
    /// Every step of the ladder ran, or it stopped at the first that was not sustained.
    LadderRan,
    MaxTime,
    /// A signal or `--max-run-time`.
    Stopped,
    /// creb-rs could not offer the load of the step at `speed`.
    HeldBack {
        speed: f64,
        why: String,
    },
    /// A ladder's step too close to decide.
    Undecided {
        speed: f64,
        why: String,
    },
    /// A step could not run or be written.
    Failed(String),
}

impl End {
    /// The end at a step the generator could not offer.
    fn held_back(step: &StepRecord) -> End {
        End::HeldBack {
            speed: step.speed,
            why: step.why.clone().unwrap_or_default(),
        }
    }

    /// What bounds an answer that ended so (`at_least`: no load above it failed).
    fn limited_by(&self, at_least: bool) -> LimitedBy {
        match self {
            End::Converged | End::LadderRan if at_least => LimitedBy::Ceiling,
            End::Converged | End::LadderRan => LimitedBy::Registry,
            End::MaxTime => LimitedBy::MaxTime,
            End::Stopped => LimitedBy::Stopped,
            End::HeldBack { .. } => LimitedBy::Generator,
            End::Undecided { .. } => LimitedBy::Undecided,
            End::Failed(_) => LimitedBy::Error,
        }
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Converged => f.write_str("the search converged"),
            End::LadderRan => f.write_str("the ladder ran"),
            End::MaxTime => f.write_str("--max-time"),
            End::Stopped => f.write_str("stopped"),
            End::HeldBack { speed, why } => {
                write!(f, "the generator could not offer {speed:.3}x: {why}")
            }
            End::Undecided { speed, why } => write!(f, "undecided at {speed:.3}x: {why}"),
            End::Failed(e) => f.write_str(e),
        }
    }
}

/// A ladder's knee: the last load sustained before the first that was not (every lower
/// step sustained); a lower bound when none failed, the generator could not offer the next,
/// or the next was too close to decide. The answer, whether it is a lower bound, and why
/// the ladder ends there.
pub fn knee(steps: &[StepRecord]) -> (Option<f64>, bool, End) {
    let mut capacity = None;
    for s in steps {
        match s.outcome {
            Outcome::Sustained => capacity = Some(s.speed),
            Outcome::Unsustained => return (capacity, false, End::LadderRan),
            Outcome::GeneratorLimited => return (capacity, true, End::held_back(s)),
            Outcome::Undecided => {
                let why = s.why.clone().unwrap_or_default();
                let end = End::Undecided {
                    speed: s.speed,
                    why,
                };
                return (capacity, true, end);
            }
        }
    }
    (capacity, true, End::LadderRan)
}

/// What capacity.json says of the search or ladder beside its steps.
#[derive(Debug, Clone)]
pub struct Head {
    pub kind: Kind,
    pub objectives: Vec<String>,
    pub max_errors: String,
    pub step_s: f64,
    pub warmup_s: f64,
    pub trace_span_s: f64,
}

/// capacity.json from its steps and the answer found (`speed`, whether a lower bound).
pub fn result_of(
    head: Head,
    steps: Vec<StepRecord>,
    (speed, at_least): (Option<f64>, bool),
    ended: End,
    gates: &[Gate],
) -> CapacityResult {
    // The load sustained: what the trace offered at that speed (a sustained step served
    // it), the step that offered the most there.
    let at_capacity = speed.and_then(|speed| {
        steps
            .iter()
            .filter(|s| s.speed == speed && s.outcome == Outcome::Sustained)
            .max_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps))
    });
    let throttle_onset = steps
        .iter()
        .filter(|s| s.errors.get("http_429").copied().unwrap_or(0) > 0)
        .min_by(|a, b| a.speed.total_cmp(&b.speed))
        .map(|s| Capacity {
            speed: Some(s.speed),
            requests_per_s: Some(s.offered_rps),
            ..Capacity::default()
        });
    // The lowest load above the answer that a finished step did not sustain.
    let upper = steps
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Unsustained))
        .filter(|s| speed.is_none_or(|c| s.speed > c))
        .min_by(|a, b| a.speed.total_cmp(&b.speed));
    let capacity = Capacity {
        speed,
        requests_per_s: at_capacity.map(|s| s.offered_rps),
        operations_per_s: at_capacity.map(|s| s.rates.clone()).unwrap_or_default(),
        at_least,
        upper_speed: upper.map(|s| s.speed),
        upper_requests_per_s: upper.map(|s| s.offered_rps),
    };
    let thresholds = gates.iter().map(|g| g.judge(&capacity)).collect();
    let limited_by = ended.limited_by(at_least);
    CapacityResult {
        kind: head.kind,
        objectives: head.objectives,
        max_errors: head.max_errors,
        step_s: head.step_s,
        warmup_s: head.warmup_s,
        trace_span_s: head.trace_span_s,
        capacity,
        steps,
        throttle_onset,
        ended: ended.to_string(),
        limited_by,
        thresholds,
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
