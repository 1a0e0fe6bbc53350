//! What prewarm pushes: every blob the run reads (in the repository it is read from, with
//! filler layers and config blobs), then every manifest, each placed on the endpoints the
//! router names for it. Pure: the jobs are a function of the catalog, the routing and the
//! manifest format, and each job's bytes are rebuilt from the catalog when it runs.
//!
//! Over several endpoints every object goes where the run will read it
//! ([`Router::placement`]): with `--route digest` to its `--replicas` ring successors (a
//! blob by digest, a manifest by `repo:tag`), with the other rules to every endpoint. A
//! registry accepts a manifest only when it holds the manifest's blobs, so a manifest's
//! config and layers are also put on the manifest's own endpoints.
//!
//! Every (endpoint, repository, blob) is one job, and the blobs come before the first
//! manifest: a registry that stores blob links as plain files (distribution) rewrites the
//! link when the same blob is uploaded again, and a manifest PUT that reads the link while
//! it is rewritten is refused (`DIGEST_INVALID`, `MANIFEST_BLOB_UNKNOWN`). Manifests that
//! share a layer or a repository's filler would otherwise upload it side by side.

use std::collections::HashSet;

use crate::digest::Digest;
use crate::oci::manifest::{Descriptor, ManifestFormat};
use crate::oci::{Repository, Tag};
use crate::route::{Object, Router};
use crate::trace::Sym;

use super::catalog::{Catalog, ContentKey};
use super::linker::{Position, PushedLayer};
use super::{
    manifest_over, push_manifest, read_manifest_identity, read_manifest_layers, Naming, RepoMap,
};

/// Where a blob's bytes come from. Rebuilt when its upload runs, so a job stays small.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    /// A blob the run reads.
    Read(Sym),
    /// The filler layer of a trace repository.
    Filler(Sym),
    /// The config blob of a manifest the run pushes (the run uploads its layers).
    PushConfig(Position),
    /// The config blob of a manifest the run reads: (repository, reference).
    ReadConfig(Sym, Sym),
}

/// One blob upload: its repository, where its bytes come from and its endpoint. Its digest
/// is found when it runs ([`blob_of`]).
#[derive(Debug)]
pub struct BlobJob {
    pub repo: Repository,
    pub origin: Origin,
    pub endpoint: usize,
}

/// One manifest PUT: the trace's names, the registry's, and its endpoint.
#[derive(Debug)]
pub struct ManifestJob {
    pub repo_sym: Sym,
    pub reference_sym: Sym,
    pub repo: Repository,
    pub tag: Tag,
    pub endpoint: usize,
}

/// One upload of generated content the run reads (a blob, a filler), in prewarm's first
/// stage, before its digest need be known: the upload computes it from the bytes it sends.
#[derive(Debug)]
pub struct ContentJob {
    pub repo: Repository,
    pub key: ContentKey,
    pub endpoint: usize,
}

/// Prewarm's first stage: every blob the run reads and every repository's filler, each on
/// every endpoint it goes to, as an iterator (nothing is listed: the jobs are made as the
/// driver takes them), with how many there are. `None` when where a blob goes depends on
/// its digest (`--route digest` over several endpoints): the digests are then computed
/// first.
pub fn content_jobs<'a>(
    catalog: &'a Catalog,
    router: &Router,
    mut naming: Naming,
) -> Option<(usize, impl Iterator<Item = ContentJob> + 'a)> {
    let endpoints = router.placement_of_any_blob()?;
    let count = (catalog.blob_reads().len() + catalog.filler_repos.len()) * endpoints.len();
    let reads = catalog
        .blob_reads()
        .iter()
        .map(|&(repo, d)| (repo, ContentKey::Blob(d)));
    let fillers = catalog
        .filler_repos
        .iter()
        .map(|&repo| (repo, ContentKey::Filler(repo)));
    let jobs = reads.chain(fillers).flat_map(move |(repo, key)| {
        let name = naming.repo(catalog, repo);
        endpoints
            .clone()
            .into_iter()
            .map(move |endpoint| ContentJob {
                repo: name.clone(),
                key,
                endpoint,
            })
    });
    Some((count, jobs))
}

/// A blob a manifest needs in its repository on one endpoint: a layer of the trace
/// (`Some`) or the repository's filler (`None`). 12 bytes, so the list of them stays small
/// at any trace size.
type Need = (Sym, Option<Sym>, u32);

/// What prewarm will do after its first stage, made as the driver takes it: the blobs the
/// manifests need that the first stage did not send (listed: the only part that must be
/// deduplicated), then every config, then every manifest on its endpoints (both made from
/// the catalog as they are taken). Without a first stage (`--route digest` over several
/// endpoints) the list also holds every blob the run reads and every filler.
#[allow(missing_debug_implementations)] // holds the router, which is not `Debug`
pub struct PrewarmJobs<'a> {
    catalog: &'a Catalog,
    router: &'a Router,
    repos: RepoMap,
    /// Distinct and sorted by repository, so a repository's blobs go out together and the
    /// endpoints interleave.
    needs: Vec<Need>,
}

impl<'a> PrewarmJobs<'a> {
    /// The jobs for `catalog` placed by `router`.
    /// With `staged`, what [`content_jobs`] uploaded first is left out (the blobs the run
    /// reads and the fillers, on every endpoint).
    pub fn plan(catalog: &'a Catalog, router: &'a Router, repos: RepoMap, staged: bool) -> Self {
        let mut naming = Naming::new(repos.clone());
        let sent_first = |repo: Sym, blob: Option<Sym>| {
            staged && blob.is_none_or(|d| catalog.reads_blob(repo, d))
        };
        let mut needs: Vec<Need> = Vec::new();
        let mut need = |repo: Sym, blob: Option<Sym>, endpoints: &[usize]| {
            if !sent_first(repo, blob) {
                needs.extend(endpoints.iter().map(|&e| (repo, blob, e as u32)));
            }
        };
        if !staged {
            // Every blob the run reads, and every filler, where the router places the blob.
            for &(repo, d) in catalog.blob_reads() {
                let digest = Digest::from_sha256(catalog.blob_sha256(d));
                need(
                    repo,
                    Some(d),
                    &router.placement(Object::Blob(digest.as_str())),
                );
            }
            for &repo in &catalog.filler_repos {
                let digest = Digest::from_sha256(catalog.filler_sha256(repo));
                need(repo, None, &router.placement(Object::Blob(digest.as_str())));
            }
        }
        // A manifest the run pushes lands where routing sends its PUT, with the uploads of
        // its push (`Action::BlobUpload::push`); what else it references must be there
        // already: the layers it found present, or its repository's filler.
        for (_, facts) in catalog.pushes() {
            let endpoints =
                manifest_endpoints(catalog, router, &mut naming, facts.repo, facts.reference);
            for layer in catalog.push_layers(facts) {
                if let PushedLayer::Existing(d) = layer {
                    need(facts.repo, Some(d), &endpoints);
                }
            }
            if facts.layers.is_empty() {
                need(facts.repo, None, &endpoints);
            }
        }
        // Every manifest the run reads needs its layers, or its filler, where it lands.
        for (&(repo, reference), facts) in catalog.manifests.iter() {
            let endpoints = manifest_endpoints(catalog, router, &mut naming, repo, reference);
            let layers = catalog.manifest_layers(facts);
            if layers.is_empty() {
                need(repo, None, &endpoints);
            }
            for &d in layers {
                need(repo, Some(d), &endpoints);
            }
        }
        needs.sort_unstable();
        needs.dedup();
        dedup_same_bytes(catalog, &mut needs);
        needs.shrink_to_fit();
        PrewarmJobs {
            catalog,
            router,
            repos,
            needs,
        }
    }

    /// Blob uploads: the needs listed, then a config for every manifest on each of its
    /// endpoints (a config is its manifest's own, so none repeats).
    pub fn blobs(&self) -> impl Iterator<Item = BlobJob> + '_ {
        let catalog = self.catalog;
        let mut naming = Naming::new(self.repos.clone());
        let needs = self
            .needs
            .iter()
            .map(move |&(repo, blob, endpoint)| BlobJob {
                repo: naming.repo(catalog, repo),
                origin: blob.map_or(Origin::Filler(repo), Origin::Read),
                endpoint: endpoint as usize,
            });
        let pushes = catalog
            .pushes()
            .map(|(position, facts)| (facts.repo, facts.reference, Origin::PushConfig(position)));
        let reads = catalog
            .manifests
            .iter()
            .map(|(&(repo, reference), _)| (repo, reference, Origin::ReadConfig(repo, reference)));
        let mut naming = Naming::new(self.repos.clone());
        let router = self.router;
        let configs = pushes
            .chain(reads)
            .flat_map(move |(repo, reference, origin)| {
                let endpoints = manifest_endpoints(catalog, router, &mut naming, repo, reference);
                let name = naming.repo(catalog, repo);
                endpoints.into_iter().map(move |endpoint| BlobJob {
                    repo: name.clone(),
                    origin,
                    endpoint,
                })
            });
        needs.chain(configs)
    }

    /// Every manifest the run reads, on each of its endpoints.
    pub fn manifests(&self) -> impl Iterator<Item = ManifestJob> + '_ {
        let (catalog, router) = (self.catalog, self.router);
        let mut naming = Naming::new(self.repos.clone());
        catalog
            .manifests
            .iter()
            .flat_map(move |(&(repo_sym, reference_sym), _)| {
                let repo = naming.repo(catalog, repo_sym);
                let tag = naming.tag(catalog, repo_sym, reference_sym);
                let endpoints = router.placement(Object::Manifest {
                    repo: repo.as_str(),
                    reference: tag.as_str(),
                });
                endpoints.into_iter().map(move |endpoint| ManifestJob {
                    repo_sym,
                    reference_sym,
                    repo: repo.clone(),
                    tag: tag.clone(),
                    endpoint,
                })
            })
    }

    /// Blob uploads [`PrewarmJobs::blobs`] makes.
    pub fn blob_count(&self) -> u64 {
        let manifests = self.catalog.pushes().len() + self.catalog.manifests.len();
        (self.needs.len() + manifests * self.router.copies()) as u64
    }

    /// Manifest PUTs [`PrewarmJobs::manifests`] makes.
    pub fn manifest_count(&self) -> u64 {
        (self.catalog.manifests.len() * self.router.copies()) as u64
    }

    /// Objects to prewarm: blob uploads and manifest PUTs, each counted per endpoint.
    pub fn len(&self) -> u64 {
        self.blob_count() + self.manifest_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the manifest `repo:reference` of the trace lands.
fn manifest_endpoints(
    catalog: &Catalog,
    router: &Router,
    naming: &mut Naming,
    repo: Sym,
    reference: Sym,
) -> Vec<usize> {
    let name = naming.repo(catalog, repo);
    let tag = naming.tag(catalog, repo, reference);
    router.placement(Object::Manifest {
        repo: name.as_str(),
        reference: tag.as_str(),
    })
}

/// Drops a need whose bytes another need of the same repository and endpoint has already
/// (scaled-down blobs of a byte or two often share a digest): a registry that stores blob
/// links as plain files (distribution) rewrites the link when the same blob is uploaded
/// again, and a HEAD that reads it meanwhile fails. `needs` is sorted by repository, and the
/// set only ever holds one repository's digests.
fn dedup_same_bytes(catalog: &Catalog, needs: &mut Vec<Need>) {
    let mut seen: HashSet<([u8; 32], u32)> = HashSet::new();
    let mut repo = None;
    needs.retain(|&(r, blob, endpoint)| {
        if repo != Some(r) {
            repo = Some(r);
            seen.clear();
        }
        let sha = blob.map_or_else(|| catalog.filler_sha256(r), |d| catalog.blob_sha256(d));
        seen.insert((sha, endpoint))
    });
}

/// What a prewarmed blob's bytes are: generated content, or small bytes made by the plan
/// (configs). The executor turns it into what the client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Generated content, produced while it is sent.
    Content(crate::content::ContentSpec),
    /// Small bytes held in memory.
    Bytes(bytes::Bytes),
}

/// The digest and the bytes of the blob `origin` names.
pub fn blob_of(catalog: &Catalog, format: ManifestFormat, origin: Origin) -> (Digest, Body) {
    let bytes = |b: bytes::Bytes| (Digest::sha256_of(&b), Body::Bytes(b));
    match origin {
        Origin::Read(d) => (
            Digest::from_sha256(catalog.blob_sha256(d)),
            Body::Content(catalog.blob_content(d)),
        ),
        Origin::Filler(repo) => (
            Digest::from_sha256(catalog.filler_sha256(repo)),
            Body::Content(catalog.filler_content(repo)),
        ),
        Origin::PushConfig(position) => bytes(
            catalog
                .push(position)
                .map(|facts| push_manifest(catalog, facts, format).config_bytes)
                .unwrap_or_default(),
        ),
        Origin::ReadConfig(repo, reference) => {
            bytes(read_manifest_bytes(catalog, format, repo, reference).0)
        }
    }
}

/// The config, its descriptor and the manifest of a manifest the run reads.
pub fn read_manifest_bytes(
    catalog: &Catalog,
    format: ManifestFormat,
    repo: Sym,
    reference: Sym,
) -> (bytes::Bytes, Descriptor, bytes::Bytes) {
    let layers = read_manifest_layers(catalog, repo, reference);
    let identity = read_manifest_identity(catalog, repo, reference);
    let size = catalog
        .manifests
        .get(&(repo, reference))
        .map_or(0, |m| u64::from(m.size));
    manifest_over(format, &identity, &layers, size)
}

/// The digest of the manifest prewarm pushes for the manifest `repo:reference` of the trace.
pub fn read_manifest_digest(
    catalog: &Catalog,
    format: ManifestFormat,
    repo: Sym,
    reference: Sym,
) -> Digest {
    Digest::sha256_of(&read_manifest_bytes(catalog, format, repo, reference).2)
}
