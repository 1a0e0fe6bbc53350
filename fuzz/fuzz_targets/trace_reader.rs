//! The streaming trace reader over arbitrary file contents (plain, gzip or zstd: the
//! format is detected from the bytes): every input ends in records, skips or a
//! `TraceError`, never a panic, in both views of the reader (typed items, or items with
//! their text and invalid reasons). The first byte picks the read options and the view.
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
        keep_text: flags & 16 != 0,
    };
    let detailed = options.keep_text;
    let Ok(mut reader) = TraceReader::open(&input, options, Interner::default()) else {
        return;
    };
    for _ in 0..100_000 {
        let more = if detailed {
            reader.next_detailed().is_some_and(|d| d.is_ok())
        } else {
            reader.next().is_some_and(|i| i.is_ok())
        };
        if !more {
            break;
        }
    }
});
