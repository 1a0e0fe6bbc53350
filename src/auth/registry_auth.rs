//! The [`Authenticator`] for real registries: learns the scheme from the first 401 (the
//! preflight `GET /v2/` makes that happen before the workload), then attaches credentials
//! proactively — Basic, or a bearer token per scope set — so the workload pays no 401
//! round trip per new scope.
//!
//! Tokens are cached by (realm, service, scopes). The hot path takes a read lock and clones
//! a header value; a token is fetched by one task at a time per key (single flight) while
//! the others wait for its result. A 401 drops the token it answered and allows one retry;
//! an `insufficient_scope` 401 for scopes already asked for stands, because asking again
//! would get the same grant.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures_util::future::BoxFuture;
use http::header::AUTHORIZATION;
use http::HeaderValue;
use tokio::time::Instant;
use url::Url;

use super::challenge::challenges_of;
use super::credentials::Credentials;
use super::scope::ScopeSet;
use super::token::{basic_authorization, TokenFetcher};
use super::{AccessScope, AuthError, Authenticator, Ready};
use crate::metrics::Recorder;
use crate::net::headers::Headers;
use crate::net::transport::{HttpRequest, Transport};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Scheme {
    Unknown,
    Basic,
    Bearer { realm: Url, service: Option<String> },
}

#[derive(Debug)]
struct CachedToken {
    header: HeaderValue,
    renew_at: Instant,
}

#[derive(Debug, Default)]
struct Entry {
    token: RwLock<Option<CachedToken>>,
    /// Held while fetching: the single flight.
    refresh: tokio::sync::Mutex<()>,
}

impl Entry {
    fn valid_header(&self) -> Option<HeaderValue> {
        let guard = self.token.read().ok()?;
        let cached = guard.as_ref()?;
        (Instant::now() < cached.renew_at).then(|| cached.header.clone())
    }

    fn clear(&self) {
        if let Ok(mut guard) = self.token.write() {
            *guard = None;
        }
    }
}

/// Credentials and tokens for one registry.
#[derive(Debug)]
pub struct RegistryAuth {
    credentials: Credentials,
    basic: Option<HeaderValue>,
    fetcher: TokenFetcher,
    scheme: RwLock<Scheme>,
    /// Scopes a registry asked for beyond the ones derived from an operation.
    learned: RwLock<HashMap<AccessScope, ScopeSet>>,
    tokens: RwLock<HashMap<String, Arc<Entry>>>,
    /// The registry's `host:port`, to tell a token realm on another host.
    registry_host: Option<String>,
    /// Whether the warning about a plain-HTTP realm on another host was given.
    warned_plain_realm: std::sync::atomic::AtomicBool,
}

impl RegistryAuth {
    /// The same authenticator, told which registry it authenticates for (`url`): a token
    /// realm elsewhere over plain HTTP, which would receive the password in the clear, is
    /// then warned about.
    pub fn for_registry(mut self, url: &Url) -> Self {
        self.registry_host = Some(host_port(url));
        self
    }

    /// Warns once when credentials are about to go in the clear to a realm on another host.
    fn check_realm(&self, realm: &Url) {
        use std::sync::atomic::Ordering;
        let elsewhere = self
            .registry_host
            .as_deref()
            .is_some_and(|host| host != host_port(realm));
        if realm.scheme() == "http"
            && elsewhere
            && !matches!(self.credentials, Credentials::Anonymous)
            && !self.warned_plain_realm.swap(true, Ordering::Relaxed)
        {
            eprintln!(
                "creb-rs: warning: the registry sends for tokens to {} over plain HTTP, on \
                 another host: the credentials travel there unencrypted",
                host_port(realm)
            );
        }
    }

    /// What it authenticates with (a replica without credentials of its own takes the
    /// primary's, `--replica`).
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    pub fn new(
        credentials: Credentials,
        transport: Arc<dyn Transport>,
        recorder: Recorder,
    ) -> Self {
        RegistryAuth {
            basic: basic_authorization(&credentials),
            credentials,
            fetcher: TokenFetcher::new(transport, recorder),
            scheme: RwLock::new(Scheme::Unknown),
            registry_host: None,
            warned_plain_realm: std::sync::atomic::AtomicBool::new(false),
            learned: RwLock::new(HashMap::new()),
            tokens: RwLock::new(HashMap::new()),
        }
    }

    /// Sends later `token_fetch` samples to `recorder` (the tokens themselves are kept).
    pub fn set_recorder(&self, recorder: Recorder) {
        self.fetcher.set_recorder(recorder);
    }

    pub fn has_credentials(&self) -> bool {
        !matches!(self.credentials, Credentials::Anonymous)
    }

    fn scheme(&self) -> Scheme {
        self.scheme
            .read()
            .map(|s| s.clone())
            .unwrap_or(Scheme::Unknown)
    }

    fn scopes_for(&self, access: &AccessScope) -> ScopeSet {
        let mut scopes = ScopeSet::for_access(access);
        if let Ok(learned) = self.learned.read() {
            if let Some(extra) = learned.get(access) {
                scopes.merge(extra);
            }
        }
        scopes
    }

    fn entry(&self, key: &str) -> Arc<Entry> {
        if let Some(e) = self.tokens.read().ok().and_then(|m| m.get(key).cloned()) {
            return e;
        }
        match self.tokens.write() {
            Ok(mut map) => Arc::clone(map.entry(key.to_owned()).or_default()),
            Err(_) => Arc::new(Entry::default()),
        }
    }

    fn cache_key(realm: &Url, service: Option<&str>, scopes: &ScopeSet) -> String {
        format!("{realm}\n{}\n{}", service.unwrap_or(""), scopes.key())
    }

    async fn bearer(
        &self,
        realm: &Url,
        service: Option<&str>,
        access: &AccessScope,
    ) -> Result<HeaderValue, AuthError> {
        let scopes = self.scopes_for(access);
        let entry = self.entry(&Self::cache_key(realm, service, &scopes));
        if let Some(h) = entry.valid_header() {
            return Ok(h);
        }
        let _flight = entry.refresh.lock().await;
        if let Some(h) = entry.valid_header() {
            return Ok(h);
        }
        let token = self
            .fetcher
            .fetch(realm, service, &scopes, &self.credentials)
            .await?;
        let mut header = HeaderValue::from_str(&format!("Bearer {}", token.value.expose()))
            .map_err(|_| AuthError::TokenServer {
                realm: crate::oci::redacted(realm),
                reason: "token is not a valid header value".into(),
            })?;
        header.set_sensitive(true);
        if let Ok(mut guard) = entry.token.write() {
            *guard = Some(CachedToken {
                header: header.clone(),
                renew_at: token.renew_at,
            });
        }
        Ok(header)
    }
}

impl Authenticator for RegistryAuth {
    fn token_service(&self) -> Option<String> {
        match &*self.scheme.read().ok()? {
            Scheme::Bearer { realm, .. } => Some(format!(
                "{}://{}{}",
                realm.scheme(),
                host_port(realm),
                realm.path()
            )),
            _ => None,
        }
    }

    fn ready(&self, _scope: &AccessScope) -> Ready {
        let Ok(scheme) = self.scheme.read() else {
            return Ready::Later;
        };
        match (&*scheme, &self.basic) {
            (Scheme::Unknown, _) | (Scheme::Basic, None) => Ready::Nothing,
            (Scheme::Basic, Some(h)) => Ready::Header(h.clone()),
            (Scheme::Bearer { .. }, _) => Ready::Later,
        }
    }

    fn authorize<'a>(
        &'a self,
        request: &'a mut HttpRequest,
        scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<(), AuthError>> {
        Box::pin(async move {
            match self.scheme() {
                Scheme::Unknown => {}
                Scheme::Basic => {
                    if let Some(h) = &self.basic {
                        request.headers.insert(AUTHORIZATION, h.clone());
                    }
                }
                Scheme::Bearer { realm, service } => {
                    let header = self.bearer(&realm, service.as_deref(), scope).await?;
                    request.headers.insert(AUTHORIZATION, header);
                }
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_lines)]
    fn challenged<'a>(
        &'a self,
        headers: &'a Headers,
        scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<bool, AuthError>> {
        Box::pin(async move {
            let challenges = challenges_of(headers);
            if let Some(bearer) = challenges.iter().find(|c| c.scheme == "bearer") {
                let realm_text = bearer
                    .param("realm")
                    .ok_or_else(|| AuthError::Challenge("Bearer challenge without realm".into()))?;
                let realm: Url = realm_text
                    .parse()
                    .ok()
                    .filter(|u: &Url| matches!(u.scheme(), "http" | "https"))
                    .ok_or_else(|| {
                        AuthError::Challenge(format!(
                            "realm '{}' is not an http(s) URL",
                            crate::oci::redact_userinfo(realm_text)
                        ))
                    })?;
                self.check_realm(&realm);
                let next = Scheme::Bearer {
                    realm: realm.clone(),
                    service: bearer.param("service").map(str::to_owned),
                };
                let changed = self.scheme() != next;
                if changed {
                    if let Ok(mut s) = self.scheme.write() {
                        *s = next;
                    }
                }
                let derived = self.scopes_for(scope);
                if let Some(asked) = bearer.param("scope") {
                    let mut wanted = ScopeSet::default();
                    wanted.add_str(asked);
                    if !derived.contains(&wanted) {
                        if let Ok(mut learned) = self.learned.write() {
                            learned.entry(scope.clone()).or_default().merge(&wanted);
                        }
                        return Ok(true);
                    }
                }
                if bearer.param("error") == Some("insufficient_scope") && !changed {
                    return Ok(false);
                }
                // Missing, expired or rejected token: drop it; the retry fetches a new one.
                let service = bearer.param("service");
                self.entry(&Self::cache_key(&realm, service, &derived))
                    .clear();
                return Ok(true);
            }
            if challenges.iter().any(|c| c.scheme == "basic") {
                let was = self.scheme();
                if let Ok(mut s) = self.scheme.write() {
                    *s = Scheme::Basic;
                }
                // Retry only if credentials exist and were not sent yet.
                return Ok(self.basic.is_some() && was != Scheme::Basic);
            }
            let offered = headers
                .get_all(http::header::WWW_AUTHENTICATE.as_str())
                .count();
            if let Some(other) = challenges.first() {
                return Err(AuthError::Challenge(format!(
                    "the registry asks for {} authentication, which creb-rs does not speak \
                     (Bearer and Basic)",
                    other.scheme
                )));
            }
            if offered > 0 {
                // No credentials went out: say so, rather than that they were refused.
                return Err(AuthError::Challenge(format!(
                    "{offered} WWW-Authenticate header{} that could not be parsed; no \
                     credentials were sent",
                    if offered == 1 { "" } else { "s" }
                )));
            }
            Ok(false)
        })
    }
}

/// `host:port` of a URL (the port the scheme implies when none is given).
fn host_port(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    //! The authenticator against a scripted token server: timing and concurrency cases
    //! (single flight, renewal on a paused clock) that a real issuer cannot make
    //! deterministic. Real token auth is tested against docker-registry in `tests/`.

    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::auth::secret::Secret;
    use crate::metrics::AggregatorBuilder;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};

    fn challenge(extra: &str) -> Headers {
        let mut h = http::HeaderMap::new();
        let value = format!(r#"Bearer realm="http://auth.test/token",service="reg"{extra}"#);
        h.insert(http::header::WWW_AUTHENTICATE, value.parse().unwrap());
        h.into()
    }

    fn issuer(fetches: Arc<AtomicU32>, expires_in: u64, delay: Duration) -> ScriptedTransport {
        ScriptedTransport::new(move |r| {
            let n = fetches.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(r.url.host_str(), Some("auth.test"));
            ScriptedResponse::status(200)
                .body(format!(r#"{{"token":"t{n}","expires_in":{expires_in}}}"#))
                .delay(delay)
        })
    }

    fn auth_with(
        transport: ScriptedTransport,
        creds: Credentials,
    ) -> (Arc<RegistryAuth>, crate::metrics::AggregatorHandle) {
        let (recorder, handle) = AggregatorBuilder::default().spawn();
        (
            Arc::new(RegistryAuth::new(creds, Arc::new(transport), recorder)),
            handle,
        )
    }

    fn push_scope() -> AccessScope {
        AccessScope::push(&"x/y".parse().unwrap())
    }

    /// What `authorize` attaches; where `ready` answers at once (the client's fast path),
    /// it must answer the same.
    async fn header_after_authorize(auth: &RegistryAuth, scope: &AccessScope) -> Option<String> {
        let ready = match auth.ready(scope) {
            Ready::Nothing => Some(None),
            Ready::Header(h) => Some(Some(h.to_str().unwrap().to_owned())),
            Ready::Later => None,
        };
        let url: Url = "http://reg.test/v2/".parse().unwrap();
        let mut req = HttpRequest::new(http::Method::GET, url);
        auth.authorize(&mut req, scope).await.unwrap();
        let attached = req
            .headers
            .get(AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_owned());
        if let Some(ready) = ready {
            assert_eq!(ready, attached, "ready and authorize disagree");
        }
        attached
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_token_fetch() {
        let fetches = Arc::new(AtomicU32::new(0));
        let (auth, handle) = auth_with(
            issuer(Arc::clone(&fetches), 300, Duration::from_millis(50)),
            Credentials::Anonymous,
        );
        assert!(auth
            .challenged(&challenge(""), &push_scope())
            .await
            .unwrap());
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let auth = Arc::clone(&auth);
                tokio::spawn(async move { header_after_authorize(&auth, &push_scope()).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().as_deref(), Some("Bearer t1"));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Another scope set is another token.
        let pull = AccessScope::pull(&"x/y".parse().unwrap());
        assert_eq!(
            header_after_authorize(&auth, &pull).await.as_deref(),
            Some("Bearer t2")
        );
        drop(auth);
        let agg = handle.finish().await;
        assert_eq!(
            agg.table()
                .op_total(crate::metrics::Op::TokenFetch)
                .unwrap()
                .ok,
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_renewed_before_they_expire() {
        let fetches = Arc::new(AtomicU32::new(0));
        let (auth, _h) = auth_with(
            issuer(Arc::clone(&fetches), 120, Duration::ZERO),
            Credentials::Anonymous,
        );
        auth.challenged(&challenge(""), &push_scope())
            .await
            .unwrap();
        assert_eq!(
            header_after_authorize(&auth, &push_scope())
                .await
                .as_deref(),
            Some("Bearer t1")
        );
        tokio::time::advance(Duration::from_secs(99)).await;
        assert_eq!(
            header_after_authorize(&auth, &push_scope())
                .await
                .as_deref(),
            Some("Bearer t1")
        );
        // 120 s lifetime, renewed 20 s early.
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            header_after_authorize(&auth, &push_scope())
                .await
                .as_deref(),
            Some("Bearer t2")
        );
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_rejected_token_is_dropped_but_insufficient_scope_stands() {
        let fetches = Arc::new(AtomicU32::new(0));
        let (auth, _h) = auth_with(
            issuer(Arc::clone(&fetches), 300, Duration::ZERO),
            Credentials::Anonymous,
        );
        let scope = push_scope();
        auth.challenged(&challenge(""), &scope).await.unwrap();
        assert_eq!(
            header_after_authorize(&auth, &scope).await.as_deref(),
            Some("Bearer t1")
        );
        // Expired or invalid: retry with a fresh token.
        assert!(auth
            .challenged(&challenge(r#",error="invalid_token""#), &scope)
            .await
            .unwrap());
        assert_eq!(
            header_after_authorize(&auth, &scope).await.as_deref(),
            Some("Bearer t2")
        );
        // The grant itself is too small: asking again gives the same answer.
        let insufficient =
            challenge(r#",scope="repository:x/y:pull,push",error="insufficient_scope""#);
        assert!(!auth.challenged(&insufficient, &scope).await.unwrap());
    }

    #[tokio::test]
    async fn scopes_the_registry_asks_for_are_added() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen_in = Arc::clone(&seen);
        let transport = ScriptedTransport::new(move |r| {
            let scopes: Vec<String> = r
                .url
                .query_pairs()
                .filter(|(k, _)| k == "scope")
                .map(|(_, v)| v.into_owned())
                .collect();
            seen_in.lock().unwrap().push(scopes);
            ScriptedResponse::status(200).body(r#"{"token":"t"}"#)
        });
        let (auth, _h) = auth_with(transport, Credentials::Anonymous);
        let scope = AccessScope::pull(&"x/y".parse().unwrap());
        assert!(auth
            .challenged(&challenge(r#",scope="registry:catalog:*""#), &scope)
            .await
            .unwrap());
        header_after_authorize(&auth, &scope).await;
        assert_eq!(
            seen.lock().unwrap()[0],
            ["registry:catalog:*", "repository:x/y:pull"]
        );
    }

    #[tokio::test]
    async fn basic_credentials_are_sent_once_the_registry_asks_and_a_second_401_stands() {
        let transport = ScriptedTransport::new(|_| ScriptedResponse::status(500));
        let creds = Credentials::Basic {
            username: "alice".into(),
            password: Secret::new("pw"),
        };
        let (auth, _h) = auth_with(transport, creds);
        let scope = push_scope();
        assert_eq!(
            header_after_authorize(&auth, &scope).await,
            None,
            "nothing before the challenge"
        );
        let mut basic = http::HeaderMap::new();
        basic.insert(
            http::header::WWW_AUTHENTICATE,
            r#"Basic realm="r""#.parse().unwrap(),
        );
        let basic = Headers::from(basic);
        assert!(auth.challenged(&basic, &scope).await.unwrap());
        assert_eq!(
            header_after_authorize(&auth, &scope).await.as_deref(),
            Some("Basic YWxpY2U6cHc=")
        );
        assert!(
            !auth.challenged(&basic, &scope).await.unwrap(),
            "wrong password: no loop"
        );
        let (anonymous, _h) = auth_with(
            ScriptedTransport::new(|_| ScriptedResponse::status(500)),
            Credentials::Anonymous,
        );
        assert!(!anonymous.challenged(&basic, &scope).await.unwrap());
    }

    #[tokio::test]
    async fn token_server_refusal_names_the_server() {
        let transport = ScriptedTransport::new(|_| {
            ScriptedResponse::status(401).body(r#"{"details":"invalid credentials"}"#)
        });
        let creds = Credentials::Basic {
            username: "alice".into(),
            password: Secret::new("wrong-pw"),
        };
        let (auth, _h) = auth_with(transport, creds);
        auth.challenged(&challenge(""), &push_scope())
            .await
            .unwrap();
        let url: Url = "http://reg.test/v2/".parse().unwrap();
        let mut req = HttpRequest::new(http::Method::GET, url);
        let err = auth.authorize(&mut req, &push_scope()).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("token server http://auth.test/token"),
            "{text}"
        );
        assert!(text.contains("invalid credentials"), "{text}");
        assert!(!text.contains("wrong-pw"));
        assert!(
            !format!("{auth:?}").contains("wrong-pw"),
            "Debug redacts secrets"
        );
    }
}
