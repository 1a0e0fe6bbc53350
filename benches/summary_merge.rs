//! Results: the cost of the interval log, of the summary and of `creb-rs merge`.
//!
//! The run is delay mode with 30 series (6 operations × 5 size classes) and 40 samples per
//! series and one-second interval; each cell has latency, service, schedule-lag and TTFB
//! histograms (error latency for the 2% that fail): ~135 encoded histograms per interval.
//!
//! - `hlog/write_300x30`: a 5-minute `histograms.hlog` as the aggregator's sink writes it
//!   (`hlog::write_header`, then `hlog::write_interval` per interval from its sparse table,
//!   each series made dense in one scratch histogram in turn)
//!   into memory; the 300 intervals cycle through 5 distinct tables;
//! - `hlog/read_20x30`: `hlog::read` of 20 such intervals (what `merge`, `report` and
//!   `compare` load), with its checks of every encoded histogram;
//! - `summary/build_30_series`: `Summary::build` from a 5-minute run's totals (percentiles of
//!   every operation and size class);
//! - `merge/4_dirs_10x30`: `creb::merge::merge` of four shards' 10-second result
//!   directories, written in a temporary directory by the library's own writers (the
//!   aggregator with a `ResultWriter` sink, then `store::write_final`), into a fifth one.
//!
//! Throughputs are intervals per second (hlog) so the sizes compare. Reading and merging use
//! fewer intervals than writing because `hlog::read` holds every (interval, tag) as a dense
//! standard histogram (~188 KB each, ~25 MB per interval here): 300 intervals would take
//! ~7.5 GB per directory. Samples come from a deterministic stream (xorshift).
//! Goal: writing one interval stays far below the interval (≤ 5 ms of a 1 s interval).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use creb::metrics::{
    Aggregator, ErrorKind, Event, Op, Outcome, Sample, SizeClass, SparseHistogram, StatsTable,
    Timing,
};
use creb::results::config::RunConfig;
use creb::results::hlog;
use creb::results::store::write_final;
use creb::results::summary::{RunInfo, Shard, Summary};
use creb::results::{Meta, MetaInput, RunOutput};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use tokio::time::Instant;

/// Intervals written (a 5-minute run), read, and per merged directory.
const INTERVALS: u64 = 300;
const READ_INTERVALS: u64 = 20;
const MERGE_INTERVALS: u64 = 10;
/// Distinct interval tables the written log cycles through (dense tables are ~25 MB each).
const DISTINCT: u64 = 5;
const PER_CELL: u64 = 40;
const HOSTS: u32 = 4;
const OPS: [Op; 6] = [
    Op::ManifestGet,
    Op::ManifestHead,
    Op::BlobGet,
    Op::BlobHead,
    Op::BlobUpload,
    Op::ManifestPut,
];
const INTERVAL: Duration = Duration::from_secs(1);

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Log-uniform in `[lo, hi)`.
    fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        lo * (hi / lo).powf(u)
    }
}

/// One delay-mode sample of `op`/`class` ending at `end`; bigger classes take longer.
fn sample(rng: &mut Rng, op: Op, class: SizeClass, end: Instant) -> Sample {
    let scale = 1 << (2 * class as u32);
    let latency = Duration::from_secs_f64(rng.log_uniform(1e-3, 0.5) * scale as f64);
    let sent = end - latency;
    let lag = Duration::from_micros(rng.log_uniform(10.0, 50_000.0) as u64);
    let outcome = match rng.below(50) {
        0 => Outcome::Error(ErrorKind::Http(503)),
        _ => Outcome::Ok,
    };
    Sample {
        op,
        outcome,
        size_class: class,
        timing: Timing {
            intended: Some(sent - lag),
            ready: None,
            sent,
            first_byte: Some(sent + latency / 5),
            end,
        },
        bytes_sent: 300,
        bytes_received: 1000 * scale,
        http: creb::metrics::HttpStatuses::one(Some(200)),
    }
}

/// Every sample of `intervals` of one host's run, in time order: `PER_CELL` per series and
/// interval.
fn run_samples(seed: u64, anchor: Instant, intervals: u64) -> Vec<Sample> {
    let mut rng = Rng(0x5eed_0000_3e60_0000 ^ seed);
    let mut out = Vec::with_capacity((intervals * 30 * PER_CELL) as usize);
    for k in 0..intervals {
        for n in 0..PER_CELL * 30 {
            let op = OPS[rng.below(OPS.len() as u64) as usize];
            let class = SizeClass::ALL[rng.below(SizeClass::COUNT as u64) as usize];
            let within = Duration::from_micros(n * 1_000_000 / (PER_CELL * 30));
            out.push(sample(
                &mut rng,
                op,
                class,
                anchor + INTERVAL * k as u32 + within,
            ));
        }
    }
    out
}

/// The tables of `intervals` intervals of one run, sparse as the aggregator keeps them.
fn interval_tables(anchor: Instant, intervals: u64) -> Vec<StatsTable<SparseHistogram>> {
    let per_interval = (PER_CELL * 30) as usize;
    run_samples(0, anchor, intervals)
        .chunks(per_interval)
        .map(|chunk| {
            let mut t = StatsTable::<SparseHistogram>::default();
            for s in chunk {
                t.record(s);
            }
            t
        })
        .collect()
}

/// A log of `intervals` intervals, cycling through `tables`.
fn write_log(tables: &[StatsTable<SparseHistogram>], intervals: u64, wall: SystemTime) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 << 20);
    hlog::write_header(&mut out, wall).expect("header");
    let mut serializer = hlog::LogSerializer::new();
    let mut scratch = None;
    for (k, t) in (0..intervals).zip(tables.iter().cycle()) {
        let start = INTERVAL * k as u32;
        hlog::write_interval(&mut out, &mut serializer, start, INTERVAL, t, &mut scratch)
            .expect("interval");
    }
    out
}

fn run_info(shard: Shard, wall: SystemTime, intervals: u64) -> RunInfo {
    RunInfo {
        command: "replay".into(),
        mode: "delay".into(),
        model: "open".into(),
        concurrency: 64,
        registry: "http://127.0.0.1:5000".into(),
        seed: 1,
        shard,
        started_at: wall,
        duration: INTERVAL * intervals as u32,
        interrupted: false,
        trace: None,
        warnings: Vec::new(),
        checks: None,
        config: RunConfig::Read(serde_json::json!({
            "plan": {"shard": {"index": shard.index, "count": shard.count}},
            "seed": 1,
        })),
    }
}

/// Writes shard `index` of `HOSTS` as a run would: the aggregator with the result
/// directory's sink, then the end-of-run files.
async fn write_result_dir(dir: &Path, index: u32, wall: SystemTime) {
    let output = RunOutput {
        dir: Some(dir.to_path_buf()),
        interval: INTERVAL,
        record_requests: false,
        live: None,
        split_by: None,
        warmup: Duration::ZERO,
    };
    // An hour ahead: the aggregator's ticker never fires, so intervals are flushed in order
    // by `finish`, whatever the machine's speed.
    let anchor = Instant::now() + Duration::from_secs(3600);
    let (recorder, handle) = output.start(anchor, wall).expect("result directory");
    for s in run_samples(u64::from(index) + 1, anchor, MERGE_INTERVALS) {
        recorder.record(s).await;
    }
    drop(recorder);
    let aggregator = handle.finish().await;
    assert_eq!(aggregator.intervals(), MERGE_INTERVALS);
    assert!(
        aggregator.sink_error().is_none(),
        "{:?}",
        aggregator.sink_error()
    );
    let summary = Summary::build(
        run_info(
            Shard {
                index,
                count: HOSTS,
            },
            wall,
            MERGE_INTERVALS,
        ),
        &aggregator,
    );
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: serde_json::json!({"trace": "synthetic"}),
            anchor: wall,
            start_at: None,
            actual_start: wall,
            start_skew_ms: None,
            interval: INTERVAL,
        },
    );
    write_final(dir, &summary, &aggregator, &meta).expect("final files");
}

fn result_dirs(root: &Path, wall: SystemTime) -> Vec<PathBuf> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("runtime");
    (0..HOSTS)
        .map(|i| {
            let dir = root.join(format!("host{i}"));
            rt.block_on(write_result_dir(&dir, i, wall));
            dir
        })
        .collect()
}

fn summary_merge(c: &mut Criterion) {
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    // An hour ahead, so that no start computed back from an end precedes the clock's origin.
    let anchor = Instant::now() + Duration::from_secs(3600);
    let tables = interval_tables(anchor, DISTINCT);
    assert!(tables.iter().all(|t| t.cells().count() == 30));
    let log = write_log(&tables, READ_INTERVALS, wall);

    let mut group = c.benchmark_group("hlog");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(INTERVALS));
    group.bench_function("write_300x30", |b| {
        b.iter(|| write_log(&tables, INTERVALS, wall))
    });
    group.throughput(Throughput::Elements(READ_INTERVALS));
    group.bench_function("read_20x30", |b| {
        b.iter(|| {
            let back = hlog::read(&log, INTERVAL).expect("valid log");
            assert_eq!(back.intervals.len() as u64, READ_INTERVALS);
            back
        })
    });
    group.finish();

    // The totals of a 5-minute run: every distinct table 300 / 5 times.
    let mut once = StatsTable::default();
    for t in &tables {
        t.add_to(&mut once);
    }
    let mut totals = StatsTable::default();
    for _ in 0..INTERVALS / DISTINCT {
        totals.add(&once);
    }
    drop(tables);
    let aggregator =
        Aggregator::from_parts(totals, [0; Event::COUNT], INTERVALS, Default::default());
    let mut group = c.benchmark_group("summary");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("build_30_series", |b| {
        b.iter(|| {
            Summary::build(
                run_info(Shard { index: 0, count: 1 }, wall, INTERVALS),
                &aggregator,
            )
        })
    });
    group.finish();

    let tmp = tempfile::tempdir().expect("tempdir");
    let dirs = result_dirs(tmp.path(), wall);
    let out = tmp.path().join("merged");
    let mut group = c.benchmark_group("merge");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("4_dirs_10x30", |b| {
        b.iter(|| {
            let (summary, hosts) = creb::merge::merge(&dirs, &out, false).expect("merge");
            assert_eq!(hosts.len(), HOSTS as usize);
            assert_eq!(
                summary.totals.requests,
                u64::from(HOSTS) * MERGE_INTERVALS * 30 * PER_CELL
            );
            summary
        })
    });
    group.finish();
}

criterion_group!(benches, summary_merge);
criterion_main!(benches);
