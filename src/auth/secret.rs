//! A string that never prints itself: `Debug` and `Display` show `<redacted>`, and it does
//! not serialise. The only way to the value is [`Secret::expose`], which makes every use
//! greppable. Also the credentials built of secrets, and why they could not be found.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value, for building a request header. Never log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_formats_its_value() {
        let s = Secret::new("hunter2");
        assert_eq!(
            format!("{s} {s:?} {:?}", Some(&s)),
            "<redacted> <redacted> Some(<redacted>)"
        );
        assert_eq!(s.expose(), "hunter2");
    }
}

/// What to authenticate with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Anonymous,
    /// Username and password: Basic auth, or GET at the token server with Basic.
    Basic {
        username: String,
        password: Secret,
    },
    /// An identity (refresh) token, exchanged at the token server with an OAuth2 POST.
    IdentityToken {
        username: Option<String>,
        token: Secret,
    },
}

/// Why credentials could not be found or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("--username needs a password: --password-stdin, --password-cmd CMD, or CREB_PASSWORD")]
    NoPassword,
    #[error("cannot read the password from standard input: {0}")]
    Stdin(String),
    #[error("password command {0}")]
    Command(String),
    #[error("{0}")]
    DockerConfig(String),
    #[error("credential helper docker-credential-{helper}: {reason}")]
    Helper { helper: String, reason: String },
}
