//! The OCI Distribution v2 client: protocol (`client`), pure header parsing (`headers`),
//! manifests, digests, names, typed errors, and the transport seam with its real (reqwest)
//! and scripted implementations.

pub mod client;
pub mod digest;
pub mod error;
pub mod headers;
pub mod hyper_transport;
pub mod manifest;
pub mod net;
mod plain_pool;
pub mod reference;
pub mod reqwest_transport;
pub mod retry;
pub mod scripted;
pub mod transport;

pub use client::{
    registry_base, BlobSource, ClientOptions, FetchedManifest, HeadInfo, MountOutcome, OpCtx,
    RegistryClient, UploadMode, UploadReport,
};
pub use digest::Digest;
pub use error::ClientError;
pub use reference::{Reference, Repository, Tag};
