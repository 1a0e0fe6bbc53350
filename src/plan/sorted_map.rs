//! A map built once and then only read: one sorted vector of entries, looked up by binary
//! search. The catalog keeps hundreds of thousands of facts for the whole run; a hash map
//! would hold them in power-of-two bucket arrays up to half empty, a B-tree in half-full
//! nodes. This holds exactly the entries.

use std::borrow::Borrow;

/// Sorted, unique keys with their values. Values can change in place; keys cannot be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedMap<K, V> {
    entries: Box<[(K, V)]>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap {
            entries: Box::default(),
        }
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    fn position<Q>(&self, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries
            .binary_search_by(|(k, _)| k.borrow().cmp(key))
            .ok()
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.position(key).is_some()
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// From entries whose keys are unique (a catalog's positions): sorted in place, without
    /// the buffer a stable sort takes; of equal keys, one is kept.
    pub fn from_unique(mut entries: Vec<(K, V)>) -> Self {
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        SortedMap {
            entries: entries.into_boxed_slice(),
        }
    }
}

impl<K, V> SortedMap<K, V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&K, &V)> + '_ {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &K> + '_ {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &V> + '_ {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The value of the `index`th entry in key order.
    pub fn value_at(&self, index: usize) -> Option<&V> {
        self.entries.get(index).map(|(_, v)| v)
    }
}

/// Sorts the entries by key; of entries with equal keys the last one given is kept, as
/// inserting them into a map one by one would.
impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut entries: Vec<(K, V)> = iter.into_iter().collect();
        // Stable: equal keys keep the order given, so the last of each run is the latest.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        // In place (no second vector of a catalog's size): a later entry replaces the one
        // kept before it.
        entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        SortedMap {
            entries: entries.into_boxed_slice(),
        }
    }
}

impl<'a, K, V> IntoIterator for &'a SortedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_last_of_equal_keys_wins_and_iteration_is_in_key_order() {
        let map: SortedMap<u32, &str> = [(3, "c"), (1, "a"), (3, "z"), (2, "b")]
            .into_iter()
            .collect();
        assert_eq!(map.len(), 3);
        assert_eq!(map.get(&3), Some(&"z"));
        assert_eq!(map.get(&4), None);
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        let mut map = map;
        *map.get_mut(&1).unwrap() = "A";
        assert_eq!(
            (&map).into_iter().map(|(_, v)| *v).collect::<Vec<_>>(),
            ["A", "b", "z"]
        );
        assert!(map.contains_key(&2) && !map.contains_key(&0));
        assert!(SortedMap::<u8, u8>::default().is_empty());
    }

    proptest! {
        /// Whatever the input, it answers as a BTreeMap filled one insert at a time.
        #[test]
        fn answers_as_a_btree_map(pairs in proptest::collection::vec((0u16..200, any::<u32>()), 0..300)) {
            let sorted: SortedMap<u16, u32> = pairs.iter().copied().collect();
            let btree: std::collections::BTreeMap<u16, u32> = pairs.iter().copied().collect();
            prop_assert_eq!(sorted.len(), btree.len());
            prop_assert!(sorted.iter().eq(btree.iter()));
            for k in 0u16..210 {
                prop_assert_eq!(sorted.get(&k), btree.get(&k));
            }
        }
    }
}
