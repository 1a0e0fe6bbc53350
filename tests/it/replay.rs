//! Trace replay end to end against a real registry: a generated IBM-format trace (pulls,
//! pushes with chunked uploads, HEAD 404s, failed originals, duplicate log ids) split over
//! three overlapping files, one gzip'd; prewarm, then stress and delay mode, with every
//! record of the trace accounted for exactly.

use std::path::{Path, PathBuf};

use crate::common::{creb, summary_json, Registry};
use creb::trace::synth::{generate, SynthOptions, SynthStats};
use creb::trace::write::write_file;
use creb::ExitStatus;

/// Writes the trace round-robin into three files (so they overlap in time), the last gzip'd.
fn write_trace(dir: &Path, opts: &SynthOptions) -> (Vec<PathBuf>, SynthStats, i64) {
    let (records, stats) = generate(opts);
    let span = records.last().unwrap().time_ms - records.first().unwrap().time_ms;
    let names = ["a.json", "b.json", "c.json.gz"];
    let mut parts: Vec<Vec<_>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for (i, r) in records.into_iter().enumerate() {
        parts[i % 3].push(r);
    }
    let mut paths = Vec::new();
    for (name, part) in names.iter().zip(parts) {
        let path = dir.join(name);
        write_file(&path, &part).unwrap();
        paths.push(path);
    }
    (paths, stats, span)
}

fn small_trace() -> SynthOptions {
    SynthOptions {
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
    }
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// `records = replayed + folded + Σ skipped`, exactly.
pub(crate) fn assert_reconciled(summary: &serde_json::Value) {
    let t = &summary["trace"];
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(u).sum();
    assert_eq!(
        u(&t["records"]),
        u(&t["replayed"]) + u(&t["folded"]) + skipped,
        "accounting does not add up: {t}"
    );
    assert_eq!(
        u(&t["replayed"]),
        u(&summary["totals"]["requests"]),
        "one operation per replayed record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_then_delay_replay_with_exact_accounting() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, stats, span_ms) = write_trace(dir.path(), &small_trace());
    let traces: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    let registry = Registry::start();
    let out = dir.path().join("stress");

    let mut args = vec!["replay"];
    args.extend(&traces);
    args.extend([
        "--registry",
        &registry.url,
        "--mode",
        "stress",
        "--concurrency",
        "8",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
        "--gather",
    ]);
    let status = creb(&args).await;

    let prewarm = summary_json(&out.join("prewarm"));
    assert_eq!(prewarm["mode"], "prewarm");
    assert_eq!(prewarm["totals"]["errors"], 0, "{}", prewarm["errors"]);
    assert!(u(&prewarm["operations"]["blob_upload"]["ok"]) > 0);

    let run = summary_json(&out);
    assert_eq!(run["mode"], "stress");
    assert_eq!(run["model"], "closed");
    registry.assert_exit_but_tag_races(i32::from(status.code()), &run, "stress run");
    assert_reconciled(&run);
    let t = &run["trace"];
    assert_eq!(u(&t["records"]), stats.records);
    assert_eq!(u(&t["skipped"]["duplicate"]), stats.duplicates);
    assert_eq!(u(&t["skipped"]["failed_in_trace"]), stats.failed);
    assert_eq!(
        u(&t["folded"]),
        stats.upload_members,
        "PATCHes and closing PUTs fold into uploads"
    );
    assert_eq!(u(&run["operations"]["blob_upload"]["ok"]), stats.uploads);
    // HEAD 404s are replayed as existence checks and succeed. A layer the trace pushes and
    // later pulls is prewarmed (reads never depend on the order of writes across hosts), so
    // its HEAD now finds it: fewer misses than the trace, never more.
    let misses = u(&run["events"]["head_miss"]);
    assert!(
        misses > 0 && misses <= stats.head_misses,
        "{misses} vs {}",
        stats.head_misses
    );
    // B1: manifest PUTs stay PUTs even where the trace also GETs them.
    assert!(u(&run["operations"]["manifest_put"]["ok"]) > 0);
    assert!(u(&run["operations"]["manifest_get"]["ok"]) > 0);
    assert!(u(&run["sessions"]["image_push"]["ok"]) > 0);
    assert!(u(&run["sessions"]["image_pull"]["ok"]) > 0);
    assert!(run["checks"]["canary_wake_ms"].is_object());
    // With --gather, stress mode may gather answers per wake-up, within its bound
    // (docs/measurement.md).
    let gathered = &run["checks"]["gathered"];
    assert_eq!(gathered["share_of_service_time"], 0.04, "{gathered}");
    let widest = gathered["widest_window_ms"].as_f64().unwrap();
    assert!((0.0..=10.0).contains(&widest), "{gathered}");
    assert!(gathered["turned_off"].is_boolean());
    // The cores the generator may use are the runtime's workers (this test's runtime has 2).
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(u(&run["checks"]["cores"]), available.min(2) as u64);

    // Delay mode at 4x: the schedule takes a quarter of the trace's span.
    let delay = dir.path().join("delay");
    let mut args = vec!["replay"];
    args.extend(&traces);
    args.extend([
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--speed",
        "4",
        "--phase",
        "run",
        "--concurrency",
        "32",
        "--output-dir",
        delay.to_str().unwrap(),
        "--quiet",
    ]);
    let status = creb(&args).await;
    let run = summary_json(&delay);
    assert_eq!(run["model"], "open");
    registry.assert_exit_but_tag_races(i32::from(status.code()), &run, "delay run");
    assert_reconciled(&run);
    let expected = span_ms as f64 / 4.0 / 1000.0;
    let took = run["duration_s"].as_f64().unwrap();
    // On time, or late and saying why: a host too busy to keep the schedule (other load on
    // the machine) must show in the run's own warnings, never pass silently.
    let excuses: Vec<&str> = run["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .filter(|k| {
            [
                "generator_stalls",
                "schedule_slipped",
                "generator_bottleneck",
            ]
            .contains(k)
        })
        .collect();
    // The run ends with its last answer: a slow one from the registry (other suites load
    // this machine) is late without the generator being so.
    let slowest_answer_s = run["operations"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|op| op["service_ms"]["max"].as_f64())
        .fold(0.0, f64::max)
        / 1000.0;
    assert!(
        (took - expected).abs() <= expected * 0.05 + 0.1
            || (took > expected && took - expected <= expected * 0.05 + 0.1 + slowest_answer_s)
            || (took > expected && !excuses.is_empty()),
        "delay mode took {took:.3}s, the schedule is {expected:.3}s, the slowest answer \
         {slowest_answer_s:.3}s, warnings {}",
        run["warnings"]
    );
    if !excuses.is_empty() {
        eprintln!("delay run took {took:.3}s for {expected:.3}s of schedule; the run says why: {excuses:?}");
    }
    let get = &run["operations"]["manifest_get"];
    assert!(get["service_ms"].is_object() && get["schedule_lag_ms"].is_object());
    assert!(get["late_starts"].is_object());
    assert!(
        run["checks"]["gathered"].is_null(),
        "delay mode never gathers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_cover_the_trace_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, stats, _) = write_trace(dir.path(), &small_trace());
    let traces: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
    let registry = Registry::start();
    let mut args = vec!["replay"];
    args.extend(&traces);
    args.extend(["--registry", &registry.url, "--phase", "prewarm", "--quiet"]);
    assert_eq!(creb(&args).await, ExitStatus::Success);

    for by in ["client", "record"] {
        let mut records = 0;
        let mut ops = 0;
        let mut folded = 0;
        for i in 0..3 {
            let out = dir.path().join(format!("{by}-{i}"));
            let shard = format!("{i}/3");
            let mut args = vec!["replay"];
            args.extend(&traces);
            args.extend([
                "--registry",
                &registry.url,
                "--phase",
                "run",
                "--shard",
                &shard,
                "--shard-by",
                by,
                "--output-dir",
                out.to_str().unwrap(),
                "--quiet",
            ]);
            let status = creb(&args).await;
            let s = summary_json(&out);
            assert_reconciled(&s);
            assert_eq!(s["shard"]["index"], i);
            records += u(&s["trace"]["records"]);
            ops += u(&s["trace"]["replayed"]);
            folded += u(&s["trace"]["folded"]);
            let what = format!("shard-by {by} {shard}");
            registry.assert_exit_but_tag_races(i32::from(status.code()), &s, &what);
        }
        assert_eq!(records, stats.records, "shard-by {by}");
        assert_eq!(folded, stats.upload_members, "shard-by {by}");
        assert!(ops > 0);
    }
}

/// The binary's `replay` of `paths` against `registry` into `out`, with `flags` and `env`
/// (quiet): its exit status, checked as the registry's tag races allow, and summary.json.
fn replay_bin(
    paths: &[PathBuf],
    registry: &Registry,
    out: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut args = vec!["replay"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--registry", &registry.url, "--quiet"]);
    args.extend(["--output-dir", out.to_str().unwrap()]);
    args.extend(flags);
    let run = crate::common::run_bin(&args, None, env);
    let s = summary_json(out);
    registry.assert_exit_but_tag_races(run.code, &s, &format!("{flags:?} {env:?}"));
    s
}

/// Loops that find no room under the open-file limit for their polls and wakers beside the
/// connections they keep leave the run to the tasks before any operation is taken: the
/// same operations carried out, a warning on stderr, no loops in the checks. With room
/// (a higher limit), the same hundred loops run.
#[test]
fn stress_mode_loops_without_room_under_the_open_file_limit_leave_the_run_to_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, _) = write_trace(dir.path(), &small_trace());
    let registry = Registry::start();
    replay_bin(
        &paths,
        &registry,
        &dir.path().join("prewarm"),
        &["--phase", "prewarm"],
        &[],
    );
    let flags = ["--phase", "run", "--mode", "stress", "--concurrency", "100"];
    let tasks = replay_bin(
        &paths,
        &registry,
        &dir.path().join("tasks"),
        &flags,
        &[("CREB_STRESS_TASKS", "1")],
    );
    // 100 connections and a reserve of 64 fit under 300; 100 loops' 200 descriptors more
    // do not.
    let under = |limit: &str, name: &str| {
        let out = dir.path().join(name);
        let mut args = vec!["replay"];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        args.extend(["--registry", &registry.url, "--quiet"]);
        args.extend(["--output-dir", out.to_str().unwrap()]);
        args.extend(flags);
        let output = std::process::Command::new("prlimit")
            .arg(format!("--nofile={limit}:{limit}"))
            .arg(env!("CARGO_BIN_EXE_creb-rs"))
            .args(&args)
            .env("CREB_STRESS_LOOPS", "100")
            .env_remove("DOCKER_CONFIG")
            .env_remove("CREB_REGISTRY")
            .output()
            .expect("prlimit (util-linux) runs creb-rs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let s = summary_json(&out);
        let code = output.status.code().unwrap_or(-1);
        registry.assert_exit_but_tag_races(code, &s, &stderr);
        (s, stderr)
    };
    let (fell_back, stderr) = under("300", "tight");
    assert!(
        stderr.contains("event loops could not start") && stderr.contains("the limit is 300"),
        "{stderr}"
    );
    assert!(
        fell_back["checks"]["event_loops"].is_null(),
        "{}",
        fell_back["checks"]
    );
    let (looped, stderr) = under("2048", "room");
    assert!(!stderr.contains("could not start"), "{stderr}");
    assert_eq!(u(&looped["checks"]["event_loops"]["loops"]), 100);
    for s in [&fell_back, &looped] {
        let gets = |s: &serde_json::Value| u(&s["operations"]["manifest_get"]["count"]);
        assert_eq!(gets(s), gets(&tasks));
        assert!(gets(s) > 0);
        assert_eq!(u(&s["totals"]["requests"]), u(&tasks["totals"]["requests"]));
    }
}

/// `--threads N` sizes the binary's runtime, and the CPU check counts what it was given.
#[test]
fn threads_sets_the_runtime_workers_half_the_cores_by_default_on_loopback_and_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, _) = write_trace(dir.path(), &small_trace());
    let registry = Registry::start();
    let out = dir.path().join("one-thread");
    let flags = ["--threads", "1", "--mode", "stress"];
    let s = replay_bin(&paths, &registry, &out, &flags, &[]);
    // The runtime's one worker, and stress mode's event loops (threads of their own).
    let loops = u(&s["checks"]["event_loops"]["loops"]);
    let available = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    assert_eq!(
        u(&s["checks"]["cores"]),
        available.min(1 + loops),
        "{}",
        s["checks"]
    );

    // Without the flag, a registry on loopback shares the machine: half the cores.
    let out = dir.path().join("default");
    let s = replay_bin(&paths, &registry, &out, &["--phase", "run"], &[]);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let loops = u(&s["checks"]["event_loops"]["loops"]);
    assert_eq!(
        u(&s["checks"]["cores"]),
        cores.min((cores / 2).max(1) + loops)
    );

    let refused = crate::common::run_bin(
        &[
            "replay",
            "--threads",
            "0",
            "x.json",
            "--registry",
            &registry.url,
        ],
        None,
        &[],
    );
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("--threads"), "{}", refused.stderr);
}

/// Stress mode's manifest GETs go on event loops: as many as the runtime's workers by
/// default (`--threads`; half the cores with a registry on loopback), as many as
/// `CREB_STRESS_LOOPS` says when set (never more than the slots), and the summary says how
/// many loops and how many GETs they sent; `CREB_STRESS_TASKS=1` runs every operation as a
/// task, with no loop to report. The operations carried out are the same either way.
#[test]
fn stress_modes_manifest_gets_go_on_event_loops_and_the_summary_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, _) = write_trace(dir.path(), &small_trace());
    let registry = Registry::start();
    let run = |name: &str, phase: &str, env: &[(&str, &str)]| {
        let flags = ["--phase", phase, "--mode", "stress", "--concurrency", "4"];
        replay_bin(&paths, &registry, &dir.path().join(name), &flags, env)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let default = run("default", "all", &[]);
    let two = run("two", "run", &[("CREB_THREADS", "2")]);
    let three = run("three", "run", &[("CREB_STRESS_LOOPS", "3")]);
    let more = run("more", "run", &[("CREB_STRESS_LOOPS", "9")]);
    let tasks = run("tasks", "run", &[("CREB_STRESS_TASKS", "1")]);
    let gets = u(&tasks["operations"]["manifest_get"]["count"]);
    assert!(gets > 0);
    let half = (cores / 2).max(1);
    for (s, loops) in [(&default, half.min(4)), (&two, 2), (&three, 3), (&more, 4)] {
        let looped = &s["checks"]["event_loops"];
        assert_eq!(u(&looped["loops"]), loops, "{looped}");
        // Every manifest GET of a known digest went on a loop; none of another kind did.
        let sent = u(&looped["manifest_gets"]);
        assert!(sent > 0 && sent <= gets, "{sent} of {gets}");
        assert_eq!(u(&s["operations"]["manifest_get"]["count"]), gets);
        assert_eq!(u(&s["totals"]["requests"]), u(&tasks["totals"]["requests"]));
        assert!(u(&s["checks"]["max_in_flight"]) <= 4, "{}", s["checks"]);
        // How long the loops' answers waited to be read: within the run, where stamped.
        let waited = &looped["answer_wait_ms"];
        if !waited.is_null() {
            let (mean, max) = (
                waited["mean"].as_f64().unwrap(),
                waited["max"].as_f64().unwrap(),
            );
            let run_ms = s["duration_s"].as_f64().unwrap() * 1000.0;
            assert!(
                0.0 <= mean && mean <= max && max <= run_ms,
                "{waited} in {run_ms} ms"
            );
        }
    }
    // Loopback stamps every answer once the first socket asked: the first run's are.
    let waited = &default["checks"]["event_loops"]["answer_wait_ms"];
    assert!(waited["max"].is_number(), "{}", default["checks"]);
    assert!(
        tasks["checks"]["event_loops"].is_null(),
        "{}",
        tasks["checks"]
    );
}

/// The run plans from the items the first pass spooled to a temporary file; where none can
/// be written (here `TMPDIR` does not exist and there is no output directory) it says so and
/// reads the trace again, to the same accounting.
#[test]
fn without_a_spool_the_run_reads_the_trace_again_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, _) = write_trace(dir.path(), &small_trace());
    let registry = Registry::start();
    let tmp = dir.path().to_str().unwrap().to_owned();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    let run = |phase: &str, tmpdir: &str| {
        let mut args = vec!["replay"];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        args.extend(["--registry", &registry.url, "--phase", phase, "--json"]);
        let run = crate::common::run_bin(&args, None, &[("TMPDIR", tmpdir)]);
        // 1: operations failed, which must be docker-registry's tag race (checked below).
        assert!(matches!(run.code, 0 | 1), "{}", run.stderr);
        let summary: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert!(run.code == 0 || summary["totals"]["errors"].as_u64() > Some(0));
        (summary, run.stderr)
    };
    let (spooled, stderr) = run("all", &tmp);
    assert!(!stderr.contains("reads the trace again"), "{stderr}");
    let (read_again, stderr) = run("run", missing);
    assert!(stderr.contains("reads the trace again"), "{stderr}");
    for s in [&spooled, &read_again] {
        assert_reconciled(s);
        registry.assert_no_errors_but_tag_races(s, "spool");
    }
    assert_eq!(spooled["trace"], read_again["trace"]);
    assert!(u(&spooled["trace"]["replayed"]) > 0);
}

#[tokio::test]
async fn a_malformed_record_names_its_file_and_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    std::fs::write(
        &path,
        r#"[{"timestamp":"2017-06-20T00:00:00.000Z","http.request.method":"GET","http.request.uri":"v2/a/b/manifests/t","http.response.status":200,"http.response.written":10},
{"timestamp":"not a time","http.request.method":"GET","http.request.uri":"v2/a/b/manifests/t"}]"#,
    )
    .unwrap();
    let registry = Registry::start();
    let r = crate::common::run_bin(
        &[
            "replay",
            path.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("bad.json") && r.stderr.contains("record 2"),
        "{}",
        r.stderr
    );

    let out = dir.path().join("out");
    let r = crate::common::run_bin(
        &[
            "replay",
            path.to_str().unwrap(),
            "--registry",
            &registry.url,
            "--skip-invalid",
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = summary_json(&out);
    assert_eq!(s["trace"]["skipped"]["invalid"], 1);
    assert_reconciled(&s);
}

/// `--phase run` after a prewarm made with other settings would read content the registry
/// never got: the run is refused, naming the settings; a prewarm that covers only part of
/// what the run reads is a warning in the result; the same settings run clean.
#[test]
fn a_run_whose_prewarm_used_other_settings_is_refused_with_the_fix() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", trace, "--registry", &registry.url, "--quiet"];
        args.extend(extra);
        crate::common::run_bin(&args, None, &[])
    };
    let prewarm = replay(&[
        "--phase",
        "prewarm",
        "--seed",
        "7",
        "--limit-requests",
        "150",
    ]);
    assert_eq!(prewarm.code, 0, "{}", prewarm.stderr);

    let other_seed = replay(&["--phase", "run", "--seed", "8", "--limit-requests", "150"]);
    assert_eq!(other_seed.code, 2, "{}", other_seed.stderr);
    assert!(
        other_seed
            .stderr
            .contains("the registry does not hold what this run reads")
            && other_seed.stderr.contains("--seed 8")
            && other_seed
                .stderr
                .contains("run --phase prewarm with the same --seed"),
        "{}",
        other_seed.stderr
    );
    let other_prefix = replay(&[
        "--phase",
        "run",
        "--seed",
        "7",
        "--limit-requests",
        "150",
        "--repo-prefix",
        "elsewhere",
    ]);
    assert_eq!(other_prefix.code, 2, "{}", other_prefix.stderr);
    assert!(
        other_prefix.stderr.contains("elsewhere"),
        "{}",
        other_prefix.stderr
    );

    // More of the trace than was prewarmed: some of it is missing, and the result says so.
    let out = dir.path().join("more");
    let more = replay(&[
        "--phase",
        "run",
        "--seed",
        "7",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    // What was not prewarmed fails to read: failed operations, so exit 1.
    assert_eq!(more.code, 1, "{}", more.stderr);
    let summary = summary_json(&out);
    assert!(summary["totals"]["errors"].as_u64() > Some(0), "{summary}");
    let warnings = summary["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w["kind"] == "prewarm_missing"),
        "{warnings:?}"
    );

    // A window of another selection than the prewarm's: its objects differ (blob sizes
    // follow the records read), so it refuses to start, naming the flag and the fix;
    // --force runs it anyway, warned.
    let window = replay(&["--phase", "run", "--seed", "7", "--limit-requests", "100"]);
    assert_eq!(window.code, 2, "{}", window.stderr);
    assert!(
        window
            .stderr
            .contains("--limit-requests 100 selects a window")
            && window
                .stderr
                .contains("replay --phase prewarm --limit-requests 100"),
        "{}",
        window.stderr
    );
    let out = dir.path().join("forced");
    let forced = replay(&[
        "--phase",
        "run",
        "--seed",
        "7",
        "--limit-requests",
        "100",
        "--force",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert_ne!(forced.code, 2, "{}", forced.stderr);
    assert!(
        summary_json(&out)["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "prewarm_missing"),
        "{}",
        forced.stderr
    );

    // The prewarm's own settings: no warning, no error.
    let out = dir.path().join("same");
    let same = replay(&[
        "--phase",
        "run",
        "--seed",
        "7",
        "--limit-requests",
        "150",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let summary = summary_json(&out);
    registry.assert_exit_but_tag_races(same.code, &summary, "same settings");
    assert!(
        !summary["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "prewarm_missing"),
        "{summary}"
    );
    registry.assert_no_errors_but_tag_races(&summary, "same settings");
}

/// Without a terminal (a CI log), a run prints a plain progress line every interval, with
/// its live p99 and schedule lag, instead of staying silent; `--quiet` prints none.
#[test]
fn without_a_terminal_progress_is_a_line_per_interval() {
    let registry = Registry::start();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let args = |quiet: bool| {
        let mut a = vec![
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--mode",
            "delay",
            "--limit-duration",
            "5s",
        ];
        if quiet {
            a.push("--quiet");
        }
        a
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("first");
    let mut first = args(false);
    first.extend(["--output-dir", out.to_str().unwrap()]);
    let r = crate::common::run_bin(&first, None, &[("CREB_PROGRESS_INTERVAL", "1s")]);
    registry.assert_exit_but_tag_races(r.code, &summary_json(&out), &r.stderr);
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("creb-rs: delay "))
        .collect();
    assert!(lines.len() >= 3, "{}", r.stderr);
    for line in &lines {
        for part in ["records", "/s", "errors", "ETA"] {
            assert!(line.contains(part), "'{part}' not in: {line}");
        }
    }
    // The live figures are those of the last interval: one in which nothing completed
    // shows none, so they are looked for in any line.
    for part in ["p99≈", "lag p99≈"] {
        assert!(
            lines.iter().any(|l| l.contains(part)),
            "'{part}' in no line:\n{}",
            r.stderr
        );
    }
    let out = dir.path().join("quiet");
    let mut quiet_args = args(true);
    quiet_args.extend(["--output-dir", out.to_str().unwrap()]);
    let quiet = crate::common::run_bin(&quiet_args, None, &[("CREB_PROGRESS_INTERVAL", "1s")]);
    registry.assert_exit_but_tag_races(quiet.code, &summary_json(&out), &quiet.stderr);
    assert_eq!(quiet.stderr, "");

    // Waiting for --start-at, the line counts down to it instead of showing a share.
    let start = std::time::SystemTime::now() + std::time::Duration::from_secs(3);
    let start = humantime::format_rfc3339_millis(start).to_string();
    let out = dir.path().join("later");
    let mut later = args(false);
    later.extend([
        "--phase",
        "run",
        "--start-at",
        &start,
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let r = crate::common::run_bin(&later, None, &[("CREB_PROGRESS_INTERVAL", "500ms")]);
    registry.assert_exit_but_tag_races(r.code, &summary_json(&out), &r.stderr);
    let waiting: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("creb-rs: delay starts in "))
        .collect();
    assert!(waiting.len() >= 2, "{}", r.stderr);
    // No share (nor ETA) is shown before the start.
    let lines: Vec<&str> = r.stderr.lines().collect();
    let last_wait = lines.iter().rposition(|l| l.contains("starts in")).unwrap();
    assert!(
        !lines[..last_wait]
            .iter()
            .any(|l| l.starts_with("creb-rs: delay ") && l.contains('%')),
        "{}",
        r.stderr
    );
}

/// The prewarm says before what it will push in the units it reports after.
#[test]
fn prewarm_counts_the_same_objects_before_and_after() {
    let registry = Registry::start();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let r = crate::common::run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--phase",
            "prewarm",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let number_before = |text: &str, marker: &str| -> u64 {
        let end = text
            .find(marker)
            .unwrap_or_else(|| panic!("'{marker}' in {text}"));
        text[..end]
            .split_whitespace()
            .last()
            .unwrap()
            .parse()
            .unwrap()
    };
    let planned = r
        .stderr
        .lines()
        .find(|l| l.contains("manifests to push"))
        .expect("the plan line");
    // The content the run reads goes first (hashed as it is sent), then the rest.
    let first = r
        .stderr
        .lines()
        .find(|l| l.contains("blobs the run reads"))
        .expect("the first stage's line");
    let done = r
        .stdout
        .lines()
        .find(|l| l.starts_with("prewarm: "))
        .expect("the tally line");
    assert_eq!(
        number_before(first, " blobs the run reads") + number_before(planned, " blobs (layers"),
        number_before(done, " blobs pushed") + number_before(done, " present;"),
        "{first}\n{planned}\n{done}"
    );
    assert_eq!(
        number_before(planned, " manifests to push"),
        number_before(done, " manifests pushed")
            + number_before(&done[done.find("manifests pushed").unwrap()..], " present;"),
        "{planned}\n{done}"
    );
}

/// The replay engine below the command layer: one prepared replay (connected, read, hashed,
/// prewarmed once) measured again at other speeds and over a window of the trace's time,
/// each a function call returning its own unpublished result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_replay_runs_again_at_another_speed_and_window_as_a_library_call() {
    use clap::Parser as _;
    use creb::commands::{Cli, Command};
    use creb::replay::{Engine, Ready, ReplayConfig, Window};
    use creb::results::RunOutput;
    use creb::session::{OutputOptions, Session};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let (paths, stats, span_ms) = write_trace(dir.path(), &small_trace());
    let registry = Registry::start();
    let mut argv = vec!["creb-rs", "replay"];
    argv.extend(paths.iter().map(|p| p.to_str().unwrap()));
    argv.extend(["--registry", &registry.url, "--mode", "delay"]);
    let Command::Replay(args) = Cli::try_parse_from(argv).unwrap().command else {
        unreachable!()
    };
    let cfg = ReplayConfig::try_from(&*args).unwrap();
    let input = creb::trace::TraceInput::resolve(&cfg.traces).unwrap();
    let options = OutputOptions {
        quiet: true,
        ..OutputOptions::default()
    };
    let names = cfg.registry.endpoint_names();
    let labels = creb::replay::labels(&cfg);
    let session = Session::open(&options, labels, &names, 0).await.unwrap();
    let stop = creb::Shutdown::new();
    let (mut engine, checked) = Engine::connect(cfg, input, &stop).await.unwrap();
    checked.unwrap();
    assert_eq!(engine.prepare(&session, &stop).await.unwrap(), Ready::Yes);
    assert_eq!(
        engine.prewarm(&session, &stop).await.unwrap(),
        ExitStatus::Success
    );
    let output = RunOutput {
        dir: None,
        ..session.output.clone()
    };
    let whole = engine
        .measure(40.0, None, None, &session, &output, &stop)
        .await
        .unwrap();
    let records = |s: &creb::results::Summary| s.trace.as_ref().unwrap().records;
    assert_eq!(records(&whole.summary), stats.records);
    assert_eq!(whole.summary.config["speed"], 40.0);
    // The last quarter of the trace's time, at a quarter of that speed: fewer records, every
    // one accounted for, its schedule starting at the window's start (not three quarters of
    // the trace late). At 10x the two schedules differ by more than a second, far beyond what
    // service times on a loaded machine add.
    let quarter = Duration::from_millis(span_ms as u64 / 4);
    let window = Window {
        from: quarter * 3,
        length: Some(quarter),
    };
    let part = engine
        .measure(10.0, Some(window), None, &session, &output, &stop)
        .await
        .unwrap();
    let n = records(&part.summary);
    assert!(
        n > stats.records / 8 && n < stats.records / 2,
        "{n} of {} records in the last quarter",
        stats.records
    );
    let json = serde_json::to_value(&part.summary).unwrap();
    assert_reconciled(&json);
    assert_eq!(part.summary.config["speed"], 10.0);
    assert_eq!(
        part.summary.config["window"]["from_s"].as_f64().unwrap(),
        window.from.as_secs_f64()
    );
    // Scheduled from the window's start it lasts about a quarter of the trace at 10x; from
    // the trace's start it would last the whole trace at 10x. The bound is half way.
    let bound = (quarter * 5).div_f64(2.0 * 10.0);
    assert!(
        part.summary.duration_s < bound.as_secs_f64(),
        "{} s for a window a quarter of the trace long at 10x (bound {bound:?}; from the \
         trace's start: {:?})",
        part.summary.duration_s,
        (quarter * 4).div_f64(10.0)
    );
    drop(engine);
    session.close().await;
}

/// A GET of `uri` by `client`, `written` bytes, `time_ms` into the trace.
fn get(i: u64, time_ms: u64, client: &str, uri: &str, written: u64) -> serde_json::Value {
    serde_json::json!({
        "host": "h1",
        "http.request.duration": 0.001,
        "http.request.method": "GET",
        "http.request.remoteaddr": client,
        "http.request.uri": uri,
        "http.response.status": 200,
        "http.response.written": written,
        "id": format!("a{i}"),
        "timestamp": format!("2017-06-20T10:00:{:02}.{:03}Z", time_ms / 1000, time_ms % 1000),
    })
}

/// Replays `records` (written as `dir/trace.json`) against a fresh docker-registry with
/// `args`, successfully, into `dir/out`, which it returns.
async fn replay_records(dir: &Path, records: &[serde_json::Value], args: &[&str]) -> PathBuf {
    let trace = dir.join("trace.json");
    std::fs::write(&trace, serde_json::to_vec(records).unwrap()).unwrap();
    let registry = Registry::start();
    let out = dir.join("out");
    let mut all = vec![
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
    ];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--output-dir", out.to_str().unwrap(), "--quiet"]);
    assert_eq!(creb(&all).await, ExitStatus::Success);
    out
}

/// A trace whose costly repository is known: `data/large` is read 4 times as a 32 MiB blob
/// by one client; `apps/small` 12 times as 256 bytes by three others (the most requests,
/// a fraction of the time, on an idle machine or a loaded one). The replay's results say
/// which repository and which client cost the most, and requests.csv names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repository_and_client_that_cost_most_top_the_lists() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = Vec::new();
    const SMALL: u64 = 12;
    const LARGE: u64 = 32 << 20;
    for i in 0..SMALL {
        let client = format!("10.0.0.{}", 2 + i % 3);
        records.push(get(i, i * 100, &client, "v2/apps/small/blobs/s1", 256));
    }
    for i in 0..4u64 {
        let large = "v2/data/large/blobs/l1";
        records.push(get(100 + i, i * 300, "10.0.0.1", large, LARGE));
    }
    let args = [
        "--mode",
        "stress",
        "--concurrency",
        "2",
        "--record-requests",
    ];
    let out = replay_records(dir.path(), &records, &args).await;
    let run = summary_json(&out);
    let repos = run["by_repository"].as_array().unwrap();
    assert_eq!(repos.len(), 2, "{repos:?}");
    let top = &repos[0];
    assert_eq!(top["name"], "data/large", "{repos:?}");
    assert_eq!(u(&top["count"]), 4);
    assert_eq!(u(&top["bytes"]), 4 * LARGE);
    assert_eq!(top["exact"], true);
    let top_by: Vec<&str> = top["top_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(top_by, ["requests", "time", "bytes"]);
    assert!(top["latency_ms"]["p50"].as_f64().unwrap() > 0.0);
    assert_eq!(u(&repos[1]["count"]), SMALL);
    assert!(top["time_s"].as_f64() > repos[1]["time_s"].as_f64());
    let clients = run["by_client"].as_array().unwrap();
    assert_eq!(clients.len(), 4, "{clients:?}");
    assert_eq!(clients[0]["name"], "10.0.0.1");
    assert_eq!(run["attribution"]["repositories_complete"], true);
    assert_eq!(run["attribution"]["clients_complete"], true);
    // The counts add up to the run's operations.
    let total: u64 = repos.iter().map(|r| u(&r["count"])).sum();
    assert_eq!(total, u(&run["totals"]["requests"]));
    // requests.csv names each request's repository and client.
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(&header[header.len() - 2..], ["repository", "client"]);
    let large = csv
        .lines()
        .filter(|l| l.ends_with(",data/large,10.0.0.1"))
        .count();
    assert_eq!(large, 4, "{csv}");
    // And the text report lists them.
    let text = creb::report::render_text(&serde_json::from_value(run).unwrap());
    assert!(text.contains("repository (by time)"), "{text}");
    assert!(text.contains("data/large"), "{text}");
}

/// One client pulls the same image every 2 s of trace time (a manifest GET, then its
/// layer). Each pull ends at the client's next one, so its `image_pull` is recorded in the
/// interval it ended in: timeline.csv spreads the pulls over the run instead of holding
/// them all in its last interval, as it did while a pull stayed open until the session
/// gap or the trace's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pull_is_recorded_in_the_interval_it_ended_in() {
    const PULLS: u64 = 12;
    let dir = tempfile::tempdir().unwrap();
    let mut records = Vec::new();
    for i in 0..PULLS {
        let client = "10.0.0.9";
        records.push(get(
            2 * i,
            i * 2000,
            client,
            "v2/apps/web/manifests/v1",
            1024,
        ));
        let blob = "v2/apps/web/blobs/layer1";
        records.push(get(2 * i + 1, i * 2000 + 100, client, blob, 4096));
    }
    let args = ["--mode", "delay", "--speed", "4", "--interval", "1s"];
    let out = replay_records(dir.path(), &records, &args).await;
    assert_eq!(
        u(&summary_json(&out)["sessions"]["image_pull"]["count"]),
        PULLS
    );
    let mut reader = csv::Reader::from_path(out.join("timeline.csv")).unwrap();
    let column = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "image_pull_count")
        .expect("an image_pull_count column");
    let per_interval: Vec<u64> = reader
        .records()
        .map(|r| r.unwrap()[column].parse().unwrap())
        .collect();
    assert_eq!(per_interval.iter().sum::<u64>(), PULLS, "{per_interval:?}");
    // 22 s of trace at 4x: about 6 intervals, a pull every half second.
    let busy = per_interval.iter().filter(|&&n| n > 0).count();
    let most = per_interval.iter().copied().max().unwrap_or(0);
    assert!(
        busy >= 4 && most <= PULLS / 2,
        "image_pull per interval: {per_interval:?}"
    );
}

/// Slowness ranked: behind a proxy that holds every GET of `apps/slow` and `apps/one` 40 ms,
/// `apps/slow` (30 GETs) tops the latency ranking, `apps/fast` (30 GETs) follows, and
/// `apps/one` — a single slow GET — is not ranked (fewer than 20 successes); the text
/// report lists the slowest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slowest_repositories_are_ranked_with_a_minimum_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = Vec::new();
    for i in 0..30u64 {
        records.push(get(i, i * 50, "10.0.0.2", "v2/apps/fast/blobs/f1", 256));
        records.push(get(
            100 + i,
            i * 50 + 5,
            "10.0.0.3",
            "v2/apps/slow/blobs/s1",
            256,
        ));
    }
    records.push(get(200, 10, "10.0.0.4", "v2/apps/one/blobs/o1", 256));
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, serde_json::to_vec(&records).unwrap()).unwrap();
    let registry = Registry::start();
    let proxy = crate::common::faults::FaultProxy::start(
        registry.port,
        crate::common::faults::Fault::Delay(std::time::Duration::from_millis(40)),
    );
    proxy.set_filter(|method, path| {
        method == "GET" && (path.contains("/apps/slow/") || path.contains("/apps/one/"))
    });
    let out = dir.path().join("out");
    let status = creb(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &proxy.url,
        "--mode",
        "stress",
        "--concurrency",
        "4",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let run = summary_json(&out);
    let repos = run["by_repository"].as_array().unwrap();
    let ranked = |name: &str| {
        repos.iter().find(|r| r["name"] == name).map(|r| {
            r["top_by"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b == "latency")
        })
    };
    assert_eq!(ranked("apps/slow"), Some(true), "{repos:?}");
    assert_eq!(ranked("apps/fast"), Some(true), "{repos:?}");
    assert_ne!(ranked("apps/one"), Some(true), "{repos:?}");
    // The held GETs take the 40 ms at least; the others only what the machine adds, which on
    // a loaded two-core runner can itself reach tens of milliseconds, so they are compared
    // with the held ones rather than with a fixed bound.
    let latency = |name: &str, at: &str| {
        repos.iter().find(|r| r["name"] == name).unwrap()["latency_ms"][at]
            .as_f64()
            .unwrap()
    };
    assert!(
        latency("apps/slow", "p50") >= 40.0
            && latency("apps/fast", "p50") < latency("apps/slow", "p50"),
        "{repos:?}"
    );
    let text = creb::report::render_text(&serde_json::from_value(run).unwrap());
    let slowest = text
        .split("slowest repository")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let first = slowest.lines().nth(1).unwrap();
    assert!(first.starts_with("apps/slow"), "{text}");
    assert!(!slowest.contains("apps/one"), "{text}");
}

/// A prewarm repeated on the same dataset sends no blob the registry holds, and a run after
/// it computes no digest, without `--digest-cache`: the dataset's default cache (here in
/// `CREB_CACHE_DIR`) holds them. `--no-digest-cache` keeps none.
#[test]
fn a_repeated_prewarm_sends_nothing_and_a_run_after_it_computes_no_digest() {
    let dir = tempfile::tempdir().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let cache = dir.path().join("cache");
    let env = [("CREB_CACHE_DIR", cache.to_str().unwrap())];
    let registry = Registry::start();
    let replay = |phase: &str, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--phase",
            phase,
            "--output-dir",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let r = crate::common::run_bin(&args, None, &env);
        let summary = summary_json(out);
        // docker-registry 2.8 may answer a manifest PUT 500 in its tag race (tests/common):
        // the only failure allowed.
        registry.assert_exit_but_tag_races(r.code, &summary, &format!("{phase}: {}", r.stderr));
        (summary, format!("{}{}", r.stdout, r.stderr))
    };
    let (first, _) = replay("prewarm", &dir.path().join("p1"), &[]);
    let pushed = u(&first["operations"]["blob_upload"]["ok"]);
    assert!(pushed > 0, "{first}");
    let names: Vec<String> = std::fs::read_dir(cache.join("digests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let datasets: Vec<&String> = names.iter().filter(|n| n.ends_with(".digests")).collect();
    assert_eq!(datasets.len(), 1, "one file for the dataset: {names:?}");
    // Beside it, the frame CRCs of its gzip layers of 1 MiB or more; nothing else.
    let frames = format!("{}.frames", datasets[0]);
    assert!(names.contains(&frames), "{names:?}");
    assert_eq!(names.len(), 2, "{names:?}");

    let (second, stderr) = replay("prewarm", &dir.path().join("p2"), &[]);
    assert_eq!(
        u(&second["operations"]["blob_upload"]["count"]),
        0,
        "{stderr}"
    );
    assert_eq!(u(&second["events"]["blob_exists"]), pushed, "{stderr}");
    assert!(stderr.contains("0 blobs pushed"), "{stderr}");

    let out = dir.path().join("run");
    let (_, stderr) = replay("run", &out, &["--mode", "stress", "--no-verify"]);
    let meta = summary_json_file(&out.join("meta.json"));
    let digests = &meta["preparation"]["digests"];
    assert_eq!(u(&digests["computed"]), 0, "{stderr}");
    assert!(u(&digests["cached"]) > 0, "{digests}");
    assert!(u(&digests["checked"]) <= 16, "{digests}");

    // Without a cache the run computes every digest again.
    let out = dir.path().join("none");
    replay(
        "run",
        &out,
        &["--mode", "stress", "--no-digest-cache", "--no-verify"],
    );
    let meta = summary_json_file(&out.join("meta.json"));
    assert_eq!(meta["preparation"]["digests"]["cached"], 0);
    assert!(u(&meta["preparation"]["digests"]["computed"]) > 0);
}

fn summary_json_file(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `--strict` turns a baseline gate that cannot decide into a failure: a replay gated on a
/// p99 its few samples give no interval of is `undecided` (exit 0, warned), and exit 1 under
/// `--strict`.
#[test]
fn strict_makes_an_undecided_baseline_gate_fail() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = vec![
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--limit-requests",
            "120",
            "--no-digest-cache",
            "--quiet",
            "--output-dir",
        ];
        let out_str = out.to_str().unwrap().to_owned();
        args.push(&out_str);
        args.extend_from_slice(extra);
        let r = crate::common::run_bin(&args, None, &[]);
        (r, out)
    };
    // docker-registry 2.8's tag race may fail an operation: tolerated, so that only the
    // gate decides the exit.
    let tolerant = ["--max-errors", "100%"];
    let (base, _) = run("base", &tolerant);
    assert_eq!(base.code, 0, "{}", base.stderr);
    let (plain_strict, _) = run("plain-strict", &["--max-errors", "100%", "--strict"]);
    assert_eq!(plain_strict.code, 0, "{}", plain_strict.stderr);
    let base_dir = dir.path().join("base").to_str().unwrap().to_owned();
    let mut gate = vec![
        "--baseline",
        &base_dir,
        "--fail-if",
        "p99(blob_get) > baseline * 1.10",
    ];
    gate.extend(tolerant);
    let (lenient, out) = run("lenient", &gate);
    let s = summary_json(&out);
    assert_eq!(s["thresholds"][0]["verdict"], "undecided", "{s}");
    assert_eq!(lenient.code, 0, "{}\n{s}", lenient.stderr);
    gate.push("--strict");
    let (strict, out) = run("strict", &gate);
    let s = summary_json(&out);
    assert_eq!(s["thresholds"][0]["verdict"], "undecided", "{s}");
    assert_eq!(strict.code, 1, "{}\n{s}", strict.stderr);
}
