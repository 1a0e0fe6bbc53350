//! The container image: `scripts/image` builds it without a daemon (go-containerregistry's
//! crane, installed by scripts/setup) and pushes it to a local docker-registry; creb-rs's
//! own `pull` fetches it back and verifies every digest; its layer, unpacked, holds the
//! binary, which runs, and the CA certificates; the configuration says how it runs.
//! CI requires crane (`CREB_REQUIRE_COMPAT=1`, as the compatibility suite does).

use std::process::Command;

use crate::common::{run_bin, summary_json, tool, Registry};

#[test]
fn the_image_is_pushed_pulled_back_verified_and_its_binary_runs() {
    if tool("crane").is_none() {
        assert!(
            std::env::var("CREB_REQUIRE_COMPAT").map_or(true, |v| v != "1"),
            "crane is missing (scripts/setup installs it)"
        );
        eprintln!("skipped: crane is not installed");
        return;
    }
    let registry = Registry::start();
    let host = registry
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let built = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image"))
        .arg(format!("{host}/tools/creb-rs"))
        .env("CREB_BIN", env!("CARGO_BIN_EXE_creb-rs"))
        .env("INSECURE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    let pushed = stdout.lines().last().unwrap_or_default();
    assert!(
        pushed.starts_with(&format!("{host}/tools/creb-rs@sha256:")),
        "{stdout}"
    );
    let digest = pushed.rsplit('@').next().unwrap();

    // creb-rs pulls it by tag and verifies the manifest, config and layer digests.
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("pull");
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "tools/creb-rs",
            "--tag",
            version,
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = summary_json(&out);
    assert_eq!(summary["totals"]["errors"], 0, "{summary}");
    assert_eq!(
        summary["operations"]["blob_get"]["ok"], 2,
        "config and layer"
    );

    // The manifest the tag names is the digest the script printed; its layer holds the
    // binary and the certificates.
    let get = |path: &str, accept: &str| -> Vec<u8> {
        let out = Command::new("curl")
            .args(["-sf", "-H", &format!("Accept: {accept}")])
            .arg(format!(
                "{}/v2/tools/creb-rs/{path}",
                registry.url.trim_end_matches('/')
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "GET {path}");
        out.stdout
    };
    let oci = "application/vnd.oci.image.manifest.v1+json";
    let manifest_bytes = get(&format!("manifests/{digest}"), oci);
    let manifest: serde_json::Value = serde_json::from_slice(&manifest_bytes).unwrap();
    assert_eq!(manifest["mediaType"], oci);
    let config: serde_json::Value = serde_json::from_slice(&get(
        &format!("blobs/{}", manifest["config"]["digest"].as_str().unwrap()),
        "*/*",
    ))
    .unwrap();
    assert_eq!(config["config"]["Entrypoint"][0], "/creb-rs", "{config}");
    assert_eq!(config["config"]["User"], "65534:65534", "{config}");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        version
    );
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    let layer = get(
        &format!("blobs/{}", layers[0]["digest"].as_str().unwrap()),
        "*/*",
    );
    let root = scratch.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(scratch.path().join("layer.tar.gz"), &layer).unwrap();
    let unpacked = Command::new("tar")
        .arg("-xzf")
        .arg(scratch.path().join("layer.tar.gz"))
        .arg("-C")
        .arg(&root)
        .status()
        .unwrap();
    assert!(unpacked.success());
    assert!(root.join("etc/ssl/certs/ca-certificates.crt").is_file());
    let ran = Command::new(root.join("creb-rs"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(ran.status.success());
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        format!("creb-rs {version}")
    );
}
