//! Trace planning: records per second through the two passes a replay makes before any
//! request is sent — pass 1, `Catalog::build` (objects, sizes, layers, uploads), and pass 2,
//! the `Planner` turning records into operations (session linking, sharding, naming, building
//! pushed manifests). Inputs are 100k records of a synthetic trace calibrated to two IBM
//! registries (`dal`, pull-heavy; `dev`, push-heavy), generated once with the library's own
//! `ProfileGenerator` into a temporary file.
//!
//! `catalog_100k/*` and `planner_100k/*` feed the passes records already parsed, so they
//! measure the planning itself (parsing is `benches/trace_parse.rs`); `*_from_file` run each
//! pass over a `TraceReader` of the file, parsing included; `catalog_100k_spooling/dal` is
//! pass 1 as `replay` runs it (`src/replay/catalog.rs`: reading the file and writing the items to
//! the spool) and `planner_100k_from_spool/dal` pass 2 as `replay` runs it (reading them
//! back). Digests are computed once in setup, as replay does before pass 2.
//! Goal: the planner thread never limits a replay — pass 2 from the file (parsing included)
//! at ≥ 200k records/s on one core, far above the rates replays reach (a local
//! `docker-registry` serves ~1.2k manifest GETs/s, see docs/benchmarks.md).

use std::path::{Path, PathBuf};

use creb::oci::manifest::ManifestFormat;
use creb::plan::catalog::{Catalog, ContentOptions, Keep};
use creb::plan::{PlanItem, PlanOptions, Planner, RepoMap, ShardBy, ShardSpec, UploadPolicy};
use creb::trace::synth::{Profile, ProfileGenerator, ProfileOptions, SynthLength};
use creb::trace::write::write_file_iter;
use creb::trace::{Interner, Item, ReadOptions, SpoolWriter, TraceInput, TraceReader};
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};

const RECORDS: u64 = 100_000;
/// The replay's default `--session-gap` (60s).
const SESSION_GAP_MS: i64 = 60_000;

/// The plan options of `creb-rs replay` with its defaults: one shard, by client, real time,
/// uploads as the trace made them, repository names kept, OCI manifests.
fn plan_options() -> PlanOptions {
    PlanOptions {
        shard: ShardSpec::ALL,
        shard_by: ShardBy::Client,
        speed: 1.0,
        upload: UploadPolicy::Trace,
        repos: RepoMap::Keep { prefix: None },
        manifest_format: ManifestFormat::Oci,
        session_gap_ms: SESSION_GAP_MS,
    }
}

/// Writes `RECORDS` records of `profile` (seed 1; blobs capped at 64 KiB so the setup's
/// digests are quick — sizes do not change the planning work).
fn write_trace(dir: &Path, profile: Profile) -> PathBuf {
    let path = dir.join(format!("{}.json", profile.as_str()));
    let opts = ProfileOptions {
        max_object_size: Some(64 * 1024),
        ..ProfileOptions::new(profile, SynthLength::Requests(RECORDS), 1)
    };
    let written = write_file_iter(&path, ProfileGenerator::new(&opts)).expect("write trace");
    assert_eq!(written, RECORDS);
    path
}

fn reader(path: &Path, names: Interner) -> TraceReader {
    let input = TraceInput {
        files: vec![path.to_path_buf()],
    };
    TraceReader::open(&input, ReadOptions::default(), names).expect("open trace")
}

/// Everything a pass needs: the parsed items and the catalog replay builds before pass 2.
struct Prepared {
    path: PathBuf,
    items: Vec<Item>,
    catalog: Catalog,
}

fn prepare(dir: &Path, profile: Profile) -> Prepared {
    let path = write_trace(dir, profile);
    let mut reader = reader(&path, Interner::default());
    let items: Vec<Item> = reader
        .by_ref()
        .collect::<Result<_, _>>()
        .expect("valid trace");
    assert_eq!(items.len() as u64, RECORDS);
    // As `build_catalog` in src/replay/catalog.rs.
    let mut names = reader.into_names();
    names.freeze();
    let mut catalog = Catalog::build(
        items.iter().copied().map(Ok),
        SESSION_GAP_MS,
        ContentOptions::default(),
        Keep::Prewarm,
    )
    .expect("catalog")
    .seal(names);
    catalog.compute_digests(std::thread::available_parallelism().map_or(1, |n| n.get()));
    // The spool replay writes in pass 1: its size per record (docs/benchmarks.md).
    let mut spool = SpoolWriter::new();
    for item in &items {
        spool.push(item);
    }
    let spool = spool.finish().expect("spool");
    eprintln!(
        "{}: spool of {} records, {:.1} bytes a record",
        profile.as_str(),
        spool.len(),
        spool.bytes() as f64 / spool.len() as f64
    );
    // Every record is accounted for once (one shard).
    let mut planner = Planner::new(&catalog, items.iter().copied().map(Ok), plan_options());
    let ops = planner
        .by_ref()
        .filter(|i| matches!(i, Ok(PlanItem::Op(_))))
        .count();
    assert_eq!(planner.counts().records, RECORDS);
    assert!(ops > 0);
    Prepared {
        path,
        items,
        catalog,
    }
}

/// Pass 2 to the end; the number of operations planned.
fn drain<I>(mut planner: Planner<'_, I>) -> u64
where
    I: Iterator<Item = Result<Item, creb::trace::TraceError>>,
{
    let mut ops = 0;
    for item in &mut planner {
        if let PlanItem::Op(_) = item.expect("plannable trace") {
            ops += 1;
        }
    }
    ops
}

fn planning(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let prepared: Vec<(Profile, Prepared)> = [Profile::Dal, Profile::Dev]
        .into_iter()
        .map(|p| (p, prepare(dir.path(), p)))
        .collect();

    let mut group = c.benchmark_group("planning");
    group.throughput(Throughput::Elements(RECORDS));
    // Iterations of 10–300 ms: the same count per sample keeps the run short.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(5));
    for (profile, p) in &prepared {
        group.bench_function(BenchmarkId::new("catalog_100k", profile.as_str()), |b| {
            b.iter(|| {
                Catalog::build(
                    p.items.iter().copied().map(Ok),
                    SESSION_GAP_MS,
                    ContentOptions::default(),
                    Keep::Prewarm,
                )
                .expect("catalog")
                .seal(p.catalog.names.clone())
            })
        });
        group.bench_function(BenchmarkId::new("planner_100k", profile.as_str()), |b| {
            b.iter(|| {
                drain(Planner::new(
                    &p.catalog,
                    p.items.iter().copied().map(Ok),
                    plan_options(),
                ))
            })
        });
    }
    // Both passes as replay runs them, parsing included (one profile is enough).
    let (_, dal) = &prepared[0];
    group.bench_function("catalog_100k_from_file/dal", |b| {
        b.iter(|| {
            let mut reader = reader(&dal.path, Interner::default());
            Catalog::build(
                &mut reader,
                SESSION_GAP_MS,
                ContentOptions::default(),
                Keep::Prewarm,
            )
            .expect("catalog")
            .seal(reader.into_names())
        })
    });
    group.bench_function("planner_100k_from_file/dal", |b| {
        b.iter(|| {
            drain(Planner::new(
                &dal.catalog,
                reader(&dal.path, dal.catalog.names.clone()),
                plan_options(),
            ))
        })
    });
    group.bench_function("catalog_100k_spooling/dal", |b| {
        b.iter(|| {
            let mut reader = reader(&dal.path, Interner::default());
            let mut spool = SpoolWriter::new();
            let items = (&mut reader).inspect(|item| spool.push(item.as_ref().expect("valid")));
            let draft = Catalog::build(
                items,
                SESSION_GAP_MS,
                ContentOptions::default(),
                Keep::Prewarm,
            )
            .expect("catalog");
            (
                draft.seal(reader.into_names()),
                spool.finish().expect("spool"),
            )
        })
    });
    group.bench_function("planner_100k_from_spool/dal", |b| {
        b.iter_batched(
            || {
                let mut spool = SpoolWriter::new();
                for item in &dal.items {
                    spool.push(item);
                }
                spool.finish().expect("spool")
            },
            |spool| {
                drain(Planner::new(
                    &dal.catalog,
                    spool.into_items(),
                    plan_options(),
                ))
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, planning);
criterion_main!(benches);
