//! TLS verification is on by default: a real docker-registry serving a self-signed
//! certificate is refused at preflight (exit 2, a `tls` error naming the registry), and is
//! accepted with `--ca-cert` (the certificate as a trusted root) or `--insecure`; with either
//! HTTP client (`--http-client hyper|reqwest`).

use crate::common::{run_bin, summary_json, Registry, RegistryOptions, TlsFiles};

fn tls_registry(dir: &std::path::Path) -> (Registry, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let cert_path = dir.join("registry.pem");
    let key_path = dir.join("registry.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let registry = Registry::start_with(RegistryOptions {
        tls: Some(TlsFiles {
            cert: cert_path.clone(),
            key: key_path,
        }),
        ..RegistryOptions::default()
    });
    assert!(registry.url.starts_with("https://"));
    (registry, cert_path)
}

#[test]
fn a_self_signed_registry_is_refused_unless_trusted_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (registry, cert) = tls_registry(dir.path());
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let push = |client: &str, extra: &[&str]| {
        let mut args = vec![
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "tls/app",
            "--layers",
            "2",
            "--layer-size",
            "16KiB",
            "--output-dir",
            o,
            "--quiet",
        ];
        args.extend_from_slice(&["--http-client", client]);
        args.extend_from_slice(extra);
        run_bin(&args, None, &[])
    };
    let pull = |client: &str, extra: &[&str]| {
        let mut args = vec![
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "tls/app",
            "--output-dir",
            o,
            "--quiet",
        ];
        args.extend_from_slice(&["--http-client", client]);
        args.extend_from_slice(extra);
        run_bin(&args, None, &[])
    };

    for client in ["hyper", "reqwest"] {
        // Default: verification on, the certificate is unknown.
        for r in [push(client, &[]), pull(client, &[])] {
            assert_eq!(r.code, 2, "{}", r.stderr);
            let line = r
                .stderr
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or_default();
            assert!(line.contains(&registry.url), "{}", r.stderr);
            assert!(line.to_lowercase().contains("tls"), "{}", r.stderr);
            assert!(
                line.to_lowercase().contains("certificate"),
                "says why: {}",
                r.stderr
            );
        }
        // Nothing was pushed over the refused connection.
        assert_eq!(summary_json(&out)["totals"]["requests"].as_u64(), Some(1));

        // --insecure: verification off.
        let r = push(client, &["--insecure"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(
            summary_json(&out)["config"]["registry"]["transport"]["insecure"],
            true
        );

        // --ca-cert: verification on, against the registry's own certificate.
        let r = pull(client, &["--ca-cert", cert.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let s = summary_json(&out);
        assert_eq!(s["operations"]["blob_get"]["ok"].as_u64(), Some(3));
        assert_eq!(s["config"]["registry"]["transport"]["insecure"], false);
        assert_eq!(s["config"]["registry"]["transport"]["client"], client);

        // A CA file that is not a certificate is a usage error before anything is sent.
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let r = pull(client, &["--ca-cert", junk.to_str().unwrap()]);
        assert_eq!(r.code, 2, "{}", r.stderr);
    }
}
