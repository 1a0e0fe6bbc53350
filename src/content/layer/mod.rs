//! Generated image layers: a tar of a file tree (`tree`), compressed as deployed (gzip,
//! zstd or none) at a chosen ratio, exactly the size asked for, built without running a
//! compressor.
//!
//! The compressed blob is cut into frames of [`FRAME`] bytes (the last one takes the rest):
//! each a whole gzip member or zstd frame, so a frame's bytes (and a gzip member's CRC) need
//! no byte before it; finding where the tar stream stands at a frame's start replays the
//! walk's arithmetic, never its bytes. Inside a frame, random bytes, headers and zeros go
//! out as stored deflate blocks or raw zstd blocks (memory speed), each run of zeros as a
//! fixed-Huffman block of back-references or a zstd RLE block (a few bytes for thousands),
//! and the frame ends with one literal block holding exactly the bytes its size has left,
//! which makes every size exact. Gzip trailers carry each member's CRC-32 and length (a long
//! run of zeros advances the CRC by arithmetic, `crc`, instead of being hashed; a CRC already
//! known, `known`, is not made again).

mod crc;
pub(crate) mod known;
mod pool;
mod tree;

use std::ops::Range;
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use tree::{Costs, Seg, Walk};

pub use tree::MTIME;

/// The most bytes one literal block holds (a stored deflate block's limit; zstd's raw
/// blocks keep to it too).
const MAX_BLOCK: u64 = 65_535;

/// Compressed bytes per frame (gzip member, zstd frame); the last frame holds the rest.
/// Also the content's block ([`crate::content::BLOCK`]): a reader's chunks end at frames.
pub const FRAME: u64 = 64 * 1024;

/// How a layer's tar is compressed (`--compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(format!("unknown compression '{s}' (gzip, zstd or none)")),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The compression ratio (compressed ÷ uncompressed) of generated layers when none is
/// given: what `gzip -6` made of a tar of a Debian system's programs, libraries and
/// documentation (docs/images.md).
pub const DEFAULT_RATIO: f64 = 0.35;

/// How generated layers are made: the compression and the ratio it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayerForm {
    pub compression: Compression,
    /// Compressed ÷ uncompressed, in thousandths (1..=1000).
    ratio_milli: u16,
}

impl Default for LayerForm {
    fn default() -> Self {
        LayerForm::new(Compression::Gzip, DEFAULT_RATIO).unwrap_or(LayerForm {
            compression: Compression::Gzip,
            ratio_milli: 350,
        })
    }
}

/// Written as `{"compression": "gzip", "ratio": 0.35}` (what meta.json says of a run's
/// layers).
impl serde::Serialize for LayerForm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("LayerForm", 2)?;
        st.serialize_field("compression", &self.compression)?;
        st.serialize_field("ratio", &self.ratio())?;
        st.end()
    }
}

impl LayerForm {
    /// A form; the ratio is compressed ÷ uncompressed, from 0.01 to 1.
    pub fn new(compression: Compression, ratio: f64) -> Result<LayerForm, String> {
        if !(0.01..=1.0).contains(&ratio) {
            return Err(format!(
                "a compression ratio is compressed ÷ uncompressed, from 0.01 to 1 (got {ratio})"
            ));
        }
        Ok(LayerForm {
            compression,
            ratio_milli: (ratio * 1000.0).round() as u16,
        })
    }

    /// Compressed ÷ uncompressed.
    pub fn ratio(&self) -> f64 {
        f64::from(self.ratio_milli) / 1000.0
    }

    /// The form as 3 bytes (what digest caches key on).
    pub(super) fn to_bytes(self) -> [u8; 3] {
        let kind = match self.compression {
            Compression::None => 1,
            Compression::Gzip => 2,
            Compression::Zstd => 3,
        };
        let r = self.ratio_milli.to_le_bytes();
        [kind, r[0], r[1]]
    }

    pub(super) fn from_bytes(b: [u8; 3]) -> Option<LayerForm> {
        let compression = match b[0] {
            1 => Compression::None,
            2 => Compression::Gzip,
            3 => Compression::Zstd,
            _ => return None,
        };
        Some(LayerForm {
            compression,
            ratio_milli: u16::from_le_bytes([b[1], b[2]]),
        })
    }

    /// The smallest layer of this form: an empty tar (its end marker alone) unique to its
    /// key — a gzip member of 32 bytes (the size of the empty layer docker pushes; its
    /// header's time field is the key's), a zstd frame of 21 and 1,032 bytes uncompressed
    /// (8 of the key's bytes after the end marker). A smaller size is generated as plain
    /// bytes and said to be (`raw_layers`); a larger one holds a tree as soon as one fits.
    pub fn min_size(&self) -> u64 {
        match self.compression {
            Compression::None => 1032,
            Compression::Gzip => 32,
            Compression::Zstd => 21,
        }
    }

    fn costs(&self) -> Costs {
        match self.compression {
            Compression::None => Costs {
                literal_overhead: 0,
                run_fixed: 0,
                run_bytes: 1,
                run_per: 1,
                run_is_literal: true,
                per_frame: 0,
                frame: FRAME,
                margin: 0,
            },
            // A stored block's header and alignment; a fixed block's header, end and a
            // short back-reference; 13 bits per 258 bytes; a member's header, trailer,
            // final block and a block cut at each end.
            Compression::Gzip => Costs {
                literal_overhead: 6,
                run_fixed: 6,
                run_bytes: 13,
                run_per: 8 * 258,
                run_is_literal: false,
                per_frame: 48,
                frame: FRAME,
                margin: 64,
            },
            Compression::Zstd => Costs {
                literal_overhead: 3,
                run_fixed: 4,
                run_bytes: 4,
                run_per: tree::MAX_SEGMENT,
                run_is_literal: false,
                per_frame: 24,
                frame: FRAME,
                margin: 32,
            },
        }
    }
}

/// A layer as the store of known frame CRCs names it.
pub(crate) fn known_layer(key: [u64; 4], form: LayerForm, size: u64) -> known::Layer {
    (key, form.to_bytes(), size)
}

/// How many frames (gzip members) a blob of `size` bytes has.
pub(crate) fn frame_count(size: u64) -> u64 {
    (size / FRAME).max(1)
}

/// The bytes of frame `k` of a blob of `size` bytes.
fn frame_range(size: u64, k: u64) -> Range<u64> {
    let start = k * FRAME;
    let end = if k + 1 >= frame_count(size) {
        size
    } else {
        start + FRAME
    };
    start..end
}

/// What a frame holds, in stream order.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// Bytes `from..from + len` of a segment, in a literal block: one this op opens, of
    /// `block` bytes (its own and those of the literals after it that join it), or, when
    /// `block` is 0, the block of the op before.
    Literal {
        seg: Seg,
        from: u64,
        len: u64,
        block: u64,
    },
    /// A run; `history` when the frame already holds the byte before it.
    Run {
        byte: u8,
        len: u64,
        history: bool,
    },
    /// The final literal block: `len` bytes, the [`Op::Tail`]s that follow.
    Final {
        len: u64,
    },
    Tail {
        seg: Seg,
        from: u64,
        len: u64,
    },
}

/// Where a layer's generation stands: the walk, the segment in progress, and the frame
/// the next plan is for. Replaying plans without rendering them moves it to any frame.
#[derive(Debug, Clone)]
pub(super) struct Cursor {
    key: [u64; 4],
    form: LayerForm,
    size: u64,
    walk: Walk,
    /// The segment being placed and how much of it frames already hold.
    seg: Option<(Seg, u64)>,
    /// The frame the next plan is for.
    frame: u64,
    ops: Vec<Op>,
    /// The zero-run operator last used (kept from frame to frame).
    zeros: crc::Zeros,
    /// The gzip members' CRCs when known ([`known`]): trailers written from them.
    known: Option<Arc<[u32]>>,
    /// The CRCs of the frames made so far, from frame 0 on in order (a digest's pass, an
    /// upload, a read checked): remembered in [`known`] once the last is made.
    learning: Vec<u32>,
}

impl Cursor {
    pub(super) fn new(key: [u64; 4], form: LayerForm, size: u64) -> Cursor {
        // Only a layer the store can hold is looked up (no lock for a small one).
        let held = form.compression == Compression::Gzip && frame_count(size) >= known::MIN_FRAMES;
        let known = held
            .then(|| known::get(&known_layer(key, form, size)))
            .flatten()
            .filter(|crcs| crcs.len() as u64 == frame_count(size));
        Cursor {
            key,
            form,
            size,
            walk: Walk::new(key, form.ratio(), size, form.costs()),
            seg: None,
            frame: 0,
            ops: Vec::with_capacity(64),
            zeros: crc::Zeros::default(),
            known,
            learning: Vec::new(),
        }
    }

    /// The segment in progress (a new one from the walk when none is).
    fn current(&mut self, used: u64) -> (Seg, u64) {
        match self.seg {
            Some(s) => s,
            None => {
                let s = (self.walk.next(used), 0);
                self.seg = Some(s);
                s
            }
        }
    }

    /// Takes `n` bytes of the stream, whatever segments they are in, as the final block.
    /// `used`: the compressed bytes before them.
    fn take_final(&mut self, mut n: u64, mut used: u64) {
        self.ops.push(Op::Final { len: n });
        while n > 0 {
            let (seg, from) = self.current(used);
            let len = (seg.len() - from).min(n);
            self.ops.push(Op::Tail { seg, from, len });
            n -= len;
            used += len;
            self.seg = if from + len == seg.len() {
                None
            } else {
                Some((seg, from + len))
            };
        }
    }

    /// Plans the next frame into `self.ops`.
    fn plan(&mut self) {
        self.ops.clear();
        let budget = frame_range(self.size, self.frame);
        let start = budget.start;
        let budget = budget.end - budget.start;
        match self.form.compression {
            Compression::None => self.plan_plain(start, budget),
            Compression::Gzip => self.plan_gzip(start, budget),
            Compression::Zstd => self.plan_zstd(start, budget),
        }
        self.frame += 1;
    }

    fn plan_plain(&mut self, start: u64, budget: u64) {
        self.take_final(budget, start);
    }

    fn plan_zstd(&mut self, start: u64, budget: u64) {
        // Magic, frame header descriptor, window descriptor; the final raw block's header.
        let mut used = 6;
        let mut open = None;
        loop {
            let (seg, from) = self.current(start + used);
            let len = seg.len() - from;
            let joins = self.joins(open, &seg, len);
            let cost = match seg {
                Seg::Run { .. } => 4,
                _ if joins => len,
                _ => 3 + len,
            };
            if used + cost + 3 > budget {
                break;
            }
            used += cost;
            open = self.push(seg, from, len, open, joins, true);
            self.seg = None;
        }
        self.take_final(budget - used - 3, start + used);
    }

    /// Whether a literal of `len` bytes of `seg` can join the literal block `open` (the
    /// index of the op that opened it): consecutive literals share one block header and are
    /// heard by the CRC in one call.
    fn joins(&self, open: Option<usize>, seg: &Seg, len: u64) -> bool {
        match (open, seg) {
            (_, Seg::Run { .. }) | (None, _) => false,
            (Some(i), _) => match self.ops[i] {
                Op::Literal { block, .. } => block + len <= MAX_BLOCK,
                _ => false,
            },
        }
    }

    /// Pushes the op of `len` bytes of `seg` from `from`; the literal block open after it.
    fn push(
        &mut self,
        seg: Seg,
        from: u64,
        len: u64,
        open: Option<usize>,
        joins: bool,
        history: bool,
    ) -> Option<usize> {
        if let Seg::Run { byte, .. } = seg {
            self.ops.push(Op::Run { byte, len, history });
            return None;
        }
        match open {
            Some(i) if joins => {
                if let Op::Literal { block, .. } = &mut self.ops[i] {
                    *block += len;
                }
                self.ops.push(Op::Literal {
                    seg,
                    from,
                    len,
                    block: 0,
                });
                Some(i)
            }
            _ => {
                self.ops.push(Op::Literal {
                    seg,
                    from,
                    len,
                    block: len,
                });
                Some(self.ops.len() - 1)
            }
        }
    }

    fn plan_gzip(&mut self, start: u64, budget: u64) {
        // Bits of deflate data so far; the member's header and trailer are 18 bytes. A run
        // copies the byte before it when the frame holds one equal to it, else begins with a
        // literal. A literal joins the stored block before it when it directly follows one
        // (stored data ends on a byte boundary: it adds its bytes alone).
        let mut bits = 0u64;
        let mut previous: Option<u8> = None;
        let mut open = None;
        loop {
            let (seg, from) = self.current(start + 10 + bits / 8);
            let len = seg.len() - from;
            let joins = self.joins(open, &seg, len);
            let (after, history) = match seg {
                Seg::Run { byte, .. } => {
                    let history = previous == Some(byte);
                    (bits + 3 + run_bits(byte, len, history) + 7, history)
                }
                _ if joins => (bits + 8 * len, false),
                _ => (stored_bits(bits, len), false),
            };
            if final_room(after, budget).is_none() {
                break;
            }
            bits = after;
            previous = seg.last_byte().or(previous);
            open = self.push(seg, from, len, open, joins, history);
            self.seg = None;
        }
        let room = final_room(bits, budget).unwrap_or(0);
        self.take_final(room, start + budget - room);
    }

    /// Plans the next frame and writes it to `out` (cleared first); `diff` hears the
    /// frame's uncompressed bytes.
    pub(super) fn render_next(&mut self, out: &mut Out, diff: Option<&mut Sha256>) {
        let k = self.frame;
        self.plan();
        out.clear();
        let gzip = self.form.compression == Compression::Gzip;
        // A CRC already known is not made again, unless a digest hears the bytes anyway.
        let known = match (&self.known, &diff) {
            (Some(crcs), None) => crcs.get(k as usize).copied(),
            _ => None,
        };
        let learn = gzip
            && known.is_none()
            && self.learning.len() as u64 == k
            && (known::MIN_FRAMES..=known::LEARN_FRAMES).contains(&frame_count(self.size));
        let mut sink = Uncompressed {
            crc: (gzip && known.is_none()).then(crc32fast::Hasher::new),
            len: 0,
            diff,
            zeros: std::mem::take(&mut self.zeros),
        };
        match self.form.compression {
            Compression::None => render_plain(&self.key, &self.ops, out, &mut sink),
            Compression::Gzip => {
                let crc = render_gzip(&self.key, &self.ops, out, &mut sink, known);
                if learn {
                    self.learn(crc);
                }
            }
            Compression::Zstd => render_zstd(&self.key, &self.ops, out, &mut sink),
        }
        self.zeros = sink.zeros;
    }

    /// Adds the CRC of the frame just made to those learned; the last one makes them known.
    fn learn(&mut self, crc: u32) {
        self.learning.push(crc);
        if self.learning.len() as u64 == frame_count(self.size) {
            let crcs: Arc<[u32]> = std::mem::take(&mut self.learning).into();
            known::remember(known_layer(self.key, self.form, self.size), crcs.clone());
            self.known = Some(crcs);
        }
    }

    /// Plans the next frame without writing it.
    pub(super) fn skip(&mut self) {
        self.plan();
    }

    /// The frame the next plan is for.
    pub(super) fn frame(&self) -> u64 {
        self.frame
    }
}

/// A frame's bytes, written into a buffer kept from frame to frame: its bytes are
/// initialised once, when it grows, so a frame's literal bytes are written where they stay
/// (no zeroing first, no copy).
#[derive(Debug, Clone, Default)]
pub(super) struct Out {
    buf: Vec<u8>,
    len: usize,
}

impl Out {
    /// A buffer for the frames of a blob of `size` bytes: room for its first frame (a small
    /// layer's check or read allocates no more than its size); it grows once if the last
    /// frame is longer.
    pub(super) fn for_frames(size: u64) -> Out {
        Out {
            buf: vec![0; frame_range(size, 0).end as usize + 64],
            len: 0,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The next `n` bytes, to be written (what they held before is overwritten).
    fn slot(&mut self, n: usize) -> &mut [u8] {
        let end = self.len + n;
        if end > self.buf.len() {
            self.buf.resize(end.max(2 * self.buf.len()), 0);
        }
        let at = self.len;
        self.len = end;
        &mut self.buf[at..end]
    }

    fn push(&mut self, b: u8) {
        self.slot(1)[0] = b;
    }

    /// The first `n` (at most 8) little-endian bytes of `word`, written as one word (a copy
    /// of a length known only at run time would be a call per write).
    fn put_word(&mut self, word: u64, n: usize) {
        let at = self.len;
        self.slot(8).copy_from_slice(&word.to_le_bytes());
        self.len = at + n.min(8);
    }

    fn extend_from_slice(&mut self, b: &[u8]) {
        self.slot(b.len()).copy_from_slice(b);
    }

    /// `n` copies of `byte`.
    fn fill(&mut self, byte: u8, n: usize) {
        self.slot(n).fill(byte);
    }

    /// The bytes written from `at` on.
    fn since(&self, at: usize) -> &[u8] {
        &self.buf[at..self.len]
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Bit position after a stored block of `len` bytes begun at `bits`.
fn stored_bits(bits: u64, len: u64) -> u64 {
    (bits + 3).div_ceil(8) * 8 + 32 + 8 * len
}

/// Bytes the final literal block can hold when the data so far ends at `bits`: what the
/// frame has left after the member's header and trailer and the block's own header (two
/// blocks when it holds more than one can). `None`: the frame is already too full.
fn final_room(bits: u64, budget: u64) -> Option<u64> {
    let fixed = 10 + (bits + 3).div_ceil(8) + 4 + 8;
    let room = budget.checked_sub(fixed)?;
    if room > 65_535 {
        room.checked_sub(5).filter(|r| *r <= 2 * 65_535)
    } else {
        Some(room)
    }
}

/// How a frame's uncompressed bytes are heard: the gzip member's CRC and length, and the
/// layer's diff digest when it is being computed.
struct Uncompressed<'a> {
    /// The CRC-32, for gzip (zstd and uncompressed layers have none to make).
    crc: Option<crc32fast::Hasher>,
    len: u64,
    diff: Option<&'a mut Sha256>,
    zeros: crc::Zeros,
}

impl Uncompressed<'_> {
    fn bytes(&mut self, b: &[u8]) {
        if let Some(crc) = self.crc.as_mut() {
            crc.update(b);
        }
        self.len += b.len() as u64;
        if let Some(d) = self.diff.as_deref_mut() {
            d.update(b);
        }
    }

    /// A run: a long run of zeros advances the CRC by arithmetic (cheaper than hashing
    /// past a few KiB; the digest, when computed, still hears them); others are hashed.
    fn run(&mut self, byte: u8, len: u64) {
        if self.crc.is_none() && self.diff.is_none() {
            self.len += len;
            return;
        }
        let (Some(crc), true) = (self.crc.as_mut(), byte == 0 && len >= ZERO_RUN_ARITHMETIC) else {
            static ZEROS: [u8; 4096] = [0; 4096];
            let other;
            let buf: &[u8; 4096] = if byte == 0 {
                &ZEROS
            } else {
                other = [byte; 4096];
                &other
            };
            let mut left = len;
            while left > 0 {
                let n = left.min(4096) as usize;
                self.bytes(&buf[..n]);
                left -= n as u64;
            }
            return;
        };
        let advanced = self.zeros.append(crc.clone().finalize(), len);
        *crc = crc32fast::Hasher::new_with_initial(advanced);
        self.len += len;
        if let Some(d) = self.diff.as_deref_mut() {
            feed(d, 0, len);
        }
    }
}

/// Runs of zeros from this long on advance a CRC by arithmetic rather than by hashing.
const ZERO_RUN_ARITHMETIC: u64 = 1024;

/// Feeds `len` copies of `byte` to a SHA-256.
fn feed(d: &mut Sha256, byte: u8, mut len: u64) {
    let buf = [byte; 4096];
    while len > 0 {
        let n = len.min(4096) as usize;
        d.update(&buf[..n]);
        len -= n as u64;
    }
}

/// Appends bytes `from..from + len` of `seg` to `out`.
fn put_segment(key: &[u64; 4], seg: &Seg, from: u64, len: u64, out: &mut Out) {
    seg.render(key, from, out.slot(len as usize));
}

fn render_plain(key: &[u64; 4], ops: &[Op], out: &mut Out, sink: &mut Uncompressed) {
    // The frame is the tar's bytes themselves: heard in one call once written.
    for op in ops {
        match *op {
            Op::Literal { seg, from, len, .. } | Op::Tail { seg, from, len } => {
                put_segment(key, &seg, from, len, out);
            }
            Op::Run { byte, len, .. } => out.fill(byte, len as usize),
            Op::Final { .. } => {}
        }
    }
    sink.bytes(out.as_slice());
}

/// Where a literal block's bytes begin in the frame, until they are heard (all of a block
/// at once: one CRC call, not one per segment).
#[derive(Default)]
struct Unheard(Option<usize>);

impl Unheard {
    fn hear(&mut self, out: &Out, sink: &mut Uncompressed) {
        if let Some(at) = self.0.take() {
            sink.bytes(out.since(at));
        }
    }
}

fn render_zstd(key: &[u64; 4], ops: &[Op], out: &mut Out, sink: &mut Uncompressed) {
    // Magic; no content size, checksum or dictionary, not single-segment; a 128 KiB window.
    out.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x38]);
    let block_header = |out: &mut Out, last: bool, kind: u32, size: u64| {
        let h = u32::from(last) | (kind << 1) | ((size as u32) << 3);
        out.extend_from_slice(&h.to_le_bytes()[..3]);
    };
    let mut unheard = Unheard::default();
    for op in ops {
        match *op {
            Op::Literal {
                seg,
                from,
                len,
                block,
            } => {
                if block > 0 {
                    unheard.hear(out, sink);
                    block_header(out, false, 0, block);
                    unheard.0 = Some(out.len());
                }
                put_segment(key, &seg, from, len, out);
            }
            Op::Run { byte, len, .. } => {
                unheard.hear(out, sink);
                block_header(out, false, 1, len);
                out.push(byte);
                sink.run(byte, len);
            }
            Op::Final { len } => {
                unheard.hear(out, sink);
                block_header(out, true, 0, len);
                unheard.0 = Some(out.len());
            }
            Op::Tail { seg, from, len } => put_segment(key, &seg, from, len, out),
        }
    }
    unheard.hear(out, sink);
}

/// Writes deflate's bit stream: bits go in from the least significant end of each byte.
struct Bits<'a> {
    out: &'a mut Out,
    acc: u64,
    n: u32,
}

impl Bits<'_> {
    /// Adds `count` bits (at most 56: the accumulator holds fewer than 8 before).
    fn put(&mut self, value: u64, count: u32) {
        self.acc |= value << self.n;
        self.n += count;
        let whole = self.n / 8;
        if whole > 0 {
            self.out.put_word(self.acc, whole as usize);
            self.acc = self.acc.checked_shr(8 * whole).unwrap_or(0);
            self.n -= 8 * whole;
        }
    }

    /// A Huffman code: sent from its most significant bit.
    fn code(&mut self, code: u32, len: u32) {
        let reversed = code.reverse_bits() >> (32 - len);
        self.put(u64::from(reversed), len);
    }

    /// Pads to the next byte boundary.
    fn align(&mut self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc = 0;
            self.n = 0;
        }
    }

    fn stored_header(&mut self, last: bool, len: u64) {
        self.put(u64::from(last), 3);
        self.align();
        let len = len as u16;
        self.out.extend_from_slice(&len.to_le_bytes());
        self.out.extend_from_slice(&(!len).to_le_bytes());
    }

    /// The fixed-Huffman code of a literal byte or of a length's symbol.
    fn literal(&mut self, byte: u8) {
        if byte < 144 {
            self.code(0x30 + u32::from(byte), 8);
        } else {
            self.code(0x190 + u32::from(byte) - 144, 9);
        }
    }

    /// `count` back-references of 258 bytes at distance 1 (most of a run of zeros), four
    /// at a time: each is the same 13 bits (length symbol 285's code, distance code 0).
    fn copies_258(&mut self, mut count: u64) {
        const ONE: u64 = (0xC5u8.reverse_bits()) as u64;
        const FOUR: u64 = ONE | ONE << 13 | ONE << 26 | ONE << 39;
        while count >= 4 {
            self.put(FOUR, 52);
            count -= 4;
        }
        for _ in 0..count {
            self.put(ONE, 13);
        }
    }

    /// A back-reference of `len` (3..=258) bytes at distance 1.
    fn copy(&mut self, len: u64) {
        let (symbol, extra, extra_bits) = length_symbol(len);
        if symbol < 280 {
            self.code(symbol - 256, 7);
        } else {
            self.code(0xC0 + symbol - 280, 8);
        }
        if extra_bits > 0 {
            self.put(extra, extra_bits);
        }
        self.code(0, 5);
    }
}

const LENGTH_BASE: [u64; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u32; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];

/// Deflate's length symbol for `len` (3..=258), its extra bits' value and count.
fn length_symbol(len: u64) -> (u32, u64, u32) {
    let i = LENGTH_BASE.iter().rposition(|b| *b <= len).unwrap_or(0);
    (257 + i as u32, len - LENGTH_BASE[i], LENGTH_EXTRA[i])
}

/// Bits of a back-reference of `len` bytes: its length code and extra bits, distance code.
fn copy_bits(len: u64) -> u64 {
    let (symbol, _, extra) = length_symbol(len);
    let code = if symbol < 280 { 7 } else { 8 };
    u64::from(code + extra) + 5
}

fn literal_bits(byte: u8) -> u64 {
    if byte < 144 {
        8
    } else {
        9
    }
}

/// A run of `len` bytes as back-references: how many of 258, then up to two shorter ones,
/// then literal bytes (a run of one or two).
fn run_parts(len: u64) -> (u64, [u64; 2], u64) {
    if len < 3 {
        return (0, [0, 0], len);
    }
    let (mut full, rest) = (len / 258, len % 258);
    match rest {
        0 => (full, [0, 0], 0),
        1 | 2 => {
            full -= 1;
            let r = rest + 258;
            (full, [r - 3, 3], 0)
        }
        r => (full, [r, 0], 0),
    }
}

/// Bits a run's symbols take (not its block header or end); without history its first byte
/// is a literal.
fn run_bits(byte: u8, len: u64, history: bool) -> u64 {
    let (len, first) = if history || len == 0 {
        (len, 0)
    } else {
        (len - 1, literal_bits(byte))
    };
    let (full, tail, lits) = run_parts(len);
    first
        + full * 13
        + tail
            .iter()
            .filter(|t| **t > 0)
            .map(|t| copy_bits(*t))
            .sum::<u64>()
        + lits * literal_bits(byte)
}

/// Writes a gzip member; its trailer's CRC is `known`, or made from the bytes (returned).
#[allow(clippy::too_many_lines)]
fn render_gzip(
    key: &[u64; 4],
    ops: &[Op],
    out: &mut Out,
    sink: &mut Uncompressed,
    known: Option<u32>,
) -> u32 {
    // Magic, deflate, no flags, a time that is the key's (every member of the layer has it:
    // even an empty layer is unique), no extra flags, unknown OS.
    let mixed = key
        .iter()
        .fold(0u64, |h, w| crate::content::mix::splitmix64(h ^ w));
    let time = (mixed as u32 | 1).to_le_bytes();
    out.extend_from_slice(&[0x1F, 0x8B, 8, 0]);
    out.extend_from_slice(&time);
    out.extend_from_slice(&[0, 0xFF]);
    let mut bits = Bits { out, acc: 0, n: 0 };
    // The final block's bytes left in its current stored block.
    let mut block_left = 0u64;
    let mut final_left = 0u64;
    let mut unheard = Unheard::default();
    for op in ops {
        match *op {
            Op::Literal {
                seg,
                from,
                len,
                block,
            } => {
                if block > 0 {
                    unheard.hear(bits.out, sink);
                    bits.stored_header(false, block);
                    unheard.0 = Some(bits.out.len());
                }
                put_segment(key, &seg, from, len, bits.out);
            }
            Op::Run { byte, len, history } => {
                unheard.hear(bits.out, sink);
                bits.put(0, 1);
                bits.put(1, 2);
                let mut len = len;
                if !history && len > 0 {
                    bits.literal(byte);
                    len -= 1;
                }
                let (full, tail, lits) = run_parts(len);
                bits.copies_258(full);
                for t in tail.into_iter().filter(|t| *t > 0) {
                    bits.copy(t);
                }
                for _ in 0..lits {
                    bits.literal(byte);
                }
                bits.code(0, 7);
                sink.run(byte, op_len(op));
            }
            Op::Final { len } => {
                unheard.hear(bits.out, sink);
                final_left = len;
                block_left = len.min(65_535);
                bits.stored_header(final_left == block_left, block_left);
                unheard.0 = Some(bits.out.len());
            }
            Op::Tail { seg, from, len } => {
                let (mut from, mut len) = (from, len);
                while len > 0 {
                    if block_left == 0 {
                        // The final literal's second stored block: its header is not data.
                        unheard.hear(bits.out, sink);
                        block_left = final_left.min(65_535);
                        bits.stored_header(final_left == block_left, block_left);
                        unheard.0 = Some(bits.out.len());
                    }
                    let n = len.min(block_left);
                    put_segment(key, &seg, from, n, bits.out);
                    block_left -= n;
                    final_left -= n;
                    from += n;
                    len -= n;
                }
            }
        }
    }
    unheard.hear(bits.out, sink);
    bits.align();
    let crc = known.unwrap_or_else(|| sink.crc.take().map_or(0, crc32fast::Hasher::finalize));
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(sink.len as u32).to_le_bytes());
    crc
}

fn op_len(op: &Op) -> u64 {
    match *op {
        Op::Literal { len, .. } | Op::Run { len, .. } | Op::Tail { len, .. } => len,
        Op::Final { .. } => 0,
    }
}

/// Generates a layer frame by frame, keeping the last frame it made (a reader's or a
/// check's position moves forward; a jump back starts the walk again).
#[derive(Debug, Clone)]
pub(super) struct Frames {
    start: Cursor,
    cursor: Cursor,
    buf: Out,
    /// The frame `buf` holds.
    held: Option<u64>,
}

impl Frames {
    pub(super) fn new(key: [u64; 4], form: LayerForm, size: u64) -> Frames {
        let cursor = Cursor::new(key, form, size);
        Frames {
            start: cursor.clone(),
            cursor,
            buf: Out::for_frames(size),
            held: None,
        }
    }

    /// The frame holding byte `offset` and the offset its bytes start at.
    pub(super) fn frame_of(&self, offset: u64) -> u64 {
        (offset / FRAME).min(frame_count(self.cursor.size) - 1)
    }

    /// Whether frame `k` is the one held (asking for it makes nothing).
    pub(super) fn holds(&self, k: u64) -> bool {
        self.held == Some(k)
    }

    /// The bytes of frame `k`, and where they start in the blob; `diff` hears its
    /// uncompressed bytes when the frame is made now.
    pub(super) fn frame(&mut self, k: u64, diff: Option<&mut Sha256>) -> (u64, &[u8]) {
        if self.held != Some(k) {
            if self.cursor.frame() > k {
                self.cursor = self.start.clone();
            }
            while self.cursor.frame() < k {
                self.cursor.skip();
            }
            self.cursor.render_next(&mut self.buf, diff);
            self.held = Some(k);
        }
        (frame_range(self.cursor.size, k).start, self.buf.as_slice())
    }

    /// Copies bytes `offset..offset + out.len()` of the blob into `out`.
    pub(super) fn fill(&mut self, mut offset: u64, mut out: &mut [u8]) {
        while !out.is_empty() {
            let k = self.frame_of(offset);
            let (start, bytes) = self.frame(k, None);
            let within = (offset - start) as usize;
            let n = (bytes.len() - within).min(out.len());
            out[..n].copy_from_slice(&bytes[within..within + n]);
            out = &mut out[n..];
            offset += n as u64;
        }
    }
}

/// The blob's SHA-256 and its uncompressed tar's (the diff_id), in one pass; `go_on` hears
/// the bytes of each frame and can stop the hashing (`None`).
pub(super) fn digests_while(
    key: [u64; 4],
    form: LayerForm,
    size: u64,
    mut go_on: impl FnMut(u64) -> bool,
) -> Option<([u8; 32], [u8; 32])> {
    let mut cursor = Cursor::new(key, form, size);
    let mut blob = Sha256::new();
    let mut diff = Sha256::new();
    let mut buf = Out::for_frames(size);
    for _ in 0..frame_count(size) {
        cursor.render_next(&mut buf, Some(&mut diff));
        blob.update(buf.as_slice());
        if !go_on(buf.len() as u64) {
            return None;
        }
    }
    Some((blob.finalize().into(), diff.finalize().into()))
}

#[cfg(test)]
mod tests;
