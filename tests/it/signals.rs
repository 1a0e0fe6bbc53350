//! Ctrl-C and SIGTERM against the real binary: the first signal stops scheduling, lets
//! in-flight requests finish, writes a valid summary marked interrupted, with every record
//! accounted for; a second signal exits at once.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{summary_json, Registry};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;

/// A trace whose delay-mode schedule lasts about 20 s.
fn long_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("trace.json");
    let (records, _) = generate(&SynthOptions {
        sessions: 100,
        mean_gap_ms: 200.0,
        ..SynthOptions::default()
    });
    write_file(&path, &records).unwrap();
    path
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn start(
    trace: &std::path::Path,
    registry: &Registry,
    out: &std::path::Path,
) -> std::process::Child {
    crate::common::spawn_bin(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--quiet",
        "--output-dir",
        out.to_str().unwrap(),
    ])
}

/// Waits until the run phase has started (the prewarm summary is written first).
fn wait_for_run(out: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("prewarm/summary.json").exists() {
        assert!(Instant::now() < deadline, "prewarm did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
}

fn reconciled(s: &serde_json::Value) -> bool {
    let t = &s["trace"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(n).sum();
    n(&t["records"]) == n(&t["replayed"]) + n(&t["folded"]) + skipped
}

#[test]
fn first_ctrl_c_writes_a_valid_interrupted_result() {
    let dir = tempfile::tempdir().unwrap();
    let trace = long_trace(dir.path());
    let registry = Registry::start();
    let out = dir.path().join("out");
    let child = start(&trace, &registry, &out);
    wait_for_run(&out);
    let sent = Instant::now();
    signal(child.id(), "INT");
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "stopped within the grace period"
    );
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true);
    assert!(reconciled(&s), "{}", s["trace"]);
    assert!(s["trace"]["skipped"]["interrupted"].as_u64().unwrap() > 0);
    assert!(s["trace"]["replayed"].as_u64().unwrap() > 0);
    assert!(s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["kind"] == "interrupted"));
}

#[test]
fn sigterm_exits_143_and_a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let trace = long_trace(dir.path());
    let registry = Registry::start();
    let out = dir.path().join("term");
    let child = start(&trace, &registry, &out);
    wait_for_run(&out);
    signal(child.id(), "TERM");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(143));
    assert_eq!(summary_json(&out)["interrupted"], true);

    let out = dir.path().join("twice");
    let child = start(&trace, &registry, &out);
    wait_for_run(&out);
    signal(child.id(), "INT");
    signal(child.id(), "INT");
    let sent = Instant::now();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    assert!(sent.elapsed() < Duration::from_secs(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("again"));
}

/// A stall of the whole process while stress mode's event loops carry the run shows in
/// `checks.canary_wake_ms` as the loops saw it: once they start they watch their own turns,
/// and the runtime's canary only what they hand it (here nothing: every operation is a
/// manifest GET). Stopped for 400 ms (SIGSTOP, SIGCONT) inside a 3 s run, a loop's turn
/// came that late.
#[test]
fn a_stall_while_the_event_loops_carry_the_run_shows_in_the_canary() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("manifests.json");
    // Far more GETs than the run has time for: it ends at --max-run-time, the stall inside.
    crate::route::write_manifest_trace(&trace, 4, 10_000);
    let args = [
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--quiet",
    ];
    let (child, out) = crate::route::spawn_prewarmed_stress(&args, dir.path(), "4", "3s");
    std::thread::sleep(Duration::from_millis(1200));
    signal(child.id(), "STOP");
    std::thread::sleep(Duration::from_millis(400));
    signal(child.id(), "CONT");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(matches!(output.status.code(), Some(0 | 1)), "{stderr}");
    let s = summary_json(&out);
    let checks = &s["checks"];
    assert!(
        checks["event_loops"]["loops"].as_u64() >= Some(1),
        "{checks}"
    );
    let late = checks["canary_wake_ms"]["max"].as_f64().unwrap_or(0.0);
    assert!(late >= 350.0, "{checks}");
}

/// `strace`, which injects the kernel's errors into the binary's system calls (no registry,
/// signal or limit makes `epoll_wait` fail): scripts/setup installs it.
fn strace() -> &'static str {
    let found = Command::new("strace").arg("-V").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "strace not found: scripts/setup installs it"
    );
    "strace"
}

/// A stress-mode event loop whose `epoll_wait` fails mid-run (the kernel's `EBADF`, injected
/// by strace into the 500th wait of each thread: only the loop's thread waits that often)
/// stops the run as a stop would, and loses nothing: exit 2, the result written and marked
/// interrupted with `event_loop_failed` and an `interrupted` warning that claims no signal,
/// the GETs in flight on the loop counted cancelled, the rest of the plan interrupted, and
/// every record read accounted for.
#[test]
fn an_event_loop_whose_wait_fails_stops_the_run_and_loses_no_record() {
    let strace = strace();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("manifests.json");
    crate::route::write_manifest_trace(&trace, 4, 5_000);
    let base = [
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--quiet",
    ];
    crate::route::prewarm(&base, dir.path());
    let out = dir.path().join("run");
    let log = dir.path().join("strace.txt");
    let run = ["--phase", "run", "--mode", "stress", "--concurrency", "8"];
    let output = Command::new(strace)
        .args(["-f", "--seccomp-bpf", "-o"])
        .arg(&log)
        .args(["-e", "trace=epoll_wait,epoll_pwait"])
        .args(["-e", "inject=epoll_wait,epoll_pwait:error=EBADF:when=500"])
        .arg(env!("CARGO_BIN_EXE_creb-rs"))
        .args(base)
        .args(run)
        .args(["--max-run-time", "60s", "--output-dir"])
        .arg(&out)
        .env_remove("CREB_REGISTRY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let injected = std::fs::read_to_string(&log).unwrap();
    assert!(injected.contains("(INJECTED)"), "{stderr}");
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true, "{s}");
    let warnings = s["warnings"].as_array().unwrap();
    let said = |kind: &str| {
        let w = warnings.iter().find(|w| w["kind"] == kind);
        w.map(|w| w["message"].as_str().unwrap().to_owned())
    };
    let failed = said("event_loop_failed").expect("an event_loop_failed warning");
    assert!(failed.contains("Bad file descriptor"), "{failed}");
    let interrupted = said("interrupted").expect("an interrupted warning");
    assert!(!interrupted.contains("signal"), "{interrupted}");
    assert!(s["checks"]["event_loops"]["manifest_gets"].as_u64() >= Some(100));
    let totals = &s["totals"];
    assert!(totals["ok"].as_u64() >= Some(100), "{totals}");
    let errors = s["errors"].as_object().unwrap();
    assert!(errors.keys().all(|k| k == "cancelled"), "{errors:?}");
    assert!(
        s["trace"]["skipped"]["interrupted"].as_u64() > Some(100),
        "{s}"
    );
    assert!(reconciled(&s), "{}", s["trace"]);
    assert!(s["duration_s"].as_f64() < Some(30.0), "{s}");
}
