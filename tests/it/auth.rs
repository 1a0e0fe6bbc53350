//! Authentication against real registries: docker-registry with token auth (an ES256 token
//! issuer run by the test) and with htpasswd, driven through the real binary with every
//! credential source. Token fetches are counted at the issuer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::token_issuer::{IssuerConfig, TokenIssuer, DISTRIBUTION_LEEWAY};
use crate::common::{run_bin, summary_json, Registry, RegistryOptions};
use base64::Engine as _;

const USER: &str = "alice";
const PASS: &str = "correct-horse-battery-staple-7f3a";
const REFRESH: &str = "refresh-token-5be1d0c2";
/// base64url of `{"typ":"JWT"`: the start of every token the issuer signs.
const JWT_PREFIX: &str = "eyJ0eXAiOiJKV1Qi";

fn issuer_config() -> IssuerConfig {
    IssuerConfig {
        users: HashMap::from([(USER.to_owned(), PASS.to_owned())]),
        refresh_tokens: HashMap::from([(REFRESH.to_owned(), USER.to_owned())]),
        ..IssuerConfig::default()
    }
}

fn token_registry(config: IssuerConfig) -> (TokenIssuer, Registry) {
    let issuer = TokenIssuer::start(config);
    let registry = Registry::start_with(RegistryOptions {
        auth: issuer.registry_auth(),
        ..RegistryOptions::default()
    });
    (issuer, registry)
}

fn basic_registry(dir: &Path) -> Registry {
    Registry::with_basic_auth(dir, USER, PASS)
}

fn host_of(registry: &Registry) -> String {
    format!("127.0.0.1:{}", registry.port)
}

fn push_args<'a>(registry: &'a str, repo: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "push",
        "--registry",
        registry,
        "--repo",
        repo,
        "--layers",
        "2",
        "--layer-size",
        "64KiB",
        "--output-dir",
        out,
        "--quiet",
    ]
}

fn write_docker_config(dir: &Path, json: &str) {
    std::fs::write(dir.join("config.json"), json).unwrap();
}

#[test]
fn token_push_and_pull_fetch_one_token_per_scope_set() {
    // A slow issuer makes the concurrent first requests overlap: single flight must hold.
    let (issuer, registry) = token_registry(IssuerConfig {
        delay: Duration::from_millis(200),
        ..issuer_config()
    });
    let out = tempfile::tempdir().unwrap();
    let push_dir = out.path().join("push");
    let r = run_bin(
        &[
            "push",
            "--registry",
            &registry.url,
            "--repo",
            "team/app",
            "--layers",
            "5",
            "--layer-size",
            "256KiB",
            "--concurrency",
            "4",
            "--username",
            USER,
            "--password-stdin",
            "--output-dir",
            push_dir.to_str().unwrap(),
            "--quiet",
        ],
        Some(PASS),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let fetches = issuer.fetches();
    let scopes: Vec<Vec<String>> = fetches.iter().map(|f| f.scopes.clone()).collect();
    assert_eq!(
        scopes,
        vec![vec![], vec!["repository:team/app:pull,push".to_owned()]],
        "one fetch for GET /v2/, one for the push scope: {fetches:?}"
    );
    assert!(fetches
        .iter()
        .all(|f| f.user.as_deref() == Some(USER) && f.status == 200));
    let summary = summary_json(&push_dir);
    assert_eq!(summary["totals"]["errors"], 0);
    assert_eq!(summary["operations"]["token_fetch"]["ok"], 2);
    assert_eq!(summary["operations"]["blob_upload"]["ok"], 6);
    assert_eq!(summary["config"]["credentials"]["source"], "password-stdin");

    issuer.clear_fetches();
    let pull_dir = out.path().join("pull");
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "team/app",
            "--concurrency",
            "4",
            "--username",
            USER,
            "--password-stdin",
            "--output-dir",
            pull_dir.to_str().unwrap(),
            "--quiet",
        ],
        Some(PASS),
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let scopes: Vec<Vec<String>> = issuer.fetches().iter().map(|f| f.scopes.clone()).collect();
    assert_eq!(
        scopes,
        vec![vec![], vec!["repository:team/app:pull".to_owned()]]
    );
    assert_eq!(summary_json(&pull_dir)["operations"]["blob_get"]["ok"], 6);
}

#[test]
fn every_credential_source_works_against_token_auth() {
    let (issuer, registry) = token_registry(issuer_config());
    let host = host_of(&registry);
    let out = tempfile::tempdir().unwrap();
    let o = out.path().to_str().unwrap();

    // --password-cmd
    let cmd = format!("printf %s '{PASS}'");
    let mut args = push_args(&registry.url, "src/cmd", o);
    args.extend(["--username", USER, "--password-cmd", &cmd]);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "password-cmd: {}", r.stderr);

    // CREB_USERNAME / CREB_PASSWORD
    let r = run_bin(
        &push_args(&registry.url, "src/env", o),
        None,
        &[("CREB_USERNAME", USER), ("CREB_PASSWORD", PASS)],
    );
    assert_eq!(r.code, 0, "environment: {}", r.stderr);

    // config.json `auth`, found through DOCKER_CONFIG.
    let docker = tempfile::tempdir().unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASS}"));
    write_docker_config(
        docker.path(),
        &format!(r#"{{"auths":{{"http://{host}":{{"auth":"{auth}"}}}}}}"#),
    );
    let r = run_bin(
        &push_args(&registry.url, "src/config", o),
        None,
        &[("DOCKER_CONFIG", docker.path().to_str().unwrap())],
    );
    assert_eq!(r.code, 0, "config.json auth: {}", r.stderr);
    assert_eq!(
        summary_json(out.path())["config"]["credentials"]["source"],
        "docker-config:auth"
    );

    // A docker-credential helper on PATH, named by credHelpers.
    let bin = tempfile::tempdir().unwrap();
    let helper = bin.path().join("docker-credential-crebtest");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\nif [ \"$server\" = \"{host}\" ]; then\n  printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASS}\"}}' \"$server\"\nelse\n  echo 'credentials not found in native keychain'; exit 1\nfi\n"
        ),
    )
    .unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&helper).unwrap().permissions(),
        0o755,
    );
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let helpers = tempfile::tempdir().unwrap();
    write_docker_config(
        helpers.path(),
        &format!(r#"{{"credHelpers":{{"{host}":"crebtest"}}}}"#),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut args = push_args(&registry.url, "src/helper", o);
    args.extend(["--docker-config", helpers.path().to_str().unwrap()]);
    let r = run_bin(&args, None, &[("PATH", &path)]);
    assert_eq!(r.code, 0, "credential helper: {}", r.stderr);
    assert_eq!(
        summary_json(out.path())["config"]["credentials"]["source"],
        "helper:crebtest"
    );

    // An identity token: exchanged with an OAuth2 POST (refresh_token grant).
    issuer.clear_fetches();
    let tokens = tempfile::tempdir().unwrap();
    write_docker_config(
        tokens.path(),
        &format!(r#"{{"auths":{{"{host}":{{"identitytoken":"{REFRESH}"}}}}}}"#),
    );
    let mut args = push_args(&registry.url, "src/identity", o);
    args.extend(["--docker-config", tokens.path().to_str().unwrap()]);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "identity token: {}", r.stderr);
    let fetches = issuer.fetches();
    assert!(!fetches.is_empty());
    for f in &fetches {
        assert_eq!(
            (f.method.as_str(), f.grant_type.as_deref()),
            ("POST", Some("refresh_token")),
            "{f:?}"
        );
        assert_eq!(f.client_id.as_deref(), Some("creb-rs"));
    }
}

#[test]
fn identity_token_falls_back_to_get_when_post_is_not_supported() {
    let (issuer, registry) = token_registry(IssuerConfig {
        post_supported: false,
        users: HashMap::from([("<token>".to_owned(), REFRESH.to_owned())]),
        ..issuer_config()
    });
    let tokens = tempfile::tempdir().unwrap();
    write_docker_config(
        tokens.path(),
        &format!(
            r#"{{"auths":{{"{}":{{"identitytoken":"{REFRESH}"}}}}}}"#,
            host_of(&registry)
        ),
    );
    let out = tempfile::tempdir().unwrap();
    let mut args = push_args(&registry.url, "fallback/app", out.path().to_str().unwrap());
    args.extend(["--docker-config", tokens.path().to_str().unwrap()]);
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let methods: Vec<(String, u16)> = issuer
        .fetches()
        .iter()
        .map(|f| (f.method.clone(), f.status))
        .collect();
    assert_eq!(methods[0], ("POST".to_owned(), 405));
    assert_eq!(methods[1], ("GET".to_owned(), 200));
}

#[test]
fn anonymous_pull_only_token_makes_a_push_fail_with_insufficient_scope() {
    let (_issuer, registry) = token_registry(issuer_config());
    let out = tempfile::tempdir().unwrap();
    let mut args = push_args(&registry.url, "anon/app", out.path().to_str().unwrap());
    args.push("--anonymous");
    let r = run_bin(&args, None, &[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("insufficient_scope"), "{}", r.stderr);
    let summary = summary_json(out.path());
    assert!(summary["errors"]["http_401"].as_u64().unwrap() >= 1);
    assert_eq!(summary["operations"]["blob_upload"]["ok"], 0);
    // Pulling needs only pull: an anonymous pull of a pushed image works.
    let mut push = push_args(&registry.url, "anon/pub", out.path().to_str().unwrap());
    push.extend(["--username", USER, "--password-stdin"]);
    assert_eq!(run_bin(&push, Some(PASS), &[]).code, 0);
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "anon/pub",
            "--anonymous",
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_mount_asks_for_both_repositories_in_one_token() {
    let (issuer, registry) = token_registry(issuer_config());
    let out = tempfile::tempdir().unwrap();
    let o = out.path().to_str().unwrap();
    let mut args = push_args(&registry.url, "team/src", o);
    args.extend(["--username", USER, "--password-stdin"]);
    assert_eq!(run_bin(&args, Some(PASS), &[]).code, 0);
    issuer.clear_fetches();
    let mut args = push_args(&registry.url, "team/dst", o);
    args.extend([
        "--username",
        USER,
        "--password-stdin",
        "--mount-from",
        "team/src",
    ]);
    let r = run_bin(&args, Some(PASS), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let summary = summary_json(out.path());
    assert_eq!(summary["operations"]["blob_mount"]["ok"], 3);
    assert!(summary["operations"]["blob_upload"].is_null());
    let mount_fetch = issuer
        .fetches()
        .into_iter()
        .find(|f| f.scopes.len() == 2)
        .expect("a token for both repositories");
    assert_eq!(
        mount_fetch.scopes,
        ["repository:team/dst:pull,push", "repository:team/src:pull"]
    );
}

#[tokio::test]
async fn expired_tokens_are_renewed_within_one_run() {
    use creb::auth::credentials::Credentials;
    use creb::auth::registry_auth::RegistryAuth as Auth;
    use creb::auth::secret::Secret;
    use creb::client::{BlobSource, ClientOptions, OpCtx, RegistryClient, UploadMode};
    use creb::content::ContentSpec;
    use creb::metrics::{AggregatorBuilder, Event, Op};
    use creb::net::reqwest_transport::ReqwestTransport;
    use creb::net::transport::Transport;
    use creb::net::TransportConfig;

    // Tokens the registry refuses 2 s after issue (distribution's 60 s leeway backdated away).
    let (issuer, registry) = token_registry(IssuerConfig {
        lifetime: Duration::from_secs(2),
        backdate: DISTRIBUTION_LEEWAY,
        ..issuer_config()
    });
    let (recorder, aggregator) = AggregatorBuilder::default().spawn();
    let transport: Arc<dyn Transport> =
        Arc::new(ReqwestTransport::new(TransportConfig::default()).unwrap());
    let creds = Credentials::Basic {
        username: USER.into(),
        password: Secret::new(PASS),
    };
    let auth = Arc::new(Auth::new(creds, Arc::clone(&transport), recorder.clone()));
    let options = ClientOptions {
        push_scopes: true,
        ..ClientOptions::default()
    };
    let client = RegistryClient::with_auth(
        transport,
        registry.url.parse().unwrap(),
        recorder,
        options,
        auth,
    );
    let repo = "renew/app".parse().unwrap();
    client.ping(OpCtx::default()).await.unwrap();
    for i in 0..2u8 {
        if i == 1 {
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let spec = ContentSpec::new(9, &[i], 1000);
        let digest = spec.digest();
        client
            .upload_blob(
                &repo,
                &digest,
                &BlobSource::Content(spec),
                UploadMode::Monolithic,
                None,
                OpCtx::default(),
            )
            .await
            .unwrap();
        client
            .blob_get(&repo, &digest, Some(1000), OpCtx::default())
            .await
            .unwrap();
    }
    drop(client);
    let agg = aggregator.finish().await;
    assert_eq!(agg.table().op_total(Op::BlobUpload).unwrap().ok, 2);
    assert!(
        agg.event(Event::AuthRetry) >= 2,
        "GET /v2/ once, then the stale token once"
    );
    let push_fetches = issuer
        .fetches()
        .iter()
        .filter(|f| !f.scopes.is_empty())
        .count();
    assert_eq!(push_fetches, 2, "a fresh token after the first expired");
}

#[test]
fn basic_auth_from_stdin_and_docker_config() {
    let dir = tempfile::tempdir().unwrap();
    let registry = basic_registry(dir.path());
    let out = tempfile::tempdir().unwrap();
    let mut args = push_args(&registry.url, "basic/app", out.path().to_str().unwrap());
    args.extend(["--username", USER, "--password-stdin"]);
    let r = run_bin(&args, Some(&format!("{PASS}\n")), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(summary_json(out.path())["operations"]
        .get("token_fetch")
        .is_none());

    let docker = tempfile::tempdir().unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASS}"));
    write_docker_config(
        docker.path(),
        &format!(
            r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#,
            host_of(&registry)
        ),
    );
    let r = run_bin(
        &[
            "pull",
            "--registry",
            &registry.url,
            "--repo",
            "basic/app",
            "--docker-config",
            docker.path().to_str().unwrap(),
            "--quiet",
        ],
        None,
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("error")).collect()
}

#[test]
fn a_wrong_password_exits_2_with_one_clear_line() {
    let (_issuer, token) = token_registry(issuer_config());
    let dir = tempfile::tempdir().unwrap();
    let basic = basic_registry(dir.path());
    for (registry, expect) in [
        (&token, "token server"),
        (&basic, "refused the credentials"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut args = push_args(&registry.url, "wrong/pw", out.path().to_str().unwrap());
        args.extend(["--username", USER, "--password-stdin"]);
        let r = run_bin(&args, Some("not-the-password"), &[]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        let lines = error_lines(&r.stderr);
        assert_eq!(lines.len(), 1, "one line, not a wall: {}", r.stderr);
        assert!(lines[0].contains(&registry.url), "{}", lines[0]);
        assert!(lines[0].contains(expect), "{}", lines[0]);
        assert!(lines[0].contains("401"), "{}", lines[0]);
        assert!(!r.stderr.contains("not-the-password"));
    }
    // No credentials at all against an auth registry: also one line, with advice.
    let r = run_bin(
        &["pull", "--registry", &basic.url, "--repo", "a/b", "--quiet"],
        None,
        &[],
    );
    assert_eq!(r.code, 2);
    assert!(
        error_lines(&r.stderr)[0].contains("requires credentials"),
        "{}",
        r.stderr
    );
}

/// Reads every file under `dir` as text.
fn all_files(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&all_files(&path));
        } else {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    text
}

#[test]
fn no_secret_reaches_stdout_stderr_logs_or_result_files() {
    let (_issuer, token) = token_registry(issuer_config());
    let dir = tempfile::tempdir().unwrap();
    let basic = basic_registry(dir.path());
    let basic64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASS}"));
    let out = tempfile::tempdir().unwrap();
    let mut seen = String::new();
    for (i, registry) in [&token, &basic].into_iter().enumerate() {
        let push_dir = out.path().join(format!("push{i}"));
        let pull_dir = out.path().join(format!("pull{i}"));
        for args in [
            vec![
                "-vvv",
                "push",
                "--registry",
                &registry.url,
                "--repo",
                "secret/app",
                "--layers",
                "1",
                "--layer-size",
                "4KiB",
                "--chunk-size",
                "1KiB",
                "--output-dir",
                push_dir.to_str().unwrap(),
                "--username",
                USER,
                "--password-stdin",
            ],
            vec![
                "-vvv",
                "pull",
                "--registry",
                &registry.url,
                "--repo",
                "secret/app",
                "--json",
                "--output-dir",
                pull_dir.to_str().unwrap(),
                "--username",
                USER,
                "--password-stdin",
            ],
        ] {
            let r = run_bin(&args, Some(PASS), &[]);
            assert_eq!(r.code, 0, "{}", r.stderr);
            assert!(r.stderr.len() > 1000, "trace logging was on");
            seen.push_str(&r.stdout);
            seen.push_str(&r.stderr);
        }
    }
    seen.push_str(&all_files(out.path()));
    for secret in [PASS, basic64.as_str(), JWT_PREFIX] {
        assert!(!seen.contains(secret), "a secret leaked: {secret}");
    }
}
