//! A response's header lines, looked up by name whatever their case: the head's own bytes
//! with where each line's name and value are (the plain pool's parse: nothing copied,
//! hashed or allocated per line), or the `HeaderMap` hyper and reqwest hand over.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

/// Where a line's name and value are in the head: start and end of each.
pub(crate) type Span = [u32; 4];

/// A response's header lines.
#[derive(Debug, Clone)]
pub enum Headers {
    /// A parsed HTTP/1.1 head's bytes and its lines' places, in the order sent.
    Lines { head: Bytes, lines: Vec<Span> },
    /// As another HTTP implementation parsed them.
    Map(HeaderMap),
}

impl Default for Headers {
    fn default() -> Headers {
        Headers::Map(HeaderMap::new())
    }
}

impl From<HeaderMap> for Headers {
    fn from(map: HeaderMap) -> Headers {
        Headers::Map(map)
    }
}

impl Headers {
    /// The lines of `head` at `lines`, each a name that is an HTTP token and a value of
    /// the bytes HTTP allows in one (as `httparse` checks them), within `head`.
    pub(crate) fn lines(head: Bytes, lines: Vec<Span>) -> Headers {
        debug_assert!(lines
            .iter()
            .all(|s| s[1] as usize <= head.len() && s[3] as usize <= head.len()));
        Headers::Lines { head, lines }
    }

    /// The value of the first line named `name` (case ignored), as sent.
    pub fn get(&self, name: impl AsRef<str>) -> Option<&[u8]> {
        let name = name.as_ref();
        match self {
            Headers::Lines { head, lines } => lines
                .iter()
                .find(|s| is_named(head, s, name))
                .map(|s| value_of(head, s)),
            Headers::Map(map) => map.get(name).map(HeaderValue::as_bytes),
        }
    }

    /// The value of the first line named `name` as text, if it is only visible ASCII,
    /// spaces and tabs (as `HeaderValue::to_str` takes it).
    pub fn get_str(&self, name: impl AsRef<str>) -> Option<&str> {
        self.get(name).and_then(text)
    }

    /// The values of every line named `name`, in the order sent.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (lines, map) = match self {
            Headers::Lines { head, lines } => (
                Some(
                    lines
                        .iter()
                        .filter(move |s| is_named(head, s, name))
                        .map(move |s| value_of(head, s)),
                ),
                None,
            ),
            Headers::Map(map) => (
                None,
                Some(map.get_all(name).iter().map(HeaderValue::as_bytes)),
            ),
        };
        lines.into_iter().flatten().chain(map.into_iter().flatten())
    }

    /// The value of the first line named `name`, kept apart from the response (sharing
    /// the head's bytes where it can).
    pub fn value(&self, name: impl AsRef<str>) -> Option<HeaderValue> {
        let name = name.as_ref();
        match self {
            Headers::Lines { head, lines } => {
                let s = lines.iter().find(|s| is_named(head, s, name))?;
                HeaderValue::from_maybe_shared(head.slice(s[2] as usize..s[3] as usize)).ok()
            }
            Headers::Map(map) => map.get(name).cloned(),
        }
    }

    /// Lines held.
    pub fn len(&self) -> usize {
        match self {
            Headers::Lines { lines, .. } => lines.len(),
            Headers::Map(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every line's name and value as bytes, in the order sent (a
    /// `HeaderMap`'s: grouped by name); a plain loop over the lines, for the answer's own
    /// framing.
    pub(crate) fn each_raw<'a>(&'a self, mut f: impl FnMut(&'a [u8], &'a [u8])) {
        match self {
            Headers::Lines { head, lines } => {
                for s in lines {
                    f(&head[s[0] as usize..s[1] as usize], value_of(head, s));
                }
            }
            Headers::Map(map) => {
                for (name, value) in map {
                    f(name.as_str().as_bytes(), value.as_bytes());
                }
            }
        }
    }

    /// Every line's name and value, in the order sent (a `HeaderMap`'s: grouped by name).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let (lines, map) = match self {
            Headers::Lines { head, lines } => (
                Some(lines.iter().map(|s| (name_of(head, s), value_of(head, s)))),
                None,
            ),
            Headers::Map(map) => (
                None,
                Some(map.iter().map(|(n, v)| (n.as_str(), v.as_bytes()))),
            ),
        };
        lines.into_iter().flatten().chain(map.into_iter().flatten())
    }
}

fn is_named(head: &[u8], s: &Span, name: &str) -> bool {
    named(&head[s[0] as usize..s[1] as usize], name)
}

/// Whether header name `raw` is `name`, whatever the case of either.
pub(crate) fn named(raw: &[u8], name: &str) -> bool {
    raw.len() == name.len() && raw.eq_ignore_ascii_case(name.as_bytes())
}

fn value_of<'a>(head: &'a [u8], s: &Span) -> &'a [u8] {
    &head[s[2] as usize..s[3] as usize]
}

fn name_of<'a>(head: &'a [u8], s: &Span) -> &'a str {
    // A token: ASCII, so always text.
    std::str::from_utf8(&head[s[0] as usize..s[1] as usize]).unwrap_or("")
}

/// `value` as text when it is visible ASCII, spaces and tabs only.
pub fn text(value: &[u8]) -> Option<&str> {
    // Every byte looked at (no early exit): the loop is done several bytes at a time.
    let visible = value
        .iter()
        .fold(true, |ok, &b| ok & ((32..127).contains(&b) | (b == b'\t')));
    if visible {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines() -> Headers {
        let head =
            Bytes::from_static(b"Content-Type: a/b\r\nLink: <x>\r\nlink: <y>\r\nX-Bin: \xff\r\n");
        let mut spans = Vec::new();
        let mut at = 0;
        for line in head.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let colon = line.iter().position(|&b| b == b':').unwrap();
            let end = at + line.len() - 1;
            spans.push([at, at + colon, at + colon + 2, end].map(|v| u32::try_from(v).unwrap()));
            at += line.len() + 1;
        }
        Headers::lines(head, spans)
    }

    #[test]
    fn lines_and_a_map_answer_alike() {
        let mut map = HeaderMap::new();
        map.insert("content-type", HeaderValue::from_static("a/b"));
        map.append("link", HeaderValue::from_static("<x>"));
        map.append("link", HeaderValue::from_static("<y>"));
        map.insert("x-bin", HeaderValue::from_bytes(b"\xff").unwrap());
        for h in [lines(), Headers::from(map)] {
            assert_eq!(h.get("content-type"), Some(&b"a/b"[..]));
            assert_eq!(h.get_str(http::header::CONTENT_TYPE), Some("a/b"));
            assert_eq!(h.get_str("CONTENT-TYPE"), Some("a/b"), "case is ignored");
            assert_eq!(h.get_all("link").collect::<Vec<_>>(), [&b"<x>"[..], b"<y>"]);
            assert_eq!(h.get_str("link"), Some("<x>"), "the first of several");
            assert_eq!(h.get("x-bin"), Some(&b"\xff"[..]));
            assert_eq!(h.get_str("x-bin"), None, "not text");
            assert!(
                h.get("content").is_none(),
                "a name's prefix is another name"
            );
            assert_eq!(h.len(), 4);
            assert_eq!(h.iter().count(), 4);
        }
    }
}
