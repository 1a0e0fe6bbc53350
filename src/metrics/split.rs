//! Latency by a response header (`--split-by-header NAME`): each operation is also counted
//! under the value its last answer gave that header (`X-Cache-Status: HIT`, `MISS`, …).
//! The values are interned as they come, at most [`MAX_VALUES`] distinct per run; later
//! ones are counted as `other`, so the tables and the live series stay bounded whatever
//! the registry sends.

use std::sync::RwLock;

use http::header::HeaderName;

/// Distinct header values a run keeps apart; the rest are [`OTHER`].
pub const MAX_VALUES: usize = 16;

/// The label of an answer without the header.
pub const ABSENT: u8 = 0;
/// The label of every value past the first [`MAX_VALUES`].
pub const OTHER: u8 = 1;

/// What [`ABSENT`] and [`OTHER`] are called in the results.
pub const ABSENT_NAME: &str = "(none)";
pub const OTHER_NAME: &str = "(other)";

/// Longest value kept, in bytes; a longer one is cut (on a character boundary).
const MAX_VALUE_LEN: usize = 64;

/// The header a run splits by and the values it has seen, by label (`2 + position`).
#[derive(Debug)]
pub struct HeaderSplit {
    name: HeaderName,
    values: RwLock<Vec<String>>,
}

impl HeaderSplit {
    pub fn new(name: HeaderName) -> HeaderSplit {
        HeaderSplit {
            name,
            values: RwLock::new(Vec::new()),
        }
    }

    /// The header's name, lower case.
    pub fn header(&self) -> &str {
        self.name.as_str()
    }

    /// The label of an answer whose [`header`](Self::header) has `value` (`None`: absent):
    /// [`ABSENT`], a value's own, or [`OTHER`] once [`MAX_VALUES`] values are taken. A value
    /// is matched as sent, cut to 64 bytes.
    pub fn label(&self, value: Option<&[u8]>) -> u8 {
        let Some(value) = value else {
            return ABSENT;
        };
        let text = String::from_utf8_lossy(value);
        let value = cut(text.trim());
        let known = |values: &[String]| values.iter().position(|v| v == value);
        if let Some(i) = known(&self.values.read().unwrap_or_else(|e| e.into_inner())) {
            return label_at(i);
        }
        let mut values = self.values.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = known(&values) {
            return label_at(i);
        }
        if values.len() >= MAX_VALUES {
            return OTHER;
        }
        values.push(value.to_owned());
        label_at(values.len() - 1)
    }

    /// Every label's name, by label: [`ABSENT_NAME`], [`OTHER_NAME`], then the values in
    /// the order they were first seen.
    pub fn names(&self) -> Vec<String> {
        let values = self.values.read().unwrap_or_else(|e| e.into_inner());
        [ABSENT_NAME.to_owned(), OTHER_NAME.to_owned()]
            .into_iter()
            .chain(values.iter().cloned())
            .collect()
    }
}

/// Whether a cache's answer with this value of its status header came from the cache: a
/// value that says `HIT` (`HIT`, `TCP_HIT`, `hit`), or one of nginx's
/// `$upstream_cache_status` values for content served from the cache (`STALE`, `UPDATING`,
/// `REVALIDATED`). Everything else (`MISS`, `EXPIRED`, `BYPASS`, absent) went to the origin.
pub fn is_hit(value: &str) -> bool {
    let v = value.to_ascii_uppercase();
    v.contains("HIT") || matches!(v.as_str(), "STALE" | "UPDATING" | "REVALIDATED")
}

/// Workload operations answered with one value of the header in an interval, and their
/// bytes (sent and received).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ValueCounters {
    pub completed: u64,
    pub bytes: u64,
}

impl ValueCounters {
    pub fn add(&mut self, other: &ValueCounters) {
        self.completed += other.completed;
        self.bytes += other.bytes;
    }
}

fn label_at(position: usize) -> u8 {
    // MAX_VALUES + 2 labels fit a byte.
    (position + 2) as u8
}

fn cut(value: &str) -> &str {
    if value.len() <= MAX_VALUE_LEN {
        return value;
    }
    let mut end = MAX_VALUE_LEN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(value: Option<&str>) -> Option<&[u8]> {
        value.map(str::as_bytes)
    }

    #[test]
    fn hits_are_what_came_from_the_cache() {
        for v in ["HIT", "hit", "TCP_HIT", "STALE", "UPDATING", "REVALIDATED"] {
            assert!(is_hit(v), "{v}");
        }
        for v in [
            "MISS",
            "EXPIRED",
            "BYPASS",
            "DYNAMIC",
            ABSENT_NAME,
            OTHER_NAME,
        ] {
            assert!(!is_hit(v), "{v}");
        }
    }

    #[test]
    fn values_get_labels_as_they_come_and_the_rest_are_other() {
        let split = HeaderSplit::new(HeaderName::from_static("x-cache-status"));
        assert_eq!(split.label(answer(None)), ABSENT);
        let miss = split.label(answer(Some("MISS")));
        let hit = split.label(answer(Some(" HIT ")));
        assert_ne!(miss, hit);
        assert_eq!(split.label(answer(Some("MISS"))), miss);
        assert_eq!(split.label(answer(Some("HIT"))), hit);
        for i in 0..100 {
            let label = split.label(answer(Some(&format!("node-{i}"))));
            assert_eq!(label == OTHER, i >= MAX_VALUES - 2, "value {i}");
        }
        let names = split.names();
        assert_eq!(names.len(), MAX_VALUES + 2);
        assert_eq!(
            (
                &*names[0],
                &*names[1],
                &*names[usize::from(miss)],
                &*names[usize::from(hit)]
            ),
            (ABSENT_NAME, OTHER_NAME, "MISS", "HIT")
        );
        // A long value is kept cut, and still matches itself.
        let split = HeaderSplit::new(HeaderName::from_static("x-cache-status"));
        let long = "é".repeat(100);
        let label = split.label(answer(Some(&long)));
        assert_eq!(split.label(answer(Some(&long))), label);
        assert!(split.names()[usize::from(label)].len() <= MAX_VALUE_LEN);
    }
}
