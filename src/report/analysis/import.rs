//! `trace import --stats` as people read it: what was read and written, the skipped and
//! malformed lines, the sizes learned, rendered from an [`ImportReport`].

use std::collections::BTreeMap;

use crate::analysis::trace::import::{ImportReport, OWN_SIZING};

/// The report for people.
#[allow(clippy::too_many_lines)]
pub fn render(r: &ImportReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trace import: {} lines of {} file(s) → {} requests in {} ({})",
        r.lines,
        r.files.len(),
        r.imported,
        r.out,
        if r.anonymized {
            "anonymized"
        } else {
            "names kept"
        }
    );
    if let (Some(first), Some(last)) = (&r.first, &r.last) {
        let _ = writeln!(out, "  from {first} to {last} ({:.1}s)", r.span_s);
    }
    let list = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !r.methods.is_empty() {
        let _ = writeln!(out, "  methods: {}", list(&r.methods));
        let _ = writeln!(out, "  statuses: {}", list(&r.statuses));
    }
    let skipped: u64 = r.skipped.values().sum();
    if skipped > 0 {
        let _ = writeln!(out, "  skipped {skipped}: {}", list(&r.skipped));
    }
    if let Some(n) = r.skipped.get(OWN_SIZING) {
        let _ = writeln!(
            out,
            "  left out {n} HEADs creb-rs itself sent (an earlier import's --sizes-from)"
        );
    }
    if r.malformed > 0 {
        let listed = r.problems.len() as u64;
        if listed < r.malformed {
            let _ = writeln!(
                out,
                "  malformed {} (the first {listed} listed):",
                r.malformed
            );
        } else {
            let _ = writeln!(out, "  malformed {}:", r.malformed);
        }
        for p in &r.problems {
            let _ = writeln!(out, "    {}:{}: {}", p.file, p.line, p.why);
        }
    }
    let z = &r.sizes;
    if z.uploads > 0 {
        let _ = writeln!(
            out,
            "  uploads {}: sized by the registry {}, by request bodies {}, by the upload state {}, unknown {}",
            z.uploads, z.from_registry, z.from_bodies, z.from_upload_state, z.unknown
        );
    }
    if z.unknown > 0 {
        let _ = writeln!(
            out,
            "  {} uploads of unknown size (marked creb.size_unknown): the log gives no request size; \
             --sizes-from URL asks the registry (docs/traces.md)",
            z.unknown
        );
    }
    if z.mounts > 0 {
        let _ = writeln!(
            out,
            "  mounts {} ({} of a blob of unknown size)",
            z.mounts, z.mounts_unsized
        );
    }
    if r.out_of_order > 0 {
        let _ = writeln!(
            out,
            "  {} requests written after a later one (they lasted longer than the one-minute reorder buffer)",
            r.out_of_order
        );
    }
    if r.second_resolution > 0 {
        let _ = writeln!(
            out,
            "  {} requests timed to the second only: add $msec to the log_format (docs/traces.md)",
            r.second_resolution
        );
    }
    out
}
