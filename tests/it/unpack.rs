//! `pull --unpack` against docker-registry: images creb-rs pushed (gzip, zstd, none) unpack
//! into a file tree with `layer_unpack` per layer and `image_ready` per image; hand-made
//! images with a wrong diff_id, a layer that is no tar and an entry that climbs out of the
//! directory fail the pull with their own error kinds, and nothing is written outside.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::common::{creb, summary_json, Registry};
use creb::ExitStatus;

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// One HTTP/1.1 exchange with the registry (a request per connection): status and headers.
fn exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text[9..12].parse().unwrap();
    (status, text)
}

/// Uploads a blob in one PUT (POST for a session, PUT with the digest).
fn put_blob(port: u16, repo: &str, bytes: &[u8]) -> String {
    let digest = sha(bytes);
    let (status, text) = exchange(
        port,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/"),
        &[],
        b"",
    );
    assert_eq!(status, 202, "{text}");
    let location = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("Location: ")
                .or_else(|| l.strip_prefix("location: "))
        })
        .unwrap()
        .trim()
        .to_owned();
    let path = location
        .split_once("://")
        .map_or(location.as_str(), |(_, rest)| {
            &rest[rest.find('/').unwrap()..]
        })
        .to_owned();
    let sep = if path.contains('?') { '&' } else { '?' };
    let (status, text) = exchange(
        port,
        "PUT",
        &format!("{path}{sep}digest={}", digest.replace(':', "%3A")),
        &[("Content-Type", "application/octet-stream")],
        bytes,
    );
    assert_eq!(status, 201, "{text}");
    digest
}

/// Pushes an image of one layer (`layer`, declared as `media_type`) whose config names
/// `diff_id`, under `repo:latest`.
fn push_image(port: u16, repo: &str, layer: &[u8], media_type: &str, diff_id: &str) {
    let layer_digest = put_blob(port, repo, layer);
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{diff_id}"]}},"config":{{}}}}"#
    );
    let config_digest = put_blob(port, repo, config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":{}}},"layers":[{{"mediaType":"{media_type}","digest":"{layer_digest}","size":{}}}]}}"#,
        config.len(),
        layer.len()
    );
    let (status, text) = exchange(
        port,
        "PUT",
        &format!("/v2/{repo}/manifests/latest"),
        &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
        manifest.as_bytes(),
    );
    assert_eq!(status, 201, "{text}");
}

/// A tar of one regular file at `path` (written raw: a hostile registry serves anything).
fn tar_with(path: &str, body: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..path.len()].copy_from_slice(path.as_bytes());
    header[100..107].copy_from_slice(b"0000644");
    header[108..115].copy_from_slice(b"0000000");
    header[116..123].copy_from_slice(b"0000000");
    header[124..135].copy_from_slice(format!("{:011o}", body.len()).as_bytes());
    header[136..147].copy_from_slice(b"00000000000");
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].fill(b' ');
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut tar = header.to_vec();
    tar.extend_from_slice(body);
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    tar
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

async fn pull_unpack(
    registry: &Registry,
    repo: &str,
    out: &Path,
    dir: &Path,
    keep: bool,
) -> ExitStatus {
    let mut args = vec![
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        repo,
        "--unpack",
        "--unpack-dir",
        dir.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    if keep {
        args.push("--keep-unpacked");
    }
    creb(&args).await
}

fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                found.push(e.path());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_images_unpack_in_every_compression_and_are_removed_unless_kept() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    for compression in ["gzip", "zstd", "none"] {
        let repo = format!("unpack/{compression}");
        let status = creb(&[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            &repo,
            "--layers",
            "3",
            "--layer-size",
            "1MiB",
            "--compression",
            compression,
            "--quiet",
        ])
        .await;
        assert_eq!(status, ExitStatus::Success, "{compression}");
        let kept = dir.path().join(format!("kept-{compression}"));
        let out = dir.path().join(format!("out-{compression}"));
        assert_eq!(
            pull_unpack(&registry, &repo, &out, &kept, true).await,
            ExitStatus::Success,
            "{compression}"
        );
        let s = summary_json(&out);
        let sessions = &s["sessions"];
        assert_eq!(
            sessions["layer_unpack"]["ok"], 3,
            "{compression}: {sessions}"
        );
        assert_eq!(
            sessions["image_ready"]["ok"], 1,
            "{compression}: {sessions}"
        );
        let tar_bytes = sessions["image_ready"]["bytes"].as_u64().unwrap();
        let pulled = sessions["image_pull"]["bytes"].as_u64().unwrap();
        if compression == "none" {
            assert!(
                tar_bytes + 4096 >= pulled && tar_bytes <= pulled,
                "{sessions}"
            );
        } else {
            // The default ratio: the tars are several times the layers.
            assert!(
                tar_bytes > 2 * pulled,
                "{compression}: {tar_bytes} vs {pulled}"
            );
        }
        // image_ready ends after image_pull's last byte.
        assert!(
            sessions["image_ready"]["latency_ms"]["max"].as_f64()
                >= sessions["image_pull"]["latency_ms"]["max"].as_f64(),
            "{sessions}"
        );
        let files = files_under(&kept);
        assert!(files.len() > 3, "{compression}: {files:?}");
        let written: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
        assert!(
            written > 0 && written <= tar_bytes,
            "{written} of {tar_bytes}"
        );
        // Without --keep-unpacked, nothing stays.
        let gone = dir.path().join(format!("gone-{compression}"));
        let out = dir.path().join(format!("again-{compression}"));
        assert_eq!(
            pull_unpack(&registry, &repo, &out, &gone, false).await,
            ExitStatus::Success
        );
        assert!(files_under(&gone).is_empty(), "{compression}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_diff_ids_layers_that_are_no_tar_and_escaping_paths_fail_the_pull() {
    let registry = Registry::start();
    let port = registry.port;
    let dir = tempfile::tempdir().unwrap();
    let tar = tar_with("etc/motd", b"hello\n");
    let gz = gzip(&tar);
    const GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    push_image(port, "bad/diffid", &gz, GZIP, &sha(b"another tar"));
    let junk = b"this is no tar, and no gzip either".to_vec();
    push_image(port, "bad/notar", &junk, GZIP, &sha(&junk));
    let escaping = tar_with("../../escaped", b"x");
    push_image(port, "bad/escape", &gzip(&escaping), GZIP, &sha(&escaping));
    // A good one beside them: the same layer with its true diff_id.
    push_image(port, "good/one", &gz, GZIP, &sha(&tar));
    for (repo, kind) in [
        ("bad/diffid", "diff_id_mismatch"),
        ("bad/notar", "layer_invalid"),
        ("bad/escape", "unsafe_path"),
        ("good/one", ""),
    ] {
        let out = dir.path().join(repo.replace('/', "-"));
        let root = dir.path().join("root").join(repo.replace('/', "-"));
        let status = pull_unpack(&registry, repo, &out, &root, true).await;
        let s = summary_json(&out);
        let unpack = &s["sessions"]["layer_unpack"];
        if kind.is_empty() {
            assert_eq!(status, ExitStatus::Success, "{s}");
            assert_eq!(
                std::fs::read_to_string(files_under(&root)[0].clone()).unwrap(),
                "hello\n"
            );
            continue;
        }
        assert_eq!(status, ExitStatus::Failed, "{repo}: {s}");
        assert_eq!(unpack["errors_by_kind"][kind], 1, "{repo}: {unpack}");
        assert_eq!(s["sessions"]["image_ready"]["errors"], 1, "{repo}");
        assert_eq!(s["sessions"]["image_pull"]["errors"], 1, "{repo}");
        // The blobs themselves were read fine.
        assert_eq!(s["totals"]["errors"], 0, "{repo}");
    }
    assert!(!dir.path().join("escaped").exists());
    assert!(!dir.path().join("root").join("escaped").exists());
}

/// Many images and layers at once, each layer longer than what may wait for its unpacker
/// (so downloads do wait), fewer workers than layers in flight: every image is ready. (A worker taken before a layer's body flowed once stopped such a pull for good:
/// workers held by layers waiting to download, downloads waiting on layers without a
/// worker.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_images_unpack_at_once_without_stalling() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "many/img",
        "--images",
        "4",
        "--layers",
        "4",
        "--layer-size",
        "8MiB",
        "--concurrency",
        "4",
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let out = dir.path().join("out");
    let args = [
        "pull",
        "--registry",
        &registry.url,
        "--repo",
        "many/img",
        "--images",
        "4",
        "--unpack",
        "--concurrency",
        "4",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let pull = creb(&args);
    let status = tokio::time::timeout(std::time::Duration::from_secs(120), pull)
        .await
        .expect("the pull ends");
    assert_eq!(status, ExitStatus::Success);
    let s = summary_json(&out);
    assert_eq!(s["sessions"]["image_ready"]["ok"], 4, "{}", s["sessions"]);
    assert_eq!(s["sessions"]["layer_unpack"]["ok"], 16, "{}", s["sessions"]);
}

/// A stop while an image unpacks (its layers held back by a slow proxy, `--grace 0s`): the
/// pull exits 130 with a valid result marked interrupted, and what it made under
/// `--unpack-dir` is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_unpack_leaves_a_result_and_removes_the_files() {
    use crate::common::faults::{Fault, FaultProxy};
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let status = creb(&[
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "stop/img",
        "--layers",
        "2",
        "--layer-size",
        "1MiB",
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let proxy = FaultProxy::start(
        registry.port,
        Fault::Delay(std::time::Duration::from_secs(3)),
    );
    // The config comes at once; each layer's GET is held 3 s.
    proxy.set_filter(|method, path| method == "GET" && path.contains("/blobs/"));
    let root = dir.path().join("unpacked");
    let out = dir.path().join("out");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args([
            "pull",
            "--registry",
            &proxy.url,
            "--repo",
            "stop/img",
            "--unpack",
            "--unpack-dir",
            root.to_str().unwrap(),
            "--grace",
            "0s",
            "--quiet",
            "--output-dir",
            out.to_str().unwrap(),
        ])
        .env_remove("DOCKER_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The image's directory exists once its config was read and its layers asked for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(&root).map_or(true, |mut d| d.next().is_none()) {
        assert!(std::time::Instant::now() < deadline, "no image directory");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pull did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(code, Some(130));
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(
        std::fs::read_dir(&root).unwrap().next().is_none(),
        "left under --unpack-dir: {:?}",
        files_under(&root)
    );
}
