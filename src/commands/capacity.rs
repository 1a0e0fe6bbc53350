//! `creb-rs capacity`: the flags of a capacity search (a replay's flags, plus the
//! objectives and the steps; always in delay mode, whatever `--mode` says), their
//! validation, and the hand-over to [`crate::capacity`].

use std::time::Duration;

use clap::Args;

use super::replay::{PhaseArg, ReplayArgs, ReplayConfig};
use crate::capacity::{CapacityConfig, Gate, SearchOptions};
use crate::exec::Mode;
use crate::results::thresholds::{parse_all, MaxErrors};
use crate::session::{ExitStatus, OutputOptions, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;
use crate::units::parse_duration;

use super::args::parse_speed;

pub const SHORT_EXAMPLES: &str = "\
Examples:
  # the load docker-registry sustains with p99 blob GETs under 2 s and under 1% errors;
  # exit 3 (CI) unless that is at least 500 operations per second
  creb-rs capacity trace.json --registry http://127.0.0.1:5000 --output-dir out \\
    --slo 'p99(blob_get) < 2s' --slo 'error_rate < 1%' --fail-if 'capacity < 500/s'";

pub const EXAMPLES: &str = "\
Examples:
  # the load docker-registry sustains with p99 blob GETs under 2 s and under 1% errors;
  # exit 3 (CI) unless that is at least 500 operations per second
  creb-rs capacity trace.json --registry http://127.0.0.1:5000 --output-dir out \\
    --slo 'p99(blob_get) < 2s' --slo 'error_rate < 1%' --fail-if 'capacity < 500/s'
  # where a rate limiter starts to throttle
  creb-rs capacity trace.json --registry http://127.0.0.1:8080 --slo 'errors(http_429) == 0'
  # many hosts: the same fixed ladder of loads from a shared start, one shard each, merged
  creb-rs capacity trace.json --registry http://registry:5000 --slo 'p99(all) < 1s' \\
    --ladder 1,2,4,8 --shard 0/2 --start-at 2026-01-01T12:00:00Z --output-dir out/host-0
  creb-rs merge out/host-0 out/host-1 --output-dir out/merged";

#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// What must hold for a load to be sustained (repeatable), written like --fail-if:
    /// 'p99(blob_get) < 2s', 'error_rate < 1%', 'errors(http_429) == 0'.
    ///
    /// A latency without a unit is in milliseconds. Beyond these, a step whose operations
    /// failed more than --max-errors allows (1% by default) is never sustained.
    #[arg(long, value_name = "EXPR", required = true)]
    pub slo: Vec<String>,

    /// The measured length of one step.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    pub step: Duration,

    /// The start of every step that is not measured (the registry settles at the new load).
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "2s", value_parser = parse_duration)]
    pub step_warmup: Duration,

    /// No step starts after the search has run this long.
    #[arg(hide_short_help = true, long, value_name = "D", default_value = "10m", value_parser = parse_duration)]
    pub max_time: Duration,

    /// The highest speed factor offered.
    #[arg(hide_short_help = true, long, value_name = "X", default_value = "1024", value_parser = parse_speed)]
    pub max_speed: f64,

    /// The search narrows until the failing load is within this share of the passing one.
    #[arg(hide_short_help = true, long, value_name = "P%", default_value = "5%", value_parser = parse_share)]
    pub resolution: f64,

    /// A fixed ladder of loads instead of the search (speed factors, ascending), every step
    /// run: with a shared --start-at and one --shard per host, `merge` merges the hosts
    /// step by step and finds the knee.
    #[arg(hide_short_help = true, long, value_name = "X,X,...", value_delimiter = ',', value_parser = parse_speed)]
    pub ladder: Vec<f64>,

    #[command(flatten)]
    pub replay: ReplayArgs,
}

fn parse_share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(0.1..=100.0).contains(&v) {
        return Err(format!("'{s}': between 0.1% and 100%"));
    }
    Ok(v / 100.0)
}

/// Refuses what no search can run: a --max-time shorter than one step, only a prewarm, a
/// ladder that does not ascend.
fn check(args: &CapacityArgs) -> anyhow::Result<()> {
    let one_step = args.step.max(Duration::from_millis(100)) + args.step_warmup;
    if args.max_time < one_step {
        anyhow::bail!(
            "--max-time {:?} leaves no step: a step lasts {:?} (--step-warmup and --step); \
             give at least that",
            args.max_time,
            one_step
        );
    }
    if args.replay.phase == PhaseArg::Prewarm {
        anyhow::bail!(
            "capacity prewarms, then runs its steps (--phase run: only the steps); a prewarm \
             alone is `creb-rs replay --phase prewarm`"
        );
    }
    if args.ladder.windows(2).any(|w| w[1] <= w[0]) {
        anyhow::bail!("--ladder: the loads ascend, each above the last");
    }
    Ok(())
}

/// Runs `creb-rs capacity`.
pub async fn run(args: CapacityArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    check(&args)?;
    let gates = args
        .replay
        .output
        .fail_if
        .iter()
        .map(|t| Gate::parse(t).map_err(|e| anyhow::anyhow!("--fail-if '{t}': {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // An open model always (the trace's timing, sped up): a closed loop finds only its own
    // ceiling. Prewarmed once (--phase all), then the steps.
    let cfg = ReplayConfig::in_mode(&args.replay, Mode::Delay)?;
    let objectives =
        parse_all(&args.slo).map_err(|e| anyhow::anyhow!("--slo '{}': {}", e.text, e.reason))?;
    if let Some(t) = objectives.iter().find(|t| t.needs_baseline()) {
        anyhow::bail!(
            "--slo '{t}': an objective is a limit of its own, not one relative to a baseline"
        );
    }
    let cap = CapacityConfig {
        objectives,
        step: args.step.max(Duration::from_millis(100)),
        warmup: args.step_warmup,
        max_time: args.max_time,
        search: SearchOptions {
            start: args.replay.speed,
            ceiling: args.max_speed,
            resolution: args.resolution,
            ..SearchOptions::default()
        },
        max_errors: args
            .replay
            .output
            .max_errors
            .unwrap_or(MaxErrors::Percent(1.0)),
        gates,
        ladder: (!args.ladder.is_empty()).then(|| args.ladder.clone()),
    };
    let input = TraceInput::resolve(&cfg.traces)?;
    cfg.check_paths(&input, args.replay.output.output_dir.as_deref())?;
    let names = cfg.registry.endpoint_names();
    let quiet = args.replay.output.quiet || args.replay.output.json;
    super::limits::prepare(cfg.concurrency, names.len(), "--concurrency", quiet)?;
    // The gates judge the answer, not each step.
    let output = OutputOptions {
        fail_if: Vec::new(),
        ..OutputOptions::from(&args.replay.output)
    };
    let labels = crate::replay::labels(&cfg);
    let session = Session::open(&output, labels, &names, cfg.plan.shard.index).await?;
    args.replay.stop.arm(&shutdown);
    crate::capacity::capacity(&cfg, &cap, input, session, &shutdown).await
}
