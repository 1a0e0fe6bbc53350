//! The synthetic workloads, `push` and `pull`, as library calls: each takes its validated
//! settings and an open [`crate::session::Session`], connects, drives its images through
//! [`crate::exec`]'s bounded driver, and summarizes and publishes what it measured. The
//! command layer keeps their flags and the wiring (`commands/push.rs`, `commands/pull.rs`).

pub mod pull;
pub mod push;
