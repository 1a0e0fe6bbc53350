//! The checkpoint `OUT/.creb-run.json`: what a `run` has done, so `--resume` continues it.
//!
//! Rewritten atomically (temporary file, fsync, rename) before and after every cell, so a
//! crash leaves the previous complete version. A cell is *complete* when it finished with
//! a result (`ok`, or `failed`: a check or an operation failed) and its directory holds a
//! `summary.json` that is not marked interrupted; anything else (`running` when the
//! process died, `interrupted`, `error` with no usable result) is redone on resume. The
//! schedule and layout of the first invocation are kept here so a resumed run lays out
//! and times its rounds the same way.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::results::write_atomic;

pub const FILE_NAME: &str = crate::results::EXPERIMENT_CHECKPOINT;
pub const VERSION: u32 = 1;

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    /// Started; still running, or the process died.
    Running,
    /// Completed, exit 0.
    Ok,
    /// Completed with a result, but an operation or a `--fail-if` check failed (exit 1 or 3).
    Failed,
    /// No usable result: unreachable registry, refused credentials, bad configuration.
    Error,
    /// Stopped by a signal; its result is partial.
    Interrupted,
}

impl CellStatus {
    pub fn name(self) -> &'static str {
        match self {
            CellStatus::Running => "running",
            CellStatus::Ok => "ok",
            CellStatus::Failed => "failed",
            CellStatus::Error => "error",
            CellStatus::Interrupted => "interrupted",
        }
    }
}

/// One cell's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    pub experiment: String,
    pub registry: String,
    /// 1-based.
    pub round: u64,
    /// 1-based.
    pub rep: u32,
    /// The result directory, relative to the output directory.
    pub dir: PathBuf,
    pub status: CellStatus,
    pub exit_code: Option<u8>,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Why a cell has no result (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How many times this cell was started (more than 1 after a resume).
    #[serde(default = "one")]
    pub attempts: u32,
}

fn one() -> u32 {
    1
}

/// What `--cleanup` did on one registry after a round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupRecord {
    pub registry: String,
    pub manifests_deleted: u64,
    pub blobs_deleted: u64,
    /// Deletions the registry does not allow (405, `UNSUPPORTED`, 403).
    pub refused: u64,
    /// Already gone.
    pub not_found: u64,
    pub errors: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
}

/// One round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// 1-based.
    pub round: u64,
    /// When the schedule wanted it (RFC 3339).
    pub planned_at: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Every cell complete (a round with a failed registry is not, and `--resume` retries
    /// it if it was the last).
    pub complete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<Vec<CleanupRecord>>,
}

/// The run's schedule, fixed by its first invocation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// Monitoring layout (`round-NNNN` directories).
    pub rounds_layout: bool,
    pub every_s: Option<f64>,
    pub until_s: Option<f64>,
    pub rounds: Option<u64>,
}

/// The flags that ask for it (`--every 1h --repeat 3`), or `one round`.
impl std::fmt::Display for ScheduleRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let every = |s: f64| humantime::format_duration(std::time::Duration::from_secs_f64(s));
        if let Some(e) = self.every_s {
            parts.push(format!("--every {}", every(e)));
        }
        if let Some(u) = self.until_s {
            parts.push(format!("--until {}", every(u)));
        }
        if let (true, Some(n)) = (self.rounds_layout, self.rounds) {
            parts.push(format!("--repeat {n}"));
        }
        if parts.is_empty() {
            f.write_str("one round")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// The slot to run next under `--every`: `next`, or — when slots were missed — the
/// latest slot that is due (missed rounds are skipped, not run in a burst).
pub fn due_slot(
    anchor: std::time::SystemTime,
    every: std::time::Duration,
    next: u64,
    now: std::time::SystemTime,
) -> u64 {
    let elapsed = now.duration_since(anchor).unwrap_or_default();
    let due = (elapsed.as_secs_f64() / every.as_secs_f64().max(1e-9)).floor() as u64;
    next.max(due)
}

/// `OUT/.creb-run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub tool_version: String,
    pub experiment_file: String,
    pub experiment_hash: String,
    /// The first round's start: the anchor of `--every`.
    pub started_at: String,
    pub schedule: ScheduleRecord,
    pub rounds: Vec<RoundRecord>,
    pub cells: Vec<CellRecord>,
}

impl Checkpoint {
    pub fn path(out: &Path) -> PathBuf {
        out.join(FILE_NAME)
    }

    /// Reads the checkpoint of `out`, if there is one.
    pub fn read(out: &Path) -> anyhow::Result<Option<Checkpoint>> {
        let path = Checkpoint::path(out);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let cp: Checkpoint = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a creb-rs checkpoint", path.display()))?;
        if cp.version != VERSION {
            anyhow::bail!(
                "{} has version {}; this creb-rs reads version {VERSION}",
                path.display(),
                cp.version
            );
        }
        Ok(Some(cp))
    }

    /// Writes it atomically.
    pub fn write(&self, out: &Path) -> anyhow::Result<()> {
        let mut json =
            serde_json::to_vec_pretty(self).context("cannot serialise the checkpoint")?;
        json.push(b'\n');
        write_atomic(out, FILE_NAME, &json)?;
        Ok(())
    }

    pub fn cell(
        &self,
        experiment: &str,
        registry: &str,
        round: u64,
        rep: u32,
    ) -> Option<&CellRecord> {
        self.cells.iter().find(|c| {
            c.experiment == experiment && c.registry == registry && c.round == round && c.rep == rep
        })
    }

    /// Inserts or replaces a cell's record.
    pub fn put_cell(&mut self, record: CellRecord) {
        match self.cells.iter_mut().find(|c| {
            c.experiment == record.experiment
                && c.registry == record.registry
                && c.round == record.round
                && c.rep == record.rep
        }) {
            Some(c) => *c = record,
            None => self.cells.push(record),
        }
    }

    pub fn round_mut(&mut self, round: u64) -> Option<&mut RoundRecord> {
        self.rounds.iter_mut().find(|r| r.round == round)
    }

    /// Rounds that ran to their end (complete or not).
    pub fn finished_rounds(&self) -> u64 {
        self.rounds
            .iter()
            .filter(|r| r.finished_at.is_some())
            .count() as u64
    }
}

/// Whether a recorded cell is complete: finished with a result that is whole.
pub fn is_complete(record: &CellRecord, out: &Path) -> bool {
    if !matches!(record.status, CellStatus::Ok | CellStatus::Failed) {
        return false;
    }
    let dir = out.join(&record.dir);
    match crate::results::read_summary(&dir) {
        Ok(summary) => !summary.interrupted,
        // A capacity cell: its capacity.json, unless a stop cut the search off.
        Err(_) => capacity_complete(&dir),
    }
}

/// Whether `dir` holds a capacity search's or ladder's answer that no stop cut off.
fn capacity_complete(dir: &Path) -> bool {
    crate::results::capacity::CapacityResult::read(dir).is_ok_and(|c| !c.stopped())
}

#[cfg(test)]
mod tests {

    #[test]
    fn missed_slots_are_skipped_not_bunched() {
        let anchor = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let hour = std::time::Duration::from_secs(3600);
        // On time: the next slot.
        assert_eq!(due_slot(anchor, hour, 3, anchor + hour * 2), 3);
        // Overran a little: the next slot, at once.
        assert_eq!(due_slot(anchor, hour, 3, anchor + hour * 3 + hour / 2), 3);
        // Down for a day: the latest due slot.
        assert_eq!(due_slot(anchor, hour, 3, anchor + hour * 27 + hour / 2), 27);
        // A clock before the anchor.
        assert_eq!(due_slot(anchor, hour, 0, anchor - hour), 0);
    }

    use super::*;

    fn record(status: CellStatus) -> CellRecord {
        CellRecord {
            experiment: "e".into(),
            registry: "r".into(),
            round: 1,
            rep: 1,
            dir: "e/r".into(),
            status,
            exit_code: None,
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: None,
            message: None,
            attempts: 1,
        }
    }

    #[test]
    fn round_trips_and_replaces_cells() {
        let dir = tempfile::tempdir().unwrap();
        let mut cp = Checkpoint {
            version: VERSION,
            tool_version: "x".into(),
            experiment_file: "f.toml".into(),
            experiment_hash: "sha256:0".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            schedule: ScheduleRecord {
                rounds_layout: false,
                every_s: None,
                until_s: None,
                rounds: Some(1),
            },
            rounds: Vec::new(),
            cells: Vec::new(),
        };
        cp.put_cell(record(CellStatus::Running));
        cp.put_cell(record(CellStatus::Ok));
        assert_eq!(cp.cells.len(), 1);
        cp.write(dir.path()).unwrap();
        let back = Checkpoint::read(dir.path()).unwrap().unwrap();
        assert_eq!(back, cp);
        assert_eq!(back.cell("e", "r", 1, 1).unwrap().status, CellStatus::Ok);
        // Ok in the checkpoint, but no summary on disk: not complete.
        assert!(!is_complete(&back.cells[0], dir.path()));
        assert!(!is_complete(&record(CellStatus::Interrupted), dir.path()));
    }

    #[test]
    fn a_missing_checkpoint_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Checkpoint::read(dir.path()).unwrap().is_none());
    }
}
