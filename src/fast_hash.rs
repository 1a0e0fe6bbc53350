//! Hashing, two kinds. **Fast** hashes for the maps of the per-request path (histogram
//! buckets, operations in flight, open sessions and uploads, interned names), which hash
//! small keys millions of times per run: the standard library's SipHash costs a few hundred
//! instructions per key; foldhash, seeded per process, a few dozen, and its keys here come
//! from the user's own trace and plan. **Stable** hashes for choices every host and every
//! version must make alike (shard keys, log ids, sampling, routing): FNV-1a and the
//! splitmix64 finalizer, never seeded per process.

/// A `HashMap` with foldhash's fast, per-process seeded hasher.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, FastState>;

/// The hasher state of [`FastHashMap`] (and of the name interner's index).
pub type FastState = foldhash::fast::RandomState;

/// FNV-1a, 64 bits, of the concatenation of `parts`: stable across hosts and versions.
pub fn fnv1a_parts(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// FNV-1a, 64 bits, of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_parts(&[bytes])
}

/// The splitmix64 finalizer: a bijection of `u64` that mixes every input bit into every
/// output bit (FNV's low bits alone are poorly mixed).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The golden-ratio increment splitmix64 adds between draws.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hashes_keep_their_published_values() {
        // FNV-1a test vectors (offset basis for the empty input; "a"; "foobar").
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_parts(&[b"foo", b"", b"bar"]), fnv1a(b"foobar"));
        // splitmix64 from seed 0: its first output.
        assert_eq!(splitmix64(GOLDEN_GAMMA), 0xe220_a839_7b1d_cdaf);
    }
}
