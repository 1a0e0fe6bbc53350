//! The planner alone, with a counting allocator: live heap after the catalog and every
//! 100k planned operations of a trace, no network. Separates what planning keeps from what
//! a run keeps (`heap_trace`); used for the memory figures in `docs/benchmarks.md`. It also
//! prints a fingerprint of the whole plan (SHA-256 of every planned item), so a change
//! meant to keep the plan can be checked to keep it:
//!
//! ```sh
//! cargo build --release --example plan_heap
//! target/release/examples/plan_heap TRACE [SIZE_SCALE]
//! ```
//!
//! SIZE_SCALE (as `replay --size-scale`) keeps the digests of an IBM-scale trace quick; the
//! catalog pass and the planning pass are timed (records per second).

// A global allocator cannot be written without `unsafe`; the library and the binary forbid it.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::time::Instant;

use sha2::{Digest, Sha256};
use std::process::ExitCode;

use creb::oci::manifest::ManifestFormat;
use creb::plan::catalog::{ContentOptions, Eager, Keep, SizeScale};
use creb::plan::{PlanItem, PlanOptions, Planner, RepoMap, ShardBy, ShardSpec, UploadPolicy};
use creb::trace::{Interner, ReadOptions, SpoolWriter, TraceInput, TraceReader};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting;

fn live_mb() -> f64 {
    counting_alloc::live() as f64 / 1e6
}

/// An item as the fingerprint reads it: its debug text, with a blob read's generated
/// content written as the size it was before reads carried their content (the content is
/// a function of the seed and the trace digest the item already names), and without the
/// client's name (attribution; the item already carries its hash), so fingerprints compare
/// across those changes.
fn fingerprint_text(item: &PlanItem) -> String {
    let text = without_client_name(format!("{item:?}\n"));
    let Some(at) = text
        .find("action: BlobGet {")
        .and_then(|get| text[get..].find("content: ContentSpec(").map(|c| get + c))
    else {
        return text;
    };
    let rest = &text[at..];
    let (Some(comma), Some(end)) = (rest.find("…, "), rest.find(" bytes)")) else {
        return text;
    };
    let size = &rest[comma + "…, ".len()..end];
    format!(
        "{}size: {size}{}",
        &text[..at],
        &rest[end + " bytes)".len()..]
    )
}

/// `text` without its `, client_name: …` field (the last of an operation).
fn without_client_name(text: String) -> String {
    let Some(at) = text.find(", client_name: ") else {
        return text;
    };
    let end = text[at..].find(" })").map_or(text.len(), |e| at + e);
    format!("{}{}", &text[..at], &text[end..])
}

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: plan_heap TRACE [SIZE_SCALE]");
        return ExitCode::from(2);
    };
    let scale = match std::env::args().nth(2).map(|s| s.parse::<f64>()) {
        None => 1.0,
        Some(Ok(f)) => f,
        Some(Err(e)) => {
            eprintln!("plan_heap: SIZE_SCALE: {e}");
            return ExitCode::from(2);
        }
    };
    match run(path, scale) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plan_heap: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(path: PathBuf, scale: f64) -> Result<(), Box<dyn std::error::Error>> {
    let input = TraceInput { files: vec![path] };
    let content = ContentOptions {
        sizes: SizeScale::new(scale, None)?,
        ..ContentOptions::default()
    };
    // As `replay --phase run` does it: the trace read once into the spool (interning its
    // names, building the catalog as it goes up to `EAGER_RECORDS` records), then the
    // catalog's stages over the spool for a larger trace; pass 2 streams the spool (so the
    // names need no lookup index).
    let started = Instant::now();
    let mut reader = TraceReader::open(&input, ReadOptions::default(), Interner::default())?;
    let mut spool = SpoolWriter::new();
    let mut eager = Eager::new(60_000, content, Keep::Run);
    for item in reader.by_ref() {
        let item = item?;
        eager.learn(&item);
        spool.push(&item);
    }
    let built_eagerly = eager.building();
    let mut names = reader.into_names();
    let (names_mb, reading_peak) = (
        names.heap_bytes() as f64 / 1e6,
        counting_alloc::peak() as f64 / 1e6,
    );
    names.drop_index();
    let spool = spool.finish()?;
    let spooled = started.elapsed().as_secs_f64();
    counting_alloc::reset_peak();
    let mut catalog = eager.finish(|| spool.items(), names)?;
    let built_peak = counting_alloc::peak() as f64 / 1e6;
    let pass1 = started.elapsed().as_secs_f64();
    let digests =
        catalog.compute_digests(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let objects = catalog.blobs.len() + catalog.manifests.len() + catalog.uploads().len();
    println!(
        "catalog: {} records in {pass1:.1}s ({:.0} records/s); live heap {:.2} MB for {objects} \
         objects ({} blobs, {} manifests, {} uploads, {} pushes: {:.0} bytes each), of which \
         {} distinct names {:.2} MB; {} digests kept, {} computed when used; pass 1: the \
         trace read and spooled in {spooled:.1}s, live heap peaking at {reading_peak:.2} MB \
         (names {names_mb:.2} MB with their index), then the catalog {} peaking at \
         {built_peak:.2} MB",
        catalog.items,
        catalog.items as f64 / pass1,
        live_mb(),
        catalog.blobs.len(),
        catalog.manifests.len(),
        catalog.uploads().len(),
        catalog.pushes().len(),
        live_mb() * 1e6 / objects.max(1) as f64,
        catalog.names.len(),
        catalog.names.heap_bytes() as f64 / 1e6,
        digests.computed,
        digests.on_use,
        if built_eagerly {
            "sealed from that reading"
        } else {
            "built a stage at a time over the spool"
        },
    );
    let parts: Vec<String> = catalog
        .heap_parts()
        .iter()
        .map(|(part, bytes)| format!("{part} {:.2} MB", *bytes as f64 / 1e6))
        .collect();
    println!("catalog parts: {}", parts.join(", "));
    let planning = Instant::now();
    let reader = spool.into_items();
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
        fingerprint.update(fingerprint_text(&item).as_bytes());
        if let PlanItem::Op(_) = item {
            ops += 1;
            if ops.is_multiple_of(100_000) {
                println!(
                    "{ops} operations: live heap {:.2} MB, planner entries {}",
                    live_mb(),
                    planner.held_entries()
                );
            }
        }
    }
    let pass2 = planning.elapsed().as_secs_f64();
    let counts = planner.counts();
    println!(
        "reads of prewarmed manifests: {}, their digests made again (not in the planner's \
         cache) {}",
        counts.expected_reads, counts.expected_made
    );
    println!(
        "{ops} operations planned from {} records in {pass2:.1}s ({:.0} records/s, the plan \
         fingerprinted too); plan fingerprint {}",
        catalog.items,
        catalog.items as f64 / pass2,
        hex::encode(fingerprint.finalize())
    );
    Ok(())
}
