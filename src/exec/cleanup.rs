//! The cleanup walk of `run --cleanup`: what a round pushed, deleted. For each tag of a
//! target the manifest is fetched (its digest and the blobs it references, through an
//! index's children as the pull's descent does), then manifests are deleted by digest, then
//! their blobs: the order the distribution spec needs. A registry that does not allow
//! deletion (405, `UNSUPPORTED`, 403) is counted, never an error; every request races the
//! stop, target by target.

use std::collections::BTreeSet;

use crate::client::{ClientError, OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::oci::manifest::ParsedManifest;
use crate::oci::{Reference, Repository, Tag};
use crate::shutdown::Shutdown;

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

/// What a cleanup did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub manifests_deleted: u64,
    pub blobs_deleted: u64,
    /// Deletions the registry does not allow (405, `UNSUPPORTED`, 403).
    pub refused: u64,
    /// Already gone.
    pub not_found: u64,
    pub errors: u64,
    /// The first few distinct messages.
    pub messages: Vec<String>,
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

fn note(record: &mut Cleaned, message: String) {
    if record.messages.len() < 5 && !record.messages.contains(&message) {
        record.messages.push(message);
    }
}

fn count(record: &mut Cleaned, what: &str, o: Outcome) -> bool {
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
pub async fn clean(client: &RegistryClient, targets: &[Target], shutdown: &Shutdown) -> Cleaned {
    let mut record = Cleaned::default();
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

/// What a clean-up deletes in one repository: the manifests its tags name (an index's
/// children too) and the blobs they reference.
#[derive(Default)]
struct Found {
    manifests: BTreeSet<Digest>,
    blobs: BTreeSet<Digest>,
}

impl Found {
    /// Adds what `tag` names (an unknown tag is counted as not found, a failure noted).
    async fn tag(
        &mut self,
        client: &RegistryClient,
        repo: &Repository,
        tag: Tag,
        record: &mut Cleaned,
    ) {
        let ctx = OpCtx::default;
        let reference = Reference::Tag(tag.clone());
        let m = match client.manifest_get(repo, &reference, ctx()).await {
            Ok(m) => m,
            Err(ClientError::Status { status: 404, .. }) => {
                record.not_found += 1;
                return;
            }
            Err(e) => {
                record.errors += 1;
                note(record, format!("{repo}:{tag}: {e}"));
                return;
            }
        };
        self.manifests.insert(m.digest());
        match ParsedManifest::parse(&m.bytes, m.media_type()) {
            Ok(ParsedManifest::Index {
                manifests: children,
            }) => {
                for child in children {
                    let r = Reference::Digest(child.digest.clone());
                    if let Ok(c) = client.manifest_get(repo, &r, ctx()).await {
                        if let Ok(p) = ParsedManifest::parse(&c.bytes, c.media_type()) {
                            self.blobs.extend(p.blobs().into_iter().map(|d| d.digest));
                        }
                    }
                    self.manifests.insert(child.digest);
                }
            }
            Ok(image) => self
                .blobs
                .extend(image.blobs().into_iter().map(|d| d.digest)),
            Err(e) => note(record, format!("{repo}:{tag}: {e}")),
        }
    }
}

/// Deletes one target's manifests, then its blobs; `false` when the registry cannot be
/// reached (the other targets would fail the same way).
async fn clean_target(client: &RegistryClient, target: &Target, record: &mut Cleaned) -> bool {
    let ctx = OpCtx::default;
    let repo = &target.repo;
    let tags: Vec<Tag> = match &target.tags {
        Tags::Known(t) => t.clone(),
        Tags::Listed => match client.tag_list(repo, None, ctx()).await {
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
    let mut found = Found::default();
    for tag in tags {
        found.tag(client, repo, tag, record).await;
    }
    let Found { manifests, blobs } = found;
    for digest in &manifests {
        let o = outcome(client.manifest_delete(repo, digest, ctx()).await);
        if count(record, "manifest", o) {
            record.manifests_deleted += 1;
        }
    }
    for digest in &blobs {
        let o = outcome(client.blob_delete(repo, digest, ctx()).await);
        if count(record, "blob", o) {
            record.blobs_deleted += 1;
        }
    }
    true
}
