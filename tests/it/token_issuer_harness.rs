//! Proves the test token issuer and htpasswd helper work with a real `docker-registry`.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::token_issuer::*;
use crate::common::{Registry, RegistryAuth, RegistryOptions};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use sha2::{Digest, Sha256};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn users(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(u, p)| (u.to_string(), p.to_string()))
        .collect()
}

fn registry_for(issuer: &TokenIssuer) -> Registry {
    Registry::start_with(RegistryOptions {
        auth: issuer.registry_auth(),
        ..Default::default()
    })
}

/// Percent-encodes a query or form value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET realm?service=..&scope=..` with optional Basic credentials and extra query text.
async fn get_token(
    http: &reqwest::Client,
    issuer: &TokenIssuer,
    credentials: Option<(&str, &str)>,
    scopes: &[&str],
    extra_query: &str,
) -> (u16, serde_json::Value) {
    let mut url = format!("{}?service={}", issuer.realm, encode(&issuer.service));
    for scope in scopes {
        url.push_str(&format!("&scope={}", encode(scope)));
    }
    url.push_str(extra_query);
    let mut request = http.get(url);
    if let Some((user, password)) = credentials {
        request = request.header(
            "Authorization",
            format!("Basic {}", STANDARD.encode(format!("{user}:{password}"))),
        );
    }
    let response = request.send().await.expect("token request");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("token body");
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

/// `POST realm` with a form body.
async fn post_token(
    http: &reqwest::Client,
    issuer: &TokenIssuer,
    form: &str,
) -> (u16, serde_json::Value) {
    let response = http
        .post(&issuer.realm)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form.to_owned())
        .send()
        .await
        .expect("token request");
    let status = response.status().as_u16();
    let body = response.bytes().await.expect("token body");
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

fn claims(jwt: &str) -> serde_json::Value {
    let part = jwt.split('.').nth(1).expect("JWT claims");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("JSON")
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Starts a blob upload; returns the response.
async fn start_upload(
    http: &reqwest::Client,
    registry: &Registry,
    repo: &str,
    token: &str,
) -> reqwest::Response {
    http.post(format!("{}/v2/{repo}/blobs/uploads/", registry.url))
        .bearer_auth(token)
        .header("Content-Length", "0")
        .send()
        .await
        .expect("upload POST")
}

/// Pushes `bytes` as a blob (POST then PUT) with `token`; returns its digest.
async fn push_blob(
    http: &reqwest::Client,
    registry: &Registry,
    repo: &str,
    token: &str,
    bytes: &[u8],
) -> String {
    let started = start_upload(http, registry, repo, token).await;
    assert_eq!(started.status(), 202, "upload POST");
    let mut location = header(&started, "location");
    assert!(!location.is_empty(), "Location header");
    if location.starts_with('/') {
        location = format!("{}{location}", registry.url);
    }
    let digest = sha256_digest(bytes);
    let separator = if location.contains('?') { '&' } else { '?' };
    let put = http
        .put(format!("{location}{separator}digest={}", encode(&digest)))
        .bearer_auth(token)
        .header("Content-Type", "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await
        .expect("upload PUT");
    assert_eq!(put.status(), 201, "upload PUT");
    digest
}

#[tokio::test]
async fn token_auth_round_trip_with_real_registry() {
    let issuer = TokenIssuer::start(IssuerConfig {
        users: users(&[("alice", "secret")]),
        ..Default::default()
    });
    let registry = registry_for(&issuer);
    let http = client();

    // The registry challenges with the issuer's realm and service.
    let base = http
        .get(format!("{}/v2/", registry.url))
        .send()
        .await
        .unwrap();
    assert_eq!(base.status(), 401);
    assert_eq!(
        header(&base, "www-authenticate"),
        format!(
            "Bearer realm=\"{}\",service=\"{}\"",
            issuer.realm, issuer.service
        )
    );

    // A user's token grants pull and push.
    let (status, body) = get_token(
        &http,
        &issuer,
        Some(("alice", "secret")),
        &["repository:t/app:pull,push"],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();
    assert_eq!(body["access_token"], body["token"]);
    assert_eq!(body["expires_in"], 300);
    assert!(body["issued_at"].as_str().unwrap().ends_with('Z'));
    let c = claims(&token);
    assert_eq!(c["iss"], issuer.issuer.as_str());
    assert_eq!(c["aud"], issuer.service.as_str());
    assert_eq!(c["sub"], "alice");
    assert_eq!(
        c["access"],
        serde_json::json!([{"type": "repository", "name": "t/app", "actions": ["pull", "push"]}])
    );

    let base = http
        .get(format!("{}/v2/", registry.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(base.status(), 200, "{}", registry.log());

    let bytes = b"creb-rs token issuer blob".to_vec();
    let digest = push_blob(&http, &registry, "t/app", &token, &bytes).await;
    let blob_url = format!("{}/v2/t/app/blobs/{digest}", registry.url);
    let fetched = http
        .get(&blob_url)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), bytes.as_slice());

    // An anonymous token only pulls.
    let (status, body) = get_token(&http, &issuer, None, &["repository:t/app:pull,push"], "").await;
    assert_eq!(status, 200, "{body}");
    let anonymous = body["token"].as_str().unwrap().to_owned();
    assert_eq!(claims(&anonymous)["sub"], "");
    assert_eq!(
        claims(&anonymous)["access"][0]["actions"],
        serde_json::json!(["pull"])
    );
    let pulled = http
        .get(&blob_url)
        .bearer_auth(&anonymous)
        .send()
        .await
        .unwrap();
    assert_eq!(pulled.status(), 200);
    let refused = start_upload(&http, &registry, "t/app", &anonymous).await;
    assert_eq!(refused.status(), 401);
    let challenge = header(&refused, "www-authenticate");
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    // distribution lists the actions in no fixed order (Go map iteration).
    assert!(
        challenge.contains("scope=\"repository:t/app:pull,push\"")
            || challenge.contains("scope=\"repository:t/app:push,pull\""),
        "{challenge}"
    );

    // A wrong password is refused by the issuer.
    let (status, body) = get_token(
        &http,
        &issuer,
        Some(("alice", "wrong")),
        &["repository:t/app:pull"],
        "",
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(body["details"], "invalid credentials");

    let fetches = issuer.fetches();
    let summary: Vec<_> = fetches
        .iter()
        .map(|f| (f.method.as_str(), f.user.as_deref(), f.status))
        .collect();
    assert_eq!(
        summary,
        [
            ("GET", Some("alice"), 200),
            ("GET", None, 200),
            ("GET", Some("alice"), 401)
        ]
    );
    assert_eq!(fetches[0].scopes, ["repository:t/app:pull,push"]);
    assert_eq!(fetches[2].scopes, ["repository:t/app:pull"]);
    assert!(fetches.iter().all(|f| f.grant_type.is_none()));
}

#[tokio::test]
async fn scopes_are_split_and_intersected() {
    let issuer = TokenIssuer::start(IssuerConfig {
        users: users(&[("alice", "secret")]),
        ..Default::default()
    });
    let http = client();
    let (status, body) = get_token(
        &http,
        &issuer,
        Some(("alice", "secret")),
        &[
            "repository:a/b:pull,push,delete repository:127.0.0.1:5000/x:pull",
            "registry:catalog:*",
        ],
        "&offline_token=true&client_id=creb-rs-test",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        claims(body["token"].as_str().unwrap())["access"],
        serde_json::json!([
            {"type": "repository", "name": "a/b", "actions": ["pull", "push"]},
            {"type": "repository", "name": "127.0.0.1:5000/x", "actions": ["pull"]},
            {"type": "registry", "name": "catalog", "actions": []},
        ])
    );
    let refresh = body["refresh_token"].as_str().expect("refresh_token");
    let fetch = &issuer.fetches()[0];
    assert_eq!(fetch.scopes.len(), 3);
    assert_eq!(fetch.client_id.as_deref(), Some("creb-rs-test"));
    assert!(fetch.offline);

    // The refresh token handed out speaks for alice.
    let (status, body) = post_token(
        &http,
        &issuer,
        &format!(
            "grant_type=refresh_token&refresh_token={refresh}&service={}&client_id=c&scope=repository%3Aa%2Fb%3Apush",
            issuer.service
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        claims(body["access_token"].as_str().unwrap())["sub"],
        "alice"
    );
    assert!(body.get("refresh_token").is_none());

    // No refresh token without credentials; a malformed scope or other service is a 400.
    let (status, body) = get_token(
        &http,
        &issuer,
        None,
        &["repository:a/b:pull"],
        "&offline_token=true&client_id=c",
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.get("refresh_token").is_none());
    let (status, _) = get_token(&http, &issuer, None, &["repository-only"], "").await;
    assert_eq!(status, 400);
    let other = http
        .get(format!("{}?service=elsewhere", issuer.realm))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 400);
}

#[tokio::test]
async fn post_grants_and_get_fallback() {
    let issuer = TokenIssuer::start(IssuerConfig {
        users: users(&[("alice", "secret")]),
        refresh_tokens: users(&[("identity-token-1", "alice")]),
        ..Default::default()
    });
    let registry = registry_for(&issuer);
    let http = client();
    let service = encode(&issuer.service);

    // A pre-provisioned identity token; `+` and `%20` both separate scopes.
    let (status, body) = post_token(
        &http,
        &issuer,
        &format!(
            "grant_type=refresh_token&refresh_token=identity-token-1&service={service}\
             &scope=repository%3At%2Fapp%3Apull%2Cpush+repository%3At%2Fother%3Apull&client_id=creb-rs-test"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();
    assert_eq!(body["token"], body["access_token"]);
    let c = claims(&token);
    assert_eq!(c["sub"], "alice");
    assert_eq!(c["access"].as_array().unwrap().len(), 2);
    let bytes = b"pushed with a refreshed token".to_vec();
    push_blob(&http, &registry, "t/app", &token, &bytes).await;

    // Without client_id: 400. Unknown refresh token: 401. Unknown grant: 400.
    let (status, _) = post_token(
        &http,
        &issuer,
        &format!("grant_type=refresh_token&refresh_token=identity-token-1&service={service}&scope=repository%3At%2Fapp%3Apull"),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post_token(
        &http,
        &issuer,
        &format!("grant_type=refresh_token&refresh_token=nope&service={service}&client_id=c"),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = post_token(
        &http,
        &issuer,
        &format!("grant_type=magic&service={service}&client_id=c"),
    )
    .await;
    assert_eq!(status, 400);

    // Password grant with offline access returns a refresh token that then works.
    let (status, body) = post_token(
        &http,
        &issuer,
        &format!(
            "grant_type=password&username=alice&password=secret&service={service}\
             &scope=repository%3At%2Fapp%3Apull&client_id=c&access_type=offline"
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let refresh = body["refresh_token"].as_str().expect("refresh_token");
    let (status, _) = post_token(
        &http,
        &issuer,
        &format!("grant_type=refresh_token&refresh_token={refresh}&service={service}&client_id=c&scope=repository%3At%2Fapp%3Apull"),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = post_token(
        &http,
        &issuer,
        &format!("grant_type=password&username=alice&password=wrong&service={service}&client_id=c"),
    )
    .await;
    assert_eq!(status, 401);

    let grants: Vec<_> = issuer
        .fetches()
        .iter()
        .map(|f| (f.grant_type.clone().unwrap_or_default(), f.status))
        .collect();
    let expected: Vec<(String, u16)> = [
        ("refresh_token", 200),
        ("refresh_token", 400),
        ("refresh_token", 401),
        ("magic", 400),
        ("password", 200),
        ("refresh_token", 200),
        ("password", 401),
    ]
    .iter()
    .map(|(g, s)| (g.to_string(), *s))
    .collect();
    assert_eq!(grants, expected);
    assert_eq!(issuer.fetches()[0].scopes.len(), 2);

    // An issuer without POST support answers 405; GET still works.
    let get_only = TokenIssuer::start(IssuerConfig {
        users: users(&[("alice", "secret")]),
        refresh_tokens: users(&[("identity-token-1", "alice")]),
        post_supported: false,
        report_expires_in: false,
        ..Default::default()
    });
    let (status, _) = post_token(
        &http,
        &get_only,
        "grant_type=refresh_token&refresh_token=identity-token-1&client_id=c",
    )
    .await;
    assert_eq!(status, 405);
    let (status, body) = get_token(
        &http,
        &get_only,
        Some(("alice", "secret")),
        &["repository:t/app:pull"],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.get("expires_in").is_none());
    let methods: Vec<_> = get_only
        .fetches()
        .iter()
        .map(|f| (f.method.clone(), f.status))
        .collect();
    assert_eq!(methods, [("POST".to_owned(), 405), ("GET".to_owned(), 200)]);
}

#[tokio::test]
async fn short_lived_tokens_expire() {
    let issuer = TokenIssuer::start(IssuerConfig {
        users: users(&[("alice", "secret")]),
        lifetime: Duration::from_secs(2),
        // distribution accepts tokens until 60 s past `exp`; cancel that out.
        backdate: DISTRIBUTION_LEEWAY,
        ..Default::default()
    });
    let registry = registry_for(&issuer);
    let http = client();
    let (status, body) = get_token(
        &http,
        &issuer,
        Some(("alice", "secret")),
        &["repository:t/app:pull"],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["expires_in"], 2);
    let token = body["token"].as_str().unwrap().to_owned();
    let c = claims(&token);
    assert_eq!(
        c["exp"].as_u64().unwrap() - c["iat"].as_u64().unwrap(),
        2,
        "{c}"
    );
    let url = format!("{}/v2/t/app/tags/list", registry.url);
    let fresh = http.get(&url).bearer_auth(&token).send().await.unwrap();
    // The repository does not exist yet: authorized, then 404 NAME_UNKNOWN.
    assert_eq!(fresh.status(), 404);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stale = http.get(&url).bearer_auth(&token).send().await.unwrap();
    assert_eq!(stale.status(), 401);
}

#[tokio::test]
async fn htpasswd_registry() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = write_htpasswd(dir.path(), &[("alice", "secret"), ("bob", "hunter2")]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("alice:$2y$05$"), "{text}");
    let registry = Registry::start_with(RegistryOptions {
        auth: RegistryAuth::Htpasswd { path },
        ..Default::default()
    });
    let http = client();
    let url = format!("{}/v2/", registry.url);
    for (user, password) in [("alice", "secret"), ("bob", "hunter2")] {
        let ok = http
            .get(&url)
            .basic_auth(user, Some(password))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{user}");
    }
    let wrong = http
        .get(&url)
        .basic_auth("alice", Some("wrong"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let challenge = header(&wrong, "www-authenticate");
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
    let none = http.get(&url).send().await.unwrap();
    assert_eq!(none.status(), 401);

    // `$2b$` hashes are accepted too.
    let dir_2b = tempfile::TempDir::new().unwrap();
    let path_2b = dir_2b.path().join("htpasswd");
    let hash = bcrypt::hash_with_result("secret", 5)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoB);
    std::fs::write(&path_2b, format!("carol:{hash}\n")).unwrap();
    let registry_2b = Registry::start_with(RegistryOptions {
        auth: RegistryAuth::Htpasswd { path: path_2b },
        ..Default::default()
    });
    let ok = http
        .get(format!("{}/v2/", registry_2b.url))
        .basic_auth("carol", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}
