//! Prewarm: push everything the run will read, once, before the run.
//!
//! Blobs first (every blob the trace reads successfully, in the repository it is read from,
//! filler layers and config blobs), then manifests. Idempotent: a blob the repository
//! already has (HEAD 200) and a tag already pointing at the same manifest are skipped, so
//! prewarming twice, or from several hosts, is harmless. Measured and reported apart from
//! the run.
//!
//! Over several endpoints every object goes where the run will read it
//! ([`Router::placement`]): with `--route digest` to its `--replicas` ring successors (a
//! blob by digest, a manifest by `repo:tag`), with the other rules to every endpoint. A
//! registry accepts a manifest only when it holds the manifest's blobs, so a manifest's
//! config and layers are also put on the manifest's own endpoints.
//!
//! Every (endpoint, repository, blob) is uploaded once, and all of them before the first
//! manifest: a registry that stores blob links as plain files (distribution) rewrites the
//! link when the same blob is uploaded again, and a manifest PUT that reads the link while
//! it is rewritten is refused (`DIGEST_INVALID`, `MANIFEST_BLOB_UNKNOWN`). Manifests that
//! share a layer or a repository's filler would otherwise upload it side by side.
//!
//! `phase` runs it as the prewarm phase of `replay`: measured, summarized and published
//! apart from the run.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::{stream, StreamExt};
use tokio::time::Instant;

use super::validity::warn;
use super::{clients_for, endpoint_summaries, shard_of, Context, Phase};
use crate::client::{BlobSource, ClientError, OpCtx, RegistryClient, UploadMode};
use crate::commands::args::OutputArgs;
use crate::commands::session::{config_json, endpoint_links, judge, publish, Finished};
use crate::commands::ExitStatus;
use crate::digest::{Digest, Sha256Sum};
use crate::metrics::{ErrorLog, Event};
use crate::oci::manifest::ManifestFormat;
use crate::oci::{Reference, Repository, Tag};
use crate::plan::catalog::Catalog;
use crate::plan::linker::{Position, PushedLayer};
use crate::plan::{
    manifest_over, push_manifest, read_manifest_identity, read_manifest_layers, Naming, ShardSpec,
};
use crate::progress::{self, Progress, ProgressLine};
use crate::results::thresholds;
use crate::results::{Meta, MetaInput, RunInfo, Summary};
use crate::route::{Object, Router};
use crate::shutdown::Shutdown;
use crate::trace::Sym;

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
    repo: &Repository,
    digest: &Digest,
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

/// Where a blob's bytes come from. Rebuilt when its upload runs, so a job stays small.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// A blob the run reads.
    Read(Sym),
    /// The filler layer of a trace repository.
    Filler(Sym),
    /// The config blob of a manifest the run pushes (the run uploads its layers).
    PushConfig(Position),
    /// The config blob of a manifest the run reads: (repository, reference).
    ReadConfig(Sym, Sym),
}

#[derive(Debug)]
struct BlobJob {
    repo: Repository,
    sha256: [u8; 32],
    origin: Origin,
    endpoint: usize,
}

#[derive(Debug)]
struct ManifestJob {
    repo_sym: Sym,
    reference_sym: Sym,
    repo: Repository,
    tag: Tag,
    endpoint: usize,
}

/// What prewarm will do: each blob upload once per endpoint and repository, then each
/// manifest on its endpoints.
#[derive(Debug)]
pub struct PrewarmJobs {
    blobs: Vec<BlobJob>,
    manifests: Vec<ManifestJob>,
}

impl PrewarmJobs {
    /// The jobs for `catalog` placed by `router`.
    pub fn plan(
        catalog: &Catalog,
        router: &Router,
        naming: &mut Naming,
        format: ManifestFormat,
    ) -> PrewarmJobs {
        let mut blobs = Vec::new();
        let place = |blobs: &mut Vec<BlobJob>, repo: &Repository, sha256, origin| {
            let digest = Digest::from_sha256(sha256);
            for endpoint in router.placement(Object::Blob(digest.as_str())) {
                blobs.push(BlobJob {
                    repo: repo.clone(),
                    sha256,
                    origin,
                    endpoint,
                });
            }
        };
        for &(repo, d) in catalog.blob_reads() {
            let name = naming.repo(catalog, repo);
            place(&mut blobs, &name, catalog.blob_sha256(d), Origin::Read(d));
        }
        for &repo in &catalog.filler_repos {
            let name = naming.repo(catalog, repo);
            place(
                &mut blobs,
                &name,
                catalog.filler_sha256(repo),
                Origin::Filler(repo),
            );
        }
        // A manifest the run pushes lands where routing sends its PUT, with the uploads of
        // its push (`Action::BlobUpload::push`); everything else it references must be there
        // already: its config, the layers it found present, or its repository's filler.
        for (position, facts) in catalog.pushes() {
            let name = naming.repo(catalog, facts.repo);
            let tag = naming.tag(catalog, facts.repo, facts.reference);
            let config = push_manifest(catalog, facts, format).config_bytes;
            let mut needs = vec![(Sha256Sum::of(&config).0, Origin::PushConfig(position))];
            for layer in catalog.push_layers(facts) {
                if let PushedLayer::Existing(d) = layer {
                    needs.push((catalog.blob_sha256(d), Origin::Read(d)));
                }
            }
            if facts.layers.is_empty() {
                needs.push((
                    catalog.filler_sha256(facts.repo),
                    Origin::Filler(facts.repo),
                ));
            }
            let endpoints = router.placement(Object::Manifest {
                repo: name.as_str(),
                reference: tag.as_str(),
            });
            for endpoint in endpoints {
                for &(sha256, origin) in &needs {
                    blobs.push(BlobJob {
                        repo: name.clone(),
                        sha256,
                        origin,
                        endpoint,
                    });
                }
            }
        }

        let mut manifests = Vec::with_capacity(catalog.manifests.len() * router.copies());
        for (&(repo_sym, reference_sym), facts) in &catalog.manifests {
            let repo = naming.repo(catalog, repo_sym);
            let tag = naming.tag(catalog, repo_sym, reference_sym);
            let endpoints = router.placement(Object::Manifest {
                repo: repo.as_str(),
                reference: tag.as_str(),
            });
            // What the manifest references must be where the manifest is.
            let mut needs: Vec<([u8; 32], Origin)> = if facts.layers.is_empty() {
                vec![(catalog.filler_sha256(repo_sym), Origin::Filler(repo_sym))]
            } else {
                catalog
                    .manifest_layers(facts)
                    .iter()
                    .map(|&d| (catalog.blob_sha256(d), Origin::Read(d)))
                    .collect()
            };
            let (config, _, _) = read_manifest_bytes(catalog, format, repo_sym, reference_sym);
            needs.push((
                Sha256Sum::of(&config).0,
                Origin::ReadConfig(repo_sym, reference_sym),
            ));
            for &endpoint in &endpoints {
                for &(sha256, origin) in &needs {
                    blobs.push(BlobJob {
                        repo: repo.clone(),
                        sha256,
                        origin,
                        endpoint,
                    });
                }
                manifests.push(ManifestJob {
                    repo_sym,
                    reference_sym,
                    repo: repo.clone(),
                    tag: tag.clone(),
                    endpoint,
                });
            }
        }
        // Once per (repository, blob, endpoint); the order interleaves the endpoints.
        blobs.sort_unstable_by(|a, b| {
            (a.repo.as_str(), a.sha256, a.endpoint).cmp(&(b.repo.as_str(), b.sha256, b.endpoint))
        });
        blobs.dedup_by(|a, b| a.repo == b.repo && a.sha256 == b.sha256 && a.endpoint == b.endpoint);
        blobs.shrink_to_fit();
        PrewarmJobs { blobs, manifests }
    }

    /// Objects to prewarm: blob uploads and manifest PUTs, each counted per endpoint.
    pub fn len(&self) -> u64 {
        (self.blobs.len() + self.manifests.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The config, its descriptor and the manifest of a manifest the run reads.
fn read_manifest_bytes(
    catalog: &Catalog,
    format: ManifestFormat,
    repo: Sym,
    reference: Sym,
) -> (bytes::Bytes, crate::oci::manifest::Descriptor, bytes::Bytes) {
    let layers = read_manifest_layers(catalog, repo, reference);
    let identity = read_manifest_identity(catalog, repo, reference);
    let size = catalog
        .manifests
        .get(&(repo, reference))
        .map_or(0, |m| u64::from(m.size));
    manifest_over(format, &identity, &layers, size)
}

/// The digest of the manifest prewarm pushes for the manifest `repo:reference` of the trace.
pub(super) fn read_manifest_digest(
    catalog: &Catalog,
    format: ManifestFormat,
    repo: Sym,
    reference: Sym,
) -> Digest {
    Digest::sha256_of(&read_manifest_bytes(catalog, format, repo, reference).2)
}

/// The bytes of the blob `origin` names.
fn blob_source(catalog: &Catalog, format: ManifestFormat, origin: Origin) -> BlobSource {
    match origin {
        Origin::Read(d) => BlobSource::Content(catalog.blob_content(d)),
        Origin::Filler(repo) => BlobSource::Content(catalog.filler_content(repo)),
        Origin::PushConfig(position) => BlobSource::Bytes(
            catalog
                .push(position)
                .map(|facts| push_manifest(catalog, facts, format).config_bytes)
                .unwrap_or_default(),
        ),
        Origin::ReadConfig(repo, reference) => {
            BlobSource::Bytes(read_manifest_bytes(catalog, format, repo, reference).0)
        }
    }
}

/// Pushes what the run reads, each object to the endpoints `jobs` places it on (one client
/// per endpoint): every blob, then every manifest. Stops starting new work on shutdown.
#[allow(clippy::too_many_arguments)]
pub async fn prewarm(
    catalog: &Catalog,
    jobs: PrewarmJobs,
    clients: &[RegistryClient],
    format: ManifestFormat,
    concurrency: usize,
    shutdown: &Shutdown,
    errors: &ErrorLog,
    progress: &Progress,
) -> PrewarmReport {
    let mut report = PrewarmReport::default();
    let tally = |report: &mut PrewarmReport, (done, bytes): (Done, u64), manifest: bool| {
        progress.add_done(1);
        if !manifest {
            // The share follows the blobs' bytes (the total counts only them).
            progress.add_bytes(bytes);
        }
        if matches!(done, Done::Failed) {
            progress.add_error();
        }
        match (done, manifest) {
            (Done::Pushed, false) => report.blobs_pushed += 1,
            (Done::Present, false) => report.blobs_present += 1,
            (Done::Pushed, true) => report.manifests_pushed += 1,
            (Done::Present, true) => report.manifests_present += 1,
            (Done::Failed, _) => report.failed += 1,
            (Done::Skipped, _) => {}
        }
    };
    let PrewarmJobs { blobs, manifests } = jobs;

    let mut uploads = stream::iter(blobs)
        .map(|job| async move {
            if shutdown.is_cancelled() {
                return (Done::Skipped, 0);
            }
            let digest = Digest::from_sha256(job.sha256);
            let source = blob_source(catalog, format, job.origin);
            let bytes = source.size();
            let done = match ensure_blob(&clients[job.endpoint], &job.repo, &digest, source).await {
                Ok(true) => Done::Pushed,
                Ok(false) => Done::Present,
                Err(e) => {
                    errors.note(format!("prewarm {}@{digest}: {e}", job.repo));
                    Done::Failed
                }
            };
            (done, bytes)
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = uploads.next().await {
        tally(&mut report, done, false);
    }
    drop(uploads);

    let mut puts = stream::iter(manifests)
        .map(|job| async move {
            if shutdown.is_cancelled() {
                return Done::Skipped;
            }
            let client = &clients[job.endpoint];
            let (_, _, manifest) =
                read_manifest_bytes(catalog, format, job.repo_sym, job.reference_sym);
            let digest = Digest::sha256_of(&manifest);
            let reference = Reference::Tag(job.tag);
            let ctx = OpCtx::default();
            let result: Result<Done, ClientError> = async {
                if let Some(info) = client.manifest_head(&job.repo, &reference, ctx).await? {
                    if info.digest.as_ref() == Some(&digest) {
                        return Ok(Done::Present);
                    }
                }
                client
                    .manifest_put(&job.repo, &reference, manifest, format.manifest_type(), ctx)
                    .await?;
                Ok(Done::Pushed)
            }
            .await;
            result.unwrap_or_else(|e| {
                errors.note(format!("prewarm {}:{reference}: {e}", job.repo));
                Done::Failed
            })
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = puts.next().await {
        tally(&mut report, (done, 0), true);
    }
    report
}

/// The prewarm phase: every object the run reads pushed, measured and reported apart (in
/// `OUT/prewarm/` when the run follows). Fails (exit 1) when an object could not be
/// prewarmed, and, with `--phase prewarm`, when a `--fail-if` threshold holds.
pub(super) async fn phase(context: &Context<'_>, catalog: &Catalog) -> anyhow::Result<ExitStatus> {
    let cfg = context.cfg;
    let (connections, names, shutdown) = (context.connections, context.names, context.shutdown);
    let connection = &connections[0];
    let mut exit = ExitStatus::Success;
    let output = context.output;
    let out = if cfg.phase == Phase::All {
        output.in_subdir("prewarm")
    } else {
        output.clone()
    };
    let started_at = SystemTime::now();
    let start = Instant::now();
    let (recorder, aggregator) = out.start_over(start, started_at, connections.len())?;
    let clients = clients_for(connections, &recorder);
    let mut naming = Naming::new(cfg.plan.repos.clone());
    let jobs = PrewarmJobs::plan(
        catalog,
        context.router,
        &mut naming,
        cfg.plan.manifest_format,
    );
    if !context.args.output.quiet && !context.args.output.json {
        // The same units as the line after it: pushes, not the trace's distinct objects.
        eprintln!(
            "creb-rs: prewarm: {} blobs (layers, configs and fillers, per repository and node) and {} manifests to push",
            jobs.blobs.len(),
            jobs.manifests.len()
        );
    }
    // Blobs are most of the time a prewarm takes: the ETA follows their bytes.
    let progress = Progress::with_bytes(
        jobs.len(),
        catalog.prewarm_bytes() * context.router.copies() as u64,
    );
    let line = ProgressLine::show(
        "prewarm",
        "objects",
        Arc::clone(&progress),
        progress::wanted(context.args.output.quiet, context.args.output.json),
    );
    let report = prewarm(
        catalog,
        jobs,
        &clients,
        cfg.plan.manifest_format,
        cfg.prewarm_concurrency,
        shutdown,
        context.errors,
        &progress,
    )
    .await;
    line.finish();
    let duration = start.elapsed();
    drop(clients);
    let aggregator = aggregator.finish().await;
    let mut warnings = Vec::new();
    super::validity::size_warning(cfg, &mut warnings);
    if report.failed > 0 {
        warn(
            &mut warnings,
            "prewarm_incomplete",
            format!(
                "{} objects could not be prewarmed; reads of them will fail in the run",
                report.failed
            ),
        );
    }
    let mut summary = Summary::build(
        RunInfo {
            command: "replay".into(),
            mode: "prewarm".into(),
            model: "closed".into(),
            concurrency: cfg.prewarm_concurrency as u64,
            registry: names.join(","),
            seed: cfg.seed,
            shard: shard_of(ShardSpec::ALL),
            started_at,
            duration,
            interrupted: shutdown.is_cancelled(),
            trace: None,
            warnings,
            checks: None,
            config: config_json(cfg, &connection.credentials),
        },
        &aggregator,
    );
    summary.endpoints = endpoint_summaries(cfg, names, &aggregator, duration, None);
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: context.dataset.clone(),
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval: out.interval,
        },
    );
    let mut meta = meta;
    meta.preparation = Some(context.preparation.clone());
    meta.endpoints = endpoint_links(
        &names
            .iter()
            .cloned()
            .zip(connections.iter().map(|c| &c.client))
            .collect::<Vec<_>>(),
    );
    let mut finished = Finished {
        summary,
        aggregator,
        meta,
    };
    // Thresholds judge the phase whose results are the command's: prewarm's only alone.
    let verdicts = if cfg.phase == Phase::Prewarm {
        judge(&mut finished, context.thresholds)
    } else {
        Vec::new()
    };
    // With --phase all the run's results are the ones printed as JSON.
    let shown = OutputArgs {
        json: context.args.output.json && cfg.phase == Phase::Prewarm,
        quiet: context.args.output.quiet
            || (context.args.output.json && cfg.phase != Phase::Prewarm),
        ..context.args.output.clone()
    };
    publish(&finished, &shown, out.dir.as_deref(), true)?;
    if !shown.quiet && !shown.json {
        println!(
            "prewarm: {} blobs pushed, {} present; {} manifests pushed, {} present; {} failed\n",
            report.blobs_pushed,
            report.blobs_present,
            report.manifests_pushed,
            report.manifests_present,
            report.failed
        );
    }
    let slow = thresholds::report(&verdicts);
    if report.failed > 0 {
        exit = ExitStatus::Failed;
    } else if slow {
        exit = ExitStatus::ThresholdFailed;
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    //! Prewarm's ordering against scripted registries: they answer after a delay on a paused
    //! clock, so concurrent jobs interleave the way they do against a real registry, and
    //! they refuse a manifest whose blobs they do not hold, as a real one does.

    use super::*;
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use http::Method;

    use crate::client::ClientOptions;
    use crate::metrics::spawn_aggregator;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};
    use crate::net::transport::RequestBody;
    use crate::oci::manifest::ManifestFormat;
    use crate::plan::catalog::ContentOptions;
    use crate::plan::RepoMap;
    use crate::route::{RouteKind, RouteOptions};
    use crate::trace::record::Interner;
    use crate::trace::{ReadOptions, TraceInput, TraceReader};

    /// What one scripted registry holds and saw.
    #[derive(Debug, Default)]
    struct Node {
        blobs: HashSet<(String, String)>,
        manifests: HashMap<(String, String), String>,
        /// ("blob" | "manifest", repo, digest or tag) of every completed PUT, in order.
        puts: Vec<(&'static str, String, String)>,
        refused: Vec<String>,
    }

    fn registry(node: Arc<Mutex<Node>>) -> ScriptedTransport {
        ScriptedTransport::new(move |request| {
            let path = request.url.path().to_owned();
            let mut node = node.lock().unwrap();
            let answer = if let Some((repo, rest)) = path
                .strip_prefix("/v2/")
                .and_then(|p| p.split_once("/blobs/"))
            {
                let repo = repo.to_owned();
                match (&request.method, rest) {
                    (&Method::HEAD, digest) => {
                        if node.blobs.contains(&(repo, digest.to_owned())) {
                            ScriptedResponse::status(200).header("content-length", "1")
                        } else {
                            ScriptedResponse::status(404)
                        }
                    }
                    (&Method::POST, _) => ScriptedResponse::status(202).header(
                        "location",
                        &format!("/v2/{repo}/blobs/uploads/{}", node.puts.len()),
                    ),
                    (&Method::PUT, _) => {
                        let digest = request
                            .url
                            .query_pairs()
                            .find(|(k, _)| k == "digest")
                            .map(|(_, v)| v.into_owned())
                            .unwrap_or_default();
                        node.puts.push(("blob", repo.clone(), digest.clone()));
                        node.blobs.insert((repo, digest.clone()));
                        ScriptedResponse::status(201).header("docker-content-digest", &digest)
                    }
                    _ => ScriptedResponse::status(405),
                }
            } else if let Some((repo, tag)) = path
                .strip_prefix("/v2/")
                .and_then(|p| p.split_once("/manifests/"))
            {
                let key = (repo.to_owned(), tag.to_owned());
                match request.method {
                    Method::HEAD => match node.manifests.get(&key) {
                        Some(d) => ScriptedResponse::status(200)
                            .header("docker-content-digest", d)
                            .header("content-length", "1"),
                        None => ScriptedResponse::status(404),
                    },
                    Method::PUT => {
                        let RequestBody::Bytes(body) = &request.body else {
                            return ScriptedResponse::status(400);
                        };
                        let manifest: serde_json::Value = serde_json::from_slice(body).unwrap();
                        let mut wanted = vec![manifest["config"]["digest"].clone()];
                        wanted.extend(
                            manifest["layers"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|l| l["digest"].clone()),
                        );
                        let missing: Vec<String> = wanted
                            .iter()
                            .map(|d| d.as_str().unwrap().to_owned())
                            .filter(|d| !node.blobs.contains(&(key.0.clone(), d.clone())))
                            .collect();
                        if !missing.is_empty() {
                            node.refused.push(format!("{repo}:{tag} lacks {missing:?}"));
                            return ScriptedResponse::status(400);
                        }
                        let digest = Digest::sha256_of(body).as_str().to_owned();
                        node.puts.push(("manifest", key.0.clone(), key.1.clone()));
                        node.manifests.insert(key, digest.clone());
                        ScriptedResponse::status(201).header("docker-content-digest", &digest)
                    }
                    _ => ScriptedResponse::status(405),
                }
            } else {
                ScriptedResponse::status(404)
            };
            answer.delay(Duration::from_millis(2))
        })
    }

    fn get(i: u64, client: &str, uri: &str) -> serde_json::Value {
        serde_json::json!({
            "host": "h1",
            "http.request.duration": 0.001,
            "http.request.method": "GET",
            "http.request.remoteaddr": client,
            "http.request.uri": uri,
            "http.response.status": 200,
            "http.response.written": 900,
            "id": format!("r{i}"),
            "timestamp": format!("2017-06-20T10:00:{:02}.000Z", i),
        })
    }

    /// A trace where manifests share what they reference: three tags of one repository
    /// pull no layer (they share its filler), two pull the same layer.
    fn catalog(dir: &std::path::Path) -> Catalog {
        let mut records = Vec::new();
        for (i, tag) in ["a", "b", "c"].iter().enumerate() {
            records.push(get(
                i as u64,
                &format!("lone{i}"),
                &format!("v2/team/app/manifests/{tag}"),
            ));
        }
        for (i, tag) in ["d", "e"].iter().enumerate() {
            let client = format!("puller{i}");
            records.push(get(
                10 + 2 * i as u64,
                &client,
                &format!("v2/team/app/manifests/{tag}"),
            ));
            records.push(get(
                11 + 2 * i as u64,
                &client,
                "v2/team/app/blobs/5ea4ed01",
            ));
        }
        let path = dir.join("t.json");
        std::fs::write(&path, serde_json::to_vec(&records).unwrap()).unwrap();
        let input = TraceInput::resolve(&[path]).unwrap();
        let mut reader =
            TraceReader::open(&input, ReadOptions::default(), Interner::default()).unwrap();
        let keep = crate::plan::catalog::Keep::Prewarm;
        let mut catalog = Catalog::build(&mut reader, 60_000, ContentOptions::default(), keep)
            .unwrap()
            .seal(reader.into_names());
        catalog.compute_digests(1);
        catalog
    }

    #[tokio::test(start_paused = true)]
    async fn each_blob_goes_once_to_each_endpoint_and_before_any_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path());
        assert_eq!(catalog.manifests.len(), 5);
        let names = ["http://n0.test/", "http://n1.test/", "http://n2.test/"];
        let nodes: Vec<Arc<Mutex<Node>>> = names.iter().map(|_| Arc::default()).collect();
        let (recorder, _aggregator) = spawn_aggregator();
        let clients: Vec<RegistryClient> = names
            .iter()
            .zip(&nodes)
            .map(|(url, node)| {
                RegistryClient::new(
                    Arc::new(registry(Arc::clone(node))),
                    url.parse().unwrap(),
                    recorder.clone(),
                    ClientOptions::default(),
                )
            })
            .collect();
        // Two copies of everything: most blobs land on a node apart from their manifest's.
        let router = Router::new(
            &names,
            RouteOptions {
                kind: RouteKind::Digest,
                replicas: 2,
                ..RouteOptions::default()
            },
        );
        let format = ManifestFormat::Oci;
        let run = || {
            let jobs = PrewarmJobs::plan(
                &catalog,
                &router,
                &mut Naming::new(RepoMap::Keep { prefix: None }),
                format,
            );
            let clients = &clients;
            let catalog = &catalog;
            async move {
                let shutdown = Shutdown::new();
                let errors = ErrorLog::default();
                let progress = Progress::new(0);
                prewarm(
                    catalog, jobs, clients, format, 16, &shutdown, &errors, &progress,
                )
                .await
            }
        };
        let first = run().await;
        assert_eq!(first.failed, 0, "{first:?}");
        assert_eq!((first.manifests_pushed, first.manifests_present), (10, 0));
        let mut uploads = 0;
        for (i, node) in nodes.iter().enumerate() {
            let node = node.lock().unwrap();
            assert!(node.refused.is_empty(), "node {i}: {:?}", node.refused);
            let blobs: Vec<_> = node.puts.iter().filter(|p| p.0 == "blob").collect();
            let distinct: HashSet<_> = blobs.iter().collect();
            assert_eq!(
                blobs.len(),
                distinct.len(),
                "node {i} got a blob twice: {blobs:?}"
            );
            let first_manifest = node.puts.iter().position(|p| p.0 == "manifest");
            let last_blob = node.puts.iter().rposition(|p| p.0 == "blob");
            assert!(last_blob < first_manifest, "node {i}: {:?}", node.puts);
            uploads += blobs.len() as u64;
        }
        assert_eq!(first.blobs_pushed, uploads);

        // Again: everything is there already, nothing is sent twice.
        let again = run().await;
        assert_eq!(
            (
                again.blobs_pushed,
                again.blobs_present,
                again.manifests_present,
                again.failed
            ),
            (0, uploads, 10, 0)
        );
    }
}
