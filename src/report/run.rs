//! What `creb-rs run` shows on the terminal besides the comparison table: the cells of a
//! round as the command lines they run (`--dry-run`), and the end of a run as JSON.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::experiment::cells::Cell;
use crate::experiment::checkpoint::Checkpoint;
use crate::experiment::config::ExperimentFile;

/// `run --dry-run`: what the file holds and where results go (`schedule` said in words),
/// then each cell of a round with the command line it runs (its arguments after
/// `creb-rs`, as the command layer builds them).
pub fn dry_run_text(
    file: &ExperimentFile,
    schedule: &str,
    out: &Path,
    cells: &[(Cell, Vec<String>)],
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} experiments, {} registries: {} cells per round ({schedule}); results in {}",
        file.experiments.len(),
        file.registries.len(),
        cells.len(),
        out.display()
    );
    for (cell, argv) in cells {
        let exp = &file.experiments[cell.experiment];
        let _ = writeln!(
            text,
            "{} on {}{}:\n  {}",
            exp.spec.name,
            file.registries[cell.registry].name,
            if exp.spec.repetitions() > 1 {
                format!(" (rep {})", cell.rep + 1)
            } else {
                String::new()
            },
            shell_line(argv)
        );
    }
    text
}

/// A command line a shell runs as given: every argument but the plainest single-quoted.
pub fn shell_line(argv: &[String]) -> String {
    let quote = |a: &String| {
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
        {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    std::iter::once("creb-rs".to_owned())
        .chain(argv.iter().map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `run --json`: where the results are, the exit status, and the checkpoint as written
/// last (fields in name order, as they always were).
#[derive(Debug, Serialize)]
pub struct RunEnd<'a> {
    pub checkpoint: &'a Checkpoint,
    pub exit_code: u8,
    pub output_dir: &'a Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dry_run_lines_are_shell_quoted() {
        let line = shell_line(&[
            "push".into(),
            "--password-cmd".into(),
            "printf %s \"$PW\"".into(),
            "--fail-if".into(),
            "p99(blob_get) > 2s".into(),
        ]);
        assert_eq!(
            line,
            "creb-rs push --password-cmd 'printf %s \"$PW\"' --fail-if 'p99(blob_get) > 2s'"
        );
    }
}
