//! Where a run's results go and what is shown of it while it runs: the settings the output
//! flags choose, as the session reads them (no flag type below the command layer).

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::metrics::live::SharedLive;
use crate::results::summary::MaxErrors;

/// Where results go and how they are judged and watched.
#[derive(Debug, Clone)]
pub struct OutputOptions {
    /// The result directory, if any.
    pub output_dir: Option<PathBuf>,
    /// Replace result-named files creb-rs did not write.
    pub force: bool,
    /// The summary as JSON on stdout instead of the table.
    pub json: bool,
    /// Nothing but the result on the terminal.
    pub quiet: bool,
    /// Threshold expressions, judged on the finished run.
    pub fail_if: Vec<String>,
    /// The result directory thresholds relative to a baseline compare with.
    pub baseline: Option<PathBuf>,
    /// Failed operations tolerated before exit 1.
    pub max_errors: MaxErrors,
    /// The length of the intervals of histograms.hlog and timeline.csv.
    pub interval: Duration,
    /// How long after the start nothing is measured (whole intervals).
    pub warmup: Duration,
    /// Serve the live metrics here.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How long the live endpoint serves after the run.
    pub metrics_linger: Duration,
    /// The registry's own Prometheus endpoints, read before, during and after.
    pub registry_metrics: Vec<Url>,
    /// How often they are read during the run.
    pub registry_metrics_every: Duration,
    /// A Pushgateway the live metrics are pushed to.
    pub metrics_push: Option<Url>,
    /// Under `creb-rs run`: the endpoint the cells feed in turn.
    pub live: Option<SharedLive>,
    /// Also write requests.csv.
    pub record_requests: bool,
    /// Count and time operations by the value of this response header too.
    pub split_by_header: Option<http::HeaderName>,
}

impl Default for OutputOptions {
    fn default() -> OutputOptions {
        OutputOptions {
            output_dir: None,
            force: false,
            json: false,
            quiet: false,
            fail_if: Vec::new(),
            baseline: None,
            max_errors: MaxErrors::default(),
            interval: Duration::from_secs(1),
            warmup: Duration::ZERO,
            metrics_listen: None,
            metrics_linger: Duration::ZERO,
            registry_metrics: Vec::new(),
            registry_metrics_every: Duration::from_secs(10),
            metrics_push: None,
            live: None,
            record_requests: false,
            split_by_header: None,
        }
    }
}
