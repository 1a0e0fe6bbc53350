//! Test harness: real registries and small real servers on loopback.
//!
//! [`Registry`] starts Debian's `docker-registry` (distribution 2.8) on 127.0.0.1 with a
//! free port and a temporary storage directory, configured per test (no auth, htpasswd,
//! token auth, redirect to a storage server), and kills it when dropped. Set
//! `CREB_REGISTRY_BIN` to use another binary (e.g. distribution v3 from `go install`).
//! [`FileServer`] serves a directory over HTTP and records the headers it was sent.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub mod faults;
pub mod misbehaving;
pub mod nginx;
pub mod token_issuer;

/// How a test registry authenticates.
#[derive(Debug, Clone, Default)]
pub enum RegistryAuth {
    #[default]
    None,
    /// bcrypt htpasswd file.
    Htpasswd { path: PathBuf },
    /// Token auth against an issuer the test runs.
    Token {
        realm: String,
        service: String,
        issuer: String,
        root_cert_bundle: PathBuf,
    },
}

#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    pub auth: RegistryAuth,
    /// Redirect blob GETs to this base URL (distribution's `redirect` storage middleware).
    pub redirect_base: Option<String>,
    /// Serve HTTPS with this PEM certificate and key (`http.tls`); the URL is `https://`.
    pub tls: Option<TlsFiles>,
    /// Write distribution's JSON access log (one line per request) to the registry log.
    pub access_log: bool,
    /// With `access_log`: logrus's text formatter (logfmt) instead of JSON.
    pub text_log: bool,
    /// Serve distribution's Prometheus metrics on this port (`http.debug`), at `/metrics`.
    pub metrics_port: Option<u16>,
    /// Another distribution binary with the same configuration (`registry serve`), e.g.
    /// distribution v3 from [`tool`]; default `docker-registry` (or `CREB_REGISTRY_BIN`).
    pub binary: Option<PathBuf>,
    /// Store blobs here instead of the registry's own temporary directory (e.g. a
    /// directory another server serves, for redirects).
    pub storage_root: Option<PathBuf>,
    /// Run as a pull-through cache of this upstream registry (distribution's `proxy`):
    /// reads fetch what it lacks from the upstream and keep it; it accepts no push.
    pub proxy_remote: Option<String>,
    /// Store in this S3 endpoint's bucket [`S3_BUCKET`] (distribution's `s3` driver)
    /// instead of the file system, blob GETs redirected to presigned URLs there.
    pub s3_endpoint: Option<String>,
}

/// A PEM certificate and its private key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A running `docker-registry`.
pub struct Registry {
    child: Child,
    pub port: u16,
    pub url: String,
    dir: TempDir,
    binary: PathBuf,
    storage_root: Option<PathBuf>,
}

fn spawn_registry(dir: &Path, binary: &Path) -> Child {
    let config = dir.join("config.yml");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("registry.log"))
        .expect("log file");
    Command::new(binary)
        .arg("serve")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}); install Debian's docker-registry or set CREB_REGISTRY_BIN",
                binary.display()
            )
        })
}

fn registry_binary() -> PathBuf {
    std::env::var("CREB_REGISTRY_BIN")
        .unwrap_or_else(|_| "docker-registry".into())
        .into()
}

/// Whether a request that met an empty link file reads a link another request may be
/// rewriting ([`Registry::tag_race_500s`]): a manifest or blob read, or a manifest PUT
/// (which reads its layers' links).
fn link_race(line: &str, method: &str) -> bool {
    let reads = matches!(method, "GET" | "HEAD");
    (line.contains("/manifests/") && (reads || method == "PUT"))
        || (line.contains("/blobs/sha256:") && reads)
}

/// The 500s of docker-registry's link race in the log text `log` (see
/// [`Registry::tag_race_500s`]); panics on any other 500.
pub fn tag_race_500s_in(log: &str) -> u64 {
    // By request id: a 500 may be logged twice (an error line and the request's line,
    // or one "response completed with error" line holding both).
    let mut races = std::collections::BTreeSet::new();
    for (number, line) in log.lines().enumerate() {
        // The JSON formatter (with an access log).
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            let msg = v["msg"].as_str().unwrap_or_default();
            let plain_request_line = msg == "response completed";
            if v["http.response.status"] != 500 || plain_request_line {
                continue;
            }
            let text = v.to_string();
            let method = v["http.request.method"].as_str().unwrap_or_default();
            let is_race =
                text.contains("invalid checksum digest format") && link_race(&text, method);
            assert!(is_race, "docker-registry answered 500:\n{line}");
            let id = v["http.request.id"]
                .as_str()
                .map_or_else(|| format!("line {number}"), str::to_owned);
            races.insert(id);
            continue;
        }
        if !line.contains("http.response.status=500") {
            continue;
        }
        let method = line
            .split("http.request.method=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default();
        let is_race = line.contains("invalid checksum digest format") && link_race(line, method);
        assert!(is_race, "docker-registry answered 500:\n{line}");
        let id = line
            .split("http.request.id=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map_or_else(|| format!("line {number}"), str::to_owned);
        races.insert(id);
    }
    races.len() as u64
}

/// The 500s of `summary` in the operations docker-registry's link race can meet (reads of
/// a manifest or a blob, a manifest PUT): at most as many as [`Registry::tag_race_500s`].
pub fn link_race_500s(summary: &serde_json::Value) -> u64 {
    [
        "manifest_get",
        "manifest_head",
        "manifest_put",
        "blob_head",
        "blob_get",
    ]
    .iter()
    .map(|op| {
        summary["operations"][op]["errors_by_kind"]["http_500"]
            .as_u64()
            .unwrap_or(0)
    })
    .sum()
}

/// Waits up to 15 s for `child`, started as `what`, to listen on `port` on loopback; panics
/// if it exits first or never does.
pub fn wait_listening(child: &mut Child, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status}");
        }
        assert!(Instant::now() < deadline, "{what} did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGINT to `child` and waits (at most 20 s, else a failure naming `what`) for it
/// to exit: its exit code.
pub fn interrupt_and_wait(child: &mut Child, what: &str) -> Option<i32> {
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(Instant::now() < deadline, "{what} did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A registry binary scripts/setup installs with `go install` (`registry`, `crane`) in
/// `$CREB_TOOLS/bin` (default `~/.cache/creb-rs/tools/bin`), if it is there.
pub fn tool(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("CREB_TOOLS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/creb-rs/tools"))
        })?;
    let path = root.join("bin").join(name);
    path.is_file().then_some(path)
}

/// What `binary --version` (or `crane version`) prints, trimmed to the version.
pub fn tool_version(binary: &Path, args: &[&str]) -> String {
    let out = Command::new(binary)
        .args(args)
        .output()
        .expect("run the registry binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // `registry github.com/distribution/distribution/v3 v3.1.2+unknown`,
    // `docker-registry github.com/docker/distribution 2.8.2+ds1`, `v0.22.1`.
    text.split_whitespace()
        .map(|w| w.split('+').next().unwrap_or(w))
        .find(|w| {
            let digits = w.strip_prefix('v').unwrap_or(w);
            digits.starts_with(|c: char| c.is_ascii_digit()) && digits.contains('.')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| text.trim().to_owned())
}

/// A port that was free a moment ago.
///
/// Never the same port twice in one test process, and below the kernel's ephemeral range
/// (32768–60999 by default): a port the system picks for `:0` can be one a test has just
/// released, and any client socket may take it as its source port. Either would let a
/// registry that a test kills and restarts on its port come back as someone else's, or not
/// at all.
pub fn free_port() -> u16 {
    const FIRST: u16 = 20_000;
    const COUNT: u16 = 12_000;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // Processes start at different places, so two test binaries run at once rarely meet.
    let offset = (std::process::id() % u32::from(COUNT)) as u16;
    for i in 0..COUNT {
        let port = FIRST + (offset + i) % COUNT;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {FIRST}..{}", FIRST + COUNT);
}

fn config_yaml(dir: &Path, port: u16, options: &RegistryOptions) -> String {
    let log = if options.access_log && options.text_log {
        "log:\n  level: info\n  formatter: text\n  accesslog:\n    disabled: false\n"
    } else if options.access_log {
        "log:\n  level: info\n  formatter: json\n  accesslog:\n    disabled: false\n"
    } else {
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
    };
    let driver = match &options.s3_endpoint {
        // Credentials the server does not check; path-style URLs on loopback.
        Some(endpoint) => format!(
            "  s3:\n    accesskey: creb-rs-test\n    secretkey: creb-rs-test-secret\n    \
             region: us-east-1\n    regionendpoint: {endpoint}\n    bucket: {S3_BUCKET}\n    \
             forcepathstyle: true\n    secure: false\n    v4auth: true\n    rootdirectory: /\n  \
             redirect:\n    disable: false\n"
        ),
        None => format!(
            "  filesystem:\n    rootdirectory: {}\n",
            options
                .storage_root
                .clone()
                .unwrap_or_else(|| dir.join("data"))
                .display()
        ),
    };
    let mut yaml = format!(
        "version: 0.1\n\
         {log}\
         storage:\n{driver}  delete:\n    enabled: true\n  \
         maintenance:\n    uploadpurging:\n      enabled: false\n\
         http:\n  addr: 127.0.0.1:{port}\n  secret: creb-rs-test-http-secret\n",
    );
    if let Some(remote) = &options.proxy_remote {
        yaml.push_str(&format!("proxy:\n  remoteurl: {remote}\n"));
    }
    if let Some(base) = &options.redirect_base {
        yaml.push_str(&format!(
            "middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: {base}\n"
        ));
    }
    match &options.auth {
        RegistryAuth::None => {}
        RegistryAuth::Htpasswd { path } => yaml.push_str(&format!(
            "auth:\n  htpasswd:\n    realm: creb-rs-test\n    path: {}\n",
            path.display()
        )),
        RegistryAuth::Token {
            realm,
            service,
            issuer,
            root_cert_bundle,
        } => yaml.push_str(&format!(
            "auth:\n  token:\n    realm: {realm}\n    service: {service}\n    issuer: {issuer}\n    rootcertbundle: {}\n",
            root_cert_bundle.display()
        )),
    }
    if let Some(port) = options.metrics_port {
        let http_end = yaml
            .find("  secret: creb-rs-test-http-secret\n")
            .expect("http section")
            + "  secret: creb-rs-test-http-secret\n".len();
        yaml.insert_str(
            http_end,
            &format!(
                "  debug:\n    addr: 127.0.0.1:{port}\n    prometheus:\n      enabled: true\n      path: /metrics\n"
            ),
        );
    }
    if let Some(tls) = &options.tls {
        // Inside the `http:` section, right after its `secret`.
        let http_end = yaml
            .find("  secret: creb-rs-test-http-secret\n")
            .expect("http section")
            + "  secret: creb-rs-test-http-secret\n".len();
        yaml.insert_str(
            http_end,
            &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                tls.cert.display(),
                tls.key.display()
            ),
        );
    }
    yaml
}

impl Registry {
    pub fn start() -> Registry {
        Self::start_with(RegistryOptions::default())
    }

    /// A registry with basic auth: one user, its htpasswd file written in `dir`.
    pub fn with_basic_auth(dir: &Path, user: &str, password: &str) -> Registry {
        Self::start_with(RegistryOptions {
            auth: RegistryAuth::Htpasswd {
                path: token_issuer::write_htpasswd(dir, &[(user, password)]),
            },
            ..RegistryOptions::default()
        })
    }

    pub fn start_with(options: RegistryOptions) -> Registry {
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = TempDir::new().expect("temp dir");
            let port = free_port();
            let config = dir.path().join("config.yml");
            std::fs::write(&config, config_yaml(dir.path(), port, &options)).expect("write config");
            let binary = options.binary.clone().unwrap_or_else(registry_binary);
            let mut child = spawn_registry(dir.path(), &binary);
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    let scheme = if options.tls.is_some() {
                        "https"
                    } else {
                        "http"
                    };
                    return Registry {
                        child,
                        port,
                        url: format!("{scheme}://127.0.0.1:{port}"),
                        dir,
                        binary,
                        storage_root: options.storage_root.clone(),
                    };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    last_error = format!(
                        "registry exited with {status}: {}",
                        std::fs::read_to_string(dir.path().join("registry.log"))
                            .unwrap_or_default()
                    );
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    last_error = "registry did not listen within 15 s".into();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start a test registry: {last_error}");
    }

    /// The storage root (`<root>/docker/registry/v2/...`).
    pub fn storage_root(&self) -> PathBuf {
        self.storage_root
            .clone()
            .unwrap_or_else(|| self.dir.path().join("data"))
    }

    /// The file that holds a blob's bytes.
    pub fn blob_data_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage_root()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The requests the registry logged (`RegistryOptions::access_log`): method, URI,
    /// status. distribution logs one JSON line per request, "response completed" or
    /// "response completed with error" (e.g. a HEAD answered 404); its Apache-style
    /// access log lines beside them are not JSON and are skipped.
    pub fn access_log(&self) -> Vec<(String, String, u16)> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| {
                v["msg"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("response completed"))
            })
            .map(|v| {
                (
                    v["http.request.method"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    v["http.request.uri"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    v["http.response.status"].as_u64().unwrap_or_default() as u16,
                )
            })
            .collect()
    }

    /// The 500s of docker-registry's link race in its log so far; panics on any other 500.
    ///
    /// docker-registry 2.8's filesystem driver rewrites a link file in place (a tag's, and
    /// a repository's link to a blob, rewritten by every upload or mount of that blob): a
    /// read of the link while it is written finds it empty and answers 500 "invalid
    /// checksum digest format" — a manifest GET or HEAD by tag while a PUT of the same tag
    /// writes it, a blob HEAD or GET while the same blob is uploaded or mounted into the
    /// same repository, a manifest PUT whose layers' links are being rewritten. A replay
    /// that pushes and pulls the same objects at the same time meets it now and then: a
    /// real error of this registry, which creb-rs rightly counts, not a fault of the run.
    pub fn tag_race_500s(&self) -> u64 {
        tag_race_500s_in(&self.log())
    }

    /// Asserts that a replay's summary has no error, except 500s of the tag race
    /// ([`Registry::tag_race_500s`]) on manifest reads that the registry's log accounts for.
    pub fn assert_no_errors_but_tag_races(&self, summary: &serde_json::Value, what: &str) {
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let errors = n(&summary["totals"]["errors"]);
        if errors == 0 {
            return;
        }
        let explain = || {
            format!(
                "{what}: {} {}\nregistry log:\n{}",
                summary["errors"],
                summary["operations"],
                self.log()
            )
        };
        let races = self.tag_race_500s();
        let link_500s = link_race_500s(summary);
        assert_eq!(errors, link_500s, "{}", explain());
        assert!(link_500s <= races, "{}", explain());
        eprintln!("{what}: {link_500s} link-race 500s of docker-registry (tolerated)");
    }

    /// Asserts a run's exit status against this registry: 0, or 1 when every operation
    /// that failed is a tag race the registry's log accounts for (exit 1 is the rule for
    /// any failed operation; see [`Registry::assert_no_errors_but_tag_races`]).
    pub fn assert_exit_but_tag_races(&self, code: i32, summary: &serde_json::Value, what: &str) {
        let errors = summary["totals"]["errors"].as_u64().unwrap_or(0);
        match code {
            0 => assert_eq!(errors, 0, "{what}: exit 0 with {errors} errors"),
            1 => assert!(errors > 0, "{what}: exit 1 without an error"),
            other => panic!("{what}: exit {other}"),
        }
        self.assert_no_errors_but_tag_races(summary, what);
    }

    /// Stops the registry process (SIGSTOP) after `after` for `stopped`, then lets it go on
    /// (SIGCONT), on a thread of its own: a registry that hangs for a while.
    pub fn pause_later(&self, after: Duration, stopped: Duration) -> std::thread::JoinHandle<()> {
        let pid = self.child.id().to_string();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            let signal = |s: &str| {
                let ok = Command::new("kill")
                    .args([s, &pid])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "kill {s} {pid}");
            };
            signal("-STOP");
            std::thread::sleep(stopped);
            signal("-CONT");
        })
    }

    /// SIGKILLs the registry process (a crash: no graceful shutdown).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the registry again on the same port, configuration and storage, and waits
    /// until it listens.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            self.child = spawn_registry(self.dir.path(), &self.binary);
            loop {
                if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                    return;
                }
                if let Ok(Some(_)) = self.child.try_wait() {
                    break; // e.g. the port is not free yet: try again
                }
                assert!(
                    Instant::now() < deadline,
                    "registry did not restart: {}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                Instant::now() < deadline,
                "registry did not restart: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// go-containerregistry's registry (`crane registry serve`) on 127.0.0.1 with its blobs on
/// disk, killed when dropped.
pub struct GgcrRegistry {
    child: Child,
    pub url: String,
    _dir: TempDir,
}

impl GgcrRegistry {
    pub fn start(crane: &Path) -> GgcrRegistry {
        let dir = TempDir::new().expect("temp dir");
        let port = free_port();
        // The directory must exist, or every upload answers 500.
        let disk = dir.path().join("blobs");
        std::fs::create_dir_all(&disk).unwrap();
        let log = std::fs::File::create(dir.path().join("crane.log")).unwrap();
        let mut child = Command::new(crane)
            .args([
                "registry",
                "serve",
                "--address",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--disk")
            .arg(&disk)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start crane registry serve");
        wait_listening(&mut child, port, "crane registry");
        GgcrRegistry {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

impl Drop for GgcrRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An S3 server on loopback for distribution's S3 driver: gofakes3 (scripts/setup installs
/// it) serving the bucket `registry` from a temporary directory, killed when dropped.
pub struct S3Server {
    child: Child,
    pub endpoint: String,
    _dir: TempDir,
}

/// The bucket [`S3Server`] creates.
pub const S3_BUCKET: &str = "registry";

impl S3Server {
    pub fn start(binary: &Path) -> S3Server {
        let dir = TempDir::new().expect("temp dir");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("s3.log")).unwrap();
        let mut child = Command::new(binary)
            .args(["-backend", "fs", "-fs.create", "-initialbucket", S3_BUCKET])
            .arg("-fs.path")
            .arg(dir.path().join("data"))
            .args(["-host", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start gofakes3");
        wait_listening(&mut child, port, "gofakes3");
        S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request a [`FileServer`] received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
}

/// A tiny HTTP/1.1 file server on loopback: serves `root/<path>` for GET and HEAD, 404
/// otherwise, and records every request's headers. Runs on its own threads.
pub struct FileServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
    root: Arc<Mutex<PathBuf>>,
}

impl FileServer {
    pub fn start(root: PathBuf) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let root = Arc::new(Mutex::new(root));
        let (seen_in, root_in) = (Arc::clone(&seen), Arc::clone(&root));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = root_in.lock().unwrap().clone();
                let seen = Arc::clone(&seen_in);
                std::thread::spawn(move || serve_connection(stream, &root, &seen));
            }
        });
        FileServer { addr, seen, root }
    }

    /// Serves another directory from now on (for connections opened later).
    pub fn set_root(&self, root: PathBuf) {
        *self.root.lock().unwrap() = root;
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_connection(mut stream: TcpStream, root: &Path, seen: &Mutex<Vec<SeenRequest>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default().to_owned();
        let path = target.split('?').next().unwrap_or_default().to_owned();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        seen.lock().unwrap().push(SeenRequest {
            method: method.clone(),
            path: path.clone(),
            headers,
        });
        let file = root.join(path.trim_start_matches('/'));
        let response = match std::fs::read(&file) {
            Ok(body) if method == "GET" || method == "HEAD" => {
                let mut r = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                if method == "GET" {
                    r.extend_from_slice(&body);
                }
                r
            }
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        if stream.write_all(&response).is_err() {
            return;
        }
    }
}

/// Runs the library in-process with these arguments; returns the exit status.
pub async fn creb(args: &[&str]) -> creb::ExitStatus {
    let mut full = vec!["creb-rs"];
    full.extend_from_slice(args);
    // In-process, the environment is the test process's: a replay names no digest cache of
    // its own, so it would take the user's (`~/.cache/creb-rs`), share it with other tests
    // and push the user's entries out. Tests of the default cache run the binary
    // (`run_bin`, with a cache directory of their own).
    let replays = matches!(args.first(), Some(&("replay" | "capacity")));
    if replays && !args.iter().any(|a| a.contains("digest-cache")) {
        full.push("--no-digest-cache");
    }
    let cli = <creb::Cli as clap::Parser>::try_parse_from(full).expect("valid arguments");
    creb::run(cli).await
}

/// Reads `summary.json` of a result directory as JSON.
pub fn summary_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// The body of a GET of `url` with curl (5 s at most), `None` unless it answered 2xx.
pub fn http_get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `summary.operations.<op>.<field>` as u64 (0 when absent).
pub fn op_count(summary: &serde_json::Value, op: &str, field: &str) -> u64 {
    summary["operations"][op][field].as_u64().unwrap_or(0)
}

/// What a run of the real binary printed.
#[derive(Debug)]
pub struct BinOutput {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Starts creb-rs with `args` in the background (no stdin, stdout dropped, stderr kept),
/// for a test that acts while it runs (a signal, a registry killed); no registry or Docker
/// configuration from the environment.
pub fn spawn_bin(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_creb-rs"))
        .args(args)
        .env_remove("DOCKER_CONFIG")
        .env_remove("CREB_REGISTRY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the `creb-rs` binary with `args`, optional standard input and extra environment.
/// The caller's credentials and caches never leak in: `CREB_*`, `XDG_CACHE_HOME` and
/// `DOCKER_CONFIG` are cleared and `HOME` points at an empty directory unless `env` sets
/// them.
pub fn run_bin(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> BinOutput {
    let home = TempDir::new().expect("temp home");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_creb-rs"));
    cmd.args(args)
        .env_remove("CREB_USERNAME")
        .env_remove("CREB_PASSWORD")
        .env_remove("CREB_REGISTRY")
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .env_remove("CREB_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", home.path())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run creb-rs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("creb-rs output");
    BinOutput {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
