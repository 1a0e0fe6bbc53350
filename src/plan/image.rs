//! The images `push` generates: a pure function of (seed, repository, tag, index) to layers,
//! config and manifest, so every host that pushes or pulls them agrees on every digest.

use bytes::Bytes;
use serde::Serialize;

use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::oci::manifest::{build_config, build_manifest, Descriptor, ManifestFormat};
use crate::oci::{Repository, Tag};

/// What a synthetic push generates: `images` images of `layers` unique layers each.
#[derive(Debug, Clone, Serialize)]
pub struct ImageSpec {
    pub repo: Repository,
    pub tag: Tag,
    pub images: u64,
    pub layers: u64,
    pub layer_size: u64,
    /// The repository the layers are generated for (and mounted from), when not `repo`.
    pub mount_from: Option<Repository>,
    pub manifest_format: ManifestFormat,
    pub seed: u64,
}

impl ImageSpec {
    /// The tag of image `index`: the tag itself for a single image, else `TAG-index`.
    pub fn image_tag(&self, index: u64) -> String {
        if self.images == 1 {
            self.tag.to_string()
        } else {
            format!("{}-{index}", self.tag)
        }
    }

    /// The bytes of one image's layers.
    pub fn image_bytes(&self) -> u64 {
        self.layers.saturating_mul(self.layer_size)
    }
}

/// One image, ready to push.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub tag: Tag,
    pub layers: Vec<(ContentSpec, Descriptor)>,
    pub config: (Bytes, Descriptor),
    pub manifest: Bytes,
    pub media_type: &'static str,
}

/// The content of image `index`: a pure function of (seed, source repository, tag, index).
/// The source repository is `mount_from` when given, so mounted blobs match.
pub fn plan_image(spec: &ImageSpec, index: u64) -> Result<ImagePlan, String> {
    let (tag, layers) = image_layers(spec, index)?;
    let layers = layers
        .into_iter()
        .map(|content| (content, content.digest()))
        .collect();
    Ok(plan_over(spec, tag, layers))
}

/// The tag and layers of image `index`, no digest computed (an upload that hashes what it
/// sends learns them; [`plan_over`] then makes the config and manifest).
pub fn image_layers(spec: &ImageSpec, index: u64) -> Result<(Tag, Vec<ContentSpec>), String> {
    let tag: Tag = spec.image_tag(index).parse()?;
    let origin = spec.mount_from.as_ref().unwrap_or(&spec.repo);
    let layers = (0..spec.layers)
        .map(|j| {
            let identity = format!("push/{origin}:{tag}/layer/{j}");
            ContentSpec::new(spec.seed, identity.as_bytes(), spec.layer_size)
        })
        .collect();
    Ok((tag, layers))
}

/// Image `tag` of `spec` over its layers and their digests: the config and the manifest.
pub fn plan_over(spec: &ImageSpec, tag: Tag, layers: Vec<(ContentSpec, Digest)>) -> ImagePlan {
    let origin = spec.mount_from.as_ref().unwrap_or(&spec.repo);
    let layers: Vec<(ContentSpec, Descriptor)> = layers
        .into_iter()
        .map(|(content, digest)| {
            let descriptor = Descriptor {
                media_type: spec.manifest_format.layer_type().to_owned(),
                digest,
                size: content.size(),
                platform: None,
            };
            (content, descriptor)
        })
        .collect();
    let descriptors: Vec<Descriptor> = layers.iter().map(|(_, d)| d.clone()).collect();
    let identity = format!("push/{origin}:{tag}/seed/{}", spec.seed);
    let config = build_config(spec.manifest_format, &identity, &descriptors);
    let manifest = build_manifest(spec.manifest_format, &config.1, &descriptors, None);
    ImagePlan {
        tag,
        layers,
        config,
        manifest,
        media_type: spec.manifest_format.manifest_type(),
    }
}
