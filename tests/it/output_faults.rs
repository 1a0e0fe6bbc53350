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

/// What stands at the path a writing command is given, for the file-safety matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A trace the user holds (IBM's format).
    Trace,
    /// Another command's result file (a summary.json).
    OtherResult,
    /// An HTML report creb-rs wrote (regenerable).
    OwnReport,
    /// A manual page creb-rs wrote (regenerable).
    OwnManPage,
    /// A user's notes.
    UserFile,
    Directory,
    DevNull,
    /// A place nothing can be created in, root or not (under /proc).
    ReadOnly,
}

/// The file-safety matrix (docs/cli.md, "Files creb-rs writes"): every command that writes
/// a file at a path the user names, against each kind of thing that may stand there, with
/// and without --force. A file refused is left byte for byte as it was; the rule is
/// `src/outfile.rs`, one for all of them.
#[test]
fn no_command_replaces_a_users_file_without_force() {
    use Target::*;
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/trace-small.json");
    let log = d.join("registry.log");
    std::fs::write(
        &log,
        r#"{"http.request.host":"r:5000","http.request.id":"1","http.request.method":"GET","http.request.remoteaddr":"10.0.0.1:5","http.request.uri":"/v2/a/b/manifests/t","http.request.useragent":"docker","http.response.duration":"2ms","http.response.status":200,"http.response.written":500,"level":"info","msg":"response completed","time":"2026-11-24T22:53:52.398Z"}"#.to_owned() + "\n",
    )
    .unwrap();
    // A result to report on, and another command's result file.
    let result = d.join("result");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "safe/app",
            "--layers",
            "1",
            "--layer-size",
            "1KiB",
            "--output-dir",
            result.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = std::fs::read(result.join("summary.json")).unwrap();
    let report_html = {
        let page = d.join("page.html");
        let r = run_bin(
            &[
                "report",
                result.to_str().unwrap(),
                "-o",
                page.to_str().unwrap(),
                "--quiet",
            ],
            None,
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::read(page).unwrap()
    };
    let man_page = run_bin(&["man"], None, &[]).stdout.into_bytes();
    let trace_bytes = std::fs::read(source).unwrap();
    // Lays `target` at a fresh path for case `n`; the path and the bytes it holds.
    let lay = |n: usize, name: &str, target: Target| -> (std::path::PathBuf, Option<Vec<u8>>) {
        let case = d.join(format!("case-{n}"));
        std::fs::create_dir_all(&case).unwrap();
        let path = case.join(name);
        let bytes = match target {
            Trace => Some(trace_bytes.clone()),
            OtherResult => Some(summary.clone()),
            OwnReport => Some(report_html.clone()),
            OwnManPage => Some(man_page.clone()),
            UserFile => Some(b"my notes: creb-rs runs on Tuesday\n".to_vec()),
            Directory => {
                std::fs::create_dir(&path).unwrap();
                None
            }
            DevNull => return (std::path::PathBuf::from("/dev/null"), None),
            ReadOnly => {
                return (
                    std::path::PathBuf::from("/proc/creb-rs-forbidden/out"),
                    None,
                )
            }
        };
        if let Some(b) = &bytes {
            std::fs::write(&path, b).unwrap();
        }
        (path, bytes)
    };
    // (command, the name of its output, the targets it may replace without --force).
    type Command<'a> = (&'a str, Box<dyn Fn(&str) -> Vec<String>>, &'a [Target]);
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let log_path = log.to_str().unwrap().to_owned();
    let result_path = result.to_str().unwrap().to_owned();
    let commands: Vec<Command> = vec![
        (
            "trace synth",
            Box::new(move |out| s(&["trace", "synth", "--requests", "20", "--out", out])),
            &[DevNull],
        ),
        (
            "trace sample",
            Box::new(move |out| {
                s(&[
                    "trace",
                    "sample",
                    source,
                    "--method",
                    "first-n",
                    "--requests",
                    "5",
                    "--out",
                    out,
                ])
            }),
            &[DevNull],
        ),
        (
            "trace import",
            Box::new(move |out| {
                s(&[
                    "trace",
                    "import",
                    &log_path,
                    "--format",
                    "distribution",
                    "-o",
                    out,
                ])
            }),
            &[DevNull],
        ),
        (
            "report -o",
            Box::new(move |out| s(&["report", &result_path, "--format", "html", "-o", out])),
            &[OwnReport, DevNull],
        ),
    ];
    let targets = [
        Trace,
        OtherResult,
        OwnReport,
        UserFile,
        Directory,
        DevNull,
        ReadOnly,
    ];
    let mut n = 0;
    for (name, args_of, replaceable) in &commands {
        for target in targets {
            for force in [false, true] {
                n += 1;
                let (path, before) = lay(n, "out.json", target);
                let mut args = args_of(path.to_str().unwrap());
                if force {
                    args.push("--force".into());
                }
                args.push("--quiet".into());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let r = run_bin(&args, None, &[]);
                let may = match target {
                    Directory | ReadOnly => false,
                    _ => force || replaceable.contains(&target),
                };
                let case = format!("{name} over {target:?}, force {force}: {}", r.stderr);
                if may {
                    assert_eq!(r.code, 0, "{case}");
                } else {
                    assert_eq!(r.code, 2, "{case}");
                    assert!(
                        !r.stderr.is_empty() && !r.stderr.contains("panicked"),
                        "{case}"
                    );
                    if let Some(before) = before {
                        assert_eq!(std::fs::read(&path).unwrap(), before, "{case}");
                    }
                    if target == Directory {
                        assert!(path.is_dir(), "{case}");
                    }
                }
            }
        }
    }
    // man --dir: its pages against what stands at creb-rs.1.
    for target in [Trace, OtherResult, UserFile, OwnManPage, Directory] {
        for force in [false, true] {
            n += 1;
            let (path, before) = lay(n, "creb-rs.1", target);
            let pages = path.parent().unwrap();
            let mut args = vec!["man", "--dir", pages.to_str().unwrap()];
            if force {
                args.push("--force");
            }
            let r = run_bin(&args, None, &[]);
            let may = target != Directory && (force || target == OwnManPage);
            let case = format!("man --dir over {target:?}, force {force}: {}", r.stderr);
            if may {
                assert_eq!(r.code, 0, "{case}");
                assert!(pages.join("creb-rs-push.1").exists(), "{case}");
            } else {
                assert_eq!(r.code, 2, "{case}");
                if let Some(before) = before {
                    assert_eq!(std::fs::read(&path).unwrap(), before, "{case}");
                }
                // A refusal writes no page at all.
                assert!(!pages.join("creb-rs-push.1").exists(), "{case}");
            }
        }
    }
    for bad in ["/dev/null", "/proc/creb-rs-forbidden"] {
        let r = run_bin(&["man", "--dir", bad], None, &[]);
        assert_eq!(r.code, 2, "man --dir {bad}: {}", r.stderr);
    }
}
