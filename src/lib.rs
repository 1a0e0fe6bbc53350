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
//!
//! The library's face, what a caller may use, is the `pub` modules below; the others are
//! internal (ARCHITECTURE.md, "The library's face", says which and where to start).

#![forbid(unsafe_code)]
// Every type the face reaches can be named from outside: a face type that names an internal
// one re-exports it.
#![warn(unnameable_types)]
// A function reads as one step: over 60 lines (clippy.toml) is refused, but for the ones
// marked `#[allow(clippy::too_many_lines)]`, the list still to split (DEVELOPERS.md).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod analysis;
pub mod auth;
pub mod capacity;
pub mod client;
pub mod commands;
pub mod content;
pub mod digest;
pub(crate) mod exec;
pub mod experiment;
mod fast_hash;
pub mod merge;
pub mod metrics;
pub mod net;
pub mod oci;
pub(crate) mod outfile;
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
pub(crate) mod unpack;

pub use commands::{run, Cli, ExitStatus};
pub use shutdown::Shutdown;
pub use units::ByteSize;
