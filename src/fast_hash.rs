//! The hash maps of the per-request path (histogram buckets, operations in flight, open
//! sessions and uploads, interned names) hash small keys millions of times per run. The
//! standard library's SipHash costs a few hundred instructions per key; foldhash, seeded per
//! process, a few dozen, and its keys here come from the user's own trace and plan.

/// A `HashMap` with foldhash's fast, per-process seeded hasher.
pub type FastHashMap<K, V> = std::collections::HashMap<K, V, FastState>;

/// The hasher state of [`FastHashMap`] (and of the name interner's index).
pub type FastState = foldhash::fast::RandomState;
