//! Repository names and tags, validated against the distribution spec's grammar:
//! name `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`,
//! tag `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::digest::Digest;

/// A valid repository name such as `library/ubuntu`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Repository(Arc<str>);

fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator: '.', '_', '__' or a run of '-', followed by an alphanumeric.
        let sep_start = i;
        match b[i] {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if i < b.len() && b[i] == b'_' {
                    i += 1;
                }
            }
            b'-' => {
                while i < b.len() && b[i] == b'-' {
                    i += 1;
                }
            }
            _ => return false,
        }
        if i == sep_start || i >= b.len() || !is_alnum(b[i]) {
            return false;
        }
    }
    true
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

impl FromStr for Repository {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > 255 {
            return Err(format!(
                "repository name longer than 255 characters: '{s:.40}…'"
            ));
        }
        if s.split('/').all(valid_component) {
            Ok(Repository(Arc::from(s)))
        } else {
            Err(format!(
                "'{s}' is not a valid repository name (lowercase letters, digits and separators . _ __ -, components joined by /)"
            ))
        }
    }
}

impl Repository {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name, shared (no copy).
    pub fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }

    /// `prefix/name`, validated.
    pub fn prefixed(&self, prefix: &str) -> Result<Repository, String> {
        let p = prefix.trim_matches('/');
        if p.is_empty() {
            return Ok(self.clone());
        }
        format!("{p}/{}", self.0).parse()
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A valid tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Tag(Arc<str>);

impl FromStr for Tag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b[1..]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if ok {
            Ok(Tag(Arc::from(s)))
        } else {
            Err(format!(
                "'{s}' is not a valid tag (up to 128 of letters, digits, _ . -, not starting with . or -)"
            ))
        }
    }
}

impl Tag {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a manifest request names: a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reference {
    Tag(Tag),
    Digest(Digest),
}

impl Reference {
    pub fn as_str(&self) -> &str {
        match self {
            Reference::Tag(t) => t.as_str(),
            Reference::Digest(d) => d.as_str(),
        }
    }
}

impl FromStr for Reference {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            s.parse::<Digest>()
                .map(Reference::Digest)
                .map_err(|e| e.to_string())
        } else {
            s.parse::<Tag>().map(Reference::Tag)
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn repository_names() {
        for good in ["a", "library/ubuntu", "a.b/c_d/e__f/g-h/i---j", "0x/1"] {
            assert!(good.parse::<Repository>().is_ok(), "{good}");
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "a_", "a___b", "a..b", "-a", "a.-b", "a b",
        ] {
            assert!(bad.parse::<Repository>().is_err(), "{bad}");
        }
        let r: Repository = "x/y".parse().unwrap();
        assert_eq!(r.prefixed("bench").unwrap().as_str(), "bench/x/y");
        assert_eq!(r.prefixed("").unwrap().as_str(), "x/y");
    }

    #[test]
    fn tags_and_references() {
        for good in ["latest", "v1.0", "_x", "A-b_c.d"] {
            assert!(good.parse::<Tag>().is_ok(), "{good}");
        }
        for bad in ["", ".x", "-x", "a/b", &"x".repeat(129)] {
            assert!(bad.parse::<Tag>().is_err(), "{bad}");
        }
        assert!(matches!(
            "latest".parse::<Reference>(),
            Ok(Reference::Tag(_))
        ));
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(matches!(d.parse::<Reference>(), Ok(Reference::Digest(_))));
        assert!("sha256:zz".parse::<Reference>().is_err());
    }

    proptest! {
        #[test]
        fn generated_names_are_accepted(parts in prop::collection::vec("[a-z0-9]{1,5}([._-][a-z0-9]{1,5})?", 1..4)) {
            let name = parts.join("/");
            prop_assert!(name.parse::<Repository>().is_ok(), "{}", name);
        }

        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = s.parse::<Repository>();
            let _ = s.parse::<Tag>();
            let _ = s.parse::<Reference>();
        }
    }
}
