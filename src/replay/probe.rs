//! Before a `--phase run`: does the registry hold what this run reads? A few of the blobs
//! and manifests prewarm would push for this trace, with these settings, are asked for
//! with HEAD. When none is there, the prewarm used other settings (a different `--seed`,
//! repository mapping, manifest format or limit) and every read would fail: the run is
//! refused with the fix. When some are missing, the run goes on with a warning in its
//! result. The probe's requests are not part of any result.

use super::config::ReplayConfig;
use super::context::Context;
use crate::client::{OpCtx, RegistryClient};
use crate::digest::Digest;
use crate::metrics::AggregatorBuilder;
use crate::oci::Reference;
use crate::plan::catalog::Catalog;
use crate::plan::prewarm::read_manifest_digest;
use crate::plan::Naming;
use crate::route::Object;

/// Blobs and manifests asked for, at most.
const BLOBS: usize = 12;
const MANIFESTS: usize = 6;

/// What the probe found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Found {
    /// Objects asked for that answered (present, absent or different).
    pub asked: usize,
    /// Absent (404).
    pub missing: usize,
    /// Manifests present under their tag with other content than this run would push.
    pub different: usize,
}

impl Found {
    fn lacking(&self) -> usize {
        self.missing + self.different
    }
}

/// `count` indexes spread evenly over `0..len`.
fn spread(len: usize, count: usize) -> impl Iterator<Item = usize> {
    let step = len.div_ceil(count.max(1)).max(1);
    (0..len).step_by(step)
}

/// Asks the registry for a sample of what prewarm would have pushed.
pub(super) async fn probe(context: &Context<'_>, catalog: &Catalog) -> Found {
    let cfg = context.cfg;
    let (recorder, aggregator) = AggregatorBuilder::default().spawn();
    let clients: Vec<_> = context
        .connections
        .iter()
        .map(|c| c.client_for(recorder.clone()))
        .collect();
    let mut naming = Naming::new(cfg.plan.repos.clone());
    let mut found = Found::default();
    found.blobs(context, catalog, &clients, &mut naming).await;
    found
        .manifests(context, catalog, &clients, &mut naming)
        .await;
    drop(clients);
    drop(aggregator.finish().await);
    found
}

impl Found {
    /// HEADs a sample of the blobs the run reads, each on the endpoint that holds it.
    async fn blobs(
        &mut self,
        context: &Context<'_>,
        catalog: &Catalog,
        clients: &[RegistryClient],
        naming: &mut Naming,
    ) {
        let blobs = catalog.blob_reads();
        for i in spread(blobs.len(), BLOBS) {
            let (repo_sym, d) = blobs[i];
            let repo = naming.repo(catalog, repo_sym);
            let digest = Digest::from_sha256(catalog.blob_sha256(d));
            let endpoint = first(context, Object::Blob(digest.as_str()));
            let head = clients[endpoint].blob_head(&repo, &digest, OpCtx::default());
            let Some(answer) = until_stopped(context, head).await else {
                break;
            };
            match answer {
                Ok(Some(_)) => self.asked += 1,
                Ok(None) => {
                    self.asked += 1;
                    self.missing += 1;
                }
                Err(_) => {}
            }
        }
    }

    /// HEADs a sample of the manifests only prewarm writes, their digests compared.
    async fn manifests(
        &mut self,
        context: &Context<'_>,
        catalog: &Catalog,
        clients: &[RegistryClient],
        naming: &mut Naming,
    ) {
        // A manifest the trace also pushes may hold the run's own content from an earlier run:
        // only those nobody but prewarm writes say what prewarm did.
        let pushed: std::collections::HashSet<_> =
            catalog.pushed_manifests().iter().copied().collect();
        let manifests: Vec<_> = catalog
            .manifests
            .keys()
            .copied()
            .filter(|key| !pushed.contains(key))
            .collect();
        for i in spread(manifests.len(), MANIFESTS) {
            let (repo_sym, reference_sym) = manifests[i];
            let repo = naming.repo(catalog, repo_sym);
            let tag = naming.tag(catalog, repo_sym, reference_sym);
            let expected = read_manifest_digest(
                catalog,
                context.cfg.plan.manifest_format,
                repo_sym,
                reference_sym,
            );
            let endpoint = first(
                context,
                Object::Manifest {
                    repo: repo.as_str(),
                    reference: tag.as_str(),
                },
            );
            let reference = Reference::Tag(tag.clone());
            let head = clients[endpoint].manifest_head(&repo, &reference, OpCtx::default());
            let Some(answer) = until_stopped(context, head).await else {
                break;
            };
            match answer {
                Ok(Some(head)) => {
                    self.asked += 1;
                    if head.digest.is_some_and(|d| d != expected) {
                        self.different += 1;
                    }
                }
                Ok(None) => {
                    self.asked += 1;
                    self.missing += 1;
                }
                Err(_) => {}
            }
        }
    }
}

/// `future`'s output, or `None` when a stop comes first (the probe then ends).
async fn until_stopped<T>(
    context: &Context<'_>,
    future: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = context.shutdown.token().cancelled() => None,
        out = future => Some(out),
    }
}

/// The endpoint a read of `object` goes to first.
fn first(context: &Context<'_>, object: Object<'_>) -> usize {
    let endpoint = context
        .router
        .placement(object)
        .into_iter()
        .next()
        .unwrap_or(0);
    endpoint.min(context.connections.len() - 1)
}

/// The settings that decide what prewarm pushes, as this run has them.
fn settings(cfg: &ReplayConfig) -> String {
    let repos = serde_json::to_string(&cfg.plan.repos).unwrap_or_default();
    let mut parts = vec![
        format!("--seed {}", cfg.seed),
        format!("repositories {repos}"),
        format!(
            "--manifest-format {}",
            serde_json::to_value(cfg.plan.manifest_format)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ),
        format!(
            "--compression {} --compress-ratio {}",
            cfg.content.layer_form.compression,
            cfg.content.layer_form.ratio()
        ),
    ];
    if let Some(n) = cfg.limit_requests {
        parts.push(format!("--limit-requests {n}"));
    }
    if let Some(d) = cfg.limit_duration_s {
        parts.push(format!("--limit-duration {d}s"));
    }
    parts.join(", ")
}

/// The flag that selects a window of the trace, as given: its objects are the window's
/// (blob sizes, and so digests, follow the records read).
fn window_flag(cfg: &ReplayConfig) -> Option<String> {
    match (cfg.limit_requests, cfg.limit_duration_s) {
        (Some(n), _) => Some(format!("--limit-requests {n}")),
        (None, Some(d)) => Some(format!("--limit-duration {d}s")),
        (None, None) => None,
    }
}

/// The verdict on what the probe found: `Err` (refuse the run) when nothing asked for is
/// there, or when part of it is missing under a window of the trace (a window reads other
/// objects than a prewarm of another selection: most of its reads would fail) unless
/// `force`; `Ok(Some)` (a warning) when part of it is missing otherwise.
pub(super) fn verdict(
    cfg: &ReplayConfig,
    found: &Found,
    force: bool,
) -> Result<Option<String>, String> {
    if found.asked == 0 || found.lacking() == 0 {
        return Ok(None);
    }
    let what = format!(
        "{} of {} objects this run reads, asked for before it, are {}",
        found.lacking(),
        found.asked,
        match (found.missing, found.different) {
            (_, 0) => "missing".to_owned(),
            (0, d) => format!("manifests with other content ({d})"),
            (m, d) => format!("missing ({m}) or manifests with other content ({d})"),
        }
    );
    if found.lacking() == found.asked {
        return Err(format!(
            "the registry does not hold what this run reads: {what}. The prewarm ran with other \
             settings than this run ({}): run --phase prewarm with the same --seed, \
             --repo-prefix or --repo-map, --manifest-format, --compression, --compress-ratio and \
             limits (or --phase all), then \
             this run again",
            settings(cfg)
        ));
    }
    if let (Some(flag), false) = (window_flag(cfg), force) {
        return Err(format!(
            "{} of {} objects this run reads are not in the registry: {flag} selects a window \
             of the trace, and blob sizes (so their digests) follow the records read, so the \
             window's objects differ from a prewarm of another selection. Prewarm the same \
             window (replay --phase prewarm {flag}), or run --phase all; --force runs anyway \
             (the reads of what is missing fail)",
            found.lacking(),
            found.asked
        ));
    }
    Ok(Some(format!(
        "{what}: reads of them will fail. Was the prewarm incomplete, or made with other \
         settings than this run ({})?",
        settings(cfg)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_covers_the_range_evenly_and_never_repeats() {
        assert_eq!(spread(0, 12).count(), 0);
        assert_eq!(spread(5, 12).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        let picked: Vec<_> = spread(1000, 12).collect();
        assert!(picked.len() <= 12 && picked.len() >= 11, "{picked:?}");
        assert!(picked.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] == 84));
    }
}
