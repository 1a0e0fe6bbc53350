//! `--fail-if` expressions: parse, and show a parsed threshold.
#![no_main]

use creb::results::thresholds::Threshold;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = Threshold::parse(text) {
        let _ = format!("{t:?}");
        let _ = t.show(0.0);
        let _ = t.show(f64::MAX);
    }
});
