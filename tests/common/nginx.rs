//! Debian's nginx as the tests' front: TLS with or without HTTP/2 in front of a registry,
//! connection rotation (`keepalive_requests`), a real rate limiter, a cache (`proxy_cache`),
//! a static origin, and an access log in the format a test asks for. Each instance runs in the foreground from its
//! own prefix in a temporary directory and is killed (by its PID) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{free_port, TlsFiles};

/// What an nginx front does.
#[derive(Debug, Clone, Default)]
pub struct NginxOptions {
    /// Serve TLS with this certificate and key.
    pub tls: Option<TlsFiles>,
    /// Offer HTTP/2 (with TLS; ALPN `h2`).
    pub http2: bool,
    /// Requests a client connection may carry before nginx closes it (HTTP/2: a GOAWAY).
    pub keepalive_requests: Option<u32>,
    /// `log_format` of the access log (written to `logs/access.log`); none: no access log.
    pub log_format: Option<String>,
    /// Proxy everything to this registry port on 127.0.0.1.
    pub upstream_port: Option<u16>,
    /// Serve this directory instead of proxying.
    pub root: Option<PathBuf>,
    /// Extra directives inside `location /` (rate limits, headers).
    pub location_extra: String,
    /// Extra directives at the `http` level.
    pub http_extra: String,
    /// Buffer the upstream's answers (what `proxy_cache` needs); off by default, so a
    /// front streams bodies as the registry sends them.
    pub buffered: bool,
    /// Run a master process with one worker, as deployed (its cache manager is what keeps
    /// a cache within `max_size`); stopped with SIGTERM. Off: one process, killed.
    pub master: bool,
}

/// A running nginx.
pub struct Nginx {
    child: Child,
    master: bool,
    pub port: u16,
    pub url: String,
    dir: TempDir,
}

/// The nginx binary scripts/setup installs; its absence is a failure, never a skip.
pub fn nginx_binary() -> String {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("nginx is not installed (scripts/setup installs it)"))
}

impl Nginx {
    pub fn start(options: NginxOptions) -> Nginx {
        let bin = nginx_binary();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().display().to_string();
        let port = free_port();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let listen = match (&options.tls, options.http2) {
            (Some(_), true) => format!("listen 127.0.0.1:{port} ssl http2;"),
            (Some(_), false) => format!("listen 127.0.0.1:{port} ssl;"),
            (None, _) => format!("listen 127.0.0.1:{port};"),
        };
        let tls = options.tls.as_ref().map_or(String::new(), |t| {
            format!(
                "ssl_certificate {};\n ssl_certificate_key {};\n ssl_protocols TLSv1.2 TLSv1.3;\n",
                t.cert.display(),
                t.key.display()
            )
        });
        let access = match &options.log_format {
            Some(format) => {
                format!("log_format creb {format};\n access_log {p}/logs/access.log creb;\n")
            }
            None => "access_log off;\n".to_owned(),
        };
        let keepalive = options
            .keepalive_requests
            .map_or(String::new(), |n| format!("keepalive_requests {n};\n"));
        let buffering = if options.buffered { "on" } else { "off" };
        let content = match (&options.root, options.upstream_port) {
            (Some(root), _) => format!("root {};\n", root.display()),
            (None, Some(upstream)) => format!(
                "proxy_pass http://127.0.0.1:{upstream};\n\
                 proxy_http_version 1.1;\n\
                 proxy_set_header Host $host:$server_port;\n\
                 proxy_set_header X-Forwarded-Proto $scheme;\n\
                 proxy_set_header Connection \"\";\n\
                 proxy_buffering {buffering};\n\
                 proxy_request_buffering off;\n\
                 proxy_read_timeout 120s;\n"
            ),
            (None, None) => "return 404;\n".to_owned(),
        };
        let master = if options.master {
            // As root, workers would run as nobody, who cannot write the test's temporary
            // directories (a warning, ignored, when the tests do not run as root).
            "master_process on;\nworker_processes 1;\nuser root;\n"
        } else {
            "master_process off;\n"
        };
        let config = format!(
            "{master}\
             daemon off;\n\
             pid {p}/nginx.pid;\n\
             error_log {p}/logs/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
             {access}\
             client_body_temp_path {p}/body;\n\
             proxy_temp_path {p}/proxy;\n\
             fastcgi_temp_path {p}/fastcgi;\n\
             uwsgi_temp_path {p}/uwsgi;\n\
             scgi_temp_path {p}/scgi;\n\
             {http_extra}\n\
             server {{\n\
             {listen}\n\
             {tls}\
             {keepalive}\
             client_max_body_size 0;\n\
             location / {{\n\
             {content}\
             {location_extra}\n\
             }}\n\
             }}\n\
             }}\n",
            http_extra = options.http_extra,
            location_extra = options.location_extra,
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let child = Command::new(&bin)
            .args(["-p", &p, "-c", &format!("{p}/nginx.conf")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mut nginx = Nginx {
            child,
            master: options.master,
            port,
            url: format!("{scheme}://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited with {status}: {}", nginx.error_log());
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                nginx.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }

    /// The access log (empty without `log_format`).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.access_log_path()).unwrap_or_default()
    }

    pub fn access_log_path(&self) -> PathBuf {
        self.dir.path().join("logs/access.log")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if self.master {
            // A master stops its worker and cache processes on SIGTERM (SIGKILL would
            // leave them behind, holding the port).
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A self-signed certificate made the way Docker's "use self-signed certificates" guide
/// makes one: `openssl req -x509 -newkey rsa:2048 -nodes`, which OpenSSL marks `CA:TRUE`,
/// for `subject_alt_name` (e.g. `IP:127.0.0.1`).
pub fn openssl_self_signed(dir: &Path, name: &str, subject_alt_name: &str) -> TlsFiles {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-subj", "/CN=creb-rs-test"])
        .args(["-addext", &format!("subjectAltName={subject_alt_name}")])
        .output()
        .expect("run openssl (scripts/setup installs it)");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    TlsFiles { cert, key }
}

/// An nginx cache in front of the registry on `upstream_port`, as a registry's operator
/// puts one: blob GETs (immutable) cached on disk in `cache_dir` by digest (a layer read
/// from two repositories is one object, as in `simulate cache`) up to `max_size`
/// (`proxy_cache_path … max_size`: the cache manager evicts the least recently used),
/// everything else passed through (`BYPASS`: manifests, and blob HEADs, which nginx would
/// otherwise turn into GETs that fill the cache); every answer says `X-Cache-Status`.
pub fn blob_cache(upstream_port: u16, cache_dir: &Path, max_size: &str) -> NginxOptions {
    NginxOptions {
        upstream_port: Some(upstream_port),
        buffered: true,
        master: true,
        http_extra: format!(
            "proxy_cache_path {} levels=1:2 keys_zone=blobs:4m max_size={max_size} \
             inactive=1d use_temp_path=off manager_sleep=10ms;\n\
             map $request_method:$uri $not_blob {{ ~^GET:.*/blobs/sha256: 0; default 1; }}\n\
             map $uri $blob_key {{ ~/blobs/(sha256:[0-9a-f]+)$ $1; default $uri; }}\n",
            cache_dir.display()
        ),
        location_extra: "proxy_cache blobs;\n\
             proxy_cache_key $blob_key;\n\
             proxy_cache_valid 200 1d;\n\
             proxy_no_cache $not_blob;\n\
             proxy_cache_bypass $not_blob;\n\
             add_header X-Cache-Status $upstream_cache_status always;\n"
            .to_owned(),
        ..NginxOptions::default()
    }
}
