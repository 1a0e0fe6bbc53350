//! The prewarm phase of `replay`: every object the run reads pushed once, before the run
//! ([`crate::exec::prewarm`] drives it from the jobs [`crate::plan::prewarm`] lists),
//! measured, summarized and published apart from the run (`OUT/prewarm/` when the run
//! follows).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::catalog::{keep_frames, learn_missing, Preparation, PrewarmDigests};
use super::config::CacheFile;
use super::context::{clients_for, endpoint_summaries, shard_of, Context};
use super::validity::warn;
use crate::client::RegistryClient;
use crate::content::digest_cache::Appender;
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::prewarm::{Learned, Prewarm, PrewarmReport};
use crate::exec::Phase;
use crate::metrics::{Aggregator, ErrorKind, Op};
use crate::plan::catalog::Catalog;
use crate::plan::prewarm::{content_jobs, PrewarmJobs};
use crate::plan::{Naming, ShardSpec};
use crate::progress::Progress;
use crate::results::{Meta, MetaInput, RunInfo, Summary, Warning};
use crate::session::connect::endpoint_links;
use crate::session::status::ExitStatus;
use crate::session::{exit_status, Finished, Shown};

/// The prewarm phase: every object the run reads pushed, measured and reported apart (in
/// `OUT/prewarm/` when the run follows). Fails (exit 1) when an object could not be
/// prewarmed, and, with `--phase prewarm`, when a `--fail-if` threshold holds.
pub(super) async fn phase(
    context: &Context<'_>,
    catalog: &mut Arc<Catalog>,
) -> anyhow::Result<(ExitStatus, PrewarmReport)> {
    let cfg = context.cfg;
    let output = context.output;
    let out = if cfg.phase == Phase::All {
        output.in_subdir("prewarm")
    } else {
        output.clone()
    };
    let started_at = SystemTime::now();
    let start = Instant::now();
    let (recorder, aggregator) = out.start_over(start, started_at, context.connections.len())?;
    let clients = clients_for(context.connections, &recorder, false);
    let report = push_all(context, catalog, &clients).await?;
    let duration = start.elapsed();
    drop(clients);
    let aggregator = aggregator.finish().await;
    let mut finished = summarize(context, &report, aggregator, started_at, duration);
    // Thresholds judge the phase whose results are the command's: prewarm's only alone;
    // with --phase all the run's results are the ones printed as JSON.
    let alone = cfg.phase == Phase::Prewarm;
    let flags = &context.session.flags;
    let shown = Shown {
        dir: out.dir.clone(),
        json: flags.json && alone,
        table: true,
        quiet: flags.quiet || (flags.json && !alone),
        judge: alone,
    };
    let slow = context.session.publish(&mut finished, None, &shown).await?;
    if !shown.quiet && !shown.json {
        println!("{}", crate::report::prewarm_line(&report));
    }
    // Objects that could not be prewarmed fail the phase as failed operations fail a run.
    Ok((exit_status(&finished.summary, slow, false), report))
}

/// A prewarm that took digests from `--digest-cache` and saw the registry refuse uploads by
/// their digest (400 on the closing PUT or a monolithic upload): the cache held wrong digests
/// its sample check missed. It is emptied (the next run computes every digest afresh) and
/// the warning, also said on stderr, names it.
fn stale_cache(
    cache: Option<&CacheFile>,
    preparation: &Preparation,
    aggregator: &Aggregator,
) -> Option<Warning> {
    let cache = cache?;
    let cached = preparation.digests.cached as u64;
    let refused: u64 = [Op::UploadPut, Op::BlobUpload]
        .iter()
        .filter_map(|op| aggregator.table().op_total(*op))
        .map(|s| {
            let refused = s.counts.errors_by_kind.get(&ErrorKind::Http(400));
            refused.copied().unwrap_or(0)
        })
        .sum();
    if cached == 0 || refused == 0 {
        return None;
    }
    let emptied = match crate::content::digest_cache::mark_stale(&cache.path) {
        Ok(()) => "it is emptied: the next run computes every digest afresh".to_string(),
        Err(e) => format!("it could not be emptied ({e}): remove it"),
    };
    let message = format!(
        "{cache}: the registry refused {refused} upload(s) by their digest (400) after \
         {cached} digests were taken from it: it holds wrong digests; {emptied}"
    );
    eprintln!("creb-rs: error: {message}");
    Some(Warning {
        kind: "digest_cache_stale".into(),
        message,
    })
}

/// The preparation as meta.json holds it: a JSON document, its keys sorted.
pub(super) fn preparation_json(preparation: &Preparation) -> serde_json::Value {
    serde_json::to_value(preparation).unwrap_or_default()
}

/// The run's preparation (meta.json) after a prewarm: the digests the run uses were learned
/// by the prewarm, while sending and after.
pub(super) fn with_digests(preparation: &Preparation, report: &PrewarmReport) -> Preparation {
    Preparation {
        prewarm_digests: Some(PrewarmDigests {
            while_sending: report.digests_learned,
            after: report.digests_computed,
        }),
        ..preparation.clone()
    }
}

/// Plans the prewarm's jobs and carries them out with the phase's progress line, in
/// stages: the content the run reads, uploaded at once and hashed as it is sent (unless
/// `--route digest` needs its digests first); then the digests still missing, computed on
/// every core; then the configs and every other blob; then the manifests.
async fn push_all(
    context: &Context<'_>,
    catalog: &mut Arc<Catalog>,
    clients: &[RegistryClient],
) -> anyhow::Result<PrewarmReport> {
    let cfg = context.cfg;
    let flags = &context.session.flags;
    let talk = !flags.quiet && !flags.json;
    let cache = open_cache(cfg.digest_cache.as_ref());
    // Blobs are most of the time a prewarm takes: the ETA follows their bytes.
    let progress =
        Progress::with_bytes(0, catalog.prewarm_bytes() * context.router.copies() as u64);
    // The stages read the catalog as it stands: between them it takes in the digests the
    // first one learned.
    let stage = Stage {
        context,
        clients,
        progress: &progress,
        cache: cache.as_ref(),
    };
    let mut report = PrewarmReport::default();
    let learned = Learned::default();
    let staged = stage.contents(catalog, &learned, talk, &mut report).await;
    if staged {
        if context.shutdown.is_cancelled() {
            return Ok(report);
        }
        let (session, shutdown) = (context.session, context.shutdown);
        let found = learn_missing(
            catalog,
            learned.into_digests(),
            cache.as_ref(),
            session,
            shutdown,
        );
        let Some(stats) = found.await? else {
            return Ok(report);
        };
        report.digests_computed = stats.computed as u64;
        if cache.is_some() {
            keep_frames(cfg.digest_cache.as_ref()).await;
        }
    }
    let jobs = PrewarmJobs::plan(catalog, context.router, cfg.plan.repos.clone(), staged);
    if talk {
        // The same units as the line after it: pushes, not the trace's distinct objects.
        eprintln!(
            "creb-rs: prewarm: {} blobs (layers, configs and fillers, per repository and node) and {} manifests to push",
            jobs.blob_count(),
            jobs.manifest_count()
        );
    }
    progress.add_total(jobs.len());
    let line = context
        .session
        .progress_line("prewarm", "objects", &progress);
    // The configs and manifests are sent by digest: nothing is learned from them.
    let none = Learned::default();
    let rest = stage.driver(catalog, &none);
    let report = rest.run(&jobs, report).await;
    line.finish();
    Ok(report)
}

/// What the prewarm's stages share.
struct Stage<'a> {
    context: &'a Context<'a>,
    clients: &'a [RegistryClient],
    progress: &'a Arc<Progress>,
    cache: Option<&'a Appender>,
}

impl<'a> Stage<'a> {
    /// The first stage, when there is one: the content the run reads, uploaded at once and
    /// hashed as it is sent. Whether it ran.
    async fn contents(
        &self,
        catalog: &Catalog,
        learned: &Learned,
        talk: bool,
        report: &mut PrewarmReport,
    ) -> bool {
        let naming = Naming::new(self.context.cfg.plan.repos.clone());
        let Some((count, contents)) = content_jobs(catalog, self.context.router, naming) else {
            return false;
        };
        if talk {
            eprintln!(
                "creb-rs: prewarm: {count} blobs the run reads (per repository and node) first, each hashed as it is sent"
            );
        }
        self.progress.add_total(count as u64);
        let line = self
            .context
            .session
            .progress_line("prewarm", "objects", self.progress);
        self.driver(catalog, learned)
            .contents(contents, report)
            .await;
        line.finish();
        true
    }

    /// The prewarm driver over `catalog` as it stands, the digests it learns kept in `learned`.
    fn driver<'s>(&'s self, catalog: &'s Catalog, learned: &'s Learned) -> Prewarm<'s> {
        let cfg = self.context.cfg;
        Prewarm {
            catalog,
            clients: self.clients,
            format: cfg.plan.manifest_format,
            bounds: Bounds {
                concurrency: cfg.prewarm_concurrency,
                grace: Duration::from_secs_f64(cfg.grace_s),
            },
            env: JobEnv {
                shutdown: self.context.shutdown,
                errors: self.context.errors,
                progress: self.progress,
            },
            cache: self.cache,
            learned,
        }
    }
}

/// `--digest-cache`, opened to add the digests learned while sending (a warning, and none
/// kept, when it cannot be).
fn open_cache(cache: Option<&CacheFile>) -> Option<Appender> {
    let cache = cache?;
    let opened = Appender::open(&cache.path)
        .map_err(|e| {
            eprintln!("creb-rs: warning: {cache}: {e}; digests learned while sending are not kept")
        })
        .ok()?;
    if opened.cut > 0 {
        eprintln!(
            "creb-rs: warning: {cache}: its last {} bytes were not a whole entry (a writer \
             stopped mid-entry, or another program wrote there); cut off before appending",
            opened.cut
        );
    }
    Some(opened)
}

/// The prewarm's summary and metadata, ready to publish.
fn summarize(
    context: &Context<'_>,
    report: &PrewarmReport,
    aggregator: Aggregator,
    started_at: SystemTime,
    duration: Duration,
) -> Finished {
    let cfg = context.cfg;
    let (connections, names, shutdown) = (context.connections, context.names, context.shutdown);
    let connection = &connections[0];
    let mut warnings = Vec::new();
    super::validity::size_warning(cfg, &mut warnings);
    if report.failed > 0 {
        warn(
            &mut warnings,
            "prewarm_incomplete",
            format!(
                "{} objects could not be prewarmed; reads of them will fail in the run",
                report.failed
            ),
        );
    }
    let stale = stale_cache(cfg.digest_cache.as_ref(), context.preparation, &aggregator);
    warnings.extend(stale);
    let mut summary = Summary::build(
        RunInfo {
            command: "replay".into(),
            mode: "prewarm".into(),
            model: "closed".into(),
            concurrency: cfg.prewarm_concurrency as u64,
            registry: names.join(","),
            seed: cfg.seed,
            shard: shard_of(ShardSpec::ALL),
            started_at,
            duration,
            interrupted: shutdown.interrupted(),
            trace: None,
            warnings,
            checks: None,
            config: cfg.config_block(&connection.credentials),
        },
        &aggregator,
    );
    // The prewarm watches no replica: its endpoints are the registry's alone.
    if cfg.routing.is_some() {
        summary.endpoints = endpoint_summaries(cfg, names, &aggregator, duration, None);
    }
    let mut meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: context.dataset.clone(),
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval: context.session.output.interval,
        },
    );
    meta.preparation = Some(preparation_json(context.preparation));
    meta.endpoints = endpoint_links(names, connections);
    Finished {
        summary,
        aggregator,
        meta,
    }
}
