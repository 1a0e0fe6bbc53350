//! What pass 1 learns about each object of the trace, packed small (an upload's, a blob's,
//! a manifest's, a push's facts; a record's position in one word), and what the content
//! generated for them is made of: its identity (from the trace facts that make it unique)
//! and its size (`--size-scale`, `--max-object-size`).

use crate::content::layer::LayerForm;
use crate::plan::linker::{Position, PushedLayer};
use crate::trace::Sym;

/// A record's position packed into one word: the file in the top 24 bits, the record
/// number (1-based per file) in the low 40. A catalog key costs 8 bytes instead of 16.
pub fn position_key(pos: Position) -> u64 {
    (u64::from(pos.0) << 40) | (pos.1 & ((1 << 40) - 1))
}

pub(super) fn key_position(key: u64) -> Position {
    ((key >> 40) as u32, key & ((1 << 40) - 1))
}

/// A 64-bit identity for generated content, from the trace facts that make it unique
/// (SHA-256, truncated): what a catalog keeps instead of the facts themselves.
pub(super) fn identity_of(text: std::fmt::Arguments) -> u64 {
    use sha2::Digest as _;
    let out = sha2::Sha256::digest(text.to_string().as_bytes());
    u64::from_le_bytes(out[..8].try_into().unwrap_or_default())
}

/// The identity of a manifest PUT's config: its record's client, repository, reference,
/// time and number. Pass 1 keeps it for prewarm; pass 2 computes it from the record.
pub fn push_identity(client: &str, repo: &str, reference: &str, time_ms: i64, number: u64) -> u64 {
    identity_of(format_args!(
        "{client}/{repo}/{reference}/{time_ms}/{number}"
    ))
}

/// What a sealed catalog keeps besides what the run needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Keep {
    /// Everything prewarm pushes: every (repository, blob) read, every push's layers.
    #[default]
    Prewarm,
    /// What the run needs: the reads counted and sampled, each push's manifest name (the
    /// planner rebuilds a pushed manifest from its record).
    Run,
}

/// Blob reads a [`Keep::Run`] catalog samples (spread over the sorted list).
pub(super) const READ_SAMPLE: usize = 64;

/// Content up to this size has its digest computed when it is used rather than kept: the
/// content is generated and hashed again in about a microsecond, where keeping the digest
/// costs 40 bytes for every such object of the trace (tens of MB at IBM scale, where
/// `--size-scale` makes most content this small).
pub const KEEP_DIGEST_ABOVE: u64 = 4096;

/// What the trace says about one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UploadFacts {
    /// Bytes sent by its PATCH and PUT records; if none, the recorded size of the blob a
    /// preceding HEAD 404 named (0: unknown).
    pub bytes: u64,
    /// Identity of its content: the head record's client, repository, time and number.
    pub identity: u64,
    /// PATCH records (chunks).
    pub patches: u32,
    /// Records folded into the upload besides its head.
    pub members: u32,
    /// The manifest PUT whose push it belongs to, if one closed it (an index in push
    /// order, [`Catalog::pushed_manifest`](super::Catalog::pushed_manifest)): routing keeps an upload with its manifest,
    /// whose node must hold every blob it references.
    pub(super) push: u32,
}

/// No push (`UploadFacts::push`).
pub(super) const NO_PUSH: u32 = u32::MAX;

impl UploadFacts {
    /// The index of the push it belongs to ([`Catalog::pushed_manifest`](super::Catalog::pushed_manifest)).
    pub fn push(&self) -> Option<usize> {
        (self.push != NO_PUSH).then_some(self.push as usize)
    }
}

/// A blob the run reads: the largest `written` of its successful GETs (0 if only HEADs:
/// size unknown), as two 32-bit halves, so that an entry keyed by a symbol takes 12
/// bytes instead of 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFacts {
    size: [u32; 2],
}

impl BlobFacts {
    pub fn new(size: u64) -> BlobFacts {
        BlobFacts {
            size: [size as u32, (size >> 32) as u32],
        }
    }

    /// The recorded size.
    pub fn size(&self) -> u64 {
        u64::from(self.size[0]) | (u64::from(self.size[1]) << 32)
    }
}

/// A run of entries in one of the catalog's shared lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    first: u32,
    len: u32,
}

impl Span {
    pub(super) fn of<T>(list: &[T], span: Span) -> &[T] {
        let first = span.first as usize;
        list.get(first..first + span.len as usize)
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `items` to `list`, returning where they are.
    pub(super) fn append<T>(list: &mut Vec<T>, items: impl IntoIterator<Item = T>) -> Span {
        let first = list.len();
        list.extend(items);
        Span {
            first: u32::try_from(first).unwrap_or(u32::MAX),
            len: u32::try_from(list.len() - first).unwrap_or(0),
        }
    }
}

/// A manifest the run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ManifestFacts {
    /// Largest `written` of its successful GETs (0 if only HEADs), at most 4 GiB − 1 (a
    /// manifest is kilobytes; 32 bits keep the entry at 20 bytes).
    pub size: u32,
    /// Blobs pulled after it, in first-seen order ([`Catalog::manifest_layers`](super::Catalog::manifest_layers)).
    pub layers: Span,
}

/// A manifest PUT the run replays: what its generated manifest is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushFacts {
    pub repo: Sym,
    pub reference: Sym,
    /// Identity of its config: the record's client, repository, reference, time, number.
    pub identity: u64,
    /// The manifest size the trace recorded.
    pub size: u64,
    /// Its layers ([`Catalog::push_layers`](super::Catalog::push_layers)).
    pub layers: Span,
}

/// A [`PushedLayer`] in one word: an upload's packed position, or a blob's symbol with the
/// top bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PackedLayer(u64);

pub(super) const EXISTING: u64 = 1 << 63;

impl PackedLayer {
    pub(super) fn pack(layer: &PushedLayer) -> PackedLayer {
        match layer {
            PushedLayer::Upload(head) => PackedLayer(position_key(*head)),
            PushedLayer::Existing(d) => PackedLayer(EXISTING | u64::from(d.0)),
        }
    }

    pub(super) fn unpack(self) -> PushedLayer {
        match self.0 & EXISTING {
            0 => PushedLayer::Upload(key_position(self.0)),
            _ => PushedLayer::Existing(Sym(self.0 as u32)),
        }
    }
}

/// How the sizes of generated blobs relate to the trace's (`--size-scale`,
/// `--max-object-size`): every size the trace records is multiplied by the scale, rounded
/// up (never to 0), then capped. Integer arithmetic, so every host computes the same sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SizeScale {
    /// The scale in parts per billion (1,000,000,000: sizes as recorded).
    pub ppb: u64,
    /// The largest size, after scaling.
    pub max: Option<u64>,
}

impl SizeScale {
    /// Sizes as the trace records them.
    pub const ONE: SizeScale = SizeScale {
        ppb: 1_000_000_000,
        max: None,
    };

    /// A scale `factor` (0 < factor ≤ 1) and a cap.
    pub fn new(factor: f64, max: Option<u64>) -> Result<SizeScale, String> {
        if !(factor > 0.0 && factor <= 1.0) {
            return Err(format!("the size scale must be in (0, 1], not {factor}"));
        }
        let ppb = (factor * 1e9).round() as u64;
        if ppb == 0 {
            return Err(format!("the size scale {factor} is below one billionth"));
        }
        if max == Some(0) {
            return Err("the largest object size must be at least 1 byte".into());
        }
        Ok(SizeScale { ppb, max })
    }

    /// True when sizes are the trace's.
    pub fn is_identity(&self) -> bool {
        *self == SizeScale::ONE
    }

    /// The scale as a number.
    pub fn factor(&self) -> f64 {
        self.ppb as f64 / 1e9
    }

    /// A recorded size, scaled and capped (0 stays 0).
    pub fn apply(&self, size: u64) -> u64 {
        if size == 0 {
            return 0;
        }
        let scaled = (u128::from(size) * u128::from(self.ppb)).div_ceil(1_000_000_000);
        let scaled = u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
        self.max.map_or(scaled, |m| scaled.min(m))
    }
}

impl Default for SizeScale {
    fn default() -> Self {
        SizeScale::ONE
    }
}

/// Settings that change what content is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentOptions {
    pub seed: u64,
    /// Size of a blob the trace only HEADs (its size is unknown).
    pub unknown_blob_size: u64,
    /// Size of the small layer given to manifests that reference no blob of the trace.
    pub filler_size: u64,
    /// Recorded blob and upload sizes, scaled.
    pub sizes: SizeScale,
    /// How blobs are made: tar layers of a file tree, compressed so (a blob smaller than
    /// the smallest such layer is plain bytes).
    pub layer_form: LayerForm,
}

impl Default for ContentOptions {
    fn default() -> Self {
        ContentOptions {
            seed: crate::content::DEFAULT_SEED,
            unknown_blob_size: 4096,
            filler_size: FILLER_SIZE,
            sizes: SizeScale::ONE,
            layer_form: LayerForm::default(),
        }
    }
}

/// The size of a repository's filler layer: a tar of every compression (the smallest
/// uncompressed one is 2,560 bytes).
pub const FILLER_SIZE: u64 = 4096;

/// Layers per manifest remembered at most.
pub(super) const MAX_MANIFEST_LAYERS: usize = 128;

/// A piece of generated content of the catalog, by what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentKey {
    /// A blob the run reads.
    Blob(Sym),
    /// The content of an upload, by the packed position of its head ([`position_key`]).
    Upload(u64),
    /// A repository's filler layer.
    Filler(Sym),
}

/// Uploads the trace gives no size for (no bytes recorded, or marked `creb.size_unknown` by
/// `trace import`), and how they are sized instead.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct UnsizedUploads {
    pub count: u64,
    /// Sized as the blob a HEAD 404 named for them, which the trace reads.
    pub from_reads: u64,
}

/// The identity of an upload's content: its head record's client, repository, time and
/// number.
pub fn upload_identity(client: &str, repo: &str, time_ms: i64, number: u64) -> u64 {
    identity_of(format_args!("{client}/{repo}/{time_ms}/{number}"))
}
