//! The planner alone, with a counting allocator: live heap after the catalog and every
//! 100k planned operations of a trace, no network. Separates what planning keeps from what
//! a run keeps (`heap_trace`); used for the memory figures in `docs/benchmarks.md`. It also
//! prints a fingerprint of the whole plan (SHA-256 of every planned item), so a change
//! meant to keep the plan can be checked to keep it:
//!
//! ```sh
//! cargo build --release --example plan_heap
//! target/release/examples/plan_heap TRACE
//! ```

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use std::process::ExitCode;

use creb::exec::canary::available_cores;
use creb::oci::manifest::ManifestFormat;
use creb::plan::catalog::{Catalog, ContentOptions};
use creb::plan::{PlanItem, PlanOptions, Planner, RepoMap, ShardBy, ShardSpec, UploadPolicy};
use creb::trace::{Interner, ReadOptions, TraceInput, TraceReader};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

fn live_mb() -> f64 {
    counting_alloc::live() as f64 / 1e6
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
    println!(
        "catalog: live heap {:.2} MB, of which {} distinct names {:.2} MB",
        live_mb(),
        catalog.names.len(),
        catalog.names.heap_bytes() as f64 / 1e6
    );
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
    let mut fingerprint = Sha256::new();
    while let Some(item) = planner.next() {
        let item = item?;
        fingerprint.update(format!("{item:?}\n").as_bytes());
        if let PlanItem::Op(_) = item {
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
    println!(
        "{ops} operations planned; plan fingerprint {}",
        hex::encode(fingerprint.finalize())
    );
    Ok(())
}
