//! The manifests an event loop has verified, kept so that the same answer again is verified
//! by comparing its bytes with them rather than by hashing it.
//!
//! A loop's GET asks for a manifest by the digest the plan knows; its answer is accepted
//! only when the body's SHA-256 is that digest. A trace reads the same manifests over and
//! over (a tag pulled by every client), and bytes equal to a body whose SHA-256 was that
//! digest have that SHA-256: a comparison proves what the hash would, for far less, as
//! `--verify compare` does for blobs (docs/measurement.md). What is kept is bounded:
//! [`SLOTS`] slots, each a body of at most [`KEPT_MAX`] bytes, placed by its digest's first
//! byte; a manifest whose slot holds another takes it over once verified, so a trace of
//! many manifests keeps hashing most of them, and never holds more than 1 MiB here.

use crate::digest::{same_bytes, Sha256Sum};

/// How many manifests a loop keeps.
const SLOTS: usize = 64;
/// The largest body kept (larger ones are hashed every time).
const KEPT_MAX: usize = 16 * 1024;

/// A loop's verified manifests, by digest.
#[derive(Default)]
pub(super) struct Verified {
    slots: Vec<Option<(Sha256Sum, Vec<u8>)>>,
    /// How many bodies were hashed (the tests' witness that a repeat was not).
    #[cfg(test)]
    hashed: u64,
}

impl Verified {
    pub(super) fn new() -> Self {
        let mut v = Verified::default();
        v.slots.resize_with(SLOTS, || None);
        v
    }

    /// The SHA-256 of `body`, an answer to a GET of the manifest whose sum is `expect`:
    /// `expect` itself when `body` is the copy kept for it, else hashed (and kept when it
    /// is `expect` and small enough).
    pub(super) fn sum(&mut self, expect: &Sha256Sum, body: &[u8]) -> Sha256Sum {
        let slot = &mut self.slots[usize::from(expect.0[0]) % SLOTS];
        if let Some((kept, bytes)) = slot {
            if kept == expect && same_bytes(bytes, body) {
                return *expect;
            }
        }
        #[cfg(test)]
        {
            self.hashed += 1;
        }
        let sum = Sha256Sum::of(body);
        if sum == *expect && body.len() <= KEPT_MAX {
            match slot {
                Some((kept, bytes)) => {
                    *kept = sum;
                    bytes.clear();
                    bytes.extend_from_slice(body);
                }
                None => *slot = Some((sum, body.to_vec())),
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest body `n` bytes long, its bytes from `seed`.
    fn body(seed: u8, n: usize) -> Vec<u8> {
        (0..n).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
    }

    #[test]
    fn a_repeated_answer_is_verified_by_comparison_and_any_other_is_hashed() {
        let mut v = Verified::new();
        let good = body(1, 1024);
        let expect = Sha256Sum::of(&good);
        assert_eq!(v.sum(&expect, &good), expect);
        assert_eq!(v.sum(&expect, &good), expect);
        assert_eq!(v.hashed, 1, "the repeat was compared, not hashed");
        // One byte changed, or one byte short: hashed, and its own sum, not the one asked.
        let mut bad = good.clone();
        bad[700] ^= 1;
        assert_eq!(v.sum(&expect, &bad), Sha256Sum::of(&bad));
        assert_eq!(v.sum(&expect, &good[..1023]), Sha256Sum::of(&good[..1023]));
        assert_eq!(v.hashed, 3);
        // A wrong answer does not displace the verified copy.
        assert_eq!(v.sum(&expect, &good), expect);
        assert_eq!(v.hashed, 3);
    }

    #[test]
    fn what_is_kept_is_bounded_and_a_slot_goes_to_the_latest_verified() {
        let mut v = Verified::new();
        let large = body(2, KEPT_MAX + 1);
        let sum = Sha256Sum::of(&large);
        v.sum(&sum, &large);
        v.sum(&sum, &large);
        assert_eq!(v.hashed, 2, "a body over KEPT_MAX is hashed every time");
        // Two manifests whose digests share a slot: each verified takes it over.
        let mut same_slot = Vec::new();
        for seed in 0..=u8::MAX {
            let b = body(seed, 512);
            let s = Sha256Sum::of(&b);
            if usize::from(s.0[0]) % SLOTS == 0 {
                same_slot.push((s, b));
            }
        }
        let [(s1, b1), (s2, b2), ..] = &same_slot[..] else {
            panic!("two of 256 digests share slot 0");
        };
        let before = v.hashed;
        v.sum(s1, b1);
        v.sum(s2, b2);
        v.sum(s2, b2);
        v.sum(s1, b1);
        assert_eq!(
            v.hashed - before,
            3,
            "the second's repeat alone was compared"
        );
        let kept: usize = v.slots.iter().flatten().map(|(_, b)| b.capacity()).sum();
        assert!(kept <= SLOTS * KEPT_MAX);
        assert_eq!(v.slots.iter().flatten().count(), 1);
    }
}
