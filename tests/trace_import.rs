//! `trace import` round trips on real components: a workload of pushes (monolithic and
//! chunked), pulls, HEAD misses and tag lists is driven through docker-registry with its
//! JSON request log, and through nginx in front of it with the log_format docs/traces.md
//! gives; each log is imported, the trace validates, and its replay against a fresh
//! registry makes the same operations, per kind, with zero errors. The anonymized trace
//! holds none of the workload's names, and the same key gives the same trace.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::nginx::{Nginx, NginxOptions};
use common::{run_bin, summary_json, Registry, RegistryOptions};

/// The `log_format` docs/traces.md gives for nginx: `combined`, then the times.
const NGINX_FORMAT: &str = r#"'$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time $upstream_response_time $msec'"#;

/// The JSON variant docs/traces.md gives.
const NGINX_JSON_FORMAT: &str = r#"escape=json '{"msec":"$msec","remote_addr":"$remote_addr","request_method":"$request_method","request_uri":"$request_uri","status":"$status","body_bytes_sent":"$body_bytes_sent","request_time":"$request_time","http_user_agent":"$http_user_agent","host":"$host","request_id":"$request_id"}'"#;

/// Names the workload uses, which an anonymized trace must not hold.
const NAMES: [&str; 4] = ["rtmono", "rtchunk", "latest", "127.0.0.1"];

fn ok(args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("r");
    let mut a = args.to_vec();
    a.extend(["--output-dir", dir.to_str().unwrap(), "--quiet"]);
    let r = run_bin(&a, None, &[]);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    summary_json(&dir)
}

/// Operation counts of a summary, operations and sessions.
fn counts(s: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for section in ["operations"] {
        if let Some(ops) = s[section].as_object() {
            for (k, v) in ops {
                m.insert(k.clone(), v["count"].as_u64().unwrap_or(0));
            }
        }
    }
    m
}

fn add(total: &mut BTreeMap<String, u64>, more: BTreeMap<String, u64>) {
    for (k, v) in more {
        *total.entry(k).or_default() += v;
    }
}

/// Pushes (monolithic, chunked, again: HEAD hits), pulls and a tag list through `url`; the
/// operations counted by kind.
fn workload(url: &str) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    let push = |repo: &str, extra: &[&str]| {
        let mut a = vec![
            "push",
            "--registry",
            url,
            "--repo",
            repo,
            "--images",
            "2",
            "--layers",
            "2",
            "--layer-size",
            "96KiB",
        ];
        a.extend(extra);
        ok(&a)
    };
    add(&mut total, counts(&push("rt/rtmono", &["--monolithic"])));
    add(
        &mut total,
        counts(&push("rt/rtchunk", &["--chunk-size", "32KiB"])),
    );
    add(&mut total, counts(&push("rt/rtmono", &["--monolithic"])));
    add(
        &mut total,
        counts(&ok(&[
            "pull",
            "--registry",
            url,
            "--repo",
            "rt/rtmono",
            "--images",
            "2",
        ])),
    );
    add(
        &mut total,
        counts(&ok(&[
            "pull",
            "--registry",
            url,
            "--repo",
            "rt/rtchunk",
            "--all-tags",
        ])),
    );
    total
}

fn import(log: &Path, format: &str, out: &Path, key: &Path) -> serde_json::Value {
    let r = run_bin(
        &[
            "trace",
            "import",
            log.to_str().unwrap(),
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
            "--anonymize-key-file",
            key.to_str().unwrap(),
            "--json",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

/// Imports `log`, validates, replays against a fresh registry: the same operations as
/// `original`, no error; the trace holds no workload name; the same key, the same bytes.
fn round_trip(log_text: &str, format: &str, original: &BTreeMap<String, u64>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    std::fs::write(&log, log_text).unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, b"0123456789abcdef-a-test-key").unwrap();
    let trace = dir.path().join("trace.json");
    let report = import(&log, format, &trace, &key);
    assert_eq!(report["malformed"], 0, "{report}");
    assert!(report["imported"].as_u64().unwrap() > 20, "{report}");

    let v = run_bin(&["trace", "validate", trace.to_str().unwrap()], None, &[]);
    assert_eq!(v.code, 0, "{}{}", v.stdout, v.stderr);

    let text = std::fs::read_to_string(&trace).unwrap();
    for name in NAMES {
        assert!(
            !text.contains(name),
            "{format}: '{name}' is in the anonymized trace"
        );
    }
    let again: PathBuf = dir.path().join("again.json");
    import(&log, format, &again, &key);
    assert_eq!(
        text,
        std::fs::read_to_string(&again).unwrap(),
        "same key, same trace"
    );

    let fresh = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("r");
    let r = run_bin(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            &fresh.url,
            "--output-dir",
            dir.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    let replayed = summary_json(&dir);
    fresh.assert_exit_but_tag_races(r.code, &replayed, &format!("{format}: {}", r.stderr));
    let replayed = counts(&replayed);
    // Every kind the workload made is there (the test cannot pass on an empty map).
    for op in [
        "manifest_put",
        "manifest_get",
        "blob_head",
        "blob_get",
        "upload_patch",
        "tag_list",
    ] {
        assert!(
            original.get(op).is_some_and(|n| *n > 0),
            "{format}: no {op} in {original:?}"
        );
    }
    assert_eq!(&replayed, original, "{format}: replayed against original");
}

#[test]
fn distribution_json_logs_round_trip() {
    // docker-registry 2.8 with JSON and with text (logfmt) logs, then distribution v3
    // (installed by scripts/setup; required in CI).
    let v3 = common::tool("registry");
    if v3.is_none() && std::env::var("CREB_REQUIRE_COMPAT").is_ok_and(|v| v == "1") {
        panic!("distribution v3 (`registry`) is not installed: run scripts/setup");
    }
    let runs = [(None, false), (None, true)]
        .into_iter()
        .chain(v3.map(|b| (Some(b), false)));
    for (binary, text_log) in runs {
        let registry = Registry::start_with(RegistryOptions {
            access_log: true,
            text_log,
            binary,
            ..RegistryOptions::default()
        });
        let original = workload(&registry.url);
        round_trip(&registry.log(), "distribution", &original);
    }
}

#[test]
fn nginx_logs_round_trip_in_both_layouts() {
    for (format, log_format) in [("nginx", NGINX_FORMAT), ("nginx-json", NGINX_JSON_FORMAT)] {
        let registry = Registry::start();
        let nginx = Nginx::start(NginxOptions {
            upstream_port: Some(registry.port),
            log_format: Some(log_format.to_owned()),
            ..NginxOptions::default()
        });
        let original = workload(&nginx.url);
        round_trip(&nginx.access_log(), format, &original);
    }
}

#[test]
fn foreign_and_broken_lines_are_counted_and_named_and_strict_fails() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mixed.log");
    let good = r#"{"http.request.host":"r:5000","http.request.id":"1","http.request.method":"GET","http.request.remoteaddr":"10.0.0.1:5","http.request.uri":"/v2/a/b/manifests/t","http.request.useragent":"docker","http.response.duration":"2ms","http.response.status":200,"http.response.written":500,"level":"info","msg":"response completed","time":"2026-11-24T22:53:52.398Z"}"#;
    let health = good.replace("/v2/a/b/manifests/t", "/debug/health");
    let catalog = good.replace("/v2/a/b/manifests/t", "/v2/_catalog");
    std::fs::write(
        &log,
        format!(
            "{good}\n{{\"msg\":\"listening\",\"time\":\"2026-11-24T22:53:50Z\"}}\n{health}\n{catalog}\n{{broken\n{good}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("t.json");
    let args = [
        "trace",
        "import",
        log.to_str().unwrap(),
        "--format",
        "distribution",
        "-o",
        out.to_str().unwrap(),
        "--stats",
    ];
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for part in [
        "→ 2 requests",
        "not_a_request 1",
        "not_api 1",
        "catalog 1",
        "malformed 1",
        "mixed.log:5:",
    ] {
        assert!(r.stdout.contains(part), "'{part}' not in:\n{}", r.stdout);
    }
    let mut strict = args.to_vec();
    strict.push("--strict");
    let r = run_bin(&strict, None, &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("mixed.log:5"), "{}", r.stderr);
    // The wrong format for the file: nothing imported is an error that says so.
    let r = run_bin(
        &[
            "trace",
            "import",
            log.to_str().unwrap(),
            "--format",
            "nginx",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("is --format nginx right?"),
        "{}",
        r.stderr
    );
}
