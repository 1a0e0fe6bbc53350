//! The random bytes of a layer's files: each piece is a window of one block of generated
//! words every process makes alike, chosen and masked by the piece's key, so a piece costs
//! a masked copy from cache rather than a generator's steps.
//!
//! A piece `id` of a layer with key `k` takes the words `POOL[o..o + 2048]` (16 KiB), each
//! XORed with one of four mask words in turn; `o` and the masks are mixed from `k` and `id`.
//! No two pieces share an exact run of bytes (their masks differ), so a compressor finds
//! nothing to match across them: the bytes stay incompressible, and unique per layer.

use std::sync::OnceLock;

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::content::mix::splitmix64;

/// Random bytes per piece of file data.
pub(super) const PIECE: u64 = 16 * 1024;

/// Where a window may start: 256 KiB of words (the pool stays in a core's L2 cache).
const STARTS: usize = 32 * 1024;
/// Words in a piece.
const PIECE_WORDS: usize = (PIECE / 8) as usize;

/// The shared words, as their little-endian bytes: xoshiro256++ from a fixed seed, made once
/// per process.
fn pool() -> &'static [u8] {
    static POOL: OnceLock<Box<[u8]>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut seed = [0u8; 32];
        for (i, chunk) in seed.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&splitmix64(0x6372_6562_706f_6f6c ^ i as u64).to_le_bytes());
        }
        let mut rng = Xoshiro256PlusPlus::from_seed(seed);
        (0..STARTS + PIECE_WORDS)
            .flat_map(|_| rng.next_u64().to_le_bytes())
            .collect()
    })
}

/// Piece `id`'s window start in the pool (in words) and its four mask words, as the 32
/// bytes they are XORed with in turn.
fn place(key: &[u64; 4], id: u64) -> (usize, [u8; 32]) {
    let mut h = splitmix64(id ^ 0xA5A5_0000_0000_0000);
    for word in key {
        h = splitmix64(h ^ word);
    }
    let mut mask = [0u8; 32];
    for (i, m) in mask.chunks_exact_mut(8).enumerate() {
        m.copy_from_slice(&splitmix64(h ^ (i as u64 + 1)).to_le_bytes());
    }
    ((h % STARTS as u64) as usize, mask)
}

/// Writes bytes `from..from + out.len()` of piece `id` (at most [`PIECE`] bytes in all):
/// the little-endian bytes of its masked words. 32 bytes at a time against the mask turned
/// to where they start, which the compiler makes vector instructions of.
pub(super) fn piece_bytes(key: &[u64; 4], id: u64, from: u64, out: &mut [u8]) {
    debug_assert!(from + out.len() as u64 <= PIECE);
    let (start, mask) = place(key, id);
    let from = from as usize;
    let window = &pool()[start * 8 + from..start * 8 + from + out.len()];
    let mut turned = mask;
    turned.rotate_left(from % 32);
    let mut dst = out.chunks_exact_mut(32);
    let mut src = window.chunks_exact(32);
    for (d, s) in (&mut dst).zip(&mut src) {
        let (Ok(d), Ok(s)) = (<&mut [u8; 32]>::try_from(d), <&[u8; 32]>::try_from(s)) else {
            continue;
        };
        *d = std::array::from_fn(|i| s[i] ^ turned[i]);
    }
    for ((d, s), m) in dst
        .into_remainder()
        .iter_mut()
        .zip(src.remainder())
        .zip(turned)
    {
        *d = s ^ m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole_piece(key: &[u64; 4], id: u64) -> Vec<u8> {
        let mut v = vec![0u8; PIECE as usize];
        piece_bytes(key, id, 0, &mut v);
        v
    }

    #[test]
    fn any_part_of_a_piece_is_that_part_of_the_whole() {
        let key = [1, 2, 3, 4];
        let all = whole_piece(&key, 9);
        for (from, len) in [
            (0, 1),
            (1, 7),
            (3, 40),
            (8, 24),
            (13, 4000),
            (4095, 1),
            (0, 4096),
        ] {
            let mut part = vec![0u8; len];
            piece_bytes(&key, 9, from as u64, &mut part);
            assert_eq!(part, all[from..from + len], "{from}+{len}");
        }
    }

    #[test]
    fn pieces_differ_by_key_and_id_and_share_no_run() {
        let a = whole_piece(&[1, 2, 3, 4], 0);
        let b = whole_piece(&[1, 2, 3, 4], 1);
        let c = whole_piece(&[1, 2, 3, 5], 0);
        assert_ne!(a, b);
        assert_ne!(a, c);
        // No 16-byte window of one piece occurs in another (a compressor's match).
        let windows: std::collections::HashSet<&[u8]> = a.windows(16).collect();
        for other in [&b, &c] {
            assert!(other.windows(16).all(|w| !windows.contains(w)));
        }
        // Nor within the piece itself, at another place.
        assert_eq!(windows.len(), a.len() - 15);
    }
}
