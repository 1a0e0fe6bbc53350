//! Push and pull against a real registry (Debian's docker-registry, distribution 2.8):
//! round trips verified independently of creb-rs's own client, every upload mode, mounts,
//! and detection of corrupted content.

use crate::common::{creb, op_count, summary_json, Registry};
use creb::ExitStatus;
use sha2::{Digest as _, Sha256};

const OCI_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// Fetches with plain reqwest (not creb-rs's client) for independent verification.
async fn fetch(url: &str, accept: Option<&str>) -> (u16, Vec<u8>) {
    // reqwest is built without a default crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut req = client.get(url);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[tokio::test]
async fn push_stores_distinct_layers_that_hash_to_their_digests_and_pull_reads_them_back() {
    let registry = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("push");
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "x/y",
        "--tag",
        "t",
        "--layers",
        "4",
        "--layer-size",
        "1MiB",
        "--output-dir",
        out_dir.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let summary = summary_json(&out_dir);
    assert_eq!(
        op_count(&summary, "blob_upload", "ok"),
        5,
        "4 layers + config"
    );
    assert_eq!(op_count(&summary, "manifest_put", "ok"), 1);
    assert_eq!(summary["totals"]["errors"], 0);

    // Independent check: the stored manifest names 4 distinct layers whose bytes hash to
    // their digests.
    let (code, manifest) = fetch(
        &format!("{}/v2/x/y/manifests/t", registry.url),
        Some(OCI_ACCEPT),
    )
    .await;
    assert_eq!(code, 200);
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 4);
    let mut digests: Vec<&str> = layers
        .iter()
        .map(|l| l["digest"].as_str().unwrap())
        .collect();
    for layer in layers {
        let digest = layer["digest"].as_str().unwrap();
        let (code, body) = fetch(&format!("{}/v2/x/y/blobs/{digest}", registry.url), None).await;
        assert_eq!(code, 200);
        assert_eq!(body.len(), 1 << 20);
        assert_eq!(sha256(&body), digest);
        assert_eq!(layer["size"], 1 << 20);
    }
    digests.sort();
    digests.dedup();
    assert_eq!(digests.len(), 4, "layers must be distinct");
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let (_, config) = fetch(
        &format!("{}/v2/x/y/blobs/{config_digest}", registry.url),
        None,
    )
    .await;
    assert_eq!(sha256(&config), config_digest);

    let pull_dir = out.path().join("pull");
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "x/y",
        "--tag",
        "t",
        "--output-dir",
        pull_dir.to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let summary = summary_json(&pull_dir);
    assert_eq!(op_count(&summary, "blob_get", "ok"), 5);
    assert_eq!(
        op_count(&summary, "blob_get", "bytes_received"),
        4 * (1 << 20) + config.len() as u64
    );
    assert_eq!(op_count(&summary, "manifest_get", "ok"), 1);
    assert_eq!(summary["totals"]["errors"], 0);
    assert_eq!(summary["sessions"]["image_pull"]["ok"], 1);
}

/// One way of pushing: the pushes before it (`setup`), its own flags, what its summary must
/// say, and a verified pull of what it stored.
struct UploadCase {
    repo: &'static str,
    setup: &'static [&'static [&'static str]],
    flags: &'static [&'static str],
    check: fn(&serde_json::Value),
}

const UPLOAD_CASES: &[UploadCase] = &[
    // 4 PATCHes of 256 KiB per 1 MiB layer, plus one for the small config; the closing
    // PUTs carry no body.
    UploadCase {
        repo: "chunked/app",
        setup: &[],
        flags: &[
            "--layers",
            "4",
            "--layer-size",
            "1MiB",
            "--chunk-size",
            "256KiB",
        ],
        check: |s| {
            assert_eq!(op_count(s, "upload_patch", "ok"), 4 * 4 + 1);
            assert_eq!(
                op_count(s, "upload_patch", "bytes_sent"),
                op_count(s, "blob_upload", "bytes_sent")
            );
            assert_eq!(op_count(s, "upload_put", "ok"), 5);
            assert_eq!(op_count(s, "upload_put", "bytes_sent"), 0);
        },
    },
    // distribution 2.8 answers 202 to POST ?digest= and discards the body: every byte is
    // sent again.
    UploadCase {
        repo: "single/app",
        setup: &[],
        flags: &["--layers", "2", "--layer-size", "100KiB", "--single-post"],
        check: |s| {
            assert_eq!(s["events"]["single_post_fallback"], 3);
            assert_eq!(op_count(s, "upload_post", "ok"), 3);
            assert_eq!(op_count(s, "upload_put", "ok"), 3);
            let sent = op_count(s, "blob_upload", "bytes_sent");
            assert!(
                sent >= 2 * 2 * 100 * 1024,
                "every byte was sent twice, got {sent}"
            );
        },
    },
    // A mount from a repository holding the blobs uploads nothing.
    UploadCase {
        repo: "base/dst",
        setup: &[&[
            "--repo",
            "base/src",
            "--layers",
            "3",
            "--layer-size",
            "64KiB",
        ]],
        flags: &[
            "--layers",
            "3",
            "--layer-size",
            "64KiB",
            "--mount-from",
            "base/src",
        ],
        check: |s| {
            assert_eq!(
                op_count(s, "blob_mount", "ok"),
                4,
                "3 layers + config mounted"
            );
            assert_eq!(op_count(s, "blob_upload", "count"), 0);
            assert!(s["events"].get("mount_fallback").is_none());
        },
    },
    // A mount from a repository without them falls back to uploading.
    UploadCase {
        repo: "fresh/dst",
        setup: &[],
        flags: &[
            "--layers",
            "2",
            "--layer-size",
            "10KiB",
            "--mount-from",
            "fresh/nothing-here",
        ],
        check: |s| {
            assert_eq!(s["events"]["mount_fallback"], 3);
            assert_eq!(op_count(s, "blob_upload", "ok"), 3);
        },
    },
];

/// Every way of pushing in [`UPLOAD_CASES`] stores what it says, and a verified pull reads
/// it back.
#[tokio::test]
async fn every_upload_mode_stores_what_a_verified_pull_reads_back() {
    let registry = Registry::start();
    for case in UPLOAD_CASES {
        for setup in case.setup {
            let mut args = vec!["push", "--registry", &registry.url, "--quiet"];
            args.extend_from_slice(setup);
            assert_eq!(
                creb(&args).await,
                ExitStatus::Success,
                "{}: setup",
                case.repo
            );
        }
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().to_str().unwrap();
        let mut args = vec!["push", "--registry", &registry.url, "--repo", case.repo];
        args.extend_from_slice(case.flags);
        args.extend(["--output-dir", dir, "--quiet"]);
        assert_eq!(creb(&args).await, ExitStatus::Success, "{}", case.repo);
        let summary = summary_json(out.path());
        (case.check)(&summary);
        assert_eq!(summary["totals"]["errors"], 0, "{}", case.repo);
        let pull = [
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            case.repo,
            "--quiet",
        ];
        assert_eq!(
            creb(&pull).await,
            ExitStatus::Success,
            "{}: pull",
            case.repo
        );
    }
}

/// A chunked push hashes each layer as its PATCHes send it, so no layer is HEADed (only the
/// config, whose digest is known once the layers are); the digests it learns are the ones
/// the same images hashed first have: pushing them again with `--hash first` finds every
/// blob present and puts the same manifest.
#[tokio::test]
async fn a_chunked_push_hashes_each_layer_while_sending_it_and_agrees_with_hashing_first() {
    let registry = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let push = |dir: &str, extra: &[&str]| {
        let dir = out.path().join(dir);
        let mut args = vec![
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "hashing/app",
            "--images",
            "2",
            "--layers",
            "3",
            "--layer-size",
            "300KiB",
            "--chunk-size",
            "128KiB",
            "--output-dir",
            dir.to_str().unwrap(),
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let status = creb(&args).await;
            let summary = summary_json(&dir);
            let hash = summary["config"]["hash"].clone();
            (status, summary, hash)
        }
    };
    let (status, summary, hash) = push("sending", &[]).await;
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(hash, "while_sending");
    // Two images: the configs are HEADed, the six layers are not.
    assert_eq!(op_count(&summary, "blob_head", "count"), 2, "{summary}");
    // Three PATCHes per 300 KiB layer, one per config.
    assert_eq!(op_count(&summary, "upload_patch", "ok"), 2 * (3 * 3 + 1));
    assert_eq!(op_count(&summary, "blob_upload", "ok"), 2 * 4);
    assert_eq!(summary["totals"]["errors"], 0);

    let (status, summary, hash) = push("first", &["--hash", "first"]).await;
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(hash, "first");
    assert_eq!(summary["events"]["blob_exists"], 2 * 4, "{summary}");
    assert_eq!(op_count(&summary, "blob_upload", "count"), 0);
    assert_eq!(summary["totals"]["errors"], 0);

    // What was stored hashes to the digests the manifests name: a verified pull.
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "hashing/app",
        "--images",
        "2",
        "--verify",
        "sha256",
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
}

#[tokio::test]
async fn docker_schema2_manifests_push_and_pull() {
    let registry = Registry::start();
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "docker/fmt",
        "--layers",
        "2",
        "--layer-size",
        "4KiB",
        "--manifest-format",
        "docker",
        "--images",
        "3",
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let (code, body) = fetch(
        &format!("{}/v2/docker/fmt/manifests/latest-2", registry.url),
        Some("application/vnd.docker.distribution.manifest.v2+json"),
    )
    .await;
    assert_eq!(code, 200);
    let m: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        m["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    let out = tempfile::tempdir().unwrap();
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "docker/fmt",
        "--all-tags",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let summary = summary_json(out.path());
    assert_eq!(summary["sessions"]["image_pull"]["ok"], 3);
    assert_eq!(op_count(&summary, "tag_list", "ok"), 1);
}

#[tokio::test]
async fn pushing_the_same_seed_twice_skips_existing_blobs_and_says_so() {
    let registry = Registry::start();
    let args = [
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "again/app",
        "--layers",
        "2",
        "--layer-size",
        "1KiB",
        "--quiet",
    ];
    assert_eq!(creb(&args).await, ExitStatus::Success);
    let out = tempfile::tempdir().unwrap();
    let mut second = args.to_vec();
    second.extend(["--output-dir", out.path().to_str().unwrap()]);
    assert_eq!(creb(&second).await, ExitStatus::Success);
    let summary = summary_json(out.path());
    assert_eq!(summary["events"]["blob_exists"], 3);
    assert_eq!(summary["warnings"][0]["kind"], "blobs_existed");
    // A different seed gives new content.
    let out2 = tempfile::tempdir().unwrap();
    let mut third = args.to_vec();
    third.extend(["--seed", "7", "--output-dir", out2.path().to_str().unwrap()]);
    assert_eq!(creb(&third).await, ExitStatus::Success);
    assert_eq!(op_count(&summary_json(out2.path()), "blob_upload", "ok"), 3);
}

#[tokio::test]
async fn corrupted_blob_is_a_digest_mismatch_not_a_success() {
    let registry = Registry::start();
    assert_eq!(
        creb(&[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "bad/app",
            "--layers",
            "1",
            "--layer-size",
            "32KiB",
            "--quiet"
        ])
        .await,
        ExitStatus::Success
    );
    let (_, manifest) = fetch(
        &format!("{}/v2/bad/app/manifests/latest", registry.url),
        Some(OCI_ACCEPT),
    )
    .await;
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let digest = manifest["layers"][0]["digest"].as_str().unwrap();
    // Tamper with the stored bytes, keeping the length: the registry serves them as they are.
    let path = registry.blob_data_path(digest);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1000] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();

    let out = tempfile::tempdir().unwrap();
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "bad/app",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Failed);
    let summary = summary_json(out.path());
    assert_eq!(summary["errors"]["digest_mismatch"], 1);
    assert_eq!(
        op_count(&summary, "blob_get", "ok"),
        1,
        "the config is fine"
    );
    assert!(summary["operations"]["blob_get"]["error_latency_ms"].is_object());

    // With --no-verify the corruption goes unnoticed (and the body is still read in full).
    let out = tempfile::tempdir().unwrap();
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "bad/app",
        "--no-verify",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    assert!(op_count(&summary_json(out.path()), "blob_get", "bytes_received") > 32 * 1024);
}

#[tokio::test]
async fn missing_tag_is_a_counted_404_with_the_registry_error_code() {
    let registry = Registry::start();
    let out = tempfile::tempdir().unwrap();
    let status = creb(&[
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "no/such",
        "--tag",
        "nope",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Failed);
    let summary = summary_json(out.path());
    assert_eq!(summary["errors"]["http_404"], 1);
    assert_eq!(
        summary["operations"]["manifest_get"]["errors_by_kind"]["http_404"],
        1
    );
}

#[tokio::test]
async fn dead_registry_is_a_usage_error_with_a_written_result() {
    let port = crate::common::free_port();
    let out = tempfile::tempdir().unwrap();
    let status = creb(&[
        "pull",
        "--registry",
        &format!("http://127.0.0.1:{port}"),
        "--repo",
        "a/b",
        "--output-dir",
        out.path().to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Usage);
    let summary = summary_json(out.path());
    assert_eq!(
        summary["operations"]["ping"]["errors_by_kind"]["connect"],
        1
    );
}
