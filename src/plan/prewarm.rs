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

use crate::client::BlobSource;
use crate::digest::{Digest, Sha256Sum};
use crate::oci::manifest::{Descriptor, ManifestFormat};
use crate::oci::{Repository, Tag};
use crate::route::{Object, Router};
use crate::trace::Sym;

use super::catalog::{Catalog, ContentKey};
use super::linker::{Position, PushedLayer};
use super::{manifest_over, push_manifest, read_manifest_identity, read_manifest_layers, Naming};

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

/// One blob upload: its repository, digest, where its bytes come from and its endpoint.
#[derive(Debug)]
pub struct BlobJob {
    pub repo: Repository,
    /// The trace's name of the repository.
    pub repo_sym: Sym,
    pub sha256: [u8; 32],
    pub origin: Origin,
    pub endpoint: usize,
}

impl BlobJob {
    /// Whether prewarm's first stage ([`content_jobs`]) uploads this blob already: a blob
    /// the run reads in this repository, or a filler.
    pub fn sent_first(&self, catalog: &Catalog) -> bool {
        match self.origin {
            Origin::Filler(_) => true,
            Origin::Read(d) => catalog.reads_blob(self.repo_sym, d),
            Origin::PushConfig(_) | Origin::ReadConfig(..) => false,
        }
    }
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

/// What prewarm will do: each blob upload once per endpoint and repository, then each
/// manifest on its endpoints.
#[derive(Debug)]
pub struct PrewarmJobs {
    pub blobs: Vec<BlobJob>,
    pub manifests: Vec<ManifestJob>,
}

impl PrewarmJobs {
    /// The jobs for `catalog` placed by `router`.
    /// With `staged`, what [`content_jobs`] uploaded first is left out (the blobs the run
    /// reads and the fillers: [`BlobJob::sent_first`]).
    pub fn plan(
        catalog: &Catalog,
        router: &Router,
        naming: &mut Naming,
        format: ManifestFormat,
        staged: bool,
    ) -> PrewarmJobs {
        let mut jobs = PrewarmJobs {
            blobs: Vec::new(),
            manifests: Vec::with_capacity(catalog.manifests.len() * router.copies()),
        };
        if !staged {
            jobs.place_reads(catalog, router, naming);
        }
        jobs.place_pushes(catalog, router, naming, format);
        jobs.place_manifests(catalog, router, naming, format);
        if staged {
            jobs.blobs.retain(|job| !job.sent_first(catalog));
        }
        // Once per (repository, blob, endpoint); the order interleaves the endpoints.
        let blobs = &mut jobs.blobs;
        blobs.sort_unstable_by(|a, b| {
            (a.repo.as_str(), a.sha256, a.endpoint).cmp(&(b.repo.as_str(), b.sha256, b.endpoint))
        });
        blobs.dedup_by(|a, b| a.repo == b.repo && a.sha256 == b.sha256 && a.endpoint == b.endpoint);
        blobs.shrink_to_fit();
        jobs
    }

    /// Every blob the run reads, and every repository's filler, where the router places the
    /// blob.
    fn place_reads(&mut self, catalog: &Catalog, router: &Router, naming: &mut Naming) {
        let mut place = |repo: &Repository, repo_sym, sha256, origin| {
            let digest = Digest::from_sha256(sha256);
            for endpoint in router.placement(Object::Blob(digest.as_str())) {
                self.blobs.push(BlobJob {
                    repo: repo.clone(),
                    repo_sym,
                    sha256,
                    origin,
                    endpoint,
                });
            }
        };
        for &(repo, d) in catalog.blob_reads() {
            let name = naming.repo(catalog, repo);
            place(&name, repo, catalog.blob_sha256(d), Origin::Read(d));
        }
        for &repo in &catalog.filler_repos {
            let name = naming.repo(catalog, repo);
            place(
                &name,
                repo,
                catalog.filler_sha256(repo),
                Origin::Filler(repo),
            );
        }
    }

    /// A manifest the run pushes lands where routing sends its PUT, with the uploads of
    /// its push (`Action::BlobUpload::push`); everything else it references must be there
    /// already: its config, the layers it found present, or its repository's filler.
    fn place_pushes(
        &mut self,
        catalog: &Catalog,
        router: &Router,
        naming: &mut Naming,
        format: ManifestFormat,
    ) {
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
                self.need(&name, facts.repo, &needs, endpoint);
            }
        }
    }

    /// Every manifest the run reads, on its endpoints, with what it references there too.
    fn place_manifests(
        &mut self,
        catalog: &Catalog,
        router: &Router,
        naming: &mut Naming,
        format: ManifestFormat,
    ) {
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
                self.need(&repo, repo_sym, &needs, endpoint);
                self.manifests.push(ManifestJob {
                    repo_sym,
                    reference_sym,
                    repo: repo.clone(),
                    tag: tag.clone(),
                    endpoint,
                });
            }
        }
    }

    /// Blob jobs for what a manifest in `repo` on `endpoint` needs.
    fn need(
        &mut self,
        repo: &Repository,
        repo_sym: Sym,
        needs: &[([u8; 32], Origin)],
        endpoint: usize,
    ) {
        for &(sha256, origin) in needs {
            self.blobs.push(BlobJob {
                repo: repo.clone(),
                repo_sym,
                sha256,
                origin,
                endpoint,
            });
        }
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

/// The bytes of the blob `origin` names.
pub fn blob_source(catalog: &Catalog, format: ManifestFormat, origin: Origin) -> BlobSource {
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
