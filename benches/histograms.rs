//! Recording cost: nanoseconds per `Sample` on every layer a measurement goes through.
//!
//! - `stats_dense/*`: `Stats::record` into the run's dense HdrHistograms (the totals);
//! - `stats_sparse/*`: `Stats::<SparseHistogram>::record`, what an open interval holds;
//! - `aggregator_record/*`: `Aggregator::record`, the aggregator thread's per-sample work
//!   (find the sample's interval, then the (operation, size class) cell, then record);
//! - `recorder_channel/*`: the whole path a worker uses — `Recorder::record` through the
//!   bounded channel to the aggregator thread started by `AggregatorBuilder::spawn` — timed from
//!   the first send until the aggregator has recorded the last sample (`finish`);
//! - `attribution/*`: `Attribution::record` of stress samples, each for one repository and
//!   one client: `one` (the same two names every time), `cycle50` (50 clients in turn, as
//!   `scripts/bench-compare`'s section 1 names them: more than a ranking tracks, so every
//!   operation replaces an entry), `skewed` (100k names, a tenth of the operations on 10).
//!
//! Samples are a deterministic stream (xorshift) of six operations over all size classes,
//! log-uniform latencies from 100 µs to 10 s, 2% failures, ending within two 1 s intervals
//! (the aggregator's anchor is an hour ahead, so its ticker never flushes during a batch);
//! `stress` samples carry latency and TTFB, `delay` ones also an intended start (service
//! time and schedule lag: four histograms per sample). Histograms are reused across
//! iterations, as a run reuses them (steady state: no allocation per sample); only
//! `recorder_channel` starts a fresh aggregator per batch (of 10⁵–10⁶ samples).
//! Goal: ≤ 1 µs per sample through the channel, so one aggregator thread keeps up with
//! ≥ 1M samples/s — far more than any run of creb-rs produces.

use std::time::{Duration, Instant as StdInstant};

use std::sync::Arc;

use creb::metrics::attribution::{Attribution, Who};
use creb::metrics::{
    Aggregator, AggregatorBuilder, AggregatorConfig, ErrorKind, Op, Outcome, Sample, SizeClass,
    SparseHistogram, Stats, Timing,
};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::time::Instant;

/// Samples in the stream (a power of two, cycled through).
const STREAM: usize = 1 << 16;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Stress,
    Delay,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Stress => "stress",
            Mode::Delay => "delay",
        }
    }
}

const OPS: [Op; 6] = [
    Op::ManifestGet,
    Op::ManifestHead,
    Op::BlobGet,
    Op::BlobHead,
    Op::BlobUpload,
    Op::ManifestPut,
];

/// The stream: samples ending within `[base, base + 2s)`, evenly spread.
fn stream(mode: Mode, base: Instant) -> Vec<Sample> {
    let mut rng = Rng(0x5eed_0000_4157_0001);
    (0..STREAM)
        .map(|i| {
            let op = OPS[rng.below(OPS.len() as u64) as usize];
            let bytes = match rng.below(10) {
                0..=5 => rng.below(1 << 20),
                6..=7 => rng.below(10 << 20),
                8 => rng.below(100 << 20),
                _ => rng.below(2 << 30),
            };
            let latency = Duration::from_secs_f64(rng.log_uniform(100e-6, 10.0));
            let end = base + Duration::from_micros(i as u64 * 2_000_000 / STREAM as u64);
            let sent = end - latency;
            let intended = match mode {
                Mode::Stress => None,
                Mode::Delay => {
                    Some(sent - Duration::from_micros(rng.log_uniform(1.0, 200_000.0) as u64))
                }
            };
            let outcome = match rng.below(100) {
                0 => Outcome::Error(ErrorKind::Timeout),
                1 => Outcome::Error(ErrorKind::Http(503)),
                _ => Outcome::Ok,
            };
            Sample {
                op,
                outcome,
                size_class: SizeClass::of(bytes),
                timing: Timing {
                    intended,
                    ready: None,
                    sent,
                    first_byte: Some(sent + latency / 4),
                    end,
                },
                bytes_sent: if op == Op::BlobUpload { bytes } else { 300 },
                bytes_received: if op == Op::BlobUpload { 0 } else { bytes },
                http: creb::metrics::HttpStatuses::one(Some(200)),
            }
        })
        .collect()
}

fn histograms(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("runtime");
    // Interval 0 starts an hour from now: an aggregator's ticker (first tick one interval
    // after the anchor) never flushes while a batch runs; samples fall in intervals 0 and 1.
    let base = Instant::now() + Duration::from_secs(3600);
    let config = AggregatorConfig {
        interval: Duration::from_secs(1),
        anchor: base,
        warmup: Duration::ZERO,
    };

    let mut group = c.benchmark_group("histograms");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for mode in [Mode::Stress, Mode::Delay] {
        let samples = stream(mode, base);
        group.bench_function(BenchmarkId::new("stats_dense", mode.name()), |b| {
            let mut stats: Stats = Stats::default();
            let mut i = 0usize;
            b.iter(|| {
                stats.record(black_box(&samples[i & (STREAM - 1)]));
                i += 1;
            });
            black_box(stats.count);
        });
        group.bench_function(BenchmarkId::new("stats_sparse", mode.name()), |b| {
            let mut stats: Stats<SparseHistogram> = Stats::default();
            let mut i = 0usize;
            b.iter(|| {
                stats.record(black_box(&samples[i & (STREAM - 1)]));
                i += 1;
            });
            black_box(stats.count);
        });
        group.bench_function(BenchmarkId::new("aggregator_record", mode.name()), |b| {
            let mut aggregator = Aggregator::new(config);
            let mut i = 0usize;
            b.iter(|| {
                aggregator.record(black_box(&samples[i & (STREAM - 1)]));
                i += 1;
            });
            black_box(aggregator.intervals());
        });
        group.bench_function(BenchmarkId::new("recorder_channel", mode.name()), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let (recorder, handle) = AggregatorBuilder::default().config(config).spawn();
                    let started = StdInstant::now();
                    for i in 0..iters as usize {
                        recorder.record(samples[i & (STREAM - 1)]).await;
                    }
                    drop(recorder);
                    let aggregator = handle.finish().await;
                    let elapsed = started.elapsed();
                    assert_eq!(
                        aggregator
                            .table()
                            .cells()
                            .map(|(_, s)| s.count)
                            .sum::<u64>(),
                        iters
                    );
                    elapsed
                })
            })
        });
    }
    group.finish();
}

/// Whom each of [`STREAM`] operations was for, in one of the shapes of `attribution/*`.
fn whos(shape: &str) -> Vec<Who> {
    let mut rng = Rng(0x5eed_0000_4157_0002);
    let name = |prefix: &str, i: u64| -> Option<Arc<str>> { Some(format!("{prefix}{i}").into()) };
    let cycle: Vec<Option<Arc<str>>> = (0..50).map(|i| name("c", i)).collect();
    let one = (name("bench/one", 0), name("c", 0));
    (0..STREAM as u64)
        .map(|i| match shape {
            "one" => Who {
                repository: one.0.clone(),
                client: one.1.clone(),
            },
            "cycle50" => Who {
                repository: one.0.clone(),
                client: cycle[(i % 50) as usize].clone(),
            },
            _ => {
                let n = if rng.below(10) == 0 {
                    rng.below(10)
                } else {
                    rng.below(100_000)
                };
                Who {
                    repository: name("repo/", n),
                    client: name("c", n % 5_000),
                }
            }
        })
        .collect()
}

fn attribution(c: &mut Criterion) {
    let base = Instant::now();
    let samples = stream(Mode::Stress, base);
    let mut group = c.benchmark_group("attribution");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for shape in ["one", "cycle50", "skewed"] {
        let whos = whos(shape);
        group.bench_function(shape, |b| {
            let mut a = Attribution::default();
            let mut i = 0usize;
            b.iter(|| {
                let at = i & (STREAM - 1);
                a.record(black_box(&whos[at]), black_box(&samples[at]));
                i += 1;
            });
            black_box(a.repositories.held());
        });
    }
    group.finish();
}

criterion_group!(benches, histograms, attribution);
criterion_main!(benches);
