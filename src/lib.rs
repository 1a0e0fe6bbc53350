//! creb-rs: a container registry benchmark.
//!
//! Stages of a run, one module each: `cli` (raw flags) → `config` (validated settings) →
//! `workload` (what to do: synthetic push/pull) → `oci` (how to talk to a registry, with
//! `auth`) → `metrics` (one aggregator owning every histogram) → `results` (the result
//! directory and `summary.json`) → `report` (what people read). `content` generates the
//! deterministic blob bytes everything pushes.
//!
//! `main.rs` only parses arguments, builds the runtime and maps [`run`]'s outcome to an
//! exit code; tests drive [`run`] in-process.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod auth;
pub mod cli;
pub mod compare;
pub mod content;
pub mod exec;
pub mod exit;
pub mod experiment;
pub mod fast_hash;
pub mod merge;
pub mod metrics;
pub mod oci;
pub mod plan;
pub mod progress;
pub mod replay;
pub mod report;
pub mod results;
pub mod route;
pub mod shutdown;
pub mod trace;
pub mod units;
pub mod workload;

pub use cli::Cli;
pub use exit::{run, ExitStatus};
