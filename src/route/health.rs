//! Endpoint health: which endpoints are up, and every change of that.
//!
//! An endpoint is marked down after `down_after` consecutive operations failed to connect
//! to it (refused or unreachable: [`ErrorKind::Connect`]); a success resets the count,
//! other failures (an HTTP error, a reset mid-exchange) neither count nor reset it. While
//! it is down a probe sends `GET /v2/` every `probe_interval` and marks it up on any HTTP
//! answer. Each transition is kept with its instant (see [`Transition`]). Operations meant
//! for a down endpoint go to the next candidate that is up (failover) or fail as
//! `endpoint_down` without a request.
//!
//! Only failures and transitions write shared state; the success path reads one atomic and
//! writes nothing unless a failure streak was open. The transition list is behind a mutex
//! that only transitions take.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{OpCtx, RegistryClient};
use crate::metrics::{ErrorKind, Event};

/// One change of an endpoint's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// `down` or `up`.
    pub state: String,
    /// Wall clock, RFC 3339 (for people and for lining up with other logs).
    pub at: String,
    /// Seconds after the run's anchor (monotonic clock), the timeline's time axis.
    pub offset_s: f64,
    /// Down: the consecutive connection failures that marked it; up: probes sent.
    pub after: u32,
    /// Merged results: the host that saw it (every host judges an endpoint on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    consecutive: AtomicU32,
    down: AtomicBool,
}

/// Where an operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Send it to this endpoint; `failed_over` when the preferred one was down.
    Use { endpoint: usize, failed_over: bool },
    /// The preferred endpoint is down and failover is off (or every endpoint is down):
    /// count the operation as failed on it.
    Down { endpoint: usize },
}

/// Health of every endpoint of a run.
#[derive(Debug)]
pub struct Health {
    states: Vec<State>,
    /// 0: never mark an endpoint down (a single endpoint: failures are just failures).
    down_after: u32,
    failover: bool,
    anchor: Instant,
    anchor_wall: SystemTime,
    transitions: Mutex<Vec<Vec<Transition>>>,
}

impl Health {
    pub fn new(endpoints: usize, down_after: u32, failover: bool) -> Health {
        Health {
            states: (0..endpoints).map(|_| State::default()).collect(),
            down_after,
            failover,
            anchor: Instant::now(),
            anchor_wall: SystemTime::now(),
            transitions: Mutex::new(vec![Vec::new(); endpoints]),
        }
    }

    /// Health that never marks anything down.
    pub fn disabled(endpoints: usize) -> Health {
        Health::new(endpoints, 0, true)
    }

    /// Transition offsets count from here (the run's anchor).
    pub fn set_anchor(&mut self, anchor: Instant, anchor_wall: SystemTime) {
        self.anchor = anchor;
        self.anchor_wall = anchor_wall;
    }

    pub fn is_up(&self, endpoint: usize) -> bool {
        self.states
            .get(endpoint)
            .is_some_and(|s| !s.down.load(Ordering::Relaxed))
    }

    /// The first candidate that is up, or the verdict that the operation fails.
    pub fn choose(&self, candidates: &[usize]) -> Choice {
        let first = candidates.first().copied().unwrap_or(0);
        if self.is_up(first) {
            return Choice::Use {
                endpoint: first,
                failed_over: false,
            };
        }
        if self.failover {
            if let Some(&next) = candidates.iter().find(|&&i| self.is_up(i)) {
                return Choice::Use {
                    endpoint: next,
                    failed_over: true,
                };
            }
        }
        Choice::Down { endpoint: first }
    }

    /// Notes an operation's outcome on `endpoint`; true when this marked it down (the
    /// caller starts the probe).
    pub fn observe(&self, endpoint: usize, error: Option<ErrorKind>) -> bool {
        let Some(state) = self.states.get(endpoint) else {
            return false;
        };
        match error {
            None => {
                if state.consecutive.load(Ordering::Relaxed) != 0 {
                    state.consecutive.store(0, Ordering::Relaxed);
                }
                false
            }
            Some(ErrorKind::Connect) if self.down_after > 0 => {
                let n = state.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= self.down_after
                    && state
                        .down
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    self.note(endpoint, "down", n);
                    true
                } else {
                    false
                }
            }
            Some(_) => false,
        }
    }

    fn mark_up(&self, endpoint: usize, probes: u32) {
        if let Some(state) = self.states.get(endpoint) {
            state.consecutive.store(0, Ordering::Relaxed);
            if state
                .down
                .compare_exchange(true, false, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.note(endpoint, "up", probes);
            }
        }
    }

    fn note(&self, endpoint: usize, state: &str, after: u32) {
        let offset = Instant::now().saturating_duration_since(self.anchor);
        let transition = Transition {
            state: state.into(),
            at: humantime::format_rfc3339_millis(self.anchor_wall + offset).to_string(),
            offset_s: (offset.as_secs_f64() * 1e3).round() / 1e3,
            after,
            host: None,
        };
        if let Ok(mut all) = self.transitions.lock() {
            if let Some(list) = all.get_mut(endpoint) {
                list.push(transition);
            }
        }
    }

    /// Every endpoint's transitions, in order.
    pub fn transitions(&self) -> Vec<Vec<Transition>> {
        self.transitions
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }
}

/// Probes a down endpoint with `GET /v2/` every `interval` until it answers (any HTTP
/// status counts: the node is serving again) or `stop` fires. `client` must not record
/// (probes are not workload operations); `events` counts the transition. Bounded: one probe
/// per interval, each within the client's timeouts, and it ends with the run.
pub async fn probe_until_up(
    health: std::sync::Arc<Health>,
    endpoint: usize,
    client: RegistryClient,
    events: crate::metrics::Recorder,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut probes = 0u32;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        probes += 1;
        let answered = tokio::select! {
            _ = stop.cancelled() => return,
            r = client.ping(OpCtx::default()) => match r {
                Ok(()) => true,
                Err(e) => !matches!(
                    e.kind(),
                    ErrorKind::Connect
                        | ErrorKind::Dns
                        | ErrorKind::Timeout
                        | ErrorKind::Reset
                        | ErrorKind::ConnectionClosed
                ),
            },
        };
        if answered {
            health.mark_up(endpoint, probes);
            events.event(Event::EndpointUp).await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_goes_down_after_n_consecutive_connection_failures() {
        let h = Health::new(3, 3, true);
        assert!(!h.observe(1, Some(ErrorKind::Connect)));
        assert!(!h.observe(1, Some(ErrorKind::Connect)));
        // A success breaks the streak; an HTTP error neither counts nor breaks it.
        assert!(!h.observe(1, None));
        assert!(!h.observe(1, Some(ErrorKind::Connect)));
        assert!(!h.observe(1, Some(ErrorKind::Http(500))));
        assert!(!h.observe(1, Some(ErrorKind::Connect)));
        assert!(h.is_up(1));
        assert!(h.observe(1, Some(ErrorKind::Connect)), "third in a row");
        assert!(!h.is_up(1));
        assert!(!h.observe(1, Some(ErrorKind::Connect)), "marked once");
        let t = h.transitions();
        assert_eq!(t[1].len(), 1);
        assert_eq!(t[1][0].state, "down");
        assert_eq!(t[1][0].after, 3);
        assert!(t[0].is_empty() && t[2].is_empty());
    }

    #[test]
    fn failover_takes_the_next_candidate_that_is_up() {
        let h = Health::new(3, 1, true);
        h.observe(2, Some(ErrorKind::Connect));
        assert_eq!(
            h.choose(&[2, 0, 1]),
            Choice::Use {
                endpoint: 0,
                failed_over: true
            }
        );
        assert_eq!(
            h.choose(&[1, 2, 0]),
            Choice::Use {
                endpoint: 1,
                failed_over: false
            }
        );
        h.observe(0, Some(ErrorKind::Connect));
        h.observe(1, Some(ErrorKind::Connect));
        assert_eq!(h.choose(&[2, 0, 1]), Choice::Down { endpoint: 2 });
        h.mark_up(0, 4);
        assert_eq!(
            h.choose(&[2, 0, 1]),
            Choice::Use {
                endpoint: 0,
                failed_over: true
            }
        );
        let t = h.transitions();
        assert_eq!(
            t[0].iter().map(|t| t.state.as_str()).collect::<Vec<_>>(),
            ["down", "up"]
        );
        assert_eq!(t[0][1].after, 4);
    }

    #[test]
    fn without_failover_a_down_endpoint_fails_its_share() {
        let h = Health::new(2, 1, false);
        h.observe(0, Some(ErrorKind::Connect));
        assert_eq!(h.choose(&[0, 1]), Choice::Down { endpoint: 0 });
        assert_eq!(
            h.choose(&[1, 0]),
            Choice::Use {
                endpoint: 1,
                failed_over: false
            }
        );
    }

    #[test]
    fn disabled_health_never_marks_an_endpoint_down() {
        let h = Health::disabled(1);
        for _ in 0..100 {
            assert!(!h.observe(0, Some(ErrorKind::Connect)));
        }
        assert!(h.is_up(0));
    }
}
