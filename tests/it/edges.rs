//! Trust at the edges: no server holds a command past its documented bounds or gets a wrong
//! answer counted as a success, every stop leaves summary.json, and every load command's
//! exit status is the one docs/cli.md gives.
//!
//! The misbehaving registry (tests/common/misbehaving.rs) is a raw TCP server of the test's
//! own: a body that never ends, an HTML page for a manifest, a stall are what real proxies
//! and portals do now and then and no real registry does on demand. Successes are measured
//! against a real docker-registry.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::misbehaving::{Answer, Misbehaving, Request};
use crate::common::{run_bin, summary_json, Registry};

/// Short timeouts, so each scenario's bound is a few seconds.
const TIMEOUTS: [&str; 8] = [
    "--request-timeout",
    "2s",
    "--body-idle-timeout",
    "2s",
    "--request-deadline",
    "4s",
    "--connect-timeout",
    "2s",
];

/// The longest any scenario may take: its timeouts and a margin for a loaded machine.
const BOUND: Duration = Duration::from_secs(20);

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The digest of `bytes`, as the manifests below name it.
fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The blob the test image references: 80 bytes.
const BLOB: &[u8] = &[b'b'; 80];

/// An OCI manifest of one 80-byte layer (and its config, the same bytes).
fn manifest() -> String {
    let d = sha256(BLOB);
    format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{d}","size":80}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{d}","size":80}}]}}"#
    )
}

/// A registry that answers `/v2/` and HEADs well, manifests with `manifests` and blobs with
/// `blobs`.
fn registry(
    manifests: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    blobs: impl Fn(&Request) -> Answer + Send + Sync + 'static,
) -> Misbehaving {
    Misbehaving::start(move |r| {
        if r.method == "HEAD" {
            // Present, with no digest to compare: the replay's probe goes on to the run.
            return Answer::status(200).header("Content-Type", OCI_MANIFEST);
        }
        if r.path.contains("/manifests/") {
            manifests(r)
        } else if r.path.contains("/blobs/") {
            blobs(r)
        } else {
            Answer::ok("application/json", "{}")
        }
    })
}

fn good_manifest(_: &Request) -> Answer {
    Answer::ok(OCI_MANIFEST, manifest())
}

fn good_blob(_: &Request) -> Answer {
    Answer::ok("application/octet-stream", BLOB)
}

/// What a run left: its exit status, its summary and how long it took.
struct Ran {
    code: i32,
    summary: serde_json::Value,
    took: Duration,
    stderr: String,
}

impl Ran {
    /// The count of failures of `kind` in operation `op`.
    fn errors(&self, op: &str, kind: &str) -> u64 {
        self.summary["operations"][op]["errors_by_kind"][kind]
            .as_u64()
            .unwrap_or(0)
    }

    /// Asserts that `op` failed, every time with `kind`, and never succeeded.
    fn failed_only_as(&self, op: &str, kind: &str) {
        let o = &self.summary["operations"][op];
        let errors = o["errors"].as_u64().unwrap_or(0);
        assert!(errors > 0, "{op} did not fail: {}", self.summary);
        assert_eq!(
            self.errors(op, kind),
            errors,
            "{op}: {}",
            o["errors_by_kind"]
        );
        assert_eq!(o["ok"], 0, "{op} succeeded: {}", self.summary);
    }
}

fn run(args: &[&str], out: &Path) -> Ran {
    let mut a: Vec<&str> = args.to_vec();
    a.extend(TIMEOUTS);
    a.extend(["--quiet", "--output-dir", out.to_str().unwrap()]);
    let started = Instant::now();
    let r = run_bin(&a, None, &[]);
    let took = started.elapsed();
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        out.join("summary.json").exists(),
        "{args:?}: no summary.json (exit {}): {}",
        r.code,
        r.stderr
    );
    let summary = summary_json(out);
    Ran {
        code: r.code,
        summary,
        took,
        stderr: r.stderr,
    }
}

fn pull(server: &Misbehaving, out: &Path, extra: &[&str]) -> Ran {
    let mut args = vec!["pull", "--registry", &server.url, "--repo", "edge/app"];
    args.extend(extra);
    run(&args, out)
}

/// A successful GET of `uri` by one client, `written` bytes, at second `i` of the trace.
fn record(i: u32, uri: &str, written: u64) -> serde_json::Value {
    serde_json::json!({
        "host": "h",
        "http.request.duration": 0.001,
        "http.request.method": "GET",
        "http.request.remoteaddr": "client-1",
        "http.request.uri": uri,
        "http.response.status": 200,
        "http.response.written": written,
        "id": format!("r{i}"),
        "timestamp": format!("2017-06-20T10:00:0{i}.000Z"),
    })
}

/// A trace that reads the test image: its manifest, then its blob.
fn trace(dir: &Path) -> PathBuf {
    let records = vec![
        record(0, "v2/edge/app/manifests/latest", 500),
        record(1, "v2/edge/app/blobs/abc123", 80),
    ];
    let path = dir.join("trace.json");
    std::fs::write(&path, serde_json::to_vec(&records).unwrap()).unwrap();
    path
}

fn replay(server: &Misbehaving, dir: &Path, out: &Path, extra: &[&str]) -> Ran {
    let trace = trace(dir);
    let mut args = vec![
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &server.url,
        "--phase",
        "run",
        "--no-verify",
    ];
    args.extend(extra);
    run(&args, out)
}

fn bounded(r: &Ran, what: &str) {
    assert!(r.took < BOUND, "{what} took {:?}: {}", r.took, r.stderr);
}

#[test]
fn a_blob_body_that_never_ends_is_cut_at_its_size_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(good_manifest, |_| Answer::Endless {
        headers: vec![("Content-Type".into(), "application/octet-stream".into())],
    });
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.failed_only_as("blob_get", "size_mismatch");
    let r = replay(&server, dir.path(), &dir.path().join("replay"), &[]);
    bounded(&r, "replay");
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.failed_only_as("blob_get", "size_mismatch");
}

#[test]
fn a_manifest_body_that_never_ends_is_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(
        |_| Answer::Endless {
            headers: vec![("Content-Type".into(), OCI_MANIFEST.into())],
        },
        good_blob,
    );
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.errors("manifest_get", "too_large"), 1, "{}", r.summary);
}

#[test]
fn a_body_shorter_than_promised_then_silent_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(good_manifest, |_| Answer::ShortThenStall {
        promised: 80,
        sent: 10,
    });
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.failed_only_as("blob_get", "timeout");
}

#[test]
fn no_answer_at_all_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(|_| Answer::Silent, good_blob);
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.errors("manifest_get", "timeout"), 1, "{}", r.summary);
}

#[test]
fn a_body_trickling_forever_ends_at_the_request_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // A byte every 500 ms never trips the 2 s idle timeout: only the deadline ends it.
    let server = registry(good_manifest, |_| Answer::Trickle {
        headers: Vec::new(),
        every: Duration::from_millis(500),
    });
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.failed_only_as("blob_get", "timeout");
    assert!(r.took >= Duration::from_secs(4), "{:?}", r.took);
}

#[test]
fn an_html_page_for_a_manifest_is_never_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(
        |_| {
            Answer::ok(
                "text/html; charset=utf-8",
                "<html><body>Sign in</body></html>",
            )
        },
        good_blob,
    );
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.errors("manifest_get", "not_a_manifest"),
        1,
        "{}",
        r.summary
    );
    assert_eq!(r.summary["operations"]["manifest_get"]["ok"], 0);
    let r = replay(&server, dir.path(), &dir.path().join("replay"), &[]);
    bounded(&r, "replay");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.errors("manifest_get", "not_a_manifest"),
        1,
        "{}",
        r.summary
    );
    // JSON that is not a manifest, under a manifest's type, is not one either.
    let server = registry(
        |_| Answer::ok(OCI_MANIFEST, r#"{"hello":"world"}"#),
        good_blob,
    );
    let r = pull(&server, &dir.path().join("json"), &[]);
    assert_eq!(
        r.errors("manifest_get", "not_a_manifest"),
        1,
        "{}",
        r.summary
    );
}

#[test]
fn a_digest_header_that_is_not_the_bodys_digest_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = sha256(b"another manifest");
    let server = registry(
        move |_| Answer::ok(OCI_MANIFEST, manifest()).header("Docker-Content-Digest", &wrong),
        good_blob,
    );
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(
        r.errors("manifest_get", "digest_header_mismatch"),
        1,
        "{}",
        r.summary
    );
}

#[test]
fn a_tag_list_that_is_not_json_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = Misbehaving::start(|r| {
        if r.path.contains("/tags/list") {
            Answer::ok("text/html", "<html>nope</html>")
        } else {
            Answer::ok("application/json", "{}")
        }
    });
    let r = pull(&server, &dir.path().join("pull"), &["--all-tags"]);
    bounded(&r, "pull");
    // The images to pull are unknown: the registry is not usable for this pull.
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.errors("tag_list", "not_json"), 1, "{}", r.summary);
}

#[test]
fn a_token_endpoint_that_never_ends_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let url = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let realm = std::sync::Arc::clone(&url);
    let server = Misbehaving::start(move |r| {
        if r.path.starts_with("/token") {
            return Answer::Trickle {
                headers: vec![("Content-Type".into(), "application/json".into())],
                every: Duration::from_millis(300),
            };
        }
        let challenge = format!(
            r#"Bearer realm="{}/token",service="edge""#,
            realm.get().cloned().unwrap_or_default()
        );
        Answer::status(401).header("WWW-Authenticate", &challenge)
    });
    url.set(server.url.clone()).unwrap();
    let r = pull(&server, &dir.path().join("pull"), &[]);
    bounded(&r, "pull");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("token"), "{}", r.stderr);
    assert!(
        r.summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "registry_unusable"),
        "{}",
        r.summary
    );
}

#[test]
fn a_replay_against_an_unusable_registry_ends_in_seconds_with_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let out = dir.path().join("out");
    let r = run(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            "http://127.0.0.1:9",
        ],
        &out,
    );
    bounded(&r, "replay");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.summary["totals"]["requests"], 0);
    assert_eq!(r.summary["warnings"][0]["kind"], "registry_unusable");
}

// ---------------------------------------------------------------------------------------
// Stops: SIGTERM and SIGINT while a command is stuck, and while a trace is prepared.

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for `child` at most `limit`; its exit status, or a kill and a failure.
fn wait_at_most(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `args` against a registry that never answers what they wait for, signals `name`
/// after a second, and checks the exit status and the interrupted result within the grace
/// period and a few seconds.
fn stop_stuck(args: &[&str], out: &Path, name: &str, code: i32) {
    let mut a = args.to_vec();
    a.extend([
        "--grace",
        "2s",
        "--quiet",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    eprintln!("{}", a.join(" "));
    let mut child = crate::common::spawn_bin(&a);
    std::thread::sleep(Duration::from_secs(1));
    signal(&child, name);
    let status = wait_at_most(&mut child, Duration::from_secs(10));
    assert_eq!(status, code, "{args:?}");
    let summary = summary_json(out);
    assert_eq!(summary["interrupted"], true, "{summary}");
    assert!(
        summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "interrupted"),
        "{args:?}: no interrupted warning: {summary}"
    );
}

#[test]
fn a_stuck_pull_push_and_replay_stop_within_grace_and_leave_results() {
    let dir = tempfile::tempdir().unwrap();
    let server = registry(|_| Answer::Silent, |_| Answer::Silent);
    let url = server.url.clone();
    let pull = ["pull", "--registry", &url, "--repo", "edge/app"];
    stop_stuck(&pull, &dir.path().join("pull-term"), "TERM", 143);
    stop_stuck(&pull, &dir.path().join("pull-int"), "INT", 130);
    // A push whose first HEAD is never answered.
    let push = [
        "push",
        "--registry",
        &url,
        "--repo",
        "edge/app",
        "--layers",
        "2",
        "--layer-size",
        "1KiB",
    ];
    stop_stuck(&push, &dir.path().join("push-term"), "TERM", 143);
    let trace = trace(dir.path());
    let replay = [
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &url,
        "--phase",
        "run",
    ];
    // The probe's HEADs are answered; the run's GETs are not.
    stop_stuck(&replay, &dir.path().join("replay-term"), "TERM", 143);
}

#[test]
fn a_stop_while_a_large_trace_is_prepared_leaves_an_interrupted_result() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("big.json");
    // Enough content that hashing it takes far longer than the test waits.
    let synth = run_bin(
        &[
            "trace",
            "synth",
            "--profile",
            "dal",
            "--requests",
            "20k",
            "-o",
            trace.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(synth.code, 0, "{}", synth.stderr);
    let server = registry(good_manifest, good_blob);
    let out = dir.path().join("out");
    // A run alone hashes every content before its first request (a prewarm would hash
    // while it sends instead).
    let mut child = crate::common::spawn_bin(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &server.url,
        "--phase",
        "run",
        "--quiet",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the preparation ended already"
    );
    let stopped = Instant::now();
    signal(&child, "TERM");
    let status = wait_at_most(&mut child, Duration::from_secs(10));
    assert_eq!(status, 143);
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    let summary = summary_json(&out);
    assert_eq!(summary["interrupted"], true, "{summary}");
    assert_eq!(summary["totals"]["requests"], 0, "{summary}");

    // With --phase all the prewarm starts at once; stopped, it leaves its own result and
    // the run's (no operation, interrupted).
    let real = Registry::start();
    let out = dir.path().join("all");
    let mut child = crate::common::spawn_bin(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &real.url,
        "--size-scale",
        "0.01",
        "--prewarm-concurrency",
        "1",
        "--quiet",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the prewarm ended already"
    );
    signal(&child, "TERM");
    let status = wait_at_most(&mut child, Duration::from_secs(15));
    assert_eq!(status, 143);
    let prewarm = summary_json(&out.join("prewarm"));
    assert_eq!(prewarm["interrupted"], true, "{prewarm}");
    assert!(
        prewarm["totals"]["requests"].as_u64() > Some(0),
        "{prewarm}"
    );
    let run = summary_json(&out);
    assert_eq!(run["interrupted"], true, "{run}");
    assert_eq!(run["totals"]["requests"], 0, "{run}");
}

// ---------------------------------------------------------------------------------------
// The exit rule: command × outcome → status, as docs/cli.md gives it.

#[test]
fn every_load_command_exits_as_docs_cli_md_says() {
    let dir = tempfile::tempdir().unwrap();
    let real = Registry::start();
    let failing = registry(good_manifest, |_| Answer::status(500));
    let mut case = 0;
    let mut check = |what: &str, args: Vec<String>, want: i32| {
        case += 1;
        let out = dir.path().join(format!("case-{case}"));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        eprintln!("{what}: {}", a.join(" "));
        let r = run(&a, &out);
        assert_eq!(r.code, want, "{what}: {}", r.stderr);
        if want == 1 {
            assert!(r.summary["totals"]["errors"].as_u64() > Some(0), "{what}");
        }
    };
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let push = |url: &str, extra: &[&str]| {
        let mut v = s(&[
            "push",
            "--registry",
            url,
            "--repo",
            "matrix/app",
            "--layers",
            "1",
            "--layer-size",
            "1KiB",
        ]);
        v.extend(s(extra));
        v
    };
    let pull = |url: &str, extra: &[&str]| {
        let mut v = s(&["pull", "--registry", url, "--repo", "matrix/app"]);
        v.extend(s(extra));
        v
    };
    let trace = trace(dir.path());
    let replay = |url: &str, extra: &[&str]| {
        let mut v = s(&[
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            url,
            "--phase",
            "run",
            "--no-verify",
        ]);
        v.extend(s(extra));
        v
    };
    // Completed, nothing failed: 0.
    check("push ok", push(&real.url, &[]), 0);
    check("pull ok", pull(&real.url, &[]), 0);
    // Prewarmed, then read: every manifest is the one prewarm pushed.
    let mut ok = s(&["replay", trace.to_str().unwrap(), "--registry", &real.url]);
    ok.extend(s(&["--seed", "9"]));
    check("replay ok", ok, 0);
    // An operation failed: 1, for every command; tolerated with --max-errors: 0.
    check("pull failed", pull(&failing.url, &[]), 1);
    check("replay failed", replay(&failing.url, &[]), 1);
    check(
        "replay tolerated",
        // The fake's manifest is not the prewarmed one, and its blob fails: two.
        replay(&failing.url, &["--max-errors", "2"]),
        0,
    );
    check(
        "pull tolerated",
        pull(&failing.url, &["--max-errors", "100%"]),
        0,
    );
    // A threshold held and nothing failed: 3; a failure outranks it: 1.
    check(
        "pull slow",
        pull(&real.url, &["--fail-if", "count(image_pull) > 0"]),
        3,
    );
    check(
        "replay failed and slow",
        replay(&failing.url, &["--fail-if", "count(manifest_get) > 0"]),
        1,
    );
    // The registry unusable: 2, with a result.
    for command in [
        push("http://127.0.0.1:9", &[]),
        pull("http://127.0.0.1:9", &[]),
    ] {
        check("unusable", command, 2);
    }
    check("replay unusable", replay("http://127.0.0.1:9", &[]), 2);
}

// ---------------------------------------------------------------------------------------
// Secrets: a password given in any way reaches no output and no result file.

#[test]
fn a_password_in_a_url_is_never_repeated() {
    let dir = tempfile::tempdir().unwrap();
    const SECRET: &str = "s3cr3t-in-the-url";
    let out = dir.path().join("out");
    let url = format!("http://me:{SECRET}@127.0.0.1:9");
    for args in [
        vec!["pull", "--registry", url.as_str(), "--repo", "x"],
        vec![
            "push",
            "--registry",
            "http://127.0.0.1:9",
            "--repo",
            "x",
            "--layers",
            "1",
            "--layer-size",
            "1",
            "--metrics-push",
            url.as_str(),
            "--output-dir",
            out.to_str().unwrap(),
        ],
    ] {
        let r = run_bin(&args, None, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains(SECRET), "{}", r.stderr);
        assert!(!r.stdout.contains(SECRET), "{}", r.stdout);
        assert!(r.stderr.contains("redacted") || r.stderr.contains("not usable"));
    }
    let r = run_bin(&["pull", "--repo", "x"], None, &[("CREB_REGISTRY", &url)]);
    assert_eq!(r.code, 2);
    assert!(!r.stderr.contains(SECRET), "{}", r.stderr);
    // Nothing written anywhere holds it.
    for entry in walk(dir.path()) {
        let text = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(SECRET),
            "{} holds the password",
            entry.display()
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_replayed_read_of_a_prewarmed_manifest_must_find_that_manifest() {
    let dir = tempfile::tempdir().unwrap();
    // A well-formed manifest, but not the one this trace's prewarm pushes.
    let server = registry(good_manifest, good_blob);
    let r = replay(
        &server,
        dir.path(),
        &dir.path().join("replay"),
        &["--limit-requests", "1"],
    );
    bounded(&r, "replay");
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.failed_only_as("manifest_get", "digest_mismatch");
}

/// `trace import --sizes-from` asks a registry too: stopped while its HEADs go unanswered,
/// it ends within their 5 s grace with the signal's status and writes no trace.
#[test]
fn a_stop_while_import_asks_for_sizes_writes_nothing_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Misbehaving::start(|r| {
        if r.path == "/v2/" {
            Answer::ok("application/json", "{}")
        } else {
            Answer::Silent
        }
    });
    let log = dir.path().join("registry.log");
    let put = r#"{"http.request.method":"PUT","http.request.uri":"/v2/a/b/blobs/uploads/u1?digest=sha256%3A0000000000000000000000000000000000000000000000000000000000000000","http.request.remoteaddr":"10.0.0.1:5","http.response.status":201,"http.response.written":0,"http.response.duration":"2ms","level":"info","msg":"response completed","time":"2026-11-24T22:53:52.398Z"}"#;
    std::fs::write(&log, format!("{put}\n")).unwrap();
    let out = dir.path().join("t.json");
    let mut child = crate::common::spawn_bin(&[
        "trace",
        "import",
        log.to_str().unwrap(),
        "--format",
        "distribution",
        "-o",
        out.to_str().unwrap(),
        "--sizes-from",
        &server.url,
    ]);
    std::thread::sleep(Duration::from_secs(1));
    signal(&child, "INT");
    let status = wait_at_most(&mut child, Duration::from_secs(10));
    assert_eq!(status, 130);
    assert!(!out.exists(), "no trace written");
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("stopped while asking for sizes"),
        "{stderr}"
    );
}

/// What the verification proxy does to a blob GET's body on its way from the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alter {
    Nothing,
    /// One byte in the middle flipped.
    Flip,
    /// The last byte missing (and the length saying so).
    Short,
    /// One byte too many.
    Long,
    /// The other layer's body: the same size, other bytes.
    Swap,
}

/// One exchange with the real registry at `addr` (HTTP/1.0: the answer ends when the
/// connection does), with the request's `Accept`: status, headers (lower case), body.
fn forward(
    addr: &str,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, raw[end + 4..].to_vec())
}

/// Every `--verify` mode catches what it promises when a body comes back wrong from a real
/// registry: content prewarm pushed to docker-registry, read back through a proxy of the
/// test's own that alters each layer's body on the way (a flipped byte, one byte missing or
/// extra, the other layer's body of the same size). `compare` and `sha256` catch all four;
/// `none` the two wrong sizes; unaltered bodies pass in every mode.
#[test]
fn every_verify_mode_catches_what_it_promises() {
    let real = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    // Two layers of one size, past one generator block, so a swap changes only the bytes.
    let records = vec![
        record(0, "v2/verify/app/manifests/latest", 600),
        record(1, "v2/verify/app/blobs/aaa111", 300_001),
        record(2, "v2/verify/app/blobs/bbb222", 300_001),
    ];
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, serde_json::to_vec(&records).unwrap()).unwrap();
    let trace = trace.to_str().unwrap().to_owned();
    let prewarm = run_bin(
        &[
            "replay",
            &trace,
            "--registry",
            &real.url,
            "--phase",
            "prewarm",
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(prewarm.code, 0, "{}", prewarm.stderr);

    let addr = format!("127.0.0.1:{}", real.port);
    let (status, _, body) = forward(
        &addr,
        "GET",
        "/v2/verify/app/manifests/latest",
        Some(OCI_MANIFEST),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let layers: Vec<String> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(layers.len(), 2, "{manifest}");

    let alter = std::sync::Arc::new(std::sync::Mutex::new(Alter::Nothing));
    let proxy = {
        let (alter, addr, layers) = (std::sync::Arc::clone(&alter), addr.clone(), layers.clone());
        Misbehaving::start(move |r| {
            let how = *alter.lock().unwrap();
            let blob_get = r.method == "GET" && r.path.contains("/blobs/");
            let path = match layers.iter().position(|l| r.path.ends_with(l.as_str())) {
                Some(i) if blob_get && how == Alter::Swap => {
                    r.path.replace(&layers[i], &layers[1 - i])
                }
                _ => r.path.clone(),
            };
            let (status, headers, mut body) = forward(&addr, &r.method, &path, r.header("accept"));
            if blob_get && status == 200 {
                let middle = body.len() / 2;
                match how {
                    Alter::Flip => body[middle] ^= 0x20,
                    Alter::Short => {
                        body.pop();
                    }
                    Alter::Long => body.push(b'!'),
                    Alter::Nothing | Alter::Swap => {}
                }
            }
            let kept = ["content-type", "docker-content-digest"];
            Answer::Whole {
                status,
                headers: headers
                    .into_iter()
                    .filter(|(n, _)| kept.contains(&n.as_str()))
                    .collect(),
                body,
            }
        })
    };

    for (how, caught_by_all, kind) in [
        (Alter::Nothing, false, ""),
        (Alter::Flip, false, "digest_mismatch"),
        (Alter::Short, true, "size_mismatch"),
        (Alter::Long, true, "size_mismatch"),
        (Alter::Swap, false, "digest_mismatch"),
    ] {
        *alter.lock().unwrap() = how;
        for mode in ["compare", "sha256", "none"] {
            let out = dir.path().join(format!("{how:?}-{mode}"));
            let r = run(
                &[
                    "replay",
                    &trace,
                    "--registry",
                    &proxy.url,
                    "--phase",
                    "run",
                    "--mode",
                    "stress",
                    "--verify",
                    mode,
                ],
                &out,
            );
            let what = format!("{how:?} with --verify {mode}");
            let meta: serde_json::Value =
                serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
            assert_eq!(meta["config"]["verify"], mode, "{what}: {}", meta["config"]);
            assert_eq!(
                r.summary["operations"]["manifest_get"]["ok"], 1,
                "{what}: {}",
                r.summary
            );
            if how != Alter::Nothing && (caught_by_all || mode != "none") {
                r.failed_only_as("blob_get", kind);
                assert_eq!(r.errors("blob_get", kind), 2, "{what}: {}", r.summary);
                assert_eq!(r.code, 1, "{what}: {}", r.stderr);
            } else {
                assert_eq!(
                    r.summary["operations"]["blob_get"]["ok"], 2,
                    "{what}: {}",
                    r.summary
                );
                assert_eq!(r.summary["totals"]["errors"], 0, "{what}: {}", r.summary);
                assert_eq!(r.code, 0, "{what}: {}", r.stderr);
            }
        }
    }
}

// Files the user named: creb-rs never writes over one of a command's inputs, nor over a file
// of another kind without --force; a digest cache replaces only a digest cache.

/// Runs the binary; returns its exit status and standard error.
fn exit_of(args: &[&str]) -> (i32, String) {
    let r = run_bin(args, None, &[]);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    (r.code, r.stderr)
}

/// A trace in `dir` with its bytes, and a file of the user's own beside it.
fn trace_and_notes(dir: &Path) -> (PathBuf, Vec<u8>, PathBuf) {
    let trace = trace(dir);
    let bytes = std::fs::read(&trace).unwrap();
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, b"my notes").unwrap();
    (trace, bytes, notes)
}

#[test]
fn a_digest_cache_never_replaces_the_trace_another_file_or_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, trace_bytes, notes) = trace_and_notes(dir.path());
    let out = dir.path().join("out");
    let t = trace.to_str().unwrap();
    // Refused before the registry is asked: nothing listens on port 9.
    let replay = ["replay", t, "--registry", "http://127.0.0.1:9", "--quiet"];
    for cache in [t, notes.to_str().unwrap()] {
        let (code, stderr) = exit_of(&[&replay[..], &["--digest-cache", cache]].concat());
        assert_eq!(code, 2, "--digest-cache {cache}: {stderr}");
        assert!(stderr.contains("--digest-cache"), "{stderr}");
    }
    let (code, stderr) = exit_of(
        &[
            &replay[..],
            &[
                "--digest-cache",
                out.join("summary.json").to_str().unwrap(),
                "--output-dir",
                out.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("one of the run's results"), "{stderr}");
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        trace_bytes,
        "the trace is untouched"
    );
    assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    assert!(!out.join("summary.json").exists());
}

#[test]
fn trace_outputs_never_replace_an_input_nor_any_file_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, trace_bytes, notes) = trace_and_notes(dir.path());
    let (t, n) = (trace.to_str().unwrap(), notes.to_str().unwrap());
    let sample = [
        "trace",
        "sample",
        t,
        "--method",
        "first-n",
        "--requests",
        "1",
    ];
    let import = ["trace", "import", t, "--format", "distribution"];
    for args in [
        [&sample[..], &["--out", t, "--force"]].concat(),
        [&import[..], &["-o", t, "--force"]].concat(),
    ] {
        let (code, stderr) = exit_of(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("one of the command's inputs"), "{stderr}");
    }
    let synth = ["trace", "synth", "--requests", "10", "--quiet", "--out", n];
    let (code, stderr) = exit_of(&synth);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(&trace).unwrap(), trace_bytes);
    assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    // A trace over a trace needs --force too (no trace can be made again), as does another
    // kind of file.
    let other = dir.path().join("other.json");
    std::fs::copy(&trace, &other).unwrap();
    let over = [&sample[..], &["--out", other.to_str().unwrap()]].concat();
    let (code, stderr) = exit_of(&over);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("replaces no trace without --force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&other).unwrap(), trace_bytes);
    let (code, stderr) = exit_of(&[&over[..], &["--force"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = exit_of(&[&synth[..], &["--force"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(std::fs::read(&notes).unwrap().starts_with(b"["));
}

#[test]
fn a_reused_output_dir_holds_only_the_new_result_and_reports_spare_the_inputs() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let push = [
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "files/app",
        "--layers",
        "1",
        "--layer-size",
        "1KiB",
        "--quiet",
        "--output-dir",
        o,
    ];
    let (code, stderr) = exit_of(&[&push[..], &["--record-requests"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(out.join("requests.csv").exists());
    let (code, stderr) = exit_of(&push);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !out.join("requests.csv").exists(),
        "the earlier result's requests.csv stayed beside the new result"
    );
    assert!(out.join("summary.json").exists());

    // The result's own files are inputs of report and merge; a file of another kind is
    // replaced only with --force.
    let summary = std::fs::read(out.join("summary.json")).unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"my notes").unwrap();
    for args in [
        vec![
            "report",
            o,
            "--format",
            "json",
            "-o",
            out.join("summary.json").to_str().unwrap(),
        ],
        vec![
            "report",
            o,
            "--format",
            "csv",
            "-o",
            notes.to_str().unwrap(),
        ],
        vec!["merge", o, "--output-dir", o],
    ] {
        let (code, stderr) = exit_of(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read(out.join("summary.json")).unwrap(), summary);
    assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    let (code, stderr) = exit_of(&[
        "report",
        o,
        "--format",
        "csv",
        "--force",
        "-o",
        notes.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");

    // A directory whose files have a result's names but are not creb-rs's: refused.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("timeline.csv"), b"mine").unwrap();
    let f = foreign.to_str().unwrap();
    let elsewhere = [&push[..push.len() - 1], &[f]].concat();
    let (code, stderr) = exit_of(&elsewhere);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(
        std::fs::read(foreign.join("timeline.csv")).unwrap(),
        b"mine"
    );
    let (code, stderr) = exit_of(&[&elsewhere[..], &["--force"]].concat());
    assert_eq!(code, 0, "{stderr}");
}

// First contact: a stop and --max-run-time are honoured while GET /v2/ or a token is awaited,
// not after the 60 s request timeout.

/// A registry whose `GET /v2/` is never answered, or (`token`) one that sends every request
/// to a token server that never answers.
fn unanswered_first_contact(token: bool) -> Misbehaving {
    let url = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let realm = std::sync::Arc::clone(&url);
    let server = Misbehaving::start(move |r| {
        if !token || r.path.starts_with("/token") {
            return Answer::Silent;
        }
        let challenge = format!(
            r#"Bearer realm="{}/token",service="edge""#,
            realm.get().cloned().unwrap_or_default()
        );
        Answer::status(401).header("WWW-Authenticate", &challenge)
    });
    url.set(server.url.clone()).unwrap();
    server
}

/// The three load commands against `url`, with the default 60 s request timeout.
fn load_commands(url: &str, trace: &Path) -> Vec<Vec<String>> {
    let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    vec![
        words(&format!("pull --registry {url} --repo edge/app")),
        words(&format!(
            "push --registry {url} --repo edge/app --layers 1 --layer-size 1KiB"
        )),
        words(&format!(
            "replay {} --registry {url} --phase all",
            trace.display()
        )),
    ]
}

#[test]
fn a_stop_during_an_unanswered_first_contact_or_token_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    for (token, signal_name, code) in [(false, "TERM", 143), (true, "INT", 130)] {
        let server = unanswered_first_contact(token);
        for (i, args) in load_commands(&server.url, &trace).iter().enumerate() {
            let out = dir.path().join(format!("{signal_name}-{i}"));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            stop_stuck(&args, &out, signal_name, code);
            assert_eq!(summary_json(&out)["totals"]["ok"], 0);
        }
    }
}

#[test]
fn max_run_time_ends_an_unanswered_first_contact_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    // The message names what hung: GET /v2/ itself, or the token service it sent us to.
    for (token, hung) in [(false, "did not answer GET /v2/"), (true, "token service")] {
        let server = unanswered_first_contact(token);
        let commands = load_commands(&server.url, &trace);
        let args: Vec<&str> = commands[0].iter().map(String::as_str).collect();
        let out = dir.path().join(format!("which-{token}"));
        let mut args = args.clone();
        args.extend(["--max-run-time", "2s", "--grace", "1s", "--quiet"]);
        args.extend(["--output-dir", out.to_str().unwrap()]);
        let r = run_bin(&args, None, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(hung), "{token}: {}", r.stderr);
    }
    let server = unanswered_first_contact(false);
    for (i, args) in load_commands(&server.url, &trace).iter().enumerate() {
        let out = dir.path().join(format!("limit-{i}"));
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["--max-run-time", "3s", "--grace", "1s", "--quiet"]);
        args.extend(["--output-dir", out.to_str().unwrap()]);
        let started = Instant::now();
        let r = run_bin(&args, None, &[]);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(15), "{args:?} took {took:?}");
        // Nothing was measured: the registry did not answer in the run's time.
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("--max-run-time"), "{}", r.stderr);
        let summary = summary_json(&out);
        let kinds: Vec<&str> = summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| w["kind"].as_str())
            .collect();
        assert!(kinds.contains(&"registry_unusable"), "{summary}");
    }
}

// A cut-off operation is a counted failure: what a stop's grace ended is `cancelled` in the
// totals and the errors, and the exit status is the one for failed operations.

#[test]
fn an_operation_cut_off_by_max_run_time_is_a_counted_failure() {
    let dir = tempfile::tempdir().unwrap();
    let stop = ["--max-run-time", "1s", "--grace", "300ms"];
    // The manifest is served, its blob never is.
    let server = registry(good_manifest, |_| Answer::Silent);
    let r = pull(&server, &dir.path().join("pull"), &stop);
    bounded(&r, "pull");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.summary["interrupted"], false);
    assert!(
        r.summary["totals"]["errors"].as_u64().unwrap() >= 1,
        "{}",
        r.summary
    );
    // Both blobs of the image (its config and its layer) were being read.
    assert_eq!(r.errors("blob_get", "cancelled"), 2, "{}", r.summary);
    assert!(r.summary["errors"]["cancelled"].as_u64().unwrap() >= 1);
    // A push whose manifest PUT is never answered (its blobs are present).
    let server = registry(|_| Answer::Silent, good_blob);
    let mut push = vec!["push", "--registry", &server.url, "--repo", "edge/app"];
    push.extend(["--layers", "1", "--layer-size", "80", "--monolithic"]);
    push.extend(stop);
    let r = run(&push, &dir.path().join("push"));
    bounded(&r, "push");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.errors("manifest_put", "cancelled"), 1, "{}", r.summary);
    assert!(
        r.summary["totals"]["errors"].as_u64().unwrap() >= 1,
        "{}",
        r.summary
    );
}

// Sizes a registry claims: believed up to the documented ceiling (1 TiB), the rest left
// unknown and counted; a trace that claims more is invalid.

/// A distribution log line of an upload's closing PUT of `digest`, without its size.
fn upload_put(digest: &str) -> String {
    format!(
        r#"{{"http.request.method":"PUT","http.request.uri":"/v2/a/b/blobs/uploads/u{}?digest=sha256%3A{digest}","http.request.remoteaddr":"10.0.0.1:5","http.response.status":201,"http.response.written":0,"http.response.duration":"2ms","level":"info","msg":"response completed","time":"2026-11-24T22:53:52.398Z"}}"#,
        &digest[..4]
    )
}

/// `trace import LOG --format distribution -o OUT --sizes-from URL EXTRA...`.
fn import_sizing(
    log: &Path,
    out: &Path,
    url: &str,
    extra: &[&str],
    stdin: Option<&str>,
) -> crate::common::BinOutput {
    let (log, out) = (log.to_str().unwrap(), out.to_str().unwrap());
    let mut args = vec![
        "trace",
        "import",
        log,
        "--format",
        "distribution",
        "-o",
        out,
    ];
    args.extend(["--sizes-from", url]);
    args.extend(extra);
    run_bin(&args, stdin, &[])
}

#[test]
fn absurd_sizes_from_a_registry_or_a_trace_are_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let [eib, pib, fine] = ["e", "f", "a"].map(|c| c.repeat(64));
    let claims = [
        (eib.clone(), u64::MAX.to_string()),
        (pib.clone(), (1u64 << 50).to_string()),
        (fine.clone(), "1000".to_string()),
    ];
    let server = Misbehaving::start(move |r| {
        let claim = claims.iter().find(|(d, _)| r.path.ends_with(d.as_str()));
        match claim {
            Some((_, size)) if r.method == "HEAD" => {
                Answer::status(200).header("Content-Length", size).header(
                    "Docker-Content-Digest",
                    &format!("sha256:{}", &r.path[r.path.len() - 64..]),
                )
            }
            _ => Answer::ok("application/json", "{}"),
        }
    });
    let log = dir.path().join("registry.log");
    let lines: Vec<String> = [&eib, &pib, &fine].iter().map(|d| upload_put(d)).collect();
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("t.json");
    let r = import_sizing(&log, &out, &server.url, &["--no-anonymize"], None);
    // Written, the two claims left unknown and counted, and the exit says sizing failed.
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("2 beyond 1 TiB"), "{}", r.stderr);
    let trace = std::fs::read_to_string(&out).unwrap();
    assert!(!trace.contains(&u64::MAX.to_string()), "{trace}");
    assert!(!trace.contains(&(1u64 << 50).to_string()), "{trace}");
    assert_eq!(
        trace.matches("\"creb.size_unknown\":true").count(),
        2,
        "{trace}"
    );
    let validated = run_bin(&["trace", "validate", out.to_str().unwrap()], None, &[]);
    assert_eq!(validated.code, 0, "{}", validated.stderr);

    // A trace that claims a 16 EiB blob is invalid, named by file, record and field.
    let claimed = dir.path().join("claimed.json");
    let records = vec![record(0, &format!("v2/a/b/blobs/sha256:{eib}"), u64::MAX)];
    std::fs::write(&claimed, serde_json::to_vec(&records).unwrap()).unwrap();
    let validated = run_bin(&["trace", "validate", claimed.to_str().unwrap()], None, &[]);
    assert_eq!(validated.code, 2, "{}", validated.stderr);
    assert!(
        validated.stderr.contains("http.response.written") && validated.stderr.contains("1 TiB"),
        "{}",
        validated.stderr
    );
}

#[test]
fn sizes_from_a_registry_with_credentials_sizes_every_upload() {
    const USER: &str = "sizer";
    const PASS: &str = "sizing-secret";
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start_with(crate::common::RegistryOptions {
        access_log: true,
        auth: crate::common::RegistryAuth::Htpasswd {
            path: crate::common::token_issuer::write_htpasswd(dir.path(), &[(USER, PASS)]),
        },
        ..crate::common::RegistryOptions::default()
    });
    let push = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "sized/app",
            "--images",
            "4",
            "--layers",
            "4",
            "--layer-size",
            "2KiB",
            "--monolithic",
            "--quiet",
            "--username",
            USER,
            "--password-stdin",
        ],
        Some(PASS),
        &[],
    );
    assert_eq!(push.code, 0, "{}", push.stderr);
    // The log without distribution's upload state: every upload's size must be asked for.
    let log = dir.path().join("registry.log");
    let stripped: String = registry
        .log()
        .lines()
        .map(|l| match (l.find("?_state="), l.find("&digest=")) {
            (Some(a), Some(b)) => format!("{}?{}\n", &l[..a], &l[b + 1..]),
            _ => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&log, stripped).unwrap();
    let out = dir.path().join("t.json");
    let creds = ["--json", "--username", USER, "--password-stdin"];
    let r = import_sizing(&log, &out, &registry.url, &creds, Some(PASS));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let uploads = report["sizes"]["uploads"].as_u64().unwrap();
    assert!(uploads >= 17, "{report}");
    assert_eq!(report["sizes"]["from_registry"], uploads, "{report}");
    assert_eq!(report["sizes"]["unknown"], 0, "{report}");
}

/// `--concurrency` above the open-file limit: the soft limit is raised as far as the hard one
/// allows, and said; beyond the hard limit the run is refused before it starts, with the
/// numbers (25,000 in flight under a 20,000 limit once ran without a word).
#[test]
fn a_concurrency_above_the_open_file_limit_is_raised_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let bin = env!("CARGO_BIN_EXE_creb-rs");
    let under_limits = |concurrency: &str| {
        // Nothing listens on port 9: past the limits, the run ends as unusable (exit 2).
        let script = format!(
            "ulimit -Sn 256 && ulimit -Hn 1024 && exec {bin} push --registry http://127.0.0.1:9 \
             --repo limits/app --layers 1 --layer-size 1KiB --concurrency {concurrency} \
             --output-dir {}",
            out.display()
        );
        let r = Command::new("sh").args(["-c", &script]).output().unwrap();
        (
            r.status.code(),
            String::from_utf8_lossy(&r.stderr).into_owned(),
        )
    };
    let (code, stderr) = under_limits("500");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("raised the open-file limit from 256 to 1024 for --concurrency 500"),
        "{stderr}"
    );
    assert!(stderr.contains("not usable"), "{stderr}");
    let _ = std::fs::remove_dir_all(&out);
    let (code, stderr) = under_limits("2000");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("needs about 2064 open files") && stderr.contains("at most 1024"),
        "{stderr}"
    );
    assert!(!out.exists(), "refused before anything was written");
}

/// `--max-run-time` holds at the stages after first contact too: while a large trace's
/// content is hashed before a run, and during a prewarm; each ends within seconds of it,
/// with a result that says where it stopped.
#[test]
fn max_run_time_ends_the_preparation_and_the_prewarm_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("big.json");
    let t = trace.to_str().unwrap();
    let synth = run_bin(
        &["trace", "synth", "--requests", "20k", "-o", t, "--quiet"],
        None,
        &[],
    );
    assert_eq!(synth.code, 0, "{}", synth.stderr);
    let server = registry(good_manifest, good_blob);
    let real = Registry::start();
    let stages: [(&str, Vec<&str>); 2] = [
        ("hashing", vec!["--registry", &server.url, "--phase", "run"]),
        (
            "prewarm",
            vec![
                "--registry",
                &real.url,
                "--size-scale",
                "0.01",
                "--prewarm-concurrency",
                "1",
            ],
        ),
    ];
    for (stage, flags) in stages {
        let out = dir.path().join(stage);
        let mut args = vec![
            "replay",
            t,
            "--max-run-time",
            "3s",
            "--grace",
            "1s",
            "--quiet",
        ];
        args.extend(flags);
        args.extend(["--output-dir", out.to_str().unwrap()]);
        let started = Instant::now();
        let r = run_bin(&args, None, &[]);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(12), "{stage}: took {took:?}");
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        let summary = summary_json(&out);
        assert_eq!(summary["interrupted"], false, "{stage}: {summary}");
        assert_eq!(
            summary["totals"]["requests"], 0,
            "{stage}: the run never started"
        );
        // Nothing failed while hashing; a prewarm upload the grace cut off is a failure.
        let allowed: &[i32] = if stage == "hashing" { &[0] } else { &[0, 1] };
        assert!(
            allowed.contains(&r.code),
            "{stage}: exit {}: {}",
            r.code,
            r.stderr
        );
        let limited = summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "max_run_time");
        assert!(limited, "{stage}: {summary}");
    }
}

/// A warm-up never hides what happened: a run whose every operation ended inside
/// `--warmup` says exactly that (exit 2) and counts them in summary.json's `warmup`; failures
/// inside a warm-up are counted there and fail the run as any failure does (exit 1).
#[test]
fn a_warmup_never_hides_what_happened() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let out = dir.path().join("all-warm");
    let r = run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--mode",
            "delay",
            "--speed",
            "200",
            "--limit-duration",
            "20s",
            "--warmup",
            "2s",
            "--no-digest-cache",
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("ended inside --warmup") && r.stderr.contains("shorter --warmup"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("sent no request"), "{}", r.stderr);
    let s = summary_json(&out);
    assert!(s["warmup"]["operations"].as_u64().unwrap() > 0, "{s}");
    // Failures inside the warm-up: counted, and the run fails for them.
    let out = dir.path().join("warm-failures");
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "nothing/here",
            "--images",
            "3",
            "--warmup",
            "30s",
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    let s = summary_json(&out);
    assert_eq!(r.code, 1, "{}\n{s}", r.stderr);
    assert_eq!(s["totals"]["errors"], 0, "{s}");
    assert!(s["warmup"]["errors"].as_u64().unwrap() >= 3, "{s}");
    assert!(
        s["warmup"]["errors_by_kind"]["http_404"].as_u64().unwrap() >= 3,
        "{s}"
    );
}

/// Caches speak: a default cache directory that cannot be used is one warning (the run
/// goes on without a cache); a `--digest-cache` inside a trace directory given as an
/// argument is refused before anything is sent (the next run of that directory would read
/// it as a trace).
#[test]
fn an_unusable_cache_says_so_and_a_cache_inside_a_trace_directory_is_refused() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/trace-small.json");
    let r = run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--mode",
            "stress",
            "--skip-invalid",
        ],
        None,
        &[("CREB_CACHE_DIR", blocker.to_str().unwrap())],
    );
    assert_ne!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr
            .matches("the digest cache directory cannot be used")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    std::fs::copy(trace, traces.join("day-1.json")).unwrap();
    let cache = traces.join("digests.cache");
    let r = run_bin(
        &[
            "replay",
            traces.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--digest-cache",
            cache.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("inside the trace directory"),
        "{}",
        r.stderr
    );
    assert!(!cache.exists());
}

/// The small traps: --speed in stress mode is said to do nothing; a sample of a trace whose
/// records are all invalid is an error that writes nothing; `--output-dir X --baseline X`
/// is refused before the run would replace its own baseline.
#[test]
fn the_small_traps_are_said_not_sprung() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let r = run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--speed",
            "4",
            "--limit-requests",
            "20",
            "--no-digest-cache",
        ],
        None,
        &[],
    );
    assert!(
        r.stderr.contains("--speed 4 has no effect in stress mode"),
        "{}",
        r.stderr
    );
    let broken = dir.path().join("broken.json");
    std::fs::write(
        &broken,
        br#"[{"http.request.method": "FETCH", "http.request.uri": "v2/a/b/blobs/x", "host": "h", "http.response.status": 200, "timestamp": "2017-06-20T10:00:00.000Z", "id": "1", "http.request.remoteaddr": "c", "http.request.duration": 0.1, "http.response.written": 1}]"#,
    )
    .unwrap();
    let out = dir.path().join("sampled.json");
    let r = run_bin(
        &[
            "trace",
            "sample",
            broken.to_str().unwrap(),
            "--method",
            "first-n",
            "--requests",
            "5",
            "--out",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is invalid"), "{}", r.stderr);
    assert!(!out.exists());
    let base = dir.path().join("base");
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "x/y",
            "--output-dir",
            base.to_str().unwrap(),
            "--baseline",
            base.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is the --baseline"), "{}", r.stderr);
}
