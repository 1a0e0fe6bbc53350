//! `push --replica` against three docker-registry instances: one the push goes to, one a
//! real sync job keeps (crane copies every tag over once per period, as a scheduled mirror
//! job does), one nobody copies to. The lag measured lies within the job's period and copy
//! time; the replica never written to gives `replication_timeout` and exit 1; a replica
//! whose manifests come back changed (a proxy flipping a byte: no real registry serves other
//! content under a digest on demand) gives `replica_mismatch`. `replay --replica` follows
//! every manifest PUT of its run phase, none of its prewarm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::faults::{Fault, FaultProxy};
use crate::common::{creb, summary_json, tool, Registry};
use creb::ExitStatus;

/// crane, or `None` (a skip) when it is missing outside CI.
fn crane() -> Option<PathBuf> {
    let found = tool("crane");
    if found.is_none() {
        assert!(
            std::env::var("CREB_REQUIRE_COMPAT").map_or(true, |v| v != "1"),
            "CREB_REQUIRE_COMPAT=1 but crane is missing; scripts/setup installs it"
        );
        eprintln!("skipped: crane is missing");
    }
    found
}

/// A sync job: every `period`, crane lists the primary's tags of `repo` (of every
/// repository with `*`) and copies each to the replica. Returns its stop flag and the longest pass it made.
fn sync_job(
    crane: PathBuf,
    from: u16,
    to: u16,
    repo: &'static str,
    period: Duration,
) -> (Arc<AtomicBool>, Arc<Mutex<Duration>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(Mutex::new(Duration::ZERO));
    let (stop2, longest2) = (Arc::clone(&stop), Arc::clone(&longest));
    std::thread::spawn(move || {
        let run = |args: &[&str]| {
            Command::new(&crane)
                .args(args)
                .arg("--insecure")
                .output()
                .expect("run crane")
        };
        let mut next = Instant::now();
        // Bounded: at most ten minutes of passes.
        for _ in 0..(600_000 / period.as_millis().max(1)) {
            if stop2.load(Ordering::Relaxed) {
                return;
            }
            let began = Instant::now();
            // One repository, or (`*`) every one the primary lists.
            let repos = if repo == "*" {
                let listed = run(&["catalog", &format!("127.0.0.1:{from}")]);
                String::from_utf8_lossy(&listed.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect()
            } else {
                vec![repo.to_owned()]
            };
            for repo in repos {
                let listed = run(&["ls", &format!("127.0.0.1:{from}/{repo}")]);
                for tag in String::from_utf8_lossy(&listed.stdout).split_whitespace() {
                    let out = run(&[
                        "copy",
                        &format!("127.0.0.1:{from}/{repo}:{tag}"),
                        &format!("127.0.0.1:{to}/{repo}:{tag}"),
                    ]);
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    // docker-registry writes a tag's link in place (the link race of
                    // `tag_race_500s`): listed while its link is written, a tag reads as
                    // unknown for a moment, and the next pass copies it.
                    assert!(
                        out.status.success() || stderr.contains("MANIFEST_UNKNOWN"),
                        "{stderr}"
                    );
                }
            }
            let took = began.elapsed();
            let mut l = longest2.lock().unwrap();
            *l = (*l).max(took);
            drop(l);
            next += period;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    (stop, longest)
}

async fn push(
    primary: &Registry,
    repo: &str,
    replicas: &[&str],
    extra: &[&str],
    out: &Path,
) -> ExitStatus {
    let mut args = vec![
        "push",
        "--registry",
        &primary.url,
        "--repo",
        repo,
        "--images",
        "4",
        "--layers",
        "2",
        "--layer-size",
        "128KiB",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    for r in replicas {
        args.extend(["--replica", r]);
    }
    args.extend(extra);
    creb(&args).await
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Each pushed image reaches the synced replica within the job's period and a pass's copy
/// time; the watch's requests are counted apart, never as the workload's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_kept_by_a_sync_job_serves_each_push_within_its_period() {
    let Some(crane) = crane() else { return };
    let primary = Registry::start();
    let replica = Registry::start();
    let period = Duration::from_millis(1500);
    let (stop, longest) = sync_job(crane, primary.port, replica.port, "repl/app", period);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A threshold on the lag is read (it does not hold: exit 0).
    let status = push(
        &primary,
        "repl/app",
        &[&replica.url],
        &[
            "--replica-timeout",
            "60s",
            "--fail-if",
            "p99(replication) > 1h",
        ],
        &out,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let s = summary_json(&out);
    assert_eq!(status, ExitStatus::Success, "{}", s["operations"]);
    let r = &s["operations"]["replication"];
    assert_eq!((n(&r["ok"]), n(&r["errors"])), (4, 0), "{r}");
    // Within a period (the push may land just after a pass began) and the copy time of a
    // pass, plus a poll and a margin for a loaded machine.
    let bound = period + *longest.lock().unwrap() + Duration::from_millis(100 + 1000);
    let max = r["latency_ms"]["max"].as_f64().unwrap();
    assert!(
        max > 0.0 && max <= bound.as_secs_f64() * 1000.0,
        "{max} ms vs {bound:?}"
    );
    // Counted for the replica's endpoint, not the workload's totals.
    let replica_name = replica.url.trim_end_matches('/');
    let e = &s["endpoints"][replica_name];
    assert_eq!(
        n(&e["operations"]["replication"]["ok"]),
        4,
        "{}",
        s["endpoints"]
    );
    assert_eq!(n(&e["totals"]["requests"]), 0, "{e}");
    assert!(
        n(&s["events"]["replica_request"]) >= 4 * 4,
        "{}",
        s["events"]
    );
    let requests: u64 = ["blob_head", "blob_upload", "manifest_put", "ping"]
        .iter()
        .map(|op| n(&s["operations"][op]["count"]))
        .sum();
    assert_eq!(n(&s["totals"]["requests"]), requests, "{}", s["totals"]);
    assert_eq!(s["config"]["replica"]["replicas"][0], replica_name);
}

/// A replica nobody copies to, and one that is down: `replication_timeout` for every
/// image, exit 1; a replica whose manifests come back changed: `replica_mismatch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_never_written_times_out_and_one_serving_other_content_mismatches() {
    let Some(crane) = crane() else { return };
    let primary = Registry::start();
    let empty = Registry::start();
    let copied = Registry::start();
    let (stop, _) = sync_job(
        crane,
        primary.port,
        copied.port,
        "repl/bad",
        Duration::from_millis(500),
    );
    let changed = FaultProxy::start(copied.port, Fault::CorruptByte);
    // A replica that is down: nothing listens there.
    let down = format!("http://127.0.0.1:{}", crate::common::free_port());
    changed.set_filter(|method, path| method == "GET" && path.contains("/manifests/"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let status = push(
        &primary,
        "repl/bad",
        &[&empty.url, &changed.url, &down],
        &["--replica-timeout", "3s", "--replica-poll", "50ms"],
        &out,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let s = summary_json(&out);
    assert_eq!(status, ExitStatus::Failed, "{}", s["operations"]);
    assert_eq!(n(&s["totals"]["errors"]), 0, "the push itself succeeded");
    let endpoints = &s["endpoints"];
    let of = |url: &str| endpoints[url.trim_end_matches('/')]["operations"]["replication"].clone();
    let timed_out = of(&empty.url);
    assert_eq!(
        n(&timed_out["errors_by_kind"]["replication_timeout"]),
        4,
        "{timed_out}"
    );
    let unreachable = of(&down);
    assert_eq!(
        n(&unreachable["errors_by_kind"]["replication_timeout"]),
        4,
        "{unreachable}"
    );
    // The down replica's failed requests are counted; the run went on.
    assert!(
        n(&s["events"]["replica_request_failed"]) >= 4,
        "{}",
        s["events"]
    );
    let mismatched = of(&changed.url);
    assert_eq!(
        n(&mismatched["errors_by_kind"]["replica_mismatch"]),
        4,
        "{mismatched}"
    );
}

/// A stop while images are watched (the replica never gets them, `--grace 0s`): exit 130,
/// a result marked interrupted, each unfinished watch counted as `cancelled`.
#[test]
fn a_stop_ends_the_watches_and_counts_them() {
    let Some(crane) = crane() else { return };
    let primary = Registry::start();
    let empty = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args([
            "push",
            "--registry",
            &primary.url,
            "--repo",
            "repl/stop",
            "--images",
            "2",
            "--layers",
            "1",
            "--layer-size",
            "64KiB",
            "--replica",
            &empty.url,
            "--grace",
            "0s",
            "--quiet",
            "--output-dir",
            out.to_str().unwrap(),
        ])
        .env_remove("DOCKER_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both images are in once the primary lists both tags; their watches then wait.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = Command::new(&crane)
            .args([
                "ls",
                "--insecure",
                &format!("127.0.0.1:{}/repl/stop", primary.port),
            ])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .count()
            == 2
        {
            break;
        }
        assert!(Instant::now() < deadline, "the push did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The manifest PUT is answered before the watch starts: give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    let code = crate::common::interrupt_and_wait(&mut child, "the watches");
    assert_eq!(code, Some(130));
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true);
    let r = &s["operations"]["replication"];
    assert_eq!(n(&r["errors_by_kind"]["cancelled"]), 2, "{r}");
}

/// A replay that pushes: every manifest PUT of its run is followed to the synced replica
/// (none of the prewarm's), counted for the replica's endpoint; the trace's accounting is
/// unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_follows_every_push_of_its_run_to_the_replica() {
    use creb::trace::synth::{generate, SynthOptions};
    let Some(crane) = crane() else { return };
    let primary = Registry::start();
    let replica = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let (records, _) = generate(&SynthOptions {
        seed: 3,
        sessions: 24,
        mean_gap_ms: 100.0,
        clients: 4,
        repos: 2,
        pull_share: 0.4,
        layer_size: (1024, 64 * 1024),
        duplicate_share: 0.0,
        failed_share: 0.0,
        ..SynthOptions::default()
    });
    let trace = dir.path().join("pushes.json");
    creb::trace::write::write_file(&trace, &records).unwrap();
    let (stop, _) = sync_job(
        crane,
        primary.port,
        replica.port,
        "*",
        Duration::from_millis(1000),
    );
    let out = dir.path().join("out");
    let args = [
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &primary.url,
        "--mode",
        "stress",
        "--concurrency",
        "4",
        "--replica",
        &replica.url,
        "--replica-timeout",
        "60s",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let status = creb(&args).await;
    stop.store(true, Ordering::Relaxed);
    let s = summary_json(&out);
    primary.assert_exit_but_tag_races(i32::from(status.code()), &s, "replay --replica");
    let puts = n(&s["operations"]["manifest_put"]["ok"]);
    assert!(puts > 0, "{}", s["operations"]);
    let r = &s["operations"]["replication"];
    assert_eq!((n(&r["ok"]), n(&r["errors"])), (puts, 0), "{r}");
    let replica_name = replica.url.trim_end_matches('/');
    let e = &s["endpoints"][replica_name]["operations"]["replication"];
    assert_eq!(n(&e["ok"]), puts, "{}", s["endpoints"]);
    crate::replay::assert_reconciled(&s);
    let prewarm = summary_json(&out.join("prewarm"));
    assert!(
        prewarm["operations"]["replication"].is_null(),
        "{}",
        prewarm["operations"]
    );
}

/// At most `--replica-max-watches` images are watched: the others are counted and warned
/// about, never queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_past_the_watch_cap_are_counted_not_watched() {
    let primary = Registry::start();
    let empty = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let extra = [
        "--replica-timeout",
        "5s",
        "--replica-max-watches",
        "1",
        "--concurrency",
        "1",
    ];
    let status = push(&primary, "repl/cap", &[&empty.url], &extra, &out).await;
    assert_eq!(status, ExitStatus::Failed);
    let s = summary_json(&out);
    let skipped = n(&s["events"]["replica_watch_skipped"]);
    let watched = n(&s["operations"]["replication"]["count"]);
    assert!(
        skipped >= 1 && skipped + watched == 4,
        "{skipped} + {watched}"
    );
    let kinds: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"replica_watch_skipped"), "{kinds:?}");
}
