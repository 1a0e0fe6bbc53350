//! `--metrics-listen` scraped by a real Prometheus (Debian's `prometheus`, started here with
//! a 1 s scrape interval on loopback): after a replay, `creb_operations_total` as Prometheus
//! last scraped it equals summary.json's counts per operation and outcome exactly. And the
//! Grafana dashboard in deploy/grafana/ parses and asks only for metrics the endpoint serves.
//! `--metrics-push` to a real Pushgateway (Debian's `prometheus-pushgateway`), the endpoint
//! of `creb-rs run` across its cells, and `--registry-metrics` against docker-registry's own
//! Prometheus endpoint.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, http_get, run_bin, summary_json, Registry};

/// A server the test started (Prometheus, a Pushgateway), with its data directory; killed
/// when dropped.
struct Daemon {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_binary() -> Option<&'static str> {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
}

fn start_prometheus(target_port: u16) -> Option<Daemon> {
    let Some(bin) = prometheus_binary() else {
        assert!(
            std::env::var("CREB_REQUIRE_PROMETHEUS").map_or(true, |v| v != "1"),
            "prometheus is not installed (scripts/setup installs it)"
        );
        eprintln!("skipped: prometheus is not installed");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: creb\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(&format!("{url}/-/ready")).is_none() {
        assert!(Instant::now() < deadline, "prometheus did not get ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    Some(Daemon {
        child,
        url,
        _dir: dir,
    })
}

#[test]
fn prometheus_scrapes_the_exact_counts_of_the_summary() {
    let registry = Registry::start();
    let metrics_port = free_port();
    let Some(prometheus) = start_prometheus(metrics_port) else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("run");
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    let listen = format!("127.0.0.1:{metrics_port}");
    let r = run_bin(
        &[
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--mode",
            "delay",
            "--speed",
            "8",
            "--metrics-listen",
            &listen,
            "--metrics-linger",
            "3s",
            "--output-dir",
            dir.to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    let summary = summary_json(&dir);
    registry.assert_exit_but_tag_races(r.code, &summary, &r.stderr);

    // The greatest value of each series: the last scrape (counters only grow).
    let query = "max_over_time(creb_operations_total[10m])";
    let body = http_get(&format!(
        "{}/api/v1/query?query={}",
        prometheus.url,
        query.replace('[', "%5B").replace(']', "%5D")
    ))
    .expect("query prometheus");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let series = v["data"]["result"].as_array().expect("a result");
    assert!(!series.is_empty(), "nothing scraped: {body}");
    let scraped = |op: &str, ok: bool| -> u64 {
        series
            .iter()
            .filter(|s| s["metric"]["operation"] == op && (s["metric"]["outcome"] == "ok") == ok)
            .map(|s| s["value"][1].as_str().unwrap().parse::<f64>().unwrap() as u64)
            .sum()
    };
    let ops = summary["operations"].as_object().unwrap();
    assert!(ops.len() >= 5, "{ops:?}");
    for (op, s) in ops {
        assert_eq!(scraped(op, true), s["ok"].as_u64().unwrap(), "{op} ok");
        assert_eq!(
            scraped(op, false),
            s["errors"].as_u64().unwrap(),
            "{op} errors"
        );
    }
    // Every series names the registry as its endpoint.
    assert!(
        series
            .iter()
            .all(|s| s["metric"]["endpoint"] == registry.url.trim_end_matches('/')),
        "{body}"
    );
    // HTTP exchanges, by status class, add up to the summary's count.
    let http = http_get(&format!(
        "{}/api/v1/query?query=max_over_time(creb_http_requests_total%5B10m%5D)",
        prometheus.url
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&http).unwrap();
    let http_series = v["data"]["result"].as_array().unwrap();
    let exchanges: f64 = http_series
        .iter()
        .map(|s| s["value"][1].as_str().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(
        exchanges as u64,
        summary["totals"]["http_requests"].as_u64().unwrap(),
        "{http}"
    );
    assert!(
        http_series
            .iter()
            .all(|s| ["2xx", "3xx", "4xx", "5xx", "none"]
                .contains(&s["metric"]["status"].as_str().unwrap())),
        "{http}"
    );
    // The run's identity and a delay-mode histogram are there too.
    let info = http_get(&format!(
        "{}/api/v1/query?query=max_over_time(creb_run_info%5B10m%5D)",
        prometheus.url
    ))
    .unwrap();
    assert!(
        info.contains("\"mode\":\"delay\"") && info.contains("\"command\":\"replay\""),
        "{info}"
    );
    let lag = http_get(&format!(
        "{}/api/v1/query?query=max_over_time(creb_schedule_lag_seconds_count%5B10m%5D)",
        prometheus.url
    ))
    .unwrap();
    assert!(lag.contains("\"value\""), "{lag}");
}

fn start_pushgateway() -> Option<Daemon> {
    let bin = "/usr/bin/prometheus-pushgateway";
    if !Path::new(bin).is_file() {
        assert!(
            std::env::var("CREB_REQUIRE_PROMETHEUS").map_or(true, |v| v != "1"),
            "prometheus-pushgateway is not installed (scripts/setup installs it)"
        );
        eprintln!("skipped: prometheus-pushgateway is not installed");
        return None;
    }
    let port = free_port();
    // Its own persistence file: Debian's default is shared by every gateway of the machine.
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!(
            "--persistence.file={}",
            dir.path().join("pushgateway.data").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus-pushgateway");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(&format!("{url}/-/ready")).is_none() {
        assert!(
            Instant::now() < deadline,
            "the pushgateway did not get ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(Daemon {
        child,
        url,
        _dir: dir,
    })
}

/// The value of the line of `text` that starts with `prefix` (labels in the order the
/// exposition writes them).
fn value_of(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

/// `--metrics-push`: after a push, the Pushgateway holds the run's final counts, typed as
/// counters, under job="creb-rs" and the shard.
#[test]
fn the_pushgateway_holds_the_final_counts() {
    let Some(gateway) = start_pushgateway() else {
        return;
    };
    let registry = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("push");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "pushed/app",
            "--images",
            "3",
            "--layers",
            "2",
            "--layer-size",
            "16KiB",
            "--metrics-push",
            &gateway.url,
            "--output-dir",
            dir.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("metrics pushed"), "{}", r.stderr);
    let summary = summary_json(&dir);
    let text = http_get(&format!("{}/metrics", gateway.url)).unwrap();
    assert!(
        text.contains("# TYPE creb_operations_total counter"),
        "{text}"
    );
    let ops = summary["operations"].as_object().unwrap();
    assert!(ops.contains_key("manifest_put"), "{ops:?}");
    for (op, s) in ops {
        assert_eq!(
            value_of(
                &text,
                "creb_operations_total",
                &[
                    ("job", "creb-rs"),
                    ("shard", "0"),
                    ("operation", op),
                    ("outcome", "ok")
                ]
            ),
            s["ok"].as_u64().filter(|&n| n > 0),
            "{op}: {text}"
        );
    }
    // A dead gateway costs a warning, never the result.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let dir = out.path().join("dead");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "pushed/app",
            "--layers",
            "1",
            "--layer-size",
            "4KiB",
            "--metrics-push",
            &dead,
            "--output-dir",
            dir.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("warning: --metrics-push") && r.stderr.contains("final push"),
        "{}",
        r.stderr
    );
    assert!(dir.join("summary.json").is_file());
}

/// `creb-rs run --metrics-listen`: one endpoint for the whole run, serving each cell in
/// turn; after the last cell it serves that cell's final counts, named by `creb_run_info`.
#[test]
fn run_serves_every_cell_on_one_endpoint() {
    let registry = Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let experiment = scratch.path().join("bench.toml");
    std::fs::write(
        &experiment,
        format!(
            "[[registry]]\nname = \"local\"\nurl = \"{}\"\n\n             [[experiment]]\nname = \"small\"\nkind = \"push\"\nlayers = 1\nlayer_size = \"8KiB\"\n\n             [[experiment]]\nname = \"large\"\nkind = \"push\"\nlayers = 3\nlayer_size = \"64KiB\"\n",
            registry.url
        ),
    )
    .unwrap();
    let out = scratch.path().join("out");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args([
            "run",
            experiment.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
            "--metrics-listen",
            &listen,
            "--metrics-linger",
            "3s",
            "--quiet",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The last answer before the process ends is from its linger: the final counts.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    let mut cells_seen = std::collections::BTreeSet::new();
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "run did not end");
        if let Some(text) = http_get(&format!("http://{listen}/metrics")) {
            for cell in ["small/local", "large/local"] {
                if text.contains(&format!("cell=\"{cell}\"")) {
                    cells_seen.insert(cell);
                }
            }
            last = Some(text);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(child.wait().unwrap().success());
    assert!(cells_seen.contains("large/local"), "{cells_seen:?}");
    let text = last.expect("the endpoint answered");
    assert!(text.contains("cell=\"large/local\""), "{text}");
    let summary = summary_json(&out.join("large").join("local"));
    let puts = summary["operations"]["upload_put"]["ok"].as_u64().unwrap();
    assert_eq!(
        value_of(
            &text,
            "creb_operations_total",
            &[("operation", "upload_put"), ("outcome", "ok")]
        ),
        Some(puts),
        "{text}"
    );
}

#[test]
fn the_grafana_dashboard_asks_only_for_metrics_the_endpoint_serves() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/creb-rs.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 6, "{} panels", panels.len());
    let served = creb::metrics::live::METRIC_NAMES;
    let mut used = 0;
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            // Labels it groups or filters by are labels the series carry.
            for part in expr.split("by (").skip(1) {
                for label in part.split(')').next().unwrap().split(',') {
                    assert!(
                        creb::metrics::live::LABEL_NAMES.contains(&label.trim()),
                        "{expr}: no series has the label {label}"
                    );
                }
            }
            for part in expr.split('{').skip(1) {
                for matcher in part.split('}').next().unwrap().split(',') {
                    let label = matcher.split(['=', '!']).next().unwrap().trim();
                    assert!(
                        creb::metrics::live::LABEL_NAMES.contains(&label),
                        "{expr}: no series has the label {label}"
                    );
                }
            }
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("creb_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(name);
                assert!(served.contains(&base), "{expr}: {name} is not served");
                used += 1;
            }
        }
    }
    assert!(used >= 6);
}

/// `--registry-metrics` against docker-registry's own Prometheus endpoint: the requests
/// the registry counted during a push and a pull are the HTTP exchanges creb-rs made.
#[test]
fn the_registrys_own_request_count_matches_creb_rs() {
    let metrics_port = free_port();
    let registry = Registry::start_with(crate::common::RegistryOptions {
        metrics_port: Some(metrics_port),
        ..crate::common::RegistryOptions::default()
    });
    let endpoint = format!("http://127.0.0.1:{metrics_port}/metrics");
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_get(&endpoint).is_none() {
        assert!(Instant::now() < deadline, "no metrics at {endpoint}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = tempfile::tempdir().unwrap();
    for (name, args) in [
        (
            "push",
            vec![
                "push",
                "--layers",
                "2",
                "--layer-size",
                "64KiB",
                "--images",
                "2",
                "--chunk-size",
                "32KiB",
                "--repo",
                "metrics/app",
            ],
        ),
        (
            "pull",
            vec!["pull", "--images", "2", "--repo", "metrics/app"],
        ),
        (
            "replay",
            vec![
                "replay",
                concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json"),
                "--mode",
                "delay",
                "--speed",
                "4",
                "--registry-metrics-every",
                "1s",
            ],
        ),
    ] {
        let dir = out.path().join(name);
        let mut a = args.clone();
        a.extend([
            "--registry",
            &registry.url,
            "--registry-metrics",
            &endpoint,
            "--output-dir",
            dir.to_str().unwrap(),
        ]);
        let r = run_bin(&a, None, &[]);
        let summary = summary_json(&dir);
        registry.assert_exit_but_tag_races(r.code, &summary, &format!("{name}: {}", r.stderr));
        assert!(r.stderr.contains("the registry counted"), "{}", r.stderr);
        let records: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("registry-metrics.json")).unwrap(),
        )
        .unwrap();
        let record = &records[0];
        assert_eq!(record["url"], endpoint.as_str());
        assert!(record["error"].is_null(), "{record}");
        let made = summary["totals"]["http_requests"].as_u64().unwrap();
        assert!(made > 0);
        assert_eq!(record["creb_http_requests"].as_u64(), Some(made));
        assert_eq!(
            record["registry_requests"].as_f64(),
            Some(made as f64),
            "{name}: the registry's count against creb-rs's: {record}"
        );
        assert!(
            record["registry_mean_duration_s"].as_f64().unwrap() > 0.0,
            "{record}"
        );
        // The intervals between scrapes add up to the run's count.
        let intervals = record["intervals"].as_array().unwrap();
        let per_interval: f64 = intervals
            .iter()
            .map(|i| i["requests"].as_f64().unwrap())
            .sum();
        assert_eq!(per_interval, made as f64, "{name}: {record}");
        if name == "replay" {
            assert!(intervals.len() >= 3, "scraped every second: {record}");
        }
        // And the report shows them side by side.
        let report = run_bin(&["report", dir.to_str().unwrap()], None, &[]);
        assert_eq!(report.code, 0, "{}", report.stderr);
        let line = report
            .stdout
            .lines()
            .find(|l| l.starts_with(&endpoint))
            .unwrap_or_else(|| panic!("no registry line in:\n{}", report.stdout));
        assert!(line.contains("agree"), "{line}");
        assert!(line.contains(&made.to_string()), "{line}");
    }
}
