//! The images creb-rs pushes, read by real clients: on docker-registry, distribution v3 and
//! distribution v3 on S3, `push` with each compression, `push --platforms` and a replay's
//! prewarm make images that crane validates and exports, skopeo copies to an OCI layout and
//! umoci unpacks into a file tree (all installed by scripts/setup; CI requires them,
//! `CREB_REQUIRE_COMPAT=1`). Each pushed layer is fetched and decompressed here too: its size
//! is the one asked for, and its uncompressed digest is the config's `diff_id`.
//!
//! `crane validate` reads every layer through gzip whatever its media type
//! (go-containerregistry's `validate.computeLayer`), so zstd and uncompressed images are
//! validated with `--fast` (manifest, config and digests) and their layers checked by the
//! decompression here and by umoci.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest as _, Sha256};

use crate::common::{run_bin, summary_json, tool};
use crate::compat::{Running, Target};

/// crane, skopeo and umoci, or `None` (a skip) when one is missing outside CI.
fn clients() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let skopeo = which("skopeo");
    match (tool("crane"), skopeo, tool("umoci")) {
        (Some(c), Some(s), Some(u)) => Some((c, s, u)),
        missing => {
            assert!(
                std::env::var("CREB_REQUIRE_COMPAT").map_or(true, |v| v != "1"),
                "CREB_REQUIRE_COMPAT=1 but a client is missing (crane, skopeo, umoci): {missing:?}; scripts/setup installs them"
            );
            eprintln!("skipped: a client is missing (crane, skopeo, umoci): {missing:?}");
            None
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Runs a client, which must succeed; its standard output.
fn client(bin: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(bin).args(args).output().expect("run a client");
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        bin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn decompress(compression: &str, blob: &[u8]) -> Vec<u8> {
    match compression {
        "gzip" => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(blob)
                .read_to_end(&mut out)
                .expect("a gzip layer decodes");
            out
        }
        "zstd" => {
            let mut out = Vec::with_capacity(blob.len() * 20 + 4096);
            ruzstd::decoding::FrameDecoder::new()
                .decode_all_to_vec(blob, &mut out)
                .expect("a zstd layer decodes");
            out
        }
        _ => blob.to_vec(),
    }
}

const LAYER_SIZE: u64 = 300_001;

/// Pushes `repo` with two layers of `compression` and checks what every client makes of it.
fn push_and_read(running: &Running, scratch: &Path, repo: &str, compression: &str) {
    let (crane, _, _) = clients().expect("clients checked");
    let size = LAYER_SIZE.to_string();
    let mut args = vec![
        "push",
        "--registry",
        &running.url,
        "--repo",
        repo,
        "--layers",
        "2",
        "--layer-size",
        &size,
        "--compression",
        compression,
        "-q",
    ];
    args.extend(running.flags.iter().map(String::as_str));
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let host = running
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let image = format!("{host}/{repo}:latest");

    let mut validate = vec!["validate", "--remote", &image, "--insecure"];
    if compression != "gzip" {
        validate.push("--fast");
    }
    client(&crane, &validate);

    let manifest: serde_json::Value =
        serde_json::from_slice(&client(&crane, &["manifest", &image, "--insecure"])).unwrap();
    let config: serde_json::Value =
        serde_json::from_slice(&client(&crane, &["config", &image, "--insecure"])).unwrap();
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let layers = manifest["layers"].as_array().unwrap();
    let diff_ids = config["rootfs"]["diff_ids"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(diff_ids.len(), 2);
    assert_eq!(config["history"].as_array().unwrap().len(), 2);
    let media = match compression {
        "gzip" => "application/vnd.oci.image.layer.v1.tar+gzip",
        "zstd" => "application/vnd.oci.image.layer.v1.tar+zstd",
        _ => "application/vnd.oci.image.layer.v1.tar",
    };
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        assert_eq!(layer["mediaType"], media);
        assert_eq!(layer["size"], LAYER_SIZE, "the size asked for, exactly");
        let digest = layer["digest"].as_str().unwrap();
        let blob = client(
            &crane,
            &["blob", &format!("{host}/{repo}@{digest}"), "--insecure"],
        );
        assert_eq!(blob.len() as u64, LAYER_SIZE);
        let tar = decompress(compression, &blob);
        let diff = format!("sha256:{}", hex(&Sha256::digest(&tar)));
        assert_eq!(
            diff_id.as_str(),
            Some(diff.as_str()),
            "{compression} diff_id"
        );
        if compression != "none" {
            let ratio = blob.len() as f64 / tar.len() as f64;
            assert!((0.3..0.4).contains(&ratio), "{compression}: ratio {ratio}");
        }
    }

    let exported = client(&crane, &["export", "--insecure", &image, "-"]);
    let names = tar_names(&exported);
    assert!(names.len() > 20, "{} entries: {names:?}", names.len());
    assert!(names.iter().all(|n| n.starts_with("creb-")), "{names:?}");

    let rootfs = copy_and_unpack(&image, &scratch.join(compression), &[]);
    let files = count_files(&rootfs);
    let exported_files = names.iter().filter(|n| !n.ends_with('/')).count();
    assert!(files > 10, "{files} files unpacked");
    assert!(
        files <= exported_files,
        "umoci unpacked {files} files, crane exported {exported_files} entries"
    );
}

/// Copies `image` to an OCI layout under `at` with skopeo (`extra` flags added) and unpacks
/// it with umoci: the bundle's root file system.
fn copy_and_unpack(image: &str, at: &Path, extra: &[&str]) -> PathBuf {
    let (_, skopeo, umoci) = clients().expect("clients checked");
    std::fs::create_dir_all(at).unwrap();
    let layout = at.join("oci");
    let mut copy = vec!["copy", "-q", "--src-tls-verify=false"];
    copy.extend(extra);
    let from = format!("docker://{image}");
    let to = format!("oci:{}:t", layout.display());
    copy.extend([from.as_str(), to.as_str()]);
    client(&skopeo, &copy);
    let bundle = at.join("bundle");
    let image = format!("{}:t", layout.display());
    client(
        &umoci,
        &[
            "unpack",
            "--rootless",
            "--image",
            &image,
            bundle.to_str().unwrap(),
        ],
    );
    bundle.join("rootfs")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The names in a tar, as `tar -t` lists them.
fn tar_names(tar: &[u8]) -> Vec<String> {
    let mut child = Command::new("tar")
        .arg("-t")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(tar).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            n += count_files(&entry.path());
        } else if kind.is_file() {
            n += 1;
        }
    }
    n
}

/// Every compression pushed to `target`, an index of two platforms, and a replay's
/// prewarm, each read back by every client.
fn every_compression_on(target: Target) {
    if clients().is_none() {
        return;
    }
    let running = match target.start() {
        Ok(r) => r,
        Err(why) => {
            assert!(
                std::env::var("CREB_REQUIRE_COMPAT").map_or(true, |v| v != "1"),
                "CREB_REQUIRE_COMPAT=1 but {}: {why}",
                target.name()
            );
            eprintln!("skipped: {}: {why}", target.name());
            return;
        }
    };
    let scratch = tempfile::tempdir().unwrap();
    for compression in ["gzip", "zstd", "none"] {
        push_and_read(
            &running,
            scratch.path(),
            &format!("real/{compression}"),
            compression,
        );
    }
    several_platforms_make_an_index_clients_pick_from(&running);
    a_replays_prewarm_makes_images_clients_unpack(&running);
}

#[test]
fn generated_images_are_read_by_real_clients_on_docker_registry() {
    every_compression_on(Target::Distribution28);
}

#[test]
fn generated_images_are_read_by_real_clients_on_distribution_v3() {
    every_compression_on(Target::Distribution3);
}

#[test]
fn generated_images_are_read_by_real_clients_on_distribution_v3_on_s3() {
    every_compression_on(Target::S3Redirect);
}

/// A layer smaller than the smallest tar of its compression (an empty tar: 32 bytes in gzip)
/// is plain bytes: counted in meta.json and warned about, never silently.
#[test]
fn layers_too_small_for_a_tar_are_counted_and_warned_about() {
    let registry = crate::common::Registry::start();
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("push");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "raw/small",
            "--layers",
            "3",
            "--layer-size",
            "20",
            "--output-dir",
            out.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("warning [raw_layers]"), "{}", r.stdout);
    let summary = summary_json(&out);
    let warned = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["kind"] == "raw_layers");
    assert!(warned, "{summary}");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["config"]["raw_layers"], 3, "{meta}");
    assert_eq!(
        meta["config"]["layer_form"]["compression"], "gzip",
        "{meta}"
    );
    assert_eq!(meta["config"]["layer_form"]["ratio"], 0.35, "{meta}");
}

/// zstd layers have no docker media type: a usage error, before anything is sent.
#[test]
fn zstd_with_the_docker_format_is_a_usage_error() {
    let r = run_bin(
        &[
            "push",
            "--registry",
            "http://127.0.0.1:9",
            "--repo",
            "x/y",
            "--layers",
            "1",
            "--layer-size",
            "1MiB",
            "--compression",
            "zstd",
            "--manifest-format",
            "docker",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no zstd layer type"), "{}", r.stderr);
}

/// `push --platforms` makes one image per platform, with layers of its own, under an index
/// tagged as the image: crane validates the index and every image, skopeo copies each
/// platform's image and umoci unpacks it; `pull --platform` picks its image from the index,
/// and an index without the platform asked for is an error that names what it has.
fn several_platforms_make_an_index_clients_pick_from(running: &Running) {
    let (crane, _, _) = clients().expect("clients checked");
    let registry = running;
    let host = registry
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut args = vec![
        "push",
        "--registry",
        &registry.url,
        "--repo",
        "multi/app",
        "--layers",
        "2",
        "--layer-size",
        "100KiB",
        "--platforms",
        "linux/amd64,linux/arm64",
        "-q",
    ];
    args.extend(running.flags.iter().map(String::as_str));
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let image = format!("{host}/multi/app:latest");
    client(&crane, &["validate", "--remote", &image, "--insecure"]);
    let index: serde_json::Value =
        serde_json::from_slice(&client(&crane, &["manifest", &image, "--insecure"])).unwrap();
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let entries = index["manifests"].as_array().unwrap();
    let platforms: Vec<String> = entries
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["platform"]["os"].as_str().unwrap(),
                e["platform"]["architecture"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);
    let mut layer_sets = Vec::new();
    let scratch = tempfile::tempdir().unwrap();
    for (entry, platform) in entries.iter().zip(&platforms) {
        let by_digest = format!("{host}/multi/app@{}", entry["digest"].as_str().unwrap());
        let config: serde_json::Value =
            serde_json::from_slice(&client(&crane, &["config", &by_digest, "--insecure"])).unwrap();
        assert_eq!(
            format!(
                "{}/{}",
                config["os"].as_str().unwrap(),
                config["architecture"].as_str().unwrap()
            ),
            *platform
        );
        let manifest: serde_json::Value =
            serde_json::from_slice(&client(&crane, &["manifest", &by_digest, "--insecure"]))
                .unwrap();
        let layers: Vec<String> = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["digest"].as_str().unwrap().to_owned())
            .collect();
        layer_sets.push(layers);
        let arch = platform.rsplit('/').next().unwrap();
        let at = scratch.path().join(arch);
        let rootfs = copy_and_unpack(
            &image,
            &at,
            &["--override-arch", arch, "--override-os", "linux"],
        );
        assert!(count_files(&rootfs) > 0, "{platform}");
    }
    assert!(
        layer_sets[0].iter().all(|l| !layer_sets[1].contains(l)),
        "each platform's layers are its own: {layer_sets:?}"
    );

    let out = scratch.path().join("pull-arm64");
    let pull = |platform: &str, out: &Path| {
        let mut args = vec![
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "multi/app",
            "--platform",
            platform,
            "--output-dir",
            out.to_str().unwrap(),
        ];
        args.extend(running.flags.iter().map(String::as_str));
        run_bin(&args, None, &[])
    };
    let r = pull("linux/arm64", &out);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = summary_json(&out);
    assert_eq!(summary["totals"]["errors"], 0, "{summary}");
    assert_eq!(
        summary["operations"]["blob_get"]["ok"], 3,
        "config and 2 layers"
    );
    assert_eq!(summary["config"]["platform"], "linux/arm64");

    let out = scratch.path().join("pull-s390x");
    let r = pull("linux/s390x", &out);
    assert_ne!(r.code, 0, "an index without the platform is an error");
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("no image for linux/s390x") && said.contains("linux/amd64, linux/arm64"),
        "{said}"
    );
}

/// The images a replay's prewarm makes from a trace (its blobs as gzip tar layers of their
/// recorded sizes, zstd on request) are images too: crane validates every manifest the
/// prewarm pushed, and skopeo and umoci copy and unpack one of each repository.
fn a_replays_prewarm_makes_images_clients_unpack(registry: &Running) {
    let (crane, _, _) = clients().expect("clients checked");
    let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/sample-trace.json");
    for compression in ["gzip", "zstd"] {
        let scratch = tempfile::tempdir().unwrap();
        let out = scratch.path().join("prewarm");
        let prefix = format!("trace-{compression}");
        let mut args = vec![
            "replay",
            trace,
            "--registry",
            &registry.url,
            "--phase",
            "prewarm",
            "--compression",
            compression,
            "--repo-prefix",
            &prefix,
            "--output-dir",
            out.to_str().unwrap(),
            "--quiet",
        ];
        args.extend(registry.flags.iter().map(String::as_str));
        let r = run_bin(&args, None, &[]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["config"]["layer_form"]["compression"], compression);
        let host = registry
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let catalog = String::from_utf8(client(&crane, &["catalog", &host, "--insecure"])).unwrap();
        let repos: Vec<&str> = catalog
            .lines()
            .filter(|l| l.starts_with(&format!("{prefix}/")))
            .collect();
        assert!(!repos.is_empty(), "the prewarm pushed repositories");
        let mut unpacked = 0;
        for repo in repos.iter().take(6) {
            let tags = String::from_utf8(client(
                &crane,
                &["ls", &format!("{host}/{repo}"), "--insecure"],
            ))
            .unwrap();
            let Some(tag) = tags.lines().next() else {
                continue;
            };
            let image = format!("{host}/{repo}:{tag}");
            let mut validate = vec!["validate", "--remote", &image, "--insecure"];
            if compression != "gzip" {
                validate.push("--fast");
            }
            client(&crane, &validate);
            let rootfs = copy_and_unpack(&image, &scratch.path().join(unpacked.to_string()), &[]);
            assert!(rootfs.is_dir(), "{image}");
            unpacked += 1;
        }
        assert!(unpacked > 0, "{compression}: no tagged image to unpack");
    }
}
