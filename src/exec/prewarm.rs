//! The prewarm driver: the jobs [`crate::plan::prewarm`] lists, carried out with at most
//! `concurrency` in flight: first the content the run reads ([`Prewarm::contents`]: a blob
//! whose digest is known is HEADed and uploaded when missing; one whose digest is not is
//! uploaded at once, its digest computed from the bytes as they are sent and kept in
//! [`Learned`], beside the catalog, and in the digest cache), then every other blob
//! (configs), then every manifest (HEAD, PUT when the tag does not point at it already).
//! Idempotent, so prewarming twice, or from several hosts, is harmless. Stops as every
//! bounded driver does: nothing new starts, in-flight jobs get the grace period, the rest
//! are recorded as cancelled.

use std::collections::HashMap;

use super::bounded::{drive, Bounds, JobEnv};
use crate::client::{BlobSource, ClientError, OpCtx, RegistryClient, UploadMode};
use crate::content::digest_cache::Appender;
use crate::content::Sums;
use crate::digest::Digest;
use crate::metrics::{ErrorKind, Event, Op, Sample};
use crate::oci::manifest::ManifestFormat;
use crate::oci::{Reference, Repository};
use crate::plan::catalog::Catalog;
use crate::plan::catalog::{ContentKey, KEEP_DIGEST_ABOVE};
use crate::plan::prewarm::{
    blob_of, read_manifest_bytes, BlobJob, Body, ContentJob, ManifestJob, PrewarmJobs,
};

/// What prewarm did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrewarmReport {
    pub blobs_pushed: u64,
    pub blobs_present: u64,
    pub manifests_pushed: u64,
    pub manifests_present: u64,
    pub failed: u64,
    /// Jobs a stop cancelled in flight or kept from starting.
    pub stopped: u64,
    /// Digests computed from the bytes as they were uploaded.
    pub digests_learned: u64,
    /// Digests computed after the first stage (the run's uploads, content not sent).
    pub digests_computed: u64,
}

/// The digests a prewarm learns while it sends content: kept beside the sealed catalog
/// while the stage runs (jobs of other repositories and endpoints find them here), and
/// handed to the catalog when it ends ([`Learned::into_digests`]).
#[derive(Debug, Default)]
pub struct Learned(std::sync::Mutex<HashMap<ContentKey, Sums>>);

impl Learned {
    /// The digests of `key`'s content, if a job learned them.
    pub fn get(&self, key: ContentKey) -> Option<Sums> {
        self.0.lock().ok()?.get(&key).copied()
    }

    fn insert(&self, key: ContentKey, sums: Sums) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, sums);
        }
    }

    /// Every digest learned.
    pub fn into_digests(self) -> Vec<(ContentKey, Sums)> {
        let map = self
            .0
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.into_iter().collect()
    }
}

/// What every prewarm job reads: the catalog its bytes come from, one client per endpoint.
#[allow(missing_debug_implementations)] // clients hold transports that are not `Debug`
pub struct Prewarm<'a> {
    pub catalog: &'a Catalog,
    pub clients: &'a [RegistryClient],
    pub format: ManifestFormat,
    pub bounds: Bounds,
    pub env: JobEnv<'a>,
    /// The digest cache, where digests learned while sending are added as they come.
    pub cache: Option<&'a Appender>,
    /// Where digests learned while sending are kept until the stage ends.
    pub learned: &'a Learned,
}

enum Done {
    Pushed,
    Present,
    Failed,
}

async fn ensure_blob(
    client: &RegistryClient,
    repo: &Repository,
    digest: &Digest,
    source: BlobSource,
) -> Result<bool, ClientError> {
    let ctx = OpCtx::default;
    if client.blob_head(repo, digest, ctx()).await?.is_some() {
        client.recorder().event(Event::BlobExists).await;
        return Ok(false);
    }
    client
        .upload_blob(repo, digest, &source, UploadMode::Monolithic, None, ctx())
        .await?;
    Ok(true)
}

impl Prewarm<'_> {
    /// The first stage: the content the run reads, on every endpoint, uploaded (when not
    /// present) whether its digest is known yet or not.
    pub async fn contents(
        &self,
        jobs: impl IntoIterator<Item = ContentJob>,
        report: &mut PrewarmReport,
    ) {
        let driven = drive(
            jobs,
            self.bounds,
            self.env.shutdown,
            |job| job.endpoint,
            |job| self.content(job),
            |(outcome, bytes, learned)| {
                self.env.progress.add_bytes(bytes);
                report.digests_learned += u64::from(learned);
                self.tally(report, outcome, false);
            },
        )
        .await;
        self.cancelled(report, Op::BlobUpload, driven).await;
    }

    /// One content job: its outcome, its bytes, and whether its digest was learned while
    /// sending.
    async fn content(&self, job: ContentJob) -> (Done, u64, bool) {
        let spec = self.catalog.content_of(job.key);
        let client = &self.clients[job.endpoint];
        let known = self
            .catalog
            .known_digest(job.key)
            .or_else(|| self.learned.get(job.key))
            .map(|sums| sums.blob)
            .or_else(|| (spec.size() <= KEEP_DIGEST_ABOVE).then(|| spec.sha256()));
        let result = match known {
            Some(sha) => {
                let digest = Digest::from_sha256(sha);
                ensure_blob(client, &job.repo, &digest, BlobSource::Content(spec))
                    .await
                    .map(|pushed| (pushed, false))
            }
            None => client
                .upload_hashing(&job.repo, spec, None, OpCtx::default())
                .await
                .map(|(sum, report)| {
                    let sums = Sums {
                        blob: sum.0,
                        diff: report.diff.unwrap_or(sum.0),
                    };
                    self.learned.insert(job.key, sums);
                    if let Some(cache) = self.cache {
                        if let Err(e) = cache.append(&spec, &sums.blob, &sums.diff) {
                            self.env
                                .errors
                                .note(format!("cannot add to the digest cache: {e}"));
                        }
                    }
                    (true, true)
                }),
        };
        match result {
            Ok((pushed, learned)) => {
                let done = if pushed { Done::Pushed } else { Done::Present };
                (done, spec.size(), learned)
            }
            Err(e) => {
                // Named as the trace names it: its digest may be what never got computed.
                let what = match job.key {
                    ContentKey::Blob(d) => format!("blob {}", self.catalog.names.resolve(d)),
                    ContentKey::Filler(_) | ContentKey::Upload(_) => "filler layer".to_owned(),
                };
                self.env.errors.note(format!(
                    "prewarm {}: {what} ({} bytes): {e}",
                    job.repo,
                    spec.size()
                ));
                (Done::Failed, spec.size(), false)
            }
        }
    }

    /// Pushes what the run reads, each object to the endpoints `jobs` places it on: every
    /// blob, then every manifest. `report` holds what an earlier stage did.
    pub async fn run(&self, jobs: &PrewarmJobs<'_>, mut report: PrewarmReport) -> PrewarmReport {
        let driven = drive(
            jobs.blobs(),
            self.bounds,
            self.env.shutdown,
            |job| job.endpoint,
            |job| self.blob(job),
            |(done, bytes)| {
                self.env.progress.add_bytes(bytes);
                self.tally(&mut report, done, false);
            },
        )
        .await;
        self.cancelled(&mut report, Op::BlobUpload, driven).await;
        if self.env.shutdown.is_cancelled() {
            report.stopped += jobs.manifest_count();
            return report;
        }
        let driven = drive(
            jobs.manifests(),
            self.bounds,
            self.env.shutdown,
            |job| job.endpoint,
            |job| self.manifest(job),
            |done| self.tally(&mut report, done, true),
        )
        .await;
        self.cancelled(&mut report, Op::ManifestPut, driven).await;
        report
    }

    /// Counts what a stop cancelled or kept from starting; each cancelled job is recorded as
    /// a cancelled operation of its endpoint.
    async fn cancelled(
        &self,
        report: &mut PrewarmReport,
        op: Op,
        driven: super::bounded::Driven<usize>,
    ) {
        report.stopped += driven.not_started + driven.cancelled.len() as u64;
        for (started, endpoint) in driven.cancelled {
            let sample = Sample::unanswered(op, ErrorKind::Cancelled, None, started);
            self.clients[endpoint].recorder().record(sample).await;
        }
    }

    fn tally(&self, report: &mut PrewarmReport, done: Done, manifest: bool) {
        self.env.progress.add_done(1);
        if matches!(done, Done::Failed) {
            self.env.progress.add_error();
        }
        match (done, manifest) {
            (Done::Pushed, false) => report.blobs_pushed += 1,
            (Done::Present, false) => report.blobs_present += 1,
            (Done::Pushed, true) => report.manifests_pushed += 1,
            (Done::Present, true) => report.manifests_present += 1,
            (Done::Failed, _) => report.failed += 1,
        }
    }

    /// One blob job: its outcome and its bytes (the progress share follows them).
    async fn blob(&self, job: BlobJob) -> (Done, u64) {
        let (digest, body) = blob_of(self.catalog, self.format, job.origin);
        let source = match body {
            Body::Content(spec) => BlobSource::Content(spec),
            Body::Bytes(bytes) => BlobSource::Bytes(bytes),
        };
        let bytes = source.size();
        let client = &self.clients[job.endpoint];
        let done = match ensure_blob(client, &job.repo, &digest, source).await {
            Ok(true) => Done::Pushed,
            Ok(false) => Done::Present,
            Err(e) => {
                self.env
                    .errors
                    .note(format!("prewarm {}@{digest}: {e}", job.repo));
                Done::Failed
            }
        };
        (done, bytes)
    }

    /// One manifest job: HEAD, and a PUT when the tag does not point at this manifest.
    async fn manifest(&self, job: ManifestJob) -> Done {
        let client = &self.clients[job.endpoint];
        let (_, _, manifest) =
            read_manifest_bytes(self.catalog, self.format, job.repo_sym, job.reference_sym);
        let digest = Digest::sha256_of(&manifest);
        let reference = Reference::Tag(job.tag);
        let ctx = OpCtx::default;
        let media_type = self.format.manifest_type();
        let result: Result<Done, ClientError> = async {
            if let Some(info) = client.manifest_head(&job.repo, &reference, ctx()).await? {
                if info.digest.as_ref() == Some(&digest) {
                    return Ok(Done::Present);
                }
            }
            client
                .manifest_put(&job.repo, &reference, manifest, media_type, ctx())
                .await?;
            Ok(Done::Pushed)
        }
        .await;
        result.unwrap_or_else(|e| {
            self.env
                .errors
                .note(format!("prewarm {}:{reference}: {e}", job.repo));
            Done::Failed
        })
    }
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
    use crate::metrics::AggregatorBuilder;
    use crate::metrics::ErrorLog;
    use crate::net::scripted::{ScriptedResponse, ScriptedTransport};
    use crate::net::transport::RequestBody;
    use crate::oci::manifest::ManifestFormat;
    use crate::plan::catalog::ContentOptions;
    use crate::plan::RepoMap;
    use crate::progress::Progress;
    use crate::route::Router;
    use crate::route::{RouteKind, RouteOptions};
    use crate::shutdown::Shutdown;
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
        let (recorder, _aggregator) = AggregatorBuilder::default().spawn();
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
            let jobs = PrewarmJobs::plan(&catalog, &router, RepoMap::Keep { prefix: None }, false);
            let clients = &clients;
            let catalog = &catalog;
            async move {
                let shutdown = Shutdown::new();
                let errors = ErrorLog::default();
                let progress = Progress::new(0);
                let learned = Learned::default();
                let prewarm = Prewarm {
                    catalog,
                    clients,
                    format,
                    bounds: Bounds {
                        concurrency: 16,
                        grace: Duration::from_secs(1),
                    },
                    env: JobEnv {
                        shutdown: &shutdown,
                        errors: &errors,
                        progress: &progress,
                    },
                    cache: None,
                    learned: &learned,
                };
                prewarm.run(&jobs, PrewarmReport::default()).await
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
