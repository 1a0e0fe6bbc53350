//! creb-rs: a container registry benchmark.
//!
//! Layers (see `ARCHITECTURE.md`): a module uses only the modules listed before it in this
//! table, its own layer included, so the module graph has no cycle. Flags (clap) exist only
//! in `commands`. `tests/it/architecture.rs` reads this table and checks the code against it.
//!
//! | layer | modules |
//! |---|---|
//! | foundations | `units`, `fast_hash`, `digest`, `outfile`, `content`, `shutdown`, `progress` |
//! | domain cores | `metrics`, `oci`, `net`, `auth`, `client`, `trace`, `unpack`, `route`, `plan`, `results` |
//! | engines | `exec`, `analysis`, `merge`, `experiment`, `report`, `session`, `synthetic`, `replay`, `capacity`, `runner` |
//! | commands | `commands` |
//!
//! `main.rs` only parses arguments and hands them to [`commands::main_with`]; tests drive
//! [`commands::run()`] in-process.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod auth;
pub mod capacity;
pub mod client;
pub mod commands;
pub mod content;
pub mod digest;
pub mod exec;
pub mod experiment;
mod fast_hash;
pub mod merge;
pub mod metrics;
pub mod net;
pub mod oci;
pub mod outfile;
pub mod plan;
mod progress;
pub mod replay;
pub mod report;
pub mod results;
pub mod route;
pub mod runner;
pub mod session;
mod shutdown;
pub mod synthetic;
pub mod trace;
mod units;
pub mod unpack;

pub use commands::{run, Cli, ExitStatus};
pub use shutdown::Shutdown;
