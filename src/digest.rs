//! Content digests (`sha256:<64 hex>`), the identity of every blob and manifest.
//!
//! Only SHA-256 is produced; other algorithms are accepted when parsed (a registry may name
//! them) but cannot be verified, which [`Digest::verifiable`] tells the caller.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

/// A validated `algorithm:encoded` digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(Arc<str>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' is not a valid digest: {reason}")]
pub struct DigestError {
    pub value: String,
    pub reason: &'static str,
}

impl Digest {
    /// The digest of a complete byte string.
    pub fn sha256_of(data: &[u8]) -> Self {
        Self::from_sha256(Sha256::digest(data).into())
    }

    /// Wraps finished SHA-256 output.
    pub fn from_sha256(bytes: [u8; 32]) -> Self {
        let text = Sha256Sum(bytes).text();
        let text = std::str::from_utf8(&text).expect("hex digits are ASCII");
        Digest(Arc::from(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn algorithm(&self) -> &str {
        self.0.split_once(':').map_or("", |(a, _)| a)
    }

    pub fn encoded(&self) -> &str {
        self.0.split_once(':').map_or("", |(_, e)| e)
    }

    /// Whether creb-rs can check content against this digest.
    pub fn verifiable(&self) -> bool {
        self.algorithm() == "sha256"
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| DigestError {
            value: s.chars().take(100).collect(),
            reason,
        };
        let (algorithm, encoded) = s.split_once(':').ok_or_else(|| err("missing ':'"))?;
        let algorithm_ok = !algorithm.is_empty()
            && algorithm
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b));
        if !algorithm_ok {
            return Err(err("bad algorithm"));
        }
        let encoded_ok = !encoded.is_empty()
            && encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"=_-".contains(&b));
        if !encoded_ok {
            return Err(err("bad encoding"));
        }
        if algorithm == "sha256"
            && (encoded.len() != 64
                || !encoded
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        {
            return Err(err("sha256 needs 64 lowercase hex characters"));
        }
        Ok(Digest(Arc::from(s)))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.0)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Finished SHA-256 output: what a verified read computes, compared against the digest it
/// expects without building a [`Digest`] (which allocates) unless it is kept.
#[derive(Clone, Copy, Eq)]
pub struct Sha256Sum(pub [u8; 32]);

impl PartialEq for Sha256Sum {
    fn eq(&self, other: &Self) -> bool {
        same_bytes(&self.0, &other.0)
    }
}

/// Whether `a` and `b` hold the same bytes: 64 at a time (vectorised), then eight, then
/// one. What `==` on byte slices and arrays compiles to is a call of libc's `bcmp`, which
/// musl (the libc of the static release build) runs a byte at a time: a verified read
/// compares every byte it receives (`content`), and every verified GET compares its sum
/// and the `Docker-Content-Digest` text (about 500 instructions a GET that way;
/// docs/benchmarks.md, "The hot path", step 12).
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or_default());
    let words_differ = |p: &[u8], q: &[u8]| {
        p.chunks_exact(8)
            .zip(q.chunks_exact(8))
            .fold(0, |diff, (u, v)| diff | (word(u) ^ word(v)))
            != 0
    };
    let (mut x, mut y) = (a.chunks_exact(64), b.chunks_exact(64));
    if (&mut x).zip(&mut y).any(|(p, q)| words_differ(p, q)) {
        return false;
    }
    let (p, q) = (x.remainder(), y.remainder());
    let whole = p.len() / 8 * 8;
    !words_differ(&p[..whole], &q[..whole])
        && p[whole..].iter().zip(&q[whole..]).all(|(u, v)| u == v)
}

impl Sha256Sum {
    pub fn of(data: &[u8]) -> Self {
        Sha256Sum(Sha256::digest(data).into())
    }

    /// The sum a `sha256:` digest names; `None` for another algorithm.
    pub fn from_digest(digest: &Digest) -> Option<Self> {
        if digest.algorithm() != "sha256" {
            return None;
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digest.encoded(), &mut bytes).ok()?;
        Some(Sha256Sum(bytes))
    }

    /// `sha256:<64 lowercase hex>`, in a stack buffer.
    fn text(&self) -> [u8; 71] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 71];
        text[..7].copy_from_slice(b"sha256:");
        for (i, b) in self.0.iter().enumerate() {
            text[7 + 2 * i] = HEX[usize::from(b >> 4)];
            text[8 + 2 * i] = HEX[usize::from(b & 0x0f)];
        }
        text
    }

    /// Whether `digest` (a digest's text, e.g. a `Docker-Content-Digest` header) names this
    /// content.
    pub fn matches(&self, digest: &str) -> bool {
        same_bytes(digest.as_bytes(), &self.text())
    }

    pub fn digest(&self) -> Digest {
        Digest::from_sha256(self.0)
    }
}

impl fmt::Debug for Sha256Sum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.text();
        write!(f, "Sha256Sum({})", String::from_utf8_lossy(&text))
    }
}

/// Incremental SHA-256 that yields a [`Digest`].
#[derive(Debug, Clone, Default)]
pub struct Hasher(Sha256);

impl Hasher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(self) -> Digest {
        self.finish_sum().digest()
    }

    pub fn finish_sum(self) -> Sha256Sum {
        Sha256Sum(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(
            Digest::sha256_of(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let mut h = Hasher::new();
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(h.finish(), Digest::sha256_of(b"abc"));
    }

    proptest::proptest! {
        #[test]
        fn sums_and_texts_are_equal_exactly_when_their_bytes_are(
            a: [u8; 32],
            flip in 0usize..32,
            bit in 0u8..8,
            cut in 0usize..71,
        ) {
            let mut b = a;
            b[flip] ^= 1 << bit;
            proptest::prop_assert_eq!(Sha256Sum(a), Sha256Sum(a));
            proptest::prop_assert_ne!(Sha256Sum(a), Sha256Sum(b));
            // Every byte of the text counts, in the words and in the tail, and so does
            // its length.
            let text = Digest::from_sha256(a);
            proptest::prop_assert!(Sha256Sum(a).matches(text.as_str()));
            proptest::prop_assert!(!Sha256Sum(b).matches(text.as_str()));
            proptest::prop_assert!(!Sha256Sum(a).matches(&text.as_str()[..cut]));
            let mut changed = text.as_str().as_bytes().to_vec();
            changed[cut] = if changed[cut] == b'x' { b'y' } else { b'x' };
            proptest::prop_assert!(!Sha256Sum(a).matches(std::str::from_utf8(&changed).unwrap()));
        }

        #[test]
        fn byte_strings_are_the_same_exactly_when_every_byte_is(
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            at in proptest::num::usize::ANY,
            bit in 0u8..8,
        ) {
            // Blocks of 64, words of 8 and the bytes after them: a difference anywhere
            // counts, and so does a length.
            proptest::prop_assert!(same_bytes(&a, &a.clone()));
            if !a.is_empty() {
                let mut b = a.clone();
                b[at % a.len()] ^= 1 << bit;
                proptest::prop_assert!(!same_bytes(&a, &b));
                proptest::prop_assert!(!same_bytes(&a, &a[..a.len() - 1]));
            }
        }

        #[test]
        fn from_sha256_is_lowercase_hex_of_every_byte(bytes: [u8; 32]) {
            let d = Digest::from_sha256(bytes);
            proptest::prop_assert_eq!(d.as_str(), format!("sha256:{}", hex::encode(bytes)));
            proptest::prop_assert_eq!(d.as_str().parse::<Digest>(), Ok(d.clone()));
        }
    }

    #[test]
    fn a_sum_matches_only_its_own_digest_text() {
        let sum = Sha256Sum::of(b"abc");
        let digest = Digest::sha256_of(b"abc");
        assert_eq!(sum.digest(), digest);
        assert!(sum.matches(digest.as_str()));
        assert!(!sum.matches(Digest::sha256_of(b"abd").as_str()));
        assert!(!sum.matches(&digest.as_str().to_uppercase()));
        assert!(!sum.matches(&digest.as_str()[..70]));
        assert!(!sum.matches(&format!("{digest} ")));
        assert!(!sum.matches(&digest.as_str().replace("sha256", "sha512")));
    }

    #[test]
    fn parsing() {
        let good = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let d: Digest = good.parse().unwrap();
        assert_eq!(d.algorithm(), "sha256");
        assert!(d.verifiable());
        assert!("sha512:abcd".parse::<Digest>().is_ok());
        for bad in [
            "",
            "sha256",
            "sha256:",
            "sha256:abc",
            ":abc",
            "SHA256:ab",
            "sha256:E3B0",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
