//! The manifests of a replay: built over generated layers for a push, and recomputed for a
//! read from the catalog, so that prewarm and run agree byte for byte on every host.

use bytes::Bytes;

use super::catalog::{self, Catalog};
use super::linker::PushedLayer;
use crate::content::{ContentSpec, Form, Sums};
use crate::digest::Digest;
use crate::oci::manifest::{build_config, build_manifest, Descriptor, ManifestFormat, Platform};
use crate::trace::Sym;

/// A layer a replayed manifest references: its digests, size and form (which gives its
/// media type).
#[derive(Debug, Clone, PartialEq)]
pub struct RecipeLayer {
    pub digest: Digest,
    pub size: u64,
    /// Its uncompressed tar's digest (the config's `diff_id`).
    pub diff: Digest,
    pub form: Form,
}

impl RecipeLayer {
    /// The layer of generated `content` whose digests are `sums`.
    pub fn of(content: &ContentSpec, sums: Sums) -> RecipeLayer {
        RecipeLayer {
            digest: sums.blob_digest(),
            size: content.size(),
            diff: sums.diff_digest(),
            form: content.form(),
        }
    }
}

/// Builds a manifest (with its config) over `layers`, padded to `pad_to`.
pub fn manifest_over(
    format: ManifestFormat,
    config_identity: &str,
    layers: &[RecipeLayer],
    pad_to: u64,
) -> (Bytes, Descriptor, Bytes) {
    let descriptors: Vec<Descriptor> = layers
        .iter()
        .map(|l| Descriptor {
            media_type: format.layer_type(l.form).to_owned(),
            digest: l.digest.clone(),
            size: l.size,
            platform: None,
        })
        .collect();
    let diff_ids: Vec<Digest> = layers.iter().map(|l| l.diff.clone()).collect();
    let (config_bytes, config) =
        build_config(format, config_identity, &diff_ids, &Platform::linux_amd64());
    let manifest = build_manifest(
        format,
        &config,
        &descriptors,
        (pad_to > 0).then_some(pad_to),
    );
    (config_bytes, config, manifest)
}

/// What a replayed manifest PUT sends, as a recipe: the layers it references, a short
/// identity that makes its config unique, and the size to pad to. Planned and queued PUTs
/// (and PUTs waiting for their uploads) hold this — a few hundred bytes — and the manifest
/// itself, kilobytes padded to the trace's recorded size, is built when it is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestRecipe {
    pub format: ManifestFormat,
    pub identity: String,
    pub layers: Vec<RecipeLayer>,
    pub pad_to: u64,
}

impl ManifestRecipe {
    pub fn build(&self) -> BuiltManifest {
        let (config_bytes, config, manifest) =
            manifest_over(self.format, &self.identity, &self.layers, self.pad_to);
        BuiltManifest {
            config_bytes,
            config,
            manifest,
        }
    }
}

/// The body of a manifest PUT: a recipe until it is about to be sent, then the bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum ManifestBody {
    Recipe(Box<ManifestRecipe>),
    Bytes(Bytes),
}

impl ManifestBody {
    /// The manifest's bytes (built from the recipe each time until [`Self::materialize`]).
    pub fn bytes(&self) -> Bytes {
        match self {
            ManifestBody::Recipe(r) => r.build().manifest,
            ManifestBody::Bytes(b) => b.clone(),
        }
    }

    /// Builds the manifest once, keeping the bytes.
    pub fn materialize(&mut self) {
        if let ManifestBody::Recipe(r) = self {
            *self = ManifestBody::Bytes(r.build().manifest);
        }
    }
}

/// A generated manifest and its config blob.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltManifest {
    pub config_bytes: Bytes,
    pub config: Descriptor,
    pub manifest: Bytes,
}

/// The manifest a replayed manifest PUT sends: its push's layers (uploaded in the session,
/// or found present), or the repository's filler layer, and a config unique to the PUT.
/// Prewarm pushes the config blob; the run uploads the layers and PUTs the manifest.
pub fn push_manifest(
    catalog: &Catalog,
    facts: &catalog::PushFacts,
    format: ManifestFormat,
) -> BuiltManifest {
    push_recipe(catalog, facts, format).build()
}

/// The recipe of [`push_manifest`].
pub fn push_recipe(
    catalog: &Catalog,
    facts: &catalog::PushFacts,
    format: ManifestFormat,
) -> ManifestRecipe {
    recipe_over(
        catalog,
        facts.repo,
        facts.identity,
        facts.size,
        catalog.push_layers(facts),
        format,
    )
}

/// The recipe of a manifest PUT to `repo` over `layers` (what the planner queues): the
/// layers' digests and sizes, or the repository's filler layer if it has none, a config
/// of `identity`, padded to the recorded `size`.
pub fn recipe_over(
    catalog: &Catalog,
    repo: Sym,
    identity: u64,
    size: u64,
    layers: impl Iterator<Item = PushedLayer>,
    format: ManifestFormat,
) -> ManifestRecipe {
    let mut layers: Vec<RecipeLayer> = layers
        .map(|layer| match layer {
            PushedLayer::Upload(head) => {
                RecipeLayer::of(&catalog.upload_content(head), catalog.upload_sums(head))
            }
            PushedLayer::Existing(d) => {
                RecipeLayer::of(&catalog.blob_content(d), catalog.blob_sums(d))
            }
        })
        .collect();
    if layers.is_empty() {
        layers.push(RecipeLayer::of(
            &catalog.filler_content(repo),
            catalog.filler_sums(repo),
        ));
    }
    ManifestRecipe {
        format,
        identity: format!("trace/push-config/{identity:016x}"),
        layers,
        pad_to: size,
    }
}

/// The layers of a manifest the run reads.
pub fn read_manifest_layers(catalog: &Catalog, repo: Sym, reference: Sym) -> Vec<RecipeLayer> {
    let facts = catalog.manifests.get(&(repo, reference));
    let layers: Vec<RecipeLayer> = facts
        .map(|m| {
            catalog
                .manifest_layers(m)
                .iter()
                .map(|d| RecipeLayer::of(&catalog.blob_content(*d), catalog.blob_sums(*d)))
                .collect()
        })
        .unwrap_or_default();
    if layers.is_empty() {
        vec![RecipeLayer::of(
            &catalog.filler_content(repo),
            catalog.filler_sums(repo),
        )]
    } else {
        layers
    }
}

/// The config identity of a manifest the run reads.
pub fn read_manifest_identity(catalog: &Catalog, repo: Sym, reference: Sym) -> String {
    format!(
        "trace/config/{}/{}",
        catalog.names.resolve(repo),
        catalog.names.resolve(reference)
    )
}
