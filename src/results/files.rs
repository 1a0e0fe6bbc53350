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
    if dir.join(EXPERIMENT_CHECKPOINT).exists() {
        anyhow::bail!(
            "--output-dir {}: it holds an experiment run (its {EXPERIMENT_CHECKPOINT}, its \
             cells' results): a result goes in a directory of its own; choose another",
            dir.display()
        );
    }
    let mut removed = remove_capacity(dir, force)?;
    let present: Vec<&str> = RESULT_FILES
        .iter()
        .copied()
        .filter(|name| dir.join(name).exists())
        .collect();
    let prewarm = dir.join(PREWARM_DIR);
    let old_prewarm = prewarm.is_dir() && holds_a_result(&prewarm);
    if present.is_empty() && !old_prewarm {
        return Ok(removed);
    }
    if !present.is_empty() && !holds_a_result(dir) {
        if force {
            // Written over where they stand, as the user asked; nothing is removed.
            return Ok(removed);
        }
        anyhow::bail!(
            "--output-dir {}: it holds {} but no result of creb-rs; nothing is written over \
             them: choose another directory, or pass --force to replace them",
            dir.display(),
            present.join(", ")
        );
    }
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

/// The file that makes a directory an experiment run's (`creb-rs run`).
pub const EXPERIMENT_CHECKPOINT: &str = ".creb-run.json";

/// An earlier capacity search's files in a result directory: `capacity.json` (when
/// creb-rs wrote it: refused otherwise, unless `force`) and its steps' results, removed so
/// that no stale capacity answer stands beside a new result. The names removed.
fn remove_capacity(dir: &Path, force: bool) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    let file = dir.join(CAPACITY_JSON);
    if file.is_file() {
        let ours = crate::outfile::head(&file).ok().flatten().is_some_and(|h| {
            crate::outfile::contains(&h, b"\"limited_by\"") || {
                let text = String::from_utf8_lossy(&h);
                text.contains("\"kind\"") && text.contains("\"steps\"")
            }
        });
        if !ours && !force {
            anyhow::bail!(
                "--output-dir {}: it holds {CAPACITY_JSON}, not a capacity result of creb-rs; \
                 nothing is written over it: choose another directory, or pass --force",
                dir.display()
            );
        }
        if ours {
            fs::remove_file(&file).with_context(|| format!("cannot remove {}", file.display()))?;
            removed.push(CAPACITY_JSON.to_owned());
        }
    }
    let steps = dir.join(STEPS_DIR);
    let Ok(entries) = fs::read_dir(&steps) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && holds_a_result(&path) {
            for name in prepare_result_dir(&path, force)? {
                removed.push(format!(
                    "{STEPS_DIR}/{}/{name}",
                    entry.file_name().to_string_lossy()
                ));
            }
            let _ = fs::remove_dir(&path);
        }
    }
    let _ = fs::remove_dir(&steps);
    Ok(removed)
}

/// The folder of a capacity search's steps' result directories, beside capacity.json.
pub const STEPS_DIR: &str = "steps";

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

    #[test]
    fn a_reused_directory_loses_an_earlier_capacity_result_and_refuses_an_experiment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let summary = b"{\"schema_version\": 1, \"tool\": {\"name\": \"creb-rs\"}}";
        fs::write(
            dir.join(CAPACITY_JSON),
            b"{\"kind\": \"search\", \"steps\": [], \"limited_by\": \"registry\"}",
        )
        .unwrap();
        let step = dir.join(STEPS_DIR).join("00");
        fs::create_dir_all(&step).unwrap();
        fs::write(step.join("summary.json"), summary).unwrap();
        fs::write(dir.join("notes.txt"), b"mine").unwrap();
        let removed = prepare_result_dir(dir, false).unwrap();
        assert!(removed.contains(&CAPACITY_JSON.to_owned()), "{removed:?}");
        assert!(
            removed.contains(&"steps/00/summary.json".to_owned()),
            "{removed:?}"
        );
        assert!(!dir.join(CAPACITY_JSON).exists() && !dir.join(STEPS_DIR).exists());
        assert!(dir.join("notes.txt").exists(), "other files stay");
        // A capacity.json creb-rs did not write: refused unless --force.
        fs::write(dir.join(CAPACITY_JSON), b"my own capacity plan").unwrap();
        let e = prepare_result_dir(dir, false).unwrap_err();
        assert!(e.to_string().contains("not a capacity result"), "{e}");
        assert!(prepare_result_dir(dir, true).is_ok());
        // An experiment run's directory holds many results: refused.
        fs::write(dir.join(EXPERIMENT_CHECKPOINT), b"{}").unwrap();
        let e = prepare_result_dir(dir, true).unwrap_err();
        assert!(e.to_string().contains("experiment run"), "{e}");
    }
}
