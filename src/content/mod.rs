//! Deterministic blob content: bytes that are a pure function of (seed, identity, size).
//!
//! Every host that shares a seed generates the same bytes and therefore the same digests
//! without talking to the others, and distinct identities give distinct, incompressible
//! content, so a registry cannot deduplicate what the workload says is different (the
//! zero-filled layers of earlier tools collapsed into one blob).
//!
//! Layout: the content is cut into 64 KiB blocks; block `b` is the output of a
//! xoshiro256++ generator (`rand_xoshiro`, a named PRNG with a documented, portable
//! little-endian output stream) seeded from the content key and `b`. Blocks make any offset
//! reachable in O(1), so a chunk can be regenerated for a retry or a resumed upload, and
//! nothing larger than one chunk is ever held in memory. The key is the SHA-256 of a
//! versioned domain tag, the seed and the identity; changing this scheme changes every
//! digest, which the golden test below guards.
//!
//! A layer ([`ContentSpec::layer`]) is the same key made into a tar of a file tree,
//! compressed as asked ([`layer`]); its bytes are as reachable at any offset, and its
//! uncompressed tar's digest (the config's `diff_id`) is computed in the same pass as the
//! blob's.

pub mod digest_cache;
pub mod hashing;
pub mod layer;
mod mix;

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use sha2::{Digest as _, Sha256};

use crate::digest::Digest;
use layer::{Frames, LayerForm};
use mix::{fill_from, splitmix64};

/// The seed of generated content when none is given; printed with every result so runs
/// can be repeated.
pub const DEFAULT_SEED: u64 = 1;

/// Bytes per generator block; also the chunk size of streamed bodies, and a layer's frame.
pub const BLOCK: u64 = layer::FRAME;

const DOMAIN: &[u8] = b"creb-rs/content/v1\0";

/// The name of the content scheme: digests computed under another are not these (v2: layers
/// are tar archives; v3: a layer's random pieces are masked windows of a shared pool; v4:
/// pieces of 16 KiB, consecutive literal segments in one block).
pub const SCHEME: &str = "creb-rs/content/v4";

/// A generated blob: its key, its size and what it is. Cheap to copy; holds no bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentSpec {
    key: [u64; 4],
    size: u64,
    form: Form,
}

/// What a blob's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// The key's pseudo-random bytes.
    Raw,
    /// An image layer: a tar of a file tree, compressed as the form says.
    Layer(LayerForm),
}

impl std::fmt::Debug for ContentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ContentSpec({:016x}…, {} bytes, {:?})",
            self.key[0], self.size, self.form
        )
    }
}

/// A content's two digests: the blob's SHA-256, and its diff digest (a layer's uncompressed
/// tar's SHA-256, the config's `diff_id`; plain content's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sums {
    pub blob: [u8; 32],
    pub diff: [u8; 32],
}

impl Sums {
    pub fn blob_digest(&self) -> Digest {
        Digest::from_sha256(self.blob)
    }

    pub fn diff_digest(&self) -> Digest {
        Digest::from_sha256(self.diff)
    }
}

/// Bytes of [`ContentSpec::to_bytes`].
pub const SPEC_BYTES: usize = 44;

impl ContentSpec {
    /// Content for `identity` under `seed`, `size` bytes long.
    pub fn new(seed: u64, identity: &[u8], size: u64) -> Self {
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update(seed.to_le_bytes());
        h.update((identity.len() as u64).to_le_bytes());
        h.update(identity);
        let out: [u8; 32] = h.finalize().into();
        let mut key = [0u64; 4];
        for (i, word) in key.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&out[i * 8..i * 8 + 8]);
            *word = u64::from_le_bytes(b);
        }
        ContentSpec {
            key,
            size,
            form: Form::Raw,
        }
    }

    /// An image layer for `identity` under `seed`, `size` bytes long, made as `form` says;
    /// a size below the form's smallest layer gives plain bytes ([`ContentSpec::is_layer`]
    /// says which, so the caller counts them).
    pub fn layer(seed: u64, identity: &[u8], size: u64, form: LayerForm) -> Self {
        let mut spec = ContentSpec::new(seed, identity, size);
        if size >= form.min_size() {
            spec.form = Form::Layer(form);
        }
        spec
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// What the bytes are.
    pub fn form(&self) -> Form {
        self.form
    }

    /// Whether the bytes are a tar layer (not plain bytes).
    pub fn is_layer(&self) -> bool {
        matches!(self.form, Form::Layer(_))
    }

    /// Its key, size and form as bytes (what `--digest-cache` files store): equal bytes,
    /// equal content.
    pub fn to_bytes(&self) -> [u8; SPEC_BYTES] {
        let mut out = [0u8; SPEC_BYTES];
        for (i, word) in self.key.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        out[32..40].copy_from_slice(&self.size.to_le_bytes());
        if let Form::Layer(form) = self.form {
            out[40..43].copy_from_slice(&form.to_bytes());
        }
        out
    }

    /// The content [`ContentSpec::to_bytes`] wrote (`None`: a form this version does not
    /// know).
    pub fn from_bytes(bytes: &[u8; SPEC_BYTES]) -> Option<ContentSpec> {
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let form = match bytes[40..44] {
            [0, 0, 0, 0] => Form::Raw,
            [a, b, c, 0] => Form::Layer(LayerForm::from_bytes([a, b, c])?),
            _ => return None,
        };
        Some(ContentSpec {
            key: [word(0), word(8), word(16), word(24)],
            size: word(32),
            form,
        })
    }

    fn frames(&self) -> Option<Frames> {
        match self.form {
            Form::Raw => None,
            Form::Layer(form) => Some(Frames::new(self.key, form, self.size)),
        }
    }

    fn block_rng(&self, block: u64) -> Xoshiro256PlusPlus {
        let mut seed = [0u8; 32];
        for (i, word) in self.key.iter().enumerate() {
            let mixed = splitmix64(word ^ splitmix64(block.wrapping_add(i as u64)));
            seed[i * 8..i * 8 + 8].copy_from_slice(&mixed.to_le_bytes());
        }
        Xoshiro256PlusPlus::from_seed(seed)
    }

    /// Writes the content bytes at `offset..offset + buf.len()` into `buf`.
    ///
    /// # Panics
    /// If the range reaches past the end of the content (a caller bug, not an input error).
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        assert!(
            offset + buf.len() as u64 <= self.size,
            "content range {}..{} past size {}",
            offset,
            offset + buf.len() as u64,
            self.size
        );
        if let Some(mut frames) = self.frames() {
            frames.fill(offset, buf);
            return;
        }
        let mut written = 0usize;
        let mut pos = offset;
        while written < buf.len() {
            let block = pos / BLOCK;
            let within = (pos % BLOCK) as usize;
            let take = (BLOCK as usize - within).min(buf.len() - written);
            let mut rng = self.block_rng(block);
            fill_from(&mut rng, within, &mut buf[written..written + take]);
            written += take;
            pos += take as u64;
        }
    }

    /// A chunked reader over `range` of the content.
    pub fn reader(&self, range: Range<u64>) -> ContentReader {
        assert!(range.start <= range.end && range.end <= self.size);
        ContentReader {
            spec: *self,
            pos: range.start,
            end: range.end,
            tap: None,
            frames: self.frames().map(Box::new),
        }
    }

    /// SHA-256 of the whole content, generated and hashed in one pass.
    pub fn digest(&self) -> Digest {
        Digest::from_sha256(self.sha256())
    }

    /// The raw SHA-256 of the whole content (32 bytes; what catalogs keep).
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256_while(|_| true).unwrap_or_default()
    }

    /// [`ContentSpec::sha256`], telling `go_on` the bytes of each block hashed: `None` as
    /// soon as it answers `false` (a stop), so a large blob does not hold a stop up.
    pub fn sha256_while(&self, go_on: impl FnMut(u64) -> bool) -> Option<[u8; 32]> {
        self.digests_while(go_on).map(|(blob, _)| blob)
    }

    /// The blob's SHA-256 and its diff digest (the uncompressed tar's for a layer, the
    /// blob's own for plain bytes), computed in one pass, telling `go_on` as
    /// [`ContentSpec::sha256_while`] does.
    pub fn digests_while(
        &self,
        mut go_on: impl FnMut(u64) -> bool,
    ) -> Option<([u8; 32], [u8; 32])> {
        if let Form::Layer(form) = self.form {
            return layer::digests_while(self.key, form, self.size, go_on);
        }
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; self.size.min(BLOCK) as usize];
        let mut pos = 0u64;
        while pos < self.size {
            let take = (self.size - pos).min(BLOCK) as usize;
            self.fill(pos, &mut buf[..take]);
            hasher.update(&buf[..take]);
            pos += take as u64;
            if !go_on(take as u64) {
                return None;
            }
        }
        let sha: [u8; 32] = hasher.finalize().into();
        Some((sha, sha))
    }

    /// The blob's SHA-256 and its diff digest ([`ContentSpec::digests_while`]).
    pub fn digests(&self) -> ([u8; 32], [u8; 32]) {
        self.digests_while(|_| true).unwrap_or_default()
    }

    /// [`ContentSpec::digests`] as [`Sums`].
    pub fn sums(&self) -> Sums {
        let (blob, diff) = self.digests();
        Sums { blob, diff }
    }
}

/// Checks a body against the content it should be, as its bytes arrive: each chunk is
/// compared with the same bytes generated in step (the generator runs at memory speed, far
/// faster than SHA-256), so a read of content creb-rs generated is verified without hashing.
/// Equal bytes mean an equal digest. Nothing is buffered: words are generated and compared
/// one at a time.
#[derive(Debug, Clone)]
pub struct ContentCheck {
    spec: ContentSpec,
    /// Bytes checked so far.
    pos: u64,
    /// The generator of the block `pos` is in.
    rng: Option<Xoshiro256PlusPlus>,
    /// The word in progress when a chunk ended inside one, and how much of it was used.
    word: [u8; 8],
    used: usize,
    /// A layer's frames, made again to compare with (one frame held at a time).
    frames: Option<Box<Frames>>,
}

impl ContentCheck {
    pub fn new(spec: ContentSpec) -> Self {
        ContentCheck {
            spec,
            pos: 0,
            rng: None,
            word: [0; 8],
            used: 8,
            frames: spec.frames().map(Box::new),
        }
    }

    /// [`ContentCheck::check`] for a layer: each chunk compared with the frame it falls in.
    fn check_frames(&mut self, mut chunk: &[u8]) -> Result<(), u64> {
        let Some(frames) = self.frames.as_mut() else {
            return Err(self.pos);
        };
        while !chunk.is_empty() {
            if self.pos >= self.spec.size {
                return Err(self.pos);
            }
            let (start, want) = frames.frame(frames.frame_of(self.pos), None);
            let within = (self.pos - start) as usize;
            let n = (want.len() - within).min(chunk.len());
            if !crate::digest::same_bytes(&chunk[..n], &want[within..within + n]) {
                let at = first_difference(&chunk[..n], &want[within..within + n]);
                return Err(self.pos + at as u64);
            }
            self.pos += n as u64;
            chunk = &chunk[n..];
        }
        Ok(())
    }

    /// Bytes checked so far.
    pub fn checked(&self) -> u64 {
        self.pos
    }

    /// Whether every byte of the content has been seen (and matched).
    pub fn complete(&self) -> bool {
        self.pos == self.spec.size
    }

    /// Checks the next bytes of the body; `Err(offset)` at the first byte that differs from
    /// the content, or that lies past its end.
    pub fn check(&mut self, mut chunk: &[u8]) -> Result<(), u64> {
        if self.frames.is_some() {
            return self.check_frames(chunk);
        }
        while !chunk.is_empty() {
            if self.pos >= self.spec.size {
                return Err(self.pos);
            }
            if self.used == 8 && self.pos.is_multiple_of(BLOCK) {
                self.rng = Some(self.spec.block_rng(self.pos / BLOCK));
            }
            // Set at every block's start, the first included: checking starts at byte 0.
            let Some(rng) = self.rng.as_mut() else {
                return Err(self.pos);
            };
            // Never past the content's end: what remains of it bounds every comparison.
            let left = (self.spec.size - self.pos) as usize;
            if self.used < 8 {
                let n = (8 - self.used).min(chunk.len()).min(left);
                if chunk[..n] != self.word[self.used..self.used + n] {
                    let at = first_difference(&chunk[..n], &self.word[self.used..]);
                    return Err(self.pos + at as u64);
                }
                self.used += n;
                self.pos += n as u64;
                chunk = &chunk[n..];
                continue;
            }
            let to_block_end = (BLOCK - self.pos % BLOCK) as usize;
            let words = chunk.len().min(left).min(to_block_end) / 8;
            for (i, got) in chunk[..words * 8].chunks_exact(8).enumerate() {
                let want = rng.next_u64();
                let got = u64::from_le_bytes(got.try_into().unwrap_or_default());
                if got != want {
                    let at = first_difference(&got.to_le_bytes(), &want.to_le_bytes());
                    return Err(self.pos + (i * 8 + at) as u64);
                }
            }
            self.pos += (words * 8) as u64;
            chunk = &chunk[words * 8..];
            if !chunk.is_empty() && words * 8 < to_block_end {
                // A word the chunk (or the content) ends inside: keep what is left of it.
                self.word = rng.next_u64().to_le_bytes();
                self.used = 0;
            }
        }
        Ok(())
    }
}

/// Where two byte strings first differ (their common length when one is a prefix).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// Yields the content of a range in chunks of at most [`BLOCK`] bytes, aligned to blocks.
#[derive(Debug, Clone)]
pub struct ContentReader {
    spec: ContentSpec,
    pos: u64,
    end: u64,
    /// Hears every chunk as it is generated (a digest computed while the bytes are sent).
    tap: Option<Arc<SendHash>>,
    /// A layer's frames (the one in progress held).
    frames: Option<Box<Frames>>,
}

impl ContentReader {
    pub fn remaining(&self) -> u64 {
        self.end - self.pos
    }

    /// The same reader, telling `tap` every chunk it yields.
    pub fn tapped(mut self, tap: Option<Arc<SendHash>>) -> ContentReader {
        self.tap = tap;
        self
    }
}

/// The SHA-256 of generated content, computed from the bytes as they are generated to be
/// sent (an upload whose closing request carries the digest), so no content is hashed
/// before its upload starts. The bytes are hashed in order, once: a range generated again
/// (a request sent again after a challenge or a lost chunk) or out of order is skipped,
/// and whatever was never seen in order is generated at [`SendHash::finish`]. The content
/// is deterministic, so the digest is always the content's, however the sending went.
#[derive(Debug)]
pub struct SendHash {
    spec: ContentSpec,
    state: std::sync::Mutex<(u64, Sha256)>,
    /// A layer's diff digest: the next frame whose uncompressed bytes it needs, and the
    /// hash of those before.
    diff: std::sync::Mutex<(u64, Sha256)>,
}

/// Two are equal when they hash the same content (they end with the same digest).
impl PartialEq for SendHash {
    fn eq(&self, other: &SendHash) -> bool {
        self.spec == other.spec
    }
}

impl Eq for SendHash {}

impl SendHash {
    pub fn new(spec: ContentSpec) -> Arc<SendHash> {
        Arc::new(SendHash {
            spec,
            state: std::sync::Mutex::new((0, Sha256::new())),
            diff: std::sync::Mutex::new((0, Sha256::new())),
        })
    }

    /// Frame `k` of a layer is about to be made: the diff hash, if `k` is the frame it
    /// needs next (`go` hears it and the frame counts as hashed).
    fn frame_made<R>(&self, k: u64, go: impl FnOnce(Option<&mut Sha256>) -> R) -> R {
        match self.diff.lock() {
            Ok(mut diff) if diff.0 == k => {
                diff.0 += 1;
                go(Some(&mut diff.1))
            }
            _ => go(None),
        }
    }

    /// The diff digest: a layer's uncompressed tar's SHA-256 (the frames never made in order
    /// made now), plain content's own digest.
    pub fn finish_diff(&self) -> [u8; 32] {
        if !self.spec.is_layer() {
            return self.finish();
        }
        let Some(mut frames) = self.spec.frames() else {
            return self.finish();
        };
        let Ok(state) = self.diff.lock() else {
            return self.spec.digests().1;
        };
        let (next, mut hasher) = (state.0, state.1.clone());
        drop(state);
        let last = frames.frame_of(self.spec.size.saturating_sub(1));
        for k in next..=last {
            frames.frame(k, Some(&mut hasher));
        }
        hasher.finalize().into()
    }

    /// The content this hashes.
    pub fn spec(&self) -> &ContentSpec {
        &self.spec
    }

    /// Bytes `at..at + bytes.len()` of the content were generated.
    pub fn saw(&self, at: u64, bytes: &[u8]) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let (next, hasher) = &mut *state;
        let end = at + bytes.len() as u64;
        if at <= *next && *next < end {
            hasher.update(&bytes[(*next - at) as usize..]);
            *next = end;
        }
    }

    /// Bytes hashed in order so far.
    pub fn hashed(&self) -> u64 {
        self.state.lock().map_or(0, |s| s.0)
    }

    /// The content's SHA-256: what was seen, and the rest generated now.
    pub fn finish(&self) -> [u8; 32] {
        let Ok(state) = self.state.lock() else {
            return self.spec.sha256();
        };
        let (next, mut hasher) = (state.0, state.1.clone());
        drop(state);
        for chunk in self.spec.reader(next..self.spec.size) {
            hasher.update(&chunk);
        }
        hasher.finalize().into()
    }
}

impl Iterator for ContentReader {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.pos >= self.end {
            return None;
        }
        if let Some(frames) = self.frames.as_mut() {
            let k = frames.frame_of(self.pos);
            let (start, bytes) = match (&self.tap, frames.holds(k)) {
                (Some(tap), false) => tap.frame_made(k, |diff| frames.frame(k, diff)),
                _ => frames.frame(k, None),
            };
            // Chunks end at block boundaries, as plain content's do.
            let to_boundary = BLOCK - self.pos % BLOCK;
            let within = (self.pos - start) as usize;
            let take = (bytes.len() - within)
                .min(to_boundary as usize)
                .min((self.end - self.pos) as usize);
            let buf = Bytes::copy_from_slice(&bytes[within..within + take]);
            if let Some(tap) = &self.tap {
                tap.saw(self.pos, &buf);
            }
            self.pos += take as u64;
            return Some(buf);
        }
        let to_boundary = BLOCK - self.pos % BLOCK;
        let take = to_boundary.min(self.end - self.pos) as usize;
        let mut buf = BytesMut::zeroed(take);
        self.spec.fill(self.pos, &mut buf);
        if let Some(tap) = &self.tap {
            tap.saw(self.pos, &buf);
        }
        self.pos += take as u64;
        Some(buf.freeze())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining().div_ceil(BLOCK) as usize;
        (n, Some(n + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Hasher;
    use proptest::prelude::*;

    fn all_bytes(spec: &ContentSpec) -> Vec<u8> {
        let mut v = vec![0u8; spec.size() as usize];
        spec.fill(0, &mut v);
        v
    }

    /// Pins the generator: if this changes, every host and every earlier result disagrees
    /// with the new digests. Bump `DOMAIN` deliberately if the scheme must change.
    #[test]
    fn golden_digest() {
        let spec = ContentSpec::new(42, b"golden", 100_000);
        assert_eq!(
            spec.digest().as_str(),
            "sha256:e6785ec9d501a1a3187d5cce9ae275f0062d7e61ad373e34f93bc0d9a04bf2e2"
        );
    }

    /// The block stream is plain xoshiro256++ (Blackman and Vigna's reference step) over the
    /// block seed, so any implementation in any language can reproduce the content.
    #[test]
    fn stream_is_reference_xoshiro256plusplus() {
        let spec = ContentSpec::new(3, b"ref", BLOCK + 24);
        for block in [0u64, 1] {
            let mut seed = [0u8; 32];
            for (i, word) in spec.key.iter().enumerate() {
                let mixed = splitmix64(word ^ splitmix64(block.wrapping_add(i as u64)));
                seed[i * 8..i * 8 + 8].copy_from_slice(&mixed.to_le_bytes());
            }
            let mut st = [0u64; 4];
            for (i, w) in st.iter_mut().enumerate() {
                *w = u64::from_le_bytes(seed[i * 8..i * 8 + 8].try_into().unwrap());
            }
            let mut expected = Vec::new();
            for _ in 0..3 {
                let result = st[0]
                    .wrapping_add(st[3])
                    .rotate_left(23)
                    .wrapping_add(st[0]);
                let t = st[1] << 17;
                st[2] ^= st[0];
                st[3] ^= st[1];
                st[1] ^= st[2];
                st[0] ^= st[3];
                st[2] ^= t;
                st[3] = st[3].rotate_left(45);
                expected.extend_from_slice(&result.to_le_bytes());
            }
            let mut got = vec![0u8; 24];
            spec.fill(block * BLOCK, &mut got);
            assert_eq!(got, expected, "block {block}");
        }
    }

    #[test]
    fn deterministic_and_distinct() {
        let a = ContentSpec::new(1, b"layer-0", 300_000);
        assert_eq!(
            all_bytes(&a),
            all_bytes(&ContentSpec::new(1, b"layer-0", 300_000))
        );
        let others = [
            ContentSpec::new(1, b"layer-1", 300_000),
            ContentSpec::new(2, b"layer-0", 300_000),
        ];
        for o in others {
            assert_ne!(a.digest(), o.digest());
        }
        // Blocks of one blob differ from each other too: no repeated 64 KiB pattern.
        let bytes = all_bytes(&a);
        assert_ne!(
            &bytes[..BLOCK as usize],
            &bytes[BLOCK as usize..2 * BLOCK as usize]
        );
    }

    #[test]
    fn digest_matches_reader() {
        // Below, at and around one block: the digest's buffer is sized to the content.
        for size in [1, 1024, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17] {
            let spec = ContentSpec::new(7, b"x", size);
            let mut h = Hasher::new();
            let mut n = 0;
            for chunk in spec.reader(0..spec.size()) {
                n += chunk.len() as u64;
                h.update(&chunk);
            }
            assert_eq!(n, spec.size());
            assert_eq!(h.finish(), spec.digest(), "size {size}");
        }
    }

    #[test]
    fn empty_content() {
        let spec = ContentSpec::new(0, b"", 0);
        assert_eq!(spec.digest(), Digest::sha256_of(b""));
        assert_eq!(spec.reader(0..0).count(), 0);
    }

    #[test]
    fn a_check_finds_every_way_a_body_can_be_wrong() {
        let spec = ContentSpec::new(5, b"check", 3 * BLOCK + 13);
        let good = all_bytes(&spec);
        let whole = |bytes: &[u8]| {
            let mut c = ContentCheck::new(spec);
            c.check(bytes).map(|()| c.complete())
        };
        assert_eq!(whole(&good), Ok(true));
        for at in [0usize, 7, 8, BLOCK as usize, good.len() - 1] {
            let mut flipped = good.clone();
            flipped[at] ^= 0x40;
            assert_eq!(whole(&flipped), Err(at as u64), "a byte flipped at {at}");
        }
        assert_eq!(
            whole(&good[..good.len() - 1]),
            Ok(false),
            "the last byte missing"
        );
        let mut extra = good.clone();
        extra.push(0);
        assert_eq!(whole(&extra), Err(good.len() as u64), "one byte too many");
        let other = all_bytes(&ContentSpec::new(5, b"other", 3 * BLOCK + 13));
        assert!(whole(&other).is_err(), "another blob's body");
    }

    #[test]
    fn a_digest_while_sending_is_the_contents_however_the_bytes_went() {
        let spec = ContentSpec::new(3, b"send", 2 * BLOCK + 77);
        let want = spec.sha256();
        // Sent once, in order.
        let tap = SendHash::new(spec);
        assert_eq!(
            spec.reader(0..spec.size())
                .tapped(Some(tap.clone()))
                .count(),
            3
        );
        assert_eq!(tap.hashed(), spec.size());
        assert_eq!(tap.finish(), want);
        // A first request cut short and sent again (a challenge), then the rest in a second
        // request: every byte hashed once.
        let tap = SendHash::new(spec);
        let _ = spec.reader(0..spec.size()).tapped(Some(tap.clone())).next();
        let _ = spec.reader(0..BLOCK + 10).tapped(Some(tap.clone())).count();
        let _ = spec
            .reader(BLOCK + 10..spec.size())
            .tapped(Some(tap.clone()))
            .count();
        assert_eq!(tap.finish(), want);
        // Out of order, or never sent: what is missing is generated at the end.
        let tap = SendHash::new(spec);
        let _ = spec
            .reader(BLOCK..spec.size())
            .tapped(Some(tap.clone()))
            .count();
        assert_eq!(tap.hashed(), 0);
        assert_eq!(tap.finish(), want);
        assert_eq!(
            SendHash::new(ContentSpec::new(3, b"e", 0)).finish(),
            ContentSpec::new(3, b"e", 0).sha256()
        );
    }

    fn layer(identity: &[u8], size: u64) -> ContentSpec {
        use layer::{Compression, LayerForm};
        ContentSpec::layer(
            5,
            identity,
            size,
            LayerForm::new(Compression::Gzip, 0.35).unwrap(),
        )
    }

    #[test]
    fn a_layer_is_checked_and_hashed_as_plain_content_is() {
        let spec = layer(b"check", 3 * BLOCK + 4099);
        assert!(spec.is_layer());
        let good = all_bytes(&spec);
        let whole = |bytes: &[u8]| {
            let mut c = ContentCheck::new(spec);
            c.check(bytes).map(|()| c.complete())
        };
        assert_eq!(whole(&good), Ok(true));
        for at in [0usize, 9, BLOCK as usize, good.len() - 1] {
            let mut flipped = good.clone();
            flipped[at] ^= 0x40;
            assert_eq!(whole(&flipped), Err(at as u64), "a byte flipped at {at}");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert_eq!(whole(&extra), Err(good.len() as u64));
        // Cut anywhere, in any pieces: the same verdict.
        let mut check = ContentCheck::new(spec);
        for piece in good.chunks(7_777) {
            check.check(piece).unwrap();
        }
        assert!(check.complete());
        // The digests while sending are the layer's, however the bytes went; the diff
        // digest is its uncompressed tar's.
        let (blob, diff) = spec.digests();
        assert_eq!(blob, spec.sha256());
        assert_ne!(blob, diff);
        let tap = SendHash::new(spec);
        let _ = spec
            .reader(0..spec.size())
            .tapped(Some(tap.clone()))
            .count();
        assert_eq!((tap.finish(), tap.finish_diff()), (blob, diff));
        let tap = SendHash::new(spec);
        let _ = spec
            .reader(BLOCK..spec.size())
            .tapped(Some(tap.clone()))
            .count();
        let _ = spec.reader(0..10).tapped(Some(tap.clone())).count();
        assert_eq!((tap.finish(), tap.finish_diff()), (blob, diff));
        // Too small for a tar: plain bytes, its own diff.
        let small = layer(b"small", 20);
        assert!(!small.is_layer());
        assert_eq!(small.digests().0, small.digests().1);
        for c in [
            layer::Compression::Gzip,
            layer::Compression::Zstd,
            layer::Compression::None,
        ] {
            let form = layer::LayerForm::new(c, 0.35).unwrap();
            let min = form.min_size();
            assert!(ContentSpec::layer(1, b"x", min, form).is_layer());
            assert!(
                !ContentSpec::layer(1, b"x", min - 1, form).is_layer(),
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_layers_bytes_name_its_form() {
        let spec = layer(b"form", 100_000);
        let back = ContentSpec::from_bytes(&spec.to_bytes()).unwrap();
        assert_eq!(back, spec);
        assert_ne!(
            spec.to_bytes(),
            ContentSpec::new(5, b"form", 100_000).to_bytes()
        );
        let mut unknown = spec.to_bytes();
        unknown[40] = 9;
        assert_eq!(ContentSpec::from_bytes(&unknown), None);
    }

    proptest! {
        #[test]
        fn a_check_is_the_same_however_the_body_is_cut(
            size in 1u64..200_000,
            cuts in proptest::collection::vec(1usize..20_000, 1..40),
            flip in proptest::option::of(0u64..200_000),
        ) {
            let spec = ContentSpec::new(11, b"cut", size);
            let mut body = all_bytes(&spec);
            let flipped = flip.map(|f| f % size);
            if let Some(f) = flipped {
                body[f as usize] ^= 1;
            }
            let mut check = ContentCheck::new(spec);
            let mut rest = &body[..];
            let mut result = Ok(());
            for cut in cuts.iter().cycle() {
                if rest.is_empty() || result.is_err() {
                    break;
                }
                let n = (*cut).min(rest.len());
                result = check.check(&rest[..n]);
                rest = &rest[n..];
            }
            match flipped {
                Some(f) => prop_assert_eq!(result, Err(f)),
                None => {
                    prop_assert_eq!(result, Ok(()));
                    prop_assert!(check.complete());
                }
            }
        }

        #[test]
        fn random_access_equals_sequential(size in 1u64..200_000, a in 0u64..200_000, len in 0u64..70_000) {
            let spec = ContentSpec::new(9, b"ra", size);
            let whole = all_bytes(&spec);
            let start = a % size;
            let end = (start + len).min(size);
            let mut part = vec![0u8; (end - start) as usize];
            spec.fill(start, &mut part);
            prop_assert_eq!(&part[..], &whole[start as usize..end as usize]);
            let joined: Vec<u8> = spec.reader(start..end).flat_map(|b| b.to_vec()).collect();
            prop_assert_eq!(&joined[..], &whole[start as usize..end as usize]);
        }
    }
}
