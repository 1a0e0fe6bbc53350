//! Offline analysis of traces and results: trace characterization, sampling, synthesis and
//! validation (`trace`), cache and prefetch simulation (`simulate`), and the cost model
//! (`cost`). Nothing here talks to a registry.

pub mod cost;
pub mod simulate;
pub mod trace_cmd;
