//! The plan: a pure function of (trace, seed, shard, options) → operations with intended
//! offsets. No clock, no socket: every host computes the same plan and the same digests.
//!
//! Pass 1 ([`catalog`]) learns objects, sizes, layers and uploads over the whole trace;
//! pass 2 ([`Planner`]) streams the trace's items again (the replay spools pass 1's items
//! for it, see [`crate::trace::spool`]) and turns this shard's records into
//! [`PlannedOp`]s, accounting for every record exactly once:
//! `records = replayed + folded + Σ skipped` (replayed and late/interrupted are settled
//! by the executor, which reports what it actually ran).
//!
//! This file holds the plan's types; [`Naming`] gives trace names registry names, the
//! manifest functions build what a push sends and a read expects, and [`Planner`] is pass 2.

pub mod catalog;
pub mod footprint;
pub mod image;
pub mod linker;
mod manifests;
mod naming;
mod planner;
pub mod prewarm;
mod set_cache;
pub mod sorted_map;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::oci::manifest::ManifestFormat;
use crate::oci::UploadMode;
use crate::oci::{Reference, Repository, Tag};

pub use manifests::{
    manifest_over, push_manifest, push_recipe, read_manifest_identity, read_manifest_layers,
    BuiltManifest, ManifestBody, ManifestRecipe, RecipeLayer,
};
pub use naming::Naming;
pub use planner::Planner;

/// This host's part of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
}

impl ShardSpec {
    pub const ALL: ShardSpec = ShardSpec { index: 0, count: 1 };

    fn owns(&self, key: u64) -> bool {
        self.count <= 1 || key % u64::from(self.count) == u64::from(self.index)
    }
}

impl std::str::FromStr for ShardSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("'{s}' is not I/N (e.g. 0/4)"))?;
        let index: u32 = i.trim().parse().map_err(|_| format!("'{s}': bad index"))?;
        let count: u32 = n.trim().parse().map_err(|_| format!("'{s}': bad count"))?;
        if count == 0 || index >= count {
            return Err(format!("'{s}': need 0 <= I < N"));
        }
        Ok(ShardSpec { index, count })
    }
}

/// How records are assigned to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardBy {
    /// By client (`http.request.remoteaddr`): a client's sessions stay on one host.
    #[default]
    Client,
    /// By record position; an upload's records and a push stay with their first record.
    Record,
}

/// How blobs are uploaded during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum UploadPolicy {
    /// Chunked when the trace shows PATCHes (chunk = bytes / PATCH count), else monolithic.
    Trace,
    Monolithic,
    Chunked {
        chunk_size: u64,
    },
}

/// How trace repository names become registry repository names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoMap {
    /// Keep the trace's names, optionally under a prefix.
    Keep { prefix: Option<String> },
    /// Fold every repository into one; tags become unique per (repository, reference).
    Single { repository: Repository },
}

/// Options of the planning pass.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanOptions {
    pub shard: ShardSpec,
    pub shard_by: ShardBy,
    pub speed: f64,
    pub upload: UploadPolicy,
    pub repos: RepoMap,
    pub manifest_format: ManifestFormat,
    pub session_gap_ms: i64,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Ping,
    ManifestGet {
        repo: Repository,
        reference: Reference,
        /// The digest the answer must have: that of the manifest prewarm pushed, for a
        /// manifest the run itself never pushes (`None` for the others).
        expect: Option<crate::digest::Sha256Sum>,
    },
    ManifestHead {
        repo: Repository,
        reference: Reference,
    },
    /// A manifest PUT; waits for the uploads (`deps`, op sequence numbers) of its push.
    ManifestPut {
        repo: Repository,
        tag: Tag,
        manifest: ManifestBody,
        media_type: &'static str,
        deps: Vec<u64>,
    },
    /// A read of a blob whose content creb-rs generated (`content`, whose digest is
    /// `digest`): verified by comparing the body with it, or by its digest.
    BlobGet {
        repo: Repository,
        digest: Digest,
        content: ContentSpec,
        /// A layer's diff_id, as the config prewarm pushed lists it (what `--unpack`
        /// checks its tar against); `None` for content that is no layer.
        diff_id: Option<crate::digest::Sha256Sum>,
    },
    BlobHead {
        repo: Repository,
        digest: Digest,
    },
    BlobDelete {
        repo: Repository,
        digest: Digest,
    },
    BlobUpload {
        repo: Repository,
        digest: Digest,
        content: ContentSpec,
        mode: UploadMode,
        /// The manifest (repository, tag) of the push this upload belongs to: routed with
        /// it, so that the manifest's node holds the blob when the manifest is PUT.
        push: Option<(Repository, Tag)>,
    },
    TagList {
        repo: Repository,
    },
    /// A cross-repository mount of a blob prewarm put in `from`.
    BlobMount {
        repo: Repository,
        from: Repository,
        digest: Digest,
    },
    /// A manifest DELETE, of the manifest prewarm pushed for the trace's reference.
    ManifestDelete {
        repo: Repository,
        digest: Digest,
    },
}

/// Membership of an image session, for session latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionTag {
    /// The manifest GET that starts image pull `id`.
    PullHead(u64),
    /// A layer GET of image pull `id`.
    PullLayer(u64),
}

/// One operation of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedOp {
    /// Position in the plan (0, 1, 2, …), unique per shard.
    pub seq: u64,
    /// When it should start, after the replay's anchor (speed applied).
    pub offset: Duration,
    pub action: Action,
    /// Trace records carried out inside this operation besides its own.
    pub folded: u32,
    pub session: Option<SessionTag>,
    /// Stable hash of the trace client (`http.request.remoteaddr`), 0 if absent: the key of
    /// `--route client`.
    pub client: u64,
    /// The trace client as the trace names it (anonymized traces stay so), `None` if
    /// absent: whom the operation's figures are attributed to (taken by the operation's
    /// task for its sample).
    pub client_name: Option<std::sync::Arc<str>>,
    /// An image pull that no member joins after this operation's start (its client's pull
    /// of the same repository before this one, or one its session gap ended): closed as
    /// this operation starts, as a [`PlanItem::CloseSession`] right after it would close
    /// it, without an item and a message of its own.
    pub closes: Option<u64>,
}

impl PlannedOp {
    /// Trace records this operation stands for.
    pub fn records(&self) -> u64 {
        1 + u64::from(self.folded)
    }

    /// The image pull session this operation is a member of, if any.
    pub fn pull_session(&self) -> Option<u64> {
        match self.session {
            Some(SessionTag::PullHead(id) | SessionTag::PullLayer(id)) => Some(id),
            None => None,
        }
    }
}

/// What the planner yields: nearly always an operation, boxed where the planner makes it.
///
/// The operation crosses from the planner's thread to the executor's and into its task;
/// inline, its 216 bytes were copied at each step (a dozen `memcpy`s per operation, several
/// into states no longer in the cache), where the box moves as a word and is allocated
/// once.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanItem {
    Op(Box<PlannedOp>),
    /// No further layer will join image pull `id`.
    CloseSession(u64),
}

/// The planner's own share of the accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanCounts {
    /// Items of this shard (valid or not).
    pub records: u64,
    /// Operations emitted, and the records folded into them.
    pub ops: u64,
    pub folded: u64,
    pub skipped: BTreeMap<&'static str, u64>,
    /// Reads of a manifest prewarm pushed, given the digest they must find, and of those the
    /// digests made again (the manifest built and hashed: not in the planner's cache).
    pub expected_reads: u64,
    pub expected_made: u64,
}
