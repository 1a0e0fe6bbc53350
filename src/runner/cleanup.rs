//! `run --cleanup`: delete what a round pushed, so repeated experiments do not grow storage
//! (and cost).
//!
//! What was pushed is derived from the experiment file, not remembered: the driver says
//! what each experiment pushes ([`Pushed`]): a push experiment its repository's tags, a
//! replay into the repositories its trace names (with the registry's `repo_prefix`), whose
//! tags are listed with the tags API. The walk that deletes them is
//! `exec::cleanup`. Blobs uploaded by a replay without a manifest are not found
//! this way; distribution's garbage collector removes unreferenced blobs.
//!
//! A registry that does not allow deletion (405, `UNSUPPORTED`, 403) is reported in the
//! counts, never an error of the run. Distribution needs `storage.delete.enabled: true`,
//! and frees the bytes only when `registry garbage-collect` runs.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::driver::{CellDriver, Pushed, Tags, Target};
use super::Runner;
use crate::client::{ClientOptions, RegistryClient, Verify};
use crate::exec::cleanup::{clean, Cleaned};
use crate::experiment::checkpoint::{CellStatus, CleanupRecord};
use crate::experiment::config::Kind;
use crate::metrics::AggregatorHandle;
use crate::oci::Repository;
use crate::plan::catalog::Catalog;
use crate::plan::{Naming, RepoMap};
use crate::trace::{Interner, Item, ReadOptions, TraceInput, TraceReader};

/// The repositories a replay's trace names, read once (limits applied as in the run).
async fn trace_repositories(
    traces: Vec<PathBuf>,
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

/// Where the cleanup looks for what was pushed.
async fn targets(pushed: Pushed) -> anyhow::Result<Vec<Target>> {
    match pushed {
        Pushed::Nothing => Ok(Vec::new()),
        Pushed::Tags(target) => Ok(vec![target]),
        Pushed::Trace {
            traces,
            options,
            prefix,
        } => Ok(trace_repositories(traces, options, prefix)
            .await?
            .into_iter()
            .map(|repo| Target {
                repo,
                tags: Tags::Listed,
            })
            .collect()),
    }
}

impl<D: CellDriver> Runner<'_, D> {
    /// `--cleanup` for every registry of round `label` that the round pushed to.
    pub(super) async fn clean_round(&mut self, label: u64) -> Vec<CleanupRecord> {
        let mut records = Vec::new();
        for (r, reg) in self.file.registries.iter().enumerate() {
            // Only where this round pushed something: a registry none of whose cells got a
            // result (unreachable, credentials refused) is left alone.
            let pushed = self.cp.cells.iter().any(|c| {
                c.round == label
                    && c.registry == reg.name
                    && matches!(
                        c.status,
                        CellStatus::Ok | CellStatus::Failed | CellStatus::Interrupted
                    )
            });
            if !pushed {
                continue;
            }
            let targets = self.registry_targets(r).await;
            if targets.is_empty() {
                continue;
            }
            let record = match self.cleanup_client(r).await {
                Ok((client, aggregator)) => {
                    let cleaned = clean(&client, &targets, &self.shutdown).await;
                    drop(client);
                    // The samples of deletions are not a measurement; they are dropped.
                    drop(aggregator.finish().await);
                    record_of(&reg.name, cleaned)
                }
                Err(message) => CleanupRecord {
                    registry: reg.name.clone(),
                    errors: 1,
                    messages: vec![message],
                    ..Default::default()
                },
            };
            self.note(format_args!(
                "cleanup {}: {} manifests and {} blobs deleted, {} refused, {} not found, {} errors{}",
                reg.name,
                record.manifests_deleted,
                record.blobs_deleted,
                record.refused,
                record.not_found,
                record.errors,
                if record.messages.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", record.messages.join("; "))
                }
            ));
            records.push(record);
        }
        records
    }

    /// What every experiment on registry `r` pushed (found once per run and kept).
    async fn registry_targets(&mut self, r: usize) -> Vec<Target> {
        let mut all = Vec::new();
        for (e, exp) in self.file.experiments.iter().enumerate() {
            if !exp.registries.contains(&r) || exp.spec.kind == Kind::Pull {
                continue;
            }
            if !self.targets.contains_key(&(e, r)) {
                let found = match self.driver.pushed(self.file, e, r) {
                    Ok(pushed) => targets(pushed).await,
                    Err(m) => Err(anyhow::Error::msg(m)),
                };
                match found {
                    Ok(t) => {
                        self.targets.insert((e, r), t);
                    }
                    Err(err) => {
                        eprintln!("creb-rs: cleanup: experiment '{}': {err:#}", exp.spec.name);
                        continue;
                    }
                }
            }
            all.extend(self.targets[&(e, r)].iter().cloned());
        }
        all
    }

    /// A client allowed to delete in registry `index`, with the aggregator its samples go to.
    async fn cleanup_client(
        &self,
        index: usize,
    ) -> Result<(RegistryClient, AggregatorHandle), String> {
        let config = self.driver.registry(&self.file.registries[index])?;
        let (recorder, aggregator) = crate::metrics::AggregatorBuilder::default().spawn();
        let options = ClientOptions {
            push_scopes: true,
            verify: Verify::None,
            ..ClientOptions::default()
        };
        match config.connect(recorder, options, 4, &self.shutdown).await {
            Ok(connection) => Ok((connection.client, aggregator)),
            Err(e) => {
                drop(aggregator.finish().await);
                Err(format!("{e:#}"))
            }
        }
    }
}

/// A cleanup's counts as the checkpoint keeps them, by registry.
fn record_of(registry: &str, c: Cleaned) -> CleanupRecord {
    CleanupRecord {
        registry: registry.to_owned(),
        manifests_deleted: c.manifests_deleted,
        blobs_deleted: c.blobs_deleted,
        refused: c.refused,
        not_found: c.not_found,
        errors: c.errors,
        messages: c.messages,
    }
}
