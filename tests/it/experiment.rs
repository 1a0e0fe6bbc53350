//! `creb-rs run EXPERIMENT.toml` end to end against real registries: two registries (one
//! plain, one with htpasswd auth and the password in an environment variable) × two
//! experiments give four result directories and a comparison; a dead registry is reported
//! and the run goes on; unknown keys fail with their line; `--resume` after Ctrl-C redoes
//! only the unfinished cell; `--repeat 2` makes two rounds; `--cleanup` deletes what was
//! pushed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{creb, free_port, run_bin, summary_json, Registry};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;
use creb::ExitStatus;

const USER: &str = "bench";
const PASS: &str = "s3cret-experiment-pw";

fn small_trace(dir: &Path, sessions: u32, gap_ms: f64) -> PathBuf {
    let path = dir.join("trace.json");
    let (records, _) = generate(&SynthOptions {
        seed: 5,
        sessions,
        mean_gap_ms: gap_ms,
        clients: 6,
        repos: 3,
        layer_size: (256, 32 * 1024),
        chunk: 16 * 1024,
        ..SynthOptions::default()
    });
    write_file(&path, &records).unwrap();
    path
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn checkpoint(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join(".creb-run.json")).expect("checkpoint");
    serde_json::from_str(&text).expect("checkpoint is JSON")
}

fn cell<'a>(cp: &'a serde_json::Value, experiment: &str, registry: &str) -> &'a serde_json::Value {
    cp["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["experiment"] == experiment && c["registry"] == registry)
        .unwrap_or_else(|| panic!("no cell {experiment}/{registry} in {cp}"))
}

fn comparison_rows(out: &Path) -> Vec<csv::StringRecord> {
    let mut reader = csv::Reader::from_path(out.join("comparison.csv")).expect("comparison.csv");
    let header = reader.headers().unwrap().clone();
    assert_eq!(&header[0], "experiment");
    assert!(header.iter().any(|h| h == "blob_get_p99_ms"));
    reader.records().map(|r| r.unwrap()).collect()
}

/// Every file below `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `GET path` on a plain-HTTP registry: (status, body).
fn http_get(url: &str, path: &str) -> (u16, String) {
    let host = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn two_registries_and_two_experiments_give_four_results_and_a_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path(), 30, 50.0);
    let plain = Registry::start();
    let auth = Registry::with_basic_auth(dir.path(), USER, PASS);
    let file = write(
        dir.path(),
        "bench.toml",
        &format!(
            r#"
[[registry]]
name = "plain"
url = "{plain}"

[[registry]]
name = "auth"
url = "{auth}"
username = "{USER}"
password_env = "CREB_TEST_EXPERIMENT_PW"
repo_prefix = "creb"

[[experiment]]
name = "replay-small"
kind = "replay"
traces = ["{trace}"]
mode = "stress"
concurrency = 4

[[experiment]]
name = "push-small"
kind = "push"
images = 2
layers = 2
layer_size = "32KiB"
concurrency = 2
"#,
            plain = plain.url,
            auth = auth.url,
            trace = trace.file_name().unwrap().to_str().unwrap(),
        ),
    );
    let started = Instant::now();
    let out = run_bin(
        &["run", file.to_str().unwrap()],
        None,
        &[("CREB_TEST_EXPERIMENT_PW", PASS)],
    );
    // 1 only when a cell's operations failed, which must be docker-registry's tag race.
    assert!(matches!(out.code, 0 | 1), "{}\n{}", out.stdout, out.stderr);
    eprintln!("four cells in {:.1}s", started.elapsed().as_secs_f64());
    let mut failed_cells = 0;
    let mut raced: Vec<String> = Vec::new();
    // The default output directory: results/<stem> next to the file.
    let results = dir.path().join("results/bench");
    for exp in ["replay-small", "push-small"] {
        for reg in ["plain", "auth"] {
            let s = summary_json(&results.join(exp).join(reg));
            assert_eq!(s["interrupted"], false);
            assert!(s["totals"]["requests"].as_u64().unwrap() > 0, "{exp}/{reg}");
            let registry = if reg == "plain" { &plain } else { &auth };
            registry.assert_no_errors_but_tag_races(&s, &format!("{exp}/{reg}"));
            if s["totals"]["errors"].as_u64() > Some(0) {
                failed_cells += 1;
                raced.push(format!("{exp}/{reg}"));
            }
        }
    }
    assert_eq!(out.code == 1, failed_cells > 0, "{}", out.stderr);
    // The auth registry's credentials came from the command built for password_env.
    let s = summary_json(&results.join("push-small/auth"));
    assert_eq!(s["config"]["credentials"]["source"], "password-cmd");
    assert_eq!(s["config"]["repo"], "creb/push-small");
    let rows = comparison_rows(&results);
    assert_eq!(rows.len(), 4);
    // Every cell ok, but one whose only errors were docker-registry's tag race (checked
    // above against its log): that one failed, as its exit status says.
    for r in &rows {
        let cell = format!("{}/{}", &r[0], &r[2]);
        assert!(
            &r[6] == "ok" || (&r[6] == "failed" && raced.contains(&cell)),
            "{rows:?}"
        );
    }
    let html = std::fs::read_to_string(results.join("comparison.html")).unwrap();
    assert!(html.contains("data-chart=\"compare-replay-small\""));
    assert!(html.contains(">auth<") && html.contains(">plain<"));
    assert!(out.stdout.contains("comparison.csv"));
    // The password appears nowhere: not in results, checkpoint, comparison or output.
    for f in files(&results) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(PASS),
            "{} holds the password",
            f.display()
        );
    }
    assert!(!out.stdout.contains(PASS) && !out.stderr.contains(PASS));

    // A second run into the same directory refuses to overwrite; --resume has nothing to do.
    let again = run_bin(&["run", file.to_str().unwrap()], None, &[]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("--resume"), "{}", again.stderr);
    let resumed = run_bin(&["run", file.to_str().unwrap(), "--resume"], None, &[]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("nothing left to run"),
        "{}",
        resumed.stdout
    );
}

#[test]
fn unknown_keys_and_bad_values_fail_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[[registry]]\nname = \"r\"\nurl = \"http://127.0.0.1:1\"\n\n[[experiment]]\nname = \"p\"\nkind = \"push\"\nlayers = 1\nlayer_size = \"1KiB\"\n";
    let file = write(dir.path(), "typo.toml", &format!("{base}layer_count = 3\n"));
    let out = run_bin(&["run", file.to_str().unwrap()], None, &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("typo.toml:10:1: unknown field `layer_count`"),
        "{}",
        out.stderr
    );
    // A value only the command's own flag parser can judge, named with its flag.
    let file = write(
        dir.path(),
        "value.toml",
        &base.replace("\"1KiB\"", "\"1XB\""),
    );
    let out = run_bin(&["run", file.to_str().unwrap()], None, &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("value.toml:5:"), "{}", out.stderr);
    assert!(out.stderr.contains("--layer-size"), "{}", out.stderr);
    // --dry-run prints the cells' command lines and sends nothing.
    let file = write(dir.path(), "ok.toml", base);
    let out = run_bin(&["run", file.to_str().unwrap(), "--dry-run"], None, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("creb-rs push --registry http://127.0.0.1:1 --output-dir"),
        "{}",
        out.stdout
    );
    assert!(!dir.path().join("results").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_registry_is_reported_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let live = Registry::start();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let file = write(
        dir.path(),
        "dead.toml",
        &format!(
            "[[registry]]\nname = \"dead\"\nurl = \"{dead}\"\nconnect_timeout = \"2s\"\n\n[[registry]]\nname = \"live\"\nurl = \"{}\"\n\n[[experiment]]\nname = \"push\"\nkind = \"push\"\nlayers = 1\nlayer_size = \"4KiB\"\n",
            live.url
        ),
    );
    let out = dir.path().join("out");
    let status = creb(&[
        "run",
        file.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
    ])
    .await;
    assert_eq!(status, ExitStatus::Failed);
    let cp = checkpoint(&out);
    let d = cell(&cp, "push", "dead");
    assert_eq!(d["status"], "error");
    assert!(
        d["message"].as_str().unwrap().contains("registry 'dead'"),
        "{d}"
    );
    assert_eq!(cell(&cp, "push", "live")["status"], "ok");
    assert_eq!(summary_json(&out.join("push/live"))["totals"]["errors"], 0);
    let rows = comparison_rows(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[0][6], "error");
    assert!(rows[0][rows[0].len() - 1].contains("dead"));
    let html = std::fs::read_to_string(out.join("comparison.html")).unwrap();
    assert!(html.contains("Cells without a complete result"));
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn resume_after_ctrl_c_redoes_only_the_unfinished_cell() {
    let dir = tempfile::tempdir().unwrap();
    // A delay-mode replay of about 8 s: long enough to interrupt midway.
    let trace = small_trace(dir.path(), 40, 200.0);
    let registry = Registry::start();
    let file = write(
        dir.path(),
        "resume.toml",
        &format!(
            r#"
[[registry]]
name = "local"
url = "{}"

[[experiment]]
name = "push"
kind = "push"
layers = 2
layer_size = "16KiB"

[[experiment]]
name = "replay"
kind = "replay"
traces = "{}"
mode = "delay"
"#,
            registry.url,
            trace.display()
        ),
    );
    let out = dir.path().join("out");
    let args = [
        "run",
        file.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args(args)
        .env_remove("DOCKER_CONFIG")
        .env_remove("CREB_USERNAME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the replay's run phase is under way (its prewarm result is written first).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("replay/local/prewarm/summary.json").exists() {
        assert!(Instant::now() < deadline, "the replay cell did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        cell(&checkpoint(&out), "replay", "local")["status"],
        "running"
    );
    signal(child.id(), "INT");
    let first = child.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let cp = checkpoint(&out);
    assert_eq!(cell(&cp, "push", "local")["status"], "ok");
    assert_eq!(cell(&cp, "replay", "local")["status"], "interrupted");
    assert_eq!(summary_json(&out.join("replay/local"))["interrupted"], true);
    assert!(String::from_utf8_lossy(&first.stderr).contains("--resume"));
    let push_summary = out.join("push/local/summary.json");
    let push_written = mtime(&push_summary);

    let second = run_bin(&[args.as_slice(), &["--resume"]].concat(), None, &[]);
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    let cp = checkpoint(&out);
    let push = cell(&cp, "push", "local");
    let replay = cell(&cp, "replay", "local");
    assert_eq!(push["attempts"], 1, "the complete cell was not run again");
    assert_eq!(mtime(&push_summary), push_written);
    assert_eq!(replay["attempts"], 2);
    assert_eq!(replay["status"], "ok");
    let s = summary_json(&out.join("replay/local"));
    assert_eq!(s["interrupted"], false);
    assert_eq!(
        s["trace"]["skipped"].get("interrupted"),
        None,
        "{}",
        s["trace"]
    );
    // Only the redone cell is in this invocation's table.
    assert!(second.stdout.contains("replay"), "{}", second.stdout);
    assert!(!second.stdout.contains("\npush "), "{}", second.stdout);
    let rows = comparison_rows(&out);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| &r[6] == "ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_two_runs_two_rounds_with_fresh_content() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let file = write(
        dir.path(),
        "rounds.toml",
        &format!(
            "[[registry]]\nname = \"local\"\nurl = \"{}\"\n\n[[experiment]]\nname = \"push\"\nkind = \"push\"\nlayers = 2\nlayer_size = \"8KiB\"\n",
            registry.url
        ),
    );
    let out = dir.path().join("out");
    let status = creb(&[
        "run",
        file.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
        "--repeat",
        "2",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let first = summary_json(&out.join("push/local/round-0001"));
    let second = summary_json(&out.join("push/local/round-0002"));
    assert_ne!(
        first["seed"], second["seed"],
        "each round pushes new content"
    );
    assert!(
        second["warnings"].as_array().unwrap().is_empty(),
        "{}",
        second["warnings"]
    );
    let rows = comparison_rows(&out);
    assert_eq!(rows.len(), 2);
    assert_eq!((&rows[0][3], &rows[1][3]), ("1", "2"));
    let cp = checkpoint(&out);
    assert_eq!(cp["rounds"].as_array().unwrap().len(), 2);
    let html = std::fs::read_to_string(out.join("comparison.html")).unwrap();
    assert!(
        html.contains("data-chart=\"over-time-push\""),
        "latency over time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_deletes_what_the_run_pushed() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path(), 20, 50.0);
    let registry = Registry::start();
    let file = write(
        dir.path(),
        "clean.toml",
        &format!(
            r#"
[[registry]]
name = "local"
url = "{}"
repo_prefix = "bench"

[[experiment]]
name = "push"
kind = "push"
images = 3
layers = 2
layer_size = "8KiB"

[[experiment]]
name = "replay"
kind = "replay"
traces = "{}"
"#,
            registry.url,
            trace.display()
        ),
    );
    let out = dir.path().join("out");
    let status = creb(&[
        "run",
        file.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
        "--cleanup",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let cp = checkpoint(&out);
    let cleanup = &cp["rounds"][0]["cleanup"][0];
    assert_eq!(cleanup["registry"], "local");
    assert!(
        cleanup["manifests_deleted"].as_u64().unwrap() > 3,
        "push images and replayed manifests: {cleanup}"
    );
    assert!(cleanup["blobs_deleted"].as_u64().unwrap() >= 6, "{cleanup}");
    assert_eq!(cleanup["refused"], 0, "{cleanup}");
    assert_eq!(cleanup["errors"], 0, "{cleanup}");
    for i in 0..3 {
        let (code, _) = http_get(
            &registry.url,
            &format!("/v2/bench/push/manifests/latest-{i}"),
        );
        assert_eq!(code, 404, "tag latest-{i} is gone");
    }
    let (code, body) = http_get(&registry.url, "/v2/bench/push/tags/list");
    assert!(
        code == 404 || !body.contains("latest"),
        "tags left: {code} {body}"
    );
    let html = std::fs::read_to_string(out.join("comparison.html")).unwrap();
    assert!(html.contains("<h2>Cleanup</h2>"));
}

/// Repetitions of a cell are one bar per registry at their median, with a whisker from the
/// lowest to the highest: the noise a difference between registries must clear.
#[test]
fn repetitions_are_drawn_as_a_median_with_its_spread() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let file = write(
        dir.path(),
        "reps.toml",
        &format!(
            "[[registry]]\nname = \"local\"\nurl = \"{}\"\n\n[[experiment]]\nname = \"push\"\n\
             kind = \"push\"\nlayers = 1\nlayer_size = \"8KiB\"\nrepeat = 3\n",
            registry.url
        ),
    );
    let out = run_bin(&["run", file.to_str().unwrap()], None, &[]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let results = dir.path().join("results/reps");
    assert_eq!(comparison_rows(&results).len(), 3);
    let html = std::fs::read_to_string(results.join("comparison.html")).unwrap();
    assert!(
        html.contains(">local (median of 3)<"),
        "one bar for the registry"
    );
    assert!(!html.contains(">local #1<"), "not a bar per repetition");
    assert!(html.contains("class=\"whisker\""), "the spread is drawn");
    assert!(html.contains("whiskers: lowest to highest repetition"));
}

/// A `capacity` experiment compares registries by the load they sustain: a fixed ladder
/// against docker-registry and against the same registry behind a proxy that holds every
/// blob GET 20 ms; each cell writes its capacity.json, comparison.csv carries the answers
/// and comparison.html draws them; `--resume` finds both cells complete.
#[test]
fn a_capacity_experiment_compares_registries_by_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path(), 30, 50.0);
    let plain = Registry::start();
    let slow = crate::common::faults::FaultProxy::start(
        plain.port,
        crate::common::faults::Fault::Delay(Duration::from_millis(20)),
    );
    let file = write(
        dir.path(),
        "capacity.toml",
        &format!(
            r#"
[[registry]]
name = "plain"
url = "{plain}"

[[registry]]
name = "slow"
url = "{slow}"

[[experiment]]
name = "cap"
kind = "capacity"
traces = ["{trace}"]
slo = ["error_rate < 50%"]
ladder = "1,2"
step = "500ms"
step_warmup = "100ms"
concurrency = 16
"#,
            plain = plain.url,
            slow = slow.url,
            trace = trace.file_name().unwrap().to_str().unwrap(),
        ),
    );
    let out = run_bin(&["run", file.to_str().unwrap()], None, &[]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let results = dir.path().join("results/capacity");
    let mut reader = csv::Reader::from_path(results.join("comparison.csv")).unwrap();
    let header = reader.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(&r[column("kind")], "capacity", "{r:?}");
        assert_eq!(&r[column("status")], "ok", "{r:?}");
        assert_eq!(&r[column("capacity_speed")], "2", "{r:?}");
        assert_eq!(&r[column("capacity_limited_by")], "ceiling", "{r:?}");
        assert!(
            r[column("capacity_requests_per_s")].parse::<f64>().unwrap() > 0.0,
            "{r:?}"
        );
        let c: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(results.join("cap").join(&r[2]).join("capacity.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(c["kind"], "ladder");
    }
    let html = std::fs::read_to_string(results.join("comparison.html")).unwrap();
    assert!(
        html.contains("data-chart=\"compare-cap\""),
        "no capacity chart"
    );
    assert!(html.contains("registries compared by capacity"));
    assert!(out.stdout.contains("capacity"), "{}", out.stdout);
    let resumed = run_bin(&["run", file.to_str().unwrap(), "--resume"], None, &[]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert!(
        resumed.stdout.contains("nothing left to run"),
        "{}",
        resumed.stdout
    );
}
