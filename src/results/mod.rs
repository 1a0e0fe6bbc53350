//! The result directory (`--output-dir`), a contract documented in `docs/results.md`:
//!
//! - written as the run goes: `histograms.hlog` (interval histograms), `timeline.csv`
//!   (one row per interval), `requests.csv` (with `--record-requests`);
//! - written at the end: `counters.json`, `meta.json`, and `summary.json` last.
//!
//! Whole files are written to a temporary name and renamed, so a reader never sees half of
//! one; the directory is checked for writability before a run starts, so a long run does not
//! end in an I/O error.

pub mod attribution;
pub mod capacity;
pub mod config;
mod files;
pub mod hlog;
pub mod registry_metrics;
pub mod store;
pub mod summary;
pub mod thresholds;
pub mod writer;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::metrics::{AggregatorConfig, AggregatorHandle, Recorder};
pub use files::{
    prepare_output_dir, prepare_result_dir, read_summary, write_atomic, write_summary,
    CAPACITY_JSON, EXPERIMENT_CHECKPOINT, PREWARM_DIR, RESULT_FILES, STEPS_DIR,
};
pub use store::{Meta, ResultSet};
pub use summary::{RunInfo, Shard, Summary, TraceCounts, Warning};

/// Where a run's results go and how its intervals are cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    pub dir: Option<PathBuf>,
    pub interval: Duration,
    pub record_requests: bool,
    /// The live metrics every sample of the run also feeds (`--metrics-listen`).
    pub live: Option<Live>,
    /// `--split-by-header`: the response header whose value labels every sample.
    pub split_by: Option<http::HeaderName>,
    /// `--warmup`: how long after the start of the run nothing is measured.
    pub warmup: Duration,
}

/// The live metrics of a run, shared with the endpoint that serves them.
#[derive(Debug, Clone)]
pub struct Live(pub std::sync::Arc<crate::metrics::live::LiveMetrics>);

impl PartialEq for Live {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Live {}

impl RunOutput {
    /// The same settings for a subdirectory (a replay's prewarm phase).
    pub fn in_subdir(&self, name: &str) -> RunOutput {
        RunOutput {
            dir: self.dir.as_ref().map(|d| d.join(name)),
            // The live metrics are the run's; a prewarm reports apart.
            live: None,
            ..self.clone()
        }
    }

    /// Starts the aggregator of a run whose interval 0 starts at `anchor` (`anchor_wall` on
    /// the wall clock), writing intervals into the result directory if there is one.
    pub fn start(
        &self,
        anchor: Instant,
        anchor_wall: SystemTime,
    ) -> anyhow::Result<(Recorder, AggregatorHandle)> {
        self.start_over(anchor, anchor_wall, 1)
    }

    /// [`Self::start`] for a run over `endpoints` endpoints (their columns end
    /// `timeline.csv` when there are several).
    pub fn start_over(
        &self,
        anchor: Instant,
        anchor_wall: SystemTime,
        endpoints: usize,
    ) -> anyhow::Result<(Recorder, AggregatorHandle)> {
        self.start_watched(anchor, anchor_wall, endpoints, None)
    }

    /// [`Self::start_over`], the aggregator also feeding `progress` (its line's latency
    /// and lag then come from the samples the results and the metrics hold).
    pub(crate) fn start_watched(
        &self,
        anchor: Instant,
        anchor_wall: SystemTime,
        endpoints: usize,
        progress: Option<std::sync::Arc<crate::progress::Progress>>,
    ) -> anyhow::Result<(Recorder, AggregatorHandle)> {
        let sink = match &self.dir {
            Some(dir) => {
                prepare_output_dir(dir)?;
                Some(
                    writer::ResultWriter::create(
                        dir,
                        anchor_wall,
                        self.record_requests,
                        endpoints,
                    )?
                    .boxed(),
                )
            }
            None => None,
        };
        let config = AggregatorConfig {
            interval: self.interval,
            anchor,
            warmup: self.warmup,
        };
        Ok(crate::metrics::AggregatorBuilder::default()
            .config(config)
            .sink(sink)
            .live(self.live.as_ref().map(|l| std::sync::Arc::clone(&l.0)))
            .progress(progress)
            .split(
                self.split_by
                    .clone()
                    .map(|name| std::sync::Arc::new(crate::metrics::split::HeaderSplit::new(name))),
            )
            .spawn())
    }
}

/// What identifies a run in `meta.json`, besides the summary.
#[derive(Debug, Clone)]
pub struct MetaInput {
    pub config: serde_json::Value,
    /// What the workload requests; runs compare only when it matches.
    pub dataset: serde_json::Value,
    pub anchor: SystemTime,
    pub start_at: Option<String>,
    pub actual_start: SystemTime,
    pub start_skew_ms: Option<f64>,
    pub interval: Duration,
}

impl Meta {
    pub fn new(summary: &Summary, input: MetaInput) -> Meta {
        Meta {
            schema_version: store::COUNTERS_VERSION,
            tool: summary.tool.clone(),
            command: summary.command.clone(),
            mode: summary.mode.clone(),
            model: summary.model.clone(),
            host: store::hostname(),
            seed: summary.seed,
            shard: summary.shard,
            config_hash: store::config_hash(&input.config),
            dataset_hash: store::json_hash(&input.dataset),
            config: input.config,
            anchor: humantime::format_rfc3339_millis(input.anchor).to_string(),
            start_at: input.start_at,
            actual_start: humantime::format_rfc3339_millis(input.actual_start).to_string(),
            start_skew_ms: input.start_skew_ms,
            interval_s: input.interval.as_secs_f64(),
            histograms: summary.histograms.clone(),
            clock: store::CLOCK_NOTE.into(),
            hosts: Vec::new(),
            endpoints: Vec::new(),
            preparation: None,
        }
    }
}
