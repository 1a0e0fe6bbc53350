//! What every content generator shares: the integer mixer it seeds from (SplitMix64's
//! output function) and how a generator's words become bytes.

use rand::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;

/// SplitMix64's finaliser: a bijection of `u64` that spreads every input bit over the output.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Writes the block stream from byte `within` on into `out`. The stream is defined as the
/// little-endian bytes of successive `next_u64` outputs, so it does not depend on where
/// reads start or end (`fill_bytes` takes a short tail from `next_u32`, which would).
pub(crate) fn fill_from(rng: &mut Xoshiro256PlusPlus, within: usize, out: &mut [u8]) {
    for _ in 0..within / 8 {
        rng.next_u64();
    }
    let mut start = 0;
    let skip = within % 8;
    if skip != 0 {
        let word = rng.next_u64().to_le_bytes();
        let take = (8 - skip).min(out.len());
        out[..take].copy_from_slice(&word[skip..skip + take]);
        start = take;
    }
    let mut words = out[start..].chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let word = rng.next_u64().to_le_bytes();
        let n = tail.len();
        tail.copy_from_slice(&word[..n]);
    }
}
