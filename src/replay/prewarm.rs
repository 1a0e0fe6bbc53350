//! Prewarm: push everything the run will read, once, before the run.
//!
//! Blobs first (every blob the trace reads successfully, in the repository it is read from,
//! plus filler layers), then manifests (each with its config blob). Idempotent: a blob the
//! repository already has (HEAD 200) and a tag already pointing at the same manifest are
//! skipped, so prewarming twice, or from several hosts, is harmless. Measured and reported
//! apart from the run.
//!
//! Over several endpoints every object goes where the run will read it
//! ([`Router::placement`]): with `--route digest` to its `--replicas` ring successors (a
//! blob by digest, a manifest by `repo:tag`), with the other rules to every endpoint. A
//! registry accepts a manifest only when it holds the manifest's blobs, so a manifest's
//! config and layers are also put on the manifest's own endpoints.

use futures_util::{stream, StreamExt};

use crate::metrics::Event;
use crate::oci::manifest::ManifestFormat;
use crate::oci::{BlobSource, ClientError, OpCtx, Reference, RegistryClient, UploadMode};
use crate::plan::catalog::Catalog;
use crate::plan::{
    manifest_over, push_manifest, read_manifest_identity, read_manifest_layers, Naming,
};
use crate::progress::Progress;
use crate::route::{Object, Router};
use crate::shutdown::Shutdown;
use crate::trace::Sym;
use crate::workload::ErrorLog;

/// What prewarm did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrewarmReport {
    pub blobs_pushed: u64,
    pub blobs_present: u64,
    pub manifests_pushed: u64,
    pub manifests_present: u64,
    pub failed: u64,
}

enum Done {
    Pushed,
    Present,
    Failed,
    Skipped,
}

async fn ensure_blob(
    client: &RegistryClient,
    repo: &crate::oci::Repository,
    digest: &crate::oci::Digest,
    source: BlobSource,
) -> Result<bool, ClientError> {
    let ctx = OpCtx::default();
    if client.blob_head(repo, digest, ctx).await?.is_some() {
        client.recorder().event(Event::BlobExists).await;
        return Ok(false);
    }
    client
        .upload_blob(repo, digest, &source, UploadMode::Monolithic, None, ctx)
        .await?;
    Ok(true)
}

/// Objects prewarm handles: blobs read, filler layers, configs and manifests.
pub fn job_count(catalog: &Catalog) -> u64 {
    (catalog.blob_reads.len()
        + catalog.filler_repos.len()
        + catalog.pushes.len()
        + catalog.manifests.len()) as u64
}

/// The layers of a manifest the run reads, with their bytes (the filler when it has none).
fn layer_sources(
    catalog: &Catalog,
    repo: Sym,
    reference: Sym,
) -> Vec<(crate::oci::Digest, BlobSource)> {
    let layers: Vec<_> = catalog
        .manifests
        .get(&(repo, reference))
        .map(|m| {
            m.layers
                .iter()
                .map(|d| {
                    (
                        catalog.blob_digest(*d),
                        BlobSource::Content(catalog.blob_content(*d)),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if layers.is_empty() {
        vec![(
            catalog.filler_digest(repo),
            BlobSource::Content(catalog.filler_content(repo)),
        )]
    } else {
        layers
    }
}

/// Pushes what the run reads, each object to the endpoints `router` places it on (one
/// client per endpoint). Stops starting new work on shutdown.
#[allow(clippy::too_many_arguments)]
pub async fn prewarm(
    catalog: &Catalog,
    clients: &[RegistryClient],
    router: &Router,
    naming: &mut Naming,
    format: ManifestFormat,
    concurrency: usize,
    shutdown: &Shutdown,
    errors: &ErrorLog,
    progress: &Progress,
) -> PrewarmReport {
    let mut report = PrewarmReport::default();
    let tally = |report: &mut PrewarmReport, done: Done, manifest: bool| {
        progress.add_done(1);
        if matches!(done, Done::Failed) {
            progress.add_error();
        }
        tally_into(report, done, manifest)
    };
    fn tally_into(report: &mut PrewarmReport, done: Done, manifest: bool) {
        match (done, manifest) {
            (Done::Pushed, false) => report.blobs_pushed += 1,
            (Done::Present, false) => report.blobs_present += 1,
            (Done::Pushed, true) => report.manifests_pushed += 1,
            (Done::Present, true) => report.manifests_present += 1,
            (Done::Failed, _) => report.failed += 1,
            (Done::Skipped, _) => {}
        }
    }

    // Blobs: reads, then filler layers.
    let filler_repos = &catalog.filler_repos;
    let mut blob_jobs = Vec::with_capacity(catalog.blob_reads.len() + filler_repos.len());
    for (repo, d) in &catalog.blob_reads {
        blob_jobs.push((
            naming.repo(catalog, *repo),
            catalog.blob_digest(*d),
            BlobSource::Content(catalog.blob_content(*d)),
        ));
    }
    for repo in filler_repos {
        blob_jobs.push((
            naming.repo(catalog, *repo),
            catalog.filler_digest(*repo),
            BlobSource::Content(catalog.filler_content(*repo)),
        ));
    }
    // The config blobs of the manifests the run pushes (the run uploads their layers).
    for facts in catalog.pushes.values() {
        let built = push_manifest(catalog, facts, format);
        blob_jobs.push((
            naming.repo(catalog, facts.repo),
            built.config.digest,
            BlobSource::Bytes(built.config_bytes),
        ));
    }
    let mut placed = Vec::with_capacity(blob_jobs.len() * router.copies());
    for (repo, digest, source) in blob_jobs {
        for endpoint in router.placement(Object::Blob(digest.as_str())) {
            placed.push((repo.clone(), digest.clone(), source.clone(), endpoint));
        }
    }
    let mut blobs = stream::iter(placed)
        .map(|(repo, digest, source, endpoint)| async move {
            if shutdown.is_cancelled() {
                return Done::Skipped;
            }
            match ensure_blob(&clients[endpoint], &repo, &digest, source).await {
                Ok(true) => Done::Pushed,
                Ok(false) => Done::Present,
                Err(e) => {
                    errors.note(format!("prewarm {repo}@{digest}: {e}"));
                    Done::Failed
                }
            }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = blobs.next().await {
        tally(&mut report, done, false);
    }
    drop(blobs);

    // Manifests, each with its config blob.
    let keys: Vec<(Sym, Sym)> = catalog.manifests.keys().copied().collect();
    let mut jobs = Vec::with_capacity(keys.len());
    for (repo, reference) in keys {
        let tag = naming.tag(catalog, repo, reference);
        let name = naming.repo(catalog, repo);
        for endpoint in router.placement(Object::Manifest {
            repo: name.as_str(),
            reference: tag.as_str(),
        }) {
            jobs.push((repo, reference, name.clone(), tag.clone(), endpoint));
        }
    }
    let mut manifests = stream::iter(jobs)
        .map(|(repo_sym, ref_sym, repo, tag, endpoint)| async move {
            if shutdown.is_cancelled() {
                return Done::Skipped;
            }
            let client = &clients[endpoint];
            let layers = read_manifest_layers(catalog, repo_sym, ref_sym);
            let identity = read_manifest_identity(catalog, repo_sym, ref_sym);
            let size = catalog
                .manifests
                .get(&(repo_sym, ref_sym))
                .map_or(0, |m| m.size);
            let (config_bytes, config, manifest) = manifest_over(format, &identity, &layers, size);
            let digest = crate::oci::Digest::sha256_of(&manifest);
            let reference = Reference::Tag(tag);
            let ctx = OpCtx::default();
            let result: Result<Done, ClientError> = async {
                if let Some(info) = client.manifest_head(&repo, &reference, ctx).await? {
                    if info.digest.as_ref() == Some(&digest) {
                        return Ok(Done::Present);
                    }
                }
                if clients.len() > 1 {
                    // The layers placed elsewhere by their digest: the registry wants them here.
                    for (layer, source) in layer_sources(catalog, repo_sym, ref_sym) {
                        if !router
                            .placement(Object::Blob(layer.as_str()))
                            .contains(&endpoint)
                        {
                            ensure_blob(client, &repo, &layer, source).await?;
                        }
                    }
                }
                ensure_blob(
                    client,
                    &repo,
                    &config.digest,
                    BlobSource::Bytes(config_bytes),
                )
                .await?;
                client
                    .manifest_put(&repo, &reference, manifest, format.manifest_type(), ctx)
                    .await?;
                Ok(Done::Pushed)
            }
            .await;
            result.unwrap_or_else(|e| {
                errors.note(format!("prewarm {repo}:{reference}: {e}"));
                Done::Failed
            })
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = manifests.next().await {
        tally(&mut report, done, true);
    }
    report
}
