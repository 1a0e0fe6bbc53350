//! `--metrics-push`: the live metrics sent to a Prometheus Pushgateway at the end of every
//! interval and once more at the end of the run, for runs too short to be scraped (CI). The
//! grouping key is `job="creb-rs"` and the shard, so several hosts of one run do not
//! replace each other's metrics; a URL that already names a group is used as given.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::metrics::live::LiveSlot;

/// The content type of the Prometheus text format, which every Pushgateway reads.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The group URL for `base`: `base` itself when its path already names a group
/// (`/metrics/job/...`), else `base/metrics/job/creb-rs/shard/<shard>`.
pub fn group_url(base: &Url, shard: u32) -> Result<Url, String> {
    if !matches!(base.scheme(), "http" | "https") {
        return Err(format!("{base}: not an http:// or https:// URL"));
    }
    if base.path().contains("/metrics/job/") {
        return Ok(base.clone());
    }
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| format!("{base}: cannot hold a path"))?
        .pop_if_empty()
        .extend(["metrics", "job", "creb-rs", "shard", &shard.to_string()]);
    Ok(url)
}

/// The Prometheus text format (0.0.4) of an OpenMetrics text: the two differ, for what
/// `prometheus-client` writes, only in the family name of counters (`x` in OpenMetrics,
/// `x_total` in the text format), `# UNIT` lines and the `# EOF` marker.
pub fn text_format(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(l) => out.push_str(&l),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Pushes a slot's metrics to one group.
#[derive(Debug, Clone)]
struct Push {
    client: reqwest::Client,
    url: Url,
    slot: Arc<LiveSlot>,
}

impl Push {
    async fn once(&self) -> Result<(), String> {
        let body = text_format(&self.slot.encode());
        self.client
            .put(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, TEXT_FORMAT)
            .body(body)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// A running `--metrics-push`: a push every interval until [`Pusher::finish`].
#[derive(Debug)]
pub struct Pusher {
    push: Push,
    task: tokio::task::JoinHandle<()>,
    failed: Arc<AtomicU64>,
}

impl Pusher {
    /// Starts pushing `slot` to `url` every `every`. A failed push is said once on stderr
    /// (unless `quiet`) and counted; the run goes on.
    pub fn start(
        url: Url,
        slot: Arc<LiveSlot>,
        every: Duration,
        tls: rustls::ClientConfig,
        quiet: bool,
    ) -> Result<Pusher, String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| e.to_string())?;
        let push = Push { client, url, slot };
        let failed = Arc::new(AtomicU64::new(0));
        let task = {
            let push = push.clone();
            let failed = Arc::clone(&failed);
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every.max(Duration::from_secs(1)));
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    if let Err(e) = push.once().await {
                        if failed.fetch_add(1, Ordering::Relaxed) == 0 && !quiet {
                            eprintln!(
                                "creb-rs: warning: --metrics-push {}: {e}",
                                crate::oci::redacted(&push.url)
                            );
                        }
                    }
                }
            })
        };
        Ok(Pusher { push, task, failed })
    }

    /// Stops the periodic pushes and pushes the final counts. The error says how many
    /// pushes failed and why the last one did.
    pub async fn finish(self) -> Result<(), String> {
        self.task.abort();
        let last = self.push.once().await;
        let failed = self.failed.load(Ordering::Relaxed) + u64::from(last.is_err());
        match last {
            Ok(()) if failed == 0 => Ok(()),
            Ok(()) => Err(format!(
                "{failed} push(es) to {} failed during the run; the final one went through",
                self.push.url
            )),
            Err(e) => Err(format!(
                "the final push to {} failed: {e}",
                crate::oci::redacted(&self.push.url)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_job_and_shard_unless_named() {
        let base = Url::parse("http://127.0.0.1:9091").unwrap();
        assert_eq!(
            group_url(&base, 2).unwrap().as_str(),
            "http://127.0.0.1:9091/metrics/job/creb-rs/shard/2"
        );
        let named = Url::parse("http://gw:9091/metrics/job/ci/run/42").unwrap();
        assert_eq!(group_url(&named, 0).unwrap(), named);
        assert!(group_url(&Url::parse("ftp://gw/").unwrap(), 0).is_err());
    }

    #[test]
    fn counters_get_their_text_format_family_names() {
        let om = "# HELP creb_operations Operations.\n# TYPE creb_operations counter\n\
                  creb_operations_total{operation=\"ping\"} 1\n# TYPE creb_in_flight gauge\n\
                  creb_in_flight 0\n# EOF\n";
        assert_eq!(
            text_format(om),
            "# HELP creb_operations_total Operations.\n# TYPE creb_operations_total counter\n\
             creb_operations_total{operation=\"ping\"} 1\n# TYPE creb_in_flight gauge\n\
             creb_in_flight 0\n"
        );
    }
}
