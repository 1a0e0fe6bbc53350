//! The command layer's [`CellDriver`]: a cell runs as the command line a person would type
//! for it ([`super::cells`]), through the commands' own `run`.

use std::path::Path;

use super::cells::{self, Cell, Command};
use crate::experiment::config::{ExperimentFile, RegistrySpec};
use crate::oci::Tag;
use crate::runner::driver::{Observers, Pushed, Tags, Target};
use crate::runner::CellDriver;
use crate::session::connect::RegistryConfig;
use crate::session::status::ExitStatus;
use crate::shutdown::Shutdown;
use crate::trace::ReadOptions;

/// Runs cells as commands.
#[derive(Debug, Clone, Copy)]
pub struct Commands;

impl CellDriver for Commands {
    fn check(&self, file: &ExperimentFile, cell: &Cell) -> Result<(), String> {
        let argv = cells::cell_argv(file, cell, Path::new("out"))?;
        let mut command = cells::parse(&argv)?;
        crate::results::thresholds::parse_all(&command.output_mut().fail_if)
            .map_err(|e| format!("{e:#}"))?;
        Ok(())
    }

    fn registry(&self, registry: &RegistrySpec) -> Result<RegistryConfig, String> {
        let args = cells::registry_args(registry)?;
        RegistryConfig::try_from(&args).map_err(|e| format!("{e:#}"))
    }

    fn pushed(
        &self,
        file: &ExperimentFile,
        experiment: usize,
        registry: usize,
    ) -> Result<Pushed, String> {
        let cell = Cell {
            experiment,
            registry,
            round: 0,
            rep: 0,
        };
        let argv = cells::cell_argv(file, &cell, Path::new("unused"))?;
        let replay = match cells::parse(&argv)? {
            Command::Push(p) => {
                let tags = if p.images <= 1 {
                    vec![p.tag.clone()]
                } else {
                    (0..p.images)
                        .map(|i| format!("{}-{i}", p.tag).parse::<Tag>())
                        .collect::<Result<_, _>>()?
                };
                return Ok(Pushed::Tags(Target {
                    repo: p.repo,
                    tags: Tags::Known(tags),
                }));
            }
            Command::Replay(r) => *r,
            Command::Capacity(c) => c.replay,
            Command::Pull(_) => return Ok(Pushed::Nothing),
        };
        Ok(Pushed::Trace {
            traces: replay.traces,
            options: ReadOptions {
                skip_invalid: true,
                replay_failed: true,
                limit_requests: replay.limit_requests,
                limit_duration: replay.limit_duration,
                ..ReadOptions::default()
            },
            prefix: replay.repo_prefix,
        })
    }

    async fn run(
        &self,
        file: &ExperimentFile,
        cell: &Cell,
        dir: &Path,
        observers: Observers,
        shutdown: Shutdown,
    ) -> anyhow::Result<ExitStatus> {
        let argv = cells::cell_argv(file, cell, dir).map_err(anyhow::Error::msg)?;
        let mut command = cells::parse(&argv).map_err(anyhow::Error::msg)?;
        let output = command.output_mut();
        output.live = observers.live;
        if output.metrics_push.is_none() {
            output.metrics_push = observers.metrics_push;
        }
        match command {
            Command::Push(a) => crate::commands::push::run(a, shutdown).await,
            Command::Pull(a) => crate::commands::pull::run(a, shutdown).await,
            Command::Replay(a) => crate::commands::replay::run(*a, shutdown).await,
            Command::Capacity(a) => crate::commands::capacity::run(*a, shutdown).await,
        }
    }
}
