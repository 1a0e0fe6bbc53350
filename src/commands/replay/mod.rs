//! `creb-rs replay`: IBM registry traces against a registry.
//!
//! 1. **Catalog** (pass 1, on a blocking thread): the whole trace is read once; objects,
//!    sizes, layers and uploads are learned and every digest is computed in parallel.
//! 2. **Prewarm** (`--phase prewarm|all`): everything the run reads is pushed, measured apart.
//! 3. **Run** (`--phase run|all`): a planner thread streams the trace again into operations
//!    (pass 2) through a bounded channel; the executor carries them out in stress (closed) or
//!    delay (open) mode, while a canary and the CPU clock watch the generator itself. Pass 2
//!    reads the items pass 1 spooled to a temporary file ([`crate::trace::spool`]) instead of
//!    parsing the trace again, unless that file could not be written.
//!
//! Stages, one file each: `catalog` (pass 1), `prewarm`, `pipeline` (the run phase),
//! `validity` (the warnings about what the numbers mean); this file owns the flags, their
//! validation and the order of the stages.
//!
//! The result accounts for every record of this shard:
//! `trace.records = replayed + folded + Σ skipped` (skipped: invalid, duplicate,
//! failed_in_trace, unsupported, late, interrupted).

mod catalog;
mod config;
mod context;
mod pipeline;
mod prewarm;
mod probe;
mod validity;

use std::time::SystemTime;

use crate::commands::session::Session;
use crate::commands::status::ExitStatus;
use crate::metrics::live::RunInfoLabels;
use crate::metrics::ErrorLog;
use crate::plan::catalog::UpFront;
use crate::route::Router;
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;
use crate::units::ByteSize;

pub use config::{
    shard_from_env, ModeArg, Phase, ReplayArgs, ReplayConfig, RoutingConfig, ShardByArg,
    UploadChoice, EXAMPLES, SHORT_EXAMPLES,
};
use context::{connect, Context, Unrun};

/// Runs `creb-rs replay`.
pub async fn run(args: ReplayArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = ReplayConfig::try_from(&args)?;
    let input = TraceInput::resolve(&cfg.traces)?;
    cfg.check_paths(&input, args.output.output_dir.as_deref())?;
    let names = cfg.registry.endpoint_names();
    let in_flight = cfg.concurrency.max(cfg.prewarm_concurrency);
    let quiet = args.output.quiet || args.output.json;
    crate::commands::limits::prepare(in_flight, names.len(), "--concurrency", quiet)?;
    let session = Session::open(&args.output, labels(&cfg), &names, cfg.plan.shard.index).await?;
    args.stop.arm(&shutdown);
    let quiet = session.quiet();
    let spool_dir = args.output.output_dir.clone();
    if args.dry_run {
        return dry_run(&input, &cfg, &args, &session, &shutdown).await;
    }
    // The registry first: an unusable one is known in seconds, before any content is hashed.
    let started_at = SystemTime::now();
    let (connections, checked) = connect(&cfg, &names, &shutdown).await?;
    if let Err(message) = checked {
        let unrun = Unrun::new(&cfg, &names, &connections, started_at);
        return unrun.end(session, &shutdown, Some(message)).await;
    }
    let up = up_front(&cfg, &names);
    let prepared = catalog::prepare(&input, &cfg, spool_dir, &session, &shutdown, up).await?;
    let Some((mut catalog, spool, preparation)) = prepared else {
        let unrun = Unrun::new(&cfg, &names, &connections, started_at);
        return unrun.end(session, &shutdown, None).await;
    };
    let preparation = serde_json::to_value(&preparation).unwrap_or_default();
    if let Some(status) = refused(&cfg, &input, &catalog, quiet)? {
        return Ok(status);
    }
    let dataset = catalog::dataset_json(&cfg, &input, &catalog);
    let router = Router::new(&names, cfg.routing.map(|r| r.route).unwrap_or_default());
    let errors = ErrorLog::default();
    let context = Context {
        cfg: &cfg,
        args: &args,
        session: &session,
        dataset: &dataset,
        connections: &connections,
        names: &names,
        router: &router,
        shutdown: &shutdown,
        errors: &errors,
        preparation: &preparation,
    };
    let mut exit = ExitStatus::Success;
    let mut after_prewarm = None;
    if cfg.phase != Phase::Run {
        let (status, report) = prewarm::phase(&context, &catalog).await?;
        exit = status;
        if shutdown.is_cancelled() {
            // A stop, or --max-run-time, during the prewarm: the run does not start. With
            // --phase all its result is written all the same (no operation, interrupted),
            // beside the prewarm's in OUT/prewarm/.
            if cfg.phase == Phase::All {
                let unrun = Unrun::new(&cfg, &names, &connections, started_at);
                return unrun.end(session, &shutdown, None).await;
            }
            session.close().await;
            return Ok(exit);
        }
        after_prewarm = Some(prewarm::with_digests(&preparation, &report));
        // What only the prewarm read goes before the run starts.
        if let Some(catalog) = std::sync::Arc::get_mut(&mut catalog) {
            catalog.keep_run_only();
        }
    }
    let context = Context {
        preparation: after_prewarm.as_ref().unwrap_or(&preparation),
        ..context
    };
    let mut gaps = None;
    if cfg.phase == Phase::Run {
        let found = probe::probe(&context, &catalog).await;
        if shutdown.is_cancelled() {
            // Stopped before the run: its result is written all the same.
            let unrun = Unrun::new(&cfg, &names, &connections, started_at);
            return unrun.end(session, &shutdown, None).await;
        }
        match probe::verdict(&cfg, &found) {
            Ok(warning) => gaps = warning,
            Err(message) => {
                let unrun = Unrun::new(&cfg, &names, &connections, started_at);
                return unrun.end(session, &shutdown, Some(message)).await;
            }
        }
    }
    if cfg.phase != Phase::Prewarm {
        exit = pipeline::run_phase(&context, catalog, input, spool, gaps)
            .await?
            .max_with(exit);
    }
    for message in errors.messages() {
        eprintln!("creb-rs: {message}");
    }
    session.close().await;
    Ok(exit)
}

/// What the live metrics' `creb_run_info` says of a replay.
fn labels(cfg: &ReplayConfig) -> RunInfoLabels {
    let shard = cfg.plan.shard;
    RunInfoLabels::new(
        "replay",
        cfg.mode.name(),
        Some(cfg.seed),
        shard.index,
        shard.count,
    )
}

/// What stops a replay once its trace is read, before anything is sent: `--check-space`
/// (exit 2 when the prewarm would not fit), or a trace with nothing to replay (an error).
fn refused(
    cfg: &ReplayConfig,
    input: &TraceInput,
    catalog: &crate::plan::catalog::Catalog,
    quiet: bool,
) -> anyhow::Result<Option<ExitStatus>> {
    if let (Some(dir), true) = (&cfg.check_space, cfg.phase != Phase::Run) {
        if let Err(message) = check_space(dir, catalog.prewarm_bytes(), quiet) {
            eprintln!("creb-rs: error: {message}");
            return Ok(Some(ExitStatus::Usage));
        }
    }
    if catalog.items == 0 {
        anyhow::bail!(
            "{} holds no replayable record{}",
            input.describe(),
            cfg.limited_to_none()
        );
    }
    Ok(None)
}

/// `--dry-run`: reads the trace and computes its digests (printing the figures); sends
/// nothing.
async fn dry_run(
    input: &TraceInput,
    cfg: &ReplayConfig,
    args: &ReplayArgs,
    session: &Session,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let spool_dir = args.output.output_dir.clone();
    let Some((_, _, preparation)) =
        catalog::prepare(input, cfg, spool_dir, session, shutdown, UpFront::ALL).await?
    else {
        return Ok(ExitStatus::Interrupted);
    };
    if args.output.json {
        println!("{}", serde_json::to_string_pretty(&preparation)?);
    }
    Ok(ExitStatus::Success)
}

/// Which digests are computed before the first request: none when a prewarm comes first
/// (it hashes the content it uploads as it sends it, and the rest after that), unless
/// `--route digest` places blobs over several endpoints by their digests; every one for a
/// run alone (or read from `--digest-cache`).
fn up_front(cfg: &ReplayConfig, names: &[String]) -> UpFront {
    let by_digest = cfg
        .routing
        .is_some_and(|r| r.route.kind == crate::route::RouteKind::Digest);
    if cfg.phase != Phase::Run && !(by_digest && names.len() > 1) {
        UpFront::NONE
    } else {
        UpFront::ALL
    }
}

/// `--check-space`: refuses a prewarm of `needed` bytes larger than `dir`'s free space, and
/// says both figures otherwise.
fn check_space(dir: &std::path::Path, needed: u64, quiet: bool) -> Result<(), String> {
    let free = free_space(dir).map_err(|e| format!("{e:#}"))?;
    if needed > free {
        return Err(format!(
            "the prewarm pushes {} but {} has {} free (--check-space); scale the sizes down \
             (--size-scale, --max-object-size; `creb-rs trace stats --capacity` shows the \
             figures), or free space",
            ByteSize(needed),
            dir.display(),
            ByteSize(free)
        ));
    }
    if !quiet {
        eprintln!(
            "creb-rs: the prewarm pushes {} at most; {} has {} free",
            ByteSize(needed),
            dir.display(),
            ByteSize(free)
        );
    }
    Ok(())
}

/// The bytes an unprivileged user may still write under `dir`.
fn free_space(dir: &std::path::Path) -> anyhow::Result<u64> {
    let st = rustix::fs::statvfs(dir)
        .map_err(|e| anyhow::anyhow!("--check-space {}: {e}", dir.display()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}
