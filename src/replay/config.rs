//! The validated settings of a replay, as the engine takes them: built by the command
//! layer from the flags, serialized into meta.json's `config` block.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::client::Verify;
use crate::exec::{Mode, Phase};
use crate::outfile::Kind;
use crate::plan::catalog::{ContentOptions, SizeScale};
use crate::plan::PlanOptions;
use crate::route::RouteOptions;
use crate::session::connect::RegistryConfig;
use crate::trace::ReadOptions;

/// Several endpoints: routing and failure handling (absent with one endpoint, so a
/// single-registry run's configuration is what it always was).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoutingConfig {
    pub route: RouteOptions,
    pub endpoint_down_after: u32,
    pub probe_interval_s: f64,
    pub failover: bool,
}

/// Validated settings of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayConfig {
    pub registry: RegistryConfig,
    pub traces: Vec<PathBuf>,
    pub mode: Mode,
    pub speed: f64,
    pub concurrency: usize,
    pub prewarm_concurrency: usize,
    pub phase: Phase,
    pub seed: u64,
    #[serde(skip)]
    pub read: ReadOptions,
    pub limit_requests: Option<u64>,
    pub limit_duration_s: Option<f64>,
    pub skip_invalid: bool,
    pub replay_failed: bool,
    pub plan: PlanOptions,
    #[serde(skip)]
    pub content: ContentOptions,
    /// Blob and upload sizes relative to the trace's (`--size-scale`, `--max-object-size`).
    #[serde(skip_serializing_if = "SizeScale::is_identity")]
    pub sizes: SizeScale,
    #[serde(skip)]
    pub digest_cache: Option<PathBuf>,
    #[serde(skip)]
    pub check_space: Option<PathBuf>,
    pub max_lateness_ms: Option<u64>,
    pub grace_s: f64,
    pub start_at: Option<String>,
    #[serde(skip)]
    pub start_at_time: Option<SystemTime>,
    pub verify: Verify,
    pub strict: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingConfig>,
    /// The part of the trace's time a run replays (all of it when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

/// A part of a trace's time: from `from` after its first record, `length` long (to its end
/// when absent). Records outside it are not the run's; the run's schedule starts at `from`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Window {
    #[serde(rename = "from_s", serialize_with = "seconds")]
    pub from: Duration,
    #[serde(rename = "length_s", serialize_with = "maybe_seconds")]
    pub length: Option<Duration>,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn maybe_seconds<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
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

impl ReplayConfig {
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
        let Some(cache) = &self.digest_cache else {
            return Ok(());
        };
        let flag = "--digest-cache";
        crate::outfile::check(cache, flag, Kind::DigestCache, &input.files, false)?;
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
