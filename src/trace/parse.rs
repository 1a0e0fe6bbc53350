//! Record parsing: one JSON object of a trace into a typed [`Record`], or the reason it is
//! not one, naming the field. Strings are borrowed from the read buffer where JSON allows;
//! names are interned.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::record::{
    parse_timestamp, parse_uri, Interner, Method, Record, Sym, MAX_OBJECT_SIZE,
    MAX_OBJECT_SIZE_TEXT,
};
use crate::fast_hash::fnv1a;

/// Any JSON value, kept only as far as a record field needs it.
#[derive(Debug, Default)]
pub(super) enum Val<'a> {
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
/// Set by `trace import` on an upload's closing record when the log gave no size for it.
const F_SIZE_UNKNOWN: &str = "creb.size_unknown";

/// The fields of a record object the replay uses; values are untyped until validation so
/// that a bad value is reported with its field name.
#[derive(Debug, Default)]
pub(super) struct Fields<'a> {
    pub(super) timestamp: Val<'a>,
    pub(super) method: Val<'a>,
    pub(super) uri: Val<'a>,
    pub(super) client: Val<'a>,
    pub(super) duration: Val<'a>,
    pub(super) status: Val<'a>,
    pub(super) written: Val<'a>,
    pub(super) id: Val<'a>,
    pub(super) size_unknown: Val<'a>,
}

/// A field of [`Fields`], as a record's key names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Timestamp,
    Method,
    Uri,
    Client,
    Duration,
    Status,
    Written,
    Id,
    SizeUnknown,
}

impl Field {
    /// How many there are (`field as usize` is below it).
    pub(super) const COUNT: usize = 9;

    /// The field a key names (`None`: one the replay does not read), by one comparison with
    /// the one name of that length a key can be. Both readers of a record ask it: the
    /// scanner ([`super::scan`]) and serde_json's visitor.
    pub(super) fn of(key: &[u8]) -> Option<Field> {
        // Two names are 21 bytes long: "http.request.…" and "http.response.…" differ at 7.
        let (field, name) = match key.len() {
            9 => (Field::Timestamp, F_TIMESTAMP),
            19 => (Field::Method, F_METHOD),
            16 => (Field::Uri, F_URI),
            23 => (Field::Client, F_CLIENT),
            21 if key.get(7) == Some(&b'q') => (Field::Duration, F_DURATION),
            20 => (Field::Status, F_STATUS),
            21 => (Field::Written, F_WRITTEN),
            2 => (Field::Id, F_ID),
            17 => (Field::SizeUnknown, F_SIZE_UNKNOWN),
            _ => return None,
        };
        same(key, name.as_bytes()).then_some(field)
    }
}

/// Whether two byte strings are equal, a word at a time (the last word overlapping the one
/// before): in the musl build a slice comparison calls `memcmp`, which goes byte by byte.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    let word = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
    };
    if a.len() != b.len() {
        return false;
    }
    if a.len() < 8 {
        return a == b;
    }
    let last = a.len() - 8;
    (0..last).step_by(8).all(|at| word(a, at) == word(b, at)) && word(a, last) == word(b, last)
}

impl<'a> Fields<'a> {
    /// Where `field`'s value goes.
    pub(super) fn slot(&mut self, field: Field) -> &mut Val<'a> {
        match field {
            Field::Timestamp => &mut self.timestamp,
            Field::Method => &mut self.method,
            Field::Uri => &mut self.uri,
            Field::Client => &mut self.client,
            Field::Duration => &mut self.duration,
            Field::Status => &mut self.status,
            Field::Written => &mut self.written,
            Field::Id => &mut self.id,
            Field::SizeUnknown => &mut self.size_unknown,
        }
    }
}

/// A key as serde_json's visitor reads it: the field it names, if one the replay reads.
struct Key(Option<Field>);

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
                match Field::of(v) {
                    Some(field) => Ok(Key(Some(field))),
                    // Checked here, as serde_json would have: the known names are ASCII.
                    None if std::str::from_utf8(v).is_err() => {
                        Err(E::custom("a field name that is not UTF-8"))
                    }
                    None => Ok(Key(None)),
                }
            }
        }
        // As bytes: serde_json then skips its UTF-8 check of every field name, which costs
        // more than matching the name (this runs for every field of every record).
        d.deserialize_bytes(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a record object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut raw = Fields::default();
                while let Some(Key(field)) = map.next_key::<Key>()? {
                    match field {
                        Some(field) => *raw.slot(field) = map.next_value()?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(raw)
            }
        }
        d.deserialize_map(RawVisitor)
    }
}

/// Where (in `bytes`) and why serde_json rejected `bytes`.
pub(super) fn json_error(bytes: &[u8], e: &serde_json::Error) -> (usize, String) {
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
pub(super) struct Invalid {
    pub(super) reason: String,
    pub(super) time_ms: Option<i64>,
    pub(super) client: Option<Sym>,
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

/// The first valid timestamp of an object, if any (for peeking at a file's start).
pub(super) fn raw_time(raw: &Fields<'_>) -> Option<i64> {
    str_field(&raw.timestamp, F_TIMESTAMP)
        .ok()
        .flatten()
        .and_then(parse_timestamp)
}

/// Validates a raw object into a record, interning its names.
#[allow(clippy::too_many_lines)]
pub(super) fn build(
    raw: &Fields<'_>,
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
        if size > MAX_OBJECT_SIZE {
            return Err(format!(
                "field `{F_WRITTEN}`: {size} bytes is beyond the {MAX_OBJECT_SIZE_TEXT} any \
                 object is believed to have (a broken log or answer)"
            ));
        }
        let duration_us = match float_field(&raw.duration, F_DURATION)? {
            Some(secs) if secs < 0.0 => {
                return Err(format!(
                    "field `{F_DURATION}`: {secs} is negative; a request takes no less than 0 s"
                ))
            }
            // Saturating float-to-int conversion: NaN becomes 0.
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
        let size_unknown = match raw.size_unknown {
            Val::Absent | Val::Null => false,
            Val::Bool(b) => b,
            ref other => {
                return Err(format!(
                    "field `{F_SIZE_UNKNOWN}`: {} is not true or false",
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
            size_unknown,
        })
    })();
    result.map_err(|reason| Invalid {
        reason,
        time_ms,
        client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_is_its_field_and_a_near_miss_is_none() {
        let names = [
            (F_TIMESTAMP, Field::Timestamp),
            (F_METHOD, Field::Method),
            (F_URI, Field::Uri),
            (F_CLIENT, Field::Client),
            (F_DURATION, Field::Duration),
            (F_STATUS, Field::Status),
            (F_WRITTEN, Field::Written),
            (F_ID, Field::Id),
            (F_SIZE_UNKNOWN, Field::SizeUnknown),
        ];
        assert_eq!(names.len(), Field::COUNT);
        for (name, field) in names {
            assert_eq!(Field::of(name.as_bytes()), Some(field), "{name}");
            assert!((field as usize) < Field::COUNT);
            // Each byte changed in turn, first, middle and last among them.
            for at in 0..name.len() {
                let mut near = name.as_bytes().to_vec();
                near[at] ^= 0x20;
                assert_eq!(Field::of(&near), None, "{}", String::from_utf8_lossy(&near));
            }
            assert_eq!(Field::of(&name.as_bytes()[1..]), None, "{name}");
        }
        assert_eq!(Field::of(b"host"), None);
        assert_eq!(Field::of(b""), None);
    }
}
