//! Opt-in retries (`--retry 429,5xx,timeout,connection --max-retries N --backoff D`).
//!
//! Off by default: a benchmark measures what the registry does, and a retried request hides
//! a failure. When on, only requests that are safe to send again are retried (GET, HEAD,
//! DELETE, manifest PUT, the POST that opens an upload — never a PATCH or the PUT that closes
//! an upload, whose state on the registry is unknown after a failure); the wait is the
//! `Retry-After` of a 429/503 when given (capped), else exponential backoff with jitter;
//! every retry is counted (`events.retry`) and its time stays inside the operation's latency.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use crate::metrics::ErrorKind;

/// What may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// 429 Too Many Requests.
    Throttled,
    /// Any 5xx.
    ServerError,
    /// No response within the timeout.
    Timeout,
    /// Connect failures and resets.
    Connection,
}

/// The retry policy of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    pub on: BTreeSet<RetryOn>,
    pub max_retries: u32,
    /// First backoff; doubles per retry, with ±50% jitter.
    pub backoff: Duration,
    /// The longest wait, `Retry-After` included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            on: BTreeSet::new(),
            max_retries: 0,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// Parses `429,5xx,timeout,connection` (also `throttled`, `server`, `connect`, `reset`).
pub fn parse_retry_on(list: &str) -> Result<BTreeSet<RetryOn>, String> {
    let mut on = BTreeSet::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        on.insert(match item {
            "429" | "throttled" => RetryOn::Throttled,
            "5xx" | "server" => RetryOn::ServerError,
            "timeout" => RetryOn::Timeout,
            "connection" | "connect" | "reset" => RetryOn::Connection,
            other => {
                return Err(format!(
                    "'{other}' is not a retry class (use 429, 5xx, timeout, connection)"
                ))
            }
        });
    }
    if on.is_empty() {
        return Err("--retry needs at least one class (429, 5xx, timeout, connection)".into());
    }
    Ok(on)
}

impl RetryPolicy {
    pub fn enabled(&self) -> bool {
        !self.on.is_empty() && self.max_retries > 0
    }

    /// Whether a failure of this kind may be retried.
    pub fn covers(&self, kind: ErrorKind) -> bool {
        let class = match kind {
            ErrorKind::Http(429) => RetryOn::Throttled,
            ErrorKind::Http(s) if (500..600).contains(&s) => RetryOn::ServerError,
            ErrorKind::Timeout => RetryOn::Timeout,
            ErrorKind::Connect | ErrorKind::Reset | ErrorKind::ConnectionClosed => {
                RetryOn::Connection
            }
            _ => return false,
        };
        self.on.contains(&class)
    }

    /// How long to wait before retry number `attempt` (1-based).
    pub fn wait(&self, attempt: u32, retry_after_s: Option<u64>, jitter: f64) -> Duration {
        if let Some(s) = retry_after_s {
            return Duration::from_secs(s).min(self.max_backoff);
        }
        let exp = self
            .backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        exp.mul_f64(0.5 + jitter.clamp(0.0, 1.0))
            .min(self.max_backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_waits() {
        let on = parse_retry_on("429, 5xx").unwrap();
        let p = RetryPolicy {
            on,
            max_retries: 3,
            ..RetryPolicy::default()
        };
        assert!(p.enabled());
        assert!(p.covers(ErrorKind::Http(429)));
        assert!(p.covers(ErrorKind::Http(503)));
        assert!(!p.covers(ErrorKind::Http(404)));
        assert!(!p.covers(ErrorKind::Timeout));
        assert_eq!(p.wait(1, Some(7), 0.5), Duration::from_secs(7));
        assert_eq!(p.wait(1, Some(999), 0.5), Duration::from_secs(30));
        assert_eq!(p.wait(1, None, 0.5), Duration::from_millis(100));
        assert_eq!(p.wait(3, None, 0.5), Duration::from_millis(400));
        assert!(parse_retry_on("sometimes").is_err());
        assert!(parse_retry_on("").is_err());
        assert!(!RetryPolicy::default().enabled());
    }
}
