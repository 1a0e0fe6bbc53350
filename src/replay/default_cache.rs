//! The digest cache a replay keeps without being asked: one file per dataset (the traces as
//! they are on disk, and the seed) in creb-rs's cache directory, so that a prewarm repeated
//! on the same dataset asks the registry before it sends a blob, and a run after its
//! prewarm computes no digest. `--digest-cache FILE` names another file, `--no-digest-cache`
//! keeps none.
//!
//! The directory holds at most [`KEPT`] such files: the least recently used beyond that are
//! removed, and only files that are digest caches of creb-rs (by their first bytes) are
//! ever removed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};

/// Dataset caches a cache directory keeps.
pub const KEPT: usize = 16;

/// The extension of a dataset's cache file.
const EXTENSION: &str = "digests";

/// The directory of the dataset caches: `$CREB_CACHE_DIR/digests`, else
/// `$XDG_CACHE_HOME/creb-rs/digests`, else `$HOME/.cache/creb-rs/digests`; `None` when none
/// of them is set. `var` reads the environment (a parameter, so tests choose it).
pub fn directory(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = set("CREB_CACHE_DIR")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("creb-rs")))
        .or_else(|| set("HOME").map(|d| d.join(".cache").join("creb-rs")))?;
    Some(base.join("digests"))
}

/// The cache file of the dataset `traces` (the trace's files, a directory's resolved into
/// them: each file's canonical path, length and modification time) generated with `seed`,
/// in `dir`; `None` when a trace is not a file on disk (standard input).
pub fn file_of(dir: &Path, traces: &[PathBuf], seed: u64) -> Option<PathBuf> {
    let mut key = Sha256::new();
    for trace in traces {
        let path = std::fs::canonicalize(trace).ok()?;
        let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .unwrap_or_default();
        key.update(path.as_os_str().as_encoded_bytes());
        key.update([0]);
        key.update(meta.len().to_le_bytes());
        key.update(modified.as_nanos().to_le_bytes());
    }
    key.update(seed.to_le_bytes());
    let key = hex::encode(&key.finalize()[..16]);
    Some(dir.join(format!("{key}.{EXTENSION}")))
}

/// Prepares `file` (in its directory, made if needed) for use: marks it used now and
/// removes the least recently used dataset caches beyond [`KEPT`]. Why not (and nothing
/// kept) when the directory cannot be made or written.
pub fn prepare(file: &Path) -> Result<(), String> {
    let Some(dir) = file.parent() else {
        return Err(format!("{} has no directory", file.display()));
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let probe = dir.join(".creb-rs-write-test");
    let written = std::fs::write(&probe, b"ok");
    let _ = std::fs::remove_file(&probe);
    written.map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    if let Ok(f) = std::fs::File::options().append(true).open(file) {
        // Used now: the last to be removed.
        let _ = f.set_modified(SystemTime::now());
    }
    prune(dir, file);
    Ok(())
}

/// Removes the least recently used digest caches of `dir` beyond [`KEPT`], never `keep`.
fn prune(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut caches: Vec<(SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == EXTENSION) && p != keep)
        .filter(|p| {
            crate::outfile::head(p)
                .ok()
                .flatten()
                .is_some_and(|h| crate::outfile::Kind::DigestCache.matches(&h))
        })
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    caches.sort_by_key(|c| std::cmp::Reverse(c.0));
    for (_, old) in caches.into_iter().skip(KEPT.saturating_sub(1)) {
        let _ = std::fs::remove_file(crate::content::digest_cache::frames_path(&old));
        let _ = std::fs::remove_file(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            directory(env(&[("CREB_CACHE_DIR", "/c"), ("HOME", "/h")])),
            Some(PathBuf::from("/c/digests"))
        );
        assert_eq!(
            directory(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/creb-rs/digests"))
        );
        assert_eq!(
            directory(env(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/creb-rs/digests"))
        );
        assert_eq!(directory(env(&[("HOME", "")])), None);
    }

    #[test]
    fn a_dataset_has_one_file_that_changes_with_the_trace_or_the_seed() {
        let tmp = tempfile::tempdir().unwrap();
        let trace = tmp.path().join("t.json");
        std::fs::write(&trace, b"[]").unwrap();
        let dir = tmp.path().join("cache");
        let traces = [trace.clone()];
        let a = file_of(&dir, &traces, 1).unwrap();
        assert_eq!(file_of(&dir, &traces, 1).unwrap(), a);
        assert_ne!(file_of(&dir, &traces, 2).unwrap(), a);
        std::fs::write(&trace, b"[ ]").unwrap();
        assert_ne!(file_of(&dir, &traces, 1).unwrap(), a, "another length");
        assert_eq!(file_of(&dir, &[PathBuf::from("-")], 1), None);
        assert_eq!(
            file_of(&dir, &[tmp.path().to_path_buf()], 1),
            None,
            "a directory"
        );
    }

    #[test]
    fn only_the_most_recent_caches_are_kept_and_nothing_else_is_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let header = crate::outfile::DIGEST_CACHE_MAGIC;
        let t0 = SystemTime::now() - std::time::Duration::from_secs(10_000);
        for i in 0..KEPT + 4 {
            let p = dir.join(format!("{i:02}.{EXTENSION}"));
            std::fs::write(&p, header).unwrap();
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        let foreign = dir.join(format!("mine.{EXTENSION}"));
        std::fs::write(&foreign, b"not a cache").unwrap();
        let other = dir.join("notes.txt");
        std::fs::write(&other, header).unwrap();
        let new = dir.join(format!("new.{EXTENSION}"));
        assert_eq!(prepare(&new), Ok(()));
        let left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(EXTENSION) && n != "mine.digests")
            .collect();
        // The 15 most recent and the one in use (which does not exist yet).
        assert_eq!(left.len(), KEPT - 1, "{left:?}");
        assert!(!dir.join(format!("00.{EXTENSION}")).exists());
        assert!(dir.join(format!("{:02}.{EXTENSION}", KEPT + 3)).exists());
        assert!(foreign.exists() && other.exists(), "not ours: left alone");
        // A directory that cannot be made (a file stands in its way) says why.
        let blocked = dir.join("notes.txt").join("digests").join("x.digests");
        let why = prepare(&blocked).unwrap_err();
        assert!(why.contains("cannot make"), "{why}");
    }
}
