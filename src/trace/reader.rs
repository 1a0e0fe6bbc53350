//! Trace files → typed records, merged by timestamp and classified, in bounded memory.
//!
//! Owns everything between the bytes on disk and the [`Item`]s the planner consumes, with
//! decompression in `decode`, framing in `split` and record parsing in `parse`:
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
//! - **Two views of one stream**: the iterator gives typed [`Item`]s (replay, stats,
//!   simulations); [`TraceReader::next_detailed`] gives the same items with each object's
//!   original text and, for an invalid record, why (`trace sample` copies records verbatim,
//!   `trace validate --all` names every problem).
//!
//! Invariants: memory is bounded by the number of simultaneously open files times (read
//! chunk + reorder buffer), the largest record, and the ids of one dedup window — never by
//! trace length (the [`Interner`] grows with distinct names only). Malformed input yields
//! [`TraceError`]s, never a panic. After the first error, or once a limit is reached, the
//! iterator returns `None` for good.

use std::collections::hash_map::Entry as Slot;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::decode::open_decoded;
use super::parse::{build, raw_time};
use super::record::{Interner, Record, Sym};
use super::split::{SplitError, Splitter};
use crate::progress::Progress;
use crate::shutdown::Shutdown;

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

/// An error reading a trace. Every variant names the file; record-level ones the 1-based
/// record number in that file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened, read or decompressed.
    /// The cause is part of the message, not a source of its own, so that a chain of
    /// causes shows it once.
    #[error("{}: cannot read: {cause}", file.display())]
    Io { file: PathBuf, cause: io::Error },
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
    /// A stop (Ctrl-C, SIGTERM) ended the reading ([`TraceReader::watch`]).
    #[error("stopped while reading the trace")]
    Stopped,
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
    /// Keep each object's original text for the detailed view
    /// ([`TraceReader::next_detailed`]): a copy of every record, for commands that write
    /// records out verbatim.
    pub keep_text: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            skip_invalid: false,
            replay_failed: false,
            limit_requests: None,
            limit_duration: None,
            dedup_window: Duration::from_secs(5 * 60),
            keep_text: false,
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

/// An item of the detailed view ([`TraceReader::next_detailed`]): the item, the original
/// text of its object (with [`ReadOptions::keep_text`]), and for an invalid record (with
/// [`ReadOptions::skip_invalid`]) the reason the typed view would have failed with.
#[derive(Debug, Clone, PartialEq)]
pub struct Detailed {
    pub item: Item,
    pub text: Option<Box<[u8]>>,
    pub invalid: Option<String>,
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
                cause: source,
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

    /// The files for a message: the one file's path, or the first and how many more.
    pub fn describe(&self) -> String {
        match self.files.as_slice() {
            [one] => one.display().to_string(),
            [first, rest @ ..] => format!("{} (and {} more files)", first.display(), rest.len()),
            [] => "the trace".to_owned(),
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), TraceError> {
    let io_err = |file: &Path| {
        let file = file.to_path_buf();
        move |source| TraceError::Io {
            file,
            cause: source,
        }
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

/// A record in the merge heap, with its text when the detailed view wants it.
struct Entry {
    record: Record,
    text: Option<Box<[u8]>>,
}

/// What travels with an item besides itself: its text and, if invalid, why.
#[derive(Default)]
struct Extra {
    text: Option<Box<[u8]>>,
    invalid: Option<String>,
}

type Out = (Result<Item, TraceError>, Extra);

/// A heap entry: a record's merge key, (time, file, number), and where the record lies.
/// Ordered by the key, unique per record; the slot never decides.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    time_ms: i64,
    file: u32,
    number: u64,
    slot: u32,
}

/// The merge heap: 24-byte keys in a binary heap and the records in a slab beside it, so
/// that a pop sifts through the keys of a few thousand records (tens of kilobytes, in
/// cache) and reads one record, where a heap of whole records moved ~100 bytes per level
/// through memory the size of the reorder buffers.
#[derive(Default)]
struct MergeHeap {
    keys: BinaryHeap<std::cmp::Reverse<Key>>,
    slab: Vec<Option<Entry>>,
    /// Free slots of the slab.
    free: Vec<u32>,
}

impl MergeHeap {
    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The time of the smallest record, if any.
    fn peek_time(&self) -> Option<i64> {
        self.keys.peek().map(|k| k.0.time_ms)
    }

    fn push(&mut self, entry: Entry) {
        let r = &entry.record;
        let (time_ms, file, number) = (r.time_ms, r.file, r.number);
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(entry);
                slot
            }
            None => {
                // Bounded by the open files' reorder buffers, far below 2^32.
                let slot = u32::try_from(self.slab.len()).expect("merge heap under 2^32 records");
                self.slab.push(Some(entry));
                slot
            }
        };
        self.keys.push(std::cmp::Reverse(Key {
            time_ms,
            file,
            number,
            slot,
        }));
    }

    /// The record with the smallest (time, file, number).
    fn pop(&mut self) -> Option<Entry> {
        let std::cmp::Reverse(key) = self.keys.pop()?;
        self.free.push(key.slot);
        self.slab[key.slot as usize].take()
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
            // One lookup each (the ids are random, the map larger than the caches: every
            // lookup is a miss): forgotten unless seen again since.
            if let Slot::Occupied(seen) = self.seen.entry(old) {
                if *seen.get() == t {
                    seen.remove();
                }
            }
        }
        match self.seen.entry(id) {
            Slot::Occupied(seen)
                if time_ms.abs_diff(*seen.get()) <= self.window_ms.unsigned_abs() =>
            {
                return true;
            }
            Slot::Occupied(mut seen) => {
                seen.insert(time_ms);
            }
            Slot::Vacant(seen) => {
                seen.insert(time_ms);
            }
        }
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
    heap: MergeHeap,
    /// Items (invalid records, errors) to return before the next merged record.
    pending: VecDeque<Out>,
    dedup: Dedup,
    stats: ReaderStats,
    emitted: u64,
    origin_ms: Option<i64>,
    latest_ms: Option<i64>,
    done: bool,
    /// A stop to heed and a progress line to feed ([`TraceReader::watch`]).
    watch: Option<(Shutdown, Arc<Progress>)>,
    /// Items returned since the last look at the watch.
    unwatched: u64,
}

/// Items between two looks at a watched reader's stop (a few milliseconds of reading).
const WATCH_EVERY: u64 = 4096;

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
                cause: io::Error::other("more than 2^32 input files"),
            });
        }
        let mut waiting = Vec::with_capacity(input.files.len());
        for (index, path) in (0u32..).zip(&input.files) {
            let first_ms = first_time(path).map_err(|source| TraceError::Io {
                file: path.clone(),
                cause: source,
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
            heap: MergeHeap::default(),
            pending: VecDeque::new(),
            stats: ReaderStats::default(),
            emitted: 0,
            origin_ms: None,
            latest_ms: None,
            done,
            watch: None,
            unwatched: 0,
        })
    }

    /// Counts the items read into `progress`, and ends the reading soon after `stop` is
    /// cancelled (a last [`TraceError::Stopped`]).
    pub fn watch(&mut self, stop: Shutdown, progress: Arc<Progress>) {
        self.watch = Some((stop, progress));
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
            Err(source) => self.pending.push_back((
                Err(TraceError::Io {
                    file: path.clone(),
                    cause: source,
                }),
                Extra::default(),
            )),
        }
    }

    /// Reads one object of file `f` into the heap or the pending queue. Returns true when
    /// `f` needs no more filling (its share of the heap is full, or it ended).
    #[allow(clippy::too_many_lines)]
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
        let keep_text = self.options.keep_text;
        let next = active.splitter.next_with(|_, bytes, raw| {
            let text = keep_text.then(|| Box::<[u8]>::from(bytes));
            (build(&raw, names, f, number), text)
        });
        self.stats.bytes_read += active.splitter.take_fresh();
        let file = || self.paths[fi].clone();
        let fatal = match next {
            Ok(None) => None,
            Err(SplitError::Io(source)) => Some(TraceError::Io {
                file: file(),
                cause: source,
            }),
            Err(SplitError::Syntax { offset, reason }) => Some(TraceError::Syntax {
                file: file(),
                record: number,
                offset,
                reason,
            }),
            Ok(Some((built, text))) => {
                active.number = number;
                self.stats.records_read += 1;
                match built {
                    Ok(record) => {
                        self.in_heap[fi] += 1;
                        self.heap.push(Entry { record, text });
                        return self.in_heap[fi] >= REORDER_CAPACITY;
                    }
                    Err(invalid) if self.options.skip_invalid => {
                        let item = Item::Skipped {
                            reason: SkipReason::Invalid,
                            file: f,
                            number,
                            client: invalid.client,
                            time_ms: invalid.time_ms,
                        };
                        let extra = Extra {
                            text,
                            invalid: Some(invalid.reason),
                        };
                        self.pending.push_back((Ok(item), extra));
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
                self.pending.push_back((Err(e), Extra::default()));
            } else {
                self.deferred.insert(f, e);
            }
        }
        true
    }

    /// Counts an item against `limit_requests` and returns it.
    fn emit(&mut self, out: Out) -> Option<Out> {
        match out.0 {
            Err(_) => self.done = true,
            Ok(_) => {
                self.emitted += 1;
                if self.options.limit_requests == Some(self.emitted) {
                    self.done = true;
                }
            }
        }
        Some(out)
    }

    /// Applies the duration limit, dedup and failure classification to a merged record.
    fn classify(&mut self, record: Record, text: Option<Box<[u8]>>) -> Option<Out> {
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
        let extra = Extra {
            text,
            invalid: None,
        };
        self.emit((Ok(item), extra))
    }

    /// The next item with its details: the detailed view of the same stream the iterator
    /// (the typed view) gives. Use one view or the other on a reader, not both.
    pub fn next_detailed(&mut self) -> Option<Result<Detailed, TraceError>> {
        let (item, extra) = self.next_out()?;
        Some(item.map(|item| Detailed {
            item,
            text: extra.text,
            invalid: extra.invalid,
        }))
    }

    fn next_out(&mut self) -> Option<Out> {
        loop {
            if self.done {
                return None;
            }
            if let Some(out) = self.pending.pop_front() {
                return self.emit(out);
            }
            if let Some(&f) = self.filling.last() {
                if self.read_one(f) {
                    self.filling.pop();
                }
                continue;
            }
            if let Some(&(at, f)) = self.waiting.last() {
                if self.heap.peek_time().is_none_or(|t| at <= t) {
                    self.waiting.pop();
                    self.activate(f);
                    continue;
                }
            }
            let Some(Entry { record, text }) = self.heap.pop() else {
                self.done = true;
                return None;
            };
            let f = record.file;
            self.in_heap[f as usize] -= 1;
            if self.active[f as usize].is_some() {
                self.filling.push(f);
            } else if self.in_heap[f as usize] == 0 {
                if let Some(e) = self.deferred.remove(&f) {
                    self.pending.push_back((Err(e), Extra::default()));
                }
            }
            return self.classify(record, text);
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Item, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some((stop, progress)) = &self.watch {
            self.unwatched += 1;
            if self.unwatched >= WATCH_EVERY {
                progress.add_done(self.unwatched);
                self.unwatched = 0;
                if stop.is_cancelled() {
                    self.done = true;
                    return Some(Err(TraceError::Stopped));
                }
            }
        }
        self.next_out().map(|(item, _)| item)
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
    use crate::fast_hash::fnv1a;
    use crate::trace::parse::Fields;
    use crate::trace::record::Method;
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
  {"timestamp": "2017-09-05T17:23:44Z", "http.request.method": "GET", "http.request.uri": "v2/a/b/manifests/l\u0061test", "http.request.duration": 0, "http.response.status": 200.0, "id": 12345}
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
        assert_eq!(r.client.map(|c| names.resolve(c)), Some("e1852826".into()));
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
            ("a/b".into(), "sha256:c3".into())
        );
        assert_eq!((r.size, r.status, r.duration_us), (1024, 200, 500_000));
        assert_eq!((r.client, r.id), (None, None));

        // Escaped strings, `written` absent, zero duration, float status, numeric id.
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
    fn a_negative_duration_or_an_absurd_size_is_invalid() {
        let dir = tempfile::tempdir().unwrap();
        for (field, value, why) in [
            ("http.request.duration", "-3", "is negative"),
            ("http.response.written", "18446744073709551615", "1 TiB"),
        ] {
            let text = format!(
                r#"[{{"timestamp": "2017-09-05T17:23:44Z", "http.request.method": "GET", "http.request.uri": "v2/a/b/blobs/sha256:c3", "{field}": {value}}}]"#
            );
            let file = write(dir.path(), "t.json", &text);
            let mut reader = reader(&[&file], ReadOptions::default());
            let e = reader.next().unwrap().unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(why), "{e}");
        }
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

    fn parse_raw(json: &str) -> Fields<'_> {
        serde_json::from_str(json).unwrap()
    }

    /// The detailed view is the typed view plus each object's exact text and, for an
    /// invalid record, the reason the typed view fails with.
    #[test]
    fn the_detailed_view_carries_text_and_reasons_of_the_same_items() {
        let dir = tempfile::tempdir().unwrap();
        let bad = r#"{"timestamp": "2017-06-20T00:00:00.001Z", "http.request.method": "GET", "http.request.uri": "v2/a/b/blobs/c", "http.response.status": "abc"}"#;
        let objects = [get(5, "a"), bad.to_owned(), get(0, "c"), get(5, "a")];
        let file = write(dir.path(), "t.json", array(&objects));
        let options = ReadOptions {
            skip_invalid: true,
            keep_text: true,
            ..ReadOptions::default()
        };
        let typed: Vec<Item> = reader(&[&file], options.clone())
            .map(|i| i.unwrap())
            .collect();
        let mut r = reader(&[&file], options);
        let mut detailed = Vec::new();
        while let Some(d) = r.next_detailed() {
            detailed.push(d.unwrap());
        }
        assert_eq!(
            detailed.iter().map(|d| d.item).collect::<Vec<_>>(),
            typed,
            "the same items in the same order"
        );
        for d in &detailed {
            let text = std::str::from_utf8(d.text.as_deref().unwrap()).unwrap();
            assert_eq!(text, objects[d.item.number() as usize - 1]);
            let invalid = matches!(
                d.item,
                Item::Skipped {
                    reason: SkipReason::Invalid,
                    ..
                }
            );
            assert_eq!(d.invalid.is_some(), invalid, "{d:?}");
        }
        let why = detailed.iter().find_map(|d| d.invalid.clone()).unwrap();
        let Some(Err(TraceError::Record { reason, .. })) =
            reader(&[&file], ReadOptions::default()).find(|i| i.is_err())
        else {
            panic!("the typed view does not fail")
        };
        assert_eq!(why, reason);
        // Without keep_text nothing is copied.
        let mut plain = reader(&[&file], ReadOptions::default());
        assert!(plain.next_detailed().unwrap().unwrap().text.is_none());
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
