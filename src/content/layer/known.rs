//! The CRC-32s of gzip layers' frames, learned once per process where a layer's frames are
//! all made in order (its digests, an upload, a read checked) or read from the digest
//! cache's companion file, so a later read or upload of the same layer writes each member's
//! trailer from them instead of hashing its uncompressed bytes again (as a cached digest
//! spares hashing the blob).
//!
//! They are facts about content (its key, form and size), never about a run, so one store
//! serves every run of the process. Bounded: layers of [`MIN_FRAMES`] frames or more, at most
//! [`MAX_BYTES`] in all (4 bytes for each 64 KiB of layer), the rest hashed as before. A wrong CRC can only make a read fail its
//! check or an upload its digest, never pass one.

use std::sync::{Arc, Mutex, OnceLock};

use crate::fast_hash::FastHashMap;

/// The most bytes the store holds, its entries' own counted (16 MiB: the frames of 256 GiB
/// of large layers).
pub const MAX_BYTES: usize = 16 << 20;

/// What an entry costs beside its CRCs (its key, the map's slot, the shared slice's counts).
const ENTRY_BYTES: usize = 96;

/// Layers of fewer frames (1 MiB) are not learned: hashing them again costs little beside
/// their requests, and a million small layers would fill the store with entries.
pub const MIN_FRAMES: u64 = 16;

/// Layers of at most this many frames (4 GiB) are learned as they are made: a cursor holds
/// 4 bytes per frame until its last.
pub const LEARN_FRAMES: u64 = 1 << 16;

/// A layer: its key, form (`LayerForm`'s bytes) and size.
pub(crate) type Layer = ([u64; 4], [u8; 3], u64);

#[derive(Default)]
struct Store {
    layers: FastHashMap<Layer, Arc<[u32]>>,
    /// What the entries cost ([`ENTRY_BYTES`] and 4 per CRC each).
    bytes: usize,
}

fn cost(crcs: &[u32]) -> usize {
    ENTRY_BYTES + 4 * crcs.len()
}

fn store() -> &'static Mutex<Store> {
    static STORE: OnceLock<Mutex<Store>> = OnceLock::new();
    STORE.get_or_init(Mutex::default)
}

/// The frame CRCs of `layer`, if known.
pub(crate) fn get(layer: &Layer) -> Option<Arc<[u32]>> {
    store().lock().ok()?.layers.get(layer).cloned()
}

/// Keeps `crcs` (one per frame) as `layer`'s, replacing what was known (the latest made
/// from the bytes stands).
pub(crate) fn remember(layer: Layer, crcs: Arc<[u32]>) {
    if (crcs.len() as u64) < MIN_FRAMES {
        return;
    }
    let Ok(mut s) = store().lock() else {
        return;
    };
    let before = s.layers.get(&layer).map_or(0, |c| cost(c));
    let after = s.bytes - before + cost(&crcs);
    if after > MAX_BYTES {
        return;
    }
    s.bytes = after;
    s.layers.insert(layer, crcs);
}

/// Forgets the CRCs of `layers` (a cache they came from proved stale).
pub(crate) fn forget(layers: impl IntoIterator<Item = Layer>) {
    if let Ok(mut s) = store().lock() {
        for layer in layers {
            if let Some(crcs) = s.layers.remove(&layer) {
                s.bytes -= cost(&crcs);
            }
        }
    }
}

/// Every layer known.
pub(crate) fn all() -> Vec<(Layer, Arc<[u32]>)> {
    store().lock().map_or(Vec::new(), |s| {
        s.layers.iter().map(|(l, c)| (*l, c.clone())).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_layers_and_what_would_pass_the_bound_are_not_kept() {
        let form = [2, 0x5E, 1];
        let small = ([1, 2, 3, 0x5AA1], form, 15 * 65_536);
        remember(small, vec![7; 15].into());
        assert_eq!(get(&small), None);
        let huge = ([1, 2, 3, 0x5AA2], form, (MAX_BYTES as u64 / 4) * 65_536);
        remember(huge, vec![7; MAX_BYTES / 4].into());
        assert_eq!(get(&huge), None);
        let kept = ([1, 2, 3, 0x5AA3], form, 16 * 65_536);
        remember(kept, vec![7; 16].into());
        assert_eq!(get(&kept).as_deref(), Some(&[7u32; 16][..]));
        forget([kept]);
        assert_eq!(get(&kept), None);
    }
}
