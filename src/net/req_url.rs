//! A request's URL: a `Url`, or a registry's base URL and an absolute path to join to it,
//! joined only where a whole `Url` is asked for. The plain-HTTP path sends the path as it is
//! and reaches the origin through the base, so a registry request builds no URL at all.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use url::{Position, Url};

/// A request's URL (dereferences to the whole `Url`, joined on first use).
#[derive(Debug, Clone)]
pub struct ReqUrl(Inner);

/// A `Url` is 88 bytes and a request's URL is held by every future that carries the request
/// (each level of the client's calls keeps its own): boxed, the two forms are 48.
#[derive(Debug, Clone)]
enum Inner {
    Whole(Box<Url>),
    /// `path` joined to `base`: same scheme, host and port, this path and no query.
    Joined {
        base: Arc<Url>,
        path: String,
        whole: OnceLock<Box<Url>>,
    },
}

impl From<Url> for ReqUrl {
    fn from(url: Url) -> ReqUrl {
        ReqUrl(Inner::Whole(Box::new(url)))
    }
}

impl ReqUrl {
    /// `path` (absolute) joined to `base`. A path whose text the URL parser would change
    /// (percent-encoding, dot segments, a query or fragment) is joined at once, so the
    /// path sent is always the joined URL's.
    pub fn joined(base: &Arc<Url>, path: String) -> ReqUrl {
        if !is_plain_path(&path) {
            return ReqUrl::from(join(base, &path));
        }
        ReqUrl(Inner::Joined {
            base: Arc::clone(base),
            path,
            whole: OnceLock::new(),
        })
    }

    /// The scheme, without joining.
    pub fn scheme(&self) -> &str {
        self.origin().scheme()
    }

    /// A URL of the request's scheme, host and port (its base, or itself), without
    /// joining: what a connection is chosen by.
    pub fn origin(&self) -> &Url {
        match &self.0 {
            Inner::Whole(url) => url,
            Inner::Joined { base, .. } => base,
        }
    }

    /// The request target of an origin-form request line: path and query.
    pub fn target(&self) -> &str {
        match &self.0 {
            Inner::Whole(url) => &url[Position::BeforePath..Position::AfterQuery],
            Inner::Joined { path, .. } => path,
        }
    }

    /// The whole URL, owned.
    pub fn into_url(self) -> Url {
        match self.0 {
            Inner::Whole(url) => *url,
            Inner::Joined { base, path, whole } => whole
                .into_inner()
                .map_or_else(|| join(&base, &path), |url| *url),
        }
    }
}

impl Deref for ReqUrl {
    type Target = Url;

    fn deref(&self) -> &Url {
        match &self.0 {
            Inner::Whole(url) => url,
            Inner::Joined { base, path, whole } => whole.get_or_init(|| Box::new(join(base, path))),
        }
    }
}

/// `path` joined to `base`; should a name ever fail to join, the base with that path.
fn join(base: &Url, path: &str) -> Url {
    base.join(path).unwrap_or_else(|_| {
        let mut url = base.clone();
        url.set_path(path);
        url
    })
}

/// An absolute path the URL parser keeps as it is: only characters it does not encode,
/// no `.` or `..` segment, no query or fragment, and not `//` first (which names a host).
pub(crate) fn is_plain_path(path: &str) -> bool {
    path.starts_with('/')
        && !path.starts_with("//")
        && path.bytes().all(|b| PLAIN[usize::from(b)])
        // A dot segment starts with "/."; registry paths have none, so the split is rare.
        && (!path.contains("/.") || path.split('/').all(|s| s != "." && s != ".."))
}

/// The bytes a URL path keeps as they are: unreserved, sub-delimiters, `:`, `@` and `/`.
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
            );
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_request_url_is_a_few_words_not_a_whole_url() {
        // Every future that carries a request holds its URL: the `Url` stays behind a box.
        assert!(std::mem::size_of::<ReqUrl>() <= 48);
        assert!(std::mem::size_of::<Url>() > 48);
    }

    fn check(base: &str, path: &str) {
        let base = Arc::new(Url::parse(base).unwrap());
        let joined = ReqUrl::joined(&base, path.to_owned());
        let want = join(&base, path);
        assert_eq!(&*joined, &want, "{path}");
        assert_eq!(
            joined.target(),
            &want[Position::BeforePath..Position::AfterQuery],
            "{path}"
        );
        assert_eq!(joined.scheme(), want.scheme());
        let origin = joined.origin();
        assert_eq!(
            (origin.host_str(), origin.port_or_known_default()),
            (want.host_str(), want.port_or_known_default())
        );
        assert_eq!(joined.into_url(), want);
    }

    #[test]
    fn a_joined_path_is_the_url_the_parser_makes() {
        for base in [
            "http://127.0.0.1:5000",
            "https://r.example/prefix/",
            "http://u:p@[::1]:80/a?q=1#f",
        ] {
            for path in [
                "/v2/",
                "/v2/library/ubuntu/manifests/22.04",
                "/v2/a/b/blobs/sha256:0123abcd",
                "/v2/a/./b",
                "/v2/a/../b",
                "/v2/a b/é",
                "/v2/a?x=1#y",
                "/v2/%2e%2e/x",
                "v2/relative",
                "//other.host/v2/",
            ] {
                check(base, path);
            }
        }
    }

    proptest! {
        #[test]
        fn any_path_joins_as_the_parser_joins(path in "/[a-zA-Z0-9._:/%?# -]{0,40}") {
            check("http://127.0.0.1:5000/base/", &path);
        }
    }
}
