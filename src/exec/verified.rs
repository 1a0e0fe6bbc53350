//! The manifests an event loop has verified, kept so that the same answer again is verified
//! by comparing its bytes with them rather than by hashing it, and judged by comparing them
//! rather than by parsing it.
//!
//! A loop's GET asks for a manifest by the digest the plan knows; its answer is accepted
//! only when the body's SHA-256 is that digest. A trace reads the same manifests over and
//! over (a tag pulled by every client), and bytes equal to a body whose SHA-256 was that
//! digest have that SHA-256: a comparison proves what the hash would, for far less, as
//! `--verify compare` does for blobs (docs/measurement.md). The same holds of the whole
//! answer: bytes equal to an answer the loop parsed and accepted for the same reference,
//! with the same checks, are judged the same, so a repeat of it (a registry's answers differ
//! only in their `Date`, once a second) is accepted without its head parsed or its digest
//! header read again (docs/benchmarks.md, "The hot path", step 52). What is kept is
//! bounded: [`SLOTS`] slots, each an answer whose body is at most [`KEPT_MAX`] bytes and
//! which fits the loop's 64 KiB read buffer (a manifest's answer is a few KiB), placed by
//! its digest's first byte. A manifest whose slot holds another takes it over once
//! verified, so a trace of many manifests keeps hashing most of them.

use crate::digest::{same_bytes, Sha256Sum};

/// How many manifests a loop keeps.
const SLOTS: usize = 64;
/// The largest body kept (larger ones are hashed every time).
const KEPT_MAX: usize = 16 * 1024;

/// A manifest verified here: its digest, and bytes whose body (from `head` on) has it as its
/// SHA-256 — the body alone, or the last whole answer accepted with it.
struct Kept {
    sum: Sha256Sum,
    answer: Vec<u8>,
    head: usize,
    /// What `answer` was accepted for, if it is a whole answer: the reference asked for
    /// and whether the digest header was checked.
    judged: Option<(String, bool)>,
}

impl Kept {
    fn body(&self) -> &[u8] {
        &self.answer[self.head..]
    }
}

/// A loop's verified manifests, by digest.
#[derive(Default)]
pub(super) struct Verified {
    slots: Vec<Option<Kept>>,
    /// How many bodies were hashed (the tests' witness that a repeat was not).
    #[cfg(test)]
    hashed: u64,
    /// How many answers were judged repeats (the tests' witness that they were not parsed).
    #[cfg(test)]
    pub(super) repeats: u64,
}

impl Verified {
    pub(super) fn new() -> Self {
        let mut v = Verified::default();
        v.slots.resize_with(SLOTS, || None);
        v
    }

    fn slot(&mut self, sum: &Sha256Sum) -> &mut Option<Kept> {
        &mut self.slots[usize::from(sum.0[0]) % SLOTS]
    }

    /// The SHA-256 of `body`, an answer to a GET of the manifest whose sum is `expect`:
    /// `expect` itself when `body` is the copy kept for it, else hashed (and kept when it
    /// is `expect` and small enough).
    pub(super) fn sum(&mut self, expect: &Sha256Sum, body: &[u8]) -> Sha256Sum {
        let slot = self.slot(expect);
        if let Some(kept) = slot {
            if kept.sum == *expect && same_bytes(kept.body(), body) {
                return *expect;
            }
        }
        #[cfg(test)]
        {
            self.hashed += 1;
        }
        let sum = Sha256Sum::of(body);
        if sum == *expect && body.len() <= KEPT_MAX {
            let slot = self.slot(expect);
            match slot {
                Some(kept) => {
                    kept.sum = sum;
                    kept.answer.clear();
                    kept.answer.extend_from_slice(body);
                    kept.head = 0;
                    kept.judged = None;
                }
                None => {
                    *slot = Some(Kept {
                        sum,
                        answer: body.to_vec(),
                        head: 0,
                        judged: None,
                    });
                }
            }
        }
        sum
    }

    /// `read` was accepted as the whole answer (its head the first `head` bytes) to a GET of
    /// `reference` by the manifest whose sum is `expect`, its digest header checked if
    /// `checks`: kept for [`Self::repeat`] if its body is the copy kept for `expect`.
    pub(super) fn accepted(
        &mut self,
        expect: &Sha256Sum,
        reference: &str,
        checks: bool,
        read: &[u8],
        head: usize,
    ) {
        let Some(kept) = self.slot(expect) else {
            return;
        };
        if kept.sum != *expect || !same_bytes(kept.body(), &read[head.min(read.len())..]) {
            return;
        }
        kept.answer.clear();
        kept.answer.extend_from_slice(read);
        kept.head = head;
        match &mut kept.judged {
            Some((r, c)) => {
                r.clear();
                r.push_str(reference);
                *c = checks;
            }
            None => kept.judged = Some((reference.to_owned(), checks)),
        }
    }

    /// The body's length if `read` is, byte for byte, the answer last accepted for a GET of
    /// `reference` by `expect` with the same `checks` ([`Self::accepted`]): the same
    /// bytes, judged the same.
    pub(super) fn repeat(
        &mut self,
        expect: &Sha256Sum,
        reference: &str,
        checks: bool,
        read: &[u8],
    ) -> Option<u64> {
        let kept = self.slot(expect).as_ref()?;
        let (r, c) = kept.judged.as_ref()?;
        let same = kept.answer.len() == read.len()
            && kept.sum == *expect
            && *c == checks
            && r == reference
            && same_bytes(&kept.answer, read);
        let length = same.then(|| kept.body().len() as u64);
        #[cfg(test)]
        {
            self.repeats += u64::from(length.is_some());
        }
        length
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
        let kept: usize = v.slots.iter().flatten().map(|k| k.answer.capacity()).sum();
        assert!(kept <= SLOTS * KEPT_MAX);
        assert_eq!(v.slots.iter().flatten().count(), 1);
    }

    #[test]
    fn an_answer_is_a_repeat_only_of_the_same_bytes_reference_and_checks() {
        let mut v = Verified::new();
        let good = body(3, 600);
        let expect = Sha256Sum::of(&good);
        let answer = [b"HTTP/1.1 200 OK\r\nDate: 1\r\n\r\n".as_slice(), &good].concat();
        let head = answer.len() - good.len();
        // Nothing accepted yet; an answer whose body was not verified is not kept.
        assert_eq!(v.repeat(&expect, "t1", true, &answer), None);
        v.accepted(&expect, "t1", true, &answer, head);
        assert_eq!(v.repeat(&expect, "t1", true, &answer), None);
        // Verified, then accepted: the same bytes again are a repeat, of the body's length.
        assert_eq!(v.sum(&expect, &good), expect);
        v.accepted(&expect, "t1", true, &answer, head);
        assert_eq!(v.repeat(&expect, "t1", true, &answer), Some(600));
        // Another reference, other checks, a byte changed or short: judged anew.
        assert_eq!(v.repeat(&expect, "t2", true, &answer), None);
        assert_eq!(v.repeat(&expect, "t1", false, &answer), None);
        let mut other = answer.clone();
        other[25] = b'2';
        assert_eq!(v.repeat(&expect, "t1", true, &other), None);
        assert_eq!(
            v.repeat(&expect, "t1", true, &answer[..answer.len() - 1]),
            None
        );
        assert_eq!(v.repeats, 1);
        // The new `Date` accepted: its body is still the kept one's, compared, not hashed.
        let hashed = v.hashed;
        assert_eq!(v.sum(&expect, &other[head..]), expect);
        v.accepted(&expect, "t1", true, &other, head);
        assert_eq!(v.hashed, hashed);
        assert_eq!(v.repeat(&expect, "t1", true, &other), Some(600));
        assert_eq!(v.repeat(&expect, "t1", true, &answer), None);
        // A manifest that takes the slot over takes the answer with it.
        let mut same_slot = (0..=u8::MAX).map(|seed| body(seed, 100)).filter(|b| {
            let s = Sha256Sum::of(b);
            s != expect && s.0[0] % SLOTS as u8 == expect.0[0] % SLOTS as u8
        });
        let taker = same_slot
            .next()
            .expect("one of 256 digests shares the slot");
        let taker_sum = Sha256Sum::of(&taker);
        assert_eq!(v.sum(&taker_sum, &taker), taker_sum);
        assert_eq!(v.repeat(&expect, "t1", true, &other), None);
    }
}
