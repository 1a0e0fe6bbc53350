//! Pass 1 of a replay: the whole trace read once on a blocking thread into the catalog of
//! the objects it names (every digest computed on all cores, or taken from
//! `--digest-cache`), its items spooled for pass 2, and the identity of the workload for
//! the result metadata.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use tokio::time::Instant;

use super::config::{CacheFile, ReplayConfig};
use crate::content::digest_cache::{Appender, DigestCache};
use crate::content::Sums;
use crate::exec::canary::available_cores;
use crate::exec::Phase;
use crate::plan::catalog::{Catalog, ContentKey, DigestStats, Eager, HashWatch, Keep, UpFront};
use crate::progress::Progress;
use crate::session::Session;
use crate::shutdown::Shutdown;
use crate::trace::{Interner, Spool, SpoolWriter, TraceError, TraceInput, TraceReader};
use crate::units::ByteSize;

/// How pass 1 spent its time: reading the trace, then the digests of the content.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Preparation {
    pub total_s: f64,
    pub read_s: f64,
    pub digest_s: f64,
    pub digests: DigestStats,
    /// `--digest-cache`: the file, and whether it was rewritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_cache: Option<PathBuf>,
    pub digest_cache_written: bool,
    /// Blobs generated as plain bytes, not tars (the `raw_layers` warning): recorded once
    /// the catalog is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_layers: Option<u64>,
    /// The digests the run uses that the prewarm learned, while sending and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prewarm_digests: Option<PrewarmDigests>,
}

/// The digests a prewarm learned: hashed while its uploads were sent, and computed after.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PrewarmDigests {
    pub while_sending: u64,
    pub after: u64,
}

/// Where pass 1 stands, for its progress lines: the records read, then the digests.
#[derive(Debug, Clone)]
struct Watch {
    stop: Shutdown,
    progress: Arc<Progress>,
}

impl HashWatch for Watch {
    fn start(&self, contents: u64, bytes: u64) {
        self.progress.total.store(contents, Ordering::Relaxed);
        self.progress.bytes_total.store(bytes, Ordering::Relaxed);
    }

    fn hashed(&self, bytes: u64) -> bool {
        self.progress.add_bytes(bytes);
        !self.stop.is_cancelled()
    }

    fn done(&self) {
        self.progress.add_done(1);
    }
}

/// Builds the catalog and says on stderr (unless `quiet`) what the trace holds and how long
/// it took, reading and hashing apart. Reading and hashing each show their progress and
/// end soon after a stop: `None` then.
pub(super) async fn prepare(
    input: &TraceInput,
    cfg: &ReplayConfig,
    spool_dir: Option<PathBuf>,
    session: &Session,
    stop: &Shutdown,
    up_front: UpFront,
) -> anyhow::Result<Option<(Arc<Catalog>, Option<Spool>, Preparation)>> {
    let prepared = Instant::now();
    let watch = Watch {
        stop: stop.clone(),
        progress: Progress::unbounded(),
    };
    let line = session.progress_line("reading", "records", &watch.progress);
    let read = read_catalog(input.clone(), cfg, spool_dir, watch).await;
    line.finish();
    let Some((catalog, spool, read_s)) = read? else {
        return Ok(None);
    };
    let watch = Watch {
        stop: stop.clone(),
        progress: Progress::new(0),
    };
    let line = session.progress_line("digests", "contents", &watch.progress);
    let hashed = hash_catalog(catalog, cfg.digest_cache.clone(), watch, up_front).await;
    line.finish();
    let Some((catalog, mut prep)) = hashed? else {
        return Ok(None);
    };
    prep.read_s = read_s;
    prep.total_s = prepared.elapsed().as_secs_f64();
    if let Some(why) = &prep.digests.stale {
        if let Some(cache) = &cfg.digest_cache {
            eprintln!("creb-rs: warning: {cache}: {why}; every digest was computed again");
        }
    }
    if !session.quiet() {
        eprintln!("creb-rs: trace: {}", prepared_line(&catalog, &prep, cfg));
    }
    Ok(Some((Arc::new(catalog), spool, prep)))
}

/// What the trace holds and how long preparing it took, reading and hashing apart.
fn prepared_line(catalog: &Catalog, prep: &Preparation, cfg: &ReplayConfig) -> String {
    let d = &prep.digests;
    format!(
        "{} records, {:.1}s of trace time; the run reads {} blobs ({}) and {} manifests; prepared in {:.1}s (reading {:.1}s, digests {:.1}s: {} computed over {} on {} thread{}, {} of small content hashed when used{}{})",
        catalog.items,
        (catalog.end_ms - catalog.origin_ms.unwrap_or(catalog.end_ms)) as f64 / 1000.0,
        catalog.blob_read_count(),
        ByteSize(catalog.prewarm_bytes()),
        catalog.manifests.len(),
        prep.total_s,
        prep.read_s,
        prep.digest_s,
        d.computed,
        ByteSize(d.bytes_hashed),
        d.threads,
        if d.threads == 1 { "" } else { "s" },
        d.on_use,
        if cfg.digest_cache.is_some() {
            format!(", {} from the cache ({} of them checked)", d.cached, d.checked)
        } else {
            String::new()
        },
        if d.deferred > 0 {
            format!(", {} left to the prewarm, which hashes them as it sends them", d.deferred)
        } else {
            String::new()
        }
    )
}

/// Pass 1 on a blocking thread: the catalog of the trace, and (when a run follows) the
/// items read, spooled for pass 2 in `spool_dir` (the output directory) or the temporary
/// directory; with the seconds it took. `None` when a stop ended it.
async fn read_catalog(
    input: TraceInput,
    cfg: &ReplayConfig,
    spool_dir: Option<PathBuf>,
    watch: Watch,
) -> anyhow::Result<Option<(Catalog, Option<Spool>, f64)>> {
    let read = cfg.read.clone();
    let gap = cfg.plan.session_gap_ms;
    let content = cfg.content;
    let phase = cfg.phase;
    tokio::task::spawn_blocking(
        move || -> anyhow::Result<Option<(Catalog, Option<Spool>, f64)>> {
            let started = std::time::Instant::now();
            // A run alone keeps only what the run needs; prewarm's lists are counted.
            let keep = match phase {
                Phase::Run => Keep::Run,
                Phase::All | Phase::Prewarm => Keep::Prewarm,
            };
            let open = |input: &TraceInput| -> anyhow::Result<TraceReader> {
                let mut reader = TraceReader::open(input, read.clone(), Interner::default())?;
                reader.watch(watch.stop.clone(), Arc::clone(&watch.progress));
                Ok(reader)
            };
            let single_pass = |input: &TraceInput| -> anyhow::Result<Catalog> {
                let mut reader = open(input)?;
                let draft = Catalog::build(&mut reader, gap, content, keep)?;
                let mut names = reader.into_names();
                names.drop_index();
                Ok(draft.seal(names))
            };
            // Spooled even for a prewarm alone: a trace of more than `EAGER_RECORDS` records
            // has its catalog built a stage at a time from the spool, which peaks at half
            // what one reading building every table does; a smaller one has it built as the
            // trace is spooled (`Eager`).
            let eager = Eager::new(gap, content, keep);
            let built =
                read_spooled(open(&input), spool_dir.as_deref(), eager).and_then(
                    |read| match read {
                        Read::Spooled(spool, names, eager) => {
                            let catalog = eager.finish(|| spool.items(), names)?;
                            // Both count the items the reader gave.
                            debug_assert_eq!(spool.len(), catalog.items);
                            let kept = (phase != Phase::Prewarm).then_some(spool);
                            Ok((catalog, kept))
                        }
                        Read::Again => Ok((single_pass(&input)?, None)),
                    },
                );
            match built {
                Err(e) if stopped(&e) => Ok(None),
                Err(e) => Err(e),
                Ok((catalog, spool)) => Ok(Some((catalog, spool, started.elapsed().as_secs_f64()))),
            }
        },
    )
    .await
    .context("the trace reader stopped unexpectedly")?
}

/// The digests of the catalog's content on every core, on blocking threads: from the
/// digest cache when it has them, the cache written back when it grew. `None` when a stop
/// ended the hashing.
async fn hash_catalog(
    mut catalog: Catalog,
    cache_file: Option<CacheFile>,
    watch: Watch,
    up_front: UpFront,
) -> anyhow::Result<Option<(Catalog, Preparation)>> {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut cache = cache_file.as_ref().map(|f| DigestCache::load(&f.path));
        if let (Some(c), Some(file)) = (&cache, &cache_file) {
            if let Some(why) = &c.set_aside {
                tracing::warn!("{file}: {why}; it is rewritten");
            }
            if c.cut > 0 {
                eprintln!(
                    "creb-rs: warning: {file}: its last {} bytes are not a whole entry (a \
                     writer stopped mid-entry, or another program wrote there); they are \
                     ignored",
                    c.cut
                );
            }
        }
        let digests =
            catalog.compute_digests_with(available_cores(), cache.as_mut(), &watch, up_front);
        if digests.stopped {
            return None;
        }
        let digest_s = started.elapsed().as_secs_f64();
        let mut written = false;
        if let (Some(c), Some(file)) = (&cache, &cache_file) {
            match c.save() {
                Ok(w) => written = w,
                Err(e) => eprintln!("creb-rs: warning: {file}: cannot write it: {e}"),
            }
            if let Err(e) = crate::content::digest_cache::save_frames(&file.path) {
                eprintln!("creb-rs: warning: {file}: cannot write its frame CRCs: {e}");
            }
        }
        let prep = Preparation {
            total_s: 0.0,
            read_s: 0.0,
            digest_s,
            digests,
            digest_cache: cache_file.map(|f| f.path),
            digest_cache_written: written,
            raw_layers: None,
            prewarm_digests: None,
        };
        Some((catalog, prep))
    })
    .await
    .context("the digests stopped unexpectedly")
}

/// Writes the frame CRCs learned in this process beside the digest cache `file` (for the
/// runs after it), on a blocking thread; a failure is a warning (the digests stand).
pub(super) async fn keep_frames(file: Option<&CacheFile>) {
    let Some(file) = file else {
        return;
    };
    let path = file.path.clone();
    let saved = tokio::task::spawn_blocking(move || {
        crate::content::digest_cache::save_frames(&path).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    if let Err(e) = saved {
        eprintln!("creb-rs: warning: {file}: cannot write its frame CRCs: {e}");
    }
}

/// After prewarm's first stage: the digests it learned while sending kept in the catalog,
/// then those it did not learn (the run's uploads, content whose upload failed) computed on
/// every core with a progress line, kept in the catalog and added to `cache`. `None` when
/// a stop ended the hashing.
pub(super) async fn learn_missing(
    catalog: &mut Arc<Catalog>,
    learned: Vec<(ContentKey, Sums)>,
    cache: Option<&Appender>,
    session: &Session,
    stop: &Shutdown,
) -> anyhow::Result<Option<DigestStats>> {
    keep_digests(catalog, learned)?;
    let watch = Watch {
        stop: stop.clone(),
        progress: Progress::new(0),
    };
    let line = session.progress_line("digests", "contents", &watch.progress);
    let shared = Arc::clone(catalog);
    let (stats, found) =
        tokio::task::spawn_blocking(move || shared.missing_digests(available_cores(), &watch))
            .await
            .context("the digests stopped unexpectedly")?;
    line.finish();
    if let Some(cache) = cache {
        for (_, spec, sums) in &found {
            if let Err(e) = cache.append(spec, &sums.blob, &sums.diff) {
                tracing::warn!("cannot add to the digest cache: {e}");
                break;
            }
        }
    }
    keep_digests(catalog, found.into_iter().map(|(key, _, sums)| (key, sums)))?;
    Ok((!stats.stopped).then_some(stats))
}

/// Adds `digests` to the catalog, which nothing else holds while a prewarm learns them
/// (the run's threads get it after the prewarm).
fn keep_digests(
    catalog: &mut Arc<Catalog>,
    digests: impl IntoIterator<Item = (ContentKey, Sums)>,
) -> anyhow::Result<()> {
    Arc::get_mut(catalog)
        .ok_or_else(|| anyhow::anyhow!("the catalog is shared while the prewarm adds its digests"))?
        .add_digests(digests);
    Ok(())
}

/// What the workload requests: runs compare (and merge) only when this matches. The trace is
/// identified by its files' names and sizes, its record count and span.
pub(super) fn dataset_json(
    cfg: &ReplayConfig,
    input: &TraceInput,
    catalog: &Catalog,
) -> serde_json::Value {
    let files: Vec<serde_json::Value> = input
        .files
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": f.file_name().map(|n| n.to_string_lossy().into_owned()),
                "bytes": std::fs::metadata(f).map(|m| m.len()).ok(),
            })
        })
        .collect();
    let mut dataset = serde_json::json!({
        "command": "replay",
        "traces": files,
        "records": catalog.items,
        "origin_ms": catalog.origin_ms,
        "end_ms": catalog.end_ms,
        "seed": cfg.seed,
        "limit_requests": cfg.limit_requests,
        "limit_duration_s": cfg.limit_duration_s,
        "skip_invalid": cfg.skip_invalid,
        "replay_failed": cfg.replay_failed,
        "repos": cfg.plan.repos,
        "upload": cfg.plan.upload,
        "manifest_format": cfg.plan.manifest_format,
        "layer_form": cfg.content.layer_form,
        "raw_layers": catalog.raw_layers(),
        "session_gap_ms": cfg.plan.session_gap_ms,
    });
    if !cfg.sizes.is_identity() {
        // Scaled sizes are another workload: results compare and merge only with the same.
        dataset["size_scale"] = serde_json::json!(cfg.sizes);
    }
    if catalog.unsized_uploads.count > 0 {
        // Uploads the trace gives no size for: their bytes are creb-rs's choice.
        dataset["unsized_uploads"] = serde_json::json!(catalog.unsized_uploads);
    }
    dataset
}

/// What reading the trace into the spool gave.
enum Read {
    /// The items spooled for pass 2, the names they use, and the catalog as far as the
    /// reading built it.
    Spooled(Spool, Interner, Box<Eager>),
    /// The spool could not be written: the catalog (and the run) read the trace again.
    Again,
}

/// The trace read once into the spool, interning its names, and given to `eager` as it is
/// read: the catalog is built from there, or its stages from the spool, each sealed before
/// the next (a lower peak than one reading building every table). The run's pass 2 reads the
/// spool too: the names need resolving only, not looking up (a reader of the trace would
/// rebuild their index).
fn read_spooled(
    reader: anyhow::Result<TraceReader>,
    dir: Option<&Path>,
    mut eager: Eager,
) -> anyhow::Result<Read> {
    let mut reader = reader?;
    let mut writer = SpoolWriter::in_dir(dir, crate::trace::spool::MAX_SPOOL_BYTES);
    for item in &mut reader {
        let item = item?;
        eager.learn(&item);
        writer.push(&item);
    }
    let mut names = reader.into_names();
    names.drop_index();
    match writer.finish() {
        Ok(spool) => Ok(Read::Spooled(spool, names, Box::new(eager))),
        Err(why) => {
            tracing::warn!("cannot keep the trace's items for the run ({why}); the run reads the trace again, as does the catalog");
            Ok(Read::Again)
        }
    }
}

/// Whether `e` is the end of a reading a stop asked for.
fn stopped(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<TraceError>(), Some(TraceError::Stopped)))
}
