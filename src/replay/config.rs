//! The validated settings of a replay, as the engine takes them: built by the command
//! layer from the flags; the results record them as their `config` block
//! ([`ReplayConfig::config_block`], in the contract's own types).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::auth::credentials::CredentialInfo;
use crate::client::Verify;
use crate::exec::{Mode, Phase};
use crate::outfile::Kind;
use crate::plan::catalog::{ContentOptions, SizeScale};
use crate::plan::PlanOptions;
use crate::results::config::{ReplayBlock, RoutingBlock, RunConfig, WindowBlock};
use crate::route::RouteOptions;
use crate::session::connect::RegistryConfig;
use crate::trace::ReadOptions;

/// Several endpoints: routing and failure handling (absent with one endpoint, so a
/// single-registry run's configuration is what it always was).
#[derive(Debug, Clone, Copy)]
pub struct RoutingConfig {
    pub route: RouteOptions,
    pub endpoint_down_after: u32,
    pub probe_interval_s: f64,
    pub failover: bool,
}

/// Validated settings of a replay.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub registry: RegistryConfig,
    pub traces: Vec<PathBuf>,
    pub mode: Mode,
    pub speed: f64,
    pub concurrency: usize,
    pub prewarm_concurrency: usize,
    pub phase: Phase,
    pub seed: u64,
    pub read: ReadOptions,
    pub limit_requests: Option<u64>,
    pub limit_duration_s: Option<f64>,
    pub skip_invalid: bool,
    pub replay_failed: bool,
    pub plan: PlanOptions,
    pub content: ContentOptions,
    /// Blob and upload sizes relative to the trace's (`--size-scale`, `--max-object-size`).
    pub sizes: SizeScale,
    pub digest_cache: Option<CacheFile>,
    pub check_space: Option<PathBuf>,
    pub max_lateness_ms: Option<u64>,
    pub grace_s: f64,
    pub start_at: Option<String>,
    pub start_at_time: Option<SystemTime>,
    pub verify: Verify,
    pub strict: bool,
    pub routing: Option<RoutingConfig>,
    /// The part of the trace's time a run replays (all of it when absent).
    pub window: Option<Window>,
    /// `--unpack`: the layers of the trace's pulls unpacked.
    pub unpack: Option<crate::exec::unpack::UnpackWork>,
    /// `--replica`: the replicas watched for each image the run pushes.
    pub replicas: Option<crate::exec::replicate::ReplicaSpec>,
    /// Stress mode may gather answers per wake-up (`--gather`).
    pub gather: bool,
}

/// A part of a trace's time: from `from` after its first record, `length` long (to its end
/// when absent). Records outside it are not the run's; the run's schedule starts at `from`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub from: Duration,
    pub length: Option<Duration>,
}

impl Window {
    /// Whether a record `trace_ms` after the trace's first is inside the window.
    pub fn holds(&self, trace_ms: i64) -> bool {
        let from = self.from.as_millis() as i64;
        trace_ms >= from
            && self
                .length
                .is_none_or(|l| trace_ms < from + l.as_millis() as i64)
    }

    /// Whether a record `trace_ms` after the trace's first comes after the window.
    pub fn past(&self, trace_ms: i64) -> bool {
        self.length
            .is_some_and(|l| trace_ms >= (self.from + l).as_millis() as i64)
    }
}

/// The digest cache a replay uses: the file `--digest-cache` names, or the dataset's own
/// (docs/replay.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFile {
    pub path: PathBuf,
    /// `--digest-cache` named it; else it is the dataset's default cache.
    pub named: bool,
}

/// How messages name the cache: by the flag only when the flag named it.
impl std::fmt::Display for CacheFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.named {
            write!(f, "--digest-cache {}", self.path.display())
        } else {
            write!(f, "the dataset's digest cache {}", self.path.display())
        }
    }
}

impl ReplayConfig {
    /// The results' `config` block of this replay, its credentials from `credentials`.
    pub fn config_block(&self, credentials: &CredentialInfo) -> RunConfig {
        RunConfig::Replay(Box::new(ReplayBlock {
            registry: self.registry.block(),
            credentials: credentials.clone(),
            traces: self.traces.clone(),
            mode: self.mode.name(),
            speed: self.speed,
            concurrency: self.concurrency,
            prewarm_concurrency: self.prewarm_concurrency,
            phase: self.phase.name(),
            seed: self.seed,
            limit_requests: self.limit_requests,
            limit_duration_s: self.limit_duration_s,
            skip_invalid: self.skip_invalid,
            replay_failed: self.replay_failed,
            plan: self.plan.clone(),
            layer_form: self.content.layer_form,
            sizes: (!self.sizes.is_identity()).then_some(self.sizes),
            max_lateness_ms: self.max_lateness_ms,
            grace_s: self.grace_s,
            start_at: self.start_at.clone(),
            verify: self.verify,
            strict: self.strict,
            routing: self.routing.map(|r| RoutingBlock {
                route: r.route,
                endpoint_down_after: r.endpoint_down_after,
                probe_interval_s: r.probe_interval_s,
                failover: r.failover,
            }),
            window: self.window.map(|w| WindowBlock::new(w.from, w.length)),
            unpack: self.unpack.as_ref().map(|u| u.block()),
            replica: self.replicas.as_ref().map(|r| r.block()),
        }))
    }

    /// The same replay at `speed` over `window` of the trace's time, its schedule starting
    /// at `start_at` (now when absent).
    pub fn at(
        &self,
        speed: f64,
        window: Option<Window>,
        start_at: Option<SystemTime>,
    ) -> ReplayConfig {
        let mut cfg = self.clone();
        cfg.speed = speed;
        cfg.plan.speed = speed;
        cfg.window = window;
        cfg.start_at_time = start_at;
        cfg.start_at = start_at.map(|t| humantime::format_rfc3339_millis(t).to_string());
        cfg
    }

    /// Refuses a `--digest-cache` that would replace a file of another kind, one of the
    /// traces, or one of the run's results in `output_dir` (all left untouched), before any
    /// work.
    pub fn check_paths(
        &self,
        input: &crate::trace::TraceInput,
        output_dir: Option<&std::path::Path>,
    ) -> anyhow::Result<()> {
        let Some(CacheFile { path: cache, .. }) = &self.digest_cache else {
            return Ok(());
        };
        let flag = "--digest-cache";
        crate::outfile::check(cache, flag, Kind::DigestCache, &input.files, false)?;
        // A trace given as a directory reads every file below it: a cache there would be
        // read as a trace by the next run of that directory.
        if let Some(dir) = self.traces.iter().find(|t| t.is_dir() && under(cache, t)) {
            anyhow::bail!(
                "{flag} {}: that is inside the trace directory {} (every file there is read as \
                 a trace, so the next run of it would fail on the cache); choose a path \
                 outside it",
                cache.display(),
                dir.display()
            );
        }
        let Some(out) = output_dir else {
            return Ok(());
        };
        let result_name = cache
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| crate::results::RESULT_FILES.contains(&n));
        let parent = match cache.parent() {
            Some(p) if p.as_os_str().is_empty() => std::path::Path::new("."),
            Some(p) => p,
            None => return Ok(()),
        };
        let in_results = crate::outfile::same_path(parent, out)
            || crate::outfile::same_path(parent, &out.join(crate::results::PREWARM_DIR));
        if result_name && in_results {
            anyhow::bail!(
                "{flag} {}: that is one of the run's results (--output-dir {}); choose \
                 another path",
                cache.display(),
                out.display()
            );
        }
        Ok(())
    }

    /// Why a trace can hold no record to replay beside having none: ` (--limit-requests 0)`.
    pub fn limited_to_none(&self) -> &'static str {
        if self.limit_requests == Some(0) {
            " (--limit-requests 0)"
        } else {
            ""
        }
    }
}

/// Whether `path` lies inside the directory `dir` (by their absolute, canonical forms;
/// a path not created yet by its parent's).
fn under(path: &std::path::Path, dir: &std::path::Path) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let resolved = absolute
        .parent()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .map_or(absolute.clone(), |p| {
            p.join(absolute.file_name().unwrap_or_default())
        });
    resolved.starts_with(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_flag_only_when_it_named_the_cache() {
        let file = |named| CacheFile {
            path: PathBuf::from("/c/x.digests"),
            named,
        };
        assert_eq!(file(true).to_string(), "--digest-cache /c/x.digests");
        assert_eq!(
            file(false).to_string(),
            "the dataset's digest cache /c/x.digests"
        );
    }
}
