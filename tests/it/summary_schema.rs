//! `summary.json` from real runs validates against the committed JSON Schema, and the schema
//! rejects what the contract forbids (so the check can fail).

use crate::common::{creb, summary_json, Registry};
use creb::ExitStatus;

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/summary.schema.json"
    ))
    .unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("the schema itself is valid")
}

fn assert_valid(instance: &serde_json::Value) {
    let validator = schema();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "summary.json does not match the schema:\n{}",
        errors.join("\n")
    );
}

/// meta.json's `config` is summary.json's (one block, written twice).
fn assert_same_config(dir: &std::path::Path) {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["config"],
        summary_json(dir)["config"],
        "{}",
        dir.display()
    );
}

#[tokio::test]
async fn push_and_pull_summaries_match_the_schema() {
    let registry = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let push_dir = out.path().join("push");
    let pull_dir = out.path().join("pull");
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "schema/app",
        "--layers",
        "2",
        "--layer-size",
        "2MiB",
        "--chunk-size",
        "1MiB",
        "--split-by-header",
        "Docker-Distribution-Api-Version",
        "--output-dir",
        push_dir.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let push = summary_json(&push_dir);
    assert_valid(&push);
    assert_same_config(&push_dir);
    // distribution says its API version on every answer: each operation under one value.
    let split = &push["split_by_header"];
    assert_eq!(split["header"], "docker-distribution-api-version");
    for (op, s) in push["operations"].as_object().unwrap() {
        assert_eq!(
            split["values"]["registry/2.0"][op]["count"], s["count"],
            "{op}: {split}"
        );
    }
    assert_eq!(push["command"], "push");
    assert_eq!(push["model"], "closed");
    // A push is attributed to its one repository (it has no trace clients).
    assert_eq!(push["by_repository"].as_array().unwrap().len(), 1, "{push}");
    assert_eq!(push["by_client"], serde_json::json!([]));
    assert!(
        push["operations"]["blob_upload"]["size_classes"]["1mib_10mib"]["count"]
            .as_u64()
            .unwrap()
            == 2
    );

    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "schema/app",
        "--tag",
        "missing",
        "--output-dir",
        pull_dir.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Failed);
    let pull = summary_json(&pull_dir);
    assert_valid(&pull);
    assert_same_config(&pull_dir);
    assert!(
        pull["operations"]["manifest_get"]["latency_ms"].is_null(),
        "no success, no latency"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_summaries_match_the_schema() {
    use creb::trace::synth::{generate, SynthOptions};
    use creb::trace::write::write_file;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let (records, _) = generate(&SynthOptions {
        sessions: 40,
        mean_gap_ms: 20.0,
        ..SynthOptions::default()
    });
    write_file(&trace, &records).unwrap();
    let registry = Registry::start();
    let out = dir.path().join("out");
    let status = creb(&[
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--speed",
        "10",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    let run = summary_json(&out);
    // docker-registry 2.8 may answer a manifest PUT 500 in its tag race (tests/common).
    registry.assert_exit_but_tag_races(i32::from(status.code()), &run, "replay");
    assert_valid(&run);
    assert_eq!(run["model"], "open");
    assert!(run["trace"]["records"].as_u64().unwrap() > 0);
    assert!(run["checks"]["cores"].as_u64().unwrap() >= 1);
    // Attributed to the trace's repositories and clients, in the schema's shape.
    assert!(
        !run["by_repository"].as_array().unwrap().is_empty(),
        "{run}"
    );
    assert!(!run["by_client"].as_array().unwrap().is_empty(), "{run}");
    assert!(run["attribution"]["tracked"].as_u64().unwrap() > 0);
    assert_valid(&summary_json(&out.join("prewarm")));
    assert_same_config(&out);
    assert_eq!(run["config"]["mode"], "delay");
    assert_eq!(run["config"]["phase"], "all");
}

#[test]
fn the_schema_rejects_broken_summaries() {
    let validator = schema();
    let good: serde_json::Value = serde_json::json!({
        "schema_version": 1, "tool": {"name": "creb-rs", "version": "0.1.0"}, "command": "push",
        "mode": "push", "model": "closed", "concurrency": 1, "registry": "http://127.0.0.1:1",
        "seed": 1, "shard": {"index": 0, "count": 1}, "started_at": "2026-01-01T00:00:00.000Z",
        "duration_s": 1.0, "interrupted": false, "trace": null,
        "totals": {"requests": 0, "ok": 0, "errors": 0, "bytes_sent": 0, "bytes_received": 0, "http_requests": 0},
        "throughput": {"requests_per_s": 0.0, "bytes_per_s": 0.0}, "operations": {}, "sessions": {},
        "errors": {}, "events": {}, "warnings": [],
        "histograms": {"unit": "us", "lowest_discernible": 1, "highest_trackable": 3600000000u64, "significant_digits": 3},
        "config": {
            "registry": {
                "base": "http://127.0.0.1:1/",
                "transport": {
                    "client": "hyper", "insecure": false, "user_agent": "creb-rs/0.1.0",
                    "connect_timeout": {"secs": 5, "nanos": 0}, "request_timeout": {"secs": 60, "nanos": 0},
                    "body_idle_timeout": {"secs": 30, "nanos": 0}, "request_deadline": {"secs": 600, "nanos": 0},
                    "pool_max_idle_per_host": 64, "read_buffer_max": 0
                },
                "retry": {"on": [], "max_retries": 0, "backoff": {"secs": 0, "nanos": 100000000}, "max_backoff": {"secs": 30, "nanos": 0}}
            },
            "credentials": {"source": "anonymous", "username": null},
            "repo": "a/b", "tag": "latest", "images": 1, "layers": 1, "layer_size": 1024, "mount_from": null,
            "manifest_format": "oci", "layer_form": {"compression": "gzip", "ratio": 0.35},
            "raw_layers": 0, "platforms": [], "seed": 1, "upload": {"mode": "monolithic"}, "hash": "first",
            "attach": 0, "concurrency": 1
        }
    });
    assert!(
        validator.is_valid(&good),
        "{:?}",
        validator.validate(&good).err()
    );
    for (pointer, value) in [
        ("/model", serde_json::json!("half-open")),
        ("/schema_version", serde_json::json!(2)),
        ("/errors", serde_json::json!({"weird kind": 1})),
        ("/operations", serde_json::json!({"blob_fetch": {}})),
        // The configuration block is the contract too: its keys, and their values' kinds.
        ("/config/hash", serde_json::json!("later")),
        (
            "/config/registry/transport/connect_timeout",
            serde_json::json!(5),
        ),
        (
            "/config/credentials",
            serde_json::json!({"source": "x", "password": "p"}),
        ),
        ("/config", serde_json::json!({})),
    ] {
        let mut bad = good.clone();
        *bad.pointer_mut(pointer).unwrap() = value;
        assert!(!validator.is_valid(&bad), "{pointer} should be rejected");
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("totals");
    assert!(!validator.is_valid(&missing));
    let mut renamed = good.clone();
    let config = renamed["config"].as_object_mut().unwrap();
    let seed = config.remove("seed").unwrap();
    config.insert("content_seed".into(), seed);
    assert!(
        !validator.is_valid(&renamed),
        "a renamed config key is rejected"
    );
}
