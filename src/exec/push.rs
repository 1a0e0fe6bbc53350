//! The push driver: generated images go up with at most `concurrency` blob uploads in
//! flight across all images, each image's blobs (HEAD, skip if present; mount if asked;
//! upload) before its manifest PUT. Every request and upload session is timed by the
//! client; an `image_push` session sample runs from the image's first blob request to the
//! manifest PUT's answer.

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::bounded::{drive, Bounds, Driven, JobEnv};
use super::replicate::{Pushed, Replicas};
use crate::client::{BlobSource, ClientError, MountOutcome, OpCtx, RegistryClient, UploadMode};
use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::metrics::{ErrorKind, ErrorLog, Event, Op, Outcome, Sample};
use crate::oci::manifest::{build_artifact, Descriptor, Platform, OCI_MANIFEST};
use crate::oci::Reference;
use crate::plan::image::{
    image_layers, plan_image, plan_index, plan_over, ImagePlan, ImageSpec, LayerDigests,
};

/// What `push` sends.
#[derive(Debug, Clone)]
pub struct PushWork {
    pub images: ImageSpec,
    pub upload: UploadMode,
    /// When a layer's digest is computed (`--hash`).
    pub hash: HashWhen,
    /// Artifacts pushed per image, referring to it (`--attach`).
    pub attach: u64,
}

/// When `push` computes a layer's digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashWhen {
    /// Before the image's first request, as a client whose layers are hashed already: each
    /// layer is HEADed (and mounted, with `--mount-from`) before it is uploaded.
    First,
    /// As the layer's bytes are generated and sent (POST, PATCHes, then the PUT carrying
    /// the digest): every byte generated and hashed once, no HEAD before a layer (there is
    /// no digest to ask about yet). The config, which names the layers' digests, follows
    /// them. Needs an upload whose digest comes after its body (`--chunk-size`).
    WhileSending,
}

impl HashWhen {
    pub fn name(self) -> &'static str {
        match self {
            HashWhen::First => "first",
            HashWhen::WhileSending => "while_sending",
        }
    }
}

/// What `--attach` pushes.
pub const ARTIFACT_TYPE: &str = "application/vnd.creb-rs.attachment.v1";

/// Planning an image generates and hashes all its layers. Up to this many bytes (about
/// 35 µs of hashing) and [`PLAN_INLINE_LAYERS`] layers that is done on the runtime; a
/// hand-off to the blocking pool costs two thread wake-ups, more than planning a small image.
const PLAN_INLINE_BYTES: u64 = 64 << 10;

/// Most layers planned on the runtime: each costs a few µs besides its bytes (its identity,
/// descriptor and place in the config and manifest).
const PLAN_INLINE_LAYERS: u64 = 16;

/// Pushes every image of `work`: at most `bounds.concurrency` images and blob uploads in
/// flight. Images still in flight when a stop's grace runs out are recorded as cancelled.
pub async fn push_images(
    client: &RegistryClient,
    work: &PushWork,
    bounds: Bounds,
    env: JobEnv<'_>,
    replicas: Option<&Replicas>,
) -> Driven {
    let permits = Semaphore::new(bounds.concurrency.max(1));
    let driven = drive(
        0..work.images.images,
        bounds,
        env.shutdown,
        |_| (),
        |index| push_image(client, work, index, &permits, env, replicas),
        |()| {},
    )
    .await;
    for &(started, ()) in &driven.cancelled {
        let sample = Sample::unanswered(Op::ImagePush, ErrorKind::Cancelled, None, started);
        client.recorder().record(sample).await;
    }
    driven
}

/// Pushes one blob: HEAD, then mount (if configured) or upload.
async fn push_blob(
    client: &RegistryClient,
    work: &PushWork,
    digest: &Digest,
    source: &BlobSource,
) -> Result<(), ClientError> {
    let repo = &work.images.repo;
    let ctx = || OpCtx::for_repository(repo);
    if client.blob_head(repo, digest, ctx()).await?.is_some() {
        client.recorder().event(Event::BlobExists).await;
        return Ok(());
    }
    let mut session = None;
    if let Some(from) = &work.images.mount_from {
        match client.mount_blob(repo, digest, from, ctx()).await? {
            MountOutcome::Mounted => return Ok(()),
            MountOutcome::Session(url) => session = Some(url),
            MountOutcome::Refused => {}
        }
    }
    client
        .upload_blob(repo, digest, source, work.upload, session, ctx())
        .await
        .map(|_| ())
}

/// Pushes `work.attach` artifacts whose `subject` is the image just pushed: the empty
/// config, one small blob each, and the artifact manifest by digest. Failures are counted
/// in their own operations; the image's push is already done.
async fn attach_artifacts(
    client: &RegistryClient,
    work: &PushWork,
    plan: &ImagePlan,
    subject: &Descriptor,
    errors: &ErrorLog,
) {
    let repo = &work.images.repo;
    let empty = Bytes::from_static(b"{}");
    let empty_digest = Digest::sha256_of(&empty);
    if let Err(e) = push_blob(client, work, &empty_digest, &BlobSource::Bytes(empty)).await {
        errors.note(format!("{repo}@{empty_digest}: {e}"));
        return;
    }
    for k in 0..work.attach {
        let identity = format!("attach/{repo}:{}/{k}", plan.tag);
        let spec = ContentSpec::new(work.images.seed, identity.as_bytes(), 512);
        let blob = Descriptor {
            media_type: "application/octet-stream".to_owned(),
            digest: spec.digest(),
            size: spec.size(),
            platform: None,
        };
        if let Err(e) = push_blob(client, work, &blob.digest, &BlobSource::Content(spec)).await {
            errors.note(format!("{repo}@{}: {e}", blob.digest));
            continue;
        }
        let manifest = build_artifact(ARTIFACT_TYPE, std::slice::from_ref(&blob), subject);
        let reference = Reference::Digest(Digest::sha256_of(&manifest));
        let put = client
            .manifest_put(
                repo,
                &reference,
                manifest,
                OCI_MANIFEST,
                OpCtx::for_repository(repo),
            )
            .await;
        if let Err(e) = put {
            errors.note(format!("{repo}@{reference}: artifact: {e}"));
        }
    }
}

/// The plan of image `index`, made on the runtime when it is small and on the blocking
/// pool otherwise.
async fn plan_of(
    work: &PushWork,
    index: u64,
    platform: Option<&Platform>,
) -> Result<ImagePlan, String> {
    let spec = &work.images;
    if spec.layers <= PLAN_INLINE_LAYERS && spec.image_bytes() <= PLAN_INLINE_BYTES {
        return plan_image(spec, index, platform);
    }
    let spec = spec.clone();
    let platform = platform.cloned();
    match tokio::task::spawn_blocking(move || plan_image(&spec, index, platform.as_ref())).await {
        Ok(planned) => planned,
        Err(e) => Err(format!("preparation failed: {e}")),
    }
}

/// Holds one of `permits` for an upload; `Cancelled` once a stop began.
async fn permit<'p>(
    permits: &'p Semaphore,
    env: JobEnv<'_>,
) -> Result<tokio::sync::SemaphorePermit<'p>, ClientError> {
    let permit = permits
        .acquire()
        .await
        .map_err(|_| ClientError::Cancelled)?;
    if env.shutdown.is_cancelled() {
        return Err(ClientError::Cancelled);
    }
    Ok(permit)
}

/// Uploads `blobs` (HEAD first), each holding one of `permits`; the first failure, if any.
async fn push_blobs(
    client: &RegistryClient,
    work: &PushWork,
    blobs: &[(Digest, BlobSource)],
    permits: &Semaphore,
    env: JobEnv<'_>,
) -> Result<(), ClientError> {
    let repo = &work.images.repo;
    let uploads = blobs.iter().map(|(digest, source)| async move {
        let _permit = permit(permits, env).await?;
        push_blob(client, work, digest, source).await.map_err(|e| {
            env.errors.note(format!("{repo}@{digest}: {e}"));
            e
        })
    });
    let results = futures_util::future::join_all(uploads).await;
    results
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

/// Image `index`'s layers and config in the registry: when its first request left, and its
/// plan or the first failure; `None` when the image could not be planned. With
/// [`HashWhen::First`] the plan is made first, then the config and layers go side by side;
/// with [`HashWhen::WhileSending`] the layers are uploaded as they are hashed, then the plan
/// is made over the digests they gave, then the config goes.
async fn push_image_blobs(
    client: &RegistryClient,
    work: &PushWork,
    index: u64,
    platform: Option<&Platform>,
    permits: &Semaphore,
    env: JobEnv<'_>,
) -> Option<(Instant, Result<ImagePlan, ClientError>)> {
    let config = |plan: &ImagePlan| {
        (
            plan.config.1.digest.clone(),
            BlobSource::Bytes(plan.config.0.clone()),
        )
    };
    let unplanned = |e: String| env.errors.note(format!("image {index}: {e}"));
    if let (HashWhen::WhileSending, UploadMode::Chunked { chunk_size }) = (work.hash, work.upload) {
        let (tag, layers) = image_layers(&work.images, index, platform)
            .map_err(unplanned)
            .ok()?;
        let start = Instant::now();
        let pushed = async {
            let digests = push_hashing(client, work, &layers, chunk_size, permits, env).await?;
            let layers = layers.into_iter().zip(digests).collect();
            let plan = plan_over(&work.images, tag, layers, platform);
            push_blobs(client, work, &[config(&plan)], permits, env).await?;
            Ok(plan)
        };
        return Some((start, pushed.await));
    }
    let plan = plan_of(work, index, platform)
        .await
        .map_err(unplanned)
        .ok()?;
    let start = Instant::now();
    let mut blobs = vec![config(&plan)];
    for (spec, d) in &plan.layers {
        blobs.push((d.digest.clone(), BlobSource::Content(*spec)));
    }
    let pushed = push_blobs(client, work, &blobs, permits, env).await;
    Some((start, pushed.map(|()| plan)))
}

/// Uploads `layers` in PATCHes of `chunk_size`, each hashed as it is sent and holding one
/// of `permits`: their digests (the blob's and the uncompressed tar's, both learned from
/// the bytes as they were made), or the first failure.
async fn push_hashing(
    client: &RegistryClient,
    work: &PushWork,
    layers: &[ContentSpec],
    chunk_size: u64,
    permits: &Semaphore,
    env: JobEnv<'_>,
) -> Result<Vec<LayerDigests>, ClientError> {
    let repo = &work.images.repo;
    let uploads = layers.iter().enumerate().map(|(j, &spec)| async move {
        let _permit = permit(permits, env).await?;
        let uploaded = client
            .upload_hashing(repo, spec, Some(chunk_size), OpCtx::for_repository(repo))
            .await;
        match uploaded {
            Ok((sum, report)) => Ok(LayerDigests {
                diff: report
                    .diff
                    .map(Digest::from_sha256)
                    .unwrap_or_else(|| sum.digest()),
                blob: sum.digest(),
            }),
            Err(e) => {
                env.errors
                    .note(format!("{repo}: layer {j} ({} bytes): {e}", spec.size()));
                Err(e)
            }
        }
    });
    futures_util::future::join_all(uploads)
        .await
        .into_iter()
        .collect()
}

/// Pushes image `index` (one image per platform and their index, with `--platforms`);
/// records the `image_push` session, and hands the image to the `replicas`' watch once it
/// is in.
#[allow(clippy::too_many_lines)]
async fn push_image(
    client: &RegistryClient,
    work: &PushWork,
    index: u64,
    permits: &Semaphore,
    env: JobEnv<'_>,
    replicas: Option<&Replicas>,
) {
    let repo = &work.images.repo;
    let mut start = None;
    let mut outcome = Outcome::Ok;
    let mut sent = 0u64;
    // What a replica must serve: each image's manifest and blobs.
    let mut blobs = Vec::new();
    // The tag's manifest (the image, or the index) once it is in: the artifacts' subject.
    let mut tagged: Option<(ImagePlan, Descriptor)> = None;
    let mut entries = Vec::new();
    for platform in work.images.platform_slots() {
        let Some((began, pushed)) =
            push_image_blobs(client, work, index, platform.as_ref(), permits, env).await
        else {
            return;
        };
        start.get_or_insert(began);
        let plan = match pushed {
            Err(e) => {
                outcome = Outcome::Error(e.kind());
                sent += work.images.layers * work.images.layer_size;
                break;
            }
            Ok(_) if env.shutdown.is_cancelled() => return,
            Ok(plan) => plan,
        };
        let layers: u64 = plan.layers.iter().map(|(spec, _)| spec.size()).sum();
        sent += layers + plan.config.0.len() as u64 + plan.manifest.len() as u64;
        // Under an index, each image goes by its digest; alone, by the tag.
        let reference = match &platform {
            Some(_) => Reference::Digest(Digest::sha256_of(&plan.manifest)),
            None => Reference::Tag(plan.tag.clone()),
        };
        let put = client
            .manifest_put(
                repo,
                &reference,
                plan.manifest.clone(),
                plan.media_type,
                OpCtx::for_repository(repo),
            )
            .await;
        match put {
            Err(e) => {
                env.errors
                    .note(format!("{repo}:{}: manifest: {e}", plan.tag));
                outcome = Outcome::Error(e.kind());
                break;
            }
            Ok(digest) => {
                blobs.push(plan.config.1.digest.clone());
                blobs.extend(plan.layers.iter().map(|(_, d)| d.digest.clone()));
                let descriptor = Descriptor {
                    media_type: plan.media_type.to_owned(),
                    digest,
                    size: plan.manifest.len() as u64,
                    platform: platform.clone(),
                };
                entries.push(descriptor.clone());
                tagged = Some((plan, descriptor));
            }
        }
    }
    let Some(start) = start else {
        return;
    };
    if outcome.is_ok() && !work.images.platforms.is_empty() {
        tagged = match push_index(client, work, index, &entries).await {
            Ok((index_descriptor, bytes)) => {
                sent += bytes.len() as u64;
                tagged.map(|(plan, _)| (plan, index_descriptor))
            }
            Err(e) => {
                env.errors.note(format!(
                    "{repo}:{}: index: {e}",
                    work.images.image_tag(index)
                ));
                outcome = Outcome::Error(e.kind());
                None
            }
        };
    }
    if let (Some(replicas), true, Some((_, tag))) = (replicas, outcome.is_ok(), &tagged) {
        // The tag's manifest first (an index's, then its images'), as a client pulls.
        let mut manifests = vec![tag.digest.clone()];
        if !work.images.platforms.is_empty() {
            manifests.extend(entries.iter().map(|e| e.digest.clone()));
        }
        let pushed = Pushed {
            repo: repo.clone(),
            manifests,
            blobs,
            bytes: sent,
            at: Instant::now(),
        };
        replicas.watch(pushed).await;
    }
    if let (true, Some((plan, subject))) = (work.attach > 0 && outcome.is_ok(), &tagged) {
        attach_artifacts(client, work, plan, subject, env.errors).await;
    }
    if outcome == Outcome::Error(ErrorKind::Cancelled) {
        return;
    }
    env.progress.add_done(1);
    if !outcome.is_ok() {
        env.progress.add_error();
    }
    let sample = Sample::session(Op::ImagePush, outcome, start, sent, 0);
    client.recorder().record(sample).await;
}

/// Pushes the index over image `index`'s per-platform manifests under its tag: its
/// descriptor and bytes.
async fn push_index(
    client: &RegistryClient,
    work: &PushWork,
    index: u64,
    entries: &[Descriptor],
) -> Result<(Descriptor, Bytes), ClientError> {
    let repo = &work.images.repo;
    let tag = work.images.image_tag(index);
    let reference = Reference::Tag(tag.parse().map_err(ClientError::Protocol)?);
    let (bytes, media_type) = plan_index(&work.images, entries);
    let digest = client
        .manifest_put(
            repo,
            &reference,
            bytes.clone(),
            media_type,
            OpCtx::for_repository(repo),
        )
        .await?;
    let descriptor = Descriptor {
        media_type: media_type.to_owned(),
        digest,
        size: bytes.len() as u64,
        platform: None,
    };
    Ok((descriptor, bytes))
}
