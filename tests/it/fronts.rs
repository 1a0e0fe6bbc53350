//! Registries as they are deployed: Debian's docker-registry behind Debian's nginx with TLS,
//! with HTTP/2 and without, and certificates made the usual ways.
//!
//! - nginx retires a client connection after `keepalive_requests` requests; on HTTP/2 with
//!   a GOAWAY. Requests on streams above its last stream id were never processed: creb-rs
//!   sends them again (events `h2_goaway`, `unprocessed_retry`), and the registry's own
//!   access log shows every request it executed exactly once.
//! - The same rotation on HTTP/1.1 (nginx says `Connection: close` on the last response).
//! - A certificate made by `openssl req -x509` (marked `CA:TRUE`) is trusted with
//!   `--ca-cert`, as is a CA with its leaf; a certificate for another name fails with one
//!   plain line; `--insecure` still works.
//! - The protocol each endpoint spoke lands in `meta.json` and in the report.

use std::path::Path;
use std::process::Command;

use crate::common::nginx::{openssl_self_signed, Nginx, NginxOptions};
use crate::common::{run_bin, summary_json, Registry, RegistryOptions, TlsFiles};
use creb::trace::synth::{generate, SynthOptions};
use creb::trace::write::write_file;

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A trace with pushes (monolithic and chunked uploads), pulls, HEAD misses and failed
/// originals: 120 sessions, several hundred records.
fn trace(dir: &Path) -> std::path::PathBuf {
    let (records, _) = generate(&SynthOptions {
        seed: 29,
        sessions: 120,
        mean_gap_ms: 40.0,
        clients: 12,
        repos: 5,
        layer_size: (256, 64 * 1024),
        chunk: 16 * 1024,
        duplicate_share: 0.02,
        failed_share: 0.03,
        ..SynthOptions::default()
    });
    let path = dir.join("trace.json");
    write_file(&path, &records).unwrap();
    path
}

/// docker-registry with its JSON access log, behind nginx with TLS (HTTP/2 or not) that
/// retires connections after `keepalive` requests.
fn front(dir: &Path, http2: bool, keepalive: u32) -> (Registry, Nginx, TlsFiles) {
    let registry = Registry::start_with(RegistryOptions {
        access_log: true,
        ..RegistryOptions::default()
    });
    let tls = openssl_self_signed(dir, "front", "IP:127.0.0.1");
    let nginx = Nginx::start(NginxOptions {
        tls: Some(tls.clone()),
        http2,
        keepalive_requests: Some(keepalive),
        upstream_port: Some(registry.port),
        log_format: Some("'$server_protocol $status'".into()),
        ..NginxOptions::default()
    });
    (registry, nginx, tls)
}

fn replay(nginx: &Nginx, tls: &TlsFiles, trace: &Path, out: &Path, extra: &[&str]) -> i32 {
    let mut args = vec![
        "replay",
        trace.to_str().unwrap(),
        "--registry",
        &nginx.url,
        "--ca-cert",
        tls.cert.to_str().unwrap(),
        "--concurrency",
        "16",
        "--output-dir",
        out.to_str().unwrap(),
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let r = run_bin(&args, None, &[]);
    assert!(
        r.code == 0 || r.code == 1,
        "replay exited {}: {}\nnginx: {}",
        r.code,
        r.stderr,
        nginx.error_log()
    );
    r.code
}

/// The registry executed each request creb-rs sent exactly once: its access log counts
/// every HTTP request of the results, less the ones nginx refused unprocessed, plus the
/// preflight `GET /v2/` of each run; and no upload session was closed twice.
fn registry_saw_each_request_once(registry: &Registry, runs: &[&serde_json::Value], pings: u64) {
    let log = registry.access_log();
    let sent: u64 = runs.iter().map(|s| u(&s["totals"]["http_requests"])).sum();
    let resent: u64 = runs
        .iter()
        .map(|s| u(&s["events"]["unprocessed_retry"]))
        .sum();
    assert_eq!(
        log.len() as u64,
        sent - resent + pings,
        "registry requests vs creb-rs requests ({sent}) - unprocessed resends ({resent}) + preflights ({pings})"
    );
    let mut closes = std::collections::HashMap::new();
    for (method, uri, _) in &log {
        if method == "PUT" && uri.contains("/blobs/uploads/") {
            let session = uri.split('?').next().unwrap_or_default().to_owned();
            *closes.entry(session).or_insert(0) += 1;
        }
    }
    assert!(!closes.is_empty(), "the trace closes uploads");
    for (session, n) in closes {
        assert_eq!(n, 1, "upload {session} closed {n} times");
    }
}

fn meta_endpoint(dir: &Path) -> serde_json::Value {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    meta["endpoints"][0].clone()
}

#[test]
fn http2_connection_rotation_is_resent_never_counted_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    // Every 20 requests: some 40 rotations with 16 requests in flight.
    let (registry, nginx, tls) = front(dir.path(), true, 20);

    let stress = dir.path().join("stress");
    replay(&nginx, &tls, &trace, &stress, &["--mode", "stress"]);
    let prewarm = summary_json(&stress.join("prewarm"));
    let run = summary_json(&stress);
    registry.assert_no_errors_but_tag_races(&prewarm, "prewarm");
    registry.assert_no_errors_but_tag_races(&run, "stress");
    // Stress mode gathers answers per wake-up only with --gather (docs/measurement.md).
    assert!(run["checks"]["gathered"].is_null(), "{}", run["checks"]);
    let goaways = u(&prewarm["events"]["h2_goaway"]) + u(&run["events"]["h2_goaway"]);
    let refused =
        u(&prewarm["events"]["h2_refused_stream"]) + u(&run["events"]["h2_refused_stream"]);
    let resent =
        u(&prewarm["events"]["unprocessed_retry"]) + u(&run["events"]["unprocessed_retry"]);
    assert!(
        goaways + refused > 0,
        "nginx rotated connections every 20 requests at 16 in flight, and no request met it: {}",
        run["events"]
    );
    assert_eq!(resent, goaways + refused);
    registry_saw_each_request_once(&registry, &[&prewarm, &run], 1);

    let link = meta_endpoint(&stress);
    assert_eq!(link["http"], "HTTP/2", "{link}");
    assert_eq!(link["tls"], "TLSv1.3", "{link}");
    assert_eq!(link["alpn"], "h2", "{link}");
    let http_requests = u(&run["totals"]["http_requests"]);
    assert!(
        u(&link["connections"]) >= http_requests / 20,
        "{link}: {http_requests} requests at 20 per connection"
    );
    assert!(nginx
        .access_log()
        .lines()
        .all(|l| l.starts_with("HTTP/2.0")));
    let report = run_bin(&["report", stress.to_str().unwrap()], None, &[]);
    assert!(
        report
            .stdout
            .contains(&format!("endpoint {}  HTTP/2 over TLSv1.3", nginx.url)),
        "{}",
        report.stdout
    );

    // The reqwest client meets the same rotation the same way.
    let other = dir.path().join("reqwest");
    replay(
        &nginx,
        &tls,
        &trace,
        &other,
        &[
            "--mode",
            "stress",
            "--phase",
            "run",
            "--http-client",
            "reqwest",
        ],
    );
    let run = summary_json(&other);
    registry.assert_no_errors_but_tag_races(&run, "reqwest");
    assert_eq!(
        u(&run["events"]["unprocessed_retry"]),
        u(&run["events"]["h2_goaway"]) + u(&run["events"]["h2_refused_stream"])
    );
    assert_eq!(meta_endpoint(&other)["http"], "HTTP/2");

    // Delay mode over the same front: the prewarmed registry, fast.
    let delay = dir.path().join("delay");
    replay(
        &nginx,
        &tls,
        &trace,
        &delay,
        &["--mode", "delay", "--speed", "20", "--phase", "run"],
    );
    let run = summary_json(&delay);
    registry.assert_no_errors_but_tag_races(&run, "delay");
    assert_eq!(
        u(&run["events"]["unprocessed_retry"]),
        u(&run["events"]["h2_goaway"]) + u(&run["events"]["h2_refused_stream"])
    );
    assert_eq!(
        u(&run["trace"]["records"]),
        u(&run["trace"]["replayed"])
            + u(&run["trace"]["folded"])
            + run["trace"]["skipped"]
                .as_object()
                .unwrap()
                .values()
                .map(u)
                .sum::<u64>()
    );
}

#[test]
fn http1_connection_rotation_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let (registry, nginx, tls) = front(dir.path(), false, 50);
    let out = dir.path().join("out");
    replay(&nginx, &tls, &trace, &out, &["--mode", "stress"]);
    let prewarm = summary_json(&out.join("prewarm"));
    let run = summary_json(&out);
    registry.assert_no_errors_but_tag_races(&prewarm, "prewarm");
    registry.assert_no_errors_but_tag_races(&run, "stress");
    assert_eq!(u(&run["events"]["unprocessed_retry"]), 0);
    registry_saw_each_request_once(&registry, &[&prewarm, &run], 1);
    let link = meta_endpoint(&out);
    assert_eq!(link["http"], "HTTP/1.1", "{link}");
    assert_eq!(link["alpn"], "http/1.1", "{link}");
    assert!(u(&link["connections"]) > 1, "{link}");
    assert!(nginx
        .access_log()
        .lines()
        .all(|l| l.starts_with("HTTP/1.1")));
}

/// Pushes one small image through `url`; the process's exit status and stderr.
fn push(url: &str, client: &str, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "push",
        "--registry",
        url,
        "--repo",
        "certs/app",
        "--layers",
        "1",
        "--layer-size",
        "4KiB",
        "--http-client",
        client,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let r = run_bin(&args, None, &[]);
    (r.code, r.stderr)
}

fn tls_front(registry: &Registry, tls: &TlsFiles) -> Nginx {
    Nginx::start(NginxOptions {
        tls: Some(tls.clone()),
        http2: true,
        upstream_port: Some(registry.port),
        ..NginxOptions::default()
    })
}

/// A CA (`CA:TRUE`) and a leaf it signs (`CA:FALSE`) for `IP:127.0.0.1`, by openssl.
fn openssl_ca_and_leaf(dir: &Path) -> (std::path::PathBuf, TlsFiles) {
    let ca = openssl_self_signed(dir, "ca", "DNS:creb-rs-test-ca");
    let leaf_key = dir.join("leaf.key");
    let csr = dir.join("leaf.csr");
    let leaf = dir.join("leaf.crt");
    let ext = dir.join("leaf.ext");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let p = |path: &Path| path.to_str().unwrap().to_owned();
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p(&leaf_key),
        "-out",
        &p(&csr),
        "-subj",
        "/CN=127.0.0.1",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&ca.cert),
        "-CAkey",
        &p(&ca.key),
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        &p(&leaf),
        "-extfile",
        &p(&ext),
    ]);
    (
        ca.cert,
        TlsFiles {
            cert: leaf,
            key: leaf_key,
        },
    )
}

#[test]
fn certificates_made_the_usual_ways_are_trusted_with_ca_cert() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::start();

    // `openssl req -x509`: self-signed, CA:TRUE, for 127.0.0.1.
    let own = openssl_self_signed(dir.path(), "own", "IP:127.0.0.1");
    let nginx = tls_front(&registry, &own);
    let cert = own.cert.to_str().unwrap();
    for client in ["hyper", "reqwest"] {
        let (code, stderr) = push(&nginx.url, client, &["--ca-cert", cert]);
        assert_eq!(code, 0, "{client}: {stderr}");
        let (code, stderr) = push(&nginx.url, client, &[]);
        assert_eq!(code, 2, "{client}: an unknown certificate must be refused");
        // WebPKI sees a CA used as the server's own before it sees an unknown issuer.
        assert!(
            stderr.contains("presents a CA certificate as its own")
                && stderr.contains("--ca-cert")
                && stderr.contains("--insecure"),
            "{client}: {stderr}"
        );
    }
    drop(nginx);

    // A CA and a leaf it signed: trust the CA.
    let (ca, leaf) = openssl_ca_and_leaf(dir.path());
    let nginx = tls_front(&registry, &leaf);
    for client in ["hyper", "reqwest"] {
        let (code, stderr) = push(&nginx.url, client, &["--ca-cert", ca.to_str().unwrap()]);
        assert_eq!(code, 0, "{client}: {stderr}");
    }
    drop(nginx);

    // A certificate for another name: one plain line that says so, even when pinned;
    // --insecure still connects.
    let other = openssl_self_signed(dir.path(), "other", "DNS:other.example");
    let nginx = tls_front(&registry, &other);
    for client in ["hyper", "reqwest"] {
        let (code, stderr) = push(
            &nginx.url,
            client,
            &["--ca-cert", other.cert.to_str().unwrap()],
        );
        assert_eq!(code, 2, "{client}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_default();
        assert!(
            line.contains("other.example") && line.contains("127.0.0.1"),
            "{client}: {line}"
        );
        assert_eq!(stderr.lines().filter(|l| l.contains("error")).count(), 1);
        let (code, stderr) = push(&nginx.url, client, &["--insecure"]);
        assert_eq!(code, 0, "{client}: {stderr}");
    }
}
