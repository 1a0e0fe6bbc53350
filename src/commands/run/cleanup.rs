//! `run --cleanup`: delete what a round pushed, so repeated experiments do not grow storage
//! (and cost).
//!
//! What was pushed is derived from the experiment file, not remembered (here): a push
//! experiment pushed its repository's tags (`TAG`, or `TAG-0…TAG-(N-1)`); a replay pushed
//! into the repositories its trace names (with the registry's `repo_prefix`), whose tags
//! are listed with the tags API. The walk that deletes them is [`crate::exec::cleanup`].
//! Blobs uploaded by a replay without a manifest are not found this way; distribution's
//! garbage collector removes unreferenced blobs.
//!
//! A registry that does not allow deletion (405, `UNSUPPORTED`, 403) is reported in the
//! counts, never an error of the run. Distribution needs `storage.delete.enabled: true`,
//! and frees the bytes only when `registry garbage-collect` runs.

use std::collections::BTreeSet;
use std::path::Path;

use super::cells::Command;
use super::cells::{self, Cell};
pub use crate::exec::cleanup::{clean, Cleaned, Tags, Target};
use crate::experiment::config::{ExperimentFile, Kind};
use crate::oci::{Repository, Tag};
use crate::plan::catalog::Catalog;
use crate::plan::{Naming, RepoMap};
use crate::trace::{Interner, Item, ReadOptions, TraceInput, TraceReader};

/// The repositories a replay's trace names, read once (limits applied as in the run).
async fn trace_repositories(
    traces: Vec<std::path::PathBuf>,
    options: ReadOptions,
    prefix: Option<String>,
) -> anyhow::Result<Vec<Repository>> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Repository>> {
        let input = TraceInput::resolve(&traces)?;
        let mut reader = TraceReader::open(&input, options, Interner::default())?;
        let mut syms = BTreeSet::new();
        for item in reader.by_ref() {
            if let Ok(Item::Record(r)) = item {
                if let Some(repo) = r.target.repo() {
                    syms.insert(repo);
                }
            }
        }
        let mut catalog = Catalog::default();
        catalog.names = reader.into_names();
        let mut naming = Naming::new(RepoMap::Keep { prefix });
        let repos: BTreeSet<Repository> =
            syms.into_iter().map(|s| naming.repo(&catalog, s)).collect();
        Ok(repos.into_iter().collect())
    })
    .await
    .map_err(|e| anyhow::anyhow!("the trace reader stopped unexpectedly: {e}"))?
}

/// What the cells of `experiment` on `registry` pushed (empty for pulls).
pub async fn targets(
    file: &ExperimentFile,
    experiment: usize,
    registry: usize,
) -> anyhow::Result<Vec<Target>> {
    let exp = &file.experiments[experiment];
    if exp.spec.kind == Kind::Pull {
        return Ok(Vec::new());
    }
    let cell = Cell {
        experiment,
        registry,
        round: 0,
        rep: 0,
    };
    let argv = cells::cell_argv(file, &cell, Path::new("unused")).map_err(anyhow::Error::msg)?;
    let r = match cells::parse(&argv).map_err(anyhow::Error::msg)? {
        Command::Push(p) => {
            let tags = if p.images <= 1 {
                vec![p.tag.clone()]
            } else {
                let mut tags = Vec::new();
                for i in 0..p.images {
                    let t: Tag = format!("{}-{i}", p.tag)
                        .parse()
                        .map_err(anyhow::Error::msg)?;
                    tags.push(t);
                }
                tags
            };
            return Ok(vec![Target {
                repo: p.repo,
                tags: Tags::Known(tags),
            }]);
        }
        Command::Replay(r) => *r,
        Command::Capacity(c) => c.replay,
        Command::Pull(_) => return Ok(Vec::new()),
    };
    let options = ReadOptions {
        skip_invalid: true,
        replay_failed: true,
        limit_requests: r.limit_requests,
        limit_duration: r.limit_duration,
        ..ReadOptions::default()
    };
    let repos = trace_repositories(r.traces.clone(), options, r.repo_prefix.clone()).await?;
    Ok(repos
        .into_iter()
        .map(|repo| Target {
            repo,
            tags: Tags::Listed,
        })
        .collect())
}
