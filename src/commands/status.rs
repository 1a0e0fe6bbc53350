//! How a command ended, as the process's exit status. One list for every command, so
//! scripts can tell a finished run from a failed check, a usage error and an interruption.

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Success,
    Failed,
    Usage,
    Interrupted,
    Terminated,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Interrupted => 130,
            ExitStatus::Terminated => 143,
        }
    }

    /// The more severe of two statuses.
    pub fn max_with(self, other: ExitStatus) -> ExitStatus {
        let rank = |s: ExitStatus| match s {
            ExitStatus::Success => 0,
            ExitStatus::Failed => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Interrupted | ExitStatus::Terminated => 3,
        };
        if rank(self) >= rank(other) {
            self
        } else {
            other
        }
    }
}
