//! `creb-rs` with a counting allocator: the same command line, plus a CSV of the live heap.
//!
//! RSS alone cannot tell memory that is still in use from memory the allocator keeps after
//! it was freed (fragmentation, per-thread caches). This wrapper counts every allocation and
//! free, so a rising RSS with a flat live heap is the allocator, and a rising live heap is
//! state that grows. Used for the memory figures in `docs/benchmarks.md`:
//!
//! ```sh
//! cargo build --release --example heap_trace
//! CREB_HEAP_CSV=heap.csv target/release/examples/heap_trace replay TRACE --registry URL ...
//! ```
//!
//! Every `CREB_HEAP_EVERY_S` seconds (default 5) it appends
//! `t_s,live_bytes,peak_live_bytes,allocations,rss_kib` to `CREB_HEAP_CSV` (default
//! `heap.csv`).

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn sample_forever(path: String, every: Duration) {
    let Ok(mut out) = std::fs::File::create(&path) else {
        eprintln!("heap_trace: cannot create {path}");
        return;
    };
    let start = Instant::now();
    let _ = writeln!(out, "t_s,live_bytes,peak_live_bytes,allocations,rss_kib");
    loop {
        let _ = writeln!(
            out,
            "{:.0},{},{},{},{}",
            start.elapsed().as_secs_f64(),
            counting_alloc::live(),
            counting_alloc::peak(),
            counting_alloc::allocations(),
            rss_kib()
        );
        let _ = out.flush();
        std::thread::sleep(every);
    }
}

fn main() -> ExitCode {
    let cli = creb::commands::parse_or_exit();
    let path = std::env::var("CREB_HEAP_CSV").unwrap_or_else(|_| "heap.csv".into());
    let every = std::env::var("CREB_HEAP_EVERY_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    std::thread::spawn(move || sample_forever(path, Duration::from_secs(every)));
    ExitCode::from(creb::commands::main_with(cli))
}
