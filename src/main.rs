//! The `creb-rs` binary: parse flags, hand them to [`creb::commands::main_with`], exit.

#![forbid(unsafe_code)]

use std::process::ExitCode;

/// Every 64-bit build but MSVC's allocates with jemalloc (musl's allocator is slow under
/// threads; one allocator for every build keeps their figures comparable); the
/// `system-alloc` feature keeps the system's, for heap profilers.
#[cfg(all(
    not(feature = "system-alloc"),
    not(target_env = "msvc"),
    target_pointer_width = "64"
))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    ExitCode::from(creb::commands::main_with(creb::commands::parse_or_exit()))
}
