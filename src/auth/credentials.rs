//! Where credentials come from, in this order unless one is given explicitly:
//! `--username` with `--password-stdin` or `--password-cmd` (or `CREB_PASSWORD`), then
//! `CREB_USERNAME`/`CREB_PASSWORD`, then the docker config (`credHelpers`, `auths.*.identitytoken`,
//! `auths.*.auth`, `credsStore`), else anonymous. `--anonymous` forces anonymous.
//!
//! External programs (password commands, credential helpers) run once, before the run,
//! with a timeout; their output is never logged.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncReadExt;
use url::Url;

use super::command::{run_command, strip_newline};
use super::docker_config::{self, DockerCredential};
use super::secret::Secret;
pub use super::secret::{CredentialError, Credentials};

/// Where the password comes from when `--username` is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSource {
    Stdin,
    Command(String),
    /// `CREB_PASSWORD`.
    Environment,
}

/// The user's choices, from flags and environment.
#[derive(Debug, Clone, Default)]
pub struct CredentialOptions {
    pub anonymous: bool,
    pub username: Option<String>,
    pub password: Option<PasswordSource>,
    /// `--docker-config DIR`, else `$DOCKER_CONFIG`, else `~/.docker`.
    pub docker_config: Option<PathBuf>,
    /// Limit for password commands and credential helpers.
    pub command_timeout: Duration,
}

/// Where the credentials came from, for the result metadata (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialInfo {
    pub source: String,
    pub username: Option<String>,
}

/// The registry's `host[:port]` as docker config keys name it.
pub fn registry_host(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    }
}

async fn read_stdin() -> Result<String, CredentialError> {
    let mut buf = String::new();
    tokio::io::stdin()
        .read_to_string(&mut buf)
        .await
        .map_err(|e| CredentialError::Stdin(e.to_string()))?;
    let password = strip_newline(buf);
    if password.is_empty() {
        return Err(CredentialError::Stdin("it was empty".into()));
    }
    Ok(password)
}

async fn password_from_command(cmd: &str, timeout: Duration) -> Result<String, CredentialError> {
    let (ok, out) = run_command("sh", &["-c", cmd], None, timeout)
        .await
        .map_err(CredentialError::Command)?;
    if !ok {
        return Err(CredentialError::Command("exited with an error".into()));
    }
    let password = strip_newline(out);
    if password.is_empty() {
        return Err(CredentialError::Command("printed nothing".into()));
    }
    Ok(password)
}

fn from_user_and_secret(username: String, secret: String) -> Credentials {
    if username == "<token>" {
        Credentials::IdentityToken {
            username: None,
            token: Secret::new(secret),
        }
    } else {
        Credentials::Basic {
            username,
            password: Secret::new(secret),
        }
    }
}

/// Resolves the credentials for `registry` once, before a run.
pub async fn resolve(
    options: &CredentialOptions,
    registry: &Url,
) -> Result<(Credentials, CredentialInfo), CredentialError> {
    let info = |source: &str, username: Option<&str>| CredentialInfo {
        source: source.to_owned(),
        username: username.map(str::to_owned),
    };
    if options.anonymous {
        return Ok((Credentials::Anonymous, info("anonymous", None)));
    }
    if let Some(username) = &options.username {
        let (password, source) = match &options.password {
            Some(PasswordSource::Stdin) => (read_stdin().await?, "password-stdin"),
            Some(PasswordSource::Command(cmd)) => (
                password_from_command(cmd, options.command_timeout).await?,
                "password-cmd",
            ),
            Some(PasswordSource::Environment) | None => match std::env::var("CREB_PASSWORD") {
                Ok(p) if !p.is_empty() => (p, "environment"),
                _ => return Err(CredentialError::NoPassword),
            },
        };
        let creds = from_user_and_secret(username.clone(), password);
        return Ok((creds, info(source, Some(username))));
    }
    let host = registry_host(registry);
    match docker_config::lookup(
        options.docker_config.as_deref(),
        &host,
        options.command_timeout,
    )
    .await?
    {
        Some(DockerCredential {
            credentials,
            source,
        }) => {
            let username = match &credentials {
                Credentials::Basic { username, .. } => Some(username.clone()),
                Credentials::IdentityToken { username, .. } => username.clone(),
                Credentials::Anonymous => None,
            };
            Ok((credentials, info(&source, username.as_deref())))
        }
        None => Ok((Credentials::Anonymous, info("anonymous", None))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        s.parse().unwrap()
    }

    #[test]
    fn hosts_as_docker_names_them() {
        assert_eq!(
            registry_host(&url("http://127.0.0.1:5000/")),
            "127.0.0.1:5000"
        );
        assert_eq!(
            registry_host(&url("https://Registry.Example/")),
            "registry.example"
        );
        assert_eq!(
            registry_host(&url("https://registry.example:443/")),
            "registry.example"
        );
    }

    #[tokio::test]
    async fn password_command_output_is_the_password() {
        let opts = CredentialOptions {
            username: Some("AWS".into()),
            password: Some(PasswordSource::Command("printf 'tok\\n'".into())),
            command_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let (creds, info) = resolve(&opts, &url("https://r.example/")).await.unwrap();
        assert_eq!(
            creds,
            Credentials::Basic {
                username: "AWS".into(),
                password: Secret::new("tok")
            }
        );
        assert_eq!(info.source, "password-cmd");
        assert!(!format!("{creds:?}").contains("tok\""));
    }

    #[tokio::test]
    async fn failing_or_slow_commands_are_clear_errors_without_their_output() {
        let mut opts = CredentialOptions {
            username: Some("u".into()),
            password: Some(PasswordSource::Command("echo s3cret; exit 3".into())),
            command_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let err = resolve(&opts, &url("https://r.example/"))
            .await
            .unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        opts.password = Some(PasswordSource::Command("sleep 5".into()));
        opts.command_timeout = Duration::from_millis(200);
        let err = resolve(&opts, &url("https://r.example/"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("did not finish"), "{err}");
    }

    #[tokio::test]
    async fn anonymous_wins_and_token_username_means_identity_token() {
        let opts = CredentialOptions {
            anonymous: true,
            username: Some("u".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&opts, &url("https://r/")).await.unwrap().0,
            Credentials::Anonymous
        );
        assert!(matches!(
            from_user_and_secret("<token>".into(), "rt".into()),
            Credentials::IdentityToken { .. }
        ));
    }
}
