//! The bundled sample trace (`fixtures/sample-trace.json`, which `make demo` replays) is
//! exactly what the generator produces for its documented options, so it can be rebuilt
//! and checked. Rebuild it with `CREB_REGENERATE_FIXTURES=1 cargo test --test it fixtures::`.

use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_json_array;

/// The sample: about a minute of trace time, ~600 records, layers from 1 KiB to 2 MiB.
fn sample_options() -> SynthOptions {
    SynthOptions {
        seed: 2017,
        sessions: 160,
        mean_gap_ms: 400.0,
        clients: 24,
        repos: 10,
        initial_images: 3,
        layer_size: (1024, 2 * 1024 * 1024),
        chunk: 512 * 1024,
        ..SynthOptions::default()
    }
}

#[test]
fn sample_trace_is_reproducible() {
    let (records, stats) = generate(&sample_options());
    let mut bytes = Vec::new();
    write_json_array(&mut bytes, &records).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    if std::env::var_os("CREB_REGENERATE_FIXTURES").is_some() {
        std::fs::write(path, &bytes).unwrap();
    }
    let committed = std::fs::read(path).expect("fixtures/sample-trace.json");
    assert!(
        committed == bytes,
        "fixtures/sample-trace.json differs from the generator's output"
    );
    assert_eq!(records.len() as u64, stats.records);
    assert!(stats.uploads > 0 && stats.duplicates > 0 && stats.failed > 0 && stats.head_misses > 0);
}
