//! What `trace sample`, `trace synth` and `trace validate` say of the trace they wrote or
//! checked: their `--json` documents (fields in name order, as they always were) and the
//! lines people read, rendered from the reports the analyses return.

use std::path::Path;

use serde::Serialize;

use crate::analysis::trace::{SampleReport, Validation};
use crate::trace::synth::{format_ms, Profile, SynthStats};
use crate::units::{grouped, plural};

/// `trace sample --json`.
#[derive(Debug, Serialize)]
pub struct Sampled<'a> {
    pub first: Option<String>,
    pub invalid: u64,
    pub last: Option<String>,
    pub method: &'a str,
    pub out: &'a Path,
    pub read: u64,
    pub selection: &'a str,
    pub written: u64,
}

impl<'a> Sampled<'a> {
    pub fn of(report: &'a SampleReport, method: &'a str, out: &'a Path) -> Self {
        Sampled {
            first: report.first_ms.map(format_ms),
            invalid: report.invalid,
            last: report.last_ms.map(format_ms),
            method,
            out,
            read: report.read,
            selection: &report.selection,
            written: report.written,
        }
    }
}

/// `trace synth --json`.
#[derive(Debug, Serialize)]
pub struct Synthesized<'a> {
    pub duplicates: u64,
    pub failed_in_trace: u64,
    pub first: Option<String>,
    pub last: Option<String>,
    pub out: &'a Path,
    pub profile: Profile,
    pub pulls: u64,
    pub pushes: u64,
    pub seed: u64,
    pub written: u64,
}

impl<'a> Synthesized<'a> {
    /// What a synthesis of `profile` and `seed` wrote into `out`: `written` records between
    /// `first` and `last` (ms).
    pub fn of(
        stats: &SynthStats,
        (profile, seed): (Profile, u64),
        out: &'a Path,
        written: u64,
        (first, last): (Option<i64>, Option<i64>),
    ) -> Self {
        Synthesized {
            duplicates: stats.duplicates,
            failed_in_trace: stats.failed,
            first: first.map(format_ms),
            last: last.map(format_ms),
            out,
            profile,
            pulls: stats.pulls,
            pushes: stats.pushes,
            seed,
            written,
        }
    }
}

/// `trace validate --json`.
#[derive(Debug, Serialize)]
pub struct Validated {
    pub duplicates: u64,
    pub failed_in_trace: u64,
    pub files: usize,
    pub first: Option<String>,
    pub last: Option<String>,
    pub out_of_order: u64,
    pub problems: Vec<String>,
    pub records: u64,
    pub valid: bool,
}

impl Validated {
    pub fn of(v: &Validation) -> Self {
        Validated {
            duplicates: v.duplicates,
            failed_in_trace: v.failed_in_trace,
            files: v.files,
            first: v.first_ms.map(format_ms),
            last: v.last_ms.map(format_ms),
            out_of_order: v.out_of_order,
            problems: v.problems.iter().map(ToString::to_string).collect(),
            records: v.records,
            valid: v.is_ok(),
        }
    }
}

/// A valid trace, in a line (stdout).
pub fn valid_line(v: &Validation) -> String {
    format!(
        "OK: {} records in {} file{}{} ({} duplicates, {} failed in the original, {} out of order)\n",
        grouped(v.records),
        v.files,
        plural(v.files),
        match (v.first_ms, v.last_ms) {
            (Some(f), Some(l)) => format!(", {} to {}", format_ms(f), format_ms(l)),
            _ => String::new(),
        },
        grouped(v.duplicates),
        grouped(v.failed_in_trace),
        grouped(v.out_of_order),
    )
}

/// The problems of a trace that is not valid, counted in a line (stderr, after each
/// problem); `all`: every problem was looked for.
pub fn problems_line(v: &Validation, all: bool) -> String {
    format!(
        "trace validate: {} problem{} in {} file{}, {} valid records{}",
        v.problems.len(),
        plural(v.problems.len()),
        v.files,
        plural(v.files),
        grouped(v.records),
        if all {
            ""
        } else {
            " before the first problem (--all reports every one)"
        }
    )
}
