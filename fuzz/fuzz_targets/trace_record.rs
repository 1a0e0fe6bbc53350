//! The trace record field parsers: request URIs and timestamps.
#![no_main]

use creb::trace::record::{parse_timestamp, parse_uri};
use creb::trace::Interner;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut names = Interner::default();
    let _ = parse_uri(text, &mut names);
    let _ = parse_timestamp(text);
});
