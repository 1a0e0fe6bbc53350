//! `creb-rs replay`: the flags of a replay, their validation, and the hand-over to the
//! replay engine ([`crate::replay`]), which does the rest.

mod config;

use crate::session::{ExitStatus, OutputOptions, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;

pub use crate::replay::{ReplayConfig, RoutingConfig};
pub use config::{
    shard_from_env, ModeArg, PhaseArg, ReplayArgs, ShardByArg, UploadChoice, EXAMPLES,
    SHORT_EXAMPLES,
};

/// Runs `creb-rs replay`.
pub async fn run(args: ReplayArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = ReplayConfig::try_from(&args)?;
    let input = TraceInput::resolve(&cfg.traces)?;
    cfg.check_paths(&input, args.output.output_dir.as_deref())?;
    let names = cfg.registry.endpoint_names();
    let in_flight = cfg.concurrency.max(cfg.prewarm_concurrency);
    let quiet = args.output.quiet || args.output.json;
    if cfg.mode == crate::exec::Mode::Stress && args.speed != 1.0 && !quiet {
        // A closed loop has no schedule to speed up: said, never ignored silently.
        eprintln!(
            "creb-rs: warning: --speed {} has no effect in stress mode (a closed loop runs as \
             fast as --concurrency allows); --mode delay replays at {}x the trace's pace",
            args.speed, args.speed
        );
    }
    crate::commands::limits::prepare(in_flight, names.len(), "--concurrency", quiet)?;
    let output = OutputOptions::from(&args.output);
    let labels = crate::replay::labels(&cfg);
    let session = Session::open(&output, labels, &names, cfg.plan.shard.index).await?;
    args.stop.arm(&shutdown);
    if args.dry_run {
        return crate::replay::dry_run(&input, &cfg, &session, &shutdown).await;
    }
    crate::replay::replay(&cfg, input, session, &shutdown).await
}
