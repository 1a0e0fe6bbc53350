//! `creb-rs merge` over a result directory built from the input: the parts between NUL
//! bytes become summary.json, meta.json, counters.json, histograms.hlog, timeline.csv,
//! endpoints.hlog and endpoints.csv (the last two only when the input has those parts).
//! The directory is merged with itself (so compatible-set checks and the merging code run).
#![no_main]

use libfuzzer_sys::fuzz_target;

const FILES: [&str; 7] = [
    "summary.json",
    "meta.json",
    "counters.json",
    "histograms.hlog",
    "timeline.csv",
    "endpoints.hlog",
    "endpoints.csv",
];

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let mut parts = data.split(|&b| b == 0);
    for (i, name) in FILES.into_iter().enumerate() {
        match parts.next() {
            Some(part) => std::fs::write(input.join(name), part).unwrap(),
            // The run-over-several-endpoints files are optional.
            None if i >= 5 => {}
            None => std::fs::write(input.join(name), b"").unwrap(),
        }
    }
    let out = dir.path().join("out");
    let partial = data.first().is_some_and(|b| b & 1 == 1);
    let _ = creb::merge::merge(&[input.clone(), input], &out, partial);
});
