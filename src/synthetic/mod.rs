//! The synthetic workloads, `push` and `pull`, as library calls: each takes its validated
//! settings and an open [`crate::session::Session`], connects, drives its images through
//! `exec`'s bounded driver, and summarizes and publishes what it measured. The
//! command layer keeps their flags and the wiring (`commands/push.rs`, `commands/pull.rs`).

pub mod pull;
pub mod push;

use std::time::{Duration, SystemTime};

use crate::results::config::RunConfig;
use crate::results::{RunInfo, Shard, Warning};

// The settings of the drivers push and pull name (the drivers are internal).
pub use crate::exec::pull::PullTargets;
pub use crate::exec::push::{HashWhen, PushWork};
pub use crate::exec::replicate::{ReplicaSpec, ReplicaWork};
pub use crate::exec::unpack::UnpackWork;
pub use crate::unpack::Limits as UnpackLimits;

/// A closed loop of images (push, pull) as its summary says it: one shard, no trace, no
/// checks.
struct ClosedLoop {
    command: &'static str,
    concurrency: usize,
    registry: String,
    seed: u64,
}

impl ClosedLoop {
    /// Its run info, from when it started, how long it ran and whether a stop cut it off.
    fn run_info(
        self,
        (started_at, duration, interrupted): (SystemTime, Duration, bool),
        warnings: Vec<Warning>,
        config: RunConfig,
    ) -> RunInfo {
        RunInfo {
            command: self.command.into(),
            mode: self.command.into(),
            model: "closed".into(),
            concurrency: self.concurrency as u64,
            registry: self.registry,
            seed: self.seed,
            shard: Shard { index: 0, count: 1 },
            started_at,
            duration,
            interrupted,
            trace: None,
            checks: None,
            warnings,
            config,
        }
    }
}
