//! `creb-rs capacity`: the flags of a capacity search (a replay's flags, plus the
//! objectives and the steps; always in delay mode, whatever `--mode` says), their
//! validation, and the hand-over to [`crate::capacity`].

use std::time::Duration;

use clap::Args;

use super::replay::{PhaseArg, ReplayArgs, ReplayConfig};
use crate::capacity::{CapacityConfig, SearchOptions};
use crate::exec::{Mode, Phase};
use crate::results::thresholds::parse_all;
use crate::session::{ExitStatus, OutputOptions, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;
use crate::units::parse_duration;

pub const EXAMPLES: &str = "\
Examples:
  # the load docker-registry sustains with p99 image pulls under 2 s and under 1% errors
  creb-rs capacity trace.json --registry http://127.0.0.1:5000 \\
    --slo 'p99(blob_get) < 2s' --slo 'error_rate < 1%' --output-dir out
  # where a rate limiter starts to throttle
  creb-rs capacity trace.json --registry http://127.0.0.1:8080 --slo 'errors(http_429) == 0'";

#[derive(Debug, Clone, Args)]
pub struct CapacityArgs {
    /// What must hold for a load to be sustained (repeatable), written like --fail-if:
    /// 'p99(blob_get) < 2s', 'error_rate < 1%', 'errors(http_429) == 0'.
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
    #[arg(hide_short_help = true, long, value_name = "X", default_value = "1024")]
    pub max_speed: f64,

    /// The search narrows until the failing load is within this share of the passing one.
    #[arg(hide_short_help = true, long, value_name = "P%", default_value = "5%", value_parser = parse_share)]
    pub resolution: f64,

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

/// Runs `creb-rs capacity`.
pub async fn run(args: CapacityArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    if args.max_speed.is_nan() || args.max_speed <= 0.0 {
        anyhow::bail!("--max-speed must be above 0");
    }
    if args.replay.phase != PhaseArg::All {
        anyhow::bail!("capacity prewarms, then runs its steps: --phase is replay's");
    }
    if !args.replay.output.fail_if.is_empty() {
        anyhow::bail!(
            "capacity is judged by --slo (what must hold at a load); --fail-if is not one of its \
             flags yet"
        );
    }
    let mut cfg = ReplayConfig::try_from(&args.replay)?;
    // An open model always (the trace's timing, sped up): a closed loop finds only its own
    // ceiling. Prewarmed once, then the steps.
    cfg.mode = Mode::Delay;
    cfg.phase = Phase::All;
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
    };
    let input = TraceInput::resolve(&cfg.traces)?;
    cfg.check_paths(&input, args.replay.output.output_dir.as_deref())?;
    let names = cfg.registry.endpoint_names();
    let quiet = args.replay.output.quiet || args.replay.output.json;
    super::limits::prepare(cfg.concurrency, names.len(), "--concurrency", quiet)?;
    let output = OutputOptions::from(&args.replay.output);
    let labels = crate::replay::labels(&cfg);
    let session = Session::open(&output, labels, &names, cfg.plan.shard.index).await?;
    args.replay.stop.arm(&shutdown);
    crate::capacity::capacity(&cfg, &cap, input, session, &shutdown).await
}
