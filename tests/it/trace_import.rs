//! `trace import` round trips on real components: a workload of pushes (monolithic and
//! chunked), pulls, HEAD misses and tag lists is driven through docker-registry with its
//! JSON request log, and through nginx in front of it with the log_format docs/traces.md
//! gives; each log is imported, the trace validates, and its replay against a fresh
//! registry makes the same operations, per kind, with zero errors. The anonymized trace
//! holds none of the workload's names, and the same key gives the same trace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::nginx::{Nginx, NginxOptions};
use crate::common::{link_race_500s, run_bin, summary_json, tool, Registry, RegistryOptions};

/// The `log_format` docs/traces.md gives for nginx: `combined`, then the times and the
/// request body's size.
const NGINX_FORMAT: &str = r#"'$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time $upstream_response_time $msec $content_length'"#;

/// The JSON variant docs/traces.md gives.
const NGINX_JSON_FORMAT: &str = r#"escape=json '{"msec":"$msec","remote_addr":"$remote_addr","request_method":"$request_method","request_uri":"$request_uri","status":"$status","body_bytes_sent":"$body_bytes_sent","request_time":"$request_time","http_user_agent":"$http_user_agent","host":"$host","request_id":"$request_id","content_length":"$content_length"}'"#;

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

    let replayed = counts(&replay_fresh(&trace, "stress", format));
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
    let v3 = crate::common::tool("registry");
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
    // Over the trace the first import wrote: --force.
    strict.extend(["--strict", "--force"]);
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
            "--force",
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

/// The operation kind creb-rs gives the request a registry logged (method, URI, status),
/// written apart from the import: what a faithful replay makes of it.
fn kind_of(method: &str, uri: &str, status: u16) -> Option<&'static str> {
    let path = uri.split('?').next().unwrap_or_default();
    let mount = uri.contains("mount=") && status == 201;
    Some(match method {
        "GET" if path == "/v2/" => "ping",
        "GET" if path.ends_with("/tags/list") => "tag_list",
        "GET" if path.contains("/manifests/") => "manifest_get",
        "HEAD" if path.contains("/manifests/") => "manifest_head",
        "PUT" if path.contains("/manifests/") => "manifest_put",
        "DELETE" if path.contains("/manifests/") => "manifest_delete",
        "POST" if mount => "blob_mount",
        "POST" if path.contains("/blobs/uploads") => "upload_post",
        "PATCH" => "upload_patch",
        "PUT" if path.contains("/blobs/uploads/") => "upload_put",
        "GET" if path.contains("/blobs/") => "blob_get",
        "HEAD" if path.contains("/blobs/") => "blob_head",
        _ => return None,
    })
}

/// Runs crane, which must succeed; its standard output.
fn crane(bin: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .output()
        .expect("run crane");
    assert!(
        out.status.success(),
        "crane {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A tarball of one file of `size` random bytes (a layer crane cannot compress).
fn layer(dir: &Path, name: &str, size: usize) -> PathBuf {
    use rand::{RngCore as _, SeedableRng as _};
    let mut bytes = vec![0u8; size];
    rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(size as u64 ^ name.len() as u64)
        .fill_bytes(&mut bytes);
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    let tar = dir.join(format!("{name}.tar"));
    let ok = std::process::Command::new("tar")
        .args([
            "cf",
            tar.to_str().unwrap(),
            "-C",
            dir.to_str().unwrap(),
            name,
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "tar {name}");
    tar
}

/// What crane uploaded: the distinct blobs (configs and layers) of the images it pushed,
/// by digest, with their sizes.
fn blobs_of(crane_bin: &Path, images: &[String]) -> BTreeMap<String, u64> {
    let mut blobs = BTreeMap::new();
    for image in images {
        let m: serde_json::Value =
            serde_json::from_str(&crane(crane_bin, &["manifest", "--insecure", image])).unwrap();
        let config = std::iter::once(&m["config"]);
        for d in config.chain(m["layers"].as_array().unwrap()) {
            blobs.insert(
                d["digest"].as_str().unwrap().to_owned(),
                d["size"].as_u64().unwrap(),
            );
        }
    }
    blobs
}

/// Imports `log` as `format` (with `extra` flags); the report.
fn import_strict(log: &Path, format: &str, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "trace",
        "import",
        log.to_str().unwrap(),
        "--format",
        format,
        "-o",
        out.to_str().unwrap(),
        "--strict",
        "--json",
        // Imported again over the last import of the test: a trace, so --force.
        "--force",
    ];
    args.extend(extra);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{format}: --strict: {}{}", r.stdout, r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

/// Replays `trace` in `mode` against a fresh registry; its summary.
fn replay_fresh(trace: &Path, mode: &str, what: &str) -> serde_json::Value {
    let fresh = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("r");
    let r = run_bin(
        &[
            "replay",
            trace.to_str().unwrap(),
            "--registry",
            &fresh.url,
            "--mode",
            mode,
            "--output-dir",
            dir.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    let summary = summary_json(&dir);
    fresh.assert_exit_but_tag_races(r.code, &summary, &format!("{what}: {}", r.stderr));
    summary
}

/// go-containerregistry's crane (pinned, installed by scripts/setup), a client nobody here
/// wrote, drives docker-registry through nginx: appends with layers of known sizes, a copy
/// from another registry (uploads), a copy across repositories (mounts), a pull, a tag
/// list, a tag and a delete; `--insecure` on plain HTTP also probes TLS first, so nginx
/// logs ClientHello bytes as it does in production. Each of the three logs (distribution's
/// JSON log, nginx's two documented layouts) imports with `--strict`, and replays on a
/// fresh registry with the operations the registry logged, per kind, the mounts made as
/// mounts, the bytes crane uploaded (within 1%) and no error. A log without request sizes
/// says so, and `--sizes-from` learns them from the registry.
#[test]
fn an_imported_crane_session_replays_what_crane_did() {
    let Some(crane_bin) = tool("crane") else {
        assert!(
            std::env::var("CREB_REQUIRE_COMPAT").map_or(true, |v| v != "1"),
            "crane is missing (scripts/setup installs it)"
        );
        eprintln!("skipped: crane is not installed");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let json_log = work.path().join("nginx-json.log");
    let registry = Registry::start_with(RegistryOptions {
        access_log: true,
        ..RegistryOptions::default()
    });
    let nginx = Nginx::start(NginxOptions {
        upstream_port: Some(registry.port),
        log_format: Some(NGINX_FORMAT.to_owned()),
        http_extra: format!(
            "log_format creb_json {NGINX_JSON_FORMAT};\naccess_log {} creb_json;",
            json_log.display()
        ),
        ..NginxOptions::default()
    });
    let other = Registry::start();
    let host = nginx.url.trim_start_matches("http://").to_owned();
    let elsewhere = other.url.trim_start_matches("http://").to_owned();
    let (l1, l2, l3) = (
        layer(work.path(), "one", 600_000),
        layer(work.path(), "two", 1 << 20),
        layer(work.path(), "three", 1 << 20),
    );
    let image = |r: &str| format!("{host}/crane/{r}");
    let (v1, v2) = (image("app:v1"), image("app:v2"));
    crane(
        &crane_bin,
        &[
            "append",
            "--insecure",
            "-f",
            l1.to_str().unwrap(),
            "-t",
            &v1,
        ],
    );
    crane(
        &crane_bin,
        &[
            "append",
            "--insecure",
            "-b",
            &v1,
            "-f",
            l2.to_str().unwrap(),
            "-f",
            l3.to_str().unwrap(),
            "-t",
            &v2,
        ],
    );
    let outside = format!("{elsewhere}/outside/img:1");
    crane(
        &crane_bin,
        &[
            "append",
            "--insecure",
            "-f",
            l3.to_str().unwrap(),
            "-t",
            &outside,
        ],
    );
    crane(
        &crane_bin,
        &["copy", "--insecure", &outside, &image("imported:1")],
    );
    crane(&crane_bin, &["copy", "--insecure", &v2, &image("other:v2")]);
    let pulled = work.path().join("pulled.tar");
    crane(
        &crane_bin,
        &[
            "pull",
            "--insecure",
            &image("other:v2"),
            pulled.to_str().unwrap(),
        ],
    );
    crane(&crane_bin, &["ls", "--insecure", &image("app")]);
    crane(&crane_bin, &["tag", "--insecure", &v2, "v3"]);
    // Every blob crane pushed, by digest, before the delete takes v1 away.
    let sizes = blobs_of(&crane_bin, &[v1.clone(), v2.clone(), image("imported:1")]);
    let digest = crane(&crane_bin, &["digest", "--insecure", &v1]);
    crane(
        &crane_bin,
        &[
            "delete",
            "--insecure",
            &format!("{host}/crane/app@{digest}"),
        ],
    );

    // The registry's own account: every request by kind, and the bytes of every upload it
    // completed (the digest its closing PUT named, sized by crane's manifests).
    let logged = registry.access_log();
    let dist_log = work.path().join("registry.log");
    std::fs::write(&dist_log, registry.log()).unwrap();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut uploaded = 0u64;
    for (method, uri, status) in &logged {
        if let Some(kind) = kind_of(method, uri, *status) {
            *expected.entry(kind.to_owned()).or_default() += 1;
        }
        if method == "PUT" && uri.contains("/blobs/uploads/") && *status == 201 {
            let digest = uri
                .split(['?', '&'])
                .find_map(|p| p.strip_prefix("digest="))
                .unwrap()
                .replace("%3A", ":");
            uploaded += sizes[&digest];
        }
    }
    expected.insert("blob_upload".into(), expected["upload_put"]);
    assert_eq!(
        expected.get("blob_mount"),
        Some(&4),
        "crane mounted: {expected:?}"
    );
    assert_eq!(expected.get("manifest_delete"), Some(&1), "{expected:?}");
    assert!(uploaded > 3_000_000, "crane uploaded {uploaded} bytes");

    let check = |summary: &serde_json::Value, what: &str| {
        assert_eq!(
            &counts(summary),
            &expected,
            "{what}: replayed against logged"
        );
        // No error but docker-registry's link race, which `replay_fresh` matched to the
        // registry's log (a real 500 of the registry when two requests meet on one link).
        let errors = summary["totals"]["errors"].as_u64().unwrap_or(0);
        let races = link_race_500s(summary);
        assert_eq!(errors, races, "{what}: {}", summary["errors"]);
        assert!(errors <= 2, "{what}: {}", summary["errors"]);
        assert!(
            summary["events"].get("mount_fallback").is_none(),
            "{what}: every mount made as one: {}",
            summary["events"]
        );
        let sent = summary["operations"]["blob_upload"]["bytes_sent"]
            .as_u64()
            .unwrap();
        let off = (sent as f64 - uploaded as f64).abs() / uploaded as f64;
        assert!(
            off < 0.01,
            "{what}: uploaded {sent} bytes, crane {uploaded}"
        );
    };
    for (log, format) in [
        (dist_log.clone(), "distribution"),
        (nginx.access_log_path(), "nginx"),
        (json_log.clone(), "nginx-json"),
    ] {
        let trace = work.path().join(format!("{format}.json"));
        let report = import_strict(&log, format, &trace, &["--no-anonymize"]);
        assert_eq!(report["malformed"], 0, "{format}: {report}");
        assert_eq!(report["sizes"]["unknown"], 0, "{format}: {report}");
        assert_eq!(report["sizes"]["mounts"], 4, "{format}: {report}");
        if format != "distribution" {
            // crane --insecure tried TLS on the plain port first.
            assert!(
                report["skipped"]["not_http"].as_u64().unwrap_or(0) > 0,
                "{format}: {report}"
            );
        }
        let summary = replay_fresh(&trace, "delay", format);
        check(&summary, format);
        assert!(summary["warnings"]
            .as_array()
            .is_none_or(|w| w.iter().all(|w| w["kind"] != "unsized_uploads")));
    }

    // A log without request sizes, as nginx without $content_length in front of a
    // registry without distribution's upload state would write it: uploads of unknown
    // size are counted, marked and warned about; --sizes-from asks the registry for them.
    let bare = work.path().join("bare.log");
    let text = std::fs::read_to_string(&json_log).unwrap();
    let stripped: String = text
        .lines()
        .map(|l| {
            let l = match l.find(",\"content_length\"") {
                Some(i) => format!("{}}}", &l[..i]),
                None => l.to_owned(),
            };
            let l = match (l.find("?_state="), l.find("&digest=")) {
                (Some(a), Some(b)) => format!("{}?{}", &l[..a], &l[b + 1..]),
                _ => l,
            };
            format!("{l}\n")
        })
        .collect();
    std::fs::write(&bare, stripped).unwrap();
    let trace = work.path().join("bare.json");
    let report = import_strict(&bare, "nginx-json", &trace, &[]);
    assert!(report["sizes"]["unknown"].as_u64().unwrap() > 0, "{report}");
    assert!(std::fs::read_to_string(&trace)
        .unwrap()
        .contains("\"creb.size_unknown\":true"));
    let summary = replay_fresh(&trace, "delay", "bare");
    assert!(
        summary["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["kind"] == "unsized_uploads")),
        "{}",
        summary["warnings"]
    );
    let report = import_strict(
        &bare,
        "nginx-json",
        &trace,
        &["--sizes-from", &registry.url],
    );
    assert_eq!(report["sizes"]["unknown"], 0, "{report}");
    assert_eq!(
        report["sizes"]["from_registry"], report["sizes"]["uploads"],
        "{report}"
    );
    assert_eq!(report["sizes"]["mounts_unsized"], 0, "{report}");
    check(&replay_fresh(&trace, "delay", "sizes-from"), "sizes-from");
    drop(other);
}

/// `--sizes-from` asks the registry whose log is imported, which logs those HEADs: an
/// import of the same live log again leaves them out (they carry creb-rs's sizing
/// User-Agent), gives the same records, and `--stats` says what it left out.
#[test]
fn importing_a_live_log_again_leaves_out_creb_rs_own_heads() {
    let registry = Registry::start_with(RegistryOptions {
        access_log: true,
        ..RegistryOptions::default()
    });
    ok(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "live/app",
        "--images",
        "2",
        "--layers",
        "2",
        "--layer-size",
        "8KiB",
        "--monolithic",
    ]);
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("registry.log");
    let import_live = |out: &str| {
        std::fs::write(&log, registry.log()).unwrap();
        let out = work.path().join(out);
        let r = run_bin(
            &[
                "trace",
                "import",
                log.to_str().unwrap(),
                "--format",
                "distribution",
                "--no-anonymize",
                "--stats",
                "-o",
                out.to_str().unwrap(),
                "--sizes-from",
                &registry.url,
            ],
            None,
            &[],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        (std::fs::read_to_string(&out).unwrap(), r.stdout)
    };
    let (first, _) = import_live("first.json");
    let (again, stats) = import_live("again.json");
    assert!(
        registry
            .log()
            .contains(creb::analysis::trace::import::SIZING_MARK),
        "the registry logged the sizing HEADs"
    );
    assert_eq!(first, again, "the second import took in the first's HEADs");
    assert!(stats.contains("left out"), "{stats}");
}
