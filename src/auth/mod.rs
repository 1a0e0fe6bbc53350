//! Authentication: what the client asks before each request and after each 401.
//!
//! The client calls [`Authenticator::authorize`] before sending to the registry's origin
//! (never to another host) so that credentials are attached proactively, and
//! [`Authenticator::challenged`] once when the registry still answers 401, to learn the
//! challenge and decide whether one retry can succeed.
//!
//! Parts: `challenge` (RFC 7235 parsing), `scope` (token scopes), `token` (fetching bearer
//! tokens), `registry_auth` (the real authenticator: scheme, token cache, single flight),
//! `credentials` and `docker_config` (where secrets come from), `command` (the programs
//! that give them), `secret` (a string that never prints, and the credentials of them).

pub mod challenge;
mod command;
pub mod credentials;
pub mod docker_config;
pub mod registry_auth;
pub mod scope;
pub mod secret;
pub mod token;

use std::fmt;

use futures_util::future::BoxFuture;
use http::HeaderValue;

use crate::net::headers::Headers;
use crate::net::transport::HttpRequest;
use crate::oci::reference::Repository;

/// The access an operation needs, as the token spec's scopes express it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessScope {
    pub repository: Option<Repository>,
    pub push: bool,
    /// DELETE: token servers grant it as its own action (`delete`, or `*`).
    pub delete: bool,
    /// A mount also needs `pull` on its source repository.
    pub mount_from: Option<Repository>,
}

impl AccessScope {
    /// `GET /v2/` and catalog-level calls: no repository scope.
    pub fn registry() -> Self {
        AccessScope {
            repository: None,
            push: false,
            delete: false,
            mount_from: None,
        }
    }

    pub fn pull(repo: &Repository) -> Self {
        AccessScope {
            repository: Some(repo.clone()),
            push: false,
            delete: false,
            mount_from: None,
        }
    }

    /// Pushes ask for `pull,push` up front: a push HEADs before it uploads.
    pub fn push(repo: &Repository) -> Self {
        AccessScope {
            repository: Some(repo.clone()),
            push: true,
            delete: false,
            mount_from: None,
        }
    }

    /// Deletes ask for `delete` on the repository.
    pub fn delete(repo: &Repository) -> Self {
        AccessScope {
            repository: Some(repo.clone()),
            push: false,
            delete: true,
            mount_from: None,
        }
    }

    pub fn mount(repo: &Repository, from: &Repository) -> Self {
        AccessScope {
            repository: Some(repo.clone()),
            push: true,
            delete: false,
            mount_from: Some(from.clone()),
        }
    }
}

/// Why credentials could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The registry or its token server refused the credentials.
    #[error("{origin} refused the credentials: {reason}")]
    Rejected { origin: String, reason: String },
    /// The token server could not be reached or answered nonsense.
    #[error("token server {realm}: {reason}")]
    TokenServer { realm: String, reason: String },
    /// The registry's challenge could not be understood.
    #[error("cannot understand the registry's authentication challenge: {0}")]
    Challenge(String),
}

/// What an authenticator can tell without waiting ([`Authenticator::ready`]).
#[derive(Debug, Clone)]
pub enum Ready {
    /// The request goes out without credentials.
    Nothing,
    /// The request goes out with this `Authorization`.
    Header(HeaderValue),
    /// Only [`Authenticator::authorize`] can tell (a token may have to be fetched).
    Later,
}

/// Adds credentials to requests and learns from challenges.
pub trait Authenticator: Send + Sync + fmt::Debug {
    /// The credentials for `scope` when they are known at once: the client then skips
    /// [`Authenticator::authorize`] and the future it allocates, on every request.
    fn ready(&self, _scope: &AccessScope) -> Ready {
        Ready::Later
    }

    /// Attaches credentials for `scope` to a request for the registry's origin.
    fn authorize<'a>(
        &'a self,
        request: &'a mut HttpRequest,
        scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<(), AuthError>>;

    /// Handles a 401 from the registry for `scope`. Returns `Ok(true)` when retrying the
    /// request (once) may succeed, `Ok(false)` when the 401 should stand.
    fn challenged<'a>(
        &'a self,
        headers: &'a Headers,
        scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<bool, AuthError>>;

    /// The token service the registry sent it to (its realm, scheme, host and path: no
    /// query, no credentials), once a challenge named one; for messages.
    fn token_service(&self) -> Option<String> {
        None
    }
}

/// No credentials: requests go out as they are and a 401 stands.
#[derive(Debug, Clone, Copy, Default)]
pub struct Anonymous;

impl Authenticator for Anonymous {
    fn ready(&self, _scope: &AccessScope) -> Ready {
        Ready::Nothing
    }

    fn authorize<'a>(
        &'a self,
        _request: &'a mut HttpRequest,
        _scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<(), AuthError>> {
        Box::pin(async { Ok(()) })
    }

    fn challenged<'a>(
        &'a self,
        _headers: &'a Headers,
        _scope: &'a AccessScope,
    ) -> BoxFuture<'a, Result<bool, AuthError>> {
        Box::pin(async { Ok(false) })
    }
}
