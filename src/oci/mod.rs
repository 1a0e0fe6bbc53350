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
        let b = registry_base(&"https://r.example:8443/some/path?x=1".parse().unwrap()).unwrap();
        assert_eq!(b.as_str(), "https://r.example:8443/");
        assert!(registry_base(&"https://u:p@r.example/".parse().unwrap()).is_err());
        assert!(registry_base(&"ftp://r.example/".parse().unwrap()).is_err());
    }
}
