//! A request's own header lines: a short list held inline, so that building a request,
//! copying it for each attempt and dropping both allocate nothing for their headers (a
//! registry request names one or two: `Accept` or `Content-Type`, and credentials).

use std::fmt;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// Lines held without an allocation; a request with more keeps them on the heap.
const INLINE: usize = 2;

/// A request's header lines, in the order they were added. Names compare as HTTP's do
/// (without regard to case); values are kept as given.
#[derive(Clone, Default)]
pub struct ReqHeaders {
    lines: SmallVec<[(HeaderName, HeaderValue); INLINE]>,
}

impl ReqHeaders {
    pub fn new() -> ReqHeaders {
        ReqHeaders::default()
    }

    /// Sets `name` to `value`: the first line of that name takes the value and any later
    /// ones go (as [`HeaderMap::insert`]); without one, a line is added. The value it had.
    pub fn insert(&mut self, name: HeaderName, value: HeaderValue) -> Option<HeaderValue> {
        let Some(at) = self.position(name.as_str()) else {
            self.lines.push((name, value));
            return None;
        };
        let old = std::mem::replace(&mut self.lines[at].1, value);
        let mut i = at + 1;
        while i < self.lines.len() {
            if self.lines[i].0 == name {
                self.lines.remove(i);
            } else {
                i += 1;
            }
        }
        Some(old)
    }

    /// Adds a line, keeping those of the same name.
    pub fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.lines.push((name, value));
    }

    /// The first value of `name`.
    pub fn get(&self, name: impl AsRef<str>) -> Option<&HeaderValue> {
        self.position(name.as_ref()).map(|at| &self.lines[at].1)
    }

    pub fn contains_key(&self, name: impl AsRef<str>) -> bool {
        self.position(name.as_ref()).is_some()
    }

    /// Removes every line of `name`; the first one's value.
    pub fn remove(&mut self, name: impl AsRef<str>) -> Option<HeaderValue> {
        let name = name.as_ref();
        let first = self.position(name)?;
        let value = self.lines.remove(first).1;
        self.lines
            .retain(|(n, _)| !n.as_str().eq_ignore_ascii_case(name));
        Some(value)
    }

    /// The lines, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.lines.iter().map(|(n, v)| (n, v))
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The lines as a [`HeaderMap`] (for the HTTP libraries).
    pub fn into_map(self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.lines.len() + 2);
        for (name, value) in self.lines {
            map.append(name, value);
        }
        map
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.lines
            .iter()
            .position(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
    }
}

impl<'a> IntoIterator for &'a ReqHeaders {
    type Item = (&'a HeaderName, &'a HeaderValue);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (HeaderName, HeaderValue)>,
        fn(&'a (HeaderName, HeaderValue)) -> (&'a HeaderName, &'a HeaderValue),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.lines.iter().map(|(n, v)| (n, v))
    }
}

/// The names only: a value may be a credential.
impl fmt::Debug for ReqHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.lines.iter().map(|(n, _)| n.as_str()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};

    use super::*;

    fn v(s: &'static str) -> HeaderValue {
        HeaderValue::from_static(s)
    }

    #[test]
    fn insert_replaces_every_line_of_the_name_and_append_keeps_them() {
        let mut h = ReqHeaders::new();
        assert_eq!(h.insert(ACCEPT, v("a")), None);
        h.append(CONTENT_TYPE, v("t"));
        h.append(ACCEPT, v("b"));
        assert_eq!(h.len(), 3);
        assert_eq!(h.get("Accept"), Some(&v("a")));
        assert_eq!(h.insert(ACCEPT, v("c")), Some(v("a")));
        let lines: Vec<(&str, &[u8])> = h.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(lines, [("accept", &b"c"[..]), ("content-type", &b"t"[..])]);
    }

    #[test]
    fn names_match_without_regard_to_case_and_remove_takes_them_all() {
        let mut h = ReqHeaders::new();
        h.append(HeaderName::from_static("x-a"), v("1"));
        h.append(AUTHORIZATION, v("secret"));
        h.append(HeaderName::from_static("x-a"), v("2"));
        assert!(h.contains_key("X-A"));
        assert!(h.contains_key(&AUTHORIZATION));
        assert!(!h.contains_key("x-b"));
        assert_eq!(h.remove("x-a"), Some(v("1")));
        assert_eq!(h.len(), 1);
        assert_eq!(h.remove("x-a"), None);
    }

    #[test]
    fn more_lines_than_held_inline_are_all_kept_in_order() {
        let mut h = ReqHeaders::new();
        for (i, name) in ["x-1", "x-2", "x-3", "x-4", "x-5"].into_iter().enumerate() {
            h.append(
                HeaderName::from_static(name),
                HeaderValue::from(u32::try_from(i).unwrap()),
            );
        }
        let map = h.clone().into_map();
        assert_eq!(map.len(), 5);
        assert_eq!(map.get("x-4"), Some(&HeaderValue::from(3u32)));
        let names: Vec<&str> = (&h).into_iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-1", "x-2", "x-3", "x-4", "x-5"]);
    }

    #[test]
    fn debug_shows_names_not_values() {
        let mut h = ReqHeaders::new();
        h.insert(AUTHORIZATION, v("Bearer s3cr3t"));
        let shown = format!("{h:?}");
        assert!(shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }
}
