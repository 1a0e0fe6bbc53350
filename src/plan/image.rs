//! The images `push` generates: a pure function of (seed, repository, tag, index) to layers,
//! config and manifest, so every host that pushes or pulls them agrees on every digest.

use bytes::Bytes;
use serde::Serialize;

use crate::content::layer::LayerForm;
use crate::content::ContentSpec;
use crate::digest::Digest;
use crate::oci::manifest::{
    build_config, build_index, build_manifest, Descriptor, ManifestFormat, Platform,
};
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
    /// How the layers are made: a tar of a file tree, compressed so.
    pub layer_form: LayerForm,
    /// The platforms of each image (`--platforms`): one image per platform, with layers of
    /// its own, under an index. Empty: one linux/amd64 image, no index.
    pub platforms: Vec<Platform>,
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

    /// The bytes of one image's layers (every platform's).
    pub fn image_bytes(&self) -> u64 {
        self.layers
            .saturating_mul(self.layer_size)
            .saturating_mul(self.platforms.len().max(1) as u64)
    }

    /// The platforms an image is pushed for: `None` alone when there is no index.
    pub fn platform_slots(&self) -> Vec<Option<Platform>> {
        if self.platforms.is_empty() {
            vec![None]
        } else {
            self.platforms.iter().cloned().map(Some).collect()
        }
    }

    /// Whether the layers are too small to be tar archives (plain bytes, counted as
    /// `raw_layers`).
    pub fn raw_layers(&self) -> bool {
        self.layer_size < self.layer_form.min_size()
    }
}

/// A layer's digests: the blob's, and its uncompressed tar's (the config's `diff_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDigests {
    pub blob: Digest,
    pub diff: Digest,
}

impl LayerDigests {
    /// Both digests of `content`, computed in one pass.
    pub fn of(content: &ContentSpec) -> LayerDigests {
        let (blob, diff) = content.digests();
        LayerDigests {
            blob: Digest::from_sha256(blob),
            diff: Digest::from_sha256(diff),
        }
    }
}

/// One image, ready to push.
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub tag: Tag,
    /// The platform it is the image of, under an index; `None`: the tag's own image.
    pub platform: Option<Platform>,
    pub layers: Vec<(ContentSpec, Descriptor)>,
    pub config: (Bytes, Descriptor),
    pub manifest: Bytes,
    pub media_type: &'static str,
}

/// The content of image `index` for `platform`: a pure function of (seed, source
/// repository, tag, index, platform). The source repository is `mount_from` when given, so
/// mounted blobs match.
pub fn plan_image(
    spec: &ImageSpec,
    index: u64,
    platform: Option<&Platform>,
) -> Result<ImagePlan, String> {
    let (tag, layers) = image_layers(spec, index, platform)?;
    let layers = layers
        .into_iter()
        .map(|content| (content, LayerDigests::of(&content)))
        .collect();
    Ok(plan_over(spec, tag, layers, platform))
}

/// The tag and layers of image `index` for `platform` (each platform's layers its own), no
/// digest computed (an upload that hashes what it sends learns them; [`plan_over`] then
/// makes the config and manifest).
pub fn image_layers(
    spec: &ImageSpec,
    index: u64,
    platform: Option<&Platform>,
) -> Result<(Tag, Vec<ContentSpec>), String> {
    let tag: Tag = spec.image_tag(index).parse()?;
    let origin = spec.mount_from.as_ref().unwrap_or(&spec.repo);
    let on = platform.map_or(String::new(), |p| format!("/{p}"));
    let layers = (0..spec.layers)
        .map(|j| {
            let identity = format!("push/{origin}:{tag}{on}/layer/{j}");
            ContentSpec::layer(
                spec.seed,
                identity.as_bytes(),
                spec.layer_size,
                spec.layer_form,
            )
        })
        .collect();
    Ok((tag, layers))
}

/// Image `tag` of `spec` over its layers and their digests: the config and the manifest.
pub fn plan_over(
    spec: &ImageSpec,
    tag: Tag,
    layers: Vec<(ContentSpec, LayerDigests)>,
    platform: Option<&Platform>,
) -> ImagePlan {
    let origin = spec.mount_from.as_ref().unwrap_or(&spec.repo);
    let diff_ids: Vec<Digest> = layers.iter().map(|(_, d)| d.diff.clone()).collect();
    let layers: Vec<(ContentSpec, Descriptor)> = layers
        .into_iter()
        .map(|(content, digests)| {
            let descriptor = Descriptor {
                media_type: spec.manifest_format.layer_type(content.form()).to_owned(),
                digest: digests.blob,
                size: content.size(),
                platform: None,
            };
            (content, descriptor)
        })
        .collect();
    let descriptors: Vec<Descriptor> = layers.iter().map(|(_, d)| d.clone()).collect();
    let on = platform.map_or(String::new(), |p| format!("/{p}"));
    let identity = format!("push/{origin}:{tag}{on}/seed/{}", spec.seed);
    let config = build_config(
        spec.manifest_format,
        &identity,
        &diff_ids,
        platform.unwrap_or(&Platform::linux_amd64()),
    );
    let manifest = build_manifest(spec.manifest_format, &config.1, &descriptors, None);
    ImagePlan {
        tag,
        platform: platform.cloned(),
        layers,
        config,
        manifest,
        media_type: spec.manifest_format.manifest_type(),
    }
}

/// The index over one image per platform (`entries`: each image's manifest descriptor with
/// its platform): its bytes and media type.
pub fn plan_index(spec: &ImageSpec, entries: &[Descriptor]) -> (Bytes, &'static str) {
    (
        build_index(spec.manifest_format, entries),
        spec.manifest_format.index_type(),
    )
}
