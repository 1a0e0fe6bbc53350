//! `run --cleanup`: delete what a round pushed, so repeated experiments do not grow storage
//! (and cost).
//!
//! What was pushed is derived from the experiment file, not remembered: a push experiment
//! pushed its repository's tags (`TAG`, or `TAG-0…TAG-(N-1)`); a replay pushed into the
//! repositories its trace names (with the registry's `repo_prefix`), whose tags are listed
//! with the tags API. For each tag the manifest is fetched (its digest and the blobs it
//! references), then manifests are deleted by digest, then their blobs — the order the
//! distribution spec needs. Blobs uploaded by a replay without a manifest are not found
//! this way; distribution's garbage collector removes unreferenced blobs.
//!
//! A registry that does not allow deletion (405, `UNSUPPORTED`, 403) is reported in the
//! counts, never an error of the run. Distribution needs `storage.delete.enabled: true`,
//! and frees the bytes only when `registry garbage-collect` runs.

use std::collections::BTreeSet;
use std::path::Path;

use super::cells::Command;
use super::cells::{self, Cell};
use crate::client::{ClientError, OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::experiment::checkpoint::CleanupRecord;
use crate::experiment::config::{ExperimentFile, Kind};
use crate::oci::manifest::ParsedManifest;
use crate::oci::{Reference, Repository, Tag};
use crate::plan::catalog::Catalog;
use crate::plan::{Naming, RepoMap};
use crate::shutdown::Shutdown;
use crate::trace::{Interner, Item, ReadOptions, TraceInput, TraceReader};

/// The tags of a repository to clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tags {
    /// Exactly these.
    Known(Vec<Tag>),
    /// Whatever the tags API lists.
    Listed,
}

/// One repository to clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub repo: Repository,
    pub tags: Tags,
}

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
    match cells::parse(&argv).map_err(anyhow::Error::msg)? {
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
            Ok(vec![Target {
                repo: p.repo,
                tags: Tags::Known(tags),
            }])
        }
        Command::Replay(r) => {
            let options = ReadOptions {
                skip_invalid: true,
                replay_failed: true,
                limit_requests: r.limit_requests,
                limit_duration: r.limit_duration,
                ..ReadOptions::default()
            };
            let repos =
                trace_repositories(r.traces.clone(), options, r.repo_prefix.clone()).await?;
            Ok(repos
                .into_iter()
                .map(|repo| Target {
                    repo,
                    tags: Tags::Listed,
                })
                .collect())
        }
        _ => Ok(Vec::new()),
    }
}

enum Outcome {
    Deleted,
    NotFound,
    Refused,
    Failed(String),
}

fn outcome(r: Result<(), ClientError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Deleted,
        Err(ClientError::Status { status: 404, .. }) => Outcome::NotFound,
        Err(ClientError::Status { status, errors, .. })
            if matches!(status, 403 | 405) || errors.iter().any(|e| e.code == "UNSUPPORTED") =>
        {
            Outcome::Refused
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn note(record: &mut CleanupRecord, message: String) {
    if record.messages.len() < 5 && !record.messages.contains(&message) {
        record.messages.push(message);
    }
}

fn count(record: &mut CleanupRecord, what: &str, o: Outcome) -> bool {
    match o {
        Outcome::Deleted => return true,
        Outcome::NotFound => record.not_found += 1,
        Outcome::Refused => {
            record.refused += 1;
            note(
                record,
                format!("the registry does not allow deleting {what}s (405/UNSUPPORTED); with distribution set storage.delete.enabled: true"),
            );
        }
        Outcome::Failed(m) => {
            record.errors += 1;
            note(record, format!("{what} delete: {m}"));
        }
    }
    false
}

/// Deletes the targets' manifests, then their blobs.
pub async fn clean(
    client: &RegistryClient,
    registry: &str,
    targets: &[Target],
    shutdown: &Shutdown,
) -> CleanupRecord {
    let mut record = CleanupRecord {
        registry: registry.to_owned(),
        ..CleanupRecord::default()
    };
    for target in targets {
        // Every request of a target races the stop: a registry that stops answering never
        // holds the run past it.
        let Some(go_on) = shutdown
            .race(clean_target(client, target, &mut record))
            .await
        else {
            note(&mut record, "stopped before the cleanup ended".into());
            break;
        };
        if !go_on {
            break;
        }
    }
    record
}

/// Deletes one target's manifests, then its blobs; `false` when the registry cannot be
/// reached (the other targets would fail the same way).
async fn clean_target(
    client: &RegistryClient,
    target: &Target,
    record: &mut CleanupRecord,
) -> bool {
    let ctx = OpCtx::default();
    let repo = &target.repo;
    let tags: Vec<Tag> = match &target.tags {
        Tags::Known(t) => t.clone(),
        Tags::Listed => match client.tag_list(repo, None, ctx).await {
            Ok(list) => list.iter().filter_map(|t| t.parse().ok()).collect(),
            Err(ClientError::Status { status: 404, .. }) => Vec::new(),
            Err(e) => {
                record.errors += 1;
                note(record, format!("{repo}: listing tags: {e}"));
                // Unreachable: the other repositories would fail the same way.
                return !matches!(e, ClientError::Transport(_));
            }
        },
    };
    let mut manifests: BTreeSet<Digest> = BTreeSet::new();
    let mut blobs: BTreeSet<Digest> = BTreeSet::new();
    for tag in tags {
        let reference = Reference::Tag(tag.clone());
        match client.manifest_get(repo, &reference, ctx).await {
            Ok(m) => {
                manifests.insert(m.digest());
                match ParsedManifest::parse(&m.bytes, m.media_type()) {
                    Ok(ParsedManifest::Index {
                        manifests: children,
                    }) => {
                        for child in children {
                            let r = Reference::Digest(child.digest.clone());
                            if let Ok(c) = client.manifest_get(repo, &r, ctx).await {
                                if let Ok(p) = ParsedManifest::parse(&c.bytes, c.media_type()) {
                                    blobs.extend(p.blobs().into_iter().map(|d| d.digest));
                                }
                            }
                            manifests.insert(child.digest);
                        }
                    }
                    Ok(image) => blobs.extend(image.blobs().into_iter().map(|d| d.digest)),
                    Err(e) => note(record, format!("{repo}:{tag}: {e}")),
                }
            }
            Err(ClientError::Status { status: 404, .. }) => record.not_found += 1,
            Err(e) => {
                record.errors += 1;
                note(record, format!("{repo}:{tag}: {e}"));
            }
        }
    }
    for digest in &manifests {
        let o = outcome(client.manifest_delete(repo, digest, ctx).await);
        if count(record, "manifest", o) {
            record.manifests_deleted += 1;
        }
    }
    for digest in &blobs {
        let o = outcome(client.blob_delete(repo, digest, ctx).await);
        if count(record, "blob", o) {
            record.blobs_deleted += 1;
        }
    }
    true
}
