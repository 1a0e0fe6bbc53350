//! Offline analysis of traces and results: trace characterization, sampling and validation
//! (`trace`), cache and prefetch simulation (`simulate`), and the cost model (`cost`).
//! Nothing here talks to a registry, and nothing here knows about flags: the commands in
//! `crate::commands` turn flags into the settings these take.

pub mod cost;
pub mod simulate;
pub mod trace;
