//! The file tree inside a generated layer: the tar stream as a sequence of segments (a
//! header, random file bytes, zeros, a run of zeros), each decided from the
//! layer's key and the walk's own small state, so a walk can be replayed from the start to
//! any point without generating a byte.
//!
//! File sizes follow a log-normal fitted to a measured image tree (docs/images.md: median
//! 1.9 KB, 90th percentile 23.7 KB); file data alternates 16 KiB of random bytes with a run
//! of zeros, the run's length steered so the whole tar holds `1 / ratio` uncompressed
//! bytes for every byte of literal data (headers and padding count as literal).

use crate::content::mix::splitmix64;

use super::pool::PIECE;

/// `ln` of the median file size (1,915 bytes).
const SIZE_MU: f64 = 7.557;
/// The log-normal's spread: the 90th percentile at 23,703 bytes.
const SIZE_SIGMA: f64 = 1.963;
/// The largest file a layer holds (the ustar size field reaches 8 GiB).
const MAX_FILE: u64 = 1 << 30;
/// The longest segment: every segment fits one stored deflate block.
pub(super) const MAX_SEGMENT: u64 = 65_535;
/// One in this many entries starts a directory (the measured tree: 7.7 files a directory).
const FILES_PER_DIR: u64 = 8;
/// How deep directories nest under the layer's top directory.
const MAX_DEPTH: usize = 3;
/// Every entry's modification time: 2017-06-20, the `created` of generated configs.
pub const MTIME: u64 = 1_497_916_800;

/// One tar header's facts; [`Header::render`] writes its 512 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    top: u32,
    dirs: [u32; MAX_DEPTH],
    depth: u8,
    /// The file's number, or `None` for the directory `dirs[..depth]`.
    file: Option<u64>,
    size: u64,
}

/// A run of the tar stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seg {
    Header(Header),
    /// `len` random bytes of piece `id` (`pool`), the last one `last`.
    Random {
        id: u64,
        len: u64,
        last: u8,
    },
    Zeros(u64),
    /// `len` copies of `byte` (the stream's previous byte, after a piece of random bytes).
    Run {
        byte: u8,
        len: u64,
    },
}

impl Seg {
    /// The segment's last byte (`None` when it is empty).
    pub(super) fn last_byte(&self) -> Option<u8> {
        if self.len() == 0 {
            return None;
        }
        Some(match *self {
            // A ustar header ends inside its zero-filled prefix field.
            Seg::Header(_) | Seg::Zeros(_) => 0,
            Seg::Random { last, .. } => last,
            Seg::Run { byte, .. } => byte,
        })
    }

    pub(super) fn len(&self) -> u64 {
        match *self {
            Seg::Header(_) => 512,
            Seg::Random { len, .. } | Seg::Zeros(len) | Seg::Run { len, .. } => len,
        }
    }

    /// Writes bytes `from..from + out.len()` of the segment into `out`.
    pub(super) fn render(&self, key: &[u64; 4], from: u64, out: &mut [u8]) {
        match *self {
            Seg::Header(h) => match <&mut [u8; 512]>::try_from(&mut *out) {
                Ok(whole) if from == 0 => h.render_into(whole),
                _ => {
                    let bytes = h.render();
                    out.copy_from_slice(&bytes[from as usize..from as usize + out.len()]);
                }
            },
            Seg::Random { id, len, last } => {
                super::pool::piece_bytes(key, id, from, out);
                if from + out.len() as u64 == len {
                    if let Some(b) = out.last_mut() {
                        *b = last;
                    }
                }
            }
            Seg::Zeros(_) => out.fill(0),
            Seg::Run { byte, .. } => out.fill(byte),
        }
    }
}

impl Header {
    /// Writes the entry's name (`creb-XXXXXXXX/d3/d7/f12`, at most 71 bytes) into the
    /// header's 100-byte name field, without allocating: headers are made again for every
    /// frame that is read back.
    fn write_name(&self, field: &mut [u8]) {
        field[..5].copy_from_slice(b"creb-");
        for i in 0..8 {
            field[5 + i] = b"0123456789abcdef"[((self.top >> (28 - 4 * i)) & 0xF) as usize];
        }
        field[13] = b'/';
        let mut at = 14;
        for d in &self.dirs[..self.depth as usize] {
            field[at] = b'd';
            at = decimal(u64::from(*d), field, at + 1);
            field[at] = b'/';
            at += 1;
        }
        if let Some(f) = self.file {
            field[at] = b'f';
            decimal(f, field, at + 1);
        }
    }

    /// The ustar header block.
    pub(super) fn render(&self) -> [u8; 512] {
        let mut h = [0u8; 512];
        self.render_into(&mut h);
        h
    }

    /// [`Header::render`] into a block that may hold anything before: the fields every
    /// entry shares come from a template, and the checksum adds what differs to the
    /// template's.
    pub(super) fn render_into(&self, h: &mut [u8; 512]) {
        let (template, base) = header_template();
        // In blocks of 128 bytes, which the compiler copies with vector moves; a 512-byte
        // copy is a call into the C library's `memcpy` (a `rep movs` in musl) per header.
        for (to, from) in h.chunks_exact_mut(128).zip(template.chunks_exact(128)) {
            if let (Ok(to), Ok(from)) =
                (<&mut [u8; 128]>::try_from(to), <&[u8; 128]>::try_from(from))
            {
                *to = *from;
            }
        }
        self.write_name(h);
        if self.file.is_none() {
            octal(&mut h[100..108], 0o755);
            h[156] = b'5';
        }
        octal(&mut h[124..136], self.size);
        let varying: u32 = h[..108]
            .iter()
            .chain(&h[124..136])
            .chain(&h[156..157])
            .map(|b| u32::from(*b))
            .sum();
        octal(&mut h[148..155], u64::from(base + varying));
        h[155] = b' ';
    }
}

/// The header fields every entry shares (a regular file's mode and type, owners, time,
/// magic), with the name and size left blank, and the checksum of everything but the name,
/// mode, size and type (its own field counted as spaces).
fn header_template() -> &'static ([u8; 512], u32) {
    static TEMPLATE: std::sync::OnceLock<([u8; 512], u32)> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let mut h = [0u8; 512];
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[136..148], MTIME);
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        octal(&mut h[329..337], 0);
        octal(&mut h[337..345], 0);
        h[148..156].fill(b' ');
        let base = h.iter().map(|b| u32::from(*b)).sum();
        octal(&mut h[100..108], 0o644);
        h[156] = b'0';
        (h, base)
    })
}

/// Writes `value`'s decimal digits into `field` from `at` on; where they end.
fn decimal(value: u64, field: &mut [u8], at: usize) -> usize {
    let digits = value.checked_ilog10().unwrap_or(0) as usize + 1;
    let mut v = value;
    for i in (at..at + digits).rev() {
        field[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    at + digits
}

/// Writes `value` as zero-padded octal digits ending in a NUL, filling `field`.
fn octal(field: &mut [u8], mut value: u64) {
    let digits = field.len() - 1;
    for i in (0..digits).rev() {
        field[i] = b'0' + (value & 7) as u8;
        value >>= 3;
    }
    field[digits] = 0;
}

/// What the walk is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The layer's top directory comes next.
    Top,
    /// An entry comes next (or the end, when the budget is spent).
    Entry,
    /// Inside a file's data: bytes left, and how many of them are random.
    Data { left: u64, random: u64 },
    /// The run that follows a piece of random bytes, then the data goes on.
    Run {
        byte: u8,
        len: u64,
        left: u64,
        random: u64,
    },
    /// After the end marker: the layer's random bytes, as many as its size leaves room for
    /// (readers stop at the end marker; the diff digest covers them).
    Trail,
}

/// What a compression charges for the tar stream, as the walk estimates it to decide when
/// the files end (an estimate on the safe side: what it leaves unspent becomes zeros after
/// the end marker).
#[derive(Debug, Clone, Copy)]
pub(super) struct Costs {
    /// Bytes per segment of random bytes or zeros (a block header).
    pub literal_overhead: u64,
    /// Bytes every run costs, and bytes per byte of its length as a fraction (`run_bytes`
    /// per `run_per` bytes, rounded up: integer arithmetic, no call to a C library's `ceil`
    /// per file).
    pub run_fixed: u64,
    pub run_bytes: u64,
    pub run_per: u64,
    /// Whether a run costs its length (no compression).
    pub run_is_literal: bool,
    /// Bytes a frame costs besides its content, on the safe side.
    pub per_frame: u64,
    /// Bytes a frame holds.
    pub frame: u64,
    /// Bytes kept back for what the estimate misses.
    pub margin: u64,
}

impl Costs {
    fn literal(&self, len: u64) -> u64 {
        if len == 0 {
            0
        } else {
            len + self.literal_overhead
        }
    }

    fn run(&self, len: u64) -> u64 {
        if len == 0 {
            0
        } else if self.run_is_literal {
            len
        } else {
            self.run_fixed + self.run_share(len)
        }
    }

    /// What `len` bytes of runs cost beyond their fixed costs.
    fn run_share(&self, len: u64) -> u64 {
        (len * self.run_bytes).div_ceil(self.run_per.max(1))
    }

    /// `content` bytes with the costs of the frames they spread over.
    fn framed(&self, content: u64) -> u64 {
        content + (content / self.frame.max(1) + 2) * self.per_frame + self.margin
    }

    /// A file's data: `random` random bytes in pieces, each followed by part of the runs
    /// (`len - random` bytes together), then the padding to a whole block.
    fn data(&self, len: u64, random: u64) -> u64 {
        let pieces = random.div_ceil(PIECE).max(1);
        let runs = len - random;
        let run_cost = if runs == 0 {
            0
        } else if self.run_is_literal {
            runs
        } else {
            pieces * self.run_fixed + self.run_share(runs)
        };
        random + pieces * self.literal_overhead + run_cost + self.literal(pad(len))
    }

    /// The end marker: a run of 1,024 zeros (its first byte a literal where the byte before
    /// is not a zero).
    fn end(&self) -> u64 {
        self.run(1024)
    }
}

/// Zeros after `len` bytes of file data, to a whole 512-byte block.
fn pad(len: u64) -> u64 {
    (512 - len % 512) % 512
}

/// The walk over a layer's tar stream: the next segment each call, decided by the key, the
/// blob's size and how much of it the frames already hold.
#[derive(Debug, Clone)]
pub(super) struct Walk {
    key: [u64; 4],
    ratio: f64,
    size: u64,
    costs: Costs,
    phase: Phase,
    /// Entries begun (the top directory is entry 0).
    entry: u64,
    dirs: [u32; MAX_DEPTH],
    depth: u8,
    next_dir: u32,
    /// The size of the file whose data is being walked (its padding follows).
    file_size: u64,
    /// Random pieces begun (each has its own generator).
    pieces: u64,
    /// Literal (random, header, zero) and all bytes of the tar so far: the ratio's steering.
    literal: u64,
    total: u64,
    /// Whether the last file has begun (the end marker follows it).
    last: bool,
}

impl Walk {
    pub(super) fn new(key: [u64; 4], ratio: f64, size: u64, costs: Costs) -> Walk {
        Walk {
            key,
            ratio,
            size,
            costs,
            phase: Phase::Top,
            entry: 0,
            dirs: [0; MAX_DEPTH],
            depth: 0,
            next_dir: 0,
            file_size: 0,
            pieces: 0,
            literal: 0,
            total: 0,
            last: false,
        }
    }

    fn header(&self, file: Option<u64>, size: u64) -> Header {
        Header {
            top: self.key[0] as u32,
            dirs: self.dirs,
            depth: self.depth,
            file,
            size,
        }
    }

    fn emit(&mut self, seg: Seg) -> Seg {
        let len = seg.len();
        self.total += len;
        if !matches!(seg, Seg::Run { .. }) {
            self.literal += len;
        }
        seg
    }

    /// The next segment; `used` is the compressed bytes the frames hold before it.
    #[allow(clippy::too_many_lines)]
    pub(super) fn next(&mut self, used: u64) -> Seg {
        match self.phase {
            Phase::Top => {
                let c = self.costs;
                // A blob too small for a directory is an empty tar: the end marker alone.
                if c.framed(c.literal(512) + c.end()) > self.size.saturating_sub(used) {
                    return self.end();
                }
                self.entry = 1;
                self.phase = Phase::Entry;
                let h = self.header(None, 0);
                self.emit(Seg::Header(h))
            }
            Phase::Entry => self.entry_or_end(used),
            Phase::Data { left: 0, .. } => {
                self.phase = Phase::Entry;
                match pad(self.file_size) {
                    0 => self.entry_or_end(used),
                    n => self.emit(Seg::Zeros(n)),
                }
            }
            Phase::Data { left, random } => {
                let take = random.clamp(1, PIECE).min(left);
                let random_after = random.saturating_sub(take);
                let left_after = left - take;
                // The run after this piece: its share of what is not random.
                let runs_left = left_after - random_after.min(left_after);
                let pieces_left = random_after.div_ceil(PIECE) + 1;
                let run = runs_left.div_ceil(pieces_left).min(MAX_SEGMENT);
                let id = self.pieces;
                self.pieces += 1;
                // Runs are zeros (as a file's sparse regions are): a gzip frame's CRC skips
                // them by arithmetic.
                let last = 0u8;
                self.phase = if run > 0 {
                    Phase::Run {
                        byte: last,
                        len: run,
                        left: left_after - run,
                        random: random_after,
                    }
                } else {
                    Phase::Data {
                        left: left_after,
                        random: random_after,
                    }
                };
                self.emit(Seg::Random {
                    id,
                    len: take,
                    last,
                })
            }
            Phase::Run {
                byte,
                len,
                left,
                random,
            } => {
                self.phase = Phase::Data { left, random };
                self.emit(Seg::Run { byte, len })
            }
            Phase::Trail => {
                // Key-derived bytes, so that even an empty tar is unique to its layer.
                let id = self.pieces;
                self.pieces += 1;
                self.emit(Seg::Random {
                    id,
                    len: PIECE,
                    last: 0,
                })
            }
        }
    }

    /// The end marker: two blocks of zeros, as one run.
    fn end(&mut self) -> Seg {
        self.phase = Phase::Trail;
        self.emit(Seg::Run { byte: 0, len: 1024 })
    }

    /// How many of a file's `len` bytes are random, so the tar after it holds `1 / ratio`
    /// bytes for each literal one (at least one random byte, so a run has one before it).
    fn random_part(&self, len: u64) -> u64 {
        let p = pad(len);
        let want = self.ratio * (self.total + 512 + len + p) as f64;
        let random = want - (self.literal + 512 + p) as f64;
        // Rounded half up (`f64::round` is a call into the C library in a static build).
        ((random.max(0.0) + 0.5) as u64).clamp(len.min(1), len)
    }

    fn entry_or_end(&mut self, used: u64) -> Seg {
        if self.last {
            return self.end();
        }
        let left = self.size.saturating_sub(used);
        let c = self.costs;
        let fits = |content: u64| c.framed(content + c.end()) <= left;
        let mut rng = SplitMix(splitmix64(self.key[1] ^ self.entry));
        let entry = self.entry;
        if entry > 1 && rng.next().is_multiple_of(FILES_PER_DIR) && fits(2 * c.literal(512)) {
            // A directory: below the current one, or beside the top's children.
            if (self.depth as usize) < MAX_DEPTH && rng.next().is_multiple_of(2) {
                self.depth += 1;
            } else {
                self.depth = 1;
            }
            self.dirs[self.depth as usize - 1] = self.next_dir;
            self.next_dir += 1;
            self.entry += 1;
            let h = self.header(None, 0);
            return self.emit(Seg::Header(h));
        }
        let drawn = file_size(rng.open_unit());
        let cost = |w: &Walk, len: u64| c.literal(512) + c.data(len, w.random_part(len));
        let len = if fits(cost(self, drawn)) {
            drawn
        } else if !fits(cost(self, 0)) {
            return self.end();
        } else {
            // The last file: the largest that leaves room for the end marker.
            self.last = true;
            let (mut lo, mut hi) = (0, drawn);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(cost(self, mid)) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo
        };
        let random = self.random_part(len);
        self.entry += 1;
        self.file_size = len;
        self.phase = Phase::Data { left: len, random };
        let h = self.header(Some(entry), len);
        self.emit(Seg::Header(h))
    }
}

/// SplitMix64 as a sequence of draws.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        splitmix64(self.0)
    }

    /// Uniform in (0, 1), never either end.
    fn open_unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// Bins of the file-size quantile table: sizes between two bins' edges are interpolated.
const SIZE_BINS: usize = 4096;

/// Bins at each end where sizes are computed exactly (the tails, where the table's steps
/// are widest in size).
const EXACT_BINS: usize = 8;

/// The file size at quantile `u` (0 < u < 1) of the log-normal: from a table of the sizes at
/// `i / SIZE_BINS`, linearly between them, and computed exactly in the outermost bins (one
/// draw in 256). A table lookup rather than four calls into the C library's `ln`, `sqrt`,
/// `cos` and `exp` per file: a layer's walk is replayed for every frame read back.
fn file_size(u: f64) -> u64 {
    // Single precision (16 KiB, half of a core's first-level cache: the walk runs between
    // pieces and socket buffers that evict a larger table); the sizes it holds are below
    // 600 KB, exact in an f32 to a thirty-second of a byte.
    static TABLE: std::sync::OnceLock<Box<[f32]>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (0..=SIZE_BINS)
            .map(|i| exact_size(i as f64 / SIZE_BINS as f64) as f32)
            .collect()
    });
    let x = u * SIZE_BINS as f64;
    let i = x as usize;
    let size = if (EXACT_BINS..SIZE_BINS - EXACT_BINS).contains(&i) {
        let (low, high) = (f64::from(table[i]), f64::from(table[i + 1]));
        low + (high - low) * (x - i as f64)
    } else {
        exact_size(u)
    };
    ((size + 0.5) as u64).min(MAX_FILE)
}

fn exact_size(u: f64) -> f64 {
    (SIZE_MU + SIZE_SIGMA * normal_quantile(u)).exp()
}

/// The standard normal's quantile function (P. J. Acklam's rational approximation, relative
/// error below 1.2e-9): `-inf` at 0, `inf` at 1.
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p <= 0.0 {
        f64::NEG_INFINITY
    } else if p >= 1.0 {
        f64::INFINITY
    } else if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_quantile_is_the_tabulated_one() {
        // Values of the standard normal's quantile function to 9 digits.
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_985),
            (0.841_344_746_068_543, 1.0),
            (0.9, 1.281_551_566),
            (0.001, -3.090_232_306),
            (0.02, -2.053_748_911),
            (0.99, 2.326_347_874),
            (1e-6, -4.753_424_309),
        ] {
            let got = normal_quantile(p);
            assert!(
                (got - z).abs() < 1e-8 * z.abs().max(1.0),
                "{p}: {got} not {z}"
            );
        }
        assert_eq!(normal_quantile(0.0), f64::NEG_INFINITY);
        assert_eq!(normal_quantile(1.0), f64::INFINITY);
    }

    #[test]
    fn table_sizes_follow_the_exact_ones() {
        // Within a bin the table's linear step stays within 0.5% of the exact size (the
        // bins next to the exactly computed ends are the widest, in size), and the sizes
        // grow with the quantile.
        let mut last = 0;
        for k in 1..20_000u32 {
            let u = f64::from(k) / 20_000.0 - 0.000_01;
            let exact = exact_size(u);
            let got = file_size(u) as f64;
            assert!(
                (got - exact).abs() <= 1.0 + 0.005 * exact,
                "{u}: {got} against {exact}"
            );
            assert!(file_size(u) >= last);
            last = file_size(u);
        }
        assert_eq!(file_size(1.0 - 1e-16), MAX_FILE);
        assert!(file_size(1e-12) <= 2);
    }
}
