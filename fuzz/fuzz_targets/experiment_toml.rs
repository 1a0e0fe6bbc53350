//! Experiment files (`creb-rs run EXPERIMENT.toml`): parse and validate arbitrary text,
//! then expand the first round's cells of whatever parsed.
#![no_main]

use std::path::Path;

use creb::experiment::cells::round_cells;
use creb::experiment::config::ExperimentFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = ExperimentFile::parse(text, Path::new("fuzz.toml"), Path::new("/nonexistent"))
    {
        let _ = round_cells(&file, 0);
    }
});
