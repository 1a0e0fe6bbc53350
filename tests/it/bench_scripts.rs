//! The benchmark scripts as the tests can hold them without running a benchmark: every
//! `scripts/bench-*` and `scripts/lib/*.sh` parses (`bash -n`), the confidence interval
//! of a median their rounds report (`scripts/lib/median_ci.py`) is the textbook one, the
//! layers they group functions into (`scripts/lib/layers.py`) are the ones named, and the
//! readers of profiles that docs/benchmarks.md's figures come from (a function's calls by
//! call site, `scripts/lib/call_sites.py`; samples on atomic updates,
//! `scripts/lib/lock_samples.py`; the code one GET runs, `scripts/lib/footprint.py`; the
//! answers and requests waiting on a closed loop's sockets, `scripts/lib/tcp_queues.py`)
//! read their synthetic inputs back.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_benchmark_script_parses() {
    let mut scripts = Vec::new();
    for dir in ["scripts", "scripts/lib"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("bench-") || (dir == "scripts/lib" && name.ends_with(".sh")) {
                scripts.push(path);
            }
        }
    }
    assert!(scripts.len() >= 5, "{scripts:?}");
    for script in scripts {
        let out = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn functions_fall_into_the_layers_the_scripts_count_them_by() {
    // scripts/lib/layers.py checks a name of each layer, in callgrind's spelling and perf's.
    let layers = root().join("scripts/lib/layers.py");
    assert_eq!(python(&[layers.as_os_str()]).trim(), "layers: ok");
}

#[test]
fn a_function_s_calls_are_counted_by_call_site() {
    // A synthetic callgrind profile and disassembly: calls, instructions and bytes moved
    // per request by call site.
    let script = root().join("scripts/lib/call_sites.py");
    let out = python(&[script.as_os_str(), "--check".as_ref()]);
    assert_eq!(out.trim(), "call_sites: ok");
}

#[test]
fn the_code_a_get_runs_is_counted_by_line_and_page() {
    // A synthetic callgrind profile by instruction: what runs once per GET counts, what runs
    // once per run or once per ten GETs does not, and SHA-256's software rounds apart.
    let script = root().join("scripts/lib/footprint.py");
    let out = python(&[script.as_os_str(), "--check".as_ref()]);
    assert_eq!(out.trim(), "footprint: ok");
}

#[test]
fn answers_and_requests_waiting_are_counted_by_side() {
    // A synthetic /proc/net/tcp: a generator's socket with bytes to read is an answer
    // waiting for it, a registry's a request; other ports and listeners count for neither.
    let script = root().join("scripts/lib/tcp_queues.py");
    let out = python(&[script.as_os_str(), "--check".as_ref()]);
    assert_eq!(out.trim(), "tcp_queues: ok");
}

#[test]
fn samples_after_atomic_updates_are_counted_by_function() {
    let script = root().join("scripts/lib/lock_samples.py");
    let out = python(&[script.as_os_str(), "--check".as_ref()]);
    assert_eq!(out.trim(), "lock_samples: ok");
}

/// What `python3 args...` prints, asserting it succeeded.
fn python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_median_interval_of_the_rounds_is_the_textbook_one() {
    // The module's own cases: 20 rounds give x(6)..x(15) at 95.9% coverage, 8 rounds only
    // their range (99.2%); then a run through `describe`, as the scripts print it.
    let lib = root().join("scripts/lib");
    let module = lib.join("median_ci.py");
    assert_eq!(python(&[module.as_os_str()]).trim(), "median_ci: ok");
    let probe = "import sys; sys.path.insert(0, sys.argv[1]); from median_ci import describe; \
                 print(describe([0.9 + i / 100 for i in range(20)])); \
                 print(describe([1.0, 1.1, 0.9]))";
    let text = python(&["-c".as_ref(), probe.as_ref(), lib.as_os_str()]);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "0.995 (95% CI 0.950-1.040, 20 rounds)",
            "1.000 (the range 0.900-1.100 covers it at 75.0%, 3 rounds)",
        ]
    );
}
