//! Names in an imported trace, as the IBM traces have them: each user-chosen name (a
//! repository's path components, a tag, a client address, a registry host, a request id,
//! an upload session) replaced by a keyed hash (HMAC-SHA256), truncated to a few hex
//! digits; digests replaced consistently, so that a blob keeps one name everywhere it
//! appears. Without the key the hashes cannot be reversed or recomputed from guesses; with
//! the same key the same log gives the same trace. `--no-anonymize` keeps every name.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Hex digits kept of a name's hash, as in the IBM traces (8).
const NAME_HEX: usize = 8;
/// Hex digits kept of a digest's hash: longer than a name's, so that the blobs of a large
/// registry (millions) do not collide into one.
const DIGEST_HEX: usize = 16;
/// Hex digits of a request id (the IBM ids have 10).
const ID_HEX: usize = 10;

/// What kind of name is hashed: the same text in two roles hashes apart.
#[derive(Debug, Clone, Copy)]
enum Role {
    RepoComponent,
    Tag,
    Digest,
    Client,
    Host,
    Id,
    Session,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::RepoComponent => b"repo",
            Role::Tag => b"tag",
            Role::Digest => b"digest",
            Role::Client => b"client",
            Role::Host => b"host",
            Role::Id => b"id",
            Role::Session => b"session",
        }
    }
}

/// Replaces names, or keeps them (`key` `None`).
#[derive(Clone)]
pub struct Anonymizer {
    mac: Option<Hmac<Sha256>>,
}

impl std::fmt::Debug for Anonymizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Anonymizer")
            .field("anonymize", &self.mac.is_some())
            .finish()
    }
}

impl Anonymizer {
    /// Hashes with `key`.
    pub fn keyed(key: &[u8]) -> Anonymizer {
        Anonymizer {
            mac: Some(Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length")),
        }
    }

    /// Keeps every name as it is.
    pub fn off() -> Anonymizer {
        Anonymizer { mac: None }
    }

    /// A fresh random key, from the operating system, that is never written anywhere.
    pub fn random() -> std::io::Result<Anonymizer> {
        use std::io::Read as _;
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        Ok(Anonymizer::keyed(&key))
    }

    pub fn is_on(&self) -> bool {
        self.mac.is_some()
    }

    fn hash(&self, role: Role, text: &str, hex_digits: usize) -> Option<String> {
        let mut mac = self.mac.clone()?;
        mac.update(role.label());
        mac.update(&[0]);
        mac.update(text.as_bytes());
        let out = mac.finalize().into_bytes();
        let mut s = hex::encode(&out[..hex_digits.div_ceil(2)]);
        s.truncate(hex_digits);
        Some(s)
    }

    /// A repository: each path component hashed on its own, so that the repositories of
    /// one namespace still share their first component.
    pub fn repository(&self, repo: &str) -> String {
        if !self.is_on() {
            return repo.to_owned();
        }
        repo.split('/')
            .map(|c| {
                self.hash(Role::RepoComponent, c, NAME_HEX)
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// A manifest reference: a digest as a digest, a tag as a tag.
    pub fn reference(&self, reference: &str) -> String {
        if reference.contains(':') {
            self.digest(reference)
        } else {
            self.hash(Role::Tag, reference, NAME_HEX)
                .unwrap_or_else(|| reference.to_owned())
        }
    }

    /// A digest (`sha256:…`): the same digest gets the same name wherever it appears.
    pub fn digest(&self, digest: &str) -> String {
        self.hash(Role::Digest, digest, DIGEST_HEX)
            .unwrap_or_else(|| digest.to_owned())
    }

    /// A client address, without its port (one client, many connections).
    pub fn client(&self, addr: &str) -> String {
        let ip = strip_port(addr);
        self.hash(Role::Client, ip, NAME_HEX)
            .unwrap_or_else(|| ip.to_owned())
    }

    /// The registry host a request was addressed to.
    pub fn host(&self, host: &str) -> String {
        self.hash(Role::Host, host, NAME_HEX)
            .unwrap_or_else(|| host.to_owned())
    }

    /// A request id.
    pub fn id(&self, id: &str) -> String {
        self.hash(Role::Id, id, ID_HEX)
            .unwrap_or_else(|| id.to_owned())
    }

    /// An upload session id.
    pub fn session(&self, session: &str) -> String {
        self.hash(Role::Session, session, DIGEST_HEX)
            .unwrap_or_else(|| session.to_owned())
    }
}

/// `1.2.3.4:5678` → `1.2.3.4`, `[::1]:5678` → `::1`; an address without a port as it is.
pub fn strip_port(addr: &str) -> &str {
    let addr = addr.trim();
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        // One colon: host:port. More: a bare IPv6 address.
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_key_gives_the_same_names_and_another_key_others() {
        let a = Anonymizer::keyed(b"k1");
        let b = Anonymizer::keyed(b"k1");
        let c = Anonymizer::keyed(b"k2");
        assert_eq!(a.repository("acme/web/app"), b.repository("acme/web/app"));
        assert_ne!(a.repository("acme/web/app"), c.repository("acme/web/app"));
        let r = a.repository("acme/web/app");
        let parts: Vec<&str> = r.split('/').collect();
        assert_eq!(parts.len(), 3);
        assert!(parts
            .iter()
            .all(|p| p.len() == 8 && p.bytes().all(|b| b.is_ascii_hexdigit())));
        // A namespace stays shared.
        assert_eq!(
            a.repository("acme/web").split('/').next(),
            a.repository("acme/db").split('/').next()
        );
        // Roles hash apart: a tag named like a repository component is another name.
        assert_ne!(a.reference("acme"), a.repository("acme"));
        // A digest keeps one name as a blob and as a manifest reference.
        let d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(a.digest(d), a.reference(d));
        assert_eq!(a.digest(d).len(), 16);
        assert_eq!(a.client("10.1.2.3:5555"), a.client("10.1.2.3:6666"));
        assert_eq!(a.id("fa93").len(), 10);
        assert!(!format!("{a:?}").contains("k1"));
    }

    #[test]
    fn off_keeps_names() {
        let a = Anonymizer::off();
        assert_eq!(a.repository("library/alpine"), "library/alpine");
        assert_eq!(a.reference("3.20"), "3.20");
        assert_eq!(a.client("10.1.2.3:5555"), "10.1.2.3");
    }

    #[test]
    fn ports_are_stripped_from_every_address_form() {
        assert_eq!(strip_port("10.0.0.1:443"), "10.0.0.1");
        assert_eq!(strip_port("[::1]:443"), "::1");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("10.0.0.1"), "10.0.0.1");
        assert_eq!(strip_port("registry.example:5000"), "registry.example");
    }
}
