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
//! `heap.csv`). The counters cost two atomic operations per allocation, which is why they
//! live here and not in the binary.

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use creb::shutdown::Shutdown;
use creb::Cli;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(size: usize) {
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

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
            LIVE.load(Ordering::Relaxed),
            PEAK.load(Ordering::Relaxed),
            ALLOCATIONS.load(Ordering::Relaxed),
            rss_kib()
        );
        let _ = out.flush();
        std::thread::sleep(every);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let path = std::env::var("CREB_HEAP_CSV").unwrap_or_else(|_| "heap.csv".into());
    let every = std::env::var("CREB_HEAP_EVERY_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    std::thread::spawn(move || sample_forever(path, Duration::from_secs(every)));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("heap_trace: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let status = runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        creb::exit::run_with(cli, shutdown).await
    });
    ExitCode::from(status.code())
}
