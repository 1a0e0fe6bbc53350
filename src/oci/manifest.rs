//! Manifests: the media types creb-rs speaks, building valid image manifests for generated
//! content, and parsing what registries return.
//!
//! Generated layers are tar archives, compressed as their form says and declared with the
//! matching media type; the config's `diff_ids` are their uncompressed tars' digests. A
//! layer too small to be a tar is plain bytes, declared uncompressed (`…layer.v1.tar`) with
//! its own digest as `diff_id`, which keeps the config self-consistent.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::content::layer::Compression;
use crate::content::Form;
use crate::digest::Digest;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
pub const DOCKER_LAYER_TAR: &str = "application/vnd.docker.image.rootfs.diff.tar";
/// Old signed schema 1, still found in traces of old registries; fetched but not built.
pub const DOCKER_V1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// Every manifest type creb-rs accepts, for the `Accept` header. Distribution answers
/// `MANIFEST_UNKNOWN` for an OCI manifest requested without an OCI type in `Accept`.
pub const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v1+prettyjws;q=0.5";

/// Which manifest flavour to build (`--manifest-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestFormat {
    /// OCI image manifest (accepted by every current registry).
    #[default]
    Oci,
    /// Docker image manifest v2 schema 2.
    Docker,
}

impl ManifestFormat {
    pub fn manifest_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => OCI_MANIFEST,
            ManifestFormat::Docker => DOCKER_MANIFEST,
        }
    }
    /// The media type of an index over one image per platform.
    pub fn index_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => OCI_INDEX,
            ManifestFormat::Docker => DOCKER_LIST,
        }
    }
    fn config_type(self) -> &'static str {
        match self {
            ManifestFormat::Oci => OCI_CONFIG,
            ManifestFormat::Docker => DOCKER_CONFIG,
        }
    }
    /// The media type of a layer of `form` (zstd with the docker format, refused where
    /// flags are read, is declared as OCI's zstd type).
    pub fn layer_type(self, form: Form) -> &'static str {
        let compression = match form {
            Form::Raw => Compression::None,
            Form::Layer(l) => l.compression,
        };
        match (self, compression) {
            (ManifestFormat::Oci, Compression::None) => OCI_LAYER,
            (ManifestFormat::Oci, Compression::Gzip) => OCI_LAYER_GZIP,
            (_, Compression::Zstd) => OCI_LAYER_ZSTD,
            (ManifestFormat::Docker, Compression::Gzip) => DOCKER_LAYER,
            // Plain bytes were always declared docker's gzip type; a `none` tar is a tar.
            (ManifestFormat::Docker, Compression::None) => match form {
                Form::Raw => DOCKER_LAYER,
                Form::Layer(_) => DOCKER_LAYER_TAR,
            },
        }
    }
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Platform {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this program runs on, in the OCI's names (`amd64`, `arm64`, …).
    pub fn this_machine() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        Platform {
            architecture: architecture.to_owned(),
            os: std::env::consts::OS.to_owned(),
            variant: None,
        }
    }

    /// Whether an index entry of platform `self` serves a client asking for `want` (a
    /// variant counts only when asked for).
    pub fn matches(&self, want: &Platform) -> bool {
        self.os == want.os
            && self.architecture == want.architecture
            && (want.variant.is_none() || self.variant == want.variant)
    }

    /// `linux/amd64` (what generated images were before platforms could be chosen).
    pub fn linux_amd64() -> Platform {
        Platform {
            architecture: "amd64".to_owned(),
            os: "linux".to_owned(),
            variant: None,
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Platform {
    type Err = String;

    /// `OS/ARCH` or `OS/ARCH/VARIANT`, e.g. `linux/arm64/v8`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.trim().split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match parts[..] {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: os.to_owned(),
                architecture: arch.to_owned(),
                variant: None,
            }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(Platform {
                os: os.to_owned(),
                architecture: arch.to_owned(),
                variant: Some(v.to_owned()),
            }),
            _ => Err(format!(
                "'{s}' is not a platform (OS/ARCH or OS/ARCH/VARIANT, e.g. linux/amd64)"
            )),
        }
    }
}

#[derive(Serialize)]
struct ManifestJson<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'a str,
    config: &'a Descriptor,
    layers: &'a [Descriptor],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'static str, String>,
}

/// An image index (docker: a manifest list) over `manifests`, each with its platform.
pub fn build_index(format: ManifestFormat, manifests: &[Descriptor]) -> Bytes {
    #[derive(Serialize)]
    struct Index<'a> {
        #[serde(rename = "schemaVersion")]
        schema_version: u32,
        #[serde(rename = "mediaType")]
        media_type: &'a str,
        manifests: &'a [Descriptor],
    }
    let index = Index {
        schema_version: 2,
        media_type: format.index_type(),
        manifests,
    };
    Bytes::from(serde_json::to_vec(&index).unwrap_or_default())
}

/// The empty config of an OCI 1.1 artifact manifest (`{}`).
pub const OCI_EMPTY: &str = "application/vnd.oci.empty.v1+json";

/// An OCI 1.1 artifact: an image manifest with an `artifactType`, the empty config, the
/// artifact's blobs as layers, and a `subject` naming the manifest it refers to (a
/// signature, an SBOM). Registries with the referrers API list it under the subject.
pub fn build_artifact(artifact_type: &str, blobs: &[Descriptor], subject: &Descriptor) -> Bytes {
    #[derive(Serialize)]
    struct Artifact<'a> {
        #[serde(rename = "schemaVersion")]
        schema_version: u32,
        #[serde(rename = "mediaType")]
        media_type: &'a str,
        #[serde(rename = "artifactType")]
        artifact_type: &'a str,
        config: Descriptor,
        layers: &'a [Descriptor],
        subject: &'a Descriptor,
    }
    let empty = Descriptor {
        media_type: OCI_EMPTY.to_owned(),
        digest: Digest::sha256_of(b"{}"),
        size: 2,
        platform: None,
    };
    let m = Artifact {
        schema_version: 2,
        media_type: OCI_MANIFEST,
        artifact_type,
        config: empty,
        layers: blobs,
        subject,
    };
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// Annotation key that pads a manifest to a recorded size.
pub const PADDING_ANNOTATION: &str = "io.creb-rs.padding";

/// Serialises an image manifest; with `pad_to`, grows it to exactly that many bytes with a
/// padding annotation (manifests in traces have recorded sizes; a replay reproduces them).
/// A manifest that is already larger than `pad_to` is returned unpadded.
pub fn build_manifest(
    format: ManifestFormat,
    config: &Descriptor,
    layers: &[Descriptor],
    pad_to: Option<u64>,
) -> Bytes {
    let m = ManifestJson {
        schema_version: 2,
        media_type: format.manifest_type(),
        config,
        layers,
        annotations: BTreeMap::new(),
    };
    // Serialising these plain structs cannot fail.
    let plain = serde_json::to_vec(&m).unwrap_or_default();
    let Some(target) = pad_to
        .and_then(|t| usize::try_from(t).ok())
        .filter(|_| !plain.is_empty())
    else {
        return Bytes::from(plain);
    };
    // The padded manifest is the plain one with its annotations before the closing brace,
    // the padding's value a run of zeros: written here as serde writes that map (a test
    // holds the bytes equal), not serialised again, and the padding never escaped byte by
    // byte (a replay makes a manifest again for each read it verifies).
    const OPEN: [&str; 3] = [",\"annotations\":{\"", PADDING_ANNOTATION, "\":\""];
    const CLOSE: &str = "\"}}";
    let open_len: usize = OPEN.iter().map(|s| s.len()).sum();
    let base = plain.len() - 1 + open_len + CLOSE.len();
    if target <= plain.len() || target < base {
        return Bytes::from(plain);
    }
    let mut padded = Vec::with_capacity(target);
    padded.extend_from_slice(&plain[..plain.len() - 1]);
    for piece in OPEN {
        padded.extend_from_slice(piece.as_bytes());
    }
    padded.resize(padded.len() + (target - base), b'0');
    padded.extend_from_slice(CLOSE.as_bytes());
    Bytes::from(padded)
}

/// When generated images and their layers were made (the layers' files' mtime).
pub const CREATED: &str = "2017-06-20T00:00:00Z";

/// A deterministic, valid image config for `platform` over layers whose uncompressed tars'
/// digests are `diff_ids`, one history entry per layer, a label making it unique to
/// `identity`.
pub fn build_config(
    format: ManifestFormat,
    identity: &str,
    diff_ids: &[Digest],
    platform: &Platform,
) -> (Bytes, Descriptor) {
    // Keys in sorted order, as serde_json writes a map: the config's bytes (and digest) are
    // those of the JSON object they were first made as.
    #[derive(Serialize)]
    struct Config<'a> {
        architecture: &'a str,
        config: ConfigLabels<'a>,
        created: &'static str,
        history: Vec<History>,
        os: &'a str,
        rootfs: RootFs<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        variant: Option<&'a str>,
    }
    #[derive(Serialize)]
    struct ConfigLabels<'a> {
        #[serde(rename = "Labels")]
        labels: Identity<'a>,
    }
    #[derive(Serialize)]
    struct Identity<'a> {
        #[serde(rename = "io.creb-rs.identity")]
        identity: &'a str,
    }
    #[derive(Serialize)]
    struct History {
        created: &'static str,
        created_by: String,
    }
    #[derive(Serialize)]
    struct RootFs<'a> {
        diff_ids: Vec<&'a str>,
        #[serde(rename = "type")]
        kind: &'static str,
    }
    let value = Config {
        architecture: &platform.architecture,
        config: ConfigLabels {
            labels: Identity { identity },
        },
        created: CREATED,
        history: (0..diff_ids.len())
            .map(|i| History {
                created: CREATED,
                created_by: format!("creb-rs generated layer {i}"),
            })
            .collect(),
        os: &platform.os,
        rootfs: RootFs {
            diff_ids: diff_ids.iter().map(|d| d.as_str()).collect(),
            kind: "layers",
        },
        variant: platform.variant.as_deref(),
    };
    let bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
    let descriptor = Descriptor {
        media_type: format.config_type().to_owned(),
        digest: Digest::sha256_of(&bytes),
        size: bytes.len() as u64,
        platform: None,
    };
    (bytes, descriptor)
}

/// A manifest as returned by a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedManifest {
    Image {
        config: Option<Descriptor>,
        layers: Vec<Descriptor>,
    },
    Index {
        manifests: Vec<Descriptor>,
    },
}

#[derive(Deserialize)]
struct AnyManifest {
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(rename = "fsLayers", default)]
    fs_layers: Option<Vec<FsLayer>>,
}

#[derive(Deserialize)]
struct FsLayer {
    #[serde(rename = "blobSum")]
    blob_sum: Digest,
}

impl ParsedManifest {
    /// Parses a manifest body; `content_type` is the response header, used when the body
    /// does not carry a `mediaType`.
    pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<ParsedManifest, String> {
        let m: AnyManifest =
            serde_json::from_slice(body).map_err(|e| format!("manifest is not valid JSON: {e}"))?;
        let media_type = m
            .media_type
            .clone()
            .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or("").trim().to_owned()))
            .unwrap_or_default();
        if let Some(manifests) = m.manifests {
            return Ok(ParsedManifest::Index { manifests });
        }
        if media_type == OCI_INDEX || media_type == DOCKER_LIST {
            return Err("index without a manifests array".into());
        }
        if let Some(layers) = m.layers {
            return Ok(ParsedManifest::Image {
                config: m.config,
                layers,
            });
        }
        if let Some(fs) = m.fs_layers {
            // Schema 1 lists layers newest first, with repeats for empty layers.
            let mut seen = std::collections::HashSet::new();
            let layers = fs
                .into_iter()
                .rev()
                .filter(|l| seen.insert(l.blob_sum.clone()))
                .map(|l| Descriptor {
                    media_type: String::new(),
                    digest: l.blob_sum,
                    size: 0,
                    platform: None,
                })
                .collect();
            return Ok(ParsedManifest::Image {
                config: None,
                layers,
            });
        }
        Err(format!(
            "manifest of type '{media_type}' has no layers or manifests"
        ))
    }

    /// Every blob an image manifest references: config first, then layers.
    pub fn blobs(&self) -> Vec<Descriptor> {
        match self {
            ParsedManifest::Image { config, layers } => config
                .iter()
                .cloned()
                .chain(layers.iter().cloned())
                .collect(),
            ParsedManifest::Index { .. } => Vec::new(),
        }
    }

    /// For an index, the entry a client picks: `want`'s (an error naming what the index
    /// holds when it has none), else this machine's platform, else the first entry.
    /// `Ok(None)` for an image manifest.
    pub fn pick_platform(&self, want: Option<&Platform>) -> Result<Option<&Descriptor>, String> {
        let ParsedManifest::Index { manifests } = self else {
            return Ok(None);
        };
        let here = Platform::this_machine();
        let matching = |p: &Platform| {
            manifests
                .iter()
                .find(|d| d.platform.as_ref().is_some_and(|q| q.matches(p)))
        };
        match want {
            Some(p) => matching(p).map(Some).ok_or_else(|| {
                let held: Vec<String> = manifests
                    .iter()
                    .filter_map(|d| d.platform.as_ref().map(Platform::to_string))
                    .collect();
                format!(
                    "the index has no image for {p} (it has {})",
                    if held.is_empty() {
                        "no platforms".to_owned()
                    } else {
                        held.join(", ")
                    }
                )
            }),
            None => Ok(matching(&here).or_else(|| manifests.first())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest and config as first written (serde's map and JSON value): the bytes
    /// the faster builders must keep, digests of manifests pushed before included.
    fn manifest_as_serde_writes_it(
        format: ManifestFormat,
        config: &Descriptor,
        layers: &[Descriptor],
        pad_to: Option<u64>,
    ) -> Vec<u8> {
        let encode = |annotations: BTreeMap<&'static str, String>| -> Vec<u8> {
            let m = ManifestJson {
                schema_version: 2,
                media_type: format.manifest_type(),
                config,
                layers,
                annotations,
            };
            serde_json::to_vec(&m).unwrap()
        };
        let plain = encode(BTreeMap::new());
        let Some(target) = pad_to else {
            return plain;
        };
        let base = encode(BTreeMap::from([(PADDING_ANNOTATION, String::new())])).len() as u64;
        if target <= plain.len() as u64 || target < base {
            return plain;
        }
        let padding = "0".repeat((target - base) as usize);
        encode(BTreeMap::from([(PADDING_ANNOTATION, padding)]))
    }

    fn config_as_serde_writes_it(
        identity: &str,
        diff_ids: &[Digest],
        platform: &Platform,
    ) -> Vec<u8> {
        let ids: Vec<&str> = diff_ids.iter().map(|d| d.as_str()).collect();
        let history: Vec<serde_json::Value> = (0..diff_ids.len())
            .map(|i| {
                serde_json::json!({
                    "created": CREATED,
                    "created_by": format!("creb-rs generated layer {i}"),
                })
            })
            .collect();
        let mut value = serde_json::json!({
            "architecture": platform.architecture,
            "os": platform.os,
            "created": CREATED,
            "config": { "Labels": { "io.creb-rs.identity": identity } },
            "rootfs": { "type": "layers", "diff_ids": ids },
            "history": history,
        });
        if let Some(v) = &platform.variant {
            value["variant"] = serde_json::Value::String(v.clone());
        }
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn manifests_and_configs_are_the_bytes_serde_writes() {
        let platforms = [
            Platform::linux_amd64(),
            Platform {
                architecture: "arm".into(),
                os: "linux".into(),
                variant: Some("v7".into()),
            },
        ];
        for n in [0usize, 1, 3] {
            let diff_ids: Vec<Digest> = (0..n)
                .map(|i| Digest::sha256_of(format!("diff {i}").as_bytes()))
                .collect();
            let layers: Vec<Descriptor> = (0..n)
                .map(|i| Descriptor {
                    media_type: OCI_LAYER.to_owned(),
                    digest: Digest::sha256_of(format!("layer {i}").as_bytes()),
                    size: 1000 + i as u64,
                    platform: None,
                })
                .collect();
            for identity in ["trace/config/r/t", "a \"quoted\" \\ é\u{1}"] {
                for platform in &platforms {
                    for format in [ManifestFormat::Oci, ManifestFormat::Docker] {
                        let (bytes, config) = build_config(format, identity, &diff_ids, platform);
                        assert_eq!(
                            bytes.as_ref(),
                            config_as_serde_writes_it(identity, &diff_ids, platform)
                        );
                        let plain = build_manifest(format, &config, &layers, None).len() as u64;
                        let base = plain + 40;
                        for pad in [None, Some(0), Some(plain), Some(plain + 1), Some(base - 1)]
                            .into_iter()
                            .chain([base, base + 1, base + 5000].map(Some))
                        {
                            let m = build_manifest(format, &config, &layers, pad);
                            let want = manifest_as_serde_writes_it(format, &config, &layers, pad);
                            assert_eq!(m.as_ref(), want, "{pad:?}");
                            if pad >= Some(base) {
                                assert_eq!(Some(m.len() as u64), pad);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_reference_generator_asks_for_what_creb_rs_asks_for() {
        // The benchmark scripts (scripts/lib/bench.sh) give wrk creb-rs's Accept header, so
        // the registry does the same work for both; a change here must reach them too.
        let script = include_str!("../../scripts/lib/bench.sh");
        assert!(
            script.contains(&format!("request_accept='{ACCEPT}'")),
            "scripts/lib/bench.sh's request_accept is not oci::manifest::ACCEPT"
        );
    }

    fn layer(n: u8) -> Descriptor {
        Descriptor {
            media_type: OCI_LAYER.into(),
            digest: Digest::sha256_of(&[n]),
            size: 100 + n as u64,
            platform: None,
        }
    }

    #[test]
    fn built_manifest_parses_back() {
        let layers = vec![layer(1), layer(2)];
        let diff_ids: Vec<Digest> = layers.iter().map(|l| l.digest.clone()).collect();
        let (config_bytes, config) = build_config(
            ManifestFormat::Oci,
            "img-0",
            &diff_ids,
            &Platform::linux_amd64(),
        );
        assert_eq!(config.size, config_bytes.len() as u64);
        let bytes = build_manifest(ManifestFormat::Oci, &config, &layers, None);
        let parsed = ParsedManifest::parse(&bytes, None).unwrap();
        assert_eq!(parsed.blobs().len(), 3);
        assert_eq!(parsed.blobs()[0], config);
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["mediaType"], OCI_MANIFEST);
        assert_eq!(v["schemaVersion"], 2);
    }

    #[test]
    fn padding_hits_the_exact_size() {
        let layers = vec![layer(1)];
        let (_, config) = build_config(
            ManifestFormat::Docker,
            "x",
            &[layers[0].digest.clone()],
            &Platform::linux_amd64(),
        );
        let plain = build_manifest(ManifestFormat::Docker, &config, &layers, None);
        for target in [plain.len() as u64 + 40, 4096, 50_000] {
            let padded = build_manifest(ManifestFormat::Docker, &config, &layers, Some(target));
            assert_eq!(padded.len() as u64, target);
            assert!(ParsedManifest::parse(&padded, None).is_ok());
        }
        // Smaller targets cannot shrink a manifest.
        let small = build_manifest(ManifestFormat::Docker, &config, &layers, Some(10));
        assert_eq!(small, plain);
    }

    #[test]
    fn index_and_schema1() {
        let idx = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[
            {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":1,"platform":{{"architecture":"arm64","os":"linux"}}}},
            {{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":2,"platform":{{"architecture":"amd64","os":"linux"}}}}]}}"#,
            Digest::sha256_of(b"a"),
            Digest::sha256_of(b"b")
        );
        let parsed = ParsedManifest::parse(idx.as_bytes(), None).unwrap();
        let pick = |want: Option<&str>| {
            let want: Option<Platform> = want.map(|w| w.parse().unwrap());
            parsed
                .pick_platform(want.as_ref())
                .map(|d| d.map(|d| d.size))
        };
        assert_eq!(pick(Some("linux/arm64")), Ok(Some(1)));
        assert_eq!(pick(Some("linux/amd64")), Ok(Some(2)));
        let none = pick(Some("linux/s390x")).unwrap_err();
        assert!(
            none.contains("linux/s390x") && none.contains("linux/arm64, linux/amd64"),
            "{none}"
        );
        // No platform asked: this machine's, else the first entry.
        let here = Platform::this_machine();
        let want = if here.to_string() == "linux/arm64" {
            1
        } else {
            2
        };
        if here.os == "linux" && ["amd64", "arm64"].contains(&here.architecture.as_str()) {
            assert_eq!(pick(None), Ok(Some(want)));
        } else {
            assert_eq!(pick(None), Ok(Some(1)));
        }
        assert!("linux".parse::<Platform>().is_err());
        assert_eq!(
            "linux/arm64/v8".parse::<Platform>().unwrap().to_string(),
            "linux/arm64/v8"
        );
        let s1 = format!(
            r#"{{"schemaVersion":1,"fsLayers":[{{"blobSum":"{0}"}},{{"blobSum":"{1}"}},{{"blobSum":"{0}"}}]}}"#,
            Digest::sha256_of(b"a"),
            Digest::sha256_of(b"b")
        );
        let parsed = ParsedManifest::parse(s1.as_bytes(), Some(DOCKER_V1_SIGNED)).unwrap();
        assert_eq!(parsed.blobs().len(), 2);
        assert!(ParsedManifest::parse(b"{}", None).is_err());
        assert!(ParsedManifest::parse(b"nope", None).is_err());
    }
}
