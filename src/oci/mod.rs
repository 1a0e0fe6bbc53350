//! The OCI Distribution vocabulary, pure and without I/O: repository names, tags and
//! references, manifests and media types, the protocol's headers (Range, Location, Link,
//! Retry-After) and registry error bodies. The registry client is `crate::client`.

pub mod error;
pub mod headers;
pub mod manifest;
pub mod reference;

use url::Url;

pub use reference::{Reference, Repository, Tag};

/// Normalises a registry URL: keeps scheme, host and port; drops any path, so `/v2/` is
/// always appended to the root.
pub fn registry_base(url: &Url) -> Result<Url, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "registry URL '{url}' must start with http:// or https://"
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("registry URL '{url}' has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "registry URL must not contain credentials; use --username and --password-stdin".into(),
        );
    }
    // The API is at /v2/ on the host; a path cannot move it (distribution has no prefix
    // setting a client could discover). `/v2/` itself, pasted from a curl line, is harmless.
    let path = url.path();
    if !matches!(path, "" | "/" | "/v2" | "/v2/") {
        let first = path.trim_matches('/').split('/').next().unwrap_or_default();
        return Err(format!(
            "registry URL '{url}' has a path ({path}): the registry API is always at /v2/ on \
             the host, so give the host alone ('{}://{}') and put the path in the repository \
             (e.g. --repo {first}/app, or --repo-prefix {first} for a replay)",
            url.scheme(),
            &url[url::Position::BeforeHost..url::Position::AfterPort],
        ));
    }
    let mut base = url.clone();
    base.set_path("/");
    base.set_query(None);
    base.set_fragment(None);
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_base_is_normalised_and_refuses_credentials() {
        let b = registry_base(&"https://r.example:8443/?x=1".parse().unwrap()).unwrap();
        assert_eq!(b.as_str(), "https://r.example:8443/");
        let b = registry_base(&"http://127.0.0.1:5000/v2/".parse().unwrap()).unwrap();
        assert_eq!(b.as_str(), "http://127.0.0.1:5000/");
        // A path would be silently dropped: it is refused with what to do instead.
        let e = registry_base(&"https://ghcr.io/acme/tools".parse().unwrap()).unwrap_err();
        assert!(
            e.contains("has a path (/acme/tools)")
                && e.contains("'https://ghcr.io'")
                && e.contains("--repo acme/app"),
            "{e}"
        );
        assert!(registry_base(&"https://u:p@r.example/".parse().unwrap()).is_err());
        assert!(registry_base(&"ftp://r.example/".parse().unwrap()).is_err());
    }
}
