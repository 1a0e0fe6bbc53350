//! The replay engine: an IBM-format trace against a registry, as a library call. The
//! command layer (`commands::replay`) turns flags into a [`ReplayConfig`] and opens the
//! [`Session`]; everything from the first contact with the registry on happens here.
//!
//! 1. **Catalog** (pass 1, on a blocking thread): the whole trace is read once; objects,
//!    sizes, layers and uploads are learned and every digest is computed in parallel.
//! 2. **Prewarm** (`Phase::Prewarm | All`): everything the run reads is pushed, measured
//!    apart.
//! 3. **Run** (`Phase::Run | All`): a planner thread streams the trace again into operations
//!    (pass 2) through a bounded channel; the executor carries them out in stress (closed) or
//!    delay (open) mode, while a canary and the CPU clock watch the generator itself. Pass 2
//!    reads the items pass 1 spooled to a temporary file ([`crate::trace::spool`]) instead of
//!    parsing the trace again, unless that file could not be written.
//!
//! Stages, one file each: `catalog` (pass 1), `prewarm`, `probe` (a run alone checks the
//! prewarm is there), `pipeline` (the run phase), `validity` (the warnings about what the
//! numbers mean), `context` (what they share); this file the order of the stages.
//!
//! The result accounts for every record of this shard:
//! `trace.records = replayed + folded + Σ skipped` (skipped: invalid, duplicate,
//! failed_in_trace, unsupported, late, interrupted).

mod catalog;
mod config;
mod context;
pub mod default_cache;
mod pipeline;
mod prewarm;
mod probe;
mod validity;

use std::sync::Arc;
use std::time::SystemTime;

use crate::metrics::live::RunInfoLabels;
use crate::metrics::ErrorLog;
use crate::plan::catalog::UpFront;
use crate::results::RunOutput;
use crate::route::Router;
use crate::session::connect::Connection;
use crate::session::{ExitStatus, Finished, Session};
use crate::shutdown::Shutdown;
use crate::trace::TraceInput;
use crate::units::ByteSize;

pub use catalog::{Preparation, PrewarmDigests};
pub use config::{CacheFile, ReplayConfig, RoutingConfig, Window};
// The settings of the drivers a replay's configuration names (the drivers are internal).
pub use crate::exec::replicate::{ReplicaSpec, ReplicaWork};
pub use crate::exec::unpack::UnpackWork;
pub use crate::exec::{Mode, Phase};
pub use crate::unpack::Limits as UnpackLimits;
use context::{connect, Context, Prepared, Unrun};

/// Replays `input` as `cfg` says, its results going to `session`: the registry reached and
/// checked, the trace read (pass 1), then the prewarm and the run phases `cfg.phase` names.
/// Every way it ends leaves a written result and says so in the exit status.
pub async fn replay(
    cfg: &ReplayConfig,
    input: TraceInput,
    session: Session,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let (mut engine, session) = match ready(cfg, input, session, shutdown).await? {
        Ok(ready) => ready,
        Err(status) => return Ok(status),
    };
    let mut exit = ExitStatus::Success;
    if cfg.phase != Phase::Run {
        exit = engine.prewarm(&session, shutdown).await?;
        if shutdown.is_cancelled() {
            // A stop, or --max-run-time, during the prewarm: the run does not start. With
            // --phase all its result is written all the same (no operation, interrupted),
            // beside the prewarm's in OUT/prewarm/.
            if cfg.phase == Phase::All {
                return engine.unrun(session, shutdown, None).await;
            }
            session.close().await;
            return Ok(exit);
        }
    }
    let mut gaps = None;
    if cfg.phase == Phase::Run {
        match engine.check_prewarm(&session, shutdown).await {
            // Stopped before the run: its result is written all the same.
            _ if shutdown.is_cancelled() => return engine.unrun(session, shutdown, None).await,
            Ok(warning) => gaps = warning,
            Err(message) => return engine.unrun(session, shutdown, Some(message)).await,
        }
    }
    if cfg.phase != Phase::Prewarm {
        exit = engine.run(&session, shutdown, gaps).await?.max_with(exit);
    }
    for message in engine.errors.messages() {
        eprintln!("creb-rs: {message}");
    }
    session.close().await;
    Ok(exit)
}

/// A replay ready for its phases: the registry reached and checked (first: an unusable one
/// is known in seconds, before any content is hashed), then the trace read and hashed. When
/// it cannot go on, its result is written (or the refusal said) and the exit status given.
pub async fn ready(
    cfg: &ReplayConfig,
    input: TraceInput,
    session: Session,
    shutdown: &Shutdown,
) -> anyhow::Result<Result<(Engine, Session), ExitStatus>> {
    let (mut engine, checked) = Engine::connect(cfg.clone(), input, shutdown).await?;
    if let Err(message) = checked {
        return Ok(Err(engine.unrun(session, shutdown, Some(message)).await?));
    }
    match engine.prepare(&session, shutdown).await? {
        Ready::Yes => Ok(Ok((engine, session))),
        Ready::Stopped => Ok(Err(engine.unrun(session, shutdown, None).await?)),
        Ready::Refused(status) => Ok(Err(status)),
    }
}

/// Whether a replay can go on once its trace was to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Read and hashed: the prewarm and runs may start.
    Yes,
    /// A stop (or `--max-run-time`) ended the reading.
    Stopped,
    /// Refused before anything was sent (`--check-space`), with the status to exit with.
    Refused(ExitStatus),
}

/// A replay as a library call: connected, then prepared once, then prewarmed and run as
/// often as wanted — the same prepared trace at another speed or over another window of
/// its time is one more [`Engine::measure`] (the capacity search drives it so).
#[derive(Debug)]
pub struct Engine {
    cfg: ReplayConfig,
    input: TraceInput,
    names: Vec<String>,
    connections: Vec<Connection>,
    router: Router,
    errors: ErrorLog,
    started_at: SystemTime,
    prepared: Option<Prepared>,
}

impl Engine {
    /// Reaches every endpoint of `cfg` and checks each with `GET /v2/`: the engine, and the
    /// one line that says why an endpoint cannot be used.
    pub async fn connect(
        cfg: ReplayConfig,
        input: TraceInput,
        shutdown: &Shutdown,
    ) -> anyhow::Result<(Engine, Result<(), String>)> {
        let names = cfg.registry.endpoint_names();
        let started_at = SystemTime::now();
        let (connections, checked) = connect(&cfg, &names, shutdown).await?;
        let router = Router::new(&names, cfg.routing.map(|r| r.route).unwrap_or_default());
        let engine = Engine {
            cfg,
            input,
            names,
            connections,
            router,
            errors: ErrorLog::default(),
            started_at,
            prepared: None,
        };
        Ok((engine, checked))
    }

    /// The settings the engine runs with.
    pub fn config(&self) -> &ReplayConfig {
        &self.cfg
    }

    /// The trace time the prepared trace spans, first record to last (zero before
    /// [`Self::prepare`]).
    pub fn span(&self) -> std::time::Duration {
        self.prepared
            .as_ref()
            .map_or(std::time::Duration::ZERO, |p| {
                let c = &p.catalog;
                let ms = c.end_ms - c.origin_ms.unwrap_or(c.end_ms);
                std::time::Duration::from_millis(ms.max(0) as u64)
            })
    }

    /// The records of the prepared trace (valid or not, after limits; zero before
    /// [`Self::prepare`]).
    pub fn records(&self) -> u64 {
        self.prepared.as_ref().map_or(0, |p| p.catalog.items)
    }

    /// Reads the trace (pass 1) and computes the digests the phases need first.
    pub async fn prepare(
        &mut self,
        session: &Session,
        shutdown: &Shutdown,
    ) -> anyhow::Result<Ready> {
        let cfg = &self.cfg;
        let spool_dir = session.flags.output_dir.clone();
        let up = up_front(cfg, &self.names);
        let read = catalog::prepare(&self.input, cfg, spool_dir, session, shutdown, up).await?;
        let Some((catalog, spool, preparation)) = read else {
            return Ok(Ready::Stopped);
        };
        if let Some(status) = refused(cfg, &self.input, &catalog, session.quiet())? {
            return Ok(Ready::Refused(status));
        }
        self.prepared = Some(Prepared {
            dataset: catalog::dataset_json(cfg, &self.input, &catalog),
            preparation: Preparation {
                raw_layers: Some(catalog.raw_layers()),
                ..preparation
            },
            catalog,
            spool,
        });
        Ok(Ready::Yes)
    }

    /// The stages' shared view, its results in `output`.
    fn context<'a>(
        &'a self,
        cfg: &'a ReplayConfig,
        session: &'a Session,
        output: &'a RunOutput,
        shutdown: &'a Shutdown,
    ) -> anyhow::Result<(Context<'a>, &'a Prepared)> {
        let prepared = self
            .prepared
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("the replay was not prepared"))?;
        let context = Context {
            cfg,
            session,
            output,
            dataset: &prepared.dataset,
            connections: &self.connections,
            names: &self.names,
            router: &self.router,
            shutdown,
            errors: &self.errors,
            preparation: &prepared.preparation,
        };
        Ok((context, prepared))
    }

    /// Pushes everything the runs read (published apart, in `OUT/prewarm/`), then keeps of
    /// the catalog only what the runs need.
    pub async fn prewarm(
        &mut self,
        session: &Session,
        shutdown: &Shutdown,
    ) -> anyhow::Result<ExitStatus> {
        // The prewarm adds the digests it learns to the catalog, which it holds alone
        // meanwhile; the runs share it unchanged after.
        let mut catalog = match self.prepared.as_mut() {
            Some(prepared) => std::mem::take(&mut prepared.catalog),
            None => anyhow::bail!("the replay was not prepared"),
        };
        let phase = match self.context(&self.cfg, session, &session.output, shutdown) {
            Ok((context, _)) => prewarm::phase(&context, &mut catalog).await,
            Err(e) => Err(e),
        };
        if let Some(prepared) = self.prepared.as_mut() {
            prepared.catalog = catalog;
        }
        let (status, report) = phase?;
        if shutdown.is_cancelled() {
            return Ok(status);
        }
        let prepared = self.prepared.as_mut().expect("prepared above");
        prepared.preparation = prewarm::with_digests(&prepared.preparation, &report);
        // What only the prewarm read goes before the run starts.
        if let Some(catalog) = Arc::get_mut(&mut prepared.catalog) {
            catalog.keep_run_only();
        }
        Ok(status)
    }

    /// A run without its prewarm: checks a sample of what it reads is in the registry. The
    /// warning to carry when some is missing, or why the run cannot start.
    pub async fn check_prewarm(
        &self,
        session: &Session,
        shutdown: &Shutdown,
    ) -> Result<Option<String>, String> {
        let (context, prepared) = self
            .context(&self.cfg, session, &session.output, shutdown)
            .map_err(|e| e.to_string())?;
        let found = probe::probe(&context, &prepared.catalog).await;
        probe::verdict(&self.cfg, &found, session.flags.force)
    }

    /// The run phase as the command runs it: measured, published into `session`, judged.
    pub async fn run(
        &self,
        session: &Session,
        shutdown: &Shutdown,
        prewarm_gaps: Option<String>,
    ) -> anyhow::Result<ExitStatus> {
        let (context, prepared) = self.context(&self.cfg, session, &session.output, shutdown)?;
        pipeline::run_phase(&context, prepared, &self.input, prewarm_gaps).await
    }

    /// One run of the prepared trace, at `speed` over `window` of its time, its schedule
    /// starting at `start_at` (now when absent; several hosts share one), measured into
    /// `output` (a directory of its own, or none) and returned unpublished: the caller
    /// judges and writes it. The planner's failure, if any, is the error.
    pub async fn measure(
        &self,
        speed: f64,
        window: Option<Window>,
        start_at: Option<SystemTime>,
        session: &Session,
        output: &RunOutput,
        shutdown: &Shutdown,
    ) -> anyhow::Result<Finished> {
        let cfg = self.cfg.at(speed, window, start_at);
        let (context, prepared) = self.context(&cfg, session, output, shutdown)?;
        pipeline::measure(&context, prepared, &self.input).await
    }

    /// Ends a replay that runs nothing (more): its empty result written, exit 2 with
    /// `fatal` (why the registry cannot be used), else the stop's status.
    pub async fn unrun(
        self,
        session: Session,
        shutdown: &Shutdown,
        fatal: Option<String>,
    ) -> anyhow::Result<ExitStatus> {
        let unrun = Unrun::new(&self.cfg, &self.names, &self.connections, self.started_at);
        unrun.end(session, shutdown, fatal).await
    }
}

/// What the live metrics' `creb_run_info` say of a replay configured as `cfg`.
pub fn labels(cfg: &ReplayConfig) -> RunInfoLabels {
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
pub async fn dry_run(
    input: &TraceInput,
    cfg: &ReplayConfig,
    session: &Session,
    shutdown: &Shutdown,
) -> anyhow::Result<ExitStatus> {
    let spool_dir = session.flags.output_dir.clone();
    let Some((_, _, preparation)) =
        catalog::prepare(input, cfg, spool_dir, session, shutdown, UpFront::ALL).await?
    else {
        return Ok(ExitStatus::Interrupted);
    };
    if session.flags.json {
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
