//! Whole files of the result directory: written to a temporary name and renamed, so a
//! reader never sees half of one; the directory checked for writability before a run; the
//! summary written and read back.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::summary::Summary;

/// The files of a result directory, every one creb-rs may write there (the report's page
/// included). Spelled out, not taken from the constants of `store` and `registry_metrics`
/// (which write through this file: the folder would turn in a circle); a unit test holds
/// the two lists together.
pub const RESULT_FILES: &[&str] = &[
    "summary.json",
    "meta.json",
    "counters.json",
    "histograms.hlog",
    "timeline.csv",
    "requests.csv",
    "endpoints.hlog",
    "endpoints.csv",
    "split.hlog",
    "split.csv",
    "attribution.hlog",
    "registry-metrics.json",
    "report.html",
];

/// The file of a capacity search's or ladder's result (`creb-rs capacity`), beside its
/// steps' result directories: its presence makes a directory a capacity result.
pub const CAPACITY_JSON: &str = "capacity.json";

/// The subdirectory of a result that holds its prewarm's result (`--phase all`).
pub const PREWARM_DIR: &str = "prewarm";

/// Creates the directory if needed and proves it is writable. The probe file is removed
/// whether the probe succeeded or not (a full disk leaves none behind).
pub fn prepare_output_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let probe = dir.join(".creb-rs-write-test");
    let written = fs::write(&probe, b"ok");
    let _ = fs::remove_file(&probe);
    written.with_context(|| format!("output directory {} is not writable", dir.display()))
}

/// Whether `dir` holds a result creb-rs wrote, whole or cut short (a run that ended with an
/// error before its summary): its summary, meta or interval log names creb-rs, or its
/// timeline has creb-rs's header.
fn holds_a_result(dir: &Path) -> bool {
    let head = |name: &str| crate::outfile::head(&dir.join(name)).ok().flatten();
    let names_creb =
        |name: &str| head(name).is_some_and(|h| crate::outfile::contains(&h, b"creb-rs"));
    ["summary.json", "meta.json", "histograms.hlog"]
        .into_iter()
        .any(names_creb)
        || head("timeline.csv").is_some_and(|h| h.starts_with(b"interval,start_s,"))
}

/// [`prepare_output_dir`] for a new result: a directory that holds an earlier result of
/// creb-rs has that result's files (and its `prewarm/` result) removed first, so the new
/// one never mixes with the old; a file of the result's names that creb-rs did not write
/// is refused (nothing is removed) unless `force` (then they are written over where they
/// stand). Other files are left alone. Returns the names removed.
pub fn prepare_result_dir(dir: &Path, force: bool) -> anyhow::Result<Vec<String>> {
    prepare_output_dir(dir)?;
    let present: Vec<&str> = RESULT_FILES
        .iter()
        .copied()
        .filter(|name| dir.join(name).exists())
        .collect();
    let prewarm = dir.join(PREWARM_DIR);
    let old_prewarm = prewarm.is_dir() && holds_a_result(&prewarm);
    if present.is_empty() && !old_prewarm {
        return Ok(Vec::new());
    }
    if !present.is_empty() && !holds_a_result(dir) {
        if force {
            // Written over where they stand, as the user asked; nothing is removed.
            return Ok(Vec::new());
        }
        anyhow::bail!(
            "--output-dir {}: it holds {} but no result of creb-rs; nothing is written over \
             them: choose another directory, or pass --force to replace them",
            dir.display(),
            present.join(", ")
        );
    }
    let mut removed = Vec::new();
    for name in present {
        let path = dir.join(name);
        if path.is_dir() {
            anyhow::bail!("--output-dir {}: {name} is a directory", dir.display());
        }
        fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        removed.push(name.to_owned());
    }
    if old_prewarm {
        for name in prepare_result_dir(&prewarm, force)? {
            removed.push(format!("{PREWARM_DIR}/{name}"));
        }
        // Empty now unless it held files of its own; those stay.
        let _ = fs::remove_dir(&prewarm);
    }
    Ok(removed)
}

/// Writes `bytes` to `dir/name` atomically (temporary file, fsync, rename).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    let target = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = fs::File::create(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))
        .and_then(|mut f| {
            f.write_all(bytes)
                .and_then(|()| f.sync_all())
                .with_context(|| format!("cannot write {}", target.display()))
        })
        .and_then(|()| {
            fs::rename(&tmp, &target).with_context(|| format!("cannot write {}", target.display()))
        });
    if written.is_err() {
        // A full disk leaves no half-written temporary file behind.
        let _ = fs::remove_file(&tmp);
    }
    written.map(|()| target)
}

/// Writes `summary.json` into `dir`.
pub fn write_summary(dir: &Path, summary: &Summary) -> anyhow::Result<PathBuf> {
    let mut json = serde_json::to_vec_pretty(summary).context("cannot serialise the summary")?;
    json.push(b'\n');
    write_atomic(dir, "summary.json", &json)
}

/// Reads `summary.json` from a result directory.
pub fn read_summary(dir: &Path) -> anyhow::Result<Summary> {
    let path = dir.join("summary.json");
    let bytes = fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a valid summary", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_files_are_the_ones_written() {
        for name in [
            super::super::store::ENDPOINTS_HLOG,
            super::super::store::ENDPOINTS_CSV,
            super::super::store::SPLIT_HLOG,
            super::super::store::SPLIT_CSV,
            super::super::attribution::ATTRIBUTION_HLOG,
            super::super::registry_metrics::REGISTRY_METRICS_JSON,
        ] {
            assert!(
                RESULT_FILES.contains(&name),
                "{name} is not in RESULT_FILES"
            );
        }
    }
}
