//! The `creb-rs` binary: parse flags, hand them to [`creb::commands::main_with`], exit.

#![forbid(unsafe_code)]

use std::process::ExitCode;

/// The static musl build allocates with jemalloc (musl's allocator is slow under threads);
/// other builds keep the system's.
#[cfg(all(target_env = "musl", target_pointer_width = "64"))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    ExitCode::from(creb::commands::main_with(creb::commands::parse_or_exit()))
}
