//! A byte-capacity LRU list with O(1) lookup, touch, insert and eviction: a `HashMap` from
//! key to slot and an intrusive doubly-linked list threaded through a `Vec` arena of slots
//! (freed slots are reused), so memory is proportional to the objects resident.
//!
//! Invariants: `used` is the sum of the sizes of resident objects and never exceeds
//! `capacity` after an operation returns; the list runs from the most recently used (`head`)
//! to the least recently used (`tail`); every resident key has exactly one slot. An object
//! larger than the whole capacity is never inserted.

use std::collections::HashMap;
use std::hash::Hash;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Slot<K> {
    key: K,
    size: u64,
    prev: u32,
    next: u32,
}

/// An LRU set of sized objects, bounded by the sum of their sizes.
#[derive(Debug, Clone)]
pub struct Lru<K> {
    capacity: u64,
    used: u64,
    slots: Vec<Slot<K>>,
    free: Vec<u32>,
    index: HashMap<K, u32>,
    head: u32,
    tail: u32,
}

impl<K: Copy + Eq + Hash> Lru<K> {
    /// An empty list holding at most `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Lru {
            capacity,
            used: 0,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            head: NIL,
            tail: NIL,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes resident.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Objects resident.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// Size of a resident object.
    pub fn size_of(&self, key: &K) -> Option<u64> {
        self.index.get(key).map(|&i| self.slots[i as usize].size)
    }

    /// Marks `key` most recently used; false if it is not resident.
    pub fn touch(&mut self, key: &K) -> bool {
        let Some(&i) = self.index.get(key) else {
            return false;
        };
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        true
    }

    /// Removes `key`, returning its size.
    pub fn remove(&mut self, key: &K) -> Option<u64> {
        let i = self.index.remove(key)?;
        self.unlink(i);
        let size = self.slots[i as usize].size;
        self.used -= size;
        self.free.push(i);
        Some(size)
    }

    /// Removes and returns the least recently used object.
    pub fn pop_lru(&mut self) -> Option<(K, u64)> {
        if self.tail == NIL {
            return None;
        }
        let key = self.slots[self.tail as usize].key;
        let size = self.remove(&key)?;
        Some((key, size))
    }

    /// Inserts `key` as most recently used (or refreshes it and updates its size if
    /// resident), evicting least recently used objects into `evicted` until it fits. Returns
    /// false, changing nothing, if `size` exceeds the whole capacity.
    pub fn insert(&mut self, key: K, size: u64, evicted: &mut Vec<(K, u64)>) -> bool {
        if size > self.capacity {
            return false;
        }
        // A resident key is re-inserted below with its new size; that is not an eviction.
        let _ = self.remove(&key);
        while self.used.saturating_add(size) > self.capacity {
            match self.pop_lru() {
                Some(victim) => evicted.push(victim),
                None => break,
            }
        }
        let slot = Slot {
            key,
            size,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.push_front(i);
        self.index.insert(key, i);
        self.used += size;
        true
    }

    /// Keys from most to least recently used (for tests and debugging; O(n)).
    pub fn keys_mru(&self) -> Vec<K> {
        let mut out = Vec::with_capacity(self.len());
        let mut i = self.head;
        while i != NIL {
            out.push(self.slots[i as usize].key);
            i = self.slots[i as usize].next;
        }
        out
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let s = &self.slots[i as usize];
            (s.prev, s.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[i as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        if old == NIL {
            self.tail = i;
        } else {
            self.slots[old as usize].prev = i;
        }
        self.head = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let mut lru = Lru::new(10);
        let mut ev = Vec::new();
        assert!(lru.insert(1u32, 4, &mut ev));
        assert!(lru.insert(2, 4, &mut ev));
        assert!(lru.touch(&1));
        assert!(lru.insert(3, 4, &mut ev));
        assert_eq!(ev, vec![(2, 4)]);
        assert_eq!(lru.keys_mru(), vec![3, 1]);
        assert_eq!(lru.used(), 8);
        // Too large for the whole list: refused, nothing evicted.
        ev.clear();
        assert!(!lru.insert(9, 11, &mut ev));
        assert!(ev.is_empty());
        // Exactly the capacity: everything else goes.
        assert!(lru.insert(4, 10, &mut ev));
        assert_eq!(ev, vec![(1, 4), (3, 4)]);
        assert_eq!(lru.keys_mru(), vec![4]);
    }

    #[test]
    fn reinsert_updates_size_and_recency() {
        let mut lru = Lru::new(10);
        let mut ev = Vec::new();
        lru.insert(1u32, 3, &mut ev);
        lru.insert(2, 3, &mut ev);
        lru.insert(1, 6, &mut ev);
        assert!(ev.is_empty());
        assert_eq!(lru.used(), 9);
        assert_eq!(lru.keys_mru(), vec![1, 2]);
        assert_eq!(lru.remove(&2), Some(3));
        assert_eq!(lru.pop_lru(), Some((1, 6)));
        assert!(lru.is_empty());
        assert_eq!(lru.used(), 0);
    }

    proptest! {
        /// Against a naive model: a Vec in recency order.
        #[test]
        fn matches_a_naive_model(ops in proptest::collection::vec((0u8..3, 0u32..12, 0u64..8), 0..300)) {
            let mut lru = Lru::new(16);
            let mut model: Vec<(u32, u64)> = Vec::new();
            let mut ev = Vec::new();
            for (op, key, size) in ops {
                match op {
                    0 => {
                        ev.clear();
                        let ok = lru.insert(key, size, &mut ev);
                        prop_assert_eq!(ok, size <= 16);
                        if ok {
                            model.retain(|(k, _)| *k != key);
                            let mut want = Vec::new();
                            while model.iter().map(|e| e.1).sum::<u64>() + size > 16 {
                                want.push(model.pop().unwrap());
                            }
                            model.insert(0, (key, size));
                            prop_assert_eq!(&ev, &want);
                        }
                    }
                    1 => {
                        let hit = lru.touch(&key);
                        let pos = model.iter().position(|(k, _)| *k == key);
                        prop_assert_eq!(hit, pos.is_some());
                        if let Some(p) = pos {
                            let e = model.remove(p);
                            model.insert(0, e);
                        }
                    }
                    _ => {
                        let got = lru.remove(&key);
                        let pos = model.iter().position(|(k, _)| *k == key);
                        prop_assert_eq!(got, pos.map(|p| model.remove(p).1));
                    }
                }
                prop_assert_eq!(lru.keys_mru(), model.iter().map(|e| e.0).collect::<Vec<_>>());
                prop_assert_eq!(lru.used(), model.iter().map(|e| e.1).sum::<u64>());
                prop_assert!(lru.used() <= lru.capacity());
            }
        }
    }
}
