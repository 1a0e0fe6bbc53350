//! A bounded cache of fixed size for the planner: four-way set-associative, the least
//! recently used entry of a set giving way. Its memory is set when it is made (no table that
//! doubles, nothing cleared at once), and on the reads of a replay it keeps most of what a
//! true LRU of the same size keeps: on the 10M-record `dal` trace's 2.99M reads of prewarmed
//! manifests, 65,536 entries miss 822k times, an LRU of as many 777k, a map cleared when it
//! holds as many 1,037k (docs/benchmarks.md, "The hot path", step 30).

/// Entries per set.
const WAYS: usize = 4;

/// The key of an empty slot; never looked up or kept.
const EMPTY: u64 = u64::MAX;

#[derive(Debug)]
pub struct SetCache<V> {
    keys: Box<[u64]>,
    values: Box<[V]>,
    /// Sets minus one (their number is a power of two).
    mask: usize,
}

impl<V: Copy + Default> SetCache<V> {
    /// A cache of at least `entries` (at least one set), rounded up to a power of two sets.
    pub fn new(entries: usize) -> SetCache<V> {
        let sets = entries.div_ceil(WAYS).max(1).next_power_of_two();
        SetCache {
            keys: vec![EMPTY; sets * WAYS].into_boxed_slice(),
            values: vec![V::default(); sets * WAYS].into_boxed_slice(),
            mask: sets - 1,
        }
    }

    /// Entries it holds at most.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// The first slot of `key`'s set.
    fn set(&self, key: u64) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the key.
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (h as usize & self.mask) * WAYS
    }

    /// The value kept for `key`, which becomes its set's most recently used.
    pub fn get(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return None;
        }
        let s = self.set(key);
        let way = self.keys[s..s + WAYS].iter().position(|&k| k == key)?;
        let value = self.values[s + way];
        self.keys[s..=s + way].rotate_right(1);
        self.values[s..=s + way].rotate_right(1);
        Some(value)
    }

    /// Keeps `value` for `key` (not kept yet) as its set's most recently used; the set's
    /// least recently used gives way when the set is full.
    pub fn insert(&mut self, key: u64, value: V) {
        if key == EMPTY {
            return;
        }
        let s = self.set(key);
        self.keys[s..s + WAYS].rotate_right(1);
        self.values[s..s + WAYS].rotate_right(1);
        self.keys[s] = key;
        self.values[s] = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_set_gives_up_its_least_recently_used() {
        let mut c: SetCache<u32> = SetCache::new(WAYS);
        assert_eq!(c.capacity(), WAYS);
        for k in 0..4u64 {
            c.insert(k, k as u32 * 10);
        }
        // Reading 0 makes 1 the least recently used.
        assert_eq!(c.get(0), Some(0));
        c.insert(4, 40);
        assert_eq!(c.get(1), None);
        for k in [0, 2, 3, 4] {
            assert_eq!(c.get(k), Some(k as u32 * 10), "{k}");
        }
        assert_eq!(c.get(EMPTY), None);
        c.insert(EMPTY, 1);
        assert_eq!(c.get(EMPTY), None);
    }

    #[test]
    fn its_size_is_fixed_and_a_hot_key_survives_a_stream_of_cold_ones() {
        let mut c: SetCache<u64> = SetCache::new(1000);
        assert_eq!(c.capacity(), 1024);
        let mut hits = 0;
        for i in 0..100_000u64 {
            // One hot key read between every new one.
            if c.get(7).is_some() {
                hits += 1;
            } else {
                c.insert(7, 7);
            }
            let cold = 1_000 + i;
            if c.get(cold).is_none() {
                c.insert(cold, cold);
            }
        }
        assert_eq!(hits, 100_000 - 1);
        assert_eq!(c.capacity(), 1024);
        // The most recent cold keys are there, the oldest long gone.
        assert_eq!(c.get(1_000), None);
        assert_eq!(c.get(1_000 + 99_999), Some(1_000 + 99_999));
    }
}
