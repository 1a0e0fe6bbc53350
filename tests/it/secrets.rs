//! Credentials never leak, also when things fail: a credential helper's output (good,
//! failing, or malformed) never shows up in any output even at `-vvv`; failing runs (wrong
//! password, registry down, missing image, expired helper) print no secret in any line,
//! result file or panic message; a docker config anyone can read is warned about.

use std::path::Path;

use crate::common::{run_bin, Registry};
use base64::Engine as _;

const USER: &str = "mallory";
/// The password; also what the credential helpers print as `Secret`.
const SECRET: &str = "s3cret-marker-91c4e2d7aa";

fn basic_registry(dir: &Path) -> Registry {
    Registry::with_basic_auth(dir, USER, SECRET)
}

/// Every file below `dir`, as text.
fn all_files(dir: &Path) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                text.push_str(&all_files(&path));
            } else if let Ok(bytes) = std::fs::read(&path) {
                text.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
    text
}

fn secrets() -> Vec<String> {
    vec![
        SECRET.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{SECRET}")),
    ]
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in secrets() {
        assert!(!text.contains(&secret), "{what}: a secret leaked: {text}");
    }
}

fn executable(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn credential_helper_output_never_reaches_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let registry = basic_registry(dir.path());
    let host = format!("127.0.0.1:{}", registry.port);
    let bin = tempfile::tempdir().unwrap();
    // good: the protocol's answer. failing: exits 1 printing the secret. garbled: prints
    // the secret, but not as the JSON the protocol asks for.
    executable(
        &bin.path().join("docker-credential-good"),
        &format!(
            "#!/bin/sh\nread server\nprintf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{SECRET}\"}}' \"$server\"\n"
        ),
    );
    executable(
        &bin.path().join("docker-credential-failing"),
        &format!(
            "#!/bin/sh\necho 'internal error, secret is {SECRET}'\necho '{SECRET}' >&2\nexit 1\n"
        ),
    );
    executable(
        &bin.path().join("docker-credential-garbled"),
        &format!("#!/bin/sh\necho 'Secret: {SECRET}'\n"),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tempfile::tempdir().unwrap();
    for (helper, code) in [("good", 0), ("failing", 2), ("garbled", 2)] {
        let config = tempfile::tempdir().unwrap();
        std::fs::write(
            config.path().join("config.json"),
            format!(r#"{{"credHelpers":{{"{host}":"{helper}"}}}}"#),
        )
        .unwrap();
        let result_dir = out.path().join(helper);
        for command in ["push", "pull"] {
            let mut args = vec![
                "-vvv",
                command,
                "--registry",
                &registry.url,
                "--repo",
                "helper/app",
                "--docker-config",
                config.path().to_str().unwrap(),
                "--output-dir",
                result_dir.to_str().unwrap(),
            ];
            if command == "push" {
                args.extend(["--layers", "1", "--layer-size", "4KiB"]);
            }
            let r = run_bin(&args, None, &[("PATH", &path), ("RUST_BACKTRACE", "1")]);
            assert_eq!(r.code, code, "{helper} {command}: {}", r.stderr);
            if code == 0 {
                assert!(r.stderr.len() > 1000, "trace logging was on");
            } else {
                assert!(
                    r.stderr.contains(&format!("docker-credential-{helper}"))
                        || r.stderr.contains(helper),
                    "the error names the helper: {}",
                    r.stderr
                );
            }
            assert_no_secret(&format!("{helper} {command} stdout"), &r.stdout);
            assert_no_secret(&format!("{helper} {command} stderr"), &r.stderr);
        }
    }
    assert_no_secret("result files", &all_files(out.path()));
}

#[test]
fn failing_runs_at_trace_level_print_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let registry = basic_registry(dir.path());
    let out = tempfile::tempdir().unwrap();
    let o = out.path().to_str().unwrap();
    let dead = format!("http://127.0.0.1:{}", crate::common::free_port());
    let failing_cmd = dir.path().join("password.sh");
    std::fs::write(
        &failing_cmd,
        format!("echo {SECRET}\necho {SECRET} >&2\nexit 3\n"),
    )
    .unwrap();
    let failing_cmd = format!("sh {}", failing_cmd.display());
    let mut seen = String::new();
    let runs: Vec<(Vec<&str>, Option<String>)> = vec![
        // Wrong password (the secret is a prefix of it, to catch partial echoes too).
        (
            vec![
                "-vvv",
                "push",
                "--registry",
                &registry.url,
                "--repo",
                "x/y",
                "--layers",
                "1",
                "--layer-size",
                "1KiB",
                "--username",
                USER,
                "--password-stdin",
                "--output-dir",
                o,
            ],
            Some(format!("{SECRET}-wrong")),
        ),
        // The registry is down.
        (
            vec![
                "-vvv",
                "pull",
                "--registry",
                &dead,
                "--repo",
                "x/y",
                "--username",
                USER,
                "--password-stdin",
                "--connect-timeout",
                "1s",
                "--output-dir",
                o,
            ],
            Some(SECRET.to_owned()),
        ),
        // Right password, missing image: the run fails after authenticating.
        (
            vec![
                "-vvv",
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "x/missing",
                "--username",
                USER,
                "--password-stdin",
                "--output-dir",
                o,
            ],
            Some(SECRET.to_owned()),
        ),
        // A failing --password-cmd that prints the secret.
        (
            vec![
                "-vvv",
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "x/y",
                "--username",
                USER,
                "--password-cmd",
                &failing_cmd,
                "--output-dir",
                o,
            ],
            None,
        ),
        // Malformed flags next to a secret in the environment.
        (
            vec![
                "-vvv",
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "NOT A REPO",
            ],
            None,
        ),
    ];
    for (args, stdin) in &runs {
        let r = run_bin(
            args,
            stdin.as_deref(),
            &[("RUST_BACKTRACE", "full"), ("CREB_PASSWORD", SECRET)],
        );
        assert!(matches!(r.code, 1 | 2), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
        seen.push_str(&r.stdout);
        seen.push_str(&r.stderr);
    }
    seen.push_str(&all_files(out.path()));
    assert_no_secret("failing runs", &seen);
}

#[test]
fn a_world_readable_docker_config_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let registry = basic_registry(dir.path());
    let host = format!("127.0.0.1:{}", registry.port);
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{SECRET}"));
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("config.json");
    std::fs::write(
        &file,
        format!(r#"{{"auths":{{"{host}":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    let args = [
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "x/y",
        "--docker-config",
        config.path().to_str().unwrap(),
        "--quiet",
    ];
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
        let r = run_bin(&args, None, &[]);
        // The image does not exist: the credentials worked, the pull fails.
        assert_eq!(r.code, 1, "{}", r.stderr);
        let warning = r
            .stderr
            .lines()
            .find(|l| l.contains("readable by every user"));
        assert_eq!(warning.is_some(), warned, "mode {mode:o}: {}", r.stderr);
        if let Some(line) = warning {
            assert!(
                line.contains("config.json") && line.contains("chmod 600"),
                "{line}"
            );
        }
        assert_no_secret("warning run", &r.stderr);
    }
}
