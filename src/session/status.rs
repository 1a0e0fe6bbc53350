//! How a command ended, as the process's exit status. One list for every command (also in
//! `--help`, the manual page and docs/cli.md), so scripts can tell a finished run from a
//! failed operation, a slow one (a `--fail-if` threshold), a usage error and an
//! interruption.

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: completed.
    Success,
    /// 1: completed, but more operations failed than `--max-errors` tolerates (none by
    /// default), or a validity check failed with `--strict`.
    Failed,
    /// 2: usage, configuration or I/O error.
    Usage,
    /// 3: completed, but a `--fail-if` threshold held (slow, not broken).
    ThresholdFailed,
    /// 130: interrupted by SIGINT.
    Interrupted,
    /// 143: terminated by SIGTERM.
    Terminated,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::ThresholdFailed => 3,
            ExitStatus::Interrupted => 130,
            ExitStatus::Terminated => 143,
        }
    }

    /// The more severe of two statuses.
    pub fn max_with(self, other: ExitStatus) -> ExitStatus {
        // Broken outranks slow: a failed operation hides a threshold.
        let rank = |s: ExitStatus| match s {
            ExitStatus::Success => 0,
            ExitStatus::ThresholdFailed => 1,
            ExitStatus::Failed => 2,
            ExitStatus::Usage => 3,
            ExitStatus::Interrupted | ExitStatus::Terminated => 4,
        };
        if rank(self) >= rank(other) {
            self
        } else {
            other
        }
    }
}
