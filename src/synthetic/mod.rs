//! The synthetic workloads, `push` and `pull`, as library calls: each takes its validated
//! settings and an open [`crate::session::Session`], connects, drives its images through
//! `exec`'s bounded driver, and summarizes and publishes what it measured. The
//! command layer keeps their flags and the wiring (`commands/push.rs`, `commands/pull.rs`).

pub mod pull;
pub mod push;

// The settings of the drivers push and pull name (the drivers are internal).
pub use crate::exec::pull::PullTargets;
pub use crate::exec::push::{HashWhen, PushWork};
pub use crate::exec::replicate::{ReplicaSpec, ReplicaWork};
pub use crate::exec::unpack::UnpackWork;
pub use crate::unpack::Limits as UnpackLimits;
