//! `creb-rs compare` with repetitions: medians, spread (min–max) and whether a difference
//! is within the run-to-run noise, from real result directories; one run a side says that
//! it cannot tell noise.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{run_bin, Registry};

/// One test of this file at a time: the steady-state verdicts judge a machine that is not
/// also running this file's other pushes and pulls (test binaries already run one by one).
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Pushes `images` generated images of `layers` layers of `size` to `repo`, with `extra`
/// flags; fails the test if the push does.
/// `pull` of `images` images of `repo` from `url` into `out`, 2 in flight, with intervals
/// short enough (20 ms) for the percentiles' intervals of a run of a second or two: its
/// exit and its summary (null when it wrote none).
fn gated_pull(
    url: &str,
    repo: &str,
    images: &str,
    out: &std::path::Path,
    extra: &[&str],
) -> (common::BinOutput, serde_json::Value) {
    let mut args = vec![
        "pull",
        "--registry",
        url,
        "--repo",
        repo,
        "--images",
        images,
        "--concurrency",
        "2",
        "--interval",
        "20ms",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let r = run_bin(&args, None, &[]);
    let summary = if out.join("summary.json").exists() {
        common::summary_json(out)
    } else {
        serde_json::Value::Null
    };
    (r, summary)
}

fn push(registry: &Registry, repo: &str, images: &str, layers: &str, size: &str, extra: &[&str]) {
    let mut args = vec![
        "push",
        "--registry",
        &registry.url,
        "--repo",
        repo,
        "--images",
        images,
        "--layers",
        layers,
        "--layer-size",
        size,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn repetitions_give_medians_spread_and_a_noise_verdict() {
    let _alone = alone();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let mut sides = [Vec::new(), Vec::new()];
    for i in 0..3 {
        for (s, side) in sides.iter_mut().enumerate() {
            let out = dir.path().join(format!("{s}-{i}"));
            // Fresh bytes every run (as `run --repeat` pushes): every blob is uploaded.
            let seed = (10 * s + i + 1).to_string();
            let r = run_bin(
                &[
                    "push",
                    "--seed",
                    &seed,
                    "--registry",
                    &registry.url,
                    "--repo",
                    "compare/app",
                    "--images",
                    "50",
                    "--layers",
                    "2",
                    "--layer-size",
                    "32KiB",
                    "--output-dir",
                    out.to_str().unwrap(),
                    "--quiet",
                ],
                None,
                &[],
            );
            assert_eq!(r.code, 0, "{}", r.stderr);
            side.push(out.to_str().unwrap().to_owned());
        }
    }
    let (a, b) = (sides[0].join(","), sides[1].join(","));
    // Other seeds are other datasets: --force says they are repetitions all the same.
    let text = run_bin(&["compare", &a, &b, "--force"], None, &[]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    for part in [
        "3 runs",
        "median p99 ms A/B",
        "spread (min–max)",
        "within the run-to-run noise",
        "detects",
        "the smallest change these runs find 80% of the time",
    ] {
        assert!(
            text.stdout.contains(part),
            "'{part}' not in:\n{}",
            text.stdout
        );
    }
    let json = run_bin(&["compare", &a, &b, "--json", "--force"], None, &[]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let c: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(c["runs"], serde_json::json!([3, 3]));
    let op = |name: &str| {
        c["operations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == name)
            .unwrap_or_else(|| panic!("{name} compared"))
            .clone()
    };
    // 100 blob uploads a run: a p99 each, compared by the test.
    let blob = op("blob_upload");
    let spread = &blob["p99_spread"][0];
    let (min, median, max) = (
        spread["min"].as_f64().unwrap(),
        spread["median"].as_f64().unwrap(),
        spread["max"].as_f64().unwrap(),
    );
    assert!(min <= median && median <= max, "{spread}");
    assert_eq!(blob["p99_ms"][0].as_f64().unwrap(), median);
    assert!(blob["p99_within_noise"].is_boolean(), "{blob}");
    let [lo, hi] = [0, 1].map(|i| blob["p99_ratio_ci"][i].as_f64().unwrap());
    assert!(lo > 0.0 && lo <= hi, "{blob}");
    assert!(blob["p99_p_value"].as_f64().is_some(), "{blob}");
    // What these runs could have detected, from their spread.
    assert!(blob["p99_detectable"].as_f64().unwrap() >= 0.0, "{blob}");
    // 50 image pushes a run: too few for a p99, nothing to test.
    let push = op("image_push");
    assert!(
        push["p99_ms"][0].is_null() && push["p99_within_noise"].is_null(),
        "{push}"
    );
    assert_eq!(push["count"], serde_json::json!([50, 50]));

    // One run a side: the deltas, and a word that noise is unknown.
    let single = run_bin(
        &["compare", &sides[0][0], &sides[1][0], "--force"],
        None,
        &[],
    );
    assert_eq!(single.code, 0, "{}", single.stderr);
    assert!(
        single
            .stdout
            .contains("A has 1 run, B has 1: telling noise needs at least 2 a side"),
        "{}",
        single.stdout
    );
    let json = run_bin(
        &["compare", &sides[0][0], &sides[1][0], "--json", "--force"],
        None,
        &[],
    );
    let c: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(c["operations"][0]["p99_within_noise"].is_null());
    // Three runs against one: counted as they are.
    let uneven = run_bin(&["compare", &a, &sides[1][0], "--force"], None, &[]);
    assert!(
        uneven.stdout.contains("A has 3 runs, B has 1"),
        "{}",
        uneven.stdout
    );
}

/// The runs of one side must be repetitions of one configuration: runs made with different
/// `--verify` modes are refused as one side, with what differs.
#[test]
fn a_side_of_runs_with_different_settings_is_refused_with_what_differs() {
    let _alone = alone();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    push(&registry, "compare/mixed", "2", "1", "4KiB", &[]);
    let mut dirs = Vec::new();
    for verify in ["sha256", "none", "sha256"] {
        let out = dir.path().join(verify).join(dirs.len().to_string());
        let r = run_bin(
            &[
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "compare/mixed",
                "--images",
                "2",
                "--verify",
                verify,
                "--output-dir",
                out.to_str().unwrap(),
                "--quiet",
            ],
            None,
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        dirs.push(out.to_str().unwrap().to_owned());
    }
    let mixed = format!("{},{}", dirs[0], dirs[1]);
    let r = run_bin(&["compare", &mixed, &dirs[2]], None, &[]);
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("A's runs are not repetitions of one configuration")
            && r.stderr.contains("verify: \"sha256\" vs \"none\""),
        "{}",
        r.stderr
    );
}

/// `--baseline DIR` with thresholds relative to it: a rerun of the same workload passes the
/// documented gate, with both runs' intervals in its verdict; a limit far below the
/// baseline holds (exit 3); a relative threshold without a baseline, or a baseline of
/// another workload, is refused before any work.
#[test]
fn a_baseline_gate_fails_only_beyond_both_runs_intervals() {
    let _alone = alone();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let push_out = dir.path().join("push");
    push(
        &registry,
        "gate/app",
        "100",
        "3",
        "16KiB",
        &["--output-dir", push_out.to_str().unwrap()],
    );
    let pull = |out: &str, extra: &[&str]| {
        gated_pull(
            &registry.url,
            "gate/app",
            "100",
            &dir.path().join(out),
            extra,
        )
    };
    let (base, _) = pull("base", &[]);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let base_dir = dir.path().join("base");
    let base_dir = base_dir.to_str().unwrap();
    // A factor of 2: a rerun on a loaded machine never doubles its p50, intervals or not;
    // a p50 has an interval in a run of a second or two (a p90's upper bound may not be
    // established there).
    let gate = "p50(blob_get) > baseline * 2";
    let (again, s) = pull("again", &["--baseline", base_dir, "--fail-if", gate]);
    let verdict = &s["thresholds"][0];
    assert_eq!(again.code, 0, "{verdict}\n{}", again.stderr);
    assert_eq!(verdict["verdict"], "clear", "{verdict}");
    let b = &verdict["baseline"];
    assert!(b["value"].as_f64().unwrap() > 0.0, "{verdict}");
    assert!(
        b["interval"].is_array() && b["baseline_interval"].is_array(),
        "{verdict}"
    );
    // A tenth of the baseline's p50: far below what this run measures, beyond both
    // intervals even on a loaded machine.
    let (low, s) = pull(
        "low",
        &[
            "--baseline",
            base_dir,
            "--fail-if",
            "p50(blob_get) > baseline * 0.1",
        ],
    );
    assert_eq!(low.code, 3, "{}\n{}", s["thresholds"], low.stderr);
    assert!(
        low.stderr.contains("against a baseline limit"),
        "{}",
        low.stderr
    );
    // The same gate between two finished runs: compare with A as the baseline.
    let again_dir = dir.path().join("again");
    let again_dir = again_dir.to_str().unwrap();
    let c = run_bin(
        &["compare", base_dir, again_dir, "--fail-if", gate, "--quiet"],
        None,
        &[],
    );
    assert_eq!(c.code, 0, "{}", c.stderr);
    let half = "p50(blob_get) > baseline * 0.1";
    let c = run_bin(
        &["compare", base_dir, again_dir, "--fail-if", half, "--quiet"],
        None,
        &[],
    );
    assert_eq!(c.code, 3, "{}", c.stderr);
    // Refused before any work.
    let (none, _) = pull("none", &["--fail-if", gate]);
    assert_eq!(none.code, 2);
    assert!(
        none.stderr.contains("give --baseline DIR"),
        "{}",
        none.stderr
    );
    let push_dir = dir.path().join("push");
    let (other, _) = pull(
        "other",
        &["--baseline", push_dir.to_str().unwrap(), "--fail-if", gate],
    );
    assert_eq!(other.code, 2);
    assert!(
        other.stderr.contains("must run the same workload"),
        "{}",
        other.stderr
    );
}

/// Gates that know their noise: a p99 of a short run has no interval, so a rerun of the
/// baseline's own workload is `undecided` against it (exit 0, the `baseline_undecided`
/// warning, no claim of intervals it lacks); the same gate on the p50, which has its
/// intervals, still fails a registry slowed by 40 ms; a baseline of another workload is
/// refused as `compare` refuses it, unless --force.
#[test]
fn a_baseline_gate_is_undecided_without_intervals_and_refuses_another_workload() {
    let _alone = alone();
    let registry = Registry::start();
    let slowed = common::faults::FaultProxy::start(
        registry.port,
        common::faults::Fault::Delay(Duration::from_millis(40)),
    );
    let dir = tempfile::tempdir().unwrap();
    push(&registry, "noise/app", "40", "2", "4KiB", &[]);
    let pull = |url: &str, out: &str, images: &str, extra: &[&str]| {
        gated_pull(url, "noise/app", images, &dir.path().join(out), extra)
    };
    let (base, _) = pull(&registry.url, "base", "40", &[]);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let base_dir = dir.path().join("base");
    let base_dir = base_dir.to_str().unwrap();
    // 80 blob GETs a run: no p99 interval on either side.
    let p99 = "p99(blob_get) > baseline * 1.10";
    for run in ["again-1", "again-2", "again-3"] {
        let (again, s) = pull(
            &registry.url,
            run,
            "40",
            &["--baseline", base_dir, "--fail-if", p99],
        );
        let verdict = &s["thresholds"][0];
        assert_eq!(again.code, 0, "{verdict}\n{}", again.stderr);
        assert_eq!(verdict["verdict"], "undecided", "{verdict}");
        assert!(
            verdict["baseline"]["undecided"]
                .as_str()
                .unwrap()
                .contains("no 95% interval"),
            "{verdict}"
        );
        assert!(
            s["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["kind"] == "baseline_undecided"),
            "{s}"
        );
        assert!(again.stderr.contains("undecided"), "{}", again.stderr);
        assert!(!again.stderr.contains("intervals)"), "{}", again.stderr);
    }
    // A registry 40 ms slower on every GET: its p50, with intervals on both sides, fails.
    let (slow, s) = pull(
        &slowed.url,
        "slow",
        "40",
        &[
            "--baseline",
            base_dir,
            "--fail-if",
            "p50(blob_get) > baseline * 1.5",
        ],
    );
    assert_eq!(slow.code, 3, "{}\n{}", s["thresholds"], slow.stderr);
    assert!(
        slow.stderr.contains("beyond both runs' 95% intervals"),
        "{}",
        slow.stderr
    );
    // Another workload (20 images, not 40): refused as compare refuses it, the run kept.
    let (other, s) = pull(
        &registry.url,
        "other",
        "20",
        &["--baseline", base_dir, "--fail-if", p99],
    );
    assert_eq!(other.code, 2, "{}", other.stderr);
    assert!(
        other.stderr.contains("ran different workloads"),
        "{}",
        other.stderr
    );
    assert!(s["totals"]["requests"].as_u64().unwrap() > 0, "{s}");
    let c = run_bin(
        &[
            "compare",
            base_dir,
            dir.path().join("other").to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(c.code, 2, "{}", c.stderr);
    assert!(c.stderr.contains("ran different workloads"), "{}", c.stderr);
    let (forced, s) = pull(
        &registry.url,
        "other",
        "20",
        &["--baseline", base_dir, "--fail-if", p99, "--force"],
    );
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_eq!(s["thresholds"][0]["verdict"], "undecided", "{s}");
}

/// Steady state against a real registry: a pull that runs undisturbed is steady and says
/// so; the same pull while the registry is stopped (SIGSTOP) for 1.5 s stalls, and the run
/// carries the `unsteady` warning with when and how long.
#[test]
fn a_steady_run_says_so_and_a_stopped_registry_makes_it_unsteady() {
    let _alone = alone();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    // Enough images and batches short enough that the undisturbed pull spans well over the
    // six batches a verdict needs on a fast machine (about two seconds here, 250 images at
    // 200 ms batches were five or six), and the stall stays under half of the stopped one.
    push(&registry, "steady/app", "400", "2", "4KiB", &[]);
    let pull = |name: &str| {
        let out = dir.path().join(name);
        let r = run_bin(
            &[
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "steady/app",
                "--images",
                "400",
                "--concurrency",
                "1",
                "--interval",
                "100ms",
                "--output-dir",
                out.to_str().unwrap(),
                "--quiet",
            ],
            None,
            &[],
        );
        (r, common::summary_json(&out))
    };
    // A first pull warms the registry up (its caches, the page cache, the Go runtime): the
    // first pulls of a fresh registry run at half the speed of the later ones, a drift the
    // verdict rightly reports.
    let (r, _) = pull("warm-up");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (r, s) = pull("steady");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let state = &s["steady_state"];
    assert_eq!(state["steady"], true, "{state}");
    assert!(state["drift"].as_array().unwrap().is_empty(), "{state}");
    assert!(
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["kind"] != "unsteady"),
        "{}",
        s["warnings"]
    );
    let pause = registry.pause_later(Duration::from_millis(300), Duration::from_millis(1500));
    let (r, s) = pull("stopped");
    pause.join().unwrap();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let state = &s["steady_state"];
    assert_eq!(state["steady"], false, "{state}");
    let stall = state["drift"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "stall")
        .unwrap_or_else(|| panic!("no stall: {state}"));
    let length = stall["length_s"].as_f64().unwrap();
    assert!((1.0..=2.0).contains(&length), "{stall}");
    let warning = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "unsteady")
        .unwrap_or_else(|| panic!("no unsteady warning: {}", s["warnings"]));
    assert!(
        warning["message"].as_str().unwrap().contains("stalled for"),
        "{warning}"
    );
}

/// `--warmup D`: the first D of a run is in none of its numbers — fewer operations than the
/// run carried out, rates over the rest of the run, `warmup_s` recorded — and a merge or a
/// report of it reads back the same numbers.
#[test]
fn warmup_leaves_the_start_of_a_run_out_of_its_numbers() {
    let _alone = alone();
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    push(&registry, "warm/app", "100", "2", "4KiB", &[]);
    let out = dir.path().join("warm");
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "warm/app",
            "--images",
            "100",
            "--concurrency",
            "1",
            "--interval",
            "100ms",
            "--warmup",
            "250ms",
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = common::summary_json(&out);
    // Whole intervals: 250 ms of 100 ms intervals leaves three out.
    assert_eq!(s["warmup_s"].as_f64(), Some(0.3), "{}", s["warmup_s"]);
    let manifests = s["operations"]["manifest_get"]["count"].as_u64().unwrap();
    assert!(
        manifests > 0 && manifests < 100,
        "{manifests} of 100 manifest reads counted"
    );
    // The merge of the one result rebuilds its numbers from its files: the same.
    let merged = dir.path().join("merged");
    let m = run_bin(
        &[
            "merge",
            out.to_str().unwrap(),
            "--output-dir",
            merged.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(m.code, 0, "{}", m.stderr);
    let ms = common::summary_json(&merged);
    let (a, b) = (
        &s["operations"]["manifest_get"],
        &ms["operations"]["manifest_get"],
    );
    for field in ["count", "latency_ms", "ttfb_ms"] {
        assert_eq!(a[field], b[field], "{field}");
    }
    assert_eq!(s["steady_state"], ms["steady_state"]);
}
