//! `creb-rs push`: generate images of unique layers and push them.
//!
//! Each image is prepared first (layer digests computed on blocking threads, not timed),
//! then its blobs go up with at most `--concurrency` uploads in flight across all images:
//! HEAD (skip if present), optional cross-repository mount, upload; then the manifest PUT.
//! Every request and every whole upload session is timed; an `image_push` session sample
//! runs from the first blob request to the manifest PUT's response.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::{stream, StreamExt};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use clap::Args;

use super::args::{parse_concurrency, parse_count_u64, parse_seed};
use super::args::{ManifestFormatArg, OutputArgs, RegistryArgs, RuntimeArgs};
use super::session::{
    config_json, endpoint_links, finish, preflight, prepare_output, run_output, thresholds,
    Finished, RegistryConfig,
};
use super::ExitStatus;
use crate::client::{
    BlobSource, ClientError, ClientOptions, MountOutcome, OpCtx, RegistryClient, UploadMode,
};
use crate::content::{ContentSpec, DEFAULT_SEED};
use crate::digest::Digest;
use crate::metrics::live::RunInfoLabels;
use crate::metrics::ErrorLog;
use crate::metrics::{Event, HttpStatuses, Op, Outcome, Sample, SizeClass, Timing};
use crate::oci::manifest::{
    build_artifact, build_config, build_manifest, Descriptor, ManifestFormat, OCI_MANIFEST,
};
use crate::oci::{Reference, Repository, Tag};
use crate::progress::{Progress, ProgressLine};
use crate::results::{Meta, MetaInput, RunInfo, Shard, Summary, Warning};
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
    #[arg(help_heading = "Workload", long, value_name = "S", default_value_t = DEFAULT_SEED, value_parser = parse_seed)]
    pub seed: u64,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Validated settings of a push.
#[derive(Debug, Clone, Serialize)]
pub struct PushConfig {
    pub registry: RegistryConfig,
    pub repo: Repository,
    pub tag: Tag,
    pub images: u64,
    pub layers: u64,
    pub layer_size: u64,
    pub upload: UploadMode,
    pub mount_from: Option<Repository>,
    pub concurrency: usize,
    pub manifest_format: ManifestFormat,
    pub seed: u64,
    /// Artifacts pushed per image, referring to it (`--attach`).
    pub attach: u64,
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
        Ok(PushConfig {
            registry: RegistryConfig::try_from(&a.registry)?.single("push")?,
            repo: a.repo.clone(),
            tag: a.tag.clone(),
            images: a.images,
            layers: a.layers,
            layer_size: a.layer_size.bytes(),
            upload,
            mount_from: a.mount_from.clone(),
            concurrency: a.concurrency.get(),
            manifest_format: a.manifest_format.into(),
            seed: a.seed,
            attach: a.attach,
        })
    }
}

impl PushConfig {
    /// The tag of image `index`: the tag itself for a single image, else `TAG-index`.
    pub fn image_tag(&self, index: u64) -> String {
        if self.images == 1 {
            self.tag.to_string()
        } else {
            format!("{}-{index}", self.tag)
        }
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
/// The source repository is `--mount-from` when given, so mounted blobs match.
pub fn plan_image(cfg: &PushConfig, index: u64) -> anyhow::Result<ImagePlan> {
    let tag_name = cfg.image_tag(index);
    let tag: Tag = tag_name.parse().map_err(anyhow::Error::msg)?;
    let origin = cfg.mount_from.as_ref().unwrap_or(&cfg.repo);
    let layers: Vec<(ContentSpec, Descriptor)> = (0..cfg.layers)
        .map(|j| {
            let identity = format!("push/{origin}:{tag_name}/layer/{j}");
            let spec = ContentSpec::new(cfg.seed, identity.as_bytes(), cfg.layer_size);
            let descriptor = Descriptor {
                media_type: cfg.manifest_format.layer_type().to_owned(),
                digest: spec.digest(),
                size: spec.size(),
                platform: None,
            };
            (spec, descriptor)
        })
        .collect();
    let descriptors: Vec<Descriptor> = layers.iter().map(|(_, d)| d.clone()).collect();
    let identity = format!("push/{origin}:{tag_name}/seed/{}", cfg.seed);
    let config = build_config(cfg.manifest_format, &identity, &descriptors);
    let manifest = build_manifest(cfg.manifest_format, &config.1, &descriptors, None);
    Ok(ImagePlan {
        tag,
        layers,
        config,
        manifest,
        media_type: cfg.manifest_format.manifest_type(),
    })
}

/// Planning an image generates and hashes all its layers. Up to this many bytes (about
/// 35 µs of hashing) and [`PLAN_INLINE_LAYERS`] layers that is done on the runtime; a
/// hand-off to the blocking pool costs two thread wake-ups, more than planning a small image.
const PLAN_INLINE_BYTES: u64 = 64 << 10;

/// Most layers planned on the runtime: each costs a few µs besides its bytes (its identity,
/// descriptor and place in the config and manifest).
const PLAN_INLINE_LAYERS: u64 = 16;

/// Pushes one blob: HEAD, then mount (if configured) or upload.
async fn push_blob(
    client: &RegistryClient,
    cfg: &PushConfig,
    digest: &Digest,
    source: &BlobSource,
) -> Result<(), ClientError> {
    let ctx = OpCtx::default();
    if client.blob_head(&cfg.repo, digest, ctx).await?.is_some() {
        client.recorder().event(Event::BlobExists).await;
        return Ok(());
    }
    let mut session = None;
    if let Some(from) = &cfg.mount_from {
        match client.mount_blob(&cfg.repo, digest, from, ctx).await? {
            MountOutcome::Mounted => return Ok(()),
            MountOutcome::Session(url) => session = Some(url),
            MountOutcome::Refused => {}
        }
    }
    client
        .upload_blob(&cfg.repo, digest, source, cfg.upload, session, ctx)
        .await
        .map(|_| ())
}

/// What `--attach` pushes.
pub const ARTIFACT_TYPE: &str = "application/vnd.creb-rs.attachment.v1";

/// Pushes `cfg.attach` artifacts whose `subject` is the image just pushed: the empty
/// config, one small blob each, and the artifact manifest by digest. Failures are counted
/// in their own operations; the image's push is already done.
async fn attach_artifacts(
    client: &RegistryClient,
    cfg: &PushConfig,
    plan: &ImagePlan,
    subject: &Descriptor,
    errors: &ErrorLog,
) {
    let empty = Bytes::from_static(b"{}");
    let empty_digest = Digest::sha256_of(&empty);
    if let Err(e) = push_blob(client, cfg, &empty_digest, &BlobSource::Bytes(empty)).await {
        errors.note(format!("{}@{empty_digest}: {e}", cfg.repo));
        return;
    }
    for k in 0..cfg.attach {
        let identity = format!("attach/{}:{}/{k}", cfg.repo, plan.tag);
        let spec = ContentSpec::new(cfg.seed, identity.as_bytes(), 512);
        let blob = Descriptor {
            media_type: "application/octet-stream".to_owned(),
            digest: spec.digest(),
            size: spec.size(),
            platform: None,
        };
        if let Err(e) = push_blob(client, cfg, &blob.digest, &BlobSource::Content(spec)).await {
            errors.note(format!("{}@{}: {e}", cfg.repo, blob.digest));
            continue;
        }
        let manifest = build_artifact(ARTIFACT_TYPE, std::slice::from_ref(&blob), subject);
        let reference = Reference::Digest(Digest::sha256_of(&manifest));
        let put = client
            .manifest_put(
                &cfg.repo,
                &reference,
                manifest,
                OCI_MANIFEST,
                OpCtx::default(),
            )
            .await;
        if let Err(e) = put {
            errors.note(format!("{}@{reference}: artifact: {e}", cfg.repo));
        }
    }
}

/// Pushes image `index`; records the `image_push` session.
#[allow(clippy::too_many_arguments)]
async fn push_image(
    client: &RegistryClient,
    cfg: &PushConfig,
    index: u64,
    permits: &Semaphore,
    shutdown: &Shutdown,
    errors: &ErrorLog,
    progress: &Progress,
) {
    if shutdown.is_cancelled() {
        return;
    }
    let small = cfg.layers <= PLAN_INLINE_LAYERS
        && cfg.layers.saturating_mul(cfg.layer_size) <= PLAN_INLINE_BYTES;
    let planned = if small {
        Ok(plan_image(cfg, index))
    } else {
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || plan_image(&cfg, index)).await
    };
    let plan = match planned {
        Ok(Ok(plan)) => plan,
        Ok(Err(e)) => {
            errors.note(format!("image {index}: {e:#}"));
            return;
        }
        Err(e) => {
            errors.note(format!("image {index}: preparation failed: {e}"));
            return;
        }
    };
    let start = Instant::now();
    let mut blobs: Vec<(Digest, BlobSource)> = Vec::with_capacity(plan.layers.len() + 1);
    blobs.push((
        plan.config.1.digest.clone(),
        BlobSource::Bytes(plan.config.0.clone()),
    ));
    for (spec, d) in &plan.layers {
        blobs.push((d.digest.clone(), BlobSource::Content(*spec)));
    }
    let total_bytes: u64 = blobs.iter().map(|(_, s)| s.size()).sum();
    let uploads = blobs.iter().map(|(digest, source)| async move {
        let Ok(_permit) = permits.acquire().await else {
            return Err(ClientError::Cancelled);
        };
        if shutdown.is_cancelled() {
            return Err(ClientError::Cancelled);
        }
        push_blob(client, cfg, digest, source).await.map_err(|e| {
            errors.note(format!("{}@{digest}: {e}", cfg.repo));
            e
        })
    });
    let results = futures_util::future::join_all(uploads).await;
    let sent = start;
    let mut outcome = Outcome::Ok;
    if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
        outcome = Outcome::Error(e.kind());
    } else if shutdown.is_cancelled() {
        return;
    } else {
        let reference = Reference::Tag(plan.tag.clone());
        let put = client
            .manifest_put(
                &cfg.repo,
                &reference,
                plan.manifest.clone(),
                plan.media_type,
                OpCtx::default(),
            )
            .await;
        match put {
            Err(e) => {
                errors.note(format!("{}:{}: manifest: {e}", cfg.repo, plan.tag));
                outcome = Outcome::Error(e.kind());
            }
            Ok(digest) if cfg.attach > 0 => {
                let subject = Descriptor {
                    media_type: plan.media_type.to_owned(),
                    digest,
                    size: plan.manifest.len() as u64,
                    platform: None,
                };
                attach_artifacts(client, cfg, &plan, &subject, errors).await;
            }
            Ok(_) => {}
        }
    }
    if matches!(
        outcome,
        Outcome::Error(crate::metrics::ErrorKind::Cancelled)
    ) {
        return;
    }
    progress.add_done(1);
    if !outcome.is_ok() {
        progress.add_error();
    }
    let timing = Timing {
        intended: None,
        sent,
        first_byte: None,
        end: Instant::now(),
    };
    client
        .recorder()
        .record(Sample {
            op: Op::ImagePush,
            outcome,
            size_class: SizeClass::of(total_bytes),
            timing,
            bytes_sent: total_bytes + plan.manifest.len() as u64,
            bytes_received: 0,
            http: HttpStatuses::NONE,
        })
        .await;
}

/// Runs `creb-rs push`.
pub async fn run(args: PushArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PushConfig::try_from(&args)?;
    let thresholds = thresholds(&args.output)?;
    prepare_output(&args.output)?;
    let mut output = run_output(&args.output);
    let observation = super::observe::start(
        &args.output,
        RunInfoLabels::new("push", "push", Some(cfg.seed), 0, 1),
        &cfg.registry,
        0,
        &mut output,
    )
    .await?;
    let registry_watch = super::observe::RegistryWatch::start(&args.output).await?;
    let started_at = SystemTime::now();
    let start = Instant::now();
    let (recorder, aggregator) = output.start(start, started_at)?;
    let options = ClientOptions {
        push_scopes: true,
        ..ClientOptions::default()
    };
    let connection = cfg
        .registry
        .connect(recorder, options, cfg.concurrency)
        .await?;
    let errors = ErrorLog::default();

    let preflight = preflight(&connection, &cfg.registry.display()).await;
    let client = connection.client;
    if preflight.is_ok() {
        let permits = Arc::new(Semaphore::new(cfg.concurrency));
        let progress = Progress::new(cfg.images);
        let line = ProgressLine::show(
            "push",
            "images",
            Arc::clone(&progress),
            crate::progress::wanted(args.output.quiet, args.output.json),
        );
        stream::iter(0..cfg.images)
            .map(|i| {
                let (client, cfg, permits, shutdown, errors, progress) =
                    (&client, &cfg, &permits, &shutdown, &errors, &progress);
                async move { push_image(client, cfg, i, permits, shutdown, errors, progress).await }
            })
            .buffer_unordered(cfg.concurrency)
            .collect::<Vec<()>>()
            .await;
        line.finish();
    }
    let duration = start.elapsed();
    let links = endpoint_links(&[(cfg.registry.display(), &client)]);
    drop(client);
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
    let summary = Summary::build(
        RunInfo {
            command: "push".into(),
            mode: "push".into(),
            model: "closed".into(),
            concurrency: cfg.concurrency as u64,
            registry: cfg.registry.display(),
            seed: cfg.seed,
            shard: Shard { index: 0, count: 1 },
            started_at,
            duration,
            interrupted: shutdown.is_cancelled(),
            trace: None,
            checks: None,
            warnings,
            config: config_json(&cfg, &connection.credentials),
        },
        &aggregator,
    );
    let meta = Meta::new(
        &summary,
        MetaInput {
            config: summary.config.clone(),
            dataset: {
                let mut d = serde_json::json!({
                    "command": "push",
                    "repo": cfg.repo,
                    "tag": cfg.tag,
                    "images": cfg.images,
                    "layers": cfg.layers,
                    "layer_size": cfg.layer_size,
                    "mount_from": cfg.mount_from,
                    "manifest_format": cfg.manifest_format,
                    "seed": cfg.seed,
                });
                if cfg.attach > 0 {
                    d["attach"] = cfg.attach.into();
                }
                d
            },
            anchor: started_at,
            start_at: None,
            actual_start: started_at,
            start_skew_ms: None,
            interval: output.interval,
        },
    );
    let mut meta = meta;
    meta.endpoints = links;
    let run = Finished {
        summary,
        aggregator,
        meta,
    };
    if let Some(watch) = registry_watch {
        watch
            .finish(
                output.dir.as_deref(),
                run.summary.totals.http_requests,
                args.output.quiet || args.output.json,
            )
            .await?;
    }
    let status = finish(run, &args.output, &thresholds, preflight.err(), &errors);
    observation.finish().await;
    status
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
        assert_eq!(p.registry.http1_read_buffer.bytes(), 16 << 10);
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
