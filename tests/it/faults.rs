//! Reliability under faults, against real processes: a fault-injecting proxy in front of a
//! real docker-registry (late answers, bodies that stall, connections reset, bodies cut
//! short, flipped bytes), a registry SIGKILLed and restarted in the middle of a delay-mode
//! replay, and a real rate limiter (nginx `limit_req`) answering 429 with `Retry-After`.
//! Each failure is classified by kind, none counts as a success, and runs end promptly with
//! a valid summary.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::faults::{Fault, FaultProxy};
use crate::common::nginx::{Nginx, NginxOptions};
use crate::common::{creb, summary_json, Registry};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;
use creb::ExitStatus;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/summary.schema.json"
    ))
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn assert_valid(summary: &serde_json::Value) {
    let errors: Vec<String> = schema()
        .iter_errors(summary)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "invalid summary:\n{}", errors.join("\n"));
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Pushes a 3-layer image straight to the registry (no proxy).
async fn push_image(registry: &Registry, repo: &str, out: &Path) {
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        repo,
        "--layers",
        "3",
        "--layer-size",
        "64KiB",
        "--output-dir",
        out.join("push").to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
}

/// Pulls `repo` through `url` with 1 s timeouts; returns the exit status, the summary and
/// how long the run took.
async fn pull_through(url: &str, repo: &str, out: &Path) -> (ExitStatus, serde_json::Value, f64) {
    let started = Instant::now();
    let status = creb(&[
        "pull",
        "--registry",
        url,
        "--repo",
        repo,
        "--concurrency",
        "4",
        "--connect-timeout",
        "1s",
        "--request-timeout",
        "1s",
        "--body-idle-timeout",
        "1s",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    let took = started.elapsed().as_secs_f64();
    (status, summary_json(out), took)
}

/// Every blob GET through the proxy suffers `fault`: each is an error of `kind`, none is a
/// success, the run exits 1 within a few timeouts and its summary is valid.
async fn blob_gets_fail_as(fault: Fault, kind: &str) {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    push_image(&registry, "faults/app", dir.path()).await;
    let proxy = FaultProxy::start(registry.port, fault);
    let out = dir.path().join("pull");
    let (status, s, took) = pull_through(&proxy.url, "faults/app", &out).await;
    assert_eq!(status, ExitStatus::Failed, "{kind}: {}", s["errors"]);
    assert!(took < 8.0, "{kind}: the pull took {took:.1}s");
    assert!(proxy.faulted() >= 1, "{kind}: the fault was applied");
    let gets = &s["operations"]["blob_get"];
    assert_eq!(u(&gets["ok"]), 0, "{kind}: a broken blob GET counted as ok");
    assert!(u(&gets["errors"]) >= 1);
    let by_kind = gets["errors_by_kind"].as_object().unwrap();
    assert_eq!(
        by_kind.keys().collect::<Vec<_>>(),
        vec![kind],
        "{kind}: classified as {by_kind:?}"
    );
    assert_eq!(u(&by_kind[kind]), u(&gets["errors"]));
    assert!(u(&s["errors"][kind]) >= 1, "{}", s["errors"]);
    assert_eq!(u(&s["operations"]["image_pull"]["ok"]), 0);
    assert_valid(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_later_than_the_request_timeout_is_a_timeout() {
    blob_gets_fail_as(Fault::Delay(Duration::from_secs(3)), "timeout").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_midway_is_a_timeout() {
    blob_gets_fail_as(Fault::StallMidBody, "timeout").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_is_a_reset() {
    blob_gets_fail_as(Fault::Reset, "reset").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_shorter_than_its_content_length_is_a_short_body() {
    blob_gets_fail_as(Fault::Truncate, "short_body").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_a_digest_mismatch() {
    blob_gets_fail_as(Fault::CorruptByte, "digest_mismatch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_within_the_timeouts_is_only_slower() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    push_image(&registry, "slow/app", dir.path()).await;
    let proxy = FaultProxy::start(registry.port, Fault::Delay(Duration::from_millis(300)));
    let out = dir.path().join("pull");
    let (status, s, _) = pull_through(&proxy.url, "slow/app", &out).await;
    assert_eq!(status, ExitStatus::Success, "{}", s["errors"]);
    let gets = &s["operations"]["blob_get"];
    assert_eq!(u(&gets["errors"]), 0);
    assert!(
        gets["latency_ms"]["p50"].as_f64().unwrap() >= 300.0,
        "{}",
        gets["latency_ms"]
    );
    // The timeouts the run used are recorded with its configuration, in summary and meta.
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    for config in [&s["config"], &meta["config"]] {
        let transport = &config["registry"]["transport"];
        for timeout in ["connect_timeout", "request_timeout", "body_idle_timeout"] {
            assert_eq!(transport[timeout]["secs"], 1, "{timeout}: {transport}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// A registry killed and restarted in the middle of a delay-mode replay.

#[test]
fn a_registry_killed_and_restarted_mid_replay_costs_only_the_requests_of_the_outage() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let (records, _) = generate(&SynthOptions {
        seed: 5,
        sessions: 70,
        mean_gap_ms: 150.0,
        clients: 8,
        repos: 4,
        layer_size: (256, 32 * 1024),
        ..SynthOptions::default()
    });
    let span_s = (records.last().unwrap().time_ms - records[0].time_ms) as f64 / 1000.0;
    write_file(&trace, &records).unwrap();
    let mut registry = Registry::start();
    let prewarm = crate::common::run_bin(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--phase",
            "prewarm",
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(prewarm.code, 0, "{}", prewarm.stderr);

    let out = dir.path().join("run");
    let child = crate::common::spawn_bin(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--phase",
        "run",
        "--connect-timeout",
        "1s",
        "--request-timeout",
        "2s",
        "--body-idle-timeout",
        "2s",
        "--interval",
        "500ms",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    std::thread::sleep(Duration::from_millis(2500));
    registry.kill();
    std::thread::sleep(Duration::from_secs(2));
    registry.restart();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code();
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}: {stderr}");

    let s = summary_json(&out);
    assert_valid(&s);
    assert_eq!(s["interrupted"], false);
    let took = s["duration_s"].as_f64().unwrap();
    assert!(
        (took - span_s).abs() <= span_s * 0.1 + 2.5,
        "the run took {took:.1}s, the schedule {span_s:.1}s"
    );
    let errors = s["errors"].as_object().unwrap();
    eprintln!(
        "outage: took {took:.2}s for a {span_s:.2}s schedule; {} ok, errors {errors:?}",
        u(&s["totals"]["ok"])
    );
    assert!(u(&errors["connect"]) > 0, "refused connections: {errors:?}");
    for kind in errors.keys() {
        assert!(
            [
                "connect",
                "reset",
                "connection_closed",
                "short_body",
                "body",
                "timeout",
            ]
            .contains(&kind.as_str())
                || kind.starts_with("http_"),
            "unexpected error kind {kind}: {errors:?}"
        );
    }
    // Accounting holds: every record is replayed, folded or skipped.
    let t = &s["trace"];
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(u).sum();
    assert_eq!(
        u(&t["records"]),
        u(&t["replayed"]) + u(&t["folded"]) + skipped
    );

    // The timeline: successes, then an interval of errors, then successes again.
    let mut reader = csv::Reader::from_path(out.join("timeline.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (ok_col, err_col) = (col("ok"), col("errors"));
    let rows: Vec<(u64, u64)> = reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (r[ok_col].parse().unwrap(), r[err_col].parse().unwrap())
        })
        .collect();
    let first_error = rows
        .iter()
        .position(|r| r.1 > 0)
        .expect("errors in the timeline");
    let last_error = rows.iter().rposition(|r| r.1 > 0).unwrap();
    assert!(
        rows[..first_error].iter().any(|r| r.0 > 0),
        "successes before the kill: {rows:?}"
    );
    assert!(
        rows[last_error + 1..].iter().map(|r| r.0).sum::<u64>() > 0,
        "successes after the restart: {rows:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Throttling by a real rate limiter: nginx `limit_req` answering 429 with `Retry-After`.

/// nginx in front of the registry answering 429 past `rate` (with a `burst`).
fn start_limiter(upstream_port: u16, rate: &str, burst: u32) -> Nginx {
    Nginx::start(NginxOptions {
        upstream_port: Some(upstream_port),
        http_extra: format!("limit_req_zone $server_port zone=registry:1m rate={rate};"),
        location_extra: format!(
            "limit_req zone=registry burst={burst} nodelay;\n\
             limit_req_status 429;\n\
             add_header Retry-After 1 always;"
        ),
        ..NginxOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_http_429_never_a_success_and_retry_429_rides_it_out() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "throttled/app",
        "--layers",
        "8",
        "--layer-size",
        "16KiB",
        "--output-dir",
        dir.path().join("push").to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let nginx = start_limiter(registry.port, "4r/s", 2);

    // Without --retry: throttled requests are failures of their own class.
    let out = dir.path().join("plain");
    let status = creb(&[
        "pull",
        "--registry",
        &nginx.url,
        "--repo",
        "throttled/app",
        "--concurrency",
        "8",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    let s = summary_json(&out);
    assert_eq!(status, ExitStatus::Failed, "{}", s["errors"]);
    let throttled = u(&s["errors"]["http_429"]);
    assert!(throttled > 0, "{}", s["errors"]);
    assert_eq!(
        u(&s["totals"]["errors"]),
        throttled,
        "only throttling failed: {}",
        s["errors"]
    );
    let gets = &s["operations"]["blob_get"];
    assert_eq!(
        u(&gets["ok"]) + u(&gets["errors_by_kind"]["http_429"]),
        u(&gets["count"]),
        "a 429 is never a success: {gets}"
    );
    assert_eq!(u(&s["events"]["retry"]), 0);
    assert_valid(&s);

    // Let the limiter's bucket drain, then pull again with --retry 429.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let out = dir.path().join("retry");
    let status = creb(&[
        "pull",
        "--registry",
        &nginx.url,
        "--repo",
        "throttled/app",
        "--concurrency",
        "8",
        "--retry",
        "429",
        "--max-retries",
        "5",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    let s = summary_json(&out);
    assert_eq!(status, ExitStatus::Success, "{}", s["errors"]);
    assert_eq!(u(&s["totals"]["errors"]), 0);
    assert!(u(&s["events"]["retry"]) > 0, "{}", s["events"]);
    assert_eq!(
        u(&s["operations"]["blob_get"]["ok"]),
        9,
        "8 layers + config"
    );
    assert_valid(&s);
}
