//! A record object read without serde when it holds only what traces hold: the fast path of
//! [`super::split::Splitter`], whose serde_json path stays the reference for everything else.
//!
//! A FAST'18 record is one flat object of short strings and plain numbers. This
//! scanner reads exactly that — keys without escapes, values that are strings without
//! escapes or control characters, integers, decimals whose value one IEEE operation gives
//! exactly, `true`, `false`, `null` — and declines (`None`) anything else: an escape, a
//! nested value, an exponent, a number too long to convert exactly, malformed JSON, or a
//! buffer that ends inside the object. A declined object is read by serde_json as before,
//! errors and all, so the scanner never has to be right about what it does not accept;
//! what it does accept it reads as serde_json does, to the bit (the property tests below
//! hold it to that, on generated objects and on damaged records). It saves 770–1,150
//! instructions a record, 10–12% of what `trace validate` spends on one (docs/benchmarks.md,
//! "The hot path", step 21). A [`Layout`] of the last object's keys lets it read each key
//! of the next by one comparison when the records repeat their keys, as a trace's do
//! (step 23).

use std::borrow::Cow;

use super::parse::{same, Field, Fields, Val};

/// The powers of ten a `f64` holds exactly (10^22 is the last).
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A value's place in the object before the object's bytes are known to be UTF-8.
#[derive(Clone, Copy)]
enum Raw {
    /// No value (a field the object does not name).
    Absent,
    Str(usize, usize),
    U(u64),
    I(i64),
    F(f64),
    Bool(bool),
    Null,
}

/// The most members and the longest key a [`Layout`] remembers (a record of FAST'18 has 8
/// to 12 members, its longest key 25 bytes).
const LAYOUT_MEMBERS: usize = 24;
const LAYOUT_KEY: usize = 40;

/// The keys of the last object read, as they were written, for the next one: a trace's
/// records name the same keys in the same order, so a key is read by one comparison of
/// its bytes (from its opening quote to its colon) with the key the last object had at that
/// place, and the field it names is known from then. Only bytes that were read in full
/// before are ever taken this way, so an object is read as it would be without it; a key
/// that differs is read in full and takes the place of the one remembered. Bounded: it
/// holds at most [`LAYOUT_MEMBERS`] keys of at most [`LAYOUT_KEY`] bytes.
#[derive(Debug, Default)]
pub(super) struct Layout {
    members: Vec<Member>,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    key: [u8; LAYOUT_KEY],
    len: u8,
    field: Option<Field>,
}

impl Layout {
    /// The field and the length of the key that member `n` of the last object had, if the
    /// bytes at `at` start with that key.
    fn predicted(&self, n: usize, bytes: &[u8], at: usize) -> Option<(Option<Field>, usize)> {
        let m = self.members.get(n).filter(|m| m.len > 0)?;
        let len = usize::from(m.len);
        same(bytes.get(at..at + len)?, &m.key[..len]).then_some((m.field, len))
    }

    /// Member `n`'s key as this object has it: `key` (from its quote to its colon) names
    /// `field`. A key too long to keep leaves its place empty (a length of 0: a key is at
    /// least `"":`).
    fn learn(&mut self, n: usize, key: &[u8], field: Option<Field>) {
        if n > self.members.len() || n >= LAYOUT_MEMBERS {
            return;
        }
        let mut m = Member {
            key: [0; LAYOUT_KEY],
            len: 0,
            field,
        };
        if let (Some(to), Ok(len)) = (m.key.get_mut(..key.len()), u8::try_from(key.len())) {
            to.copy_from_slice(key);
            m.len = len;
        }
        match self.members.get_mut(n) {
            Some(slot) => *slot = m,
            None => self.members.push(m),
        }
    }
}

/// Reads the object that starts at `bytes[0]` (a `{`): its fields and its length in bytes,
/// or `None` to leave it to serde_json. `layout` holds the keys of the last object read
/// and learns this one's.
pub(super) fn object<'a>(bytes: &'a [u8], layout: &mut Layout) -> Option<(Fields<'a>, usize)> {
    // The value of each known field, by its number (a repeated one: the last, as
    // serde_json keeps).
    let mut values = [Raw::Absent; Field::COUNT];
    let mut at = skip_ws(bytes, 1);
    let mut n = 0;
    let end = if *bytes.get(at)? == b'}' {
        at + 1
    } else {
        loop {
            if *bytes.get(at)? != b'"' {
                return None;
            }
            let (known, after_colon) = key(bytes, at, n, layout)?;
            n += 1;
            let (value, after) = value(bytes, skip_ws(bytes, after_colon))?;
            if let Some(field) = known {
                values[field as usize] = value;
            }
            at = skip_ws(bytes, after);
            match *bytes.get(at)? {
                b',' => at = skip_ws(bytes, at + 1),
                b'}' => break at + 1,
                _ => return None,
            }
        }
    };
    // Every string is a slice of text known to be UTF-8, cut at quotes (ASCII, so always
    // at a character's boundary).
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    Some((fields_of(text, values), end))
}

/// The key of member `n` that starts at `at` (its opening quote): the field it names and
/// where its colon ends. Read by one comparison when the last object had it there.
fn key(bytes: &[u8], at: usize, n: usize, layout: &mut Layout) -> Option<(Option<Field>, usize)> {
    if let Some((known, len)) = layout.predicted(n, bytes, at) {
        return Some((known, at + len));
    }
    let key_end = string_end(bytes, at + 1)?;
    let known = Field::of(&bytes[at + 1..key_end]);
    let colon = skip_ws(bytes, key_end + 1);
    if *bytes.get(colon)? != b':' {
        return None;
    }
    layout.learn(n, &bytes[at..=colon], known);
    Some((known, colon + 1))
}

/// The fields of `values` (by field number), their strings cut from `text`.
fn fields_of(text: &str, values: [Raw; Field::COUNT]) -> Fields<'_> {
    let val = |raw: Raw| match raw {
        Raw::Absent => Val::Absent,
        Raw::Str(from, to) => Val::Str(Cow::Borrowed(&text[from..to])),
        Raw::U(v) => Val::U(v),
        Raw::I(v) => Val::I(v),
        Raw::F(v) => Val::F(v),
        Raw::Bool(b) => Val::Bool(b),
        Raw::Null => Val::Null,
    };
    let of = |field: Field| val(values[field as usize]);
    Fields {
        timestamp: of(Field::Timestamp),
        method: of(Field::Method),
        uri: of(Field::Uri),
        client: of(Field::Client),
        duration: of(Field::Duration),
        status: of(Field::Status),
        written: of(Field::Written),
        id: of(Field::Id),
        size_unknown: of(Field::SizeUnknown),
    }
}

/// The first byte at or after `at` that is not JSON whitespace.
fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// The bytes of a word that are a quote, a backslash or a control character, each marked
/// by its high bit; exact up to the first one marked (a borrow may mark bytes after it).
fn stops(word: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    quote | backslash | control
}

/// Where the string whose contents start at `from` (after its opening quote) ends: at its
/// closing quote. `None` for an escape, a control character, or no end in `bytes`. Eight
/// bytes at a time.
fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let marked = stops(word);
        if marked != 0 {
            at += (marked.trailing_zeros() / 8) as usize;
            return (bytes[at] == b'"').then_some(at);
        }
        at += 8;
    }
    loop {
        match *bytes.get(at)? {
            b'"' => return Some(at),
            b'\\' | 0..=0x1f => return None,
            _ => at += 1,
        }
    }
}

/// The scalar value that starts at `at`, and where it ends.
fn value(bytes: &[u8], at: usize) -> Option<(Raw, usize)> {
    match *bytes.get(at)? {
        b'"' => {
            let to = string_end(bytes, at + 1)?;
            Some((Raw::Str(at + 1, to), to + 1))
        }
        b't' => literal(bytes, at, b"true", Raw::Bool(true)),
        b'f' => literal(bytes, at, b"false", Raw::Bool(false)),
        b'n' => literal(bytes, at, b"null", Raw::Null),
        b'-' | b'0'..=b'9' => number(bytes, at),
        _ => None,
    }
}

fn literal(bytes: &[u8], at: usize, word: &[u8], value: Raw) -> Option<(Raw, usize)> {
    (bytes.get(at..at + word.len())? == word).then_some((value, at + word.len()))
}

/// A JSON number without an exponent whose digits fit a `u64`: an integer as serde_json
/// gives it (a `u64`; an `i64` when negative, `-0` a float), a decimal when its digits (at
/// most 2^53) and its places (at most 22) make it one exact division, as in serde_json's own
/// conversion. Any other number is declined.
fn number(bytes: &[u8], at: usize) -> Option<(Raw, usize)> {
    let negative = bytes[at] == b'-';
    let mut i = at + usize::from(negative);
    let first = *bytes.get(i)?;
    if !first.is_ascii_digit() {
        return None;
    }
    let mut significand = 0u64;
    // Digits into the significand; false past `u64::MAX`.
    let mut take = |i: &mut usize| {
        while let Some(&d) = bytes.get(*i).filter(|d| d.is_ascii_digit()) {
            let Some(next) = significand
                .checked_mul(10)
                .and_then(|s| s.checked_add(u64::from(d - b'0')))
            else {
                return false;
            };
            significand = next;
            *i += 1;
        }
        true
    };
    if first == b'0' {
        i += 1;
    } else if !take(&mut i) {
        return None;
    }
    let integer_end = i;
    let mut places = 0;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        let from = i;
        if !take(&mut i) || i == from {
            return None;
        }
        places = i - from;
    }
    // What follows must end the number: an exponent, or a digit after a leading zero, is
    // left to serde_json.
    if matches!(bytes.get(i)?, b'e' | b'E' | b'0'..=b'9' | b'.') {
        return None;
    }
    if i == integer_end {
        // serde_json's integers: a `u64`; negative, an `i64`, but a float for `-0` and
        // below `i64::MIN`.
        let value = match (negative, significand) {
            (false, n) => Raw::U(n),
            (true, 0) => Raw::F(-0.0),
            (true, n) if n <= 1 << 63 => Raw::I(0i64.wrapping_sub_unsigned(n)),
            (true, _) => return None,
        };
        return Some((value, i));
    }
    if significand > 1 << 53 || places >= EXACT_POW10.len() {
        return None;
    }
    let magnitude = significand as f64 / EXACT_POW10[places];
    Some((Raw::F(if negative { -magnitude } else { magnitude }), i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// serde_json's reading of `text`'s first object and its length, as the splitter's
    /// reference path does.
    fn by_serde(text: &[u8]) -> Option<(String, usize)> {
        let mut objects = serde_json::Deserializer::from_slice(text).into_iter::<Fields<'_>>();
        let raw = objects.next()?.ok()?;
        Some((format!("{raw:?}"), objects.byte_offset()))
    }

    fn by_scan(text: &[u8]) -> Option<(String, usize)> {
        by_scan_after(text, &mut Layout::default())
    }

    /// The scanner's reading of `text` with the keys `layout` remembers.
    fn by_scan_after(text: &[u8], layout: &mut Layout) -> Option<(String, usize)> {
        object(text, layout).map(|(raw, len)| (format!("{raw:?}"), len))
    }

    #[test]
    fn a_trace_record_is_read_by_the_scanner_as_serde_json_reads_it() {
        let record = br#"{"host": "h1", "http.request.duration": 0.001, "http.request.method": "GET", "http.request.remoteaddr": "c0001", "http.request.uri": "v2/a/b/manifests/t1", "http.request.useragent": "docker/17.03", "http.response.status": 200, "http.response.written": 1024, "id": "0000000001", "timestamp": "2017-06-20T00:00:00.001Z"},{"next": 1}"#;
        let scanned = by_scan(record).expect("a plain record is scanned");
        assert_eq!(Some(scanned.clone()), by_serde(record));
        assert!(scanned.0.contains("0.001"), "{}", scanned.0);
        assert_eq!(&record[scanned.1 - 1..scanned.1 + 1], b"},");
    }

    #[test]
    fn numbers_are_what_serde_json_makes_of_them() {
        for text in [
            &br#"{"id": -0}"#[..],
            br#"{"id": -9223372036854775808}"#,
            br#"{"id": 9999999999999999999}"#,
            br#"{"id": -0.0}"#,
            br#"{"id": 0.1}"#,
            br#"{"http.request.duration": 9007199254740.992}"#,
            br#"{"http.request.duration": 0.000000000000000001}"#,
        ] {
            let scanned = by_scan(text);
            assert!(scanned.is_some(), "{}", String::from_utf8_lossy(text));
            assert_eq!(scanned, by_serde(text), "{}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn what_the_scanner_does_not_read_it_declines() {
        for text in [
            &br#"{"id": "a\"b"}"#[..],                              // an escape
            br#"{"id": {"a": 1}}"#,                                 // a nested object
            br#"{"other": [1, 2]}"#,                                // a nested array
            br#"{"http.request.duration": 1e-3}"#,                  // an exponent
            br#"{"http.response.written": 01}"#,                    // a leading zero
            br#"{"http.response.written": 123456789012345678901}"#, // too long
            br#"{"http.request.duration": 0.12345678901234567}"#,   // past 2^53
            br#"{"id": "a"#,                                        // the buffer ends inside
            br#"{"id": "a",}"#,                                     // a trailing comma
            br#"{"id": tru}"#,                                      // a broken literal
            br#"{"id": truex}"#,                                    // a literal run on
            b"{\"id\": \"\xff\"}",                                  // not UTF-8
            b"{\"id\": \"a\tb\"}",                                  // a control character
            br#"{"id" "a"}"#,                                       // no colon
            br#"{"id": -9223372036854775809}"#,                     // below i64::MIN
        ] {
            assert_eq!(by_scan(text), None, "{}", String::from_utf8_lossy(text));
        }
    }

    /// A record read after one with the same keys is read as it would be alone; so is one
    /// whose keys differ from the last record's at some places (one longer, one shorter,
    /// one cut, one spaced otherwise, one that is not UTF-8 and one of the same length).
    #[test]
    fn keys_remembered_from_the_last_record_read_the_next_as_if_alone() {
        let first = br#"{"http.request.method": "GET", "http.request.uri": "v2/a/manifests/t", "id": "1", "timestamp": "2017-06-20T00:00:00.001Z"}"#;
        let mut layout = Layout::default();
        assert!(by_scan_after(first, &mut layout).is_some());
        let next: [&[u8]; 7] = [
            br#"{"http.request.method": "PUT", "http.request.uri": "v2/b/blobs/x", "id": "2", "timestamp": "2017-06-20T00:00:01Z"}"#,
            br#"{"http.request.methods": "PUT", "http.request.uri": "v2/b/blobs/x", "ix": "2"}"#,
            br#"{"http.request.metho": "PUT", "http.request.ur": 1, "i": "2", "timestamp" : 3}"#,
            br#"{"http.request.method":"PUT","http.request.uri" :"v2/b/blobs/x","id":  "2"}"#,
            b"{\"http.request.method\": \"PUT\", \"\xff\": 1}",
            br#"{"timestamp": "2017-06-20T00:00:01Z", "id": "2", "http.request.uri": "v2/c/manifests/t", "http.request.method": "HEAD"}"#,
            br#"{"http.request.method": "GET", "http.request.uri": "v2/a/manifests/t", "id": "1", "timestamp": "2017-06-20T00:00:00.001Z"}"#,
        ];
        for text in next {
            let alone = by_scan(text);
            assert_eq!(
                by_scan_after(text, &mut layout),
                alone,
                "{}",
                String::from_utf8_lossy(text)
            );
            assert_eq!(alone.is_none(), text.contains(&0xff));
        }
        assert!(layout.members.len() <= LAYOUT_MEMBERS);
        // The last record's keys are the ones remembered, each with its field.
        let key = br#""http.request.uri": "#;
        let mut text = vec![0u8; 1 + key.len()];
        text[1..].copy_from_slice(key);
        assert_eq!(
            layout.predicted(1, &text, 1),
            Some((Some(Field::Uri), key.len() - 1))
        );
        assert_eq!(layout.predicted(0, &text, 1), None);
        by_scan_after(next[5], &mut layout);
        assert_eq!(
            layout.predicted(2, &text, 1),
            Some((Some(Field::Uri), key.len() - 1))
        );
        assert_eq!(layout.predicted(1, &text, 1), None);
    }

    /// A JSON scalar as a trace field could hold it, in the forms the scanner reads and
    /// those it must decline.
    fn scalar() -> impl Strategy<Value = String> {
        prop_oneof![
            "[ -~]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            "[a-zé\\\\\"\u{1}]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            (0u64..1 << 54, 0u32..24).prop_map(|(m, p)| {
                let s = format!("{m:0>width$}", width = p as usize + 1);
                let (int, frac) = s.split_at(s.len() - p as usize);
                if p == 0 {
                    int.to_owned()
                } else {
                    format!("{int}.{frac}")
                }
            }),
            any::<f64>().prop_map(|x| format!("{x:?}")),
            "-?[0-9]{1,3}(\\.[0-9]{0,3})?([eE][+-]?[0-9]{1,2})?",
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just("[1]".to_owned()),
            Just("{}".to_owned()),
        ]
    }

    /// A scalar in a form the scanner reads.
    fn plain() -> impl Strategy<Value = String> {
        prop_oneof![
            "[ !#-\\[\\]-~é]{0,16}".prop_map(|s| format!("\"{s}\"")),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            (0u64..1 << 53, 1usize..19).prop_map(|(m, p)| {
                let s = format!("{m:0>width$}", width = p + 1);
                let (int, frac) = s.split_at(s.len() - p);
                format!("{}.{frac}", int.trim_start_matches('0').max("0"))
            }),
            Just("true".to_owned()),
            Just("null".to_owned()),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("timestamp"),
            Just("http.request.method"),
            Just("http.request.uri"),
            Just("http.request.remoteaddr"),
            Just("http.request.duration"),
            Just("http.response.status"),
            Just("http.response.written"),
            Just("id"),
            Just("creb.size_unknown"),
            Just("host"),
            Just("i\\u0064"),
        ]
        .prop_map(str::to_owned)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// A record of plain fields is read by the scanner, as serde_json reads it.
        #[test]
        fn a_plain_record_is_scanned(
            fields in proptest::collection::vec((key(), plain()), 0..12),
        ) {
            let body: Vec<String> = fields
                .iter()
                .filter(|(k, _)| !k.contains('\\'))
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            let text = format!("{{{}}}\n", body.join(", "));
            let scanned = by_scan(text.as_bytes());
            prop_assert!(scanned.is_some(), "{}", text);
            prop_assert_eq!(scanned, by_serde(text.as_bytes()), "{}", text);
        }

        /// A record with bytes overwritten (JSON's own among them): whatever the scanner
        /// still reads, serde_json reads the same.
        #[test]
        fn a_damaged_record_is_read_as_serde_json_reads_it_or_declined(
            damage in proptest::collection::vec(
                (any::<proptest::sample::Index>(), prop_oneof![
                    proptest::sample::select(b"{}[]\",:.-+eE019 \t\ntfnul\\\x01\xc3\xa9\xff".to_vec()),
                    any::<u8>(),
                ]),
                1..4,
            ),
        ) {
            let mut text = br#"{"http.request.method": "GET", "http.request.uri": "v2/a/b/blobs/sha256:00", "http.response.status": 200, "http.response.written": 1024, "http.request.duration": 0.0125, "id": "0000000001", "x": true, "y": null, "timestamp": "2017-06-20T00:00:00.001Z"}"#.to_vec();
            // The splitter calls the scanner at a `{`: the bytes after it are damaged.
            for (at, byte) in damage {
                let i = 1 + at.index(text.len() - 1);
                text[i] = byte;
            }
            if let Some(scanned) = by_scan(&text) {
                prop_assert_eq!(Some(scanned), by_serde(&text), "{}", String::from_utf8_lossy(&text));
            }
        }

        /// An object read after another (the same keys with other values, a member left
        /// out, bytes overwritten) is read as it would be alone: the keys the scanner
        /// remembers never change what it reads.
        #[test]
        fn an_object_read_after_another_is_read_as_if_alone(
            fields in proptest::collection::vec((key(), scalar(), "[ \t\n]{0,1}"), 0..12),
            values in proptest::collection::vec(scalar(), 12),
            left_out in proptest::option::of(any::<proptest::sample::Index>()),
            damage in proptest::collection::vec(
                (any::<proptest::sample::Index>(), proptest::sample::select(b"\":, {}a\\\xff".to_vec())),
                0..2,
            ),
        ) {
            let member = |(k, v, ws): (&String, &String, &String)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}");
            let first: Vec<String> = fields.iter().map(|(k, v, ws)| member((k, v, ws))).collect();
            let first = format!("{{{}}}", first.join(","));
            let skip = left_out.filter(|_| !fields.is_empty()).map(|i| i.index(fields.len()));
            let next: Vec<String> = fields
                .iter()
                .zip(&values)
                .enumerate()
                .filter(|&(i, _)| Some(i) != skip)
                .map(|(_, ((k, _, ws), v))| member((k, v, ws)))
                .collect();
            let mut next = format!("{{{}}}", next.join(",")).into_bytes();
            for (at, byte) in damage {
                let i = 1 + at.index(next.len() - 1);
                next[i] = byte;
            }
            let mut layout = Layout::default();
            let _ = by_scan_after(first.as_bytes(), &mut layout);
            prop_assert_eq!(
                by_scan_after(&next, &mut layout),
                by_scan(&next),
                "{} then {}", first, String::from_utf8_lossy(&next)
            );
        }

        /// Whatever the scanner reads, serde_json reads the same (to the bit: floats are
        /// compared through their debug form) and to the same length; whatever it declines
        /// is left to serde_json.
        #[test]
        fn the_scanner_reads_what_serde_json_reads(
            fields in proptest::collection::vec((key(), scalar(), "[ \t\n]{0,2}"), 0..12),
            cut in any::<proptest::sample::Index>(),
            tail in "[,\n ]{0,2}",
        ) {
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v, ws)| format!("{ws}\"{k}\"{ws}:{ws}{v}{ws}"))
                .collect();
            let text = format!("{{{}}}{tail}", body.join(","));
            if let Some(scanned) = by_scan(text.as_bytes()) {
                prop_assert_eq!(Some(scanned), by_serde(text.as_bytes()), "{}", text);
            }
            // A buffer cut short is never read as a whole object.
            let short = &text.as_bytes()[..cut.index(text.len() - tail.len())];
            prop_assert_eq!(by_scan(short), None, "{:?}", String::from_utf8_lossy(short));
        }
    }
}
