//! Content generation and SHA-256: the cost of producing and digesting every pushed byte.
//! Goal: ≥ 1.5 GB/s per core on a CPU with SHA extensions (see docs/benchmarks.md); layers
//! (tar of a file tree, gzip, zstd or none) ≥ 1 GiB/s per core, made and verified.

use creb::content::layer::{Compression, LayerForm};
use creb::content::{ContentCheck, ContentSpec};
use creb::digest::Hasher;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn content(c: &mut Criterion) {
    let size = 64 * 1024 * 1024u64;
    let mut group = c.benchmark_group("content");
    group.throughput(Throughput::Bytes(size));
    group.sample_size(20);
    group.measurement_time(std::time::Duration::from_secs(10));
    let spec = ContentSpec::new(1, b"bench", size);
    group.bench_function("generate_64MiB", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for chunk in spec.reader(0..size) {
                n += chunk.len() as u64;
            }
            n
        })
    });
    group.bench_function("generate_and_sha256_64MiB", |b| b.iter(|| spec.digest()));
    group.bench_function("stream_chunks_and_sha256_64MiB", |b| {
        b.iter(|| {
            let mut h = Hasher::new();
            for chunk in spec.reader(0..size) {
                h.update(&chunk);
            }
            h.finish()
        })
    });
    group.finish();
}

fn layers(c: &mut Criterion) {
    let size = 64 * 1024 * 1024u64;
    let mut group = c.benchmark_group("layer");
    group.throughput(Throughput::Bytes(size));
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(8));
    for compression in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let form = LayerForm::new(compression, 0.35).unwrap();
        let spec = ContentSpec::layer(1, b"bench", size, form);
        group.bench_function(format!("generate_{compression}_64MiB"), |b| {
            b.iter(|| {
                let mut n = 0u64;
                for chunk in spec.reader(0..size) {
                    n += chunk.len() as u64;
                }
                n
            })
        });
        let body: Vec<bytes::Bytes> = spec.reader(0..size).collect();
        group.bench_function(format!("verify_{compression}_64MiB"), |b| {
            b.iter(|| {
                let mut check = ContentCheck::new(spec);
                for chunk in &body {
                    check.check(chunk).unwrap();
                }
                check.complete()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, content, layers);
criterion_main!(benches);
