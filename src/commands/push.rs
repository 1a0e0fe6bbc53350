//! `creb-rs push`: generate images of unique layers and push them. This file holds the
//! flags, their validation into [`PushConfig`] and the wiring: the push itself is
//! [`crate::synthetic::push`].

use std::num::NonZeroUsize;

use clap::Args;

use super::args::{parse_concurrency, parse_count_u64, parse_seed};
use super::args::{
    LayerArgs, ManifestFormatArg, OutputArgs, RegistryArgs, ReplicaArgs, RuntimeArgs, StopArgs,
};
use crate::client::UploadMode;
use crate::content::DEFAULT_SEED;
use crate::exec::push::{HashWhen, PushWork};
use crate::oci::manifest::Platform;
use crate::oci::{Repository, Tag};
use crate::plan::image::ImageSpec;
use crate::session::connect::RegistryConfig;
use crate::session::status::ExitStatus;
use crate::session::Session;
use crate::shutdown::Shutdown;
use crate::synthetic::push::{self, PushConfig};
use crate::units::ByteSize;

/// `push --help` ends with these.
/// `push -h` ends with these.
pub const SHORT_EXAMPLES: &str = "\
Examples (more with --help):
  # 10 images of 3 layers of 10 MiB (gzip tars of file trees), 8 uploads at once, results kept
  creb-rs push --registry http://127.0.0.1:5000 --repo bench/app --images 10 --layers 3 \\
    --layer-size 10MiB --concurrency 8 --output-dir results/push
  creb-rs push --registry http://127.0.0.1:5000 --repo bench/app --layers 2 --layer-size 64MiB \\
    --replica http://127.0.0.1:5001";

/// `push --help` ends with these.
pub const EXAMPLES: &str = "\
Examples:
  # 10 images of 3 layers of 10 MiB (gzip tars of file trees), 8 uploads at once, results kept
  creb-rs push --registry http://127.0.0.1:5000 --repo bench/app --images 10 --layers 3 \\
    --layer-size 10MiB --concurrency 8 --output-dir results/push
  # chunked uploads (POST, PATCH 5 MiB at a time, PUT) to a TLS registry with a private CA
  creb-rs push --registry https://registry.internal --ca-cert ca.pem --repo bench/app \\
    --layers 2 --layer-size 64MiB --chunk-size 5MiB
  # how long each image takes until a replica kept by a sync job serves it (replication)
  creb-rs push --registry http://127.0.0.1:5000 --repo bench/app --images 20 --layers 2 \\
    --layer-size 64MiB --replica http://127.0.0.1:5001 --fail-if 'p99(replication) > 2m'";

#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Repository to push to, e.g. `bench/app`.
    #[arg(help_heading = "Workload", long, value_name = "NAME")]
    pub repo: Repository,

    /// Tag of the image; with --images N > 1 the images are tagged TAG-0 … TAG-(N-1).
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "TAG",
        default_value = "latest"
    )]
    pub tag: Tag,

    /// How many images to push.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "1", value_parser = parse_count_u64)]
    pub images: u64,

    /// Layers per image.
    #[arg(help_heading = "Workload", long, value_name = "N", value_parser = parse_count_u64)]
    pub layers: u64,

    /// Size of each layer (`512`, `4KiB`, `10MiB`, `1GiB`).
    #[arg(help_heading = "Workload", long, value_name = "SIZE")]
    pub layer_size: ByteSize,

    /// Upload in PATCH chunks of this size (POST, PATCH…, PUT).
    #[arg(help_heading = "Workload", long, value_name = "SIZE", conflicts_with_all = ["monolithic", "single_post"])]
    pub chunk_size: Option<ByteSize>,

    /// When each layer's digest is computed: `first` (before the image's first request;
    /// each layer HEADed before its upload, as a client whose layers are hashed already) or
    /// `while-sending` (as its PATCHes send it: every byte generated and hashed once, no
    /// HEAD before a layer). Default: `while-sending` with --chunk-size, else `first` (a
    /// monolithic or single-POST upload names its digest before its body; a mount names
    /// it too).
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_enum,
        value_name = "WHEN"
    )]
    pub hash: Option<HashArg>,

    /// Upload each blob with one PUT after the POST (the default).
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        conflicts_with = "single_post"
    )]
    pub monolithic: bool,

    /// Upload each blob in the POST itself (`?digest=`); when the registry answers 202 (as
    /// distribution does) the blob is sent again with a PUT, and counted.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub single_post: bool,

    /// After each image, push N artifacts that refer to it (OCI 1.1: a manifest whose
    /// `subject` is the image, e.g. a signature or an SBOM), each of one 512-byte blob.
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "N", default_value = "0", value_parser = parse_count_u64)]
    pub attach: u64,

    /// Mount each blob from this repository first (cross-repository mount), uploading when
    /// the registry declines. Layers are generated as the ones pushed to that repository.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "NAME"
    )]
    pub mount_from: Option<Repository>,

    /// Blob uploads in flight at once.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "4", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    /// Manifest flavour: OCI image manifest or Docker schema 2.
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_enum, default_value_t = ManifestFormatArg::Oci)]
    pub manifest_format: ManifestFormatArg,

    #[command(flatten)]
    pub layer: LayerArgs,

    #[command(flatten)]
    pub replica: ReplicaArgs,

    /// Push each image for these platforms (`linux/amd64,linux/arm64`): one image per
    /// platform, each with layers of its own, under an image index (a manifest list with
    /// the docker format) tagged as the image.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "OS/ARCH,...",
        value_delimiter = ','
    )]
    pub platforms: Vec<Platform>,

    /// Seed of the generated content (decimal or 0x-hex). Same seed, repository and tag
    /// give the same bytes and digests on every host.
    #[arg(hide_short_help = true, help_heading = "Workload", long, value_name = "S", default_value_t = DEFAULT_SEED, value_parser = parse_seed)]
    pub seed: u64,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// `--hash`: when a layer's digest is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HashArg {
    First,
    WhileSending,
}

/// Validated settings of a push.
impl TryFrom<&PushArgs> for PushConfig {
    type Error = anyhow::Error;

    fn try_from(a: &PushArgs) -> anyhow::Result<Self> {
        if a.images == 0 {
            anyhow::bail!("--images must be at least 1");
        }
        let upload = match (a.chunk_size, a.single_post) {
            (Some(c), _) if c.bytes() == 0 => anyhow::bail!("--chunk-size must be at least 1 byte"),
            (Some(c), _) => UploadMode::Chunked {
                chunk_size: c.bytes(),
            },
            (None, true) => UploadMode::SinglePost,
            (None, false) => UploadMode::Monolithic,
        };
        if a.mount_from.as_ref() == Some(&a.repo) {
            anyhow::bail!("--mount-from names the repository being pushed to");
        }
        let chunked = matches!(upload, UploadMode::Chunked { .. });
        let hash = match a.hash {
            Some(HashArg::First) => HashWhen::First,
            Some(HashArg::WhileSending) if !chunked => anyhow::bail!(
                "--hash while-sending needs --chunk-size: a monolithic or single-POST upload names its digest before its body"
            ),
            Some(HashArg::WhileSending) if a.mount_from.is_some() => anyhow::bail!(
                "--hash while-sending cannot go with --mount-from: a mount names the blob's digest before anything is sent"
            ),
            Some(HashArg::WhileSending) => HashWhen::WhileSending,
            None if chunked && a.mount_from.is_none() => HashWhen::WhileSending,
            None => HashWhen::First,
        };
        Ok(PushConfig {
            registry: RegistryConfig::try_from(&a.registry)?.single("push")?,
            work: PushWork {
                images: ImageSpec {
                    repo: a.repo.clone(),
                    tag: a.tag.clone(),
                    images: a.images,
                    layers: a.layers,
                    layer_size: a.layer_size.bytes(),
                    mount_from: a.mount_from.clone(),
                    manifest_format: a.manifest_format.into(),
                    layer_form: a.layer.form(a.manifest_format.into())?,
                    platforms: platforms(&a.platforms)?,
                    seed: a.seed,
                },
                upload,
                hash,
                attach: a.attach,
            },
            concurrency: a.concurrency.get(),
            replicas: a.replica.spec()?,
        })
    }
}

/// `--platforms`, each named once.
fn platforms(given: &[Platform]) -> anyhow::Result<Vec<Platform>> {
    for (i, p) in given.iter().enumerate() {
        if given[..i].contains(p) {
            anyhow::bail!("--platforms names {p} twice");
        }
    }
    Ok(given.to_vec())
}

/// Runs `creb-rs push`.
pub async fn run(args: PushArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PushConfig::try_from(&args)?;
    let quiet = args.output.quiet || args.output.json;
    super::limits::prepare(cfg.concurrency, 1, "--concurrency", quiet)?;
    let names = cfg.endpoint_names();
    let session = Session::open(&(&args.output).into(), push::labels(&cfg), &names, 0).await?;
    let watch = session.watch_registry().await?;
    args.stop.arm(&shutdown);
    push::run(&cfg, session, watch, args.stop.grace, &shutdown).await
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::commands::args::HttpClientArg;
    use crate::commands::{Cli, Command};

    #[test]
    fn push_flags_parse_into_types() {
        let cli = Cli::try_parse_from([
            "creb-rs",
            "push",
            "--registry",
            "http://127.0.0.1:5000/v2/",
            "--repo",
            "x/y",
            "--layers",
            "4",
            "--layer-size",
            "1MiB",
            "--chunk-size",
            "256KiB",
            "--concurrency",
            "8",
        ])
        .unwrap();
        let Command::Push(p) = cli.command else {
            panic!("not push")
        };
        assert_eq!(p.registry.registry[0].as_str(), "http://127.0.0.1:5000/");
        assert_eq!(p.layer_size.bytes(), 1 << 20);
        assert_eq!(p.chunk_size.unwrap().bytes(), 256 << 10);
        assert_eq!(p.concurrency.get(), 8);
        assert_eq!(p.seed, DEFAULT_SEED);
        assert_eq!(p.registry.http_client, HttpClientArg::Hyper);
        assert_eq!(
            p.registry.http1_read_buffer, None,
            "sized by what is in flight"
        );
    }

    /// Layers are hashed while sending where the upload allows it (PATCHes, no mount);
    /// asked for where it cannot be, the push is refused with the reason.
    #[test]
    fn hashing_while_sending_is_the_default_where_the_upload_allows_it() {
        let config = |extra: &[&str]| {
            let mut args = vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1",
            ];
            args.extend_from_slice(extra);
            let Command::Push(p) = Cli::try_parse_from(args).unwrap().command else {
                panic!("not push")
            };
            PushConfig::try_from(&p).map(|c| c.work.hash)
        };
        assert_eq!(config(&[]).unwrap(), HashWhen::First);
        assert_eq!(config(&["--single-post"]).unwrap(), HashWhen::First);
        assert_eq!(
            config(&["--chunk-size", "1KiB"]).unwrap(),
            HashWhen::WhileSending
        );
        assert_eq!(
            config(&["--chunk-size", "1KiB", "--hash", "first"]).unwrap(),
            HashWhen::First
        );
        assert_eq!(
            config(&["--chunk-size", "1KiB", "--mount-from", "y"]).unwrap(),
            HashWhen::First
        );
        let refused = config(&["--hash", "while-sending"])
            .unwrap_err()
            .to_string();
        assert!(refused.contains("--chunk-size"), "{refused}");
        let refused = config(&[
            "--chunk-size",
            "1KiB",
            "--mount-from",
            "y",
            "--hash",
            "while-sending",
        ])
        .unwrap_err()
        .to_string();
        assert!(refused.contains("--mount-from"), "{refused}");
    }

    #[test]
    fn conflicting_upload_modes_are_refused() {
        let err = Cli::try_parse_from([
            "creb-rs",
            "push",
            "--registry",
            "http://h",
            "--repo",
            "x",
            "--layers",
            "1",
            "--layer-size",
            "1",
            "--chunk-size",
            "1",
            "--single-post",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            vec![
                "creb-rs",
                "push",
                "--registry",
                "ftp://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "UPPER",
                "--layers",
                "1",
                "--layer-size",
                "1",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1XB",
            ],
            vec![
                "creb-rs",
                "push",
                "--registry",
                "http://h",
                "--repo",
                "x",
                "--layers",
                "1",
                "--layer-size",
                "1",
                "--concurrency",
                "0",
            ],
        ] {
            assert!(Cli::try_parse_from(&args).is_err(), "{args:?}");
        }
    }
}
