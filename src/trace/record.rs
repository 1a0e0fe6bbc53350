//! One trace record, typed: the IBM Cloud registry log format (FAST'18) with its URI parsed
//! into what it names. Strings the replay needs (repository, reference, digest, client) are
//! interned into [`Sym`]s so a record is a small `Copy` value and memory does not grow with
//! repeated names.
//!
//! The raw format (`docs/traces.md`): a JSON object per request with `timestamp`
//! (`2017-06-20T00:01:37.113Z`), `http.request.method`, `http.request.uri`
//! (`v2/<user>/<repo>/manifests/<ref>`, `.../blobs/<digest>`, `.../blobs/uploads/[<id>]`,
//! with or without a leading slash), `http.request.remoteaddr` (client), `http.request.duration`
//! (seconds), `http.response.status`, `http.response.written` (bytes, the object size), `id`.

use std::borrow::Cow;
use std::fmt;
use std::hash::BuildHasher;

use crate::fast_hash::FastState;

/// The largest object a trace record is believed to describe: 1 TiB, far above any layer
/// of the IBM traces (their sizes end near 2 GiB) and above a month's traffic written as one
/// record (what `cost` examples do). A larger `http.response.written` (a
/// broken log, or a registry's absurd `Content-Length` taken in by `trace import
/// --sizes-from`) makes the record invalid: no replay could prewarm it in a lifetime.
pub const MAX_OBJECT_SIZE: u64 = 1 << 40;

/// [`MAX_OBJECT_SIZE`] as people read it.
pub const MAX_OBJECT_SIZE_TEXT: &str = "1 TiB";

/// An interned string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

/// An upload session id (`…/blobs/uploads/<id>`), hashed instead of interned: sessions are
/// only ever compared with each other, and a trace has one per upload (455,032 in the
/// 10M-record trace of `docs/benchmarks.md`), which would otherwise be a quarter of its
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

impl SessionId {
    /// The id of a session's text (FNV-1a, finalized: equal texts, equal ids, on every
    /// host).
    pub fn of(text: &str) -> SessionId {
        SessionId(crate::fast_hash::splitmix64(crate::fast_hash::fnv1a(
            text.as_bytes(),
        )))
    }
}

/// Interns strings; lookups and inserts are by value. Each distinct string is stored once,
/// back to back in one buffer (a `NameTable`): a symbol costs its bytes plus about ten
/// bytes of index, not an allocation of its own. A name of lowercase hex digits (the IBM
/// traces' anonymized names, a `sha256:` digest) is stored two digits to a byte. A long
/// trace has hundreds of thousands of distinct names; they are most of what a replay
/// holds (`docs/replay.md#memory`).
///
/// [`Interner::freeze`] moves the names into a shared, read-only base, so the replay's second
/// pass over the trace — which meets the same names — shares the catalog's names instead of
/// copying them; names new to the base go into a small private overlay.
#[derive(Debug, Default, Clone)]
pub struct Interner {
    base: std::sync::Arc<NameTable>,
    own: NameTable,
    /// Hashes names for both tables, so one hash serves both lookups.
    hasher: FastState,
}

impl Interner {
    pub fn intern(&mut self, s: &str) -> Sym {
        if !self.base.indexed() {
            self.index_base();
        }
        let stored = Stored::of(s);
        let hash = stored.hash(&self.hasher);
        if let Some(i) = self.base.find(hash, &stored) {
            return Sym(i);
        }
        let i = match self.own.find(hash, &stored) {
            Some(i) => i,
            None => self.own.push(hash, &stored, &self.hasher),
        };
        Sym(self.base.len() + i)
    }

    pub fn get(&self, s: &str) -> Option<Sym> {
        let stored = Stored::of(s);
        let hash = stored.hash(&self.hasher);
        let in_base = match self.base.indexed() {
            true => self.base.find(hash, &stored),
            // Without its index (see `drop_index`): a scan, for the rare lookup.
            false => (0..self.base.len()).find(|&i| self.base.stored(i) == stored.parts()),
        };
        in_base
            .or_else(|| self.own.find(hash, &stored).map(|i| self.base.len() + i))
            .map(Sym)
    }

    /// The name of `sym` (`""` if it has none): borrowed, or spelled out from its digits.
    pub fn resolve(&self, sym: Sym) -> Cow<'_, str> {
        let (form, bytes) = match sym.0.checked_sub(self.base.len()) {
            None => self.base.stored(sym.0),
            Some(j) => self.own.stored(j),
        };
        form.text(bytes)
    }

    /// Makes every name so far part of the shared base: clones made afterwards share them.
    /// Symbols keep their values.
    pub fn freeze(&mut self) {
        if self.own.len() == 0 {
            return;
        }
        let own = std::mem::take(&mut self.own);
        let base = std::sync::Arc::make_mut(&mut self.base);
        for i in 0..own.len() {
            let (form, bytes) = own.stored(i);
            let hash = hash_stored(&self.hasher, form, bytes);
            base.push_parts(hash, form, bytes, &self.hasher);
        }
        base.shrink_to_fit(&self.hasher);
    }

    /// Drops the shared base's lookup index (about 10 bytes a name) once every name is in
    /// it and the symbols only need resolving: a replay's second pass reads the spooled
    /// items, which carry their symbols. Interning again rebuilds the index first (a copy of
    /// the base if it is shared), so nothing is ever looked up wrong.
    pub fn drop_index(&mut self) {
        self.freeze();
        let base = std::sync::Arc::make_mut(&mut self.base);
        base.index = hashbrown::HashTable::new();
    }

    fn index_base(&mut self) {
        let base = std::sync::Arc::make_mut(&mut self.base);
        let hasher = &self.hasher;
        let mut index = hashbrown::HashTable::with_capacity(base.len() as usize);
        for i in 0..base.len() {
            index.insert_unique(base.rehash(hasher, i), i, |&j| base.rehash(hasher, j));
        }
        base.index = index;
    }

    pub fn len(&self) -> usize {
        (self.base.len() + self.own.len()) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the names and their index hold (the shared base and the overlay).
    pub fn heap_bytes(&self) -> usize {
        self.base.heap_bytes() + self.own.heap_bytes()
    }
}

/// How a name is stored: as its text, or as its lowercase hex digits two to a byte
/// (`Sha256Hex`: after a `sha256:` prefix, which is left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Text = 0,
    Hex = 1,
    Sha256Hex = 2,
}

/// The longest digit string stored packed (a SHA-512 in hex).
const MAX_PACKED: usize = 64;

impl Form {
    fn from_bits(bits: u8) -> Form {
        match bits {
            1 => Form::Hex,
            2 => Form::Sha256Hex,
            _ => Form::Text,
        }
    }

    /// The text of a stored name.
    fn text(self, bytes: &[u8]) -> Cow<'_, str> {
        match self {
            // Stored from a `&str`, so it is UTF-8; `""` rather than a panic otherwise.
            Form::Text => Cow::Borrowed(std::str::from_utf8(bytes).unwrap_or_default()),
            Form::Hex => Cow::Owned(hex::encode(bytes)),
            Form::Sha256Hex => Cow::Owned(format!("sha256:{}", hex::encode(bytes))),
        }
    }
}

/// A name as the table stores it, packed on the stack when it is digits.
enum Stored<'a> {
    Text(&'a [u8]),
    Packed {
        form: Form,
        buf: [u8; MAX_PACKED],
        len: usize,
    },
}

impl<'a> Stored<'a> {
    fn of(s: &'a str) -> Stored<'a> {
        let (form, digits) = match s.strip_prefix("sha256:") {
            Some(rest) => (Form::Sha256Hex, rest),
            None => (Form::Hex, s),
        };
        let packable = !digits.is_empty()
            && digits.len() % 2 == 0
            && digits.len() <= 2 * MAX_PACKED
            && digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !packable {
            return Stored::Text(s.as_bytes());
        }
        let mut buf = [0u8; MAX_PACKED];
        let len = digits.len() / 2;
        // Lowercase hex digits only, checked above: decoding cannot fail.
        if hex::decode_to_slice(digits, &mut buf[..len]).is_err() {
            return Stored::Text(s.as_bytes());
        }
        Stored::Packed { form, buf, len }
    }

    fn parts(&self) -> (Form, &[u8]) {
        match self {
            Stored::Text(b) => (Form::Text, b),
            Stored::Packed { form, buf, len } => (*form, &buf[..*len]),
        }
    }

    fn hash(&self, hasher: &FastState) -> u64 {
        let (form, bytes) = self.parts();
        hash_stored(hasher, form, bytes)
    }
}

fn hash_stored(hasher: &FastState, form: Form, bytes: &[u8]) -> u64 {
    hasher.hash_one((form as u8, bytes))
}

/// Distinct names in insertion order, back to back in one buffer, each after a header
/// byte (its [`Form`] in the top two bits, its stored length below, or 63 and the length
/// as a LEB128 number after), with the offset of every [`GROUP`]th name and a hash index
/// of name numbers looked up by stored form. A name of the IBM traces so costs its four
/// packed bytes, one byte of header and a quarter byte of offset: an offset per name
/// would double it.
#[derive(Clone, Default)]
struct NameTable {
    bytes: Vec<u8>,
    /// Where names 0, GROUP, 2·GROUP, … start.
    groups: Vec<u32>,
    names: u32,
    index: hashbrown::HashTable<u32>,
}

/// Names per recorded offset: finding a name reads at most this many headers.
const GROUP: u32 = 16;
/// A header's length field that says the length follows.
const LONG: u8 = 63;

impl fmt::Debug for NameTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameTable")
            .field("names", &self.names)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// The name that starts at `at` of a table's bytes: its form, its stored bytes, and where
/// the next name starts.
fn stored_from(bytes: &[u8], at: usize) -> (Form, &[u8], usize) {
    let Some(&header) = bytes.get(at) else {
        return (Form::Text, &[], at);
    };
    let mut at = at + 1;
    let mut len = usize::from(header & LONG);
    if len == usize::from(LONG) {
        len = 0;
        for shift in (0..32).step_by(7) {
            let Some(&b) = bytes.get(at) else { break };
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    let stop = (at + len).min(bytes.len());
    (Form::from_bits(header >> 6), &bytes[at..stop], stop)
}

/// Where the name after the one that starts at `at` starts: [`stored_from`]'s third answer,
/// read from a short name's header alone (a walk to a name passes up to [`GROUP`] - 1).
fn next_from(bytes: &[u8], at: usize) -> usize {
    match bytes.get(at) {
        Some(&header) if header & LONG != LONG => {
            (at + 1 + usize::from(header & LONG)).min(bytes.len())
        }
        _ => stored_from(bytes, at).2,
    }
}

/// The `i`th name of a table's parts, stored; an empty text past the end.
fn stored_at<'a>(bytes: &'a [u8], groups: &[u32], names: u32, i: u32) -> (Form, &'a [u8]) {
    if i >= names {
        return (Form::Text, &[]);
    }
    let Some(&start) = groups.get((i / GROUP) as usize) else {
        return (Form::Text, &[]);
    };
    let mut at = start as usize;
    for _ in 0..i % GROUP {
        at = next_from(bytes, at);
    }
    let (form, name, _) = stored_from(bytes, at);
    (form, name)
}

impl NameTable {
    fn len(&self) -> u32 {
        self.names
    }

    fn stored(&self, i: u32) -> (Form, &[u8]) {
        stored_at(&self.bytes, &self.groups, self.names, i)
    }

    /// False when the names are there without their index ([`Interner::drop_index`]).
    fn indexed(&self) -> bool {
        self.names == 0 || !self.index.is_empty()
    }

    fn find(&self, hash: u64, name: &Stored) -> Option<u32> {
        let parts = name.parts();
        self.index.find(hash, |&i| self.stored(i) == parts).copied()
    }

    /// Appends a name not yet in the table; returns its number.
    fn push(&mut self, hash: u64, name: &Stored, hasher: &FastState) -> u32 {
        let (form, bytes) = name.parts();
        self.push_parts(hash, form, bytes, hasher)
    }

    fn push_parts(&mut self, hash: u64, form: Form, name: &[u8], hasher: &FastState) -> u32 {
        let i = self.names;
        if i.is_multiple_of(GROUP) {
            // Offsets are 32-bit: a trace's distinct names would need 4 GiB to overflow.
            let at = u32::try_from(self.bytes.len()).expect("trace names exceed 4 GiB");
            self.groups.push(at);
        }
        let form_bits = (form as u8) << 6;
        match u8::try_from(name.len()) {
            Ok(len) if len < LONG => self.bytes.push(form_bits | len),
            _ => {
                self.bytes.push(form_bits | LONG);
                let mut len = name.len();
                while len >= 0x80 {
                    self.bytes.push((len as u8) | 0x80);
                    len >>= 7;
                }
                self.bytes.push(len as u8);
            }
        }
        self.bytes.extend_from_slice(name);
        self.names += 1;
        let (bytes, groups, names) = (&self.bytes, &self.groups, self.names);
        self.index.insert_unique(hash, i, |&j| {
            let (form, b) = stored_at(bytes, groups, names, j);
            hash_stored(hasher, form, b)
        });
        i
    }

    fn rehash(&self, hasher: &FastState, j: u32) -> u64 {
        let (form, b) = self.stored(j);
        hash_stored(hasher, form, b)
    }

    fn shrink_to_fit(&mut self, hasher: &FastState) {
        self.bytes.shrink_to_fit();
        self.groups.shrink_to_fit();
        let mut index = std::mem::take(&mut self.index);
        index.shrink_to_fit(|&j| self.rehash(hasher, j));
        self.index = index;
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.groups.capacity() * 4 + self.index.allocation_size()
    }
}

/// HTTP method of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Get,
    Head,
    Put,
    Patch,
    Post,
    Delete,
}

impl Method {
    pub fn parse(s: &str) -> Option<Method> {
        Some(match s {
            "GET" | "get" => Method::Get,
            "HEAD" | "head" => Method::Head,
            "PUT" | "put" => Method::Put,
            "PATCH" | "patch" => Method::Patch,
            "POST" | "post" => Method::Post,
            "DELETE" | "delete" => Method::Delete,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a record's URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// `v2/` (the API version check).
    Ping,
    /// `v2/<repo>/manifests/<reference>`.
    Manifest { repo: Sym, reference: Sym },
    /// `v2/<repo>/blobs/<digest>`.
    Blob { repo: Sym, digest: Sym },
    /// `v2/<repo>/blobs/uploads/` (a new upload session).
    UploadStart { repo: Sym },
    /// `v2/<repo>/blobs/uploads/?mount=<digest>&from=<repository>`: a cross-repository
    /// mount (answered 201), or an upload session where the registry did not mount (202).
    Mount { repo: Sym, digest: Sym, from: Sym },
    /// `v2/<repo>/blobs/uploads/<session>` (a chunk, the closing PUT, a status or cancel).
    Upload { repo: Sym, session: SessionId },
    /// `v2/<repo>/tags/list`.
    TagList { repo: Sym },
    /// Anything else (`v2/_catalog`, unknown paths): counted, never replayed.
    Other,
}

/// The kind of object a record is about, for statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Manifest,
    Blob,
    Upload,
    Other,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Manifest => "manifest",
            Kind::Blob => "blob",
            Kind::Upload => "upload",
            Kind::Other => "other",
        }
    }
}

impl Target {
    pub fn kind(&self) -> Kind {
        match self {
            Target::Manifest { .. } => Kind::Manifest,
            Target::Blob { .. } => Kind::Blob,
            Target::UploadStart { .. } | Target::Upload { .. } | Target::Mount { .. } => {
                Kind::Upload
            }
            Target::Ping | Target::TagList { .. } | Target::Other => Kind::Other,
        }
    }

    pub fn repo(&self) -> Option<Sym> {
        match *self {
            Target::Manifest { repo, .. }
            | Target::Blob { repo, .. }
            | Target::UploadStart { repo }
            | Target::Upload { repo, .. }
            | Target::Mount { repo, .. }
            | Target::TagList { repo } => Some(repo),
            Target::Ping | Target::Other => None,
        }
    }
}

/// One request of the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    /// Index of the input file (in the order given).
    pub file: u32,
    /// 1-based position of the record in its file.
    pub number: u64,
    /// Milliseconds since the Unix epoch (UTC).
    pub time_ms: i64,
    pub method: Method,
    pub target: Target,
    /// The anonymized client (`http.request.remoteaddr`); interned, or `None` if absent.
    pub client: Option<Sym>,
    /// `http.response.written`: bytes of the object transferred.
    pub size: u64,
    /// `http.response.status` (0 if absent).
    pub status: u16,
    /// `http.request.duration`, in microseconds.
    pub duration_us: u64,
    /// Hash of the log `id`, for duplicate detection; `None` if absent.
    pub id: Option<u64>,
    /// `creb.size_unknown`: the log this trace was imported from gave no size for this
    /// upload (`size` is what the import knew, maybe 0).
    pub size_unknown: bool,
}

impl Record {
    /// Whether the original request failed (4xx/5xx). A HEAD answered 404 is the normal
    /// answer of an existence check and does not count as failed.
    pub fn failed_in_trace(&self) -> bool {
        self.status >= 400 && !(self.method == Method::Head && self.status == 404)
    }
}

/// Where in `s` the last of each marker of a registry path begins, as `str::rfind` finds
/// it: `/blobs/uploads`, `/manifests/` and `/blobs/`. One pass from the end over the places
/// of `/` (every marker starts with one), ending at the last upload marker, which takes
/// precedence over the others: a general substring search costs more to set up than a
/// trace URI takes to scan, and this runs for every record read.
fn rfind_markers(s: &str) -> Markers {
    let bytes = s.as_bytes();
    let mut found = Markers::default();
    for i in memchr::memrchr_iter(b'/', bytes) {
        let after = &bytes[i..];
        if after.starts_with(b"/blobs/") {
            if after.starts_with(b"/blobs/uploads") {
                found.uploads = Some(i);
                break;
            }
            found.blobs = found.blobs.or(Some(i));
        } else if found.manifests.is_none() && after.starts_with(b"/manifests/") {
            found.manifests = Some(i);
        }
    }
    found
}

/// What [`rfind_markers`] found: the last place of each marker (`blobs` and `manifests` are
/// left unknown when `uploads` is found).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Markers {
    uploads: Option<usize>,
    manifests: Option<usize>,
    blobs: Option<usize>,
}

/// `s` without leading `/`s.
fn trim_start_slashes(s: &str) -> &str {
    let n = s.bytes().take_while(|&b| b == b'/').count();
    &s[n..]
}

/// `s` without trailing `/`s.
fn trim_end_slashes(s: &str) -> &str {
    let n = s.bytes().rev().take_while(|&b| b == b'/').count();
    &s[..s.len() - n]
}

fn has_slash(s: &str) -> bool {
    memchr::memchr(b'/', s.as_bytes()).is_some()
}

/// Splits a URI into its target, interning names. Accepts a leading `/`, a query string
/// (ignored), and repository names of any number of components. Every search here is on
/// bytes (the separators are ASCII): it runs for every record read, and the
/// `char`- and substring-pattern searches of `str` cost more to set up than a URI takes to
/// scan.
#[allow(clippy::too_many_lines)]
pub fn parse_uri(uri: &str, names: &mut Interner) -> Target {
    let end = memchr::memchr2(b'?', b'#', uri.as_bytes()).unwrap_or(uri.len());
    let path = trim_start_slashes(&uri[..end]);
    let Some(rest) = path.strip_prefix("v2/") else {
        return if path == "v2" {
            Target::Ping
        } else {
            Target::Other
        };
    };
    if rest.is_empty() {
        return Target::Ping;
    }
    if let Some(repo) = rest.strip_suffix("/tags/list") {
        return match valid_repo(repo) {
            true => Target::TagList {
                repo: names.intern(repo),
            },
            false => Target::Other,
        };
    }
    // The last `/blobs/` or `/manifests/` separates the repository from what follows.
    let markers = rfind_markers(rest);
    if let Some(i) = markers.uploads {
        let repo = &rest[..i];
        let tail = trim_start_slashes(&rest[i + "/blobs/uploads".len()..]);
        if !valid_repo(repo) {
            return Target::Other;
        }
        let repo = names.intern(repo);
        let session = trim_end_slashes(tail);
        return if session.is_empty() {
            match mount_query(&uri[end..]) {
                Some((digest, from)) if valid_repo(&from) => Target::Mount {
                    repo,
                    digest: names.intern(&digest),
                    from: names.intern(&from),
                },
                _ => Target::UploadStart { repo },
            }
        } else if has_slash(session) {
            Target::Other
        } else {
            Target::Upload {
                repo,
                session: SessionId::of(session),
            }
        };
    }
    for (found, marker, is_manifest) in [
        (markers.manifests, "/manifests/", true),
        (markers.blobs, "/blobs/", false),
    ] {
        if let Some(i) = found {
            let repo = &rest[..i];
            let name = &rest[i + marker.len()..];
            if !valid_repo(repo) || name.is_empty() || has_slash(name) {
                return Target::Other;
            }
            let repo = names.intern(repo);
            let name = names.intern(name);
            return if is_manifest {
                Target::Manifest {
                    repo,
                    reference: name,
                }
            } else {
                Target::Blob { repo, digest: name }
            };
        }
    }
    Target::Other
}

/// The `mount` and `from` of a query (`?mount=sha256%3A…&from=a%2Fb`, decoded), when it
/// has both.
pub fn mount_query(query: &str) -> Option<(String, String)> {
    let query = query.strip_prefix('?')?;
    let (mut digest, mut from) = (None, None);
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("mount", v)) => digest = Some(percent_decoded(v)),
            Some(("from", v)) => from = Some(percent_decoded(v)),
            _ => {}
        }
    }
    Some((digest.filter(|d| !d.is_empty())?, from?))
}

/// `%XX` escapes decoded (a malformed escape stays as it is).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn valid_repo(repo: &str) -> bool {
    let b = repo.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first != b'/' && last != b'/' && !b.windows(2).any(|w| w == b"//")
        }
        _ => false,
    }
}

/// Parses `2017-06-20T00:01:37.113Z` (RFC 3339, any fraction, `Z` or an offset) into Unix
/// milliseconds.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    utc_millis(s.as_bytes()).or_else(|| general_millis(s))
}

/// Any form [`parse_timestamp`] takes: trimmed, with an offset or without, through a
/// `SystemTime`.
fn general_millis(s: &str) -> Option<i64> {
    let s = s.trim();
    // An explicit numeric offset first: humantime's weak parser would ignore it, so a
    // timestamp with an offset that is not valid is not a timestamp.
    let t = if has_offset(s) {
        parse_with_offset(s)?
    } else {
        humantime::parse_rfc3339_weak(s).ok()?
    };
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    // `as_millis` would divide in 128 bits.
    i64::try_from(d.as_secs())
        .ok()?
        .checked_mul(1000)?
        .checked_add(i64::from(d.subsec_millis()))
}

/// Days before each month's first in a year that is not a leap year.
const DAYS_BEFORE_MONTH: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];

/// The form every trace writes, `2017-06-20T00:01:37.113Z` (a fraction of one to nine
/// digits, or none), read straight to Unix milliseconds with humantime's checks and
/// arithmetic: two fifths of the general path's instructions, which trims, looks for an
/// offset and builds a `SystemTime`. `None` for any other form and for a value out of
/// range, which the general path then decides.
fn utc_millis(b: &[u8]) -> Option<i64> {
    const FORM: usize = "2017-06-20T00:01:37Z".len();
    const DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    if b.len() < FORM || b.len() > FORM + 10 || b[b.len() - 1] != b'Z' {
        return None;
    }
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    for i in DIGITS {
        if !b[i].is_ascii_digit() {
            return None;
        }
    }
    let two = |i: usize| i64::from(b[i] - b'0') * 10 + i64::from(b[i + 1] - b'0');
    let year = two(0) * 100 + two(2);
    let (month, day, hour, minute, second) = (two(5), two(8), two(11), two(14), two(17));
    let millis = match &b[FORM - 1..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if !fraction.is_empty() => {
            for c in fraction {
                if !c.is_ascii_digit() {
                    return None;
                }
            }
            let digit = |i: usize| fraction.get(i).map_or(0, |&c| i64::from(c - b'0'));
            digit(0) * 100 + digit(1) * 10 + digit(2)
        }
        _ => return None,
    };
    if year < 1970 || !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day == 0 || day > month_days {
        return None;
    }
    let month_index = usize::try_from(month - 1).ok()?;
    let year_day = DAYS_BEFORE_MONTH[month_index] + day - 1 + i64::from(leap && month > 2);
    let leap_days = (year - 1969) / 4 - (year - 1901) / 100 + (year - 1601) / 400;
    let days = (year - 1970) * 365 + leap_days + year_day;
    // A leap second counts as the second before it, as humantime has it.
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second.min(59);
    Some(seconds * 1000 + millis)
}

/// Whether the time part (after the `T`) carries a numeric offset sign.
fn has_offset(s: &str) -> bool {
    let b = s.as_bytes();
    memchr::memchr(b'T', b).is_some_and(|t| memchr::memchr2(b'+', b'-', &b[t..]).is_some())
}

/// RFC 3339 with a numeric offset (`+02:00`), which humantime does not take.
fn parse_with_offset(s: &str) -> Option<std::time::SystemTime> {
    let (base, sign, offset) = if let Some(i) = s.rfind('+').filter(|i| *i > 10) {
        (&s[..i], 1i64, &s[i + 1..])
    } else if let Some(i) = s.rfind('-').filter(|i| *i > 10) {
        (&s[..i], -1i64, &s[i + 1..])
    } else {
        return None;
    };
    // RFC 3339: `hh:mm`, two digits each, at most 23:59.
    let (h, m) = offset.split_once(':')?;
    let two_digits = |f: &str, max: i64| {
        (f.len() == 2 && f.bytes().all(|b| b.is_ascii_digit()))
            .then(|| f.parse::<i64>().ok())
            .flatten()
            .filter(|v| *v <= max)
    };
    let secs = sign * (two_digits(h, 23)? * 3600 + two_digits(m, 59)? * 60);
    let utc = humantime::parse_rfc3339_weak(base).ok()?;
    if secs >= 0 {
        utc.checked_sub(std::time::Duration::from_secs(secs as u64))
    } else {
        utc.checked_add(std::time::Duration::from_secs(secs.unsigned_abs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn target(uri: &str) -> (Target, Interner) {
        let mut names = Interner::default();
        let t = parse_uri(uri, &mut names);
        (t, names)
    }

    /// fuzz/ target `trace_record`: an offset of many digits overflowed the seconds
    /// arithmetic (a panic in debug builds, a wrong time in release).
    #[test]
    fn fuzz_trace_record_offset_out_of_range_is_not_a_timestamp() {
        assert_eq!(parse_timestamp("T:66-0+88777777777761777 0:"), None);
        assert_eq!(
            parse_timestamp("2017-06-20T00:01:37Z+887777777777617770:00"),
            None
        );
        assert_eq!(parse_timestamp("2017-06-20T02:01:37.000+24:00"), None);
        assert_eq!(parse_timestamp("2017-06-20T02:01:37.000+02:60"), None);
        assert_eq!(parse_timestamp("2017-06-20T02:01:37.000+2:00"), None);
        assert_eq!(
            parse_timestamp("2017-06-20T02:01:37.000+02:00"),
            parse_timestamp("2017-06-20T00:01:37.000Z")
        );
        assert_eq!(
            parse_timestamp("2017-06-19T23:31:37.000-00:30"),
            parse_timestamp("2017-06-20T00:01:37.000Z")
        );
    }

    proptest! {
        #[test]
        fn rfind_markers_finds_what_rfind_finds(s in "[a-z/]{0,12}(/blobs/uploads|/manifests/|/blobs/)?[a-z/]{0,12}(/blobs/|/manifests/)?[a-z/]{0,6}(/blobs/uploads)?[a-z/]{0,3}") {
            let found = rfind_markers(&s);
            prop_assert_eq!(found.uploads, s.rfind("/blobs/uploads"), "{}", s);
            if found.uploads.is_none() {
                prop_assert_eq!(found.manifests, s.rfind("/manifests/"), "{}", s);
                prop_assert_eq!(found.blobs, s.rfind("/blobs/"), "{}", s);
            }
        }

        /// The walk to a name skips each name before it to where reading it in full ends,
        /// at any place of any bytes (long names' headers among them).
        #[test]
        fn a_name_is_skipped_to_where_reading_it_ends(
            bytes in proptest::collection::vec(prop_oneof![any::<u8>(), Just(LONG), Just(0x80 | LONG)], 0..80),
            at in 0usize..90,
        ) {
            prop_assert_eq!(next_from(&bytes, at), stored_from(&bytes, at).2);
        }
    }

    #[test]
    fn frozen_names_are_shared_and_keep_their_symbols() {
        let mut names = Interner::default();
        let a = names.intern("a");
        let b = names.intern("b");
        names.freeze();
        let mut copy = names.clone();
        assert!(std::sync::Arc::ptr_eq(&names.base, &copy.base));
        assert_eq!((copy.intern("b"), copy.intern("a")), (b, a));
        let c = copy.intern("c");
        assert_eq!(c, Sym(2));
        assert_eq!(copy.resolve(c), "c");
        assert_eq!(copy.resolve(a), "a");
        assert_eq!(
            names.get("c"),
            None,
            "the original does not see the copy's names"
        );
        assert_eq!(copy.len(), 3);
        copy.freeze();
        assert_eq!((copy.get("a"), copy.get("c")), (Some(a), Some(c)));
        assert_eq!(copy.resolve(Sym(99)), "");
    }

    #[test]
    fn hex_names_are_packed_and_come_back_as_they_were() {
        let mut names = Interner::default();
        let texts = [
            "817c8a39",
            "sha256:c3d4e5f6",
            "sha256:",
            "abc",
            "ABCD",
            "0f",
            "503550a5/d1002b86",
            "",
            "é1",
        ];
        let syms: Vec<Sym> = texts.iter().map(|t| names.intern(t)).collect();
        for (t, s) in texts.iter().zip(&syms) {
            assert_eq!(names.resolve(*s), *t);
            assert_eq!(names.get(t), Some(*s), "{t}");
            assert_eq!(names.intern(t), *s, "{t} again");
        }
        assert_eq!(names.get("0F"), None, "upper case is another name");
        let before = names.heap_bytes();
        let mut packed = Interner::default();
        packed.intern(&"ab".repeat(64));
        let mut text = Interner::default();
        text.intern(&"ag".repeat(64));
        assert!(packed.heap_bytes() < text.heap_bytes(), "{before}");
        names.drop_index();
        assert_eq!(names.get("sha256:c3d4e5f6"), Some(syms[1]), "by a scan too");
    }

    #[test]
    fn names_without_their_index_resolve_and_intern_the_same() {
        let mut names = Interner::default();
        let syms: Vec<Sym> = ["x", "y", "z"].iter().map(|s| names.intern(s)).collect();
        let indexed = names.heap_bytes();
        names.drop_index();
        assert!(names.heap_bytes() < indexed, "the index is gone");
        assert_eq!(names.resolve(syms[1]), "y");
        assert_eq!(names.get("z"), Some(syms[2]), "found by a scan");
        assert_eq!(names.get("w"), None);
        let mut copy = names.clone();
        assert_eq!(
            copy.intern("x"),
            syms[0],
            "the index is rebuilt, not bypassed"
        );
        assert_eq!(copy.intern("w"), Sym(3));
        assert_eq!(copy.get("y"), Some(syms[1]));
        assert_eq!(names.resolve(syms[0]), "x", "the original is untouched");
    }

    #[test]
    fn uris_of_the_ibm_traces() {
        let (t, n) = target("v2/503550a5/d1002b86/manifests/817c8a39");
        let Target::Manifest { repo, reference } = t else {
            panic!("{t:?}")
        };
        assert_eq!(
            (n.resolve(repo), n.resolve(reference)),
            ("503550a5/d1002b86".into(), "817c8a39".into())
        );
        let (t, n) = target("/v2/a1/b2/blobs/c3d4e5f6");
        let Target::Blob { repo, digest } = t else {
            panic!("{t:?}")
        };
        assert_eq!(
            (n.resolve(repo), n.resolve(digest)),
            ("a1/b2".into(), "c3d4e5f6".into())
        );
        assert!(matches!(
            target("v2/a/b/blobs/uploads/").0,
            Target::UploadStart { .. }
        ));
        assert!(matches!(
            target("v2/a/b/blobs/uploads").0,
            Target::UploadStart { .. }
        ));
        let (t, n) = target("v2/a/b/blobs/uploads/0f1e2d3c?_state=x&digest=sha256:1");
        let Target::Upload { session, .. } = t else {
            panic!("{t:?}")
        };
        assert_eq!(session, SessionId::of("0f1e2d3c"));
        assert_ne!(session, SessionId::of("0f1e2d3d"));
        assert_eq!(n.get("0f1e2d3c"), None, "not interned");
        assert_eq!(target("v2/").0, Target::Ping);
        assert_eq!(target("/v2").0, Target::Ping);
        assert!(matches!(
            target("v2/a/b/tags/list").0,
            Target::TagList { .. }
        ));
        assert_eq!(target("v2/_catalog").0, Target::Other);
        assert_eq!(target("v1/search").0, Target::Other);
        assert_eq!(target("v2//manifests/x").0, Target::Other);
        assert_eq!(target("v2/a/manifests/").0, Target::Other);
    }

    #[test]
    fn repositories_of_any_depth_and_names_that_look_like_markers() {
        let (t, n) = target("v2/org/team/app/manifests/v1");
        assert_eq!(n.resolve(t.repo().unwrap()), "org/team/app");
        // A repository called "blobs" is still a repository.
        let (t, n) = target("v2/x/blobs/manifests/latest");
        assert_eq!(n.resolve(t.repo().unwrap()), "x/blobs");
        // Empty path components make no repository name.
        for uri in [
            "v2/a//manifests/x",
            "v2//a/manifests/x",
            "v2/a//b/blobs/sha256:1",
            "v2/a//blobs/uploads/",
            "v2//tags/list",
            "v2/a/manifests/x/",
        ] {
            assert_eq!(target(uri).0, Target::Other, "{uri}");
        }
        let (t, _) = target("//v2/a/blobs/uploads//u1//?digest=x#y");
        assert!(matches!(t, Target::Upload { .. }), "{t:?}");
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:01.500Z"), Some(1500));
        assert_eq!(
            parse_timestamp("2017-06-20T00:01:37.113Z"),
            Some(1_497_916_897_113)
        );
        assert_eq!(
            parse_timestamp("2017-06-20T02:01:37.113+02:00"),
            Some(1_497_916_897_113)
        );
        assert_eq!(
            parse_timestamp("2017-06-20T00:01:37Z"),
            Some(1_497_916_897_000)
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn failed_originals() {
        let mut names = Interner::default();
        let mut r = |method, status| Record {
            file: 0,
            number: 1,
            time_ms: 0,
            method,
            target: parse_uri("v2/a/b/blobs/c", &mut names),
            client: None,
            size: 0,
            status,
            duration_us: 0,
            id: None,
            size_unknown: false,
        };
        assert!(!r(Method::Head, 404).failed_in_trace());
        assert!(r(Method::Get, 404).failed_in_trace());
        assert!(r(Method::Put, 500).failed_in_trace());
        assert!(!r(Method::Get, 200).failed_in_trace());
    }

    #[test]
    fn a_mount_keeps_its_digest_and_source_and_fits_the_target() {
        let mut names = Interner::default();
        let t = parse_uri(
            "/v2/other/two/blobs/uploads/?from=app%2Fone&mount=sha256%3A3dd2&origin=r%3A5",
            &mut names,
        );
        let Target::Mount { repo, digest, from } = t else {
            panic!("{t:?}")
        };
        assert_eq!(
            (names.resolve(repo).as_ref(), names.resolve(digest).as_ref()),
            ("other/two", "sha256:3dd2")
        );
        assert_eq!(names.resolve(from), "app/one");
        assert_eq!(t.kind(), Kind::Upload);
        assert_eq!(t.repo(), Some(repo));
        // As the import writes it: names as they are.
        let t = parse_uri(
            "v2/aa/bb/blobs/uploads/?mount=0123abcd&from=aa/cc",
            &mut names,
        );
        assert!(matches!(t, Target::Mount { .. }), "{t:?}");
        // Half a mount is a plain upload; so is an invalid source.
        for uri in [
            "v2/a/b/blobs/uploads/?mount=sha256:00",
            "v2/a/b/blobs/uploads/?from=a/c",
            "v2/a/b/blobs/uploads/?mount=&from=a/c",
            "v2/a/b/blobs/uploads/?mount=d&from=/a",
        ] {
            let t = parse_uri(uri, &mut names);
            assert!(matches!(t, Target::UploadStart { .. }), "{uri}: {t:?}");
        }
        assert!(std::mem::size_of::<Target>() <= 16, "records stay small");
    }

    /// `parse_uri` as it was written with `str` patterns, before the byte-level version: the
    /// oracle of `byte_level_parsing_answers_as_the_str_version_did`.
    fn parse_uri_by_str(uri: &str, names: &mut Interner) -> Target {
        let path = uri.split(['?', '#']).next().unwrap_or_default();
        let path = path.trim_start_matches('/');
        let Some(rest) = path.strip_prefix("v2/") else {
            return if path == "v2" {
                Target::Ping
            } else {
                Target::Other
            };
        };
        let valid = |r: &str| {
            !r.is_empty() && !r.starts_with('/') && !r.ends_with('/') && !r.contains("//")
        };
        if rest.is_empty() {
            return Target::Ping;
        }
        if let Some(repo) = rest.strip_suffix("/tags/list") {
            return if valid(repo) {
                Target::TagList {
                    repo: names.intern(repo),
                }
            } else {
                Target::Other
            };
        }
        if let Some(i) = rest.rfind("/blobs/uploads") {
            let (repo, tail) = (&rest[..i], rest[i + 14..].trim_start_matches('/'));
            if !valid(repo) {
                return Target::Other;
            }
            let repo = names.intern(repo);
            let session = tail.trim_end_matches('/');
            return match session {
                "" => Target::UploadStart { repo },
                s if s.contains('/') => Target::Other,
                s => Target::Upload {
                    repo,
                    session: SessionId::of(s),
                },
            };
        }
        for (marker, is_manifest) in [("/manifests/", true), ("/blobs/", false)] {
            if let Some(i) = rest.rfind(marker) {
                let (repo, name) = (&rest[..i], &rest[i + marker.len()..]);
                if !valid(repo) || name.is_empty() || name.contains('/') {
                    return Target::Other;
                }
                let (repo, name) = (names.intern(repo), names.intern(name));
                return match is_manifest {
                    true => Target::Manifest {
                        repo,
                        reference: name,
                    },
                    false => Target::Blob { repo, digest: name },
                };
            }
        }
        Target::Other
    }

    /// The offset test and the millisecond conversion as they were before the byte-level
    /// version.
    fn parse_timestamp_by_str(s: &str) -> Option<i64> {
        let s = s.trim();
        let time_part = s.find('T').map_or("", |t| &s[t..]);
        let t = if time_part.contains('+') || time_part.contains('-') {
            parse_with_offset(s)?
        } else {
            humantime::parse_rfc3339_weak(s).ok()?
        };
        i64::try_from(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn byte_level_parsing_answers_as_the_str_version_did(
            uri in "/{0,2}(v2|v1|x)?(/[a-z/]{0,6}(/|//)?(blobs|manifests|uploads|tags)?(/uploads|/list)?/?[a-zé:0-9]{0,8}){0,3}/{0,2}([?#][a-z/?#]{0,6})?",
            ts in " ?(19[0-9]{2}|20[0-3][0-9])-(0[1-9]|1[0-2]|13)-(0[1-9]|1[0-9]|2[0-9]|3[01])[T ]([01][0-9]|2[0-4]):[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,4}|\\.[0-9+-]{0,3})?(Z|[+-]([01][0-9]|2[0-4]):[0-6][0-9]|[+-][0-9]{1,2}:?[0-9]{0,2}Z?)? ?",
        ) {
            let (mut a, mut b) = (Interner::default(), Interner::default());
            let (new, old) = (parse_uri(&uri, &mut a), parse_uri_by_str(&uri, &mut b));
            prop_assert_eq!(new, old, "{}", uri);
            let name = match new {
                Target::Manifest { reference: n, .. }
                | Target::Blob { digest: n, .. } => Some(n),
                _ => None,
            };
            for sym in [new.repo(), name].into_iter().flatten() {
                prop_assert_eq!(a.resolve(sym), b.resolve(sym));
            }
            prop_assert_eq!(parse_timestamp(&ts), parse_timestamp_by_str(&ts), "{}", ts);
        }
    }

    #[test]
    fn the_trace_form_is_read_as_the_general_path_reads_it() {
        for ts in [
            "2017-06-20T00:01:37.113Z",
            "2017-06-20T00:01:37Z",
            "2017-06-20T00:01:37.1Z",
            "2017-06-20T00:01:37.123456789Z",
            "1970-01-01T00:00:00.000Z",
            "2016-02-29T23:59:60.999Z",
            "2000-03-01T00:00:00Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            assert_eq!(utc_millis(ts.as_bytes()), general_millis(ts), "{ts}");
            assert!(utc_millis(ts.as_bytes()).is_some(), "{ts}");
        }
        for other in [
            "2017-02-29T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2017-06-20T24:00:00Z",
            "2017-06-20T00:01:37.Z",
            "2017-06-20T00:01:37.1234567890Z",
            "2017-06-20 00:01:37Z",
            "2017-06-20T00:01:37.113",
            " 2017-06-20T00:01:37.113Z",
        ] {
            assert_eq!(utc_millis(other.as_bytes()), None, "{other}");
        }
        assert_eq!(
            parse_timestamp("2017-06-20T00:01:37.Z"),
            general_millis("2017-06-20T00:01:37.Z")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Whatever the fast path reads, the general path reads the same.
        #[test]
        fn the_fast_path_agrees_with_the_general_one(
            ts in "(19[0-9]{2}|[2-9][0-9]{3})-(0[0-9]|1[0-3])-([0-3][0-9])T([0-2][0-9]):[0-6][0-9]:[0-6][0-9](\\.[0-9]{0,11})?Z",
            noise in "[0-9TZ:. +-]{19,31}",
        ) {
            for s in [ts.as_str(), noise.as_str()] {
                if let Some(ms) = utc_millis(s.as_bytes()) {
                    prop_assert_eq!(Some(ms), general_millis(s), "{}", s);
                }
                prop_assert_eq!(parse_timestamp(s), general_millis(s), "{}", s);
            }
        }
    }

    proptest! {
        #[test]
        fn never_panics(uri in ".{0,80}", ts in ".{0,40}") {
            let mut names = Interner::default();
            let _ = parse_uri(&uri, &mut names);
            let _ = parse_timestamp(&ts);
        }
    }
}
