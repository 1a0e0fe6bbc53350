//! Fetching bearer tokens (Docker token spec and its OAuth2 variant).
//!
//! - Username/password or anonymous: `GET realm?service=S&scope=A&scope=B`, with Basic
//!   credentials when there are some.
//! - Identity (refresh) token: `POST realm` with an OAuth2 form (`grant_type=refresh_token`,
//!   `client_id`, scopes space-joined), falling back to the GET on 400/401/404/405.
//! - The answer's `token` or `access_token`; `expires_in` defaults to 60 s and is raised to
//!   60 s when lower (the spec's minimum); expiry counts from `issued_at` when it is sane,
//!   else from receipt; tokens are renewed before they expire.
//!
//! Every request to the token server is recorded as a `token_fetch` sample: with many hosts
//! the token server is part of the system under test.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use serde::Deserialize;
use tokio::time::Instant;
use url::Url;

use super::credentials::Credentials;
use super::scope::ScopeSet;
use super::secret::Secret;
use super::AuthError;
use crate::metrics::{HttpStatuses, Op, Outcome, Recorder, Sample, SizeClass, Timing};
use crate::net::transport::{HttpRequest, RequestBody, Transport};
use crate::oci::error::parse_error_body;

/// `client_id` sent in OAuth2 requests.
pub const CLIENT_ID: &str = "creb-rs";
/// Lifetime assumed when the server names none, and the least one accepted.
pub const MIN_LIFETIME: Duration = Duration::from_secs(60);
const BODY_LIMIT: usize = 1024 * 1024;

/// A bearer token and when to stop using it.
#[derive(Debug, Clone)]
pub struct Token {
    pub value: Secret,
    pub expires_at: Instant,
    /// Fetch a new one from here on.
    pub renew_at: Instant,
}

#[derive(Deserialize)]
struct TokenBody {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<f64>,
    #[serde(default)]
    issued_at: Option<String>,
}

/// How early a token is renewed: a sixth of its lifetime, at most 30 s.
pub fn renew_margin(lifetime: Duration) -> Duration {
    (lifetime / 6).min(Duration::from_secs(30))
}

/// Parses a token server's answer received at `received` (monotonic) / `now` (wall clock).
pub fn parse_token_response(
    body: &[u8],
    received: Instant,
    now: SystemTime,
) -> Result<Token, String> {
    let parsed: TokenBody =
        serde_json::from_slice(body).map_err(|e| format!("answer is not token JSON: {e}"))?;
    let value = parsed
        .token
        .filter(|t| !t.is_empty())
        .or(parsed.access_token.filter(|t| !t.is_empty()))
        .ok_or("answer has neither 'token' nor 'access_token'")?;
    let lifetime = parsed
        .expires_in
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.min(1e9)))
        .unwrap_or(MIN_LIFETIME)
        .max(MIN_LIFETIME);
    // Time already spent since issue, when `issued_at` is believable (not in the future,
    // not older than the lifetime); otherwise count from receipt.
    let elapsed = parsed
        .issued_at
        .as_deref()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .and_then(|issued| now.duration_since(issued).ok())
        .filter(|e| *e < lifetime)
        .unwrap_or(Duration::ZERO);
    let remaining = lifetime - elapsed;
    let expires_at = received + remaining;
    Ok(Token {
        value: Secret::new(value),
        expires_at,
        renew_at: expires_at
            .checked_sub(renew_margin(lifetime))
            .unwrap_or(received),
    })
}

/// The realm as shown in errors: no query, no credentials.
fn realm_display(realm: &Url) -> String {
    let mut shown = realm.clone();
    shown.set_query(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

fn basic_header(username: &str, password: &str) -> Option<HeaderValue> {
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Basic credentials as a header value, marked sensitive.
pub fn basic_authorization(credentials: &Credentials) -> Option<HeaderValue> {
    match credentials {
        Credentials::Basic { username, password } => basic_header(username, password.expose()),
        _ => None,
    }
}

/// A short reason from a token server's error body.
fn reason_of(status: StatusCode, body: &[u8]) -> String {
    let mut reason = status.to_string();
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        for key in ["details", "error_description", "error", "message"] {
            if let Some(s) = v.get(key).and_then(|d| d.as_str()) {
                reason.push_str(": ");
                reason.extend(s.chars().take(200));
                return reason;
            }
        }
    }
    if let Some(e) = parse_error_body(body).first() {
        reason.push_str(": ");
        if e.code.is_empty() {
            reason.push_str(&e.message);
        } else {
            reason.push_str(&format!("{} {}", e.code, e.message));
        }
    }
    reason
}

/// Fetches tokens and records each attempt as `token_fetch`.
#[derive(Debug)]
pub struct TokenFetcher {
    transport: Arc<dyn Transport>,
    /// Where `token_fetch` samples go; switched between the phases of a replay.
    recorder: std::sync::RwLock<Recorder>,
}

enum Attempt {
    Token(Token),
    Refused(StatusCode, Vec<u8>),
}

impl TokenFetcher {
    pub fn new(transport: Arc<dyn Transport>, recorder: Recorder) -> Self {
        TokenFetcher {
            transport,
            recorder: std::sync::RwLock::new(recorder),
        }
    }

    /// Sends later `token_fetch` samples to `recorder`.
    pub fn set_recorder(&self, recorder: Recorder) {
        if let Ok(mut r) = self.recorder.write() {
            *r = recorder;
        }
    }

    /// Gets a token for `scopes` at `realm` with `credentials`.
    pub async fn fetch(
        &self,
        realm: &Url,
        service: Option<&str>,
        scopes: &ScopeSet,
        credentials: &Credentials,
    ) -> Result<Token, AuthError> {
        if let Credentials::IdentityToken { token, .. } = credentials {
            match self.post_refresh(realm, service, scopes, token).await? {
                Attempt::Token(t) => return Ok(t),
                Attempt::Refused(status, _) if matches!(status.as_u16(), 400 | 401 | 404 | 405) => {
                }
                Attempt::Refused(status, body) => return Err(self.refusal(realm, status, &body)),
            }
        }
        match self.get(realm, service, scopes, credentials).await? {
            Attempt::Token(t) => Ok(t),
            Attempt::Refused(status, body) => Err(self.refusal(realm, status, &body)),
        }
    }

    fn refusal(&self, realm: &Url, status: StatusCode, body: &[u8]) -> AuthError {
        let reason = reason_of(status, body);
        if matches!(status.as_u16(), 401 | 403) {
            AuthError::Rejected {
                origin: format!("token server {}", realm_display(realm)),
                reason,
            }
        } else {
            AuthError::TokenServer {
                realm: realm_display(realm),
                reason,
            }
        }
    }

    async fn get(
        &self,
        realm: &Url,
        service: Option<&str>,
        scopes: &ScopeSet,
        credentials: &Credentials,
    ) -> Result<Attempt, AuthError> {
        let mut url = realm.clone();
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            for scope in scopes.to_strings() {
                q.append_pair("scope", &scope);
            }
        }
        let mut request = HttpRequest::new(Method::GET, url);
        let auth = match credentials {
            Credentials::Anonymous => None,
            Credentials::Basic { .. } => basic_authorization(credentials),
            Credentials::IdentityToken { username, token } => {
                basic_header(username.as_deref().unwrap_or("<token>"), token.expose())
            }
        };
        if let Some(h) = auth {
            request.headers.insert(AUTHORIZATION, h);
        }
        self.send(realm, request).await
    }

    async fn post_refresh(
        &self,
        realm: &Url,
        service: Option<&str>,
        scopes: &ScopeSet,
        refresh: &Secret,
    ) -> Result<Attempt, AuthError> {
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "refresh_token");
            form.append_pair("refresh_token", refresh.expose());
            form.append_pair("client_id", CLIENT_ID);
            if let Some(s) = service {
                form.append_pair("service", s);
            }
            if !scopes.is_empty() {
                form.append_pair("scope", &scopes.key());
            }
            form.finish()
        };
        let mut request = HttpRequest::new(Method::POST, realm.clone());
        request.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        request.body = RequestBody::Bytes(body.into_bytes().into());
        self.send(realm, request).await
    }

    async fn send(&self, realm: &Url, request: HttpRequest) -> Result<Attempt, AuthError> {
        let bytes_sent = request.body.len();
        let mut timing = Timing::start(None);
        let result = self.transport.send(&request).await;
        timing.first_byte = Some(Instant::now());
        let answered = result.as_ref().ok().map(|r| r.status.as_u16());
        let outcome = match result {
            Err(e) => Err(AuthError::TokenServer {
                realm: realm_display(realm),
                reason: e.to_string(),
            }),
            Ok(response) => {
                let status = response.status;
                match response.bytes_limited(BODY_LIMIT).await {
                    Err(e) => Err(AuthError::TokenServer {
                        realm: realm_display(realm),
                        reason: e.to_string(),
                    }),
                    Ok(body) if status == StatusCode::OK => {
                        parse_token_response(&body, Instant::now(), SystemTime::now())
                            .map(|t| (Attempt::Token(t), body.len()))
                            .map_err(|reason| AuthError::TokenServer {
                                realm: realm_display(realm),
                                reason,
                            })
                    }
                    Ok(body) => {
                        let n = body.len();
                        Ok((Attempt::Refused(status, body.to_vec()), n))
                    }
                }
            }
        };
        timing.end = Instant::now();
        let (sample_outcome, received) = match &outcome {
            Ok((Attempt::Token(_), n)) => (Outcome::Ok, *n as u64),
            Ok((Attempt::Refused(status, _), n)) => (
                Outcome::Error(crate::metrics::ErrorKind::Http(status.as_u16())),
                *n as u64,
            ),
            Err(_) => (Outcome::Error(crate::metrics::ErrorKind::Auth), 0),
        };
        let recorder = match self.recorder.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        recorder
            .record(Sample {
                op: Op::TokenFetch,
                outcome: sample_outcome,
                size_class: SizeClass::Under1MiB,
                timing,
                bytes_sent,
                bytes_received: received,
                http: HttpStatuses::one(answered),
            })
            .await;
        outcome.map(|(attempt, _)| attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, issued_ago: Option<u64>) -> Token {
        // Whole seconds, so RFC 3339 seconds round-trip exactly.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let body = match issued_ago {
            Some(ago) => body.replace(
                "ISSUED",
                &humantime::format_rfc3339_seconds(now - Duration::from_secs(ago)).to_string(),
            ),
            None => body.to_owned(),
        };
        parse_token_response(body.as_bytes(), Instant::now(), now).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn lifetimes_default_clamp_and_count_from_issue() {
        let start = Instant::now();
        let t = at(r#"{"token":"a"}"#, None);
        assert_eq!(t.expires_at - start, MIN_LIFETIME);
        assert_eq!(t.renew_at - start, Duration::from_secs(50));
        let t = at(r#"{"access_token":"b","expires_in":5}"#, None);
        assert_eq!(t.expires_at - start, MIN_LIFETIME, "raised to the minimum");
        assert_eq!(t.value.expose(), "b");
        let t = at(
            r#"{"token":"c","expires_in":300,"issued_at":"ISSUED"}"#,
            Some(100),
        );
        assert_eq!(t.expires_at - start, Duration::from_secs(200));
        assert_eq!(t.renew_at - start, Duration::from_secs(170));
        // An issued_at in the future or absurdly old is not believed.
        let t = at(
            r#"{"token":"d","expires_in":300,"issued_at":"2001-01-01T00:00:00Z"}"#,
            None,
        );
        assert_eq!(t.expires_at - start, Duration::from_secs(300));
    }

    #[test]
    fn bad_answers_are_errors() {
        let now = SystemTime::now();
        for body in ["", "{}", r#"{"token":""}"#, "[1]"] {
            assert!(
                parse_token_response(body.as_bytes(), Instant::now(), now).is_err(),
                "{body}"
            );
        }
    }

    #[test]
    fn reasons_are_short_and_readable() {
        assert_eq!(
            reason_of(
                StatusCode::UNAUTHORIZED,
                br#"{"details":"invalid credentials"}"#
            ),
            "401 Unauthorized: invalid credentials"
        );
        assert_eq!(
            reason_of(StatusCode::BAD_GATEWAY, b"<html>oops</html>"),
            "502 Bad Gateway: <html>oops</html>"
        );
    }
}
