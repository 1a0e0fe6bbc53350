//! The validity checks of a replay's run phase: typed warnings about what its numbers
//! mean (the generator was the bottleneck, the schedule slipped, the in-flight cap bound,
//! records were dropped late, the start was skewed), shown in the report and turned into
//! exit status 1 by `--strict`.

use super::config::ReplayConfig;
use crate::exec::{ExecReport, Mode};
use crate::metrics::Aggregator;
use crate::plan::catalog::Catalog;
use crate::results::summary::Checks;
use crate::results::Warning;

/// Adds a warning of `kind`.
pub(super) fn warn(warnings: &mut Vec<Warning>, kind: &str, message: String) {
    warnings.push(Warning {
        kind: kind.into(),
        message,
    });
}

/// Warnings that record a deliberate change of what the numbers mean: `--strict` does not
/// fail a run for them.
pub(super) const CHOSEN: [&str; 3] = ["sizes_scaled", "max_run_time", "raw_layers"];

/// The warning of scaled sizes (`--size-scale`, `--max-object-size`), if they are.
pub(super) fn size_warning(cfg: &ReplayConfig, warnings: &mut Vec<Warning>) {
    let s = cfg.sizes;
    if s.is_identity() {
        return;
    }
    let mut how = Vec::new();
    if s.ppb != crate::plan::catalog::SizeScale::ONE.ppb {
        how.push(format!("scaled by {}", s.factor()));
    }
    if let Some(max) = s.max {
        how.push(format!("capped at {}", crate::units::ByteSize(max)));
    }
    warn(
        warnings,
        "sizes_scaled",
        format!(
            "blob and upload sizes are {} (--size-scale/--max-object-size): request counts, \
             timing and the object graph are the trace's, but MiB/s and latencies that grow \
             with size are not",
            how.join(" and ")
        ),
    );
}

/// The warning of uploads the trace gives no size for (an access log holds no request
/// sizes): they move bytes of creb-rs's choosing.
pub(super) fn unsized_uploads_warning(catalog: &Catalog, warnings: &mut Vec<Warning>) {
    let u = catalog.unsized_uploads;
    if u.count == 0 {
        return;
    }
    warn(
        warnings,
        "unsized_uploads",
        format!(
            "{} uploads of the trace have no size (marked creb.size_unknown, or no bytes \
             recorded): {} take the size of a read of their blob, the others {}; uploaded \
             bytes are not the original's (trace import --sizes-from URL learns them)",
            u.count,
            u.from_reads,
            crate::units::ByteSize(catalog.content_options().unknown_blob_size)
        ),
    );
}

/// The warning of blobs too small to be a tar of their compression: generated as plain
/// bytes, which registries store but clients cannot unpack.
pub(super) fn raw_layers_warning(catalog: &Catalog, warnings: &mut Vec<Warning>) {
    let raw = catalog.raw_layers();
    if raw == 0 {
        return;
    }
    let form = catalog.content_options().layer_form;
    warn(
        warnings,
        "raw_layers",
        format!(
            "{raw} blobs and uploads of the trace are smaller than the smallest {} layer ({} \
             bytes): they are plain bytes of their recorded size, not tars a client can unpack",
            form.compression,
            form.min_size()
        ),
    );
}

#[allow(clippy::too_many_lines)]
pub(super) fn validity_warnings(
    cfg: &ReplayConfig,
    checks: &Checks,
    exec: &ExecReport,
    aggregator: &Aggregator,
    warnings: &mut Vec<Warning>,
) {
    size_warning(cfg, warnings);
    if let Some(share) = checks.cpu_share {
        if share > 0.9 {
            warn(
                warnings,
                "generator_bottleneck",
                format!(
                    "creb-rs used {:.0}% of {}: the numbers may measure the generator; use more hosts (--shard) or fewer in flight",
                    share * 100.0,
                    cores_text(checks.cores)
                ),
            );
        }
    }
    // Operations waited for a slot more than a twentieth of the run.
    let cap_binding = checks.cap_binding_share > 0.05;
    // A 10 ms sleep that woke more than 10 ms late at p99: the runtime stalled.
    let stall_p99 = checks
        .canary_wake_ms
        .as_ref()
        .and_then(|w| w.p99)
        .filter(|p| *p > 10.0);
    if let Some(p99) = stall_p99 {
        warn(
            warnings,
            "generator_stalls",
            stall_message(p99, checks.cpu_share, checks.cores),
        );
    }
    if cfg.mode == Mode::Delay {
        let mut late = 0u64;
        let mut ops = 0u64;
        // One rule for the table, the warning and the report (docs/measurement.md): an
        // operation is late when it was sent more than 10 ms after it could start, its
        // intended instant or, for a manifest PUT, the end of its uploads if later.
        for op in aggregator.table().ops() {
            if let Some(s) = aggregator.table().op_total(op) {
                late += s.late_starts[1];
                if s.schedule_lag.is_some() {
                    ops += s.count;
                }
            }
        }
        if ops > 0 && late * 100 > ops {
            warn(
                warnings,
                "schedule_slipped",
                slip_message(late, ops, cap_binding, stall_p99.is_some()),
            );
        }
        if cap_binding {
            warn(
                warnings,
                "concurrency_cap_binding",
                format!(
                    "the in-flight cap of {} was binding {:.0}% of the time: operations waited for a slot",
                    cfg.concurrency,
                    checks.cap_binding_share * 100.0
                ),
            );
        }
        if exec.late > 0 {
            warn(
                warnings,
                "late_dropped",
                format!(
                    "{} trace records were dropped for starting later than --max-lateness",
                    exec.late
                ),
            );
        }
    }
    crate::exec::replicate::warnings(aggregator, warnings);
    let behind = aggregator.event(crate::metrics::Event::UnpackBehind);
    if behind > 0 {
        warn(
            warnings,
            "unpack_behind",
            format!(
                "{behind} layer reads ended while {} layers already waited to be unpacked \
                 (--unpack): they kept their in-flight slots until one was, so the unpack \
                 pool, not the registry, held the load back",
                cfg.unpack.as_ref().map_or(0, |u| u.workers.max(1))
                    * crate::exec::unpack::BACKLOG_PER_WORKER
            ),
        );
    }
    if let Some(skew) = checks.start_skew_ms {
        if skew.abs() > 50.0 {
            warn(
                warnings,
                "clock_skew",
                format!("started {skew:.1} ms away from --start-at; check the clock (chrony) of this host"),
            );
        }
    }
}

/// The `generator_stalls` warning: a late wake-up has two causes the canary cannot tell
/// apart — creb-rs's own work holding its runtime (an unoptimized build, more in flight than
/// its cores carry) or a machine that did not give it a core in time (other load, a shared
/// or throttled host) — so the message names both, with the CPU share that weighs between
/// them, and what it did to the timings.
fn stall_message(p99_ms: f64, cpu_share: Option<f64>, cores: usize) -> String {
    let used = cpu_share.map_or(String::new(), |share| {
        format!(
            " while creb-rs used {:.0}% of {}",
            share * 100.0,
            cores_text(cores)
        )
    });
    format!(
        "the runtime woke up to {p99_ms:.1} ms late (p99) for a 10 ms sleep{used}: its own work \
         held it or the machine did not give it a core in time, and a request it scheduled \
         could start as late"
    )
}

/// "1 core", "2 cores".
fn cores_text(cores: usize) -> String {
    format!("{cores} core{}", crate::units::plural(cores))
}

/// The `schedule_slipped` warning, its advice by what held the operations back: the
/// in-flight cap (`concurrency_cap_binding`), a runtime that woke late (`generator_stalls`),
/// or, when neither did, the pace asked for.
fn slip_message(late: u64, ops: u64, cap_binding: bool, stalled: bool) -> String {
    let mut causes = Vec::new();
    if cap_binding {
        causes.push("the in-flight cap held them (raise --concurrency)");
    }
    if stalled {
        causes.push(
            "creb-rs's runtime woke late (generator_stalls): an optimized build, more hosts \
             (--shard) or a machine with cores to spare keeps the timing",
        );
    }
    if causes.is_empty() {
        format!(
            "{late} of {ops} operations started more than 10 ms late; raise --concurrency or \
             lower --speed to replay the trace's timing"
        )
    } else {
        format!(
            "{late} of {ops} operations started more than 10 ms late: {}",
            causes.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{slip_message, stall_message};

    #[test]
    fn a_slipped_schedule_is_advised_by_what_held_it_back() {
        assert_eq!(
            slip_message(172, 624, false, false),
            "172 of 624 operations started more than 10 ms late; raise --concurrency or lower \
             --speed to replay the trace's timing"
        );
        let stalled = slip_message(172, 624, false, true);
        assert!(
            stalled.contains("runtime woke late (generator_stalls)"),
            "{stalled}"
        );
        assert!(!stalled.contains("raise --concurrency"), "{stalled}");
        let both = slip_message(10, 100, true, true);
        assert!(
            both.starts_with("10 of 100 operations started more than 10 ms late: the in-flight cap held them (raise --concurrency); creb-rs's runtime woke late"),
            "{both}"
        );
    }

    #[test]
    fn a_stall_names_both_causes_and_the_cpu_share_between_them() {
        let m = stall_message(37.54, Some(0.412), 2);
        assert_eq!(
            m,
            "the runtime woke up to 37.5 ms late (p99) for a 10 ms sleep while creb-rs used \
             41% of 2 cores: its own work held it or the machine did not give it a core in \
             time, and a request it scheduled could start as late"
        );
        assert!(stall_message(20.0, Some(0.64), 1).contains("used 64% of 1 core: "));
        let m = stall_message(12.0, None, 4);
        assert!(m.starts_with("the runtime woke up to 12.0 ms late (p99) for a 10 ms sleep: "));
        assert!(!m.contains("unreliable"), "{m}");
    }
}
