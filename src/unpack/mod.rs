//! Unpacking a layer as a container runtime does: the compressed body decompressed by its
//! media type (gzip, zstd, none), the tar walked entry by entry (headers parsed, every body
//! read, whiteouts recognised), the uncompressed stream hashed into the layer's diff_id and
//! checked against the image config's; with a directory, the entries are applied under it.
//!
//! Refused, each an error of its own kind, never a success: a body that is not its declared
//! compression or not a tar (`layer_invalid`), a diff_id other than the config's
//! (`diff_id_mismatch`), an entry whose path or link would leave the directory
//! (`unsafe_path`), and a layer whose tar grows past [`Limits`] (`decompression_bomb`).
//! Nothing is written outside the directory: every path is joined component by component,
//! and a component that is a link made by an earlier entry is refused.

mod apply;
mod error;

use std::io::{self, BufReader, Read};
use std::path::Path;

use sha2::{Digest as _, Sha256};

use crate::trace::decode::ZstdFrames;

pub use apply::Target;
pub use error::UnpackError;

/// How a layer's tar is compressed, by its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerCompression {
    Gzip,
    Zstd,
    None,
}

impl From<crate::content::layer::Compression> for LayerCompression {
    /// The compression of a layer creb-rs generated.
    fn from(c: crate::content::layer::Compression) -> Self {
        use crate::content::layer::Compression;
        match c {
            Compression::Gzip => LayerCompression::Gzip,
            Compression::Zstd => LayerCompression::Zstd,
            Compression::None => LayerCompression::None,
        }
    }
}

impl LayerCompression {
    /// The compression a layer media type names (OCI and docker), or `None` for one that is
    /// not a layer's.
    pub fn of_media_type(media_type: &str) -> Option<LayerCompression> {
        let t = media_type.trim();
        if t.ends_with("tar+gzip") || t.ends_with("tar.gzip") || t.ends_with(".tar.gz") {
            Some(LayerCompression::Gzip)
        } else if t.ends_with("tar+zstd") || t.ends_with("tar.zstd") {
            Some(LayerCompression::Zstd)
        } else if t.ends_with("layer.v1.tar") || t.ends_with("rootfs.diff.tar") {
            Some(LayerCompression::None)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LayerCompression::Gzip => "gzip",
            LayerCompression::Zstd => "zstd",
            LayerCompression::None => "none",
        }
    }
}

/// How far a layer may grow when decompressed: at most `ratio` times its compressed size,
/// and never less than `floor` bytes (a small layer's tar is mostly headers and padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub ratio: u64,
    pub floor: u64,
}

impl Default for Limits {
    /// 64 times the compressed size, 1 MiB at least: a real tree's tar is about three times
    /// its gzip (0.353 for this machine's `/usr`, docs/benchmarks.md), a generated layer's
    /// 1/--compress-ratio (20 at 0.05).
    fn default() -> Limits {
        Limits {
            ratio: 64,
            floor: 1 << 20,
        }
    }
}

impl Limits {
    /// The most uncompressed bytes a layer of `compressed` bytes may unpack to.
    pub fn bound(&self, compressed: u64) -> u64 {
        compressed.saturating_mul(self.ratio).max(self.floor)
    }
}

/// What one layer held.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unpacked {
    /// Bytes of the compressed body read.
    pub compressed: u64,
    /// Bytes of the tar (what the diff_id hashes).
    pub uncompressed: u64,
    /// Tar entries (PAX and GNU extension headers not counted).
    pub entries: u64,
    /// Regular files among them.
    pub files: u64,
    /// Whiteouts among them (`.wh.NAME`, and `.wh..wh..opq` for an opaque directory).
    pub whiteouts: u64,
    /// `sha256:` of the tar.
    pub diff_id: String,
}

/// A reader that counts and hashes what passes through it, and stops at a bound.
struct Tally<R> {
    inner: R,
    read: u64,
    bound: u64,
    hash: Sha256,
}

/// The read error a [`Tally`] makes at its bound.
#[derive(Debug)]
struct OverBound;

/// A read error of the decompressed stream itself (the decoder's, or the body's), as the
/// tar reader passes it on: told apart from the tar's own errors by this mark.
#[derive(Debug)]
struct FromStream(io::Error);

impl std::fmt::Display for OverBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("past the bound")
    }
}

impl std::fmt::Display for FromStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for OverBound {}
impl std::error::Error for FromStream {}

impl<R: Read> Read for Tally<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.inner.read(buf)).map_err(|e| io::Error::new(e.kind(), FromStream(e)))?;
        self.read += n as u64;
        if self.read > self.bound {
            return Err(io::Error::other(OverBound));
        }
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// The bytes of the compressed body, counted.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// What to check and where to apply a layer.
#[derive(Debug, Clone, Copy)]
pub struct Layer<'a> {
    pub compression: LayerCompression,
    /// The compressed size (the descriptor's), which [`Limits`] bounds the tar by.
    pub size: u64,
    /// The config's diff_id for this layer, if the image has one to check against.
    pub diff_id: Option<&'a str>,
}

/// Unpacks one layer read from `body`: decompressed, walked, hashed and checked; applied
/// under `target` when one is given, else every entry read and discarded.
pub fn unpack<R: Read>(
    body: R,
    layer: Layer<'_>,
    target: Option<&mut Target>,
    limits: Limits,
) -> Result<Unpacked, UnpackError> {
    let compression = layer.compression;
    let mut counted = Counted {
        inner: body,
        read: 0,
    };
    let bound = limits.bound(layer.size);
    let decoded: Box<dyn Read + '_> = match compression {
        LayerCompression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut counted)),
        LayerCompression::Zstd => Box::new(ZstdFrames::new(BufReader::new(&mut counted))),
        LayerCompression::None => Box::new(&mut counted),
    };
    let mut tally = Tally {
        inner: decoded,
        read: 0,
        bound,
        hash: Sha256::new(),
    };
    let walked = walk(&mut tally, target);
    // The diff_id covers the whole tar, the end-of-archive blocks and any padding after
    // them included, as a runtime's hash of the decompressed stream does.
    let drained = walked.and_then(|w| {
        io::copy(&mut tally, &mut io::sink())
            .map(|_| w)
            .map_err(classify)
    });
    let described = |e: Failure| match e {
        Failure::Read(e) if e.get_ref().is_some_and(|r| r.is::<OverBound>()) => UnpackError::Bomb {
            bound,
            ratio: limits.ratio,
            compressed: layer.size,
        },
        Failure::Read(e) if compression != LayerCompression::None => {
            UnpackError::Compression(compression.name(), e.to_string())
        }
        Failure::Read(e) => UnpackError::Io(e),
        Failure::Tar(e) => UnpackError::NotTar(e.to_string()),
        Failure::Refused(e) => e,
    };
    let mut unpacked = drained.map_err(described)?;
    let uncompressed = tally.read;
    let digest = hex::encode(std::mem::take(&mut tally.hash).finalize());
    // The decoder borrows the counted body: done with it.
    drop(tally);
    unpacked.uncompressed = uncompressed;
    unpacked.compressed = counted.read;
    unpacked.diff_id = format!("sha256:{digest}");
    if let Some(expected) = layer.diff_id.filter(|e| *e != unpacked.diff_id) {
        return Err(UnpackError::DiffId {
            expected: expected.to_owned(),
            actual: unpacked.diff_id,
        });
    }
    Ok(unpacked)
}

/// Why a walk stopped: a read of the stream, a tar it could not parse, or an entry refused.
enum Failure {
    Read(io::Error),
    Tar(io::Error),
    Refused(UnpackError),
}

/// Walks the tar's entries: each header parsed, its body read (to `target`, or discarded).
fn walk<R: Read>(stream: &mut R, mut target: Option<&mut Target>) -> Result<Unpacked, Failure> {
    let mut archive = tar::Archive::new(stream);
    let mut unpacked = Unpacked::default();
    let entries = archive.entries().map_err(Failure::Tar)?;
    for entry in entries {
        let mut entry = entry.map_err(classify)?;
        let path = entry.path().map_err(Failure::Tar)?.into_owned();
        let name = path.to_string_lossy().into_owned();
        let kind = entry.header().entry_type();
        unpacked.entries += 1;
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let whiteout = file_name.as_deref().is_some_and(|n| n.starts_with(".wh."));
        if whiteout {
            unpacked.whiteouts += 1;
        } else if kind.is_file() {
            unpacked.files += 1;
        }
        apply::check_path(&path).map_err(Failure::Refused)?;
        let link = entry
            .link_name()
            .map_err(Failure::Tar)?
            .map(|l| l.into_owned());
        if let Some(link) = &link {
            apply::check_link(&path, link, kind.is_hard_link()).map_err(Failure::Refused)?;
        }
        match target.as_deref_mut() {
            Some(t) => t
                .apply(&path, &name, kind, link.as_deref(), &mut entry, whiteout)
                .map_err(|e| match e {
                    apply::Error::Refused(e) => Failure::Refused(e),
                    apply::Error::Read(e) => classify(e),
                    apply::Error::Write(e) => Failure::Refused(UnpackError::Io(e)),
                })?,
            None => {
                io::copy(&mut entry, &mut io::sink()).map_err(classify)?;
            }
        }
    }
    Ok(unpacked)
}

/// An error the tar reader passed on: the stream's own (the decoder's, the bound's) or the
/// tar's.
fn classify(e: io::Error) -> Failure {
    let mark = e.get_ref();
    if mark.is_some_and(|r| r.is::<OverBound>() || r.is::<FromStream>()) {
        Failure::Read(e)
    } else {
        Failure::Tar(e)
    }
}

/// Unpacks a layer held whole in memory (the unit tests).
#[cfg(test)]
pub fn unpack_bytes(
    body: &[u8],
    layer: Layer<'_>,
    target: Option<&mut Target>,
) -> Result<Unpacked, UnpackError> {
    unpack(body, layer, target, Limits::default())
}

/// Removes what an unpack wrote under `dir` (the directory itself too).
pub fn remove_unpacked(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests;
