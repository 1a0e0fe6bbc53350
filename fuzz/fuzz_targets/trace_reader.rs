//! The streaming trace reader over arbitrary file contents (plain, gzip or zstd: the
//! format is detected from the bytes): every input ends in records, skips or a
//! `TraceError`, never a panic. The first byte picks the read options.
#![no_main]

use std::io::Write;
use std::time::Duration;

use creb::trace::{Interner, ReadOptions, TraceInput, TraceReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    file.write_all(bytes).expect("write");
    let input = TraceInput {
        files: vec![file.path().to_path_buf()],
    };
    let options = ReadOptions {
        skip_invalid: flags & 1 != 0,
        replay_failed: flags & 2 != 0,
        limit_requests: (flags & 4 != 0).then_some(u64::from(flags >> 4)),
        limit_duration: (flags & 8 != 0).then(|| Duration::from_millis(u64::from(flags) * 1000)),
        dedup_window: Duration::from_secs(300),
    };
    let Ok(reader) = TraceReader::open(&input, options, Interner::default()) else {
        return;
    };
    for item in reader.take(100_000) {
        if item.is_err() {
            break;
        }
    }
});
