//! The compatibility suite: every operation family creb-rs drives, against every registry
//! implementation and deployment this machine can run, on loopback.
//!
//! Targets: Debian's docker-registry (distribution 2.8); CNCF distribution v3 and
//! go-containerregistry's registry, installed by `scripts/setup` with `go install` at
//! pinned versions; distribution v3 with token auth (the tests' own issuer);
//! docker-registry behind nginx with TLS and HTTP/2; docker-registry with blob GETs
//! redirected to a second origin (nginx serving its storage directory); distribution v3 on
//! S3 (its `s3` driver on gofakes3, an S3 server scripts/setup installs), blob GETs answered
//! 307 to presigned URLs; docker-registry as a pull-through cache (distribution's `proxy`)
//! of another, read cold and then warm.
//!
//! Families: pushes (monolithic, chunked, single POST, cross-repository mount), a verified
//! pull, tag listing in pages, OCI 1.1 referrers, deletes, and a trace replay in stress and
//! in delay mode. One test per (target, family). Each finds what the registry does, as a
//! short cell ("works", or the deviation), and checks it against the table in
//! `docs/compatibility.md`, so that table is the suite's own output: with
//! `CREB_UPDATE_COMPAT=1` the tests write their cells to `target/compat/` instead, and
//! `scripts/compat-table` puts them into the document. Nothing that is creb-rs's fault is
//! ever a cell: a failure of that kind fails the test.
//!
//! A target whose registry is not installed is skipped, unless `CREB_REQUIRE_COMPAT=1`
//! (set by CI), where that is a failure.

use std::path::{Path, PathBuf};

use crate::common::nginx::{openssl_self_signed, Nginx, NginxOptions};
use crate::common::token_issuer::{IssuerConfig, TokenIssuer};
use crate::common::{
    run_bin, summary_json, tool, tool_version, GgcrRegistry, Registry, RegistryOptions, S3Server,
};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;

const USER: &str = "compat";
const PASSWORD: &str = "compat-secret";

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A registry running as a target describes it.
pub(crate) struct Running {
    pub(crate) url: String,
    /// Flags every command needs for it (credentials, `--ca-cert`).
    pub(crate) flags: Vec<String>,
    /// The distribution process, whose log tells its own 500s (the tag race) apart.
    registry: Option<Registry>,
    /// A read-only target's upstream (a pull-through cache's): where content to read is
    /// pushed first.
    upstream: Option<Registry>,
    /// Whatever else must live as long as the test (nginx, the token issuer, ggcr).
    _parts: Vec<Box<dyn std::any::Any>>,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    Distribution28,
    Distribution3,
    Distribution3Token,
    Ggcr,
    TlsHttp2Front,
    RedirectToStorage,
    PullThrough,
    S3Redirect,
}

impl Target {
    /// A name for files (`target/compat/<key>/`).
    fn key(self) -> &'static str {
        match self {
            Target::Distribution28 => "distribution-2.8",
            Target::Distribution3 => "distribution-3",
            Target::Distribution3Token => "distribution-3-token",
            Target::Ggcr => "ggcr",
            Target::TlsHttp2Front => "tls-http2-front",
            Target::RedirectToStorage => "redirect-to-storage",
            Target::PullThrough => "pull-through-cache",
            Target::S3Redirect => "distribution-3-s3",
        }
    }

    /// The first column of the document's table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Distribution28 => "distribution 2.8 (Debian docker-registry)",
            Target::Distribution3 => "distribution v3",
            Target::Distribution3Token => "distribution v3, token auth",
            Target::Ggcr => "go-containerregistry registry",
            Target::TlsHttp2Front => "distribution 2.8 behind nginx, TLS + HTTP/2",
            Target::RedirectToStorage => "distribution 2.8, blob GETs redirected to storage",
            Target::PullThrough => "distribution 2.8, pull-through cache of distribution 2.8",
            Target::S3Redirect => "distribution v3 on S3 (gofakes3), blob GETs redirected",
        }
    }

    /// The Go-installed binary it needs, if any.
    fn tool(self) -> Option<&'static str> {
        match self {
            Target::Distribution3 | Target::Distribution3Token | Target::S3Redirect => {
                Some("registry")
            }
            Target::Ggcr => Some("crane"),
            _ => None,
        }
    }

    /// Starts it, or says why it cannot run here (a skip unless CREB_REQUIRE_COMPAT=1).
    pub(crate) fn start(self) -> Result<Running, String> {
        let dir = tempfile::tempdir().unwrap();
        let binary =
            match self.tool() {
                None => None,
                Some(name) => Some(tool(name).ok_or_else(|| {
                    format!("{name} is not installed (scripts/setup: go install)")
                })?),
            };
        let mut parts: Vec<Box<dyn std::any::Any>> = Vec::new();
        let mut flags = Vec::new();
        let mut upstream = None;
        let (url, registry) = match self {
            Target::Distribution28 => {
                let r = Registry::start();
                (r.url.clone(), Some(r))
            }
            Target::Distribution3 => {
                let r = Registry::start_with(RegistryOptions {
                    binary,
                    ..RegistryOptions::default()
                });
                (r.url.clone(), Some(r))
            }
            Target::Distribution3Token => {
                let issuer = TokenIssuer::start(IssuerConfig {
                    users: [(USER.to_owned(), PASSWORD.to_owned())].into(),
                    anonymous_actions: vec![],
                    user_actions: vec!["pull".into(), "push".into(), "delete".into()],
                    ..IssuerConfig::default()
                });
                let r = Registry::start_with(RegistryOptions {
                    binary,
                    auth: issuer.registry_auth(),
                    ..RegistryOptions::default()
                });
                parts.push(Box::new(issuer));
                flags.extend([
                    "--username".to_owned(),
                    USER.to_owned(),
                    "--password-cmd".to_owned(),
                    format!("printf {PASSWORD}"),
                ]);
                (r.url.clone(), Some(r))
            }
            Target::Ggcr => {
                let g = GgcrRegistry::start(binary.as_deref().unwrap());
                let url = g.url.clone();
                parts.push(Box::new(g));
                (url, None)
            }
            Target::TlsHttp2Front => {
                let r = Registry::start();
                let tls = openssl_self_signed(dir.path(), "front", "IP:127.0.0.1");
                let nginx = Nginx::start(NginxOptions {
                    tls: Some(tls.clone()),
                    http2: true,
                    upstream_port: Some(r.port),
                    ..NginxOptions::default()
                });
                flags.extend([
                    "--ca-cert".to_owned(),
                    tls.cert.to_str().unwrap().to_owned(),
                ]);
                let url = nginx.url.clone();
                parts.push(Box::new(nginx));
                (url, Some(r))
            }
            Target::RedirectToStorage => {
                // nginx serves the registry's storage directory; distribution's `redirect`
                // middleware sends blob GETs there (as it does to S3).
                let storage = dir.path().join("storage");
                std::fs::create_dir_all(&storage).unwrap();
                let origin = Nginx::start(NginxOptions {
                    root: Some(storage.clone()),
                    ..NginxOptions::default()
                });
                let r = Registry::start_with(RegistryOptions {
                    redirect_base: Some(origin.url.clone()),
                    storage_root: Some(storage),
                    ..RegistryOptions::default()
                });
                parts.push(Box::new(origin));
                (r.url.clone(), Some(r))
            }
            Target::S3Redirect => {
                let server = tool("gofakes3")
                    .ok_or("gofakes3 is not installed (scripts/setup: go install)")?;
                let s3 = S3Server::start(&server);
                let r = Registry::start_with(RegistryOptions {
                    binary,
                    s3_endpoint: Some(s3.endpoint.clone()),
                    ..RegistryOptions::default()
                });
                parts.push(Box::new(s3));
                (r.url.clone(), Some(r))
            }
            Target::PullThrough => {
                let origin = Registry::start();
                let r = Registry::start_with(RegistryOptions {
                    proxy_remote: Some(origin.url.clone()),
                    ..RegistryOptions::default()
                });
                upstream = Some(origin);
                (r.url.clone(), Some(r))
            }
        };
        Ok(Running {
            url,
            flags,
            registry,
            upstream,
            _parts: parts,
            _dir: dir,
        })
    }

    /// The version of what it runs, as the document's table shows it.
    fn version(self) -> String {
        match self.tool() {
            Some("crane") => tool_version(&tool("crane").unwrap(), &["version"]),
            Some(name) if matches!(self, Target::S3Redirect) => {
                let v = tool_version(&tool(name).unwrap(), &["--version"]);
                let s3 = std::fs::read_to_string(tool("gofakes3.version").unwrap_or_default())
                    .unwrap_or_default();
                let s3 = s3.trim().rsplit('@').next().unwrap_or_default().to_owned();
                format!("{v}, gofakes3 {s3}")
            }
            Some(name) => tool_version(&tool(name).unwrap(), &["--version"]),
            None => {
                let v = tool_version(Path::new("docker-registry"), &["--version"]);
                match self {
                    Target::TlsHttp2Front => format!("{v}, nginx {}", nginx_version()),
                    Target::RedirectToStorage => format!("{v}, nginx {}", nginx_version()),
                    Target::PullThrough => format!("{v}, in front of {v}"),
                    _ => v,
                }
            }
        }
    }
}

fn nginx_version() -> String {
    let out = std::process::Command::new(crate::common::nginx::nginx_binary())
        .arg("-v")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr)
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

impl Running {
    /// Runs a creb-rs command against the target; its summary (the command must have
    /// finished: exit 0, or 1 for failed operations, which the caller judges).
    fn run(&self, args: &[&str], out: &Path) -> serde_json::Value {
        let mut full: Vec<&str> = args.to_vec();
        if !args.contains(&"--registry") {
            full.extend(["--registry", &self.url]);
        }
        full.extend(self.flags.iter().map(String::as_str));
        full.extend(["--output-dir", out.to_str().unwrap(), "--quiet"]);
        let r = run_bin(&full, None, &[]);
        assert!(
            r.code == 0 || r.code == 1,
            "creb-rs {args:?} exited {}: {}",
            r.code,
            r.stderr
        );
        summary_json(out)
    }

    /// [`Running::run`] against where content to read goes first: a read-only target's
    /// upstream, else the target itself.
    fn run_upstream(&self, args: &[&str], out: &Path) -> serde_json::Value {
        match &self.upstream {
            Some(origin) => {
                let mut full = args.to_vec();
                full.extend(["--registry", &origin.url]);
                self.run(&full, out)
            }
            None => self.run(args, out),
        }
    }

    /// A read-only target's cell for a push `summary` it refused: every upload and manifest
    /// PUT failed, with these error kinds.
    fn refused(&self, summary: &serde_json::Value) -> String {
        for op in ["blob_upload", "manifest_put"] {
            assert_eq!(u(&summary["operations"][op]["ok"]), 0, "{op}: {summary}");
        }
        let kinds: Vec<&String> = summary["errors"].as_object().unwrap().keys().collect();
        assert!(!kinds.is_empty(), "{summary}");
        let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        format!("refused, read-only ({})", kinds.join(", "))
    }

    /// Asserts `summary` has no error but the registry's own tag race (distribution's
    /// filesystem driver reading a tag link while a PUT rewrites it).
    fn no_errors(&self, summary: &serde_json::Value, what: &str) {
        match &self.registry {
            Some(r) => r.assert_no_errors_but_tag_races(summary, what),
            None => assert_eq!(
                u(&summary["totals"]["errors"]),
                0,
                "{what}: {}",
                summary["errors"]
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The families: each returns its cell.

fn push_monolithic(t: &Running, dir: &Path) -> String {
    let s = t.run(
        &[
            "push",
            "--repo",
            "compat/mono",
            "--images",
            "2",
            "--layers",
            "2",
            "--layer-size",
            "64KiB",
            "--monolithic",
        ],
        &dir.join("push"),
    );
    if t.upstream.is_some() {
        return t.refused(&s);
    }
    t.no_errors(&s, "push --monolithic");
    assert_eq!(u(&s["sessions"]["image_push"]["ok"]), 2);
    "works".into()
}

fn push_chunked(t: &Running, dir: &Path) -> String {
    let s = t.run(
        &[
            "push",
            "--repo",
            "compat/chunked",
            "--layers",
            "2",
            "--layer-size",
            "48KiB",
            "--chunk-size",
            "16KiB",
        ],
        &dir.join("push"),
    );
    if t.upstream.is_some() {
        return t.refused(&s);
    }
    t.no_errors(&s, "push --chunk-size");
    let patches = u(&s["operations"]["upload_patch"]["ok"]);
    // Two layers of three chunks each and the small config in one, unless the registry
    // asks for larger chunks.
    if patches == 7 {
        "works".into()
    } else {
        format!("works, {patches} PATCHes (minimum chunk)")
    }
}

fn push_single_post(t: &Running, dir: &Path) -> String {
    let s = t.run(
        &[
            "push",
            "--repo",
            "compat/single",
            "--layers",
            "2",
            "--layer-size",
            "16KiB",
            "--single-post",
        ],
        &dir.join("push"),
    );
    if t.upstream.is_some() {
        return t.refused(&s);
    }
    t.no_errors(&s, "push --single-post");
    if u(&s["events"]["single_post_fallback"]) > 0 {
        "body ignored (202), sent again".into()
    } else {
        "works".into()
    }
}

fn push_mount(t: &Running, dir: &Path) -> String {
    let common = ["--layers", "2", "--layer-size", "16KiB", "--seed", "5"];
    let mut first = vec!["push", "--repo", "compat/source"];
    first.extend(common);
    let s = t.run_upstream(&first, &dir.join("source"));
    t.no_errors(&s, "push (source)");
    let mut second = vec![
        "push",
        "--repo",
        "compat/target",
        "--mount-from",
        "compat/source",
    ];
    second.extend(common);
    let s = t.run(&second, &dir.join("target"));
    if t.upstream.is_some() {
        return t.refused(&s);
    }
    t.no_errors(&s, "push --mount-from");
    assert_eq!(u(&s["sessions"]["image_push"]["ok"]), 1);
    if u(&s["events"]["mount_fallback"]) > 0 {
        "declined, uploaded".into()
    } else if u(&s["events"]["blob_exists"]) >= 2 {
        // One blob store for every repository: the HEAD before the mount finds the blob.
        "not needed: blobs shared by all repositories".into()
    } else {
        assert!(
            u(&s["operations"]["blob_mount"]["ok"]) >= 2,
            "{}",
            s["operations"]
        );
        "works".into()
    }
}

fn pull_verified(t: &Running, dir: &Path) -> String {
    let s = t.run_upstream(
        &[
            "push",
            "--repo",
            "compat/pull",
            "--images",
            "2",
            "--layers",
            "3",
            "--layer-size",
            "32KiB",
        ],
        &dir.join("push"),
    );
    t.no_errors(&s, "push");
    let s = t.run(
        &[
            "pull",
            "--repo",
            "compat/pull",
            "--images",
            "2",
            "--tag",
            "latest",
        ],
        &dir.join("pull"),
    );
    t.no_errors(&s, "pull");
    // Three layers and the config, per image, each read to the end and hashed.
    assert_eq!(
        u(&s["operations"]["blob_get"]["ok"]),
        8,
        "{}",
        s["operations"]
    );
    if t.upstream.is_some() {
        // Cold, the cache fetched from its upstream; warm, it serves what it kept.
        let warm = t.run(
            &["pull", "--repo", "compat/pull", "--images", "2"],
            &dir.join("warm"),
        );
        t.no_errors(&warm, "pull, warm");
        assert_eq!(u(&warm["operations"]["blob_get"]["ok"]), 8);
        return "works, cold and warm".into();
    }
    if u(&s["operations"]["redirect"]["ok"]) > 0 {
        // Each redirected read's two hops timed apart: the registry's answer (`redirect`)
        // and the storage's (`storage_get`, which carried every byte).
        assert_eq!(
            u(&s["operations"]["redirect"]["ok"]),
            8,
            "{}",
            s["operations"]
        );
        assert_eq!(
            u(&s["operations"]["storage_get"]["ok"]),
            8,
            "{}",
            s["operations"]
        );
        assert_eq!(
            u(&s["operations"]["storage_get"]["bytes_received"]),
            u(&s["operations"]["blob_get"]["bytes_received"])
        );
        "works, via 307 to storage".into()
    } else {
        "works".into()
    }
}

fn tag_pages(t: &Running, dir: &Path) -> String {
    let s = t.run_upstream(
        &[
            "push",
            "--repo",
            "compat/tags",
            "--images",
            "5",
            "--layers",
            "1",
            "--layer-size",
            "1KiB",
        ],
        &dir.join("push"),
    );
    t.no_errors(&s, "push");
    let s = t.run(
        &[
            "pull",
            "--repo",
            "compat/tags",
            "--all-tags",
            "--tag-page-size",
            "2",
        ],
        &dir.join("pull"),
    );
    t.no_errors(&s, "pull --all-tags");
    let listed = u(&s["sessions"]["image_pull"]["ok"]);
    assert_eq!(listed, 5, "every tag listed");
    let no_link = u(&s["events"]["tag_list_no_link"]);
    match u(&s["operations"]["tag_list"]["ok"]) {
        3 if no_link == 0 => "works".into(),
        1 => "one page (n ignored)".into(),
        _ if no_link > 0 => "pages without Link; asked on with last=".into(),
        pages => panic!("{pages} pages for 5 tags at 2 per page"),
    }
}

fn referrers(t: &Running, dir: &Path) -> String {
    let s = t.run_upstream(
        &[
            "push",
            "--repo",
            "compat/refs",
            "--layers",
            "1",
            "--layer-size",
            "1KiB",
            "--attach",
            "2",
        ],
        &dir.join("push"),
    );
    t.no_errors(&s, "push --attach");
    assert_eq!(
        u(&s["operations"]["manifest_put"]["ok"]),
        3,
        "image and two artifacts"
    );
    let s = t.run(
        &["pull", "--repo", "compat/refs", "--referrers"],
        &dir.join("pull"),
    );
    t.no_errors(&s, "pull --referrers");
    if u(&s["events"]["referrers_unsupported"]) > 0 {
        "no referrers API (404)".into()
    } else {
        // The image's manifest and the two artifacts' manifests.
        assert_eq!(
            u(&s["operations"]["manifest_get"]["ok"]),
            3,
            "{}",
            s["operations"]
        );
        "works".into()
    }
}

fn delete(t: &Running, dir: &Path) -> String {
    let s = t.run_upstream(
        &[
            "push",
            "--repo",
            "compat/delete",
            "--layers",
            "1",
            "--layer-size",
            "4KiB",
        ],
        &dir.join("push"),
    );
    t.no_errors(&s, "push");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use clap::Parser as _;
        use creb::client::{ClientOptions, OpCtx};
        use creb::commands::{Cli, Command};
        use creb::oci::manifest::ParsedManifest;
        use creb::oci::{Reference, Repository};
        use creb::session::connect::RegistryConfig;
        let mut argv = vec![
            "creb-rs",
            "pull",
            "--repo",
            "compat/delete",
            "--registry",
            &t.url,
        ];
        argv.extend(t.flags.iter().map(String::as_str));
        let Command::Pull(args) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!()
        };
        let config = RegistryConfig::try_from(&args.registry).unwrap();
        let (recorder, _aggregator) = creb::metrics::AggregatorBuilder::default().spawn();
        let options = ClientOptions {
            push_scopes: true,
            ..ClientOptions::default()
        };
        let stop = creb::Shutdown::new();
        let connection = config.connect(recorder, options, 2, &stop).await.unwrap();
        let client = connection.client;
        let repo: Repository = "compat/delete".parse().unwrap();
        let tag = Reference::Tag("latest".parse().unwrap());
        let manifest = client
            .manifest_get(&repo, &tag, OpCtx::default())
            .await
            .unwrap();
        let ParsedManifest::Image { layers, .. } =
            ParsedManifest::parse(&manifest.bytes, manifest.media_type()).unwrap()
        else {
            panic!("an image manifest")
        };
        let by_digest = client
            .manifest_delete(&repo, &manifest.digest(), OpCtx::default())
            .await;
        let blob = client
            .blob_delete(&repo, &layers[0].digest, OpCtx::default())
            .await;
        match (by_digest, blob) {
            (Ok(()), Ok(())) => match client.manifest_get(&repo, &tag, OpCtx::default()).await {
                Err(e) if e.status() == Some(404) => "works".into(),
                Err(e) => panic!("reading a deleted manifest's tag: {e}"),
                Ok(_) => "works; its tag still resolves".into(),
            },
            (m, b) => format!(
                "refused: manifest {}, blob {}",
                m.err().map_or("ok".into(), |e| e.kind().key()),
                b.err().map_or("ok".into(), |e| e.kind().key())
            ),
        }
    })
}

/// A trace with pushes (HEAD misses, monolithic and chunked uploads), pulls and failed
/// originals.
fn trace(dir: &Path) -> PathBuf {
    let (records, _) = generate(&SynthOptions {
        seed: 21,
        sessions: 60,
        mean_gap_ms: 50.0,
        clients: 8,
        repos: 4,
        layer_size: (256, 48 * 1024),
        chunk: 16 * 1024,
        duplicate_share: 0.02,
        failed_share: 0.03,
        ..SynthOptions::default()
    });
    let path = dir.join("trace.json");
    write_file(&path, &records).unwrap();
    path
}

fn accounted(s: &serde_json::Value) {
    let t = &s["trace"];
    let skipped: u64 = t["skipped"].as_object().unwrap().values().map(u).sum();
    assert_eq!(
        u(&t["records"]),
        u(&t["replayed"]) + u(&t["folded"]) + skipped,
        "records = replayed + folded + skipped: {t}"
    );
}

fn replay(t: &Running, dir: &Path, mode: &[&str]) -> String {
    if t.upstream.is_some() {
        return replay_through_cache(t, dir, mode);
    }
    let trace = trace(dir);
    let mut args = vec!["replay", trace.to_str().unwrap(), "--concurrency", "8"];
    args.extend_from_slice(mode);
    let out = dir.join("replay");
    let run = t.run(&args, &out);
    let prewarm = summary_json(&out.join("prewarm"));
    t.no_errors(&prewarm, "prewarm");
    t.no_errors(&run, "replay");
    accounted(&run);
    assert!(
        u(&run["operations"]["manifest_put"]["ok"]) > 0,
        "the trace pushes"
    );
    if u(&run["events"]["single_post_fallback"]) > 0 {
        return "works, single POST sent again".into();
    }
    "works".into()
}

/// A read-only target (a pull-through cache): the trace's content prewarmed into the
/// upstream, then the run replayed through the cache cold and again warm. Its reads must
/// all work; its pushes are refused.
fn replay_through_cache(t: &Running, dir: &Path, mode: &[&str]) -> String {
    let trace = trace(dir);
    let trace = trace.to_str().unwrap();
    let prewarm = t.run_upstream(
        &["replay", trace, "--phase", "prewarm"],
        &dir.join("prewarm"),
    );
    t.no_errors(&prewarm, "prewarm of the upstream");
    let mut cells = Vec::new();
    for round in ["cold", "warm"] {
        let mut args = vec!["replay", trace, "--phase", "run", "--concurrency", "8"];
        args.extend_from_slice(mode);
        let run = t.run(&args, &dir.join(round));
        accounted(&run);
        let ops = run["operations"].as_object().unwrap();
        for (op, o) in ops {
            let errors = u(&o["errors"]);
            if op.starts_with("blob_get") || op.starts_with("manifest_get") {
                // Reads of what the run itself pushed (refused) are 404s, nothing else; but
                // for the cold round, where distribution's proxy may answer a read 500 while
                // another request of the same blob fills its cache (its population race;
                // distribution/distribution#1006 made concurrent fills not block, not join).
                // The warm round reads a filled cache: 404s only.
                let kinds = o["errors_by_kind"].as_object().unwrap();
                let race = |k: &str| round == "cold" && k == "http_500";
                assert!(
                    kinds.keys().all(|k| k == "http_404" || race(k)),
                    "{round}: {op}: {o}"
                );
            } else if errors > 0 {
                assert!(
                    ["blob_upload", "manifest_put", "upload_post", "blob_mount"]
                        .contains(&op.as_str()),
                    "{round}: {op} failed: {o}"
                );
            }
        }
        let read = |op: &str| u(&run["operations"][op]["ok"]);
        assert!(
            read("blob_get") > 0 && read("manifest_get") > 0,
            "{round}: {ops:?}"
        );
        assert_eq!(
            read("manifest_put"),
            0,
            "{round}: a push went through a read-only cache"
        );
        cells.push(round);
    }
    format!("reads work {}; its pushes refused", cells.join(" and "))
}

fn replay_stress(t: &Running, dir: &Path) -> String {
    replay(t, dir, &["--mode", "stress"])
}

fn replay_delay(t: &Running, dir: &Path) -> String {
    replay(t, dir, &["--mode", "delay", "--speed", "8"])
}

// ---------------------------------------------------------------------------------------
// The table

/// The family columns of the document's table, in order.
const FAMILIES: [&str; 10] = [
    "push monolithic",
    "push chunked",
    "push single POST",
    "push mount",
    "pull, verified",
    "tag list pages",
    "referrers",
    "delete",
    "replay stress",
    "replay delay",
];

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/compatibility.md");
const BEGIN: &str = "<!-- compat table: begin -->";
const END: &str = "<!-- compat table: end -->";

/// The cell the document holds for (target, family), and the version it names.
fn documented(target: &str, family: &str) -> (Option<String>, Option<String>) {
    let doc = std::fs::read_to_string(DOC).unwrap();
    let Some(table) = doc
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(table, _)| table)
    else {
        return (None, None);
    };
    let mut rows = table.lines().filter(|l| l.starts_with('|'));
    let header: Vec<&str> = rows
        .next()
        .unwrap_or_default()
        .split('|')
        .map(str::trim)
        .collect();
    let column = header.iter().position(|h| *h == family);
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.get(1) == Some(&target) {
            return (
                column.and_then(|c| cells.get(c)).map(|s| (*s).to_owned()),
                cells.get(2).map(|s| (*s).to_owned()),
            );
        }
    }
    (None, None)
}

/// Runs `family` against `target` and checks its cell against the document.
fn check(target: Target, family: &str, f: fn(&Running, &Path) -> String) {
    let running = match target.start() {
        Ok(r) => r,
        Err(why) => {
            if std::env::var("CREB_REQUIRE_COMPAT").is_ok_and(|v| v == "1") {
                panic!("CREB_REQUIRE_COMPAT=1 but {}: {why}", target.name());
            }
            eprintln!("skipped: {}: {why}", target.name());
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let cell = f(&running, dir.path());
    let version = target.version();
    if std::env::var("CREB_UPDATE_COMPAT").is_ok_and(|v| v == "1") {
        let out = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/compat")
            .join(target.key());
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join(family), &cell).unwrap();
        std::fs::write(out.join("version"), &version).unwrap();
        std::fs::write(out.join("name"), target.name()).unwrap();
        return;
    }
    let (doc_cell, doc_version) = documented(target.name(), family);
    assert_eq!(
        (doc_cell.as_deref(), doc_version.as_deref()),
        (Some(cell.as_str()), Some(version.as_str())),
        "docs/compatibility.md differs from what {} does for \"{family}\"; after a change, \
         run `CREB_UPDATE_COMPAT=1 cargo test --test it compat::` and `scripts/compat-table`",
        target.name()
    );
}

/// One test per family of [`FAMILIES`] for `$target`, each named after its family.
macro_rules! families {
    ($target:expr; $($test:ident => $index:expr, $family:path;)*) => {$(
        #[test]
        fn $test() {
            check($target, FAMILIES[$index], $family);
        }
    )*};
}

/// A module of tests per target: every family against it.
macro_rules! suite {
    ($($module:ident => $target:expr;)*) => {$(
        mod $module {
            use super::*;

            families! {
                $target;
                push_monolithic => 0, super::push_monolithic;
                push_chunked => 1, super::push_chunked;
                push_single_post => 2, super::push_single_post;
                push_mount => 3, super::push_mount;
                pull_verified => 4, super::pull_verified;
                tag_list_pages => 5, super::tag_pages;
                referrers => 6, super::referrers;
                delete => 7, super::delete;
                replay_stress => 8, super::replay_stress;
                replay_delay => 9, super::replay_delay;
            }
        }
    )*};
}

suite! {
    distribution_2_8 => Target::Distribution28;
    distribution_3 => Target::Distribution3;
    distribution_3_token => Target::Distribution3Token;
    ggcr => Target::Ggcr;
    tls_http2_front => Target::TlsHttp2Front;
    redirect_to_storage => Target::RedirectToStorage;
    pull_through_cache => Target::PullThrough;
    distribution_3_s3 => Target::S3Redirect;
}
