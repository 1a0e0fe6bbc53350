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
//! problem. With `all`, the reader skips invalid records and goes on, and its detailed view
//! says why each one is invalid: exactly the message the default mode would give. Memory:
//! the problems found.

use std::path::Path;

use crate::trace::Interner;
use crate::trace::{Detailed, Item, ReadOptions, SkipReason, TraceError, TraceInput, TraceReader};

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

impl Validation {
    /// A valid record: counted, its time widening the trace's span.
    fn count(&mut self, r: &crate::trace::Record) {
        self.records += 1;
        if r.failed_in_trace() {
            self.failed_in_trace += 1;
        }
        self.first_ms = Some(self.first_ms.map_or(r.time_ms, |f| f.min(r.time_ms)));
        self.last_ms = Some(self.last_ms.map_or(r.time_ms, |l| l.max(r.time_ms)));
    }
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
    let mut invalid: Vec<(u64, String)> = Vec::new();
    let mut fatal = None;
    while let Some(item) = reader.next_detailed() {
        let detailed = match item {
            Err(e) => {
                fatal = Some(e);
                break;
            }
            Ok(d) => d,
        };
        match detailed {
            Detailed {
                item: Item::Record(r),
                ..
            } => v.count(&r),
            Detailed {
                item: Item::Skipped { reason, number, .. },
                invalid: why,
                ..
            } => match reason {
                SkipReason::Invalid => {
                    invalid.push((number, why.unwrap_or_else(|| "not a valid record".into())));
                }
                SkipReason::Duplicate => {
                    v.records += 1;
                    v.duplicates += 1;
                }
                SkipReason::FailedInTrace => v.records += 1,
            },
        }
    }
    v.out_of_order += reader.stats().out_of_order;
    invalid.sort_unstable_by_key(|(number, _)| *number);
    v.problems.extend(
        invalid
            .into_iter()
            .map(|(record, reason)| TraceError::Record {
                file: path.to_path_buf(),
                record,
                reason,
            }),
    );
    v.problems.extend(fatal);
}
