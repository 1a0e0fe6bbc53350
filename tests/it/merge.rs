//! Merging results: exact (shards merged equal the union, through the real file formats),
//! strict (refuses what does not belong together), readable by other tools, and end to end
//! (three shards of a real replay merge into the counts of one instance).

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::common::{creb, summary_json, Registry};
use creb::metrics::attribution::Who;
use creb::metrics::{ErrorKind, Op, Outcome, Sample, SizeClass, Timing};
use creb::results::store::load;
use creb::results::summary::{RunInfo, Shard, Summary};
use creb::results::{Meta, MetaInput, RunOutput};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;
use creb::ExitStatus;
use proptest::prelude::*;
use tokio::time::Instant;

/// One synthetic measurement: which op, when it ended (ms after the anchor), how long it
/// took, and whether it failed.
#[derive(Debug, Clone)]
struct Raw {
    op: u8,
    end_ms: u64,
    latency_us: u64,
    failed: bool,
    big: bool,
    /// The value its answer gave `--split-by-header` (`v1`, `v2`, …; 0: no header).
    value: u8,
    /// Its repository (`r0`…`r2`); its client is named after its header value.
    repo: u8,
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        0u8..4,
        0u64..4_000,
        1u64..2_000_000,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
        0u8..6,
        0u8..3,
    )
        .prop_map(|(op, end_ms, latency_us, failed, big, value, repo)| Raw {
            op,
            end_ms,
            latency_us,
            failed,
            big,
            value,
            repo,
        })
}

const OPS: [Op; 4] = [Op::BlobGet, Op::ManifestGet, Op::BlobUpload, Op::TokenFetch];

/// Writes a result directory holding exactly `samples`, as shard `shard` of `count`.
async fn write_dir(
    dir: &Path,
    samples: &[Raw],
    shard: u32,
    count: u32,
    anchor: Instant,
    wall: SystemTime,
) {
    let output = RunOutput {
        dir: Some(dir.to_path_buf()),
        interval: Duration::from_secs(1),
        record_requests: false,
        live: None,
        split_by: Some(http::HeaderName::from_static("x-cache-status")),
        warmup: Duration::ZERO,
    };
    let (recorder, aggregator) = output.start(anchor, wall).unwrap();
    for r in samples {
        let end = anchor + Duration::from_millis(r.end_ms);
        let mut headers = http::HeaderMap::new();
        if r.value > 0 {
            headers.insert("x-cache-status", format!("v{}", r.value).parse().unwrap());
        }
        let label = recorder
            .split()
            .map(|s| s.label(headers.get(s.header()).map(|v| v.as_bytes())));
        let who = Who {
            repository: Some(format!("r{}", r.repo).into()),
            client: Some(format!("10.0.0.{}:5000", r.value).into()),
        };
        recorder
            .record_as(
                Sample {
                    op: OPS[r.op as usize],
                    outcome: if r.failed {
                        Outcome::Error(ErrorKind::Http(503))
                    } else {
                        Outcome::Ok
                    },
                    size_class: if r.big {
                        SizeClass::To100MiB
                    } else {
                        SizeClass::Under1MiB
                    },
                    timing: Timing {
                        intended: Some(end - Duration::from_micros(r.latency_us)),
                        ready: None,
                        sent: end - Duration::from_micros(r.latency_us / 2),
                        first_byte: Some(end - Duration::from_micros(r.latency_us / 4)),
                        end,
                    },
                    bytes_sent: 10,
                    bytes_received: if r.big { 20 << 20 } else { 100 },
                    http: creb::metrics::HttpStatuses::one(Some(200)),
                },
                label,
                Some(who),
            )
            .await;
    }
    let aggregator = aggregator.finish().await;
    let summary = Summary::build(
        RunInfo {
            command: "replay".into(),
            mode: "delay".into(),
            model: "open".into(),
            concurrency: 4,
            registry: "http://127.0.0.1:1".into(),
            seed: 9,
            shard: Shard {
                index: shard,
                count,
            },
            started_at: wall,
            duration: Duration::from_secs(4),
            interrupted: false,
            trace: None,
            warnings: Vec::new(),
            checks: None,
            config: creb::results::config::RunConfig::Read(
                serde_json::json!({"plan": {"shard": {"index": shard, "count": count}}, "seed": 9}),
            ),
        },
        &aggregator,
    );
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: serde_json::json!({"trace": "synthetic"}),
            anchor: wall,
            start_at: None,
            actual_start: wall,
            start_skew_ms: None,
            interval: Duration::from_secs(1),
        },
    );
    creb::results::store::write_final(dir, &summary, &aggregator, &meta).unwrap();
}

fn check_merge_equals_union(samples: Vec<Raw>, assignment: Vec<u32>, count: u32) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let anchor = Instant::now();
        let wall = SystemTime::now();
        let union = tmp.path().join("union");
        write_dir(&union, &samples, 0, 1, anchor, wall).await;
        let mut dirs = Vec::new();
        for shard in 0..count {
            let part: Vec<Raw> = samples
                .iter()
                .zip(&assignment)
                .filter(|(_, a)| **a % count == shard)
                .map(|(r, _)| r.clone())
                .collect();
            let dir = tmp.path().join(format!("shard{shard}"));
            write_dir(&dir, &part, shard, count, anchor, wall).await;
            dirs.push(dir);
        }
        let merged_dir = tmp.path().join("merged");
        creb::merge::merge(&dirs, &merged_dir, false).unwrap();
        let merged = load(&merged_dir).unwrap();
        let whole = load(&union).unwrap();
        // Every operation's numbers, percentiles included, are identical.
        assert_eq!(merged.summary.operations, whole.summary.operations);
        assert_eq!(merged.summary.totals, whole.summary.totals);
        assert_eq!(merged.summary.errors, whole.summary.errors);
        // And split by header value (matched by name: each shard met them in its order).
        assert_eq!(
            merged.summary.split_by_header,
            whole.summary.split_by_header
        );
        // And split.csv, interval by interval and value by value.
        let rows = |s: &creb::results::ResultSet| {
            let mut r = s.split_rows.clone();
            r.sort();
            r
        };
        assert_eq!(rows(&merged), rows(&whole));
        // And by repository and client, percentiles included.
        assert_eq!(merged.summary.by_repository, whole.summary.by_repository);
        assert_eq!(merged.summary.by_client, whole.summary.by_client);
        assert_eq!(merged.summary.attribution, whole.summary.attribution);
        // Interval by interval, tag by tag, the histograms are identical.
        assert_eq!(merged.hlog.intervals, whole.hlog.intervals);
        // The timeline's counts add up to the union's.
        let col = |rows: &Vec<Vec<String>>, i: usize| -> u64 {
            rows.iter().map(|r| r[i].parse::<u64>().unwrap_or(0)).sum()
        };
        for c in [4, 8, 9, 10, 11] {
            assert_eq!(
                col(&merged.timeline, c),
                col(&whole.timeline, c),
                "timeline column {c}"
            );
        }
        assert_eq!(merged.meta.hosts.len() as u32, count);
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn merging_shards_equals_the_union(
        samples in prop::collection::vec(raw(), 1..300),
        seed in any::<u64>(),
        count in 1u32..5,
    ) {
        let assignment: Vec<u32> = (0..samples.len())
            .map(|i| (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) >> 33) as u32)
            .collect();
        check_merge_equals_union(samples, assignment, count);
    }
}

/// Twenty seconds of samples, two shards: the merge recomputes every percentile's interval
/// from the merged interval histograms, the same as the one instance's (never an average),
/// and each holds its percentile.
#[test]
fn a_merge_recomputes_the_percentiles_intervals_from_the_merged_histograms() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let samples: Vec<Raw> = (0..6_000u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Raw {
                op: 0,
                end_ms: i * 20_000 / 6_000,
                latency_us: 1_000 + x % 50_000,
                failed: false,
                big: false,
                value: 0,
                repo: 0,
            }
        })
        .collect();
    let assignment: Vec<u32> = (0..samples.len() as u32).collect();
    check_merge_equals_union(samples.clone(), assignment, 2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("one");
    rt.block_on(write_dir(
        &dir,
        &samples,
        0,
        1,
        Instant::now(),
        SystemTime::now(),
    ));
    let whole = load(&dir).unwrap();
    let latency = whole.summary.operations["blob_get"].latency_ms.unwrap();
    for (p, ci) in [
        (latency.p50, latency.p50_ci),
        (latency.p90, latency.p90_ci),
        (latency.p99, latency.p99_ci),
    ] {
        let [low, high] = ci.unwrap_or_else(|| panic!("no interval: {latency:?}"));
        let p = p.unwrap();
        assert!(low <= p && p <= high, "{p} outside [{low}, {high}]");
    }
    // 6,000 samples: a p99.9 has too few beyond it to bound.
    assert_eq!(latency.p999_ci, None, "{latency:?}");
}

/// Writes `count` shard directories of a few samples each.
async fn shards(root: &Path, count: u32) -> Vec<std::path::PathBuf> {
    let anchor = Instant::now();
    let wall = SystemTime::now();
    let samples = vec![Raw {
        op: 0,
        end_ms: 10,
        latency_us: 500,
        failed: false,
        big: false,
        value: 1,
        repo: 0,
    }];
    let mut dirs = Vec::new();
    for i in 0..count {
        let d = root.join(format!("s{i}"));
        write_dir(&d, &samples, i, count, anchor, wall).await;
        dirs.push(d);
    }
    dirs
}

/// Two shards that met 10 header values each: the merge keeps the 16 most counted apart,
/// as a run does, and folds the rest into `(other)`, counters and histograms alike.
#[tokio::test]
async fn a_merged_split_keeps_sixteen_values_and_folds_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let (anchor, wall) = (Instant::now(), SystemTime::now());
    let mut dirs = Vec::new();
    for shard in 0..2u32 {
        // Value k (1–20) answers k operations.
        let samples: Vec<Raw> = (1..=10u8)
            .map(|i| i + 10 * shard as u8)
            .flat_map(|value| {
                (0..u64::from(value)).map(move |j| Raw {
                    op: 0,
                    end_ms: 10 + j,
                    latency_us: 100 * u64::from(value),
                    failed: false,
                    big: false,
                    value,
                    repo: 1,
                })
            })
            .collect();
        let dir = tmp.path().join(format!("s{shard}"));
        write_dir(&dir, &samples, shard, 2, anchor, wall).await;
        dirs.push(dir);
    }
    let out = tmp.path().join("merged");
    creb::merge::merge(&dirs, &out, false).unwrap();
    let merged = load(&out).unwrap();
    let split = merged.summary.split_by_header.unwrap();
    assert_eq!(split.header, "x-cache-status");
    assert_eq!(split.values.len(), 17, "{:?}", split.values.keys());
    let other = &split.values["(other)"]["blob_get"];
    assert_eq!(other.count, 1 + 2 + 3 + 4);
    assert_eq!(other.latency_ms.as_ref().unwrap().max, 0.4);
    assert!(!split.values.contains_key("v4") && split.values.contains_key("v5"));
    assert_eq!(split.values["v20"]["blob_get"].count, 20);
    // split.csv folds the same values: (other) holds v1–v4, counted once each.
    let in_rows = |value: &str| -> u64 {
        merged
            .split_rows
            .iter()
            .filter(|r| r[2] == value)
            .map(|r| r[3].parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(in_rows("(other)"), 1 + 2 + 3 + 4);
    assert_eq!(in_rows("v4"), 0);
    assert_eq!(in_rows("v20"), 20);
    // counters.json says the same (split.hlog's histograms were read against it).
    assert_eq!(merged.counters.split.unwrap().values.len(), 17);
}

fn edit_json(path: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

#[tokio::test]
async fn merge_refuses_what_does_not_belong_together() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let err = |dirs: &[std::path::PathBuf], partial| {
        format!("{:#}", creb::merge::merge(dirs, &out, partial).unwrap_err())
    };

    let dirs = shards(&tmp.path().join("a"), 3).await;
    // Missing and overlapping shards.
    let e = err(&dirs[..2], false);
    assert!(e.contains("shards 2/3 are missing"), "{e}");
    assert!(
        creb::merge::merge(&dirs[..2], &out, true).is_ok(),
        "--partial merges in stages"
    );
    let e = err(
        &[
            dirs[0].clone(),
            dirs[1].clone(),
            dirs[1].clone(),
            dirs[2].clone(),
        ],
        false,
    );
    assert!(e.contains("shard 1/3 appears twice"), "{e}");

    // Mixed modes.
    let modes = shards(&tmp.path().join("b"), 2).await;
    edit_json(&modes[1].join("summary.json"), |v| {
        v["mode"] = "stress".into()
    });
    let e = err(&modes, false);
    assert!(e.contains("command or mode"), "{e}");

    // Another configuration or seed.
    let seeds = shards(&tmp.path().join("c"), 2).await;
    edit_json(&seeds[1].join("meta.json"), |v| v["seed"] = 10.into());
    assert!(err(&seeds, false).contains("seed"));
    let configs = shards(&tmp.path().join("d"), 2).await;
    edit_json(&configs[1].join("meta.json"), |v| {
        v["config_hash"] = "sha256:00".into()
    });
    assert!(err(&configs, false).contains("configuration"));

    // Other histogram settings.
    let hist = shards(&tmp.path().join("e"), 2).await;
    edit_json(&hist[1].join("summary.json"), |v| {
        v["histograms"]["significant_digits"] = 2.into()
    });
    assert!(err(&hist, false).contains("histogram settings"));

    // A directory that is not a result.
    let e = err(&[tmp.path().join("nope")], false);
    assert!(e.contains("not a result directory"), "{e}");
}

#[tokio::test]
async fn merges_of_merges_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = shards(tmp.path(), 4).await;
    let first = tmp.path().join("m01");
    let second = tmp.path().join("m23");
    creb::merge::merge(&dirs[..2], &first, true).unwrap();
    creb::merge::merge(&dirs[2..], &second, true).unwrap();
    let all = tmp.path().join("all");
    creb::merge::merge(&[first, second], &all, false).unwrap();
    let direct = tmp.path().join("direct");
    creb::merge::merge(&dirs, &direct, false).unwrap();
    assert_eq!(
        load(&all).unwrap().summary.operations,
        load(&direct).unwrap().summary.operations
    );
    assert_eq!(load(&all).unwrap().meta.hosts.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_merge_into_the_counts_of_one_instance() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.json");
    let (records, _) = generate(&SynthOptions {
        seed: 5,
        sessions: 90,
        mean_gap_ms: 30.0,
        ..SynthOptions::default()
    });
    write_file(&trace, &records).unwrap();
    let registry = Registry::start();
    let t = trace.to_str().unwrap();
    assert_eq!(
        creb(&[
            "replay",
            t,
            "--registry",
            &registry.url,
            "--phase",
            "prewarm",
            "--quiet"
        ])
        .await,
        ExitStatus::Success
    );

    let whole = tmp.path().join("whole");
    let args = [
        "replay",
        t,
        "--registry",
        &registry.url,
        "--phase",
        "run",
        "--quiet",
        "--record-requests",
        "--output-dir",
    ];
    let mut a = args.to_vec();
    a.push(whole.to_str().unwrap());
    // Failed only by docker-registry's link race, which its log accounts for (below).
    let status = creb(&a).await;
    assert!(
        matches!(status, ExitStatus::Success | ExitStatus::Failed),
        "{status:?}"
    );

    let start_at = format!(
        "{:.3}",
        (SystemTime::now() + Duration::from_secs(2))
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    );
    // Three processes at once, one per shard, sharing the seed and the start instant.
    let mut dirs = Vec::new();
    let mut runs = Vec::new();
    for i in 0..3 {
        let dir = tmp.path().join(format!("shard{i}"));
        let mut a: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        a.push(dir.to_str().unwrap().to_owned());
        a.extend([
            "--shard".to_owned(),
            format!("{i}/3"),
            "--start-at".to_owned(),
            start_at.clone(),
        ]);
        runs.push(std::thread::spawn(move || {
            let refs: Vec<&str> = a.iter().map(String::as_str).collect();
            crate::common::run_bin(&refs, None, &[])
        }));
        dirs.push(dir);
    }
    for (r, dir) in runs.into_iter().zip(&dirs) {
        let out = r.join().unwrap();
        let what = format!("{}: {}", dir.display(), out.stderr);
        registry.assert_exit_but_tag_races(out.code, &summary_json(dir), &what);
    }
    let merged = tmp.path().join("merged");
    let r = crate::common::run_bin(
        &[
            "merge",
            dirs[0].to_str().unwrap(),
            dirs[1].to_str().unwrap(),
            dirs[2].to_str().unwrap(),
            "--output-dir",
            merged.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("0/3") && r.stdout.contains("2/3"),
        "per-host table: {}",
        r.stdout
    );
    // The merged table's header says what it holds, as does `report` of the merge.
    assert!(r.stdout.contains("merged 3 shards"), "{}", r.stdout);
    let shown = crate::common::run_bin(&["report", merged.to_str().unwrap()], None, &[]);
    assert!(shown.stdout.contains("merged 3 shards"), "{}", shown.stdout);
    assert!(!shown.stdout.contains("shard 0/3"), "{}", shown.stdout);

    let m = summary_json(&merged);
    let w = summary_json(&whole);
    // Errors can only be docker-registry's link race, which depends on timing: where either
    // run met it, the split between ok and errors of manifest and blob reads may differ.
    registry.assert_no_errors_but_tag_races(&w, "one instance");
    registry.assert_no_errors_but_tag_races(&m, "merged shards");
    let raced = m["totals"]["errors"] != 0 || w["totals"]["errors"] != 0;
    for (name, op) in w["operations"].as_object().unwrap() {
        for field in ["count", "ok", "errors", "bytes_sent", "bytes_received"] {
            let raceable = name.starts_with("manifest_") || name.starts_with("blob_");
            if raced && raceable && field != "count" {
                continue;
            }
            // A manifest the trace both PUTs and GETs is whichever version was there when
            // the GET came: across hosts that order is not the one instance's order.
            if name.starts_with("manifest_") && field == "bytes_received" {
                continue;
            }
            assert_eq!(
                m["operations"][name][field], op[field],
                "{name}.{field}; merged errors {}, one instance's {}",
                m["errors"], w["errors"]
            );
        }
    }
    assert_eq!(m["trace"]["records"], w["trace"]["records"]);
    assert_eq!(m["trace"]["replayed"], w["trace"]["replayed"]);
    assert_eq!(m["trace"]["folded"], w["trace"]["folded"]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[0].join("meta.json")).unwrap()).unwrap();
    let skew = meta["start_skew_ms"].as_f64().unwrap();
    // The start is 2 s ahead; without --start-at a host would start up to 2 s early. The
    // bound leaves room for a loaded 2-core machine scheduling three processes.
    assert!(
        skew.abs() < 500.0,
        "each host started at the shared instant: {skew} ms"
    );

    // The CSV files are readable by Python's csv module.
    let script = r#"
import csv, sys
for path, first in [(sys.argv[1], "interval"), (sys.argv[2], "end_s")]:
    rows = list(csv.reader(open(path, newline="")))
    assert rows[0][0] == first, rows[0]
    assert len(rows) > 1, path
    assert all(len(r) == len(rows[0]) for r in rows), path
print("ok", len(rows))
"#;
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            script,
            merged.join("timeline.csv").to_str().unwrap(),
            whole.join("requests.csv").to_str().unwrap(),
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every operation the summary counts has its rows, the image sessions too: as many
    // image_pull and image_push rows as the summary counts.
    let requests = std::fs::read_to_string(whole.join("requests.csv")).unwrap();
    let header: Vec<&str> = requests.lines().next().unwrap().split(',').collect();
    let op = header
        .iter()
        .position(|c| *c == "op")
        .expect("an op column");
    let summary = summary_json(&whole);
    for session in ["image_pull", "image_push"] {
        let rows = requests
            .lines()
            .skip(1)
            .filter(|l| l.split(',').nth(op) == Some(session))
            .count() as u64;
        let counted = summary["sessions"][session]["count"].as_u64().unwrap_or(0);
        assert!(counted > 0, "{session} not in the summary");
        assert_eq!(rows, counted, "{session} rows in requests.csv");
    }
}
