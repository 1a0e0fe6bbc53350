//! Malformed input through the real binary: every parser of a file or expression answers
//! with exit 2 and one error naming the file (and the record, line and column, or byte)
//! instead of a panic. Random bytes in each input are a smoke test here; the cargo-fuzz
//! targets in fuzz/ do the real search (docs/fuzzing.md).

use std::path::Path;

use crate::common::run_bin;

fn assert_usage_error(args: &[&str], expect: &[&str]) -> String {
    let r = run_bin(args, None, &[]);
    assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    let error = r
        .stderr
        .lines()
        .find(|l| l.starts_with("creb-rs: error"))
        .unwrap_or_else(|| panic!("{args:?}: no error line: {}", r.stderr))
        .to_owned();
    for part in expect {
        assert!(error.contains(part), "{args:?}: '{part}' not in: {error}");
    }
    error
}

/// A copy of a real result directory (from a quick push against a registry).
fn result_dir(root: &Path) -> std::path::PathBuf {
    let registry = crate::common::Registry::start();
    let dir = root.join("result");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "bad/input",
            "--layers",
            "1",
            "--layer-size",
            "1KiB",
            "--output-dir",
            dir.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    dir
}

#[test]
fn malformed_files_and_expressions_name_file_and_position() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = "http://127.0.0.1:9";

    // A trace record: file, record number and byte.
    let trace = tmp.path().join("broken.json");
    std::fs::write(&trace, "[{\"timestamp\": 12, x").unwrap();
    let t = trace.to_str().unwrap();
    // The registry is checked before the trace is read: --dry-run reads it alone.
    assert_usage_error(
        &["replay", t, "--registry", dead, "--dry-run", "--quiet"],
        &["broken.json", "record 1", "byte"],
    );
    let r = run_bin(&["trace", "validate", t], None, &[]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.contains("record 1") || r.stderr.contains("record 1"));

    // --fail-if expressions: the expression and what is wrong with it.
    for (expr, why) in [
        ("p99(blob_get) >", "no value"),
        ("p99(blob_gett) > 1s", "blob_gett"),
    ] {
        assert_usage_error(
            &[
                "push",
                "--registry",
                dead,
                "--repo",
                "a/b",
                "--layers",
                "1",
                "--layer-size",
                "1KiB",
                "--fail-if",
                expr,
            ],
            &[expr, why],
        );
    }

    // Result directories given to merge and report: the file, and line and column for JSON.
    let good = result_dir(tmp.path());
    let out = tmp.path().join("merged");
    let o = out.to_str().unwrap();
    for (file, content, expect) in [
        (
            "summary.json",
            "{\"schema_version\": 1,\n \"tool\": ",
            &["summary.json", "line 2 column"][..],
        ),
        ("meta.json", "[1, 2", &["meta.json", "line 1 column"]),
        (
            "counters.json",
            "{\"cells\": 7}",
            &["counters.json", "line 1 column"],
        ),
        (
            "histograms.hlog",
            "Tag=x,1.0,2.0,3.0,HISTnotbase64\n",
            &["histograms.hlog"],
        ),
        (
            "timeline.csv",
            "interval,start_s\n1,2,3\n",
            &["timeline.csv", "row 2"],
        ),
    ] {
        let bad = tmp.path().join(format!("bad-{file}"));
        copy_dir(&good, &bad);
        std::fs::write(bad.join(file), content).unwrap();
        let b = bad.to_str().unwrap();
        assert_usage_error(
            &["merge", b, good.to_str().unwrap(), "--output-dir", o],
            expect,
        );
        if file != "timeline.csv" {
            assert_usage_error(&["report", b], expect);
        }
    }

    // Experiment files: file:line:column.
    let toml = tmp.path().join("exp.toml");
    std::fs::write(&toml, "[[registry]]\nname = \"a\"\nurl = 5\n").unwrap();
    assert_usage_error(&["run", toml.to_str().unwrap()], &["exp.toml:3:7"]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// xorshift64*: deterministic bytes without a dependency.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn random_bytes_in_every_input_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = "http://127.0.0.1:9";
    for seed in 0..6u64 {
        let bytes = random_bytes(seed, 64 + 97 * seed as usize);
        // Half the inputs start like the real thing, so parsers get past the first byte.
        let mut prefixed = b"[{\"timestamp\":\"2017-06-20T00:00:00.000Z\",".to_vec();
        prefixed.extend_from_slice(&bytes);
        for (name, content) in [("raw", &bytes), ("prefixed", &prefixed)] {
            let file = tmp.path().join(format!("{name}-{seed}"));
            std::fs::write(&file, content).unwrap();
            let f = file.to_str().unwrap();
            let dir = tmp.path().join(format!("dir-{name}-{seed}"));
            std::fs::create_dir_all(&dir).unwrap();
            for part in [
                "summary.json",
                "meta.json",
                "counters.json",
                "histograms.hlog",
                "timeline.csv",
            ] {
                std::fs::write(dir.join(part), content).unwrap();
            }
            let d = dir.to_str().unwrap();
            let out = tmp.path().join("out");
            for args in [
                vec!["trace", "validate", f],
                vec!["trace", "stats", f],
                vec!["replay", f, "--registry", dead, "--quiet"],
                vec!["replay", f, "--registry", dead, "--dry-run", "--quiet"],
                vec!["merge", d, d, "--output-dir", out.to_str().unwrap()],
                vec!["report", d],
                vec!["run", f],
            ] {
                let r = run_bin(&args, None, &[]);
                assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
                assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
            }
        }
    }
}

/// The first mistakes of a new user get one line that says what to do: TLS against a
/// plain-HTTP registry (with `https://` or no scheme), a path in the registry URL, an empty
/// trace, a run that would send nothing.
#[test]
fn first_mistakes_get_answers_that_say_what_to_do() {
    let registry = crate::common::Registry::start();
    let host = registry.url.trim_start_matches("http://").to_owned();
    let push = |url: &str| {
        vec![
            "push".to_owned(),
            "--registry".into(),
            url.to_owned(),
            "--repo".into(),
            "first/app".into(),
            "--layers".into(),
            "1".into(),
            "--layer-size".into(),
            "1KiB".into(),
        ]
    };
    for url in [format!("https://{host}"), host.clone()] {
        let args = push(&url);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_usage_error(&args, &["did not answer in TLS", "use an http:// URL"]);
    }
    let args = push(&format!("{}/first", registry.url));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("has a path (/first)") && r.stderr.contains("--repo first/app"),
        "{}",
        r.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "[]").unwrap();
    let empty = empty.to_str().unwrap();
    assert_usage_error(
        &["replay", empty, "--registry", &registry.url],
        &["empty.json holds no replayable record"],
    );
    assert_usage_error(
        &["trace", "stats", empty],
        &["empty.json holds no trace record"],
    );
    assert_usage_error(
        &["simulate", "prefetch", empty],
        &["empty.json holds no usable trace record"],
    );

    // A trace whose every record is skipped (here: its one request failed in the original)
    // sends nothing: an error that says why, not a success.
    let failed = dir.path().join("failed.json");
    std::fs::write(
        &failed,
        r#"[{"host":"00000000","http.request.duration":0.005,"http.request.method":"GET","http.request.remoteaddr":"99a0e357","http.request.uri":"v2/aa/bb/manifests/cc","http.request.useragent":"docker/17.06.0-ce","http.response.status":500,"http.response.written":0,"id":"abc377d5f3","timestamp":"2017-06-20T00:00:00.032Z"}]"#,
    )
    .unwrap();
    let out = dir.path().join("nothing");
    assert_usage_error(
        &[
            "replay",
            failed.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ],
        &["the run sent no request", "none was replayed", "failed"],
    );
    // A shard whose share is empty while the trace has work is the partition's doing: a
    // warning, and a result that merges.
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let out = dir.path().join("empty-shard");
    let r = run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--limit-requests",
            "1",
            "--shard",
            "1/2",
            "--shard-by",
            "record",
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("shard 1/2 got none"), "{}", r.stderr);
    assert!(out.join("summary.json").exists());
}

#[test]
fn each_error_gives_its_cause_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let m = missing.to_str().unwrap();
    let unwritable = "/proc/creb-rs-nowhere/out.json";
    for args in [
        vec!["trace", "stats", m],
        vec!["trace", "validate", m],
        vec!["replay", m, "--registry", "http://127.0.0.1:9", "--dry-run"],
        vec!["simulate", "cache", m, "--memory", "1GiB"],
        vec!["cost", m, "--provider", "ecr"],
        vec!["report", m],
        vec!["run", m],
        vec![
            "trace",
            "import",
            "--format",
            "distribution",
            m,
            "-o",
            unwritable,
        ],
        vec![
            "pull",
            "--registry",
            "http://127.0.0.1:9",
            "--repo",
            "x",
            "--ca-cert",
            m,
        ],
    ] {
        let r = run_bin(&args, None, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        for line in r.stderr.lines() {
            for cause in ["No such file or directory", "os error"] {
                assert!(
                    line.matches(cause).count() <= 1,
                    "{args:?} says its cause twice: {line}"
                );
            }
        }
    }
}

/// A log of another layout is said to be one on its first lines, not after the whole file,
/// and leaves no trace file behind.
#[test]
fn a_log_in_the_wrong_format_is_refused_on_its_first_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nginx.log");
    let line = "127.0.0.1 - - [26/Nov/2026:10:00:00 +0000] \"GET /v2/a/b/manifests/latest HTTP/1.1\" 200 500 \"-\" \"docker/20\" 0.010 0.009 1764151200.000 -\n";
    std::fs::write(&log, line.repeat(5000)).unwrap();
    let out = dir.path().join("t.json");
    let (log, o) = (log.to_str().unwrap(), out.to_str().unwrap());
    for format in ["distribution", "zot", "nginx-json"] {
        let r = crate::common::run_bin(
            &["trace", "import", log, "--format", format, "-o", o],
            None,
            &[],
        );
        assert_eq!(r.code, 2, "{format}: {}", r.stderr);
        assert!(
            r.stderr.contains("the first 1000 lines") && r.stderr.contains("is --format right?"),
            "{format}: {}",
            r.stderr
        );
        assert!(!out.exists(), "{format}: a trace was left behind");
    }
    let r = crate::common::run_bin(
        &["trace", "import", log, "--format", "nginx", "-o", o],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}
