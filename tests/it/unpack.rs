//! `pull --unpack` against docker-registry: images creb-rs pushed (gzip, zstd, none) unpack
//! into a file tree with `layer_unpack` per layer and `image_ready` per image; hand-made
//! images with a wrong diff_id, a layer that is no tar and an entry that climbs out of the
//! directory fail the pull with their own error kinds, and nothing is written outside.
//! `replay --unpack`: the layers of a trace's pulls unpacked in stress and delay mode, the
//! accounting of the trace unchanged, and a stop that removes what was written.

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
    let code = crate::common::interrupt_and_wait(&mut child, "the pull");
    assert_eq!(code, Some(130));
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(
        std::fs::read_dir(&root).unwrap().next().is_none(),
        "left under --unpack-dir: {:?}",
        files_under(&root)
    );
}

/// A trace whose pulls all read their layers, every layer large enough to be a tar.
fn pulls_trace(dir: &Path, sessions: u32, layer_size: (u64, u64)) -> String {
    use creb::trace::synth::{generate, SynthOptions};
    let (records, _) = generate(&SynthOptions {
        seed: 5,
        sessions,
        mean_gap_ms: 100.0,
        clients: 6,
        repos: 3,
        pull_share: 0.9,
        layer_fetch_share: 1.0,
        layer_size,
        duplicate_share: 0.0,
        failed_share: 0.0,
        ..SynthOptions::default()
    });
    let path = dir.join("pulls.json");
    creb::trace::write::write_file(&path, &records).unwrap();
    path.to_str().unwrap().to_owned()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// In stress mode and then in delay mode, every layer a pull of the trace reads is
/// unpacked (`layer_unpack`) and its pull gets an `image_ready`; the trace's accounting and
/// requests are those of a replay without `--unpack`; the files are written under
/// `--unpack-dir` (kept, or removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_unpacks_the_layers_its_pulls_read() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = pulls_trace(dir.path(), 40, (64 * 1024, 512 * 1024));
    let kept = dir.path().join("kept");
    let out = dir.path().join("stress");
    let args = [
        "replay",
        &trace,
        "--registry",
        &registry.url,
        "--mode",
        "stress",
        "--concurrency",
        "8",
        "--unpack",
        "--unpack-dir",
        kept.to_str().unwrap(),
        "--keep-unpacked",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let status = creb(&args).await;
    let s = summary_json(&out);
    registry.assert_exit_but_tag_races(i32::from(status.code()), &s, "stress --unpack");
    let sessions = &s["sessions"];
    let (unpacked, ready, pulls) = (
        &sessions["layer_unpack"],
        &sessions["image_ready"],
        &sessions["image_pull"],
    );
    assert!(n(&unpacked["ok"]) >= 10, "{sessions}");
    assert_eq!(n(&unpacked["errors"]), 0, "{}", s["errors"]);
    // Every layer read of a pull is unpacked: as many as the blob reads.
    assert_eq!(
        n(&unpacked["count"]),
        n(&s["operations"]["blob_get"]["ok"]),
        "{sessions}"
    );
    // A pull with a layer unpacked is ready once; the others read no layer.
    assert!(n(&ready["ok"]) > 0 && n(&ready["count"]) <= n(&pulls["count"]));
    // The tars are larger than the gzip layers read.
    assert!(n(&unpacked["bytes"]) > n(&s["operations"]["blob_get"]["bytes"]));
    assert_eq!(n(&ready["bytes"]), n(&unpacked["bytes"]), "{sessions}");
    // Unpacking is no request: the trace's operations are accounted as always.
    crate::replay::assert_reconciled(&s);
    assert_eq!(
        s["config"]["unpack"]["keep_unpacked"], true,
        "{}",
        s["config"]
    );
    let files = files_under(&kept);
    assert!(files.len() > 10, "{files:?}");

    // Delay mode over the prewarmed registry; nothing stays without --keep-unpacked.
    let gone = dir.path().join("gone");
    let out = dir.path().join("delay");
    let args = [
        "replay",
        &trace,
        "--registry",
        &registry.url,
        "--mode",
        "delay",
        "--speed",
        "4",
        "--phase",
        "run",
        "--unpack",
        "--unpack-dir",
        gone.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let status = creb(&args).await;
    let s = summary_json(&out);
    registry.assert_exit_but_tag_races(i32::from(status.code()), &s, "delay --unpack");
    let sessions = &s["sessions"];
    assert!(n(&sessions["image_ready"]["ok"]) > 0, "{sessions}");
    assert_eq!(
        n(&sessions["layer_unpack"]["count"]),
        n(&s["operations"]["blob_get"]["ok"]),
        "{sessions}"
    );
    assert!(files_under(&gone).is_empty(), "{:?}", files_under(&gone));

    // A directory that cannot be made (a file is in the way): every layer fails to unpack
    // (`other`, the reason in the run's error list), and the run fails although every
    // request succeeded.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, b"a file").unwrap();
    let out = dir.path().join("blocked-run");
    let args = [
        "replay",
        &trace,
        "--registry",
        &registry.url,
        "--mode",
        "stress",
        "--phase",
        "run",
        "--limit-requests",
        "60",
        "--unpack",
        "--unpack-dir",
        blocked.to_str().unwrap(),
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let status = creb(&args).await;
    let s = summary_json(&out);
    assert_eq!(status, ExitStatus::Failed, "{}", s["sessions"]);
    let unpacked = &s["sessions"]["layer_unpack"];
    assert!(n(&unpacked["errors"]) > 0, "{unpacked}");
    assert_eq!(n(&unpacked["ok"]), 0, "{unpacked}");
    assert_eq!(
        unpacked["errors_by_kind"]["other"], unpacked["errors"],
        "{unpacked}"
    );
}

/// `replay --unpack` unpacks what a verified read proved: with `--verify none` there is
/// nothing proved, and a prewarm pulls no image; both are refused before any work.
#[test]
fn replay_unpack_without_verification_or_pulls_is_refused() {
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    for (extra, expect) in [
        (["--verify", "none"], "--verify none proves nothing"),
        (["--phase", "prewarm"], "--phase prewarm pulls none"),
    ] {
        let mut args = vec![
            "replay",
            trace,
            "--registry",
            "http://127.0.0.1:9",
            "--unpack",
        ];
        args.extend(extra);
        let r = crate::common::run_bin(&args, None, &[]);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(expect), "{args:?}: {}", r.stderr);
    }
}

/// A stop while a replay's pulls unpack (their layer reads held by a slow proxy, `--grace
/// 0s`): exit 130, a result marked interrupted, nothing left under `--unpack-dir`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_replay_unpack_removes_the_files() {
    use crate::common::faults::{Fault, FaultProxy};
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let trace = pulls_trace(dir.path(), 20, (64 * 1024, 256 * 1024));
    let status = creb(&[
        "replay",
        &trace,
        "--registry",
        &registry.url,
        "--phase",
        "prewarm",
        "--output-dir",
        dir.path().join("prewarm").to_str().unwrap(),
        "--quiet",
    ])
    .await;
    assert_eq!(status, ExitStatus::Success);
    let proxy = FaultProxy::start(
        registry.port,
        Fault::Delay(std::time::Duration::from_secs(3)),
    );
    proxy.set_filter(|method, path| method == "GET" && path.contains("/blobs/"));
    let root = dir.path().join("unpacked");
    let out = dir.path().join("out");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args([
            "replay",
            &trace,
            "--registry",
            &proxy.url,
            "--phase",
            "run",
            "--mode",
            "stress",
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
    // A pull's directory exists once its first layer read started.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_dir(&root).map_or(true, |mut d| d.next().is_none()) {
        assert!(std::time::Instant::now() < deadline, "no image directory");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let code = crate::common::interrupt_and_wait(&mut child, "the replay");
    assert_eq!(code, Some(130));
    let s = summary_json(&out);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(
        std::fs::read_dir(&root).unwrap().next().is_none(),
        "left under --unpack-dir: {:?}",
        files_under(&root)
    );
}
