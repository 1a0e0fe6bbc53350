//! The `config` block of `summary.json` and `meta.json`: what a run was configured to do,
//! in the file contract's own types (no secret in them). Each load command builds its block
//! from its domain configuration (`ReplayConfig::config_block`, the push's and pull's
//! settings); the block's keys are the contract, held by `schema/summary.schema.json`, so
//! renaming a field of a setting type changes nothing written until its block says so.
//!
//! Nested values keep the shape of the lower-layer setting they name (the transport's
//! timeouts, the retry policy, the plan's options, the route, the size scale): those types
//! are serialized as they always were, and the schema pins them too.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::auth::credentials::CredentialInfo;
use crate::client::retry::RetryPolicy;
use crate::client::Verify;
use crate::content::layer::LayerForm;
use crate::net::TransportConfig;
use crate::oci::manifest::ManifestFormat;
use crate::oci::{Repository, Tag, UploadMode};
use crate::plan::catalog::SizeScale;
use crate::plan::PlanOptions;
use crate::route::{RouteKind, RouteOptions};

/// A run's `config` block.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RunConfig {
    Replay(Box<ReplayBlock>),
    Push(Box<PushBlock>),
    Pull(Box<PullBlock>),
    /// As read back from a result (a merge carries its first host's).
    Read(serde_json::Value),
}

impl RunConfig {
    /// The block as JSON, as the files hold it.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// What reports read back of a result's `config` block, in its types. The block itself
/// stays the JSON document the files hold: hashed with its keys sorted, compared key by key
/// and carried whole by a merge, whichever command wrote it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConfigFacts {
    /// How blob reads were checked (`pull`, `replay`).
    #[serde(default)]
    pub verify: Option<String>,
    /// Blob and upload sizes relative to the trace's (a replay at another scale).
    #[serde(default)]
    pub sizes: Option<SizeScale>,
}

impl ConfigFacts {
    /// The facts of `config` (none of a block that does not hold them).
    pub fn of(config: &serde_json::Value) -> ConfigFacts {
        ConfigFacts::deserialize(config).unwrap_or_default()
    }
}

/// The registry a run used: its endpoints, the transport, the retry policy.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryBlock {
    /// The (first) endpoint.
    pub base: Url,
    /// Every endpoint, in the order given (only when there are several).
    #[serde(skip_serializing_if = "one_or_none")]
    pub endpoints: Vec<Url>,
    pub transport: TransportConfig,
    pub retry: RetryPolicy,
}

fn one_or_none(endpoints: &[Url]) -> bool {
    endpoints.len() <= 1
}

/// `replay`'s block (and each step's of `capacity`).
#[derive(Debug, Clone, Serialize)]
pub struct ReplayBlock {
    pub registry: RegistryBlock,
    pub credentials: CredentialInfo,
    pub traces: Vec<PathBuf>,
    /// `delay` or `stress`.
    pub mode: &'static str,
    pub speed: f64,
    pub concurrency: usize,
    pub prewarm_concurrency: usize,
    /// `all`, `prewarm` or `run`.
    pub phase: &'static str,
    pub seed: u64,
    pub limit_requests: Option<u64>,
    pub limit_duration_s: Option<f64>,
    pub skip_invalid: bool,
    pub replay_failed: bool,
    pub plan: PlanOptions,
    /// How blobs are generated: `{"compression": "gzip", "ratio": 0.35}`.
    pub layer_form: LayerForm,
    /// Blob and upload sizes relative to the trace's (absent when they are the trace's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizes: Option<SizeScale>,
    pub max_lateness_ms: Option<u64>,
    pub grace_s: f64,
    pub start_at: Option<String>,
    pub verify: Verify,
    pub strict: bool,
    /// Several endpoints: routing and failure handling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingBlock>,
    /// The part of the trace's time the run replayed (absent: all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowBlock>,
    /// `--unpack`: how the layers of the run's pulls were unpacked (absent: they were not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpack: Option<UnpackBlock>,
    /// `--replica`: the replicas watched for each image the run pushed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaBlock>,
}

/// The replicas watched (`--replica`) and how.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaBlock {
    pub replicas: Vec<String>,
    pub poll_s: f64,
    pub timeout_s: f64,
    pub max_watches: usize,
}

/// How layers were unpacked (`--unpack`).
#[derive(Debug, Clone, Serialize)]
pub struct UnpackBlock {
    /// Where the files were written (`--unpack-dir`); absent: every entry was read and
    /// discarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    pub keep_unpacked: bool,
    /// Layers unpacked at once.
    pub workers: usize,
    /// The decompression bound: a layer's tar at most `bound_ratio` times its size, never
    /// less than `bound_floor` bytes.
    pub bound_ratio: u64,
    pub bound_floor: u64,
}

/// Routing over several endpoints.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoutingBlock {
    pub route: RouteOptions,
    pub endpoint_down_after: u32,
    pub probe_interval_s: f64,
    pub failover: bool,
}

/// A window of the trace's time, in seconds from its first record.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WindowBlock {
    pub from_s: f64,
    /// To the trace's end when absent.
    pub length_s: Option<f64>,
}

impl WindowBlock {
    pub fn new(from: Duration, length: Option<Duration>) -> WindowBlock {
        WindowBlock {
            from_s: from.as_secs_f64(),
            length_s: length.map(|l| l.as_secs_f64()),
        }
    }
}

/// `push`'s block.
#[derive(Debug, Clone, Serialize)]
pub struct PushBlock {
    pub registry: RegistryBlock,
    pub credentials: CredentialInfo,
    pub repo: Repository,
    pub tag: Tag,
    pub images: u64,
    pub layers: u64,
    pub layer_size: u64,
    pub mount_from: Option<Repository>,
    pub manifest_format: ManifestFormat,
    /// How the layers are made: `{"compression": "gzip", "ratio": 0.35}`.
    pub layer_form: LayerForm,
    /// Layers too small to be a tar of their compression, pushed as plain bytes.
    pub raw_layers: u64,
    /// The platforms of each image (`--platforms`; empty: one image, no index).
    pub platforms: Vec<String>,
    pub seed: u64,
    pub upload: UploadMode,
    /// When a layer's digest is computed: `first` or `while_sending`.
    pub hash: &'static str,
    pub attach: u64,
    pub concurrency: usize,
    /// `--replica`: the replicas watched for each pushed image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<ReplicaBlock>,
}

/// `pull`'s block.
#[derive(Debug, Clone, Serialize)]
pub struct PullBlock {
    pub registry: RegistryBlock,
    pub credentials: CredentialInfo,
    pub repo: Repository,
    pub targets: PullTargetsBlock,
    pub concurrency: usize,
    pub verify: Verify,
    pub referrers: bool,
    /// The platform picked from an index (`--platform`), when one was asked for.
    pub platform: Option<String>,
    /// Several endpoints: how blobs are spread over them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteKind>,
    /// `--unpack`: how each image's layers were unpacked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpack: Option<UnpackBlock>,
}

/// What a pull fetched.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PullTargetsBlock {
    /// These references.
    References(Vec<String>),
    /// Every tag the registry lists, asked `page_size` at a time.
    AllTags { page_size: u32 },
}
