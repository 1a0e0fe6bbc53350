//! Trace files → typed records, merged by timestamp and classified, in bounded memory.
//!
//! Owns everything between the bytes on disk and the [`Item`]s the planner consumes:
//! - **Input**: [`TraceInput::resolve`] turns files and directories into an ordered file
//!   list; a record's `file` is its index in that list.
//! - **Decoding**: compression is detected by magic bytes (gzip, possibly multi-member;
//!   zstd, possibly multi-frame; else plain), never by extension.
//! - **Splitting**: the decompressed stream is read in chunks; between top-level objects only
//!   whitespace, commas and balanced array brackets are accepted (so one array, several
//!   arrays, JSON lines and concatenated objects all work), and each object is deserialized
//!   in place with borrowed strings. Nothing more than one chunk plus the current object is
//!   held. Record numbers are 1-based per file and count every top-level object.
//! - **Merging**: files are k-way merged on (time, file, number), so the output order is
//!   deterministic. Each open file keeps at most [`REORDER_CAPACITY`] records in the merge
//!   heap, which doubles as its reorder buffer for local disorder; a record that still comes
//!   too late is emitted anyway and counted in [`ReaderStats::out_of_order`]. A file is only
//!   opened once the merge gets near its first timestamp (found by a cheap look at its head
//!   when the reader opens), so a directory of thousands of day files does not hold
//!   thousands of descriptors and buffers at once.
//! - **Classification**, in this order: the limits of [`ReadOptions`], duplicates of a log
//!   `id` within the dedup window, failed originals.
//!
//! Invariants: memory is bounded by the number of simultaneously open files times (read
//! chunk + reorder buffer), the largest record, and the ids of one dedup window — never by
//! trace length (the [`Interner`] grows with distinct names only). Malformed input yields
//! [`TraceError`]s, never a panic. After the first error, or once a limit is reached, the
//! iterator returns `None` for good.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::record::{parse_timestamp, parse_uri, Interner, Method, Record, Sym};

/// Records each open file may hold in the merge heap: the reorder window for local disorder.
pub const REORDER_CAPACITY: usize = 4096;

/// Bytes asked of the decompressed stream per read.
const CHUNK: usize = 256 * 1024;
/// The largest single record the splitter accepts; its buffer grows up to this.
const MAX_RECORD: usize = 64 * 1024 * 1024;
/// Read chunk when peeking at a file's first timestamp in [`TraceReader::open`].
const PRESCAN_CHUNK: usize = 16 * 1024;
/// Objects looked at for a first valid timestamp before giving up and opening the file at once.
const PRESCAN_OBJECTS: usize = 16;
/// A file is opened this long (trace time) before its first record is due, so records a
/// little earlier than its first one still merge in order.
const ACTIVATION_SLACK_MS: i64 = 60_000;
/// Buffer between a compressed file and its decoder.
const COMPRESSED_BUF: usize = 128 * 1024;

/// An error reading a trace. Every variant names the file; record-level ones the 1-based
/// record number in that file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened, read or decompressed.
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Malformed JSON. Fatal: the reader cannot find the next record boundary. `offset` is in
    /// the decompressed stream; `record` is the number of the record being read.
    #[error("{}: record {record} (byte {offset}): malformed JSON: {reason}", file.display())]
    Syntax {
        file: PathBuf,
        record: u64,
        offset: u64,
        reason: String,
    },
    /// A well-formed JSON object that is not a valid record; `reason` names the field.
    #[error("{}: record {record}: {reason}", file.display())]
    Record {
        file: PathBuf,
        record: u64,
        reason: String,
    },
    /// The given paths hold no files.
    #[error("{}: no trace files found", path.display())]
    NoFiles { path: PathBuf },
}

/// How [`TraceReader`] filters and bounds the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Report invalid records as [`Item::Skipped`] and go on, instead of failing.
    pub skip_invalid: bool,
    /// Return requests that failed in the original trace as records instead of skipping them.
    pub replay_failed: bool,
    /// Only the first `n` items of the merged stream (valid or not) exist.
    pub limit_requests: Option<u64>,
    /// Only records at most this long after the first merged record exist.
    pub limit_duration: Option<Duration>,
    /// A record whose `id` was already seen this close in trace time is a duplicate.
    /// `Duration::ZERO` turns duplicate detection off.
    pub dedup_window: Duration,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            skip_invalid: false,
            replay_failed: false,
            limit_requests: None,
            limit_duration: None,
            dedup_window: Duration::from_secs(5 * 60),
        }
    }
}

/// Why a trace record is not replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// Not a valid record (missing or bad field); only with [`ReadOptions::skip_invalid`].
    Invalid,
    /// Its log `id` was seen within the dedup window (log-shipping duplicate).
    Duplicate,
    /// The original request failed (4xx/5xx, except HEAD 404), see [`Record::failed_in_trace`].
    FailedInTrace,
}

impl SkipReason {
    /// Stable name, for counters and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Invalid => "invalid",
            SkipReason::Duplicate => "duplicate",
            SkipReason::FailedInTrace => "failed_in_trace",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One element of the merged trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item {
    /// A valid record to plan.
    Record(Record),
    /// A record that is not replayed, and why.
    Skipped {
        reason: SkipReason,
        /// Index of the input file.
        file: u32,
        /// 1-based position in that file.
        number: u64,
        /// The client, when the record named one.
        client: Option<Sym>,
        /// The record's time, when it had a valid one.
        time_ms: Option<i64>,
    },
}

impl Item {
    /// Index of the input file the item comes from.
    pub fn file(&self) -> u32 {
        match self {
            Item::Record(r) => r.file,
            Item::Skipped { file, .. } => *file,
        }
    }

    /// 1-based position of the item in its file.
    pub fn number(&self) -> u64 {
        match self {
            Item::Record(r) => r.number,
            Item::Skipped { number, .. } => *number,
        }
    }

    /// Unix milliseconds, when known.
    pub fn time_ms(&self) -> Option<i64> {
        match self {
            Item::Record(r) => Some(r.time_ms),
            Item::Skipped { time_ms, .. } => *time_ms,
        }
    }
}

/// Counters of a [`TraceReader`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Top-level JSON objects read so far (valid or not, including some read ahead into
    /// reorder buffers and never returned because a limit was reached).
    pub records_read: u64,
    /// Records returned with a time earlier than one returned before them: disorder the
    /// reorder buffer could not fix.
    pub out_of_order: u64,
    /// Bytes of trace text read, after decompression.
    pub bytes_read: u64,
}

/// The files of a trace, in the order their indexes refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceInput {
    /// Trace files; [`Record::file`] is an index into this list.
    pub files: Vec<PathBuf>,
}

impl TraceInput {
    /// Each path is a file, taken as is, or a directory, which contributes every regular file
    /// below it (recursively, in sorted path order, skipping names that start with `.` and
    /// not following symlinked directories).
    pub fn resolve(paths: &[PathBuf]) -> Result<TraceInput, TraceError> {
        let mut files = Vec::new();
        for path in paths {
            let meta = fs::metadata(path).map_err(|source| TraceError::Io {
                file: path.clone(),
                source,
            })?;
            if meta.is_dir() {
                let mut found = Vec::new();
                walk(path, &mut found)?;
                found.sort();
                files.extend(found);
            } else {
                files.push(path.clone());
            }
        }
        if files.is_empty() {
            return Err(TraceError::NoFiles {
                path: paths.first().cloned().unwrap_or_default(),
            });
        }
        Ok(TraceInput { files })
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), TraceError> {
    let io_err = |file: &Path| {
        let file = file.to_path_buf();
        move |source| TraceError::Io { file, source }
    };
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if entry.file_name().as_encoded_bytes().first() == Some(&b'.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err(&path))?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
            out.push(path);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Opens a file and wraps it in the decoder its magic bytes call for.
fn open_decoded(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 4];
    let mut n = 0;
    while n < magic.len() {
        match file.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let head = &magic[..n];
    let stream = io::Cursor::new(head.to_vec()).chain(file);
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(
            BufReader::with_capacity(COMPRESSED_BUF, stream),
        ))
    } else if head == [0x28, 0xb5, 0x2f, 0xfd] {
        Box::new(ZstdFrames::new(BufReader::with_capacity(
            COMPRESSED_BUF,
            stream,
        )))
    } else {
        Box::new(stream)
    })
}

/// A zstd stream of any number of frames (ruzstd's `StreamingDecoder` reads one), skipping
/// skippable frames.
struct ZstdFrames<R> {
    source: R,
    decoder: ruzstd::decoding::FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames {
            source,
            decoder: ruzstd::decoding::FrameDecoder::new(),
            in_frame: false,
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
        use ruzstd::decoding::BlockDecodingStrategy;
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                while self.decoder.can_collect() < buf.len() && !self.decoder.is_finished() {
                    let wanted = buf.len() - self.decoder.can_collect();
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBytes(wanted))
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if self.decoder.is_finished() && self.decoder.can_collect() == 0 {
                    self.in_frame = false;
                }
                continue;
            }
            if self.source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.decoder.init(&mut self.source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(
                        &mut (&mut self.source).take(u64::from(length)),
                        &mut io::sink(),
                    )?;
                    if skipped < u64::from(length) {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "zstd: truncated skippable frame",
                        ));
                    }
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Splitting

#[derive(Debug)]
enum SplitError {
    Io(io::Error),
    Syntax { offset: u64, reason: String },
}

/// Reads the top-level JSON objects of a byte stream. Between objects it accepts whitespace,
/// commas and array brackets (arrays must balance). Each object is deserialized straight from
/// the read buffer, so its bytes are scanned once; when the buffer ends inside an object the
/// buffer is refilled (and grown, up to `max_record`) and the object parsed again, which
/// happens about once per chunk.
struct Splitter<R> {
    src: R,
    buf: Vec<u8>,
    /// Next unread byte.
    pos: usize,
    /// End of valid bytes in `buf`.
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    /// Open top-level `[`.
    arrays: u32,
    max_record: usize,
    /// Bytes read since [`Splitter::take_fresh`] was last called.
    fresh: u64,
}

impl<R: Read> Splitter<R> {
    fn new(src: R, chunk: usize, max_record: usize) -> Self {
        Splitter {
            src,
            buf: vec![0; chunk.clamp(1, max_record.max(1))],
            pos: 0,
            end: 0,
            base: 0,
            arrays: 0,
            max_record: max_record.max(1),
            fresh: 0,
        }
    }

    fn take_fresh(&mut self) -> u64 {
        std::mem::take(&mut self.fresh)
    }

    /// Drops `buf[..keep]`, grows the buffer if it is full, and reads until it is full or
    /// the input ends. Returns false if nothing more could be read.
    fn refill(&mut self, keep: usize) -> Result<bool, SplitError> {
        if keep > 0 {
            self.buf.copy_within(keep..self.end, 0);
            self.end -= keep;
            self.pos = self.pos.saturating_sub(keep);
            self.base += keep as u64;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.max_record {
                return Err(SplitError::Syntax {
                    offset: self.base + self.end as u64,
                    reason: format!("record larger than {} bytes", self.max_record),
                });
            }
            let grown = self.buf.len().saturating_mul(2).min(self.max_record);
            self.buf.resize(grown, 0);
        }
        let before = self.end;
        while self.end < self.buf.len() {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => break,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SplitError::Io(e)),
            }
        }
        self.fresh += (self.end - before) as u64;
        Ok(self.end > before)
    }

    fn syntax(&self, at: usize, reason: impl Into<String>) -> SplitError {
        SplitError::Syntax {
            offset: self.base + at as u64,
            reason: reason.into(),
        }
    }

    /// Reads the next object and hands it to `f` with its stream offset and bytes.
    /// `Ok(None)` at the end of input.
    fn next_with<T>(
        &mut self,
        f: impl FnOnce(u64, &[u8], RawRecord<'_>) -> T,
    ) -> Result<Option<T>, SplitError> {
        // Between objects.
        loop {
            if self.pos == self.end {
                if !self.refill(self.pos)? {
                    if self.arrays > 0 {
                        return Err(self.syntax(self.pos, "end of input inside an array"));
                    }
                    return Ok(None);
                }
                continue;
            }
            match self.buf[self.pos] {
                b' ' | b'\t' | b'\n' | b'\r' | b',' => self.pos += 1,
                b'[' => {
                    self.arrays += 1;
                    self.pos += 1;
                }
                b']' => {
                    if self.arrays == 0 {
                        return Err(self.syntax(self.pos, "`]` without an open array"));
                    }
                    self.arrays -= 1;
                    self.pos += 1;
                }
                b'{' => break,
                0xEF if self.base + self.pos as u64 == 0 => {
                    // A UTF-8 byte order mark at the very start.
                    while self.end - self.pos < 3 {
                        if !self.refill(self.pos)? {
                            return Err(self.syntax(self.pos, "unexpected byte 0xEF"));
                        }
                    }
                    if self.buf[self.pos..self.pos + 3] != [0xEF, 0xBB, 0xBF] {
                        return Err(self.syntax(self.pos, "unexpected byte 0xEF"));
                    }
                    self.pos += 3;
                }
                b => {
                    return Err(self.syntax(
                        self.pos,
                        format!("expected `{{` of a record, found {}", describe_byte(b)),
                    ))
                }
            }
        }
        // An object.
        loop {
            let start = self.pos;
            let mut objects = serde_json::Deserializer::from_slice(&self.buf[start..self.end])
                .into_iter::<RawRecord<'_>>();
            match objects.next() {
                Some(Ok(raw)) => {
                    let len = objects.byte_offset();
                    let value = f(self.base + start as u64, &self.buf[start..start + len], raw);
                    self.pos = start + len;
                    return Ok(Some(value));
                }
                Some(Err(e)) if !e.is_eof() => {
                    let (at, reason) = json_error(&self.buf[start..self.end], &e);
                    return Err(self.syntax(start + at, reason));
                }
                // The buffer ends inside the object.
                _ => {
                    if !self.refill(start)? {
                        return Err(self.syntax(self.end, "end of input inside a record"));
                    }
                }
            }
        }
    }
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("`{}`", b as char)
    } else {
        format!("byte 0x{b:02X}")
    }
}

// ---------------------------------------------------------------------------------------
// Deserializing one object

/// Any JSON value, kept only as far as a record field needs it.
#[derive(Debug, Default)]
enum Val<'a> {
    #[default]
    Absent,
    Null,
    Bool(bool),
    U(u64),
    I(i64),
    F(f64),
    Str(Cow<'a, str>),
    Compound(&'static str),
}

impl<'de> Deserialize<'de> for Val<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

struct ValVisitor;

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Val<'de>, E> {
        Ok(Val::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Val<'de>, E> {
        Ok(Val::U(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Val<'de>, E> {
        Ok(u64::try_from(v).map_or(Val::I(v), Val::U))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Val<'de>, E> {
        Ok(Val::F(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Val<'de>, E> {
        Ok(Val::Str(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Val<'de>, E> {
        Ok(Val::Null)
    }
    fn visit_none<E>(self) -> Result<Val<'de>, E> {
        Ok(Val::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Val<'de>, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Val<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Val::Compound("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Val<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Val::Compound("an object"))
    }
}

const F_TIMESTAMP: &str = "timestamp";
const F_METHOD: &str = "http.request.method";
const F_URI: &str = "http.request.uri";
const F_CLIENT: &str = "http.request.remoteaddr";
const F_DURATION: &str = "http.request.duration";
const F_STATUS: &str = "http.response.status";
const F_WRITTEN: &str = "http.response.written";
const F_ID: &str = "id";

/// The fields of a record object the replay uses; values are untyped until validation so
/// that a bad value is reported with its field name.
#[derive(Debug, Default)]
struct RawRecord<'a> {
    timestamp: Val<'a>,
    method: Val<'a>,
    uri: Val<'a>,
    client: Val<'a>,
    duration: Val<'a>,
    status: Val<'a>,
    written: Val<'a>,
    id: Val<'a>,
}

enum Key {
    Timestamp,
    Method,
    Uri,
    Client,
    Duration,
    Status,
    Written,
    Id,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                self.visit_bytes(v.as_bytes())
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Key, E> {
                Ok(match v {
                    b if b == F_TIMESTAMP.as_bytes() => Key::Timestamp,
                    b if b == F_METHOD.as_bytes() => Key::Method,
                    b if b == F_URI.as_bytes() => Key::Uri,
                    b if b == F_CLIENT.as_bytes() => Key::Client,
                    b if b == F_DURATION.as_bytes() => Key::Duration,
                    b if b == F_STATUS.as_bytes() => Key::Status,
                    b if b == F_WRITTEN.as_bytes() => Key::Written,
                    b if b == F_ID.as_bytes() => Key::Id,
                    // Checked here, as serde_json would have: the known names are ASCII.
                    b if std::str::from_utf8(b).is_err() => {
                        return Err(E::custom("a field name that is not UTF-8"));
                    }
                    _ => Key::Other,
                })
            }
        }
        // As bytes: serde_json then skips its UTF-8 check of every field name, which costs
        // more than matching the name (this runs for every field of every record).
        d.deserialize_bytes(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for RawRecord<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = RawRecord<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a record object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRecord<'de>, A::Error> {
                let mut raw = RawRecord::default();
                while let Some(key) = map.next_key::<Key>()? {
                    let slot = match key {
                        Key::Timestamp => &mut raw.timestamp,
                        Key::Method => &mut raw.method,
                        Key::Uri => &mut raw.uri,
                        Key::Client => &mut raw.client,
                        Key::Duration => &mut raw.duration,
                        Key::Status => &mut raw.status,
                        Key::Written => &mut raw.written,
                        Key::Id => &mut raw.id,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = map.next_value()?;
                }
                Ok(raw)
            }
        }
        d.deserialize_map(RawVisitor)
    }
}

/// Where (in `bytes`) and why serde_json rejected `bytes`.
fn json_error(bytes: &[u8], e: &serde_json::Error) -> (usize, String) {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let reason = message.strip_suffix(&suffix).unwrap_or(&message).to_owned();
    (offset_of(bytes, e.line(), e.column()), reason)
}

/// Byte offset of serde_json's 1-based (line, column) in `bytes`.
fn offset_of(bytes: &[u8], line: usize, column: usize) -> usize {
    let line_start = if line <= 1 {
        0
    } else {
        memchr::memchr_iter(b'\n', bytes)
            .nth(line - 2)
            .map_or(bytes.len(), |i| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(bytes.len())
}

/// Why a well-formed object is not a record, with what could be salvaged for reporting.
struct Invalid {
    reason: String,
    time_ms: Option<i64>,
    client: Option<Sym>,
}

/// Shortens a quoted value for error messages.
fn shown(s: &str) -> String {
    const MAX: usize = 60;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("'{}…'", &s[..i]),
        None => format!("'{s}'"),
    }
}

fn describe(v: &Val<'_>) -> String {
    match v {
        Val::Absent => "nothing".into(),
        Val::Null => "null".into(),
        Val::Bool(b) => b.to_string(),
        Val::U(n) => n.to_string(),
        Val::I(n) => n.to_string(),
        Val::F(x) => x.to_string(),
        Val::Str(s) => shown(s),
        Val::Compound(what) => (*what).into(),
    }
}

/// A non-negative integer from a number or a numeric string; `None` if absent or null.
fn count_field(v: &Val<'_>, field: &str) -> Result<Option<u64>, String> {
    let bad = || {
        format!(
            "field `{field}`: {} is not a non-negative integer",
            describe(v)
        )
    };
    let float = |x: f64| {
        if x >= 0.0 && x.fract() == 0.0 && x < 1.8e19 {
            Ok(Some(x as u64))
        } else {
            Err(bad())
        }
    };
    match v {
        Val::Absent | Val::Null => Ok(None),
        Val::U(n) => Ok(Some(*n)),
        Val::F(x) => float(*x),
        Val::Str(s) => {
            let t = s.trim();
            match t.parse::<u64>() {
                Ok(n) => Ok(Some(n)),
                Err(_) => t.parse::<f64>().map_err(|_| bad()).and_then(float),
            }
        }
        Val::I(_) | Val::Bool(_) | Val::Compound(_) => Err(bad()),
    }
}

/// A float from a number or a numeric string; `None` if absent or null.
fn float_field(v: &Val<'_>, field: &str) -> Result<Option<f64>, String> {
    match v {
        Val::Absent | Val::Null => Ok(None),
        Val::U(n) => Ok(Some(*n as f64)),
        Val::I(n) => Ok(Some(*n as f64)),
        Val::F(x) => Ok(Some(*x)),
        Val::Str(s) => s
            .trim()
            .parse::<f64>()
            .map(Some)
            .map_err(|_| format!("field `{field}`: {} is not a number", describe(v))),
        Val::Bool(_) | Val::Compound(_) => {
            Err(format!("field `{field}`: {} is not a number", describe(v)))
        }
    }
}

/// A string field; `None` if absent or null.
fn str_field<'v>(v: &'v Val<'_>, field: &str) -> Result<Option<&'v str>, String> {
    match v {
        Val::Absent | Val::Null => Ok(None),
        Val::Str(s) => Ok(Some(s)),
        _ => Err(format!("field `{field}`: {} is not a string", describe(v))),
    }
}

fn required<'v>(v: &'v Val<'_>, field: &str) -> Result<&'v str, String> {
    str_field(v, field)?.ok_or_else(|| format!("field `{field}` is missing"))
}

/// FNV-1a, 64 bits: a stable hash of log ids.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The first valid timestamp of an object, if any (for peeking at a file's start).
fn raw_time(raw: &RawRecord<'_>) -> Option<i64> {
    str_field(&raw.timestamp, F_TIMESTAMP)
        .ok()
        .flatten()
        .and_then(parse_timestamp)
}

/// Validates a raw object into a record, interning its names.
fn build(
    raw: &RawRecord<'_>,
    names: &mut Interner,
    file: u32,
    number: u64,
) -> Result<Record, Invalid> {
    let mut time_ms = None;
    let mut client = None;
    let result = (|| {
        client = str_field(&raw.client, F_CLIENT)?.map(|c| names.intern(c));
        let ts = required(&raw.timestamp, F_TIMESTAMP)?;
        let t = parse_timestamp(ts).ok_or_else(|| {
            format!(
                "field `{F_TIMESTAMP}`: {} is not an RFC 3339 time",
                shown(ts)
            )
        })?;
        time_ms = Some(t);
        let m = required(&raw.method, F_METHOD)?;
        let method = Method::parse(m).ok_or_else(|| {
            format!(
                "field `{F_METHOD}`: {} is not a known HTTP method",
                shown(m)
            )
        })?;
        let uri = required(&raw.uri, F_URI)?;
        let status = match count_field(&raw.status, F_STATUS)? {
            None => 0,
            Some(s) => u16::try_from(s)
                .ok()
                .filter(|s| *s <= 999)
                .ok_or_else(|| format!("field `{F_STATUS}`: {s} is not an HTTP status"))?,
        };
        let size = count_field(&raw.written, F_WRITTEN)?.unwrap_or(0);
        let duration_us = match float_field(&raw.duration, F_DURATION)? {
            // Saturating float-to-int conversion: negative and NaN become 0.
            Some(secs) => (secs * 1e6).round() as u64,
            None => 0,
        };
        let id = match &raw.id {
            Val::Absent | Val::Null => None,
            Val::Str(s) => Some(fnv1a(s.as_bytes())),
            Val::U(n) => Some(fnv1a(n.to_string().as_bytes())),
            Val::I(n) => Some(fnv1a(n.to_string().as_bytes())),
            other => {
                return Err(format!(
                    "field `{F_ID}`: {} is not a string",
                    describe(other)
                ))
            }
        };
        let target = parse_uri(uri, names);
        Ok(Record {
            file,
            number,
            time_ms: t,
            method,
            target,
            client,
            size,
            status,
            duration_us,
            id,
        })
    })();
    result.map_err(|reason| Invalid {
        reason,
        time_ms,
        client,
    })
}

// ---------------------------------------------------------------------------------------
// Merging and classification

/// A record in the merge heap, ordered so that `BinaryHeap` pops the smallest
/// (time, file, number) first.
struct Entry(Record);

impl Entry {
    fn key(&self) -> (i64, u32, u64) {
        (self.0.time_ms, self.0.file, self.0.number)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// An open input file.
struct ActiveFile {
    splitter: Splitter<Box<dyn Read + Send>>,
    /// Objects read so far.
    number: u64,
}

/// Hashes a `u64` that already is a hash (an FNV-1a of the log id) by taking it as is.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Log ids seen within the dedup window: a map for lookups and a queue, in arrival order,
/// for eviction.
struct Dedup {
    window_ms: i64,
    seen: HashMap<u64, i64, std::hash::BuildHasherDefault<IdHasher>>,
    queue: VecDeque<(i64, u64)>,
}

impl Dedup {
    fn new(window: Duration) -> Self {
        Dedup {
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
            seen: HashMap::default(),
            queue: VecDeque::new(),
        }
    }

    /// Whether `id` at `time_ms` repeats an id seen within the window; remembers it if not.
    fn is_duplicate(&mut self, id: u64, time_ms: i64) -> bool {
        if self.window_ms == 0 {
            return false;
        }
        let horizon = time_ms.saturating_sub(self.window_ms);
        while let Some(&(t, old)) = self.queue.front() {
            if t >= horizon {
                break;
            }
            self.queue.pop_front();
            if self.seen.get(&old) == Some(&t) {
                self.seen.remove(&old);
            }
        }
        if let Some(&prev) = self.seen.get(&id) {
            if time_ms.abs_diff(prev) <= self.window_ms.unsigned_abs() {
                return true;
            }
        }
        self.seen.insert(id, time_ms);
        self.queue.push_back((time_ms, id));
        false
    }
}

/// Streams a trace as merged, classified [`Item`]s. See the module documentation.
pub struct TraceReader {
    paths: Vec<PathBuf>,
    options: ReadOptions,
    names: Interner,
    /// Open files by index (`None`: not opened yet, or finished).
    active: Vec<Option<ActiveFile>>,
    /// Records of each file in the merge heap.
    in_heap: Vec<usize>,
    /// A file's fatal error, held back until the records it read before it are merged out.
    deferred: HashMap<u32, TraceError>,
    /// Files not opened yet, as (time to open at, index), latest first.
    waiting: Vec<(i64, u32)>,
    /// Open files whose heap share must be topped up before the next pop.
    filling: Vec<u32>,
    heap: BinaryHeap<Entry>,
    /// Items (invalid records, errors) to return before the next merged record.
    pending: VecDeque<Result<Item, TraceError>>,
    dedup: Dedup,
    stats: ReaderStats,
    emitted: u64,
    origin_ms: Option<i64>,
    latest_ms: Option<i64>,
    done: bool,
}

impl fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceReader")
            .field("files", &self.paths.len())
            .field("open", &self.active.iter().filter(|a| a.is_some()).count())
            .field("options", &self.options)
            .field("stats", &self.stats)
            .field("buffered", &self.heap.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// Prepares to read `input`, interning names into `names`. Opens each file once to find
    /// its first timestamp; fails if a file cannot be opened. Read and format errors are
    /// reported by the iterator.
    pub fn open(
        input: &TraceInput,
        options: ReadOptions,
        names: Interner,
    ) -> Result<TraceReader, TraceError> {
        let Some(first) = input.files.first() else {
            return Err(TraceError::NoFiles {
                path: PathBuf::new(),
            });
        };
        if u32::try_from(input.files.len()).is_err() {
            return Err(TraceError::Io {
                file: first.clone(),
                source: io::Error::other("more than 2^32 input files"),
            });
        }
        let mut waiting = Vec::with_capacity(input.files.len());
        for (index, path) in (0u32..).zip(&input.files) {
            let first_ms = first_time(path).map_err(|source| TraceError::Io {
                file: path.clone(),
                source,
            })?;
            let at = first_ms.map_or(i64::MIN, |t| t.saturating_sub(ACTIVATION_SLACK_MS));
            waiting.push((at, index));
        }
        waiting.sort_unstable_by(|a, b| b.cmp(a));
        let done = options.limit_requests == Some(0);
        Ok(TraceReader {
            paths: input.files.clone(),
            dedup: Dedup::new(options.dedup_window),
            options,
            names,
            active: input.files.iter().map(|_| None).collect(),
            in_heap: vec![0; input.files.len()],
            deferred: HashMap::new(),
            waiting,
            filling: Vec::new(),
            heap: BinaryHeap::new(),
            pending: VecDeque::new(),
            stats: ReaderStats::default(),
            emitted: 0,
            origin_ms: None,
            latest_ms: None,
            done,
        })
    }

    /// The names interned so far.
    pub fn names(&self) -> &Interner {
        &self.names
    }

    /// The interner, to add names of one's own.
    pub fn names_mut(&mut self) -> &mut Interner {
        &mut self.names
    }

    /// Ends reading, keeping the names.
    pub fn into_names(self) -> Interner {
        self.names
    }

    /// Counters so far.
    pub fn stats(&self) -> ReaderStats {
        self.stats.clone()
    }

    fn activate(&mut self, f: u32) {
        let path = &self.paths[f as usize];
        match open_decoded(path) {
            Ok(src) => {
                self.active[f as usize] = Some(ActiveFile {
                    splitter: Splitter::new(src, CHUNK, MAX_RECORD),
                    number: 0,
                });
                self.filling.push(f);
            }
            Err(source) => self.pending.push_back(Err(TraceError::Io {
                file: path.clone(),
                source,
            })),
        }
    }

    /// Reads one object of file `f` into the heap or the pending queue. Returns true when
    /// `f` needs no more filling (its share of the heap is full, or it ended).
    fn read_one(&mut self, f: u32) -> bool {
        let fi = f as usize;
        let Some(active) = self.active[fi].as_mut() else {
            return true;
        };
        if self.in_heap[fi] >= REORDER_CAPACITY {
            return true;
        }
        let number = active.number + 1;
        let names = &mut self.names;
        let next = active
            .splitter
            .next_with(|_, _, raw| build(&raw, names, f, number));
        self.stats.bytes_read += active.splitter.take_fresh();
        let file = || self.paths[fi].clone();
        let fatal = match next {
            Ok(None) => None,
            Err(SplitError::Io(source)) => Some(TraceError::Io {
                file: file(),
                source,
            }),
            Err(SplitError::Syntax { offset, reason }) => Some(TraceError::Syntax {
                file: file(),
                record: number,
                offset,
                reason,
            }),
            Ok(Some(built)) => {
                active.number = number;
                self.stats.records_read += 1;
                match built {
                    Ok(record) => {
                        self.in_heap[fi] += 1;
                        self.heap.push(Entry(record));
                        return self.in_heap[fi] >= REORDER_CAPACITY;
                    }
                    Err(invalid) if self.options.skip_invalid => {
                        self.pending.push_back(Ok(Item::Skipped {
                            reason: SkipReason::Invalid,
                            file: f,
                            number,
                            client: invalid.client,
                            time_ms: invalid.time_ms,
                        }));
                        return false;
                    }
                    Err(invalid) => Some(TraceError::Record {
                        file: file(),
                        record: number,
                        reason: invalid.reason,
                    }),
                }
            }
        };
        // End of file or a fatal error: close the file. The error waits for the records
        // read before it.
        self.active[fi] = None;
        if let Some(e) = fatal {
            if self.in_heap[fi] == 0 {
                self.pending.push_back(Err(e));
            } else {
                self.deferred.insert(f, e);
            }
        }
        true
    }

    /// Counts an item against `limit_requests` and returns it.
    fn emit(&mut self, item: Result<Item, TraceError>) -> Option<Result<Item, TraceError>> {
        match item {
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
            Ok(item) => {
                self.emitted += 1;
                if self.options.limit_requests == Some(self.emitted) {
                    self.done = true;
                }
                Some(Ok(item))
            }
        }
    }

    /// Applies the duration limit, dedup and failure classification to a merged record.
    fn classify(&mut self, record: Record) -> Option<Result<Item, TraceError>> {
        let origin = *self.origin_ms.get_or_insert(record.time_ms);
        if let Some(limit) = self.options.limit_duration {
            let since = record.time_ms.saturating_sub(origin);
            if since > 0 && Duration::from_millis(since.unsigned_abs()) > limit {
                self.done = true;
                return None;
            }
        }
        match self.latest_ms {
            Some(latest) if record.time_ms < latest => self.stats.out_of_order += 1,
            _ => self.latest_ms = Some(record.time_ms),
        }
        let duplicate = record
            .id
            .is_some_and(|id| self.dedup.is_duplicate(id, record.time_ms));
        let reason = if duplicate {
            Some(SkipReason::Duplicate)
        } else if record.failed_in_trace() && !self.options.replay_failed {
            Some(SkipReason::FailedInTrace)
        } else {
            None
        };
        let item = match reason {
            None => Item::Record(record),
            Some(reason) => Item::Skipped {
                reason,
                file: record.file,
                number: record.number,
                client: record.client,
                time_ms: Some(record.time_ms),
            },
        };
        self.emit(Ok(item))
    }
}

impl Iterator for TraceReader {
    type Item = Result<Item, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if let Some(item) = self.pending.pop_front() {
                return self.emit(item);
            }
            if let Some(&f) = self.filling.last() {
                if self.read_one(f) {
                    self.filling.pop();
                }
                continue;
            }
            if let Some(&(at, f)) = self.waiting.last() {
                if self.heap.peek().is_none_or(|e| at <= e.0.time_ms) {
                    self.waiting.pop();
                    self.activate(f);
                    continue;
                }
            }
            let Some(Entry(record)) = self.heap.pop() else {
                self.done = true;
                return None;
            };
            let f = record.file;
            self.in_heap[f as usize] -= 1;
            if self.active[f as usize].is_some() {
                self.filling.push(f);
            } else if self.in_heap[f as usize] == 0 {
                if let Some(e) = self.deferred.remove(&f) {
                    self.pending.push_back(Err(e));
                }
            }
            return self.classify(record);
        }
    }
}

impl std::iter::FusedIterator for TraceReader {}

/// The first valid timestamp among a file's first few objects; `None` if there is none or
/// the file is malformed (the iterator reports that when it gets there). Fails only if the
/// file cannot be opened.
fn first_time(path: &Path) -> io::Result<Option<i64>> {
    let src = open_decoded(path)?;
    let mut splitter = Splitter::new(src, PRESCAN_CHUNK, MAX_RECORD);
    for _ in 0..PRESCAN_OBJECTS {
        match splitter.next_with(|_, _, raw| raw_time(&raw)) {
            Ok(Some(Some(t))) => return Ok(Some(t)),
            Ok(Some(None)) => {}
            Ok(None) | Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::Target;
    use proptest::prelude::*;
    use std::io::Write;

    /// 2017-06-20T00:00:00Z.
    const T0: i64 = 1_497_916_800_000;

    fn ts(ms: i64) -> String {
        let t = std::time::UNIX_EPOCH + Duration::from_millis((T0 + ms) as u64);
        humantime::format_rfc3339_millis(t).to_string()
    }

    /// A record at `T0 + ms`.
    fn rec(ms: i64, method: &str, uri: &str, status: u16, id: &str) -> String {
        format!(
            r#"{{"host": "033292e5", "http.request.duration": 0.25, "http.request.method": "{method}", "http.request.remoteaddr": "c1", "http.request.uri": "{uri}", "http.request.useragent": "docker/17.04.0-ce go/go1.7.5", "http.response.status": {status}, "http.response.written": 100, "id": "{id}", "timestamp": "{}"}}"#,
            ts(ms)
        )
    }

    fn get(ms: i64, id: &str) -> String {
        rec(ms, "GET", "v2/u/r/blobs/b", 200, id)
    }

    fn array(records: &[String]) -> String {
        format!("[{}]", records.join(",\n"))
    }

    fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, bytes).unwrap();
        path
    }

    fn reader(files: &[&Path], options: ReadOptions) -> TraceReader {
        let input = TraceInput {
            files: files.iter().map(|f| f.to_path_buf()).collect(),
        };
        TraceReader::open(&input, options, Interner::default()).unwrap()
    }

    fn read_all(files: &[&Path], options: ReadOptions) -> Vec<Item> {
        reader(files, options).map(|i| i.unwrap()).collect()
    }

    fn records(items: &[Item]) -> Vec<Record> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Record(r) => Some(*r),
                Item::Skipped { .. } => None,
            })
            .collect()
    }

    /// (file, number) of each item.
    fn positions(items: &[Item]) -> Vec<(u32, u64)> {
        items.iter().map(|i| (i.file(), i.number())).collect()
    }

    fn skip_reasons(items: &[Item]) -> Vec<Option<SkipReason>> {
        items
            .iter()
            .map(|i| match i {
                Item::Record(_) => None,
                Item::Skipped { reason, .. } => Some(*reason),
            })
            .collect()
    }

    #[test]
    fn reads_the_fields_of_a_json_array() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"[
  {"host": "033292e5", "http.request.duration": 1.40929383, "http.request.method": "PUT", "http.request.remoteaddr": "e1852826", "http.request.uri": "v2/503550a5/d1002b86/manifests/817c8a39", "http.request.useragent": "docker/17.04.0-ce go/go1.7.5", "http.response.status": 201, "http.response.written": 524, "id": "baeef7c1eb", "timestamp": "2017-09-05T17:23:42.900Z"},
  {"timestamp": "2017-09-05T17:23:43.000Z", "http.request.method": "HEAD", "http.request.uri": "/v2/a/b/blobs/sha256:c3", "http.response.status": "200", "http.response.written": "1024", "http.request.duration": "0.5", "extra": {"nested": [1, {"x": "}"}]}},
  {"timestamp": "2017-09-05T17:23:44Z", "http.request.method": "GET", "http.request.uri": "v2/a/b/manifests/l\u0061test", "http.request.duration": -3, "http.response.status": 200.0, "id": 12345}
]"#;
        let file = write(dir.path(), "t.json", text);
        let mut reader = reader(&[&file], ReadOptions::default());
        let items: Vec<Item> = reader.by_ref().map(|i| i.unwrap()).collect();
        let rs = records(&items);
        assert_eq!(rs.len(), 3);
        let names = reader.names();

        let r = rs[0];
        assert_eq!((r.file, r.number), (0, 1));
        assert_eq!(r.time_ms, 1_504_632_222_900);
        assert_eq!(r.method, Method::Put);
        let Target::Manifest { repo, reference } = r.target else {
            panic!("{r:?}")
        };
        assert_eq!(names.resolve(repo), "503550a5/d1002b86");
        assert_eq!(names.resolve(reference), "817c8a39");
        assert_eq!(r.client.map(|c| names.resolve(c)), Some("e1852826"));
        assert_eq!((r.size, r.status, r.duration_us), (524, 201, 1_409_294));
        assert_eq!(r.id, Some(fnv1a(b"baeef7c1eb")));

        // Leading slash, numbers as strings, optional fields absent, unknown fields ignored.
        let r = rs[1];
        assert_eq!(r.number, 2);
        let Target::Blob { repo, digest } = r.target else {
            panic!("{r:?}")
        };
        assert_eq!(
            (names.resolve(repo), names.resolve(digest)),
            ("a/b", "sha256:c3")
        );
        assert_eq!((r.size, r.status, r.duration_us), (1024, 200, 500_000));
        assert_eq!((r.client, r.id), (None, None));

        // Escaped strings, `written` absent, negative duration, float status, numeric id.
        let r = rs[2];
        let Target::Manifest { reference, .. } = r.target else {
            panic!("{r:?}")
        };
        assert_eq!(names.resolve(reference), "latest");
        assert_eq!((r.size, r.status, r.duration_us), (0, 200, 0));
        assert_eq!(r.id, Some(fnv1a(b"12345")));

        let stats = reader.stats();
        assert_eq!(stats.records_read, 3);
        assert_eq!(stats.bytes_read, text.len() as u64);
        assert_eq!(stats.out_of_order, 0);
        assert!(format!("{reader:?}").contains("TraceReader"));
    }

    #[test]
    fn json_lines_concatenated_arrays_and_a_byte_order_mark() {
        let dir = tempfile::tempdir().unwrap();
        let lines = format!("{}\n{}\n{}\n", get(0, "a"), get(1, "b"), get(2, "c"));
        let glued = format!(
            "\u{feff}{}{}\n{} {}",
            array(&[get(0, "a")]),
            array(&[get(1, "b"), get(2, "c")]),
            get(3, "d"),
            get(4, "e")
        );
        for (name, text, n) in [("l.jsonl", lines, 3), ("g.json", glued, 5)] {
            let file = write(dir.path(), name, text);
            let items = read_all(&[&file], ReadOptions::default());
            let numbers: Vec<u64> = items.iter().map(Item::number).collect();
            assert_eq!(numbers, (1..=n).collect::<Vec<u64>>(), "{name}");
            assert!(items.iter().all(|i| matches!(i, Item::Record(_))));
        }
    }

    #[test]
    fn multi_member_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        for part in [format!("[{},", get(0, "a")), format!("{}]", get(1, "b"))] {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(part.as_bytes()).unwrap();
            bytes.extend(enc.finish().unwrap());
        }
        // The extension says nothing: detection is by magic bytes.
        let file = write(dir.path(), "trace.json", bytes);
        let items = read_all(&[&file], ReadOptions::default());
        assert_eq!(positions(&items), [(0, 1), (0, 2)]);
    }

    #[test]
    fn multi_frame_zstd_with_a_skippable_frame() {
        use ruzstd::encoding::{compress_to_vec, CompressionLevel};
        let dir = tempfile::tempdir().unwrap();
        let first = format!("[{},", get(0, "a"));
        let second = format!("{},{}]", get(1, "b"), get(2, "c"));
        let mut bytes = compress_to_vec(first.as_bytes(), CompressionLevel::Fastest);
        // A skippable frame: magic 0x184D2A5?, length, payload.
        bytes.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        bytes.extend(compress_to_vec(
            second.as_bytes(),
            CompressionLevel::Fastest,
        ));
        let file = write(dir.path(), "trace.zst", &bytes);
        let mut reader = reader(&[&file], ReadOptions::default());
        let items: Vec<Item> = reader.by_ref().map(|i| i.unwrap()).collect();
        assert_eq!(positions(&items), [(0, 1), (0, 2), (0, 3)]);
        assert_eq!(
            reader.stats().bytes_read,
            (first.len() + second.len()) as u64
        );

        // A damaged stream is a read error naming the file, not a panic.
        let cut = write(dir.path(), "cut.zst", &bytes[..bytes.len() / 2]);
        let results: Vec<_> = self::reader(&[&cut], ReadOptions::default()).collect();
        let Some(Err(e @ TraceError::Io { .. })) = results.last() else {
            panic!("{results:?}")
        };
        assert!(e.to_string().contains("cut.zst: cannot read"), "{e}");
    }

    #[test]
    fn merges_overlapping_files_by_time_with_deterministic_ties() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.json",
            array(&[get(0, "a1"), get(20, "a2"), get(40, "a3")]),
        );
        let b = write(
            dir.path(),
            "b.json",
            array(&[get(10, "b1"), get(20, "b2"), get(30, "b3")]),
        );
        let items = read_all(&[&a, &b], ReadOptions::default());
        assert_eq!(
            positions(&items),
            [(0, 1), (1, 1), (0, 2), (1, 2), (1, 3), (0, 3)]
        );
        // The tie at 20 ms goes to the file given first.
        let items = read_all(&[&b, &a], ReadOptions::default());
        assert_eq!(
            positions(&items),
            [(1, 1), (0, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
        );
    }

    #[test]
    fn files_far_apart_in_time_are_merged_in_order() {
        // Files opened lazily as the merge reaches their first timestamp.
        let dir = tempfile::tempdir().unwrap();
        let hour = 3_600_000;
        let files: Vec<PathBuf> = (0..3)
            .map(|k| {
                let base = (2 - k) * hour;
                let recs: Vec<String> = (0..5).map(|i| get(base + i * 1000, "x")).collect();
                write(dir.path(), &format!("{k}.json"), array(&recs))
            })
            .collect();
        let opts = ReadOptions {
            dedup_window: Duration::ZERO,
            ..ReadOptions::default()
        };
        let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let items = read_all(&files, opts);
        let files_in_order: Vec<u32> = items.iter().map(Item::file).collect();
        assert_eq!(
            files_in_order,
            [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
        );
        let times: Vec<i64> = items.iter().filter_map(Item::time_ms).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn directory_input() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("traces");
        let b = write(&root, "sub/b.json", array(&[get(5, "b")]));
        let a = write(&root, "a.json.gz", {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(array(&[get(10, "a")]).as_bytes()).unwrap();
            enc.finish().unwrap()
        });
        write(&root, ".hidden.json", "garbage");
        write(&root, ".git/config", "garbage");
        write(&root, "sub/.x", "garbage");
        let input = TraceInput::resolve(std::slice::from_ref(&root)).unwrap();
        assert_eq!(input.files, [a, b]);

        let items: Vec<Item> =
            TraceReader::open(&input, ReadOptions::default(), Interner::default())
                .unwrap()
                .map(|i| i.unwrap())
                .collect();
        assert_eq!(positions(&items), [(1, 1), (0, 1)]);

        let missing = TraceInput::resolve(&[dir.path().join("nope")]).unwrap_err();
        assert!(matches!(missing, TraceError::Io { .. }), "{missing}");
        assert!(
            missing.to_string().contains("nope: cannot read"),
            "{missing}"
        );
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let none = TraceInput::resolve(&[empty]).unwrap_err();
        assert!(matches!(none, TraceError::NoFiles { .. }), "{none}");
        assert!(none.to_string().contains("no trace files"), "{none}");
    }

    #[test]
    fn limit_requests_counts_every_item() {
        let dir = tempfile::tempdir().unwrap();
        let recs = [
            get(0, "a"),
            rec(1, "GET", "v2/u/r/blobs/b", 500, "b"),
            get(2, "c"),
            get(3, "d"),
        ];
        let file = write(dir.path(), "t.json", array(&recs));
        let opts = |n| ReadOptions {
            limit_requests: Some(n),
            ..ReadOptions::default()
        };
        let items = read_all(&[&file], opts(3));
        assert_eq!(
            skip_reasons(&items),
            [None, Some(SkipReason::FailedInTrace), None]
        );
        assert!(read_all(&[&file], opts(0)).is_empty());
        assert_eq!(read_all(&[&file], opts(10)).len(), 4);
    }

    #[test]
    fn limit_duration_from_the_first_record() {
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<String> = (0..10)
            .map(|i| get(5_000 + i * 1000, &i.to_string()))
            .collect();
        let file = write(dir.path(), "t.json", array(&recs));
        let opts = |d| ReadOptions {
            limit_duration: Some(d),
            ..ReadOptions::default()
        };
        let items = read_all(&[&file], opts(Duration::from_secs(2)));
        assert_eq!(items.len(), 3, "0 s, 1 s and 2 s after the first record");
        let items = read_all(&[&file], opts(Duration::from_millis(2_999)));
        assert_eq!(items.len(), 3);
        let items = read_all(&[&file], opts(Duration::ZERO));
        assert_eq!(items.len(), 1);
    }

    #[test]
    fn duplicates_within_the_window_only() {
        let dir = tempfile::tempdir().unwrap();
        let min = 60_000;
        let recs = [
            get(0, "x"),
            get(0, "x"),
            get(1000, "y"),
            get(2 * min, "x"),
            get(5 * min + 1, "x"),
            get(5 * min + 2, "z"),
            rec(5 * min + 3, "GET", "v2/u/r/blobs/b", 200, "z"),
        ];
        let file = write(dir.path(), "t.json", array(&recs));
        let items = read_all(&[&file], ReadOptions::default());
        let dup = Some(SkipReason::Duplicate);
        // The x at 5 min + 1 ms is more than 5 min after the first x.
        assert_eq!(
            skip_reasons(&items),
            [None, dup, None, dup, None, None, dup]
        );
        let Item::Skipped {
            time_ms, client, ..
        } = items[1]
        else {
            panic!()
        };
        assert_eq!(time_ms, Some(T0));
        assert!(client.is_some());

        let off = ReadOptions {
            dedup_window: Duration::ZERO,
            ..ReadOptions::default()
        };
        assert_eq!(records(&read_all(&[&file], off)).len(), recs.len());
    }

    #[test]
    fn dedup_memory_is_bounded_by_the_window() {
        let mut dedup = Dedup::new(Duration::from_secs(1));
        for i in 0..100_000u64 {
            assert!(!dedup.is_duplicate(i, i as i64));
        }
        assert!(dedup.queue.len() <= 1002 && dedup.seen.len() <= 1002);
        assert!(dedup.is_duplicate(99_500, 100_000));
        assert!(!dedup.is_duplicate(90_000, 100_000));
    }

    #[test]
    fn failed_originals_skipped_unless_replayed_and_head_404_kept() {
        let dir = tempfile::tempdir().unwrap();
        let recs = [
            rec(0, "GET", "v2/u/r/blobs/b", 404, "1"),
            rec(1, "HEAD", "v2/u/r/blobs/b", 404, "2"),
            rec(2, "PUT", "v2/u/r/manifests/t", 500, "3"),
            rec(3, "GET", "v2/u/r/manifests/t", 200, "4"),
        ];
        let file = write(dir.path(), "t.json", array(&recs));
        let items = read_all(&[&file], ReadOptions::default());
        let failed = Some(SkipReason::FailedInTrace);
        assert_eq!(skip_reasons(&items), [failed, None, failed, None]);
        let replay = ReadOptions {
            replay_failed: true,
            ..ReadOptions::default()
        };
        assert_eq!(records(&read_all(&[&file], replay)).len(), 4);
    }

    #[test]
    fn invalid_record_is_an_error_naming_file_record_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let bad = r#"{"timestamp": "yesterday", "http.request.method": "GET", "http.request.uri": "v2/a/b/blobs/c", "http.request.remoteaddr": "c9"}"#;
        let file = write(
            dir.path(),
            "t.json",
            array(&[get(0, "a"), bad.into(), get(2, "c")]),
        );
        let results: Vec<_> = reader(&[&file], ReadOptions::default()).collect();
        assert_eq!(results.len(), 2, "stops at the error: {results:?}");
        assert!(matches!(results[0], Ok(Item::Record(_))));
        let Err(e @ TraceError::Record { record: 2, .. }) = &results[1] else {
            panic!("{results:?}")
        };
        let text = e.to_string();
        assert!(
            text.contains("t.json: record 2: field `timestamp`:"),
            "{text}"
        );
        assert!(
            text.contains("'yesterday' is not an RFC 3339 time"),
            "{text}"
        );

        let skip = ReadOptions {
            skip_invalid: true,
            ..ReadOptions::default()
        };
        let mut r = reader(&[&file], skip);
        let items: Vec<Item> = r.by_ref().map(|i| i.unwrap()).collect();
        // Invalid records are returned as soon as they are read, ahead of the records still
        // in the reorder buffer.
        assert_eq!(positions(&items), [(0, 2), (0, 1), (0, 3)]);
        let Item::Skipped {
            reason: SkipReason::Invalid,
            time_ms: None,
            client: Some(c),
            ..
        } = items[0]
        else {
            panic!("{items:?}")
        };
        assert_eq!(r.names().resolve(c), "c9");
    }

    #[test]
    fn field_names_are_matched_unescaped_and_must_be_utf8() {
        let dir = tempfile::tempdir().unwrap();
        // `\u006d` is `m`: the escaped name is the method's.
        let escaped = r#"{"timestamp": "2017-06-20T00:00:00.001Z", "http.request.\u006dethod": "HEAD", "http.request.uri": "v2/a/b/blobs/c", "x\u00e9": 1}"#;
        let file = write(dir.path(), "e.json", array(&[escaped.into()]));
        let items = read_all(&[&file], ReadOptions::default());
        assert_eq!(records(&items)[0].method, Method::Head);

        let mut bad = array(&[get(0, "a"), get(1, "b")]).into_bytes();
        // An unknown field name with a byte that is not UTF-8, in the second record.
        let at = bad.windows(4).rposition(|w| w == b"\"id\"").unwrap();
        bad.splice(at + 1..at + 3, [b'i', 0xff]);
        let file = write(dir.path(), "u.json", bad);
        let results: Vec<_> = reader(&[&file], ReadOptions::default()).collect();
        let Some(Err(e @ TraceError::Syntax { record: 2, .. })) = results.last() else {
            panic!("{results:?}")
        };
        let text = e.to_string();
        assert!(text.contains("u.json: record 2"), "{text}");
        assert!(text.contains("not UTF-8"), "{text}");
    }

    #[test]
    fn reasons_name_the_field() {
        let cases = [
            (
                r#"{"http.request.method": "GET", "http.request.uri": "v2/"}"#,
                "field `timestamp` is missing",
            ),
            (
                r#"{"timestamp": 5, "http.request.method": "GET", "http.request.uri": "v2/"}"#,
                "field `timestamp`: 5 is not a string",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "FETCH", "http.request.uri": "v2/"}"#,
                "field `http.request.method`: 'FETCH' is not a known HTTP method",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET"}"#,
                "field `http.request.uri` is missing",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET", "http.request.uri": "v2/", "http.response.status": true}"#,
                "field `http.response.status`: true is not a non-negative integer",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET", "http.request.uri": "v2/", "http.response.status": 70000}"#,
                "field `http.response.status`: 70000 is not an HTTP status",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET", "http.request.uri": "v2/", "http.response.written": "-5"}"#,
                "field `http.response.written`: '-5' is not a non-negative integer",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET", "http.request.uri": "v2/", "http.request.duration": "slow"}"#,
                "field `http.request.duration`: 'slow' is not a number",
            ),
            (
                r#"{"timestamp": "2017-06-20T00:01:37.113Z", "http.request.method": "GET", "http.request.uri": ["v2/"]}"#,
                "field `http.request.uri`: an array is not a string",
            ),
        ];
        for (json, want) in cases {
            let raw = parse_raw(json);
            let Err(invalid) = build(&raw, &mut Interner::default(), 0, 1) else {
                panic!("{json} is valid")
            };
            assert_eq!(invalid.reason, want);
        }
    }

    #[test]
    fn truncated_array_is_a_syntax_error_after_the_records_before_it() {
        let dir = tempfile::tempdir().unwrap();
        for text in [
            format!("[{},\n{}", get(0, "a"), &get(1, "b")[..40]),
            format!("[{},\n", get(0, "a")),
        ] {
            let file = write(dir.path(), "t.json", &text);
            let results: Vec<_> = reader(&[&file], ReadOptions::default()).collect();
            assert_eq!(results.len(), 2, "{results:?}");
            assert!(matches!(results[0], Ok(Item::Record(_))));
            let Err(
                e @ TraceError::Syntax {
                    record: 2, offset, ..
                },
            ) = &results[1]
            else {
                panic!("{results:?}")
            };
            assert_eq!(*offset, text.len() as u64);
            let msg = e.to_string();
            assert!(
                msg.contains(&format!(
                    "t.json: record 2 (byte {}): malformed JSON",
                    text.len()
                )),
                "{msg}"
            );
        }
    }

    #[test]
    fn garbage_between_or_inside_objects_is_a_syntax_error_with_its_offset() {
        let dir = tempfile::tempdir().unwrap();
        let first = get(0, "a");
        let text = format!("[{first}, x {}]", get(1, "b"));
        let file = write(dir.path(), "t.json", &text);
        let results: Vec<_> = reader(&[&file], ReadOptions::default()).collect();
        let Some(Err(
            e @ TraceError::Syntax {
                record: 2, offset, ..
            },
        )) = results.last()
        else {
            panic!("{results:?}")
        };
        assert_eq!(*offset, first.len() as u64 + 3);
        assert!(e.to_string().contains("found `x`"), "{e}");

        let bad = r#"{"timestamp": "2017-06-20T00:01:37.113Z",
  "id" 7}"#;
        let text = format!("{first}\n{bad}");
        let file = write(dir.path(), "u.json", &text);
        let results: Vec<_> = reader(&[&file], ReadOptions::default()).collect();
        let Some(Err(TraceError::Syntax {
            record: 2,
            offset,
            reason,
            ..
        })) = results.last()
        else {
            panic!("{results:?}")
        };
        assert_eq!(&text[*offset as usize..][..1], "7", "{reason}");
        assert!(reason.contains("expected `:`"), "{reason}");
    }

    #[test]
    fn reorder_buffer_fixes_local_disorder_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let local = [
            get(0, "a"),
            get(30, "b"),
            get(10, "c"),
            get(20, "d"),
            get(40, "e"),
        ];
        let file = write(dir.path(), "local.json", array(&local));
        let mut r = reader(&[&file], ReadOptions::default());
        let times: Vec<i64> = r
            .by_ref()
            .map(|i| i.unwrap().time_ms().unwrap() - T0)
            .collect();
        assert_eq!(times, [0, 10, 20, 30, 40]);
        assert_eq!(r.stats().out_of_order, 0);

        // A record later than the reorder window is emitted anyway, and counted.
        let mut recs: Vec<String> = (0..REORDER_CAPACITY as i64 + 10)
            .map(|i| get(1000 + i, &i.to_string()))
            .collect();
        recs.push(get(0, "late"));
        let file = write(dir.path(), "late.json", array(&recs));
        let mut r = reader(&[&file], ReadOptions::default());
        let items: Vec<Item> = r.by_ref().map(|i| i.unwrap()).collect();
        assert_eq!(items.len(), recs.len());
        let late = items.iter().position(|i| i.time_ms() == Some(T0)).unwrap();
        assert_eq!(
            late, 11,
            "after the 11 records that left the buffer before it was read"
        );
        assert_eq!(r.stats().out_of_order, 1);
    }

    /// Every object of `text` found by a splitter reading `chunk` bytes at a time.
    fn split(text: &[u8], chunk: usize, max: usize) -> Result<Vec<(u64, Vec<u8>)>, SplitError> {
        let mut s = Splitter::new(text, chunk, max);
        let mut out = Vec::new();
        while let Some(found) = s.next_with(|offset, bytes, _| (offset, bytes.to_vec()))? {
            out.push(found);
        }
        Ok(out)
    }

    fn parse_raw(json: &str) -> RawRecord<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn splitter_finds_objects_across_any_chunk_boundary() {
        let objects = [
            r#"{"a": "br{ace}s \" and \\", "b": {"c": [1, {"d": "}"}]}}"#,
            r#"{"e": "\\\\\"}"}"#,
            "{}",
        ];
        let text = format!(" [\n{}, {}]\n[{}]\n", objects[0], objects[1], objects[2]);
        for chunk in 1..24 {
            let found = split(text.as_bytes(), chunk, 1 << 20).unwrap();
            let found: Vec<(u64, String)> = found
                .into_iter()
                .map(|(o, b)| (o, String::from_utf8(b).unwrap()))
                .collect();
            assert_eq!(found.len(), 3, "chunk {chunk}");
            for ((offset, body), want) in found.iter().zip(objects) {
                assert_eq!(body, want, "chunk {chunk}");
                assert_eq!(&text[*offset as usize..][..want.len()], want);
            }
        }
        let Err(SplitError::Syntax { reason, .. }) = split(text.as_bytes(), 4, 32) else {
            panic!("a 50-byte record with a 32-byte cap")
        };
        assert_eq!(reason, "record larger than 32 bytes");
        assert!(matches!(
            split(b"]", 4, 32),
            Err(SplitError::Syntax { offset: 0, .. })
        ));
        assert!(split(b"", 4, 32).unwrap().is_empty());
    }

    #[test]
    fn reader_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<TraceReader>();
        send::<TraceError>();
    }

    #[test]
    fn unopenable_file_fails_open() {
        let dir = tempfile::tempdir().unwrap();
        let input = TraceInput {
            files: vec![dir.path().join("gone.json")],
        };
        let e = TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap_err();
        assert!(matches!(e, TraceError::Io { .. }), "{e}");
    }

    /// Runs the whole reader over `bytes`, both with and without `skip_invalid`.
    fn read_bytes(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let file = write(dir.path(), "fuzz", bytes);
        for skip_invalid in [false, true] {
            let opts = ReadOptions {
                skip_invalid,
                ..ReadOptions::default()
            };
            let mut r = reader(&[&file], opts);
            let mut n = 0;
            for item in r.by_ref() {
                n += 1;
                assert!(n <= bytes.len() + 1, "more items than bytes");
                if let Err(e) = item {
                    let _ = e.to_string();
                }
            }
            assert!(r.next().is_none(), "fused");
        }
    }

    fn json_token() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just(",".to_string()),
            Just(":".to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
            Just(" \n".to_string()),
            Just(r#""timestamp":"2017-06-20T00:01:37.113Z""#.to_string()),
            Just(r#""http.request.method":"GET""#.to_string()),
            Just(r#""http.request.uri":"v2/a/b/blobs/c""#.to_string()),
            Just(r#""http.response.status":"#.to_string()),
            Just(r#""id":"x""#.to_string()),
            Just("null".to_string()),
            Just("-1.5e3".to_string()),
            Just("\"\\u00e9\\ud800\"".to_string()),
            "[ -~]{0,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            read_bytes(&bytes);
        }

        #[test]
        fn random_json_never_panics(tokens in prop::collection::vec(json_token(), 0..60)) {
            read_bytes(tokens.concat().as_bytes());
        }

        #[test]
        fn random_compressed_streams_never_panic(
            zstd in any::<bool>(),
            tail in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut bytes = if zstd { vec![0x28, 0xb5, 0x2f, 0xfd] } else { vec![0x1f, 0x8b, 8, 0] };
            bytes.extend(tail);
            read_bytes(&bytes);
        }

        #[test]
        fn mutated_zstd_never_panics(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            use ruzstd::encoding::{compress_to_vec, CompressionLevel};
            let text = array(&[get(0, "a"), get(1, "b"), get(2, "c")]);
            let mut bytes = compress_to_vec(text.as_bytes(), CompressionLevel::Fastest);
            for (i, b) in flips {
                let i = i.index(bytes.len());
                bytes[i] ^= b;
            }
            read_bytes(&bytes);
        }
    }
}
