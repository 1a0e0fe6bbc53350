//! `creb-rs push`: generate images of unique layers and push them. This file holds the
//! flags, their validation into [`PushConfig`] and the wiring: the images are planned by
//! [`crate::plan::image`] and pushed by [`crate::exec::push`].

use std::num::NonZeroUsize;
use std::time::SystemTime;

use clap::Args;
use tokio::time::Instant;

use super::args::{parse_concurrency, parse_count_u64, parse_seed};
use super::args::{ManifestFormatArg, OutputArgs, RegistryArgs, RuntimeArgs, StopArgs};
use crate::auth::credentials::CredentialInfo;
use crate::client::{ClientOptions, UploadMode};
use crate::content::DEFAULT_SEED;
use crate::exec::bounded::{Bounds, JobEnv};
use crate::exec::push::{push_images, HashWhen, PushWork};
use crate::metrics::live::RunInfoLabels;
use crate::metrics::{ErrorLog, Event};
use crate::oci::{Repository, Tag};
use crate::plan::image::ImageSpec;
use crate::progress::Progress;
use crate::results::config::{PushBlock, RunConfig};
use crate::results::{Meta, MetaInput, RunInfo, Shard, Summary, Warning};
use crate::session::connect::{endpoint_links, preflight, RegistryConfig};
use crate::session::status::ExitStatus;
use crate::session::{Finished, Session};
use crate::shutdown::Shutdown;
use crate::units::ByteSize;

/// `push --help` ends with these.
pub const EXAMPLES: &str = "\
Examples:
  # 10 images of 3 layers of 10 MiB, 8 uploads in flight, results kept
  creb-rs push --registry http://127.0.0.1:5000 --repo bench/app --images 10 --layers 3 \\
    --layer-size 10MiB --concurrency 8 --output-dir results/push
  # chunked uploads (POST, PATCH 5 MiB at a time, PUT) to a TLS registry with a private CA
  creb-rs push --registry https://registry.internal --ca-cert ca.pem --repo bench/app \\
    --layers 2 --layer-size 64MiB --chunk-size 5MiB";

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
#[derive(Debug, Clone)]
pub struct PushConfig {
    pub registry: RegistryConfig,
    pub work: PushWork,
    pub concurrency: usize,
}

impl PushConfig {
    /// The results' `config` block of this push, its credentials from `credentials`.
    fn config_block(&self, credentials: &CredentialInfo) -> RunConfig {
        let images = &self.work.images;
        RunConfig::Push(Box::new(PushBlock {
            registry: self.registry.block(),
            credentials: credentials.clone(),
            repo: images.repo.clone(),
            tag: images.tag.clone(),
            images: images.images,
            layers: images.layers,
            layer_size: images.layer_size,
            mount_from: images.mount_from.clone(),
            manifest_format: images.manifest_format,
            seed: images.seed,
            upload: self.work.upload,
            hash: self.work.hash.name(),
            attach: self.work.attach,
            concurrency: self.concurrency,
        }))
    }
}

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
                    seed: a.seed,
                },
                upload,
                hash,
                attach: a.attach,
            },
            concurrency: a.concurrency.get(),
        })
    }
}

/// Runs `creb-rs push`.
pub async fn run(args: PushArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PushConfig::try_from(&args)?;
    let quiet = args.output.quiet || args.output.json;
    super::limits::prepare(cfg.concurrency, 1, "--concurrency", quiet)?;
    let images = &cfg.work.images;
    let labels = RunInfoLabels::new("push", "push", Some(images.seed), 0, 1);
    let session = Session::open(
        &(&args.output).into(),
        labels,
        &cfg.registry.endpoint_names(),
        0,
    )
    .await?;
    let watch = session.watch_registry().await?;
    args.stop.arm(&shutdown);
    let started_at = SystemTime::now();
    let start = Instant::now();
    let (recorder, aggregator) = session.output.start(start, started_at)?;
    let options = ClientOptions {
        push_scopes: true,
        ..ClientOptions::default()
    };
    let connection = cfg
        .registry
        .connect(recorder, options, cfg.concurrency, &shutdown)
        .await?;
    let errors = ErrorLog::default();

    let preflight = preflight(&connection, &cfg.registry.display(), &shutdown).await;
    let client = connection.client.clone();
    if preflight.is_ok() {
        let progress = Progress::new(images.images);
        let line = session.progress_line("push", "images", &progress);
        let bounds = Bounds {
            concurrency: cfg.concurrency,
            grace: args.stop.grace,
        };
        let env = JobEnv {
            shutdown: &shutdown,
            errors: &errors,
            progress: &progress,
        };
        push_images(&client, &cfg.work, bounds, env).await;
        line.finish();
    }
    // What a stop cut off (an upload in flight past the grace, the first GET /v2/) is a
    // failure like any other.
    client.record_cut_off().await;
    let duration = start.elapsed();
    drop(client);
    let links = endpoint_links(&[cfg.registry.display()], std::slice::from_ref(&connection));
    let aggregator = aggregator.finish().await;

    let mut warnings = Vec::new();
    let existed = aggregator.events[Event::BlobExists.index()];
    if existed > 0 {
        warnings.push(Warning {
            kind: "blobs_existed".into(),
            message: format!(
                "{existed} blobs were already in the registry and were not uploaded; use another --seed for fresh content"
            ),
        });
    }
    if shutdown.by_limit() {
        warnings.push(Warning {
            kind: "max_run_time".into(),
            message: "ended at --max-run-time; the images not started were not pushed".into(),
        });
    }
    let summary = Summary::build(
        RunInfo {
            command: "push".into(),
            mode: "push".into(),
            model: "closed".into(),
            concurrency: cfg.concurrency as u64,
            registry: cfg.registry.display(),
            seed: images.seed,
            shard: Shard { index: 0, count: 1 },
            started_at,
            duration,
            interrupted: shutdown.interrupted(),
            trace: None,
            checks: None,
            warnings,
            config: cfg.config_block(&connection.credentials),
        },
        &aggregator,
    );
    let mut meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: dataset_json(&cfg.work),
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval: session.output.interval,
        },
    );
    meta.endpoints = links;
    let run = Finished {
        summary,
        aggregator,
        meta,
    };
    session.finish(run, watch, preflight.err(), &errors).await
}

/// What a push generated, for meta.json (the identity of its dataset).
fn dataset_json(work: &PushWork) -> serde_json::Value {
    let images = &work.images;
    let mut d = serde_json::json!({
        "command": "push",
        "repo": images.repo,
        "tag": images.tag,
        "images": images.images,
        "layers": images.layers,
        "layer_size": images.layer_size,
        "mount_from": images.mount_from,
        "manifest_format": images.manifest_format,
        "seed": images.seed,
    });
    if work.attach > 0 {
        d["attach"] = work.attach.into();
    }
    d
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
