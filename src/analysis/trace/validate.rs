//! `trace validate`: checks that every record of a trace is one the replay can use.
//!
//! Owns [`validate`] and its report. A record is valid exactly when the
//! [`TraceReader`] accepts it (the reader is the single definition of the format); each
//! problem is a [`TraceError`] naming the file, the 1-based record number and, for a bad
//! record, the field and why.
//!
//! Files are checked one after another, each with its own reader, so a problem is reported
//! in file order and malformed JSON in one file (after which that file cannot be split any
//! further) does not hide the problems of the next. By default checking stops at the first
//! problem. With `all`, the reader skips invalid records and goes on; it does not say why a
//! skipped record is invalid, so afterwards the text of each one is read again
//! (`RawObjects`) and run alone through a fresh reader, via a one-record temporary file,
//! to get exactly the message the default mode would give. Memory: the problems found.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::trace::{Interner, Item, ReadOptions, SkipReason, TraceError, TraceInput, TraceReader};

use super::raw::{open_decoded, RawObjects};

/// What [`validate`] found.
#[derive(Debug, Default)]
pub struct Validation {
    pub files: usize,
    /// Valid records (duplicates included).
    pub records: u64,
    /// Valid records whose log `id` repeats one seen within 5 minutes.
    pub duplicates: u64,
    /// Valid records of requests that failed in the original (4xx/5xx but HEAD 404).
    pub failed_in_trace: u64,
    /// Records later in a file than the reader's reorder window allows for their time.
    pub out_of_order: u64,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// In file order, then record order.
    pub problems: Vec<TraceError>,
}

impl Validation {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks every record of `input`; stops at the first problem unless `all`.
pub fn validate(input: &TraceInput, all: bool) -> Validation {
    let mut v = Validation {
        files: input.files.len(),
        ..Validation::default()
    };
    for path in &input.files {
        check_file(path, all, &mut v);
        if !all && !v.is_ok() {
            break;
        }
    }
    v
}

fn check_file(path: &Path, all: bool, v: &mut Validation) {
    let single = TraceInput {
        files: vec![path.to_path_buf()],
    };
    let options = ReadOptions {
        skip_invalid: all,
        replay_failed: true,
        ..ReadOptions::default()
    };
    let mut reader = match TraceReader::open(&single, options, Interner::default()) {
        Ok(r) => r,
        Err(e) => {
            v.problems.push(e);
            return;
        }
    };
    let mut invalid: Vec<u64> = Vec::new();
    let mut fatal = None;
    for item in reader.by_ref() {
        match item {
            Err(e) => {
                fatal = Some(e);
                break;
            }
            Ok(Item::Record(r)) => {
                v.records += 1;
                if r.failed_in_trace() {
                    v.failed_in_trace += 1;
                }
                v.first_ms = Some(v.first_ms.map_or(r.time_ms, |f| f.min(r.time_ms)));
                v.last_ms = Some(v.last_ms.map_or(r.time_ms, |l| l.max(r.time_ms)));
            }
            Ok(Item::Skipped { reason, number, .. }) => match reason {
                SkipReason::Invalid => invalid.push(number),
                SkipReason::Duplicate => {
                    v.records += 1;
                    v.duplicates += 1;
                }
                SkipReason::FailedInTrace => v.records += 1,
            },
        }
    }
    v.out_of_order += reader.stats().out_of_order;
    invalid.sort_unstable();
    v.problems.extend(explain_invalid(path, &invalid));
    v.problems.extend(fatal);
}

/// The reader's own message for each invalid record `numbers` (sorted) of `path`.
fn explain_invalid(path: &Path, numbers: &[u64]) -> Vec<TraceError> {
    if numbers.is_empty() {
        return Vec::new();
    }
    let problem = |record: u64, reason: String| TraceError::Record {
        file: path.to_path_buf(),
        record,
        reason,
    };
    let mut objects = match open_decoded(path) {
        Ok(src) => RawObjects::new(src),
        Err(e) => {
            let reason = format!("invalid (cannot re-read it to say why: {e})");
            return numbers
                .iter()
                .map(|n| problem(*n, reason.clone()))
                .collect();
        }
    };
    let scratch = Scratch::new();
    let mut out = Vec::with_capacity(numbers.len());
    let mut at = 0u64;
    let mut text = Vec::new();
    for &number in numbers {
        let mut found = true;
        while at < number {
            text.clear();
            match objects.next_into(&mut text) {
                Ok(true) => at += 1,
                _ => {
                    found = false;
                    break;
                }
            }
        }
        let reason = if found { scratch.reason(&text) } else { None };
        out.push(problem(
            number,
            reason.unwrap_or_else(|| "not a valid record".into()),
        ));
    }
    out
}

/// A private temporary file for running one record through a reader; removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("creb-validate-{}-{n}.json", std::process::id());
        Scratch {
            path: std::env::temp_dir().join(name),
        }
    }

    /// Why the reader rejects the record `text`, if it does.
    fn reason(&self, text: &[u8]) -> Option<String> {
        let mut file = std::fs::File::create(&self.path).ok()?;
        file.write_all(text).ok()?;
        drop(file);
        let input = TraceInput {
            files: vec![self.path.clone()],
        };
        let options = ReadOptions {
            dedup_window: std::time::Duration::ZERO,
            replay_failed: true,
            ..ReadOptions::default()
        };
        let mut reader = TraceReader::open(&input, options, Interner::default()).ok()?;
        match reader.next() {
            Some(Err(TraceError::Record { reason, .. })) => Some(reason),
            _ => None,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
