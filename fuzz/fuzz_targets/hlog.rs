//! `histograms.hlog` of a result directory (merge and report read it): arbitrary bytes.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = creb::results::hlog::read(data, Duration::from_secs(1));
});
