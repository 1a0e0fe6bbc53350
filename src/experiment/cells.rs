//! A run's cells — one (experiment, registry, round, repetition) each — in run order, and
//! where each one's result directory is: a pure function of the cell's identity and the
//! run's layout, so `--resume` finds it again.

use std::path::PathBuf;

use super::config::ExperimentFile;

/// One unit of work: an experiment against a registry, in a round, one repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cell {
    /// Index into [`ExperimentFile::experiments`].
    pub experiment: usize,
    /// Index into [`ExperimentFile::registries`].
    pub registry: usize,
    /// 0-based round (slot) number.
    pub round: u64,
    /// 0-based repetition.
    pub rep: u32,
}

/// How result directories are laid out (fixed for a run; kept in the checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Monitoring mode (`--every` or `--repeat`): a `round-NNNN` level.
    pub rounds: bool,
}

impl Layout {
    /// The cell's directory relative to the output directory:
    /// `<experiment>/<registry>[/round-NNNN][/rep-K]` (rounds and repetitions 1-based;
    /// `rep-K` only for experiments with `repeat` > 1).
    pub fn cell_dir(&self, file: &ExperimentFile, cell: &Cell) -> PathBuf {
        let exp = &file.experiments[cell.experiment];
        let mut dir = PathBuf::from(&exp.spec.name).join(&file.registries[cell.registry].name);
        if self.rounds {
            dir.push(format!("round-{:04}", cell.round + 1));
        }
        if exp.spec.repetitions() > 1 {
            dir.push(format!("rep-{}", cell.rep + 1));
        }
        dir
    }
}

/// Every cell of a round, in run order: experiments in file order, then their registries
/// in file order, then repetitions.
pub fn round_cells(file: &ExperimentFile, round: u64) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (e, exp) in file.experiments.iter().enumerate() {
        for &r in &exp.registries {
            for rep in 0..exp.spec.repetitions() {
                cells.push(Cell {
                    experiment: e,
                    registry: r,
                    round,
                    rep,
                });
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const TEXT: &str = r#"
[[registry]]
name = "plain"
url = "http://127.0.0.1:5000"

[[registry]]
name = "auth"
url = "http://127.0.0.1:5001"

[[experiment]]
name = "r"
kind = "replay"
traces = "t.json"

[[experiment]]
name = "Push"
kind = "push"
layers = 2
layer_size = "64KiB"
repeat = 2

[[experiment]]
name = "pull"
kind = "pull"
repo = "push"
"#;

    #[test]
    fn cells_run_in_file_order_with_their_directories() {
        let f = ExperimentFile::parse(TEXT, Path::new("x.toml"), Path::new("/base")).unwrap();
        let cells = round_cells(&f, 0);
        assert_eq!(cells.len(), 2 + 4 + 2);
        let flat = Layout { rounds: false };
        let dirs: Vec<PathBuf> = cells.iter().map(|c| flat.cell_dir(&f, c)).collect();
        assert_eq!(dirs[0], PathBuf::from("r/plain"));
        assert_eq!(dirs[2], PathBuf::from("Push/plain/rep-1"));
        assert_eq!(dirs[3], PathBuf::from("Push/plain/rep-2"));
        let rounds = Layout { rounds: true };
        let c = Cell {
            round: 6,
            ..cells[3]
        };
        assert_eq!(
            rounds.cell_dir(&f, &c),
            PathBuf::from("Push/plain/round-0007/rep-2")
        );
    }
}
