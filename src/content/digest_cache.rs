//! `--digest-cache FILE`: the SHA-256 of generated content, kept between the phases of a
//! run and shared between hosts, so the catalog's digests are computed once. An entry is
//! keyed by the content itself (its key, which the seed and identity make, and its size),
//! so one file serves any trace, seed and scale. Never trusted blindly: a file of another
//! content scheme is ignored, and on load a sample of the entries the run uses (the
//! smallest, so it is cheap) is recomputed; one wrong entry makes the whole file stale,
//! and every digest is computed afresh. A wrong entry the sample missed is still caught at
//! the first upload (the registry checks the digest) or verified read.
//!
//! Format: a header line `creb-rs digest cache <scheme>\n`, then 108-byte entries (the
//! content's 44 bytes, [`ContentSpec::to_bytes`], its SHA-256, then its diff digest: a
//! layer's uncompressed tar's SHA-256, plain content's own), in no order.
//!
//! Beside it, `FILE.frames` keeps gzip layers' frame CRC-32s (the trailers of their members,
//! `content::layer::known`), so a run after its prewarm hashes no uncompressed byte
//! again either: a header line `creb-rs frame crcs <scheme>\n`, then per layer its 44 bytes,
//! its frame count (u32, little-endian) and a CRC per frame (u32 each). Taken only for
//! layers the digest file holds, checked on the same sample, written whole when it grew.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::content::layer::{frame_count, known, known_layer, Compression};
use crate::content::{ContentSpec, Form, SCHEME, SPEC_BYTES};
use crate::fast_hash::FastHashMap;

const ENTRY: usize = SPEC_BYTES + 64;

/// How many entries a load recomputes, at most.
pub const SAMPLE: usize = 16;

/// How many bytes of content a load recomputes, at most, beyond its smallest entry: a
/// cache of large blobs is checked on its smallest one or few, not on 16 of them (16 x
/// 128 MiB would cost a core a second, every run).
pub const SAMPLE_BYTES: u64 = 64 << 20;

fn header() -> String {
    let magic = String::from_utf8_lossy(crate::outfile::DIGEST_CACHE_MAGIC);
    format!("{magic}{SCHEME}\n")
}

/// The cache of one run.
#[derive(Debug, Default)]
pub struct DigestCache {
    path: PathBuf,
    entries: FastHashMap<ContentSpec, [u8; 32]>,
    /// Layers' diff digests (plain content's is its digest).
    diffs: FastHashMap<ContentSpec, [u8; 32]>,
    /// Entries added since the load.
    added: usize,
    /// Why the file was set aside, if it was (another scheme, unreadable, stale).
    pub set_aside: Option<String>,
    /// Trailing bytes that are not a whole entry, ignored (a writer stopped mid-entry, or
    /// another program wrote there): said by the caller, never passed over in silence.
    pub cut: u64,
    /// The companion file of frame CRCs proved wrong: removed before the next save.
    frames_stale: bool,
}

impl DigestCache {
    /// Reads `path` (a missing file is an empty cache). A file that is not a cache of this
    /// content scheme is set aside (said in [`DigestCache::set_aside`]), never an error:
    /// the digests are then computed.
    pub fn load(path: &Path) -> DigestCache {
        let mut cache = DigestCache {
            path: path.to_path_buf(),
            ..DigestCache::default()
        };
        let mut bytes = Vec::new();
        match std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return cache,
            Err(e) => {
                cache.set_aside = Some(format!("cannot read it: {e}"));
                return cache;
            }
        }
        let header = header();
        let Some(body) = bytes.strip_prefix(header.as_bytes()) else {
            cache.set_aside = Some(format!(
                "not a digest cache of {SCHEME} (another version of creb-rs, or another file)"
            ));
            return cache;
        };
        // A last entry cut short (a writer stopped mid-entry) is dropped; the whole ones stand.
        cache.cut = (body.len() % ENTRY) as u64;
        cache.entries.reserve(body.len() / ENTRY);
        for entry in body.chunks_exact(ENTRY) {
            let mut spec = [0u8; SPEC_BYTES];
            spec.copy_from_slice(&entry[..SPEC_BYTES]);
            let mut sha = [0u8; 32];
            sha.copy_from_slice(&entry[SPEC_BYTES..SPEC_BYTES + 32]);
            let mut diff = [0u8; 32];
            diff.copy_from_slice(&entry[SPEC_BYTES + 32..]);
            // A form this version does not know is no entry of its.
            let Some(spec) = ContentSpec::from_bytes(&spec) else {
                continue;
            };
            if spec.is_layer() {
                cache.diffs.insert(spec, diff);
            }
            cache.entries.insert(spec, sha);
        }
        load_frames(&frames_path(path), &cache.entries);
        cache
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The digest of `spec`, if held.
    pub fn get(&self, spec: &ContentSpec) -> Option<[u8; 32]> {
        self.entries.get(spec).copied()
    }

    /// The diff digest of `spec` (a layer's uncompressed tar's), if held.
    pub fn diff(&self, spec: &ContentSpec) -> Option<[u8; 32]> {
        if spec.is_layer() {
            self.diffs.get(spec).copied()
        } else {
            self.get(spec)
        }
    }

    /// Recomputes the smallest [`SAMPLE`] entries among `used` that the cache holds (no more
    /// of them than fit in [`SAMPLE_BYTES`], the smallest always); the first that differs
    /// makes the cache stale: emptied and set aside. Keeps only the sample, never a list
    /// of everything used.
    pub fn check<'a>(
        &mut self,
        used: impl IntoIterator<Item = &'a ContentSpec>,
    ) -> Result<usize, String> {
        let mut sample: Vec<&ContentSpec> = Vec::with_capacity(SAMPLE + 1);
        for spec in used {
            if !self.entries.contains_key(spec) || sample.contains(&spec) {
                continue;
            }
            let at = sample.partition_point(|s| s.size() <= spec.size());
            if at < SAMPLE {
                sample.insert(at, spec);
                sample.truncate(SAMPLE);
            }
        }
        let mut bytes = 0u64;
        let mut checked = 0;
        for (i, spec) in sample.into_iter().enumerate() {
            bytes += spec.size();
            if i > 0 && bytes > SAMPLE_BYTES {
                break;
            }
            checked += 1;
            let held = gzip_layer(spec).and_then(|l| known::get(&l));
            let (sha, diff) = spec.digests();
            let made = gzip_layer(spec).and_then(|l| known::get(&l));
            let frames_wrong = held.is_some() && held != made;
            if self.entries.get(spec) != Some(&sha) || self.diff(spec) != Some(diff) || frames_wrong
            {
                let why = format!(
                    "stale: the {} it holds for a {} byte blob is not that blob's",
                    if frames_wrong { "frame CRCs" } else { "digest" },
                    spec.size()
                );
                known::forget(self.entries.keys().filter_map(gzip_layer));
                self.entries.clear();
                self.diffs.clear();
                self.frames_stale = true;
                self.set_aside = Some(why.clone());
                return Err(why);
            }
        }
        Ok(checked)
    }

    /// Remembers a computed digest and diff digest.
    pub fn insert(&mut self, spec: ContentSpec, sha256: [u8; 32], diff: [u8; 32]) {
        if spec.is_layer() {
            self.diffs.insert(spec, diff);
        }
        if self.entries.insert(spec, sha256).is_none() {
            self.added += 1;
        }
    }

    /// Entries added since the load.
    pub fn added(&self) -> usize {
        self.added
    }

    /// Writes the cache (under a temporary name, then renamed, so a host reading it never
    /// sees half a file) when it grew or was set aside; a companion file of frame CRCs
    /// proved wrong is removed. The frame CRCs themselves are written by [`save_frames`]
    /// (their failure never keeps the digests from being written).
    pub fn save(&self) -> std::io::Result<bool> {
        if self.frames_stale {
            match std::fs::remove_file(frames_path(&self.path)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        if self.added == 0 && self.set_aside.is_none() {
            return Ok(false);
        }
        // Another file may have come to stand there since the load: it is never replaced.
        if let Some(head) = crate::outfile::head(&self.path)? {
            if !crate::outfile::Kind::DigestCache.matches(&head) {
                return Err(std::io::Error::other(format!(
                    "{} is not a digest cache; it is left as it is",
                    self.path.display()
                )));
            }
        }
        let tmp = self
            .path
            .with_extension(format!("tmp-{}", std::process::id()));
        {
            let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            out.write_all(header().as_bytes())?;
            for (spec, sha) in &self.entries {
                out.write_all(&spec.to_bytes())?;
                out.write_all(sha)?;
                out.write_all(&self.diffs.get(spec).copied().unwrap_or(*sha))?;
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        Ok(true)
    }
}

/// Empties the cache at `path` (its header alone stays) when a registry refused a digest it
/// held: the next run computes every digest afresh. A file that is not a digest cache is left
/// alone.
pub fn mark_stale(path: &Path) -> std::io::Result<()> {
    match crate::outfile::head(path)? {
        Some(head) if crate::outfile::Kind::DigestCache.matches(&head) => {}
        _ => return Ok(()),
    }
    match std::fs::remove_file(frames_path(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, header())?;
    std::fs::rename(&tmp, path)
}

/// Adds digests to a cache file as they are learned (a prewarm hashing what it sends), so
/// a prewarm stopped halfway leaves every digest it learned, for the run phase and other
/// hosts. Entries are appended whole (108 bytes, one write each); a file of another scheme
/// is left alone (nothing is appended), a last entry cut short is cut off first.
#[derive(Debug)]
pub struct Appender {
    file: std::sync::Mutex<std::fs::File>,
    /// Trailing bytes that were not a whole entry, cut off before the first append; the
    /// caller says so.
    pub cut: u64,
}

impl Appender {
    pub fn open(path: &Path) -> std::io::Result<Appender> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let header = header();
        let len = file.metadata()?.len();
        let mut cut = 0;
        if len == 0 {
            file.write_all(header.as_bytes())?;
        } else {
            let mut start = vec![0u8; header.len()];
            let whole = len >= header.len() as u64 && file.read_exact(&mut start).is_ok();
            if !whole || start != header.as_bytes() {
                return Err(std::io::Error::other(format!(
                    "{} is not a digest cache of {SCHEME}",
                    path.display()
                )));
            }
            let body = len - header.len() as u64;
            cut = body % ENTRY as u64;
            if cut != 0 {
                file.set_len(len - cut)?;
            }
        }
        Ok(Appender {
            file: std::sync::Mutex::new(file),
            cut,
        })
    }

    /// Appends one digest and its diff digest.
    pub fn append(
        &self,
        spec: &ContentSpec,
        sha256: &[u8; 32],
        diff: &[u8; 32],
    ) -> std::io::Result<()> {
        let mut entry = [0u8; ENTRY];
        entry[..SPEC_BYTES].copy_from_slice(&spec.to_bytes());
        entry[SPEC_BYTES..SPEC_BYTES + 32].copy_from_slice(sha256);
        entry[SPEC_BYTES + 32..].copy_from_slice(diff);
        let mut file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("the digest cache's writer failed"))?;
        file.write_all(&entry)
    }
}

/// The companion file of the digest cache at `path`: its layers' frame CRCs.
pub fn frames_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".frames");
    PathBuf::from(p)
}

fn frames_header() -> String {
    format!("creb-rs frame crcs {SCHEME}\n")
}

/// Bytes of a frame file read at most: what the store holds, in records of 48 bytes and 4
/// per CRC (a larger file is not read).
const MAX_FRAMES_FILE: u64 = 2 * known::MAX_BYTES as u64;

/// `spec`'s layer as the frame store names it, when it is a gzip layer.
fn gzip_layer(spec: &ContentSpec) -> Option<known::Layer> {
    match spec.form {
        Form::Layer(form) if form.compression == Compression::Gzip => {
            Some(known_layer(spec.key, form, spec.size))
        }
        _ => None,
    }
}

/// The frame CRCs the file at `path` holds, by layer (none when it is missing, too large
/// or of another scheme; a last record cut short is dropped).
fn read_frames(path: &Path) -> Vec<(ContentSpec, Arc<[u32]>)> {
    let mut found = Vec::new();
    let Ok(file) = std::fs::File::open(path) else {
        return found;
    };
    if file.metadata().map_or(true, |m| m.len() > MAX_FRAMES_FILE) {
        return found;
    }
    let mut bytes = Vec::new();
    if file.take(MAX_FRAMES_FILE).read_to_end(&mut bytes).is_err() {
        return found;
    }
    let Some(mut body) = bytes.strip_prefix(frames_header().as_bytes()) else {
        return found;
    };
    while body.len() >= SPEC_BYTES + 4 {
        let mut head = [0u8; SPEC_BYTES];
        head.copy_from_slice(&body[..SPEC_BYTES]);
        let mut count = [0u8; 4];
        count.copy_from_slice(&body[SPEC_BYTES..SPEC_BYTES + 4]);
        let n = u32::from_le_bytes(count) as usize;
        let Some(crcs) = body.get(SPEC_BYTES + 4..SPEC_BYTES + 4 + 4 * n) else {
            break;
        };
        let spec = ContentSpec::from_bytes(&head)
            .filter(|s| gzip_layer(s).is_some() && frame_count(s.size) == n as u64);
        if let Some(spec) = spec {
            let crcs: Arc<[u32]> = crcs
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            found.push((spec, crcs));
        }
        body = &body[SPEC_BYTES + 4 + 4 * n..];
    }
    found
}

/// Takes the frame CRCs at `path` of the layers `entries` holds (the others are passed
/// over: their CRCs are made again when needed).
fn load_frames(path: &Path, entries: &FastHashMap<ContentSpec, [u8; 32]>) {
    for (spec, crcs) in read_frames(path) {
        if let (true, Some(layer)) = (entries.contains_key(&spec), gzip_layer(&spec)) {
            known::remember(layer, crcs);
        }
    }
}

/// Adds the frame CRCs known in this process to the companion file of the cache at `path`
/// (rewritten whole under a temporary name, then renamed) when it lacks some; `Ok(false)`
/// when it had them all.
pub fn save_frames(path: &Path) -> std::io::Result<bool> {
    let target = frames_path(path);
    // Another file standing there is never replaced.
    if let Some(head) = crate::outfile::head(&target)? {
        if !head.is_empty() && !head.starts_with(b"creb-rs frame crcs ") {
            return Err(std::io::Error::other(format!(
                "{} is not a file of frame CRCs; it is left as it is",
                target.display()
            )));
        }
    }
    let mut kept: FastHashMap<ContentSpec, Arc<[u32]>> = read_frames(&target).into_iter().collect();
    let mut grew = false;
    for ((key, form, size), crcs) in known::all() {
        let Some(form) = crate::content::LayerForm::from_bytes(form) else {
            continue;
        };
        let spec = ContentSpec {
            key,
            size,
            form: Form::Layer(form),
        };
        if kept.get(&spec) != Some(&crcs) {
            kept.insert(spec, crcs);
            grew = true;
        }
    }
    if !grew {
        return Ok(false);
    }
    let tmp = target.with_extension(format!("tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        out.write_all(frames_header().as_bytes())?;
        for (spec, crcs) in &kept {
            out.write_all(&spec.to_bytes())?;
            out.write_all(&(crcs.len() as u32).to_le_bytes())?;
            for crc in crcs.iter() {
                out.write_all(&crc.to_le_bytes())?;
            }
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    // A file cut short (a full disk) is not left behind; the one it was to replace stands.
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_crcs_are_kept_beside_the_cache_and_checked_with_it() {
        use crate::content::layer::{Compression, LayerForm};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests");
        let form = LayerForm::new(Compression::Gzip, 0.35).unwrap();
        let specs: Vec<ContentSpec> = (0..3u64)
            .map(|i| {
                ContentSpec::layer(
                    11,
                    format!("frames/{i}").as_bytes(),
                    1_100_000 + i * 70_000,
                    form,
                )
            })
            .collect();
        let layers: Vec<known::Layer> = specs.iter().filter_map(gzip_layer).collect();
        assert_eq!(layers.len(), 3);
        let mut cache = DigestCache::load(&path);
        for spec in &specs {
            let (sha, diff) = spec.digests();
            cache.insert(*spec, sha, diff);
        }
        assert!(cache.save().unwrap());
        assert!(save_frames(&path).unwrap());
        assert!(frames_path(&path).exists());
        let held: Vec<_> = layers.iter().map(known::get).collect();
        assert!(held.iter().all(Option::is_some));
        // A later process: the CRCs come from the file, with the digests.
        known::forget(layers.clone());
        let mut again = DigestCache::load(&path);
        assert_eq!(layers.iter().map(known::get).collect::<Vec<_>>(), held);
        assert_eq!(again.check(specs.iter()), Ok(3));
        // A wrong CRC in the file (the smallest layer's, which the check recomputes first):
        // the cache is stale at its next check, the CRCs forgotten.
        let mut bytes = std::fs::read(frames_path(&path)).unwrap();
        let record = specs[0].to_bytes();
        let at = bytes
            .windows(SPEC_BYTES)
            .position(|w| w == record)
            .expect("the layer's record");
        bytes[at + SPEC_BYTES + 4] ^= 1;
        std::fs::write(frames_path(&path), &bytes).unwrap();
        known::forget(layers.clone());
        let mut stale = DigestCache::load(&path);
        let why = stale.check(specs.iter()).unwrap_err();
        assert!(why.contains("frame CRCs"), "{why}");
        assert!(stale.is_empty());
        // Saved again: the file holds the CRCs made afresh by the check, not the wrong one.
        stale.save().unwrap();
        assert!(!frames_path(&path).exists(), "the wrong file is removed");
        save_frames(&path).unwrap();
        let read = read_frames(&frames_path(&path));
        assert!(read.iter().all(|(spec, crcs)| {
            let i = specs.iter().position(|s| s == spec);
            i.is_none_or(|i| Some(crcs) == held[i].as_ref())
        }));
        known::forget(layers);
    }

    #[test]
    fn a_file_that_is_not_one_of_frame_crcs_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests");
        std::fs::write(frames_path(&path), b"someone's notes").unwrap();
        // Something to write: a layer made in order.
        let form = crate::content::layer::LayerForm::default();
        ContentSpec::layer(12, b"not-replaced", 1_100_000, form).digests();
        assert!(save_frames(&path).is_err());
        assert_eq!(
            std::fs::read(frames_path(&path)).unwrap(),
            b"someone's notes"
        );
        // The digests are written all the same.
        let spec = ContentSpec::new(12, b"digest beside notes", 64);
        let mut cache = DigestCache::load(&path);
        let (sha, diff) = spec.digests();
        cache.insert(spec, sha, diff);
        assert!(cache.save().unwrap());
        assert_eq!(DigestCache::load(&path).get(&spec), Some(sha));
    }

    #[test]
    fn entries_round_trip_and_a_wrong_one_makes_the_cache_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests");
        let specs: Vec<ContentSpec> = (0..20u64)
            .map(|i| ContentSpec::new(7, format!("blob/{i}").as_bytes(), 100 + i))
            .collect();
        let mut cache = DigestCache::load(&path);
        assert!(cache.is_empty() && cache.set_aside.is_none());
        for s in &specs {
            let (sha, diff) = s.digests();
            cache.insert(*s, sha, diff);
        }
        assert!(cache.save().unwrap());

        let mut again = DigestCache::load(&path);
        assert_eq!(again.len(), 20);
        assert_eq!(again.get(&specs[3]), Some(specs[3].sha256()));
        assert_eq!(
            again.check(&specs).unwrap(),
            SAMPLE,
            "the 16 smallest are checked"
        );
        assert!(!again.save().unwrap(), "nothing new: not rewritten");

        // One wrong digest, on the smallest entry: found, and the cache is emptied.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = header().len();
        let first =
            ContentSpec::from_bytes(&bytes[at..at + SPEC_BYTES].try_into().unwrap()).unwrap();
        bytes[at + SPEC_BYTES] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut stale = DigestCache::load(&path);
        let used = [first];
        let why = stale.check(&used).unwrap_err();
        assert!(why.contains("stale"), "{why}");
        assert!(stale.is_empty());

        // Another scheme's file is set aside.
        std::fs::write(&path, b"creb-rs digest cache creb-rs/content/v0\n").unwrap();
        let other = DigestCache::load(&path);
        assert!(other.set_aside.unwrap().contains("not a digest cache"));
        assert!(
            Appender::open(&path).is_err(),
            "another scheme's file is left alone"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"creb-rs digest cache creb-rs/content/v0\n"
        );
    }

    #[test]
    fn appended_entries_load_and_a_cut_entry_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests");
        let specs: Vec<ContentSpec> = (0..3u64)
            .map(|i| ContentSpec::new(7, format!("sent/{i}").as_bytes(), 5000 + i))
            .collect();
        let appender = Appender::open(&path).unwrap();
        appender
            .append(&specs[0], &specs[0].sha256(), &specs[0].sha256())
            .unwrap();
        appender
            .append(&specs[1], &specs[1].sha256(), &specs[1].sha256())
            .unwrap();
        drop(appender);
        // A writer stopped in the middle of its third entry.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(&specs[2].to_bytes()[..30]).unwrap();
        drop(file);
        let cache = DigestCache::load(&path);
        assert!(cache.set_aside.is_none(), "{:?}", cache.set_aside);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.cut, 30, "the partial entry is counted, to be said");
        assert_eq!(cache.get(&specs[1]), Some(specs[1].sha256()));
        // Appending again first cuts the partial entry off, so what follows stays aligned.
        let appender = Appender::open(&path).unwrap();
        assert_eq!(appender.cut, 30);
        appender
            .append(&specs[2], &specs[2].sha256(), &specs[2].sha256())
            .unwrap();
        drop(appender);
        let cache = DigestCache::load(&path);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&specs[2]), Some(specs[2].sha256()));
    }

    #[test]
    fn a_layers_diff_digest_is_kept_beside_its_digest_and_checked() {
        use crate::content::layer::{Compression, LayerForm};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("digests");
        let form = LayerForm::new(Compression::Zstd, 0.5).unwrap();
        let specs: Vec<ContentSpec> = (0..3u64)
            .map(|i| ContentSpec::layer(7, format!("layer/{i}").as_bytes(), 5000 + i, form))
            .collect();
        let appender = Appender::open(&path).unwrap();
        for s in &specs {
            let (sha, diff) = s.digests();
            appender.append(s, &sha, &diff).unwrap();
        }
        drop(appender);
        let mut cache = DigestCache::load(&path);
        assert_eq!(cache.len(), 3);
        for s in &specs {
            assert_eq!((cache.get(s), cache.diff(s)), {
                let (sha, diff) = s.digests();
                (Some(sha), Some(diff))
            });
        }
        assert_eq!(cache.check(&specs).unwrap(), 3);
        // A wrong diff digest alone makes the cache stale.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = header().len() + SPEC_BYTES + 32;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut stale = DigestCache::load(&path);
        assert!(stale.check(&specs).unwrap_err().contains("stale"));
        assert!(stale.is_empty());
    }
}
