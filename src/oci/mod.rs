//! The OCI Distribution vocabulary, pure and without I/O: repository names, tags and
//! references, manifests and media types, the protocol's headers (Range, Location, Link,
//! Retry-After) and registry error bodies. The registry client is `crate::client`.

pub mod error;
pub mod headers;
pub mod manifest;
pub mod reference;
pub mod upload;

use url::Url;

pub use reference::{Reference, Repository, Tag};
pub use upload::UploadMode;

/// `url` as it may be shown anywhere (a message, a log line, a result file): its password,
/// if it has one, replaced by `redacted`.
pub fn redacted(url: &Url) -> String {
    if url.password().is_none() {
        return url.to_string();
    }
    let mut shown = url.clone();
    let _ = shown.set_password(Some("redacted"));
    shown.to_string()
}

/// `text` with the password of a URL's user information (`scheme://user:password@host`)
/// replaced by `redacted`: for text that may not even parse as a URL.
pub fn redact_userinfo(text: &str) -> String {
    let Some(scheme_end) = text.find("://") else {
        return text.to_owned();
    };
    let authority_start = scheme_end + 3;
    let authority_end = text[authority_start..]
        .find(['/', '?', '#'])
        .map_or(text.len(), |i| authority_start + i);
    let authority = &text[authority_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return text.to_owned();
    };
    let userinfo = &authority[..at];
    let user = userinfo.split(':').next().unwrap_or("");
    let shown = if userinfo.contains(':') {
        format!("{user}:redacted")
    } else {
        user.to_owned()
    };
    format!(
        "{}{shown}{}",
        &text[..authority_start],
        &text[authority_start + at..]
    )
}

/// Normalises a registry URL: keeps scheme, host and port; drops any path, so `/v2/` is
/// always appended to the root.
pub fn registry_base(url: &Url) -> Result<Url, String> {
    let shown = redacted(url);
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "registry URL '{shown}' must start with http:// or https://"
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("registry URL '{shown}' has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "registry URL '{shown}' must not contain credentials; use --username with \
             --password-stdin or --password-cmd"
        ));
    }
    // The API is at /v2/ on the host; a path cannot move it (distribution has no prefix
    // setting a client could discover). `/v2/` itself, pasted from a curl line, is harmless.
    let path = url.path();
    if !matches!(path, "" | "/" | "/v2" | "/v2/") {
        let first = path.trim_matches('/').split('/').next().unwrap_or_default();
        return Err(format!(
            "registry URL '{shown}' has a path ({path}): the registry API is always at /v2/ on \
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

    #[test]
    fn passwords_in_urls_are_never_shown() {
        let url: Url = "https://me:s3cret@r.example:5000/v2/?q=1".parse().unwrap();
        assert_eq!(redacted(&url), "https://me:redacted@r.example:5000/v2/?q=1");
        let plain: Url = "http://r.example/".parse().unwrap();
        assert_eq!(redacted(&plain), "http://r.example/");
        assert_eq!(
            redact_userinfo("http://me:s3cret@host:bad/x"),
            "http://me:redacted@host:bad/x"
        );
        assert_eq!(redact_userinfo("http://me@host/"), "http://me@host/");
        assert_eq!(redact_userinfo("not a url"), "not a url");
        assert_eq!(redact_userinfo("http://a:b@c@d/"), "http://a:redacted@d/");
    }
}
