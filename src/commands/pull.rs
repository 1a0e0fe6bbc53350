//! `creb-rs pull`: fetch manifests, then every blob they reference, read to the end and
//! verified against its digest (unless `--verify none`). This file holds the flags, their
//! validation into [`PullConfig`] and the wiring; the pull itself is
//! [`crate::synthetic::pull`].
//!
//! Distributed pull (`--from`): manifests come from the first `--registry`, each blob from
//! the endpoint the `--route` rule names (by layer position, seed-free random, or digest on
//! the ring). `summary.json` then has per-endpoint numbers.

use std::num::NonZeroUsize;

use clap::Args;
use url::Url;

use super::args::{parse_concurrency, parse_count_u64, REGISTRY_URL};
use super::args::{
    OutputArgs, RegistryArgs, RouteKindArg, RuntimeArgs, StopArgs, UnpackArgs, VerifyArg,
    VerifyArgs,
};
use crate::exec::pull::PullTargets;
use crate::oci::manifest::Platform;
use crate::oci::{Reference, Repository};
use crate::session::connect::RegistryConfig;
use crate::session::status::ExitStatus;
use crate::session::Session;
use crate::shutdown::Shutdown;
use crate::synthetic::pull::{self, PullConfig};

/// `pull --help` ends with these.
pub const EXAMPLES: &str = "\
Examples:
  # pull (and verify) what `push --images 10` pushed, 8 blobs in flight
  creb-rs pull --registry http://127.0.0.1:5000 --repo bench/app --images 10 --concurrency 8
  # every tag of a repository, with credentials from the docker config, as JSON
  creb-rs pull --registry https://registry.example --repo team/app --all-tags --json";

#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Repository to pull from.
    #[arg(help_heading = "Workload", long, value_name = "NAME")]
    pub repo: Repository,

    /// Tag (or digest) to pull; with --images N > 1, TAG-0 … TAG-(N-1) as `push` names them.
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "REF",
        default_value = "latest",
        conflicts_with = "all_tags"
    )]
    pub tag: String,

    /// How many images to pull (see --tag).
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "1", value_parser = parse_count_u64)]
    pub images: u64,

    /// Pull every tag of the repository (listed with the paginated tags API).
    #[arg(help_heading = "Workload", long)]
    pub all_tags: bool,

    /// With --all-tags: tags asked per page of the tag list (`n`).
    #[arg(help_heading = "Workload", hide_short_help = true, long, value_name = "N", default_value = "100", requires = "all_tags",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub tag_page_size: u32,

    /// Blob downloads in flight at once.
    #[arg(help_heading = "Workload", long, value_name = "N", default_value = "4", value_parser = parse_concurrency)]
    pub concurrency: NonZeroUsize,

    #[command(flatten)]
    pub verify: VerifyArgs,

    #[command(flatten)]
    pub unpack: UnpackArgs,

    /// Also list each image's referrers (OCI 1.1: signatures, SBOMs, what `push --attach`
    /// adds) and fetch their manifests. A registry without the referrers API is counted
    /// (event `referrers_unsupported`), not failed.
    #[arg(help_heading = "Workload", hide_short_help = true, long)]
    pub referrers: bool,

    /// The platform to pull from an image index (`OS/ARCH[/VARIANT]`, e.g. `linux/arm64`),
    /// as clients pick: default this machine's, else the index's first image. An index
    /// without it is an error.
    #[arg(
        help_heading = "Workload",
        hide_short_help = true,
        long,
        value_name = "OS/ARCH"
    )]
    pub platform: Option<Platform>,

    /// Distributed pull: also fetch blobs from this registry (repeatable or
    /// comma-separated), which must hold the same images. Manifests come from the first
    /// `--registry`; each blob from the endpoint `--route` picks, all in parallel.
    #[arg(hide_short_help = true, help_heading = "Workload", long = "from", value_name = "URL", value_parser = REGISTRY_URL, value_delimiter = ',')]
    pub from: Vec<Url>,

    /// Distributed pull: which endpoint serves each blob: `round-robin` (by layer
    /// position), `random`, `digest` (consistent hashing of the blob digest).
    #[arg(
        hide_short_help = true,
        help_heading = "Workload",
        long,
        value_name = "RULE",
        default_value = "round-robin"
    )]
    pub route: RouteKindArg,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub stop: StopArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

impl TryFrom<&PullArgs> for PullConfig {
    type Error = anyhow::Error;

    fn try_from(a: &PullArgs) -> anyhow::Result<Self> {
        if a.images == 0 {
            anyhow::bail!("--images must be at least 1");
        }
        let targets = if a.all_tags {
            PullTargets::AllTags {
                page_size: a.tag_page_size,
            }
        } else {
            let refs: Vec<String> = if a.images == 1 {
                vec![a.tag.clone()]
            } else {
                (0..a.images).map(|i| format!("{}-{i}", a.tag)).collect()
            };
            for r in &refs {
                r.parse::<Reference>().map_err(anyhow::Error::msg)?;
            }
            PullTargets::References(refs)
        };
        let mut registry = RegistryConfig::try_from(&a.registry)?;
        for url in &a.from {
            if registry.endpoints.contains(url) {
                anyhow::bail!("--from {url} is already an endpoint");
            }
            registry.endpoints.push(url.clone());
        }
        let route = (registry.endpoints.len() > 1).then_some(a.route.into());
        Ok(PullConfig {
            registry,
            route,
            repo: a.repo.clone(),
            targets,
            concurrency: a.concurrency.get(),
            verify: a.verify.mode(VerifyArg::Sha256).into(),
            referrers: a.referrers,
            platform: a.platform.clone(),
            unpack: a.unpack.work(),
        })
    }
}

/// Runs `creb-rs pull`.
pub async fn run(args: PullArgs, shutdown: Shutdown) -> anyhow::Result<ExitStatus> {
    let cfg = PullConfig::try_from(&args)?;
    let quiet = args.output.quiet || args.output.json;
    let endpoints = if cfg.route.is_some() {
        cfg.registry.endpoints.len()
    } else {
        1
    };
    super::limits::prepare(cfg.concurrency, endpoints, "--concurrency", quiet)?;
    let names = cfg.registry.endpoint_names();
    let session = Session::open(&(&args.output).into(), pull::labels(), &names, 0).await?;
    let watch = session.watch_registry().await?;
    args.stop.arm(&shutdown);
    pull::run(&cfg, session, watch, args.stop.grace, &shutdown).await
}
