//! The integration tests, in one binary (one link instead of thirty, and a test thread
//! never idles while another area's slow test finishes), one module per area. Two areas
//! stay binaries of their own, `tests/capacity.rs` and `tests/compare.rs`: their tests
//! judge timing (a search's steps, a difference against run-to-run noise) and run one at a
//! time, which only a binary of their own guarantees.

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod auth;
mod bad_input;
mod bench_scripts;
mod caching;
mod client_protocol;
mod compat;
mod conventions;
mod distributed;
mod edges;
mod experiment;
mod faults;
mod fixtures;
mod fronts;
mod image;
mod merge;
mod metrics;
mod output_faults;
mod push_pull;
mod real_images;
mod recipes;
mod replay;
mod replication;
mod report_html;
mod route;
mod scale;
mod secrets;
mod shell;
mod signals;
mod simulate_cost;
mod slurm;
mod summary_schema;
mod tls;
mod token_issuer_harness;
mod trace_commands;
mod trace_import;
mod unpack;
