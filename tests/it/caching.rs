//! Caches in front of a registry, as they are deployed: Debian's nginx with `proxy_cache`
//! in front of Debian's docker-registry, caching blob GETs and saying `X-Cache-Status`.
//!
//! - `--split-by-header X-Cache-Status`: the first GET of each blob is a `MISS` and the
//!   next a `HIT`, in summary.json and in the live metrics (`--metrics-listen`); what no
//!   cache answers (manifests pass through) is `BYPASS`, and the values of a header with
//!   many of them stay bounded.
//! - The cache simulation (`simulate cache`, LRU) held against the real cache at two
//!   capacities, the measured hit ratio within a few points of the predicted one.

use std::time::{Duration, Instant};

use crate::common::nginx::{blob_cache, Nginx, NginxOptions};
use crate::common::{free_port, http_get, run_bin, summary_json, Registry};

/// `summary.split_by_header.values.<value>.<op>.<field>` (0 when absent).
fn split_count(summary: &serde_json::Value, value: &str, op: &str, field: &str) -> u64 {
    summary["split_by_header"]["values"][value][op][field]
        .as_u64()
        .unwrap_or(0)
}

fn push(registry: &str, repo: &str, layers: &str) {
    let r = run_bin(
        &[
            "push",
            "--registry",
            registry,
            "--repo",
            repo,
            "--layers",
            layers,
            "--layer-size",
            "64KiB",
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "push: {}", r.stderr);
}

/// Pulls `repo` through `url` split by `X-Cache-Status`, serving the live metrics on
/// `metrics_port` until a scrape after the run got them: the summary and that scrape.
fn pull_split(url: &str, repo: &str, dir: &std::path::Path) -> (serde_json::Value, String) {
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let summary_path = dir.join("summary.json");
    let scraper = std::thread::spawn(move || {
        // The summary is written before the endpoint lingers: a scrape then sees it all.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !summary_path.exists() {
            assert!(Instant::now() < deadline, "the pull wrote no summary");
            std::thread::sleep(Duration::from_millis(20));
        }
        http_get(&format!("http://127.0.0.1:{metrics_port}/metrics")).expect("scrape")
    });
    let extra = ["--metrics-listen", &listen, "--metrics-linger", "5s"];
    let summary = pull(url, repo, "X-Cache-Status", dir, &extra);
    (summary, scraper.join().unwrap())
}

/// Pulls `repo` through `url` split by `header`, results in `dir`: the summary.
fn pull(
    url: &str,
    repo: &str,
    header: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "pull",
        "--registry",
        url,
        "--repo",
        repo,
        "--split-by-header",
        header,
        "--output-dir",
        dir.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "pull: {}", r.stderr);
    summary_json(dir)
}

/// The value of the live series `name{labels…}` whose labels include every `want`.
fn scraped(metrics: &str, name: &str, want: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| want.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[test]
fn through_an_nginx_cache_the_first_get_of_a_blob_misses_and_the_next_hits() {
    let registry = Registry::start();
    let cache = tempfile::tempdir().unwrap();
    let nginx = Nginx::start(blob_cache(registry.port, cache.path(), "64m"));
    push(&registry.url, "cached/app", "3");
    let out = tempfile::tempdir().unwrap();

    // Cold: every blob (three layers and the config) is fetched from the registry.
    let (cold, metrics) = pull_split(&nginx.url, "cached/app", &out.path().join("cold"));
    assert_eq!(cold["split_by_header"]["header"], "x-cache-status");
    assert_eq!(split_count(&cold, "MISS", "blob_get", "ok"), 4, "{cold}");
    assert_eq!(split_count(&cold, "HIT", "blob_get", "count"), 0, "{cold}");
    // Manifests are not cached: they pass by the cache.
    assert_eq!(split_count(&cold, "BYPASS", "manifest_get", "ok"), 1);
    // Each value's latency is of its own samples.
    assert!(cold["split_by_header"]["values"]["MISS"]["blob_get"]["latency_ms"]["p50"].is_number());
    let live = "creb_header_operations_total";
    let miss = [
        "operation=\"blob_get\"",
        "header_value=\"MISS\"",
        "outcome=\"ok\"",
    ];
    assert_eq!(scraped(&metrics, live, &miss), 4, "{metrics}");

    // Warm: every blob comes from the cache.
    let (warm, metrics) = pull_split(&nginx.url, "cached/app", &out.path().join("warm"));
    assert_eq!(split_count(&warm, "HIT", "blob_get", "ok"), 4, "{warm}");
    assert_eq!(split_count(&warm, "MISS", "blob_get", "count"), 0, "{warm}");
    let hit = [
        "operation=\"blob_get\"",
        "header_value=\"HIT\"",
        "outcome=\"ok\"",
    ];
    assert_eq!(scraped(&metrics, live, &hit), 4, "{metrics}");
    let hist = "creb_header_response_seconds_count";
    let hit_latency = ["operation=\"blob_get\"", "header_value=\"HIT\""];
    assert_eq!(scraped(&metrics, hist, &hit_latency), 4, "{metrics}");
    // The text report has a line per operation and value.
    let report = run_bin(
        &["report", out.path().join("warm").to_str().unwrap()],
        None,
        &[],
    );
    assert_eq!(report.code, 0, "{}", report.stderr);
    let line = report
        .stdout
        .lines()
        .find(|l| l.starts_with("blob_get") && l.contains(" HIT "))
        .unwrap_or_else(|| panic!("no HIT line: {}", report.stdout));
    assert!(line.contains(" 4 ") && line.contains("100.0%"), "{line}");
    // So has the HTML report, in its own section.
    let html = out.path().join("warm.html");
    let r = run_bin(
        &[
            "report",
            out.path().join("warm").to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    let section = &page[page.find("id=\"split\"").expect("a split section")..];
    assert!(section.contains("<code>x-cache-status</code>"));
    assert!(section.contains("<td class=\"name\">HIT</td>"), "{section}");
    // What the cache saved: the hit ratios, cold and warm, by operations and by bytes.
    let ratio = |s: &serde_json::Value, op: &str, by: &str| {
        s["split_by_header"]["hit_ratio"][op][by].as_f64().unwrap()
    };
    assert_eq!(ratio(&cold, "blob_get", "requests"), 0.0, "{cold}");
    assert_eq!(ratio(&warm, "blob_get", "requests"), 1.0, "{warm}");
    assert_eq!(ratio(&warm, "blob_get", "bytes"), 1.0, "{warm}");
    // Over all operations the manifest's and the ping's BYPASS count against: 4 hits of 6.
    assert_eq!(ratio(&warm, "all", "requests"), 0.6667, "{warm}");
    assert!(
        report.stdout.contains("cache hits: 66.7% of operations"),
        "{}",
        report.stdout
    );
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/summary.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for s in [&cold, &warm] {
        let errors: Vec<String> = validator.iter_errors(s).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
    // Over time (split.csv), on the page as a chart linked from the navigation.
    let rows = std::fs::read_to_string(out.path().join("warm").join("split.csv")).unwrap();
    assert!(
        rows.starts_with("interval,start_s,value,completed,bytes\n"),
        "{rows}"
    );
    let hits: u64 = rows
        .lines()
        .filter(|l| l.split(',').nth(2) == Some("HIT"))
        .map(|l| l.split(',').nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(hits, 4, "{rows}");
    assert!(
        page.contains("<a href=\"#fig-cache-hit-ratio\">"),
        "no link to the chart"
    );
    assert!(page.contains("data-chart=\"cache-hit-ratio\""));
    assert!(page.contains("data-chart=\"cache-latency\""));
    assert!(page.contains("id=\"hit-ratio\""));
    // The CSV report has a row per operation and value.
    let csv = run_bin(
        &[
            "report",
            out.path().join("warm").to_str().unwrap(),
            "--format",
            "csv",
        ],
        None,
        &[],
    );
    assert_eq!(csv.code, 0, "{}", csv.stderr);
    assert!(
        csv.stdout.lines().next().unwrap().ends_with(",value"),
        "{}",
        csv.stdout
    );
    assert!(
        csv.stdout
            .lines()
            .any(|l| l.starts_with("blob_get,4,") && l.ends_with(",HIT")),
        "{}",
        csv.stdout
    );
    // And compare shows both runs' hit ratios side by side.
    let cmp = run_bin(
        &[
            "compare",
            out.path().join("cold").to_str().unwrap(),
            out.path().join("warm").to_str().unwrap(),
        ],
        None,
        &[],
    );
    let line = cmp
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("cache hits"))
        .find(|l| l.starts_with("blob_get"))
        .unwrap_or_else(|| panic!("no hit ratio line: {}{}", cmp.stdout, cmp.stderr));
    assert!(line.contains("0.0%/100.0%"), "{line}");
    // The split adds up to the operations it splits.
    let total: u64 = warm["split_by_header"]["values"]
        .as_object()
        .unwrap()
        .values()
        .map(|ops| ops["blob_get"]["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(
        total,
        warm["operations"]["blob_get"]["count"].as_u64().unwrap()
    );
}

/// A header with a new value on every answer (`X-Request-Id`-like): 16 values kept apart,
/// the rest `(other)`, however many requests there are.
#[test]
fn a_header_with_many_values_stays_bounded() {
    let registry = Registry::start();
    let nginx = Nginx::start(NginxOptions {
        upstream_port: Some(registry.port),
        location_extra: "add_header X-Served-By $request_id always;\n".to_owned(),
        ..NginxOptions::default()
    });
    push(&registry.url, "many/app", "30");
    let out = tempfile::tempdir().unwrap();
    let summary = pull(
        &nginx.url,
        "many/app",
        "x-served-by",
        &out.path().join("pull"),
        &[],
    );
    let values = summary["split_by_header"]["values"].as_object().unwrap();
    // 33 answers (the ping, the manifest, the config, 30 layers), each its own value: 16
    // kept apart, 17 other.
    assert_eq!(values.len(), 17, "{values:?}");
    let other: u64 = values["(other)"]
        .as_object()
        .unwrap()
        .values()
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    assert_eq!(other, 33 - 16, "{summary}");
}

/// `simulate cache` at `percents` of the working set, one LRU tier as big as each: for
/// each, the capacity it simulated (bytes, at the trace's sizes) and its hit ratio.
fn simulated(trace: &std::path::Path, percents: &str) -> Vec<(u64, f64)> {
    let r = run_bin(
        &[
            "simulate",
            "cache",
            trace.to_str().unwrap(),
            "--sweep",
            percents,
            "--ssd-factor",
            "0",
            "--memory-max-object",
            "1TiB",
            "--json",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "simulate: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let t = &p["two_tier"];
            (
                t["config"]["memory_bytes"].as_u64().unwrap(),
                t["overall"]["hit_ratio"]["overall"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The cache simulation held against a real cache: a synthetic dal trace replayed in trace
/// order (one operation at a time) through nginx caches as big as 5% and 20% of the
/// layers it reads (scaled as the replay scales sizes), each measured hit ratio beside what
/// `simulate cache` predicts for the same capacity and policy (LRU).
#[test]
fn the_cache_simulation_holds_against_a_real_nginx_cache() {
    let work = tempfile::tempdir().unwrap();
    let trace = work.path().join("dal.json");
    let r = run_bin(
        &[
            "trace",
            "synth",
            "--profile",
            "dal",
            "--requests",
            "4000",
            "--seed",
            "3",
            "-o",
            trace.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "synth: {}", r.stderr);
    let scale = 0.01;
    let registry = Registry::start();
    let replay = |url: &str, extra: &[&str]| {
        let mut args = vec![
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            url,
            "--size-scale",
            "0.01",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        run_bin(&args, None, &[])
    };
    let r = replay(&registry.url, &["--phase", "prewarm"]);
    assert_eq!(r.code, 0, "prewarm: {}", r.stderr);
    for (capacity, predicted) in simulated(&trace, "5%,20%") {
        let cache = tempfile::tempdir().unwrap();
        let max_size = format!("{}k", ((capacity as f64 * scale) as u64 / 1024).max(1));
        let nginx = Nginx::start(blob_cache(registry.port, cache.path(), &max_size));
        let dir = work.path().join(format!("run-{capacity}"));
        let r = replay(
            &nginx.url,
            &[
                "--phase",
                "run",
                "--mode",
                "stress",
                "--concurrency",
                "1",
                "--split-by-header",
                "X-Cache-Status",
                "--output-dir",
                dir.to_str().unwrap(),
            ],
        );
        let summary = summary_json(&dir);
        registry.assert_exit_but_tag_races(r.code, &summary, &r.stderr);
        let hits = split_count(&summary, "HIT", "blob_get", "ok") as f64;
        let misses = split_count(&summary, "MISS", "blob_get", "ok") as f64;
        let measured = hits / (hits + misses);
        eprintln!(
            "capacity {max_size}: measured {measured:.3} ({hits} hits, {misses} misses), simulated {predicted:.3}"
        );
        // Within a few points (docs/caching.md says what separates them).
        assert!(
            (measured - predicted).abs() <= 0.05,
            "capacity {max_size}: measured {measured:.3}, simulated {predicted:.3}"
        );
        // Hits and misses each have their latency.
        for value in ["HIT", "MISS"] {
            let latency = &summary["split_by_header"]["values"][value]["blob_get"]["latency_ms"];
            assert!(latency["p50"].is_number(), "{value}: {summary}");
        }
    }
}
