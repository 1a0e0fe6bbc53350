//! Docker's `config.json` and the docker-credential helper protocol.
//!
//! Lookup for a registry host, as the docker CLI does it: `credHelpers[host]` runs
//! `docker-credential-<helper> get` (server on stdin, `{ServerURL, Username, Secret}` JSON on
//! stdout; `Username == "<token>"` means Secret is an identity token); then
//! `auths[host].identitytoken`; then `auths[host].auth` (base64 `user:pass`) or its
//! `username`/`password`; then `credsStore`. Keys match by host: `https://host/v1/`,
//! `http://host` and `host` name the same registry; Docker Hub is `https://index.docker.io/v1/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use super::command::run_command;
use super::secret::{CredentialError, Credentials, Secret};

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
    #[serde(rename = "credHelpers", default)]
    cred_helpers: HashMap<String, String>,
    #[serde(rename = "credsStore", default)]
    creds_store: Option<String>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperOutput {
    #[serde(default)]
    username: String,
    #[serde(default)]
    secret: String,
}

/// Credentials found in the docker config, with where they came from.
#[derive(Debug, Clone)]
pub struct DockerCredential {
    pub credentials: Credentials,
    /// `docker-config:auth`, `docker-config:identitytoken`, `helper:<name>`.
    pub source: String,
}

const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

fn is_docker_hub(host: &str) -> bool {
    matches!(
        host,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    )
}

/// `https://host:port/v1/` → `host:port`, lowercased.
pub fn normalize_key(key: &str) -> String {
    let k = key.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let host = k.split('/').next().unwrap_or_default().to_ascii_lowercase();
    if is_docker_hub(&host) {
        "index.docker.io".into()
    } else {
        host
    }
}

/// The config directory: the flag, else `$DOCKER_CONFIG`, else `~/.docker`.
pub fn config_dir(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = flag {
        return Some(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker"))
}

fn find<'a, T>(map: &'a HashMap<String, T>, host: &str) -> Option<&'a T> {
    let wanted = normalize_key(host);
    map.iter()
        .find(|(k, _)| normalize_key(k) == wanted)
        .map(|(_, v)| v)
}

fn decode_auth(auth: &str) -> Result<(String, String), String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| "an 'auth' entry is not valid base64".to_owned())?;
    let text = String::from_utf8(bytes).map_err(|_| "an 'auth' entry is not UTF-8".to_owned())?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| "an 'auth' entry is not 'user:password'".to_owned())?;
    Ok((user.to_owned(), pass.to_owned()))
}

/// Asks `docker-credential-<helper>` for `server`'s credentials; `None` when it has none.
pub async fn ask_helper(
    helper: &str,
    server: &str,
    timeout: Duration,
) -> Result<Option<Credentials>, CredentialError> {
    let program = format!("docker-credential-{helper}");
    let err = |reason: String| CredentialError::Helper {
        helper: helper.to_owned(),
        reason,
    };
    let (ok, stdout) = run_command(&program, &["get"], Some(server), timeout)
        .await
        .map_err(err)?;
    if !ok {
        // The protocol's "no credentials" answer; anything else is a failure.
        if stdout
            .to_ascii_lowercase()
            .contains("credentials not found")
        {
            return Ok(None);
        }
        return Err(err("exited with an error".into()));
    }
    let out: HelperOutput =
        serde_json::from_str(&stdout).map_err(|_| err("did not print the expected JSON".into()))?;
    if out.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if out.username == "<token>" {
        Credentials::IdentityToken {
            username: None,
            token: Secret::new(out.secret),
        }
    } else {
        Credentials::Basic {
            username: out.username,
            password: Secret::new(out.secret),
        }
    }))
}

/// The credentials an `auths` entry of `path` holds: an identity token, or a user name
/// and password (`auth`, base64, or the two fields).
fn from_entry(entry: &AuthEntry, path: &Path) -> Result<Option<DockerCredential>, CredentialError> {
    if let Some(token) = entry.identitytoken.as_ref().filter(|t| !t.is_empty()) {
        let username = match &entry.auth {
            Some(a) => decode_auth(a).ok().map(|(u, _)| u),
            None => entry.username.clone(),
        };
        return Ok(Some(DockerCredential {
            credentials: Credentials::IdentityToken {
                username,
                token: Secret::new(token.clone()),
            },
            source: "docker-config:identitytoken".into(),
        }));
    }
    let pair = match (&entry.auth, &entry.username, &entry.password) {
        (Some(a), _, _) if !a.is_empty() => Some(
            decode_auth(a)
                .map_err(|e| CredentialError::DockerConfig(format!("{}: {e}", path.display())))?,
        ),
        (_, Some(u), Some(p)) => Some((u.clone(), p.clone())),
        _ => None,
    };
    if let Some((username, password)) = pair {
        return Ok(Some(DockerCredential {
            credentials: Credentials::Basic {
                username,
                password: Secret::new(password),
            },
            source: "docker-config:auth".into(),
        }));
    }
    Ok(None)
}

/// Looks `host` up in the docker config under `dir` (see the module doc for the order).
pub async fn lookup(
    dir: Option<&Path>,
    host: &str,
    timeout: Duration,
) -> Result<Option<DockerCredential>, CredentialError> {
    let Some(dir) = config_dir(dir) else {
        return Ok(None);
    };
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CredentialError::DockerConfig(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let config: ConfigFile = serde_json::from_str(&text).map_err(|e| {
        CredentialError::DockerConfig(format!("{} is not valid: {e}", path.display()))
    })?;
    warn_if_world_readable(&path);
    let server = if is_docker_hub(&normalize_key(host)) {
        DOCKER_HUB_KEY.to_owned()
    } else {
        host.to_owned()
    };
    if let Some(helper) = find(&config.cred_helpers, host) {
        let creds = ask_helper(helper, &server, timeout).await?;
        return Ok(creds.map(|credentials| DockerCredential {
            credentials,
            source: format!("helper:{helper}"),
        }));
    }
    if let Some(entry) = find(&config.auths, host) {
        if let Some(found) = from_entry(entry, &path)? {
            return Ok(Some(found));
        }
    }
    if let Some(store) = config.creds_store.as_ref().filter(|s| !s.is_empty()) {
        let creds = ask_helper(store, &server, timeout).await?;
        return Ok(creds.map(|credentials| DockerCredential {
            credentials,
            source: format!("helper:{store}"),
        }));
    }
    Ok(None)
}

/// A config file holding secrets that anyone on the machine can read deserves a warning.
fn warn_if_world_readable(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o004 != 0 {
                tracing::warn!(
                    "{} is readable by every user on this machine; it may hold registry secrets (chmod 600 it)",
                    path.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_hosts() {
        assert_eq!(
            normalize_key("https://Reg.Example:5000/v1/"),
            "reg.example:5000"
        );
        assert_eq!(normalize_key("reg.example"), "reg.example");
        assert_eq!(
            normalize_key("https://index.docker.io/v1/"),
            "index.docker.io"
        );
        assert_eq!(normalize_key("registry-1.docker.io"), "index.docker.io");
    }

    async fn lookup_in(
        config: &str,
        host: &str,
    ) -> Result<Option<DockerCredential>, CredentialError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        lookup(Some(dir.path()), host, Duration::from_secs(5)).await
    }

    #[tokio::test]
    async fn auth_entries_and_identity_tokens() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:pw:with:colons");
        let config = format!(
            r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{auth}"}},
                           "tok.example":{{"auth":"{auth}","identitytoken":"refresh-1"}}}}}}"#
        );
        let found = lookup_in(&config, "reg.example:5000")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.source, "docker-config:auth");
        assert_eq!(
            found.credentials,
            Credentials::Basic {
                username: "alice".into(),
                password: Secret::new("pw:with:colons")
            }
        );
        let found = lookup_in(&config, "tok.example").await.unwrap().unwrap();
        assert_eq!(
            found.credentials,
            Credentials::IdentityToken {
                username: Some("alice".into()),
                token: Secret::new("refresh-1")
            }
        );
        assert!(lookup_in(&config, "other.example").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn broken_config_is_an_error_naming_the_file() {
        let err = lookup_in("{not json", "x").await.unwrap_err();
        assert!(err.to_string().contains("config.json"), "{err}");
        let err = lookup_in(r#"{"auths":{"x":{"auth":"%%%"}}}"#, "x")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("base64"), "{err}");
    }

    #[tokio::test]
    async fn missing_helper_is_a_clear_error() {
        let err = lookup_in(r#"{"credHelpers":{"x":"creb-rs-no-such-helper"}}"#, "x")
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("docker-credential-creb-rs-no-such-helper"),
            "{err}"
        );
    }
}
