//! What the runner needs from whoever runs a cell: check it, run it into its directory,
//! say how to reach a registry of the file and what a cell pushes. The command layer
//! implements it by turning a cell into the command line a person would type; the runner
//! knows no flag.

use std::future::Future;
use std::path::{Path, PathBuf};

use crate::experiment::cells::Cell;
use crate::experiment::config::{ExperimentFile, RegistrySpec};
use crate::metrics::live::SharedLive;
use crate::session::connect::RegistryConfig;
use crate::session::status::ExitStatus;
use crate::shutdown::Shutdown;
use crate::trace::ReadOptions;

pub use crate::exec::cleanup::{Tags, Target};

/// What a run shows of the cell running, beyond its result directory.
#[derive(Debug, Clone, Default)]
pub struct Observers {
    /// `--metrics-listen` of the run: the cell's live metrics, labelled by its directory.
    pub live: Option<SharedLive>,
    /// `--metrics-push` of the run, where the cell names none of its own.
    pub metrics_push: Option<url::Url>,
}

/// What the cells of one experiment push to one registry, for `--cleanup`.
#[derive(Debug, Clone)]
pub enum Pushed {
    /// Nothing (pulls).
    Nothing,
    /// These tags of one repository (a push experiment).
    Tags(Target),
    /// Into the repositories the traces name (a replay or a capacity search), as read
    /// with `options`, each under `prefix`; their tags are listed at cleanup.
    Trace {
        traces: Vec<PathBuf>,
        options: ReadOptions,
        prefix: Option<String>,
    },
}

/// Runs the cells of an experiment file.
pub trait CellDriver {
    /// Checks a cell before anything of the run is sent, so a typo fails in a second
    /// rather than hours into a run: `Err` says what is wrong.
    fn check(&self, file: &ExperimentFile, cell: &Cell) -> Result<(), String>;

    /// How to reach `registry`, as the cells do (for the check before a round's first
    /// cell on it, and for the cleanup).
    fn registry(&self, registry: &RegistrySpec) -> Result<RegistryConfig, String>;

    /// What the cells of experiment `experiment` push to registry `registry`.
    fn pushed(
        &self,
        file: &ExperimentFile,
        experiment: usize,
        registry: usize,
    ) -> Result<Pushed, String>;

    /// Runs `cell`, its results written to `dir`, stopped by `shutdown`: the exit status
    /// the same work gets as a command of its own.
    fn run(
        &self,
        file: &ExperimentFile,
        cell: &Cell,
        dir: &Path,
        observers: Observers,
        shutdown: Shutdown,
    ) -> impl Future<Output = anyhow::Result<ExitStatus>>;
}
