//! A token authorization server for tests, speaking the Docker registry token spec.
//!
//! [`TokenIssuer`] listens on 127.0.0.1 with a hand-written HTTP/1.1 server on std threads
//! (keep-alive, `Content-Length` and chunked request bodies), and answers `GET /token`
//! (Basic or anonymous, optional `offline_token=true`) and `POST /token` (OAuth2
//! `password` and `refresh_token` grants, form-encoded). Tokens are ES256 JWTs with an `x5c`
//! header holding a self-signed certificate whose PEM is the registry's `rootcertbundle`;
//! [`TokenIssuer::registry_auth`] gives the matching [`RegistryAuth`] for
//! [`super::Registry::start_with`]. Every request to `/token` is recorded as a
//! [`TokenFetch`], so tests can count token fetches. [`write_htpasswd`] writes a bcrypt
//! htpasswd file for [`RegistryAuth::Htpasswd`].

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::RegistryAuth;

/// How long past `exp` (and before `nbf`) distribution still accepts a token (its
/// `token.Leeway`, measured against 2.8.2: refused 60.4 s after `exp`).
pub const DISTRIBUTION_LEEWAY: Duration = Duration::from_secs(60);

/// Largest request head (request line plus headers) or body the issuer accepts.
const MAX_REQUEST_BYTES: u64 = 1 << 20;
/// Most requests served on one keep-alive connection.
const MAX_REQUESTS_PER_CONNECTION: usize = 10_000;
/// How long an idle keep-alive connection is kept open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a [`TokenIssuer`] accepts and grants.
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    /// The service name: the JWT `aud`, and the only `service` parameter accepted (a request
    /// with another `service` gets 400; one without `service` is accepted).
    pub service: String,
    /// The JWT `iss`; the registry must be configured with the same issuer name.
    pub issuer: String,
    /// Users who may authenticate: username -> password.
    pub users: HashMap<String, String>,
    /// Pre-provisioned refresh (identity) tokens: token -> username.
    pub refresh_tokens: HashMap<String, String>,
    /// Actions granted to anonymous requests (intersected with the requested ones).
    pub anonymous_actions: Vec<String>,
    /// Actions granted to authenticated users (intersected with the requested ones).
    pub user_actions: Vec<String>,
    /// JWT lifetime (`exp - iat`, rounded up to whole seconds).
    pub lifetime: Duration,
    /// Shifts the JWT's `iat`, `nbf` and `exp` this far into the past (the response's
    /// `issued_at` and `expires_in` stay as they are). distribution 2.8 accepts a token until
    /// `exp` + 60 s of clock-skew leeway (`token.Leeway`); a backdate of
    /// [`DISTRIBUTION_LEEWAY`] makes the registry refuse it `lifetime` after issue.
    pub backdate: Duration,
    /// Whether responses carry `expires_in`.
    pub report_expires_in: bool,
    /// Whether `POST /token` is served; when false it answers 405 (clients must use GET).
    pub post_supported: bool,
    /// Sleep this long before answering each `/token` request.
    pub delay: Duration,
}

impl Default for IssuerConfig {
    fn default() -> Self {
        IssuerConfig {
            service: "creb-rs-test-registry".into(),
            issuer: "creb-rs-test-issuer".into(),
            users: HashMap::new(),
            refresh_tokens: HashMap::new(),
            anonymous_actions: vec!["pull".into()],
            user_actions: vec!["pull".into(), "push".into()],
            lifetime: Duration::from_secs(300),
            backdate: Duration::ZERO,
            report_expires_in: true,
            post_supported: true,
            delay: Duration::ZERO,
        }
    }
}

/// One request the issuer answered on `/token`.
#[derive(Debug, Clone)]
pub struct TokenFetch {
    /// `GET` or `POST` (or whatever else was sent).
    pub method: String,
    /// The POST form's `grant_type` (`None` for GET).
    pub grant_type: Option<String>,
    /// The user the request spoke for: the Basic or `username` name as presented (also when
    /// the password was wrong), or the owner of a known refresh token; `None` if anonymous.
    pub user: Option<String>,
    /// The requested scopes, one per entry (space-separated lists are split).
    pub scopes: Vec<String>,
    /// The HTTP status of the answer.
    pub status: u16,
    /// The `client_id` parameter, if sent.
    pub client_id: Option<String>,
    /// Whether a refresh token was asked for (`offline_token=true` or `access_type=offline`).
    pub offline: bool,
}

/// State shared by the issuer's threads.
#[derive(Debug)]
struct State {
    config: IssuerConfig,
    key: EcdsaKeyPair,
    /// Standard base64 of the certificate DER, for the `x5c` header.
    cert_b64: String,
    rng: SystemRandom,
    /// Refresh token -> username (pre-provisioned ones plus those issued).
    refresh_tokens: Mutex<HashMap<String, String>>,
    fetches: Mutex<Vec<TokenFetch>>,
}

/// A running token issuer on 127.0.0.1; stops accepting connections when dropped.
#[derive(Debug)]
pub struct TokenIssuer {
    /// The token endpoint, `http://127.0.0.1:PORT/token`.
    pub realm: String,
    /// The service name (JWT `aud`).
    pub service: String,
    /// The issuer name (JWT `iss`).
    pub issuer: String,
    /// The listening address.
    pub addr: SocketAddr,
    root_cert_bundle: PathBuf,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
    _dir: TempDir,
}

impl TokenIssuer {
    /// Generates a P-256 key and self-signed certificate, writes the certificate PEM to a
    /// temporary directory, and starts serving on a free 127.0.0.1 port.
    pub fn start(config: IssuerConfig) -> TokenIssuer {
        let key_pair =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key");
        let cert = rcgen::CertificateParams::new(vec![config.issuer.clone()])
            .expect("certificate params")
            .self_signed(&key_pair)
            .expect("self-signed certificate");
        let dir = TempDir::new().expect("temp dir");
        let root_cert_bundle = dir.path().join("issuer.pem");
        std::fs::write(&root_cert_bundle, cert.pem()).expect("write certificate");
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key_pair.serialize_der(),
            &rng,
        )
        .expect("ring accepts rcgen's PKCS#8");

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State {
            refresh_tokens: Mutex::new(config.refresh_tokens.clone()),
            config: config.clone(),
            key,
            cert_b64: STANDARD.encode(cert.der()),
            rng,
            fetches: Mutex::new(Vec::new()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (state_in, stop_in) = (Arc::clone(&state), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop_in.load(Ordering::SeqCst) {
                    return;
                }
                match stream {
                    Ok(stream) => {
                        let state = Arc::clone(&state_in);
                        std::thread::spawn(move || serve_connection(stream, &state));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        TokenIssuer {
            realm: format!("http://{addr}/token"),
            service: config.service,
            issuer: config.issuer,
            addr,
            root_cert_bundle,
            state,
            stop,
            _dir: dir,
        }
    }

    /// Token auth against this issuer, for [`super::RegistryOptions::auth`].
    pub fn registry_auth(&self) -> RegistryAuth {
        RegistryAuth::Token {
            realm: self.realm.clone(),
            service: self.service.clone(),
            issuer: self.issuer.clone(),
            root_cert_bundle: self.root_cert_bundle.clone(),
        }
    }

    /// The PEM file holding the issuer's certificate (the registry's `rootcertbundle`).
    pub fn root_cert_bundle(&self) -> &Path {
        &self.root_cert_bundle
    }

    /// Every `/token` request answered so far, in the order answered.
    pub fn fetches(&self) -> Vec<TokenFetch> {
        self.state.fetches.lock().unwrap().clone()
    }

    /// Forgets the recorded fetches.
    pub fn clear_fetches(&self) {
        self.state.fetches.lock().unwrap().clear();
    }
}

impl Drop for TokenIssuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Writes `dir/htpasswd` with one `user:$2y$05$...` bcrypt line per user; returns its path.
pub fn write_htpasswd(dir: &Path, users: &[(&str, &str)]) -> PathBuf {
    let mut text = String::new();
    for (user, password) in users {
        let hash = bcrypt::hash_with_result(password, 5).expect("bcrypt");
        text.push_str(&format!(
            "{user}:{}\n",
            hash.format_for_version(bcrypt::Version::TwoY)
        ));
    }
    let path = dir.join("htpasswd");
    std::fs::write(&path, text).expect("write htpasswd");
    path
}

/// One parsed HTTP request.
struct Request {
    method: String,
    target: String,
    /// Lower-cased names.
    headers: HashMap<String, String>,
    body: Vec<u8>,
    /// The client asked to close the connection after this request.
    close: bool,
}

/// One HTTP response to write.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: serde_json::to_vec(body).expect("JSON"),
        }
    }

    fn error(status: u16, details: &str) -> Response {
        Response::json(status, &json!({ "details": details }))
    }

    fn with_header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn to_bytes(&self, close: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            401 => "Unauthorized",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Status",
        };
        let mut head = format!("HTTP/1.1 {} {reason}\r\n", self.status);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        if close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

fn serve_connection(stream: TcpStream, state: &State) {
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    for _ in 0..MAX_REQUESTS_PER_CONNECTION {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        let response = handle(state, &request);
        if writer.write_all(&response.to_bytes(request.close)).is_err() || request.close {
            return;
        }
    }
}

/// Reads one CRLF- (or LF-) terminated line of at most `MAX_REQUEST_BYTES`.
fn read_line(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    let n = reader
        .by_ref()
        .take(MAX_REQUEST_BYTES)
        .read_line(&mut line)
        .ok()?;
    if n == 0 || !line.ends_with('\n') {
        return None;
    }
    Some(line.trim_end_matches(['\r', '\n']).to_owned())
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    // Tolerate a few stray empty lines between requests.
    let mut request_line = String::new();
    for _ in 0..4 {
        request_line = read_line(reader)?;
        if !request_line.is_empty() {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let version = parts.next().unwrap_or("HTTP/1.0").to_owned();
    let mut headers = HashMap::new();
    let mut head_bytes = request_line.len();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            break;
        }
        head_bytes += line.len();
        if head_bytes as u64 > MAX_REQUEST_BYTES {
            return None;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        read_chunked(reader)?
    } else {
        let length: u64 = match headers.get("content-length") {
            Some(v) => v.parse().ok()?,
            None => 0,
        };
        if length > MAX_REQUEST_BYTES {
            return None;
        }
        let mut body = vec![0; length as usize];
        reader.read_exact(&mut body).ok()?;
        body
    };
    let connection = headers
        .get("connection")
        .map(|v| v.to_ascii_lowercase())
        .unwrap_or_default();
    let close = connection.contains("close")
        || (version == "HTTP/1.0" && !connection.contains("keep-alive"));
    Some(Request {
        method,
        target,
        headers,
        body,
        close,
    })
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size_line = read_line(reader)?;
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = u64::from_str_radix(size_hex, 16).ok()?;
        if body.len() as u64 + size > MAX_REQUEST_BYTES {
            return None;
        }
        if size == 0 {
            // Trailers, up to the empty line.
            for _ in 0..64 {
                if read_line(reader)?.is_empty() {
                    return Some(body);
                }
            }
            return None;
        }
        let start = body.len();
        body.resize(start + size as usize, 0);
        reader.read_exact(&mut body[start..]).ok()?;
        if !read_line(reader)?.is_empty() {
            return None;
        }
    }
}

/// Decodes `application/x-www-form-urlencoded` (also used for query strings).
fn parse_urlencoded(text: &str) -> Vec<(String, String)> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ASCII");
                out.push(u8::from_str_radix(hex, 16).expect("hex digits"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first value of parameter `name`.
fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// All `scope` values, each split at spaces.
fn requested_scopes(params: &[(String, String)]) -> Vec<String> {
    params
        .iter()
        .filter(|(n, _)| n == "scope")
        .flat_map(|(_, v)| v.split_whitespace().map(str::to_owned))
        .collect()
}

/// Splits `type:name:actions` (first colon for the type, last colon for the actions).
fn parse_scope(scope: &str) -> Option<(&str, &str, Vec<&str>)> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    if kind.is_empty() || name.is_empty() {
        return None;
    }
    Some((
        kind,
        name,
        actions.split(',').filter(|a| !a.is_empty()).collect(),
    ))
}

/// `(user, password)` from an `Authorization: Basic ...` value.
fn parse_basic(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn handle(state: &State, request: &Request) -> Response {
    let (path, query) = request
        .target
        .split_once('?')
        .unwrap_or((&request.target, ""));
    if path != "/token" {
        return Response::error(404, "not found");
    }
    if !state.config.delay.is_zero() {
        std::thread::sleep(state.config.delay);
    }
    let mut fetch = TokenFetch {
        method: request.method.clone(),
        grant_type: None,
        user: None,
        scopes: Vec::new(),
        status: 0,
        client_id: None,
        offline: false,
    };
    let response = match request.method.as_str() {
        "GET" => handle_get(state, request, query, &mut fetch),
        "POST" if state.config.post_supported => handle_post(state, request, &mut fetch),
        _ => Response::error(405, "method not allowed").with_header(
            "Allow",
            if state.config.post_supported {
                "GET, POST"
            } else {
                "GET"
            },
        ),
    };
    fetch.status = response.status;
    state.fetches.lock().unwrap().push(fetch);
    response
}

fn check_service(state: &State, params: &[(String, String)]) -> Result<(), Response> {
    match param(params, "service") {
        Some(service) if service != state.config.service => {
            Err(Response::error(400, "unknown service"))
        }
        _ => Ok(()),
    }
}

fn unauthorized() -> Response {
    Response::error(401, "invalid credentials")
        .with_header("WWW-Authenticate", "Basic realm=\"creb-rs-test-issuer\"")
}

fn handle_get(state: &State, request: &Request, query: &str, fetch: &mut TokenFetch) -> Response {
    let params = parse_urlencoded(query);
    fetch.scopes = requested_scopes(&params);
    fetch.client_id = param(&params, "client_id").map(str::to_owned);
    fetch.offline = param(&params, "offline_token") == Some("true");
    if let Err(response) = check_service(state, &params) {
        return response;
    }
    let user = match request.headers.get("authorization") {
        None => None,
        Some(value) => {
            let Some((user, password)) = parse_basic(value) else {
                return unauthorized();
            };
            fetch.user = Some(user.clone());
            if state.config.users.get(&user) != Some(&password) {
                return unauthorized();
            }
            Some(user)
        }
    };
    let offline = fetch.offline && user.is_some();
    issue(state, user.as_deref(), &fetch.scopes, offline, false)
}

fn handle_post(state: &State, request: &Request, fetch: &mut TokenFetch) -> Response {
    let params = parse_urlencoded(&String::from_utf8_lossy(&request.body));
    fetch.grant_type = param(&params, "grant_type").map(str::to_owned);
    fetch.scopes = requested_scopes(&params);
    fetch.client_id = param(&params, "client_id").map(str::to_owned);
    fetch.offline = param(&params, "access_type") == Some("offline")
        || param(&params, "offline_token") == Some("true");
    let form = request
        .headers
        .get("content-type")
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return Response::error(400, "expected application/x-www-form-urlencoded");
    }
    if fetch.client_id.as_deref().unwrap_or_default().is_empty() {
        return Response::error(400, "missing client_id");
    }
    if let Err(response) = check_service(state, &params) {
        return response;
    }
    let user = match fetch.grant_type.as_deref() {
        Some("refresh_token") => {
            let token = param(&params, "refresh_token").unwrap_or_default();
            let owner = state.refresh_tokens.lock().unwrap().get(token).cloned();
            match owner {
                Some(owner) => owner,
                None => return unauthorized(),
            }
        }
        Some("password") => {
            let user = param(&params, "username").unwrap_or_default().to_owned();
            let password = param(&params, "password").unwrap_or_default();
            fetch.user = Some(user.clone());
            if state.config.users.get(&user).map(String::as_str) != Some(password) {
                return unauthorized();
            }
            user
        }
        _ => {
            return Response::json(
                400,
                &json!({ "error": "unsupported_grant_type", "details": "unsupported grant_type" }),
            )
        }
    };
    fetch.user = Some(user.clone());
    let offline = fetch.offline && fetch.grant_type.as_deref() == Some("password");
    issue(state, Some(&user), &fetch.scopes, offline, true)
}

fn random_hex(rng: &SystemRandom) -> String {
    let mut bytes = [0u8; 16];
    rng.fill(&mut bytes).expect("random bytes");
    hex::encode(bytes)
}

/// Signs a token for `user` (`None` = anonymous) granting what it may of `scopes`.
fn issue(
    state: &State,
    user: Option<&str>,
    scopes: &[String],
    offline: bool,
    oauth: bool,
) -> Response {
    let allowed = match user {
        Some(_) => &state.config.user_actions,
        None => &state.config.anonymous_actions,
    };
    let mut access = Vec::new();
    for scope in scopes {
        let Some((kind, name, actions)) = parse_scope(scope) else {
            return Response::error(400, &format!("invalid scope {scope:?}"));
        };
        let mut granted: Vec<&str> = Vec::new();
        for action in actions {
            if allowed.iter().any(|a| a == action) && !granted.contains(&action) {
                granted.push(action);
            }
        }
        access.push(json!({ "type": kind, "name": name, "actions": granted }));
    }

    let now = SystemTime::now();
    let iat = now
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .saturating_sub(state.config.backdate)
        .as_secs();
    let lifetime = &state.config.lifetime;
    let lifetime_secs = lifetime.as_secs() + u64::from(lifetime.subsec_nanos() > 0);
    let header = json!({ "typ": "JWT", "alg": "ES256", "x5c": [state.cert_b64] });
    let claims = json!({
        "iss": state.config.issuer,
        "sub": user.unwrap_or_default(),
        "aud": state.config.service,
        "exp": iat + lifetime_secs,
        "nbf": iat.saturating_sub(5),
        "iat": iat,
        "jti": random_hex(&state.rng),
        "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = state
        .key
        .sign(&state.rng, signing_input.as_bytes())
        .expect("ES256 signature");
    let jwt = format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    );

    let mut body = json!({
        "token": jwt,
        "access_token": jwt,
        "issued_at": humantime::format_rfc3339_seconds(now).to_string(),
    });
    if state.config.report_expires_in {
        body["expires_in"] = json!(lifetime_secs);
    }
    if oauth {
        body["scope"] = json!(scopes.join(" "));
    }
    if let (true, Some(user)) = (offline, user) {
        let refresh = random_hex(&state.rng);
        state
            .refresh_tokens
            .lock()
            .unwrap()
            .insert(refresh.clone(), user.to_owned());
        body["refresh_token"] = json!(refresh);
    }
    Response::json(200, &body)
}
