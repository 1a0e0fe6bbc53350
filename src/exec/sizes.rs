//! `trace import --sizes-from`: the size of every uploaded and mounted blob, asked of the
//! registry the logs came from (a HEAD each, a few in flight), before names are
//! anonymized. A blob the registry no longer has, a HEAD that fails, or one that claims
//! more than [`MAX_OBJECT_SIZE`] stays unsized and is counted as such by the import.

use std::collections::HashMap;
use std::time::Duration;

use super::bounded::{drive, Bounds};
use crate::client::{OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::oci::Repository;
use crate::shutdown::Shutdown;
use crate::trace::record::MAX_OBJECT_SIZE;

/// What the HEADs found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sized {
    /// Size by digest (`sha256:…`).
    pub sizes: HashMap<String, u64>,
    /// Blobs the registry does not have (404), HEADs that failed, names that are not a
    /// repository and a digest.
    pub missing: u64,
    pub failed: u64,
    pub invalid: u64,
    /// Answers whose size is beyond [`MAX_OBJECT_SIZE`]: not believed, left unknown.
    pub absurd: u64,
}

/// HEADs `objects` ((repository, digest) as logged) on `client`, `concurrency` at once; a
/// stop ends it with what was learned.
pub async fn head_sizes(
    client: &RegistryClient,
    objects: Vec<(String, String)>,
    concurrency: usize,
    shutdown: &Shutdown,
) -> Sized {
    let mut out = Sized::default();
    let mut jobs = Vec::with_capacity(objects.len());
    for (repo, digest) in objects {
        match (repo.parse::<Repository>(), digest.parse::<Digest>()) {
            (Ok(r), Ok(d)) => jobs.push((r, d)),
            _ => out.invalid += 1,
        }
    }
    let bounds = Bounds {
        concurrency,
        grace: Duration::from_secs(5),
    };
    drive(
        jobs,
        bounds,
        shutdown,
        |_| (),
        |(repo, digest)| async move {
            let head = client.blob_head(&repo, &digest, OpCtx::default()).await;
            (digest, head)
        },
        |(digest, head)| match head {
            Ok(Some(info)) => match info.size {
                Some(size) if size > MAX_OBJECT_SIZE => out.absurd += 1,
                Some(size) => {
                    out.sizes.insert(digest.to_string(), size);
                }
                None => out.failed += 1,
            },
            Ok(None) => out.missing += 1,
            Err(_) => out.failed += 1,
        },
    )
    .await;
    out
}
