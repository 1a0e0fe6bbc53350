//! The pull driver: each image's manifest (through an index to the platform's image), then
//! every blob it references, read to the end and verified, with at most `concurrency` blob
//! downloads in flight across all images. An `image_pull` session sample runs from the
//! manifest request to the last blob's last byte.
//!
//! Over several endpoints ([`Sources`]) manifests come from the first, each blob from the
//! endpoint the router names, so one image's layers download from several registries at
//! once; the session runs until the last of them.

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::bounded::{drive, Bounds, Driven, JobEnv};
use super::unpack::{pull_unpacking, Pool, Shared, UnpackWork};
use crate::client::{ClientError, OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::metrics::{ErrorKind, ErrorLog, Op, Outcome, Sample};
use crate::oci::manifest::{ParsedManifest, Platform};
use crate::oci::{Reference, Repository};
use crate::route::{Object, Request, Router};

/// Which images to pull.
#[derive(Debug, Clone)]
pub enum PullTargets {
    /// These references.
    References(Vec<String>),
    /// Every tag the registry lists, asked `page_size` at a time.
    AllTags { page_size: u32 },
}

/// What `pull` fetches.
#[derive(Debug, Clone)]
pub struct PullWork {
    pub repo: Repository,
    /// List and fetch each image's referrers.
    pub referrers: bool,
    /// The platform to pick from an index (`--platform`); `None`: this machine's, else the
    /// index's first image.
    pub platform: Option<Platform>,
    /// `--unpack`: each image's layers unpacked as a runtime does.
    pub unpack: Option<UnpackWork>,
}

/// The clients of a pull (one per endpoint) and how blobs are spread over them.
#[allow(missing_debug_implementations)] // clients hold transports that are not `Debug`
pub struct Sources {
    pub clients: Vec<RegistryClient>,
    pub router: Router,
}

impl Sources {
    /// The client manifests and tag lists come from.
    pub fn first(&self) -> &RegistryClient {
        &self.clients[0]
    }

    /// The client for layer `position` of an image.
    fn blob(&self, position: usize, digest: &Digest) -> &RegistryClient {
        if self.clients.len() == 1 {
            return &self.clients[0];
        }
        let i = self.router.candidates(&Request {
            seq: position as u64,
            client: 0,
            object: Object::Blob(digest.as_str()),
            write: false,
        })[0];
        &self.clients[i]
    }
}

/// The references `targets` names: as given, or every tag the registry lists.
pub async fn references(
    sources: &Sources,
    repo: &Repository,
    targets: &PullTargets,
) -> Result<Vec<Reference>, String> {
    let names = match targets {
        PullTargets::References(r) => r.clone(),
        PullTargets::AllTags { page_size } => sources
            .first()
            .tag_list(repo, Some(*page_size), OpCtx::for_repository(repo))
            .await
            .map_err(|e| format!("cannot list the tags of {repo}: {e}"))?,
    };
    Ok(names.iter().filter_map(|r| r.parse().ok()).collect())
}

/// Pulls every image of `references`, at most `bounds.concurrency` images and blob
/// downloads in flight. Images still in flight when a stop's grace runs out are recorded as
/// cancelled.
pub async fn pull_images(
    sources: &Sources,
    work: &PullWork,
    references: Vec<Reference>,
    bounds: Bounds,
    env: JobEnv<'_>,
) -> Driven {
    let permits = Semaphore::new(bounds.concurrency.max(1));
    let pool = work.unpack.as_ref().map(Pool::new);
    let driven = drive(
        references,
        bounds,
        env.shutdown,
        |_| (),
        |reference| {
            let permits = &permits;
            let pool = pool.as_ref();
            async move { pull_image(sources, work, &reference, permits, pool, env).await }
        },
        |()| {},
    )
    .await;
    for &(started, ()) in &driven.cancelled {
        let sample = Sample::unanswered(Op::ImagePull, ErrorKind::Cancelled, None, started);
        sources.first().recorder().record(sample).await;
    }
    driven
}

/// Resolves a reference to an image manifest (through an index if needed, picking
/// `platform`'s image as clients do): the manifest and its digest. An index without the
/// platform asked for is an error naming the platforms it has.
async fn fetch_image_manifest(
    client: &RegistryClient,
    repo: &Repository,
    reference: &Reference,
    platform: Option<&Platform>,
) -> Result<(ParsedManifest, Digest), ClientError> {
    let fetched = client
        .manifest_get(repo, reference, OpCtx::for_repository(repo))
        .await?;
    let picked =
        fetched
            .parsed
            .pick_platform(platform)
            .map_err(|message| ClientError::Unexpected {
                kind: ErrorKind::Other,
                message,
            })?;
    if let Some(entry) = picked {
        let inner = Reference::Digest(entry.digest.clone());
        let fetched = client
            .manifest_get(repo, &inner, OpCtx::for_repository(repo))
            .await?;
        let digest = fetched.digest();
        return Ok((fetched.parsed, digest));
    }
    let digest = fetched.digest();
    Ok((fetched.parsed, digest))
}

/// Lists the referrers of the image manifest `subject` and fetches each one's manifest
/// (verified against its digest). Failures are counted in their own operations.
async fn pull_referrers(
    client: &RegistryClient,
    repo: &Repository,
    subject: &Digest,
    errors: &ErrorLog,
) {
    match client
        .referrers(repo, subject, OpCtx::for_repository(repo))
        .await
    {
        Ok(Some(found)) => {
            for d in found {
                let reference = Reference::Digest(d.digest.clone());
                if let Err(e) = client
                    .manifest_get(repo, &reference, OpCtx::for_repository(repo))
                    .await
                {
                    errors.note(format!("{repo}@{}: referrer: {e}", d.digest));
                }
            }
        }
        Ok(None) => {}
        Err(e) => errors.note(format!("{repo}@{subject}: referrers: {e}")),
    }
}

/// Downloads every blob of `manifest`, each holding one of `permits`: the bytes received,
/// and the first failure, if any.
async fn pull_blobs(
    sources: &Sources,
    repo: &Repository,
    manifest: &ParsedManifest,
    permits: &Semaphore,
    env: JobEnv<'_>,
) -> (u64, Option<ClientError>) {
    let blobs = manifest.blobs();
    let downloads = blobs.iter().enumerate().map(|(i, d)| async move {
        let client = sources.blob(i, &d.digest);
        let Ok(_permit) = permits.acquire().await else {
            return Err(ClientError::Cancelled);
        };
        if env.shutdown.is_cancelled() {
            return Err(ClientError::Cancelled);
        }
        let expected = (d.size > 0).then_some(d.size);
        client
            .blob_get(repo, &d.digest, expected, OpCtx::for_repository(repo))
            .await
            .map_err(|e| {
                env.errors.note(format!("{repo}@{}: {e}", d.digest));
                e
            })
    });
    let results = futures_util::future::join_all(downloads).await;
    let received = results.iter().filter_map(|r| r.as_ref().ok()).sum();
    (received, results.into_iter().find_map(Result::err))
}

/// Pulls one image; records the `image_pull` session (and `image_ready` with `--unpack`).
async fn pull_image(
    sources: &Sources,
    work: &PullWork,
    reference: &Reference,
    permits: &Semaphore,
    pool: Option<&Pool>,
    env: JobEnv<'_>,
) {
    let repo = &work.repo;
    let start = Instant::now();
    let mut received = 0u64;
    let client = sources.first();
    let mut subject = None;
    let mut uncompressed = None;
    let mut downloaded = None;
    let platform = work.platform.as_ref();
    let outcome = match fetch_image_manifest(client, repo, reference, platform).await {
        Err(e) => {
            env.errors
                .note(format!("{repo}:{reference}: manifest: {e}"));
            Outcome::Error(e.kind())
        }
        Ok((manifest, digest)) => {
            subject = Some(digest);
            match (&work.unpack, pool, &manifest) {
                (Some(unpack), Some(pool), ParsedManifest::Image { config, layers }) => {
                    let name = format!("{repo}:{reference}");
                    let shared = Shared {
                        client: sources.first(),
                        repo,
                        downloads: permits,
                        pool,
                        work: unpack,
                    };
                    let u = pull_unpacking(shared, &name, config.as_ref(), layers, env).await;
                    received = u.received;
                    uncompressed = Some(u.uncompressed);
                    downloaded = u.downloaded;
                    u.failed.map_or(Outcome::Ok, Outcome::Error)
                }
                _ => {
                    let (bytes, failed) = pull_blobs(sources, repo, &manifest, permits, env).await;
                    received = bytes;
                    failed.map_or(Outcome::Ok, |e| Outcome::Error(e.kind()))
                }
            }
        }
    };
    if outcome == Outcome::Error(ErrorKind::Cancelled) {
        return;
    }
    if let (true, Some(subject)) = (work.referrers, &subject) {
        pull_referrers(client, repo, subject, env.errors).await;
    }
    env.progress.add_done(1);
    if !outcome.is_ok() {
        env.progress.add_error();
    }
    let mut sample = Sample::session(Op::ImagePull, outcome, start, 0, received);
    // Unpacking, the pull ends at its last byte, not at its last layer applied.
    sample.timing.end = downloaded.unwrap_or(sample.timing.end);
    client.recorder().record(sample).await;
    if work.unpack.is_some() {
        // From the same start: the time until the image could run.
        let ready = Sample::session(Op::ImageReady, outcome, start, 0, uncompressed.unwrap_or(0));
        client.recorder().record(ready).await;
    }
}
