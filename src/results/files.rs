//! Whole files of the result directory: written to a temporary name and renamed, so a
//! reader never sees half of one; the directory checked for writability before a run; the
//! summary written and read back.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::summary::Summary;

/// Creates the directory if needed and proves it is writable.
pub fn prepare_output_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let probe = dir.join(".creb-rs-write-test");
    fs::write(&probe, b"ok")
        .with_context(|| format!("output directory {} is not writable", dir.display()))?;
    let _ = fs::remove_file(&probe);
    Ok(())
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
