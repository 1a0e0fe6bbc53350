//! The one rule for every file creb-rs writes at a path the user named: never one of the
//! command's inputs (the same file under any name), never a directory, and an existing
//! file only when creb-rs recognises it as its own **regenerable** output of the same kind —
//! a report of a result (made again from the result directory) or a manual page (made
//! again by `creb-rs man`) — or with `--force`. A trace is never regenerable (a 30 GB
//! download, a day of imported logs; even a synthesized one carries nothing that says so):
//! any existing trace, creb-rs's or not, is replaced only with `--force` (an empty file,
//! holding nothing, may be). A digest cache replaces only a digest cache, `--force` or not:
//! it is rewritten without a word, so nothing else may ever stand where one is expected.
//!
//! A file's kind is told from its first bytes, read with a bound ([`SNIFF`]), never from its
//! name. `tests/it/output_faults.rs` holds the matrix: every writing command against an
//! existing trace, another command's result, a user's file, a directory, `/dev/null` and a
//! read-only place.

use std::io::Read;
use std::path::{Path, PathBuf};

/// How much of an existing file is read to tell its kind.
pub const SNIFF: usize = 4096;

/// The first bytes of every digest cache creb-rs writes, whatever its content scheme.
pub const DIGEST_CACHE_MAGIC: &[u8] = b"creb-rs digest cache ";

/// What is about to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--digest-cache`: replaces only another digest cache.
    DigestCache,
    /// A trace (JSON array or lines, plain or compressed).
    Trace,
    /// A report of a result (text, JSON, CSV or HTML).
    Report,
    /// A manual page (`creb-rs man --dir`).
    ManPage,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::DigestCache => "a digest cache of creb-rs",
            Kind::Trace => "a trace",
            Kind::Report => "a report of creb-rs",
            Kind::ManPage => "a manual page of creb-rs",
        }
    }

    /// Whether a file of this kind is creb-rs's regenerable output, replaced without a
    /// word when it is recognised as one.
    fn regenerable(self) -> bool {
        matches!(self, Kind::Report | Kind::ManPage)
    }

    /// Whether `head`, the first bytes of an existing file, are of this kind: for a trace,
    /// what a trace may begin with; for creb-rs's own outputs, the marks only creb-rs
    /// writes (a report's generator tag, its CSV header, its first line; a page's title). A
    /// JSON report is not told from a result's own summary.json, which cannot be made
    /// again: JSON is never recognised as a report.
    pub fn matches(self, head: &[u8]) -> bool {
        let text = head.trim_ascii_start();
        let first_line = text.split(|b| *b == b'\n').next().unwrap_or_default();
        match self {
            Kind::DigestCache => head.starts_with(DIGEST_CACHE_MAGIC),
            Kind::Trace => {
                head.is_empty()
                    || head.starts_with(&[0x1f, 0x8b])
                    || head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
                    || text.starts_with(b"[")
                    || text.starts_with(b"{")
            }
            Kind::Report => {
                head.is_empty()
                    || (starts_with_ignore_case(text, b"<!doctype html")
                        && contains(head, b"<meta name=\"generator\" content=\"creb-rs"))
                    || text.starts_with(b"operation,count,ok,errors,bytes,requests_per_s,")
                    || (first_line.starts_with(b"creb-rs ") && contains(first_line, "→".as_bytes()))
            }
            Kind::ManPage => head.is_empty() || contains(head, b"\n.TH creb-rs"),
        }
    }
}

fn starts_with_ignore_case(text: &[u8], prefix: &[u8]) -> bool {
    text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// Whether `needle` stands somewhere in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether `a` and `b` name the same file (the same device and inode: links and other
/// spellings of a path included). A path that does not exist is no file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Whether `a` and `b` are the same place: the same file when both exist, else the same
/// path once made absolute and rid of `.` and `..` (a directory not created yet).
pub fn same_path(a: &Path, b: &Path) -> bool {
    if same_file(a, b) {
        return true;
    }
    fn lexical(p: &Path) -> Option<PathBuf> {
        let absolute = std::path::absolute(p).ok()?;
        let mut out = PathBuf::new();
        for c in absolute.components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        Some(out)
    }
    matches!((lexical(a), lexical(b)), (Some(x), Some(y)) if x == y)
}

/// The first [`SNIFF`] bytes of `path`; `None` when it does not exist.
pub fn head(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::with_capacity(SNIFF);
    file.take(SNIFF as u64).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// Why `path` may not be written as `kind`, or `Ok` when it may: `flag` names the option
/// that gave it (said in the error), `inputs` are the files the command reads (never
/// written, `--force` or not), `force` lets a file of another kind be replaced (not for a
/// digest cache).
pub fn check(
    path: &Path,
    flag: &str,
    kind: Kind,
    inputs: &[PathBuf],
    force: bool,
) -> anyhow::Result<()> {
    if let Some(input) = inputs.iter().find(|i| same_file(path, i)) {
        anyhow::bail!(
            "{flag} {}: that is one of the command's inputs ({}); it is left as it is. \
             Choose another path",
            path.display(),
            input.display()
        );
    }
    if path.is_dir() {
        anyhow::bail!(
            "{flag} {}: that is a directory; name a file",
            path.display()
        );
    }
    if !path.exists() && std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if !is_regular(path) && kind != Kind::DigestCache {
        // /dev/null, a pipe, a device: writing there loses nothing, and was asked for.
        return Ok(());
    }
    let head = head(path).map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
    let Some(head) = head else {
        return Ok(());
    };
    let own = kind.matches(&head);
    let replaceable = (head.is_empty() && kind != Kind::DigestCache)
        || match kind {
            Kind::DigestCache => own,
            Kind::Trace => force,
            Kind::Report | Kind::ManPage => (own && kind.regenerable()) || force,
        };
    if replaceable {
        return Ok(());
    }
    let (what, mend) = match kind {
        Kind::DigestCache => (
            format!("is not {}", kind.noun()),
            "remove it or choose another path",
        ),
        Kind::Trace if own => (
            "is a trace (creb-rs replaces no trace without --force: one cannot be made again)"
                .to_owned(),
            "choose another path, or pass --force to replace it",
        ),
        _ => (
            format!("is not {}", kind.noun()),
            "choose another path, or pass --force to replace it",
        ),
    };
    anyhow::bail!(
        "{flag} {}: the file exists and {what} (it begins {}); it is left as it is: {mend}",
        path.display(),
        describe(&head)
    )
}

/// Whether `path` is a regular file (following links).
fn is_regular(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// The first bytes of a file, as a reader would recognise them.
fn describe(head: &[u8]) -> String {
    let shown: String = String::from_utf8_lossy(&head[..head.len().min(24)])
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{:?}", shown.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_from_their_first_bytes() {
        assert!(Kind::DigestCache.matches(b"creb-rs digest cache creb-rs/content/v1\n"));
        assert!(Kind::DigestCache.matches(b"creb-rs digest cache creb-rs/content/v0\n"));
        assert!(!Kind::DigestCache.matches(b"[{\"http.request.method\":\"GET\"}]"));
        assert!(!Kind::DigestCache.matches(b""));
        for trace in [
            &b"[\n{\"a\":1}"[..],
            b"  {\"a\":1}\n",
            b"",
            &[0x1f, 0x8b, 8, 0],
            &[0x28, 0xb5, 0x2f, 0xfd, 0],
        ] {
            assert!(Kind::Trace.matches(trace), "{trace:?}");
        }
        assert!(!Kind::Trace.matches(b"creb-rs digest cache x\n"));
        assert!(!Kind::Trace.matches(b"# my notes\n"));
        for report in [
            &b"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"generator\" content=\"creb-rs 0.1.0\">"[..],
            b"operation,count,ok,errors,bytes,requests_per_s,bytes_per_s",
            b"creb-rs replay \xe2\x86\x92 http://x  [stress]",
        ] {
            assert!(Kind::Report.matches(report), "{report:?}");
        }
        assert!(!Kind::Report.matches(b"[{\"http.request.method\":\"GET\"}]"));
        // A user's notes that mention creb-rs, a page of another generator: not its own.
        assert!(!Kind::Report.matches(b"notes on creb-rs runs\n"));
        assert!(!Kind::Report.matches(b"<!DOCTYPE html><title>creb-rs results</title>"));
        assert!(!Kind::Report.matches(b"operation,who\n"));
        // A result's summary.json: creb-rs's, but not made again by a report.
        assert!(!Kind::Report
            .matches(b"{\n  \"schema_version\": 1,\n  \"tool\": {\"name\": \"creb-rs\""));
        assert!(Kind::ManPage.matches(b".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH creb-rs 1"));
        assert!(!Kind::ManPage.matches(b".TH mytool 1\n"));
        assert!(!Kind::Report.matches(b"creb-rs\0\x01binary"));
    }

    #[test]
    fn an_input_is_never_written_and_another_kind_only_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.json");
        std::fs::write(&trace, b"[{\"a\":1}]").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&trace, &link).unwrap();
        let inputs = [trace.clone()];
        for kind in [Kind::DigestCache, Kind::Trace, Kind::Report] {
            for force in [false, true] {
                let e = check(&link, "--x", kind, &inputs, force).unwrap_err();
                assert!(e.to_string().contains("one of the command's inputs"), "{e}");
            }
        }
        // Not an input: a trace replaces no trace without --force, a cache never.
        let e = check(&trace, "-o", Kind::Trace, &[], false).unwrap_err();
        assert!(
            e.to_string().contains("replaces no trace without --force"),
            "{e}"
        );
        assert!(check(&trace, "-o", Kind::Trace, &[], true).is_ok());
        let empty = dir.path().join("empty.json");
        std::fs::write(&empty, b"").unwrap();
        assert!(check(&empty, "-o", Kind::Trace, &[], false).is_ok());
        assert!(check(Path::new("/dev/null"), "-o", Kind::Trace, &[], false).is_ok());
        let e = check(&trace, "--digest-cache", Kind::DigestCache, &[], true).unwrap_err();
        assert!(e.to_string().contains("not a digest cache"), "{e}");
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, b"my notes").unwrap();
        let e = check(&notes, "-o", Kind::Trace, &[], false).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        assert!(check(&notes, "-o", Kind::Trace, &[], true).is_ok());
        assert!(check(&dir.path().join("new.json"), "-o", Kind::Trace, &[], false).is_ok());
        assert!(check(dir.path(), "-o", Kind::Trace, &[], true).is_err());
        assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    }
}
