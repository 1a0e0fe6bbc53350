//! `split.csv` of a merge: each interval's workload operations and bytes by header value,
//! added over the hosts by (interval, value), with the values the merged split folded into
//! `(other)` (past its bound of 16) folded the same way here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context as _;

use crate::metrics::split::{ValueCounters, OTHER_NAME};
use crate::results::store::{ResultSet, SPLIT_CSV};
use crate::results::writer::{split_row, SPLIT_HEADER};

/// Interval → (its start as written, value → counters).
pub(super) type SplitIntervals = BTreeMap<u64, (String, BTreeMap<String, ValueCounters>)>;

/// The hosts' rows added up; a value not in `kept` counts as `(other)`.
pub(super) fn merge_rows(sets: &[ResultSet], kept: &BTreeSet<&str>) -> SplitIntervals {
    let mut merged = SplitIntervals::new();
    for row in sets.iter().flat_map(|s| &s.split_rows) {
        let num = |i: usize| row.get(i).and_then(|v| v.parse::<u64>().ok());
        let (Some(interval), Some(completed), Some(bytes)) = (num(0), num(3), num(4)) else {
            continue;
        };
        let (Some(start), Some(value)) = (row.get(1), row.get(2)) else {
            continue;
        };
        let value = if kept.contains(value.as_str()) {
            value.clone()
        } else {
            OTHER_NAME.to_owned()
        };
        let (_, values) = merged
            .entry(interval)
            .or_insert_with(|| (start.clone(), BTreeMap::new()));
        values
            .entry(value)
            .or_default()
            .add(&ValueCounters { completed, bytes });
    }
    merged
}

/// Writes the merged `split.csv` (nothing when no host wrote one).
pub(super) fn write_rows(dir: &Path, merged: &SplitIntervals) -> anyhow::Result<()> {
    if merged.is_empty() {
        return Ok(());
    }
    let path = dir.join(SPLIT_CSV);
    let mut w = csv::Writer::from_path(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    w.write_record(SPLIT_HEADER)?;
    for (interval, (start, values)) in merged {
        for (value, c) in values {
            w.write_record(split_row(*interval, start, value, c))?;
        }
    }
    w.flush()?;
    Ok(())
}
