//! The replay's first pass keeps the items it read, so the second pass does not parse the
//! trace again.
//!
//! A replay goes over its trace twice with flat memory: pass 1 builds the catalog (what
//! exists, its sizes and digests), pass 2 plans the operations. Parsing JSON (and
//! decompressing) is most of what a pass costs; a [`SpoolWriter`] beside pass 1 writes each [`Item`] in a
//! compact binary form (about 30 bytes a record) to an unnamed temporary file, and pass 2
//! reads them back from the [`Spool`] — the same items in the same order, for a few hundred
//! instructions each instead of thousands. The file has no name (it disappears with the
//! process) and lives in the run's output directory, or in the temporary directory
//! (`TMPDIR`) when there is none: on disk, not in the process's memory — unless that
//! directory is a memory-backed tmpfs, which is why it holds at most [`MAX_SPOOL_BYTES`].
//!
//! Spooling is an optimisation, never a requirement: if the file cannot be made or written
//! (a full disk) or would pass that size, the writer gives up, says why, and pass 2 reads
//! the trace as before.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use super::reader::{Item, SkipReason, TraceError};
use super::record::{Method, Record, SessionId, Sym, Target};

/// The most a spool holds: about 34 million records. A longer trace is read twice.
pub const MAX_SPOOL_BYTES: u64 = 1 << 30;

/// Writes pass 1's items to an unnamed temporary file.
#[derive(Debug)]
pub struct SpoolWriter {
    out: Result<BufWriter<File>, String>,
    items: u64,
    bytes: u64,
    limit: u64,
    buf: Vec<u8>,
}

impl SpoolWriter {
    /// A writer on a new file in the temporary directory.
    pub fn new() -> SpoolWriter {
        SpoolWriter::with(tempfile::tempfile(), MAX_SPOOL_BYTES)
    }

    /// A writer on a new file in `dir` (or the temporary directory), holding at most
    /// `limit` bytes.
    pub fn in_dir(dir: Option<&Path>, limit: u64) -> SpoolWriter {
        let file = match dir {
            Some(dir) => tempfile::tempfile_in(dir),
            None => tempfile::tempfile(),
        };
        SpoolWriter::with(file, limit)
    }

    /// If the file could not be made, a writer that keeps nothing.
    fn with(file: io::Result<File>, limit: u64) -> SpoolWriter {
        let out = file
            .map(|f| BufWriter::with_capacity(64 * 1024, f))
            .map_err(|e| format!("cannot create a temporary file: {e}"));
        SpoolWriter {
            out,
            items: 0,
            bytes: 0,
            limit,
            buf: Vec::with_capacity(64),
        }
    }

    /// Appends an item; after a failed write, or past the size limit, does nothing.
    pub fn push(&mut self, item: &Item) {
        let Ok(out) = &mut self.out else {
            return;
        };
        self.buf.clear();
        encode(item, &mut self.buf);
        self.bytes += self.buf.len() as u64;
        if self.bytes > self.limit {
            self.out = Err(format!(
                "the trace's items need more than {}",
                crate::units::ByteSize(self.limit)
            ));
            return;
        }
        if let Err(e) = out.write_all(&self.buf) {
            self.out = Err(format!("cannot write the temporary file: {e}"));
            return;
        }
        self.items += 1;
    }

    /// The spool, ready to be read from its start; or why there is none.
    pub fn finish(self) -> Result<Spool, String> {
        let mut file = self
            .out?
            .into_inner()
            .map_err(|e| format!("cannot write the temporary file: {}", e.error()))?;
        file.rewind()
            .map_err(|e| format!("cannot read the temporary file: {e}"))?;
        Ok(Spool {
            file,
            items: self.items,
            bytes: self.bytes,
        })
    }
}

impl Default for SpoolWriter {
    fn default() -> Self {
        SpoolWriter::new()
    }
}

/// Pass 1's items, to be read once.
#[derive(Debug)]
pub struct Spool {
    file: File,
    items: u64,
    bytes: u64,
}

impl Spool {
    /// Items written.
    pub fn len(&self) -> u64 {
        self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items == 0
    }

    /// Size of the file.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The items, in the order they were written.
    pub fn into_items(self) -> SpoolItems {
        SpoolItems::from_start(self.file, self.items)
    }

    /// The items once more, from the first (the spool stays for the next reading).
    pub fn items(&self) -> Result<SpoolItems, TraceError> {
        let file = self.file.try_clone().map_err(|source| TraceError::Io {
            file: PathBuf::from(SPOOL_NAME),
            cause: source,
        })?;
        Ok(SpoolItems::from_start(file, self.items))
    }
}

/// How errors name the spool.
const SPOOL_NAME: &str = "(the temporary copy of the trace's records)";

/// Reads a [`Spool`] back. A read failure (the file is the process's own, so only an I/O
/// error of the disk) ends the iteration with a [`TraceError::Io`].
#[derive(Debug)]
pub struct SpoolItems {
    input: BufReader<File>,
    left: u64,
    /// Why the file could not be read from its start, given as the first item.
    failed: Option<io::Error>,
}

impl SpoolItems {
    /// Reads `items` items of `file` from its start (readings share the file's offset, so
    /// each one rewinds it).
    fn from_start(mut file: File, items: u64) -> SpoolItems {
        let failed = file.rewind().err();
        SpoolItems {
            input: BufReader::with_capacity(64 * 1024, file),
            left: items,
            failed,
        }
    }
}

impl Iterator for SpoolItems {
    type Item = Result<Item, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let read = match self.failed.take() {
            Some(e) => Err(e),
            None => decode_buffered(&mut self.input),
        };
        match read {
            Ok(item) => Some(Ok(item)),
            Err(source) => {
                self.left = 0;
                Some(Err(TraceError::Io {
                    file: PathBuf::from(SPOOL_NAME),
                    cause: source,
                }))
            }
        }
    }
}

const RECORD: u8 = 0;
const SKIPPED: u8 = 1;

fn encode(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Record(r) => {
            out.push(RECORD);
            put(out, u64::from(r.file));
            put(out, r.number);
            put(out, zigzag(r.time_ms));
            out.push(method_code(r.method));
            encode_target(&r.target, out);
            put_sym(out, r.client);
            put(out, r.size);
            put(out, u64::from(r.status));
            put(out, r.duration_us);
            // Flags: bit 0 an id follows, bit 1 the size is unknown.
            let flags = u8::from(r.id.is_some()) | u8::from(r.size_unknown) << 1;
            out.push(flags);
            if let Some(id) = r.id {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        Item::Skipped {
            reason,
            file,
            number,
            client,
            time_ms,
        } => {
            out.push(SKIPPED);
            out.push(match reason {
                SkipReason::Invalid => 0,
                SkipReason::Duplicate => 1,
                SkipReason::FailedInTrace => 2,
            });
            put(out, u64::from(*file));
            put(out, *number);
            put_sym(out, *client);
            match time_ms {
                None => out.push(0),
                Some(t) => {
                    out.push(1);
                    put(out, zigzag(*t));
                }
            }
        }
    }
}

/// The most bytes an item takes (a record with every number at its longest is under 100).
const MAX_ITEM: usize = 128;

/// Decodes the next item of `input`: from its buffer as a plain slice when the buffer
/// holds any whole item (nearly always: the file is read 64 KiB at a time), which costs a
/// few instructions a field where reading through the buffer costs a call a byte; else
/// through the buffer, across its refills.
fn decode_buffered(input: &mut BufReader<File>) -> io::Result<Item> {
    let buf = input.fill_buf()?;
    if buf.len() < MAX_ITEM {
        return decode(input);
    }
    let mut rest = buf;
    let item = decode(&mut rest)?;
    let used = buf.len() - rest.len();
    input.consume(used);
    Ok(item)
}

fn decode(input: &mut impl BufRead) -> io::Result<Item> {
    match byte(input)? {
        RECORD => decode_record(input).map(Item::Record),
        SKIPPED => decode_skipped(input),
        _ => Err(corrupt("item kind")),
    }
}

/// A record, after its kind byte.
fn decode_record(input: &mut impl BufRead) -> io::Result<Record> {
    let file = get_u32(input)?;
    let number = get(input)?;
    let time_ms = unzigzag(get(input)?);
    let method = method_of(byte(input)?)?;
    let target = decode_target(input)?;
    let client = get_sym(input)?;
    let size = get(input)?;
    let status = u16::try_from(get(input)?).map_err(|_| corrupt("status"))?;
    let duration_us = get(input)?;
    let flags = byte(input)?;
    if flags > 0b11 {
        return Err(corrupt("flags"));
    }
    let id = if flags & 1 == 1 {
        let mut b = [0u8; 8];
        input.read_exact(&mut b)?;
        Some(u64::from_le_bytes(b))
    } else {
        None
    };
    Ok(Record {
        file,
        number,
        time_ms,
        method,
        target,
        client,
        size,
        status,
        duration_us,
        id,
        size_unknown: flags & 2 == 2,
    })
}

/// A skipped record, after its kind byte.
fn decode_skipped(input: &mut impl BufRead) -> io::Result<Item> {
    let reason = match byte(input)? {
        0 => SkipReason::Invalid,
        1 => SkipReason::Duplicate,
        2 => SkipReason::FailedInTrace,
        _ => return Err(corrupt("skip reason")),
    };
    let file = get_u32(input)?;
    let number = get(input)?;
    let client = get_sym(input)?;
    let time_ms = match byte(input)? {
        0 => None,
        1 => Some(unzigzag(get(input)?)),
        _ => return Err(corrupt("time")),
    };
    Ok(Item::Skipped {
        reason,
        file,
        number,
        client,
        time_ms,
    })
}

fn method_code(m: Method) -> u8 {
    match m {
        Method::Get => 0,
        Method::Head => 1,
        Method::Put => 2,
        Method::Patch => 3,
        Method::Post => 4,
        Method::Delete => 5,
    }
}

fn method_of(code: u8) -> io::Result<Method> {
    Ok(match code {
        0 => Method::Get,
        1 => Method::Head,
        2 => Method::Put,
        3 => Method::Patch,
        4 => Method::Post,
        5 => Method::Delete,
        _ => return Err(corrupt("method")),
    })
}

fn encode_target(t: &Target, out: &mut Vec<u8>) {
    let (code, a, b) = match *t {
        Target::Ping => (0, None, None),
        Target::Manifest { repo, reference } => (1, Some(repo), Some(reference)),
        Target::Blob { repo, digest } => (2, Some(repo), Some(digest)),
        Target::UploadStart { repo } => (3, Some(repo), None),
        Target::Upload { repo, session } => {
            out.push(4);
            put(out, u64::from(repo.0));
            // A hash: eight bytes as they are (as a varint it would take ten).
            out.extend_from_slice(&session.0.to_le_bytes());
            return;
        }
        Target::TagList { repo } => (5, Some(repo), None),
        Target::Other => (6, None, None),
        Target::Mount { repo, digest, from } => {
            out.push(7);
            for sym in [repo, digest, from] {
                put(out, u64::from(sym.0));
            }
            return;
        }
    };
    out.push(code);
    for sym in [a, b].into_iter().flatten() {
        put(out, u64::from(sym.0));
    }
}

fn decode_target(input: &mut impl BufRead) -> io::Result<Target> {
    let code = byte(input)?;
    let mut sym = || get_u32(input).map(Sym);
    Ok(match code {
        0 => Target::Ping,
        1 => Target::Manifest {
            repo: sym()?,
            reference: sym()?,
        },
        2 => Target::Blob {
            repo: sym()?,
            digest: sym()?,
        },
        3 => Target::UploadStart { repo: sym()? },
        4 => {
            let repo = sym()?;
            let mut id = [0u8; 8];
            for b in &mut id {
                *b = byte(input)?;
            }
            Target::Upload {
                repo,
                session: SessionId(u64::from_le_bytes(id)),
            }
        }
        5 => Target::TagList { repo: sym()? },
        6 => Target::Other,
        7 => Target::Mount {
            repo: sym()?,
            digest: sym()?,
            from: sym()?,
        },
        _ => return Err(corrupt("target")),
    })
}

/// An optional symbol: 0 for none, else the symbol plus one.
fn put_sym(out: &mut Vec<u8>, sym: Option<Sym>) {
    put(out, sym.map_or(0, |s| u64::from(s.0) + 1));
}

fn get_sym(input: &mut impl BufRead) -> io::Result<Option<Sym>> {
    match get(input)? {
        0 => Ok(None),
        n => u32::try_from(n - 1)
            .map(|s| Some(Sym(s)))
            .map_err(|_| corrupt("symbol")),
    }
}

/// LEB128: seven bits a byte, low first.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get(input: &mut impl BufRead) -> io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = byte(input)?;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(corrupt("number"))
}

fn get_u32(input: &mut impl BufRead) -> io::Result<u32> {
    u32::try_from(get(input)?).map_err(|_| corrupt("number"))
}

fn byte(input: &mut impl BufRead) -> io::Result<u8> {
    // From the buffer when it has the byte: a `read_exact` per byte would cost a call each.
    let buf = input.fill_buf()?;
    let Some(&b) = buf.first() else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the temporary file ends early",
        ));
    };
    input.consume(1);
    Ok(b)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the temporary file is damaged ({what})"),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sym() -> impl Strategy<Value = Sym> {
        prop_oneof![
            Just(Sym(0)),
            Just(Sym(u32::MAX)),
            any::<u32>().prop_map(Sym)
        ]
    }

    fn target() -> impl Strategy<Value = Target> {
        prop_oneof![
            Just(Target::Ping),
            (sym(), sym()).prop_map(|(repo, reference)| Target::Manifest { repo, reference }),
            (sym(), sym()).prop_map(|(repo, digest)| Target::Blob { repo, digest }),
            sym().prop_map(|repo| Target::UploadStart { repo }),
            (sym(), sym(), sym()).prop_map(|(repo, digest, from)| Target::Mount {
                repo,
                digest,
                from
            }),
            (sym(), any::<u64>()).prop_map(|(repo, s)| Target::Upload {
                repo,
                session: SessionId(s)
            }),
            sym().prop_map(|repo| Target::TagList { repo }),
            Just(Target::Other),
        ]
    }

    fn method() -> impl Strategy<Value = Method> {
        prop_oneof![
            Just(Method::Get),
            Just(Method::Head),
            Just(Method::Put),
            Just(Method::Patch),
            Just(Method::Post),
            Just(Method::Delete),
        ]
    }

    fn item() -> impl Strategy<Value = Item> {
        let record = (
            (any::<u32>(), any::<u64>(), any::<i64>(), method(), target()),
            (
                proptest::option::of(sym()),
                any::<u64>(),
                any::<u16>(),
                any::<u64>(),
                proptest::option::of(any::<u64>()),
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (file, number, time_ms, method, target),
                    (client, size, status, dur, id, size_unknown),
                )| {
                    Item::Record(Record {
                        file,
                        number,
                        time_ms,
                        method,
                        target,
                        client,
                        size,
                        status,
                        duration_us: dur,
                        id,
                        size_unknown,
                    })
                },
            );
        let skipped = (
            prop_oneof![
                Just(SkipReason::Invalid),
                Just(SkipReason::Duplicate),
                Just(SkipReason::FailedInTrace),
            ],
            any::<u32>(),
            any::<u64>(),
            proptest::option::of(sym()),
            proptest::option::of(any::<i64>()),
        )
            .prop_map(|(reason, file, number, client, time_ms)| Item::Skipped {
                reason,
                file,
                number,
                client,
                time_ms,
            });
        prop_oneof![record, skipped]
    }

    proptest! {
        #[test]
        fn items_come_back_as_written(items in proptest::collection::vec(item(), 0..64)) {
            let mut writer = SpoolWriter::new();
            for item in &items {
                writer.push(item);
            }
            let spool = writer.finish().unwrap();
            prop_assert_eq!(spool.len(), items.len() as u64);
            prop_assert_eq!(spool.bytes(), spool.file.metadata().unwrap().len());
            let back: Vec<Item> = spool.into_items().map(Result::unwrap).collect();
            prop_assert_eq!(back, items);
        }
    }

    #[test]
    fn the_longest_item_fits_the_bound_decoded_as_a_slice() {
        // `decode_buffered` reads an item from the buffer as a slice once `MAX_ITEM` bytes
        // are there: no item may take more, whatever its numbers and target.
        let max = Sym(u32::MAX);
        let targets = [
            Target::Manifest {
                repo: max,
                reference: max,
            },
            Target::Mount {
                repo: max,
                digest: max,
                from: max,
            },
            Target::Upload {
                repo: max,
                session: SessionId(u64::MAX),
            },
        ];
        for target in targets {
            for time_ms in [i64::MIN, i64::MAX] {
                let record = Record {
                    file: u32::MAX,
                    number: u64::MAX,
                    time_ms,
                    method: Method::Get,
                    target,
                    client: Some(max),
                    size: u64::MAX,
                    status: u16::MAX,
                    duration_us: u64::MAX,
                    id: Some(u64::MAX),
                    size_unknown: true,
                };
                let mut out = Vec::new();
                encode(&Item::Record(record), &mut out);
                assert!(out.len() <= MAX_ITEM, "{} bytes for {target:?}", out.len());
            }
        }
        let skipped = Item::Skipped {
            reason: SkipReason::FailedInTrace,
            file: u32::MAX,
            number: u64::MAX,
            client: Some(max),
            time_ms: Some(i64::MIN),
        };
        let mut out = Vec::new();
        encode(&skipped, &mut out);
        assert!(out.len() <= MAX_ITEM, "{} bytes", out.len());
    }

    #[test]
    fn items_across_the_read_buffers_refills_come_back_whole() {
        // Items of every length (numbers of one to ten bytes) past three 64 KiB refills:
        // some straddle a refill and are read through the buffer, the rest as slices.
        let items: Vec<Item> = (0..8_000u64)
            .map(|i| {
                let wide = 1u64 << (i % 64);
                Item::Record(Record {
                    file: (i % 7) as u32,
                    number: i,
                    time_ms: 1_497_916_800_000 - (i as i64) * 977,
                    method: Method::Get,
                    target: Target::Upload {
                        repo: Sym((wide >> 32) as u32),
                        session: SessionId(wide),
                    },
                    client: (i % 3 != 0).then_some(Sym(i as u32)),
                    size: wide,
                    status: 200,
                    duration_us: wide.wrapping_mul(3),
                    id: (i % 2 == 0).then_some(!wide),
                    size_unknown: i % 5 == 0,
                })
            })
            .collect();
        let mut writer = SpoolWriter::new();
        for item in &items {
            writer.push(item);
        }
        let spool = writer.finish().unwrap();
        assert!(spool.bytes() > 3 * 64 * 1024, "{}", spool.bytes());
        let back: Vec<Item> = spool.into_items().map(Result::unwrap).collect();
        assert_eq!(back, items);
    }

    #[test]
    fn a_cut_short_spool_is_an_error_not_a_short_trace() {
        let item = Item::Skipped {
            reason: SkipReason::Duplicate,
            file: 3,
            number: 7,
            client: Some(Sym(9)),
            time_ms: Some(1_497_916_800_000),
        };
        let mut writer = SpoolWriter::new();
        writer.push(&item);
        writer.push(&item);
        let spool = writer.finish().unwrap();
        let len = spool.file.metadata().unwrap().len();
        spool.file.set_len(len - 1).unwrap();
        let mut items = spool.into_items();
        assert_eq!(items.next().unwrap().unwrap(), item);
        let err = items.next().unwrap().unwrap_err();
        assert!(err.to_string().contains("ends early"), "{err}");
        assert!(items.next().is_none());
    }

    #[test]
    fn past_its_limit_a_spool_gives_up_and_says_why() {
        let item = Item::Skipped {
            reason: SkipReason::Invalid,
            file: 0,
            number: 1,
            client: None,
            time_ms: None,
        };
        let mut one = Vec::new();
        encode(&item, &mut one);
        let dir = tempfile::tempdir().unwrap();
        let mut writer = SpoolWriter::in_dir(Some(dir.path()), 3 * one.len() as u64);
        for _ in 0..3 {
            writer.push(&item);
        }
        assert_eq!(writer.finish().unwrap().len(), 3);
        let mut writer = SpoolWriter::in_dir(Some(dir.path()), 3 * one.len() as u64);
        for _ in 0..4 {
            writer.push(&item);
        }
        let why = writer.finish().unwrap_err();
        assert!(why.contains("need more than"), "{why}");
        // The file has no name: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn numbers_round_trip_at_their_limits() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX / 2, u64::MAX] {
            let mut out = Vec::new();
            put(&mut out, v);
            assert_eq!(get(&mut &out[..]).unwrap(), v);
            // Across the buffer's end: read through a buffer smaller than the number.
            out.push(0x2a);
            let mut small = io::BufReader::with_capacity(3, &out[..]);
            assert_eq!(get(&mut small).unwrap(), v);
            assert_eq!(get(&mut small).unwrap(), 0x2a);
        }
        for v in [0, -1, 1, i64::MIN, i64::MAX, 1_497_916_800_000] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        // A number longer than ten bytes is damage, not a value.
        assert!(get(&mut &[0xffu8; 11][..]).is_err());
        let damaged = [0xffu8; 11];
        assert!(get(&mut io::BufReader::with_capacity(3, &damaged[..])).is_err());
    }
}
