//! Trace parsing: records per second through `TraceReader` (split, deserialize, validate,
//! intern, merge, classify) on a synthetic IBM-format trace, plain and gzip-compressed.
//! Goal: ≥ 500k records/s per core on plain JSON (see docs/benchmarks.md).

use std::io::Write;
use std::path::Path;

use creb::trace::{Interner, Item, ReadOptions, TraceInput, TraceReader};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const RECORDS: u64 = 200_000;

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

    /// An 8-hex name out of `space`, popularity skewed like the IBM traces (a few names
    /// take most requests).
    fn hex8(&mut self, space: u64) -> String {
        let bound = self.below(space) + 1;
        let k = self.below(bound);
        format!("{:08x}", k.wrapping_mul(0x9e37_79b9) as u32)
    }
}

/// A JSON array of `n` records shaped like the IBM traces: mostly GET, some HEAD/PUT/PATCH/
/// POST, skewed names (tens of thousands distinct), sizes from bytes to hundreds of MB,
/// ~10 ms apart.
fn trace_json(n: u64) -> Vec<u8> {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut out = Vec::with_capacity(n as usize * 360);
    out.extend_from_slice(b"[");
    let start_ms: i64 = 1_504_632_222_900;
    for i in 0..n {
        let t = start_ms + i as i64 * 10 + rng.below(5) as i64;
        let secs = t / 1000;
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let method = match rng.below(100) {
            0..=61 => "GET",
            62..=81 => "HEAD",
            82..=89 => "PUT",
            90..=93 => "PATCH",
            94..=97 => "POST",
            _ => "DELETE",
        };
        let repo = format!("{}/{}", rng.hex8(2_000), rng.hex8(20_000));
        let uri = match rng.below(10) {
            0..=3 => format!("v2/{repo}/manifests/{}", rng.hex8(50_000)),
            4..=8 => format!("v2/{repo}/blobs/sha256:{}", rng.hex8(1_000_000)),
            _ => format!("v2/{repo}/blobs/uploads/{}", rng.hex8(u64::MAX)),
        };
        let written = match rng.below(4) {
            0 => rng.below(2_000),
            1 => rng.below(1 << 20),
            2 => rng.below(1 << 24),
            _ => rng.below(1 << 28),
        };
        let status = if rng.below(50) == 0 { 404 } else { 200 };
        if i > 0 {
            out.extend_from_slice(b",\n");
        }
        write!(
            out,
            "{{\"host\": \"{}\", \"http.request.duration\": {:.8}, \"http.request.method\": \
             \"{method}\", \"http.request.remoteaddr\": \"{}\", \"http.request.uri\": \"{uri}\", \
             \"http.request.useragent\": \"docker/17.04.0-ce go/go1.7.5 git-commit/4845c56 \
             kernel/4.4.0-93-generic os/linux arch/amd64\", \"http.response.status\": {status}, \
             \"http.response.written\": {written}, \"id\": \"{:010x}\", \"timestamp\": \
             \"2017-09-05T{h:02}:{m:02}:{s:02}.{:03}Z\"}}",
            rng.hex8(64),
            rng.below(3_000_000) as f64 / 1e6,
            rng.hex8(5_000),
            rng.next() >> 24,
            t % 1000,
        )
        .expect("write to a Vec");
    }
    out.extend_from_slice(b"]\n");
    out
}

fn read_all(path: &Path) -> u64 {
    let input = TraceInput {
        files: vec![path.to_path_buf()],
    };
    let reader =
        TraceReader::open(&input, ReadOptions::default(), Interner::default()).expect("open");
    let (mut items, mut records) = (0, 0);
    for item in reader {
        items += 1;
        if let Item::Record(_) = item.expect("valid trace") {
            records += 1;
        }
    }
    assert_eq!(items, RECORDS);
    records
}

fn trace_parse(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = trace_json(RECORDS);
    let plain = dir.path().join("trace.json");
    std::fs::write(&plain, &json).expect("write trace");
    let gz = dir.path().join("trace.json.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&json).expect("gzip");
    std::fs::write(&gz, enc.finish().expect("gzip")).expect("write trace");

    let mut group = c.benchmark_group("trace_parse");
    group.throughput(Throughput::Elements(RECORDS));
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(8));
    group.bench_function("json_array_200k", |b| b.iter(|| read_all(&plain)));
    group.bench_function("json_array_200k_gzip", |b| b.iter(|| read_all(&gz)));
    group.finish();
}

criterion_group!(benches, trace_parse);
criterion_main!(benches);
