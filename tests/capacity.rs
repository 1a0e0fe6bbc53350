//! `creb-rs capacity` against real servers the tests start: docker-registry with a
//! synthetic trace (every step judged, bounded, schema-valid, the CI gate), a server of
//! known capacity by construction (one exchange at a time, a fixed service time, in front
//! of docker-registry), nginx's `limit_req` at a known rate (the throttle onset), and a
//! generator held back on purpose (named as the limit, not the registry). The searches
//! run one at a time: each measures latency against load.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::faults::{Fault, FaultProxy};
use common::nginx::{Nginx, NginxOptions};
use common::{run_bin, BinOutput, Registry};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::{write_file, RawRecord};

static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A synthetic trace of pulls and pushes, in one file.
fn synthetic_trace(dir: &Path) -> PathBuf {
    let (records, _) = generate(&SynthOptions {
        seed: 11,
        sessions: 120,
        mean_gap_ms: 150.0,
        clients: 12,
        repos: 5,
        layer_size: (256, 96 * 1024),
        chunk: 32 * 1024,
        duplicate_share: 0.03,
        failed_share: 0.05,
        ..SynthOptions::default()
    });
    let path = dir.join("synthetic.json");
    write_file(&path, &records).unwrap();
    path
}

/// `count` blob GETs at a constant rate of `per_s`, round-robin over 16 blobs of 1 KiB in
/// one repository: the offered load of a step is exactly `per_s` times its speed.
fn constant_trace(dir: &Path, count: u32, per_s: u32) -> PathBuf {
    let gap_ms = 1000 / i64::from(per_s);
    let records: Vec<RawRecord> = (0..count)
        .map(|i| {
            let ms = i64::from(i) * gap_ms;
            RawRecord {
                host: "00000001".into(),
                duration: 0.002,
                method: "GET",
                remoteaddr: format!("{:08x}", i % 4),
                uri: format!(
                    "/v2/0000aaaa/0000bbbb/blobs/{:08x}",
                    0xb10b_0000u32 + i % 16
                ),
                useragent: "docker/17.06.0-ce go/go1.8.3".into(),
                status: 200,
                written: 1024,
                id: format!("{:010x}", i),
                timestamp: format!(
                    "2017-06-20T{:02}:{:02}:{:02}.{:03}Z",
                    ms / 3_600_000,
                    ms / 60_000 % 60,
                    ms / 1000 % 60,
                    ms % 1000
                ),
                size_unknown: false,
                time_ms: 1_497_916_800_000 + ms,
            }
        })
        .collect();
    let path = dir.join("constant.json");
    write_file(&path, &records).unwrap();
    path
}

/// Runs `creb-rs capacity TRACE --registry URL --slo SLO EXTRA… --output-dir DIR/NAME`;
/// its exit, its capacity.json (checked against the schema) and how long it took.
fn search(
    dir: &Path,
    name: &str,
    trace: &Path,
    registry: &str,
    slo: &str,
    extra: &[&str],
) -> (BinOutput, serde_json::Value, Duration) {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/capacity.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let out = dir.join(name);
    let mut args = vec![
        "capacity",
        trace.to_str().unwrap(),
        "--registry",
        registry,
        "--slo",
        slo,
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let started = Instant::now();
    let r = run_bin(&args, None, &[]);
    let took = started.elapsed();
    let text = std::fs::read_to_string(out.join("capacity.json"))
        .unwrap_or_else(|e| panic!("{e}: {}", r.stderr));
    let c: serde_json::Value = serde_json::from_str(&text).unwrap();
    let errors: Vec<String> = validator.iter_errors(&c).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}\n{c}");
    (r, c, took)
}

/// A search of the constant trace: 2 s steps after `warmup`, `concurrency` in flight,
/// `--max-time 3m`.
fn constant_search(
    dir: &Path,
    name: &str,
    url: &str,
    slo: &str,
    warmup: &str,
    concurrency: &str,
) -> (BinOutput, serde_json::Value, Duration) {
    let trace = constant_trace(dir, 600, 10);
    let args = [
        "--step",
        "2s",
        "--step-warmup",
        warmup,
        "--concurrency",
        concurrency,
        "--max-time",
        "3m",
    ];
    search(dir, name, &trace, url, slo, &args)
}

/// nginx in front of the registry on `upstream`, its `limit_req` answering 429 to the GETs
/// beyond `rate` (`30r/s`, `1r/m`) and `burst`; other methods pass, so a prewarm's uploads
/// do.
fn get_limiter(upstream: u16, rate: &str, burst: u32) -> Nginx {
    Nginx::start(NginxOptions {
        upstream_port: Some(upstream),
        http_extra: format!(
            "map $request_method $creb_limited {{ GET all; default \"\"; }}\n\
             limit_req_zone $creb_limited zone=registry:1m rate={rate};\n\
             limit_req_status 429;\n"
        ),
        location_extra: format!("limit_req zone=registry burst={burst} nodelay;"),
        ..NginxOptions::default()
    })
}

/// Each step's canary (p99 and worst wake-up lateness, ms) and CPU share, from
/// `DIR/NAME/steps/NN/summary.json`: what a verdict on the generator read.
fn generator_checks(dir: &Path, name: &str) -> String {
    let mut lines = Vec::new();
    for i in 0.. {
        let path = dir.join(name).join(format!("steps/{i:02}/summary.json"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            break;
        };
        let s: serde_json::Value = serde_json::from_str(&text).unwrap();
        let c = &s["checks"];
        lines.push(format!(
            "step {i}: canary p99 {} max {} ms, cpu {}",
            c["canary_wake_ms"]["p99"], c["canary_wake_ms"]["max"], c["cpu_share"]
        ));
    }
    lines.join("\n")
}

fn speeds(c: &serde_json::Value) -> Vec<f64> {
    c["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["speed"].as_f64().unwrap())
        .collect()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}
/// `creb-rs capacity` against docker-registry: an objective every load meets climbs to the
/// ceiling (a lower bound), every step judged and the result valid against its schema; an
/// objective no load meets finds no capacity, within --max-time; `--fail-if` gates the
/// answer with exit 3.
#[test]
fn capacity_searches_step_by_step_within_its_bounds() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path());
    let registry = Registry::start();
    let fast = ["--step", "1s", "--step-warmup", "200ms"];
    let run = |name: &str, slo: &str, extra: &[&str]| {
        let mut args = fast.to_vec();
        args.extend_from_slice(extra);
        search(dir.path(), name, &trace, &registry.url, slo, &args)
    };
    // Every load meets it: 1×, 2×, 4×, 8× (the ceiling), then 8× for twice as long.
    let (r, c, _) = run(
        "easy",
        "error_rate < 50%",
        &[
            "--max-speed",
            "8",
            "--concurrency",
            "64",
            "--fail-if",
            "capacity < 4x",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let steps = c["steps"].as_array().unwrap();
    assert_eq!(speeds(&c), [1.0, 2.0, 4.0, 8.0, 8.0], "{c}");
    assert!(steps.iter().all(|s| s["outcome"] == "sustained"), "{c}");
    assert_eq!(c["capacity"]["speed"], 8.0);
    assert_eq!(c["capacity"]["at_least"], true);
    assert_eq!(c["limited_by"], "ceiling");
    assert!(f(&c["capacity"]["requests_per_s"]) > 0.0, "{c}");
    assert_eq!(c["thresholds"][0]["verdict"], "clear", "{c}");
    assert!(dir.path().join("easy/steps/04/summary.json").exists());
    // The same output directory again, a shorter search: only its own steps are there. A
    // gate above what the ceiling lets it establish fails it (exit 3), a lower bound said.
    let (r, c, _) = run(
        "easy",
        "error_rate < 50%",
        &[
            "--max-speed",
            "2",
            "--concurrency",
            "64",
            "--fail-if",
            "capacity < 1000000/s",
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("a lower bound"), "{}", r.stderr);
    assert_eq!(c["thresholds"][0]["verdict"], "held", "{c}");
    assert_eq!(c["steps"].as_array().unwrap().len(), 3, "{c}");
    assert!(dir.path().join("easy/steps/02/summary.json").exists());
    assert!(!dir.path().join("easy/steps/03").exists());
    // No load meets it: no capacity, and the search ends at --max-time.
    let (r, c, took) = run("impossible", "p50(blob_get) < 1us", &["--max-time", "5s"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(c["capacity"]["speed"].is_null(), "{c}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(
        c["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] != "sustained"),
        "{c}"
    );
    // A gate on anything but the answer is refused before any work.
    let r = run_bin(
        &[
            "capacity",
            trace.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--slo",
            "error_rate < 1%",
            "--fail-if",
            "p99(blob_get) > 1s",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--slo"), "{}", r.stderr);
}

/// A server of known capacity by construction: one exchange at a time, each exactly 30 ms
/// (1/0.030 = 33.3 blob GETs per second), in front of docker-registry; a constant trace of
/// 10 GETs per second. The capacity found is within 10% of 3.33× (33.3/s), and the load
/// that failed above it is within the search's resolution.
#[test]
fn a_server_of_known_capacity_is_found_within_ten_percent() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let server = FaultProxy::start(registry.port, Fault::Serial(Duration::from_millis(30)));
    let (r, c, took) = constant_search(
        dir.path(),
        "known",
        &server.url,
        "p99(blob_get) < 150ms",
        "1s",
        "64",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let known = 1.0 / 0.030;
    let speed = f(&c["capacity"]["speed"]);
    let rate = f(&c["capacity"]["requests_per_s"]);
    assert!(
        (speed * 10.0 - known).abs() <= 0.1 * known,
        "capacity {speed}x ({rate} op/s) against {known:.1} op/s: {}",
        serde_json::to_string_pretty(&c["steps"]).unwrap()
    );
    assert!((rate - known).abs() <= 0.1 * known, "{rate} op/s\n{c}");
    // Every operation's rate at it: here all of them blob GETs.
    let gets = f(&c["capacity"]["operations_per_s"]["blob_get"]);
    assert!((gets - known).abs() <= 0.1 * known, "{gets} GETs/s\n{c}");
    assert_eq!(
        c["limited_by"],
        "registry",
        "{c}\n{}",
        generator_checks(dir.path(), "known")
    );
    assert_eq!(c["capacity"]["at_least"], false);
    let upper = f(&c["capacity"]["upper_speed"]);
    assert!(upper > speed && upper / speed - 1.0 <= 0.05 + 1e-9, "{c}");
    // Never past twice the last load that passed.
    let mut passed = 0.0f64;
    for s in c["steps"].as_array().unwrap() {
        let speed = f(&s["speed"]);
        assert!(passed == 0.0 || speed <= 2.0 * passed + 1e-9, "{c}");
        if s["outcome"] == "sustained" {
            passed = passed.max(speed);
        }
    }
    assert!(took < Duration::from_secs(200), "{took:?}");
}

/// nginx's `limit_req` at 30 requests per second (burst 2) in front of docker-registry,
/// the 429 objective, a constant trace of 10 GETs per second: the throttle onset is found
/// within 10% of 30/s. Only GETs are limited, so the prewarm's uploads pass.
#[test]
fn a_rate_limiters_throttle_onset_is_found_within_ten_percent() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let nginx = get_limiter(registry.port, "30r/s", 2);
    let (r, c, _) = constant_search(
        dir.path(),
        "throttle",
        &nginx.url,
        "errors(http_429) == 0",
        "1s",
        "64",
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, nginx.error_log());
    let onset = f(&c["throttle_onset"]["requests_per_s"]);
    assert!(
        (onset - 30.0).abs() <= 3.0,
        "throttled from {onset} op/s against a limit of 30/s: {}",
        serde_json::to_string_pretty(&c["steps"]).unwrap()
    );
    // Below the onset no step saw a 429; the capacity is the highest such load.
    let capacity = f(&c["capacity"]["requests_per_s"]);
    assert!(capacity < onset && capacity >= 27.0, "{c}");
    for s in c["steps"].as_array().unwrap() {
        if f(&s["speed"]) < f(&c["throttle_onset"]["speed"]) {
            assert!(s["errors"].get("http_429").is_none(), "{s}");
        }
    }
}

/// A generator held back on purpose: every GET takes 50 ms at a server that serves any
/// number at once, and creb-rs may hold 2 in flight (40 per second at most). The search
/// ends naming the generator (the in-flight cap), not the registry, and the answer is a
/// lower bound.
#[test]
fn a_held_back_generator_is_named_as_the_limit_not_the_registry() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let slow = FaultProxy::start(registry.port, Fault::Delay(Duration::from_millis(50)));
    let (r, c, _) = constant_search(
        dir.path(),
        "held",
        &slow.url,
        "p99(blob_get) < 1s",
        "500ms",
        "2",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(c["limited_by"], "generator", "{c}");
    assert_eq!(c["capacity"]["at_least"], true, "{c}");
    let last = c["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["outcome"], "generator_limited", "{c}");
    assert!(
        last["why"].as_str().unwrap().contains("--concurrency"),
        "{last}"
    );
    assert!(c["ended"].as_str().unwrap().contains("generator"), "{c}");
    // 40 per second is the generator's ceiling: 4× and above cannot be offered.
    assert!(f(&last["speed"]) > 3.0, "{c}");
}

/// Many hosts: the same ladder on two shards from a shared --start-at (the prewarm done
/// once, by the one-host ladder before them), merged step by step, equals the one-host
/// ladder in offered load per step and accounts for every record of each step once.
#[test]
fn a_two_shard_ladder_merged_equals_a_one_host_ladder() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path());
    let registry = Registry::start();
    let ladder = [
        "--ladder",
        "1,2,4",
        "--step",
        "1s",
        "--step-warmup",
        "500ms",
        "--concurrency",
        "32",
    ];
    let slo = "error_rate < 50%";
    let (r, one, _) = search(dir.path(), "one", &trace, &registry.url, slo, &ladder);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(one["kind"], "ladder");
    assert_eq!(speeds(&one), [1.0, 2.0, 4.0]);
    let start =
        humantime::format_rfc3339_millis(std::time::SystemTime::now() + Duration::from_secs(4))
            .to_string();
    let shards: Vec<_> = (0..2)
        .map(|i| {
            let (dir, trace, url, start) = (
                dir.path().to_owned(),
                trace.clone(),
                registry.url.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                let shard = format!("{i}/2");
                let mut args = ladder.to_vec();
                args.extend(["--phase", "run", "--shard", &shard, "--start-at", &start]);
                search(&dir, &format!("shard-{i}"), &trace, &url, slo, &args)
            })
        })
        .collect();
    for s in shards {
        let (r, c, _) = s.join().unwrap();
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(speeds(&c), [1.0, 2.0, 4.0], "{c}");
    }
    let merged = dir.path().join("merged");
    let r = run_bin(
        &[
            "merge",
            dir.path().join("shard-0").to_str().unwrap(),
            dir.path().join("shard-1").to_str().unwrap(),
            "--output-dir",
            merged.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("capacity.json")).unwrap())
            .unwrap();
    assert_eq!(c["kind"], "ladder");
    for (i, (m, o)) in c["steps"]
        .as_array()
        .unwrap()
        .iter()
        .zip(one["steps"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(m["speed"], o["speed"]);
        assert!(
            (f(&m["offered_rps"]) - f(&o["offered_rps"])).abs() < 1e-6,
            "step {i}: merged {m}\none host {o}"
        );
        let step = |d: &Path| common::summary_json(&d.join(format!("steps/{i:02}")));
        let (ms, os) = (step(&merged), step(&dir.path().join("one")));
        let t = &ms["trace"];
        assert_eq!(t["records"], os["trace"]["records"], "step {i}");
        let skipped: u64 = t["skipped"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(
            t["records"].as_u64().unwrap(),
            t["replayed"].as_u64().unwrap() + t["folded"].as_u64().unwrap() + skipped,
            "step {i}: {t}"
        );
    }
    // A merge never writes over one of the ladders it merges.
    let shard = dir.path().join("shard-0");
    let r = run_bin(
        &[
            "merge",
            shard.to_str().unwrap(),
            dir.path().join("shard-1").to_str().unwrap(),
            "--output-dir",
            shard.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("one of the ladders"), "{}", r.stderr);
    assert!(shard.join("capacity.json").exists());
    // Searches choose their loads from their own steps: they do not merge.
    let (_, _, _) = search(
        dir.path(),
        "search",
        &trace,
        &registry.url,
        slo,
        &["--max-speed", "1", "--step", "500ms", "--step-warmup", "0s"],
    );
    let r = run_bin(
        &[
            "merge",
            dir.path().join("search").to_str().unwrap(),
            dir.path().join("shard-1").to_str().unwrap(),
            "--output-dir",
            dir.path().join("bad").to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("searches do not merge"), "{}", r.stderr);
}

/// The registry fills the cap: a server of known capacity (one exchange at a time, 30 ms
/// each: 33.3 GETs per second) and 8 in flight. Above its capacity the cap binds, but what
/// fills it is the registry's own service time (8 queued exchanges answer in up to 240 ms,
/// past the 100 ms objective; Little's law): every step that did not pass is the
/// registry's, never the generator's (but for a passing hiccup of the machine, run again),
/// and two searches bracket the same knee. The search starts at 2× (20 GETs a second):
/// its steps below the knee measure 40 to 70 samples, where one or two late of them (a
/// stalled machine) leave a step undecided, never broken.
#[test]
fn a_registry_that_fills_the_cap_is_blamed_not_the_generator() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let server = FaultProxy::start(registry.port, Fault::Serial(Duration::from_millis(30)));
    let known = 1.0 / 0.030;
    let trace = constant_trace(dir.path(), 600, 10);
    for name in ["first", "second"] {
        let (r, c, _) = search(
            dir.path(),
            name,
            &trace,
            &server.url,
            "p99(blob_get) < 100ms",
            &[
                "--speed",
                "2",
                "--step",
                "2s",
                "--step-warmup",
                "1s",
                "--concurrency",
                "8",
                "--max-time",
                "3m",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let checks = generator_checks(dir.path(), name);
        assert_eq!(c["limited_by"], "registry", "{name}: {c}\n{checks}");
        // The cap is never the generator's: a step the generator could not offer is only
        // a passing hiccup of the machine (its runtime woke late), and is run again.
        let steps = c["steps"].as_array().unwrap();
        for (i, s) in steps.iter().enumerate() {
            if s["outcome"] != "generator_limited" {
                continue;
            }
            let why = s["why"].as_str().unwrap_or_default();
            assert!(why.contains("woke"), "{name}: {s}\n{checks}");
            assert_eq!(steps[i + 1]["speed"], s["speed"], "{name}: {c}");
            assert!(
                f(&steps[i + 1]["length_s"]) > f(&s["length_s"]),
                "{name}: {c}"
            );
        }
        // The knee brackets the known capacity: sustained within 15% below it, the failed
        // load above it.
        let speed = f(&c["capacity"]["speed"]);
        let upper = f(&c["capacity"]["upper_speed"]);
        assert!(
            speed * 10.0 <= known * 1.05 && speed * 10.0 >= known * 0.85,
            "{name}: {speed}x against {known:.1}/s\n{c}"
        );
        assert!(upper * 10.0 > known * 0.95, "{name}: {upper}x\n{c}");
        // A step's achieved rate never exceeds what it was offered, and counts successes.
        for s in steps {
            assert!(f(&s["achieved_rps"]) <= f(&s["offered_rps"]) + 1e-9, "{s}");
        }
    }
}

/// Failures are never capacity: behind nginx answering 429 to every GET (a latency-only
/// objective every 429 meets) no load is sustained; a registry killed mid-search ends it
/// with exit 2, what was found before kept, and no sustained step with failures beyond
/// the bound.
#[test]
fn a_registry_that_fails_fast_is_never_sustained() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let nginx = get_limiter(registry.port, "1r/m", 1);
    let trace = constant_trace(dir.path(), 600, 10);
    let fast = [
        "--step",
        "1s",
        "--step-warmup",
        "200ms",
        "--max-time",
        "1m",
        "--concurrency",
        "16",
    ];
    let (r, c, _) = search(
        dir.path(),
        "throttled",
        &trace,
        &nginx.url,
        "p99(blob_get) < 1s",
        &fast,
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stderr, nginx.error_log());
    assert!(c["capacity"]["speed"].is_null(), "{c}");
    let mut judged = 0;
    for s in c["steps"].as_array().unwrap() {
        assert_ne!(s["outcome"], "sustained", "{s}");
        assert_eq!(f(&s["achieved_rps"]), 0.0, "{s}");
        // The search narrows down to loads whose short steps hold no operation at all
        // (undecided); every step that had some failed them.
        if f(&s["operations_failed"]) > 0.0 {
            judged += 1;
            assert!(s["why"].as_str().unwrap().contains("failed"), "{s}");
        }
    }
    assert!(judged >= 3, "{c}");
    // Killed mid-search: the steps after it fail without an answer, and the search ends.
    let mut dying = Registry::start();
    let url = dying.url.clone();
    let killer = {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let second_step = dir.path().join("killed/steps/01/summary.json");
        let t = std::thread::spawn(move || {
            // Once two steps are written (past the prewarm, whatever the machine's pace),
            // or at the test's own bound on waiting.
            let until = Instant::now() + Duration::from_secs(30);
            while !second_step.exists() && Instant::now() < until {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    // The search ended first (or the test is ending): kill now.
                    _ => break,
                }
            }
            dying.kill();
        });
        (tx, t)
    };
    let (r, c, took) = search(
        dir.path(),
        "killed",
        &trace,
        &url,
        "p99(blob_get) < 1s",
        &fast,
    );
    drop(killer.0);
    killer.1.join().unwrap();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("stopped answering"), "{}", r.stderr);
    assert_eq!(c["limited_by"], "error", "{c}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    for s in c["steps"].as_array().unwrap() {
        if s["outcome"] == "sustained" {
            let (ok, failed) = (f(&s["operations_ok"]), f(&s["operations_failed"]));
            assert!(failed <= 0.01 * (ok + failed), "{s}");
        }
    }
}

/// Objectives and loads that cannot mean anything are refused before any load (exit 2,
/// never a panic): negative rates, rates over 100%, an absurd ladder, a --max-time that
/// leaves no step, a speed whose step holds no record.
#[test]
fn objectives_and_loads_that_mean_nothing_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = constant_trace(dir.path(), 100, 10);
    let t = trace.to_str().unwrap();
    let url = "http://127.0.0.1:9";
    for (args, why) in [
        (vec!["--slo", "error_rate < -1%"], "between 0% and 100%"),
        (vec!["--slo", "error_rate < 101%"], "between 0% and 100%"),
        (vec!["--slo", "p99(blob_get) < -5"], "not a latency"),
        (vec!["--slo", "rps > -1"], "negative"),
        (
            vec!["--slo", "p99(blob_get) < 1s", "--ladder", "1e300"],
            "speed factor",
        ),
        (
            vec!["--slo", "p99(blob_get) < 1s", "--max-time", "0s"],
            "leaves no step",
        ),
    ] {
        let mut all = vec!["capacity", t, "--registry", url];
        all.extend(args.iter());
        let r = run_bin(&all, None, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
    }
    // A speed whose step holds no record: found once the trace is read, before any load.
    let registry = Registry::start();
    let out = dir.path().join("tiny");
    let r = run_bin(
        &[
            "capacity",
            t,
            "--registry",
            &registry.url,
            "--slo",
            "p99(blob_get) < 1s",
            "--speed",
            "0.000001",
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("would hold no record"), "{}", r.stderr);
    // The trace's pace and a start that measures enough are said before step 0.
    let r = run_bin(
        &[
            "capacity",
            t,
            "--registry",
            &registry.url,
            "--slo",
            "p99(blob_get) < 1s",
            "--max-speed",
            "1",
            "--step",
            "1s",
            "--step-warmup",
            "0s",
            "--output-dir",
            out.to_str().unwrap(),
            "--force",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("the trace offers 10.") && r.stderr.contains("start at --speed 64"),
        "{}",
        r.stderr
    );
}

/// A step cut to the trace's span keeps its warm-up's share of it: at 16× a 10 s trace
/// holds 0.6 s of schedule, shorter than the 1 s warm-up asked for, and the step still
/// measures what it offered (a whole warm-up would have left nothing measured).
#[test]
fn a_step_cut_to_the_trace_still_measures() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    let trace = constant_trace(dir.path(), 100, 10);
    let (r, c, _) = search(
        dir.path(),
        "cut",
        &trace,
        &registry.url,
        "error_rate < 50%",
        &["--ladder", "16", "--step", "1s", "--step-warmup", "1s"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let step = &c["steps"][0];
    assert!(f(&step["length_s"]) > 0.0, "{step}");
    assert!(f(&step["operations_ok"]) > 0.0, "{step}");
    assert_eq!(step["outcome"], "sustained", "{step}");
}
