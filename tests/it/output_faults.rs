//! An output directory that cannot be written is found before anything is sent (exit 2);
//! a final write that fails anyway (disk full, simulated with `/dev/full`) is a clear error
//! with the summary JSON still printed on stderr.

use crate::common::faults::{Fault, FaultProxy};
use crate::common::{run_bin, Registry};

#[test]
fn an_unwritable_output_directory_is_refused_before_the_run() {
    let registry = Registry::start();
    // Counts every connection: nothing may reach the registry.
    let proxy = FaultProxy::start(registry.port, Fault::None);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let under_file = file.join("results");
    let read_only = dir.path().join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    std::fs::set_permissions(
        &read_only,
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    let mut cases = vec![
        "/proc/creb-rs-forbidden".to_owned(),
        under_file.display().to_string(),
    ];
    // root writes into a mode 555 directory anyway: only meaningful for other users.
    if std::fs::write(read_only.join("probe"), "x").is_err() {
        cases.push(read_only.display().to_string());
    }
    for out in &cases {
        for command in [
            vec![
                "push",
                "--registry",
                &proxy.url,
                "--repo",
                "out/app",
                "--layers",
                "1",
                "--layer-size",
                "1KiB",
                "--output-dir",
                out,
            ],
            vec![
                "pull",
                "--registry",
                &proxy.url,
                "--repo",
                "out/app",
                "--output-dir",
                out,
            ],
        ] {
            let r = run_bin(&command, None, &[]);
            assert_eq!(r.code, 2, "{out}: {}", r.stderr);
            assert!(
                r.stderr.contains(out.as_str()),
                "names the directory: {}",
                r.stderr
            );
            assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        }
    }
    assert_eq!(proxy.connections(), 0, "nothing was sent");
}

#[test]
fn a_failing_final_write_is_a_clear_error_with_the_summary_on_stderr() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // `write_atomic` writes `.summary.json.tmp` first: make that /dev/full (ENOSPC).
    std::os::unix::fs::symlink("/dev/full", out.join(".summary.json.tmp")).unwrap();
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "full/app",
            "--layers",
            "1",
            "--layer-size",
            "4KiB",
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let error = r
        .stderr
        .lines()
        .find(|l| l.starts_with("creb-rs: error"))
        .unwrap_or_else(|| panic!("no error line: {}", r.stderr));
    assert!(
        error.contains("summary.json") && error.contains("No space left on device"),
        "{error}"
    );
    let json_line = r
        .stderr
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no summary JSON on stderr: {}", r.stderr));
    let summary: serde_json::Value = serde_json::from_str(json_line).unwrap();
    assert_eq!(summary["command"], "push");
    assert_eq!(summary["operations"]["blob_upload"]["ok"], 2);
    assert!(!out.join("summary.json").exists());
    // The summary says what the directory lacks, and no temporary file is left behind.
    let warning = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "results_not_written")
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("summary.json"),
        "{warning}"
    );
    assert!(
        std::fs::symlink_metadata(out.join(".summary.json.tmp")).is_err(),
        "a temporary file is left"
    );
}

#[test]
fn a_streamed_file_that_cannot_be_written_is_named_before_the_run() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // The run's timeline cannot take even its header (ENOSPC): refused before the run,
    // naming the file (a failure later in the run is a warning of the summary:
    // `results_cut_short`, unit-tested in src/session/mod.rs). The file is not
    // creb-rs's: written over only with --force.
    std::os::unix::fs::symlink("/dev/full", out.join("timeline.csv")).unwrap();
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "cut/app",
            "--layers",
            "1",
            "--layer-size",
            "4KiB",
            "--output-dir",
            out.to_str().unwrap(),
            "--force",
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.stderr.contains("timeline.csv") && r.stderr.contains("No space left"),
        "{}",
        r.stderr
    );
}
