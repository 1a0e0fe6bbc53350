//! The planner alone, with a counting allocator: live heap after the catalog and every
//! 100k planned operations of a trace, no network. Separates what planning keeps from what
//! a run keeps (`heap_trace`); used for the memory figures in `docs/benchmarks.md`:
//!
//! ```sh
//! cargo build --release --example plan_heap
//! target/release/examples/plan_heap TRACE
//! ```

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use creb::exec::canary::available_cores;
use creb::oci::manifest::ManifestFormat;
use creb::plan::catalog::{Catalog, ContentOptions};
use creb::plan::{PlanItem, PlanOptions, Planner, RepoMap, ShardBy, ShardSpec, UploadPolicy};
use creb::trace::{Interner, ReadOptions, TraceInput, TraceReader};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
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
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_mb() -> f64 {
    LIVE.load(Ordering::Relaxed) as f64 / 1e6
}

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: plan_heap TRACE");
        return ExitCode::from(2);
    };
    match run(path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plan_heap: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(path: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let input = TraceInput { files: vec![path] };
    // As `replay` does it: pass 1 builds the catalog, pass 2 streams the trace again.
    let mut reader = TraceReader::open(&input, ReadOptions::default(), Interner::default())?;
    let mut catalog = Catalog::build(reader.by_ref(), 60_000, ContentOptions::default())?;
    catalog.names = reader.into_names();
    catalog.names.freeze();
    catalog.compute_digests(available_cores());
    println!("catalog: live heap {:.2} MB", live_mb());
    let reader = TraceReader::open(&input, ReadOptions::default(), catalog.names.clone())?;
    let options = PlanOptions {
        shard: ShardSpec::ALL,
        shard_by: ShardBy::Client,
        speed: 1.0,
        upload: UploadPolicy::Trace,
        repos: RepoMap::Keep { prefix: None },
        manifest_format: ManifestFormat::Oci,
        session_gap_ms: 60_000,
    };
    let mut planner = Planner::new(&catalog, reader, options);
    let mut ops = 0u64;
    while let Some(item) = planner.next() {
        if let PlanItem::Op(_) = item? {
            ops += 1;
            if ops % 100_000 == 0 {
                println!(
                    "{ops} operations: live heap {:.2} MB, planner entries {}",
                    live_mb(),
                    planner.held_entries()
                );
            }
        }
    }
    println!("{ops} operations planned");
    Ok(())
}
